// The fp8 GEMV's RoPE epilogue (Fp8GemvParams::rope) against what it replaces: a kStore GEMV
// followed by launch_rope_kv with the same angle table. The q | k | v rows, the sink copy of q
// and the KV cache (16-bit and fp8, slots skipped by a negative index included) must be the same
// bytes, over GQA and MHA heads, partial rotary dims, biases, 1 .. 8 rows, both dtypes and both
// scale layouts; and the launcher refuses what the epilogue cannot do.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "rill/kernels/gemv_fp8.h"
#include "rill/kernels/rope.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::Fp8ScaleLayout;
using kernels::KvDType;

struct Heads {
  int num_heads, num_kv_heads, head_dim, rotary_dim;
};

/// Everything one comparison needs on the device: the weight, x, the step's positions and
/// angles, and two sets of outputs (unfused, fused) poisoned alike.
struct Case {
  DType dt;
  Heads h;
  int M, K;
  Fp8ScaleLayout layout;
  bool bias, sink;
  KvDType cache_dtype;  // kSame or kFp8E4M3; `cache` false: no cache
  bool cache;
  std::string label() const {
    return std::string(dt == DType::kF16 ? "f16" : "bf16") + " heads " +
           std::to_string(h.num_heads) + "/" + std::to_string(h.num_kv_heads) + " x " +
           std::to_string(h.head_dim) + " rotary " + std::to_string(h.rotary_dim) + " M=" +
           std::to_string(M) + (layout == Fp8ScaleLayout::kPerRow ? " per-row" : " block128") +
           (bias ? " bias" : "") + (sink ? " sink" : "") +
           (!cache ? " no cache" : cache_dtype == KvDType::kSame ? " cache" : " fp8 cache");
  }
};

void compare(const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(c.label());
  const Heads& h = c.h;
  const int N = (h.num_heads + 2 * h.num_kv_heads) * h.head_dim, K = c.K, M = c.M;
  const int half = h.rotary_dim / 2;
  std::vector<uint8_t> w(size_t(N) * K);
  std::uniform_int_distribution<int> code(0, 253);
  for (uint8_t& b : w) {
    const int v = code(rng);
    b = static_cast<uint8_t>(v < 127 ? v : v + 1);  // no NaN codes
  }
  std::vector<float> scale(c.layout == Fp8ScaleLayout::kPerRow ? size_t(N)
                                                               : size_t((K + 127) / 128) * N);
  std::uniform_real_distribution<float> expo(-9.0f, -5.0f);
  for (float& s : scale) s = std::exp2(expo(rng));
  DeviceBuffer d_w(w.size(), 1), d_scale(scale.size(), 4), d_x(size_t(M) * K, 2),
      d_bias(N, 2);
  d_w.upload(w.data());
  d_scale.upload(scale.data());
  d_x.upload_floats(rounded_random(size_t(M) * K, rng, c.dt), c.dt);
  d_bias.upload_floats(rounded_random(N, rng, c.dt, 0.5f), c.dt);

  // Positions far apart (angles of large positions too), sinks at 0 .. 3.
  std::vector<int64_t> pos(M), sink_pos(M);
  std::vector<int32_t> slot(M);
  for (int m = 0; m < M; ++m) {
    pos[m] = 7 + 100003 * int64_t(m);
    sink_pos[m] = m % 4;
    slot[m] = m == 1 ? -1 : 3 + 9 * m;  // row 1 is not stored
  }
  std::vector<float> inv_freq(std::max(half, 1));
  for (int i = 0; i < half; ++i)
    inv_freq[i] = float(std::pow(500000.0, -2.0 * i / std::max(h.rotary_dim, 1)));
  DeviceBuffer d_pos(M, 8), d_sink_pos(M, 8), d_slot(M, 4), d_inv(inv_freq.size(), 4),
      d_table(size_t(M) * 4 * std::max(half, 1), 4);
  d_pos.upload(pos.data());
  d_sink_pos.upload(sink_pos.data());
  d_slot.upload(slot.data());
  d_inv.upload(inv_freq.data());
  kernels::RopeTableParams t;
  t.num_tokens = M;
  t.rotary_dim = h.rotary_dim;
  t.positions = d_pos.as<int64_t>();
  t.sink_positions = d_sink_pos.as<int64_t>();
  t.inv_freq = d_inv.as<float>();
  t.table = d_table.as<float>();
  CUDA_OK(kernels::launch_rope_table(t, nullptr));

  kernels::KvCacheLayout layout;
  layout.num_blocks = 5;
  layout.num_kv_heads = h.num_kv_heads;
  layout.block_size = 16;
  layout.head_dim = h.head_dim;
  layout.cache_dtype = c.cache_dtype;
  layout.k_scale = 0.37f;
  layout.v_scale = 0.11f;
  const size_t cache_bytes = size_t(layout.layer_stride()) * layout.element_bytes();

  struct Out {
    DeviceBuffer y, sink, cache;
  };
  const auto make_out = [&] {
    return Out{DeviceBuffer(size_t(M) * N, 2), DeviceBuffer(size_t(M) * h.num_heads * h.head_dim, 2),
               DeviceBuffer(cache_bytes, 1)};
  };
  Out a = make_out(), b = make_out();
  for (Out* o : {&a, &b}) {
    o->y.poison();
    o->sink.poison();
    o->cache.poison();
  }
  const auto rope_params = [&](Out& o) {
    kernels::RopeKvParams r;
    r.dtype = c.dt;
    r.num_tokens = M;
    r.num_heads = h.num_heads;
    r.num_kv_heads = h.num_kv_heads;
    r.head_dim = h.head_dim;
    r.rotary_dim = h.rotary_dim;
    r.qkv = o.y.get();
    r.qkv_stride = N;
    r.qkv_bias = c.bias ? d_bias.get() : nullptr;
    r.q_sink = c.sink ? o.sink.get() : nullptr;
    r.positions = d_pos.as<int64_t>();
    r.sink_positions = d_sink_pos.as<int64_t>();
    r.inv_freq = d_inv.as<float>();
    r.cache_slot = c.cache ? d_slot.as<int32_t>() : nullptr;
    r.cache = c.cache ? o.cache.get() : nullptr;
    r.layout = layout;
    r.table = d_table.as<float>();
    return r;
  };
  const auto gemv_params = [&](Out& o) {
    kernels::Fp8GemvParams p;
    p.dtype = c.dt;
    p.M = M;
    p.N = N;
    p.K = K;
    p.x = d_x.get();
    p.w = d_w.get();
    p.scale = d_scale.as<float>();
    p.scale_layout = c.layout;
    p.y = o.y.get();
    p.deep_prologue = true;  // the persistent shape, as the engine runs qkv
    return p;
  };
  // Unfused: the GEMV, then rope_kv.
  const kernels::RopeKvParams ra = rope_params(a);
  CUDA_OK(kernels::launch_gemv_fp8(gemv_params(a), nullptr));
  CUDA_OK(kernels::launch_rope_kv(ra, nullptr));
  // Fused.
  const kernels::RopeKvParams rb = rope_params(b);
  kernels::Fp8GemvParams pb = gemv_params(b);
  pb.rope = &rb;
  ASSERT_TRUE(kernels::gemv_fp8_rope_fusable(pb));
  CUDA_OK(kernels::launch_gemv_fp8(pb, nullptr));
  CUDA_OK(cudaDeviceSynchronize());

  for (const auto& [name, x, y] : {std::tuple{"qkv rows", &a.y, &b.y},
                                   std::tuple{"q_sink", &a.sink, &b.sink},
                                   std::tuple{"cache", &a.cache, &b.cache}}) {
    EXPECT_TRUE(x->check_guards()) << name;
    EXPECT_TRUE(y->check_guards()) << name;
    std::vector<uint8_t> want(x->bytes()), got(y->bytes());
    x->download(want.data());
    y->download(got.data());
    size_t diff = 0;
    while (diff < want.size() && want[diff] == got[diff]) ++diff;
    EXPECT_EQ(diff, want.size()) << name << ": first differing byte " << diff << " of "
                                 << want.size();
  }
  // The rows were written (no poison left).
  EXPECT_FALSE(has_nonfinite(b.y.download_floats(c.dt))) << "unwritten qkv elements";
}

TEST(GemvFp8Rope, EqualsGemvThenRopeKvByteForByte) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(2811);
  // Llama-3 GQA (reduced), MHA with a partial rotary half of 16 dims, a 96-dim head whose tail
  // pairs up, and no rotation at all.
  const Heads heads[] = {{8, 2, 128, 128}, {4, 4, 64, 32}, {6, 2, 96, 64}, {2, 1, 64, 0}};
  int n = 0;
  for (DType dt : kDTypes)
    for (const Heads& h : heads)
      for (int M : {1, 3, 8}) {
        const bool odd = (n++ % 2) == 1;
        Case c{dt, h, M, 512, odd ? Fp8ScaleLayout::kBlock128 : Fp8ScaleLayout::kPerRow,
               odd, !odd, n % 3 == 0 ? KvDType::kFp8E4M3 : KvDType::kSame, n % 5 != 0};
        compare(c, rng);
        c.bias = !c.bias;
        c.sink = !c.sink;
        c.cache_dtype = c.cache_dtype == KvDType::kSame ? KvDType::kFp8E4M3 : KvDType::kSame;
        compare(c, rng);
      }
}

TEST(GemvFp8Rope, RefusesWhatItCannotDo) {
  RILL_REQUIRE_GPU();
  DeviceBuffer y(16 * 768, 2), x(16 * 256, 2), w(768 * 256, 1), scale(768, 4), table(16 * 256, 4);
  kernels::RopeKvParams r;
  r.dtype = DType::kBF16;
  r.num_tokens = 1;
  r.num_heads = 4;
  r.num_kv_heads = 1;
  r.head_dim = 128;
  r.rotary_dim = 128;
  r.qkv = y.get();
  r.qkv_stride = 768;
  r.table = table.as<float>();
  kernels::Fp8GemvParams p;
  p.dtype = DType::kBF16;
  p.M = 1;
  p.N = 768;
  p.K = 256;
  p.x = x.get();
  p.w = w.get();
  p.scale = scale.as<float>();
  p.y = y.get();
  p.deep_prologue = true;
  p.rope = &r;
  EXPECT_TRUE(kernels::gemv_fp8_rope_fusable(p));
  const auto refused = [&](kernels::Fp8GemvParams q, const kernels::RopeKvParams& rq,
                           const char* why) {
    q.rope = &rq;
    EXPECT_FALSE(kernels::gemv_fp8_rope_fusable(q)) << why;
    EXPECT_EQ(kernels::launch_gemv_fp8(q, nullptr), cudaErrorInvalidValue) << why;
  };
  kernels::Fp8GemvParams q = p;
  q.deep_prologue = false;  // the register shape
  refused(q, r, "a shape that is not persistent");
  q = p;
  q.M = 9;
  kernels::RopeKvParams r9 = r;
  r9.num_tokens = 9;
  refused(q, r9, "more than 8 rows");
  kernels::RopeKvParams rr = r;
  rr.num_tokens = 2;
  refused(p, rr, "num_tokens != M");
  rr = r;
  rr.rotary_dim = 100;  // half 50: a tile would straddle the rotary half
  refused(p, rr, "rotary_dim / 2 % 16 != 0");
  rr = r;
  rr.table = nullptr;
  refused(p, rr, "no angle table");
  rr = r;
  rr.num_kv_heads = 2;  // N no longer (H + 2 KV) x head_dim
  refused(p, rr, "N disagrees with the heads");
  q = p;
  q.y_f32 = true;
  refused(q, r, "fp32 output");
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace rill::testing
