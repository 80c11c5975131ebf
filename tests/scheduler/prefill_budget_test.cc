// The prefill budget as pure functions: attended keys against a brute-force count, the limits a
// step's TPOT targets give, the largest chunk that keeps the step within its target, the floor,
// the cap and the warm-up allowance, and the unqueued TTFT estimate; latency targets resolved,
// ordered and judged.
#include <gtest/gtest.h>

#include <cmath>

#include <limits>
#include <random>
#include <vector>

#include "engine/scheduler/latency_targets.h"
#include "engine/scheduler/prefill_budget.h"

namespace rill {
namespace {

using std::chrono::milliseconds;

int64_t brute_keys(const KvGeometry& g, int64_t start, int64_t n) {
  int64_t total = 0;
  for (int64_t i = start; i < start + n; ++i) {
    const int64_t keys = i + 1;
    total += g.window > 0 ? std::min<int64_t>(keys, int64_t{g.n_sink} + g.window) : keys;
  }
  return total;
}

TEST(PrefillBudget, AttendedKeysMatchACount) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int64_t> pos(0, 3000), len(0, 700);
  const KvGeometry full{}, ring{4, 16, 1020, 1020}, no_sink{0, 0, 64, 64};
  for (const KvGeometry& g : {full, ring, no_sink})
    for (int i = 0; i < 300; ++i) {
      const int64_t s = pos(rng), n = len(rng);
      EXPECT_EQ(attended_keys(g, s, n), brute_keys(g, s, n))
          << s << " " << n << " window " << g.window;
    }
  EXPECT_EQ(attended_keys(full, 0, 4), 1 + 2 + 3 + 4);
  EXPECT_EQ(attended_keys(ring, 5000, 1), 1024);  // a full ring: sinks + window
}

// A model fitted on a device that costs 2 ms + 0.1 ms per decode row + 1 ms if prefill +
// 0.05 ms per prompt token (nothing for keys and chunks): a 10-row step takes 3 ms, and each
// prompt token 0.05 ms more, after a 1 ms mixed-step cost.
StepCostModel linear_model() {
  StepCostModel m({.window = 64, .min_decode_steps = 4, .min_prefill_steps = 3});
  for (int i = 0; i < 40; ++i) {
    StepComposition c;
    c.decode_rows = 1 + i % 20;
    const double decode_ms = 2 + 0.1 * c.decode_rows;
    const int64_t tokens = 32 + 32 * (i % 7);
    if (i % 4 == 0) {
      m.observe(c, decode_ms * 1e-3);
    } else if (i % 4 == 2) {  // two chunks cost what one of their total does
      m.observe(c.with_chunk(tokens, 0).with_chunk(16, 0),
                (decode_ms + 1 + 0.05 * (tokens + 16)) * 1e-3);
    } else {
      m.observe(c.with_chunk(tokens, 0), (decode_ms + 1 + 0.05 * tokens) * 1e-3);
    }
  }
  return m;
}

StepComposition rows(int n) {
  StepComposition c;
  c.decode_rows = n;
  return c;
}

constexpr KvGeometry kFull{};

TEST(PrefillBudget, LimitsTakeTheTightestTargetOfTheDecodingStreams) {
  const LatencyTarget none{}, auto_t{LatencyTarget::Kind::kAuto, 0},
      t25{LatencyTarget::Kind::kFixed, 0.025}, t40{LatencyTarget::Kind::kFixed, 0.040};
  std::vector<StreamPace> targets = {t40, none, t25};
  StepLimits l = step_limits(targets, 0.010, true, 512, 64, 256);
  EXPECT_TRUE(l.constrained);
  EXPECT_DOUBLE_EQ(l.target_s, kStepHeadroom * 0.025);
  EXPECT_EQ(l.token_cap, 512);
  targets.push_back(auto_t);  // 2 x the 10 ms steady step = 20 ms, tighter than 25
  l = step_limits(targets, 0.010, true, 512, 64, 256);
  EXPECT_DOUBLE_EQ(l.target_s, kAutoStepHeadroom * kAutoTpotFactor * 0.010);
  const std::vector<StreamPace> batch = {none, none};
  l = step_limits(batch, 0.010, true, 512, 64, 256);
  EXPECT_FALSE(l.constrained);  // batch requests fill what is left
  l = step_limits(targets, 0.010, false, 512, 64, 256);
  EXPECT_TRUE(l.constrained);  // the model warms up: the fixed targets get the allowance
  EXPECT_TRUE(l.warming_up);
  const std::vector<StreamPace> autos = {auto_t, none};
  EXPECT_FALSE(step_limits(autos, 0, false, 512, 64, 256).constrained)
      << "no auto target before a decode step is measured";
  l = step_limits(autos, 0.010, false, 512, 64, 256);
  EXPECT_TRUE(l.constrained) << "decode steps measured, prefill steps not yet: the allowance";
  EXPECT_TRUE(l.warming_up);
  EXPECT_TRUE(step_limits(autos, 0.010, true, 512, 64, 256).constrained);
  EXPECT_EQ(step_limits({}, 0.010, true, -3, 64, 256).token_cap, 0);
  // The model's spread narrows the auto bound once it exceeds the headroom's room; fixed
  // targets (means over the request) keep theirs.
  EXPECT_DOUBLE_EQ(step_limits(autos, 0.010, true, 512, 64, 256, 1.05).target_s,
                   kAutoStepHeadroom * kAutoTpotFactor * 0.010);
  EXPECT_DOUBLE_EQ(step_limits(autos, 0.010, true, 512, 64, 256, 1.25).target_s,
                   kAutoTpotFactor * 0.010 / 1.25);
  const std::vector<StreamPace> fixed = {t25};
  EXPECT_DOUBLE_EQ(step_limits(fixed, 0.010, true, 512, 64, 256, 1.25).target_s,
                   kStepHeadroom * 0.025);
  // A stream's own auto target, when smaller than the batch's, bounds the step.
  const std::vector<StreamPace> own = {LatencyTarget{LatencyTarget::Kind::kAuto, 0.016}};
  EXPECT_DOUBLE_EQ(step_limits(own, 0.010, true, 512, 64, 256).target_s,
                   kAutoStepHeadroom * 0.016);
  const std::vector<StreamPace> larger = {LatencyTarget{LatencyTarget::Kind::kAuto, 0.030}};
  EXPECT_DOUBLE_EQ(step_limits(larger, 0.010, true, 512, 64, 256).target_s,
                   kAutoStepHeadroom * kAutoTpotFactor * 0.010);
  // ... unless the batch being built decodes slower than it allows (0.85 x 11 ms < 10 ms): the
  // queue that made the batch would only wait, and the batch's pace applies.
  const std::vector<StreamPace> outgrown = {LatencyTarget{LatencyTarget::Kind::kAuto, 0.011}};
  EXPECT_DOUBLE_EQ(step_limits(outgrown, 0.010, true, 512, 64, 256).target_s,
                   kAutoStepHeadroom * kAutoTpotFactor * 0.010);
}

// An explicit TPOT target is a mean over the request: a stream that ran faster than its target
// can absorb a longer step, borrowing from up to kPaceHorizon steady steps ahead; one that ran
// slower gets less than its per-step bound, down to nothing (it catches up).
TEST(PrefillBudget, ExplicitTargetsAreMeansAutoOnesBoundEveryStep) {
  const LatencyTarget t25{LatencyTarget::Kind::kFixed, 0.025};
  const double per_step = kStepHeadroom * 0.025;  // 22.5 ms
  StreamPace fresh(t25);  // its first token just came: no interval yet, 32 tokens ahead
  fresh.elapsed_s = 0;
  fresh.remaining = 32;
  // 22.5 ms x 32 - 31 x 10 ms = 410 ms
  EXPECT_NEAR(pace_allowance_s(fresh, 0.010), per_step * 32 - 31 * 0.010, 1e-12);
  StreamPace ran(t25);  // 100 intervals at 10 ms, one token left
  ran.elapsed_s = 1.0;
  ran.intervals = 100;
  ran.remaining = 1;
  EXPECT_NEAR(pace_allowance_s(ran, 0.010), per_step * 101 - 1.0, 1e-12);  // 1.2725 s
  StreamPace late(t25);  // 10 intervals that took 400 ms: behind its target, it catches up
  late.elapsed_s = 0.4;
  late.intervals = 10;
  EXPECT_DOUBLE_EQ(pace_allowance_s(late, 0.010), 0.0);
  late.elapsed_s = 0.2;  // 20 ms a token: 22.5 ms x 11 - 200 ms
  EXPECT_NEAR(pace_allowance_s(late, 0.010), per_step * 11 - 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(pace_allowance_s(StreamPace(t25), 0.010), per_step) << "no progress known";
  // Whether it can still catch up: 40 ms a token so far, then 10 ms ones. With 100 tokens left
  // (0.4 + 1.0) / 110 = 12.7 ms: it can, and asks for no prefill until it has; with 5 left,
  // (0.4 + 0.05) / 15 = 30 ms: it cannot, and constrains nothing.
  late.elapsed_s = 0.4;
  late.left = 100;
  EXPECT_DOUBLE_EQ(pace_allowance_s(late, 0.010), 0.0);
  late.left = 5;
  EXPECT_TRUE(std::isinf(pace_allowance_s(late, 0.010))) << "a lost cause";
  const std::vector<StreamPace> lost = {late};
  EXPECT_FALSE(step_limits(lost, 0.010, true, 512, 64, 256).constrained);
  const std::vector<StreamPace> lost_and_fresh = {late, fresh};
  EXPECT_NEAR(step_limits(lost_and_fresh, 0.010, true, 512, 64, 256).target_s,
              per_step * 32 - 31 * 0.010, 1e-12);

  // The step takes the least allowance; an auto target bounds every step however the stream ran.
  std::vector<StreamPace> paces = {fresh, ran};
  EXPECT_NEAR(step_limits(paces, 0.010, true, 512, 64, 256).target_s, per_step * 32 - 0.31, 1e-12);
  StreamPace auto_ran(LatencyTarget{LatencyTarget::Kind::kAuto, 0});
  auto_ran.elapsed_s = 1.0;
  auto_ran.intervals = 100;
  paces.push_back(auto_ran);
  EXPECT_DOUBLE_EQ(step_limits(paces, 0.010, true, 512, 64, 256).target_s,
                   kAutoStepHeadroom * kAutoTpotFactor * 0.010);
}

TEST(PrefillBudget, TheChunkIsTheLargestThatKeepsTheStepWithinTheTarget) {
  const StepCostModel m = linear_model();
  ASSERT_TRUE(m.trusted()) << m.describe();
  StepLimits l;
  l.constrained = true;
  l.target_s = 0.00901;  // 10 rows: 3 ms + 1 ms mixed, leaving 5 ms = 100 tokens
  l.token_cap = 4096;
  l.min_tokens = 16;
  PrefillBudget b(m, rows(10), l);
  const int64_t n = b.fit(1000, kFull, 0);
  EXPECT_NEAR(static_cast<double>(n), 100, 1);
  EXPECT_LE(m.predict(rows(10).with_chunk(n, attended_keys(kFull, 0, n))), l.target_s);
  EXPECT_GT(m.predict(rows(10).with_chunk(n + 1, attended_keys(kFull, 0, n + 1))), l.target_s);
  EXPECT_EQ(b.fit(40, kFull, 0), 40);  // wants less than fits
  b.take(60, kFull, 0);
  EXPECT_FALSE(b.exhausted());
  // A second chunk pays another chunk's cost (none here) and gets the rest of the 5 ms.
  const int64_t second = b.fit(1000, kFull, 0);
  EXPECT_NEAR(static_cast<double>(second), 40, 1);
  b.take(second, kFull, 0);
  EXPECT_TRUE(b.exhausted());
  EXPECT_EQ(b.composition().prefill_tokens, 60 + second);
  EXPECT_EQ(b.composition().chunks, 2);
}

// A runner that rounds a step's tokens up (the CUDA runner's GEMM rows, to 64) gets the chunk
// topped up to its granularity: those tokens cost nothing, however the model predicts them.
TEST(PrefillBudget, TheRunnersGranularityTopsTheChunkUp) {
  const StepCostModel m = linear_model();
  StepLimits l;
  l.constrained = true;
  l.target_s = 0.00901;  // 100 tokens fit beside 10 rows: 110, rounded up to 128
  l.token_cap = 4096;
  l.min_tokens = 16;
  l.granularity = 64;
  PrefillBudget b(m, rows(10), l);
  EXPECT_EQ(b.fit(1000, kFull, 0), 118);
  EXPECT_EQ(b.fit(112, kFull, 0), 112) << "never more than the chunk wants";
  EXPECT_EQ(b.fit(40, kFull, 0), 40) << "what fits whole is not topped up";
  b.take(118, kFull, 0);
  EXPECT_TRUE(b.exhausted());
  l.target_s = 0.002;  // nothing fits: the floor, topped up too
  PrefillBudget floor(m, rows(10), l);
  EXPECT_EQ(floor.fit(1000, kFull, 0), 54);
}

TEST(PrefillBudget, AnUnreachableTargetStillFeedsTheFloorOncePerStep) {
  const StepCostModel m = linear_model();
  StepLimits l;
  l.constrained = true;
  l.target_s = 0.002;  // below the decodes alone
  l.token_cap = 4096;
  l.min_tokens = 16;
  PrefillBudget b(m, rows(10), l);
  EXPECT_EQ(b.fit(1000, kFull, 0), 16);
  EXPECT_EQ(b.fit(5, kFull, 0), 5);
  b.take(16, kFull, 0);
  EXPECT_TRUE(b.exhausted());
  EXPECT_EQ(b.fit(1000, kFull, 0), 0);
}

TEST(PrefillBudget, CapWarmUpAndNoTarget) {
  const StepCostModel m = linear_model();
  StepLimits free{
      .constrained = false, .warming_up = false, .target_s = 0, .token_cap = 300, .min_tokens = 16,
      .warmup_tokens = 64};
  PrefillBudget a(m, rows(10), free);
  EXPECT_EQ(a.fit(1000, kFull, 0), 300);  // max_num_batched_tokens is the only bound
  a.take(250, kFull, 0);
  EXPECT_EQ(a.fit(1000, kFull, 0), 50);
  a.take(50, kFull, 0);
  EXPECT_TRUE(a.exhausted());
  StepLimits warm = free;
  warm.constrained = true;  // a stream has a target, the model is not trusted yet
  warm.warming_up = true;
  PrefillBudget w(m, rows(10), warm);
  EXPECT_EQ(w.fit(1000, kFull, 0), 64);
  w.take(40, kFull, 0);
  EXPECT_EQ(w.fit(1000, kFull, 0), 24);
  w.take(24, kFull, 0);
  EXPECT_TRUE(w.exhausted());
}

TEST(PrefillBudget, UnqueuedTtftSumsThePredictedSteps) {
  const StepCostModel m = linear_model();
  StepLimits l;
  l.constrained = true;
  l.target_s = 0.00901;  // 100 tokens a step of 9 ms
  l.token_cap = 4096;
  l.min_tokens = 16;
  EXPECT_NEAR(unqueued_ttft_s(m, rows(10), l, kFull, 1000), 10 * 0.009, 1e-4);
  EXPECT_NEAR(unqueued_ttft_s(m, rows(10), l, kFull, 150), 0.009 + (3 + 1 + 0.05 * 50) * 1e-3,
              1e-4);
  EXPECT_EQ(unqueued_ttft_s(StepCostModel(), rows(10), l, kFull, 1000), 0.0);  // not trusted
  l.token_cap = 0;  // the decodes fill this step: later ones still feed at least the floor
  EXPECT_GT(unqueued_ttft_s(m, rows(10), l, kFull, 1000), 0.0);
}

TEST(LatencyTargets, ResolveOrderAndJudge) {
  EXPECT_TRUE(resolve_target(milliseconds(0), milliseconds(50)).none());  // the request's 0: none
  EXPECT_EQ(resolve_target(std::nullopt, milliseconds(0)).kind, LatencyTarget::Kind::kAuto);
  const LatencyTarget fixed = resolve_target(std::nullopt, milliseconds(50));
  EXPECT_EQ(fixed.kind, LatencyTarget::Kind::kFixed);
  EXPECT_DOUBLE_EQ(fixed.seconds, 0.05);
  EXPECT_DOUBLE_EQ(resolve_target(milliseconds(25), milliseconds(50)).seconds, 0.025);
  EXPECT_EQ(ordering_slack(fixed, milliseconds(60'000)), milliseconds(50));
  EXPECT_EQ(ordering_slack({LatencyTarget::Kind::kAuto, 0}, milliseconds(60'000)),
            kAutoOrderingTtft);
  EXPECT_EQ(ordering_slack({}, milliseconds(60'000)), milliseconds(60'000));
  EXPECT_DOUBLE_EQ(target_seconds({LatencyTarget::Kind::kAuto, 0}, 0.3), 0.3);
  EXPECT_DOUBLE_EQ(target_seconds({}, 0.3), 0.0);

  RequestTimings t;
  t.ttft_s = 0.4;
  t.tpot_s = 0.03;
  SloOutcome o = judge_slo(0.5, 0.025, t, true, 10, FinishReason::kLength);
  EXPECT_EQ(o.ttft_met, std::optional<bool>(true));
  EXPECT_EQ(o.tpot_met, std::optional<bool>(false));
  EXPECT_DOUBLE_EQ(o.tpot_target_s, 0.025);
  o = judge_slo(0.5, 0.025, t, true, 1, FinishReason::kStop);  // one token: no TPOT
  EXPECT_FALSE(o.tpot_met.has_value());
  o = judge_slo(0.5, 0.025, t, false, 0, FinishReason::kDeadline);  // never started in time
  EXPECT_EQ(o.ttft_met, std::optional<bool>(false));
  o = judge_slo(0.5, 0.025, t, false, 0, FinishReason::kCancelled);  // the client left first
  EXPECT_FALSE(o.ttft_met.has_value());
  o = judge_slo(0.5, 0.025, t, true, 10, FinishReason::kError);
  EXPECT_FALSE(o.ttft_met.has_value());
  EXPECT_FALSE(o.tpot_met.has_value());
  o = judge_slo(0, 0, t, true, 10, FinishReason::kLength);  // no targets
  EXPECT_FALSE(o.ttft_met.has_value() || o.tpot_met.has_value());
}

}  // namespace
}  // namespace rill
