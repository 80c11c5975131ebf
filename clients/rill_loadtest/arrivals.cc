#include "clients/rill_loadtest/arrivals.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace rill::loadtest {

ArrivalSchedule::ArrivalSchedule(const ArrivalConfig& config, unsigned long long seed)
    : config_(config), rng_(seed), gap_(config.burstiness, 1.0 / config.burstiness) {
  if (!(config.rate > 0)) throw std::invalid_argument("the request rate must be > 0");
  if (!(config.burstiness > 0)) throw std::invalid_argument("burstiness must be > 0");
  if (!(config.ramp_up_s >= 0)) throw std::invalid_argument("the ramp-up must be >= 0");
}

double ArrivalSchedule::next() {
  if (std::isinf(config_.rate)) return 0;
  operational_ += config_.constant ? 1.0 : gap_(rng_);
  return real_time(operational_);
}

double ArrivalSchedule::real_time(double s) const {
  const double rate = config_.rate, ramp = config_.ramp_up_s;
  if (std::isinf(rate)) return 0;
  const double during_ramp = rate * ramp / 2;  // L(ramp)
  if (ramp > 0 && s < during_ramp) return std::sqrt(2 * ramp * s / rate);
  return ramp + (s - during_ramp) / rate;
}

}  // namespace rill::loadtest
