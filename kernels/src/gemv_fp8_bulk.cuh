// gemv_fp8.cu's bulk-copy kernel: persistent CTAs whose weights arrive through the copy engine.
#pragma once

#include "bulk_copy.cuh"
#include "gemv_fp8_persistent.cuh"
#include "gemv_fp8_tile.cuh"
#include "launch.cuh"

namespace rill::kernels::fp8_gemv {

// A ring stage: 1 KB of each of a tile's 16 rows (16 of a warp's 64-column steps), the even rows
// first, then the odd ones 64 bytes further on, so that the 8 lanes of a quarter warp (rows g and
// g + 1, chunks t) read 16-byte chunks from distinct banks.
constexpr int kStageCols = 1024;
constexpr int kOddRows = 8 * kStageCols + 64;
constexpr int kStageBytes = kOddRows + 8 * kStageCols;
__host__ __device__ constexpr int stage_row(int r) {
  return (r & 1) * kOddRows + (r >> 1) * kStageCols;
}

/// x rows staged in shared memory (their pitch 16 bytes more than a row, so that the lanes of a
/// quarter warp, rows g and g + 1, read distinct banks), when `x_pitch` > 0: rows 8 mt + g of step
/// s's chunks as load_step loads them from global memory, and the block scales from there.
template <typename T, int MT, bool BLOCK>
__device__ __forceinline__ void load_step_staged(const uint4* xs, int x_pitch,
                                                 const LaneTile<T, MT>& L,
                                                 const float* __restrict__ scale, int M, int N,
                                                 int s, uint4 (&xv)[MT][2], float (&sc)[2]) {
  const int c = s * 4 + L.t;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = 8 * mt + L.g;
    xv[mt][0] = xv[mt][1] = make_uint4(0, 0, 0, 0);
    if (c < L.chunks && m < M) {
      xv[mt][0] = xs[m * x_pitch + 2 * c];
      xv[mt][1] = xs[m * x_pitch + 2 * c + 1];
    }
  }
  if constexpr (BLOCK) {
    const float* row = scale + static_cast<int64_t>(s * kStepCols / kFp8ScaleBlock) * N;
    sc[0] = s < L.steps ? __ldg(row + L.r_lo) : 0.0f;
    sc[1] = s < L.steps ? __ldg(row + L.r_hi) : 0.0f;
  }
}

/// Bytes of dynamic shared memory before the staged x and the norms' inputs: the ring, the
/// barriers, the partials.
template <int C, int S, int MT>
constexpr int bulk_fixed_bytes() {
  return S * kStageBytes + (2 * S + 4) * 8 + 2 * C * MT * 4 * 32 * 4;
}

// gemv_fp8_persistent_kernel with its weights staged by the copy engine and its epilogues taken
// off the weight stream. Three roles:
//  - C consumer warps compute exactly as that kernel's C warps do (warp w takes steps w, w + C,
//    ... of every tile: the sums of the register kernel with C warps, bit for bit);
//  - the producer warp streams the CTA's tiles through a ring of S stages with cp.async.bulk, one
//    1 KB copy per row and stage, each stage completing on its `full` mbarrier and given back on
//    its `empty` one once every consumer warp has read it;
//  - the epilogue warp stages the norms' inputs, then adds each tile's partial sums (double
//    buffered, on mbarriers of their own) and stores the tile, while the consumers go on.
// A copy instruction moves 1 KB where a cp.async moves 16 bytes, and the ring holds S whole
// stages in flight; no consumer waits for another warp's epilogue, which would stop the ring's
// refills (a stage is given back only once every consumer has read it). The producer never
// waits for the previous kernel: its first S stages stream before the PDL wait.
//
// x_pitch > 0: the consumers copy x into shared memory ([M][x_pitch] 16-byte chunks) after the PDL
// wait and read each step's x there, instead of from global memory one step ahead.
//
// Shared memory: the ring [S][kStageBytes]; full[S], empty[S], pfull[2], pempty[2]; the partials
// [2][C][MT][4][32] floats; the staged x; then the norms' inputs as gemv_fp8_persistent_kernel's.
template <typename T, int C, int S, int MT, bool BLOCK, GemvEpilogue EPI>
__global__ void __launch_bounds__((C + 2) * 32, 2)
    gemv_fp8_bulk_kernel(const T* __restrict__ x,          // [M, K]
                         const uint8_t* __restrict__ w,    // [N, K] e4m3
                         const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                         void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm, int M,
                         int N, int K, bool y_f32, int x_pitch) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + S * kStageBytes);
  uint64_t* const empty = full + S;
  uint64_t* const pfull = empty + S;  // a tile's partials written: every consumer thread
  uint64_t* const pempty = pfull + 2;  // and read: the epilogue warp
  constexpr int kPartialFloats = C * MT * 4 * 32;
  float* const partials = reinterpret_cast<float*>(pempty + 2);  // [2][kPartialFloats]
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);  // [M][x_pitch]
  float* const norm_smem = reinterpret_cast<float*>(xs + M * x_pitch);
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int stages = (K + kStageCols - 1) / kStageCols;                        // a tile's
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) bulk::mbar_init(full + i, 1), bulk::mbar_init(empty + i, C);
    for (int b = 0; b < 2; ++b) bulk::mbar_init(pfull + b, C * 32), bulk::mbar_init(pempty + b, 1);
    bulk::fence_init();
  }
  __syncthreads();
  pdl_launch_dependents();

  if (warp == C) {  // the producer: lane r copies row r of each stage (rows past N: row N - 1)
    for (int i = 0; i < tiles * stages; ++i) {
      const int slot = i % S, ti = i / stages, k0 = (i % stages) * kStageCols;
      const uint32_t cols = min(kStageCols, K - k0);
      if (i >= S) bulk::mbar_wait(empty + slot, (i / S - 1) & 1);
      if (lane == 0) bulk::mbar_arrive_expect(full + slot, kRows * cols);
      __syncwarp();
      if (lane < kRows) {
        const int row = min((static_cast<int>(blockIdx.x) + ti * G) * kRows + lane, N - 1);
        bulk::copy(smem + slot * kStageBytes + stage_row(lane),
                   w + static_cast<int64_t>(row) * K + k0, cols, full + slot);
      }
    }
    return;  // reads nothing another kernel writes, writes nothing global
  }
  pdl_wait();

  if (warp == C + 1) {  // the epilogue
    const int parts = nrm.in_sumsq ? (M * (K / kRows) + 3) / 4 * 4 : 0;
    float* const res = norm_smem + parts;
    const NormStage<T> st_all{
        res, reinterpret_cast<T*>(res + (nrm.residual ? tiles * M * kRows : 0)), norm_smem, rs};
    if (nrm.residual || nrm.in_sumsq) {
      stage_norm_inputs_tiles<T>(nrm, st_all, M, N, K, tiles, lane, 32);
      attn::cp_async_commit();
      attn::cp_async_wait<0>();
      __syncwarp();
      norm_in_factors<T>(nrm, st_all, M, K, 0, 1);
      __syncwarp();
    }
    for (int ti = 0; ti < tiles; ++ti) {
      const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
      bulk::mbar_wait(pfull + (ti & 1), (ti >> 1) & 1);
      NormStage<T> st = st_all;
      st.res += ti * M * kRows;
      st.gamma += ti * kRows;
      reduce_and_store<T, C, MT, BLOCK, EPI>(
          L, reinterpret_cast<const float(*)[MT][4][32]>(partials + (ti & 1) * kPartialFloats),
          scale, y, bias, nrm, st, M, N, y_f32);
      __syncwarp();
      if (lane == 0) bulk::mbar_arrive(pempty + (ti & 1));
    }
    return;
  }

  // The consumers: gemv_fp8_persistent_kernel's loop with the ring's reads in place of its copies.
  const int t = lane & 3, g = lane >> 2;
  const int chunks = K / kChunk, steps = (chunks + 3) / 4;
  const int per_tile = warp < steps ? (steps - warp + C - 1) / C : 0;  // this warp's steps a tile
  if (x_pitch > 0) {
    const int row_chunks = K / 8;  // 16-byte chunks of an x row
    for (int j = threadIdx.x; j < M * row_chunks; j += C * 32)
      xs[(j / row_chunks) * x_pitch + j % row_chunks] = __ldg(reinterpret_cast<const uint4*>(x) + j);
    bulk::named_barrier_sync(1, C * 32);
  }
  // x (and the block scales) of the step about to run: from the staged rows, or loaded from
  // global memory one step ahead across tiles too.
  uint4 xv[MT][2];
  float sc[2];
  if (x_pitch == 0 && per_tile > 0 && tiles > 0)
    load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, blockIdx.x * kRows), scale, N, warp, xv,
                            sc);
  int i = 0;  // the ring's stage count
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    int it = 0;  // this warp's next step is warp + it C
    for (int stage = 0; stage < stages; ++stage, ++i) {
      const int slot = i % S;
      bulk::mbar_wait(full + slot, (i / S) & 1);
      const uint8_t* ring = smem + slot * kStageBytes + 16 * t;
      // This warp's steps inside the stage (steps s with s / 16 == stage).
      for (; it < per_tile && (warp + it * C) / (kStageCols / kStepCols) == stage; ++it) {
        const int s = warp + it * C, col = (s % (kStageCols / kStepCols)) * kStepCols;
        uint4 xn[MT][2];
        float sn[2];
        if (x_pitch > 0) {
          load_step_staged<T, MT, BLOCK>(xs, x_pitch, L, scale, M, N, s, xv, sc);
        } else if (it + 1 < per_tile) {
          load_step<T, MT, BLOCK>(L, scale, N, s + C, xn, sn);
        } else if (ti + 1 < tiles) {
          load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, (blockIdx.x + (ti + 1) * G) * kRows),
                                  scale, N, warp, xn, sn);
        }
        uint4 lo = *reinterpret_cast<const uint4*>(ring + stage_row(g) + col);
        uint4 hi = *reinterpret_cast<const uint4*>(ring + stage_row(g + 8) + col);
        if (4 * s + t >= chunks) lo = hi = make_uint4(0, 0, 0, 0);  // past K: not copied
        add_step<T, MT, BLOCK>(acc, lo, hi, xv, sc);
        if (x_pitch == 0) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) xv[mt][0] = xn[mt][0], xv[mt][1] = xn[mt][1];
          sc[0] = sn[0], sc[1] = sn[1];
        }
      }
      __syncwarp();
      if (lane == 0) bulk::mbar_arrive(empty + slot);
    }
    // The partials of tile ti, into the buffer the epilogue gave back after tile ti - 2.
    if (ti >= 2) bulk::mbar_wait(pempty + (ti & 1), ((ti >> 1) - 1) & 1);
    store_partials<MT>(reinterpret_cast<float(*)[MT][4][32]>(partials + (ti & 1) * kPartialFloats),
                       warp, acc);
    bulk::mbar_arrive(pfull + (ti & 1));
  }
}

}  // namespace rill::kernels::fp8_gemv
