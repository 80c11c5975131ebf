// rope_kv against a long-double CPU reference: bias add, q rotated at the sink position, q and k
// rotated at the stream position (angle reduced modulo 2 pi in long double, positions up to
// 123,456,789), partial rotary dims, and the K/V store at scattered cache slots (skip on -1); an
// fp8 cache must hold exactly the host encoder's e4m3(k / k_scale), e4m3(v / v_scale) of the
// values written back to the qkv row.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/rope.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::KvDType;

struct RopeCase {
  int head_dim, rotary_dim;
  bool bias, q_sink;
  int extra_stride;  // elements after q | k | v in each row (odd: the scalar path)
};

/// The cache element type of a run: the activation dtype, or fp8 with these scales.
struct CacheType {
  KvDType kv = KvDType::kSame;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// Rotates x (one head, fp32 after the bias add) at `pos`, in long double.
void rotate_ref(const float* x, int rotary_dim, int head_dim, int64_t pos,
                const std::vector<float>& inv_freq, float* out) {
  const int half = rotary_dim / 2;
  const long double two_pi = 6.283185307179586476925286766559L;
  for (int d = 0; d < head_dim; ++d) out[d] = x[d];
  for (int i = 0; i < half; ++i) {
    const long double angle = std::fmod(static_cast<long double>(pos) * inv_freq[i], two_pi);
    const long double c = std::cos(angle), s = std::sin(angle);
    out[i] = float(x[i] * c - x[i + half] * s);
    out[i + half] = float(x[i + half] * c + x[i] * s);
  }
}

void run_rope(const RopeCase& c, DType dt, std::mt19937& rng, const CacheType& ct = {}) {
  const bool fp8 = ct.kv == KvDType::kFp8E4M3;
  SCOPED_TRACE(std::string(dt == DType::kF16 ? "f16" : "bf16") +
               (fp8 ? " fp8 cache k_scale=" + std::to_string(ct.k_scale) +
                          " v_scale=" + std::to_string(ct.v_scale)
                    : std::string()) +
               " head_dim=" + std::to_string(c.head_dim) +
               " rotary_dim=" + std::to_string(c.rotary_dim) + (c.bias ? " bias" : "") +
               (c.q_sink ? " q_sink" : "") + " extra_stride=" + std::to_string(c.extra_stride));
  const int nh = 4, kvh = 2, hd = c.head_dim;
  const std::vector<int64_t> positions = {0, 1, 511, 4095, 1000003, 123456789, 77};
  const std::vector<int64_t> sink_positions = {0, 3, 1, 2, 4, 0, 2};
  const std::vector<int32_t> slots = {5, -1, 63, 17, 0, 40, -1};
  const int T = int(positions.size());
  const int width = (nh + 2 * kvh) * hd, stride = width + c.extra_stride;
  kernels::KvCacheLayout layout;
  layout.num_blocks = 4;
  layout.num_kv_heads = kvh;
  layout.block_size = 16;
  layout.head_dim = hd;
  layout.cache_dtype = ct.kv;
  layout.k_scale = ct.k_scale;
  layout.v_scale = ct.v_scale;

  std::vector<float> inv_freq(c.rotary_dim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / c.rotary_dim));
  const std::vector<float> qkv = round_to(random_vector(size_t(T) * stride, rng), dt);
  const std::vector<float> bias =
      c.bias ? round_to(random_vector(width, rng, 0.5f), dt) : std::vector<float>(width, 0.0f);
  const std::vector<float> cache = round_to(random_vector(size_t(layout.layer_stride()), rng), dt);
  std::vector<uint8_t> cache_fp8(cache.size());  // fp8: the initial cache bytes
  for (size_t i = 0; i < cache.size(); ++i) cache_fp8[i] = fp8::e4m3_from_float(cache[i]);

  std::vector<float> want_qkv = qkv, want_cache = cache, want_sink(size_t(T) * nh * hd);
  std::vector<float> x(hd), y(hd);
  for (int t = 0; t < T; ++t) {
    float* row = want_qkv.data() + size_t(t) * stride;
    for (int h = 0; h < nh + 2 * kvh; ++h) {
      for (int d = 0; d < hd; ++d) x[d] = qkv[size_t(t) * stride + h * hd + d] + bias[h * hd + d];
      if (h < nh) {
        rotate_ref(x.data(), c.rotary_dim, hd, sink_positions[t], inv_freq,
                   &want_sink[(size_t(t) * nh + h) * hd]);
      }
      if (h < nh + kvh) {
        rotate_ref(x.data(), c.rotary_dim, hd, positions[t], inv_freq, y.data());
      } else {
        y = x;
      }
      std::copy(y.begin(), y.end(), row + h * hd);
      if (h >= nh && slots[t] >= 0) {
        const int b = slots[t] / layout.block_size, o = slots[t] % layout.block_size;
        const int g = h < nh + kvh ? h - nh : h - nh - kvh;
        const size_t at = size_t(b) * layout.block_stride() +
                          (h >= nh + kvh ? layout.kv_stride() : 0) +
                          (size_t(g) * layout.block_size + o) * hd;
        std::copy(y.begin(), y.end(), want_cache.begin() + at);
      }
    }
  }
  want_qkv = round_to(want_qkv, dt);
  want_cache = round_to(want_cache, dt);
  want_sink = round_to(want_sink, dt);

  DeviceBuffer d_qkv(qkv.size(), 2), d_bias(bias.size(), 2), d_sink(want_sink.size(), 2),
      d_pos(T, 8), d_sink_pos(T, 8), d_inv(std::max<size_t>(inv_freq.size(), 1), 4), d_slots(T, 4),
      d_cache(cache.size(), fp8 ? 1 : 2);
  d_qkv.upload_floats(qkv, dt);
  d_bias.upload_floats(bias, dt);
  d_sink.poison();
  d_pos.upload(positions.data());
  d_sink_pos.upload(sink_positions.data());
  if (!inv_freq.empty()) d_inv.upload_floats(inv_freq, dt);
  d_slots.upload(slots.data());
  if (fp8) {
    d_cache.upload(cache_fp8.data());
  } else {
    d_cache.upload_floats(cache, dt);
  }
  kernels::RopeKvParams p;
  p.dtype = dt;
  p.num_tokens = T;
  p.num_heads = nh;
  p.num_kv_heads = kvh;
  p.head_dim = hd;
  p.rotary_dim = c.rotary_dim;
  p.qkv = d_qkv.get();
  p.qkv_stride = stride;
  p.qkv_bias = c.bias ? d_bias.get() : nullptr;
  p.q_sink = c.q_sink ? d_sink.get() : nullptr;
  p.positions = d_pos.as<int64_t>();
  p.sink_positions = c.q_sink ? d_sink_pos.as<int64_t>() : nullptr;
  p.inv_freq = d_inv.as<float>();
  p.cache_slot = d_slots.as<int32_t>();
  p.cache = d_cache.get();
  p.layout = layout;
  CUDA_OK(kernels::launch_rope_kv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_qkv.check_guards());
  EXPECT_TRUE(d_sink.check_guards());
  EXPECT_TRUE(d_cache.check_guards());
  const std::vector<float> got_qkv = d_qkv.download_floats(dt);
  {  // the angles from launch_rope_table (RopeKvParams::table) give the same bytes
    SCOPED_TRACE("angles from the table");
    auto bytes = [](const DeviceBuffer& b) {
      std::vector<uint8_t> v(b.bytes());
      b.download(v.data());
      return v;
    };
    const std::vector<uint8_t> qkv_out = bytes(d_qkv), sink_out = bytes(d_sink),
                               cache_out = bytes(d_cache);
    d_qkv.upload_floats(qkv, dt);
    d_sink.poison();
    if (fp8) {
      d_cache.upload(cache_fp8.data());
    } else {
      d_cache.upload_floats(cache, dt);
    }
    DeviceBuffer d_table(size_t(T) * 2 * std::max(c.rotary_dim, 1), 4);
    kernels::RopeTableParams tp;
    tp.num_tokens = T;
    tp.rotary_dim = c.rotary_dim;
    tp.positions = p.positions;
    tp.sink_positions = p.sink_positions;
    tp.inv_freq = p.inv_freq;
    tp.table = d_table.as<float>();
    CUDA_OK(kernels::launch_rope_table(tp, nullptr));
    kernels::RopeKvParams pt = p;
    pt.table = d_table.as<float>();
    CUDA_OK(kernels::launch_rope_kv(pt, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(bytes(d_qkv) == qkv_out);
    EXPECT_TRUE(bytes(d_sink) == sink_out);
    EXPECT_TRUE(bytes(d_cache) == cache_out);
  }
  expect_close(got_qkv, want_qkv, dt, "qkv");
  if (c.q_sink) expect_close(d_sink.download_floats(dt), want_sink, dt, "q_sink");
  if (!fp8) {
    expect_close(d_cache.download_floats(dt), want_cache, dt, "cache");
    return;
  }
  // fp8: bit-exact bytes of the k and v the kernel wrote back to qkv, every other byte untouched.
  std::vector<uint8_t> want_bytes = cache_fp8, got_bytes(cache_fp8.size());
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const int b = slots[t] / layout.block_size, o = slots[t] % layout.block_size;
    for (int h = nh; h < nh + 2 * kvh; ++h) {
      const bool is_v = h >= nh + kvh;
      const int g = is_v ? h - nh - kvh : h - nh;
      const size_t at = size_t(b) * layout.block_stride() + (is_v ? layout.kv_stride() : 0) +
                        (size_t(g) * layout.block_size + o) * hd;
      for (int d = 0; d < hd; ++d)
        want_bytes[at + d] = fp8::e4m3_from_float(got_qkv[size_t(t) * stride + h * hd + d] /
                                                  (is_v ? ct.v_scale : ct.k_scale));
    }
  }
  d_cache.download(got_bytes.data());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got_bytes.size(); ++i)
    if (got_bytes[i] != want_bytes[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << "cache bytes differ from the host encoder, first at " << first << ": got 0x"
                     << std::hex << int(got_bytes[first]) << ", want 0x" << int(want_bytes[first]);
}

TEST(RopeKv, RotatesBiasesAndStoresOverHeadDimsAndRotaryDims) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(11);
  const RopeCase cases[] = {
      {64, 64, false, true, 0},  {64, 64, true, true, 0},   {128, 128, true, true, 0},
      {128, 32, true, true, 0},  // GPT-NeoX style 25% rotary (vector path)
      {80, 20, true, true, 0},   // Pythia-2.8b: rotary/2 = 10, the scalar path
      {96, 24, false, true, 0},  {256, 256, true, true, 0}, {128, 128, true, false, 0},
      {128, 128, true, true, 3},  // odd row stride: the scalar path at head_dim 128
      {64, 0, true, true, 0},     // no rotary dims: bias add and store only
      {66, 66, true, true, 0},    // head_dim not a multiple of 8
  };
  for (DType dt : kDTypes)
    for (const RopeCase& c : cases) run_rope(c, dt, rng);
}

TEST(RopeKv, StoresAnFp8CacheBitExact) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(12);
  const RopeCase cases[] = {
      {128, 128, true, true, 0},  {64, 64, false, true, 0},
      {128, 32, true, true, 0},   {80, 20, true, true, 0},
      {256, 256, true, false, 0}, {128, 128, true, true, 3},  // the scalar path
      {66, 66, true, true, 0},
  };
  // Scale 1 (vLLM's default), other scales (inexact divisions), and a small K scale under which
  // values beyond 448 * scale saturate.
  const CacheType types[] = {{KvDType::kFp8E4M3, 1.0f, 1.0f},
                             {KvDType::kFp8E4M3, 0.37f, 1.7f},
                             {KvDType::kFp8E4M3, 1.0f / 256, 0.5f}};
  for (DType dt : kDTypes)
    for (const CacheType& ct : types)
      for (const RopeCase& c : cases) run_rope(c, dt, rng, ct);
}

TEST(RopeKv, LargePositionsKeepTheirAngle) {
  // A pure rotation (no bias) of a unit vector at inv_freq = 1: the angle of 123,456,789 rad
  // modulo 2 pi must survive; an fp32 product would be off by whole radians.
  RILL_REQUIRE_GPU();
  const DType dt = DType::kF16;
  const int hd = 2, nh = 1, kvh = 1, stride = (nh + 2 * kvh) * hd;
  const std::vector<int64_t> positions = {123456789, 1000003, 4095};
  const int T = int(positions.size());
  std::vector<float> qkv(size_t(T) * stride, 0.0f);
  for (int t = 0; t < T; ++t) qkv[size_t(t) * stride] = qkv[size_t(t) * stride + hd] = 1.0f;
  const std::vector<float> inv_freq = {1.0f};
  DeviceBuffer d_qkv(qkv.size(), 2), d_pos(T, 8), d_inv(1, 4);
  d_qkv.upload_floats(qkv, dt);
  d_pos.upload(positions.data());
  d_inv.upload_floats(inv_freq, dt);
  kernels::RopeKvParams p;
  p.dtype = dt;
  p.num_tokens = T;
  p.num_heads = nh;
  p.num_kv_heads = kvh;
  p.head_dim = hd;
  p.rotary_dim = hd;
  p.qkv = d_qkv.get();
  p.qkv_stride = stride;
  p.positions = d_pos.as<int64_t>();
  p.inv_freq = d_inv.as<float>();
  CUDA_OK(kernels::launch_rope_kv(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = d_qkv.download_floats(dt);
  for (int t = 0; t < T; ++t) {
    const long double a =
        std::fmod(static_cast<long double>(positions[t]), 6.283185307179586476925286766559L);
    EXPECT_NEAR(got[size_t(t) * stride], double(std::cos(a)), 2e-3) << positions[t];
    EXPECT_NEAR(got[size_t(t) * stride + 1], double(std::sin(a)), 2e-3) << positions[t];
  }
}

TEST(RopeKv, RejectsUnsupportedShapes) {
  kernels::RopeKvParams p;
  p.num_tokens = 1;
  p.num_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 258;
  p.rotary_dim = 64;
  p.qkv_stride = 3 * 258;
  EXPECT_EQ(kernels::launch_rope_kv(p, nullptr), cudaErrorInvalidValue);
  p.head_dim = 64;
  p.rotary_dim = 63;
  EXPECT_EQ(kernels::launch_rope_kv(p, nullptr), cudaErrorInvalidValue);
  // An fp8 cache needs finite positive scales (checked when the launch stores K/V).
  int64_t dummy[4] = {};  // host addresses: the launcher must reject before any launch
  p.rotary_dim = 64;
  p.qkv = dummy;
  p.positions = dummy;
  p.inv_freq = reinterpret_cast<const float*>(dummy);
  p.cache_slot = reinterpret_cast<const int32_t*>(dummy);
  p.cache = dummy;
  p.layout.num_kv_heads = 1;
  p.layout.head_dim = 64;
  p.layout.cache_dtype = KvDType::kFp8E4M3;
  p.layout.k_scale = std::nanf("");
  EXPECT_EQ(kernels::launch_rope_kv(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("k_scale"), std::string::npos);
}

}  // namespace
}  // namespace rill::testing
