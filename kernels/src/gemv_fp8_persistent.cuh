// gemv_fp8.cu's persistent kernel: CTAs that loop over 16-row tiles, the deep prologue's shape.
#pragma once

#include "gemv_fp8_tile.cuh"
#include "launch.cuh"
#include "probe_stamps.cuh"

namespace rill::kernels::fp8_gemv {

// The most x bytes (M x K x 2) a persistent CTA stages in shared memory (XS, at most four 16-byte
// pieces a thread); larger x is loaded from global memory one iteration ahead instead.
constexpr int kFp8GemvXStageMaxBytes = 32 * 1024;

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

// XS: x [xs_vecs] uint4 into shared memory `xs` (at most four 16-byte pieces a thread), then a
// barrier. Plain loads and stores: a cp.async group here would complete only after the weight
// ring's groups issued before it.
template <int W, typename T>
__device__ __forceinline__ void stage_x(uint4* xs, const T* x, int xs_vecs) {
  static_assert(W * 32 * 4 * 16 >= kFp8GemvXStageMaxBytes);
  const uint4* xg = reinterpret_cast<const uint4*>(x);
  uint4 v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = threadIdx.x + j * W * 32;
    if (i < xs_vecs) v[j] = __ldg(xg + i);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = threadIdx.x + j * W * 32;
    if (i < xs_vecs) xs[i] = v[j];
  }
  __syncthreads();
}

// XS: step s's x chunks from the staged rows `xs_row` (load_step's zeros past the end of K and
// for dead rows).
template <int MT, typename T>
__device__ __forceinline__ void load_staged_x(const LaneTile<T, MT>& L,
                                              const uint4* const (&xs_row)[MT], int s,
                                              uint4 (&xv)[MT][2]) {
  const int c = s * 4 + L.t;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    xv[mt][0] = xv[mt][1] = make_uint4(0, 0, 0, 0);
    if (c < L.chunks && L.x_live[mt]) {
      xv[mt][0] = xs_row[mt][2 * c];
      xv[mt][1] = xs_row[mt][2 * c + 1];
    }
  }
}

// The norms' inputs of a persistent CTA with `tiles` tiles in shared memory from `smem` on:
// Fp8NormIn's sums [M][K / 16] (rounded up to 16 bytes), then Fp8NormOut's rows [tiles][M][16]
// and weights [tiles][16].
template <typename T>
__device__ __forceinline__ NormStage<T> norm_stage(float* smem, float* rs, const NormArgs<T>& nrm,
                                                   int M, int K, int tiles) {
  float* const res = smem + (nrm.in_sumsq ? (M * (K / kRows) + 3) / 4 * 4 : 0);
  return {res, reinterpret_cast<T*>(res + (nrm.residual ? tiles * M * kRows : 0)), smem, rs};
}

// gemv_fp8_persistent_kernel's copy iterator: this warp's iteration `it` of the CTA's tile `tile`
// (w rows 16 (blockIdx.x + tile G) ..), S - 1 iterations ahead of its use. Each call commits a
// group, an empty one past the CTA's last tile, so the group count stays in step.
template <int W>
struct TileFetcher {
  const uint8_t* w;  // [N, K] e4m3
  int N, K, tiles, per_tile;
  uint32_t mine;  // this thread's place in ring slot 0
  int tile = 0, it = 0;

  __device__ __forceinline__ void operator()(int slot) {
    constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot
    const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
    if (per_tile > 0 && tile < tiles) {
      const int n0 = (blockIdx.x + tile * gridDim.x) * kRows;
      const uint4* w_lo =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
      const uint4* w_hi =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K);
      copy_w<W, 1>(mine + slot * kSlot * 16, w_lo, w_hi, warp + it * W, t, K / kChunk);
      if (++it == per_tile) it = 0, ++tile;
    }
    attn::cp_async_commit();
  }
};

// The end of a persistent CTA's tile ti (lane tile L, the warps' sums `acc`): the partial sums
// into `partial_floats` (ti's half of the double buffer); after the first tile, the norms'
// factors (their cp.async group is complete once S - 1 iterations were waited for, else it is
// waited for here); one barrier; then warp 0 reduces and stores the tile while the others go on.
template <typename T, int W, int S, int MT, bool BLOCK, GemvEpilogue EPI>
__device__ __forceinline__ void end_tile(const LaneTile<T, MT>& L, const float (&acc)[MT][4],
                                         float* partial_floats, int ti, bool first_norms,
                                         int per_tile, const float* __restrict__ scale,
                                         void* __restrict__ y, const T* __restrict__ bias,
                                         const NormArgs<T>& nrm, const NormStage<T>& st_all, int M,
                                         int N, int K, bool y_f32) {
  float(*partial)[MT][4][32] = reinterpret_cast<float(*)[MT][4][32]>(partial_floats);
  store_partials<MT>(partial, L.warp, acc);
  if (first_norms) {
    if (per_tile < S - 1) attn::cp_async_wait<0>();
    __syncthreads();  // every thread's staged copies are visible
    norm_in_factors<T, W>(nrm, st_all, M, K);
  }
  __syncthreads();  // the partials (and rs) of tile ti; the other buffer is free again
  if (L.warp == 0) {
    NormStage<T> st = st_all;
    st.res += ti * M * kRows;
    st.gamma += ti * kRows;
    reduce_and_store<T, W, MT, BLOCK, EPI>(L, partial, scale, y, bias, nrm, st, M, N, y_f32);
  }
}

// gemv_fp8_ring_kernel made persistent: a grid of at most P CTAs an SM (persistent_grid), CTA b
// computing the 16-row tiles b, b + G, b + 2G, ... one after another while its cp.async ring
// streams on across the tiles, so an SM's weight stream does not stop for a CTA to end and the
// next to start (the ring kernel runs 3 to 5 such waves of short CTAs on the 7B's qkv and
// gate|up), and every CTA ends at about the same time. XS (x of at most kFp8GemvXStageMaxBytes):
// after the PDL wait every thread loads its share of x and stores it to shared memory (plain
// loads and stores, not a cp.async group, which would wait for the weight ring too), one barrier,
// and each iteration reads its x chunks from there. Otherwise the x chunks are loaded from global
// memory one iteration ahead, across tiles too; ncu found 39% of the kernel's stall samples
// waiting on those loads, which compete with the weight stream (docs/performance.md F23). The
// block scales are loaded one iteration ahead either way. Warp w
// takes steps w, w + W, ... of every tile in that order (n_w iterations a tile): the sums of the
// register kernel with W warps, bit for bit.
// The warps' partial sums go through a second, double-buffered area (the ring keeps streaming
// meanwhile): one barrier a tile, after which warp 0 writes the tile while the others go on.
// One CTA an SM (16 warps) ran at 55% of copy against 87% for two (docs/performance.md F19).
//
// Shared memory: the ring [S][2][W * 32] uint4, the partials [2][W][MT][4][32] floats, x
// [M][K] (XS), then the norms' inputs (Fp8NormIn's sums [M][K / 16], Fp8NormOut's rows
// [tiles][M][16] and weights [tiles][16]).
template <typename T, int W, int S, int P, int MT, bool BLOCK, GemvEpilogue EPI, bool XS,
          bool NORM_OUT>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_persistent_kernel(const T* __restrict__ x,          // [M, K]
                               const uint8_t* __restrict__ w,    // [N, K] e4m3
                               const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                               void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm,
                               int M, int N, int K, bool y_f32) {
  if constexpr (!NORM_OUT) nrm.residual = nullptr;  // Fp8NormOut compiled out
  extern __shared__ uint4 ring[];
  constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot (one step of every thread)
  constexpr int kPartialFloats = W * MT * 4 * 32;
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
  const int steps = (K / kChunk + 3) / 4;
  const int per_tile = warp < steps ? (steps - warp + W - 1) / W : 0;  // this warp's iterations
  const int xs_vecs = XS ? M * K / 8 : 0;  // XS: x staged once, [M][K / 8] uint4
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);
  const NormStage<T> st_all =
      norm_stage<T>(reinterpret_cast<float*>(xs + xs_vecs), rs, nrm, M, K, tiles);
  TileFetcher<W> fetch{w, N, K, tiles, per_tile, attn::smem_addr(ring + threadIdx.x)};
  probe::Stamps ps;
  ps.mark(0);

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  ps.mark(1);
  const bool norms = nrm.residual || nrm.in_sumsq;
  if (norms) {  // a group of its own, complete once S - 1 iterations have been waited for
    stage_norm_inputs_tiles<T>(nrm, st_all, M, N, K, tiles);
    attn::cp_async_commit();
  }

  if constexpr (XS) stage_x<W>(xs, x, xs_vecs);
  ps.mark(2);
  // XS: this lane's x rows in shared memory.
  const uint4* xs_row[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) xs_row[mt] = xs + min(8 * mt + g, M - 1) * (K / 8);

  int slot = 0;
  // The x chunks (not XS) and block scales of the iteration about to run: loaded one iteration
  // ahead, across tiles too, so no iteration waits for them.
  uint4 xv[MT][2];
  float sc[2];
  if (per_tile > 0 && tiles > 0) {
    const LaneTile<T, MT> L0(x, w, M, N, K, blockIdx.x * kRows);
    if constexpr (!XS)
      load_step<T, MT, BLOCK>(L0, scale, N, warp, xv, sc);
    else if constexpr (BLOCK)
      load_scales<T, MT>(L0, scale, N, warp, sc);
  }
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      uint4 xn[MT][2];
      float sn[2];
      if constexpr (XS) {
        // x from shared memory for this iteration; only the block scales one iteration ahead.
        load_staged_x<MT>(L, xs_row, warp + it * W, xv);
        if constexpr (BLOCK) {
          if (it + 1 < per_tile)
            load_scales<T, MT>(L, scale, N, warp + (it + 1) * W, sn);
          else if (ti + 1 < tiles)
            load_scales<T, MT>(LaneTile<T, MT>(x, w, M, N, K, (blockIdx.x + (ti + 1) * G) * kRows),
                               scale, N, warp, sn);
        }
      } else if (it + 1 < per_tile) {
        load_step<T, MT, BLOCK>(L, scale, N, warp + (it + 1) * W, xn, sn);
      } else if (ti + 1 < tiles) {
        load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, (blockIdx.x + (ti + 1) * G) * kRows),
                                scale, N, warp, xn, sn);
      }
      attn::cp_async_wait<S - 1>();
      const uint4* own = ring + slot * kSlot + threadIdx.x;
      add_step<T, MT, BLOCK>(acc, own[0], own[W * 32], xv, sc);
      slot = slot == S - 1 ? 0 : slot + 1;
      if constexpr (!XS) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) xv[mt][0] = xn[mt][0], xv[mt][1] = xn[mt][1];
      }
      if constexpr (BLOCK) sc[0] = sn[0], sc[1] = sn[1];
    }
    if (ti + 1 == tiles) ps.mark(3);
    end_tile<T, W, S, MT, BLOCK, EPI>(L, acc, partials + (ti & 1) * kPartialFloats, ti,
                                      ti == 0 && norms, per_tile, scale, y, bias, nrm, st_all, M, N,
                                      K, y_f32);
    if (ti == 0) ps.mark(5);
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
  ps.mark(4);
  ps.flush(EPI == GemvEpilogue::kSiluMul ? 2 : nrm.residual ? (N == K ? 1 : 3) : 4);
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
