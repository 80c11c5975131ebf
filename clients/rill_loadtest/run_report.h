// Everything a run produced, as the reports (console, JSON, CSV, HTML) read it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "clients/rill_loadtest/background_streams.h"
#include "clients/rill_loadtest/load_runner.h"
#include "clients/rill_loadtest/loadtest_options.h"
#include "clients/rill_loadtest/server_metrics.h"
#include "clients/rill_loadtest/summary.h"

namespace rill::loadtest {

/// One measured phase: the whole run, or one point of a sweep.
struct PhaseReport {
  std::string mode;  // "open" or "closed"
  double load = 0;   // the offered rate (open) or the concurrency (closed)
  PhaseResult result;
  RunSummary summary;
  std::optional<ServerDelta> server;  // when /metrics could be scraped
  std::vector<ConsistencyCheck> checks;
  bool saturated = false;
  std::string saturation_reason;  // why this point counts as saturated
  std::optional<StreamsDuring> streams;  // with --streams: the long-lived streams meanwhile
};

struct RunReport {
  const LoadTestOptions* options = nullptr;
  std::vector<PhaseReport> phases;  // one, or the sweep's points in order
  int64_t warmup_requests = 0;      // done before the first phase, excluded from every figure
  int64_t warmup_errors = 0;
  std::string metrics_error;  // why /metrics was not scraped ("" when it was)
  std::optional<StreamsBaseline> streams;  // with --streams: their steady pace before the load
  bool sweep() const { return !options->sweep.empty(); }
};

/// Whether sweep point `current` is saturated, compared with the sweep's first point and the
/// point before it. Open loop: achieved request throughput below `throughput_ratio` times the
/// offered rate. Closed loop: request throughput below (1 + (1 - throughput_ratio)) times the
/// previous point's, i.e. more concurrency no longer buys throughput. Both: a median TTFT above
/// `ttft_factor` times the first point's. Returns the reason, or "" when not saturated.
std::string saturation_reason(const PhaseReport& first, const PhaseReport* previous,
                              const PhaseReport& current, double throughput_ratio,
                              double ttft_factor);

}  // namespace rill::loadtest
