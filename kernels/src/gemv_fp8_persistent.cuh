// gemv_fp8.cu's persistent kernel: CTAs that loop over 16-row tiles, the deep prologue's shape.
#pragma once

#include "gemv_fp8_tile.cuh"
#include "launch.cuh"

namespace rill::kernels::fp8_gemv {

// The most x bytes (M x K x 2) a persistent CTA stages in shared memory (XS, at most four 16-byte
// pieces a thread); larger x is loaded from global memory one iteration ahead instead.
constexpr int kFp8GemvXStageMaxBytes = 32 * 1024;

// Fp8NormOut's inputs for the `tiles` tiles a persistent CTA owns (tile i of them at w row
// 16 (blockIdx.x + i G), G the CTAs taking part): residual rows [i][M][16] in st.res, weights [i][16] in st.gamma; and
// Fp8NormIn's sums as stage_norm_inputs. Right after pdl_wait(); uncommitted, as there.
template <typename T>
__device__ __forceinline__ void stage_norm_inputs_tiles(const NormArgs<T>& nrm,
                                                        const NormStage<T>& st, int M, int N, int K,
                                                        int tiles, int G) {
  if (nrm.residual) {
    const int per_tile = 4 * M + 2;  // 16-byte copies: 4 a residual row, 2 of the weight
    for (int i = threadIdx.x; i < tiles * per_tile; i += blockDim.x) {
      const int ti = i / per_tile, c = i % per_tile;
      const int n0 = (blockIdx.x + ti * G) * kRows;
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
// ring's groups issued before it. X_IN_KERNEL: x was written by other CTAs of this kernel (behind
// a grid barrier), so it is not read through the non-coherent path (__ldg) but from the L2.
template <int W, bool X_IN_KERNEL, typename T>
__device__ __forceinline__ void stage_x(uint4* xs, const T* x, int xs_vecs) {
  static_assert(W * 32 * 4 * 16 >= kFp8GemvXStageMaxBytes);
  const uint4* xg = reinterpret_cast<const uint4*>(x);
  uint4 v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = threadIdx.x + j * W * 32;
    if (i < xs_vecs) v[j] = X_IN_KERNEL ? __ldcg(xg + i) : __ldg(xg + i);
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
  int N, K, G, tiles, per_tile;
  uint32_t mine;  // this thread's place in ring slot 0
  int tile = 0, it = 0;

  __device__ __forceinline__ void operator()(int slot) {
    constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot
    const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
    if (per_tile > 0 && tile < tiles) {
      const int n0 = (blockIdx.x + tile * G) * kRows;
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

// gemv_fp8_ring_kernel made persistent: G CTAs (persistent_grid, at most P an SM), CTA b < G
// computing the 16-row tiles b, b + G, b + 2G, ... one after another while its cp.async ring
// streams on across the tiles, so an SM's weight stream does not stop for a CTA to end and the
// next to start (the ring kernel runs 3 to 5 such waves of short CTAs on the 7B's qkv and
// gate|up), and every CTA ends at about the same time. `wait` (every thread calls it) returns
// once x and the norms' inputs are ready: the PDL wait, or a grid barrier. XS (x of at most
// kFp8GemvXStageMaxBytes): after the wait every thread loads its share of x and stores it to
// shared memory (plain loads and stores, not a cp.async group, which would wait for the weight
// ring too), one barrier, and each iteration reads its x chunks from there. Otherwise the x
// chunks are loaded from global memory one iteration ahead, across tiles too; ncu found 39% of
// the kernel's stall samples waiting on those loads, which compete with the weight stream
// (docs/performance.md F23). The block scales are loaded one iteration ahead either way. Warp w
// takes steps w, w + W, ... of every tile in that order (n_w iterations a tile): the sums of the
// register kernel with W warps, bit for bit.
// The warps' partial sums go through a second, double-buffered area (the ring keeps streaming
// meanwhile): one barrier a tile, after which warp 0 writes the tile while the others go on.
// One CTA an SM (16 warps) ran at 55% of copy against 87% for two (docs/performance.md F19).
//
// Shared memory from `ring` on: the ring [S][2][W * 32] uint4, the partials [2][W][MT][4][32]
// floats, x [M][K] (XS), then the norms' inputs (Fp8NormIn's sums [M][K / 16], Fp8NormOut's rows
// [tiles][M][16] and weights [tiles][16]); `rs` [kFp8GemvMaxRows].
template <typename T, int W, int S, int MT, bool BLOCK, GemvEpilogue EPI, bool XS,
          bool X_IN_KERNEL, typename Wait>
__device__ __forceinline__ void persistent_gemv(const T* __restrict__ x,          // [M, K]
                                                const uint8_t* __restrict__ w,    // [N, K] e4m3
                                                const float* __restrict__ scale,  // see BLOCK
                                                void* __restrict__ y, const T* __restrict__ bias,
                                                const NormArgs<T>& nrm, int M, int N, int K,
                                                bool y_f32, uint4* ring, float* rs, int G,
                                                Wait&& wait) {
  constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot (one step of every thread)
  constexpr int kPartialFloats = W * MT * 4 * 32;
  const int tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
  const int steps = (K / kChunk + 3) / 4;
  const int per_tile = warp < steps ? (steps - warp + W - 1) / W : 0;  // this warp's iterations
  const int xs_vecs = XS ? M * K / 8 : 0;  // XS: x staged once, [M][K / 8] uint4
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);
  const NormStage<T> st_all =
      norm_stage<T>(reinterpret_cast<float*>(xs + xs_vecs), rs, nrm, M, K, tiles);
  TileFetcher<W> fetch{w, N, K, G, tiles, per_tile, attn::smem_addr(ring + threadIdx.x)};

#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  wait();
  const bool norms = nrm.residual || nrm.in_sumsq;
  if (norms) {  // a group of its own, complete once S - 1 iterations have been waited for
    stage_norm_inputs_tiles<T>(nrm, st_all, M, N, K, tiles, G);
    attn::cp_async_commit();
  }

  if constexpr (XS) stage_x<W, X_IN_KERNEL>(xs, x, xs_vecs);
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
    end_tile<T, W, S, MT, BLOCK, EPI>(L, acc, partials + (ti & 1) * kPartialFloats, ti,
                                      ti == 0 && norms, per_tile, scale, y, bias, nrm, st_all, M, N,
                                      K, y_f32);
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

// persistent_gemv as a kernel of its own, behind the PDL wait (Fp8GemvParams::deep_prologue).
template <typename T, int W, int S, int P, int MT, bool BLOCK, GemvEpilogue EPI, bool XS>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_persistent_kernel(const T* __restrict__ x,          // [M, K]
                               const uint8_t* __restrict__ w,    // [N, K] e4m3
                               const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                               void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm,
                               int M, int N, int K, bool y_f32) {
  extern __shared__ uint4 ring[];
  __shared__ float rs[kFp8GemvMaxRows];
  pdl_launch_dependents();
  persistent_gemv<T, W, S, MT, BLOCK, EPI, XS, false>(x, w, scale, y, bias, nrm, M, N, K, y_f32,
                                                      ring, rs, gridDim.x, [] { pdl_wait(); });
}

// A barrier of every CTA of a grid (all of them resident), in device memory zeroed once and
// reused by launch after launch of one grid size: each CTA's arrival takes a ticket (one atomic
// add with release semantics), and the barrier opens once the count reaches the end of that
// ticket's round of G, so no CTA has to reset anything (a 64-bit count does not wrap). Split so
// that a CTA can issue work that depends on nothing between its arrival and its wait.
struct GridBarrierState {
  unsigned long long count;
};

// Every thread calls it once the CTA's writes before the barrier are issued; thread 0's result is
// the count to wait for.
__device__ __forceinline__ unsigned long long grid_arrive(GridBarrierState* b) {
  __syncthreads();  // the CTA's writes are ordered before thread 0's release
  unsigned long long target = 0;
  if (threadIdx.x == 0) {
    unsigned long long ticket;
    asm volatile("atom.add.release.gpu.global.u64 %0, [%1], 1;"
                 : "=l"(ticket)
                 : "l"(&b->count)
                 : "memory");
    target = (ticket / gridDim.x + 1) * gridDim.x;
  }
  return target;
}

__device__ __forceinline__ void grid_wait(GridBarrierState* b, unsigned long long target,
                                          int spin_ns) {
  if (threadIdx.x == 0) {
    for (;;) {
      unsigned long long count;
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(count) : "l"(&b->count) : "memory");
      if (count >= target) break;
      if (spin_ns > 0) __nanosleep(spin_ns);
    }
  }
  __syncthreads();
}

// One GEMV of gemv_fp8_pair_kernel (kStore, no bias).
template <typename T>
struct PersistentGemv {
  const T* x;          // [M, K]
  const uint8_t* w;    // [N, K] e4m3
  const float* scale;  // [N] or [ceil(K / 128), N]
  void* y;
  NormArgs<T> nrm;
  int M, N, K;
  bool y_f32;
};

// Two persistent GEMVs in one grid of max(G1, G2) CTAs, all resident (the launch checks that): the
// first (a decode layer's down with Fp8NormOut) behind the PDL wait, then, behind a grid barrier,
// the second (the next layer's qkv with Fp8NormIn), which reads what the first wrote. Between two
// kernels the second's CTAs could take an SM only once the first's had left it, and for the qkv
// after down (every SM full until down's last tiles end) most of them landed 1-2 us after down's
// end, with the PDL wait waiting for the last of them (docs/performance.md F31); here they are
// already resident, and each streams the second GEMV's first weights into its ring before it
// waits at the barrier. Both stage x in shared memory (XS); each GEMV's sums are those of its own
// kernel, bit for bit.
// gemv_fp8_pair_kernel's two GEMVs, each a function of its own (not inlined) so that neither's
// registers are allocated around the other's (inlined into one kernel they spilled).
template <typename T, int W, int S, bool BLOCK>
__device__ __noinline__ void pair_first(PersistentGemv<T> a, int G) {
  extern __shared__ uint4 ring[];
  __shared__ float rs[kFp8GemvMaxRows];
  persistent_gemv<T, W, S, 1, BLOCK, GemvEpilogue::kStore, true, false>(
      a.x, a.w, a.scale, a.y, nullptr, a.nrm, a.M, a.N, a.K, a.y_f32, ring, rs, G,
      [] { pdl_wait(); });
}

template <typename T, int W, int S, bool BLOCK>
__device__ __noinline__ void pair_second(PersistentGemv<T> b, int G, GridBarrierState* barrier,
                                         unsigned long long generation, int spin_ns) {
  extern __shared__ uint4 ring[];
  __shared__ float rs[kFp8GemvMaxRows];
  persistent_gemv<T, W, S, 1, BLOCK, GemvEpilogue::kStore, true, true>(
      b.x, b.w, b.scale, b.y, nullptr, b.nrm, b.M, b.N, b.K, b.y_f32, ring, rs, G,
      [=] { grid_wait(barrier, generation, spin_ns); });
}

template <typename T, int W, int S, bool BLOCK>
__device__ __noinline__ void pair_second_late(PersistentGemv<T> b, int G,
                                              GridBarrierState* barrier, int spin_ns) {
  extern __shared__ uint4 ring[];
  __shared__ float rs[kFp8GemvMaxRows];
  persistent_gemv<T, W, S, 1, BLOCK, GemvEpilogue::kStore, true, true>(
      b.x, b.w, b.scale, b.y, nullptr, b.nrm, b.M, b.N, b.K, b.y_f32, ring, rs, G,
      [=] { grid_wait(barrier, grid_arrive(barrier), spin_ns); });
}

template <typename T, int W, int S, int P, bool BLOCK>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_pair_kernel(PersistentGemv<T> first, int g1, PersistentGemv<T> second, int g2,
                         GridBarrierState* barrier, int spin_ns, int arrive_late) {
  pdl_launch_dependents();
  if (static_cast<int>(blockIdx.x) < g1)
    pair_first<T, W, S, BLOCK>(first, g1);
  else
    pdl_wait();
  // Arrive before the second GEMV's first weight copies are issued: thread 0's fence would
  // otherwise wait for those too.
  if (arrive_late) {
    if (static_cast<int>(blockIdx.x) < g2)
      pair_second_late<T, W, S, BLOCK>(second, g2, barrier, spin_ns);
    else
      grid_arrive(barrier);
    return;
  }
  const unsigned long long generation = grid_arrive(barrier);
  if (static_cast<int>(blockIdx.x) < g2)
    pair_second<T, W, S, BLOCK>(second, g2, barrier, generation, spin_ns);
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
