// Teacher-forced agreement of a GPU runner's greedy tokens with the CPU reference under token
// masks. bf16 / fp16 logits differ from the fp32 reference by rounding, so two greedy runs may
// part at a near tie and never meet again; feeding the GPU's tokens to the CPU runner instead
// compares every step on the same prefix.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "engine/cpu/cpu_runner.h"

namespace rill::testing {

/// Feeds `prompt`, then `tokens` one step each, to a fresh greedy sequence on `cpu`, each step's
/// sample masked by mask_before(i) (called in order, i = 0 .. tokens.size() - 1; empty:
/// unconstrained). Every token must be allowed by its mask, and be the CPU's masked argmax
/// unless the CPU's masked top-2 margin is below `near_tie` (where rounding may pick either).
/// Returns how many tokens were held to the argmax.
inline int expect_greedy_agrees(CpuRunner& cpu, std::span<const int32_t> prompt,
                                std::span<const int32_t> tokens,
                                const std::function<std::span<const uint32_t>(size_t)>& mask_before,
                                double near_tie) {
  constexpr SeqId kId = 1'000'000;
  cpu.add_sequence({kId, CachePolicy::full(), {.temperature = 0.0f}});
  const int V = cpu.config().vocab_size;
  auto allowed = [](std::span<const uint32_t> m, int32_t t) {
    return m.empty() || ((m[static_cast<size_t>(t) >> 5] >> (t & 31)) & 1u) != 0;
  };
  int strict = 0;
  std::span<const int32_t> feed = prompt;
  for (size_t i = 0; i < tokens.size(); ++i) {
    StepInput in{kId, feed, LogitsMode::kLast, true};
    in.mask = mask_before(i);
    const StepOutput o = cpu.step(std::span<const StepInput>(&in, 1));
    EXPECT_TRUE(allowed(in.mask, tokens[i]))
        << "token " << i << " (" << tokens[i] << ") outside its mask";
    float best = -std::numeric_limits<float>::infinity(), second = best;
    for (int32_t t = 0; t < V; ++t) {
      if (!allowed(in.mask, t)) continue;
      const float l = o.logits[static_cast<size_t>(t)];
      if (l > best) {
        second = best;
        best = l;
      } else if (l > second) {
        second = l;
      }
    }
    if (best - second >= near_tie) {
      EXPECT_EQ(tokens[i], o.sampled[0]) << "token " << i << " (margin " << best - second << ")";
      ++strict;
    }
    feed = tokens.subspan(i, 1);
  }
  cpu.remove_sequence(kId);
  return strict;
}

}  // namespace rill::testing
