// fp8 weights on the CUDA runner (GPU; skips visibly without one):
//   - the fp8 GEMM path (activations quantized, cuBLASLt e4m3 x e4m3) against an fp64 reference
//     on the same quantized operands, per-row and 128-column scales: this pins cuBLASLt's scale
//     layouts; and the GEMV path and the 16-row-tile fallback against the weight-only reference;
//   - the runner on each fp8 fixture and on the default model quantized at load against the CPU
//     engine on the same weights, emulating the W8A8 GEMMs' e4m3 activations: logits within the
//     tolerances below (bf16 compute), greedy tokens equal wherever the CPU's top-2 margin
//     exceeds what that error can flip; batches across the GEMV / GEMM switch; CUDA graphs on and
//     off give identical logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "engine/cpu/cpu_runner.h"
#include "engine/model/fp8.h"
#include "engine/model/model.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/fp8_runs.h"
#include "tests/engine/golden.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/gemm.h"
#endif

namespace rill {
namespace {

using testing::source_path;

// Relative L2 error of a logits row against the CPU's, the CPU emulating the W8A8 GEMMs' e4m3
// activations in the steps that take them (CpuRunnerOptions::fp8_activation_rows). Two parts:
// - bf16 compute: the fixtures (random weights of large magnitude) land near 3e-2 for 16-bit
//   weights (cuda_runner_test.cc; fp8_ct_channel with --quantization none: 0.033 prefill, 0.030
//   decode on H100); fp8 weights are the CPU's exactly, so the weight-only GEMV adds nothing.
//   kPrefillTol and kDecodeTol bound this part.
// - flip noise: the GPU quantizes activations its bf16 compute has moved by a few bf16 ulps, and
//   e4m3 rounding is discontinuous, so elements near a rounding boundary take the other
//   neighbour (fp8_runs.h). No emulation can reproduce that: two CPU emulations whose
//   activations differ by at most one bf16 ulp (jitter 2^-8, 4 seeds) already differ by 0.31 /
//   0.16 (fp8_ct_channel, batch 1, prefill / decode), 0.39 / 0.16 (fp8_ct_tensor) and 0.31 /
//   0.34 (fp8_block) in a row's logits (Fp8FlipNoise tests), and even at 2^-12 of a value by
//   0.13-0.27, against 0.03 / 0.01 on the trained default model; the H100 differed from the exact
//   emulation by 0.14-0.28 / 0.08-0.26 at d30f7db. The GPU's rows may differ by that measured
//   spread on top of the bf16 part. The quantization itself is pinned exactly by the GEMM tests
//   above (W8A8GemmMatchesTheQuantizedReference: fp64 on the same e4m3 operands), which the
//   model-level comparison cannot do on a chaotic random model.
constexpr double kDecodeTol = 5e-2, kPrefillTol = 1e-1;
// A greedy step is compared only where the CPU's top-1 margin exceeds this (logits of order 10:
// a few % of error can move them by a few tenths).
constexpr double kMarginOk = 0.5;
// Jittered emulations that measure the flip noise (pairwise: 6 pairs).
constexpr int kFlipSeeds = 4;

double top2_margin(const float* row, int n) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < n; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return double(a) - b;
}

#ifdef RILL_HAVE_CUDA

// ---------------------------------------------------------------------------------------------
// The GEMM paths, through cuda::Gemm as the runner calls it.
// ---------------------------------------------------------------------------------------------

struct HostFp8 {
  int N, K;
  bool block;
  std::vector<uint8_t> bytes;
  std::vector<float> scale;  // [N] or [ceil(K / 128), N]
  float value(int n, int k) const {
    return fp8::e4m3_to_float(bytes[size_t(n) * K + k]) *
           (block ? scale[size_t(k / 128) * N + n] : scale[n]);
  }
};

HostFp8 random_fp8(int N, int K, bool block, std::mt19937& rng) {
  HostFp8 w{N, K, block, std::vector<uint8_t>(size_t(N) * K), {}};
  std::normal_distribution<float> d(0.0f, 100.0f);
  for (uint8_t& b : w.bytes) b = fp8::e4m3_from_float(d(rng));
  std::uniform_real_distribution<float> e(-10.0f, -6.0f);
  w.scale.resize(block ? size_t((K + 127) / 128) * N : size_t(N));
  for (float& s : w.scale) s = std::exp2(e(rng));
  return w;
}

// x as the W8A8 GEMM sees it: e4m3(x / s) * s, s per token (or per token and 128 columns).
std::vector<float> quantized_x(const std::vector<float>& x, int M, int K, bool group,
                               float static_scale) {
  std::vector<float> out(x.size());
  const int span = group ? 128 : K;
  for (int m = 0; m < M; ++m)
    for (int c0 = 0; c0 < K; c0 += span) {
      const int c1 = std::min(K, c0 + span);
      float amax = 0;
      for (int c = c0; c < c1; ++c) amax = std::max(amax, std::abs(x[size_t(m) * K + c]));
      const float s = static_scale > 0 ? static_scale : amax > 0 ? amax / 448.0f : 1.0f;
      for (int c = c0; c < c1; ++c)
        out[size_t(m) * K + c] =
            fp8::e4m3_to_float(fp8::e4m3_from_float(x[size_t(m) * K + c] / s)) * s;
    }
  return out;
}

struct GemmCase {
  int M, N, K;
  bool block;
  float static_scale = 0;   // > 0: the layer's input_scale
  bool y_f32 = false;       // fp32 output (an fp8 LM head) instead of bf16
  bool fast_accum = false;  // cuBLASLt's fast accumulation (Gemm::set_fp8_fast_accum)
};

// kGemm: every row through the W8A8 GEMM; kLeadingRows: the leading rows cuBLASLt takes (all, or
// M rounded down to a multiple of 4 .. 128), the rest through the GEMV; kGemv: none.
enum class Path { kGemm, kLeadingRows, kGemv, kEither };

// y = x w^T through Gemm::run on bf16 x, against an fp64 reference on the operands the path
// sees (x quantized for the W8A8 GEMM, as it is for the GEMV).
void check_gemm(const GemmCase& c, Path path, std::mt19937& rng) {
  SCOPED_TRACE("M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
               " K=" + std::to_string(c.K) + (c.block ? " block128" : " per-row") +
               (c.static_scale > 0 ? " static" : "") + (c.y_f32 ? " y_f32" : "") +
               (c.fast_accum ? " fast_accum" : ""));
  const HostFp8 w = random_fp8(c.N, c.K, c.block, rng);
  std::vector<float> x(size_t(c.M) * c.K);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(d(rng)));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    cuda::Gemm gemm(kernels::DType::kBF16, stream);
    gemm.reserve_fp8(std::max(c.M, 1), c.K);
    gemm.set_fp8_fast_accum(c.fast_accum);
    cuda::DeviceMemory d_w(w.bytes.size()), d_s(w.scale.size() * 4), d_x(x.size() * 2),
        d_y(size_t(c.M) * c.N * 4), d_in(4);
    std::vector<uint16_t> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]);
    RILL_CUDA(cudaMemcpy(d_w.get(), w.bytes.data(), w.bytes.size(), cudaMemcpyHostToDevice));
    RILL_CUDA(cudaMemcpy(d_s.get(), w.scale.data(), w.scale.size() * 4, cudaMemcpyHostToDevice));
    RILL_CUDA(cudaMemcpy(d_x.get(), xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
    RILL_CUDA(cudaMemcpy(d_in.get(), &c.static_scale, 4, cudaMemcpyHostToDevice));
    cuda::DeviceLinear lin;
    lin.w = d_w.get();
    lin.scale = d_s.as<float>();
    lin.scale_layout =
        c.block ? kernels::Fp8ScaleLayout::kBlock128 : kernels::Fp8ScaleLayout::kPerRow;
    if (c.static_scale > 0) lin.input_scale = d_in.as<float>();
    const int gemm_rows = gemm.fp8_gemm_rows(d_x.get(), lin, c.M, c.N, c.K, c.y_f32);
    std::printf("  M=%d N=%d K=%d %s: %d rows through the W8A8 GEMM, %d through the GEMV\n", c.M,
                c.N, c.K, c.block ? "block128" : "per-row", gemm_rows, c.M - gemm_rows);
    if (path == Path::kGemm) {
      EXPECT_EQ(gemm_rows, c.M);
    }
    if (path == Path::kGemv) {
      EXPECT_EQ(gemm_rows, 0);
    }
    if (path == Path::kLeadingRows) {
      EXPECT_TRUE(gemm_rows == c.M || (gemm_rows % 4 == 0 && c.M - gemm_rows < 128)) << gemm_rows;
    }
    gemm.run(d_x.get(), lin, d_y.get(), c.M, c.N, c.K, c.y_f32);
    RILL_CUDA(cudaStreamSynchronize(stream));
    std::vector<float> got(size_t(c.M) * c.N);
    if (c.y_f32) {
      RILL_CUDA(cudaMemcpy(got.data(), d_y.get(), got.size() * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> yb(got.size());
      RILL_CUDA(cudaMemcpy(yb.data(), d_y.get(), yb.size() * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < yb.size(); ++i) got[i] = bf16_to_f32(yb[i]);
    }
    const std::vector<float> xq =
        quantized_x(x, c.M, c.K, c.block, c.block ? 0.0f : c.static_scale);
    double worst = 0;
    for (int m = 0; m < c.M; ++m)
      for (int n = 0; n < c.N; ++n) {
        const bool gemm_path = m < gemm_rows;
        const std::vector<float>& xs = gemm_path ? xq : x;
        double want = 0, sum_abs = 0;
        for (int k = 0; k < c.K; ++k) {
          const double p = double(xs[size_t(m) * c.K + k]) * w.value(n, k);
          want += p;
          sum_abs += std::abs(p);
        }
        // Accumulation error in units of the sum of |products|: fp32 in the GEMV; in Hopper's
        // fp8 MMA about 14 bits between cuBLASLt's promotions to fp32 (DeepSeek-V3, section
        // 3.3.2); with fast accumulation, no promotions: those bits over the whole of K. Plus
        // the bf16 rounding of y. A wrong scale layout misses by O(1).
        const double acc = !gemm_path ? 1e-5 : c.fast_accum ? 2e-3 : 1e-4;
        const double allowed = acc * sum_abs + (c.y_f32 ? 0.0 : std::abs(want) * 0x1p-8);
        worst = std::max(worst, std::abs(got[size_t(m) * c.N + n] - want) / (allowed + 1e-30));
      }
    std::printf("    worst error %.3f of the allowed %s\n", worst,
                c.fast_accum ? "(fast accumulation)" : "");
    EXPECT_LE(worst, 1.0) << "worst error in units of the allowed error";
  }
  cudaStreamDestroy(stream);
}

TEST(CudaFp8Gemm, W8A8GemmMatchesTheQuantizedReference) {
  REQUIRE_CUDA();
  std::mt19937 rng(71);
  for (const GemmCase& c : {GemmCase{17, 256, 128, false},
                            {64, 384, 4096, false},
                            {300, 272, 1024, false},
                            {128, 256, 4096, true},
                            {40, 256, 512, false, 0.01f}})
    check_gemm(c, Path::kGemm, rng);
  // Block scales at M = 33: cuBLASLt 13.1 on H100 has no algorithm for all 33 rows; the leading
  // rows it takes (if any) and the GEMV the rest, each against its own reference.
  check_gemm({33, 512, 256, true}, Path::kLeadingRows, rng);
  check_gemm({131, 256, 1024, true}, Path::kLeadingRows, rng);
  // fp32 output (LM heads the checkpoint quantized): the GEMM where cuBLASLt has one, else tiles.
  check_gemm({48, 512, 1024, false, 0, true}, Path::kEither, rng);
  check_gemm({48, 512, 1024, true, 0, true}, Path::kEither, rng);
  // Fast accumulation (CudaTuning::fp8_fast_accum; per-row scales only, block-scaled weights keep
  // the default): K up to Llama-3-8B's 14,336.
  for (const GemmCase& c :
       {GemmCase{64, 384, 4096, false, 0, false, true}, {256, 256, 14336, false, 0, false, true}})
    check_gemm(c, Path::kGemm, rng);
}

TEST(CudaFp8Gemm, GemvAndFallbackMatchTheWeightOnlyReference) {
  REQUIRE_CUDA();
  std::mt19937 rng(72);
  for (const GemmCase& c :
       {GemmCase{1, 256, 128, false}, {16, 300, 4096, true}, {9, 48, 1024, false}})
    check_gemm(c, Path::kGemv, rng);
  check_gemm({40, 256, 80, true}, Path::kGemv, rng);  // block scales, K % 128 != 0: 16-row tiles
}

// ---------------------------------------------------------------------------------------------
// The runner against the CPU engine.
// ---------------------------------------------------------------------------------------------

using testing::Fp8Distance;
using testing::Fp8FlipNoise;
using testing::Fp8Rows;

// What compare() runs besides the model and the quantization.
struct RunSetup {
  CudaTuning tuning;
  std::string kv_cache_dtype = "auto";
  CachePolicy policy = CachePolicy::full();
};

// CPU options emulating the runner's W8A8 GEMMs: the steps of more than fp8_gemv_max_rows tokens,
// and of those the rows cuBLASLt takes on this GPU at the rows the runner runs the GEMM at (its
// layers' rounded up to the runner's bucket in steps with prefill: Gemm::padded_rows; the LM
// head's as they are), asked of a Gemm set up like the runner's (every model here computes in
// bf16; the LM head writes fp32). The heuristic only: the pointers are never read. `probe` keeps
// the Gemm alive.
CpuRunnerOptions emulating_options(const Model& m, const EngineOptions& o, const CudaRunner& gpu,
                                   const CpuRunnerOptions& plain, cudaStream_t stream,
                                   std::shared_ptr<cuda::Gemm>& probe) {
  CpuRunnerOptions emulating = plain;
  emulating.fp8_activation_rows = o.cuda_tuning.fp8_gemv_max_rows;
  probe = std::make_shared<cuda::Gemm>(kernels::DType::kBF16, stream);
  const int bucket = gpu.prefill_token_granularity();
  probe->reserve_fp8(
      std::max((gpu.max_step_tokens() + bucket - 1) / bucket * bucket, o.max_batch + 8),
      std::max({m.config.hidden_size, m.config.q_dim(), m.config.intermediate_size}));
  probe->set_fp8_gemv_max_rows(o.cuda_tuning.fp8_gemv_max_rows);
  probe->set_gemv_enabled(o.cuda_tuning.gemv);
  emulating.fp8_gemm_rows = [gemm = probe.get(), bucket](const Fp8GemmQuery& q) {
    const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
    cuda::DeviceLinear lin;
    lin.w = aligned;
    lin.scale = static_cast<const float*>(aligned);
    lin.scale_layout =
        q.block ? kernels::Fp8ScaleLayout::kBlock128 : kernels::Fp8ScaleLayout::kPerRow;
    const int T = int(q.rows), n = int(q.n), k = int(q.k);
    const int M = q.lm_head ? T : gemm->padded_rows(T, q.prefill, bucket, aligned, lin, k);
    return int64_t{gemm->fp8_gemm_rows(aligned, lin, M, n, k, q.lm_head)};
  };
  return emulating;
}

// CUDA against CPU on `m` (quantization `quant`), a batch of `batch` prompts of ~`len` tokens and
// `steps` teacher-forced decode steps (the emulating CPU's greedy tokens). Every logits row of
// the GPU must be within the bf16 tolerance plus the emulation's flip noise (fp8_runs.h) of the
// emulating CPU's; greedy tokens equal where the CPU's margin exceeds kMarginOk and its flip
// noise leaves the top-1 token alone. Returns the worst decode error.
double compare(const Model& m, const std::string& quant, int batch, int len, int steps,
               const RunSetup& setup = {}) {
  const int V = m.config.vocab_size;
  EngineOptions o;
  o.device = "cuda";
  o.max_batch = 32;
  o.max_step_tokens = 2048;
  o.gpu_memory_fraction = 0.3;
  o.quantization = quant;
  o.cuda_tuning = setup.tuning;
  o.kv_cache_dtype = setup.kv_cache_dtype;
  CudaRunner gpu(m, o);
  const CpuRunnerOptions plain{.num_threads = 4,
                               .kv_cache_dtype = parse_kv_cache_dtype(setup.kv_cache_dtype),
                               .quantization = resolve_quantization(quant, m.config.quant)};
  cudaStream_t probe_stream;
  RILL_CUDA(cudaStreamCreate(&probe_stream));
  std::shared_ptr<cuda::Gemm> probe;
  const CpuRunnerOptions emulating = emulating_options(m, o, gpu, plain, probe_stream, probe);
  const auto prompts = testing::fp8_prompts(m, batch, len);
  CpuRunner cpu(m, emulating), cpu_plain(m, plain);
  const auto tokens = testing::fp8_greedy_tokens(cpu, prompts, steps, setup.policy);
  const Fp8Rows ref = testing::run_fp8_rows(cpu, prompts, tokens, setup.policy);
  const Fp8Rows got = testing::run_fp8_rows(gpu, prompts, tokens, setup.policy);
  // What fp8 activations cost (the emulating CPU against the plain one), and the emulation's
  // flip noise at one bf16 ulp: zero where no step takes fp8 activations.
  const Fp8Distance cost = testing::fp8_distance(
      ref, testing::run_fp8_rows(cpu_plain, prompts, tokens, setup.policy), V);
  const Fp8FlipNoise noise = testing::fp8_flip_noise(m, emulating, prompts, tokens, setup.policy,
                                                     testing::kBf16Jitter, kFlipSeeds);
  probe.reset();
  cudaStreamDestroy(probe_stream);
  const Fp8Distance err = testing::fp8_distance(got, ref, V);
  for (int step = 0; step < steps; ++step)
    for (int s = 0; s < batch; ++s) {
      const float* g = got.decode[step].data() + size_t(s) * V;
      const float* c = ref.decode[step].data() + size_t(s) * V;
      if (top2_margin(c, V) > kMarginOk && noise.top1_stable[step][s]) {
        EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(c, c + V) - c)
            << "seq " << s << " step " << step;
      }
    }
  const double prefill_tol = kPrefillTol + noise.spread.prefill;
  const double decode_tol = kDecodeTol + noise.spread.decode;
  std::printf(
      "  %s, quantization %s, batch %d: relative L2 error of logits (worst row): prefill %.4f, "
      "decode %.4f; tolerance %.4f, %.4f (bf16 + flip noise: CPU emulations one bf16 ulp apart "
      "differ by %.4f, %.4f); fp8 activations alone, CPU: prefill %.4f, decode %.4f\n",
      m.path.filename().c_str(), quant.c_str(), batch, err.prefill, err.decode, prefill_tol,
      decode_tol, noise.spread.prefill, noise.spread.decode, cost.prefill, cost.decode);
  EXPECT_LT(err.prefill, prefill_tol);
  EXPECT_LT(err.decode, decode_tol);
  return err.decode;
}

TEST(CudaFp8, FixturesMatchTheCpuEngine) {
  REQUIRE_CUDA();
  for (const char* name : {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"}) {
    SCOPED_TRACE(name);
    const Model m = load_model(source_path(std::string("tests/fixtures/") + name));
    compare(m, "auto", 1, 40, 8);   // decode through the GEMV
    compare(m, "auto", 20, 24, 4);  // decode batches through the W8A8 GEMM
  }
}

TEST(CudaFp8, DefaultModelQuantizedAtLoadMatchesTheCpuEngine) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  compare(m, "fp8", 4, 64, 8);
  RunSetup all_gemm;
  all_gemm.tuning.fp8_gemv_max_rows = 0;  // every step through the W8A8 GEMM
  compare(m, "fp8", 4, 64, 4, all_gemm);
}

// The W8A8 GEMMs with and without cuBLASLt's fast accumulation (CudaTuning::fp8_fast_accum, on
// by default) within the same tolerance of the CPU engine: every step through the GEMM; per-row
// scales (block-scaled weights keep the promoting accumulation: fp8_block checks that the switch
// leaves them alone).
TEST(CudaFp8, BothAccumulationModesMatchTheCpuEngine) {
  REQUIRE_CUDA();
  for (const bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "fast accumulation" : "promoted accumulation");
    RunSetup s;
    s.tuning.fp8_fast_accum = fast;
    s.tuning.fp8_gemv_max_rows = 0;
    compare(load_model(source_path("models/rill-shakespeare")), "fp8", 4, 64, 4, s);
    for (const char* name : {"fp8_ct_channel", "fp8_block"}) {
      SCOPED_TRACE(name);
      compare(load_model(source_path(std::string("tests/fixtures/") + name)), "auto", 20, 24, 4, s);
    }
  }
}

// fp8 weights with the fp8 KV cache and StreamingLLM caches (sinks + a window the decode steps
// wrap around), against the CPU emulating the same cache.
TEST(CudaFp8, CombinesWithFp8KvAndStreamingCaches) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  RunSetup s;
  s.kv_cache_dtype = "fp8";
  compare(m, "fp8", 3, 40, 6, s);
  s.policy = CachePolicy::streaming(4, 36);
  compare(m, "fp8", 3, 40, 12, s);
}

// A mixed step whose token count is no multiple of the runner's GEMM row bucket: three sequences
// decoding beside a 37-token prompt (40 rows, the fp8 GEMMs' rounded up to 64, or 128 with block
// scales). Returns its logits (the decode rows, then every position of the prompt). With `junk`,
// another sequence's 120-token prompt runs (and goes) just before it, leaving its activations in
// the scratch rows the mixed step's GEMMs run over.
std::vector<float> mixed_step_logits(ModelRunner& r, const Model& m, bool junk) {
  const auto prompts = testing::fp8_prompts(m, 3, 20);
  std::vector<StepInput> in;
  for (int s = 0; s < 3; ++s) {
    r.add_sequence({SeqId(s + 1), CachePolicy::full(), {.temperature = 0.0f}});
    in.push_back({SeqId(s + 1), prompts[s], LogitsMode::kNone, false});
  }
  r.step(in);
  const std::vector<int32_t> other = testing::fp8_prompts(m, 1, 120)[0];
  if (junk) {
    r.add_sequence({99, CachePolicy::full(), {.temperature = 0.0f}});
    const StepInput j{99, other, LogitsMode::kNone, false};
    r.step(std::span<const StepInput>(&j, 1));
    r.remove_sequence(99);
  }
  const std::vector<int32_t> fresh = testing::fp8_prompts(m, 1, 37)[0];
  const int32_t next[3] = {5, 6, 7};
  in.clear();
  for (int s = 0; s < 3; ++s)
    in.push_back({SeqId(s + 1), std::span<const int32_t>(&next[s], 1), LogitsMode::kLast, false});
  r.add_sequence({4, CachePolicy::full(), {.temperature = 0.0f}});
  in.push_back({4, fresh, LogitsMode::kAll, false});
  std::vector<float> logits = r.step(in).logits;
  for (SeqId id : {1, 2, 3, 4}) r.remove_sequence(id);
  return logits;
}

// Worst relative L2 distance of a logits row of a and b ([rows, V] each).
double worst_row(const std::vector<float>& a, const std::vector<float>& b, int V) {
  double worst = 0;
  for (size_t r = 0; r < a.size() / V; ++r)
    worst = std::max(worst, testing::rel_err(a.data() + r * V, b.data() + r * V, size_t(V)));
  return worst;
}

// Steps with prefill round their fp8 GEMMs' rows up to the runner's bucket (64; 128 with
// block-scaled weights) like the 16-bit ones. A mixed step of 40 tokens matches the CPU
// emulating the W8A8 rows the rounded GEMM quantizes (Gemm::padded_rows on both sides: every
// real row where cuBLASLt takes the bucket shape), within bf16 compute plus the emulation's flip
// noise; and its logits are bit-identical whatever the scratch rows hold.
TEST(CudaFp8, MixedStepsMatchTheCpuEngine) {
  REQUIRE_CUDA();
  for (const char* name : {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"}) {
    SCOPED_TRACE(name);
    const Model m = load_model(source_path(std::string("tests/fixtures/") + name));
    const int V = m.config.vocab_size;
    EngineOptions o;
    o.device = "cuda";
    o.max_batch = 16;
    o.max_step_tokens = 2048;
    o.gpu_memory_fraction = 0.3;
    o.quantization = "auto";
    const CpuRunnerOptions plain{.num_threads = 4,
                                 .quantization = resolve_quantization("auto", m.config.quant)};
    cudaStream_t probe_stream;
    RILL_CUDA(cudaStreamCreate(&probe_stream));
    std::shared_ptr<cuda::Gemm> probe;
    CpuRunnerOptions emulating;
    std::vector<float> got, over_junk;
    {
      CudaRunner gpu(m, o);
      EXPECT_EQ(gpu.prefill_token_granularity(), std::string(name) == "fp8_block" ? 128 : 64);
      emulating = emulating_options(m, o, gpu, plain, probe_stream, probe);
      got = mixed_step_logits(gpu, m, false);
    }
    {
      CudaRunner gpu(m, o);  // one runner at a time: each sizes its pool from free memory
      over_junk = mixed_step_logits(gpu, m, true);
    }
    EXPECT_EQ(over_junk, got) << "the scratch rows of the rounded GEMMs reached real rows";
    CpuRunner cpu(m, emulating);
    const std::vector<float> ref = mixed_step_logits(cpu, m, false);
    ASSERT_EQ(got.size(), ref.size());
    std::vector<std::vector<float>> jittered;
    CpuRunnerOptions j = emulating;
    j.fp8_activation_jitter = testing::kBf16Jitter;
    for (int seed = 0; seed < kFlipSeeds; ++seed) {
      j.fp8_activation_jitter_seed = uint32_t(seed + 1);
      CpuRunner r(m, j);
      jittered.push_back(mixed_step_logits(r, m, false));
    }
    probe.reset();
    cudaStreamDestroy(probe_stream);
    double spread = 0;
    for (int a = 0; a < kFlipSeeds; ++a)
      for (int b = a + 1; b < kFlipSeeds; ++b)
        spread = std::max(spread, worst_row(jittered[a], jittered[b], V));
    const double err = worst_row(got, ref, V), tol = kPrefillTol + spread;
    std::printf(
        "  %s, mixed step of 40 tokens: relative L2 error of logits (worst row) %.4f; tolerance "
        "%.4f (bf16 + flip noise %.4f)\n",
        name, err, tol, spread);
    EXPECT_LT(err, tol);
  }
}

TEST(CudaFp8, GraphsChangeNothing) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("tests/fixtures/fp8_block"));
  const auto prompts = testing::fp8_prompts(m, 3, 20);
  const std::vector<std::vector<int32_t>> tokens = {{5, 6, 7}, {8, 9, 10}, {11, 12, 13}};
  std::vector<Fp8Rows> rows;
  for (bool graphs : {true, false}) {
    auto r = testing::cuda_runner(m, graphs);
    rows.push_back(testing::run_fp8_rows(*r, prompts, tokens));
  }
  EXPECT_EQ(rows[0].decode, rows[1].decode);
  EXPECT_EQ(rows[0].prefill, rows[1].prefill);
}

// Where the fp8 GEMVs keep their weights (registers, or a shared-memory ring of any depth, per
// projection: fp8_gemv_deep_mask and fp8_projection_gemv_config) changes speed only: decode and
// prefill logits stay bit-identical, at one token and at three.
TEST(CudaFp8, GemvStagingChangesNothing) {
  REQUIRE_CUDA();
  for (const char* name : {"fp8_block", "fp8_ct_channel"}) {
    SCOPED_TRACE(name);
    const Model m = load_model(source_path(std::string("tests/fixtures/") + name));
    for (int batch : {1, 3}) {
      const auto prompts = testing::fp8_prompts(m, batch, 20);
      std::vector<std::vector<int32_t>> tokens(4, std::vector<int32_t>(batch));  // [step][seq]
      for (int step = 0; step < 4; ++step)
        for (int i = 0; i < batch; ++i) tokens[step][i] = 5 + step + 3 * i;
      auto rows = [&](int deep_mask, int deep_stages, int o_stages = 0) {
        CudaTuning t;
        t.fp8_gemv_deep_mask = deep_mask;
        t.fp8_gemv_deep_config = deep_stages ? kernels::gemv_fp8_ring_config(16, deep_stages) : -1;
        if (o_stages)  // the o projection alone in another ring
          t.fp8_projection_gemv_config[CudaTuning::projection_index(CudaTuning::kO)] =
              kernels::gemv_fp8_ring_config(16, o_stages);
        auto r = testing::cuda_runner(m, true, "auto", t);
        return testing::run_fp8_rows(*r, prompts, tokens);
      };
      const Fp8Rows base = rows(-1, 0);
      {
        SCOPED_TRACE("batch " + std::to_string(batch) + " o in a ring of 6");
        const Fp8Rows r = rows(-1, 0, 6);
        EXPECT_EQ(r.decode, base.decode);
        EXPECT_EQ(r.prefill, base.prefill);
      }
      const std::vector<std::pair<int, int>> variants = {// (mask, ring depth; 0: default)
                                                         {0, 0},
                                                         {CudaTuning::kAllProjections, 0},
                                                         {CudaTuning::kAllProjections, 3},
                                                         {CudaTuning::kAllProjections, 6}};
      for (const auto& [mask, stages] : variants) {
        SCOPED_TRACE("batch " + std::to_string(batch) + " mask " + std::to_string(mask) + " ring " +
                     std::to_string(stages));
        ASSERT_TRUE(stages == 0 || kernels::gemv_fp8_ring_config(16, stages) >= 0);
        const Fp8Rows r = rows(mask, stages);
        EXPECT_EQ(r.decode, base.decode);
        EXPECT_EQ(r.prefill, base.prefill);
      }
    }
  }
}

// The norms and the activation that write the W8A8 GEMMs' input as e4m3 themselves
// (CudaTuning::fp8_fused_quant) write the bytes the quantization kernel would: logits bit for bit
// equal with it off, for prefill steps (GEMMs, rows rounded up) and decode batches through the
// GEMM (graphs).
TEST(CudaFp8, FusedQuantizationChangesNothing) {
  REQUIRE_CUDA();
  for (const char* name : {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"}) {
    SCOPED_TRACE(name);
    const Model m = load_model(source_path(std::string("tests/fixtures/") + name));
    // 12 rows: decode through the GEMM (the GEMV takes up to 8); 12 x 40 prompt tokens stay
    // within one step's 512 logits rows
    for (int batch : {1, 12}) {
      const auto prompts = testing::fp8_prompts(m, batch, 40);
      std::vector<std::vector<int32_t>> tokens(3, std::vector<int32_t>(batch));  // [step][seq]
      for (int step = 0; step < 3; ++step)
        for (int i = 0; i < batch; ++i) tokens[step][i] = 5 + step + 3 * i;
      auto rows = [&](bool fused) {
        CudaTuning t;
        t.fp8_fused_quant = fused;
        t.fp8_gemv_max_rows = 8;
        auto r = testing::cuda_runner(m, true, "auto", t);
        return testing::run_fp8_rows(*r, prompts, tokens);
      };
      SCOPED_TRACE("batch " + std::to_string(batch));
      const Fp8Rows off = rows(false), on = rows(true);
      EXPECT_EQ(on.prefill, off.prefill);
      EXPECT_EQ(on.decode, off.decode);
    }
  }
}

// The residual adds and norms inside the fp8 decode GEMVs (CudaTuning::fp8_norm_in_gemv, on by
// default) round the norm's output at another place than add_norm does (dtype(r * weight), 1 / rms
// applied to the next GEMV's sums, against dtype(r / rms * weight)). Both ways the runner stays
// within the CPU engine's tolerance; on the trained default model the two differ by less than
// that tolerance, and prefill steps (through the GEMMs, untouched) not at all.
TEST(CudaFp8, NormInGemvMatchesTheCpuEngineAndAddNorm) {
  REQUIRE_CUDA();
  RunSetup off;
  off.tuning.fp8_norm_in_gemv = false;
  // Two sequences: the norms run in the GEMVs at decode steps of up to two tokens.
  const Model m = load_model(source_path("models/rill-shakespeare"));
  compare(m, "fp8", 2, 64, 8);
  compare(m, "fp8", 2, 64, 8, off);
  for (const char* name : {"fp8_ct_channel", "fp8_block"}) {
    SCOPED_TRACE(name);
    const Model f = load_model(source_path(std::string("tests/fixtures/") + name));
    compare(f, "auto", 2, 20, 4);
    compare(f, "auto", 2, 20, 4, off);
  }
  for (int batch : {1, 2}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const auto prompts = testing::fp8_prompts(m, batch, 40);
    std::vector<std::vector<int32_t>> tokens(6, std::vector<int32_t>(batch));  // [step][seq]
    for (int step = 0; step < 6; ++step)
      for (int i = 0; i < batch; ++i) tokens[step][i] = 5 + step + 3 * i;
    auto rows = [&](bool in_gemv) {
      CudaTuning t;
      t.fp8_norm_in_gemv = in_gemv;
      auto r = testing::cuda_runner(m, true, "auto", t, "fp8");
      return testing::run_fp8_rows(*r, prompts, tokens);
    };
    const Fp8Rows on = rows(true), plain = rows(false);
    EXPECT_EQ(on.prefill, plain.prefill);
    const Fp8Distance d = testing::fp8_distance(on, plain, m.config.vocab_size);
    std::printf("  norm in the GEMVs against add_norm, batch %d: decode logits %.4f apart\n", batch,
                d.decode);
    EXPECT_GT(d.decode, 0.0);  // the switch reached the decode steps
    EXPECT_LT(d.decode, kDecodeTol);
  }
}

// A layer's down GEMV and the next layer's qkv as one kernel (CudaTuning::fp8_pair_down_qkv, with
// the norms in the GEMVs): the same logits, bit for bit, as two kernels, at batch 1 and 2, with
// per-channel and 128 x 128 block scales.
TEST(CudaFp8, DownAndQkvInOneKernelChangeNothing) {
  REQUIRE_CUDA();
  for (const char* name : {"fp8_ct_channel", "fp8_block"})
    for (int batch : {1, 2}) {
      SCOPED_TRACE(std::string(name) + " batch " + std::to_string(batch));
      const Model m = load_model(source_path(std::string("tests/fixtures/") + name));
      const auto prompts = testing::fp8_prompts(m, batch, 40);
      std::vector<std::vector<int32_t>> tokens(6, std::vector<int32_t>(batch));  // [step][seq]
      for (int step = 0; step < 6; ++step)
        for (int i = 0; i < batch; ++i) tokens[step][i] = 7 + step + 5 * i;
      auto rows = [&](bool pair) {
        CudaTuning t;
        t.fp8_pair_down_qkv = pair;
        auto r = testing::cuda_runner(m, true, "auto", t, "auto");
        return testing::run_fp8_rows(*r, prompts, tokens);
      };
      const Fp8Rows paired = rows(true), two = rows(false);
      EXPECT_EQ(paired.prefill, two.prefill);
      EXPECT_EQ(paired.decode, two.decode);
    }
}

// --quantization none on an fp8 checkpoint runs the dequantized weights in bf16: it matches the
// CPU like any bf16 model.
TEST(CudaFp8, NoneDequantizesAtLoad) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("tests/fixtures/fp8_ct_channel"));
  compare(m, "none", 2, 16, 4);
}

#endif  // RILL_HAVE_CUDA

}  // namespace
}  // namespace rill
