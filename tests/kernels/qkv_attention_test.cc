// The fused qkv projection and decode attention (rill/kernels/qkv_attention.h) against the two
// launches it replaces, launch_gemv_fp8 (deep-prologue shape) then launch_decode_attention with
// RoPE fused in, each tested against CPU references elsewhere: the QKV row, the attention output
// and the whole cache must be bit-identical over dtypes, fp8 caches, per-row and block weight
// scales, an Fp8NormIn input, a QKV bias, linear and wrapped StreamingLLM caches, splits left
// empty by a short sequence and a newest key that is a sink; and the shapes it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/qkv_attention.h"
#include "rill/kernels/rope.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DecodeAttentionParams;
using kernels::DecodeSeq;
using kernels::DType;
using kernels::Fp8GemvParams;
using kernels::Fp8ScaleLayout;
using kernels::KvDType;

constexpr int kHeadDim = 128;

struct QkvCase {
  DType dtype = DType::kF16;
  KvDType kv = KvDType::kSame;
  Fp8ScaleLayout scales = Fp8ScaleLayout::kPerRow;
  int num_heads = 4, K = 512;
  bool norm_in = false, bias = false;
  SeqSpec seq{4, 300, 100000, 300};
};

std::string describe(const QkvCase& c) {
  return describe_types(c.dtype, c.kv, 0.5f, 2.0f) + " heads=" + std::to_string(c.num_heads) +
         " K=" + std::to_string(c.K) +
         (c.scales == Fp8ScaleLayout::kPerRow ? " per-row" : " block128") +
         (c.norm_in ? " norm_in" : "") + (c.bias ? " bias" : "") +
         " sinks=" + std::to_string(c.seq.num_sink) +
         " window=" + std::to_string(c.seq.window_count);
}

// Host inputs: x, the e4m3 weights [3 H D, K] with their scales, Fp8NormIn's sums, the bias, a
// paged cache with shuffled blocks (random everywhere, so the newest rows start out different),
// the position and the frequencies.
struct Inputs {
  int N = 0, ring_base = 0, bs = 16, new_slot = 0;
  std::vector<float> x, scale, sums, bias, cache, inv_freq;
  std::vector<uint8_t> w, cache_fp8;
  std::vector<int32_t> table;
  kernels::KvCacheLayout layout;
  int64_t pos = 0, sink_pos = 0;

  explicit Inputs(const QkvCase& c) {
    const int H = c.num_heads, K = c.K;
    N = 3 * H * kHeadDim;
    std::mt19937 rng(11 + H + K + c.seq.window_count);
    x = rounded_random(K, rng, c.dtype);
    std::uniform_int_distribution<int> code(0, 253);
    w.resize(size_t(N) * K);
    for (uint8_t& b : w) {
      const int v = code(rng);
      b = static_cast<uint8_t>(v < 127 ? v : v + 1);  // no NaN code
    }
    std::uniform_real_distribution<float> expo(-9.0f, -5.0f), sum(0.2f * K, 3.0f * K);
    scale.resize(c.scales == Fp8ScaleLayout::kPerRow ? size_t(N) : size_t((K + 127) / 128) * N);
    for (float& s : scale) s = std::exp2(expo(rng));
    sums.resize(K / 16);
    for (float& s : sums) s = sum(rng) / (K / 16);
    bias = rounded_random(N, rng, c.dtype, 0.5f);
    ring_base = (c.seq.num_sink + bs - 1) / bs * bs;
    int max_slot = 0;
    for (const Key& k : keys_of(c.seq, ring_base)) max_slot = std::max(max_slot, k.slot);
    const int used = max_slot / bs + 1, num_blocks = used + 2;
    table = shuffled_blocks(num_blocks, used, rng);
    layout = cache_layout(num_blocks, H, bs, kHeadDim, c.kv, 0.5f, 2.0f);
    cache = random_vector(size_t(num_blocks) * layout.block_stride(), rng);
    cache_fp8 = finish_cache(cache, layout, c.dtype);
    pos = 1000003ll + c.seq.num_sink + c.seq.window_count;
    sink_pos = c.seq.num_sink + std::min(c.seq.window_count, 7);
    const std::vector<Key> keys = keys_of(c.seq, ring_base);
    const int slot = c.seq.window_count > 0 ? keys[c.seq.num_sink].slot : keys.back().slot;
    new_slot = table[slot / bs] * bs + slot % bs;
    inv_freq.resize(kHeadDim / 2);
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * double(i) / kHeadDim));
  }
};

// What a path leaves: the QKV row, the attention output and the whole cache, as bytes.
struct PathResult {
  std::vector<uint16_t> qkv, out;
  std::vector<uint8_t> cache;
};

// The GEMV then attention (fused false), or the fused kernel; both from the same bytes.
void run_path(const QkvCase& c, const Inputs& in, bool fused, PathResult& res, int time_mode = 0) {
  const int H = c.num_heads, D = kHeadDim;
  const int splits = kernels::decode_qkv_attention_splits(D);
  DeviceBuffer d_x(c.K, 2), d_w(in.w.size(), 1), d_scale(in.scale.size(), 4),
      d_sums(in.sums.size(), 4), d_bias(in.N, 2), d_qkv(in.N, 2), d_out(size_t(H) * D, 2),
      d_cache(in.cache.size(), cache_elem_bytes(in.layout)), d_table(in.table.size(), 4),
      d_seq(1, sizeof(DecodeSeq)), d_pos(1, 8), d_sink(1, 8), d_freq(in.inv_freq.size(), 4),
      d_rope(size_t(4) * (D / 2), 4),
      d_ws(kernels::decode_attention_workspace_bytes(1, H, D, splits), 1);
  d_x.upload_floats(in.x, c.dtype);
  d_w.upload(in.w.data());
  d_scale.upload(in.scale.data());
  d_sums.upload(in.sums.data());
  d_bias.upload_floats(in.bias, c.dtype);
  d_table.upload(in.table.data());
  d_pos.upload(&in.pos);
  d_sink.upload(&in.sink_pos);
  d_freq.upload(in.inv_freq.data());
  upload_cache(d_cache, in.cache, in.cache_fp8, in.layout, c.dtype);
  const DecodeSeq ds = decode_seq(c.seq, in.ring_base, d_table.as<int32_t>());
  d_seq.upload(&ds);
  CUDA_OK(cudaMemset(d_ws.get(), 0, d_ws.bytes()));
  d_qkv.poison();
  d_out.poison();

  kernels::RopeTableParams t;
  t.num_tokens = 1;
  t.rotary_dim = D;
  t.positions = d_pos.as<int64_t>();
  t.sink_positions = d_sink.as<int64_t>();
  t.inv_freq = d_freq.as<float>();
  t.table = d_rope.as<float>();
  CUDA_OK(kernels::launch_rope_table(t, nullptr));

  Fp8GemvParams g;
  g.dtype = c.dtype;
  g.M = 1;
  g.N = in.N;
  g.K = c.K;
  g.x = d_x.get();
  g.w = d_w.get();
  g.scale = d_scale.as<float>();
  g.scale_layout = c.scales;
  g.y = d_qkv.get();
  g.deep_prologue = true;
  if (c.norm_in) {
    g.norm_in.sumsq = d_sums.as<float>();
    g.norm_in.eps = 1e-5f;
  }
  auto p = attention_params<DecodeAttentionParams>(c.dtype, 1, H, H, D, 1.0f / std::sqrt(float(D)));
  p.q = d_qkv.get();
  p.q_stride = in.N;
  p.seqs = d_seq.as<DecodeSeq>();
  p.cache = d_cache.get();
  p.layout = in.layout;
  p.out = d_out.get();
  p.num_splits = splits;
  p.min_keys_per_split = 64;
  p.workspace = d_ws.get();
  p.rope.table = d_rope.as<float>();
  p.rope.rotary_dim = D;
  p.rope.qkv_bias = c.bias ? d_bias.get() : nullptr;
  ASSERT_TRUE(kernels::decode_qkv_attention_supported(g, p));
  if (time_mode) {  // PROBE (not for commit): median of 50 launches of each path
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int mode = 0; mode < 10; ++mode) {
      const int probes[] = {0, 0, 0, 0, 6, 7, 6 | 64, 6 | 128, 7 | 128, 32};
      setenv("RILL_QKV_PROBE", std::to_string(probes[mode]).c_str(), 1);
      std::vector<float> ms;
      for (int r = 0; r < 60; ++r) {
        cudaEventRecord(e0);
        for (int k = 0; k < 10; ++k) {
          if (mode == 0 || mode == 2) CUDA_OK(kernels::launch_gemv_fp8(g, nullptr));
          if (mode == 1 || mode == 2) CUDA_OK(kernels::launch_decode_attention(p, nullptr));
          if (mode >= 3) CUDA_OK(kernels::launch_decode_qkv_attention(g, p, nullptr));
        }
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t = 0;
        cudaEventElapsedTime(&t, e0, e1);
        if (r >= 10) ms.push_back(t * 100);  // us per launch
      }
      std::sort(ms.begin(), ms.end());
      std::printf("PROBE mode %d probe %d (%s): %.2f us\n", mode, probes[mode],
                  mode == 0 ? "gemv" : mode == 1 ? "attention" : mode == 2 ? "gemv+attention" : "fused",
                  ms[ms.size() / 2]);
    }
    unsetenv("RILL_QKV_PROBE");
  }
  if (fused) {
    CUDA_OK(kernels::launch_decode_qkv_attention(g, p, nullptr));
  } else {
    CUDA_OK(kernels::launch_gemv_fp8(g, nullptr));
    CUDA_OK(kernels::launch_decode_attention(p, nullptr));
  }
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_qkv.check_guards());
  EXPECT_TRUE(d_out.check_guards());
  EXPECT_TRUE(d_cache.check_guards());
  EXPECT_FALSE(has_nonfinite(d_out.download_floats(c.dtype)));
  res.qkv.resize(in.N);
  res.out.resize(size_t(H) * D);
  res.cache.resize(d_cache.bytes());
  d_qkv.download(res.qkv.data());
  d_out.download(res.out.data());
  d_cache.download(res.cache.data());
}

void run_case(const QkvCase& c) {
  SCOPED_TRACE(describe(c));
  const Inputs in(c);
  PathResult two, one;
  run_path(c, in, false, two);
  run_path(c, in, true, one);
  ASSERT_FALSE(one.out.empty());
  EXPECT_EQ(one.qkv, two.qkv) << "QKV row";
  EXPECT_EQ(one.out, two.out) << "attention output";
  EXPECT_TRUE(one.cache == two.cache) << "cache contents";
}

TEST(DecodeQkvAttention, MatchesGemvThenAttentionBitwise) {
  RILL_REQUIRE_GPU();
  for (DType t : {DType::kF16, DType::kBF16})
    for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
      for (Fp8ScaleLayout s : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128}) {
        QkvCase c;
        c.dtype = t;
        c.kv = kv;
        c.scales = s;
        c.norm_in = s == Fp8ScaleLayout::kPerRow;
        c.bias = kv == KvDType::kFp8E4M3;
        run_case(c);
      }
}

// The 7B's shape (32 heads, K 4096), and sequences whose splits differ: a linear cache over all
// eight splits, a short one that leaves most of them empty, one whose newest key is a sink.
TEST(DecodeQkvAttention, ShapesAndSequences) {
  RILL_REQUIRE_GPU();
  std::vector<QkvCase> cases;
  QkvCase big;
  big.num_heads = 32;
  big.K = 4096;
  big.norm_in = true;
  big.seq = {4, 1000, 4711, 511};
  cases.push_back(big);
  for (const SeqSpec& s : {SeqSpec{0, kLinear, 600, 601}, SeqSpec{0, kLinear, 16, 17},
                           SeqSpec{3, 64, 0, 0}, SeqSpec{4, 48, 1000, 48}}) {
    QkvCase c;
    c.dtype = DType::kBF16;
    c.bias = true;
    c.seq = s;
    cases.push_back(c);
  }
  for (const QkvCase& c : cases) run_case(c);
}

TEST(DecodeQkvAttention, ProbeTiming) {
  RILL_REQUIRE_GPU();
  QkvCase big;
  big.num_heads = 32;
  big.K = 4096;
  big.norm_in = true;
  big.seq = {0, kLinear, 514, 515};
  const Inputs in(big);
  PathResult r;
  run_path(big, in, true, r, 1);
}

TEST(DecodeQkvAttention, RefusesWhatItDoesNotServe) {
  Fp8GemvParams g;
  g.dtype = DType::kBF16;
  g.M = 1;
  g.K = 4096;
  g.N = 3 * 32 * kHeadDim;
  alignas(16) static char buf[64];
  g.x = g.w = buf;
  g.scale = reinterpret_cast<const float*>(buf);
  g.y = buf;
  auto p = attention_params<DecodeAttentionParams>(DType::kBF16, 1, 32, 32, kHeadDim, 1.0f);
  p.q = buf;
  p.rope.table = reinterpret_cast<const float*>(buf);
  p.rope.rotary_dim = kHeadDim;
  p.num_splits = kernels::decode_qkv_attention_splits(kHeadDim);
  p.workspace = buf;
  EXPECT_TRUE(kernels::decode_qkv_attention_supported(g, p));
  auto refused = [&](auto change) {
    Fp8GemvParams g2 = g;
    DecodeAttentionParams p2 = p;
    change(g2, p2);
    return !kernels::decode_qkv_attention_supported(g2, p2);
  };
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams&) { a.M = 2; }));
  EXPECT_TRUE(refused([](Fp8GemvParams&, DecodeAttentionParams& b) { b.num_seqs = 2; }));
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams& b) {  // GQA
    b.num_kv_heads = 8;
    a.N = (32 + 16) * kHeadDim;
  }));
  EXPECT_TRUE(refused([](Fp8GemvParams&, DecodeAttentionParams& b) { b.rope.table = nullptr; }));
  EXPECT_TRUE(refused([](Fp8GemvParams&, DecodeAttentionParams& b) { b.num_splits = 16; }));
  EXPECT_TRUE(refused([](Fp8GemvParams&, DecodeAttentionParams& b) { b.workspace = nullptr; }));
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams&) { a.K = 32768; }));
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams&) { a.y_f32 = true; }));
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams&) { a.y = nullptr; }));
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams&) {
    a.epilogue = kernels::GemvEpilogue::kSiluMul;
  }));
  EXPECT_TRUE(refused([](Fp8GemvParams& a, DecodeAttentionParams& b) {  // head_dim 64
    b.head_dim = 64;
    a.N = 3 * 32 * 64;
    b.num_splits = kernels::decode_qkv_attention_splits(64);
  }));
}

}  // namespace
}  // namespace rill::testing
