#include "engine/runner/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "rill/kernels/philox.h"

namespace rill {

SamplerState SamplerState::resumed(std::span<const int32_t> generated) {
  SamplerState s;
  s.step = s.first_step = generated.size();
  for (int32_t t : generated) ++s.output_counts[t];
  return s;
}

void apply_penalties(std::span<float> logits, const SamplingParams& p, const SamplerState& s) {
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](size_t id) {
      float& l = logits[id];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    };
    for (size_t id = 0; id < logits.size(); ++id) {
      const bool in_prompt = id < s.prompt_seen.size() && s.prompt_seen[id];
      if (in_prompt || s.output_counts.count(static_cast<int32_t>(id))) penalise(id);
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (const auto& [id, count] : s.output_counts) {
      if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
      logits[id] -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
    }
  }
}

namespace {

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Kept-set threshold: the largest of the top-k, top-p (within top-k) and min-p thresholds.
float keep_threshold(const std::vector<float>& probs, const SamplingParams& p) {
  const size_t n = probs.size();
  const float p_max = *std::max_element(probs.begin(), probs.end());
  float tau = p.min_p > 0 ? p.min_p * p_max : 0.0f;
  const size_t k =
      (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) ? static_cast<size_t>(p.top_k) : n;
  if (k == n && p.top_p >= 1.0f) return tau;
  std::vector<float> sorted(probs);
  std::partial_sort(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<float>());
  const float tau_k = sorted[k - 1];
  float tau_p = tau_k;
  if (p.top_p < 1.0f) {
    const double mass_k = std::accumulate(sorted.begin(), sorted.begin() + k, 0.0);
    double cum = 0;
    for (size_t i = 0; i < k; ++i) {
      cum += sorted[i];
      if (cum >= p.top_p * mass_k) {
        tau_p = sorted[i];
        break;
      }
    }
  }
  return std::max({tau, tau_k, tau_p});
}

}  // namespace

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  for (size_t id = 0; id < logits.size(); ++id) {
    const size_t w = id >> 5;
    if (w >= mask.size() || !((mask[w] >> (id & 31)) & 1u))
      logits[id] = -std::numeric_limits<float>::infinity();
  }
}

int32_t sample_token(std::span<float> logits, const SamplingParams& p, SamplerState& s,
                     std::span<const uint32_t> mask) {
  apply_penalties(logits, p, s);
  const bool masked = !mask.empty();
  if (masked) apply_token_mask(logits, mask);
  int32_t token;
  const bool nothing_allowed = masked && *std::max_element(logits.begin(), logits.end()) ==
                                             -std::numeric_limits<float>::infinity();
  if (p.greedy() || nothing_allowed) {
    token = argmax(logits);
  } else {
    const float mx = *std::max_element(logits.begin(), logits.end());
    std::vector<float> probs(logits.size());
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      probs[i] = std::exp((logits[i] - mx) / p.temperature);
      sum += probs[i];
    }
    for (float& q : probs) q = static_cast<float>(q / sum);
    // Masked rows never keep a zero-probability (disallowed) token, even where the kept-set
    // threshold is 0; the kernel does the same.
    const float tau = masked ? std::max(keep_threshold(probs, p), std::numeric_limits<float>::min())
                             : keep_threshold(probs, p);
    double kept = 0;
    for (float q : probs)
      if (q >= tau) kept += q;
    const double target = static_cast<double>(philox_uniform(p.seed, s.step)) * kept;
    double cum = 0;
    token = -1;
    for (size_t i = 0; i < probs.size(); ++i) {
      if (probs[i] < tau) continue;
      token = static_cast<int32_t>(i);  // the last kept token if rounding leaves target unreached
      cum += probs[i];
      if (cum > target) break;
    }
  }
  ++s.step;
  ++s.output_counts[token];
  return token;
}

}  // namespace rill
