// The step-cost model fitted on synthetic step timings: exact and noisy linear devices, the
// warm-up rule, outliers, non-negative slopes and a device that changes speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

#include "engine/scheduler/step_cost_model.h"

namespace rill {
namespace {

// A synthetic device: milliseconds per feature (the model's own form, so an exact fit exists).
struct Device {
  double base = 2.0, per_row = 0.02, per_decode_key = 0.5e-5, mixed = 1.5, per_chunk = 0.2,
         per_prefill_token = 0.025, per_prefill_key = 0.4e-6;
  double ms(const StepComposition& c) const {
    return base + per_row * c.decode_rows + per_decode_key * static_cast<double>(c.decode_keys) +
           (c.chunks > 0 ? mixed : 0) + per_chunk * c.chunks +
           per_prefill_token * static_cast<double>(c.prefill_tokens) +
           per_prefill_key * static_cast<double>(c.prefill_keys);
  }
};

StepComposition decode_step(int rows, int64_t keys_per_row) {
  StepComposition c;
  c.decode_rows = rows;
  c.decode_keys = rows * keys_per_row;
  return c;
}

StepComposition mixed_step(int rows, int64_t keys_per_row, int64_t tokens, int64_t cached) {
  return decode_step(rows, keys_per_row)
      .with_chunk(tokens, tokens * cached + tokens * (tokens + 1) / 2);
}

// Steps a serving loop would run: decodes at varying batch sizes, and mixed steps of varying
// chunk sizes and positions.
void feed(StepCostModel& m, const Device& d, int steps, std::mt19937& rng, double noise = 0) {
  std::uniform_int_distribution<int> rows(1, 64), tokens(16, 2048), cached(0, 4096), kind(0, 3);
  std::normal_distribution<double> err(0, noise);
  for (int i = 0; i < steps; ++i) {
    const StepComposition c = kind(rng) == 0
                                  ? mixed_step(rows(rng), cached(rng), tokens(rng), cached(rng))
                                  : decode_step(rows(rng), cached(rng));
    m.observe(c, d.ms(c) * (1 + (noise > 0 ? err(rng) : 0)) * 1e-3);
  }
}

TEST(StepCostModel, FitsAnExactLinearDevice) {
  StepCostModel m;
  Device d;
  std::mt19937 rng(1);
  feed(m, d, 400, rng);
  ASSERT_TRUE(m.trusted());
  for (const StepComposition& c :
       {decode_step(32, 1024), decode_step(1, 10), mixed_step(32, 1024, 224, 0),
        mixed_step(8, 512, 2048, 4096), mixed_step(0, 0, 8192, 0)})
    EXPECT_NEAR(m.predict(c) * 1e3, d.ms(c), 0.01 * d.ms(c)) << m.describe();
}

// The spread is the slow tail of steps with prefill against their prediction: 1 on an exact
// device; on one whose steps with prefill run up to 25% over or under at random (uniform), the
// 95th percentile of measured / predicted, about 1.2; never above kMaxSpread.
TEST(StepCostModel, SpreadIsTheSlowTailOfStepsWithPrefill) {
  Device d;
  std::mt19937 rng(7);
  StepCostModel exact;
  EXPECT_EQ(exact.prefill_spread(), 1.0) << "no steps yet";
  feed(exact, d, 400, rng);
  EXPECT_NEAR(exact.prefill_spread(), 1.0, 0.01) << exact.describe();

  auto jittered = [&](double amplitude) {
    StepCostModel m;
    std::uniform_real_distribution<double> u(-amplitude, amplitude);
    std::uniform_int_distribution<int> rows(1, 64), tokens(16, 2048), cached(0, 4096);
    for (int i = 0; i < 600; ++i) {
      const StepComposition decode = decode_step(rows(rng), cached(rng));
      m.observe(decode, d.ms(decode) * 1e-3);  // decode steps exact: only prefill varies
      const StepComposition mixed = mixed_step(rows(rng), cached(rng), tokens(rng), cached(rng));
      m.observe(mixed, d.ms(mixed) * (1 + u(rng)) * 1e-3);
    }
    return m.prefill_spread();
  };
  const double spread = jittered(0.25);
  EXPECT_GT(spread, 1.12);
  EXPECT_LT(spread, 1.3);
  EXPECT_LE(jittered(2.0), StepCostModel::kMaxSpread);
}

TEST(StepCostModel, NoisyTimingsStillPredictWithinTheNoise) {
  StepCostModel m;
  Device d;
  std::mt19937 rng(2);
  feed(m, d, 2000, rng, 0.05);
  ASSERT_TRUE(m.trusted());
  for (const StepComposition& c :
       {decode_step(32, 1024), mixed_step(32, 1024, 224, 0), mixed_step(16, 800, 512, 1000)})
    EXPECT_NEAR(m.predict(c) * 1e3, d.ms(c), 0.05 * d.ms(c)) << m.describe();
}

TEST(StepCostModel, TrustedOnlyAfterBothKindsOfStepsAndTwoChunkSizes) {
  StepCostModel m({.window = 64, .min_decode_steps = 4, .min_prefill_steps = 3});
  Device d;
  EXPECT_EQ(m.predict(decode_step(4, 100)), 0.0);  // nothing fitted yet
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(m.knows_decode(), i >= 4) << i;
    m.observe(decode_step(4 + i, 100), d.ms(decode_step(4 + i, 100)) * 1e-3);
  }
  EXPECT_TRUE(m.knows_decode());
  EXPECT_FALSE(m.trusted());  // no prefill seen
  for (int i = 0; i < 5; ++i)
    m.observe(mixed_step(4, 100, 256, 0), d.ms(mixed_step(4, 100, 256, 0)) * 1e-3);
  EXPECT_FALSE(m.trusted());  // one chunk size: the per-token slope is not identified
  m.observe(mixed_step(4, 100, 200, 0), d.ms(mixed_step(4, 100, 200, 0)) * 1e-3);
  EXPECT_FALSE(m.trusted()) << "sizes 200-256: the slope is still not identified";
  m.observe(mixed_step(4, 100, 64, 0), d.ms(mixed_step(4, 100, 64, 0)) * 1e-3);
  EXPECT_TRUE(m.trusted()) << m.describe();
  EXPECT_EQ(m.observations(), 17);
}

TEST(StepCostModel, OutliersAreSetAsideUnlessTheyKeepComing) {
  StepCostModel m;
  Device d;
  std::mt19937 rng(3);
  feed(m, d, 300, rng);
  ASSERT_TRUE(m.trusted());
  const StepComposition c = decode_step(32, 1024);
  const double before = m.predict(c);
  m.observe(c, 10 * d.ms(c) * 1e-3);  // a graph captured during the step
  EXPECT_EQ(m.predict(c), before);
  EXPECT_EQ(m.outliers(), 1);
  // The device got 5x slower for good: the eighth in a row is taken, and so are the rest.
  Device slow = d;
  for (double* p : {&slow.base, &slow.per_row, &slow.per_decode_key, &slow.mixed, &slow.per_chunk,
                    &slow.per_prefill_token, &slow.per_prefill_key})
    *p *= 5;
  feed(m, slow, 400, rng);
  for (const StepComposition& x : {c, mixed_step(32, 1024, 512, 0)})
    EXPECT_NEAR(m.predict(x) * 1e3, slow.ms(x), 0.02 * slow.ms(x)) << m.describe();
}

TEST(StepCostModel, SlopesStayNonNegativeSoPredictionsGrowWithTheStep) {
  // Timings that would give a negative per-token slope by plain least squares (bigger chunks
  // measured faster, e.g. a noisy device), plus decode steps.
  StepCostModel m({.window = 64, .min_decode_steps = 4, .min_prefill_steps = 3});
  for (int i = 0; i < 20; ++i) m.observe(decode_step(8, 100), 5e-3);
  for (int i = 0; i < 20; ++i)
    m.observe(mixed_step(8, 100, 64 + 64 * (i % 4), 0), (9.0 - 0.5 * (i % 4)) * 1e-3);
  ASSERT_TRUE(m.trusted());
  // c3, the prefill steps' offset, has either sign.
  for (int j = 1; j < StepCostModel::kFeatures; ++j) {
    if (j != 3) {
      EXPECT_GE(m.coefficients()[j], 0.0) << j;
    }
  }
  double last = 0;
  for (int64_t n = 1; n <= 4096; n += 128) {
    const double t = m.predict(mixed_step(8, 100, n, 0));
    EXPECT_GE(t, last);
    last = t;
  }
}

TEST(StepCostModel, FitsAHingedDeviceWhereThePlannerWorks) {
  // A 7B-like step: matrix products bound by reading the weights (4.5 ms) until the rows make
  // them compute bound (22 us a row), attention 5.6 ms, 1.2 ms more when eager (with prefill).
  // The planner's chunks sit near its target (450..700 tokens) with a few prompts' remainders.
  auto device_ms = [](const StepComposition& c) {
    return std::max(4.5, 0.022 * static_cast<double>(c.decode_rows + c.prefill_tokens)) + 5.6 +
           (c.chunks > 0 ? 1.2 : 0);
  };
  // Without the prompt's own attention keys (a chunk's cost then has no curvature to lean on):
  // the prefill steps' line starts 3.3 ms below the decode step.
  auto chunk = [](int64_t p) { return decode_step(32, 1024).with_chunk(p, 0); };
  StepCostModel m;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> near(450, 700), tail(50, 250), pick(0, 5);
  for (int i = 0; i < 600; ++i) {
    const int kind = pick(rng);
    const StepComposition c =
        kind < 3 ? decode_step(32, 1024) : chunk(kind == 5 ? tail(rng) : near(rng));
    m.observe(c, device_ms(c) * 1e-3);
  }
  ASSERT_TRUE(m.trusted());
  for (int64_t p : {450, 550, 650, 700})
    EXPECT_NEAR(m.predict(chunk(p)) * 1e3, device_ms(chunk(p)), 0.05 * device_ms(chunk(p)))
        << p << ": " << m.describe();
  EXPECT_NEAR(m.predict(decode_step(32, 1024)) * 1e3, 10.1, 0.1);
  EXPECT_LT(m.coefficients()[3], 0.0);
}

TEST(StepCostModel, IgnoresMeaninglessTimings) {
  StepCostModel m;
  m.observe(decode_step(1, 1), 0);
  m.observe(decode_step(1, 1), -1);
  m.observe(decode_step(1, 1), std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(m.observations(), 0);
}

}  // namespace
}  // namespace rill
