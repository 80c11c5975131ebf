// gemv_fp8.cu's bulk kernel: the persistent kernel's tiles, with the weights staged by the copy
// engine (cp.async.bulk) instead of by every thread's cp.async.
#pragma once

#include "bulk_copy.cuh"
#include "gemv_fp8_persistent.cuh"
#include "gemv_fp8_tile.cuh"
#include "launch.cuh"

namespace rill::kernels::fp8_gemv {

// A piece: PS steps (PS * 64 bytes) of each of a tile's 16 rows. A row's pitch in a ring stage:
// lanes (g, t) of a quarter warp read rows g and g + 1 at the same column, which a pitch of
// 320 bytes (80 words) puts into the other half of the banks; pieces of 2 steps keep a pitch of
// 128 (two-way conflicts) for room.
template <int PS>
struct Piece {
  static constexpr int kSteps = PS, kBytes = PS * kStepCols;
  static constexpr int kPitch = PS == 4 ? kBytes + 64 : kBytes;
  static constexpr int kStageBytes = kRows * kPitch;
};

template <int W, int S, int PS>
constexpr int bulk_ring_bytes() {  // the rings, then their mbarriers
  return W * S * (Piece<PS>::kStageBytes + 8);
}

// A persistent CTA (CTA b: the 16-row tiles b, b + G, ...) whose warps each stream their own
// pieces (256 bytes of each of a tile's 16 rows: four steps) through a private ring of S stages.
// Lanes 0-15 copy one row's piece each with cp.async.bulk completing on the stage's mbarrier;
// the warp waits on it, computes the piece's four steps as the other kernels compute a step
// (gemv_fp8.cu's header: lane (g, t) takes chunk t of each 64 bytes of rows g and g + 8), and
// refills the stage itself: no producer warp, and no warp waits for another between tiles'
// barriers. On the H100 this staging streamed the 7B's GEMV bytes at 104% of copy bandwidth
// against 93.5% for the persistent kernel's cp.async (rill-stream-chain-bench, "warp bulk 8w
// 16x256"): copies of 256 bytes keep more bytes in flight per SM than 16-byte cp.async can.
//
// Warp w takes pieces w, w + W, ... of every tile (its steps in order within a piece): other
// sums than the step-interleaved kernels of W warps. The warps' sums, the norms, x staging (XS)
// and the epilogue are the persistent kernel's.
//
// Shared memory: the rings [W][S][16][kPiecePitch] and their mbarriers [W][S], the partials
// [2][W][MT][4][32] floats, x [M][K] (XS), then the norms' inputs as the persistent kernel's.
template <typename T, int W, int S, int PS, int MT, bool BLOCK, GemvEpilogue EPI, bool XS>
__global__ void __launch_bounds__(W * 32, 2)
    gemv_fp8_bulk_kernel(const T* __restrict__ x,          // [M, K]
                         const uint8_t* __restrict__ w,    // [N, K] e4m3
                         const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                         void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm, int M,
                         int N, int K, bool y_f32) {
  extern __shared__ __align__(128) uint8_t smem[];
  using Pc = Piece<PS>;
  constexpr int kPieceSteps = Pc::kSteps, kPieceBytes = Pc::kBytes, kPiecePitch = Pc::kPitch;
  constexpr int kBulkStageBytes = Pc::kStageBytes;
  constexpr int kPartialFloats = W * MT * 4 * 32;
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int chunks = K / kChunk, steps = (chunks + 3) / 4;
  const int pieces = (steps + kPieceSteps - 1) / kPieceSteps;
  const int per_tile = warp < pieces ? (pieces - warp + W - 1) / W : 0;  // this warp's pieces
  const int total = tiles * per_tile;
  uint8_t* const ring = smem + warp * S * kBulkStageBytes;
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + W * S * kBulkStageBytes) + warp * S;
  float* const partials = reinterpret_cast<float*>(smem + bulk_ring_bytes<W, S, PS>());
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);
  const int xs_vecs = XS ? M * K / 8 : 0;
  const NormStage<T> st_all =
      norm_stage<T>(reinterpret_cast<float*>(xs + xs_vecs), rs, nrm, M, K, tiles);

  if (lane == 0)
    for (int i = 0; i < S; ++i) bulk::init(full + i, 1);
  __syncwarp();
  // Item i (the warp's piece i % per_tile of the CTA's tile i / per_tile) into stage i % S.
  const auto issue = [&](int i) {
    const int slot = i % S, k0 = (warp + (i % per_tile) * W) * kPieceBytes;
    const int n0 = (blockIdx.x + (i / per_tile) * G) * kRows;
    const int bytes = min(kPieceBytes, K - k0);
    if (lane == 0) bulk::arrive_expect(full + slot, bytes * kRows);
    __syncwarp();
    if (lane < kRows)
      bulk::copy(ring + slot * kBulkStageBytes + lane * kPiecePitch,
                 w + static_cast<int64_t>(min(n0 + lane, N - 1)) * K + k0, bytes, full + slot);
  };

  pdl_launch_dependents();
#pragma unroll
  for (int i = 0; i < S; ++i)
    if (i < total) issue(i);
  pdl_wait();
  const bool norms = nrm.residual || nrm.in_sumsq;
  if (norms) {
    stage_norm_inputs_tiles<T>(nrm, st_all, M, N, K, tiles);
    attn::cp_async_commit();
  }
  if constexpr (XS) stage_x<W>(xs, x, xs_vecs);
  const uint4* xs_row[MT];  // XS: this lane's x rows in shared memory
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xs_row[mt] = xs + min(8 * mt + g, M - 1) * (K / 8);

  int item = 0;
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    for (int it = 0; it < per_tile; ++it, ++item) {
      const int s0 = (warp + it * W) * kPieceSteps;
      // Not XS: the piece's x chunks from global memory, loaded before waiting for its weights
      // (XS: each step's from shared memory as it runs). The block scales likewise.
      uint4 xv[XS ? 1 : kPieceSteps][MT][2];
      float sc[kPieceSteps][2];
#pragma unroll
      for (int j = 0; j < kPieceSteps; ++j) {
        if constexpr (XS) {
          if constexpr (BLOCK) load_scales<T, MT>(L, scale, N, s0 + j, sc[j]);
        } else {
          load_step<T, MT, BLOCK>(L, scale, N, s0 + j, xv[j], sc[j]);
        }
      }
      const int slot = item % S;
      bulk::wait(full + slot, (item / S) & 1);
      const uint8_t* stage = ring + slot * kBulkStageBytes + 16 * t;
#pragma unroll
      for (int j = 0; j < kPieceSteps; ++j) {
        if (s0 + j >= steps) break;                   // the last piece of a row
        const bool live = 4 * (s0 + j) + t < chunks;  // past K: stale bytes, zero weights
        const uint4 zero = make_uint4(0, 0, 0, 0);
        const uint4 lo =
            live ? *reinterpret_cast<const uint4*>(stage + g * kPiecePitch + 64 * j) : zero;
        const uint4 hi =
            live ? *reinterpret_cast<const uint4*>(stage + (g + 8) * kPiecePitch + 64 * j) : zero;
        if constexpr (XS) {
          load_staged_x<MT>(L, xs_row, s0 + j, xv[0]);
          add_step<T, MT, BLOCK>(acc, lo, hi, xv[0], sc[j]);
        } else {
          add_step<T, MT, BLOCK>(acc, lo, hi, xv[j], sc[j]);
        }
      }
      __syncwarp();  // every lane has read the stage
      if (item + S < total) issue(item + S);
    }
    end_tile<T, W, MT, BLOCK, EPI>(L, acc, partials + (ti & 1) * kPartialFloats, ti,
                                   ti == 0 && norms, true, scale, y, bias, nrm, st_all, M, N, K,
                                   y_f32);
  }
  if (norms && tiles == 0) attn::cp_async_wait<0>();  // nothing in flight at exit
}

}  // namespace rill::kernels::fp8_gemv
