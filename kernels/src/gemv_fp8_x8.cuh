// The fp8 GEMV's x on the tensor cores as e4m3 too (Config::x8, the persistent kernel): the
// weights' bytes go into the mma as they are loaded, with no conversion, and x goes in as a few
// e4m3 terms whose sum is x exactly.
//
// Each x row m is scaled by a power of two p_m (its largest |x| lands in [128, 256)) and split:
// hi = e4m3(x p_m), lo = e4m3(x p_m - hi) (and a third term for fp16). A bf16 value has 8
// significant bits and each term takes 4, so hi + lo is x p_m exactly (fp16's 11 bits take 3
// terms), down to the terms' subnormal step 2^-9: values below 2^-10 of the row's largest are
// off by at most 2^-18 of it. The terms are the columns of the mma's B (m16n8k32 e4m3 x e4m3,
// fp32 accumulators): column 2m + i holds term i of row m (bf16; fp16: 4m + i, the fourth zero),
// so one mma multiplies a 16 x 32 tile of weights with every term of up to 4 (2) rows, the
// products are exact, and the sums of each step's two mmas (64 columns) are added in fp32. A
// lane's two columns are one row's terms (bf16), so its sums need only one add (fp16: a shuffle
// more) and a reshuffle into the mma layout the other kernels' epilogues take.
//
// In the k slots of the mma, lane (g, t) of step s places its 16-byte weight chunk c = 4s + t as
// A's k = 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 (bytes 0-7: first mma; bytes 8-15: second),
// and B must hold x's columns 16c .. 16c + 15 in the same slots: 16 contiguous bytes of column
// g's terms, one shared-memory load.
//
// Against the 16-bit mma of the other kernels this removes the e4m3 conversions (six
// instructions a weight pair) from the loop; the sums differ in rounding only (the tensor cores
// add each mma's 32 exact products with fewer than fp32's bits).
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fp8.cuh"
#include "gemv_fp8_tile.cuh"
#include "reduce.cuh"

namespace rill::kernels::fp8_gemv {

/// B columns per x row: its e4m3 terms, padded to a power of two (bf16 2, fp16 3 + 1 zero).
template <typename T>
inline constexpr int kX8Cols = std::is_same_v<T, __half> ? 4 : 2;
/// Most x rows one mma's 8 columns take.
template <typename T>
inline constexpr int kX8MaxRows = 8 / kX8Cols<T>;
/// Most shared memory for the terms, so two persistent CTAs still fit an SM.
constexpr int kX8MaxTermBytes = 32 * 1024;

/// Bytes from one column's terms to the next: K + 64, so the 8 lanes of a quarter warp (two
/// columns, four 16-byte chunks each) read distinct banks.
__host__ __device__ constexpr int x8_stride(int K) {
  return K + 64;
}
/// Shared memory of the terms of M rows (16-byte multiple).
template <typename T>
__host__ __device__ constexpr int x8_term_bytes(int M, int K) {
  return M * kX8Cols<T> * x8_stride(K);
}

/// c += A (16 x 32 e4m3, row) * B (32 x 8 e4m3, col), fp32 accumulators.
__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// Eight x values of a 16-byte vector as floats.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
  for (int i = 0; i < 8; ++i) f[i] = to_float<T>(e[i]);
}

/// Eight floats as e4m3 bytes (round to nearest even, saturating), and those bytes' values.
__device__ __forceinline__ uint2 to_e4m3x8(const float (&f)[8], float (&back)[8]) {
  uint32_t q[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = __nv_cvt_float2_to_fp8x2(make_float2(f[2 * i], f[2 * i + 1]), __NV_SATFINITE, __NV_E4M3);
    const float2 b = fp8x2_to_float2(q[i]);
    back[2 * i] = b.x, back[2 * i + 1] = b.y;
  }
  return make_uint2(q[0] | (q[1] << 16), q[2] | (q[3] << 16));
}

/// Builds the terms of x's M rows in `terms` (x8_term_bytes) and their 1 / p_m in inv[m] (NaN
/// for a row with an infinite value, which the e4m3 terms would saturate). Every thread of the
/// CTA (W warps) calls it after pdl_wait(); `red` is [M][W] floats of shared memory. Ends with
/// a barrier.
template <typename T, int W>
__device__ __forceinline__ void build_x8_terms(const T* __restrict__ x, uint8_t* terms, float* inv,
                                               float* red, int M, int K) {
  constexpr int kCols = kX8Cols<T>, kTerms = std::is_same_v<T, __half> ? 3 : 2;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, vecs = K / 8;
  const int stride = x8_stride(K);
  for (int m = 0; m < M; ++m) {
    const uint4* row = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m) * K);
    float a = 0.0f;
    for (int i = tid; i < vecs; i += W * 32) {
      float f[8];
      unpack8<T>(__ldg(row + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) a = fmaxf(a, fabsf(f[j]));
    }
    a = warp_reduce(a, Max{});
    if (lane == 0) red[m * W + warp] = a;
  }
  __syncthreads();
  for (int m = 0; m < M; ++m) {
    float amax = 0.0f;
#pragma unroll
    for (int v = 0; v < W; ++v) amax = fmaxf(amax, red[m * W + v]);
    int e = 0;
    if (amax > 0.0f && amax <= 3.0e38f) frexpf(amax, &e);  // amax < 2^e
    const int shift = min(max(8 - e, -126), 126);          // x 2^shift: amax < 256
    const float p = ldexpf(1.0f, shift);
    if (tid == 0) inv[m] = amax <= 3.0e38f ? ldexpf(1.0f, -shift) : NAN;
    const uint4* row = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m) * K);
    uint8_t* col = terms + m * kCols * stride;
    for (int i = tid; i < vecs; i += W * 32) {
      float f[8], back[8];
      unpack8<T>(__ldg(row + i), f);
#pragma unroll
      for (int j = 0; j < 8; ++j) f[j] *= p;
#pragma unroll
      for (int term = 0; term < kCols; ++term) {
        uint2 q = make_uint2(0, 0);
        if (term < kTerms) {
          q = to_e4m3x8(f, back);
#pragma unroll
          for (int j = 0; j < 8; ++j) f[j] -= back[j];  // exact: the rest of the value
        }
        *reinterpret_cast<uint2*>(col + term * stride + 8 * i) = q;
      }
    }
  }
  __syncthreads();
}

/// Step `s` of lane (g, t): the weight chunks lo (row g) and hi (row g + 8) of chunk c = 4s + t
/// times column g's terms; the step's two mmas are summed from zero, then added to acc (times
/// the rows' block scales sc, kBlock128). Columns past the live ones and chunks past K read
/// zeros.
template <bool BLOCK>
__device__ __forceinline__ void add_step_x8(float (&acc)[4], const uint4& lo, const uint4& hi,
                                            const uint8_t* terms, int stride, int live_cols,
                                            int chunks, int c, int g, const float (&sc)[2]) {
  uint4 b = make_uint4(0, 0, 0, 0);
  if (g < live_cols && c < chunks) b = *reinterpret_cast<const uint4*>(terms + g * stride + 16 * c);
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  mma_e4m3(d, lo.x, hi.x, lo.y, hi.y, b.x, b.y);
  mma_e4m3(d, lo.z, hi.z, lo.w, hi.w, b.z, b.w);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i] += BLOCK ? d[i] * sc[i >> 1] : d[i];
}

/// A warp's sums (lane (g, t): columns 2t, 2t + 1 of rows g and g + 8) as the other kernels'
/// mma layout (out[0][i]: x row 2t + (i & 1), w row g (+ 8 for i >= 2)), the terms added and
/// each x row's 1 / p_m applied. Every lane calls it.
template <typename T>
__device__ __forceinline__ void x8_sums_to_rows(const float (&acc)[4], const float* inv, int M,
                                                float (&out)[1][4]) {
  const int lane = threadIdx.x & 31, t = lane & 3;
  float lo = acc[0] + acc[1], hi = acc[2] + acc[3];  // one x row's terms (fp16: half of them)
  if constexpr (kX8Cols<T> == 4) {
    lo += shfl_xor(lo, 1);
    hi += shfl_xor(hi, 1);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = 2 * t + (i & 1);
    const int src_t = kX8Cols<T> == 4 ? 2 * m : m;  // the lane holding x row m's sums
    const float v = __shfl_sync(0xffffffffu, i < 2 ? lo : hi, (lane & ~3) | (src_t & 3));
    out[0][i] = m < M && src_t < 4 ? v * inv[m] : 0.0f;
  }
}

}  // namespace rill::kernels::fp8_gemv
