// Small statistics the in-process benchmarks (rill-serve-bench, rill-session-bench) report.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace rill::cli {

/// Seconds from a to b.
template <typename TimePoint>
double secs(TimePoint a, TimePoint b) {
  return std::chrono::duration<double>(b - a).count();
}

/// The p-th percentile (0..100) by linear interpolation between closest ranks; 0 when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p / 100.0 * (v.size() - 1);
  const size_t lo = static_cast<size_t>(idx), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - lo);
}

inline double mean(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m += x;
  return v.empty() ? 0 : m / v.size();
}

}  // namespace rill::cli
