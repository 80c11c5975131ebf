// Decoding with steps in flight (ModelRunner::launch / finish and kLastSampled) against plain
// step() calls, for any runner: the two must give the same tokens.
#pragma once

#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/error.h"
#include "engine/runner/runner.h"

namespace rill::testing {

/// Tokens of `prompts.size()` sequences (ids 0, 1, ...; greedy unless `sampling` says otherwise):
/// one prefill step each, then `steps` decode steps of all of them together. Sequence 1 (when
/// there are more than two) is removed after steps / 2 decode steps, with a step holding it in
/// flight when `pipelined`. Pipelined: each decode step is launched with kLastSampled tokens
/// before the one before it is finished, so two steps are in flight at a time.
inline std::vector<std::vector<int32_t>> decode_tokens(
    ModelRunner& r, const std::vector<std::vector<int32_t>>& prompts, const CachePolicy& policy,
    int steps, bool pipelined, const SamplingParams& sampling = {.temperature = 0.0f}) {
  const int n = static_cast<int>(prompts.size());
  std::vector<std::vector<int32_t>> out(n);
  std::vector<bool> live(n, true);
  for (int k = 0; k < n; ++k) {
    r.add_sequence({SeqId(k), policy, sampling});
    StepInput in{SeqId(k), prompts[k], LogitsMode::kNone, true};
    out[k].push_back(r.step(std::span<const StepInput>(&in, 1)).sampled[0]);
  }
  // One decode step's inputs; `last` (pipelined) marks each token as the previous step's sample.
  std::vector<int32_t> next(n);
  auto inputs = [&](bool last) {
    std::vector<StepInput> in;
    std::vector<int> who;
    for (int k = 0; k < n; ++k) {
      if (!live[k]) continue;
      next[k] = last ? kLastSampled : out[k].back();
      in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1), LogitsMode::kNone, true});
      who.push_back(k);
    }
    return std::make_pair(in, who);
  };
  auto record = [&](const StepOutput& o, const std::vector<int>& who) {
    for (size_t i = 0; i < who.size(); ++i) out[who[i]].push_back(o.sampled[i]);
  };
  const int remove_at = n > 2 ? steps / 2 : -1;
  if (!pipelined) {
    for (int s = 0; s < steps; ++s) {
      if (s == remove_at) live[1] = false, r.remove_sequence(1);
      const auto [in, who] = inputs(false);
      record(r.step(in), who);
    }
  } else {
    // The first decode step takes host tokens (the prefill steps were finished one by one).
    std::vector<StepInput> in;
    std::vector<int> who;
    std::tie(in, who) = inputs(false);
    r.launch(in);
    for (int s = 1; s <= steps; ++s) {
      std::vector<int> launched = who;
      if (s < steps) {
        if (s == remove_at)
          live[1] = false;  // not in this step; removed while the last is in flight
        std::tie(in, who) = inputs(true);
        r.launch(in);
        if (s == remove_at) r.remove_sequence(1);
      }
      record(r.finish(), launched);
    }
  }
  for (int k = 0; k < n; ++k)
    if (live[k]) r.remove_sequence(SeqId(k));
  return out;
}

/// The contract of launch / finish that every runner keeps (uses sequence ids 1 and 2):
/// kLastSampled only for a sequence that sampled in the step launched just before, at most
/// kMaxStepsInFlight steps in flight, finish() only after a launch; a refused launch changes
/// no cache.
inline void expect_launch_rules(ModelRunner& r) {
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  r.add_sequence({2, CachePolicy::full(), {.temperature = 0.0f}});
  const int32_t prompt[3] = {5, 6, 7}, last = kLastSampled;
  EXPECT_THROW(r.finish(), Error);
  StepInput pending{1, std::span<const int32_t>(&last, 1), LogitsMode::kNone, true};
  EXPECT_THROW(r.launch(std::span<const StepInput>(&pending, 1)), Error) << "nothing sampled yet";
  EXPECT_EQ(r.kv().sequence(1).num_tokens, 0);
  StepInput first{1, std::span<const int32_t>(prompt, 3), LogitsMode::kNone, true};
  r.launch(std::span<const StepInput>(&first, 1));
  StepInput other{2, std::span<const int32_t>(prompt, 2), LogitsMode::kNone, false};
  r.launch(std::span<const StepInput>(&other, 1));  // sequence 1 did not sample in this one
  EXPECT_THROW(r.launch(std::span<const StepInput>(&pending, 1)), Error) << "three in flight";
  EXPECT_EQ(r.kv().sequence(1).num_tokens, 3);
  const int32_t t1 = r.finish().sampled[0];
  EXPECT_GE(t1, 0);
  EXPECT_EQ(r.finish().sampled[0], -1);
  EXPECT_THROW(r.launch(std::span<const StepInput>(&pending, 1)), Error)
      << "sampled two launches ago";
  EXPECT_EQ(r.kv().sequence(1).num_tokens, 3);
  StepInput host{1, std::span<const int32_t>(&t1, 1), LogitsMode::kNone, true};
  r.launch(std::span<const StepInput>(&host, 1));
  r.launch(std::span<const StepInput>(&pending, 1));  // now allowed: it sampled in the last one
  EXPECT_GE(r.finish().sampled[0], 0);
  EXPECT_GE(r.finish().sampled[0], 0);
  EXPECT_EQ(r.kv().sequence(1).num_tokens, 5);
  EXPECT_THROW(r.finish(), Error);
  r.remove_sequence(1);
  r.remove_sequence(2);
}

}  // namespace rill::testing
