// The progress line on stderr while a phase runs.
#pragma once

#include <string>

#include "clients/rill_loadtest/load_runner.h"

namespace rill::loadtest {

/// Redraws one line ("\r...") on stderr; does nothing when disabled.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}

  /// Shows `label` and the phase's counters (a bar when the phase has a request target).
  void update(const std::string& label, const PhaseProgress& p);

  /// Ends the line, so later output starts on a fresh one.
  void finish();

 private:
  bool enabled_;
  bool drawn_ = false;
};

}  // namespace rill::loadtest
