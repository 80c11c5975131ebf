// Open-loop arrival times: Poisson, gamma (vLLM's --burstiness) or constant gaps at a target
// rate, optionally ramped up linearly from zero.
#pragma once

#include <random>

namespace rill::loadtest {

struct ArrivalConfig {
  double rate = 1;        // requests per second once ramped up; +inf: every arrival at time 0
  double burstiness = 1;  // gamma shape: 1 is Poisson, < 1 burstier, > 1 more regular
  bool constant = false;  // fixed gaps of 1 / rate instead of random ones
  double ramp_up_s = 0;   // the rate grows linearly from 0 to `rate` over this many seconds
};

/// Yields arrival times (seconds from the start), increasing. Gaps are drawn in "operational
/// time", where arrivals come at rate 1 (gamma with shape `burstiness` and mean 1, or exactly
/// 1), then mapped to real time through the inverse of the cumulative offered rate
/// L(t) = rate * t^2 / (2 * ramp) for t < ramp, rate * (t - ramp / 2) after. Without a ramp this
/// is vLLM's gamma(shape = burstiness, mean = 1 / rate); with one, the expected number of
/// arrivals up to t is exactly L(t).
class ArrivalSchedule {
 public:
  ArrivalSchedule(const ArrivalConfig& config, unsigned long long seed);

  /// The next arrival's time in seconds.
  double next();

  /// Real time of operational time `s` (the inverse of L); public for tests.
  double real_time(double s) const;

 private:
  ArrivalConfig config_;
  std::mt19937_64 rng_;
  std::gamma_distribution<double> gap_;
  double operational_ = 0;
};

}  // namespace rill::loadtest
