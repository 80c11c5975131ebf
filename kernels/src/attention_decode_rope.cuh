// Decode attention with RoPE fused in (DecodeRope): q and the newest key rotated, and the newest
// K / V prepared for the cache, from the raw QKV row, with rope_kv's arithmetic and rounding so
// that the results are bit-identical to rope_kv followed by plain decode attention. Private to
// attention_decode.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "attention_util.cuh"
#include "dispatch.cuh"
#include "fp8.cuh"
#include "rope_math.cuh"

namespace rill::kernels::decode_attn {

/// E consecutive elements of T at p (16-byte aligned) as floats.
template <typename T, int E>
__device__ __forceinline__ void load_vec(const T* p, float (&f)[E]) {
  static_assert(E % 8 == 0);
#pragma unroll
  for (int v = 0; v < E / 8; ++v) {
    float g[8];
    attn::unpack8<T>(reinterpret_cast<const uint4*>(p)[v], g);
#pragma unroll
    for (int e = 0; e < 8; ++e) f[8 * v + e] = g[e];
  }
}

/// Elements d0 .. d0 + E of x plus those of b when given (rope_kv's bias add), as floats.
template <typename T, int E>
__device__ __forceinline__ void load_biased(const T* x, const T* b, int d0, float (&f)[E]) {
  load_vec<T, E>(x + d0, f);
  if (b) {
    float bv[E];
    load_vec<T, E>(b + d0, bv);
#pragma unroll
    for (int e = 0; e < E; ++e) f[e] = f[e] + bv[e];
  }
}

/// Dims d0 .. d0 + E of raw QKV head row x (+ bias b) after RoPE by the angles of table row `cs`
/// (cosines at [0, half), sines at [half, 2 half)), rounded to T: what rope_kv stores (same
/// arithmetic). The E dims lie on one side of the rotary halves (half % E == 0, see
/// decode_rope_supported); x, b and the table are 16-byte aligned there.
template <typename T, int E>
__device__ __forceinline__ void roped(const T* x, const T* b, const float* cs, int half, int d0,
                                      float (&y)[E]) {
  float own[E];
  load_biased<T, E>(x, b, d0, own);
  if (d0 < 2 * half) {
    const bool first = d0 < half;
    const int pd = first ? d0 + half : d0 - half, i0 = first ? d0 : pd;
    float other[E], c[E], sn[E];
    load_biased<T, E>(x, b, pd, other);
#pragma unroll
    for (int v = 0; v < E / 4; ++v) {
      const float4 cv = reinterpret_cast<const float4*>(cs + i0)[v];
      const float4 sv = reinterpret_cast<const float4*>(cs + half + i0)[v];
      c[4 * v] = cv.x, c[4 * v + 1] = cv.y, c[4 * v + 2] = cv.z, c[4 * v + 3] = cv.w;
      sn[4 * v] = sv.x, sn[4 * v + 1] = sv.y, sn[4 * v + 2] = sv.z, sn[4 * v + 3] = sv.w;
    }
#pragma unroll
    for (int e = 0; e < E; ++e)
      own[e] = first ? rope_first(own[e], other[e], c[e], sn[e])
                     : rope_second(other[e], own[e], c[e], sn[e]);
  }
#pragma unroll
  for (int e = 0; e < E; ++e) y[e] = to_float(from_float<T>(own[e]));
}

/// load_query from a raw QKV row (+ bias), rotated by the angles of table row `cs`.
template <typename T, int D, int GH, int E>
__device__ __forceinline__ void load_query_roped(float (&q)[GH][E], const T* row, const T* bias,
                                                 const float* cs, int half, int h0, int nh,
                                                 int lane, bool active, float scale_log2) {
#pragma unroll
  for (int h = 0; h < GH; ++h) {
    const int64_t off = static_cast<int64_t>(h0 + min(h, nh - 1)) * D;
    float y[E];
    if (active) {
      roped<T, E>(row + off, bias ? bias + off : nullptr, cs, half, lane * E, y);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) y[e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < E; ++e) q[h][e] = y[e] * scale_log2;
  }
}

/// E values already rounded to T as the cache stores them in one 16-byte vector: T itself, or
/// e4m3(v / scale) as rope_kv's fp8 store (lowest element in the lowest byte).
template <typename T, typename C, int E>
__device__ __forceinline__ uint4 pack_cached(const float (&f)[E], float scale) {
  uint4 u;
  if constexpr (kIsFp8<C>) {
    uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = quantize2_fp8(f[4 * i], f[4 * i + 1], scale) |
             quantize2_fp8(f[4 * i + 2], f[4 * i + 3], scale) << 16;
  } else {
    T* h = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int e = 0; e < E; ++e) h[e] = from_float<T>(f[e]);
  }
  return u;
}

/// This lane's 16-byte vectors (dims d0 .. d0 + E) of the newest key and value as the cache holds
/// them (type C), from the raw QKV row: key head at offset kh rotated by table row `cs`, value head
/// at offset vh, bias added, rounded and (fp8) quantized as rope_kv stores them.
template <typename T, typename C, int E>
__device__ __forceinline__ void roped_newest(const T* raw, const T* bias, int64_t kh, int64_t vh,
                                             const float* cs, int half, int d0, float k_scale,
                                             float v_scale, uint4& k_new, uint4& v_new) {
  float kf[E], vf[E];
  roped<T, E>(raw + kh, bias ? bias + kh : nullptr, cs, half, d0, kf);
  roped<T, E>(raw + vh, bias ? bias + vh : nullptr, cs, 0, d0, vf);  // half 0: no rotation
  k_new = pack_cached<T, C, E>(kf, k_scale);
  v_new = pack_cached<T, C, E>(vf, v_scale);
}

}  // namespace rill::kernels::decode_attn
