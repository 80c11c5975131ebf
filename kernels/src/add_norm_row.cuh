// One row of the residual add + norm (AddNormParams, rill/kernels/elementwise.h) by one CTA,
// shared by the add_norm kernel and the GEMV that runs it in its last CTA (gemv.cu), so both
// give bit-identical results.
//
// Layout: `threads` threads (a multiple of 32) each own ITEMS chunks of 8 consecutive elements,
// chunk it * threads + tid for thread tid, and keep the updated fp32 residual of their chunks in
// registers, so the row is read once and the statistics are an exact two-pass computation (mean,
// then sum of squared deviations) without re-reading. The CTA may have more threads than
// `threads`: the extra ones own nothing and add zeros, which leaves every sum unchanged.
#pragma once

#include "reduce.cuh"
#include "rill/kernels/elementwise.h"
#include "vec.cuh"

namespace rill::kernels::norm {

// Loads chunk [base, base + 8) of an optional [hidden] operand (0 when past the end), scalar
// when !VEC. Only for data no kernel writes (norm weights and biases).
template <typename T, bool VEC>
__device__ __forceinline__ void load_chunk(const T* p, int base, int hidden, float (&f)[kVec]) {
  if constexpr (VEC) {
    if (base < hidden) {
      load8(p, f);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? to_float<T>(p[e]) : 0.0f;
}

// The same through L2 only (ld.global.cg), for rows written by other kernels or by other CTAs
// of the running grid, which an SM's L1 may hold stale copies of.
template <typename T, bool VEC>
__device__ __forceinline__ void load_chunk_l2(const T* p, int base, int hidden, float (&f)[kVec]) {
  if constexpr (VEC) {
    if (base < hidden) {
      const uint4 u = __ldcg(reinterpret_cast<const uint4*>(p));
      const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int e = 0; e < kVec; ++e) f[e] = to_float<T>(h[e]);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? to_float<T>(__ldcg(p + e)) : 0.0f;
}

template <bool VEC>
__device__ __forceinline__ void load_chunk_f32(const float* p, int base, int hidden,
                                               float (&f)[kVec]) {
  if constexpr (VEC) {
    if (base < hidden) {
      const float4 a = __ldcg(reinterpret_cast<const float4*>(p));
      const float4 b = __ldcg(reinterpret_cast<const float4*>(p) + 1);
      f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z,
      f[7] = b.w;
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? __ldcg(p + e) : 0.0f;
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
template <typename T, bool VEC>
__device__ __forceinline__ void add_delta(const T* delta, const T* bias, int base, int hidden,
                                          float (&r)[kVec]) {
  if (!delta) return;
  float d[kVec], b[kVec] = {};
  load_chunk_l2<T, VEC>(delta + base, base, hidden, d);
  if (bias) load_chunk<T, VEC>(bias + base, base, hidden, b);
#pragma unroll
  for (int e = 0; e < kVec; ++e) r[e] += d[e] + b[e];
}

// 512 threads leave 128 registers per thread for the row held in registers.
constexpr int kMaxThreads = 512;
constexpr int kMaxItems = 4;  // hidden <= kMaxThreads * kMaxItems * kVec = 16384

/// How a CTA lays out the rows of p: `threads` threads of `items` chunks; vec: the 16-byte path.
struct RowLayout {
  int items = 1, threads = 32;
  bool vec = false;
};
/// Checks p (cudaErrorInvalidValue and a detail when launch_add_norm cannot run it) and gives
/// the layout launch_add_norm uses for it. Defined in add_norm.cu.
cudaError_t row_layout(const AddNormParams& p, RowLayout* layout);

/// Output row i of p (residual row p.rows ? p.rows[i] : i) by the threads tid < `threads` of the
/// CTA, threads * ITEMS * 8 >= p.hidden. Every thread of the CTA calls it (block reductions);
/// `scratch` is 32 floats of shared memory. VEC: every row and vector is 16-byte aligned.
template <typename T, bool VEC, int ITEMS>
__device__ __forceinline__ void add_norm_row(const AddNormParams& p, int64_t i, int threads,
                                             float* scratch) {
  const int hidden = p.hidden, tid = threadIdx.x;
  const bool owner = tid < threads;
  const int64_t row = p.rows ? p.rows[i] : i;
  float* residual = p.residual + row * hidden;  // [hidden]
  const int64_t row_off = row * hidden;  // residual and deltas by the gathered row; outputs by i
  const T* delta0 = p.delta0 ? static_cast<const T*>(p.delta0) + row_off : nullptr;  // [hidden]
  const T* delta1 = p.delta1 ? static_cast<const T*>(p.delta1) + row_off : nullptr;
  const T* bias0 = static_cast<const T*>(p.bias0);
  const T* bias1 = static_cast<const T*>(p.bias1);

  float r[ITEMS][kVec];
  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = owner ? (it * threads + tid) * kVec : hidden;  // non-owners: past the end
    load_chunk_f32<VEC>(residual + base, base, hidden, r[it]);
    add_delta<T, VEC>(delta0, bias0, base, hidden, r[it]);
    add_delta<T, VEC>(delta1, bias1, base, hidden, r[it]);
    if (delta0 || delta1) store_chunk_f32<VEC>(residual + base, base, hidden, r[it]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum += r[it][e];  // elements past the end are 0
  }

  // Statistics in fp32: mean (LayerNorm only), then the mean square about it.
  const bool layer = p.type == NormType::kLayer;
  const float mean = layer ? block_sum(sum, scratch) / hidden : 0.0f;
  float sq = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = owner ? (it * threads + tid) * kVec : hidden;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float d = base + e < hidden ? r[it][e] - mean : 0.0f;
      sq += d * d;
    }
  }
  const float inv = 1.0f / sqrtf(block_sum(sq, scratch) / hidden + p.eps);

  const int64_t off = i * hidden;
  T* out0 = static_cast<T*>(p.out0) + off;
  T* out1 = p.out1 ? static_cast<T*>(p.out1) + off : nullptr;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = owner ? (it * threads + tid) * kVec : hidden;
    if (base >= hidden) break;
    float n[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) n[e] = (r[it][e] - mean) * inv;
    store_norm<T, VEC>(out0, static_cast<const T*>(p.weight0), static_cast<const T*>(p.norm_bias0),
                       base, hidden, n);
    if (out1)
      store_norm<T, VEC>(out1, static_cast<const T*>(p.weight1),
                         static_cast<const T*>(p.norm_bias1), base, hidden, n);
  }
}

}  // namespace rill::kernels::norm
