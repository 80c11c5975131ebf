// Decode attention over the paged KV cache with StreamingLLM sinks + window, FlashDecoding style.
//
// Keys of one sequence, by key index j (the order does not matter to softmax; this one keeps
// consecutive j in consecutive cache slots):
//   j in [0, num_sink):        sink j at slot j, scored with q_sink;
//   j in [num_sink, n_keys):   window token d = n_keys - 1 - j steps before the newest, rel index
//                              head_rel - d, slot ring_base + (rel mod ring_size); scored with q.
// n_keys = num_sink + window_count.
//
// decode_attention_kernel: grid (num_splits, num_kv_heads * head_chunks, num_seqs), 128 threads.
// A CTA serves GH query heads of one GQA group (all of it unless the group exceeds 8) over split
// s's key range [s * per, (s + 1) * per), per = roundup(max(min_keys_per_split,
// ceil(n_keys / num_splits)), block_size), so each K/V row is read from memory once per group.
// A row is read by kTpr threads with 16-byte copies (head_dim 128: 16 threads, a 256-byte row per
// half warp); each of the 128 / kTpr thread groups takes kU consecutive keys per step. Loads go
// through a per-thread ring of kStages steps in shared memory (cp.async, zero-filled past the
// range): the thread that copies a vector is the one that reads it, so a cp.async.wait_group is
// the only synchronization, and (kStages - 1) steps of loads stay in flight while a step is
// computed, whatever the register count. Each thread group keeps one online softmax per head in
// fp32 (logits scaled by log2(e), exp2); at the end the groups merge through shared memory. With
// one split the CTA writes the output. The grid depends only on the launch arguments (CUDA-graph
// safe). Requires window_count <= ring_size (a window never holds a slot twice); q_sink is read
// only by CTAs whose range holds sinks (it may be null when no sequence has sinks).
//
// Several splits: the CTAs of one (sequence, kv head, head chunk) differ only in blockIdx.x. Each
// writes its partial (acc, m, l) per head to the workspace (a split past the end of its sequence
// writes m = -inf, l = 0), fences, and counts itself on the group's counter; the last CTA to
// arrive (old count num_splits - 1) resets the counter to 0 and combines all splits by
// log-sum-exp in the fixed order s = 0 .. num_splits - 1, so the output is bit-identical whichever
// CTA comes last, and no second kernel sits on the critical path. Workspace: records of
// ws_record_floats(head_dim) floats, [num_splits][num_seqs][num_heads]:
//   acc[head_dim] (padded to a multiple of 4) | m | l | counter (int) | unused
// Record (s, seq, h) holds split s's partial of head h; the counter of the group whose first query
// head is h0 is the counter word of record (0, seq, h0). A record's offset depends only on its
// index and head_dim, so launches with other num_seqs / num_splits on the same workspace (the
// engine varies both per step) never write partials over a counter word: counter words only ever
// hold counters, and every launch leaves them 0. The workspace must be zeroed once at allocation.
//
// Up to 8 splits (the engine's usual case at batch 1) run instead as one thread-block cluster per
// group: each CTA leaves its partial in shared memory and, after a cluster barrier, the CTAs
// combine the partials read through distributed shared memory in the same order and rounding
// (merge_splits_in_cluster): no workspace round trip, fence or atomic on the critical path.
//
// Early loads: the step's metadata, the block tables and every K/V row but each sequence's newest
// are loaded before pdl_wait() (they are no kernel's output within the step), so the first ring
// stages stream while the RoPE / K/V-write kernel before this one runs; the newest key's row is
// read directly after the wait.
//
// RoPE fused in (DecodeAttentionParams::rope): q and the newest key are rotated from the raw QKV
// row right after pdl_wait(), where the unfused kernel reads them ready; the newest K and V are
// always taken from registers (never through the ring, which another CTA's write would race) and
// written to the cache by the CTAs of head chunk 0.
//
// GQA groups of 4 to 8 heads (head_dim 64 or 128, RoPE fused in or not) go to the tensor-core
// kernel of attention_decode_mma.cu instead (DecodeAttentionParams::use_mma forces either), which
// shares the key order, the split ranges and both split merges with this one.
//
// fp8 (e4m3) cache: the same kernel with 16 elements per 16-byte vector, so a row takes half the
// threads (head_dim 128: 8) and a step twice the keys for the same bytes in flight; each thread
// keeps 16 dims of q and of the accumulators (GH is capped at 4 to stay in registers) and
// converts K/V in registers. k_scale is folded into the query scale, v_scale into the output.
#include <cstdlib>
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <atomic>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "attention_decode_merge.cuh"
#include "attention_decode_mma.cuh"
#include "attention_decode_rope.cuh"
#include "attention_mma.cuh"
#include "attention_util.cuh"
#include "dispatch.cuh"
#include "fp8.cuh"
#include "launch.cuh"
#include "rill/kernels/attention.h"

namespace rill::kernels {
namespace {

using namespace decode_attn;  // NOLINT: this file's private helpers
using attn::PagedKv;

/// Thread layout for one head_dim and cache element type C: kTpr threads read a row with 16-byte
/// vectors of kVec elements each (kTpr rounded up to a power of two; head_dim 80 and 96 leave the
/// top lanes of each group idle). Each thread owns kVec dims of q and of the accumulators.
template <int D, typename C>
struct DecodeShape {
  static constexpr int kVec = 16 / sizeof(C);  // 8 (fp16 / bf16) or 16 (fp8)
  static constexpr int kVecs = D / kVec;
  static constexpr int kTpr = kVecs <= 2    ? 2
                              : kVecs <= 4  ? 4
                              : kVecs <= 8  ? 8
                              : kVecs <= 16 ? 16
                                            : 32;
  static constexpr int kGroups = kDecodeThreads / kTpr;
  static_assert(D % kVec == 0 && kVecs <= 32, "head_dim must be a multiple of 16 B, at most 256");
};

/// Most query heads per CTA: 8, or 4 with fp8's 16 dims per thread (registers).
template <typename C>
inline constexpr int kMaxHeadsPerCta = kIsFp8<C> ? 4 : 8;

/// Keys per thread group and step (softmax batching), and steps in the shared-memory ring, for
/// GH heads of E dims per thread.
template <int GH, int E>
constexpr int decode_unroll() {
  return GH * E <= 32 ? 4 : 2;
}
template <int GH, int E>
constexpr int decode_stages() {
  return decode_unroll<GH, E>() == 4 ? 3 : 5;
}

/// Shared memory of one CTA: the load ring, later reused by the merge of the thread groups.
template <int D, typename C, int GH>
struct DecodeSmem {
  static constexpr int kE = DecodeShape<D, C>::kVec;
  static constexpr int kRingVecs =
      decode_stages<GH, kE>() * decode_unroll<GH, kE>() * 2 * kDecodeThreads;
  static constexpr int kMergeFloats = DecodeShape<D, C>::kGroups * GH * (D + 2);
  // Cluster merge: the split's partial, [GH][D] sums then [GH] (m, l), past the group merge.
  static constexpr int kPartOffset = (kMergeFloats + 3) / 4 * 4;  // floats
  static constexpr int kPartFloats = GH * D + 2 * GH;
  static constexpr int kUsedVecs = (kPartOffset + kPartFloats + 3) / 4;
  static constexpr int kVecs = kRingVecs > kUsedVecs ? kRingVecs : kUsedVecs;
  static_assert(kVecs * 16 <= 48 * 1024, "static shared memory limit");
};

/// q[h][e] = query element (h0 + h, lane * E + e) * scale_log2; heads past nh repeat the last one
/// (computed, never written) and idle lanes hold zeros. Scalar loads: no alignment assumed.
template <typename T, int D, int GH, int E>
__device__ __forceinline__ void load_query(float (&q)[GH][E], const T* row, int h0, int nh,
                                           int lane, float scale_log2) {
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    const T* src = row + static_cast<int64_t>(h0 + min(h, nh - 1)) * D;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int d = lane * E + e;
      q[h][e] = d < D ? to_float(src[d]) * scale_log2 : 0.0f;
    }
  }
}

/// Per-thread online-softmax state of GH heads over this thread's E dims.
template <int GH, int E>
struct SoftmaxState {
  float m[GH];  // running max of base-2 logits (identical across a thread group)
  float l[GH];  // running sum of exp2(logit - m)
  float acc[GH][E];
  __device__ __forceinline__ void reset() {
#pragma unroll
    for (int h = 0; h < GH; ++h) {
      m[h] = -INFINITY;
      l[h] = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[h][e] = 0.0f;
    }
  }
};

/// Where the window keys of one sequence live: key j (>= num_sink) has rel index
/// head_rel - (n_keys - 1 - j), slot ring_base + (rel mod ring).
struct WindowGeo {
  int ring_base, ring, head_rel, n_keys;
};

/// Physical slots of the thread group's kU consecutive keys from jg (-1: past j_end or idle lane).
/// Consecutive keys sit in consecutive slots modulo the ring: one division per call.
/// Key j_new (the newest, written by this step's K/V write) is skipped too: it is read directly
/// once the kernel has waited for its predecessor.
template <typename C, int kU>
__device__ __forceinline__ void group_slots(const PagedKv<C>& kv, const WindowGeo& geo, int jg,
                                            int j_end, int j_new, bool sinks, bool active,
                                            int (&ps)[kU]) {
  const int r0 = sinks ? 0 : attn::ring_offset(geo.head_rel - (geo.n_keys - 1 - jg), geo.ring);
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    ps[i] = -1;
    if (jg + i < j_end && jg + i != j_new && active) {
      int slot = jg + i;
      if (!sinks) {
        unsigned r = static_cast<unsigned>(r0) + i;
        if (r >= static_cast<unsigned>(geo.ring)) r -= static_cast<unsigned>(geo.ring);
        slot = geo.ring_base + static_cast<int>(r);
      }
      ps[i] = kv.phys_slot(slot);
    }
  }
}

/// The E elements of cache type C in a 16-byte vector as floats (fp8: unscaled).
template <typename C, int E>
__device__ __forceinline__ void unpack_kv(const uint4& v, float (&f)[E]) {
  if constexpr (kIsFp8<C>) {
    unpack16_fp8(v, f);
  } else {
    attn::unpack8<C>(v, f);
  }
}

/// One step of a thread group: kU keys from jg (those >= j_end masked; their K and V are zeros).
template <typename T, typename C, int D, int GH, int kU>
__device__ __forceinline__ void attend_step(const uint4 (&kraw)[kU], const uint4 (&vraw)[kU],
                                            int jg, int j_end,
                                            const float (&q)[GH][DecodeShape<D, C>::kVec],
                                            SoftmaxState<GH, DecodeShape<D, C>::kVec>& st) {
  using Shape = DecodeShape<D, C>;
  constexpr int E = Shape::kVec;
  // Logits: partial dot products over this thread's E dims, summed across the group.
  float s[kU][GH];
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    float kf[E];
    unpack_kv<C, E>(kraw[i], kf);
#pragma unroll
    for (int h = 0; h < GH; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot = fmaf(q[h][e], kf[e], dot);
      s[i][h] = dot;
    }
  }
#pragma unroll
  for (int off = Shape::kTpr / 2; off > 0; off /= 2) {
#pragma unroll
    for (int i = 0; i < kU; ++i) {
#pragma unroll
      for (int h = 0; h < GH; ++h) s[i][h] += __shfl_xor_sync(0xffffffffu, s[i][h], off);
    }
  }
  // Online softmax, rescaling once per step.
  float m_use[GH];
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    float mx = st.m[h];
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      if (jg + i >= j_end) s[i][h] = -INFINITY;
      mx = fmaxf(mx, s[i][h]);
    }
    m_use[h] = mx == -INFINITY ? 0.0f : mx;  // no key yet: keep exp2 away from inf - inf
    const float alpha = ex2(st.m[h] - m_use[h]);
    st.m[h] = mx;
    st.l[h] *= alpha;
#pragma unroll
    for (int e = 0; e < E; ++e) st.acc[h][e] *= alpha;
  }
#pragma unroll
  for (int i = 0; i < kU; ++i) {
    float vf[E];
    unpack_kv<C, E>(vraw[i], vf);
#pragma unroll
    for (int h = 0; h < GH; ++h) {
      const float p = ex2(s[i][h] - m_use[h]);
      st.l[h] += p;
#pragma unroll
      for (int e = 0; e < E; ++e) st.acc[h][e] = fmaf(p, vf[e], st.acc[h][e]);
    }
  }
}

/// Attends the thread group's keys among [j_begin, j_end): all sinks (slot j) or all window keys.
/// Every thread of the CTA runs the same number of steps (shuffles need whole warps). `ring` is
/// the CTA's load ring, [kStages][kU][K, V][kDecodeThreads] vectors; the block table entries of a
/// step are fetched one step before its loads are issued. The first kStages steps' loads are
/// issued before prepare() runs (it waits for the previous kernel and fills q), except key j_new
/// (the sequence's newest, written by that kernel): its K and V are read directly after it.
template <typename T, typename C, int D, int GH, typename Prepare, typename Newest>
__device__ __forceinline__ void attend_keys(const PagedKv<C>& kv, const WindowGeo& geo, int j_begin,
                                            int j_end, int j_new, bool sinks, int grp, int lane,
                                            bool active, float (&q)[GH][DecodeShape<D, C>::kVec],
                                            SoftmaxState<GH, DecodeShape<D, C>::kVec>& st,
                                            uint4* ring, bool fused_rope, Prepare&& prepare,
                                            Newest&& newest) {
  using Shape = DecodeShape<D, C>;
  constexpr int kU = decode_unroll<GH, Shape::kVec>();
  constexpr int kStages = decode_stages<GH, Shape::kVec>();
  constexpr int kStep = Shape::kGroups * kU;
  constexpr int kStageVecs = kU * 2 * kDecodeThreads;
  const int n_steps = (j_end - j_begin + kStep - 1) / kStep;
  uint4* mine = ring + threadIdx.x;
  // Only the first kStages steps are issued before prepare(): the newest key needs the direct
  // read only when it falls among them; later steps copy it like any other key. With RoPE fused
  // in it comes from registers wherever it falls (its cache row is written by this kernel).
  if (!fused_rope && j_new >= j_begin && (j_new - j_begin) / kStep >= kStages) j_new = -1;
  // Step n's copies of the keys at slots `at` into its stage (keys past the range zero-filled),
  // one commit group per step (empty past the last step, so that group counting stays uniform).
  const auto copy_step = [&](int n, const int(&at)[kU]) {
    if (n < n_steps) {
      uint4* dst = mine + (n % kStages) * kStageVecs;
#pragma unroll
      for (int i = 0; i < kU; ++i) {
        const C* k = at[i] >= 0 ? kv.k_row_phys(at[i]) + lane * Shape::kVec : kv.cache;
        attn::cp_async16(attn::smem_addr(dst + (2 * i) * kDecodeThreads), k, at[i] >= 0);
        attn::cp_async16(attn::smem_addr(dst + (2 * i + 1) * kDecodeThreads), k + kv.kv_stride,
                         at[i] >= 0);
      }
    }
    attn::cp_async_commit();
  };
  const auto slots_of = [&](int n, int(&at)[kU]) {
    group_slots<C, kU>(kv, geo, j_begin + n * kStep + grp * kU, j_end, j_new, sinks, active, at);
  };
  // The slots of the first kStages + 1 steps are looked up together, before the first copy, so
  // their block-table loads share one round trip instead of one each (the copies' "memory"
  // clobber would otherwise order every lookup after the copies before it).
  int first[kStages][kU], ps[kU];
#pragma unroll
  for (int n = 0; n < kStages; ++n) slots_of(n, first[n]);
  slots_of(kStages, ps);
#pragma unroll
  for (int n = 0; n < kStages; ++n) copy_step(n, first[n]);
  // Later steps: copy step n, then look up step n + 1's slots.
  const auto issue = [&](int n) {
    copy_step(n, ps);
    if (n < n_steps) slots_of(n + 1, ps);
  };
  prepare();
  // The newest key's row, when this group holds it: its slot is the sink slot j_new, or the
  // window's newest rel index head_rel; newest(slot, k, v) reads or computes its vectors.
  const bool has_new = active && j_new >= 0 && j_new >= j_begin && j_new < j_end &&
                       (j_new - j_begin) % kStep / kU == grp;
  uint4 k_new = make_uint4(0, 0, 0, 0), v_new = k_new;
  if (has_new)
    newest(sinks ? j_new : geo.ring_base + attn::ring_offset(geo.head_rel, geo.ring), k_new, v_new);
  for (int n = 0; n < n_steps; ++n) {
    const int jg = j_begin + n * kStep + grp * kU;  // this group's first key
    attn::cp_async_wait<kStages - 1>();             // step n has landed (this thread's copies)
    const uint4* src = mine + (n % kStages) * kStageVecs;
    uint4 kraw[kU], vraw[kU];
#pragma unroll
    for (int i = 0; i < kU; ++i) {
      kraw[i] = src[(2 * i) * kDecodeThreads];
      vraw[i] = src[(2 * i + 1) * kDecodeThreads];
      if (has_new && jg + i == j_new) kraw[i] = k_new, vraw[i] = v_new;
    }
    attend_step<T, C, D, GH, kU>(kraw, vraw, jg, j_end, q, st);
    issue(n + kStages);  // into the stage just read (its values are consumed above)
  }
  attn::cp_async_wait<0>();
}

/// Merges the thread groups' (m, l, acc) through shared memory (`sm`: [kGroups][GH][D] sums,
/// then [kGroups][GH] maxima and sums) and writes the output, or the split's partial result.
template <typename T, typename C, int D, int GH>
__device__ __forceinline__ void merge_groups(const DecodeArgs& a,
                                             const SoftmaxState<GH, DecodeShape<D, C>::kVec>& st,
                                             float* sm, int grp, int lane, bool active, int nh,
                                             int split, int64_t ws_row, T* out) {
  constexpr int kG = DecodeShape<D, C>::kGroups;
  constexpr int E = DecodeShape<D, C>::kVec;
  float* s_acc = sm;
  float* s_m = s_acc + kG * GH * D;
  float* s_l = s_m + kG * GH;
  if (active) {
#pragma unroll
    for (int h = 0; h < GH; ++h) {
      float4* dst = reinterpret_cast<float4*>(s_acc + (grp * GH + h) * D + lane * E);
#pragma unroll
      for (int j = 0; j < E / 4; ++j)
        dst[j] = make_float4(st.acc[h][4 * j], st.acc[h][4 * j + 1], st.acc[h][4 * j + 2],
                             st.acc[h][4 * j + 3]);
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < GH; ++h) s_m[grp * GH + h] = st.m[h], s_l[grp * GH + h] = st.l[h];
  }
  __syncthreads();
  combine_parts<T, C, D, GH, kG>(a, s_acc, s_m, s_l, nh, split, ws_row,
                                 sm + DecodeSmem<D, C, GH>::kPartOffset, out);
}

/// Attends split `split`'s key range `range` (not empty) of sequence `seq` for the CTA's nh heads
/// from h0 and writes the output (one split) or the split's partial result. `smem`: the load ring,
/// then the merge of the thread groups.
template <typename T, typename C, int D, int GH, bool kRope>
__device__ __forceinline__ void attend_range(const DecodeArgs& a, const DecodeSeq& sq,
                                             KeyRange range, int split, int seq, int kvh, int h0,
                                             int nh, T* out, uint4* smem) {
  using Shape = DecodeShape<D, C>;
  constexpr int E = Shape::kVec;
  const int lane = threadIdx.x % Shape::kTpr, grp = threadIdx.x / Shape::kTpr;
  const bool active = lane * E < D;
  const int num_sink = max(sq.num_sink, 0);
  const int n_keys = num_sink + max(sq.window_count, 0);
  const PagedKv<C> kv = head_kv<C, D>(a, sq, kvh);
  const WindowGeo geo{sq.geo.ring_base, sq.geo.ring_size > 0 ? sq.geo.ring_size : 0x7fffffff,
                      sq.head_rel, n_keys};

  SoftmaxState<GH, E> st;
  st.reset();
  float q[GH][E];
  const int sink_end = min(range.hi, num_sink);
  const int j_new = n_keys - 1;  // written by this step: read only after pdl_wait()
  constexpr bool fused = kRope;
  const T* raw = static_cast<const T*>(a.q) + seq * a.q_stride;  // fused: the raw QKV row
  const T* bias = static_cast<const T*>(a.qkv_bias);
  const float* angles = fused ? a.rope_table + static_cast<int64_t>(seq) * 4 * a.rot_half : nullptr;
  // The newest key's and value's vectors of this lane: read from the cache, or (fused) computed
  // from the raw QKV row as rope_kv stores them, and stored by the CTAs of head chunk 0.
  const auto newest = [&](int slot, uint4& k_new, uint4& v_new) {
    const C* k = kv.k_row(slot) + lane * E;
    if constexpr (!fused) {
      k_new = *reinterpret_cast<const uint4*>(k);
      v_new = *reinterpret_cast<const uint4*>(k + kv.kv_stride);
    } else {
      roped_newest<T, C, E>(raw, bias, static_cast<int64_t>(a.num_heads + kvh) * D,
                            static_cast<int64_t>(a.num_heads + a.kv_heads + kvh) * D, angles,
                            a.rot_half, lane * E, a.k_scale, a.v_scale, k_new, v_new);
      if (blockIdx.y % a.head_chunks == 0) {
        C* w = const_cast<C*>(k);
        *reinterpret_cast<uint4*>(w) = k_new;
        *reinterpret_cast<uint4*>(w + kv.kv_stride) = v_new;
      }
    }
  };
  // Waits for the kernel before (a no-op the second time), then fills q for the sinks or the
  // window.
  const auto query = [&](bool sink) {
    pdl_wait();
    if constexpr (fused) {
      load_query_roped<T, D, GH, E>(q, raw, bias, angles + (sink ? 2 * a.rot_half : 0), a.rot_half,
                                    h0, nh, lane, active, a.scale_log2);
    } else if (sink) {
      load_query<T, D, GH, E>(q, static_cast<const T*>(a.q_sink) + seq * a.q_sink_stride, h0, nh,
                              lane, a.scale_log2);
    } else {
      load_query<T, D, GH, E>(q, raw, h0, nh, lane, a.scale_log2);
    }
    if (a.late_dependents) pdl_launch_dependents();
  };
  if (range.lo < sink_end) {
    attend_keys<T, C, D, GH>(
        kv, geo, range.lo, sink_end, j_new, true, grp, lane, active, q, st, smem, fused,
        [&] { query(true); }, newest);
  }
  const int win_begin = max(range.lo, num_sink);
  if (win_begin < range.hi) {
    attend_keys<T, C, D, GH>(
        kv, geo, win_begin, range.hi, j_new, false, grp, lane, active, q, st, smem, fused,
        [&] { query(false); }, newest);
  }

  __syncthreads();  // every thread is done with the ring: reuse it for the merge
  merge_groups<T, C, D, GH>(a, st, reinterpret_cast<float*>(smem), grp, lane, active, nh, split,
                            static_cast<int64_t>(seq) * a.num_heads + h0, out);
}

// C: the cache element type (T, or Fp8).
template <typename T, typename C, int D, int GH, bool kRope>
__global__ void __launch_bounds__(kDecodeThreads) decode_attention_kernel(const DecodeArgs a) {
  // See launch.cuh. The sequence table, the block tables and every K/V row but each sequence's
  // newest are not written by this step's kernels, so they are read before pdl_wait(): the first
  // K/V loads overlap the kernels before this one. pdl_wait() comes before q, the newest row and
  // any global write.
  if (!a.late_dependents) pdl_launch_dependents();
  if (!a.early_kv_loads) pdl_wait();

  __shared__ uint4 smem[DecodeSmem<D, C, GH>::kVecs];  // the load ring, then the merge

  const int split = blockIdx.x, seq = blockIdx.z;
  const int kvh = blockIdx.y / a.head_chunks, chunk = blockIdx.y % a.head_chunks;
  const int h0 = kvh * a.group + chunk * GH;  // first query head of this CTA
  const int nh = min(GH, a.group - chunk * GH);
  const int64_t row0 = static_cast<int64_t>(seq) * a.num_heads + h0;  // (seq, h0)
  T* out = static_cast<T*>(a.out) + row0 * D;

  const DecodeSeq sq = a.seqs[seq];
  const int n_keys = max(sq.num_sink, 0) + max(sq.window_count, 0);
  const KeyRange range =
      split_range(n_keys, split, a.num_splits, a.min_keys_per_split, a.block_size);
  if (range.lo < range.hi) {
    attend_range<T, C, D, GH, kRope>(a, sq, range, split, seq, kvh, h0, nh, out, smem);
  } else {  // an empty split, or a sequence without keys
    pdl_wait();
    if (a.num_splits == 1) {
      for (int i = threadIdx.x; i < nh * D; i += kDecodeThreads) out[i] = from_float<T>(0.0f);
    } else if (a.cluster) {
      if (threadIdx.x < nh)
        reinterpret_cast<float*>(
            smem)[DecodeSmem<D, C, GH>::kPartOffset + GH * D + 2 * threadIdx.x] = -INFINITY;
    } else if (threadIdx.x < nh) {
      *reinterpret_cast<float2*>(ws_record<D>(a, split, row0 + threadIdx.x) + ws_ml_offset(D)) =
          make_float2(-INFINITY, 0.0f);
    }
  }
  if (a.num_splits > 1 && a.cluster)
    merge_splits_in_cluster<T, D, GH>(
        a, nh, out, reinterpret_cast<float*>(smem) + DecodeSmem<D, C, GH>::kPartOffset);
  else if (a.num_splits > 1)
    merge_splits_if_last<T, D>(a, row0, nh, out, reinterpret_cast<float*>(smem));
}

/// Heads per CTA (GH): the GQA group rounded up to 1, 2, 4 or 8, at most max_gh; larger groups
/// use several CTAs.
int heads_per_cta(int group, int max_gh) {
  return std::min(group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8, max_gh);
}

template <typename T, typename C, int D>
cudaError_t launch_decode_typed(const DecodeArgs& args, int num_seqs, int num_kv_heads, int gh,
                                cudaStream_t stream) {
  const dim3 grid(args.num_splits, num_kv_heads * args.head_chunks, num_seqs);
  const auto launch = [&](auto kernel) {
    // Clusters of the splits of one group when the device can hold them (per kernel and size,
    // asked once; atomic: a thread per GPU asks at once under tensor parallelism, and identical
    // GPUs give one answer); else the workspace merge.
    static std::atomic<int> fits[kMaxClusterSplits + 1] = {};  // 0 unknown, 1 yes, -1 no
    DecodeArgs a = args;
    if (a.cluster && a.num_splits > 1 && a.num_splits <= kMaxClusterSplits) {
      std::atomic<int>& f = fits[a.num_splits];
      if (f.load() == 0) f.store(cluster_size_fits(kernel, a.num_splits, kDecodeThreads) ? 1 : -1);
      a.cluster = f.load() > 0;
    } else {
      a.cluster = false;
    }
    return launch_kernel_in_clusters(dim3(a.cluster ? a.num_splits : 1, 1, 1), kernel, dim3(grid),
                                     dim3(kDecodeThreads), 0, stream, a);
  };
  // Instances with RoPE fused in are separate, so the plain ones stay exactly as they were.
  const auto by_heads = [&]<bool kRope>() {
    switch (gh) {
      case 1:
        return launch(decode_attention_kernel<T, C, D, 1, kRope>);
      case 2:
        return launch(decode_attention_kernel<T, C, D, 2, kRope>);
      case 4:
        return launch(decode_attention_kernel<T, C, D, 4, kRope>);
      default:
        return launch(decode_attention_kernel<T, C, D, kMaxHeadsPerCta<C>, kRope>);
    }
  };
  const cudaError_t err = args.rope_table ? by_heads.template operator()<true>()
                                          : by_heads.template operator()<false>();
  return err != cudaSuccess ? err : launch_status();
}

/// The decode kernels' head dims.
using DecodeHeadDims = HeadDims<32, 64, 80, 96, 128, 256>;

}  // namespace

bool decode_rope_supported(int head_dim, int rotary_dim, KvDType cache_dtype) {
  const int lane_dims = cache_dtype == KvDType::kFp8E4M3 ? 16 : 8;  // DecodeShape::kVec
  return head_dim % lane_dims == 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim &&
         (rotary_dim / 2) % lane_dims == 0;
}

bool decode_mma_supported(int num_heads, int num_kv_heads, int head_dim) {
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return false;
  const int group = num_heads / num_kv_heads;
  return group >= 4 && group <= 8 && (head_dim == 64 || head_dim == 128);
}

size_t decode_attention_workspace_bytes(int num_seqs, int num_heads, int head_dim, int num_splits) {
  if (num_splits <= 1 || num_seqs <= 0 || num_heads <= 0 || head_dim <= 0) return 0;
  // Sized by num_splits * num_seqs records per head; smaller launches use a prefix of it.
  return static_cast<size_t>(num_splits) * num_seqs * num_heads * ws_record_floats(head_dim) *
         sizeof(float);
}

cudaError_t launch_decode_attention(const DecodeAttentionParams& p, cudaStream_t stream) {
  if (const cudaError_t e = check_head_dim<DecodeHeadDims>(p.head_dim); e != cudaSuccess) return e;
  if (const std::string why =
          attn::shape_problem(p.num_seqs, p.num_heads, p.num_kv_heads, p.head_dim, p.layout);
      !why.empty())
    return invalid_argument("decode attention: " + why);
  if (p.num_splits < 1 || p.num_splits > 65535)
    return invalid_argument("decode attention: num_splits=" + std::to_string(p.num_splits));
  if (p.num_splits > 1 && (p.workspace == nullptr || !attn::aligned16(p.workspace)))
    return invalid_argument("decode attention: num_splits > 1 needs a 16-byte aligned workspace");
  const bool mma_fits =
      decode_mma_supported(p.num_heads, p.num_kv_heads, p.head_dim);
  if (p.use_mma == 1 && !mma_fits)
    return invalid_argument(
        "decode attention: use_mma=1 needs groups of 4 to 8 heads and head_dim 64 or 128");
  if (p.num_seqs == 0) return cudaSuccess;
  if (p.q == nullptr || p.seqs == nullptr || p.cache == nullptr || p.out == nullptr)
    return invalid_argument("decode attention: null q, seqs, cache or out");
  if (!attn::aligned16(p.cache))
    return invalid_argument("decode attention: the cache must be 16-byte aligned");
  if (p.rope.table) {
    if (p.rope.rotary_dim < 0 || p.rope.rotary_dim % 2 || p.rope.rotary_dim > p.head_dim)
      return invalid_argument("decode attention: unsupported rotary_dim=" +
                              std::to_string(p.rope.rotary_dim));
    if (p.q_stride < static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * p.head_dim)
      return invalid_argument("decode attention: RoPE fused in needs whole QKV rows (q_stride)");
    if (!decode_rope_supported(p.head_dim, p.rope.rotary_dim, p.layout.cache_dtype) ||
        p.q_stride % 8 || !attn::aligned16(p.q) || !attn::aligned16(p.rope.qkv_bias) ||
        !attn::aligned16(p.rope.table))
      return invalid_argument(
          "decode attention: RoPE fused in needs rotary_dim / 2 a multiple of "
          "a lane's dims and 16-byte aligned rows");
  }

  const bool fp8 = p.layout.cache_dtype == KvDType::kFp8E4M3;
  const int group = p.num_heads / p.num_kv_heads;
  const int gh = heads_per_cta(group, fp8 ? kMaxHeadsPerCta<Fp8> : kMaxHeadsPerCta<__half>);
  DecodeArgs args{};
  args.q = p.q;
  args.q_stride = p.q_stride;
  args.q_sink = p.q_sink;
  args.q_sink_stride = p.q_sink_stride;
  args.seqs = p.seqs;
  args.cache = p.cache;
  args.block_stride = p.layout.block_stride();
  args.kv_stride = p.layout.kv_stride();
  args.block_size = p.layout.block_size;
  args.block_shift = attn::log2_pow2(p.layout.block_size);
  args.num_heads = p.num_heads;
  args.group = group;
  args.head_chunks = (group + gh - 1) / gh;
  args.num_splits = p.num_splits;
  args.min_keys_per_split = p.min_keys_per_split > 0 ? p.min_keys_per_split : 1;
  args.scale_log2 = p.scale * kLog2e;
  if (fp8) args.scale_log2 *= p.layout.k_scale;
  args.v_scale = p.layout.v_scale;
  args.early_kv_loads = p.early_kv_loads;
  if (const char* v = std::getenv("RILL_ATTN_LATE_DEP")) args.late_dependents = std::atoi(v);
  args.cluster = p.cluster_merge;
  args.num_seqs = p.num_seqs;
  args.out = p.out;
  args.ws = p.num_splits > 1 ? static_cast<float*>(p.workspace) : nullptr;
  args.rope_table = p.rope.table;
  args.qkv_bias = p.rope.qkv_bias;
  args.rot_half = p.rope.rotary_dim / 2;
  args.kv_heads = p.num_kv_heads;
  args.k_scale = p.layout.k_scale;
  if (static_cast<int64_t>(p.num_kv_heads) * args.head_chunks > 65535)
    return invalid_argument("decode attention: too many kv heads");
  if (p.use_mma == 1 || (p.use_mma < 0 && mma_fits)) {  // the group in one CTA, on tensor cores
    args.head_chunks = 1;
    return launch_decode_attention_mma(args, p.dtype, p.layout.cache_dtype, p.head_dim, p.num_seqs,
                                       p.num_kv_heads, stream);
  }
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    return dispatch_kv_dtype<T>(p.layout.cache_dtype, [&]<typename C>() {
      return dispatch_head_dim(DecodeHeadDims{}, p.head_dim, [&]<int D>() {
        return launch_decode_typed<T, C, D>(args, p.num_seqs, p.num_kv_heads, gh, stream);
      });
    });
  });
}

}  // namespace rill::kernels
