// Decode attention's launch arguments, the key range of a split, the layout of its split-K
// workspace, and the two ways the partial results of several splits are combined (through the
// workspace by the last CTA, or through distributed shared memory in a cluster). Private to the
// two decode kernels, attention_decode.cu and attention_decode_mma.cu (see the top of the first
// for the algorithm).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "attention_util.cuh"
#include "dispatch.cuh"
#include "fp8.cuh"
#include "rill/kernels/attention.h"

namespace rill::kernels::decode_attn {

namespace cg = cooperative_groups;
using attn::ex2;

constexpr int kDecodeThreads = 128;
// Largest split count merged in a cluster (the portable cluster size). 16-CTA clusters (non-
// portable on H100) failed in DecodeAttention.ClusterMergeMatchesWorkspaceMerge; more splits use
// the workspace merge.
constexpr int kMaxClusterSplits = 8;
constexpr float kLog2e = 1.4426950408889634f;

/// Workspace record of one (split, sequence, head), in floats: acc[head_dim padded to 4] | m | l |
/// counter (int) | unused, a multiple of 16 bytes so that every record is 16-byte aligned.
constexpr int ws_ml_offset(int head_dim) {
  return (head_dim + 3) / 4 * 4;
}
constexpr int ws_counter_offset(int head_dim) {
  return ws_ml_offset(head_dim) + 2;
}
constexpr int ws_record_floats(int head_dim) {
  return ws_ml_offset(head_dim) + 4;
}

/// Launch arguments shared by all instantiations (device view of DecodeAttentionParams).
struct DecodeArgs {
  const void* q;  // row s: [num_heads, head_dim] at q + s * q_stride
  int64_t q_stride;
  const void* q_sink;  // same shape, scored against the sinks
  int64_t q_sink_stride;
  const DecodeSeq* seqs;  // [num_seqs]
  const void* cache;      // this layer
  int64_t block_stride, kv_stride;
  int block_size, block_shift;
  int num_heads, group, head_chunks, num_splits, min_keys_per_split;
  float scale_log2;  // scale * log2(e) (* k_scale for an fp8 cache)
  int num_seqs;
  void* out;      // [num_seqs, num_heads * head_dim]
  float* ws;      // [num_splits, num_seqs, num_heads] records (ws_record_floats): unnormalized
                  // sum p * v, (max logit, sum p) in base 2, the group counter; see the top
  float v_scale;  // fp8 cache: applied to the accumulated values
  bool early_kv_loads;
  int late_dependents;  // experiment: 1 the next kernel is launched once q is loaded
  bool cluster;  // the splits of a group form one thread-block cluster and merge through DSMEM
  // RoPE fused in (DecodeRope); rope_table null when not. q then points at raw QKV rows.
  const float* rope_table;  // [num_seqs][4][rot_half]
  const void* qkv_bias;     // [(num_heads + 2 * kv_heads) * D] or null
  int rot_half;             // rotary_dim / 2
  int kv_heads;             // v heads start at (num_heads + kv_heads) * D in a QKV row
  float k_scale;            // fp8: the newest key is stored as e4m3(k / k_scale)
};

struct KeyRange {
  int lo, hi;
};

/// Key range of split `split` (empty when lo >= hi).
__device__ __forceinline__ KeyRange split_range(int n_keys, int split, int num_splits, int min_keys,
                                                int block_size) {
  int per = max(min_keys, (n_keys + num_splits - 1) / num_splits);
  per = (per + block_size - 1) / block_size * block_size;
  const int64_t lo = min(static_cast<int64_t>(split) * per, static_cast<int64_t>(n_keys));
  const int64_t hi = min(lo + per, static_cast<int64_t>(n_keys));
  return {static_cast<int>(lo), static_cast<int>(hi)};
}

/// The cache rows of kv head kvh of sequence `sq` in this layer's cache.
template <typename C, int D>
__device__ __forceinline__ attn::PagedKv<C> head_kv(const DecodeArgs& a, const DecodeSeq& sq,
                                                    int kvh) {
  return attn::PagedKv<C>{
      static_cast<const C*>(a.cache) + static_cast<int64_t>(kvh) * a.block_size * D,
      sq.geo.block_table,
      a.block_stride,
      a.kv_stride,
      a.block_shift,
      D};
}

/// Workspace record of split `split` for (sequence, head) row `row` = seq * num_heads + head.
template <int D>
__device__ __forceinline__ float* ws_record(const DecodeArgs& a, int split, int64_t row) {
  const int64_t rows = static_cast<int64_t>(a.num_seqs) * a.num_heads;
  return a.ws + (split * rows + row) * ws_record_floats(D);
}

/// The CTA's kParts partial states of its nh heads (in shared memory, visible to every thread:
/// s_acc [kParts][H][D] unnormalized sums, s_m and s_l [kParts][H] base-2 maxima and sums; a part
/// that saw no key has m = -inf) combined in part order, then written: the output (one split), the
/// split's partial for the cluster merge (`part`: [H][D] sums, then [H] (m, l)), or its workspace
/// records (rows ws_row + h). Both decode kernels end with it, so their merges round alike.
template <typename T, typename C, int D, int H, int kParts>
__device__ __forceinline__ void combine_parts(const DecodeArgs& a, const float* s_acc,
                                              const float* s_m, const float* s_l, int nh,
                                              int split, int64_t ws_row, float* part, T* out) {
  for (int i = threadIdx.x; i < nh * D; i += blockDim.x) {
    const int h = i / D, d = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int p = 0; p < kParts; ++p) mx = fmaxf(mx, s_m[p * H + h]);
    float sum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int p = 0; p < kParts; ++p) {
        const float w = ex2(s_m[p * H + h] - mx);  // 0 for a part that saw no key
        sum = fmaf(s_l[p * H + h], w, sum);
        o = fmaf(s_acc[(p * H + h) * D + d], w, o);
      }
    }
    if constexpr (kIsFp8<C>) o *= a.v_scale;
    if (a.num_splits == 1) {
      out[i] = from_float<T>(sum > 0.0f ? o / sum : 0.0f);
    } else if (a.cluster) {
      part[h * D + d] = o;
      if (d == 0) part[H * D + 2 * h] = mx, part[H * D + 2 * h + 1] = sum;
    } else {
      float* rec = ws_record<D>(a, split, ws_row + h);
      rec[d] = o;
      if (d == 0) *reinterpret_cast<float2*>(rec + ws_ml_offset(D)) = make_float2(mx, sum);
    }
  }
}

/// Several splits, run by every thread of every CTA once its partial results are written: counts
/// the CTA on its group's counter (record (0, seq, h0)); the last CTA of the group resets the
/// counter and combines the splits of its nh heads by log-sum-exp, in the order s = 0 ..
/// num_splits - 1 whichever CTA is last:
///   out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s, M = max_s m_s,
/// skipping empty splits (m_s = -inf, acc not written); 0 where the sum is 0.
/// `sm`: the CTA's shared memory (the load ring holds 48 KiB already), free once every thread is
/// past the first barrier: [0] the last-CTA flag, [1, 1 + nh) the maxima (never overlapping, so no
/// barrier is needed between reading the flag and writing the maxima).
template <typename T, int D>
__device__ __forceinline__ void merge_splits_if_last(const DecodeArgs& a, int64_t row0, int nh,
                                                     T* out, float* sm) {
  int* s_last = reinterpret_cast<int*>(sm);
  float* s_max = sm + 1;
  int* counter = reinterpret_cast<int*>(ws_record<D>(a, 0, row0) + ws_counter_offset(D));
  __threadfence();  // this thread's partial writes are visible device-wide before the count...
  __syncthreads();  // ...for every thread of the CTA (and all are done with `sm`)
  if (threadIdx.x == 0) *s_last = atomicAdd(counter, 1) == a.num_splits - 1;
  __syncthreads();
  if (!*s_last) return;
  __threadfence();  // the other CTAs fenced their partials before counting: read them after this
  if (threadIdx.x == 0) atomicExch(counter, 0);  // self-cleaning: next layer, next graph replay

  // M per head: one warp per head, lanes over the splits (max is exact: order does not matter).
  // Partials are read with ld.global.cg (L2), never from a possibly stale L1 line.
  constexpr int kWarps = kDecodeThreads / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int h = warp; h < nh; h += kWarps) {
    float mx = -INFINITY;
    for (int s = lane; s < a.num_splits; s += 32)
      mx = fmaxf(mx, __ldcg(ws_record<D>(a, s, row0 + h) + ws_ml_offset(D)));
#pragma unroll
    for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) s_max[h] = mx;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nh * D; i += kDecodeThreads) {
    const int h = i / D, d = i % D;
    const float mx = s_max[h];
    float sum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
      // kChunk splits' loads are all issued before the first is used (one L2 round trip per
      // chunk; more registers spill in the fp8 instances), then the sums in split order.
      constexpr int kChunk = 8;
      for (int s0 = 0; s0 < a.num_splits; s0 += kChunk) {
        float2 ml[kChunk];
        float v[kChunk];
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          ml[j] = make_float2(-INFINITY, 0.0f);
          v[j] = 0.0f;
          if (s0 + j < a.num_splits) {
            const float* rec = ws_record<D>(a, s0 + j, row0 + h);
            ml[j] = __ldcg(reinterpret_cast<const float2*>(rec + ws_ml_offset(D)));
            v[j] = __ldcg(rec + d);
          }
        }
#pragma unroll
        for (int j = 0; j < kChunk; ++j) {
          // An empty split (m = -inf) is skipped: its v is stale, not written by this launch.
          if (ml[j].x != -INFINITY) {
            const float w = ex2(ml[j].x - mx);
            sum = fmaf(ml[j].y, w, sum);
            o = fmaf(v[j], w, o);
          }
        }
      }
    }
    out[i] = from_float<T>(sum > 0.0f ? o / sum : 0.0f);
  }
}

/// Several splits launched as one cluster per group (grid x = cluster x = num_splits): every CTA
/// has left its partial in its shared memory (`part`, DecodeSmem::kPartOffset); after a cluster
/// barrier the CTAs share the output elements and combine the splits' partials, read through
/// distributed shared memory, exactly as merge_splits_if_last does (same order, same rounding),
/// without a global round trip or an atomic. A second barrier keeps every CTA's shared memory
/// alive until all reads are done.
template <typename T, int D, int GH>
__device__ __forceinline__ void merge_splits_in_cluster(const DecodeArgs& a, int nh, T* out,
                                                        float* part) {
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  for (int i = rank * kDecodeThreads + threadIdx.x; i < nh * D;
       i += kDecodeThreads * a.num_splits) {
    const int h = i / D, d = i % D;
    // Every split's (m, l, acc) is read before the first is used: one round trip through the
    // cluster's shared memory instead of one per split.
    float m[kMaxClusterSplits], l[kMaxClusterSplits], v[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      m[s] = -INFINITY;
      l[s] = v[s] = 0.0f;
      if (s < a.num_splits) {
        const float* p = cluster.map_shared_rank(part, s);
        m[s] = p[GH * D + 2 * h];
        l[s] = p[GH * D + 2 * h + 1];
        v[s] = p[h * D + d];
      }
    }
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) mx = fmaxf(mx, m[s]);
    float sum = 0.0f, o = 0.0f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int s = 0; s < kMaxClusterSplits; ++s) {
        if (m[s] != -INFINITY) {  // else an empty split (or past num_splits)
          const float w = ex2(m[s] - mx);
          sum = fmaf(l[s], w, sum);
          o = fmaf(v[s], w, o);
        }
      }
    }
    out[i] = from_float<T>(sum > 0.0f ? o / sum : 0.0f);
  }
  cluster.sync();
}

}  // namespace rill::kernels::decode_attn
