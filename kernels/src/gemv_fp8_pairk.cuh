// gemv_fp8.cu's persistent kernel with 8-row tiles ("pair-k"), for up to 4 x rows and the plain
// store: twice as many tiles as the 16-row kernel, so the tiles spread more evenly over the CTA
// slots. Llama-3-8B's qkv (6,144 rows) is 384 16-row tiles, which on 264 slots (132 SMs, two CTAs
// each) is 192 CTAs of two tiles (128 KB of weights each); as 768 8-row tiles it is 256 CTAs of
// three (96 KB each).
//
// The mma keeps its 16-row A operand: in a step of 128 columns, lane (g, t) holds w row n0 + g
// at chunks 8s + t (A row g) and 8s + 4 + t (A row g + 8), so rows g and g + 8 of A are the same
// weight row at two 64-column halves. B column n (lane group g) is x row n at the first half for
// n < 4 and x row n - 4 at the second half for n >= 4 (zero for dead rows), so C[g][m] +
// C[g + 8][m + 4] is row n0 + g's dot product with x row m over the step's 128 columns. The same
// bytes per mma as the 16-row kernel, one mma per 256 weights.
//
// Sums: each warp's C tile over its steps (warp w takes steps w, w + W, ... of every tile, in that
// order), the two halves added per lane (one shuffle), then the W warps' sums in warp order, the
// row scale and Fp8NormIn's 1 / rms: its own order, checked against the CPU reference like every
// shape. Everything else (the ring streaming across tiles, x staged in shared memory, the norms'
// staging, the PDL prologue) is the persistent kernel's (gemv_fp8_persistent.cuh).
#pragma once

#include "gemv_fp8_persistent.cuh"

namespace rill::kernels::fp8_gemv {

constexpr int kPairRows = 8;        // w rows a tile
constexpr int kPairStepCols = 128;  // columns a warp covers in a step (one 128-column block)
constexpr int kPairMaxXRows = 4;    // x rows: B's columns 0-3 and 4-7
static_assert(kFp8ScaleBlock == kPairStepCols, "a step is one scale block");

// The pair-k kernel's copy iterator (TileFetcher's twin): this warp's iteration `it` of tile
// `tile`, S - 1 iterations ahead of its use; an empty group past the last tile.
template <int W>
struct PairFetcher {
  const uint8_t* w;  // [N, K] e4m3
  int N, K, tiles, per_tile;
  uint32_t mine;  // this thread's place in ring slot 0
  int tile = 0, it = 0;

  __device__ __forceinline__ void operator()(int slot) {
    constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot
    const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
    if (per_tile > 0 && tile < tiles) {
      const int n0 = (blockIdx.x + tile * gridDim.x) * kPairRows;
      const uint4* row =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
      const int lo = 8 * (warp + it * W) + t, hi = lo + 4, chunks = K / kChunk;
      const uint32_t dst = mine + slot * kSlot * 16;
      cp_async_stream(dst, lo < chunks ? row + lo : row, lo < chunks);
      cp_async_stream(dst + W * 32 * 16, hi < chunks ? row + hi : row, hi < chunks);
      if (++it == per_tile) it = 0, ++tile;
    }
    attn::cp_async_commit();
  }
};

// Lane (g, t)'s B column: x row g % 4 at the step's half g / 4 (zeros past K and for dead rows),
// from the staged rows (XS) or from global memory.
template <typename T, bool XS>
__device__ __forceinline__ void load_pair_x(const uint4* xs, const T* x, int M, int K, int s,
                                            uint4 (&xv)[1][2]) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3, m = g & 3;
  const int c = 8 * s + 4 * (g >> 2) + t;
  xv[0][0] = xv[0][1] = make_uint4(0, 0, 0, 0);
  if (m < M && c < K / kChunk) {
    if constexpr (XS) {
      const uint4* row = xs + m * (K / 8);
      xv[0][0] = row[2 * c];
      xv[0][1] = row[2 * c + 1];
    } else {
      const uint4* row = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m) * K);
      xv[0][0] = __ldg(row + 2 * c);
      xv[0][1] = __ldg(row + 2 * c + 1);
    }
  }
}

// kBlock128: row n0 + g's scale for step s's block (zero past the last step), as both A rows.
__device__ __forceinline__ void load_pair_scales(const float* __restrict__ scale, int N, int n0,
                                                 int s, int steps, float (&sc)[2]) {
  const int g = (threadIdx.x & 31) >> 2;
  sc[0] = sc[1] =
      s < steps ? __ldg(scale + static_cast<int64_t>(s) * N + min(n0 + g, N - 1)) : 0.0f;
}

// The end of tile ti (w rows n0 ..): each lane's two halves added (x rows 2t and 2t + 1 in lanes
// t < 2) into its warp's row of `partial` ([W][2][32]); after the first tile, the norms' factors
// (as end_tile); one barrier; then warp 0 adds the warps' sums in order, applies the row scale and
// 1 / rms, and stores.
template <typename T, int W, int S, bool BLOCK>
__device__ __forceinline__ void end_pair_tile(const float (&acc)[1][4], float* partial_floats,
                                              bool first_norms, int per_tile, int n0,
                                              const float* __restrict__ scale, void* __restrict__ y,
                                              const NormArgs<T>& nrm, const NormStage<T>& st, int M,
                                              int N, int K, bool y_f32) {
  float(*partial)[2][32] = reinterpret_cast<float(*)[2][32]>(partial_floats);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  partial[warp][0][lane] = acc[0][0] + shfl_xor(acc[0][2], 2);
  partial[warp][1][lane] = acc[0][1] + shfl_xor(acc[0][3], 2);
  if (first_norms) {
    if (per_tile < S - 1) attn::cp_async_wait<0>();
    __syncthreads();  // every thread's staged copies are visible
    norm_in_factors<T, W>(nrm, st, M, K);
  }
  __syncthreads();  // the partials (and rs) of this tile; the other buffer is free again
  const int n = n0 + g;
  if (warp != 0 || t >= 2 || n >= N) return;
  const float row_scale = BLOCK ? 1.0f : __ldg(scale + n);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int m = 2 * t + j;
    if (m >= M) continue;
    float sum = partial[0][j][lane];
#pragma unroll
    for (int v = 1; v < W; ++v) sum += partial[v][j][lane];
    sum *= row_scale;
    if (nrm.in_sumsq) sum *= st.rs[m];
    const int64_t at = static_cast<int64_t>(m) * N + n;
    if (y_f32) {
      static_cast<float*>(y)[at] = sum;
    } else {
      static_cast<T*>(y)[at] = from_float<T>(sum);
    }
  }
}

// grid persistent_pair_grid(N, P x SMs), block W * 32, M <= 4, the plain store (no bias, no
// Fp8NormOut; Fp8NormIn allowed). Shared memory: the ring [S][2][W * 32] uint4, the partials
// [2][W][2][32] floats, x [M][K] (XS), then Fp8NormIn's sums [M][K / 16].
template <typename T, int W, int S, int P, bool BLOCK, bool XS>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_pairk_kernel(const T* __restrict__ x,          // [M, K]
                          const uint8_t* __restrict__ w,    // [N, K] e4m3
                          const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                          void* __restrict__ y, NormArgs<T> nrm, int M, int N, int K, bool y_f32) {
  extern __shared__ uint4 ring[];
  constexpr int kSlot = 2 * W * 32;
  constexpr int kPartialFloats = W * 2 * 32;
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kPairRows - 1) / kPairRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5;
  const int steps = (K / kChunk + 7) / 8;
  const int per_tile = warp < steps ? (steps - warp + W - 1) / W : 0;  // this warp's iterations
  const int xs_vecs = XS ? M * K / 8 : 0;
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);
  const NormStage<T> st = norm_stage<T>(reinterpret_cast<float*>(xs + xs_vecs), rs, nrm, M, K, 0);
  PairFetcher<W> fetch{w, N, K, tiles, per_tile, attn::smem_addr(ring + threadIdx.x)};

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  const bool norms = nrm.in_sumsq != nullptr;
  if (norms) {  // a group of its own, complete once S - 1 iterations have been waited for
    stage_norm_inputs<T>(nrm, st, M, N, K, 0);
    attn::cp_async_commit();
  }
  if constexpr (XS) stage_x<W>(xs, x, xs_vecs);

  int slot = 0;
  uint4 xv[1][2];  // not XS: the x chunks of the iteration about to run, loaded one ahead
  float sc[2];     // kBlock128: its scales, likewise
  if (per_tile > 0 && tiles > 0) {
    if constexpr (!XS) load_pair_x<T, false>(xs, x, M, K, warp, xv);
    if constexpr (BLOCK) load_pair_scales(scale, N, blockIdx.x * kPairRows, warp, steps, sc);
  }
  for (int ti = 0; ti < tiles; ++ti) {
    const int n0 = (blockIdx.x + ti * G) * kPairRows;
    float acc[1][4] = {};
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      // The next iteration's step: this tile's next, or the first of the next tile.
      const bool more = it + 1 < per_tile || ti + 1 < tiles;
      const int s_next = it + 1 < per_tile ? warp + (it + 1) * W : warp;
      const int n_next = it + 1 < per_tile ? n0 : n0 + G * kPairRows;
      uint4 xn[1][2];
      float sn[2];
      if constexpr (XS) {
        load_pair_x<T, true>(xs, x, M, K, warp + it * W, xv);
      } else if (more) {
        load_pair_x<T, false>(xs, x, M, K, s_next, xn);
      }
      if constexpr (BLOCK)
        if (more) load_pair_scales(scale, N, n_next, s_next, steps, sn);
      attn::cp_async_wait<S - 1>();
      const uint4* own = ring + slot * kSlot + threadIdx.x;
      add_step<T, 1, BLOCK>(acc, own[0], own[W * 32], xv, sc);
      slot = slot == S - 1 ? 0 : slot + 1;
      if constexpr (!XS) xv[0][0] = xn[0][0], xv[0][1] = xn[0][1];
      if constexpr (BLOCK) sc[0] = sn[0], sc[1] = sn[1];
    }
    end_pair_tile<T, W, S, BLOCK>(acc, partials + (ti & 1) * kPartialFloats, ti == 0 && norms,
                                  per_tile, n0, scale, y, nrm, st, M, N, K, y_f32);
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

/// The pair-k kernel's grid for N rows on `slots` CTA slots: persistent_grid with 8-row tiles.
inline int persistent_pair_grid(int N, int slots) {
  const int tiles = (N + kPairRows - 1) / kPairRows;
  const int per = (tiles + slots - 1) / slots;
  return (tiles + per - 1) / per;
}

}  // namespace rill::kernels::fp8_gemv
