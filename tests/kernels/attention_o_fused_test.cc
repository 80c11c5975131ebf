// Decode attention with the output projection fused in (DecodeOProjection) for one sequence:
//   - the attention output it also writes against the fp64 CPU reference of attention;
//   - the projection (residual += dtype(s), y = dtype(residual * weight), sums of squares per 16
//     rows) against an fp64 CPU computation from that very output and the e4m3 weights: s may
//     differ by the fp32 summation order only, so the residual by at most one unit in the last
//     place of dtype(s), and y and the sums follow from the residual exactly (y) or to fp32
//     rounding (sums);
//   - a second launch (the counters clean themselves up) and a CUDA-graph replay give the same
//     bits; guard regions stay intact.
// Over both dtypes, MHA and GQA heads, 2 / 4 / 8 splits (N = 512 x splits), per-row and 128 x 128
// block scales, 16-bit and fp8 caches, StreamingLLM sinks + ring, and the shapes it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/model/fp8.h"
#include "rill/kernels/attention.h"
#include "tests/kernels/attention_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DecodeAttentionParams;
using kernels::DecodeSeq;
using kernels::DType;
using kernels::KvDType;

constexpr int kD = 128;

struct OCase {
  DType dtype = DType::kF16;
  KvDType kv = KvDType::kSame;
  int num_heads = 8, num_kv_heads = 8, num_splits = 8;
  bool block_scales = false;
  SeqSpec seq{4, 600, 5000, 596};  // sinks + a full ring: 600 keys
};

std::string describe(const OCase& c) {
  return describe_types(c.dtype, c.kv, 0.75f, 1.25f) + " heads=" + std::to_string(c.num_heads) +
         "/" + std::to_string(c.num_kv_heads) + " splits=" + std::to_string(c.num_splits) +
         (c.block_scales ? " block scales" : " row scales") + " keys=" +
         std::to_string(c.seq.num_sink + c.seq.window_count);
}

/// Everything one launch reads and writes, on the host and the device.
struct OFixture {
  OCase c;
  int N, K, G;
  kernels::KvCacheLayout layout;
  int ring_base = 0;
  std::vector<int32_t> table;
  std::vector<float> cache, q, q_sink, residual, gamma, scale;
  std::vector<uint8_t> cache_fp8, w;  // w: [N, K] e4m3, row-major
  std::unique_ptr<DeviceBuffer> d_cache, d_q, d_qs, d_table, d_seq, d_out, d_w, d_wp, d_scale,
      d_res, d_gamma, d_y, d_sumsq, d_ws, d_attn_ws;

  explicit OFixture(const OCase& oc) : c(oc) {
    N = 512 * c.num_splits;
    K = c.num_heads * kD;
    G = c.num_kv_heads;
    std::mt19937 rng(99 + c.num_heads + 7 * c.num_splits + (c.block_scales ? 1 : 0));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int bs = 16;
    ring_base = (c.seq.num_sink + bs - 1) / bs * bs;
    int max_slot = c.seq.num_sink - 1;
    for (const Key& k : keys_of(c.seq, ring_base)) max_slot = std::max(max_slot, k.slot);
    const int used = max_slot / bs + 1, num_blocks = used + 2;
    table = shuffled_blocks(num_blocks, used, rng);
    layout = cache_layout(num_blocks, G, bs, kD, c.kv, 0.75f, 1.25f);
    cache.assign(static_cast<size_t>(num_blocks) * layout.block_stride(), 0.0f);
    for (const Key& k : keys_of(c.seq, ring_base))
      for (int g = 0; g < G; ++g)
        fill_kv(cache.data() + k_index(k.slot, g), layout.kv_stride(), kD, normal, rng);
    cache_fp8 = finish_cache(cache, layout, c.dtype);
    q.resize(K);
    q_sink.resize(K);
    for (float& v : q) v = 1.5f * normal(rng);
    for (float& v : q_sink) v = 1.5f * normal(rng);
    q = round_to(q, c.dtype);
    q_sink = round_to(q_sink, c.dtype);
    w.resize(static_cast<size_t>(N) * K);
    for (uint8_t& b : w) b = fp8::e4m3_from_float(64.0f * normal(rng));
    std::uniform_real_distribution<float> sc(1e-3f, 4e-3f);
    scale.resize(c.block_scales ? static_cast<size_t>(K / 128) * N : N);
    for (float& v : scale) v = sc(rng);
    residual.resize(N);
    for (float& v : residual) v = normal(rng);
    gamma.resize(N);
    for (float& v : gamma) v = 1.0f + 0.25f * normal(rng);
    gamma = round_to(gamma, c.dtype);
  }

  int64_t k_index(int slot, int g) const {
    const int bs = layout.block_size;
    return static_cast<int64_t>(table[slot / bs]) * layout.block_stride() +
           (static_cast<int64_t>(g) * bs + slot % bs) * kD;
  }

  /// Uploads every input (the residual afresh) and returns the launch parameters.
  DecodeAttentionParams upload(bool fused) {
    d_cache = std::make_unique<DeviceBuffer>(cache.size(), cache_elem_bytes(layout));
    upload_cache(*d_cache, cache, cache_fp8, layout, c.dtype);
    d_q = std::make_unique<DeviceBuffer>(K, 2);
    d_q->upload_floats(q, c.dtype);
    d_qs = std::make_unique<DeviceBuffer>(K, 2);
    d_qs->upload_floats(q_sink, c.dtype);
    d_table = std::make_unique<DeviceBuffer>(table.size(), 4);
    d_table->upload(table.data());
    const DecodeSeq seq = decode_seq(c.seq, ring_base, d_table->as<int32_t>());
    d_seq = std::make_unique<DeviceBuffer>(1, sizeof(DecodeSeq));
    d_seq->upload(&seq);
    d_out = std::make_unique<DeviceBuffer>(K, 2);
    d_out->poison();
    d_attn_ws = std::make_unique<DeviceBuffer>(
        std::max<size_t>(kernels::decode_attention_workspace_bytes(1, c.num_heads, kD,
                                                                   c.num_splits), 16), 1);
    CUDA_OK_VOID(cudaMemset(d_attn_ws->get(), 0, d_attn_ws->bytes()));
    auto p = attention_params<DecodeAttentionParams>(c.dtype, 1, c.num_heads, G, kD,
                                                     1.0f / std::sqrt(static_cast<float>(kD)));
    p.q = d_q->get();
    p.q_stride = K;
    p.q_sink = d_qs->get();
    p.q_sink_stride = K;
    p.seqs = d_seq->as<DecodeSeq>();
    p.cache = d_cache->get();
    p.layout = layout;
    p.out = d_out->get();
    p.num_splits = c.num_splits;
    p.min_keys_per_split = 16;
    p.workspace = d_attn_ws->get();
    if (!fused) return p;
    d_w = std::make_unique<DeviceBuffer>(w.size(), 1);
    d_w->upload(w.data());
    d_wp = std::make_unique<DeviceBuffer>(w.size(), 1);
    CUDA_OK_VOID(kernels::launch_permute_o_weight(d_w->get(), d_wp->get(), N, c.num_heads, 0));
    d_scale = std::make_unique<DeviceBuffer>(scale.size(), 4);
    d_scale->upload(scale.data());
    d_res = std::make_unique<DeviceBuffer>(N, 4);
    d_res->upload(residual.data());
    d_gamma = std::make_unique<DeviceBuffer>(N, 2);
    d_gamma->upload_floats(gamma, c.dtype);
    d_y = std::make_unique<DeviceBuffer>(N, 2);
    d_y->poison();
    d_sumsq = std::make_unique<DeviceBuffer>(N / 16, 4);
    d_sumsq->poison();
    d_ws = std::make_unique<DeviceBuffer>(kernels::decode_o_workspace_bytes(c.num_heads, N), 1);
    d_ws->poison();  // partials are written before they are read; only the counters start at 0
    CUDA_OK_VOID(cudaMemset(d_ws->as<char>() + kernels::decode_o_partials_bytes(c.num_heads, N),
                            0, 64));
    p.o.w = d_wp->get();
    p.o.scale = d_scale->as<float>();
    p.o.scale_block = c.block_scales;
    p.o.N = N;
    p.o.residual = d_res->as<float>();
    p.o.norm_weight = d_gamma->get();
    p.o.y = d_y->get();
    p.o.sumsq = d_sumsq->as<float>();
    p.o.workspace = d_ws->get();
    return p;
  }

  /// fp64 attention of every head (as attention_decode_test.cc's reference).
  std::vector<float> attention_reference() const {
    const int group = c.num_heads / G;
    const std::vector<Key> keys = keys_of(c.seq, ring_base);
    const double sc = 1.0 / std::sqrt(static_cast<double>(kD));
    std::vector<float> want(K);
    for (int h = 0; h < c.num_heads; ++h) {
      const int g = h / group;
      std::vector<double> logit(keys.size()), o(kD, 0.0);
      double mx = -INFINITY, sum = 0;
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* qr = (keys[j].sink ? q_sink.data() : q.data()) + h * kD;
        const float* kr = cache.data() + k_index(keys[j].slot, g);
        double dot = 0;
        for (int d = 0; d < kD; ++d) dot += static_cast<double>(qr[d]) * kr[d];
        logit[j] = dot * sc;
        mx = std::max(mx, logit[j]);
      }
      for (size_t j = 0; j < keys.size(); ++j) {
        const double pj = std::exp(logit[j] - mx);
        sum += pj;
        const float* vr = cache.data() + k_index(keys[j].slot, g) + layout.kv_stride();
        for (int d = 0; d < kD; ++d) o[d] += pj * vr[d];
      }
      for (int d = 0; d < kD; ++d) want[h * kD + d] = static_cast<float>(o[d] / sum);
    }
    return want;
  }

  /// s[n] = sum_k out[k] * w[n, k] * scale (fp64) from the attention output the GPU wrote.
  std::vector<double> projection(const std::vector<float>& out) const {
    std::vector<double> s(N, 0.0);
    for (int n = 0; n < N; ++n) {
      double total = 0;
      for (int h = 0; h < c.num_heads; ++h) {
        double part = 0;
        for (int d = 0; d < kD; ++d)
          part += static_cast<double>(out[h * kD + d]) *
                  fp8::e4m3_to_float(w[static_cast<size_t>(n) * K + h * kD + d]);
        total += c.block_scales ? part * scale[static_cast<size_t>(h) * N + n] : part;
      }
      s[n] = c.block_scales ? total : total * scale[n];
    }
    return s;
  }

  // CUDA_OK asserts, which needs a void function.
  static void CUDA_OK_VOID(cudaError_t err) {
    ASSERT_EQ(err, cudaSuccess) << cudaGetErrorString(err) << " / "
                                << kernels::last_kernel_error_detail();
  }
};

/// Runs the fused launch (twice, or through a graph replayed twice), checks everything above.
void check_case(const OCase& c, bool through_graph = false) {
  SCOPED_TRACE(describe(c));
  if (!kernels::decode_o_fits(c.dtype, c.kv, c.num_splits, false))
    FAIL() << "the H100 holds these clusters; decode_o_fits said no";
  OFixture f(c);
  DecodeAttentionParams p = f.upload(true);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  std::vector<uint16_t> first_y;
  std::vector<float> first_res;
  for (int run = 0; run < 2; ++run) {
    f.d_res->upload(f.residual.data());
    f.d_y->poison();
    f.d_out->poison();
    if (through_graph && run == 1) {
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
      const cudaError_t launched = kernels::launch_decode_attention(p, stream);
      CUDA_OK(cudaStreamEndCapture(stream, &graph));
      CUDA_OK(launched);
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      f.d_res->upload(f.residual.data());  // the replay below starts from the same residual
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaGraphExecDestroy(exec));
      CUDA_OK(cudaGraphDestroy(graph));
    } else {
      CUDA_OK(kernels::launch_decode_attention(p, stream));
    }
    CUDA_OK(cudaStreamSynchronize(stream));
    const std::vector<float> out = f.d_out->download_floats(c.dtype);
    expect_attention_close(out, f.attention_reference(), c.dtype);
    const std::vector<double> s = f.projection(out);
    std::vector<float> res(f.N), sumsq(f.N / 16);
    f.d_res->download(res.data());
    f.d_sumsq->download(sumsq.data());
    const std::vector<float> y = f.d_y->download_floats(c.dtype);
    int bad_res = 0, bad_y = 0, bad_ss = 0;
    for (int n = 0; n < f.N; ++n) {
      // residual: the old value plus dtype(s), s within fp32 rounding: one ulp of dtype(s).
      const double want = f.residual[n] + s[n];
      const double slack = ulp1(c.dtype) * std::fabs(s[n]) + 1e-6 * (std::fabs(want) + std::fabs(s[n])) + 1e-7;
      if (!(std::fabs(res[n] - want) <= slack)) ++bad_res;
      const float y_want = from_half_bits(to_half_bits(res[n] * f.gamma[n], c.dtype), c.dtype);
      if (!(y[n] == y_want)) ++bad_y;
    }
    for (int b = 0; b < f.N / 16; ++b) {
      double ss = 0;
      for (int i = 0; i < 16; ++i) ss += static_cast<double>(res[16 * b + i]) * res[16 * b + i];
      if (!(std::fabs(sumsq[b] - ss) <= 1e-5 * ss + 1e-6)) ++bad_ss;
    }
    EXPECT_EQ(bad_res, 0) << "residual rows off by more than one ulp of dtype(s), run " << run;
    EXPECT_EQ(bad_y, 0) << "y != dtype(residual * weight), run " << run;
    EXPECT_EQ(bad_ss, 0) << "sums of squares off, run " << run;
    std::vector<uint16_t> ybits(f.N);
    f.d_y->download(ybits.data());
    if (run == 0) {
      first_y = ybits;
      first_res = res;
    } else {
      EXPECT_EQ(ybits, first_y) << "a second launch changed y (counters not cleaned up?)";
      EXPECT_EQ(res, first_res) << "a second launch changed the residual";
    }
    EXPECT_TRUE(f.d_out->check_guards());
    EXPECT_TRUE(f.d_y->check_guards());
    EXPECT_TRUE(f.d_res->check_guards());
    EXPECT_TRUE(f.d_sumsq->check_guards());
    EXPECT_TRUE(f.d_ws->check_guards());
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

TEST(DecodeOProjection, MhaBothDtypesAndScaleLayouts) {
  RILL_REQUIRE_GPU();
  for (DType t : kDTypes)
    for (bool block : {false, true}) {
      OCase c;
      c.dtype = t;
      c.block_scales = block;
      check_case(c);
    }
}

TEST(DecodeOProjection, GqaSplitCountsAndFp8Cache) {
  RILL_REQUIRE_GPU();
  for (int splits : {2, 4, 8}) {
    OCase c;
    c.dtype = DType::kBF16;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.num_splits = splits;
    c.kv = splits == 4 ? KvDType::kFp8E4M3 : KvDType::kSame;
    check_case(c);
  }
}

TEST(DecodeOProjection, ShortSequencesLeaveSplitsEmpty) {
  RILL_REQUIRE_GPU();
  OCase c;
  c.seq = {4, 64, 30, 31};  // 35 keys over 8 splits of at least 16: most splits see no key
  check_case(c);
  c.seq = {0, kLinear, 0, 1};  // one key
  check_case(c);
}

TEST(DecodeOProjection, CudaGraphReplay) {
  RILL_REQUIRE_GPU();
  OCase c;
  c.dtype = DType::kBF16;
  check_case(c, true);
}

TEST(DecodeOProjection, PermutedLayoutIsTheDocumentedOne) {
  RILL_REQUIRE_GPU();
  const int N = 64, heads = 3, K = heads * kD;
  std::vector<uint8_t> w(static_cast<size_t>(N) * K);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  DeviceBuffer d_w(w.size(), 1), d_p(w.size(), 1);
  d_w.upload(w.data());
  CUDA_OK(kernels::launch_permute_o_weight(d_w.get(), d_p.get(), N, heads, 0));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(w.size());
  d_p.download(got.data());
  size_t i = 0, bad = 0;
  for (int h = 0; h < heads; ++h)
    for (int nt = 0; nt < N / 16; ++nt)
      for (int kb = 0; kb < 2; ++kb)
        for (int half = 0; half < 2; ++half)
          for (int lane = 0; lane < 32; ++lane)
            for (int b = 0; b < 16; ++b, ++i) {
              const int row = 16 * nt + lane / 4 + 8 * half;
              const int col = h * kD + 64 * kb + 16 * (lane % 4) + b;
              bad += got[i] != w[static_cast<size_t>(row) * K + col];
            }
  EXPECT_EQ(bad, 0u);
  EXPECT_TRUE(d_p.check_guards());
}

TEST(DecodeOProjection, RefusesWhatItCannotDo) {
  RILL_REQUIRE_GPU();
  EXPECT_TRUE(kernels::decode_o_supported(1, 32, 128, 4096, 8));
  EXPECT_FALSE(kernels::decode_o_supported(2, 32, 128, 4096, 8));   // two sequences
  EXPECT_FALSE(kernels::decode_o_supported(1, 32, 64, 4096, 8));    // head_dim 64
  EXPECT_FALSE(kernels::decode_o_supported(1, 32, 128, 4096, 4));   // 128 KB slices
  EXPECT_FALSE(kernels::decode_o_supported(1, 32, 128, 8192, 16));  // clusters of 16
  OCase c;
  OFixture f(c);
  DecodeAttentionParams p = f.upload(true);
  p.cluster_merge = false;
  EXPECT_EQ(kernels::launch_decode_attention(p, 0), cudaErrorInvalidValue);
  p.cluster_merge = true;
  p.num_splits = 4;
  EXPECT_EQ(kernels::launch_decode_attention(p, 0), cudaErrorInvalidValue);
  p.num_splits = 8;
  p.o.residual = nullptr;
  EXPECT_EQ(kernels::launch_decode_attention(p, 0), cudaErrorInvalidValue);
  cudaGetLastError();
}

}  // namespace
}  // namespace rill::testing
