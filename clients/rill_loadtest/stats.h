// Summary statistics of latency samples, as `vllm bench serve` reports them (numpy's mean,
// median, population standard deviation and linearly interpolated percentiles).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace rill::loadtest {

/// Statistics of one sample set; every field is 0 when it is empty.
struct Summary {
  size_t count = 0;
  double mean = 0, std = 0, min = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, max = 0;
};

/// The q-th percentile (q in [0, 100]) of sorted `values` with linear interpolation between
/// closest ranks (numpy's default); 0 for an empty set.
double percentile(const std::vector<double>& sorted, double q);

/// Summarizes `values` (any order).
Summary summarize(std::vector<double> values);

/// Service-level objectives for goodput; an unset one is not checked. Times in seconds.
struct Slo {
  std::optional<double> ttft_s, tpot_s, e2e_s;
  bool empty() const { return !ttft_s && !tpot_s && !e2e_s; }
};

/// Parses "ttft:MS,tpot:MS,e2e:MS" (any subset, any order, milliseconds > 0); throws
/// std::invalid_argument naming the bad part.
Slo parse_slo(const std::string& spec);

/// Latency targets sent with each request (--targets), in whole milliseconds.
struct Targets {
  std::optional<int> ttft_ms, tpot_ms;
};

/// Parses "ttft:MS,tpot:MS" (either or both; integers in [0, 3600000], 0: none); throws
/// std::invalid_argument naming the bad part.
Targets parse_targets(const std::string& spec);

/// Whether a request with these times meets every objective set in `slo` (tpot is unset for a
/// one-token answer: such a request meets a TPOT objective).
bool meets_slo(const Slo& slo, double ttft_s, std::optional<double> tpot_s, double e2e_s);

}  // namespace rill::loadtest
