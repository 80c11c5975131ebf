// The CUDA tensor-parallel group (engine/tp/): a size-1 group runs the TP code path (NCCL, the
// vocabulary-parallel embedding and the gathered LM head) and equals the plain CUDA runner on
// the architecture fixtures; a 2-GPU group equals the size-1 group within bf16/fp16 rounding
// (greedy tokens up to the first near tie, logits close), with CUDA graphs and without, with
// the peer-memory all-reduce of small steps and with NCCL alone.
// GPU tests: they skip visibly where there is no GPU, or fewer GPUs than a group needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/model/quantization.h"
#include "engine/runner_factory.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/fp8_runs.h"
#include "tests/engine/golden.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#include "engine/tp/tp_factory.h"
#endif

namespace rill {
namespace {

#ifdef RILL_HAVE_CUDA

const char* const kFixtures[] = {"llama_gqa_tied",      "qwen2",      "mistral",       "gpt_neox",
                                 "llama3_rope_scaling", "llama_hd96", "fp8_ct_channel"};

EngineOptions options(int world, bool graphs) {
  EngineOptions o;
  o.device = "cuda";
  o.max_batch = 16;
  o.max_step_tokens = 2048;
  o.gpu_memory_fraction = 0.3;
  o.cuda_tuning.cuda_graphs = graphs;
  o.tensor_parallel_size = world;
  return o;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // per step (with_logits)
};

// Greedy continuation of `prompt` for `steps` tokens beside a second sequence with a StreamingLLM
// cache; with_logits returns each step's row (eager steps), else the decode steps replay graphs.
Generated generate(ModelRunner& r, const std::vector<int32_t>& prompt, int steps,
                   bool with_logits) {
  Generated out;
  const LogitsMode mode = with_logits ? LogitsMode::kLast : LogitsMode::kNone;
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  r.add_sequence({2, CachePolicy::streaming(2, 8), {.temperature = 0.0f}});
  std::vector<int32_t> feed1 = prompt, feed2 = prompt;
  for (int s = 0; s < steps; ++s) {
    const StepInput in[2] = {{1, feed1, mode, true}, {2, feed2, LogitsMode::kNone, true}};
    const StepOutput o = r.step(in);
    out.tokens.push_back(o.sampled[0]);
    if (with_logits) out.logits.push_back(o.logits);
    feed1 = {o.sampled[0]};
    feed2 = {o.sampled[1]};
  }
  r.remove_sequence(1);
  r.remove_sequence(2);
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// The gap between the two largest logits.
double margin(const std::vector<float>& row) {
  float a = -INFINITY, b = -INFINITY;
  for (float v : row) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return double(a) - b;
}

// The flip noise of fp8 activations (fp8_runs.h) on `prompt` fed `tokens` (teacher-forced):
// how far CPU emulations whose activations differ by one bf16 ulp move the logits. Zero spread
// for a model without fp8 layers. generate() runs two sequences, so the emulation feeds the
// prompt twice too: a step's row count decides whether its fp8 layers quantize activations
// (more than fp8_gemv_max_rows rows), and quantization is per token, so the second copy changes
// nothing else in the first one's rows.
testing::Fp8FlipNoise flip_noise(const Model& m, const std::vector<int32_t>& prompt,
                                 const std::vector<int32_t>& tokens) {
  testing::Fp8FlipNoise none;
  if (!m.config.quant.quantized()) return none;
  CpuRunnerOptions emulating{.num_threads = 4,
                             .quantization = resolve_quantization("auto", m.config.quant)};
  emulating.fp8_activation_rows = options(1, true).cuda_tuning.fp8_gemv_max_rows;
  std::vector<std::vector<int32_t>> fed;  // fed[step][seq]: the decode steps after the prefill
  for (size_t s = 0; s + 1 < tokens.size(); ++s) fed.push_back({tokens[s], tokens[s]});
  return testing::fp8_flip_noise(m, emulating, {prompt, prompt}, fed, CachePolicy::full(),
                                 testing::kBf16Jitter, 4);
}

// Each step's logits of `prompt` then `tokens` fed one at a time (teacher-forced), beside a
// second sequence fed the same (generate()'s step shapes; its logits are not kept).
std::vector<std::vector<float>> teacher_forced(ModelRunner& r, const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& tokens) {
  std::vector<std::vector<float>> out;
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  r.add_sequence({2, CachePolicy::full(), {.temperature = 0.0f}});
  std::vector<int32_t> feed = prompt;
  for (size_t s = 0; s < tokens.size(); ++s) {
    const StepInput in[2] = {{1, feed, LogitsMode::kLast, true},
                             {2, feed, LogitsMode::kNone, true}};
    out.push_back(r.step(in).logits);
    feed = {tokens[s]};
  }
  r.remove_sequence(1);
  r.remove_sequence(2);
  return out;
}

// How far splitting a model with fp8 layers over 2 ranks moves its logits by itself: a W8A8
// layer's per-token activation scale is taken over the rank's slice of a row-parallel input (as
// vLLM's), not the whole row. Measured on the CPU emulation of the CUDA runner's fp8 GEMMs, the
// group of 2 against the whole model, teacher-forced on `tokens`: the largest relative L2 of a
// step. Zero for a model without fp8 layers.
double fp8_sharding_shift(const Model& m, const std::vector<int32_t>& prompt,
                          const std::vector<int32_t>& tokens) {
  if (!m.config.quant.quantized()) return 0;
  CpuRunnerOptions emulating{.num_threads = 4,
                             .quantization = resolve_quantization("auto", m.config.quant)};
  emulating.fp8_activation_rows = options(1, true).cuda_tuning.fp8_gemv_max_rows;
  CpuRunner whole(m, emulating);
  const auto want = teacher_forced(whole, prompt, tokens);
  const auto two = tp::make_cpu_tp_runner(m, 2, emulating);
  const auto got = teacher_forced(*two, prompt, tokens);
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) worst = std::max(worst, rel_l2(got[s], want[s]));
  return worst;
}

std::vector<int32_t> fixture_prompt(const std::string& name) {
  const auto g = testing::load_golden(name + ".json");
  return testing::golden_cases(g).front().prompt;
}

TEST(CudaTp, SizeOneGroupEqualsThePlainRunner) {
  REQUIRE_CUDA();
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const Model m = load_model(testing::source_path(std::string("tests/fixtures/") + name));
    const auto prompt = fixture_prompt(name);
    // The plain runner runs and is gone before the group starts: each sizes its KV pool to 30%
    // of the GPU counting what is already in use, so two alive at once leave the second none.
    std::vector<Generated> ref;
    {
      // A group (even of one) keeps the fp8 GEMVs' norms out of them (CudaRunner::norm_in_gemv:
      // the all-reduce sits between o / down and the norm), which rounds the norm's output at
      // another place; the plain runner is asked to do the same.
      EngineOptions o = options(1, true);
      o.cuda_tuning.fp8_norm_in_gemv = false;
      CudaRunner plain(m, o);
      for (bool logits : {true, false}) ref.push_back(generate(plain, prompt, 12, logits));
    }
    auto tp = tp::make_cuda_tp_runner(m, options(1, true));
    for (bool logits : {true, false}) {
      const Generated& want = ref[logits ? 0 : 1];
      const Generated got = generate(*tp, prompt, 12, logits);
      EXPECT_EQ(got.tokens, want.tokens);
      for (size_t s = 0; s < want.logits.size(); ++s)
        EXPECT_LT(rel_l2(got.logits[s], want.logits[s]), 1e-6) << "step " << s;
    }
  }
}

TEST(CudaTp, TwoGpusEqualOneWithinRounding) {
  REQUIRE_CUDA();
  if (cuda_device_count() < 2)
    GTEST_SKIP() << "needs 2 GPUs, " << cuda_device_count() << " visible: 2-GPU test skipped";
  for (const char* name : kFixtures) {
    SCOPED_TRACE(name);
    const Model m = load_model(testing::source_path(std::string("tests/fixtures/") + name));
    const auto prompt = fixture_prompt(name);
    Generated ref;  // the size-1 group on GPU 0, gone before the 2-GPU group takes its memory
    {
      auto one = tp::make_cuda_tp_runner(m, options(1, true));
      ref = generate(*one, prompt, 16, true);
    }
    const bool bf16 = m.config.stored_dtype == DType::kBF16;
    // As the CUDA runner against transformers (cuda_runner_test.cc): a different order of sums
    // moves bf16 logits by ~1e-2 relative, fp16 by ~3e-3; tokens agree up to the first near tie.
    double tol = bf16 ? 4e-2 : 1e-2;
    const double near_tie = bf16 ? 0.25 : 0.05;
    // fp8 linear layers quantize activations that those sums moved: e4m3 rounding flips add the
    // flip noise of tests/engine/fp8_runs.h, measured on the CPU emulation of the same tokens.
    const testing::Fp8FlipNoise noise = flip_noise(m, prompt, ref.tokens);
    tol += std::max(noise.spread.prefill, noise.spread.decode);
    // And each rank quantizes its own slice of o's and down's inputs.
    const double shift = fp8_sharding_shift(m, prompt, ref.tokens);
    if (shift > 0) std::printf("  %s: fp8 sharding shift (CPU) %.4f\n", name, shift);
    tol += shift;
    // Small steps sum o and down over peer memory where the GPUs have it (the default), the
    // rest over NCCL; three fixtures (one with an o bias, one fp8) also run NCCL alone.
    const std::string fixture = name;
    std::vector<int> peer_sum_tokens = {options(2, true).cuda_tuning.peer_sum_max_tokens};
    if (fixture == "llama_gqa_tied" || fixture == "qwen2" || fixture == "fp8_ct_channel")
      peer_sum_tokens.push_back(0);
    for (int peer_tokens : peer_sum_tokens) {
      SCOPED_TRACE("peer_sum_max_tokens " + std::to_string(peer_tokens));
      EngineOptions o = options(2, true);
      o.cuda_tuning.peer_sum_max_tokens = peer_tokens;
      auto two = tp::make_cuda_tp_runner(m, o);
      const Generated got = generate(*two, prompt, 16, true);
      for (size_t s = 0; s < ref.tokens.size(); ++s) {
        EXPECT_LT(rel_l2(got.logits[s], ref.logits[s]), tol) << "step " << s;
        if (margin(ref.logits[s]) < near_tie) break;
        if (s > 0 && !noise.top1_stable.empty() && !noise.top1_stable[s - 1][0]) break;
        ASSERT_EQ(got.tokens[s], ref.tokens[s]) << "step " << s;
      }
      // The graph-replayed decode steps (collectives captured) give the eager steps' tokens.
      const Generated graphs = generate(*two, prompt, 16, false);
      EXPECT_EQ(graphs.tokens, got.tokens);
    }
  }
}

TEST(CudaTp, RefusesWhatDoesNotFit) {
  REQUIRE_CUDA();
  const Model m = load_model(testing::source_path("tests/fixtures/llama_gqa_tied"));
  EngineOptions o = options(4, true);  // 2 heads over 4 ranks
  try {
    make_runner(m, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads (2)"), std::string::npos) << e.what();
  }
  o = options(1, true);
  o.gpus = std::to_string(cuda_device_count());  // one past the last
  EXPECT_THROW(make_runner(m, o), Error);
}

#else
TEST(CudaTp, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA: GPU test skipped";
}
#endif

}  // namespace
}  // namespace rill
