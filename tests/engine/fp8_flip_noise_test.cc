// The W8A8 emulation's flip noise (fp8_runs.h), which bounds how closely the CUDA runner's fp8
// activations can match the CPU's emulation of them (cuda_fp8_test.cc): activations jittered by
// one bf16 ulp round to another e4m3 neighbour often enough to re-draw a large part of the
// activation quantization error on the random fixtures, and little of it on the trained default
// model. CpuRunnerOptions::fp8_activation_jitter itself: off, or without the emulation, nothing
// changes.
#include <gtest/gtest.h>

#include <cstdio>

#include "engine/cpu/cpu_runner.h"
#include "engine/model/model.h"
#include "tests/engine/fp8_runs.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using testing::Fp8Distance;
using testing::Fp8Rows;
using testing::source_path;

struct Case {
  const char* path;
  int batch, len, steps;
};

// The emulation's cost (against fp32 activations) and its flip noise at one bf16 ulp.
struct Measured {
  Fp8Distance cost, spread;
};

Measured measure(const Case& c) {
  const Model m = load_model(source_path(c.path));
  const CpuRunnerOptions plain{.num_threads = 2, .quantization = WeightQuant::kFp8};
  CpuRunnerOptions emulating = plain;
  emulating.fp8_activation_rows = 16;
  const auto prompts = testing::fp8_prompts(m, c.batch, c.len);
  CpuRunner cpu(m, emulating), cpu_plain(m, plain);
  const auto tokens = testing::fp8_greedy_tokens(cpu, prompts, c.steps);
  const Fp8Rows ref = testing::run_fp8_rows(cpu, prompts, tokens);
  Measured r;
  r.cost = testing::fp8_distance(ref, testing::run_fp8_rows(cpu_plain, prompts, tokens),
                                 m.config.vocab_size);
  r.spread = testing::fp8_flip_noise(m, emulating, prompts, tokens, CachePolicy::full(),
                                     testing::kBf16Jitter, 4)
                 .spread;
  std::printf(
      "%s, batch %d: e4m3 activations move a logits row by up to %.4f (prefill), %.4f (decode); "
      "emulations one bf16 ulp apart differ by %.4f, %.4f\n",
      c.path, c.batch, r.cost.prefill, r.cost.decode, r.spread.prefill, r.spread.decode);
  return r;
}

TEST(Fp8FlipNoise, OneBf16UlpRedrawsTheFixturesActivationError) {
  for (const char* name : {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"}) {
    const Measured r = measure({(std::string("tests/fixtures/") + name).c_str(), 1, 40, 8});
    EXPECT_GT(r.spread.prefill, 0.5 * r.cost.prefill) << name;
    EXPECT_GT(r.spread.decode, 0.0) << name;  // the prefill's K/V carry it into decode steps
    EXPECT_LT(r.spread.prefill, 1.0) << name;
  }
}

TEST(Fp8FlipNoise, SmallOnTheTrainedModel) {
  const Measured r = measure({"models/rill-shakespeare", 2, 48, 4});
  EXPECT_GT(r.spread.prefill, 0.0);
  EXPECT_LT(r.spread.prefill, 0.1);
  EXPECT_LT(r.spread.decode, 0.05);
}

// Jitter 0 is the exact emulation; without the emulation (or without fp8 weights) the jitter
// changes nothing; a seed is reproducible, another seed differs.
TEST(Fp8FlipNoise, JitterOption) {
  const Model m = load_model(source_path("tests/fixtures/fp8_ct_channel"));
  const auto prompts = testing::fp8_prompts(m, 1, 40);
  auto rows = [&](CpuRunnerOptions o) {
    CpuRunner r(m, o);
    return testing::run_fp8_rows(r, prompts, {{7}, {9}}).prefill[0];
  };
  CpuRunnerOptions o{.num_threads = 2, .quantization = WeightQuant::kFp8};
  const auto plain = rows(o);
  o.fp8_activation_jitter = testing::kBf16Jitter;
  EXPECT_EQ(rows(o), plain) << "jitter without the emulation";
  o.fp8_activation_jitter = 0;
  o.fp8_activation_rows = 16;
  const auto exact = rows(o);
  EXPECT_NE(exact, plain);
  o.fp8_activation_jitter = testing::kBf16Jitter;
  o.fp8_activation_jitter_seed = 1;
  const auto jittered = rows(o);
  EXPECT_NE(jittered, exact);
  EXPECT_EQ(rows(o), jittered) << "a seed is reproducible";
  o.fp8_activation_jitter_seed = 2;
  EXPECT_NE(rows(o), jittered);
  o.quantization = WeightQuant::kNone;
  const auto none = rows(o);
  o.fp8_activation_jitter = 0;
  EXPECT_EQ(rows(o), none) << "jitter without fp8 weights";
}

}  // namespace
}  // namespace rill
