// The kSiluMul epilogue of the GEMV (rill/kernels/gemv.h) against an fp64 CPU reference: one pass
// over interleaved gate|up rows gives silu(gate) * up, as the GEMV + activation kernel would.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/gemv.h"
#include "tests/kernels/gemv_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::GemvEpilogue;

std::string name(DType dt, int M, int N, int K, int config) {
  return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K) + " config " +
         std::to_string(config);
}

/// s[m, n] = sum_k x[m, k] w[n, k] in fp64, and the largest sum of |products| (error scale).
std::vector<double> ref_gemv(const std::vector<float>& x, const std::vector<float>& w, int M, int N,
                             int K, double* sum_abs_max) {
  std::vector<double> s(size_t(M) * N);
  *sum_abs_max = 0;
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double acc = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const double p = double(x[size_t(m) * K + k]) * w[size_t(n) * K + k];
        acc += p;
        a += std::abs(p);
      }
      s[size_t(m) * N + n] = acc;
      *sum_abs_max = std::max(*sum_abs_max, a);
    }
  }
  return s;
}

std::vector<float> to_floats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

/// Interleaves gate rows g [I, K] and up rows u [I, K] in tiles of 8 (GemvEpilogue::kSiluMul).
std::vector<float> interleave(const std::vector<float>& g, const std::vector<float>& u, int I,
                              int K) {
  std::vector<float> out(size_t(2) * I * K);
  for (int j = 0; j < I; ++j) {
    const size_t tile = size_t(j / 8) * 16, r = j % 8;
    std::copy_n(g.begin() + size_t(j) * K, K, out.begin() + (tile + r) * K);
    std::copy_n(u.begin() + size_t(j) * K, K, out.begin() + (tile + 8 + r) * K);
  }
  return out;
}

double silu(double x) {
  return x / (1.0 + std::exp(-x));
}

// y = silu(dtype(x Wg^T) + bg) * (dtype(x Wu^T) + bu) from one pass over interleaved rows.
void check_silu_mul(DType dt, int M, int I, int K, bool with_bias, int config, std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, 2 * I, K, config) + (with_bias ? " bias" : ""));
  const float ws = 2.0f / std::sqrt(float(K));
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt);
  const std::vector<float> wg = rounded_random(size_t(I) * K, rng, dt, ws);
  const std::vector<float> wu = rounded_random(size_t(I) * K, rng, dt, ws);
  const std::vector<float> bg =
      with_bias ? rounded_random(I, rng, dt, 0.5f) : std::vector<float>(I, 0.0f);
  const std::vector<float> bu =
      with_bias ? rounded_random(I, rng, dt, 0.5f) : std::vector<float>(I, 0.0f);
  double a0 = 0, a1 = 0;
  const std::vector<float> g = round_to(to_floats(ref_gemv(x, wg, M, I, K, &a0)), dt);
  const std::vector<float> u = round_to(to_floats(ref_gemv(x, wu, M, I, K, &a1)), dt);
  std::vector<float> want(size_t(M) * I);
  for (int m = 0; m < M; ++m)
    for (int j = 0; j < I; ++j) {
      const size_t i = size_t(m) * I + j;
      want[i] = float(silu(double(g[i]) + bg[j]) * (double(u[i]) + bu[j]));
    }
  want = round_to(want, dt);

  DeviceBuffer d_x(x.size(), 2), d_w(size_t(2) * I * K, 2), d_bias(size_t(2) * I, 2),
      d_y(want.size(), 2);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(interleave(wg, wu, I, 1 * K), dt);
  d_bias.upload_floats(interleave(bg, bu, I, 1), dt);
  d_y.poison();
  kernels::GemvParams p = gemv_params(dt, M, 2 * I, K, d_x.get(), d_w.get(), d_y.get(), config);
  p.epilogue = GemvEpilogue::kSiluMul;
  p.bias = with_bias ? d_bias.get() : nullptr;
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  const std::vector<float> got = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten output";
  // A gate or up value may round to the neighbouring dtype value (fp32 vs fp64 sums): a few
  // ulps of that element at most.
  double y_max = 1e-6;
  for (float v : want) y_max = std::max(y_max, double(std::abs(v)));
  EXPECT_LE(max_abs_error(got, want), 4 * ulp1(dt) * y_max);
  EXPECT_LE(normalized_error(got, want), tol_for(dt));
}

TEST(GemvSilu, MatchesGemvThenActivation) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(43);
  std::vector<int> configs = {-1};  // the default, and every shape with a kSiluMul instance
  for (int c = 0; c < kernels::gemv_num_configs(); ++c)
    if (kernels::gemv_config_info(c).silu) configs.push_back(c);
  for (DType dt : kDTypes)
    for (int config : configs)
      for (bool bias : {false, true}) {
        check_silu_mul(dt, 1, 1376, 4096, bias, config, rng);
        check_silu_mul(dt, 8, 64, 4104, bias, config, rng);
        check_silu_mul(dt, 3, 8, 8, bias, config, rng);  // one tile
      }
}

TEST(GemvSilu, RejectsWhatItCannotDo) {
  kernels::GemvParams p;
  p.M = 1;
  p.N = 24;  // kSiluMul needs whole tiles of 16 rows
  p.K = 64;
  p.epilogue = GemvEpilogue::kSiluMul;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.N = 32;
  p.y_f32 = true;  // kSiluMul writes the dtype
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.y_f32 = false;
  p.epilogue = GemvEpilogue::kStore;
  p.bias = &p;  // kStore takes no bias
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  if (!have_gpu()) return;
  // A shape without a kSiluMul instance refuses it.
  int plain = 0;
  while (plain < kernels::gemv_num_configs() && kernels::gemv_config_info(plain).silu) ++plain;
  ASSERT_LT(plain, kernels::gemv_num_configs());
  DeviceBuffer d_x(64, 2), d_w(size_t(32) * 64, 2), d_y(16, 2);
  kernels::GemvParams q =
      gemv_params(DType::kF16, 1, 32, 64, d_x.get(), d_w.get(), d_y.get(), plain);
  q.epilogue = GemvEpilogue::kSiluMul;
  EXPECT_EQ(kernels::launch_gemv(q, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
