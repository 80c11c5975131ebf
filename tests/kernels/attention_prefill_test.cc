// launch_prefill_attention against an fp64 CPU reference on the same rounded inputs (for an fp8
// cache: on the dequantized cache, e4m3 * scale, with the same tolerances; the chunk's own K/V
// stay in the activation dtype).
//
// The cache, the padding columns of qkv rows and the rows between chunks are NaN, so a kernel that
// reads a slot or element it should not turns its output non-finite; output rows between chunks
// must keep their poison (nothing written there). Block tables are shuffled.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/attention.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;
using kernels::KvCacheLayout;
using kernels::KvDType;
using kernels::PrefillAttentionParams;
using kernels::PrefillSeq;

constexpr int kNoWindow = INT_MAX;
constexpr int kGap = 3;  // rows of qkv / out between two chunks
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Every head_dim of the dispatch (80 and 96 leave lanes of the tile loads idle).
constexpr int kHeadDims[] = {64, 80, 96, 128};

/// One chunk of T tokens (see PrefillSeq): sink_cache sinks already in the cache, the chunk's first
/// sink_fresh rows are sinks, cache_window old window tokens ending at rel old_head_rel in a ring
/// of ring_size slots (kLinear: linear), sliding window `window` (kNoWindow: none).
struct ChunkSpec {
  int num_tokens;
  int sink_cache = 0, sink_fresh = 0;
  int cache_window = 0, old_head_rel = -1;
  int ring_size = kLinear;
  int window = kNoWindow;
};

struct PrefillCase {
  DType dtype = DType::kF16;
  int head_dim = 128, num_heads = 8, num_kv_heads = 2, block_size = 16;
  KvDType kv = KvDType::kSame;
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 cache
  std::vector<ChunkSpec> chunks;
};

std::string describe(const PrefillCase& c) {
  std::string s = describe_types(c.dtype, c.kv, c.k_scale, c.v_scale) +
                  " head_dim=" + std::to_string(c.head_dim) +
                  " heads=" + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
                  " block=" + std::to_string(c.block_size) + " chunks:";
  for (const ChunkSpec& k : c.chunks)
    s += " (T " + std::to_string(k.num_tokens) + " sink " + std::to_string(k.sink_cache) + "+" +
         std::to_string(k.sink_fresh) + " old " + std::to_string(k.cache_window) + "@" +
         std::to_string(k.old_head_rel) + " ring " +
         (k.ring_size == kLinear ? std::string("linear") : std::to_string(k.ring_size)) +
         " window " + (k.window == kNoWindow ? std::string("none") : std::to_string(k.window)) +
         ")";
  return s;
}



/// Host inputs of one case: a NaN-poisoned paged cache holding the cached sinks and old window
/// rows at shuffled blocks; qkv rows (q | k | v | 8 NaN pad) and q_sink rows of the chunks, with
/// kGap NaN rows before each chunk.
struct PrefillInputs {
  KvCacheLayout layout;
  std::vector<int> ring_base, first_block, q_offset;  // per chunk
  std::vector<std::vector<int>> old_slot;  // old_slot[s][d]: slot of the token d steps back
  std::vector<int32_t> tables;
  std::vector<float> cache;        // rounded to the dtype (fp8: dequantized)
  std::vector<uint8_t> cache_fp8;  // fp8: the e4m3 bytes of `cache`
  int total_rows = 0, qkv_stride = 0, k_col = 0, v_col = 0;
  std::vector<float> qkv, q_sink;

  int64_t k_index(int s, int slot, int g) const {
    const int bs = layout.block_size;
    const int64_t block = tables[first_block[s] + slot / bs];
    return block * layout.block_stride() +
           (static_cast<int64_t>(g) * bs + slot % bs) * layout.head_dim;
  }
  const float* cache_k(int s, int slot, int g) const { return cache.data() + k_index(s, slot, g); }
  const float* chunk_k(int s, int r, int g) const {
    return &qkv[static_cast<size_t>(q_offset[s] + r) * qkv_stride + k_col + g * layout.head_dim];
  }
};

PrefillInputs make_inputs(const PrefillCase& c, std::mt19937& rng) {
  const int n = static_cast<int>(c.chunks.size());
  const int D = c.head_dim, H = c.num_heads, G = c.num_kv_heads, bs = c.block_size;
  std::normal_distribution<float> normal(0.0f, 1.0f), qnormal(0.0f, 1.5f);
  PrefillInputs in;
  in.ring_base.resize(n);
  in.first_block.resize(n);
  in.q_offset.resize(n);
  in.old_slot.resize(n);
  int total_blocks = 0;
  in.total_rows = kGap;
  for (int s = 0; s < n; ++s) {
    const ChunkSpec& k = c.chunks[s];
    in.ring_base[s] = (k.sink_cache + k.sink_fresh + bs - 1) / bs * bs;
    int max_slot = k.sink_cache - 1;
    for (int d = 0; d < k.cache_window; ++d) {
      const long long rel = static_cast<long long>(k.old_head_rel) - d;
      in.old_slot[s].push_back(in.ring_base[s] + ring_offset(rel, k.ring_size));
      max_slot = std::max(max_slot, in.old_slot[s].back());
    }
    in.first_block[s] = total_blocks;
    total_blocks += std::max(1, max_slot / bs + 1);
    in.q_offset[s] = in.total_rows;
    in.total_rows += k.num_tokens + kGap;
  }
  const int num_blocks = total_blocks + 2;
  in.tables = shuffled_blocks(num_blocks, total_blocks, rng);
  in.layout = cache_layout(num_blocks, G, bs, D, c.kv, c.k_scale, c.v_scale);
  in.cache.assign(static_cast<size_t>(num_blocks) * in.layout.block_stride(), kNaN);
  const auto fill_slot = [&](int s, int slot) {
    for (int g = 0; g < G; ++g)
      fill_kv(in.cache.data() + in.k_index(s, slot, g), in.layout.kv_stride(), D, normal, rng);
  };
  for (int s = 0; s < n; ++s) {
    for (int j = 0; j < c.chunks[s].sink_cache; ++j) fill_slot(s, j);
    for (int slot : in.old_slot[s]) fill_slot(s, slot);
  }
  in.cache_fp8 = finish_cache(in.cache, in.layout, c.dtype);

  in.qkv_stride = (H + 2 * G) * D + 8;
  in.k_col = H * D;
  in.v_col = (H + G) * D;
  in.qkv.assign(static_cast<size_t>(in.total_rows) * in.qkv_stride, kNaN);
  in.q_sink.assign(static_cast<size_t>(in.total_rows) * H * D, kNaN);
  for (int s = 0; s < n; ++s)
    for (int t = 0; t < c.chunks[s].num_tokens; ++t) {
      const size_t row = in.q_offset[s] + t;
      for (int i = 0; i < H * D; ++i) {
        in.qkv[row * in.qkv_stride + i] = qnormal(rng);  // logits of spread about 1.5
        in.q_sink[row * H * D + i] = qnormal(rng);
      }
      for (int i = 0; i < 2 * G * D; ++i) in.qkv[row * in.qkv_stride + in.k_col + i] = normal(rng);
    }
  in.qkv = round_to(in.qkv, c.dtype);
  in.q_sink = round_to(in.q_sink, c.dtype);
  return in;
}

/// One visible key of a query row: the query it is scored with, its K and V rows.
struct KeyRef {
  const float *q, *k, *v;
};

/// sum_j softmax_j(q_j . k_j * scale) v_j in fp64 (zeros without keys).
void attend(const std::vector<KeyRef>& keys, int D, double scale, float* out) {
  std::vector<double> logit(keys.size());
  double mx = -INFINITY;
  for (size_t j = 0; j < keys.size(); ++j) {
    double dot = 0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(keys[j].q[d]) * keys[j].k[d];
    logit[j] = dot * scale;
    mx = std::max(mx, logit[j]);
  }
  std::vector<double> o(D, 0.0);
  double sum = 0;
  for (size_t j = 0; j < keys.size(); ++j) {
    const double p = std::exp(logit[j] - mx);
    sum += p;
    for (int d = 0; d < D; ++d) o[d] += p * keys[j].v[d];
  }
  for (int d = 0; d < D; ++d) out[d] = keys.empty() ? 0.0f : static_cast<float>(o[d] / sum);
}

/// fp64 reference, key by key as attention.h states the masks: [total_rows, num_heads, head_dim]
/// (zeros in the gap rows); `written` marks the rows of the chunks.
std::vector<float> reference(const PrefillCase& c, const PrefillInputs& in, double scale,
                             std::vector<char>& written) {
  const int D = c.head_dim, H = c.num_heads, group = c.num_heads / c.num_kv_heads;
  std::vector<float> want(static_cast<size_t>(in.total_rows) * H * D, 0.0f);
  written.assign(in.total_rows, 0);
  for (size_t s = 0; s < c.chunks.size(); ++s) {
    const ChunkSpec& k = c.chunks[s];
    for (int qq = 0; qq < k.num_tokens; ++qq) {
      const size_t row = in.q_offset[s] + qq;
      written[row] = 1;
      for (int h = 0; h < H; ++h) {
        const int g = h / group;
        const float* q = &in.qkv[row * in.qkv_stride + h * D];
        const float* q_sink = &in.q_sink[(row * H + h) * D];
        const int64_t cache_v = in.layout.kv_stride(), chunk_v = in.v_col - in.k_col;
        std::vector<KeyRef> keys;
        for (int j = 0; j < k.sink_cache; ++j) {
          const float* kr = in.cache_k(s, j, g);
          keys.push_back({q_sink, kr, kr + cache_v});
        }
        for (int r = 0; r < k.sink_fresh && r <= qq; ++r) {
          const float* kr = in.chunk_k(s, r, g);
          keys.push_back({q_sink, kr, kr + chunk_v});
        }
        for (int d = 0; d < k.cache_window; ++d)
          if (static_cast<long long>(qq) + 1 + d < k.window) {
            const float* kr = in.cache_k(s, in.old_slot[s][d], g);
            keys.push_back({q, kr, kr + cache_v});
          }
        for (int r = k.sink_fresh; r <= qq; ++r)
          if (qq - r < k.window) {
            const float* kr = in.chunk_k(s, r, g);
            keys.push_back({q, kr, kr + chunk_v});
          }
        attend(keys, D, scale, &want[(row * H + h) * D]);
      }
    }
  }
  return want;
}

void run_case(const PrefillCase& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(4321 + c.head_dim + c.num_heads * 3 + c.block_size);
  const int n = static_cast<int>(c.chunks.size());
  const int D = c.head_dim, H = c.num_heads;
  const PrefillInputs in = make_inputs(c, rng);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<char> written;
  const std::vector<float> want = reference(c, in, scale, written);

  DeviceBuffer d_cache(in.cache.size(), cache_elem_bytes(in.layout)), d_qkv(in.qkv.size(), 2),
      d_qs(in.q_sink.size(), 2);
  upload_cache(d_cache, in.cache, in.cache_fp8, in.layout, c.dtype);
  d_qkv.upload_floats(in.qkv, c.dtype);
  d_qs.upload_floats(in.q_sink, c.dtype);
  DeviceBuffer d_tables(std::max<size_t>(in.tables.size(), 1), 4);
  d_tables.upload(in.tables.data());
  std::vector<PrefillSeq> seqs(n);
  int max_tokens = 0;
  for (int s = 0; s < n; ++s) {
    const ChunkSpec& k = c.chunks[s];
    seqs[s].geo.ring_base = in.ring_base[s];
    seqs[s].geo.ring_size = k.ring_size;
    seqs[s].geo.block_table = d_tables.as<int32_t>() + in.first_block[s];
    seqs[s].q_offset = in.q_offset[s];
    seqs[s].num_tokens = k.num_tokens;
    seqs[s].sink_cache = k.sink_cache;
    seqs[s].sink_fresh = k.sink_fresh;
    seqs[s].cache_window = k.cache_window;
    seqs[s].old_head_rel = k.old_head_rel;
    seqs[s].window = k.window;
    max_tokens = std::max(max_tokens, k.num_tokens);
  }
  DeviceBuffer d_seqs(n, sizeof(PrefillSeq));
  d_seqs.upload(seqs.data());
  DeviceBuffer d_out(static_cast<size_t>(in.total_rows) * H * D, 2);

  auto p = attention_params<PrefillAttentionParams>(c.dtype, n, H, c.num_kv_heads, D, static_cast<float>(scale));
  p.qkv = d_qkv.get();
  p.qkv_stride = in.qkv_stride;
  p.q_sink = d_qs.get();
  p.seqs = d_seqs.as<PrefillSeq>();
  p.cache = d_cache.get();
  p.layout = in.layout;
  p.out = d_out.get();
  p.max_tokens = max_tokens;

  d_out.poison();
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  CUDA_OK(kernels::launch_prefill_attention(p, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));

  // Rows of the chunks: finite and close to the reference; gap rows: still poisoned.
  std::vector<uint16_t> raw(static_cast<size_t>(in.total_rows) * H * D);
  d_out.download(raw.data());
  std::vector<float> got, ref;
  size_t touched_gap = 0;
  for (int r = 0; r < in.total_rows; ++r)
    for (int i = 0; i < H * D; ++i) {
      const size_t idx = static_cast<size_t>(r) * H * D + i;
      if (!written[r]) {
        touched_gap += raw[idx] != 0xFFFF;
        continue;
      }
      got.push_back(from_half_bits(raw[idx], c.dtype));
      ref.push_back(want[idx]);
    }
  EXPECT_EQ(touched_gap, 0u) << "elements written outside the chunks' rows";
  expect_attention_close(got, ref, c.dtype);
  EXPECT_TRUE(d_out.check_guards());
  EXPECT_TRUE(d_qkv.check_guards());
  EXPECT_TRUE(d_cache.check_guards());
}

// First chunks of full-policy sequences: plain causal attention, odd lengths.
std::vector<ChunkSpec> first_chunks() {
  return {{1}, {37}, {64}, {200}};
}

// Later chunks of full-policy sequences: linear old keys, all visible.
std::vector<ChunkSpec> continuing_linear_chunks() {
  ChunkSpec a{37}, b{64}, c{200}, d{1};
  a.cache_window = 300, a.old_head_rel = 299;
  b.cache_window = 64, b.old_head_rel = 63;
  c.cache_window = 5, c.old_head_rel = 4;
  d.cache_window = 4096, d.old_head_rel = 4095;
  return {a, b, c, d};
}

// StreamingLLM chunks: first chunks with fresh sinks, later chunks with cached sinks and an old
// window in a wrapped ring, windows shorter than the chunk.
std::vector<ChunkSpec> streaming_chunks() {
  std::vector<ChunkSpec> v;
  ChunkSpec k{200};  // first chunk: 4 fresh sinks, window 50
  k.sink_fresh = 4, k.window = 50;
  v.push_back(k);
  k = ChunkSpec{3};  // first chunk shorter than the sinks
  k.sink_fresh = 3, k.window = 16;
  v.push_back(k);
  k = ChunkSpec{200};  // later chunk: 4 cached sinks, full ring of 120 wrapped, window 120
  k.sink_cache = 4, k.cache_window = 119, k.old_head_rel = 5000, k.ring_size = 120, k.window = 120;
  v.push_back(k);
  k = ChunkSpec{37};  // ring not a whole number of blocks, window longer than the chunk
  k.sink_cache = 5, k.cache_window = 36, k.old_head_rel = 777, k.ring_size = 37, k.window = 37;
  v.push_back(k);
  k = ChunkSpec{64};  // one sink, window of 17 tokens
  k.sink_cache = 1, k.cache_window = 16, k.old_head_rel = 100, k.ring_size = 17, k.window = 17;
  v.push_back(k);
  k = ChunkSpec{1};  // a one-token chunk after a long wrapped history
  k.sink_cache = 4, k.cache_window = 255, k.old_head_rel = 100000, k.ring_size = 256,
  k.window = 256;
  v.push_back(k);
  k = ChunkSpec{40};  // the chunk completes the sinks: 2 cached + 2 fresh
  k.sink_cache = 2, k.sink_fresh = 2, k.window = 30;
  v.push_back(k);
  k = ChunkSpec{70};  // window 1: each row sees itself and the sinks
  k.sink_cache = 4, k.cache_window = 10, k.old_head_rel = 40, k.ring_size = 64, k.window = 1;
  v.push_back(k);
  return v;
}

// `chunks` with every head_dim, fp16 and bf16.
void run_head_dims_and_dtypes(const std::vector<ChunkSpec>& chunks) {
  for (int d : kHeadDims)
    for (DType t : {DType::kF16, DType::kBF16}) {
      PrefillCase c;
      c.dtype = t;
      c.head_dim = d;
      c.chunks = chunks;
      run_case(c);
    }
}

TEST(PrefillAttention, FirstChunks) {
  RILL_REQUIRE_GPU();
  run_head_dims_and_dtypes(first_chunks());
}

TEST(PrefillAttention, ContinuingLinearChunks) {
  RILL_REQUIRE_GPU();
  run_head_dims_and_dtypes(continuing_linear_chunks());
}

TEST(PrefillAttention, StreamingChunks) {
  RILL_REQUIRE_GPU();
  run_head_dims_and_dtypes(streaming_chunks());
}

TEST(PrefillAttention, GqaGroups) {
  RILL_REQUIRE_GPU();
  const int shapes[][2] = {{4, 4}, {8, 2}, {16, 2}};  // groups 1, 4, 8
  for (const auto& hs : shapes)
    for (int d : kHeadDims) {
      PrefillCase c;
      c.head_dim = d;
      c.num_heads = hs[0];
      c.num_kv_heads = hs[1];
      c.chunks = {streaming_chunks()[0], streaming_chunks()[2], continuing_linear_chunks()[0]};
      run_case(c);
    }
}

TEST(PrefillAttention, BlockSizes) {
  RILL_REQUIRE_GPU();
  for (int bs : {8, 32}) {
    PrefillCase c;
    c.block_size = bs;
    c.dtype = DType::kBF16;
    c.chunks = streaming_chunks();
    c.chunks.push_back(continuing_linear_chunks()[0]);
    run_case(c);
  }
}

TEST(PrefillAttention, LongChunk) {
  RILL_REQUIRE_GPU();
  // Several query tiles with a long old window: tiles entirely visible (no mask) and masked ones.
  PrefillCase c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  ChunkSpec k{700};
  k.sink_cache = 4, k.cache_window = 500, k.old_head_rel = 9000, k.ring_size = 512, k.window = 512;
  ChunkSpec l{1000};
  c.chunks = {k, l};
  run_case(c);
}

// fp8 (e4m3) caches: cached sinks and old window rows are converted while staged; the chunk's
// rows come from qkv as before.
PrefillCase fp8_case(DType t, int head_dim, float k_scale = 1.0f, float v_scale = 1.0f) {
  PrefillCase c;
  c.dtype = t;
  c.head_dim = head_dim;
  c.kv = KvDType::kFp8E4M3;
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  return c;
}

TEST(PrefillAttentionFp8, FirstContinuingAndStreamingChunks) {
  RILL_REQUIRE_GPU();
  for (int d : kHeadDims)
    for (DType t : kDTypes) {
      PrefillCase c = fp8_case(t, d);
      c.chunks = first_chunks();
      for (const ChunkSpec& k : continuing_linear_chunks()) c.chunks.push_back(k);
      run_case(c);
      c.chunks = streaming_chunks();
      run_case(c);
    }
}

TEST(PrefillAttentionFp8, GqaGroupsAndBlockSizes) {
  RILL_REQUIRE_GPU();
  const int shapes[][2] = {{4, 4}, {8, 2}, {16, 2}};
  for (const auto& hs : shapes)
    for (int d : kHeadDims) {
      PrefillCase c = fp8_case(DType::kF16, d);
      c.num_heads = hs[0];
      c.num_kv_heads = hs[1];
      c.chunks = {streaming_chunks()[0], streaming_chunks()[2], continuing_linear_chunks()[0]};
      run_case(c);
    }
  for (int bs : {8, 32}) {
    PrefillCase c = fp8_case(DType::kBF16, 128);
    c.block_size = bs;
    c.chunks = streaming_chunks();
    c.chunks.push_back(continuing_linear_chunks()[0]);
    run_case(c);
  }
}

TEST(PrefillAttentionFp8, ScalesAndALongChunk) {
  RILL_REQUIRE_GPU();
  for (DType t : kDTypes)
    for (const auto& sc : {std::pair{0.37f, 1.7f}, std::pair{2.0f, 0.25f}}) {
      PrefillCase c = fp8_case(t, 128, sc.first, sc.second);
      c.chunks = streaming_chunks();
      run_case(c);
    }
  PrefillCase c = fp8_case(DType::kF16, 128, 0.5f, 1.5f);
  c.num_heads = 4;
  c.num_kv_heads = 2;
  ChunkSpec k{700};
  k.sink_cache = 4, k.cache_window = 500, k.old_head_rel = 9000, k.ring_size = 512, k.window = 512;
  ChunkSpec l{300};
  l.cache_window = 1000, l.old_head_rel = 999;  // a linear history: several cache-only tiles
  c.chunks = {k, l};
  run_case(c);
}

TEST(PrefillAttention, RejectsUnsupportedArguments) {
  // Argument checks happen before any CUDA call: no GPU needed.
  PrefillAttentionParams p;
  p.num_seqs = 1;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 72;
  p.layout.num_kv_heads = 2;
  p.layout.head_dim = 72;
  p.qkv_stride = 12 * 72;
  p.max_tokens = 1;
  EXPECT_EQ(kernels::launch_prefill_attention(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("unsupported head_dim=72"),
            std::string::npos);
  p.head_dim = p.layout.head_dim = 128;
  p.qkv_stride = 12 * 128 - 8;  // shorter than a q | k | v row
  EXPECT_EQ(kernels::launch_prefill_attention(p, nullptr), cudaErrorInvalidValue);
  p.qkv_stride = 12 * 128 + 3;  // rows not 16-byte aligned
  EXPECT_EQ(kernels::launch_prefill_attention(p, nullptr), cudaErrorInvalidValue);
  p.qkv_stride = 12 * 128;
  p.layout.cache_dtype = KvDType::kFp8E4M3;
  p.layout.v_scale = -1.0f;  // fp8 scales must be finite and positive
  EXPECT_EQ(kernels::launch_prefill_attention(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("v_scale"), std::string::npos);
}

}  // namespace
}  // namespace rill::testing
