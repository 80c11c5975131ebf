// gemv_fp8.cu's persistent kernel: CTAs that loop over 16-row tiles, the deep prologue's shape.
#pragma once

#include "gemv_fp8_tile.cuh"
#include "gemv_fp8_x8.cuh"
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
// X8: x enters the mmas as e4m3 terms built in shared memory right after the PDL wait
// (gemv_fp8_x8.cuh; M <= kX8MaxRows, MT 1); the weights go into the mmas unconverted.
//
// Shared memory: the ring [S][2][W * 32] uint4, the partials [2][W][MT][4][32] floats, X8's
// terms (x8_term_bytes), then the norms' inputs (Fp8NormIn's sums [M][K / 16], Fp8NormOut's rows
// [tiles][M][16] and weights [tiles][16]).
template <typename T, int W, int S, int P, int MT, bool BLOCK, GemvEpilogue EPI, bool X8 = false, int PROBE = 0>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_persistent_kernel(const T* __restrict__ x,          // [M, K]
                               const uint8_t* __restrict__ w,    // [N, K] e4m3
                               const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                               void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm,
                               int M, int N, int K, bool y_f32) {
  extern __shared__ uint4 ring[];
  constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot (one step of every thread)
  constexpr int kPartialFloats = W * MT * 4 * 32;
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  uint8_t* const terms = reinterpret_cast<uint8_t*>(partials + 2 * kPartialFloats);
  float* const norm_smem = reinterpret_cast<float*>(terms + (X8 ? x8_term_bytes<T>(M, K) : 0));
  __shared__ float rs[kFp8GemvMaxRows];
  __shared__ float x8_inv[X8 ? kX8MaxRows<T> : 1], x8_red[X8 ? kX8MaxRows<T> * W : 1];
  static_assert(!X8 || MT == 1, "X8 takes one x tile");
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

  // The copy iterator: this warp's iteration `f_it` of tile `f_tile`, S - 1 ahead of the use.
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows;
      const uint4* w_lo =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
      const uint4* w_hi =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K);
      if constexpr (PROBE == 6) {
        const int c = (warp + f_it * W) * 4 + t;
        const bool valid = c < chunks;
        attn::cp_async16(mine + slot * kSlot * 16, valid ? w_lo + c : w_lo, valid);
        attn::cp_async16(mine + slot * kSlot * 16 + W * 32 * 16, valid ? w_hi + c : w_hi, valid);
      } else {
        copy_w<W, 1>(mine + slot * kSlot * 16, w_lo, w_hi, warp + f_it * W, t, chunks);
      }
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
  if constexpr (X8 && !PROBE) build_x8_terms<T, W>(x, terms, x8_inv, x8_red, M, K);
  const int stride = x8_stride(K), live_cols = M * kX8Cols<T>;

  int slot = 0;
  // The x chunks (and block scales) of the iteration about to run: loaded one iteration ahead,
  // across tiles too, so no iteration waits for them.
  uint4 xv[MT][2];
  float sc[2];
  if (per_tile > 0 && tiles > 0)
    load_step<T, MT, BLOCK, (PROBE == 0 || PROBE == 1) && !(X8 && !PROBE)>(LaneTile<T, MT>(x, w, M, N, K, blockIdx.x * kRows), scale, N, warp,
                                 xv, sc);
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      uint4 xn[MT][2];
      float sn[2];
      if (it + 1 < per_tile) {
        load_step<T, MT, BLOCK, (PROBE == 0 || PROBE == 1) && !(X8 && !PROBE)>(L, scale, N, warp + (it + 1) * W, xn, sn);
      } else if (ti + 1 < tiles) {
        load_step<T, MT, BLOCK, (PROBE == 0 || PROBE == 1) && !(X8 && !PROBE)>(
            LaneTile<T, MT>(x, w, M, N, K, (blockIdx.x + (ti + 1) * G) * kRows), scale, N, warp, xn,
            sn);
      }
      attn::cp_async_wait<S - 1>();
      const uint4* own = ring + slot * kSlot + threadIdx.x;
      if constexpr (PROBE) {
        uint32_t v = own[0].x ^ own[0].y ^ own[0].z ^ own[0].w ^ own[W * 32].x ^ own[W * 32].y ^
                     own[W * 32].z ^ own[W * 32].w;
        if constexpr (PROBE == 1) v ^= xv[0][0].x ^ xv[0][0].w ^ xv[0][1].x ^ xv[0][1].w;
        acc[0][0] += __uint_as_float(v & 0x3f00ffffu);
      } else if constexpr (X8) {
        add_step_x8<BLOCK>(acc[0], own[0], own[W * 32], terms, stride, live_cols, chunks,
                           (warp + it * W) * 4 + t, g, sc);
      } else {
        add_step<T, MT, BLOCK>(acc, own[0], own[W * 32], xv, sc);
      }
      slot = slot == S - 1 ? 0 : slot + 1;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) xv[mt][0] = xn[mt][0], xv[mt][1] = xn[mt][1];
      sc[0] = sn[0], sc[1] = sn[1];
    }
    if constexpr (PROBE == 4 || PROBE == 6) {
      if (acc[0][0] == 1.2345f) static_cast<float*>(y)[blockIdx.x] = acc[0][0];
      continue;
    }
    float(*partial)[MT][4][32] =
        reinterpret_cast<float(*)[MT][4][32]>(partials + (ti & 1) * kPartialFloats);
    if constexpr (X8 && !PROBE) {
      float rows[1][4];
      x8_sums_to_rows<T>(acc[0], x8_inv, M, rows);
      store_partials<1>(reinterpret_cast<float(*)[1][4][32]>(partial), warp, rows);
    } else {
      store_partials<MT>(partial, warp, acc);
    }
    if (ti == 0 && norms) {
      // The norms' group is done once S - 1 iterations were waited for; else wait for it here.
      if (per_tile < S - 1) attn::cp_async_wait<0>();
      __syncthreads();  // every thread's staged copies are visible
      norm_in_factors<T, W>(nrm, st_all, M, K);
    }
    __syncthreads();  // the partials (and rs) of tile ti; the other buffer is free again
    if (warp == 0 && PROBE != 5) {
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
