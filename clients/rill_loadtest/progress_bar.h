// The progress line on stderr while a phase runs.
#pragma once

#include <string>

#include "clients/rill_loadtest/load_runner.h"

namespace rill::loadtest {

/// Redraws one line ("\r...") on a terminal; elsewhere (--progress into a log) prints a line
/// a second instead. Does nothing when disabled.
class ProgressBar {
 public:
  ProgressBar(bool enabled, bool terminal) : enabled_(enabled), terminal_(terminal) {}

  /// Shows `label` and the phase's counters (a bar when the phase has a request target).
  void update(const std::string& label, const PhaseProgress& p);

  /// Ends the line, so later output starts on a fresh one.
  void finish();

 private:
  bool enabled_, terminal_;
  bool drawn_ = false;
  double last_line_s_ = -1;  // not a terminal: elapsed time of the last line printed
};

}  // namespace rill::loadtest
