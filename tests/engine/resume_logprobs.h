// Checks any runner must pass for the scheduler's two per-sequence features: resuming a
// preempted sequence (SequenceSpec::generated) and log-probabilities (StepInput::logprobs).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "engine/runner/runner.h"

namespace rill::testing {

/// `n` tokens sampled by sequence `id`: `feed` prefilled in chunks of `chunk` (0: one chunk),
/// sampling after the last, then decode steps. `generated` goes to SequenceSpec::generated.
inline std::vector<int32_t> sample_tokens(ModelRunner& r, SeqId id, const std::vector<int32_t>& feed,
                                          const SamplingParams& sp, int n,
                                          const std::vector<int32_t>& generated = {}, int chunk = 0) {
  r.add_sequence({id, CachePolicy::full(), sp, generated});
  const size_t step = chunk > 0 ? static_cast<size_t>(chunk) : feed.size();
  std::vector<int32_t> out;
  for (size_t pos = 0; pos < feed.size(); pos += step) {
    const size_t len = std::min(step, feed.size() - pos);
    const bool last = pos + len == feed.size();
    StepInput in{id, std::span<const int32_t>(feed.data() + pos, len), LogitsMode::kNone, last};
    const int32_t t = r.step(std::span<const StepInput>(&in, 1)).sampled[0];
    if (last) out.push_back(t);
  }
  while (static_cast<int>(out.size()) < n) {
    const int32_t tok = out.back();
    StepInput in{id, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, true};
    out.push_back(r.step(std::span<const StepInput>(&in, 1)).sampled[0]);
  }
  r.remove_sequence(id);
  return out;
}

/// A sequence removed after k of `n` tokens and re-added with them as `generated` (its prompt
/// and those tokens prefilled again, whole or in chunks) samples the uninterrupted run's tokens.
inline void expect_resume_equals_uninterrupted(ModelRunner& r, const std::vector<int32_t>& prompt,
                                               const SamplingParams& sp, int n) {
  const std::vector<int32_t> full = sample_tokens(r, 1, prompt, sp, n);
  ASSERT_EQ(static_cast<int>(full.size()), n);
  for (int k : {1, 3, n / 2}) {
    for (int chunk : {0, 5}) {
      const std::vector<int32_t> generated(full.begin(), full.begin() + k);
      std::vector<int32_t> feed = prompt;
      feed.insert(feed.end(), generated.begin(), generated.end());
      const auto rest = sample_tokens(r, 2, feed, sp, n - k, generated, chunk);
      EXPECT_EQ(rest, std::vector<int32_t>(full.begin() + k, full.end()))
          << "resumed after " << k << " tokens, prefill chunk " << chunk;
    }
  }
}

/// fp64 log-softmax of a raw logits row: the sampled token's logprob and the top n (most likely
/// first, ties to the lower id).
inline SampleLogprobs reference_logprobs(std::span<const float> row, int32_t token, int n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (float l : row) mx = std::max(mx, static_cast<double>(l));
  double sum = 0;
  for (float l : row) sum += std::exp(l - mx);
  const double lse = mx + std::log(sum);
  std::vector<int32_t> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  SampleLogprobs out;
  out.sampled = static_cast<float>(row[token] - lse);
  for (int i = 0; i < std::min<int>(n, static_cast<int>(row.size())); ++i)
    out.top.push_back({ids[i], static_cast<float>(row[ids[i]] - lse)});
  return out;
}

/// Log-probabilities within `tol` of `want`, whose top list may hold one more entry than `got`
/// (it tells whether got's last entry is a near tie). Ids equal except where the reference's
/// neighbouring logprobs lie within `tol` (a near tie that rounding may order either way).
inline void expect_logprobs_near(const SampleLogprobs& got, const SampleLogprobs& want, size_t n, double tol) {
  EXPECT_NEAR(got.sampled, want.sampled, tol);
  ASSERT_EQ(got.top.size(), n);
  ASSERT_GE(want.top.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(got.top[i].logprob, want.top[i].logprob, tol) << "top " << i;
    const bool near_tie =
        (i > 0 && want.top[i - 1].logprob - want.top[i].logprob <= tol) ||
        (i + 1 < want.top.size() && want.top[i].logprob - want.top[i + 1].logprob <= tol);
    if (!near_tie) {
      EXPECT_EQ(got.top[i].token, want.top[i].token) << "top " << i;
    }
  }
}

}  // namespace rill::testing
