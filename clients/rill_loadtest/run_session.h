// One invocation of rill-loadtest from options to report: set-up (transport, tokenizer,
// workload), warm-up, the run or the sweep, and the server's /metrics around each phase.
#pragma once

#include "clients/rill_loadtest/progress_bar.h"
#include "clients/rill_loadtest/run_report.h"

namespace rill::loadtest {

/// Set-up failed: the server could not be reached or a prompts file could not be read.
class SetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Runs everything `options` asks for; throws SetupError when it cannot start.
RunReport run_session(const LoadTestOptions& options, ProgressBar& progress);

}  // namespace rill::loadtest
