// Decode attention with RoPE, the QKV bias and the newest K/V write fused in (DecodeRope) against
// the unfused pair it replaces, launch_rope_kv then launch_decode_attention, each of which is
// tested against a CPU reference elsewhere: the outputs and the whole cache must be bit-identical
// over dtypes, fp8 caches with scales, head dims with idle lanes, partial rotary, biases, GQA
// groups split over several CTAs, split counts (one, cluster merge, workspace merge), StreamingLLM
// rings and sequences whose newest key is a sink. The rope table is checked against the CPU angles.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/attention.h"
#include "rill/kernels/rope.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DecodeAttentionParams;
using kernels::DecodeSeq;
using kernels::DType;
using kernels::KvDType;

struct FusedCase {
  DType dtype = DType::kF16;
  KvDType kv = KvDType::kSame;
  int head_dim = 128, num_heads = 8, num_kv_heads = 2, rotary_dim = 128, num_splits = 1;
  bool bias = false;
  int use_mma = 0;  // DecodeAttentionParams::use_mma of both paths
};

std::string describe(const FusedCase& c) {
  return describe_types(c.dtype, c.kv, 0.5f, 2.0f) + " head_dim=" + std::to_string(c.head_dim) +
         " heads=" + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
         " rotary=" + std::to_string(c.rotary_dim) + " splits=" + std::to_string(c.num_splits) +
         (c.bias ? " bias" : "") + (c.use_mma ? " tensor cores" : "");
}

// Linear caches, full and wrapped rings, a ring over several splits, and a sequence of three
// tokens whose newest key is its third sink.
std::vector<SeqSpec> seqs() {
  return {{0, kLinear, 16, 17},
          {4, 48, 1000, 48},
          {4, 300, 100000, 300},
          {3, 64, 0, 0},
          {0, kLinear, 600, 601}};
}

// Slot of a sequence's newest key: the window's newest, else (no window yet) the last sink.
int newest_slot(const SeqSpec& q, int ring_base) {
  const std::vector<Key> keys = keys_of(q, ring_base);
  return q.window_count > 0 ? keys[q.num_sink].slot : keys.back().slot;
}

// Host inputs of one case: a paged cache with shuffled blocks, random everywhere (both paths
// start from the same bytes); raw QKV rows with a padded stride, a bias, positions far into a
// stream, sink positions and frequencies.
struct Inputs {
  std::vector<SeqSpec> sq = seqs();
  int n = static_cast<int>(sq.size()), bs = 16, qkv_width = 0, stride = 0;
  std::vector<int> ring_base, first_block;
  std::vector<int32_t> tables, new_slot;  // new_slot: physical slot of each newest key
  kernels::KvCacheLayout layout;
  std::vector<float> cache, qkv, bias, inv_freq;
  std::vector<uint8_t> cache_fp8;
  std::vector<int64_t> pos, sink_pos;

  explicit Inputs(const FusedCase& c)
      : ring_base(n), first_block(n), new_slot(n), pos(n), sink_pos(n) {
    const int D = c.head_dim, H = c.num_heads, G = c.num_kv_heads;
    std::mt19937 rng(77 + D + H + c.rotary_dim + c.num_splits);
    int used = 0;
    for (int s = 0; s < n; ++s) {
      ring_base[s] = (sq[s].num_sink + bs - 1) / bs * bs;
      int max_slot = 0;
      for (const Key& k : keys_of(sq[s], ring_base[s])) max_slot = std::max(max_slot, k.slot);
      first_block[s] = used;
      used += max_slot / bs + 1;
    }
    const int num_blocks = used + 2;
    tables = shuffled_blocks(num_blocks, used, rng);
    layout = cache_layout(num_blocks, G, bs, D, c.kv, 0.5f, 2.0f);
    cache = random_vector(size_t(num_blocks) * layout.block_stride(), rng);
    cache_fp8 = finish_cache(cache, layout, c.dtype);
    qkv_width = (H + 2 * G) * D;
    stride = qkv_width + 8;
    qkv = rounded_random(size_t(n) * stride, rng, c.dtype);
    bias = rounded_random(qkv_width, rng, c.dtype, 0.5f);
    for (int s = 0; s < n; ++s) {
      pos[s] = 1000003ll * (s + 1) + sq[s].num_sink + sq[s].window_count;
      sink_pos[s] = sq[s].num_sink + std::min(sq[s].window_count, 7);
      const int slot = newest_slot(sq[s], ring_base[s]);
      new_slot[s] = tables[first_block[s] + slot / bs] * bs + slot % bs;
    }
    inv_freq.resize(c.rotary_dim / 2);
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * double(i) / c.rotary_dim));
  }
};

// The inputs both paths only read, on the device.
struct SharedInputs {
  DeviceBuffer tables, pos, sink, slot, freq, bias, seqs;
  SharedInputs(const FusedCase& c, const Inputs& in)
      : tables(in.tables.size(), 4),
        pos(in.n, 8),
        sink(in.n, 8),
        slot(in.n, 4),
        freq(std::max<size_t>(in.inv_freq.size(), 1), 4),
        bias(in.qkv_width, 2),
        seqs(in.n, sizeof(DecodeSeq)) {
    tables.upload(in.tables.data());
    pos.upload(in.pos.data());
    sink.upload(in.sink_pos.data());
    slot.upload(in.new_slot.data());
    freq.upload(in.inv_freq.data());
    bias.upload_floats(in.bias, c.dtype);
    std::vector<DecodeSeq> ds(in.n);
    for (int s = 0; s < in.n; ++s)
      ds[s] = decode_seq(in.sq[s], in.ring_base[s], tables.as<int32_t>() + in.first_block[s]);
    seqs.upload(ds.data());
  }
};

// What a path leaves: the output and the whole cache, as bytes.
struct PathResult {
  std::vector<uint16_t> out;
  std::vector<uint8_t> cache;
};

// rope_kv then plain attention (fused false), or the rope table then attention with RoPE fused in.
void run_path(const FusedCase& c, const Inputs& in, const SharedInputs& d, bool fused,
              PathResult& res) {  // void: CUDA_OK returns on failure
  const int n = in.n, D = c.head_dim, H = c.num_heads;
  DeviceBuffer d_cache(in.cache.size(), cache_elem_bytes(in.layout)), d_qkv(in.qkv.size(), 2),
      d_qsink(size_t(n) * H * D, 2), d_out(size_t(n) * H * D, 2),
      d_table(size_t(n) * 2 * std::max(c.rotary_dim, 1), 4),
      d_ws(std::max<size_t>(kernels::decode_attention_workspace_bytes(n, H, D, c.num_splits), 16),
           1);
  upload_cache(d_cache, in.cache, in.cache_fp8, in.layout, c.dtype);
  d_qkv.upload_floats(in.qkv, c.dtype);
  CUDA_OK(cudaMemset(d_ws.get(), 0, d_ws.bytes()));
  d_out.poison();
  auto p = attention_params<DecodeAttentionParams>(c.dtype, n, H, c.num_kv_heads, D, 1.0f / std::sqrt(float(D)));
  p.q = d_qkv.get();
  p.q_stride = in.stride;
  p.seqs = d.seqs.as<DecodeSeq>();
  p.cache = d_cache.get();
  p.layout = in.layout;
  p.out = d_out.get();
  p.num_splits = c.num_splits;
  p.min_keys_per_split = 16;
  p.workspace = d_ws.get();
  // Each kernel against itself (GQA groups of 4 to 8 would otherwise go to the tensor-core
  // kernel, whose bits differ from the CUDA-core kernel's).
  p.use_mma = c.use_mma;
  if (fused) {
    kernels::RopeTableParams t;
    t.num_tokens = n;
    t.rotary_dim = c.rotary_dim;
    t.positions = d.pos.as<int64_t>();
    t.sink_positions = d.sink.as<int64_t>();
    t.inv_freq = d.freq.as<float>();
    t.table = d_table.as<float>();
    CUDA_OK(kernels::launch_rope_table(t, nullptr));
    p.rope.table = d_table.as<float>();
    p.rope.rotary_dim = c.rotary_dim;
    p.rope.qkv_bias = c.bias ? d.bias.get() : nullptr;
  } else {
    kernels::RopeKvParams r;
    r.dtype = c.dtype;
    r.num_tokens = n;
    r.num_heads = H;
    r.num_kv_heads = c.num_kv_heads;
    r.head_dim = D;
    r.rotary_dim = c.rotary_dim;
    r.qkv = d_qkv.get();
    r.qkv_stride = in.stride;
    r.qkv_bias = c.bias ? d.bias.get() : nullptr;
    r.q_sink = d_qsink.get();
    r.positions = d.pos.as<int64_t>();
    r.sink_positions = d.sink.as<int64_t>();
    r.inv_freq = d.freq.as<float>();
    r.cache_slot = d.slot.as<int32_t>();
    r.cache = d_cache.get();
    r.layout = in.layout;
    CUDA_OK(kernels::launch_rope_kv(r, nullptr));
    p.q_sink = d_qsink.get();
    p.q_sink_stride = int64_t(H) * D;
  }
  CUDA_OK(kernels::launch_decode_attention(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_out.check_guards());
  EXPECT_TRUE(d_cache.check_guards());
  EXPECT_FALSE(has_nonfinite(d_out.download_floats(c.dtype)));
  res.out.resize(d_out.bytes() / 2);
  res.cache.resize(d_cache.bytes());
  d_out.download(res.out.data());
  d_cache.download(res.cache.data());
}

void run_case(const FusedCase& c) {
  SCOPED_TRACE(describe(c));
  const Inputs in(c);
  const SharedInputs d(c, in);
  PathResult unfused, fused;
  run_path(c, in, d, false, unfused);
  run_path(c, in, d, true, fused);
  ASSERT_FALSE(fused.out.empty());
  EXPECT_EQ(fused.out, unfused.out) << "attention output";
  EXPECT_TRUE(fused.cache == unfused.cache) << "cache contents";
  // The newest rows really were rewritten (the cache started with other values there).
  DeviceBuffer d_orig(in.cache.size(), cache_elem_bytes(in.layout));
  upload_cache(d_orig, in.cache, in.cache_fp8, in.layout, c.dtype);
  std::vector<uint8_t> orig(d_orig.bytes());
  d_orig.download(orig.data());
  EXPECT_FALSE(orig == fused.cache);
}

TEST(DecodeAttentionRopeFused, MatchesRopeKvThenAttentionBitwise) {
  RILL_REQUIRE_GPU();
  for (DType t : {DType::kF16, DType::kBF16}) {
    for (int splits : {1, 4, 16}) {  // one CTA, cluster merge, workspace merge
      FusedCase c;
      c.dtype = t;
      c.num_splits = splits;
      run_case(c);
    }
  }
}

TEST(DecodeAttentionRopeFused, Fp8PartialRotaryBiasAndGroups) {
  RILL_REQUIRE_GPU();
  const std::vector<FusedCase> cases = {
      // fp8 cache with scales, MHA, partial rotary, bias, cluster merge
      {DType::kBF16, KvDType::kFp8E4M3, 128, 8, 8, 64, 8, true},
      {DType::kF16, KvDType::kFp8E4M3, 64, 8, 2, 64, 2, true},
      // a GQA group of 16: two CTAs per kv head, only head chunk 0 writes
      {DType::kF16, KvDType::kSame, 64, 32, 2, 64, 2, true},
      // head_dim 80 (idle lanes) with a rotary half that splits a lane's dims
      {DType::kBF16, KvDType::kSame, 80, 4, 4, 80, 1, false},
      {DType::kF16, KvDType::kSame, 96, 6, 2, 32, 4, true},
      {DType::kF16, KvDType::kSame, 256, 4, 1, 256, 4, false},
      {DType::kBF16, KvDType::kSame, 32, 4, 2, 16, 16, true},
  };
  for (const FusedCase& c : cases) run_case(c);
}

// The tensor-core kernel (GQA groups of 4 to 8) with RoPE fused in, against rope_kv followed by
// the same kernel: one CTA, cluster merge, workspace merge; fp8 caches, partial rotary, biases.
TEST(DecodeAttentionRopeFused, TensorCoreKernelMatchesRopeKvThenItBitwise) {
  RILL_REQUIRE_GPU();
  std::vector<FusedCase> cases;
  for (DType t : {DType::kF16, DType::kBF16})
    for (int splits : {1, 4, 16})
      cases.push_back({t, KvDType::kSame, 128, 8, 2, 128, splits, false, 1});
  cases.push_back({DType::kBF16, KvDType::kFp8E4M3, 128, 32, 8, 64, 8, true, 1});  // 8B-like
  cases.push_back({DType::kF16, KvDType::kFp8E4M3, 64, 16, 2, 64, 2, true, 1});    // group 8
  cases.push_back({DType::kBF16, KvDType::kSame, 128, 32, 8, 128, 8, true, 1});
  cases.push_back({DType::kF16, KvDType::kSame, 64, 20, 4, 32, 16, false, 1});  // group 5
  for (const FusedCase& c : cases) run_case(c);
}

TEST(DecodeAttentionRopeFused, SupportedShapes) {
  EXPECT_TRUE(kernels::decode_rope_supported(128, 128, KvDType::kSame));
  EXPECT_TRUE(kernels::decode_rope_supported(64, 16, KvDType::kSame));  // GPT-NeoX's partial rotary
  EXPECT_FALSE(kernels::decode_rope_supported(64, 16, KvDType::kFp8E4M3));  // half a lane's 16 dims
  EXPECT_TRUE(kernels::decode_rope_supported(64, 32, KvDType::kFp8E4M3));
  EXPECT_FALSE(kernels::decode_rope_supported(128, 24, KvDType::kSame));
  EXPECT_FALSE(kernels::decode_rope_supported(128, 130, KvDType::kSame));
}

TEST(RopeTable, MatchesTheCpuAngles) {
  RILL_REQUIRE_GPU();
  const int n = 5, rotary = 96, half = rotary / 2;
  const std::vector<int64_t> pos = {0, 1, 4095, 1234567, 987654321}, sink = {0, 1, 2, 3, 4};
  std::vector<float> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / rotary));
  DeviceBuffer d_pos(n, 8), d_sink(n, 8), d_freq(half, 4), d_table(size_t(n) * 4 * half, 4);
  d_pos.upload(pos.data());
  d_sink.upload(sink.data());
  d_freq.upload(inv_freq.data());
  for (bool with_sink : {true, false}) {
    d_table.poison();
    kernels::RopeTableParams t;
    t.num_tokens = n;
    t.rotary_dim = rotary;
    t.positions = d_pos.as<int64_t>();
    t.sink_positions = with_sink ? d_sink.as<int64_t>() : nullptr;
    t.inv_freq = d_freq.as<float>();
    t.table = d_table.as<float>();
    CUDA_OK(kernels::launch_rope_table(t, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(d_table.check_guards());
    std::vector<float> got(size_t(n) * 4 * half);
    d_table.download(got.data());
    for (int r = 0; r < n; ++r)
      for (int part = 0; part < (with_sink ? 2 : 1); ++part)
        for (int i = 0; i < half; ++i) {
          const double angle =
              std::fmod(double(part ? sink[r] : pos[r]) * double(inv_freq[i]), 2 * M_PI);
          const float* row = got.data() + size_t(r) * 4 * half + part * 2 * half;
          EXPECT_NEAR(row[i], std::cos(angle), 2e-6) << r << " " << i;
          EXPECT_NEAR(row[half + i], std::sin(angle), 2e-6) << r << " " << i;
        }
  }
  kernels::RopeTableParams bad;
  bad.num_tokens = 1;
  bad.rotary_dim = 3;
  EXPECT_NE(kernels::launch_rope_table(bad, nullptr), cudaSuccess);
  cudaGetLastError();
}

}  // namespace
}  // namespace rill::testing
