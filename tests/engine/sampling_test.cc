// CPU sampler: penalties, greedy, top-k / top-p / min-p kept sets, seeded reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "engine/error.h"
#include "engine/runner/sampling.h"

namespace rill {
namespace {

TEST(Sampling, GreedyPicksTheArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  SamplerState s;
  std::vector<float> l = {0.1f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(sample_token(l, p, s), 1);
  EXPECT_EQ(s.step, 1u);
}

TEST(Sampling, PenaltiesFollowVllmSemantics) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  SamplerState s;
  s.prompt_seen = {1, 0, 0, 0};
  s.output_counts = {{2, 3}};
  std::vector<float> l = {4.0f, 4.0f, -4.0f, 1.0f};
  apply_penalties(l, p, s);
  EXPECT_FLOAT_EQ(l[0], 2.0f);  // prompt token, positive: divided
  EXPECT_FLOAT_EQ(l[1], 4.0f);  // unseen
  EXPECT_FLOAT_EQ(
      l[2], -8.0f - 0.75f - 0.5f);  // output token, negative: multiplied, then freq + presence
  EXPECT_FLOAT_EQ(l[3], 1.0f);
}

// Empirical frequencies of many seeded draws.
std::map<int, int> histogram(std::vector<float> logits, SamplingParams p, int draws) {
  std::map<int, int> h;
  SamplerState s;
  for (int i = 0; i < draws; ++i) {
    std::vector<float> l = logits;
    s.output_counts.clear();
    ++h[sample_token(l, p, s)];
  }
  return h;
}

TEST(Sampling, TopKTopPMinPKeepTheRightTokens) {
  // probs at T=1: softmax(log([0.5, 0.25, 0.15, 0.1]))
  std::vector<float> l = {std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.1f)};
  SamplingParams p;
  p.seed = 9;
  p.top_k = 2;
  auto h = histogram(l, p, 3000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 3000.0, 2.0 / 3.0, 0.04);
  p.top_k = 0;
  p.top_p = 0.8f;  // 0.5 + 0.25 = 0.75 < 0.8: needs the third token
  h = histogram(l, p, 3000);
  EXPECT_EQ(h.size(), 3u);
  p.top_p = 0.7f;
  EXPECT_EQ(histogram(l, p, 2000).size(), 2u);
  p.top_p = 1.0f;
  p.min_p = 0.25f;  // keep p >= 0.125
  EXPECT_EQ(histogram(l, p, 2000).size(), 3u);
  p.min_p = 0.0f;
  h = histogram(l, p, 20000);
  EXPECT_EQ(h.size(), 4u);
  EXPECT_NEAR(h[3] / 20000.0, 0.1, 0.01);
}

TEST(Sampling, SameSeedSameTokens) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 0.7f) * 3;
  SamplingParams p;
  p.seed = 42;
  p.temperature = 0.9f;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    SamplerState s;
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> x = l;
      out.push_back(sample_token(x, p, s));
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampling, ValidateRejectsOutOfRange) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.top_k = -1;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.temperature = NAN;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  EXPECT_NO_THROW(p.validate());
}

}  // namespace
}  // namespace rill

namespace rill {
namespace {

// Grammar masks: disallowed tokens never win, greedy or sampled, with penalties and truncation.
TEST(SamplingMask, DisallowedTokensNeverWin) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0, 2);
  const int vocab = 100;
  std::vector<uint32_t> mask((vocab + 31) / 32, 0);
  for (int id : {3, 40, 41, 77, 99}) mask[id >> 5] |= 1u << (id & 31);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> l(vocab);
    for (float& x : l) x = n(rng);
    l[10] = 50;  // the model's favourite is disallowed
    SamplingParams p;
    p.temperature = trial % 3 == 0 ? 0.0f : 1.3f;
    p.top_k = trial % 4 == 1 ? 50 : 0;  // more than the allowed set: zeros must not be drawn
    p.top_p = trial % 5 == 2 ? 0.9f : 1.0f;
    p.frequency_penalty = 0.5f;
    p.seed = static_cast<uint64_t>(trial);
    SamplerState s;
    s.output_counts[40] = 3;
    const int32_t t = sample_token(l, p, s, mask);
    EXPECT_TRUE((mask[t >> 5] >> (t & 31)) & 1u) << "trial " << trial << " drew " << t;
  }
}

TEST(SamplingMask, NothingAllowedGivesTokenZeroAndEmptyMaskIsUnconstrained) {
  std::vector<float> l{1, 5, 2};
  SamplingParams p;
  p.temperature = 0.7f;
  SamplerState s;
  const std::vector<uint32_t> none{0};
  EXPECT_EQ(sample_token(l, p, s, none), 0);
  std::vector<float> l2{1, 5, 2};
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplerState s2;
  EXPECT_EQ(sample_token(l2, greedy, s2, {}), 1);
}

}  // namespace
}  // namespace rill
