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
#include "tests/engine/golden.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/gemm.h"
#endif

namespace rill {
namespace {

using testing::source_path;

// Relative L2 error of a logits row against the CPU's, the CPU emulating the W8A8 GEMMs' e4m3
// activations in the steps that take them (CpuRunnerOptions::fp8_activation_rows). The fixtures
// (bf16 compute, random weights of large magnitude) land near 3e-2 for 16-bit weights
// (cuda_runner_test.cc); fp8 weights are the CPU's exactly, so the weight-only GEMV adds nothing.
// What remains beyond bf16 compute in prefill rows: activations that bf16 moved across an e4m3
// rounding boundary round to a neighbour (a relative step of 2^-4) on one side only. Without the
// emulation the fixtures' random 2-layer models amplify e4m3's activation error to 0.27-0.41 of
// a prefill row (the CPU alone: Fp8Cpu.EmulatedW8A8ActivationsMoveThePrefillOnly; the H100 gave
// 0.26 on fp8_ct_channel) against 0.03 for bf16: what fp8 activations cost, printed per run.
constexpr double kDecodeTol = 5e-2, kPrefillTol = 1e-1;
// A greedy step is compared only where the CPU's top-1 margin exceeds this (logits of order 10:
// a few % of error can move them by a few tenths).
constexpr double kMarginOk = 0.5;

double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

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
  float static_scale = 0;  // > 0: the layer's input_scale
  bool y_f32 = false;      // fp32 output (an fp8 LM head) instead of bf16
};

// kGemm: every row through the W8A8 GEMM; kLeadingRows: the leading rows cuBLASLt takes (all, or
// M rounded down to a multiple of 4 .. 128), the rest through the GEMV; kGemv: none.
enum class Path { kGemm, kLeadingRows, kGemv, kEither };

// y = x w^T through Gemm::run on bf16 x, against an fp64 reference on the operands the path
// sees (x quantized for the W8A8 GEMM, as it is for the GEMV).
void check_gemm(const GemmCase& c, Path path, std::mt19937& rng) {
  SCOPED_TRACE("M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
               " K=" + std::to_string(c.K) + (c.block ? " block128" : " per-row") +
               (c.static_scale > 0 ? " static" : "") + (c.y_f32 ? " y_f32" : ""));
  const HostFp8 w = random_fp8(c.N, c.K, c.block, rng);
  std::vector<float> x(size_t(c.M) * c.K);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(d(rng)));
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  {
    cuda::Gemm gemm(kernels::DType::kBF16, stream);
    gemm.reserve_fp8(std::max(c.M, 1), c.K);
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
        // 3.3.2). Plus the bf16 rounding of y. A wrong scale layout misses by O(1).
        const double acc = gemm_path ? 1e-4 : 1e-5;
        const double allowed = acc * sum_abs + (c.y_f32 ? 0.0 : std::abs(want) * 0x1p-8);
        worst = std::max(worst, std::abs(got[size_t(m) * c.N + n] - want) / (allowed + 1e-30));
      }
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

struct Rows {
  std::vector<std::vector<float>> prefill;  // per sequence: its prompt's logits, every position
  std::vector<std::vector<float>> decode;   // per step: [batch, V]
};

// Prefill of every prompt (one step, all logits), then `steps` teacher-forced decode steps of the
// whole batch feeding `tokens[step][seq]`.
Rows run(ModelRunner& r, const std::vector<std::vector<int32_t>>& prompts,
         const std::vector<std::vector<int32_t>>& tokens,
         const CachePolicy& policy = CachePolicy::full()) {
  Rows out;
  std::vector<StepInput> in;
  for (size_t s = 0; s < prompts.size(); ++s) {
    r.add_sequence({SeqId(s + 1), policy, {.temperature = 0.0f}});
    in.push_back({SeqId(s + 1), prompts[s], LogitsMode::kAll, false});
  }
  const StepOutput p = r.step(in);
  const int V = r.config().vocab_size;
  for (size_t s = 0; s < prompts.size(); ++s)
    out.prefill.emplace_back(p.logits.begin() + p.logits_row[s] * V,
                             p.logits.begin() + (p.logits_row[s] + prompts[s].size()) * V);
  for (const auto& step : tokens) {
    in.clear();
    for (size_t s = 0; s < prompts.size(); ++s)
      in.push_back({SeqId(s + 1), std::span<const int32_t>(&step[s], 1), LogitsMode::kLast, false});
    const StepOutput o = r.step(in);
    out.decode.push_back(o.logits);
  }
  for (size_t s = 0; s < prompts.size(); ++s) r.remove_sequence(SeqId(s + 1));
  return out;
}

std::vector<std::vector<int32_t>> prompts_for(const Model& m, int batch, int len) {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> p(batch);
  for (int s = 0; s < batch; ++s) {
    p[s] = m.tokenizer->encode("KING HENRY: O, what a noble mind is here o'erthrown! Thou art");
    // Exactly len + s % 3 tokens (a fixture's byte-level tokenizer makes the text ~60 tokens;
    // a prefill of 20 such prompts would pass the 512 rows of logits one step may return).
    p[s].resize(std::min(p[s].size(), size_t(len + s % 3)));
    while (int(p[s].size()) < len + s % 3) p[s].push_back(int32_t(rng() % m.config.vocab_size));
  }
  return p;
}

// What compare() runs besides the model and the quantization.
struct RunSetup {
  CudaTuning tuning;
  std::string kv_cache_dtype = "auto";
  CachePolicy policy = CachePolicy::full();
};

// CUDA against CPU on `m` (quantization `quant`), a batch of `batch` prompts of ~`len` tokens and
// `steps` decode steps; returns the worst decode error.
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
  CpuRunnerOptions emulating = plain;
  emulating.fp8_activation_rows = setup.tuning.fp8_gemv_max_rows;
  // The rows the runner's W8A8 GEMMs quantize: what cuBLASLt takes on this GPU, asked of a Gemm
  // set up like the runner's (every model here computes in bf16; the LM head writes fp32). The
  // heuristic only: the pointers are never read.
  cudaStream_t probe_stream;
  RILL_CUDA(cudaStreamCreate(&probe_stream));
  auto probe = std::make_shared<cuda::Gemm>(kernels::DType::kBF16, probe_stream);
  probe->reserve_fp8(
      std::max(o.max_step_tokens, o.max_batch + 8),
      std::max({m.config.hidden_size, m.config.q_dim(), m.config.intermediate_size}));
  probe->set_fp8_gemv_max_rows(setup.tuning.fp8_gemv_max_rows);
  emulating.fp8_gemm_rows = [probe, V](int64_t rows, int64_t n, int64_t k, bool block) {
    const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
    cuda::DeviceLinear lin;
    lin.w = aligned;
    lin.scale = static_cast<const float*>(aligned);
    lin.scale_layout =
        block ? kernels::Fp8ScaleLayout::kBlock128 : kernels::Fp8ScaleLayout::kPerRow;
    return int64_t{probe->fp8_gemm_rows(aligned, lin, int(rows), int(n), int(k), n == V)};
  };
  CpuRunner cpu(m, emulating), cpu_plain(m, plain);
  const auto prompts = prompts_for(m, batch, len);
  // Teacher forcing: the CPU's greedy tokens, found step by step.
  std::vector<std::vector<int32_t>> tokens;
  Rows ref = run(cpu, prompts, {}, setup.policy);
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> next(batch);
    for (int s = 0; s < batch; ++s) {
      const float* row = step == 0 ? ref.prefill[s].data() + (prompts[s].size() - 1) * V
                                   : ref.decode[step - 1].data() + size_t(s) * V;
      next[s] = int32_t(std::max_element(row, row + V) - row);
    }
    tokens.push_back(next);
    ref = run(cpu, prompts, tokens, setup.policy);
  }
  const Rows got = run(gpu, prompts, tokens, setup.policy);
  // What fp8 activations cost: the emulating CPU against the plain one, same tokens.
  const Rows plain_rows = run(cpu_plain, prompts, tokens, setup.policy);
  double cost_prefill = 0, cost_decode = 0;
  for (int s = 0; s < batch; ++s)
    cost_prefill = std::max(
        cost_prefill,
        rel_err(ref.prefill[s].data(), plain_rows.prefill[s].data(), ref.prefill[s].size()));
  for (int step = 0; step < steps; ++step)
    cost_decode = std::max(
        cost_decode,
        rel_err(ref.decode[step].data(), plain_rows.decode[step].data(), ref.decode[step].size()));
  double worst_prefill = 0, worst_decode = 0;
  for (int s = 0; s < batch; ++s)
    for (size_t pos = 0; pos < prompts[s].size(); ++pos)
      worst_prefill = std::max(worst_prefill, rel_err(got.prefill[s].data() + pos * V,
                                                      ref.prefill[s].data() + pos * V, V));
  for (int step = 0; step < steps; ++step)
    for (int s = 0; s < batch; ++s) {
      const float* g = got.decode[step].data() + size_t(s) * V;
      const float* c = ref.decode[step].data() + size_t(s) * V;
      worst_decode = std::max(worst_decode, rel_err(g, c, V));
      if (top2_margin(c, V) > kMarginOk) {
        EXPECT_EQ(std::max_element(g, g + V) - g, std::max_element(c, c + V) - c)
            << "seq " << s << " step " << step;
      }
    }
  emulating.fp8_gemm_rows = nullptr;
  probe.reset();
  cudaStreamDestroy(probe_stream);
  std::printf(
      "  %s, quantization %s, batch %d: relative L2 error of logits: prefill %.4f, decode %.4f "
      "(fp8 activations alone, CPU: prefill %.4f, decode %.4f)\n",
      m.path.filename().c_str(), quant.c_str(), batch, worst_prefill, worst_decode, cost_prefill,
      cost_decode);
  EXPECT_LT(worst_prefill, kPrefillTol);
  EXPECT_LT(worst_decode, kDecodeTol);
  return worst_decode;
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

TEST(CudaFp8, GraphsChangeNothing) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("tests/fixtures/fp8_block"));
  const auto prompts = prompts_for(m, 3, 20);
  const std::vector<std::vector<int32_t>> tokens = {{5, 6, 7}, {8, 9, 10}, {11, 12, 13}};
  std::vector<Rows> rows;
  for (bool graphs : {true, false}) {
    auto r = testing::cuda_runner(m, graphs);
    rows.push_back(run(*r, prompts, tokens));
  }
  EXPECT_EQ(rows[0].decode, rows[1].decode);
  EXPECT_EQ(rows[0].prefill, rows[1].prefill);
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
