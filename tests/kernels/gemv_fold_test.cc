// The folded RMSNorm of the decode GEMVs (rill/kernels/gemv.h): kResidualRms against a CPU
// reference built from the plain GEMV's rounded sums (which gemv_test.cc checks against fp64),
// the x_ss scaling of kStore and kSiluMul against the plain GEMV's fp32 sums, and the pair
// against GEMV + add_norm kernel + GEMV.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/elementwise.h"
#include "rill/kernels/gemv.h"
#include "tests/kernels/gemv_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::GemvEpilogue;

std::string name(DType dt, int M, int N, int K) {
  return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

int parts(int n) {
  return (n + 15) / 16;
}

// kResidualRms: residual and y bit-exact against the reference from the plain GEMV's d, the row
// sums of squares to fp32 rounding.
void check_residual_rms(DType dt, int M, int N, int K, bool with_bias, int config,
                        std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, N, K) + (with_bias ? " bias" : "") + " config " +
               std::to_string(config));
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> bias = rounded_random(N, rng, dt, 0.3f);
  const std::vector<float> g = round_to(random_vector(N, rng, 1.0f), dt);
  const std::vector<float> r0 = random_vector(size_t(M) * N, rng, 3.0f);
  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_b(N, 2), d_g(N, 2), d_d(size_t(M) * N, 2),
      d_y(size_t(M) * N, 2), d_r(r0.size(), 4), d_ss(size_t(M) * parts(N), 4);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  d_b.upload_floats(bias, dt);
  d_g.upload_floats(g, dt);
  d_r.upload_floats(r0, dt);
  d_y.poison();
  d_ss.poison();
  kernels::GemvParams p = gemv_params(dt, M, N, K, d_x.get(), d_w.get(), d_d.get(), config);
  CUDA_OK(kernels::launch_gemv(p, nullptr));  // d = dtype(x w^T), the same sums as the fold
  p.y = d_y.get();
  p.epilogue = GemvEpilogue::kResidualRms;
  p.bias = with_bias ? d_b.get() : nullptr;
  p.residual = d_r.as<float>();
  p.norm_weight = d_g.get();
  p.row_ss = d_ss.as<float>();
  ASSERT_TRUE(kernels::gemv_folds_norm(p));
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  EXPECT_TRUE(d_r.check_guards());
  EXPECT_TRUE(d_ss.check_guards());

  const std::vector<float> d = d_d.download_floats(dt);
  std::vector<float> want_r(r0.size()), want_y(r0.size()), want_ss(size_t(M) * parts(N), 0.0f);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const size_t i = size_t(m) * N + n;
      want_r[i] = r0[i] + (d[i] + (with_bias ? bias[n] : 0.0f));  // add_norm's fp32 operations
      want_y[i] = want_r[i] * g[n];
      want_ss[size_t(m) * parts(N) + n / 16] += want_r[i] * want_r[i];
    }
  want_y = round_to(want_y, dt);
  const std::vector<float> got_r = d_r.download_floats(dt), got_y = d_y.download_floats(dt),
                           got_ss = d_ss.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got_y)) << "y unwritten";
  EXPECT_EQ(max_abs_error(got_r, want_r), 0.0) << "residual";
  EXPECT_EQ(max_abs_error(got_y, want_y), 0.0) << "y";
  for (size_t j = 0; j < want_ss.size(); ++j)
    EXPECT_NEAR(got_ss[j], want_ss[j], 1e-5 * want_ss[j]) << "row_ss " << j;
}

// x_ss: the plain GEMV's fp32 sums times 1 / rms from the row sums, then the epilogue.
void check_scaled(DType dt, int M, int N, int K, GemvEpilogue epi, int config, std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, N, K) + (epi == GemvEpilogue::kSiluMul ? " silu" : " store") +
               " config " + std::to_string(config));
  const float eps = 1e-5f;
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt, 4.0f);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> bias = rounded_random(N, rng, dt, 0.3f);
  std::vector<float> ss = random_vector(size_t(M) * parts(K), rng, 1.0f);
  for (float& v : ss) v = 20.0f * (std::abs(v) + 0.1f);  // sums of squares of 16 values
  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_b(N, 2), d_s(size_t(M) * N, 4),
      d_ss(ss.size(), 4), d_y(size_t(M) * N, 2);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  d_b.upload_floats(bias, dt);
  d_ss.upload_floats(ss, dt);
  d_y.poison();
  kernels::GemvParams p = gemv_params(dt, M, N, K, d_x.get(), d_w.get(), d_s.get(), config);
  p.y_f32 = true;
  CUDA_OK(kernels::launch_gemv(p, nullptr));  // the sums
  p.y = d_y.get();
  p.y_f32 = false;
  p.epilogue = epi;
  p.bias = epi == GemvEpilogue::kSiluMul ? d_b.get() : nullptr;
  p.x_ss = d_ss.as<float>();
  p.eps = eps;
  ASSERT_TRUE(kernels::gemv_folds_norm(p));
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());

  const std::vector<float> s = d_s.download_floats(dt);
  const int out = epi == GemvEpilogue::kSiluMul ? N / 2 : N;
  std::vector<float> want(size_t(M) * out);
  for (int m = 0; m < M; ++m) {
    double sum = 0;
    for (int j = 0; j < parts(K); ++j) sum += ss[size_t(m) * parts(K) + j];
    const double inv = 1.0 / std::sqrt(sum / K + eps);
    for (int n = 0; n < out; ++n) {
      if (epi == GemvEpilogue::kStore) {
        want[size_t(m) * out + n] = float(s[size_t(m) * N + n] * inv);
        continue;
      }
      const int gate = n / 8 * 16 + n % 8, up = gate + 8;  // interleaved tiles of 8
      const double a = round_to({float(s[size_t(m) * N + gate] * inv)}, dt)[0] + bias[gate];
      const double b = round_to({float(s[size_t(m) * N + up] * inv)}, dt)[0] + bias[up];
      want[size_t(m) * out + n] = float(a / (1.0 + std::exp(-a)) * b);
    }
  }
  want = round_to(want, dt);
  std::vector<float> got = d_y.download_floats(dt);
  got.resize(want.size());
  ASSERT_FALSE(has_nonfinite(got)) << "y unwritten";
  // The 1 / rms in fp32 against fp64, and a gate or up that may round to its neighbour: a few
  // ulps of the largest output at most.
  double y_max = 1e-6;
  for (float v : want) y_max = std::max(y_max, double(std::abs(v)));
  EXPECT_LE(max_abs_error(got, want), 4 * ulp1(dt) * y_max);
  EXPECT_LE(normalized_error(got, want), tol_for(dt));
}

TEST(GemvFold, ResidualRmsMatchesTheReference) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(46);
  for (DType dt : kDTypes)
    for (int config : {-1, 0, 9}) {  // default, 16 warps x 2 (registers), the deep ring
      check_residual_rms(dt, 1, 4096, 4096, false, config, rng);
      check_residual_rms(dt, 3, 264, 1000, true, config, rng);
      check_residual_rms(dt, 8, 1032, 136, true, config, rng);
      check_residual_rms(dt, 5, 20, 64, false, config, rng);  // a partial tile of 16 rows
    }
}

TEST(GemvFold, ScaledInputMatchesTheReference) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(47);
  for (DType dt : kDTypes)
    for (GemvEpilogue epi : {GemvEpilogue::kStore, GemvEpilogue::kSiluMul}) {
      check_scaled(dt, 1, 1376, 4096, epi, -1, rng);
      check_scaled(dt, 4, 96, 1032, epi, 0, rng);
      check_scaled(dt, 8, 32, 264, epi, 9, rng);
    }
}

// o projection + add_norm kernel + gate|up projection, against the same with the norm folded.
TEST(GemvFold, PairMatchesGemvAddNormGemv) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(48);
  for (DType dt : kDTypes)
    for (int M : {1, 2, 8}) {
      SCOPED_TRACE(name(dt, M, 512, 256));
      const int H = 512, K0 = 256, N1 = 768;
      const std::vector<float> x = rounded_random(size_t(M) * K0, rng, dt);
      const std::vector<float> w0 = rounded_random(size_t(H) * K0, rng, dt, 0.0625f);
      const std::vector<float> w1 = rounded_random(size_t(N1) * H, rng, dt, 0.05f);
      const std::vector<float> g = round_to(random_vector(H, rng, 1.0f), dt);
      const std::vector<float> r0 = random_vector(size_t(M) * H, rng, 3.0f);
      DeviceBuffer d_x(x.size(), 2), d_w0(w0.size(), 2), d_w1(w1.size(), 2), d_g(H, 2),
          d_o(size_t(M) * H, 2), d_h(size_t(M) * H, 2), d_ss(size_t(M) * parts(H), 4),
          d_ra(r0.size(), 4), d_rb(r0.size(), 4), d_ya(size_t(M) * N1, 2), d_yb(size_t(M) * N1, 2);
      d_x.upload_floats(x, dt);
      d_w0.upload_floats(w0, dt);
      d_w1.upload_floats(w1, dt);
      d_g.upload_floats(g, dt);
      d_ra.upload_floats(r0, dt);
      d_rb.upload_floats(r0, dt);
      // Unfolded: o = x w0^T; r += o; h = rmsnorm(r) * g; y = h w1^T.
      CUDA_OK(kernels::launch_gemv(gemv_params(dt, M, H, K0, d_x.get(), d_w0.get(), d_o.get(), -1),
                                   nullptr));
      kernels::AddNormParams a;
      a.dtype = dt;
      a.num_tokens = M;
      a.hidden = H;
      a.residual = d_ra.as<float>();
      a.delta0 = d_o.get();
      a.weight0 = d_g.get();
      a.out0 = d_h.get();
      CUDA_OK(kernels::launch_add_norm(a, nullptr));
      CUDA_OK(kernels::launch_gemv(gemv_params(dt, M, N1, H, d_h.get(), d_w1.get(), d_ya.get(), -1),
                                   nullptr));
      // Folded.
      kernels::GemvParams p0 = gemv_params(dt, M, H, K0, d_x.get(), d_w0.get(), d_h.get(), -1);
      p0.epilogue = GemvEpilogue::kResidualRms;
      p0.residual = d_rb.as<float>();
      p0.norm_weight = d_g.get();
      p0.row_ss = d_ss.as<float>();
      CUDA_OK(kernels::launch_gemv(p0, nullptr));
      kernels::GemvParams p1 = gemv_params(dt, M, N1, H, d_h.get(), d_w1.get(), d_yb.get(), -1);
      p1.x_ss = d_ss.as<float>();
      p1.eps = a.eps;
      CUDA_OK(kernels::launch_gemv(p1, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      EXPECT_EQ(max_abs_error(d_rb.download_floats(dt), d_ra.download_floats(dt)), 0.0)
          << "residual";
      const std::vector<float> ya = d_ya.download_floats(dt), yb = d_yb.download_floats(dt);
      ASSERT_FALSE(has_nonfinite(yb));
      // Rounded in another place (the norm's output before or after its 1 / rms).
      EXPECT_LE(normalized_error(yb, ya), tol_for(dt));
    }
}

TEST(GemvFold, RejectsWhatItCannotDo) {
  kernels::GemvParams p;
  p.M = 1;
  p.N = 64;
  p.K = 64;
  p.epilogue = GemvEpilogue::kResidualRms;  // without residual, norm weight, row sums
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  float dummy[64];
  p.residual = dummy;
  p.norm_weight = dummy;
  p.row_ss = dummy;
  p.x_ss = dummy;  // a kResidualRms input is never folded
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.x_ss = nullptr;
  p.y_f32 = true;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  // Only 16-warp shapes fold; an 8-warp one refuses.
  int eight = -1;
  for (int c = 0; c < kernels::gemv_num_configs() && eight < 0; ++c)
    if (kernels::gemv_config_info(c).warps == 8) eight = c;
  ASSERT_GE(eight, 0);
  kernels::GemvParams q;
  q.M = 1;
  q.N = 64;
  q.K = 64;
  q.config = eight;
  EXPECT_FALSE(kernels::gemv_folds_norm(q));
  q.config = -1;
  EXPECT_TRUE(kernels::gemv_folds_norm(q));
  if (!have_gpu()) return;
  DeviceBuffer d_x(64, 2), d_w(size_t(64) * 64, 2), d_y(64, 2), d_ss(4, 4);
  q = gemv_params(DType::kF16, 1, 64, 64, d_x.get(), d_w.get(), d_y.get(), eight);
  q.x_ss = d_ss.as<float>();
  EXPECT_EQ(kernels::launch_gemv(q, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
