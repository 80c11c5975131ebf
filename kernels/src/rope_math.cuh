// RoPE arithmetic shared by the RoPE / K-V-write kernel (rope.cu) and the QKV GEMV's kRopeKv
// epilogue (gemv.cu), which must agree bit for bit.
#pragma once

#include <cstdint>

namespace rill::kernels {

constexpr double kTwoPi = 6.283185307179586476925286766559;

/// sin and cos of pos * inv_freq, the angle reduced modulo 2 pi in double precision (positions of
/// endless streams reach the millions, where a float product would lose the angle).
__device__ __forceinline__ void angle_sincos(int64_t pos, float inv_freq, float* sin_out,
                                             float* cos_out) {
  const double angle = fmod(static_cast<double>(pos) * static_cast<double>(inv_freq), kTwoPi);
  sincosf(static_cast<float>(angle), sin_out, cos_out);
}

/// The pair (x1, x2) rotated by the angle with cosine c and sine s (rotate-half convention):
/// y1 = x1 c - x2 s, y2 = x2 c + x1 s, each operation rounded on its own (no FMA contraction)
/// so that every caller gets the same bits.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, float& y1,
                                            float& y2) {
  y1 = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  y2 = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

}  // namespace rill::kernels
