// The decode chain against the kernels it replaces, launched one by one (each tested against a CPU
// reference in its own test): o GEMV, add + norm, gate|up GEMV with SiLU-and-mul, down GEMV,
// add + norm, QKV GEMV. Every output and both residuals must match byte for byte, over M 1..8,
// both dtypes, RMSNorm and LayerNorm, biases, the last layer (no QKV), Llama-2-7B's layer shape
// (several tiles per CTA in every stage) and a hidden size whose norm takes two chunks per thread.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/decode_chain.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/gemv.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::GemvEpilogue;
using kernels::NormType;

struct ChainCase {
  DType dt;
  int M, H, Q, I, QKV;
  bool biases = false, layer_norm = false, next = true;
  std::string name() const {
    return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(M) +
           " H=" + std::to_string(H) + " Q=" + std::to_string(Q) + " I=" + std::to_string(I) +
           " QKV=" + std::to_string(QKV) + (biases ? " biases" : "") +
           (layer_norm ? " layernorm" : "") + (next ? "" : " last layer");
  }
};

// A device buffer of n random dtype values (scale s), or fp32 when f32.
struct Operand {
  DeviceBuffer buf;
  Operand(size_t n, DType dt, std::mt19937& rng, float s, bool f32 = false) : buf(n, f32 ? 4 : 2) {
    buf.upload_floats(f32 ? random_vector(n, rng, s) : rounded_random(n, rng, dt, s), dt);
  }
  void* get() const { return buf.get(); }
};

std::vector<uint8_t> bytes_of(const DeviceBuffer& b) {
  std::vector<uint8_t> v(b.bytes());
  b.download(v.data());
  return v;
}

void expect_same_bytes(const DeviceBuffer& got, const DeviceBuffer& want, const char* what) {
  EXPECT_TRUE(got.check_guards()) << what;
  EXPECT_TRUE(bytes_of(got) == bytes_of(want)) << what << " differs";
}

void check_chain(const ChainCase& c, std::mt19937& rng) {
  SCOPED_TRACE(c.name());
  const DType dt = c.dt;
  const size_t M = c.M, H = c.H, Q = c.Q, I = c.I, QKV = c.QKV;
  Operand attn(M * Q, dt, rng, 1.0f), wo(H * Q, dt, rng, 1.0f / std::sqrt(float(Q)));
  Operand bo(H, dt, rng, 0.5f), mlp_norm(H, dt, rng, 1.0f), mlp_norm_bias(H, dt, rng, 0.2f);
  Operand wup(2 * I * H, dt, rng, 2.0f / std::sqrt(float(H))), bup(2 * I, dt, rng, 0.5f);
  Operand wdown(H * I, dt, rng, 1.0f / std::sqrt(float(I))), bdown(H, dt, rng, 0.5f);
  Operand next_norm(H, dt, rng, 1.0f), next_norm_bias(H, dt, rng, 0.2f);
  Operand wqkv(QKV * H, dt, rng, 1.0f / std::sqrt(float(H)));
  Operand residual(M * H, dt, rng, 2.0f, true);
  const NormType norm = c.layer_norm ? NormType::kLayer : NormType::kRms;
  const float eps = 1e-5f;

  // The unfused kernels. AddNormParams updates its residual in place: ref_mid keeps the residual
  // after attention, ref_out the one after the MLP.
  DeviceBuffer o_ref(M * H, 2), h_ref(M * H, 2), act_ref(M * I, 2), m_ref(M * H, 2),
      qkv_ref(M * QKV, 2), ref_mid(M * H, 4), ref_out(M * H, 4);
  CUDA_OK(cudaMemcpy(ref_mid.get(), residual.get(), M * H * 4, cudaMemcpyDeviceToDevice));
  auto gemv = [&](const void* x, const Operand& w, void* y, int N, int K, GemvEpilogue epi,
                  const void* bias) {
    kernels::GemvParams p = kernels::gemv_params(dt, c.M, N, K, x, w.get(), y);
    p.config = 0;  // 16 warps, as the chain
    p.epilogue = epi;
    p.bias = bias;
    return kernels::launch_gemv(p, nullptr);
  };
  auto add_norm = [&](float* r, const void* delta, const void* bias, const Operand& weight,
                      const void* norm_bias, void* out) {
    kernels::AddNormParams p;
    p.dtype = dt;
    p.type = norm;
    p.eps = eps;
    p.num_tokens = c.M;
    p.hidden = c.H;
    p.residual = r;
    p.delta0 = delta;
    p.bias0 = bias;
    p.weight0 = weight.get();
    p.norm_bias0 = norm_bias;
    p.out0 = out;
    return kernels::launch_add_norm(p, nullptr);
  };
  const void* bo_p = c.biases ? bo.get() : nullptr;
  const void* bup_p = c.biases ? bup.get() : nullptr;
  const void* bdown_p = c.biases ? bdown.get() : nullptr;
  const void* nb1 = c.layer_norm ? mlp_norm_bias.get() : nullptr;
  const void* nb2 = c.layer_norm ? next_norm_bias.get() : nullptr;
  CUDA_OK(gemv(attn.get(), wo, o_ref.get(), c.H, c.Q, GemvEpilogue::kStore, nullptr));
  CUDA_OK(add_norm(ref_mid.as<float>(), o_ref.get(), bo_p, mlp_norm, nb1, h_ref.get()));
  CUDA_OK(gemv(h_ref.get(), wup, act_ref.get(), 2 * c.I, c.H, GemvEpilogue::kSiluMul, bup_p));
  CUDA_OK(gemv(act_ref.get(), wdown, m_ref.get(), c.H, c.I, GemvEpilogue::kStore, nullptr));
  CUDA_OK(cudaMemcpy(ref_out.get(), c.next ? ref_mid.get() : residual.get(), M * H * 4,
                     cudaMemcpyDeviceToDevice));
  if (c.next) {
    CUDA_OK(add_norm(ref_out.as<float>(), m_ref.get(), bdown_p, next_norm, nb2, h_ref.get()));
    CUDA_OK(gemv(h_ref.get(), wqkv, qkv_ref.get(), c.QKV, c.H, GemvEpilogue::kStore, nullptr));
  }

  // The chain, twice: its counters must be back at zero after the first launch.
  DeviceBuffer o(M * H, 2), act(M * I, 2), m(M * H, 2), qkv(M * QKV, 2), res(M * H, 4),
      res_mid(M * H, 4), sync(2, 4);
  CUDA_OK(cudaMemset(sync.get(), 0, 8));
  for (int launch = 0; launch < 2; ++launch) {
    SCOPED_TRACE("launch " + std::to_string(launch));
    CUDA_OK(cudaMemcpy(res.get(), residual.get(), M * H * 4, cudaMemcpyDeviceToDevice));
    for (DeviceBuffer* b : {&o, &act, &m, &qkv, &res_mid}) b->poison();
    kernels::DecodeChainParams p;
    p.dtype = dt;
    p.norm = norm;
    p.eps = eps;
    p.M = c.M;
    p.hidden = c.H;
    p.q_dim = c.Q;
    p.intermediate = c.I;
    p.qkv_dim = c.QKV;
    p.attn = attn.get();
    p.wo = wo.get();
    p.o = o.get();
    p.residual = res.as<float>();
    p.residual_mid = res_mid.as<float>();
    p.bo = bo_p;
    p.mlp_norm = mlp_norm.get();
    p.mlp_norm_bias = nb1;
    p.wup = wup.get();
    p.bup = bup_p;
    p.act = act.get();
    p.wdown = wdown.get();
    p.m = m.get();
    if (c.next) {
      p.bdown = bdown_p;
      p.next_norm = next_norm.get();
      p.next_norm_bias = nb2;
      p.wqkv = wqkv.get();
      p.qkv = qkv.get();
    }
    p.sync = sync.as<unsigned>();
    CUDA_OK(kernels::launch_decode_chain(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    unsigned counters[2] = {1, 1};
    sync.download(counters);
    ASSERT_EQ(counters[0], 0u) << "barrier counter left set";
    ASSERT_EQ(counters[1], 0u) << "exit counter left set";
    expect_same_bytes(o, o_ref, "o");
    expect_same_bytes(res_mid, ref_mid, "residual after attention");
    expect_same_bytes(act, act_ref, "act");
    expect_same_bytes(m, m_ref, "m");
    expect_same_bytes(res, ref_out, "residual after the MLP (the input when last layer)");
    if (c.next) expect_same_bytes(qkv, qkv_ref, "qkv");
  }
}

TEST(DecodeChain, MatchesTheKernelsItReplaces) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(7);
  for (DType dt : kDTypes) {
    for (int M : {1, 3, 8}) {
      check_chain({dt, M, 512, 512, 1376, 768}, rng);
      check_chain({dt, M, 512, 512, 1376, 768, true, false, false}, rng);  // biases, last layer
    }
    check_chain({dt, 2, 256, 384, 704, 640, true, true}, rng);  // LayerNorm with biases
    check_chain({dt, 2, 5120, 5120, 1024, 6400}, rng);          // norm rows of two chunks
  }
  check_chain({DType::kF16, 1, 4096, 4096, 11008, 12288}, rng);  // Llama-2-7B's layer
  check_chain({DType::kBF16, 4, 4096, 4096, 11008, 12288}, rng);
}

TEST(DecodeChain, RejectsWhatItCannotDo) {
  int dummy[4] = {};
  kernels::DecodeChainParams p;
  p.M = 1;
  p.hidden = p.q_dim = p.intermediate = p.qkv_dim = 64;
  p.attn = p.wo = p.mlp_norm = p.wup = p.wdown = dummy;
  p.o = p.act = p.m = dummy;
  float r0[64], r1[64];
  p.residual = r0;
  p.residual_mid = r1;
  p.sync = reinterpret_cast<unsigned*>(dummy);
  auto rejected = [&](kernels::DecodeChainParams q) {
    return kernels::launch_decode_chain(q, nullptr) == cudaErrorInvalidValue;
  };
  auto with = [&](auto edit) {
    kernels::DecodeChainParams q = p;
    edit(q);
    return q;
  };
  EXPECT_TRUE(rejected(with([](auto& q) { q.M = 0; })));
  EXPECT_TRUE(rejected(with([](auto& q) { q.M = 9; })));
  EXPECT_TRUE(rejected(with([](auto& q) { q.hidden = 20; })));    // not a multiple of 8
  EXPECT_TRUE(rejected(with([](auto& q) { q.hidden = 8200; })));  // norm rows past 2 chunks
  EXPECT_TRUE(rejected(with([](auto& q) { q.sync = nullptr; })));
  EXPECT_TRUE(rejected(with([&](auto& q) { q.residual_mid = q.residual; })));
  EXPECT_TRUE(rejected(with([&](auto& q) { q.wqkv = dummy; })));  // without qkv, next_norm
  EXPECT_TRUE(rejected(with([&](auto& q) { q.wo = reinterpret_cast<char*>(dummy) + 2; })));
  EXPECT_FALSE(kernels::decode_chain_supported(DType::kF16, 9, 4096, 4096, 11008, 12288));
}

}  // namespace
}  // namespace rill::testing
