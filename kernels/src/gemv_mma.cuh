// Pieces shared by the decode GEMVs (gemv.cu for 16-bit weights, gemv_fp8.cu for e4m3): the
// streaming weight loads (into registers or a shared-memory ring), the m16n8k16 tensor-core
// product and the epilogue's stores (SiLU-and-mul fused).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "dispatch.cuh"
#include "rill/kernels/gemv.h"

namespace rill::kernels {

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

/// Warp 0, lane (g, t) of the CTA owning w rows n0 .. n0 + 15: s[i] is the finished sum of x row
/// m0 + 2t + (i & 1) and w row n0 + g (+ 8 for i >= 2). Writes y (kStore: [M, N] in T, or fp32
/// when y_f32) or silu(gate) * up (kSiluMul: the tile's rows n0 + g and n0 + 8 + g are a gate row
/// and its up row, written to y [M, N / 2] at column n0 / 2 + g, after bias when given).
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void store_lane_sums(const float (&s)[4], void* __restrict__ y,
                                                const T* __restrict__ bias, int M, int N,
                                                bool y_f32, int n0, int m0, int g, int t) {
  if constexpr (EPI == GemvEpilogue::kStore) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = m0 + 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
      if (m < M && n < N) {
        const int64_t at = static_cast<int64_t>(m) * N + n;
        if (y_f32) {
          static_cast<float*>(y)[at] = s[i];
        } else {
          static_cast<T*>(y)[at] = from_float<T>(s[i]);
        }
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = m0 + 2 * t + j;
      if (m < M) {
        float gate = to_float<T>(from_float<T>(s[j])), up = to_float<T>(from_float<T>(s[j + 2]));
        if (bias) gate += to_float<T>(bias[n0 + g]), up += to_float<T>(bias[n0 + 8 + g]);
        static_cast<T*>(y)[static_cast<int64_t>(m) * (N / 2) + n0 / 2 + g] =
            from_float<T>(silu(gate) * up);
      }
    }
  }
}

// The weight rings of both GEMVs (gemv.cu's gemv_ring_kernel, gemv_fp8.cu's ring kernel).
// A 16-byte copy of streamed weights into shared memory, with load_stream's L2::256B hint;
// !valid reads nothing and zero-fills.
__device__ __forceinline__ void cp_async_stream(uint32_t dst, const uint4* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Loads this thread's w chunks (rows g and g + 8 of its CTA's 16) of the U steps starting at
// step s0 (W warps apart; zeros past the end of K) into registers.
template <int W, int U>
__device__ __forceinline__ void load_w(const uint4* w_lo, const uint4* w_hi, int s0, int t,
                                       int chunks, uint4 (&lo)[U], uint4 (&hi)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = (s0 + u * W) * 4 + t;
    lo[u] = hi[u] = make_uint4(0, 0, 0, 0);
    if (c < chunks) {
      lo[u] = load_stream(w_lo + c);
      hi[u] = load_stream(w_hi + c);
    }
  }
}

// Issues this thread's copies of the U steps starting at s0 into the ring slot at `slot`
// (this thread's first 16 bytes of it); zeros from chunk `chunks` on (the end of K).
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

}  // namespace rill::kernels
