// launch_decode_attention against an fp64 CPU reference on the same rounded inputs (for an fp8
// cache: on the dequantized cache, e4m3 * scale, with the same tolerances).
//
// The cache and the padding of q / q_sink rows are NaN everywhere no key lives, so a kernel that
// reads a slot, block or element it should not turns its output non-finite. Block tables are
// shuffled; outputs are poisoned before each launch and their guard regions checked after. The
// split-K workspace is poisoned too, except its counter words, which every launch must leave zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
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

using kernels::DecodeAttentionParams;
using kernels::DecodeSeq;
using kernels::DType;
using kernels::KvCacheLayout;
using kernels::KvDType;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct DecodeCase {
  DType dtype = DType::kF16;
  int head_dim = 128, num_heads = 8, num_kv_heads = 2, block_size = 16;
  int num_splits = 1, min_keys_per_split = 256;
  KvDType kv = KvDType::kSame;
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 cache
  bool cluster_merge = true, early_kv_loads = true;
  int use_mma = -1;      // DecodeAttentionParams::use_mma
  float q_scale = 1.0f;  // queries ~ N(0, 1.5 * q_scale)
  std::vector<SeqSpec> seqs;
};

std::string describe(const DecodeCase& c) {
  std::string s = describe_types(c.dtype, c.kv, c.k_scale, c.v_scale) +
                  " head_dim=" + std::to_string(c.head_dim) +
                  " heads=" + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
                  " block=" + std::to_string(c.block_size) +
                  " splits=" + std::to_string(c.num_splits) +
                  " min_keys=" + std::to_string(c.min_keys_per_split) +
                  " use_mma=" + std::to_string(c.use_mma) + " seqs:";
  for (const SeqSpec& q : c.seqs)
    s += " (sink " + std::to_string(q.num_sink) + " ring " +
         (q.ring_size == kLinear ? std::string("linear") : std::to_string(q.ring_size)) + " head " +
         std::to_string(q.head_rel) + " window " + std::to_string(q.window_count) + ")";
  return s;
}

/// Host inputs of one case: a NaN-poisoned paged cache with random rows at every key's slot,
/// shuffled block tables (a few spare blocks), and queries whose row padding is NaN.
struct DecodeInputs {
  KvCacheLayout layout;
  std::vector<int> ring_base, first_block;  // per sequence
  std::vector<int32_t> tables;              // all sequences' rows, concatenated
  std::vector<float> cache;                 // rounded to the dtype (fp8: dequantized)
  std::vector<uint8_t> cache_fp8;           // fp8: the e4m3 bytes of `cache`
  int64_t q_stride = 0, q_sink_stride = 0;
  std::vector<float> q, q_sink;  // [num_seqs, *_stride], rounded

  /// Index in `cache` of the K row of (sequence s, slot, kv head g); its V is kv_stride() further.
  int64_t k_index(int s, int slot, int g) const {
    const int bs = layout.block_size;
    const int64_t block = tables[first_block[s] + slot / bs];
    return block * layout.block_stride() +
           (static_cast<int64_t>(g) * bs + slot % bs) * layout.head_dim;
  }
  const float* k_row(int s, int slot, int g) const { return cache.data() + k_index(s, slot, g); }
};

DecodeInputs make_inputs(const DecodeCase& c, std::mt19937& rng) {
  const int n = static_cast<int>(c.seqs.size());
  const int D = c.head_dim, H = c.num_heads, G = c.num_kv_heads, bs = c.block_size;
  DecodeInputs in;
  in.ring_base.resize(n);
  in.first_block.resize(n);
  int total_blocks = 0;
  for (int s = 0; s < n; ++s) {
    const SeqSpec& q = c.seqs[s];
    in.ring_base[s] = (q.num_sink + bs - 1) / bs * bs;  // sinks in blocks of their own
    int max_slot = q.num_sink - 1;
    for (const Key& k : keys_of(q, in.ring_base[s])) max_slot = std::max(max_slot, k.slot);
    in.first_block[s] = total_blocks;
    total_blocks += std::max(1, max_slot / bs + 1);
  }
  const int num_blocks = total_blocks + 3;
  in.tables = shuffled_blocks(num_blocks, total_blocks, rng);
  in.layout = cache_layout(num_blocks, G, bs, D, c.kv, c.k_scale, c.v_scale);
  in.cache.assign(static_cast<size_t>(num_blocks) * in.layout.block_stride(), kNaN);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int s = 0; s < n; ++s)
    for (const Key& k : keys_of(c.seqs[s], in.ring_base[s]))
      for (int g = 0; g < G; ++g)
        fill_kv(in.cache.data() + in.k_index(s, k.slot, g), in.layout.kv_stride(), D, normal, rng);
  in.cache_fp8 = finish_cache(in.cache, in.layout, c.dtype);

  // Logits of spread about 1.5: softmax neither uniform nor one-hot.
  in.q_stride = static_cast<int64_t>(H) * D + 24;
  in.q_sink_stride = static_cast<int64_t>(H) * D + 8;
  in.q.assign(n * in.q_stride, kNaN);
  in.q_sink.assign(n * in.q_sink_stride, kNaN);
  std::normal_distribution<float> qnormal(0.0f, 1.5f);
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < H * D; ++i) {
      in.q[s * in.q_stride + i] = qnormal(rng) * c.q_scale;
      in.q_sink[s * in.q_sink_stride + i] = qnormal(rng) * c.q_scale;
    }
  in.q = round_to(in.q, c.dtype);
  in.q_sink = round_to(in.q_sink, c.dtype);
  return in;
}

/// fp64 reference: [num_seqs, num_heads, head_dim]; zeros for a sequence without keys.
std::vector<float> reference(const DecodeCase& c, const DecodeInputs& in, double scale) {
  const int n = static_cast<int>(c.seqs.size());
  const int D = c.head_dim, H = c.num_heads, group = c.num_heads / c.num_kv_heads;
  std::vector<float> want(static_cast<size_t>(n) * H * D, 0.0f);
  for (int s = 0; s < n; ++s) {
    const std::vector<Key> keys = keys_of(c.seqs[s], in.ring_base[s]);
    if (keys.empty()) continue;
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      std::vector<double> logit(keys.size());
      double mx = -INFINITY;
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* qr = keys[j].sink ? &in.q_sink[s * in.q_sink_stride + h * D]
                                       : &in.q[s * in.q_stride + h * D];
        const float* kr = in.k_row(s, keys[j].slot, g);
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kr[d];
        logit[j] = dot * scale;
        mx = std::max(mx, logit[j]);
      }
      std::vector<double> o(D, 0.0);
      double sum = 0;
      for (size_t j = 0; j < keys.size(); ++j) {
        const double p = std::exp(logit[j] - mx);
        sum += p;
        const float* vr = in.k_row(s, keys[j].slot, g) + in.layout.kv_stride();
        for (int d = 0; d < D; ++d) o[d] += p * vr[d];
      }
      for (int d = 0; d < D; ++d)
        want[(static_cast<size_t>(s) * H + h) * D + d] = static_cast<float>(o[d] / sum);
    }
  }
  return want;
}

/// The split-K workspace as attention.h documents it: records of (roundup(head_dim, 4) + 4) floats,
/// acc | m | l | counter | unused.
size_t ws_record_bytes(int head_dim) {
  return ((head_dim + 3) / 4 * 4 + 4) * sizeof(float);
}
size_t ws_counter_byte(int head_dim) {
  return ((head_dim + 3) / 4 * 4 + 2) * sizeof(float);
}

/// Poisons the workspace (a partial read before it is written turns the output non-finite), then
/// zeroes every record's counter word, as a caller does once at allocation.
void prepare_workspace(DeviceBuffer& ws, int head_dim) {
  std::vector<uint8_t> host(ws.bytes(), 0xFF);
  const size_t rec = ws_record_bytes(head_dim);
  for (size_t r = 0; (r + 1) * rec <= host.size(); ++r)
    std::memset(host.data() + r * rec + ws_counter_byte(head_dim), 0, sizeof(int32_t));
  ws.upload(host.data());
}

/// Every counter word of the workspace is zero (the kernel resets what it counted).
::testing::AssertionResult counters_zero(const DeviceBuffer& ws, int head_dim) {
  std::vector<uint8_t> host(ws.bytes());
  ws.download(host.data());
  const size_t rec = ws_record_bytes(head_dim);
  for (size_t r = 0; (r + 1) * rec <= host.size(); ++r) {
    int32_t counter;
    std::memcpy(&counter, host.data() + r * rec + ws_counter_byte(head_dim), sizeof(counter));
    if (counter != 0)
      return ::testing::AssertionFailure()
             << "counter of workspace record " << r << " is " << counter;
  }
  return ::testing::AssertionSuccess();
}

/// Launches once, or captures the launch in a CUDA graph and replays it twice.
void launch(const DecodeAttentionParams& p, DeviceBuffer& out, bool through_graph) {
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  out.poison();
  if (through_graph) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    const cudaError_t launched = kernels::launch_decode_attention(p, stream);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(launched);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 2; ++rep) {  // each replay recomputes everything
      out.poison();
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  } else {
    CUDA_OK(kernels::launch_decode_attention(p, stream));
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
}

/// Builds the inputs of one case (the same for the same case), runs the kernel and compares with
/// the reference. `workspace`: a workspace shared with other launches, or null for a fresh one.
/// Returns the output's raw fp16 / bf16 bits.
std::vector<uint16_t> run_case(const DecodeCase& c, bool through_graph = false,
                               DeviceBuffer* workspace = nullptr) {
  SCOPED_TRACE(describe(c));
  std::mt19937 rng(1234 + c.head_dim * 7 + c.num_heads + c.block_size + c.num_splits);
  const int n = static_cast<int>(c.seqs.size());
  const int D = c.head_dim, H = c.num_heads;
  const DecodeInputs in = make_inputs(c, rng);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<float> want = reference(c, in, scale);

  DeviceBuffer d_cache(in.cache.size(), cache_elem_bytes(in.layout)), d_q(in.q.size(), 2),
      d_qs(in.q_sink.size(), 2);
  upload_cache(d_cache, in.cache, in.cache_fp8, in.layout, c.dtype);
  d_q.upload_floats(in.q, c.dtype);
  d_qs.upload_floats(in.q_sink, c.dtype);
  DeviceBuffer d_tables(std::max<size_t>(in.tables.size(), 1), 4);
  d_tables.upload(in.tables.data());
  std::vector<DecodeSeq> seqs(n);
  for (int s = 0; s < n; ++s)
    seqs[s] = decode_seq(c.seqs[s], in.ring_base[s], d_tables.as<int32_t>() + in.first_block[s]);
  DeviceBuffer d_seqs(n, sizeof(DecodeSeq));
  d_seqs.upload(seqs.data());
  DeviceBuffer d_out(static_cast<size_t>(n) * H * D, 2);
  const size_t ws_bytes = kernels::decode_attention_workspace_bytes(n, H, D, c.num_splits);
  if (c.num_splits > 1) {
    EXPECT_GT(ws_bytes, 0u);
  }
  DeviceBuffer fresh_ws(workspace ? 16 : std::max<size_t>(ws_bytes, 16), 1);
  if (!workspace) prepare_workspace(fresh_ws, D);
  DeviceBuffer& d_ws = workspace ? *workspace : fresh_ws;
  EXPECT_GE(d_ws.bytes(), ws_bytes);

  auto p = attention_params<DecodeAttentionParams>(c.dtype, n, H, c.num_kv_heads, D, static_cast<float>(scale));
  p.q = d_q.get();
  p.q_stride = in.q_stride;
  p.q_sink = d_qs.get();
  p.q_sink_stride = in.q_sink_stride;
  p.seqs = d_seqs.as<DecodeSeq>();
  p.cache = d_cache.get();
  p.layout = in.layout;
  p.out = d_out.get();
  p.num_splits = c.num_splits;
  p.min_keys_per_split = c.min_keys_per_split;
  p.workspace = d_ws.get();
  p.cluster_merge = c.cluster_merge;
  p.early_kv_loads = c.early_kv_loads;
  p.use_mma = c.use_mma;
  launch(p, d_out, through_graph);

  const std::vector<float> got = d_out.download_floats(c.dtype);
  expect_attention_close(got, want, c.dtype);
  EXPECT_TRUE(d_out.check_guards());
  EXPECT_TRUE(d_ws.check_guards());
  EXPECT_TRUE(d_cache.check_guards());
  EXPECT_TRUE(counters_zero(d_ws, D));
  std::vector<uint16_t> bits(d_out.bytes() / 2);
  d_out.download(bits.data());
  return bits;
}

// Linear (full-policy) caches of odd lengths, several in one launch.
std::vector<SeqSpec> linear_seqs() {
  return {
      {0, kLinear, 0, 1}, {0, kLinear, 16, 17}, {0, kLinear, 999, 1000}, {0, kLinear, 4096, 4097}};
}

// StreamingLLM caches: sinks + rings that wrap across block boundaries, windows shorter than the
// ring, rings that are not a whole number of blocks, a ring not yet full.
std::vector<SeqSpec> streaming_seqs() {
  return {
      {4, 48, 1000, 48},      // full ring, head far past the ring size
      {5, 37, 12345, 37},     // ring not a multiple of the block size
      {1, 64, 71, 64},        // just wrapped
      {0, 40, 999, 40},       // no sinks
      {4, 100, 5000, 73},     // window shorter than the ring
      {4, 128, 50, 51},       // ring not yet full
      {4, 300, 100000, 300},  // several splits worth of keys
  };
}

// Both of the above in one launch.
std::vector<SeqSpec> linear_and_streaming_seqs() {
  std::vector<SeqSpec> seqs = linear_seqs();
  for (const SeqSpec& q : streaming_seqs()) seqs.push_back(q);
  return seqs;
}

TEST(DecodeAttention, LinearCaches) {
  RILL_REQUIRE_GPU();
  for (DType t : {DType::kF16, DType::kBF16}) {
    DecodeCase c;
    c.dtype = t;
    c.seqs = linear_seqs();
    run_case(c);
  }
}

TEST(DecodeAttention, LinearCachesSplit) {
  RILL_REQUIRE_GPU();
  for (DType t : {DType::kF16, DType::kBF16})
    for (int splits : {3, 8}) {
      DecodeCase c;
      c.dtype = t;
      c.num_splits = splits;
      c.min_keys_per_split = 16;
      c.seqs = linear_seqs();
      run_case(c);
    }
}

// More splits than a warp has lanes (the merge's per-head loops wrap), GQA groups of 1 and 8.
TEST(DecodeAttention, ManySplits) {
  RILL_REQUIRE_GPU();
  for (const int kv_heads : {4, 1})
    for (int splits : {40, 512}) {
      DecodeCase c;
      c.num_heads = 8;
      c.num_kv_heads = kv_heads;
      c.num_splits = splits;
      c.min_keys_per_split = 1;  // rounds up to one block: 40 or 63 non-empty splits
      c.seqs = {{4, 48, 1000, 48}, {0, kLinear, 999, 1000}, {0, kLinear, 16, 17}};
      run_case(c);
    }
}

// Splits merged inside a thread-block cluster (distributed shared memory) give the bits of the
// workspace merge, and so does waiting before the first K/V load; both against the reference too.
TEST(DecodeAttention, ClusterMergeMatchesWorkspaceMerge) {
  RILL_REQUIRE_GPU();
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
    for (const auto& [heads, kv_heads] : {std::pair{8, 2}, std::pair{8, 8}, std::pair{32, 8}})
      for (int splits : {2, 5, 8, 16}) {
        DecodeCase c;
        c.kv = kv;
        c.num_heads = heads;
        c.num_kv_heads = kv_heads;
        c.num_splits = splits;
        c.min_keys_per_split = 16;
        c.seqs = {{4, 48, 1000, 48}, {0, kLinear, 999, 1000}, {0, kLinear, 16, 17}, {4, 64, -1, 0}};
        const auto cluster = run_case(c);
        c.cluster_merge = false;
        EXPECT_EQ(run_case(c), cluster) << "workspace merge, " << splits << " splits";
        c.early_kv_loads = false;
        EXPECT_EQ(run_case(c), cluster) << "late K/V loads, " << splits << " splits";
      }
}

TEST(DecodeAttention, StreamingSinksAndRings) {
  RILL_REQUIRE_GPU();
  for (DType t : {DType::kF16, DType::kBF16})
    for (int splits : {1, 3, 8}) {
      DecodeCase c;
      c.dtype = t;
      c.num_splits = splits;
      c.min_keys_per_split = splits == 8 ? 1 : 16;  // 1 rounds up to one block
      c.seqs = streaming_seqs();
      run_case(c);
    }
}

TEST(DecodeAttention, EdgeSequences) {
  RILL_REQUIRE_GPU();
  for (int splits : {1, 3}) {
    DecodeCase c;
    c.num_splits = splits;
    c.min_keys_per_split = 16;
    c.seqs = {
        {0, kLinear, -1, 0},  // no keys at all: zeros
        {4, 64, -1, 0},       // sinks only
        {5, 16, 3, 4},        // more sinks than window tokens
        {0, kLinear, 0, 1},   // one key
        {3, 1, 77, 1},        // a ring of one slot
    };
    run_case(c);
  }
}

// Every head_dim of the dispatch, with 16-bit and fp8 caches.
TEST(DecodeAttention, HeadDims) {
  RILL_REQUIRE_GPU();
  for (int d : {32, 64, 80, 96, 128, 256})
    for (DType t : {DType::kF16, DType::kBF16})
      for (int splits : {1, 3})
        for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3}) {
          DecodeCase c;
          c.dtype = t;
          c.kv = kv;
          c.head_dim = d;
          c.num_splits = splits;
          c.min_keys_per_split = 32;
          c.seqs = {
              {4, 48, 1000, 48}, {0, kLinear, 999, 1000}, {5, 37, 200, 30}, {0, kLinear, 16, 17}};
          run_case(c);
        }
}

TEST(DecodeAttention, GqaGroups) {
  RILL_REQUIRE_GPU();
  // (num_heads, num_kv_heads): groups 1, 4, 8, and 3, 5, 16, which leave heads of a CTA idle or
  // take several CTAs per group (fp8 caches: at most 4 heads per CTA).
  const int shapes[][2] = {{4, 4}, {8, 2}, {16, 2}, {6, 2}, {10, 2}, {32, 2}};
  for (const auto& hs : shapes)
    for (int d : {64, 80, 96, 128})  // the head dims the CUDA runner takes
      for (DType t : {DType::kF16, DType::kBF16})
        for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3}) {
          DecodeCase c;
          c.dtype = t;
          c.kv = kv;
          c.head_dim = d;
          c.num_heads = hs[0];
          c.num_kv_heads = hs[1];
          c.num_splits = 3;
          c.min_keys_per_split = 64;
          c.seqs = {{4, 48, 1000, 48}, {0, kLinear, 999, 1000}, {0, kLinear, 16, 17}};
          run_case(c);
        }
}

// `base` at block sizes 8, 32 and 64, in 1 and 8 splits, over the streaming sequences and one
// 1,001-key linear sequence.
void run_block_sizes(const DecodeCase& base) {
  for (int bs : {8, 32, 64})
    for (int splits : {1, 8}) {
      DecodeCase c = base;
      c.block_size = bs;
      c.num_splits = splits;
      c.min_keys_per_split = 1;
      c.seqs = streaming_seqs();
      c.seqs.push_back({0, kLinear, 1000, 1001});
      run_case(c);
    }
}

TEST(DecodeAttention, BlockSizes) {
  RILL_REQUIRE_GPU();
  run_block_sizes(DecodeCase{});
}

TEST(DecodeAttention, CudaGraphReplay) {
  RILL_REQUIRE_GPU();
  DecodeCase c;
  c.num_splits = 8;
  c.min_keys_per_split = 16;
  c.seqs = streaming_seqs();
  run_case(c, /*through_graph=*/true);
}

// One workspace through several launches of different shapes, as the engine uses it (num_seqs and
// num_splits change from step to step): each launch must find its counters zero and leave them
// zero, and no launch's partials may land on another shape's counters. Every result must match
// the reference and, bit for bit, the same launch on a fresh workspace.
TEST(DecodeAttention, WorkspaceReuse) {
  RILL_REQUIRE_GPU();
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3}) {
    DecodeCase a;  // 7 sequences, 8 heads, 8 splits
    a.kv = kv;
    a.num_splits = 8;
    a.min_keys_per_split = 16;
    a.seqs = streaming_seqs();
    DecodeCase b;  // 3 sequences, 16 heads, 3 splits: split 1's records cover a's counters
    b.kv = kv;
    b.dtype = DType::kBF16;
    b.num_heads = 16;
    b.num_kv_heads = 2;
    b.num_splits = 3;
    b.min_keys_per_split = 16;
    b.seqs = {{0, kLinear, 999, 1000}, {4, 300, 100000, 300}, {0, kLinear, 16, 17}};
    const std::vector<uint16_t> fresh_a = run_case(a), fresh_b = run_case(b);

    const int n_a = static_cast<int>(a.seqs.size()), n_b = static_cast<int>(b.seqs.size());
    DeviceBuffer ws(
        std::max(
            kernels::decode_attention_workspace_bytes(n_a, a.num_heads, a.head_dim, a.num_splits),
            kernels::decode_attention_workspace_bytes(n_b, b.num_heads, b.head_dim, b.num_splits)),
        1);
    prepare_workspace(ws, a.head_dim);
    for (const DecodeCase* c : {&a, &a, &b, &a, &b}) {
      const std::vector<uint16_t> got = run_case(*c, false, &ws);
      EXPECT_TRUE(got == (c == &a ? fresh_a : fresh_b)) << "not bit-identical to a fresh workspace";
    }
    // And through a CUDA graph replayed twice on the shared workspace.
    EXPECT_TRUE(run_case(a, true, &ws) == fresh_a) << "graph replay differs from eager launch";
  }
}

// fp8 (e4m3) caches over the same geometries: 16 dims per thread, GQA groups beyond 4 heads in
// several CTAs, k_scale folded into the query and v_scale into the output.
DecodeCase fp8_case(DType t, float k_scale = 1.0f, float v_scale = 1.0f) {
  DecodeCase c;
  c.dtype = t;
  c.kv = KvDType::kFp8E4M3;
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  return c;
}

TEST(DecodeAttentionFp8, LinearAndStreamingCaches) {
  RILL_REQUIRE_GPU();
  for (DType t : kDTypes)
    for (int splits : {1, 3, 8}) {
      DecodeCase c = fp8_case(t);
      c.num_splits = splits;
      c.min_keys_per_split = splits == 8 ? 1 : 16;
      c.seqs = linear_and_streaming_seqs();
      run_case(c);
    }
}

TEST(DecodeAttentionFp8, EdgeSequencesAndBlockSizes) {
  RILL_REQUIRE_GPU();
  for (int splits : {1, 3}) {
    DecodeCase c = fp8_case(DType::kF16);
    c.num_splits = splits;
    c.min_keys_per_split = 16;
    c.seqs = {
        {0, kLinear, -1, 0}, {4, 64, -1, 0}, {5, 16, 3, 4}, {0, kLinear, 0, 1}, {3, 1, 77, 1}};
    run_case(c);
  }
  for (int bs : {8, 32, 64}) {
    DecodeCase c = fp8_case(DType::kBF16);
    c.block_size = bs;
    c.num_splits = 8;
    c.min_keys_per_split = 1;
    c.seqs = streaming_seqs();
    run_case(c);
  }
}

TEST(DecodeAttentionFp8, ScalesAndCudaGraphReplay) {
  RILL_REQUIRE_GPU();
  for (DType t : kDTypes)
    for (const auto& sc : {std::pair{0.37f, 1.7f}, std::pair{2.0f, 0.25f}}) {
      DecodeCase c = fp8_case(t, sc.first, sc.second);
      c.num_heads = 8;
      c.num_kv_heads = 1;  // one group of 8: two CTAs
      c.num_splits = 3;
      c.min_keys_per_split = 16;
      c.seqs = streaming_seqs();
      run_case(c);
    }
  DecodeCase c = fp8_case(DType::kF16, 0.5f, 3.0f);
  c.num_splits = 8;
  c.min_keys_per_split = 16;
  c.seqs = streaming_seqs();
  run_case(c, /*through_graph=*/true);
}

// The tensor-core kernel (use_mma = 1): GQA groups of 4 to 8 heads in one CTA, keys in 16-key
// warp tiles. Groups 4, 6 (two idle columns) and 8; linear and streaming caches of lengths that
// are not multiples of a tile; one to many tiles per warp.
TEST(DecodeAttentionMma, LinearAndStreamingCaches) {
  RILL_REQUIRE_GPU();
  const int shapes[][2] = {{32, 8}, {24, 4}, {16, 2}};  // groups 4, 6, 8
  for (const auto& hs : shapes)
    for (int d : {64, 128})
      for (DType t : kDTypes) {
        DecodeCase c;
        c.dtype = t;
        c.head_dim = d;
        c.num_heads = hs[0];
        c.num_kv_heads = hs[1];
        c.use_mma = 1;
        c.seqs = linear_and_streaming_seqs();
        run_case(c);
      }
}

// fp8 caches: raw rows staged and converted (exactly) to the activation type; k_scale folded into
// the logit scale, v_scale into the output.
TEST(DecodeAttentionMma, Fp8Scales) {
  RILL_REQUIRE_GPU();
  for (DType t : kDTypes)
    for (const auto& hs : {std::pair{32, 8}, std::pair{16, 2}})
      for (const auto& sc :
           {std::pair{1.0f, 1.0f}, std::pair{0.37f, 1.7f}, std::pair{2.0f, 0.25f}}) {
        DecodeCase c = fp8_case(t, sc.first, sc.second);
        c.num_heads = hs.first;
        c.num_kv_heads = hs.second;
        c.use_mma = 1;
        c.seqs = linear_and_streaming_seqs();
        run_case(c);
      }
}

// bf16 queries beyond fp16's range with an fp8 cache (whose MMAs run in fp16): scaled into it by
// a power of two folded into the logit scale. Logits this large make the softmax one-hot.
TEST(DecodeAttentionMma, LargeBf16QueriesWithFp8Cache) {
  RILL_REQUIRE_GPU();
  for (float q_scale : {3e4f, 1e6f}) {
    DecodeCase c = fp8_case(DType::kBF16, 0.5f, 2.0f);
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.use_mma = 1;
    c.q_scale = q_scale;
    c.seqs = {{4, 48, 1000, 48}, {0, kLinear, 99, 100}, {0, kLinear, 0, 1}};
    run_case(c);
  }
}

TEST(DecodeAttentionMma, EdgeSequencesAndBlockSizes) {
  RILL_REQUIRE_GPU();
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3}) {
    for (int splits : {1, 3}) {
      DecodeCase c;
      c.kv = kv;
      c.num_heads = 16;
      c.num_kv_heads = 4;
      c.num_splits = splits;
      c.min_keys_per_split = 16;
      c.use_mma = 1;
      c.seqs = {{0, kLinear, -1, 0}, {4, 64, -1, 0}, {5, 16, 3, 4},
                {0, kLinear, 0, 1},  {3, 1, 77, 1},  {17, 40, 90, 33}};
      run_case(c);
    }
    DecodeCase base;
    base.kv = kv;
    base.dtype = DType::kBF16;
    base.num_heads = 32;
    base.num_kv_heads = 4;  // group 8
    base.use_mma = 1;
    run_block_sizes(base);
  }
}

// Many sequences of different lengths in one launch (many CTAs per SM, warps with 0 to many
// tiles), the serving shape's heads.
TEST(DecodeAttentionMma, ManySequences) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> len(1, 700);
  std::vector<SeqSpec> seqs;
  for (int s = 0; s < 40; ++s) {
    const int n = len(rng);
    seqs.push_back(s % 3 ? SeqSpec{0, kLinear, n - 1, n}
                         : SeqSpec{4, 256, n + 1000, std::min(n, 256)});
  }
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
    for (DType t : kDTypes) {
      DecodeCase c;
      c.dtype = t;
      c.kv = kv;
      c.num_heads = 32;
      c.num_kv_heads = 8;
      c.use_mma = 1;
      c.seqs = seqs;
      run_case(c);
    }
}

// Splits: cluster merge and workspace merge give the same bits, as does waiting before the first
// K/V load; more splits than a cluster holds, and a split count past a warp's lanes.
TEST(DecodeAttentionMma, Splits) {
  RILL_REQUIRE_GPU();
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
    for (int splits : {2, 5, 8, 16, 40}) {
      DecodeCase c;
      c.kv = kv;
      c.num_heads = 32;
      c.num_kv_heads = 8;
      c.num_splits = splits;
      c.min_keys_per_split = 16;
      c.use_mma = 1;
      c.seqs = {{4, 48, 1000, 48},
                {0, kLinear, 999, 1000},
                {0, kLinear, 16, 17},
                {4, 64, -1, 0},
                {4, 300, 100000, 300}};
      const auto cluster = run_case(c);
      c.cluster_merge = false;
      EXPECT_EQ(run_case(c), cluster) << "workspace merge, " << splits << " splits";
      c.early_kv_loads = false;
      EXPECT_EQ(run_case(c), cluster) << "late K/V loads, " << splits << " splits";
    }
}

TEST(DecodeAttentionMma, CudaGraphReplay) {
  RILL_REQUIRE_GPU();
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3})
    for (int splits : {1, 8}) {
      DecodeCase c = fp8_case(DType::kBF16, 0.5f, 3.0f);
      c.kv = kv;
      c.num_heads = 32;
      c.num_kv_heads = 8;
      c.num_splits = splits;
      c.min_keys_per_split = 16;
      c.use_mma = 1;
      c.seqs = streaming_seqs();
      run_case(c, /*through_graph=*/true);
    }
}

// The CUDA-core kernel stays reachable for the shapes the tensor-core kernel takes by default.
TEST(DecodeAttentionMma, CudaCoresForced) {
  RILL_REQUIRE_GPU();
  for (KvDType kv : {KvDType::kSame, KvDType::kFp8E4M3}) {
    DecodeCase c;
    c.kv = kv;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.use_mma = 0;
    c.seqs = streaming_seqs();
    run_case(c);
  }
}

TEST(DecodeAttentionMma, RejectsUnsupportedShapes) {
  // Argument checks happen before any CUDA call: no GPU needed.
  DecodeAttentionParams p;
  p.num_seqs = 0;
  p.num_heads = 8;
  p.num_kv_heads = 4;  // group 2
  p.head_dim = 128;
  p.layout.num_kv_heads = 4;
  p.layout.head_dim = 128;
  p.use_mma = 1;
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("use_mma=1"), std::string::npos);
  p.num_kv_heads = p.layout.num_kv_heads = 1;  // group 8, head_dim 96
  p.head_dim = p.layout.head_dim = 96;
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  p.head_dim = p.layout.head_dim = 128;
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaSuccess);  // nothing to do
  EXPECT_TRUE(kernels::decode_mma_supported(32, 8, 128));
  EXPECT_TRUE(kernels::decode_mma_supported(32, 4, 64));
  EXPECT_FALSE(kernels::decode_mma_supported(32, 2, 128));   // group 16
  EXPECT_FALSE(kernels::decode_mma_supported(32, 16, 128));  // group 2
  EXPECT_FALSE(kernels::decode_mma_supported(32, 8, 96));    // head_dim 96
}

TEST(DecodeAttention, RejectsUnsupportedArguments) {
  // Argument checks happen before any CUDA call: no GPU needed.
  DecodeAttentionParams p;
  p.num_seqs = 1;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 72;
  p.layout.num_kv_heads = 2;
  p.layout.head_dim = 72;
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("unsupported head_dim=72"),
            std::string::npos);
  p.head_dim = p.layout.head_dim = 128;
  p.num_heads = 7;  // not a multiple of num_kv_heads
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  p.num_heads = 8;
  p.layout.block_size = 12;  // not a power of two
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  p.layout.block_size = 16;
  p.num_splits = 4;  // no workspace
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  p.num_splits = 1;
  p.layout.cache_dtype = KvDType::kFp8E4M3;
  p.layout.k_scale = 0.0f;  // fp8 scales must be finite and positive
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("k_scale"), std::string::npos);
  p.layout.k_scale = 1.0f;
  p.layout.cache_dtype = static_cast<KvDType>(7);
  EXPECT_EQ(kernels::launch_decode_attention(p, nullptr), cudaErrorInvalidValue);
  EXPECT_NE(std::string(kernels::last_kernel_error_detail()).find("unsupported KV-cache dtype 7"),
            std::string::npos);
}

}  // namespace
}  // namespace rill::testing
