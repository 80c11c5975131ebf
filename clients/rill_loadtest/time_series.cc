#include "clients/rill_loadtest/time_series.h"

#include <algorithm>
#include <cmath>

namespace rill::loadtest {

std::vector<TimeBucket> time_series(const std::vector<RequestRecord>& records, double start_s,
                                    double end_s, double width_s) {
  const double span = std::max(end_s - start_s, 1e-6);
  if (width_s <= 0) width_s = span >= 10 ? 1.0 : span / 10;
  const size_t n = static_cast<size_t>(std::ceil(span / width_s));
  std::vector<TimeBucket> out(std::max<size_t>(n, 1));
  const auto index = [&](double t) {
    const double i = std::floor((t - start_s) / width_s);
    return static_cast<size_t>(std::clamp(i, 0.0, static_cast<double>(out.size() - 1)));
  };
  for (size_t i = 0; i < out.size(); ++i) out[i].t_s = static_cast<double>(i) * width_s;
  for (const RequestRecord& r : records) {
    for (size_t c = 0; c < r.chunk_times_s.size(); ++c)
      out[index(r.chunk_times_s[c])].output_tokens_per_s += r.chunk_tokens[c];
    if (!r.chunk_times_s.empty()) {
      const size_t i = index(r.chunk_times_s.front());
      out[i].mean_ttft_s += r.chunk_times_s.front() - r.start_s;
      ++out[i].ttft_count;
    }
    if (r.ok()) {
      const size_t i = index(r.end_s);
      out[i].completed_per_s += 1;
      out[i].mean_e2e_s += r.end_s - r.start_s;
      ++out[i].e2e_count;
    }
    for (size_t i = index(r.start_s); i < out.size(); ++i) {
      const double bucket_end = start_s + (static_cast<double>(i) + 1) * width_s;
      if (r.start_s < bucket_end && r.end_s >= bucket_end) ++out[i].in_flight;
      if (r.end_s < bucket_end) break;
    }
  }
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].completed_per_s /= width_s;
    out[i].output_tokens_per_s /= width_s;
    if (out[i].ttft_count) out[i].mean_ttft_s /= static_cast<double>(out[i].ttft_count);
    if (out[i].e2e_count) out[i].mean_e2e_s /= static_cast<double>(out[i].e2e_count);
  }
  return out;
}

}  // namespace rill::loadtest
