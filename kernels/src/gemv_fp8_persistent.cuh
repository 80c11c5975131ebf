// gemv_fp8.cu's persistent kernel: CTAs that loop over 16-row tiles, the deep prologue's shape.
#pragma once

#include "gemv_fp8_tile.cuh"
#include "launch.cuh"

namespace rill::kernels::fp8_gemv {

// Fp8NormOut's inputs for the `tiles` tiles a persistent CTA owns (tile i of them at w row
// 16 (blockIdx.x + i G)): residual rows [i][M][16] in st.res, weights [i][16] in st.gamma; and
// Fp8NormIn's sums as stage_norm_inputs. Right after pdl_wait(); uncommitted, as there.
template <typename T>
__device__ __forceinline__ void stage_norm_inputs_tiles(const NormArgs<T>& nrm,
                                                        const NormStage<T>& st, int M, int N, int K,
                                                        int tiles) {
  if (nrm.residual) {
    const int per_tile = 4 * M + 2;  // 16-byte copies: 4 a residual row, 2 of the weight
    for (int i = threadIdx.x; i < tiles * per_tile; i += blockDim.x) {
      const int ti = i / per_tile, c = i % per_tile;
      const int n0 = (blockIdx.x + ti * gridDim.x) * kRows;
      if (c < 4 * M) {
        const int m = c >> 2, q = c & 3;
        attn::cp_async16(attn::smem_addr(st.res + (ti * M + m) * kRows + 4 * q),
                         nrm.residual + static_cast<int64_t>(m) * N + n0 + 4 * q, true);
      } else {
        const int q = c - 4 * M;
        attn::cp_async16(attn::smem_addr(st.gamma + ti * kRows + 8 * q), nrm.weight + n0 + 8 * q,
                         true);
      }
    }
  }
  NormArgs<T> in_only = nrm;
  in_only.residual = nullptr;
  stage_norm_inputs<T>(in_only, st, M, N, K, 0);
}

/// Most x rows the persistent kernel copies through its ring (x_through_ring).
constexpr int kXRingMaxRows = 2;
/// Whether the persistent kernel's x chunks travel through its ring: one x tile of at most
/// kXRingMaxRows rows.
__host__ __device__ constexpr bool x_through_ring(int M, int MT) {
  return MT == 1 && M <= kXRingMaxRows;
}
/// uint4 of x in one ring slot: [W][M][4][2] (lane (g < M, t) of each warp, two chunks).
__host__ __device__ constexpr int x_slot_vecs(int W, int M) {
  return W * M * 8;
}

/// cp.async.wait_group min(n, N).
template <int N>
__device__ __forceinline__ void cp_async_wait_at_most(int n) {
  if constexpr (N == 0) {
    attn::cp_async_wait<0>();
  } else {
    if (n >= N) {
      attn::cp_async_wait<N>();
    } else {
      cp_async_wait_at_most<N - 1>(n);
    }
  }
}

// gemv_fp8_ring_kernel made persistent: a grid of at most P CTAs an SM (persistent_grid), CTA b
// computing the 16-row tiles b, b + G, b + 2G, ... one after another while its cp.async ring
// streams on across the tiles, so an SM's weight stream does not stop for a CTA to end and the
// next to start (the ring kernel runs 3 to 5 such waves of short CTAs on the 7B's qkv and
// gate|up), and every CTA ends at about the same time. The x chunks (and block scales) are loaded
// one iteration ahead, across tiles too, so no iteration waits an L2 round trip for them. Warp w
// takes steps w, w + W, ... of every tile in that order (n_w iterations a tile): the sums of the
// register kernel with W warps, bit for bit.
// The warps' partial sums go through a second, double-buffered area (the ring keeps streaming
// meanwhile): one barrier a tile, after which warp 0 writes the tile while the others go on.
// One CTA an SM (16 warps) ran at 55% of copy against 87% for two (docs/performance.md F19).
//
// x through the ring (x_through_ring): the lanes that read x (g < M) copy their two x chunks of
// an iteration into its ring slot beside its weights, S - 1 iterations ahead as the weights are,
// instead of loading them from global memory one iteration ahead. The prologue's slots, filled
// before the PDL wait, get their x chunks right after it as one group, so iteration i < S - 1
// waits until only the i + 1 groups after that one may be in flight. The same x values: the same
// sums.
//
// Shared memory: the ring [S][2][W * 32] uint4, its x part [S][W][M][4][2] uint4
// (x_through_ring), the partials [2][W][MT][4][32] floats, then the norms' inputs (Fp8NormIn's
// sums [M][K / 16], Fp8NormOut's rows [tiles][M][16] and weights [tiles][16]).
template <typename T, int W, int S, int P, int MT, bool BLOCK, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_persistent_kernel(const T* __restrict__ x,          // [M, K]
                               const uint8_t* __restrict__ w,    // [N, K] e4m3
                               const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                               void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm,
                               int M, int N, int K, bool y_f32) {
  extern __shared__ uint4 ring[];
  constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot (one step of every thread)
  constexpr int kPartialFloats = W * MT * 4 * 32;
  const bool x_ring = x_through_ring(M, MT);
  const int x_slot = x_slot_vecs(W, M);
  uint4* const xring = ring + S * kSlot;  // [S][x_slot] when x_ring
  float* const partials =
      reinterpret_cast<float*>(xring + (x_ring ? S * x_slot : 0));  // [2][kPartialFloats]
  float* const norm_smem = partials + 2 * kPartialFloats;
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
  const int chunks = K / kChunk, steps = (chunks + 3) / 4;
  const int per_tile = warp < steps ? (steps - warp + W - 1) / W : 0;  // this warp's iterations
  // Fp8NormIn's sums (rounded up to 16 bytes), then Fp8NormOut's rows and weights.
  const int parts = nrm.in_sumsq ? (M * (K / kRows) + 3) / 4 * 4 : 0;
  float* const res = norm_smem + parts;
  const NormStage<T> st_all{res, reinterpret_cast<T*>(res + (nrm.residual ? tiles * M * kRows : 0)),
                            norm_smem, rs};
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);

  // x_ring: this lane's place in a slot's x part (g < M), and its x row.
  const int x_at = ((warp * M + g) * 4 + t) * 2;
  const uint4* const x_src =
      reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(g, M - 1)) * K);
  const auto copy_x = [&](int slot, int it) {  // iteration it's x chunks, zeros past K
    if (x_ring && g < M) {
      const int c = 4 * (warp + it * W) + t;
      const bool valid = c < chunks;
      const uint32_t dst = attn::smem_addr(xring + slot * x_slot + x_at);
      attn::cp_async16(dst, valid ? x_src + 2 * c : x_src, valid);
      attn::cp_async16(dst + 16, valid ? x_src + 2 * c + 1 : x_src, valid);
    }
  };
  bool x_ready = false;  // past the PDL wait: x may be copied

  // The copy iterator: this warp's iteration `f_it` of tile `f_tile`, S - 1 ahead of the use.
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows;
      const uint4* w_lo =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
      const uint4* w_hi =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K);
      copy_w<W, 1>(mine + slot * kSlot * 16, w_lo, w_hi, warp + f_it * W, t, chunks);
      if (x_ready) copy_x(slot, f_it);
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    attn::cp_async_commit();  // empty past the end: the group count stays in step
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
  if (x_ring) {  // the x chunks of the prologue's S - 1 iterations, one group
    for (int p = 0, tile = 0, it = 0; p < S - 1 && per_tile > 0 && tile < tiles; ++p) {
      copy_x(p, it);
      if (++it == per_tile) it = 0, ++tile;
    }
    attn::cp_async_commit();
    x_ready = true;
  }

  int slot = 0;
  // The x chunks (and block scales) of the iteration about to run: loaded one iteration ahead,
  // across tiles too, so no iteration waits for them.
  uint4 xv[MT][2];
  float sc[2];
  if (per_tile > 0 && tiles > 0)
    load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, blockIdx.x * kRows), scale, N, warp, xv,
                            sc, !x_ring);
  int started = 0;  // iterations begun, over all tiles (x_ring's waits)
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      uint4 xn[MT][2];
      float sn[2];
      if (it + 1 < per_tile) {
        load_step<T, MT, BLOCK>(L, scale, N, warp + (it + 1) * W, xn, sn, !x_ring);
      } else if (ti + 1 < tiles) {
        load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, (blockIdx.x + (ti + 1) * G) * kRows),
                                scale, N, warp, xn, sn, !x_ring);
      }
      if (x_ring) {
        cp_async_wait_at_most<S - 1>(++started);  // iteration i < S - 1 also needs the x group
        if (g < M) {
          xv[0][0] = xring[slot * x_slot + x_at];
          xv[0][1] = xring[slot * x_slot + x_at + 1];
        }
      } else {
        attn::cp_async_wait<S - 1>();
      }
      const uint4* own = ring + slot * kSlot + threadIdx.x;
      add_step<T, MT, BLOCK>(acc, own[0], own[W * 32], xv, sc);
      slot = slot == S - 1 ? 0 : slot + 1;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) xv[mt][0] = xn[mt][0], xv[mt][1] = xn[mt][1];
      sc[0] = sn[0], sc[1] = sn[1];
    }
    float(*partial)[MT][4][32] =
        reinterpret_cast<float(*)[MT][4][32]>(partials + (ti & 1) * kPartialFloats);
    store_partials<MT>(partial, warp, acc);
    if (ti == 0 && norms) {
      // The norms' group is done once S - 1 iterations were waited for; else wait for it here.
      if (per_tile < S - 1) attn::cp_async_wait<0>();
      __syncthreads();  // every thread's staged copies are visible
      norm_in_factors<T, W>(nrm, st_all, M, K);
    }
    __syncthreads();  // the partials (and rs) of tile ti; the other buffer is free again
    if (warp == 0) {
      NormStage<T> st = st_all;
      st.res += ti * M * kRows;
      st.gamma += ti * kRows;
      reduce_and_store<T, W, MT, BLOCK, EPI>(L, partial, scale, y, bias, nrm, st, M, N, y_f32);
    }
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

/// Tiles (16 rows each) per CTA and the grid of the persistent kernel for N rows on `sms` SMs:
/// the fewest tiles a CTA that fit the SMs, then the fewest CTAs for that (so the CTAs end
/// together).
inline int persistent_grid(int N, int sms) {
  const int tiles = (N + kRows - 1) / kRows;
  const int per = (tiles + sms - 1) / sms;
  return (tiles + per - 1) / per;
}

}  // namespace rill::kernels::fp8_gemv
