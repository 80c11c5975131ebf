#include "clients/rill_loadtest/length_dist.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace rill::loadtest {

int LengthDist::sample(std::mt19937_64& rng) const {
  const int hi_bound = std::max(1, 2 * mean);
  switch (kind) {
    case Kind::kFixed:
      return mean;
    case Kind::kUniform: {
      const int lo = std::max(1, static_cast<int>(std::floor(mean * (1 - ratio))));
      const int hi = std::max(lo, static_cast<int>(std::ceil(mean * (1 + ratio))));
      return std::uniform_int_distribution<int>(lo, hi)(rng);
    }
    case Kind::kNormal: {
      const double x = std::normal_distribution<double>(mean, ratio * mean)(rng);
      return std::clamp(static_cast<int>(std::lround(x)), 1, hi_bound);
    }
  }
  return mean;
}

LengthDist parse_length_dist(int mean, const std::string& spec) {
  if (mean < 1) throw std::invalid_argument("lengths must be >= 1, got " + std::to_string(mean));
  LengthDist d;
  d.mean = mean;
  if (spec == "fixed") return d;
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  if (colon == std::string::npos || (name != "uniform" && name != "normal"))
    throw std::invalid_argument("length distribution '" + spec +
                                "': expected fixed, uniform:R or normal:R");
  size_t used = 0;
  const std::string value = spec.substr(colon + 1);
  try {
    d.ratio = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || !(d.ratio >= 0) || (name == "uniform" && d.ratio > 1))
    throw std::invalid_argument("length distribution '" + spec + "': R must be a number in " +
                                (name == "uniform" ? "[0, 1]" : "[0, inf)"));
  d.kind = name == "uniform" ? LengthDist::Kind::kUniform : LengthDist::Kind::kNormal;
  return d;
}

}  // namespace rill::loadtest
