// Device pieces of the decode GEMV (gemv.cu) that the decode chain (decode_chain.cu) shares, so
// that both compute every tile with the same loads, the same mma order and the same sums: the
// tile geometry, the streaming loads and ring copies of the weights, the mma, the warps'
// fixed-order reduction and the epilogues. See gemv.cu for the scheme.
#pragma once

#include <type_traits>

#include "attention_mma.cuh"
#include "dispatch.cuh"
#include "rill/kernels/gemv.h"
#include "vec.cuh"

namespace rill::kernels::gemv_tile {

constexpr int kRows = 16;  // rows of w per CTA (the mma's M)
constexpr int kMaxM = 8;   // the mma's N

// Streaming load of weights, read once: keep them out of L1 so x stays there. The L2::256B hint
// makes each miss fetch 256 bytes (a warp covers 64 contiguous bytes of each of its 16 rows per
// step, and its neighbours the next ones): Llama-2-7B batch 1 went from 5.49 to 5.25 ms.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// c += A (16 x 16, row) * B (16 x 8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));  // the activation kernel's formula
}

/// Warp 0, lane (g, t): s[i] is the sum of x row m = 2t + (i & 1) and w row n0 + g (+ 8 for
/// i >= 2). Writes y (kStore) or silu(gate) * up (kSiluMul, see gemv.h).
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void epilogue(const float (&s)[4], void* __restrict__ y,
                                         const T* __restrict__ bias, int M, int N, bool y_f32,
                                         int n0, int g, int t) {
  if constexpr (EPI == GemvEpilogue::kStore) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
      if (m < M && n < N) {
        const int64_t at = static_cast<int64_t>(m) * N + n;
        if (y_f32) {
          static_cast<float*>(y)[at] = s[i];
        } else {
          static_cast<T*>(y)[at] = from_float<T>(s[i]);
        }
      }
    }
  } else {  // rows n0 + g (gate) and n0 + 8 + g (up) -> output n0 / 2 + g
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 2 * t + j;
      if (m < M) {
        float gate = to_float<T>(from_float<T>(s[j])), up = to_float<T>(from_float<T>(s[j + 2]));
        if (bias) gate += to_float<T>(bias[n0 + g]), up += to_float<T>(bias[n0 + 8 + g]);
        static_cast<T*>(y)[static_cast<int64_t>(m) * (N / 2) + n0 / 2 + g] =
            from_float<T>(silu(gate) * up);
      }
    }
  }
}

/// This thread's place in its CTA's tile, as both kernels lay it out: warp `warp`, lane
/// (g = lane / 4, t = lane % 4) of the CTA owning w rows n0 .. n0 + 15, which reads w rows n0 + g
/// and n0 + g + 8 and x row g over `steps` steps of 4 16-byte chunks (`chunks` per row). Rows past
/// N are clamped (loaded, never stored) so that no load needs a row predicate; x rows past M are
/// zero columns of B (x_live false).
template <typename T>
struct LaneTile {
  int warp, g, t, n0, chunks, steps;
  const uint4 *w_lo, *w_hi, *x_row;
  bool x_live;
  __device__ __forceinline__ LaneTile(const T* x, const T* w, int M, int N, int K)
      : warp(threadIdx.x >> 5),
        g((threadIdx.x & 31) >> 2),
        t(threadIdx.x & 3),
        n0(blockIdx.x * kRows),
        chunks(K / kVec),
        steps((K / kVec + 3) / 4),
        w_lo(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K)),
        w_hi(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K)),
        x_row(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(g, M - 1)) * K)),
        x_live(g < M) {}
};

/// The W warps' accumulators added in warp order through `partial` ([W][4][32] floats of shared
/// memory), then the epilogue by warp 0. Every thread of the CTA calls it.
template <typename T, int W, GemvEpilogue EPI>
__device__ __forceinline__ void sum_warps_and_store(const float (&acc)[4], float (*partial)[4][32],
                                                    void* __restrict__ y,
                                                    const T* __restrict__ bias, int M, int N,
                                                    bool y_f32, int n0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float sum[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[i] = partial[0][i][lane];
#pragma unroll
    for (int v = 1; v < W; ++v) sum[i] += partial[v][i][lane];
  }
  epilogue<T, EPI>(sum, y, bias, M, N, y_f32, n0, lane >> 2, lane & 3);
}

// 16-byte copy of streamed weights into shared memory, L2::256B as load_stream; !valid reads
// nothing and zero-fills.
__device__ __forceinline__ void cp_async_stream(uint32_t dst, const uint4* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Issues this thread's copies of the U steps starting at s0 into the ring slot at `slot`
// (this thread's first 16 bytes of it); zeros past the end of K.
template <int W, int U>
__device__ __forceinline__ void copy_w(uint32_t slot, const uint4* w_lo, const uint4* w_hi, int s0,
                                       int t, int chunks) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = (s0 + u * W) * 4 + t;
    const bool valid = c < chunks;
    cp_async_stream(slot + (2 * u) * W * 32 * 16, valid ? w_lo + c : w_lo, valid);
    cp_async_stream(slot + (2 * u + 1) * W * 32 * 16, valid ? w_hi + c : w_hi, valid);
  }
}

template <int W, int U, int S>
constexpr int ring_bytes() {
  return S * U * 2 * W * 32 * 16;
}

}  // namespace rill::kernels::gemv_tile
