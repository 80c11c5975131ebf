// GemvParams::add_norm: the residual add + norm run by the GEMV's last CTA gives exactly what
// launch_gemv followed by launch_add_norm gives (both checked against CPU references in
// gemv_test.cc and elementwise_test.cc), bit for bit, in every output, and leaves its counter at
// zero so the next launch works; shapes it does not fit take the add_norm kernel, same results.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
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
using kernels::NormType;

struct TailCase {
  int M, N, K;  // GEMV: x [M, K], w [N, K]; the norm's hidden is N
  NormType type;
  bool parallel;  // GPT-NeoX: delta0 = another sub-layer's output, delta1 = y, two outputs
  bool gather;    // the final norm: rows[i] picks the residual row
  int config;     // -1: the default (deep prologue)
};

std::string describe(const TailCase& c, DType dt) {
  return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         (c.type == NormType::kRms ? " rms" : " layer") + (c.parallel ? " parallel" : "") +
         (c.gather ? " rows" : "") + " config " + std::to_string(c.config);
}

std::vector<uint8_t> bytes_of(const DeviceBuffer& b) {
  std::vector<uint8_t> v(b.bytes());
  b.download(v.data());
  return v;
}

/// Runs the case twice (the second launch finds the counter the first one left) with the add +
/// norm in the GEMV, and once as GEMV + add_norm kernel; every output must match bit for bit.
/// `in_last_cta`: whether the case is expected to run in the GEMV's last CTA.
void check_tail(const TailCase& c, DType dt, bool in_last_cta, std::mt19937& rng) {
  SCOPED_TRACE(describe(c, dt));
  const int M = c.M, N = c.N, K = c.K, T = c.gather ? (M + 1) / 2 : M;
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / 32);
  std::vector<float> residual = random_vector(size_t(M) * N, rng, 2.0f);
  for (int j = 0; j < N; ++j) residual[j] += 0.5f;  // a non-zero mean for LayerNorm
  const std::vector<float> other = rounded_random(size_t(M) * N, rng, dt);
  const std::vector<float> bias0 = rounded_random(N, rng, dt, 0.3f);
  const std::vector<float> bias1 = rounded_random(N, rng, dt, 0.3f);
  std::vector<float> weight0 = round_to(random_vector(N, rng, 0.5f), dt);
  std::vector<float> weight1 = round_to(random_vector(N, rng, 0.5f), dt);
  const std::vector<float> norm_bias = rounded_random(N, rng, dt, 0.2f);
  std::vector<int32_t> rows(T);
  for (int i = 0; i < T; ++i) rows[i] = (2 * i + 1) % M;

  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_other(other.size(), 2), d_b0(N, 2), d_b1(N, 2),
      d_w0(N, 2), d_w1(N, 2), d_nb(N, 2), d_rows(T, 4), d_counter(1, 4);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  d_other.upload_floats(other, dt);
  d_b0.upload_floats(bias0, dt);
  d_b1.upload_floats(bias1, dt);
  d_w0.upload_floats(weight0, dt);
  d_w1.upload_floats(weight1, dt);
  d_nb.upload_floats(norm_bias, dt);
  d_rows.upload(rows.data());
  const unsigned zero = 0;
  d_counter.upload(&zero);

  struct Outputs {
    std::vector<uint8_t> y, residual, out0, out1;
  };
  auto run = [&](bool fused, int launches) -> Outputs {
    DeviceBuffer d_y(size_t(M) * N, 2), d_res(residual.size(), 4), d_out0(size_t(T) * N, 2),
        d_out1(size_t(T) * N, 2);
    d_y.poison();
    d_out0.poison();
    d_out1.poison();
    kernels::AddNormParams a;
    a.dtype = dt;
    a.type = c.type;
    a.eps = 1e-5f;
    a.num_tokens = T;
    a.hidden = N;
    a.residual = d_res.as<float>();
    if (c.parallel) {
      a.delta0 = d_other.get();
      a.bias0 = d_b0.get();
      a.delta1 = d_y.get();
      a.bias1 = d_b1.get();
      a.weight1 = d_w1.get();
      a.out1 = d_out1.get();
    } else {
      a.delta0 = d_y.get();
      a.bias0 = d_b0.get();
    }
    a.weight0 = d_w0.get();
    a.norm_bias0 = c.type == NormType::kLayer ? d_nb.get() : nullptr;
    a.out0 = d_out0.get();
    a.rows = c.gather ? d_rows.as<int32_t>() : nullptr;
    kernels::GemvParams p = gemv_params(dt, M, N, K, d_x.get(), d_w.get(), d_y.get(), c.config);
    p.deep_prologue = true;
    if (fused) {
      p.add_norm = &a;
      p.counter = d_counter.as<unsigned>();
      EXPECT_EQ(kernels::gemv_add_norm_in_last_cta(p), in_last_cta);
    }
    for (int l = 0; l < launches; ++l) {  // the residual is updated: each launch starts afresh
      d_res.upload_floats(residual, dt);  // 4-byte elements: fp32 as given
      EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaSuccess);
      if (!fused) {
        EXPECT_EQ(kernels::launch_add_norm(a, nullptr), cudaSuccess);
      }
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    EXPECT_TRUE(d_y.check_guards());
    EXPECT_TRUE(d_res.check_guards());
    EXPECT_TRUE(d_out0.check_guards());
    EXPECT_TRUE(d_out1.check_guards());
    Outputs o{bytes_of(d_y), bytes_of(d_res), bytes_of(d_out0), {}};
    if (c.parallel) o.out1 = bytes_of(d_out1);
    return o;
  };
  const Outputs want = run(false, 1), got = run(true, 2);
  unsigned counter = 1;
  d_counter.download(&counter);
  EXPECT_EQ(counter, 0u) << "the counter is left at zero";
  EXPECT_TRUE(got.y == want.y) << "y";
  EXPECT_TRUE(got.residual == want.residual) << "residual";
  EXPECT_TRUE(got.out0 == want.out0) << "out0";
  EXPECT_TRUE(got.out1 == want.out1) << "out1";
  // The reference itself wrote finite values everywhere it should.
  DeviceBuffer d_check(want.out0.size() / 2, 2);
  d_check.upload(want.out0.data());
  EXPECT_FALSE(has_nonfinite(d_check.download_floats(dt))) << "out0 unwritten";
}

TEST(GemvAddNorm, LastCtaMatchesGemvThenAddNormKernel) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(44);
  int ring = -1;  // a CTA shape with a ring other than the default
  for (int i = 0; i < kernels::gemv_num_configs() && ring < 0; ++i)
    if (kernels::gemv_config_info(i).stages > 0 && kernels::gemv_config_info(i).warps == 8)
      ring = i;
  ASSERT_GE(ring, 0);
  for (DType dt : kDTypes) {
    for (int M : {1, 3, 8}) {
      // 4096: 512 threads x 1 chunk (Llama); 5120: 320 x 2; 264: 64 x 1.
      check_tail({M, 4096, 4096, NormType::kRms, false, false, -1}, dt, true, rng);
      check_tail({M, 5120, 136, NormType::kRms, false, false, -1}, dt, true, rng);
      check_tail({M, 264, 4104, NormType::kLayer, true, false, -1}, dt, true, rng);
      check_tail({M, 4096, 256, NormType::kLayer, true, true, -1}, dt, true, rng);
      check_tail({M, 2048, 512, NormType::kRms, false, true, ring}, dt, true, rng);
    }
  }
}

TEST(GemvAddNorm, ShapesThatDoNotFitTakeTheKernel) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(45);
  int registers = -1;  // a CTA shape without a ring
  for (int i = 0; i < kernels::gemv_num_configs() && registers < 0; ++i)
    if (kernels::gemv_config_info(i).stages == 0) registers = i;
  ASSERT_GE(registers, 0);
  for (DType dt : kDTypes) {
    check_tail({3, 769, 64, NormType::kRms, false, false, -1}, dt, false, rng);  // not 16-byte rows
    check_tail({2, 16384, 64, NormType::kRms, false, false, -1}, dt, false, rng);  // 4 chunks each
    check_tail({3, 4096, 64, NormType::kLayer, true, false, registers}, dt, false, rng);
  }
}

TEST(GemvAddNorm, RejectsWhatItCannotDo) {
  kernels::AddNormParams a;  // no residual, weight or output
  a.num_tokens = 1;
  a.hidden = 64;
  kernels::GemvParams p;
  p.M = 1;
  p.N = 64;
  p.K = 64;
  p.add_norm = &a;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  EXPECT_FALSE(kernels::gemv_add_norm_in_last_cta(p));
  float dummy[64];
  a.residual = dummy;
  a.weight0 = dummy;
  a.out0 = dummy;
  a.dtype = DType::kBF16;  // another dtype than the GEMV's
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
