#include <cmath>
#include <cstdio>

#include "clients/rill_loadtest/run_report.h"

namespace rill::loadtest {

std::string saturation_reason(const PhaseReport& first, const PhaseReport* previous,
                              const PhaseReport& current, double throughput_ratio,
                              double ttft_factor) {
  char buf[200];
  const RunSummary& s = current.summary;
  if (current.mode == "open" && s.offered_rate > 0 &&
      s.request_throughput < throughput_ratio * s.offered_rate) {
    std::snprintf(buf, sizeof buf, "achieved %.3g req/s < %.2f x offered %.3g req/s",
                  s.request_throughput, throughput_ratio, s.offered_rate);
    return buf;
  }
  if (current.mode == "closed" && previous &&
      s.request_throughput < (2 - throughput_ratio) * previous->summary.request_throughput) {
    std::snprintf(buf, sizeof buf, "throughput %.3g req/s < %.2f x the previous point's %.3g",
                  s.request_throughput, 2 - throughput_ratio, previous->summary.request_throughput);
    return buf;
  }
  if (&first != &current && first.summary.ttft.count > 0 &&
      s.ttft.median > ttft_factor * first.summary.ttft.median) {
    std::snprintf(buf, sizeof buf, "median TTFT %.3g s > %.3g x the first point's %.3g s",
                  s.ttft.median, ttft_factor, first.summary.ttft.median);
    return buf;
  }
  return "";
}

}  // namespace rill::loadtest
