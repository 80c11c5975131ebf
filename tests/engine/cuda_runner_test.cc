// The CUDA runner against transformers' golden outputs and against the CPU reference runner:
// greedy tokens and logits for every architecture fixture and the default model (fp16/bf16
// tolerances), StreamingLLM caches, chunked prefill, mixed decode + prefill steps, CUDA graphs,
// the fp8 KV cache against the CPU runner's emulation of it, launch modes and tunings, and every
// supported shape. The serving paths (steps in flight, resumed sequences, log-probabilities) are
// in cuda_serving_paths_test.cc.
// GPU tests: they skip visibly where no GPU exists and run on the GPU machine before changes land.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/cpu/cpu_runner.h"
#include "engine/cuda/cuda_support.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runner_factory.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"
#include "tests/engine/random_model.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/gemv_fp8.h"
#endif

namespace rill {
namespace {

using testing::golden_cases;
using testing::load_golden;
using testing::source_path;

#ifdef RILL_HAVE_CUDA

using testing::cuda_runner;

// Relative L2 error of logits rows.
double rel_err(const float* a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Greedy tokens must match transformers up to the first step whose golden top-2 margin is
// within reach of half-precision rounding; after such a near tie either continuation is right.
void check_golden(const std::string& name) {
  const auto g = load_golden(name);
  const Model m = load_model(source_path(g.at("model").get<std::string>()));
  auto r = cuda_runner(m);
  const bool bf16 = r->dtype() == kernels::DType::kBF16;
  // Relative L2 error of a logits row: fp16 weights/activations with fp32 accumulation land
  // near 5e-3 on the fixtures' large random weights, bf16 (3 fewer mantissa bits) near 3e-2.
  const double margin_ok = bf16 ? 0.25 : 0.05, logit_tol = bf16 ? 4e-2 : 1e-2;
  SeqId id = 1;
  for (const auto& c : golden_cases(g)) {
    r->add_sequence({id, CachePolicy::full(), {.temperature = 0.0f}});
    std::vector<int32_t> feed = c.prompt;
    for (size_t step = 0; step < c.greedy.size(); ++step) {
      StepInput in{id, feed, step < c.logits.size() ? LogitsMode::kLast : LogitsMode::kNone, true};
      const StepOutput o = r->step(std::span<const StepInput>(&in, 1));
      if (step < c.logits.size()) {
        EXPECT_LT(rel_err(o.logits.data(), c.logits[step]), logit_tol) << name << " step " << step;
      }
      if (c.margins[step] < margin_ok) break;  // a near tie: stop comparing this case here
      ASSERT_EQ(o.sampled[0], c.greedy[step]) << name << " step " << step << " (margin " << c.margins[step] << ")";
      feed = {o.sampled[0]};
    }
    r->remove_sequence(id++);
  }
}

class CudaFixtureGolden : public ::testing::TestWithParam<std::string> {};
TEST_P(CudaFixtureGolden, MatchesTransformers) {
  REQUIRE_CUDA();
  check_golden(GetParam() + ".json");
}
INSTANTIATE_TEST_SUITE_P(Architectures, CudaFixtureGolden, ::testing::ValuesIn(testing::fixture_names()));

TEST(CudaRunner, DefaultModelMatchesTransformers) {
  REQUIRE_CUDA();
  check_golden("default_model.json");
}

// All-position logits of one sequence fed in chunks of `chunk` on runner `r`.
std::vector<float> all_logits(ModelRunner& r, const std::vector<int32_t>& tokens, const CachePolicy& p, int chunk) {
  r.add_sequence({7, p, {}});
  std::vector<float> out;
  for (size_t pos = 0; pos < tokens.size(); pos += chunk) {
    const size_t n = std::min<size_t>(chunk, tokens.size() - pos);
    StepInput in{7, std::span<const int32_t>(tokens.data() + pos, n), LogitsMode::kAll, false};
    auto o = r.step(std::span<const StepInput>(&in, 1));
    out.insert(out.end(), o.logits.begin(), o.logits.end());
  }
  r.remove_sequence(7);
  return out;
}

TEST(CudaRunner, StreamingMatchesTheCpuReferenceAcrossChunkings) {
  REQUIRE_CUDA();
  const auto ids = load_golden("default_eval_ids.json").at("eval_ids").get<std::vector<int32_t>>();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  auto gpu = cuda_runner(m);
  CpuRunner cpu(m, {.num_threads = 4});
  const std::vector<int32_t> tokens(ids.begin(), ids.begin() + 500);  // within the 512 context (full)
  const int V = m.config.vocab_size;
  for (const CachePolicy& p : {CachePolicy::streaming(4, 60), CachePolicy::streaming(0, 64), CachePolicy::full()}) {
    const auto ref = all_logits(cpu, tokens, p, 128);
    for (int chunk : {1, 37, 256}) {
      if (!p.is_streaming() && chunk == 1) continue;
      const auto got = all_logits(*gpu, tokens, p, chunk);
      ASSERT_EQ(got.size(), ref.size());
      double worst = 0;
      for (size_t t = 0; t < tokens.size(); ++t)
        worst = std::max(worst, rel_err(&got[t * V], std::vector<float>(ref.begin() + t * V, ref.begin() + (t + 1) * V)));
      EXPECT_LT(worst, 2e-2) << p.to_string() << " chunk " << chunk;
    }
  }
}

// Worst and mean relative L2 error over the rows of two [rows, V] logits matrices.
struct RowErrors {
  double worst = 0, mean = 0;
};
RowErrors row_errors(const std::vector<float>& got, const std::vector<float>& ref, int V) {
  if (got.size() != ref.size() || ref.empty()) {
    ADD_FAILURE() << got.size() << " logits vs " << ref.size();
    return {INFINITY, INFINITY};
  }
  RowErrors e;
  const size_t rows = ref.size() / V;
  for (size_t r = 0; r < rows; ++r) {
    const double x =
        rel_err(&got[r * V], std::vector<float>(ref.begin() + r * V, ref.begin() + (r + 1) * V));
    e.worst = std::max(e.worst, x);
    e.mean += x / rows;
  }
  return e;
}

// Mean negative log-likelihood of tokens[t + 1] under logits row t.
double mean_nll(const std::vector<float>& logits, const std::vector<int32_t>& tokens, int V) {
  double sum = 0;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const float* row = &logits[t * V];
    const double mx = *std::max_element(row, row + V);
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(double(row[i]) - mx);
    sum += std::log(z) + mx - row[tokens[t + 1]];
  }
  return sum / double(tokens.size() - 1);
}

// fp8 KV cache: the CUDA runner against the CPU runner emulating the same e4m3 storage (scale 1).
// Both attend a prefill chunk's own K/V unquantized and a decode token's as stored, so each
// chunking is compared with the same chunking on the CPU (chunk 1: every key through e4m3).
// e4m3 rounding is a step function: where the engines' K/V differ by 16-bit noise, some elements
// land on neighbouring e4m3 values (6-12% apart), so logits rows differ more than with a 16-bit
// cache. Measured on the CPU, rounding K/V to the GPU's dtype before e4m3 alone moves rows by up
// to 2.0% (mean 0.45%) on the default model (bf16) and 2.9% (mean 0.9%) on the GPT-NeoX fixture
// (fp16); the bounds add the 16-bit engines' difference and a margin. The perplexity does not
// feel such flips (0.02% on the CPU) and must agree to 0.5%.
void check_fp8_against_cpu(const Model& m, const std::vector<int32_t>& tokens,
                           std::initializer_list<CachePolicy> policies,
                           std::initializer_list<int> chunks, double worst_tol, double mean_tol) {
  auto gpu = cuda_runner(m, true, "fp8");
  ASSERT_EQ(gpu->kv_element_bytes(), 1);
  CpuRunner cpu(m, {.num_threads = 4, .kv_cache_dtype = KvCacheDType::kFp8E4M3});
  const int V = m.config.vocab_size;
  for (const CachePolicy& p : policies)
    for (int chunk : chunks) {
      SCOPED_TRACE(p.to_string() + " chunk " + std::to_string(chunk));
      const auto ref = all_logits(cpu, tokens, p, chunk), got = all_logits(*gpu, tokens, p, chunk);
      const RowErrors e = row_errors(got, ref, V);
      EXPECT_LT(e.worst, worst_tol);
      EXPECT_LT(e.mean, mean_tol);
      const double nll_gpu = mean_nll(got, tokens, V), nll_cpu = mean_nll(ref, tokens, V);
      EXPECT_LT(std::abs(std::exp(nll_gpu - nll_cpu) - 1), 5e-3)
          << "perplexity " << std::exp(nll_gpu) << " vs " << std::exp(nll_cpu);
    }
}

TEST(CudaRunner, Fp8KvCacheMatchesTheCpuEmulation) {
  REQUIRE_CUDA();
  const auto ids = load_golden("default_eval_ids.json").at("eval_ids").get<std::vector<int32_t>>();
  const Model m =
      load_model(source_path("models/rill-shakespeare"));             // GQA 5/1: two CTAs per group
  const std::vector<int32_t> tokens(ids.begin(), ids.begin() + 500);  // within the 512 context
  check_fp8_against_cpu(m, tokens, {CachePolicy::streaming(4, 60), CachePolicy::full()},
                        {1, 37, 256}, 6e-2, 1.5e-2);
}

TEST(CudaRunner, Fp8KvCacheOnAFixtureMatchesTheCpuEmulation) {
  REQUIRE_CUDA();
  // GPT-NeoX: no GQA (the Llama-2 decode path), qkv bias, 25% rotary dims, fp16.
  const Model m = load_model(source_path("tests/fixtures/gpt_neox"));
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(200);  // within the 256 context
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % m.config.vocab_size);
  check_fp8_against_cpu(m, tokens, {CachePolicy::streaming(2, 30), CachePolicy::full()}, {1, 16},
                        0.1, 3e-2);
}

// Calibrated KV-cache scales (LayerWeights::kv_scales, a checkpoint's k_scale / v_scale): the
// default model with k and v 2048 times larger and q and o 2048 times smaller, the same function
// (exact in bf16), whose K/V (up to about 7,000) an fp8 cache with scales of 1 clips. Each layer
// gets its own scales; the CUDA engine must apply them as the CPU emulation does.
TEST(CudaRunner, Fp8KvCacheAppliesTheLayersCalibratedScales) {
  REQUIRE_CUDA();
  Model m = load_model(source_path("models/rill-shakespeare"));
  for (LayerWeights& l : m.weights.layers)
    for (auto [t, f] : {std::pair{&l.k, 2048.0f}, {&l.v, 2048.0f}, {&l.q, 1 / 2048.0f},
                        {&l.o, 1 / 2048.0f}}) {
      std::vector<float> w = t->to_f32();
      for (float& x : w) x *= f;
      *t = make_f32_tensor(t->name, t->shape, std::move(w));
    }
  const auto ids = load_golden("default_eval_ids.json").at("eval_ids").get<std::vector<int32_t>>();
  const std::vector<int32_t> tokens(ids.begin(), ids.begin() + 300);
  const CachePolicy p = CachePolicy::streaming(4, 60);
  const int V = m.config.vocab_size;
  auto cpu_logits = [&](KvCacheDType kv) {
    CpuRunner cpu(m, {.num_threads = 4, .kv_cache_dtype = kv});
    return all_logits(cpu, tokens, p, 37);
  };
  const auto exact = cpu_logits(KvCacheDType::kAuto), unscaled = cpu_logits(KvCacheDType::kFp8E4M3);
  for (size_t i = 0; i < m.weights.layers.size(); ++i)
    m.weights.layers[i].kv_scales = {.k = 24.0f + 4 * i, .v = 20.0f + 4 * i};
  const auto scaled = cpu_logits(KvCacheDType::kFp8E4M3);
  // The emulation: scales of 1 clip (the logits 0.12 of their norm away on the CPU, against the
  // 0.015 the engines may differ by), the calibrated ones only round (0.003).
  EXPECT_GT(row_errors(unscaled, exact, V).mean, 0.08);
  EXPECT_LT(row_errors(scaled, exact, V).mean, 0.01);
  check_fp8_against_cpu(m, tokens, {p, CachePolicy::full()}, {1, 37}, 6e-2, 1.5e-2);
}

TEST(CudaRunner, Fp8KvPoolHoldsTwiceTheTokens) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  int blocks16 = 0, blocks8 = 0;
  size_t bytes16 = 0, bytes8 = 0;
  {
    auto r = cuda_runner(m);
    blocks16 = r->kv().stats().blocks_total;
    bytes16 = r->kv_pool_bytes();
  }
  {
    auto r = cuda_runner(m, true, "fp8");
    blocks8 = r->kv().stats().blocks_total;
    bytes8 = r->kv_pool_bytes();
  }
  EXPECT_NEAR(double(blocks8) / blocks16, 2.0, 0.05) << blocks8 << " vs " << blocks16 << " blocks";
  EXPECT_NEAR(double(bytes8) / bytes16, 1.0, 0.05) << "the same memory budget";
}

TEST(CudaRunner, MixedStepsAndGraphsGiveTheSameTokens) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto g = load_golden("default_model.json");
  const auto cases = golden_cases(g);
  auto run = [&](bool graphs, bool mixed) {
    auto r = cuda_runner(m, graphs);
    std::vector<std::vector<int32_t>> out(cases.size());
    std::vector<int32_t> next(cases.size());
    // Sequence 0 starts decoding while the others are still prefilling (mixed steps) or not.
    for (size_t k = 0; k < cases.size(); ++k) r->add_sequence({SeqId(k), CachePolicy::streaming(4, 28), {.temperature = 0.0f}});
    for (size_t k = 0; k < cases.size(); ++k) {
      std::vector<StepInput> in{{SeqId(k), cases[k].prompt, LogitsMode::kNone, true}};
      if (mixed && k > 0) in.push_back({0, std::span<const int32_t>(&next[0], 1), LogitsMode::kNone, true});
      const auto o = r->step(in);
      next[k] = o.sampled[0];
      out[k].push_back(next[k]);
      if (mixed && k > 0) {
        next[0] = o.sampled[1];
        out[0].push_back(next[0]);
      }
    }
    for (int s = 0; s < 80; ++s) {
      std::vector<StepInput> in;
      for (size_t k = 0; k < cases.size(); ++k) in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1), LogitsMode::kNone, true});
      const auto o = r->step(in);
      for (size_t k = 0; k < cases.size(); ++k) out[k].push_back(next[k] = o.sampled[k]);
    }
    out[0].resize(60);
    for (size_t k = 1; k < cases.size(); ++k) out[k].resize(60);
    return out;
  };
  const auto eager = run(false, false);
  EXPECT_EQ(run(true, false), eager) << "CUDA graph replay must equal eager launches";
  EXPECT_EQ(run(true, true), eager) << "decoding beside prefill chunks must not change a sequence";
}

// Graphs captured at construction (CudaTuning::precapture_graphs) are those the steps would have
// captured: every replay finds its graph with the same shape (a mismatch throws kInternal), and a
// batch of 1, 3 and 16 decoding up to 500 keys (several attention splits; a ring past the
// model's 512 positions) gives the eager tokens.
TEST(CudaRunner, PrecapturedGraphsGiveTheEagerTokens) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  auto run = [&](bool graphs, bool precapture, size_t batch) {
    auto r = cuda_runner(m, graphs, "auto", {.precapture_graphs = precapture});
    std::vector<std::vector<int32_t>> out(batch);
    std::vector<int32_t> next(batch);
    for (size_t k = 0; k < batch; ++k) {
      r->add_sequence({SeqId(k), CachePolicy::streaming(4, 496), {.temperature = 0.0f}});
      StepInput in{SeqId(k), cases[k % cases.size()].prompt, LogitsMode::kNone, true};
      out[k].push_back(next[k] = r->step(std::span<const StepInput>(&in, 1)).sampled[0]);
    }
    for (int s = 0; s < 560; ++s) {
      std::vector<StepInput> in;
      for (size_t k = 0; k < batch; ++k)
        in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1), LogitsMode::kNone, true});
      const auto o = r->step(in);
      for (size_t k = 0; k < batch; ++k) out[k].push_back(next[k] = o.sampled[k]);
    }
    return out;
  };
  for (const size_t batch : {size_t{1}, size_t{3}, size_t{16}}) {
    const auto eager = run(false, false, batch);
    EXPECT_EQ(run(true, true, batch), eager) << "batch " << batch;
  }
}

// Launch modes are pure optimisations: programmatic dependent launch and CUDA graphs must leave
// every logit bit unchanged.
TEST(CudaRunner, LaunchModesChangeNoBit) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  auto logits = [&](bool pdl, bool graphs) {
    auto r = cuda_runner(m, graphs, "auto", {.programmatic_launch = pdl});
    std::vector<float> out;
    for (size_t k = 0; k < 2; ++k) {  // prompt, then 24 decode steps of batch 2 (GEMV path)
      r->add_sequence({SeqId(k), CachePolicy::full(), {.temperature = 0.0f}});
      StepInput in{SeqId(k), cases[k].prompt, LogitsMode::kLast, true};
      const auto o = r->step(std::span<const StepInput>(&in, 1));
      out.insert(out.end(), o.logits.begin(), o.logits.end());
    }
    std::vector<int32_t> next{cases[0].prompt.back(), cases[1].prompt.back()};
    for (int s = 0; s < 24; ++s) {
      std::vector<StepInput> in;
      for (size_t k = 0; k < 2; ++k)
        in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1), LogitsMode::kLast, true});
      const auto o = r->step(in);
      out.insert(out.end(), o.logits.begin(), o.logits.end());
      for (size_t k = 0; k < 2; ++k) next[k] = o.sampled[k];
    }
    kernels::set_programmatic_launch(true);
    return out;
  };
  const auto ref = logits(true, true);
  ASSERT_FALSE(ref.empty());
  EXPECT_EQ(logits(false, true), ref) << "programmatic dependent launch";
  EXPECT_EQ(logits(true, false), ref) << "eager launches";
}

// SiLU-and-mul in the gate|up GEMV's epilogue rounds exactly as the GEMV + activation kernel do:
// every logit bit is unchanged. Teacher-forced, so both runs see the same tokens.
TEST(CudaRunner, FusedDecodeMatchesUnfused) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  const int batch = 3, steps = 16, V = m.config.vocab_size;
  auto logits = [&](bool fused) {
    auto r = cuda_runner(m, true, "auto", {.fused_decode = fused});
    std::vector<std::vector<float>> rows;
    for (int k = 0; k < batch; ++k) {  // prompts: GEMM steps, then decode at batch 3 (GEMVs)
      r->add_sequence({SeqId(k), CachePolicy::full(), {.temperature = 0.0f}});
      StepInput in{SeqId(k), cases[k % cases.size()].prompt, LogitsMode::kLast, true};
      rows.push_back(r->step(std::span<const StepInput>(&in, 1)).logits);
    }
    for (int s = 0; s < steps; ++s) {
      std::vector<int32_t> next(batch);
      std::vector<StepInput> in;
      for (int k = 0; k < batch; ++k) {
        next[k] = (s * 7919 + k * 104729) % V;
        in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1), LogitsMode::kLast, true});
      }
      const auto o = r->step(in);
      for (int k = 0; k < batch; ++k)
        rows.emplace_back(o.logits.begin() + size_t(k) * V, o.logits.begin() + size_t(k + 1) * V);
    }
    return rows;
  };
  const auto fused = logits(true), plain = logits(false);
  ASSERT_EQ(fused.size(), size_t(batch * (steps + 1)));
  for (size_t i = 0; i < fused.size(); ++i) {
    ASSERT_EQ(fused[i].size(), size_t(V));
    EXPECT_EQ(fused[i], plain[i]) << "row " << i;
  }
}

// RoPE, the bias and the newest K/V write inside decode attention round exactly as the RoPE +
// K/V-write kernel does: every logit and token is unchanged, for the default model and every
// fixture (GQA, RoPE scaling, QKV bias, partial rotary), with StreamingLLM sinks and rings that
// wrap, 16-bit and fp8 caches, on the CUDA-core decode kernel and (GQA groups of 4 to 8) on the
// tensor-core one. Teacher-forced decode steps return logits (eager launches), then greedy steps
// replay CUDA graphs.
TEST(CudaRunner, RopeInAttentionChangesNoBit) {
  REQUIRE_CUDA();
  std::vector<std::string> models = {"models/rill-shakespeare"};
  for (const std::string& f : testing::fixture_names()) models.push_back("tests/fixtures/" + f);
  for (const std::string& path : models) {
    const Model m = load_model(source_path(path));
    const int V = m.config.vocab_size, batch = 2, steps = 10;
    for (const int mma : {0, 1}) {
      for (const char* kv : {"auto", "fp8"}) {
        SCOPED_TRACE(path + " kv " + kv + " decode_mma " + std::to_string(mma));
        auto run = [&](bool fused) {
          // Each kernel against itself (decode_mma 1 falls back to the CUDA-core kernel where the
          // tensor-core one does not take the shapes).
          auto r = cuda_runner(
              m, true, kv,
              {.rope_in_attention = fused ? RopeInAttention::kOn : RopeInAttention::kOff,
               .decode_mma = mma});
          std::vector<std::vector<float>> rows;
          std::vector<int32_t> next(batch);
          for (int k = 0; k < batch; ++k) {
            r->add_sequence({SeqId(k), CachePolicy::streaming(2, 7), {.temperature = 0.0f}});
            std::vector<int32_t> prompt(4 + 5 * k);
            for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((k * 31 + i * 17) % V);
            StepInput in{SeqId(k), prompt, LogitsMode::kLast, true};
            rows.push_back(r->step(std::span<const StepInput>(&in, 1)).logits);
          }
          for (int s = 0; s < 2 * steps; ++s) {
            const bool forced = s < steps;
            std::vector<StepInput> in;
            for (int k = 0; k < batch; ++k) {
              if (forced) next[k] = (s * 7919 + k * 104729) % V;
              in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1),
                            forced ? LogitsMode::kLast : LogitsMode::kNone, true});
            }
            const StepOutput o = r->step(in);
            if (forced) rows.push_back(o.logits);
            rows.push_back(std::vector<float>(o.sampled.begin(), o.sampled.end()));
            if (!forced) next = o.sampled;
          }
          return rows;
        };
        const auto fused = run(true), plain = run(false);
        ASSERT_EQ(fused.size(), plain.size());
        for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], plain[i]) << "row " << i;
      }
    }
  }
}

// Decode attention's split count (automatic: 1 up to 256 keys, then more) only changes the
// order in which fp32 partial sums meet; issuing the K/V loads before the dependency wait, or
// merging the splits through global memory instead of a cluster, changes no bit. Teacher-forced
// from a prompt across 256 keys, so the automatic count changes midway.
TEST(CudaRunner, DecodeSplitsChangeOnlyRounding) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  const int V = m.config.vocab_size, steps = 300;
  auto logits = [&](int splits, bool early, bool cluster = true) {
    auto r = cuda_runner(m, true, "auto",
                         {.decode_splits = splits, .early_kv_loads = early, .cluster_merge = cluster});
    r->add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
    StepInput in{1, cases[0].prompt, LogitsMode::kLast, true};
    std::vector<float> out = r->step(std::span<const StepInput>(&in, 1)).logits;
    for (int s = 0; s < steps; ++s) {
      const int32_t next = (s * 7919 + 13) % V;
      StepInput d{1, std::span<const int32_t>(&next, 1), LogitsMode::kLast, true};
      const auto o = r->step(std::span<const StepInput>(&d, 1));
      out.insert(out.end(), o.logits.begin(), o.logits.end());
    }
    return out;
  };
  const auto automatic = logits(0, true);
  ASSERT_EQ(automatic.size(), size_t(V) * (steps + 1));
  EXPECT_EQ(logits(0, false), automatic) << "K/V loads after the dependency wait";
  EXPECT_EQ(logits(0, true, false), automatic) << "splits merged through the workspace";
  const auto one = logits(1, true);
  for (int splits : {2, 5, 16}) {
    const RowErrors e = row_errors(logits(splits, true), one, V);
    // bf16 attention outputs: a different summation order moves some by one rounding step.
    EXPECT_LT(e.worst, 1e-2) << splits << " splits";
    EXPECT_LT(e.mean, 2e-3) << splits << " splits";
  }
  const RowErrors e = row_errors(automatic, one, V);
  EXPECT_LT(e.worst, 1e-2) << "automatic";
}

// Where the decode GEMVs keep their weights (a shared-memory ring of any depth or registers) and
// the shared-memory carveout change speed only: the logits of two sequences decoding side by side
// stay bit-identical.
TEST(CudaRunner, GemvStagingAndCarveoutChangeNothing) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  const int V = m.config.vocab_size, steps = 100;
  // ring_stages > 0: every projection's GEMV forced to a ring of that depth (16 warps, as the
  // default shapes).
  auto logits = [&](int deep_mask, int carveout, int ring_stages = 0) {
    kernels::set_smem_carveout(carveout);
    CudaTuning t{.gemv_deep_mask = deep_mask};
    for (int p = CudaTuning::kQkv; ring_stages > 0 && p <= CudaTuning::kDown; p *= 2)
      t.projection_config(p) = kernels::gemv_ring_config(16, ring_stages);
    auto r = cuda_runner(m, true, "auto", t);
    std::vector<float> out;
    for (SeqId id : {1, 2}) {
      r->add_sequence({id, CachePolicy::full(), {.temperature = 0.0f}});
      StepInput in{id, cases[0].prompt, LogitsMode::kLast, true};
      r->step(std::span<const StepInput>(&in, 1));
    }
    for (int s = 0; s < steps; ++s) {
      const int32_t next[2] = {(s * 7919 + 13) % V, (s * 104729 + 7) % V};
      const StepInput d[2] = {{1, std::span<const int32_t>(&next[0], 1), LogitsMode::kLast, true},
                              {2, std::span<const int32_t>(&next[1], 1), LogitsMode::kLast, true}};
      const auto o = r->step(std::span<const StepInput>(d, 2));
      out.insert(out.end(), o.logits.begin(), o.logits.end());
    }
    kernels::set_smem_carveout(-1);
    return out;
  };
  const auto ring = logits(CudaTuning::kAllProjections, -1);
  ASSERT_EQ(ring.size(), size_t(2) * V * steps);
  EXPECT_EQ(logits(0, -1), ring) << "register-buffered GEMVs";
  EXPECT_EQ(logits(CudaTuning::kQkv | CudaTuning::kDown, -1), ring) << "mixed";
  EXPECT_EQ(logits(CudaTuning::kAllProjections, 72), ring) << "carveout 72%";
  for (int stages : {3, 5, 6}) {
    ASSERT_GE(kernels::gemv_ring_config(16, stages), 0) << stages;
    EXPECT_EQ(logits(CudaTuning::kAllProjections, -1, stages), ring) << "rings of " << stages;
  }
}

// A tuning given at construction and the same tuning set later (set_tuning drops the graphs
// captured before) give the same logits; a tuning out of range is refused whole, at construction
// or by set_tuning, and leaves the runner as it was.
TEST(CudaRunner, SetTuningEqualsConstructionAndValidates) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  const int V = m.config.vocab_size;
  const CudaTuning other{.fused_decode = false, .decode_splits = 2, .cluster_merge = false};
  auto run = [&](CudaRunner& r, SeqId id) {  // prompt, then 8 teacher-forced decode steps
    r.add_sequence({id, CachePolicy::full(), {.temperature = 0.0f}});
    StepInput in{id, cases[0].prompt, LogitsMode::kLast, true};
    std::vector<float> out = r.step(std::span<const StepInput>(&in, 1)).logits;
    for (int s = 0; s < 8; ++s) {
      const int32_t next = (s * 7919 + 13) % V;
      StepInput d{id, std::span<const int32_t>(&next, 1),
                  s % 2 ? LogitsMode::kLast : LogitsMode::kNone, true};
      const auto o = r.step(std::span<const StepInput>(&d, 1));
      out.insert(out.end(), o.logits.begin(), o.logits.end());
    }
    r.remove_sequence(id);
    return out;
  };
  const auto want = run(*cuda_runner(m, true, "auto", other), 1);
  auto r = cuda_runner(m);
  EXPECT_TRUE(r->tuning() == CudaTuning{});
  run(*r, 1);  // captures graphs with the default tuning
  r->set_tuning(other);
  EXPECT_TRUE(r->tuning() == other);
  EXPECT_EQ(run(*r, 2), want);

  CudaTuning bad;
  bad.gemv_deep_mask = CudaTuning::kAllProjections + 1;
  EXPECT_THROW(r->set_tuning(bad), Error);
  bad = {};
  bad.projection_config(CudaTuning::kO) = kernels::gemv_num_configs();
  EXPECT_THROW(r->set_tuning(bad), Error);
  bad = {};
  bad.fp8_gemv_deep_mask = -2;
  EXPECT_THROW(r->set_tuning(bad), Error);
  bad = {};
  bad.fp8_gemv_deep_config = kernels::gemv_fp8_num_configs();
  EXPECT_THROW(r->set_tuning(bad), Error);
  bad = {};
  bad.decode_splits = 17;
  EXPECT_THROW(r->set_tuning(bad), Error);
  EXPECT_TRUE(r->tuning() == other);
  try {
    cuda_runner(m, true, "auto", bad);
    ADD_FAILURE() << "a runner with 17 decode splits";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
  }
}

// The runner checks the model itself, before any GPU work (so this runs without a GPU too): a
// head_dim its kernels do not take is kUnsupported at construction, naming the value and the
// supported set, never a kernel error at the first request.
TEST(CudaRunner, RefusesAnUnsupportedHeadDimAtConstruction) {
  ModelConfig c = testing::tiny_llama_config();  // llama2.c-sized: head_dim 8
  c.hidden_size = 32;
  c.num_heads = c.num_kv_heads = 4;
  c.head_dim = c.rope.rotary_dim = 8;
  EngineOptions o;
  o.device = "cuda";
  try {
    CudaRunner r(testing::random_model(c), o);
    ADD_FAILURE() << "a head_dim 8 model was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("head_dim=8 (supported: 64, 80, 96, 128)"),
              std::string::npos)
        << e.what();
  }
}

// One small random model of every shape class the CUDA runner accepts: head_dim (64, 80, 96, 128)
// x GQA ratio (1, 2, 4, 8) x dtype (fp16, bf16), with full or partial rotary dims (0.5 or 0.25:
// Llama-style or GPT-NeoX-style layers), a QKV bias or not, and hidden sizes 136 or 132 spread over
// them, so that each head dim meets each. Weights are representable in the dtype, so the CPU runner computes with exactly
// the weights the GPU holds.
struct SweepCase {
  int head_dim, ratio;
  DType dtype;
  double rotary;  // fraction of head_dim
  bool neox, qkv_bias;
  int hidden;
  std::string describe() const {
    return "head_dim " + std::to_string(head_dim) + " GQA " + std::to_string(ratio) + " " +
           dtype_name(dtype) + " rotary " + std::to_string(rotary) +
           (neox ? " GPT-NeoX" : " Llama") + (qkv_bias ? " qkv bias" : "") + " hidden " +
           std::to_string(hidden);
  }
};

std::vector<SweepCase> sweep_cases() {
  std::vector<SweepCase> v;
  for (int d : {64, 80, 96, 128})
    for (int ri = 0; ri < 4; ++ri)
      for (DType t : {DType::kF16, DType::kBF16}) {
        const bool bf16 = t == DType::kBF16, partial = ri % 2 == 1;
        v.push_back({d, 1 << ri, t, partial ? (bf16 ? 0.25 : 0.5) : 1.0, partial && bf16,
                     (ri / 2 == 0) != bf16, partial ? 132 : 136});
      }
  return v;
}

ModelConfig sweep_config(const SweepCase& k) {
  ModelConfig c = testing::tiny_llama_config();
  c.vocab_size = 97;
  // 136: a multiple of 8, not 16; 132: not of 8 either, so the norms and the embedding take their
  // scalar paths and GEMMs over the hidden size go to cuBLAS.
  c.hidden_size = k.hidden;
  c.intermediate_size = 200;
  c.num_kv_heads = 2;
  c.num_heads = 2 * k.ratio;
  c.head_dim = k.head_dim;
  c.rope.rotary_dim = static_cast<int>(k.head_dim * k.rotary);
  c.tie_word_embeddings = false;
  c.qkv_bias = k.qkv_bias;
  c.stored_dtype = k.dtype;
  if (k.neox) {  // LayerNorm, parallel residual, plain GELU MLP with biases
    c.architecture = "GPTNeoXForCausalLM";
    c.arch = Arch::kGptNeoX;
    c.norm = NormKind::kLayerNorm;
    c.act = Activation::kGeluErf;
    c.gated_mlp = false;
    c.parallel_residual = true;
    c.o_bias = c.mlp_bias = true;
  }
  return c;
}

// Every case loads (no kUnsupported), runs a two-chunk prefill and decode steps (eager with logits,
// then graph replays) without a kernel error, and its logits follow the CPU runner within
// check_golden's tolerances. GQA ratios 1 and 8 force RoPE into decode attention where the shape
// allows it (rotary_dim / 2 a multiple of 8), the others keep the runner's rule.
TEST(CudaRunner, SupportedShapeSweepMatchesTheCpu) {
  REQUIRE_CUDA();
  for (const SweepCase& k : sweep_cases()) {
    SCOPED_TRACE(k.describe());
    const ModelConfig c = sweep_config(k);
    ASSERT_EQ(cuda_unsupported_reason(c, k.dtype), std::nullopt);
    const Model m = testing::random_model(
        c, {.seed = static_cast<uint32_t>(k.head_dim + k.ratio), .fan_in_scaled = true,
            .representable = k.dtype});
    EngineOptions o;
    o.device = "cuda";
    o.max_batch = 4;
    o.max_step_tokens = 256;
    o.gpu_memory_fraction = 0.1;
    o.cuda_tuning.rope_in_attention =
        k.ratio == 1 || k.ratio == 8 ? RopeInAttention::kOn : RopeInAttention::kAuto;
    std::unique_ptr<CudaRunner> gpu;
    ASSERT_NO_THROW(gpu = std::make_unique<CudaRunner>(m, o));
    CpuRunner cpu(m, {.num_threads = 4});
    const double tol = k.dtype == DType::kBF16 ? 4e-2 : 1e-2;
    std::vector<int32_t> tokens(80);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 31 + k.head_dim) % 97);
    const int V = c.vocab_size;
    for (ModelRunner* r : {static_cast<ModelRunner*>(gpu.get()), static_cast<ModelRunner*>(&cpu)})
      r->add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
    // Prefill in chunks of 64 and 16 (the second attends to the cache), all rows' logits.
    for (int pos : {0, 64}) {
      const int n = pos == 0 ? 64 : 16;
      StepInput in{1, std::span<const int32_t>(tokens.data() + pos, n), LogitsMode::kAll, true};
      StepOutput got;
      ASSERT_NO_THROW(got = gpu->step(std::span<const StepInput>(&in, 1)));
      const StepOutput ref = cpu.step(std::span<const StepInput>(&in, 1));
      const RowErrors e = row_errors(got.logits, ref.logits, V);
      EXPECT_LT(e.worst, tol) << "prefill chunk at " << pos;
    }
    // Decode steps with logits (eager), then steps replayed from CUDA graphs.
    for (int s = 0; s < 6; ++s) {
      const int32_t next = (s * 7919 + k.ratio) % V;
      const bool logits = s < 3;
      StepInput in{1, std::span<const int32_t>(&next, 1),
                   logits ? LogitsMode::kLast : LogitsMode::kNone, true};
      StepOutput got;
      ASSERT_NO_THROW(got = gpu->step(std::span<const StepInput>(&in, 1))) << "decode " << s;
      const StepOutput ref = cpu.step(std::span<const StepInput>(&in, 1));
      ASSERT_EQ(got.sampled.size(), 1u);
      EXPECT_GE(got.sampled[0], 0);
      EXPECT_LT(got.sampled[0], V);
      if (logits) {
        EXPECT_LT(row_errors(got.logits, ref.logits, V).worst, tol) << "decode " << s;
      }
    }
  }
}

#else
TEST(CudaRunner, BuiltWithoutCuda) { GTEST_SKIP() << "built without CUDA: CUDA runner tests skipped"; }
#endif

}  // namespace
}  // namespace rill
