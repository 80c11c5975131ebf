// A run's course over time, bucketed from its request records.
#pragma once

#include <cstdint>
#include <vector>

#include "clients/rill_loadtest/request.h"

namespace rill::loadtest {

/// One time bucket [t_s, t_s + width).
struct TimeBucket {
  double t_s = 0;                  // bucket start, seconds since the phase started
  double completed_per_s = 0;      // requests that ended (successfully) in the bucket, per second
  double output_tokens_per_s = 0;  // tokens received in the bucket, per second
  double mean_ttft_s = 0;          // of requests whose first token arrived in the bucket
  double mean_e2e_s = 0;           // of requests that ended in the bucket
  int64_t ttft_count = 0;          // requests behind mean_ttft_s (0: no mean)
  int64_t e2e_count = 0;           // requests behind mean_e2e_s (0: no mean)
  int64_t in_flight = 0;           // requests in flight at the bucket's end
};

/// Buckets of `width_s` (> 0) over [start_s, end_s]; width 0 picks one: 1 s for runs of 10 s or
/// more, else a tenth of the run.
std::vector<TimeBucket> time_series(const std::vector<RequestRecord>& records, double start_s,
                                    double end_s, double width_s = 0);

}  // namespace rill::loadtest
