// The figures of one run (or one sweep point) from its request records, with the definitions of
// `vllm bench serve`: latencies over successful requests, throughputs over the run's duration.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clients/rill_loadtest/request.h"
#include "clients/rill_loadtest/stats.h"

namespace rill::loadtest {

/// TTFT of the requests of one turn of their conversations (multi-turn runs).
struct TurnSummary {
  int turn = 0;  // 0-based
  Summary ttft;  // seconds, completed requests
  int64_t prompt_tokens = 0, cached_tokens = 0;
};

struct RunSummary {
  int64_t requests = 0;   // every request of the run
  int64_t completed = 0;  // succeeded (not failed, not cancelled)
  int64_t failed = 0;
  int64_t cancelled = 0;                          // by the client (--cancel-fraction)
  std::map<std::string, int64_t> errors;          // by code ("HTTP 503", "grpc UNAVAILABLE")
  std::map<std::string, int64_t> finish_reasons;  // of completed requests
  double duration_s = 0;                          // from the phase's start to its last completion
  int64_t input_tokens = 0, output_tokens = 0;    // of completed requests (server usage)
  int64_t cached_tokens = 0;                      // of their input tokens, from the prefix cache
  double prefix_cache_hit_rate = 0;               // cached / input tokens (0 without input)
  int64_t output_tokens_all = 0;                  // of every request, cancelled ones included
  double request_throughput = 0;                  // completed / duration
  double output_throughput = 0;                   // output tokens / duration
  double total_token_throughput = 0;              // (input + output tokens) / duration
  double offered_rate = 0;        // open loop: requests sent per second over the sending window
  std::optional<double> goodput;  // completed requests meeting every SLO / duration
  int64_t good_requests = 0;
  Summary ttft, tpot, itl, e2e;  // seconds
  int64_t max_in_flight = 0;
  std::vector<TurnSummary> turns;  // one per turn when conversations have several, else empty
};

/// Summarizes `records` of a phase that ran from `start_s` to `end_s` (same clock).
RunSummary summarize_run(const std::vector<RequestRecord>& records, double start_s, double end_s,
                         const Slo& slo);

}  // namespace rill::loadtest
