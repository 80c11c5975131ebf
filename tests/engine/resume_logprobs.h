// Checks any runner must pass for the scheduler's two per-sequence features: resuming a
// preempted sequence (SequenceSpec::generated) and log-probabilities (StepInput::logprobs).
#pragma once

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "engine/runner/runner.h"

namespace rill::testing {

/// `n` tokens sampled by sequence `id`: `pieces` fed one per step, sampling after the last, then
/// decode steps. `generated` goes to SequenceSpec::generated.
inline std::vector<int32_t> sample_tokens(ModelRunner& r, SeqId id,
                                          const std::vector<std::vector<int32_t>>& pieces,
                                          const SamplingParams& sp, int n,
                                          const std::vector<int32_t>& generated = {}) {
  r.add_sequence({id, CachePolicy::full(), sp, generated});
  std::vector<int32_t> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool last = i + 1 == pieces.size();
    StepInput in{id, pieces[i], LogitsMode::kNone, last};
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

/// How a resumed sequence recomputes its prompt and generated tokens.
enum class Refeed {
  kWhole,   // one prefill chunk
  kChunks,  // chunks of 5 tokens
  kReplay,  // the prompt, then each generated token in a step of its own: the uninterrupted
            // run's exact chunking, so a half-precision runner computes the same logits bits
};

/// A sequence removed after k of `n` tokens and re-added with them as `generated` (its prompt
/// and those tokens fed again as `refeed` says) samples the uninterrupted run's tokens.
inline void expect_resume_equals_uninterrupted(ModelRunner& r, const std::vector<int32_t>& prompt,
                                               const SamplingParams& sp, int n,
                                               std::initializer_list<Refeed> refeeds) {
  const std::vector<int32_t> full = sample_tokens(r, 1, {prompt}, sp, n);
  ASSERT_EQ(static_cast<int>(full.size()), n);
  for (int k : {1, 3, n / 2}) {
    const std::vector<int32_t> generated(full.begin(), full.begin() + k);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), generated.begin(), generated.end());
    for (Refeed refeed : refeeds) {
      std::vector<std::vector<int32_t>> pieces;
      if (refeed == Refeed::kWhole) pieces = {all};
      if (refeed == Refeed::kChunks)
        for (size_t pos = 0; pos < all.size(); pos += 5)
          pieces.emplace_back(all.begin() + pos, all.begin() + std::min(all.size(), pos + 5));
      if (refeed == Refeed::kReplay) {
        pieces = {prompt};
        for (int32_t t : generated) pieces.push_back({t});
      }
      const auto rest = sample_tokens(r, 2, pieces, sp, n - k, generated);
      EXPECT_EQ(rest, std::vector<int32_t>(full.begin() + k, full.end()))
          << "resumed after " << k << " tokens, refeed " << static_cast<int>(refeed);
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
inline void expect_logprobs_near(const SampleLogprobs& got, const SampleLogprobs& want, size_t n,
                                 double tol) {
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
