// The fused GEMV variants (rill/kernels/gemv.h) against fp64 CPU references: the RMSNorm input,
// the residual-add epilogue and its partial sums of squares, SiLU-and-mul over interleaved
// gate|up rows, and the chain a decode layer runs (o -> gate|up -> down -> LM head), where each
// GEMV consumes the statistics the previous one left.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
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

/// Partial sums of squares of the rows of r [M, N] over tiles of 16 columns: [M, ceil(N / 16)].
std::vector<float> ref_ssq(const std::vector<float>& r, int M, int N) {
  const int parts = kernels::gemv_ssq_parts(N);
  std::vector<float> out(size_t(M) * parts);
  for (int m = 0; m < M; ++m)
    for (int p = 0; p < parts; ++p) {
      double s = 0;
      for (int n = 16 * p; n < std::min(N, 16 * p + 16); ++n)
        s += double(r[size_t(m) * N + n]) * r[size_t(m) * N + n];
      out[size_t(m) * parts + p] = float(s);
    }
  return out;
}

/// x[m, k] = dtype(r[m, k] * inv[m] * weight[k]), inv from the partial sums (GemvNorm).
std::vector<float> ref_norm(const std::vector<float>& r, const std::vector<float>& weight,
                            const std::vector<float>& ssq, int M, int K, DType dt) {
  const int parts = kernels::gemv_ssq_parts(K);
  std::vector<float> x(size_t(M) * K);
  for (int m = 0; m < M; ++m) {
    double s = 0;
    for (int p = 0; p < parts; ++p) s += ssq[size_t(m) * parts + p];
    const double inv = 1.0 / std::sqrt(s / K + kEps);
    for (int k = 0; k < K; ++k)
      x[size_t(m) * K + k] = float(r[size_t(m) * K + k] * inv * weight[k]);
  }
  return round_to(x, dt);
}

std::vector<float> to_floats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

kernels::GemvParams params(DType dt, int M, int N, int K, const DeviceBuffer& w, int config) {
  kernels::GemvParams p;
  p.dtype = dt;
  p.M = M;
  p.N = N;
  p.K = K;
  p.w = w.get();
  p.config = config;
  return p;
}

// x = RMSNorm(residual) * weight, computed by the GEMV as it loads x.
void check_norm_input(DType dt, int M, int N, int K, bool y_f32, int config, std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, N, K, config) + (y_f32 ? " y_f32" : ""));
  const std::vector<float> r = random_vector(size_t(M) * K, rng, 3.0f);
  std::vector<float> weight = random_vector(K, rng, 0.5f);
  for (float& v : weight) v += 1.0f;
  weight = round_to(weight, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> ssq = ref_ssq(r, M, K);
  double sum_abs_max = 0;
  std::vector<float> want =
      to_floats(ref_gemv(ref_norm(r, weight, ssq, M, K, dt), w, M, N, K, &sum_abs_max));
  if (!y_f32) want = round_to(want, dt);

  DeviceBuffer d_r(r.size(), 4), d_weight(K, 2), d_w(w.size(), 2), d_ssq(ssq.size(), 4),
      d_y(want.size(), y_f32 ? 4 : 2);
  d_r.upload_floats(r, dt);
  d_weight.upload_floats(weight, dt);
  d_w.upload_floats(w, dt);
  d_ssq.upload_floats(ssq, dt);
  d_y.poison();
  kernels::GemvParams p = params(dt, M, N, K, d_w, config);
  p.norm.residual = d_r.as<float>();
  p.norm.weight = d_weight.get();
  p.norm.ssq = d_ssq.as<float>();
  p.norm.ssq_parts = kernels::gemv_ssq_parts(K);
  p.norm.eps = kEps;
  p.y = d_y.get();
  p.y_f32 = y_f32;
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_y.check_guards());
  const std::vector<float> got = d_y.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten output";
  // The GPU's 1 / rms (fp32) may round an x element to the neighbouring dtype value where the
  // fp64 one does not: rare single-ulp differences, far inside the dtype tolerance.
  EXPECT_LE(normalized_error(got, want), y_f32 ? 2e-4 : tol_for(dt));
}

// residual += dtype(x w^T) + bias, and the partial sums of squares of the new residual.
void check_add_residual(DType dt, int M, int N, int K, bool with_bias, int config,
                        std::mt19937& rng) {
  SCOPED_TRACE(name(dt, M, N, K, config) + (with_bias ? " bias" : ""));
  const std::vector<float> x = rounded_random(size_t(M) * K, rng, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> bias =
      with_bias ? rounded_random(N, rng, dt, 0.5f) : std::vector<float>();
  const std::vector<float> r0 = random_vector(size_t(M) * N, rng, 2.0f);
  double sum_abs_max = 0;
  const std::vector<float> s = round_to(to_floats(ref_gemv(x, w, M, N, K, &sum_abs_max)), dt);
  std::vector<float> want(r0.size());
  double s_max = 1e-6;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const size_t i = size_t(m) * N + n;
      want[i] = r0[i] + s[i] + (with_bias ? bias[n] : 0.0f);
      s_max = std::max(s_max, double(std::abs(s[i])));
    }

  const int parts = kernels::gemv_ssq_parts(N);
  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_bias(std::max(1, N), 2), d_r(r0.size(), 4),
      d_ssq(size_t(M) * parts, 4);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  if (with_bias) d_bias.upload_floats(bias, dt);
  d_r.upload_floats(r0, dt);
  d_ssq.poison();
  kernels::GemvParams p = params(dt, M, N, K, d_w, config);
  p.x = d_x.get();
  p.epilogue = GemvEpilogue::kAddResidual;
  p.y = d_r.get();
  p.bias = with_bias ? d_bias.get() : nullptr;
  p.ssq_out = d_ssq.as<float>();
  CUDA_OK(kernels::launch_gemv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_r.check_guards());
  EXPECT_TRUE(d_ssq.check_guards());
  const std::vector<float> got = d_r.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(got));
  // One dtype ulp of the product where fp32 and fp64 sums round apart, plus fp32 accumulation.
  EXPECT_LE(max_abs_error(got, want), 1.01 * ulp1(dt) * s_max + 1e-5 * sum_abs_max + 1e-5);
  // The statistics are those of the residual the kernel wrote, up to fp32 summation order.
  const std::vector<float> ssq = d_ssq.download_floats(dt);
  ASSERT_FALSE(has_nonfinite(ssq)) << "unwritten partial sums";
  const std::vector<float> ssq_want = ref_ssq(got, M, N);
  for (size_t i = 0; i < ssq.size(); ++i)
    ASSERT_NEAR(ssq[i], ssq_want[i], 1e-5 * ssq_want[i] + 1e-30) << "partial " << i;
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
  kernels::GemvParams p = params(dt, M, 2 * I, K, d_w, config);
  p.x = d_x.get();
  p.epilogue = GemvEpilogue::kSiluMul;
  p.y = d_y.get();
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

TEST(GemvFused, NormInput) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (DType dt : kDTypes)
    for (int config : {-1, 0, 1}) {
      check_norm_input(dt, 1, 257, 4096, false, config, rng);
      check_norm_input(dt, 8, 33, 4104, true, config, rng);
      check_norm_input(dt, 3, 17, 8, false, config, rng);  // one partial sum, one chunk
      check_norm_input(dt, 5, 1000, 200, true, config, rng);
      check_norm_input(dt, 3, 11203, 64, false, config, rng);  // more tiles than resident CTAs
    }
}

TEST(GemvFused, AddResidual) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(42);
  for (DType dt : kDTypes)
    for (int config : {-1, 0, 1})
      for (bool bias : {false, true}) {
        check_add_residual(dt, 1, 4096, 4096, bias, config, rng);
        check_add_residual(dt, 8, 1000, 11008, bias, config, rng);  // a partial last tile
        check_add_residual(dt, 3, 7, 24, bias, config, rng);        // N < 16
      }
}

TEST(GemvFused, SiluMulOverInterleavedRows) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(43);
  for (DType dt : kDTypes)
    for (int config : {-1, 0, 1})
      for (bool bias : {false, true}) {
        check_silu_mul(dt, 1, 1376, 4096, bias, config, rng);
        check_silu_mul(dt, 8, 64, 4104, bias, config, rng);
        check_silu_mul(dt, 3, 8, 8, bias, config, rng);  // one tile
      }
}

// o projection -> gate|up with SiLU -> down projection -> LM head, as a decode layer chains them:
// each normed GEMV reads the residual and the statistics the GEMV before it left.
TEST(GemvFused, DecodeChainMatchesUnfusedReference) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(44);
  for (DType dt : kDTypes)
    for (int M : {1, 4}) {
      SCOPED_TRACE(std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M));
      const int H = 512, I = 4096, V = 5003;  // gate|up and LM head: more tiles than CTAs
      const float sH = 1.0f / std::sqrt(float(H)), sI = 1.0f / std::sqrt(float(I));
      const std::vector<float> attn = rounded_random(size_t(M) * H, rng, dt);
      const std::vector<float> wo = rounded_random(size_t(H) * H, rng, dt, sH);
      const std::vector<float> wg = rounded_random(size_t(I) * H, rng, dt, 2 * sH);
      const std::vector<float> wu = rounded_random(size_t(I) * H, rng, dt, 2 * sH);
      const std::vector<float> wd = rounded_random(size_t(H) * I, rng, dt, sI);
      const std::vector<float> wl = rounded_random(size_t(V) * H, rng, dt, sH);
      std::vector<float> mlp_norm = random_vector(H, rng, 0.3f),
                         final_norm = random_vector(H, rng, 0.3f);
      for (float& v : mlp_norm) v += 1.0f;
      for (float& v : final_norm) v += 1.0f;
      mlp_norm = round_to(mlp_norm, dt);
      final_norm = round_to(final_norm, dt);
      const std::vector<float> x0 = random_vector(size_t(M) * H, rng, 1.0f);

      // CPU, unfused: each step as separate kernels would compute it.
      double unused = 0;
      auto add = [&](std::vector<float> r, const std::vector<float>& delta) {
        for (size_t i = 0; i < r.size(); ++i) r[i] += delta[i];
        return r;
      };
      const std::vector<float> x1 =
          add(x0, round_to(to_floats(ref_gemv(attn, wo, M, H, H, &unused)), dt));
      const std::vector<float> h1 = ref_norm(x1, mlp_norm, ref_ssq(x1, M, H), M, H, dt);
      const std::vector<float> g = round_to(to_floats(ref_gemv(h1, wg, M, I, H, &unused)), dt);
      const std::vector<float> u = round_to(to_floats(ref_gemv(h1, wu, M, I, H, &unused)), dt);
      std::vector<float> act(size_t(M) * I);
      for (size_t i = 0; i < act.size(); ++i) act[i] = float(silu(g[i]) * u[i]);
      act = round_to(act, dt);
      const std::vector<float> x2 =
          add(x1, round_to(to_floats(ref_gemv(act, wd, M, H, I, &unused)), dt));
      const std::vector<float> h2 = ref_norm(x2, final_norm, ref_ssq(x2, M, H), M, H, dt);
      const std::vector<float> want = to_floats(ref_gemv(h2, wl, M, V, H, &unused));

      const int parts = kernels::gemv_ssq_parts(H);
      DeviceBuffer d_attn(attn.size(), 2), d_wo(wo.size(), 2), d_wgu(size_t(2) * I * H, 2),
          d_wd(wd.size(), 2), d_wl(wl.size(), 2), d_mn(H, 2), d_fn(H, 2), d_x(x0.size(), 4),
          d_act(act.size(), 2), d_logits(size_t(M) * V, 4), d_ssq0(size_t(M) * parts, 4),
          d_ssq1(size_t(M) * parts, 4);
      d_attn.upload_floats(attn, dt);
      d_wo.upload_floats(wo, dt);
      d_wgu.upload_floats(interleave(wg, wu, I, H), dt);
      d_wd.upload_floats(wd, dt);
      d_wl.upload_floats(wl, dt);
      d_mn.upload_floats(mlp_norm, dt);
      d_fn.upload_floats(final_norm, dt);
      d_x.upload_floats(x0, dt);
      d_act.poison();
      d_logits.poison();
      auto norm = [&](const DeviceBuffer& weight, const DeviceBuffer& ssq) {
        kernels::GemvNorm n;
        n.residual = d_x.as<float>();
        n.weight = weight.get();
        n.ssq = ssq.as<float>();
        n.ssq_parts = parts;
        n.eps = kEps;
        return n;
      };
      kernels::GemvParams o = params(dt, M, H, H, d_wo, -1);
      o.x = d_attn.get();
      o.epilogue = GemvEpilogue::kAddResidual;
      o.y = d_x.get();
      o.ssq_out = d_ssq0.as<float>();
      kernels::GemvParams gu = params(dt, M, 2 * I, H, d_wgu, -1);
      gu.norm = norm(d_mn, d_ssq0);
      gu.epilogue = GemvEpilogue::kSiluMul;
      gu.y = d_act.get();
      kernels::GemvParams down = params(dt, M, H, I, d_wd, -1);
      down.x = d_act.get();
      down.epilogue = GemvEpilogue::kAddResidual;
      down.y = d_x.get();
      down.ssq_out = d_ssq1.as<float>();
      kernels::GemvParams head = params(dt, M, V, H, d_wl, -1);
      head.norm = norm(d_fn, d_ssq1);
      head.y = d_logits.get();
      head.y_f32 = true;
      for (const kernels::GemvParams* p : {&o, &gu, &down, &head})
        CUDA_OK(kernels::launch_gemv(*p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<float> got = d_logits.download_floats(dt);
      ASSERT_FALSE(has_nonfinite(got)) << "non-finite or unwritten logits";
      // Four roundings to the dtype on the way, each of which may land one ulp apart.
      EXPECT_LE(normalized_error(got, want), 2 * tol_for(dt));
      EXPECT_LE(normalized_error(d_x.download_floats(dt), x2), tol_for(dt));
    }
}

TEST(GemvFused, RejectsWhatItCannotDo) {
  kernels::GemvParams p;
  p.M = 1;
  p.N = 24;  // kSiluMul needs whole tiles of 16 rows
  p.K = 64;
  p.epilogue = GemvEpilogue::kSiluMul;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.N = 32;
  p.epilogue = GemvEpilogue::kAddResidual;  // without ssq_out
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.epilogue = GemvEpilogue::kStore;
  p.bias = &p;  // kStore takes no bias
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  if (!have_gpu()) return;
  // Fused variants exist for the two default CTA shapes only.
  DeviceBuffer d_x(64, 2), d_w(size_t(32) * 64, 2), d_y(32, 2);
  kernels::GemvParams q = params(DType::kF16, 1, 32, 64, d_w, 2);
  q.x = d_x.get();
  q.y = d_y.get();
  q.epilogue = GemvEpilogue::kSiluMul;
  EXPECT_EQ(kernels::launch_gemv(q, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
