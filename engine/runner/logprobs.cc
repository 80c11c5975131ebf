#include "engine/runner/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace rill {

SampleLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int top_n) {
  const size_t V = logits.size();
  float mx = -std::numeric_limits<float>::infinity();
  for (float l : logits) mx = std::max(mx, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - mx);
  const double lse = mx + std::log(sum);
  auto logprob = [&](size_t id) {
    return static_cast<float>(static_cast<double>(logits[id]) - lse);
  };

  SampleLogprobs out;
  out.sampled = token >= 0 && static_cast<size_t>(token) < V ? logprob(token) : 0.0f;
  const size_t n = std::min(static_cast<size_t>(std::max(top_n, 0)), V);
  if (n == 0) return out;
  std::vector<int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

}  // namespace rill
