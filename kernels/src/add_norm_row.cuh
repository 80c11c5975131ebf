// One token row of the residual add fused with the next norm: the body of add_norm.cu's kernel,
// shared with the decode chain (decode_chain.cu), whose every CTA normalises the rows itself, so
// that both give bit-identical results.
//
// The row is split into chunks of 8 elements; thread i < `threads` owns chunks it * threads + i
// (it < ITEMS) and keeps the updated fp32 residual of its chunks in registers, so the row is read
// once and the statistics are an exact two-pass computation (mean, then sum of squared
// deviations) without re-reading. Threads past `threads` hold zeros and only join the reductions,
// which leaves the sums unchanged (their warps add zeros). COHERENT reads the residual and the
// deltas from L2 (ld.global.cg): inside a kernel whose other CTAs wrote them.
#pragma once

#include "reduce.cuh"
#include "rill/kernels/elementwise.h"
#include "vec.cuh"

namespace rill::kernels::norm_row {

// Loads chunk [base, base + 8) of an optional [hidden] or row-offset operand (0 when null or
// past the end), scalar when !VEC.
template <typename T, bool VEC, bool COHERENT = false>
__device__ __forceinline__ void load_chunk(const T* p, int base, int hidden, float (&f)[kVec]) {
  static_assert(VEC || !COHERENT, "coherent loads are vector loads");
  if constexpr (VEC) {
    if (base < hidden) {
      if constexpr (COHERENT) {
        load8_cg(p, f);
      } else {
        load8(p, f);
      }
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? to_float<T>(p[e]) : 0.0f;
}

template <bool VEC, bool COHERENT>
__device__ __forceinline__ void load_chunk_f32(const float* p, int base, int hidden,
                                               float (&f)[kVec]) {
  static_assert(VEC || !COHERENT, "coherent loads are vector loads");
  if constexpr (VEC) {
    if (base < hidden) {
      if constexpr (COHERENT) {
        load8_cg(p, f);
      } else {
        load8(p, f);
      }
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? p[e] : 0.0f;
}

template <bool VEC>
__device__ __forceinline__ void store_chunk_f32(float* p, int base, int hidden,
                                                const float (&f)[kVec]) {
  if (VEC && base < hidden) {
    store8(p, f);
    return;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    if (base + e < hidden) p[e] = f[e];
}

// out[base..] = n * weight (+ norm_bias) for the chunk.
template <typename T, bool VEC>
__device__ __forceinline__ void store_norm(T* out, const T* weight, const T* norm_bias, int base,
                                           int hidden, const float (&n)[kVec]) {
  float w[kVec], b[kVec] = {};
  load_chunk<T, VEC>(weight + base, base, hidden, w);
  if (norm_bias) load_chunk<T, VEC>(norm_bias + base, base, hidden, b);
  float y[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) y[e] = n[e] * w[e] + b[e];
  if (VEC && base < hidden) {
    store8(out + base, y);
    return;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    if (base + e < hidden) out[base + e] = from_float<T>(y[e]);
}

// r += delta[base..] (+ bias[base..]) for an optional delta.
template <typename T, bool VEC, bool COHERENT>
__device__ __forceinline__ void add_delta(const T* delta, const T* bias, int base, int hidden,
                                          float (&r)[kVec]) {
  if (!delta) return;
  float d[kVec], b[kVec] = {};
  load_chunk<T, VEC, COHERENT>(delta + base, base, hidden, d);
  if (bias) load_chunk<T, VEC>(bias + base, base, hidden, b);
#pragma unroll
  for (int e = 0; e < kVec; ++e) r[e] += d[e] + b[e];
}

/// One row: r = residual_in + delta0 (+ bias0) + delta1 (+ bias1); the chunks c of r with
/// c % store_every == store_phase go to residual_out (when a delta is given); out0 (and out1) =
/// norm(r) * weight (+ norm_bias). Pointers are the row's; every thread of the block calls it.
template <typename T>
struct Row {
  const float* residual_in;
  float* residual_out;
  int store_every = 1, store_phase = 0;
  const T *delta0, *bias0, *delta1, *bias1;
  const T *weight0, *norm_bias0, *weight1, *norm_bias1;
  T *out0, *out1;  // out1 optional
  int hidden, threads;
  bool layer;  // LayerNorm (else RMSNorm)
  float eps;
};

template <typename T, bool VEC, int ITEMS, bool COHERENT>
__device__ __forceinline__ void add_norm_row(const Row<T>& a, float* scratch) {
  // Only the chain has idle threads and shares the residual's stores out (add_norm's kernel
  // keeps its code as it was).
  constexpr bool kShared = COHERENT;
  const int hidden = a.hidden, tid = threadIdx.x;
  const bool active = !kShared || tid < a.threads;
  float r[ITEMS][kVec];
  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int chunk = it * a.threads + tid, base = active ? chunk * kVec : hidden;
    load_chunk_f32<VEC, COHERENT>(a.residual_in + base, base, hidden, r[it]);
    add_delta<T, VEC, COHERENT>(a.delta0, a.bias0, base, hidden, r[it]);
    add_delta<T, VEC, COHERENT>(a.delta1, a.bias1, base, hidden, r[it]);
    if ((a.delta0 || a.delta1) && (!kShared || chunk % a.store_every == a.store_phase))
      store_chunk_f32<VEC>(a.residual_out + base, base, hidden, r[it]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum += r[it][e];  // elements past the end are 0
  }

  // Statistics in fp32: mean (LayerNorm only), then the mean square about it.
  const float mean = a.layer ? block_sum(sum, scratch) / hidden : 0.0f;
  float sq = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = active ? (it * a.threads + tid) * kVec : hidden;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float d = base + e < hidden ? r[it][e] - mean : 0.0f;
      sq += d * d;
    }
  }
  const float inv = 1.0f / sqrtf(block_sum(sq, scratch) / hidden + a.eps);

#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = active ? (it * a.threads + tid) * kVec : hidden;
    if (base >= hidden) break;
    float n[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) n[e] = (r[it][e] - mean) * inv;
    store_norm<T, VEC>(a.out0, a.weight0, a.norm_bias0, base, hidden, n);
    if (a.out1) store_norm<T, VEC>(a.out1, a.weight1, a.norm_bias1, base, hidden, n);
  }
}

/// The block shape add_norm.cu launches for a row of `hidden`: `items` chunks per thread and
/// `threads` threads (a multiple of 32, at most kMaxThreads).
constexpr int kMaxThreads = 512;  // leaves 128 registers per thread for the row in registers
constexpr int kMaxItems = 4;      // hidden <= kMaxThreads * kMaxItems * kVec = 16384
struct Shape {
  int items, threads;
};
__host__ __device__ constexpr Shape row_shape(int hidden) {
  const int chunks = (hidden + kVec - 1) / kVec;
  const int items = chunks <= kMaxThreads ? 1 : chunks <= 2 * kMaxThreads ? 2 : kMaxItems;
  return {items, ((chunks + items - 1) / items + 31) / 32 * 32};
}

}  // namespace rill::kernels::norm_row
