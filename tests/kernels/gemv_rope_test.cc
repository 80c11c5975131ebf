// The kRopeKv epilogue of the GEMV (rill/kernels/gemv.h): one launch must leave the qkv rows,
// q_sink and the paged cache exactly as a kStore GEMV followed by launch_rope_kv leaves them
// (which rope_test checks against the CPU reference), for MHA and GQA, full and partial rotary
// widths, with and without the QKV bias and q_sink, fp16/bf16 and fp8 caches, and tokens that
// store nothing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/gemv.h"
#include "rill/kernels/rope.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::GemvEpilogue;
using kernels::KvDType;

struct Case {
  int M, heads, kv_heads, head_dim, rotary_dim;
  bool bias, sink;
  KvDType cache;
};

std::string name(DType dt, const Case& c, int config) {
  return std::string(dt == DType::kF16 ? "f16" : "bf16") + " M=" + std::to_string(c.M) + " " +
         std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) + " heads of " +
         std::to_string(c.head_dim) + " rotary " + std::to_string(c.rotary_dim) +
         (c.bias ? " bias" : "") + (c.sink ? " q_sink" : "") +
         (c.cache == KvDType::kFp8E4M3 ? " fp8" : "") + " config " + std::to_string(config);
}

std::vector<uint8_t> bytes_of(const DeviceBuffer& b) {
  std::vector<uint8_t> out(b.bytes());
  b.download(out.data());
  return out;
}

void check_case(DType dt, const Case& c, int config, std::mt19937& rng) {
  SCOPED_TRACE(name(dt, c, config));
  const int K = 256, N = (c.heads + 2 * c.kv_heads) * c.head_dim;
  const std::vector<float> x = rounded_random(size_t(c.M) * K, rng, dt);
  const std::vector<float> w = rounded_random(size_t(N) * K, rng, dt, 1.0f / std::sqrt(float(K)));
  const std::vector<float> bias = rounded_random(N, rng, dt, 0.5f);
  std::vector<float> inv_freq(c.rotary_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / c.rotary_dim));
  std::vector<int64_t> positions(c.M), sink_positions(c.M);
  std::vector<int32_t> slots(c.M);
  for (int m = 0; m < c.M; ++m) {
    positions[m] = 1000003 * m + 17;  // large: the angle reduction matters
    sink_positions[m] = m + 4;
    slots[m] = m == 1 ? -1 : 5 * m + 3;  // token 1 stores nothing
  }
  kernels::KvCacheLayout layout;
  layout.num_blocks = 4;
  layout.num_kv_heads = c.kv_heads;
  layout.block_size = 16;
  layout.head_dim = c.head_dim;
  layout.cache_dtype = c.cache;
  layout.k_scale = c.cache == KvDType::kFp8E4M3 ? 0.5f : 1.0f;
  layout.v_scale = c.cache == KvDType::kFp8E4M3 ? 0.25f : 1.0f;

  DeviceBuffer d_x(x.size(), 2), d_w(w.size(), 2), d_bias(N, 2), d_freq(inv_freq.size(), 4),
      d_pos(c.M, 8), d_sink(c.M, 8), d_slot(c.M, 4);
  d_x.upload_floats(x, dt);
  d_w.upload_floats(w, dt);
  d_bias.upload_floats(bias, dt);
  d_freq.upload_floats(inv_freq, dt);
  d_pos.upload(positions.data());
  d_sink.upload(sink_positions.data());
  d_slot.upload(slots.data());

  struct Out {
    std::vector<uint8_t> qkv, q_sink, cache;
  };
  auto run = [&](bool fused) -> Out {
    DeviceBuffer d_qkv(size_t(c.M) * N, 2), d_q_sink(size_t(c.M) * c.heads * c.head_dim, 2),
        d_cache(size_t(layout.num_blocks) * layout.block_stride(), layout.element_bytes());
    d_qkv.poison();
    d_q_sink.poison();
    EXPECT_EQ(cudaMemset(d_cache.get(), 0x5a, d_cache.bytes()), cudaSuccess);
    kernels::RopeKvParams r;
    r.dtype = dt;
    r.num_tokens = c.M;
    r.num_heads = c.heads;
    r.num_kv_heads = c.kv_heads;
    r.head_dim = c.head_dim;
    r.rotary_dim = c.rotary_dim;
    r.qkv = d_qkv.get();
    r.qkv_stride = N;
    r.qkv_bias = c.bias ? d_bias.get() : nullptr;
    r.q_sink = c.sink ? d_q_sink.get() : nullptr;
    r.positions = d_pos.as<int64_t>();
    r.sink_positions = d_sink.as<int64_t>();
    r.inv_freq = d_freq.as<float>();
    r.cache_slot = d_slot.as<int32_t>();
    r.cache = d_cache.get();
    r.layout = layout;
    kernels::GemvParams p;
    p.dtype = dt;
    p.M = c.M;
    p.N = N;
    p.K = K;
    p.x = d_x.get();
    p.w = d_w.get();
    p.y = d_qkv.get();
    p.config = config;
    if (fused) {
      p.epilogue = GemvEpilogue::kRopeKv;
      p.rope = r;
      EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaSuccess);
    } else {
      EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaSuccess);
      EXPECT_EQ(kernels::launch_rope_kv(r, nullptr), cudaSuccess);
    }
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(d_qkv.check_guards());
    EXPECT_TRUE(d_q_sink.check_guards());
    EXPECT_TRUE(d_cache.check_guards());
    return {bytes_of(d_qkv), bytes_of(d_q_sink), bytes_of(d_cache)};
  };
  const Out fused = run(true), apart = run(false);
  EXPECT_EQ(fused.qkv, apart.qkv) << "qkv rows";
  EXPECT_EQ(fused.q_sink, apart.q_sink) << "q_sink";
  EXPECT_EQ(fused.cache, apart.cache) << "cache";
  const std::vector<float> q = [&] {
    DeviceBuffer b(fused.qkv.size() / 2, 2);
    b.upload(fused.qkv.data());
    return b.download_floats(dt);
  }();
  EXPECT_FALSE(has_nonfinite(q)) << "a qkv element was not written";
}

TEST(GemvRope, MatchesGemvThenRopeKernelBitwise) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(61);
  const Case cases[] = {
      {1, 4, 4, 128, 128, false, true, KvDType::kSame},      // Llama-2 style
      {8, 8, 2, 64, 64, true, true, KvDType::kSame},         // GQA, QKV bias (Qwen)
      {3, 4, 4, 64, 16, true, true, KvDType::kSame},         // partial rotary (GPT-NeoX)
      {5, 4, 1, 128, 128, false, false, KvDType::kFp8E4M3},  // fp8 cache, no q_sink
      {2, 2, 2, 96, 32, false, true, KvDType::kFp8E4M3},
  };
  std::vector<int> configs = {-1};
  for (int c = 0; c < kernels::gemv_num_configs(); ++c)
    if (kernels::gemv_config_info(c).silu) configs.push_back(c);
  for (DType dt : kDTypes)
    for (const Case& c : cases)
      for (int config : configs) check_case(dt, c, config, rng);
}

TEST(GemvRope, RejectsWhatItCannotServe) {
  EXPECT_TRUE(kernels::gemv_rope_fusable(128, 128));
  EXPECT_TRUE(kernels::gemv_rope_fusable(64, 16));
  EXPECT_FALSE(kernels::gemv_rope_fusable(80, 40));  // rotary pairs in tiles of 8 rows
  EXPECT_FALSE(kernels::gemv_rope_fusable(72, 64));
  int64_t pos = 0;
  float freq = 1.0f;
  kernels::GemvParams p;
  p.M = 1;
  p.K = 64;
  p.epilogue = GemvEpilogue::kRopeKv;
  p.rope.num_heads = 2;
  p.rope.num_kv_heads = 1;
  p.rope.head_dim = 64;
  p.rope.rotary_dim = 64;
  p.rope.positions = &pos;
  p.rope.inv_freq = &freq;
  p.N = 4 * 64 + 16;  // not the qkv width
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.N = 4 * 64;
  p.rope.rotary_dim = 40;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
  p.rope.rotary_dim = 64;
  p.y_f32 = true;
  EXPECT_EQ(kernels::launch_gemv(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
