// The server's side of a run: /metrics scraped before and after, the differences that matter
// (requests by finish reason, tokens, mean TTFT / TPOT / ITL / E2E from histogram sums and
// counts) and the checks that the server counted what the client saw.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "clients/rill_loadtest/prom_text.h"
#include "clients/rill_loadtest/summary.h"

namespace rill::loadtest {

/// Scrapes `url` (http://HOST:PORT/metrics); nullopt and `error` set when it fails.
std::optional<PromSnapshot> scrape_metrics(const std::string& url, std::string& error);

/// Differences between two scrapes.
struct ServerDelta {
  std::map<std::string, double> requests_by_reason;  // rill_requests_total{finished_reason}
  double requests = 0;
  double generation_tokens = 0;  // rill_generation_tokens_total
  double prompt_tokens = 0;      // rill_prompt_tokens_total
  double rejected = 0;           // rill_requests_rejected_total
  double evicted_tokens = 0;     // rill_kv_evicted_tokens_total (StreamingLLM windows)
  // Prefix cache: prompt tokens looked up at admission and found cached (recomputations of
  // preempted requests included), and cached blocks evicted.
  double prefix_cache_queries = 0, prefix_cache_hits = 0, prefix_cache_evictions = 0;
  // Means from the histograms' _sum / _count differences (nullopt without observations).
  std::optional<double> ttft_mean_s, tpot_mean_s, itl_mean_s, e2e_mean_s;
  // Inter-token latency quantiles from the histogram's buckets (histogram_quantile): the engine's
  // own view of every gap, beside the client's.
  std::optional<double> itl_p50_s, itl_p99_s;
  double running_before = 0, running_after = 0;  // rill_requests_running
};

ServerDelta server_delta(const PromSnapshot& before, const PromSnapshot& after);

/// One comparison of the client's figures with the server's.
struct ConsistencyCheck {
  std::string name;
  bool passed = false;
  std::string detail;  // "client 20, server 20"
};

/// Compares the client's counts with the server's: finished requests by reason (completed ones
/// by their finish reason, client cancels as "cancelled"), generated tokens (equal without
/// cancels; with them the server may have generated tokens the client never read, so the
/// server's count must be at least the client's), and the running gauge back at its baseline.
/// With `background_streams` (--streams) the server also generated the streams' tokens: its
/// count must be at least the client's.
std::vector<ConsistencyCheck> check_consistency(const RunSummary& client, const ServerDelta& server,
                                                bool background_streams = false);

}  // namespace rill::loadtest
