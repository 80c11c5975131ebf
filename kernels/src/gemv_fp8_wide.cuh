// gemv_fp8.cu's wide kernel: the persistent kernel with each warp's iteration two consecutive
// steps (128 bytes of each of a tile's 16 rows), copied 128 bytes a row at a time.
#pragma once

#include "gemv_fp8_persistent.cuh"
#include "gemv_fp8_tile.cuh"
#include "launch.cuh"

namespace rill::kernels::fp8_gemv {

constexpr int kWideSteps = 2;                       // steps a warp's iteration
constexpr int kWideChunks = kWideSteps * 4;         // 16-byte chunks of a row an iteration
constexpr int kWideSlotVecs = kRows * kWideChunks;  // uint4 of a warp's ring slot (2 KB)

// Where chunk c of row r sits in a warp's slot: rows of 8 chunks, odd rows' halves swapped, so
// that lanes (g, t) of a quarter warp, reading rows g and g + 1 at the same chunk, hit the two
// halves of the banks.
__device__ __forceinline__ int wide_at(int r, int c) {
  return r * kWideChunks + (c ^ ((r & 1) << 2));
}

// gemv_fp8_persistent_kernel with warp w taking pieces w, w + W, ... of every tile, a piece
// two consecutive steps: a copy instruction covers 4 rows x 128 bytes (8 lanes a row) instead of
// 8 rows x 64 bytes. rill-stream-chain-bench streamed the 7B's GEMV bytes that way at 99-100% of
// copy against 93.5% (docs/performance.md F30). A lane reads chunks other lanes copied, so each
// iteration's cp.async wait is followed by a __syncwarp, and another ends it before the slot is
// refilled. Other sums than the step-interleaved kernels of W warps.
//
// Shared memory: the ring [S][W][16][8] uint4, the partials [2][W][MT][4][32] floats, x [M][K]
// (XS), then the norms' inputs as the persistent kernel's.
template <typename T, int W, int S, int MT, bool BLOCK, GemvEpilogue EPI, bool XS>
__global__ void __launch_bounds__(W * 32, 2)
    gemv_fp8_wide_kernel(const T* __restrict__ x,          // [M, K]
                         const uint8_t* __restrict__ w,    // [N, K] e4m3
                         const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                         void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm, int M,
                         int N, int K, bool y_f32) {
  extern __shared__ uint4 ring[];
  constexpr int kSlot = W * kWideSlotVecs;  // uint4 a ring slot of the CTA
  constexpr int kPartialFloats = W * MT * 4 * 32;
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int chunks = K / kChunk, steps = (chunks + 3) / 4;
  const int pieces = (steps + kWideSteps - 1) / kWideSteps;
  const int per_tile = warp < pieces ? (pieces - warp + W - 1) / W : 0;  // this warp's pieces
  const int xs_vecs = XS ? M * K / 8 : 0;
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);
  const NormStage<T> st_all =
      norm_stage<T>(reinterpret_cast<float*>(xs + xs_vecs), rs, nrm, M, K, tiles);
  uint4* const mine = ring + warp * kWideSlotVecs;  // this warp's part of slot 0

  // The copies of the warp's piece `it` of the CTA's tile `tile` into `slot` (a group each call,
  // an empty one past the CTA's last tile): lane l copies chunk l % 8 of rows l / 8 + 4 i.
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows;
      const int c = (warp + f_it * W) * kWideChunks + (lane & 7);
      const bool ok = c < chunks;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 4 * i + (lane >> 3);
        const uint8_t* src =
            w + static_cast<int64_t>(min(n0 + r, N - 1)) * K + kChunk * min(c, chunks - 1);
        attn::cp_async16(attn::smem_addr(mine + slot * kSlot + wide_at(r, lane & 7)), src, ok);
      }
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    attn::cp_async_commit();
  };

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  const bool norms = nrm.residual || nrm.in_sumsq;
  if (norms) {  // a group of its own, complete once S - 1 iterations have been waited for
    stage_norm_inputs_tiles<T>(nrm, st_all, M, N, K, tiles);
    attn::cp_async_commit();
  }
  if constexpr (XS) stage_x<W>(xs, x, xs_vecs);
  const uint4* xs_row[MT];  // XS: this lane's x rows in shared memory
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xs_row[mt] = xs + min(8 * mt + g, M - 1) * (K / 8);

  int slot = 0;
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      attn::cp_async_wait<S - 1>();
      __syncwarp();  // the other lanes' copies of this slot
      const uint4* own = mine + slot * kSlot;
      const int s0 = (warp + it * W) * kWideSteps;
#pragma unroll
      for (int j = 0; j < kWideSteps; ++j) {
        uint4 xv[MT][2];
        float sc[2];
        if constexpr (XS) {
          load_staged_x<MT>(L, xs_row, s0 + j, xv);
          if constexpr (BLOCK) load_scales<T, MT>(L, scale, N, s0 + j, sc);
        } else {
          load_step<T, MT, BLOCK>(L, scale, N, s0 + j, xv, sc);
        }
        add_step<T, MT, BLOCK>(acc, own[wide_at(g, 4 * j + t)], own[wide_at(g + 8, 4 * j + t)], xv,
                               sc);
      }
      __syncwarp();  // every lane has read the slot before it is refilled
      slot = slot == S - 1 ? 0 : slot + 1;
    }
    end_tile<T, W, MT, BLOCK, EPI>(L, acc, partials + (ti & 1) * kPartialFloats, ti,
                                   ti == 0 && norms, per_tile < S - 1, scale, y, bias, nrm, st_all,
                                   M, N, K, y_f32);
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

}  // namespace rill::kernels::fp8_gemv
