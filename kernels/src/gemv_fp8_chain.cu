// Chained fp8 decode GEMVs (launch_gemv_fp8_chain): gemv_fp8_persistent_kernel's CTAs running
// several GEMVs one after another, each reading what the one before wrote.
//
// Between two projections of a decode step the weight stream stops: the next kernel's CTAs
// become resident only as the last ones leave, and start computing only after the grid has
// completed. At batch 1 that boundary costs about 1.8 us of a GEMV's ~17 (docs/performance.md
// F21: the same bytes streamed by one grid took 2.085 ms against 2.314 for 128 kernels). Here
// the CTAs stay: one iterator (ChainFetcher) walks the weights of every phase, tile by tile,
// S - 1 iterations ahead of the arithmetic, so the last iterations of a phase already issue the
// next phase's first weights. Only the arithmetic waits: at the start of a phase, thread 0 spins
// until every CTA of the phase before has signalled its counter (warp 0, after storing its last
// tile: a fence, then an atomic add), and the CTA stages the new x from L2.
//
// Each phase is the persistent kernel's (16 warps, x staged in shared memory, tiles b, b + G,
// ... with G = persistent_grid(N) CTAs taking part): the same sums in the same order, so the
// same bits as launch_gemv_fp8 with any 16-warp shape. The grid is the largest phase's G, at most
// two CTAs an SM, all resident at once (checked with the occupancy calculator), so no CTA waits
// for one that cannot start. The last CTA to end sets the counters back to zero; the next launch
// reads them only after its PDL wait, which orders it after this grid.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "dispatch.cuh"
#include "gemv_fp8_persistent.cuh"
#include "launch.cuh"
#include "rill/kernels/gemv_fp8.h"

namespace rill::kernels {
namespace {

using namespace fp8_gemv;  // NOLINT(google-build-using-namespace): the persistent kernel's parts

// The deep-prologue shape (gemv_fp8.cu's kDeepConfig): warps, ring depth, CTAs an SM.
constexpr int kWarps = 16, kStages = 3, kPerSm = 2;

template <typename T>
struct ChainPhase {
  const T* x;          // [M, K]
  const uint8_t* w;    // [N, K] e4m3
  const float* scale;  // [N] or [ceil(K / 128), N]
  void* y;             // [M, N], kSiluMul [M, N / 2]
  const T* bias;       // kSiluMul: [N] or null
  NormArgs<T> nrm;
  int N, K;
  int grid;  // CTAs taking part: 0 .. grid - 1
  bool silu;
};

template <typename T>
struct ChainArgs {
  ChainPhase<T> ph[kFp8GemvChainMaxPhases];
  int phases, M;
  int xs_vecs;  // the largest phase's x, uint4
  unsigned* counters;
  int sleep_ns, signal_mode, exit_mode;
};

// This CTA's tiles of a phase of N rows over G CTAs (persistent_grid's assignment).
__device__ __forceinline__ int cta_tiles(int N, int G) {
  const int b = static_cast<int>(blockIdx.x);
  return b < G ? ((N + kRows - 1) / kRows - b + G - 1) / G : 0;
}

// This warp's iterations a tile for K columns (steps w, w + W, ...).
template <int W>
__device__ __forceinline__ int warp_iterations(int K) {
  const int steps = (K / kChunk + 3) / 4, warp = static_cast<int>(threadIdx.x) >> 5;
  return warp < steps ? (steps - warp + W - 1) / W : 0;
}

// The persistent kernel's TileFetcher over every phase in turn: this warp's iteration `it` of
// tile `tile` of phase `phase`, skipping phases where this warp has nothing to do (as the
// arithmetic does). Each call commits a group, an empty one past the last phase.
template <typename T, int W>
struct ChainFetcher {
  const ChainArgs<T>& a;
  uint32_t mine;  // this thread's place in ring slot 0
  int phase = -1, tile = 0, it = 0, tiles = 0, per_tile = 0;
  const uint8_t* w = nullptr;  // the current phase's, as its N, K and grid
  int N = 0, K = 0, G = 0;

  __device__ __forceinline__ ChainFetcher(const ChainArgs<T>& args, uint32_t m) : a(args), mine(m) {
    next_phase();
  }
  __device__ __forceinline__ void next_phase() {
    tile = it = 0;
    while (++phase < a.phases) {
      const ChainPhase<T>& ph = a.ph[phase];
      tiles = cta_tiles(ph.N, ph.grid);
      per_tile = warp_iterations<W>(ph.K);
      if (tiles > 0 && per_tile > 0) {
        w = ph.w, N = ph.N, K = ph.K, G = ph.grid;
        return;
      }
    }
  }
  __device__ __forceinline__ void operator()(int slot) {
    constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot
    if (phase < a.phases) {
      const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
      const int n0 = (blockIdx.x + tile * G) * kRows;
      const uint4* w_lo =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
      const uint4* w_hi =
          reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K);
      copy_w<W, 1>(mine + slot * kSlot * 16, w_lo, w_hi, warp + it * W, t, K / kChunk);
      if (++it == per_tile) {
        it = 0;
        if (++tile == tiles) next_phase();
      }
    }
    attn::cp_async_commit();
  }
};

__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread 0 spins until `count` CTAs have signalled `counter` (relaxed loads: an acquiring load
// would invalidate the SM's L1 at every poll), then acquires their writes with one fence; then
// the CTA's barrier (which also ends warp 0's epilogue of the phase before, whose shared memory
// the next phase reuses).
__device__ __forceinline__ void wait_for_phase(const unsigned* counter, unsigned count,
                                               int sleep_ns) {
  if (threadIdx.x == 0) {
    while (load_relaxed(counter) < count)
      if (sleep_ns > 0) __nanosleep(sleep_ns);
    if (sleep_ns == 1) {  // EXPERIMENT: an acquiring load instead of the fence
      unsigned v;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
    } else {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
    }
  }
  __syncthreads();
}

// Warp 0, once it has stored the CTA's last tile of a phase (only warp 0 writes global memory):
// its lanes' stores ordered before lane 0's releasing add.
__device__ __forceinline__ void signal_phase(unsigned* counter, int mode) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    if (mode == 1) {
      __threadfence();
      atomicAdd(counter, 1u);
    } else if (mode == 2) {
      asm volatile("fence.acq_rel.gpu;" ::: "memory");
      asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    } else {
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
    }
  }
}

// gemv_fp8_persistent_kernel (XS) over a.phases GEMVs. Shared memory as there: the ring
// [S][2][W * 32] uint4, the partials [2][W][MT][4][32] floats, x [a.xs_vecs] uint4, then the
// current phase's norm inputs.
template <typename T, int W, int S, int P, int MT, bool BLOCK>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_chain_kernel(const __grid_constant__ ChainArgs<T> a) {
  extern __shared__ uint4 ring[];
  constexpr int kSlot = 2 * W * 32;
  constexpr int kPartialFloats = W * MT * 4 * 32;
  __shared__ float rs[kFp8GemvMaxRows];
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, M = a.M;
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  uint4* const xs = reinterpret_cast<uint4*>(partials + 2 * kPartialFloats);
  float* const norm_smem = reinterpret_cast<float*>(xs + a.xs_vecs);
  ChainFetcher<T, W> fetch(a, attn::smem_addr(ring + threadIdx.x));

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();

  int slot = 0;
  for (int p = 0; p < a.phases; ++p) {
    const ChainPhase<T>& ph = a.ph[p];
    if (p > 0) { if (a.sleep_ns >= 0) wait_for_phase(a.counters + p - 1, a.ph[p - 1].grid, a.sleep_ns); else __syncthreads(); }  // EXPERIMENT
    const int tiles = cta_tiles(ph.N, ph.grid);
    if (tiles == 0) continue;  // the whole CTA
    const int per_tile = warp_iterations<W>(ph.K);
    const NormStage<T> st_all = norm_stage<T>(norm_smem, rs, ph.nrm, M, ph.K, tiles);
    const bool norms = ph.nrm.residual || ph.nrm.in_sumsq;
    if (norms) {  // a group of its own, complete once S - 1 iterations have been waited for
      stage_norm_inputs_tiles<T>(ph.nrm, st_all, M, ph.N, ph.K, tiles, ph.grid);
      attn::cp_async_commit();
    }
    stage_x<W, true>(xs, ph.x, M * ph.K / 8);
    const uint4* xs_row[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) xs_row[mt] = xs + min(8 * mt + g, M - 1) * (ph.K / 8);
    float sc[2] = {0.0f, 0.0f};  // kBlock128: the block scales, one iteration ahead
    if constexpr (BLOCK)
      if (per_tile > 0)
        load_scales<T, MT>(LaneTile<T, MT>(ph.x, ph.w, M, ph.N, ph.K, blockIdx.x * kRows),
                           ph.scale, ph.N, warp, sc);
    for (int ti = 0; ti < tiles; ++ti) {
      const LaneTile<T, MT> L(ph.x, ph.w, M, ph.N, ph.K, (blockIdx.x + ti * ph.grid) * kRows);
      float acc[MT][4] = {};
      for (int it = 0; it < per_tile; ++it) {
        fetch(slot == 0 ? S - 1 : slot - 1);
        uint4 xv[MT][2];
        load_staged_x<MT>(L, xs_row, warp + it * W, xv);
        float sn[2] = {0.0f, 0.0f};
        if constexpr (BLOCK) {
          if (it + 1 < per_tile)
            load_scales<T, MT>(L, ph.scale, ph.N, warp + (it + 1) * W, sn);
          else if (ti + 1 < tiles)
            load_scales<T, MT>(
                LaneTile<T, MT>(ph.x, ph.w, M, ph.N, ph.K, (blockIdx.x + (ti + 1) * ph.grid) * kRows),
                ph.scale, ph.N, warp, sn);
        }
        attn::cp_async_wait<S - 1>();
        const uint4* own = ring + slot * kSlot + threadIdx.x;
        add_step<T, MT, BLOCK>(acc, own[0], own[W * 32], xv, sc);
        slot = slot == S - 1 ? 0 : slot + 1;
        if constexpr (BLOCK) sc[0] = sn[0], sc[1] = sn[1];
      }
      float* const part = partials + (ti & 1) * kPartialFloats;
      const bool first_norms = ti == 0 && norms;
      if (ph.silu)
        end_tile<T, W, S, MT, BLOCK, GemvEpilogue::kSiluMul>(L, acc, part, ti, first_norms,
                                                             per_tile, ph.scale, ph.y, ph.bias,
                                                             ph.nrm, st_all, M, ph.N, ph.K, false);
      else
        end_tile<T, W, S, MT, BLOCK, GemvEpilogue::kStore>(L, acc, part, ti, first_norms, per_tile,
                                                           ph.scale, ph.y, ph.bias, ph.nrm, st_all,
                                                           M, ph.N, ph.K, false);
    }
    if (warp == 0 && p + 1 < a.phases) signal_phase(a.counters + p, a.signal_mode);
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
  // The last phase's counter counts the CTAs that are done; the last one sets every counter back
  // to zero (all others have passed their waits).
  if (threadIdx.x == 0 && a.exit_mode) {  // EXPERIMENT exit_mode
    unsigned* const done = a.counters + a.phases - 1;
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(done) : "memory");
    if (before == gridDim.x - 1)
      for (int p = 0; p < a.phases; ++p) a.counters[p] = 0;
  }
}

constexpr int ring_bytes(int stages) { return stages * 2 * kWarps * 32 * 16; }

// The launch of a supported chain: grid, shared memory, arguments.
struct ChainLaunch {
  int grid = 0, smem = 0, xs_vecs = 0;
  int phase_grid[kFp8GemvChainMaxPhases] = {};
};

// The launch for c, or the reason it is not supported.
cudaError_t plan_chain(const Fp8GemvChainParams& c, const void* kernel, int stages, ChainLaunch* out) {
  if (!c.counters) return invalid_argument("gemv_fp8_chain: no counters");
  // A runtime call that fails here returns its error and leaves none behind (the caller may only
  // be asking gemv_fp8_chain_supported).
  auto rt = [](cudaError_t err) {
    if (err != cudaSuccess) (void)cudaGetLastError();
    return err;
  };
  const Fp8GemvParams& p0 = c.phase[0];
  int device = 0, sms = 0, smem_per_sm = 0;
  if (cudaError_t err = rt(cudaGetDevice(&device)); err != cudaSuccess) return err;
  if (cudaError_t err = rt(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      err != cudaSuccess)
    return err;
  if (cudaError_t err = rt(cudaDeviceGetAttribute(
          &smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
      err != cudaSuccess)
    return err;
  int x_bytes = 0, norm_bytes = 0;
  ChainLaunch L;
  for (int i = 0; i < c.phases; ++i) {
    const Fp8GemvParams& p = c.phase[i];
    const std::string at = "gemv_fp8_chain: phase " + std::to_string(i) + ": ";
    if (cudaError_t err = check_gemv_fp8(p); err != cudaSuccess) return err;
    if (p.dtype != p0.dtype || p.M != p0.M || p.scale_layout != p0.scale_layout)
      return invalid_argument(at + "dtype, M and scale layout must be the first phase's");
    if (p.M == 0 || p.N == 0 || p.y_f32)
      return invalid_argument(at + "empty, or y in fp32");
    if (p.M * p.K * 2 > kFp8GemvXStageMaxBytes)
      return invalid_argument(at + "x of " + std::to_string(p.M * p.K * 2) +
                              " bytes past the shared-memory stage");
    L.phase_grid[i] = persistent_grid(p.N, sms * kPerSm);
    L.grid = std::max(L.grid, L.phase_grid[i]);
    const int tiles = ((p.N + kRows - 1) / kRows + L.phase_grid[i] - 1) / L.phase_grid[i];
    const int parts = p.norm_in.sumsq ? (p.M * (p.K / kRows) + 3) / 4 * 16 : 0;
    const int outs = p.norm_out.residual ? tiles * (p.M * kRows * 4 + kRows * 2) : 0;
    x_bytes = std::max(x_bytes, p.M * p.K * 2);
    norm_bytes = std::max(norm_bytes, parts + outs);
  }
  const int MT = p0.M > 8 ? 2 : 1;
  L.xs_vecs = x_bytes / 16;
  L.smem = ring_bytes(stages) + 2 * kWarps * MT * 4 * 32 * 4 + x_bytes + norm_bytes;
  if (kPerSm * (L.smem + 1024) > smem_per_sm)
    return invalid_argument("gemv_fp8_chain: " + std::to_string(L.smem) +
                            " bytes of shared memory a CTA do not fit two an SM");
  // One attribute value per kernel (allow_dynamic_smem keeps the first it sets for a size): the
  // most a CTA may take beside its static shared memory; the occupancy calculator then takes
  // this launch's size.
  int optin = 0;
  cudaFuncAttributes attrs{};
  if (cudaError_t err =
          rt(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
      err != cudaSuccess)
    return err;
  if (cudaError_t err = rt(cudaFuncGetAttributes(&attrs, kernel)); err != cudaSuccess) return err;
  static const bool fixed_attr = std::getenv("RILL_CHAIN_ATTR") != nullptr;  // EXPERIMENT
  const int allow = fixed_attr ? ring_bytes(stages) + 2 * kWarps * 2 * 4 * 32 * 4 + kFp8GemvXStageMaxBytes +
                                     kFp8NormInMaxSums * 4 + 16 + 16 * 1024
                               : optin - static_cast<int>(attrs.sharedSizeBytes);
  if (cudaError_t err = rt(allow_dynamic_smem(kernel, allow));
      err != cudaSuccess)
    return err;
  int resident = 0;
  if (cudaError_t err = rt(
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, kWarps * 32, L.smem));
      err != cudaSuccess)
    return err;
  if (resident * sms < L.grid)
    return invalid_argument("gemv_fp8_chain: " + std::to_string(L.grid) +
                            " CTAs are not resident at once");
  *out = L;
  return cudaSuccess;
}

// Plans c for its kernel and, with `launch`, launches it.
template <typename T, int MT, bool BLOCK, int S = kStages>
cudaError_t run_chain(const Fp8GemvChainParams& c, bool launch, cudaStream_t stream) {
  static const int stages = std::getenv("RILL_CHAIN_STAGES") ? std::atoi(std::getenv("RILL_CHAIN_STAGES")) : 3;  // EXPERIMENT
  if constexpr (S == 3) if (stages == 4) return run_chain<T, MT, BLOCK, 4>(c, launch, stream);
  const auto kernel = gemv_fp8_chain_kernel<T, kWarps, S, kPerSm, MT, BLOCK>;
  ChainLaunch L;
  if (cudaError_t err = plan_chain(c, reinterpret_cast<const void*>(kernel), S, &L);
      err != cudaSuccess || !launch)
    return err;
  ChainArgs<T> a{};
  for (int i = 0; i < c.phases; ++i) {
    const Fp8GemvParams& p = c.phase[i];
    a.ph[i] = {static_cast<const T*>(p.x),
               static_cast<const uint8_t*>(p.w),
               p.scale,
               p.y,
               static_cast<const T*>(p.bias),
               {p.norm_out.residual, static_cast<const T*>(p.norm_out.weight), p.norm_out.sumsq,
                p.norm_in.sumsq, p.norm_in.eps},
               p.N,
               p.K,
               L.phase_grid[i],
               p.epilogue == GemvEpilogue::kSiluMul};
  }
  a.phases = c.phases;
  a.M = c.phase[0].M;
  a.xs_vecs = L.xs_vecs;
  a.counters = c.counters;
  static const int sleep_ns = std::getenv("RILL_CHAIN_SLEEP_NS") ? std::atoi(std::getenv("RILL_CHAIN_SLEEP_NS")) : 0;  // EXPERIMENT
  a.sleep_ns = sleep_ns;
  static const int signal_mode = std::getenv("RILL_CHAIN_SIGNAL") ? std::atoi(std::getenv("RILL_CHAIN_SIGNAL")) : 0;  // EXPERIMENT
  a.signal_mode = signal_mode;
  static const int exit_mode = std::getenv("RILL_CHAIN_EXIT") ? std::atoi(std::getenv("RILL_CHAIN_EXIT")) : 1;  // EXPERIMENT
  a.exit_mode = exit_mode;
  return launch_kernel(kernel, dim3(L.grid), dim3(kWarps * 32), L.smem, stream, a);
}

// run_chain for c's dtype, x tiles and scale layout.
cudaError_t dispatch_chain(const Fp8GemvChainParams& c, bool launch, cudaStream_t stream) {
  if (c.phases < 1 || c.phases > kFp8GemvChainMaxPhases)
    return invalid_argument("gemv_fp8_chain: 1 .. " + std::to_string(kFp8GemvChainMaxPhases) +
                            " phases, not " + std::to_string(c.phases));
  const Fp8GemvParams& p0 = c.phase[0];
  const bool block = p0.scale_layout == Fp8ScaleLayout::kBlock128;
  return dispatch_dtype(p0.dtype, [&]<typename T>() {
    if (p0.M > 8)
      return block ? run_chain<T, 2, true>(c, launch, stream)
                   : run_chain<T, 2, false>(c, launch, stream);
    return block ? run_chain<T, 1, true>(c, launch, stream)
                 : run_chain<T, 1, false>(c, launch, stream);
  });
}

}  // namespace

bool gemv_fp8_chain_supported(const Fp8GemvChainParams& c) {
  return dispatch_chain(c, false, nullptr) == cudaSuccess;
}

cudaError_t launch_gemv_fp8_chain(const Fp8GemvChainParams& c, cudaStream_t stream) {
  return dispatch_chain(c, true, stream);
}

}  // namespace rill::kernels
