// RoPE arithmetic shared by every kernel that rotates (rope_kv, the rope table, decode attention
// with RoPE fused in), so that they produce the same bits.
#pragma once

#include <cstdint>

namespace rill::kernels {

inline constexpr double kRopeTwoPi = 6.283185307179586476925286766559;

/// sin and cos of pos * inv_freq, the angle reduced modulo 2 pi in double precision (positions of
/// endless streams reach the millions; a float product would lose the angle).
__device__ __forceinline__ void angle_sincos(int64_t pos, float inv_freq, float* sin_out,
                                             float* cos_out) {
  const double angle = fmod(static_cast<double>(pos) * static_cast<double>(inv_freq), kRopeTwoPi);
  sincosf(static_cast<float>(angle), sin_out, cos_out);
}

/// The pair (x1, x2) = (dim i, dim i + rotary_dim / 2) rotated by the angle with cosine c and
/// sine s: x1 c - x2 s and x2 c + x1 s. Each product rounded on its own (no contraction into an
/// fma), so that every caller gets the same bits whatever the compiler makes of its context.
__device__ __forceinline__ float rope_first(float x1, float x2, float c, float s) {
  return __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
}
__device__ __forceinline__ float rope_second(float x1, float x2, float c, float s) {
  return __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

}  // namespace rill::kernels
