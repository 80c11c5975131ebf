// The fp8 GEMV's tile (gemv_fp8.cu's header comment has the layout): the e4m3 conversion, the
// mma steps, the norms' staging and epilogues, and the sum over the warps, shared by its kernels
// (gemv_fp8.cu, gemv_fp8_persistent.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_fp8.h>

#include "attention_mma.cuh"
#include "gemv_mma.cuh"
#include "reduce.cuh"
#include "rill/kernels/gemv_fp8.h"
#include "vec.cuh"

namespace rill::kernels::fp8_gemv {

constexpr int kRows = 16;              // rows of w per CTA (the mma's M)
constexpr int kChunk = 16;             // e4m3 per 16-byte load
constexpr int kStepCols = 4 * kChunk;  // columns one warp covers per step
static_assert(kFp8ScaleBlock % kStepCols == 0, "a step stays inside one scale block");

/// Two e4m3 values (bytes B0 and B0 + 1 of `v`, B0 even) as a pair of T, exactly. fp16:
/// cvt.rn.f16x2.e4m3x2. bf16 (no such instruction on Hopper): the sign and the 7
/// exponent+mantissa bits are moved into bf16's places, which gives the value times 2^-120
/// (subnormal e4m3 landing on subnormal bf16), and one bf16 x2 multiply by 2^120 makes it the
/// value (half-precision multiplies take subnormal inputs, so every code converts exactly and the
/// mma sees normal numbers).
template <typename T, int B0>
__device__ __forceinline__ uint32_t e4m3x2(uint32_t v) {
  static_assert(B0 == 0 || B0 == 2);
  if constexpr (std::is_same_v<T, __half>) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
        static_cast<__nv_fp8x2_storage_t>((v >> (8 * B0)) & 0xffffu), __NV_E4M3);
    return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
  } else {
    // prmt puts byte B0 in bits 0..7 and its sign in bits 8..15 (selector bit 3 replicates the
    // sign; __byte_perm ignores that bit), byte B0 + 1 likewise in the high half: each half is
    // [s x 8][s e e e e m m m]. The shift puts e e e e m m m at bits 4..10 and a sign copy at
    // bit 15; the mask clears the other copies (those shifted into the high half included).
    constexpr uint32_t kSel = B0 | ((B0 | 8) << 4) | ((B0 + 1) << 8) | ((B0 + 9) << 12);
    uint32_t h;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(h) : "r"(v), "n"(kSel));
    const uint32_t scaled = (h << 4) & 0x87f087f0u;  // the values times 2^-120
    const __nv_bfloat162 p =
        __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&scaled),
                __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80)));
    return *reinterpret_cast<const uint32_t*>(&p);
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

/// c[mt] += w chunk (rows g, g + 8) x x chunks (rows 8 mt + g): four mmas per x tile.
template <typename T, int MT>
__device__ __forceinline__ void mma_chunk(float (&c)[MT][4], const uint4& lo, const uint4& hi,
                                          const uint4 (&xv)[MT][2]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t wl = word(lo, j), wh = word(hi, j);
    const uint32_t a0 = e4m3x2<T, 0>(wl), a1 = e4m3x2<T, 0>(wh);
    const uint32_t a2 = e4m3x2<T, 2>(wl), a3 = e4m3x2<T, 2>(wh);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint4& xs = xv[mt][j / 2];  // x elements 8 (j / 2) .. + 7 of the chunk
      const uint32_t b0 = word(xs, 2 * (j % 2)), b1 = word(xs, 2 * (j % 2) + 1);
      mma_16816<T>(c[mt], a0, a1, a2, a3, b0, b1);
    }
  }
}

/// Fp8NormOut and Fp8NormIn as the kernels take them (null pointers: off).
template <typename T>
struct NormArgs {
  float* residual;
  const T* weight;
  float* out_sumsq;  // [M, gridDim.x]
  const float* in_sumsq;  // [M, K / kRows]
  float eps;
};

/// Where a CTA keeps the norms' inputs (shared memory): Fp8NormOut's residual rows [M][16] and
/// norm weight [16] of its 16 rows; Fp8NormIn's sums [M][K / 16] and the rows' 1 / rms.
template <typename T>
struct NormStage {
  float* res;    // static [kFp8GemvMaxRows * kRows]
  T* gamma;      // static [kRows], 16-byte aligned
  float* parts;  // dynamic [M * K / kRows]
  float* rs;     // static [kFp8GemvMaxRows]
};

__device__ __forceinline__ void cp_async4(uint32_t dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

/// Issues the copies of the norms' inputs into `st`, right after pdl_wait() (the previous kernel
/// wrote them). Uncommitted: they join the thread's next cp.async group; the kernels commit and
/// wait for everything before their final barrier.
template <typename T>
__device__ __forceinline__ void stage_norm_inputs(const NormArgs<T>& nrm, const NormStage<T>& st,
                                                  int M, int N, int K, int n0) {
  const int tid = threadIdx.x;
  if (nrm.residual) {
    if (tid < 4 * M) {  // 4 x 16 bytes of each residual row
      const int m = tid >> 2, q = tid & 3;
      attn::cp_async16(attn::smem_addr(st.res + m * kRows + 4 * q),
                       nrm.residual + static_cast<int64_t>(m) * N + n0 + 4 * q, true);
    } else if (tid < 4 * M + 2) {  // 2 x 16 bytes of the weight
      const int q = tid - 4 * M;
      attn::cp_async16(attn::smem_addr(st.gamma + 8 * q), nrm.weight + n0 + 8 * q, true);
    }
  }
  if (nrm.in_sumsq) {
    const int count = M * (K / kRows);
    if (count % 4 == 0 && (reinterpret_cast<uintptr_t>(nrm.in_sumsq) & 15) == 0) {
      for (int i = 4 * tid; i < count; i += 4 * blockDim.x)  // 16 bytes a copy
        attn::cp_async16(attn::smem_addr(st.parts + i), nrm.in_sumsq + i, true);
    } else {
      for (int i = tid; i < count; i += blockDim.x)
        cp_async4(attn::smem_addr(st.parts + i), nrm.in_sumsq + i);
    }
  }
}

/// Fp8NormIn: rs[m] = 1 / rms of x row m (m < M) from the staged sums, by warp m % W: lane l
/// adds sums l, l + 32, ... in order, then a butterfly. After the barrier that follows the
/// copies; warp 0 reads rs after the next one.
template <typename T, int W>
__device__ __forceinline__ void norm_in_factors(const NormArgs<T>& nrm, const NormStage<T>& st,
                                                int M, int K) {
  if (!nrm.in_sumsq) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, parts = K / kRows;
  for (int m = warp; m < M; m += W) {
    float ss = 0.0f;
    for (int i = lane; i < parts; i += 32) ss += st.parts[m * parts + i];
    ss = warp_reduce(ss, Sum{});
    if (lane == 0) st.rs[m] = rsqrtf(ss / static_cast<float>(K) + nrm.eps);
  }
}

/// Fp8NormOut's epilogue, warp 0, lane (g, t), x tile mt (s as store_tile's): the residual add,
/// y = dtype(residual * weight), and the rows' sums of squares over the CTA's 16 rows.
template <typename T>
__device__ __forceinline__ void store_norm_out(const float (&s)[4], T* __restrict__ y,
                                               const NormArgs<T>& nrm, const NormStage<T>& st,
                                               int M, int N, int n0, int g, int t, int mt) {
  float ss[2] = {0.0f, 0.0f};  // x rows 8 mt + 2t and + 1
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = 8 * mt + 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
    if (m < M && n < N) {
      const int64_t at = static_cast<int64_t>(m) * N + n;
      const float r = st.res[m * kRows + n - n0] + to_float<T>(from_float<T>(s[i]));
      nrm.residual[at] = r;
      y[at] = from_float<T>(r * to_float<T>(st.gamma[n - n0]));
      ss[i & 1] += r * r;
    }
  }
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {  // over g: the lanes of the other 14 rows
    ss[0] += shfl_xor(ss[0], o);
    ss[1] += shfl_xor(ss[1], o);
  }
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 8 * mt + 2 * t + j;
      if (m < M) nrm.out_sumsq[static_cast<int64_t>(m) * (N / kRows) + n0 / kRows] = ss[j];
    }
  }
}

/// Warp 0, lane (g, t), x tile mt: s[i] is the sum of x row m = 8 mt + 2t + (i & 1) and w row
/// n0 + g (+ 8 for i >= 2), already scaled. Writes y (kStore) or silu(gate) * up (kSiluMul).
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void store_tile(const float (&s)[4], void* __restrict__ y,
                                           const T* __restrict__ bias, const NormArgs<T>& nrm,
                                           const NormStage<T>& st, int M, int N, bool y_f32, int n0,
                                           int g, int t, int mt) {
  if constexpr (EPI == GemvEpilogue::kStore) {
    if (nrm.residual) {
      store_norm_out<T>(s, static_cast<T*>(y), nrm, st, M, N, n0, g, t, mt);
      return;
    }
  }
  store_lane_sums<T, EPI>(s, y, bias, M, N, y_f32, n0, 8 * mt, g, t);
}

/// This thread's place in its CTA's tile, as both kernels lay it out: warp `warp`, lane
/// (g = lane / 4, t = lane % 4) of the CTA owning w rows n0 .. n0 + 15, which reads w rows n0 + g
/// and n0 + g + 8 (r_lo, r_hi) and x rows 8 mt + g over `steps` steps of 4 16-byte chunks
/// (`chunks` per row). Rows past N are clamped (loaded, never stored), x rows past M are zero
/// columns of B (x_live false).
template <typename T, int MT>
struct LaneTile {
  int warp, g, t, n0, chunks, steps, r_lo, r_hi;
  const uint4 *w_lo, *w_hi, *x_row[MT];
  bool x_live[MT];
  __device__ __forceinline__ LaneTile(const T* x, const uint8_t* w, int M, int N, int K)
      : LaneTile(x, w, M, N, K, blockIdx.x * kRows) {}
  __device__ __forceinline__ LaneTile(const T* x, const uint8_t* w, int M, int N, int K, int row0)
      : warp(threadIdx.x >> 5),
        g((threadIdx.x & 31) >> 2),
        t(threadIdx.x & 3),
        n0(row0),
        chunks(K / kChunk),
        steps((K / kChunk + 3) / 4),
        r_lo(min(n0 + g, N - 1)),
        r_hi(min(n0 + g + 8, N - 1)),
        w_lo(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(r_lo) * K)),
        w_hi(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(r_hi) * K)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m = 8 * mt + g;
      x_live[mt] = m < M;
      x_row[mt] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(m, M - 1)) * K);
    }
  }
};

/// Step s's x chunks (zeros past the end of K and for dead rows) and, kBlock128, the scales of
/// rows r_lo and r_hi for its 128-column block (zeros past the last step).
template <typename T, int MT, bool BLOCK>
__device__ __forceinline__ void load_step(const LaneTile<T, MT>& L, const float* __restrict__ scale,
                                          int N, int s, uint4 (&xv)[MT][2], float (&sc)[2]) {
  const int c = s * 4 + L.t;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    xv[mt][0] = xv[mt][1] = make_uint4(0, 0, 0, 0);
    if (c < L.chunks && L.x_live[mt]) {
      xv[mt][0] = __ldg(L.x_row[mt] + 2 * c);
      xv[mt][1] = __ldg(L.x_row[mt] + 2 * c + 1);
    }
  }
  if constexpr (BLOCK) {
    const float* row = scale + static_cast<int64_t>(s * kStepCols / kFp8ScaleBlock) * N;
    sc[0] = s < L.steps ? __ldg(row + L.r_lo) : 0.0f;
    sc[1] = s < L.steps ? __ldg(row + L.r_hi) : 0.0f;
  }
}

/// load_step's block scales alone (kBlock128).
template <typename T, int MT>
__device__ __forceinline__ void load_scales(const LaneTile<T, MT>& L,
                                            const float* __restrict__ scale, int N, int s,
                                            float (&sc)[2]) {
  const float* row = scale + static_cast<int64_t>(s * kStepCols / kFp8ScaleBlock) * N;
  sc[0] = s < L.steps ? __ldg(row + L.r_lo) : 0.0f;
  sc[1] = s < L.steps ? __ldg(row + L.r_hi) : 0.0f;
}

/// acc += one step: the chunk's mmas straight into the sums (kPerRow), or into a zeroed tile that
/// is scaled by the step's block scales and then added (kBlock128).
template <typename T, int MT, bool BLOCK>
__device__ __forceinline__ void add_step(float (&acc)[MT][4], const uint4& lo, const uint4& hi,
                                         const uint4 (&xv)[MT][2], const float (&sc)[2]) {
  if constexpr (BLOCK) {
    float step[MT][4] = {};
    mma_chunk<T, MT>(step, lo, hi, xv);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][i] += step[mt][i] * sc[i >> 1];
  } else {
    mma_chunk<T, MT>(acc, lo, hi, xv);
  }
}

/// This warp's sums into its row of the partials ([W][MT][4][32] floats of shared memory).
template <int MT>
__device__ __forceinline__ void store_partials(float (*partial)[MT][4][32], int warp,
                                               const float (&acc)[MT][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][mt][i][lane] = acc[mt][i];
}

/// Warp 0, lane (g, t): the partials of the W warps in warp order, the row scales and 1 / rms:
/// s[mt][i] is the sum of x row 8 mt + 2t + (i & 1) and w row n0 + g (+ 8 for i >= 2).
template <typename T, int W, int MT, bool BLOCK>
__device__ __forceinline__ void lane_sums(const LaneTile<T, MT>& L,
                                          const float (*partial)[MT][4][32],
                                          const float* __restrict__ scale, const NormArgs<T>& nrm,
                                          const NormStage<T>& st, int M, float (&s)[MT][4]) {
  const int lane = threadIdx.x & 31;
  const float row_scale[2] = {BLOCK ? 1.0f : __ldg(scale + L.r_lo),
                              BLOCK ? 1.0f : __ldg(scale + L.r_hi)};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float sum = partial[0][mt][i][lane];
#pragma unroll
      for (int v = 1; v < W; ++v) sum += partial[v][mt][i][lane];
      sum *= row_scale[i >> 1];
      const int m = 8 * mt + 2 * L.t + (i & 1);
      if (nrm.in_sumsq && m < M) sum *= st.rs[m];
      s[mt][i] = sum;
    }
  }
}

/// Warp 0's part of sum_warps_and_store: lane_sums, then the epilogue.
template <typename T, int W, int MT, bool BLOCK, GemvEpilogue EPI>
__device__ __forceinline__ void reduce_and_store(const LaneTile<T, MT>& L,
                                                 const float (*partial)[MT][4][32],
                                                 const float* __restrict__ scale,
                                                 void* __restrict__ y, const T* __restrict__ bias,
                                                 const NormArgs<T>& nrm, const NormStage<T>& st,
                                                 int M, int N, bool y_f32) {
  float s[MT][4];
  lane_sums<T, W, MT, BLOCK>(L, partial, scale, nrm, st, M, s);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    store_tile<T, EPI>(s[mt], y, bias, nrm, st, M, N, y_f32, L.n0, L.g, L.t, mt);
}

/// The W warps' sums added in warp order through `partial` ([W][MT][4][32] floats of shared
/// memory), the row scales (kPerRow) and Fp8NormIn's 1 / rms, then the epilogue by warp 0. Every
/// thread calls it, after a barrier that follows the norms' staged copies.
template <typename T, int W, int MT, bool BLOCK, GemvEpilogue EPI>
__device__ __forceinline__ void sum_warps_and_store(
    const LaneTile<T, MT>& L, const float (&acc)[MT][4], float (*partial)[MT][4][32],
    const float* __restrict__ scale, void* __restrict__ y, const T* __restrict__ bias,
    const NormArgs<T>& nrm, const NormStage<T>& st, int M, int N, int K, bool y_f32) {
  store_partials<MT>(partial, L.warp, acc);
  norm_in_factors<T, W>(nrm, st, M, K);
  __syncthreads();
  if (L.warp == 0)
    reduce_and_store<T, W, MT, BLOCK, EPI>(L, partial, scale, y, bias, nrm, st, M, N, y_f32);
}

}  // namespace rill::kernels::fp8_gemv
