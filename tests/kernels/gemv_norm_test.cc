// The GEMV's residual add (GemvEpilogue::kResidual) and its RMSNorm on load
// (GemvParams::norm_weight), which replace the add + norm kernel at decode, against fp64 CPU
// references: the stream update and its per-tile sums of squares, the normed product, and the
// ring shapes against their register twins bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/gemv.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::GemvEpilogue;

constexpr float kEps = 1e-5f;

std::string name(DType dt, int M, int N, int K, int config) {
  return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K) + " config " +
         (config < 0 ? "default" : kernels::gemv_config_name(config));
}

/// -1 (the default rule) and every shape with the fused epilogues and normed input.
std::vector<int> fused_configs() {
  std::vector<int> configs = {-1};
  for (int c = 0; c < kernels::gemv_num_configs(); ++c)
    if (kernels::gemv_config_info(c).fused) configs.push_back(c);
  return configs;
}

/// s[m, n] = sum_k x[m, k] w[n, k] in fp64, and the largest sum of |products| (error scale).
std::vector<double> ref_gemv(const std::vector<double>& x, const std::vector<float>& w, int M,
                             int N, int K, double* sum_abs_max) {
  std::vector<double> s(size_t(M) * N);
  *sum_abs_max = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const double p = x[size_t(m) * K + k] * w[size_t(n) * K + k];
        acc += p;
        a += std::abs(p);
      }
      s[size_t(m) * N + n] = acc;
      *sum_abs_max = std::max(*sum_abs_max, a);
    }
  return s;
}

/// The sums of squares a kResidual GEMV leaves for a [M, K] stream: one per 16 columns.
std::vector<float> tile_squares(const std::vector<float>& res, int M, int K) {
  const int parts = (K + 15) / 16;
  std::vector<float> sq(size_t(M) * parts);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < parts; ++j) {
      double s = 0;
      for (int k = 16 * j; k < std::min(K, 16 * j + 16); ++k)
        s += double(res[size_t(m) * K + k]) * res[size_t(m) * K + k];
      sq[size_t(m) * parts + j] = float(s);
    }
  return sq;
}

// res[m, n] += dtype(x w^T) + bias[n], and the sums of squares of the updated rows by tile.
void check_residual(DType dt, int M, int N, int K, bool with_bias, int config, std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, N, K, config) + (with_bias ? " bias" : ""));
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> bias =
      with_bias ? rounded_random(N, rng, dt, 0.5f) : std::vector<float>(N, 0.0f);
  const std::vector<float> res = random_vector(size_t(M) * N, rng, 4.0f);
  double sum_abs = 0;
  const std::vector<double> s =
      ref_gemv(std::vector<double>(x.begin(), x.end()), w, M, N, K, &sum_abs);
  std::vector<float> rounded(s.begin(), s.end());
  rounded = round_to(rounded, dt);
  std::vector<float> want(res.size());
  double s_max = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = res[i] + (rounded[i] + bias[i % N]);
    s_max = std::max(s_max, std::abs(s[i]));
  }

  const int parts = (N + 15) / 16;
  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_b(N, 2), d_res(res.size(), 4),
      d_sq(size_t(M) * parts, 4);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  d_b.upload_floats(bias, dt);
  d_res.upload_floats(res, dt);
  d_sq.poison();
  kernels::GemvParams p;
  p.dtype = dt;
  p.M = M;
  p.N = N;
  p.K = K;
  p.x = d_x.get();
  p.w = d_w.get();
  p.y = d_res.get();
  p.epilogue = GemvEpilogue::kResidual;
  p.bias = with_bias ? d_b.get() : nullptr;
  p.sq_out = d_sq.as<float>();
  p.config = config;
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_res.check_guards());
  EXPECT_TRUE(d_sq.check_guards());
  const std::vector<float> got = d_res.download_floats(dt);
  const std::vector<float> sq = d_sq.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got));
  ASSERT_FALSE(has_nonfinite(sq)) << "a tile's sum of squares was not written";
  // The fp32 sum may round to the neighbouring dtype value: one ulp of the largest sum, plus
  // the fp32 accumulation error and the fp32 add.
  EXPECT_LE(max_abs_error(got, want), 1.01 * ulp1(dt) * s_max + 1e-5 * sum_abs + 1e-5);
  // The sums of squares are of the stream as written, up to fp32 rounding.
  const std::vector<float> sq_want = tile_squares(got, M, N);
  for (size_t i = 0; i < sq.size(); ++i)
    EXPECT_NEAR(sq[i], sq_want[i], 1e-5 * sq_want[i] + 1e-30) << "tile " << i;
}

TEST(GemvResidual, AddsToTheStreamAndLeavesSumsOfSquares) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(51);
  for (DType dt : kDTypes)
    for (int config : fused_configs())
      for (bool bias : {false, true}) {
        check_residual(dt, 1, 4096, 4096, bias, config, rng);
        check_residual(dt, 8, 1000, 200, bias, config, rng);  // a partial tile of 8 columns
        check_residual(dt, 3, 17, 8, bias, config, rng);
      }
}

// y = dtype(x * r * norm_weight) w^T with r = 1 / rms(x) from the tile sums of squares.
void check_normed(DType dt, int M, int N, int K, int config, std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, N, K, config));
  const std::vector<float> x = random_vector(size_t(M) * K, rng, 3.0f);  // the fp32 stream
  std::vector<float> nw = random_vector(K, rng, 0.5f);
  for (float& v : nw) v += 1.0f;
  nw = round_to(nw, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> sq = tile_squares(x, M, K);
  std::vector<double> xn(x.size());
  for (int m = 0; m < M; ++m) {
    double ss = 0;
    for (int k = 0; k < K; ++k) ss += double(x[size_t(m) * K + k]) * x[size_t(m) * K + k];
    const double r = 1.0 / std::sqrt(ss / K + kEps);
    for (int k = 0; k < K; ++k) xn[size_t(m) * K + k] = x[size_t(m) * K + k] * r * nw[k];
  }
  double sum_abs = 0;
  const std::vector<double> s = ref_gemv(xn, w, M, N, K, &sum_abs);
  std::vector<float> want(s.begin(), s.end());
  want = round_to(want, dt);

  DeviceBuffer d_x(x.size(), 4), d_nw(K, 2), d_sq(sq.size(), 4), d_w(w.size(), 2),
      d_y(want.size(), 2);
  d_x.upload_floats(x, dt);
  d_nw.upload_floats(nw, dt);
  d_sq.upload_floats(sq, dt);
  d_w.upload_floats(w, dt);
  d_y.poison();
  kernels::GemvParams p;
  p.dtype = dt;
  p.M = M;
  p.N = N;
  p.K = K;
  p.x = d_x.get();
  p.w = d_w.get();
  p.y = d_y.get();
  p.norm_weight = d_nw.get();
  p.sq_in = d_sq.as<float>();
  p.norm_eps = kEps;
  p.config = config;
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  const std::vector<float> got = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten output";
  double y_max = 1e-6;
  for (float v : want) y_max = std::max(y_max, double(std::abs(v)));
  // Each normed input is rounded to the dtype (half an ulp of it, relative), the output once
  // more, and fp32 accumulates: bounded by the sum of |products|.
  EXPECT_LE(max_abs_error(got, want), 0.51 * ulp1(dt) * sum_abs + 1.01 * ulp1(dt) * y_max);
  EXPECT_LE(normalized_error(got, want), tol_for(dt));
}

TEST(GemvNormedInput, MatchesRmsNormThenGemv) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(52);
  for (DType dt : kDTypes)
    for (int config : fused_configs()) {
      check_normed(dt, 1, 1027, 4096, config, rng);
      check_normed(dt, 8, 64, 4104, config, rng);  // K not a multiple of 16: a short last tile
      check_normed(dt, 3, 33, 8, config, rng);
    }
}

// The ring changes where weights wait, not the sums: with the residual epilogue or the normed
// input too, each ring shape matches its register twin (same warps) bit for bit.
TEST(GemvNormedInput, RingShapesMatchRegisterTwinsBitwise) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(53);
  int compared = 0;
  for (DType dt : kDTypes) {
    for (const auto [M, N, K] : {std::array{1, 4096, 11008}, {5, 1040, 4104}}) {
      const std::vector<float> x = random_vector(size_t(M) * K, rng, 2.0f);
      const std::vector<float> nw = rounded_random(K, rng, dt);
      const std::vector<float> w =
          rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
      const std::vector<float> res = random_vector(size_t(M) * N, rng);
      DeviceBuffer d_x(x.size(), 4), d_xh(x.size(), 2), d_nw(K, 2), d_w(w.size(), 2),
          d_sq(size_t(M) * ((K + 15) / 16), 4);
      d_x.upload_floats(x, dt);
      d_xh.upload_floats(round_to(x, dt), dt);
      d_nw.upload_floats(nw, dt);
      d_w.upload_floats(w, dt);
      d_sq.upload_floats(tile_squares(x, M, K), dt);
      auto run = [&](int config, GemvEpilogue epi) -> std::vector<float> {
        const bool residual = epi == GemvEpilogue::kResidual;
        DeviceBuffer d_y(size_t(M) * (epi == GemvEpilogue::kSiluMul ? N / 2 : N), residual ? 4 : 2),
            d_out_sq(size_t(M) * ((N + 15) / 16), 4);
        if (residual) {
          d_y.upload_floats(res, dt);
        } else {
          d_y.poison();
        }
        kernels::GemvParams p;
        p.dtype = dt;
        p.M = M;
        p.N = N;
        p.K = K;
        p.w = d_w.get();
        p.y = d_y.get();
        p.epilogue = epi;
        p.config = config;
        if (residual) {
          p.x = d_xh.get();
          p.sq_out = d_out_sq.as<float>();
        } else {
          p.x = d_x.get();
          p.norm_weight = d_nw.get();
          p.sq_in = d_sq.as<float>();
        }
        EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(d_y.check_guards());
        std::vector<float> out = d_y.download_floats(dt);
        if (residual) {
          const std::vector<float> q = d_out_sq.download_floats(dt);
          out.insert(out.end(), q.begin(), q.end());
        }
        return out;
      };
      for (int ring = 0; ring < kernels::gemv_num_configs(); ++ring) {
        const kernels::GemvConfigInfo r = kernels::gemv_config_info(ring);
        if (r.stages == 0 || !r.fused) continue;
        for (int reg = 0; reg < kernels::gemv_num_configs(); ++reg) {
          const kernels::GemvConfigInfo c = kernels::gemv_config_info(reg);
          if (c.stages != 0 || c.warps != r.warps || !c.fused) continue;
          for (GemvEpilogue epi :
               {GemvEpilogue::kStore, GemvEpilogue::kSiluMul, GemvEpilogue::kResidual}) {
            SCOPED_TRACE("M=" + std::to_string(M) + " " + kernels::gemv_config_name(ring) + " vs " +
                         kernels::gemv_config_name(reg) + " epilogue " + std::to_string(int(epi)));
            const std::vector<float> a = run(ring, epi), b = run(reg, epi);
            ASSERT_FALSE(has_nonfinite(a));
            EXPECT_EQ(a, b);
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0) << "no ring shape has a register twin";
}

TEST(GemvNormedInput, RejectsWhatItCannotDo) {
  float sq = 0;
  kernels::GemvParams p;
  p.M = 1;
  p.N = 32;
  p.K = 64;
  p.epilogue = GemvEpilogue::kResidual;  // needs sq_out
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.sq_out = &sq;
  p.norm_weight = &sq;  // a residual GEMV takes its input as it is
  p.sq_in = &sq;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.epilogue = GemvEpilogue::kStore;
  p.sq_out = nullptr;
  p.sq_in = nullptr;  // a normed input needs the sums of squares
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  if (!have_gpu()) return;
  // A shape without the fused instances refuses them.
  int plain = 0;
  while (plain < kernels::gemv_num_configs() && kernels::gemv_config_info(plain).fused) ++plain;
  ASSERT_LT(plain, kernels::gemv_num_configs());
  DeviceBuffer d_x(64, 4), d_nw(64, 2), d_sq(4, 4), d_w(size_t(32) * 64, 2), d_y(32, 2);
  kernels::GemvParams q;
  q.M = 1;
  q.N = 32;
  q.K = 64;
  q.x = d_x.get();
  q.w = d_w.get();
  q.y = d_y.get();
  q.norm_weight = d_nw.get();
  q.sq_in = d_sq.as<float>();
  q.config = plain;
  EXPECT_EQ(kernels::launch_gemv(q, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
