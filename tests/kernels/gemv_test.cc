// Decode GEMV against an fp64 CPU reference: M 1..8, K 8 / 4096 / 11008, odd N, both output
// types, and the rejections (M > 8, K not a multiple of 8) that send callers to a GEMM.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
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

void run_gemv(DType dt, int M, int N, int K, bool y_f32, std::mt19937& rng, int config = -1) {
  SCOPED_TRACE(std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M) +
               " N=" + std::to_string(N) + " K=" + std::to_string(K) + (y_f32 ? " y_f32" : "") +
               " config " + (config < 0 ? "default" : kernels::gemv_config_name(config)));
  const std::vector<float> x = round_to(random_vector(size_t(M) * K, rng), dt);
  const std::vector<float> w =
      round_to(random_vector(size_t(N) * K, rng, 1.0f / std::sqrt(float(K))), dt);
  std::vector<float> want(size_t(M) * N);
  double sum_abs_max = 0;  // the largest sum of |products|: the scale of fp32 accumulation error
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const double prod = double(x[size_t(m) * K + k]) * w[size_t(n) * K + k];
        s += prod;
        a += std::abs(prod);
      }
      want[size_t(m) * N + n] = float(s);
      sum_abs_max = std::max(sum_abs_max, a);
    }
  }
  if (!y_f32) want = round_to(want, dt);
  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_y(want.size(), y_f32 ? 4 : 2);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  d_y.poison();
  kernels::GemvParams p = gemv_params(dt, M, N, K, d_x.get(), d_w.get(), d_y.get(), config);
  p.y_f32 = y_f32;
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  const std::vector<float> got = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten output";
  double scale = 1e-6;
  for (float v : want) scale = std::max(scale, double(std::abs(v)));
  // fp32 accumulation: a few ulps of fp32 of the sum of |products|; plus one dtype ulp when
  // rounded.
  const double acc_err = 1e-5 * sum_abs_max;
  EXPECT_LE(max_abs_error(got, want), (y_f32 ? 0.0 : 1.01 * ulp1(dt) * scale) + acc_err);
  EXPECT_LE(normalized_error(got, want), y_f32 ? 1e-5 : tol_for(dt));
}

TEST(Gemv, AllBatchSizesOnASmallShape) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (DType dt : kDTypes)
    for (int M = 1; M <= 8; ++M)
      for (bool y_f32 : {false, true}) run_gemv(dt, M, 257, 4096, y_f32, rng);
}

TEST(Gemv, OddAndTinyShapes) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(32);
  for (DType dt : kDTypes) {
    run_gemv(dt, 1, 1, 8, false, rng);
    run_gemv(dt, 3, 17, 8, true, rng);
    run_gemv(dt, 8, 33, 24, false, rng);    // 3 chunks: a partial step
    run_gemv(dt, 5, 1001, 200, true, rng);  // 25 chunks
    run_gemv(dt, 2, 15, 4104, false, rng);  // N < 16, K not a multiple of 32
  }
}

TEST(Gemv, LlamaShapes) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(33);
  for (DType dt : kDTypes) {
    for (int M : {1, 8}) {
      run_gemv(dt, M, 4099, 11008, false, rng);  // the down projection's K, an odd N
      run_gemv(dt, M, 1027, 4096, true, rng);
    }
  }
}

// Every CTA shape on K values that leave partial loop iterations for each of them.
TEST(Gemv, EveryKernelShape) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(34);
  ASSERT_GE(kernels::gemv_num_configs(), 2);
  for (int config = 0; config < kernels::gemv_num_configs(); ++config) {
    for (DType dt : kDTypes) {
      run_gemv(dt, 1, 37, 8, false, rng, config);
      run_gemv(dt, 3, 261, 4104, true, rng, config);
      run_gemv(dt, 8, 1040, 11008, false, rng, config);
      run_gemv(dt, 5, 99, 1000, false, rng, config);
    }
  }
}

// The shared-memory ring changes where weights wait, not the order of the sums: every shape
// gives bit-identical output to the register-buffered shape with the same number of warps.
TEST(Gemv, RingShapesMatchRegisterShapesBitwise) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(35);
  int compared = 0;
  for (DType dt : kDTypes) {
    for (const auto [M, N, K] : {std::array{1, 4099, 11008}, {8, 1040, 4104}, {3, 37, 200}}) {
      const std::vector<float> x = round_to(random_vector(size_t(M) * K, rng), dt);
      const std::vector<float> w =
          round_to(random_vector(size_t(N) * K, rng, 1.0f / std::sqrt(float(K))), dt);
      DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2);
      d_x.upload_floats(x, dt);
      d_w.upload_floats(w, dt);
      auto run = [&](int config) -> std::vector<float> {
        DeviceBuffer d_y(size_t(M) * N, 2);
        d_y.poison();
        EXPECT_EQ(kernels::launch_gemv(
                      gemv_params(dt, M, N, K, d_x.get(), d_w.get(), d_y.get(), config), nullptr),
                  cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(d_y.check_guards());
        return d_y.download_floats(dt);
      };
      for (int ring = 0; ring < kernels::gemv_num_configs(); ++ring) {
        const kernels::GemvConfigInfo r = kernels::gemv_config_info(ring);
        if (r.stages == 0) continue;
        for (int reg = 0; reg < kernels::gemv_num_configs(); ++reg) {
          const kernels::GemvConfigInfo c = kernels::gemv_config_info(reg);
          if (c.stages != 0 || c.warps != r.warps) continue;
          SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K) + " " +
                       kernels::gemv_config_name(ring) + " vs " + kernels::gemv_config_name(reg));
          const std::vector<float> a = run(ring), b = run(reg);
          ASSERT_FALSE(has_nonfinite(a));
          EXPECT_EQ(a, b);
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 0) << "no ring shape has a register twin";
}

TEST(Gemv, RejectsShapesForAGemm) {
  kernels::GemvParams p;
  p.M = 9;
  p.N = 16;
  p.K = 64;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.M = 1;
  p.K = 12;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.K = 64;
  p.config = kernels::gemv_num_configs();
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
