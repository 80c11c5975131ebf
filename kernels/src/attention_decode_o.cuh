// Attention's output projection fused into decode attention (DecodeOProjection): one sequence,
// fp8 W_o, head_dim 128, one query head per CTA, the splits of a head merged in a cluster.
//
// Why: at batch 1 attention is latency-bound (a few microseconds of dependent round trips for a
// few MB of K/V) and the o GEMV after it can only start computing once attention has finished;
// its CTAs cannot all be resident beside attention's, so most of its 16.8 MB (Llama-2-7B) stream
// after attention: about 7 us a layer on the critical path. Here each attention CTA loads its
// share of W_o into shared memory while it attends, so those bytes stream during attention:
//   - head h's cluster of S splits owns W_o's columns [h * 128, h * 128 + 128); rank r of the
//     cluster owns rows [r * R, r * R + R), R = N / S (64 KB of e4m3 at N = 4096, S = 8), copied
//     by one bulk copy (cp.async.bulk, completion on an mbarrier) issued with the K/V prologue;
//   - after the cluster merge every rank holds the head's output (rounded to the dtype, as the
//     unfused kernel stores it) and multiplies it into its rows: partial[h][n], fp32 (m16n8k16
//     mma, the weights as A, the head's output as B's column 0);
//   - the CTAs of one rank count themselves on counter[r]; the last of the num_heads to arrive
//     adds the partials in head order (deterministic), applies the per-row scale, and runs
//     Fp8NormOut's epilogue: residual += dtype(s), y = dtype(residual * weight), sums of squares
//     per 16 rows.
// The sums run in another order than the GEMV's: the result is within rounding of the unfused
// pair, not bit-identical (tests/kernels/attention_o_fused_test.cc).
//
// W_o is read in a permuted copy (launch_permute_o_weight) laid out for that mma: for head h,
// 16-row tile nt (rows 16 nt .. + 15), 64-column block kb of the head and half (0: rows g, 1:
// rows g + 8), 32 lanes x 16 bytes, lane l = 4g + t holding row 16 nt + g (+ 8) at the head's
// columns 64 kb + 16 t .. + 15. A rank's rows are then one contiguous range (R x 128 bytes), and
// the lanes of a warp read 512 contiguous bytes (no bank conflicts).
#pragma once

#include <cstdint>

#include "attention_decode_merge.cuh"
#include "dispatch.cuh"
#include "gemv_fp8_tile.cuh"
#include "gemv_mma.cuh"
#include "reduce.cuh"

namespace rill::kernels::decode_attn {

constexpr int kOHeadDim = 128;                // head_dim of the fused projection
constexpr int kOTileBytes = 16 * kOHeadDim;   // one 16-row tile of one head, permuted
constexpr int kOMaxSliceBytes = 64 * 1024;    // a rank's rows: R x 128 bytes at most
constexpr int kOBulkBytes = 16 * 1024;        // one cp.async.bulk
// Dynamic shared memory of a fused CTA: the slice, the head's output (dtype), the last-CTA flag
// and the mbarrier.
constexpr int kOXoOffset = kOMaxSliceBytes;
constexpr int kOFlagOffset = kOXoOffset + kOHeadDim * 4;
constexpr int kOBarOffset = kOFlagOffset + 16;
constexpr int kOSmemBytes = kOBarOffset + 16;

__device__ __forceinline__ uint32_t o_smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Thread 0: the mbarrier, then the bulk copies of this CTA's slice of W_o (head h, rank r).
/// Weights are no kernel's output: issued before pdl_wait().
__device__ __forceinline__ void o_issue(const DecodeArgs& a, unsigned char* dsm, int h, int rank) {
  if (threadIdx.x != 0) return;
  const int rows = a.o.N / a.num_splits;
  const uint32_t bytes = static_cast<uint32_t>(rows) * kOHeadDim;
  const uint32_t bar = o_smem_addr(dsm + kOBarOffset);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  if (a.o.probe == 1) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
    return;
  }
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
  const unsigned char* src = static_cast<const unsigned char*>(a.o.w) +
                             (static_cast<int64_t>(h) * (a.o.N / 16) + rank * (rows / 16)) *
                                 kOTileBytes;
  for (uint32_t off = 0; off < bytes; off += kOBulkBytes) {
    const uint32_t n = bytes - off < kOBulkBytes ? bytes - off : kOBulkBytes;
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(o_smem_addr(dsm + off)), "l"(src + off), "r"(n), "r"(bar)
        : "memory");
  }
}

/// Every thread: waits until the slice has landed (phase 0 of the mbarrier).
__device__ __forceinline__ void o_wait(unsigned char* dsm) {
  const uint32_t bar = o_smem_addr(dsm + kOBarOffset);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar)
        : "memory");
  } while (!done);
}

/// After the cluster merge left head h's output in dsm + kOXoOffset (dtype): this CTA's partial
/// sums into the workspace, then (the last CTA of rank `rank`) the sum over heads and the
/// epilogue. The slice's rows: rank * R .. + R - 1.
template <typename T>
__device__ __forceinline__ void o_project(const DecodeArgs& a, unsigned char* dsm, int h,
                                          int rank) {
  const int N = a.o.N, R = N / a.num_splits, tiles = R / 16;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const T* xo = reinterpret_cast<const T*>(dsm + kOXoOffset);
  // B's column 0 (lanes g == 0): the head's output at columns 64 kb + 16 t .. + 15, as pairs.
  uint32_t xb[2][8];
#pragma unroll
  for (int kb = 0; kb < 2; ++kb) {
    uint4 v0 = make_uint4(0, 0, 0, 0), v1 = v0;
    if (g == 0) {
      v0 = *reinterpret_cast<const uint4*>(xo + 64 * kb + 16 * t);
      v1 = *reinterpret_cast<const uint4*>(xo + 64 * kb + 16 * t + 8);
    }
    xb[kb][0] = v0.x, xb[kb][1] = v0.y, xb[kb][2] = v0.z, xb[kb][3] = v0.w;
    xb[kb][4] = v1.x, xb[kb][5] = v1.y, xb[kb][6] = v1.z, xb[kb][7] = v1.w;
  }
  o_wait(dsm);
  if (a.o.probe == 2) return;
  const uint4* wsm = reinterpret_cast<const uint4*>(dsm);
  float* part = a.o.partials + static_cast<int64_t>(h) * N + rank * R;
  const bool block = a.o.scale_block;
  for (int tile = warp; tile < tiles; tile += kDecodeThreads / 32) {
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, c2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
      const uint4 lo = wsm[(tile * 4 + kb * 2) * 32 + lane];
      const uint4 hi = wsm[(tile * 4 + kb * 2 + 1) * 32 + lane];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t wl = fp8_gemv::word(lo, j), wh = fp8_gemv::word(hi, j);
        mma_16816<T>(j % 2 ? c2 : c, fp8_gemv::e4m3x2<T, 0>(wl), fp8_gemv::e4m3x2<T, 0>(wh),
                     fp8_gemv::e4m3x2<T, 2>(wl), fp8_gemv::e4m3x2<T, 2>(wh), xb[kb][2 * j],
                     xb[kb][2 * j + 1]);
      }
    }
    if (t == 0) {  // C[g][0] and C[g + 8][0]: rows g and g + 8 of the tile
      const int n = rank * R + tile * 16 + g;
      float lo = c[0] + c2[0], hi = c[2] + c2[2];
      if (block) {  // head h's columns are scale block h (head_dim 128)
        lo *= a.o.scale[static_cast<int64_t>(h) * N + n];
        hi *= a.o.scale[static_cast<int64_t>(h) * N + n + 8];
      }
      part[tile * 16 + g] = lo;
      part[tile * 16 + g + 8] = hi;
    }
  }

  // The last of the rank's num_heads CTAs sums the heads (same pattern as merge_splits_if_last).
  if (a.o.probe == 3) return;
  int* s_last = reinterpret_cast<int*>(dsm + kOFlagOffset);
  int* counter = a.o.counters + rank;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *s_last = atomicAdd(counter, 1) == a.num_heads - 1;
  __syncthreads();
  if (!*s_last) return;
  __threadfence();
  if (threadIdx.x == 0) atomicExch(counter, 0);  // self-cleaning: next layer, next replay

  // Thread i: rows n0 + 4i .. + 3 of each 4 * 128-row pass, 16 heads' loads in flight at once.
  constexpr int kHeadsInFlight = 16;
  const T* gamma = static_cast<const T*>(a.o.norm_weight);
  T* y = static_cast<T*>(a.o.y);
  for (int n = rank * R + 4 * threadIdx.x; n < rank * R + R; n += 4 * kDecodeThreads) {
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int h0 = 0; h0 < a.num_heads; h0 += kHeadsInFlight) {
      float4 v[kHeadsInFlight];
#pragma unroll
      for (int j = 0; j < kHeadsInFlight; ++j)
        v[j] = h0 + j < a.num_heads
                   ? __ldcg(reinterpret_cast<const float4*>(a.o.partials +
                                                            static_cast<int64_t>(h0 + j) * N + n))
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int j = 0; j < kHeadsInFlight; ++j) s.x += v[j].x, s.y += v[j].y, s.z += v[j].z, s.w += v[j].w;
    }
    if (!block) {
      const float4 sc = *reinterpret_cast<const float4*>(a.o.scale + n);
      s.x *= sc.x, s.y *= sc.y, s.z *= sc.z, s.w *= sc.w;
    }
    float4 r = *reinterpret_cast<const float4*>(a.o.residual + n);
    r.x += to_float<T>(from_float<T>(s.x));
    r.y += to_float<T>(from_float<T>(s.y));
    r.z += to_float<T>(from_float<T>(s.z));
    r.w += to_float<T>(from_float<T>(s.w));
    *reinterpret_cast<float4*>(a.o.residual + n) = r;
    y[n] = from_float<T>(r.x * to_float<T>(gamma[n]));
    y[n + 1] = from_float<T>(r.y * to_float<T>(gamma[n + 1]));
    y[n + 2] = from_float<T>(r.z * to_float<T>(gamma[n + 2]));
    y[n + 3] = from_float<T>(r.w * to_float<T>(gamma[n + 3]));
    // Sums of squares per 16 rows: 4 here, then the 4 lanes of the 16 rows, in lane order.
    float ss = r.x * r.x + r.y * r.y + r.z * r.z + r.w * r.w;
    ss += shfl_xor(ss, 1);
    ss += shfl_xor(ss, 2);
    if (threadIdx.x % 4 == 0) a.o.sumsq[n / 16] = ss;
  }
}

}  // namespace rill::kernels::decode_attn
