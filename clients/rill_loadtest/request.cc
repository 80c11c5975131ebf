#include "clients/rill_loadtest/request.h"

#include <numeric>

namespace rill::loadtest {

int64_t RequestRecord::tokens_received() const {
  return std::accumulate(chunk_tokens.begin(), chunk_tokens.end(), int64_t{0});
}

RequestLatency latency_of(const RequestRecord& r) {
  RequestLatency l;
  l.e2e_s = r.end_s - r.start_s;
  if (r.chunk_times_s.empty()) return l;
  l.ttft_s = r.chunk_times_s.front() - r.start_s;
  if (r.output_tokens > 1)
    l.tpot_s = (l.e2e_s - l.ttft_s) / static_cast<double>(r.output_tokens - 1);
  for (size_t i = 1; i < r.chunk_times_s.size(); ++i)
    l.itl_s.push_back(r.chunk_times_s[i] - r.chunk_times_s[i - 1]);
  return l;
}

}  // namespace rill::loadtest
