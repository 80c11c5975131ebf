// The weight-only fp8 GEMV (rill/kernels/gemv_fp8.h) against an fp64 CPU reference on the
// dequantized weights: every e4m3 code converted exactly (subnormals and signs included), M 1..16,
// K with partial steps and partial scale blocks, odd N, per-row and 128-column block scales, both
// output types, the kSiluMul epilogue with and without bias, every CTA shape (registers and
// shared-memory rings; a ring equals the register shape of its warps bit for bit), a residual add
// and RMSNorm split over two GEMVs (Fp8NormOut / Fp8NormIn), and the rejections that send callers
// to a GEMM.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/gemv_fp8.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::Fp8ScaleLayout;
using kernels::GemvEpilogue;

/// An fp8 weight [N, K] with its scales, as the kernel reads them, and its dequantized values.
struct Fp8Weight {
  int N = 0, K = 0;
  Fp8ScaleLayout layout = Fp8ScaleLayout::kPerRow;
  std::vector<uint8_t> bytes;  // [N, K]
  std::vector<float> scale;    // [N] or [ceil(K / 128), N]
  std::vector<float> value;    // [N, K]: e4m3 * scale
  float scale_of(int n, int k) const {
    return layout == Fp8ScaleLayout::kPerRow ? scale[n] : scale[size_t(k / 128) * N + n];
  }
};

/// Random non-NaN e4m3 codes (every magnitude, both signs) and scales 2^-9 .. 2^-3.
Fp8Weight random_weight(int N, int K, Fp8ScaleLayout layout, std::mt19937& rng) {
  Fp8Weight w;
  w.N = N;
  w.K = K;
  w.layout = layout;
  std::uniform_int_distribution<int> code(0, 253);
  std::uniform_real_distribution<float> expo(-9.0f, -3.0f);
  w.bytes.resize(size_t(N) * K);
  for (uint8_t& b : w.bytes) {
    const int c = code(rng);
    b = static_cast<uint8_t>(c < 127 ? c : c + 1);  // skip 0x7f: 0x00..0x7e, 0x80..0xfe
  }
  w.scale.resize(layout == Fp8ScaleLayout::kPerRow ? size_t(N) : size_t((K + 127) / 128) * N);
  for (float& s : w.scale) s = std::exp2(expo(rng));
  w.value.resize(w.bytes.size());
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < K; ++k)
      w.value[size_t(n) * K + k] =
          fp8::e4m3_to_float(w.bytes[size_t(n) * K + k]) * w.scale_of(n, k);
  return w;
}

/// s[m, n] = sum_k x[m, k] w[n, k] in fp64; `sum_abs_max`: the largest sum of |products|.
std::vector<double> reference(const std::vector<float>& x, const Fp8Weight& w, int M,
                              double* sum_abs_max) {
  std::vector<double> s(size_t(M) * w.N);
  *sum_abs_max = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < w.N; ++n) {
      double acc = 0, a = 0;
      for (int k = 0; k < w.K; ++k) {
        const double p = double(x[size_t(m) * w.K + k]) * w.value[size_t(n) * w.K + k];
        acc += p;
        a += std::abs(p);
      }
      s[size_t(m) * w.N + n] = acc;
      *sum_abs_max = std::max(*sum_abs_max, a);
    }
  return s;
}

struct DeviceWeight {
  DeviceBuffer bytes, scale;
  explicit DeviceWeight(const Fp8Weight& w) : bytes(w.bytes.size(), 1), scale(w.scale.size(), 4) {
    bytes.upload(w.bytes.data());
    scale.upload(w.scale.data());
  }
};

kernels::Fp8GemvParams params(DType dt, int M, const Fp8Weight& w, const DeviceWeight& dw,
                              const void* x, void* y, int config) {
  kernels::Fp8GemvParams p;
  p.dtype = dt;
  p.M = M;
  p.N = w.N;
  p.K = w.K;
  p.x = x;
  p.w = dw.bytes.get();
  p.scale = dw.scale.as<float>();
  p.scale_layout = w.layout;
  p.y = y;
  p.config = config;
  return p;
}

std::string label(DType dt, int M, int N, int K, Fp8ScaleLayout l, int config) {
  return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         (l == Fp8ScaleLayout::kPerRow ? " per-row" : " block128") + " config " +
         (config < 0 ? "default" : kernels::gemv_fp8_config_name(config));
}

void check_store(DType dt, int M, int N, int K, Fp8ScaleLayout layout, bool y_f32, int config,
                 std::mt19937& rng) {
  SCOPED_TRACE(label(dt, M, N, K, layout, config) + (y_f32 ? " y_f32" : ""));
  const Fp8Weight w = random_weight(N, K, layout, rng);
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt);
  double sum_abs = 0;
  const std::vector<double> s = reference(x, w, M, &sum_abs);
  std::vector<float> want(s.begin(), s.end());
  if (!y_f32) want = round_to(want, dt);
  const DeviceWeight dw(w);
  DeviceBuffer d_x(x.size(), 2), d_y(want.size(), y_f32 ? 4 : 2);
  d_x.upload_floats(x, dt);
  d_y.poison();
  kernels::Fp8GemvParams p = params(dt, M, w, dw, d_x.get(), d_y.get(), config);
  p.y_f32 = y_f32;
  CUDA_OK(kernels::launch_gemv_fp8(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  const std::vector<float> got = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten output";
  double scale = 1e-6;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  // fp32 accumulation (a few ulps of the sum of |products|), plus one dtype ulp when rounded.
  EXPECT_LE(max_abs_error(got, want), (y_f32 ? 0.0 : 1.01 * ulp1(dt) * scale) + 1e-5 * sum_abs);
  EXPECT_LE(normalized_error(got, want), y_f32 ? 1e-5 : tol_for(dt));
}

TEST(GemvFp8, EveryE4m3CodeConvertsExactly) {
  RILL_REQUIRE_GPU();
  // Row n holds code n everywhere; x = e_0 (one 1), so y[n] = value(code n) * scale exactly.
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128}) {
      Fp8Weight w;
      w.N = 256;
      w.K = 32;
      w.layout = layout;
      w.bytes.resize(size_t(w.N) * w.K);
      for (int n = 0; n < w.N; ++n)
        std::fill_n(w.bytes.begin() + size_t(n) * w.K, w.K,
                    uint8_t(n == 0x7f || n == 0xff ? 0 : n));
      w.scale.assign(w.N, 0.5f);
      std::vector<float> x(w.K, 0.0f);
      x[0] = 1.0f;
      const DeviceWeight dw(w);
      DeviceBuffer d_x(x.size(), 2), d_y(w.N, 4);
      d_x.upload_floats(x, dt);
      d_y.poison();
      kernels::Fp8GemvParams p = params(dt, 1, w, dw, d_x.get(), d_y.get(), -1);
      p.y_f32 = true;
      CUDA_OK(kernels::launch_gemv_fp8(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      std::vector<float> got(w.N);
      d_y.download(got.data());
      for (int n = 0; n < w.N; ++n) {
        const float want = n == 0x7f || n == 0xff ? 0.0f : fp8::e4m3_to_float(uint8_t(n)) * 0.5f;
        EXPECT_EQ(got[n], want) << "code 0x" << std::hex << n;
      }
    }
}

TEST(GemvFp8, AllBatchSizes) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(51);
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128})
      for (int M = 1; M <= 16; ++M) check_store(dt, M, 257, 4096, layout, M % 2 == 0, -1, rng);
}

TEST(GemvFp8, OddShapesAndPartialBlocks) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(52);
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128}) {
      check_store(dt, 1, 1, 16, layout, false, -1, rng);      // one chunk
      check_store(dt, 3, 17, 48, layout, true, -1, rng);      // a partial step
      check_store(dt, 9, 33, 80, layout, false, -1, rng);     // a partial step, one partial block
      check_store(dt, 5, 1001, 208, layout, true, -1, rng);   // 13 chunks, two blocks
      check_store(dt, 16, 15, 4112, layout, false, -1, rng);  // N < 16, a partial last block
    }
}

TEST(GemvFp8, LlamaShapes) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(53);
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128})
      for (int M : {1, 8, 16}) {
        check_store(dt, M, 4099, 11008, layout, false, -1, rng);  // down projection's K, odd N
        check_store(dt, M, 1027, 4096, layout, true, -1, rng);
      }
}

TEST(GemvFp8, EveryKernelShape) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(54);
  for (int config = 0; config < kernels::gemv_fp8_num_configs(); ++config)
    for (DType dt : kDTypes)
      for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128}) {
        check_store(dt, 1, 37, 16, layout, false, config, rng);
        check_store(dt, 3, 261, 4112, layout, true, config, rng);
        check_store(dt, 12, 1040, 11008, layout, false, config, rng);
        check_store(dt, 8, 99, 1008, layout, false, config, rng);
      }
}

// The ring shapes (weights staged through shared memory) run the same steps in the same order
// per warp as the register shapes with the same warps: outputs equal bit for bit, both epilogues,
// both scale layouts, one and two x tiles, and the default deep-prologue shape is one of them.
TEST(GemvFp8, RingShapesEqualRegisterShapesBitForBit) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(56);
  const int deep = kernels::gemv_fp8_default_config(4096, 4096, true);
  ASSERT_GT(kernels::gemv_fp8_config_info(deep).stages, 0);
  EXPECT_EQ(kernels::gemv_fp8_config_info(deep).warps,
            kernels::gemv_fp8_config_info(kernels::gemv_fp8_default_config(4096, 4096)).warps);
  struct Shape {
    int M, N, K;
  };
  // K: partial steps, fewer steps than the ring is deep, a Llama down projection's K; N: 1, 2
  // and 6 tiles a persistent CTA (two an SM, 132 SMs), and 2 tiles of one step a warp. x of at
  // most 32 KB (kFp8GemvXStageMaxBytes; 4 x 4096 exactly) is staged in shared memory by the
  // persistent kernel; 16 x 11008 and 5 x 4096 are loaded from global memory.
  const Shape shapes[] = {{1, 4096, 4096},  {16, 1040, 11008}, {9, 37, 80},
                          {3, 261, 4112},   {2, 4500, 4096},   {12, 8200, 272},
                          {1, 22016, 1024}, {4, 600, 4096},    {5, 600, 4096}};
  int pairs = 0;
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128})
      for (const Shape& sh : shapes)
        for (GemvEpilogue epi : {GemvEpilogue::kStore, GemvEpilogue::kSiluMul}) {
          const bool silu = epi == GemvEpilogue::kSiluMul;
          const int N = silu ? (sh.N + 15) / 16 * 16 : sh.N;  // whole gate|up tiles
          const Fp8Weight w = random_weight(N, sh.K, layout, rng);
          const std::vector<float> x =
              rounded_random(size_t(sh.M) * sh.K, rng, dt, 1.0f / std::sqrt(float(sh.K)));
          const DeviceWeight dw(w);
          DeviceBuffer d_x(x.size(), 2), d_bias(N, 2);
          d_x.upload_floats(x, dt);
          d_bias.upload_floats(rounded_random(N, rng, dt, 0.5f), dt);
          const size_t y_elems = size_t(sh.M) * (silu ? N / 2 : N);
          const bool y_f32 = !silu && sh.M % 2 == 1;
          // Every shape's output bytes on the same operands.
          std::vector<std::vector<uint8_t>> out(kernels::gemv_fp8_num_configs());
          for (int config = 0; config < kernels::gemv_fp8_num_configs(); ++config) {
            SCOPED_TRACE(label(dt, sh.M, N, sh.K, layout, config) + (silu ? " silu" : ""));
            DeviceBuffer d_y(y_elems, y_f32 ? 4 : 2);
            d_y.poison();
            kernels::Fp8GemvParams p = params(dt, sh.M, w, dw, d_x.get(), d_y.get(), config);
            p.y_f32 = y_f32;
            p.epilogue = epi;
            p.bias = silu ? d_bias.get() : nullptr;
            CUDA_OK(kernels::launch_gemv_fp8(p, nullptr));
            CUDA_OK(cudaDeviceSynchronize());
            EXPECT_TRUE(d_y.check_guards());
            out[config].resize(y_elems * (y_f32 ? 4 : 2));
            d_y.download(out[config].data());
          }
          for (int ring = 0; ring < kernels::gemv_fp8_num_configs(); ++ring) {
            const kernels::GemvConfigInfo ri = kernels::gemv_fp8_config_info(ring);
            if (ri.stages == 0) continue;
            for (int reg = 0; reg < kernels::gemv_fp8_num_configs(); ++reg) {
              const kernels::GemvConfigInfo gi = kernels::gemv_fp8_config_info(reg);
              if (gi.stages != 0 || gi.warps != ri.warps) continue;
              ++pairs;
              EXPECT_TRUE(out[ring] == out[reg])
                  << label(dt, sh.M, N, sh.K, layout, ring) << (silu ? " silu" : "")
                  << " differs from " << kernels::gemv_fp8_config_name(reg);
            }
          }
        }
  EXPECT_GT(pairs, 0) << "no ring shape has a register twin";
}

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

/// Rows of a [2I, K] weight (or [2I] vector) in the interleaved tiles of kSiluMul: gate rows
/// 8j..8j+7 then up rows 8j..8j+7; `gate` and `up` are [I, row].
template <typename V>
std::vector<V> interleave(const std::vector<V>& gate, const std::vector<V>& up, int I, size_t row) {
  std::vector<V> out(2 * I * row);
  for (int j = 0; j < I; ++j) {
    const size_t tile = size_t(j / 8) * 16, r = j % 8;
    std::copy_n(gate.begin() + j * row, row, out.begin() + (tile + r) * row);
    std::copy_n(up.begin() + j * row, row, out.begin() + (tile + 8 + r) * row);
  }
  return out;
}

// y = silu(dtype(x Wg^T) + bg) * (dtype(x Wu^T) + bu) in one pass over interleaved fp8 rows.
void check_silu(DType dt, int M, int I, int K, Fp8ScaleLayout layout, bool with_bias, int config,
                std::mt19937& rng) {
  SCOPED_TRACE(label(dt, M, 2 * I, K, layout, config) + (with_bias ? " bias" : ""));
  const Fp8Weight wg = random_weight(I, K, layout, rng), wu = random_weight(I, K, layout, rng);
  // x of RMS 1 / sqrt(K): with weights of RMS up to 100 * 2^-3 (random codes, the largest
  // scale), gate and up stay within a few tens, so silu(gate) * up fits fp16 (65504). An RMS of
  // 4 made them ~3e3 and their product overflow to inf in fp16 at K = 4096, on the CPU as well.
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> bg =
      with_bias ? rounded_random(I, rng, dt, 0.5f) : std::vector<float>(I, 0.0f);
  const std::vector<float> bu =
      with_bias ? rounded_random(I, rng, dt, 0.5f) : std::vector<float>(I, 0.0f);
  double a0 = 0, a1 = 0;
  const std::vector<double> sg = reference(x, wg, M, &a0), su = reference(x, wu, M, &a1);
  const std::vector<float> g = round_to(std::vector<float>(sg.begin(), sg.end()), dt);
  const std::vector<float> u = round_to(std::vector<float>(su.begin(), su.end()), dt);
  std::vector<float> want(size_t(M) * I);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < I; ++j) {
      const size_t i = size_t(m) * I + j;
      want[i] = float(silu(double(g[i]) + bg[j]) * (double(u[i]) + bu[j]));
    }
  want = round_to(want, dt);
  ASSERT_FALSE(has_nonfinite(want)) << "the test's own reference overflows the dtype";
  // The interleaved weight: bytes and values by rows; per-row scales by rows; block scales by the
  // rows of each column block.
  Fp8Weight w;
  w.N = 2 * I;
  w.K = K;
  w.layout = layout;
  w.bytes = interleave(wg.bytes, wu.bytes, I, K);
  if (layout == Fp8ScaleLayout::kPerRow) {
    w.scale = interleave(wg.scale, wu.scale, I, 1);
  } else {
    for (int kb = 0; kb < (K + 127) / 128; ++kb) {
      const std::vector<float> g_kb(wg.scale.begin() + size_t(kb) * I,
                                    wg.scale.begin() + size_t(kb + 1) * I);
      const std::vector<float> u_kb(wu.scale.begin() + size_t(kb) * I,
                                    wu.scale.begin() + size_t(kb + 1) * I);
      const std::vector<float> both = interleave(g_kb, u_kb, I, 1);
      w.scale.insert(w.scale.end(), both.begin(), both.end());
    }
  }
  const DeviceWeight dw(w);
  DeviceBuffer d_x(x.size(), 2), d_bias(size_t(2) * I, 2), d_y(want.size(), 2);
  d_x.upload_floats(x, dt);
  d_bias.upload_floats(interleave(bg, bu, I, 1), dt);
  d_y.poison();
  kernels::Fp8GemvParams p = params(dt, M, w, dw, d_x.get(), d_y.get(), config);
  p.epilogue = GemvEpilogue::kSiluMul;
  p.bias = with_bias ? d_bias.get() : nullptr;
  CUDA_OK(kernels::launch_gemv_fp8(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  const std::vector<float> got = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten output";
  double y_max = 1e-6;
  for (float v : want) y_max = std::max(y_max, double(std::abs(v)));
  EXPECT_LE(max_abs_error(got, want), 4 * ulp1(dt) * y_max);
  EXPECT_LE(normalized_error(got, want), tol_for(dt));
}

TEST(GemvFp8, SiluMulEpilogue) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(55);
  std::vector<int> configs = {-1};
  for (int c = 0; c < kernels::gemv_fp8_num_configs(); ++c) configs.push_back(c);
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128})
      for (int config : configs)
        for (bool bias : {false, true}) {
          check_silu(dt, 1, 1376, 4096, layout, bias, config, rng);
          check_silu(dt, 13, 64, 4112, layout, bias, config, rng);
          check_silu(dt, 3, 8, 16, layout, bias, config, rng);  // one tile
        }
}

/// p as an Fp8NormOut producer: residual r (fp32), the norm's weight, the sums of squares.
void set_norm_out(kernels::Fp8GemvParams& p, DeviceBuffer& r, const DeviceBuffer& gamma,
                  DeviceBuffer& ss) {
  p.norm_out.residual = r.as<float>();
  p.norm_out.weight = gamma.get();
  p.norm_out.sumsq = ss.as<float>();
}

// A residual add and RMSNorm split over two GEMVs: the producer (N = H) adds dtype(s) to the
// fp32 residual, stores dtype(r * weight) and each CTA's sums of r^2; the consumer (K = H) scales
// its sums by 1 / sqrt(sum(r^2) / H + eps). Checked against fp64 on the producer's own outputs
// (its y exactly: one fp32 multiply and a rounding), and the sums of squares per CTA.
void check_norm_split(DType dt, int M, int K1, int H, int N2, Fp8ScaleLayout layout, int config,
                      std::mt19937& rng) {
  SCOPED_TRACE(label(dt, M, H, K1, layout, config) + " -> N2=" + std::to_string(N2));
  const float eps = 1e-5f;
  const Fp8Weight w1 = random_weight(H, K1, layout, rng), w2 = random_weight(N2, H, layout, rng);
  const std::vector<float> x = rounded_random(size_t(M) * K1, rng, dt, 1.0f / std::sqrt(float(K1)));
  const std::vector<float> r0 = random_vector(size_t(M) * H, rng, 2.0f);
  const std::vector<float> gamma = rounded_random(H, rng, dt, 1.0f);
  const DeviceWeight dw1(w1), dw2(w2);
  DeviceBuffer d_x(x.size(), 2), d_r(r0.size(), 4), d_gamma(H, 2), d_h(size_t(M) * H, 2),
      d_ss(size_t(M) * (H / 16), 4), d_y(size_t(M) * N2, 2);
  d_x.upload_floats(x, dt);
  d_r.upload_floats(r0, dt);
  d_gamma.upload_floats(gamma, dt);
  d_h.poison();
  d_ss.poison();
  d_y.poison();
  kernels::Fp8GemvParams p1 = params(dt, M, w1, dw1, d_x.get(), d_h.get(), config);
  set_norm_out(p1, d_r, d_gamma, d_ss);
  kernels::Fp8GemvParams p2 = params(dt, M, w2, dw2, d_h.get(), d_y.get(), config);
  p2.norm_in.sumsq = d_ss.as<float>();
  p2.norm_in.eps = eps;
  CUDA_OK(kernels::launch_gemv_fp8(p1, nullptr));
  CUDA_OK(kernels::launch_gemv_fp8(p2, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  for (const DeviceBuffer* b : {&d_r, &d_h, &d_ss, &d_y}) EXPECT_TRUE(b->check_guards());
  const std::vector<float> r = d_r.download_floats(dt), h = d_h.download_floats(dt);
  const std::vector<float> ss = d_ss.download_floats(dt), y = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(r) || has_nonfinite(h) || has_nonfinite(ss) || has_nonfinite(y));
  // The residual: r0 + dtype(x W1^T), within the rounding of the delta.
  double sum_abs = 0;
  const std::vector<double> s1 = reference(x, w1, M, &sum_abs);
  std::vector<float> r_want(r0.size());
  for (size_t i = 0; i < r0.size(); ++i) r_want[i] = r0[i] + round_to({float(s1[i])}, dt)[0];
  double d_max = 1e-6;
  for (double v : s1) d_max = std::max(d_max, std::abs(v));
  EXPECT_LE(max_abs_error(r, r_want), 1.01 * ulp1(dt) * d_max + 1e-5 * sum_abs + 1e-6);
  // y of the producer: dtype(r * weight) of its own r, bit for bit.
  std::vector<float> h_want(h.size());
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < H; ++n) h_want[size_t(m) * H + n] = r[size_t(m) * H + n] * gamma[n];
  EXPECT_EQ(max_abs_error(h, round_to(h_want, dt)), 0.0);
  // Sums of squares per 16 rows, and the consumer against fp64 on the producer's h and r.
  std::vector<double> rs(M);
  for (int m = 0; m < M; ++m) {
    double total = 0;
    for (int b = 0; b < H / 16; ++b) {
      double part = 0;
      for (int n = 16 * b; n < 16 * b + 16; ++n) part += double(r[size_t(m) * H + n]) * r[size_t(m) * H + n];
      EXPECT_NEAR(ss[size_t(m) * (H / 16) + b], part, 2e-6 * part + 1e-30) << "m " << m << " b " << b;
      total += part;
    }
    rs[m] = 1.0 / std::sqrt(total / H + eps);
  }
  double sum_abs2 = 0;
  const std::vector<double> s2 = reference(h, w2, M, &sum_abs2);
  std::vector<float> want(s2.size());
  double y_max = 1e-6, rs_max = 0;
  for (int m = 0; m < M; ++m) rs_max = std::max(rs_max, rs[m]);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N2; ++n) {
      want[size_t(m) * N2 + n] = float(s2[size_t(m) * N2 + n] * rs[m]);
      y_max = std::max(y_max, double(std::abs(want[size_t(m) * N2 + n])));
    }
  want = round_to(want, dt);
  EXPECT_LE(max_abs_error(y, want), 1.01 * ulp1(dt) * y_max + 1e-5 * sum_abs2 * rs_max);
  EXPECT_LE(normalized_error(y, want), tol_for(dt));
}

TEST(GemvFp8, NormSplitOverTwoGemvs) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(71);
  std::vector<int> configs = {-1};
  for (int c = 0; c < kernels::gemv_fp8_num_configs(); ++c) configs.push_back(c);
  for (DType dt : kDTypes)
    for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128})
      for (int config : configs) {
        check_norm_split(dt, 1, 1024, 4096, 768, layout, config, rng);  // 7B's hidden size
        check_norm_split(dt, 16, 208, 320, 48, layout, config, rng);   // two x tiles
        check_norm_split(dt, 5, 64, 16, 40, layout, config, rng);      // one CTA of rows
        check_norm_split(dt, 2, 256, 16384, 64, layout, config, rng);  // 4 tiles a persistent CTA
      }
}

// A persistent CTA stages Fp8NormOut's rows for all its tiles; past kPersistentNormOutMaxBytes
// (16 KB: 16 tiles a CTA at 16 rows of x) its ring twin runs instead: the same bits.
TEST(GemvFp8, PersistentNormOutPastItsStagingEqualsTheRing) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(73);
  int device = 0, sms = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int M = 16, K = 64, N = 16 * 2 * sms * 16;  // 16 tiles for each of two CTAs an SM
  const int ring = kernels::gemv_fp8_ring_config(16, 4);
  std::vector<int> persistent;
  for (int c = 0; c < kernels::gemv_fp8_num_configs(); ++c)
    if (kernels::gemv_fp8_config_name(c).find("persistent") != std::string::npos)
      persistent.push_back(c);
  ASSERT_GE(ring, 0);
  ASSERT_FALSE(persistent.empty());
  for (DType dt : kDTypes) {
    const Fp8Weight w = random_weight(N, K, Fp8ScaleLayout::kPerRow, rng);
    const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt, 0.125f);
    const std::vector<float> r0 = random_vector(size_t(M) * N, rng, 2.0f);
    const std::vector<float> gamma = rounded_random(N, rng, dt, 1.0f);
    const DeviceWeight dw(w);
    DeviceBuffer d_x(x.size(), 2), d_gamma(N, 2);
    d_x.upload_floats(x, dt);
    d_gamma.upload_floats(gamma, dt);
    std::vector<std::vector<float>> outs;  // r, h, ss of each config
    std::vector<int> configs = persistent;
    configs.push_back(ring);
    for (int config : configs) {
      SCOPED_TRACE(kernels::gemv_fp8_config_name(config));
      DeviceBuffer d_r(r0.size(), 4), d_h(size_t(M) * N, 2), d_ss(size_t(M) * (N / 16), 4);
      d_r.upload_floats(r0, dt);
      d_h.poison();
      d_ss.poison();
      kernels::Fp8GemvParams p = params(dt, M, w, dw, d_x.get(), d_h.get(), config);
      set_norm_out(p, d_r, d_gamma, d_ss);
      CUDA_OK(kernels::launch_gemv_fp8(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      for (const DeviceBuffer* b : {&d_r, &d_h, &d_ss}) EXPECT_TRUE(b->check_guards());
      std::vector<float> all = d_r.download_floats(dt);
      for (const DeviceBuffer* b : {&d_h, &d_ss}) {
        const std::vector<float> v = b->download_floats(dt);
        all.insert(all.end(), v.begin(), v.end());
      }
      ASSERT_FALSE(has_nonfinite(all));
      outs.push_back(std::move(all));
    }
    for (size_t i = 0; i + 1 < outs.size(); ++i)
      EXPECT_TRUE(outs[i] == outs.back()) << kernels::gemv_fp8_config_name(configs[i]);
  }
}

// A layer's down projection (Fp8NormOut) and the next qkv (Fp8NormIn) in one kernel with a grid
// barrier between them (launch_gemv_fp8_pair): the bits of the two launches, launch after launch
// on one barrier. One kernel at the 7B's and 8B's shapes (on Hopper), and where x fits in shared
// memory; two where it does not (2 rows of the 7B's down: 44 KB).
TEST(GemvFp8, PairEqualsTwoLaunchesBitForBit) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(79);
  int device = 0, major = 0;
  CUDA_OK(cudaGetDevice(&device));
  CUDA_OK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  DeviceBuffer barrier(2, 4);
  CUDA_OK(cudaMemset(barrier.get(), 0, kernels::kFp8PairBarrierBytes));
  struct Shape {
    int M, K1, H, N2;
    bool one_kernel;  // on Hopper
  };
  const Shape shapes[] = {{1, 11008, 4096, 12288, true},  // Llama-2-7B
                          {1, 14336, 4096, 6144, true},   // Llama-3-8B
                          {2, 11008, 4096, 12288, false},
                          {5, 64, 256, 40, true},
                          {8, 1024, 2048, 3072, true}};
  for (const Shape& s : shapes)
    for (DType dt : kDTypes)
      for (Fp8ScaleLayout layout : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128}) {
        SCOPED_TRACE(label(dt, s.M, s.H, s.K1, layout, -1) + " -> N2=" + std::to_string(s.N2));
        CUDA_OK(cudaMemset(barrier.get(), 0, kernels::kFp8PairBarrierBytes));  // a new grid
        const Fp8Weight w1 = random_weight(s.H, s.K1, layout, rng);
        const Fp8Weight w2 = random_weight(s.N2, s.H, layout, rng);
        const std::vector<float> x =
            rounded_random(size_t(s.M) * s.K1, rng, dt, 1.0f / std::sqrt(float(s.K1)));
        const std::vector<float> r0 = random_vector(size_t(s.M) * s.H, rng, 2.0f);
        const std::vector<float> gamma = rounded_random(s.H, rng, dt, 1.0f);
        const DeviceWeight dw1(w1), dw2(w2);
        DeviceBuffer d_x(x.size(), 2), d_gamma(s.H, 2), d_r(r0.size(), 4),
            d_h(size_t(s.M) * s.H, 2), d_ss(size_t(s.M) * (s.H / 16), 4),
            d_y(size_t(s.M) * s.N2, 2);
        d_x.upload_floats(x, dt);
        d_gamma.upload_floats(gamma, dt);
        kernels::Fp8GemvParams p1 = params(dt, s.M, w1, dw1, d_x.get(), d_h.get(), -1);
        set_norm_out(p1, d_r, d_gamma, d_ss);
        kernels::Fp8GemvParams p2 = params(dt, s.M, w2, dw2, d_h.get(), d_y.get(), -1);
        p2.norm_in.sumsq = d_ss.as<float>();
        p1.deep_prologue = p2.deep_prologue = true;
        auto run = [&](bool pair, std::vector<float>& all) {  // r, h, the sums of squares and y
          d_r.upload_floats(r0, dt);
          for (DeviceBuffer* b : {&d_h, &d_ss, &d_y}) b->poison();
          if (pair) {
            CUDA_OK(kernels::launch_gemv_fp8_pair(p1, p2, barrier.get(), nullptr));
          } else {
            CUDA_OK(kernels::launch_gemv_fp8(p1, nullptr));
            CUDA_OK(kernels::launch_gemv_fp8(p2, nullptr));
          }
          CUDA_OK(cudaDeviceSynchronize());
          all.clear();
          for (const DeviceBuffer* b : {&d_r, &d_h, &d_ss, &d_y}) {
            EXPECT_TRUE(b->check_guards());
            const std::vector<float> v = b->download_floats(dt);
            all.insert(all.end(), v.begin(), v.end());
          }
          EXPECT_FALSE(has_nonfinite(all));
        };
        std::vector<float> two, one;
        run(false, two);
        for (int rep = 0; rep < 3; ++rep) {
          run(true, one);
          EXPECT_TRUE(one == two) << "launch " << rep;
        }
        const bool fuses = kernels::gemv_fp8_pair_fuses(p1, p2, barrier.get());
        if (major >= 9) {
          EXPECT_EQ(fuses, s.one_kernel);
        }
        EXPECT_FALSE(kernels::gemv_fp8_pair_fuses(p1, p2, nullptr));
      }
}

TEST(GemvFp8, RejectsWhatItCannotDo) {
  kernels::Fp8GemvParams p;
  p.M = 17;  // more rows than two mma tiles
  p.N = 32;
  p.K = 64;
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.M = 1;
  p.K = 40;  // not whole 16-byte chunks
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.K = 64;
  p.config = kernels::gemv_fp8_num_configs();
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.config = -1;
  p.scale_layout = static_cast<Fp8ScaleLayout>(7);
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.scale_layout = Fp8ScaleLayout::kPerRow;
  p.epilogue = GemvEpilogue::kSiluMul;
  p.N = 24;  // whole tiles of 16 rows
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.N = 32;
  p.y_f32 = true;
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.y_f32 = false;
  p.epilogue = GemvEpilogue::kStore;
  p.bias = &p;
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.bias = nullptr;
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);  // null operands
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("null pointer"),
            std::string::npos);
  float f = 0;
  p.norm_out.residual = &f;  // without the norm's weight and sums
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.norm_out.weight = &f;
  p.norm_out.sumsq = &f;
  p.N = 40;  // not whole CTAs of 16 rows
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.N = 32;
  p.y_f32 = true;
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
  p.y_f32 = false;
  p.norm_out = {};
  p.norm_in.sumsq = &f;
  p.norm_in.eps = -1.0f;
  EXPECT_EQ(kernels::launch_gemv_fp8(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
