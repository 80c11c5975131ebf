// How fast can a chain of short weight-streaming kernels read memory? (issue 28: the fp8 decode
// step's GEMVs run at 86-88% of copy bandwidth, while one long GEMV reaches the read ceiling.)
//
// Replays, as one CUDA graph with programmatic dependent launch, the byte pattern of the
// Llama-2-7B fp8 decode step's GEMVs: 32 layers of qkv [12288, 4096], o [4096, 4096], gate|up
// [22016, 4096] and down [4096, 11008], e4m3 bytes, each kernel reading its weights once
// (16-row tiles, CTA b taking tiles b, b + G, ...) and, after its PDL wait, an 8 KB input that
// the previous kernel wrote. No arithmetic beyond adding the bytes up: what is measured is how
// well each way of staging the weights keeps the memory system busy across kernel boundaries.
//   cp.async  the shape of gemv_fp8_persistent_kernel: 16 warps, every thread copying its own
//             16-byte chunks of rows g and g + 8 into a ring of S iterations, two CTAs an SM;
//   bulk      one producer warp issuing cp.async.bulk copies (a 1 KB piece of each of the 16
//             rows a stage, into padded rows) completing on mbarriers, C consumer warps reading
//             the same chunks the cp.async lanes would; a ring of S stages of 16 KB and P CTAs an
//             SM (with P = 1 and a small ring an SM has room for the next kernel's CTA to start
//             streaming while this one ends; on the H100 that was no faster than two CTAs an SM
//             with deeper rings, docs/performance.md F21).
//   warp bulk every warp its own ring of S stages of 16 rows x P bytes, lanes 0-15 each copying
//             one row's P bytes with cp.async.bulk onto the stage's mbarrier, the warp reading
//             the stage and refilling it itself (no producer warp, no wait between warps). With
//             P = 256 this streamed at 102-104% of copy, against 93.5% for cp.async; a GEMV built
//             on it was no faster than the persistent kernel (docs/performance.md F30).
//   cp.async wide  the cp.async ring with a warp's iteration R consecutive steps (R x 64 bytes of
//             each row, 4 R lanes a row): 128-byte rows streamed at 99-100% of copy; a GEMV on
//             them was no faster (docs/performance.md F30).
//   tma 2d    the same rings, each stage one cp.async.bulk.tensor.2d copy of a box of 16 rows
//             x B bytes. B = 64 (one step of the persistent kernel's warp) ran at 70-81% of copy,
//             128 at 92%, 256 at 100-102%: the rows' width, not the number of copies, decides.
//   wgmma     (a probe of a tensor-core consumer, not an engine kernel) the cp.async staging
//             into the core-matrix layout wgmma reads (8 rows x 16 bytes), four warpgroups of
//             a CTA splitting K in 256-byte stages, each stage consumed by eight
//             wgmma.m64n16k32.e4m3 with the weights as B straight from shared memory and x as
//             three e4m3 terms (x ~ s0 h + s1 m + s2 l) in rows 0-2 of A (registers): no
//             conversion of the weights. --check compares one such GEMV with the fp64 product.
//             On the H100 it ran at 58-60% of copy, against 90-91% for the engine's persistent
//             GEMV, and its sums were 2.6e-4 of max |y| off with fresh sums every 128 of K
//             (docs/performance.md F29).
// Also one kernel over all the bytes (the bulk shape), for the ceiling of a single long grid.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "engine/model/fp8.h"
#include "kernels/src/launch.cuh"

namespace {

constexpr int kRows = 16;      // rows a tile
constexpr int kPiece = 1024;   // bytes of a row a bulk stage
constexpr int kPitch = 1088;   // a row's pitch in a bulk stage (conflict-free 16-byte reads)
constexpr int kXBytes = 8192;  // the input each kernel reads after its wait

using rill::kernels::pdl_launch_dependents;
using rill::kernels::pdl_wait;
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint32_t add_bytes(uint4 v) {
  return v.x + v.y + v.z + v.w;
}

// 16 bytes from global `src` into shared `dst` by cp.async (zeros when !ok).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(ok ? 16 : 0)
               : "memory");
}

// After the wait: the previous kernel's output, read as the GEMV reads x (L2).
__device__ __forceinline__ uint32_t read_input(const uint4* x, int tid, int threads) {
  uint32_t s = 0;
  for (int i = tid; i < kXBytes / 16; i += threads) s += add_bytes(__ldcg(x + i));
  return s;
}

// Each CTA's sum for the next kernel to read (the first 8 threads store the same slot).
__device__ __forceinline__ void write_output(uint4* y, uint32_t s) {
  if (threadIdx.x < kXBytes / 16 / 64) y[blockIdx.x % (kXBytes / 16)] = make_uint4(s, 0, 0, 0);
}

struct Job {
  const uint8_t* w;  // [N, K]
  int N, K;
  const uint4* x;  // [kXBytes]
  uint4* y;
  uint32_t* sink;
  const uint8_t* xt = nullptr;  // wgmma: x as three e4m3 terms [3][K]
  const float* xs = nullptr;    // their scales [3]
  float* yf = nullptr;          // wgmma: y [N]
};

// The cp.async kernels' ring: `start()`, then S - 1 iterations fetched before the PDL wait; then
// for each of the CTA's tiles `tile_start(ti)` and `per_tile` iterations that each refill the
// slot before theirs, wait for their own and add it up (`consume(slot)` returns the sum).
// Returns the input's and the slots' sum.
template <int S, typename Start, typename Fetch, typename TileStart, typename Consume>
__device__ __forceinline__ uint32_t cp_async_ring(const Job& j, int tiles, int per_tile,
                                                  Start&& start, Fetch&& fetch,
                                                  TileStart&& tile_start, Consume&& consume) {
  pdl_launch_dependents();
  start();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  uint32_t s = read_input(j.x, threadIdx.x, blockDim.x);
  int slot = 0;
  for (int ti = 0; ti < tiles; ++ti)
    for (int it = 0; it < per_tile; ++it) {
      if (it == 0) tile_start(ti);
      fetch(slot == 0 ? S - 1 : slot - 1);
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
      s += consume(slot);
      slot = slot == S - 1 ? 0 : slot + 1;
    }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  return s;
}

// ---- cp.async: gemv_fp8_persistent_kernel's staging ----------------------------------------
// PF > 0: lanes 0-15 of warp 0 also pull whole rows into the L2 (cp.async.bulk.prefetch.L2, one
// row each) of the tile PF - (PF > 2) ahead, at the start of every tile; PF >= 2 also the first
// PF - 1 tiles before the PDL wait.
template <int W, int S, int PF = 0>
__global__ void __launch_bounds__(W * 32, 2) cp_async_kernel(Job j) {
  extern __shared__ uint4 ring[];  // [S][2][W * 32]
  const int G = gridDim.x, tiles_total = j.N / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;
  const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
  const int chunks = j.K / 16, steps = (chunks + 3) / 4;
  const int per_tile = warp < steps ? (steps - warp + W - 1) / W : 0;
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows, c = 4 * (warp + f_it * W) + t;
      const bool ok = c < chunks;
      const uint8_t* lo = j.w + static_cast<int64_t>(n0 + g) * j.K + 16 * min(c, chunks - 1);
      const uint32_t dst = smem_u32(ring + slot * 2 * W * 32 + threadIdx.x);
      cp_async16(dst, lo, ok);
      cp_async16(dst + W * 32 * 16, lo + 8 * j.K, ok);
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  const auto prefetch_tile = [&](int tile) {
    if (PF > 0 && threadIdx.x < kRows && tile < tiles) {
      const uint8_t* row =
          j.w + static_cast<int64_t>((blockIdx.x + tile * G) * kRows + threadIdx.x) * j.K;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(row), "r"(j.K) : "memory");
    }
  };
  constexpr int kAhead = PF > 2 ? 2 : 1;
  const uint32_t s = cp_async_ring<S>(
      j, tiles, per_tile,
      [&] {
        if (PF >= 2)
          for (int p = 0; p < kAhead; ++p) prefetch_tile(p);
      },
      fetch,
      [&](int ti) {
        if (PF > 0) prefetch_tile(ti + kAhead);
      },
      [&](int slot) {
        const uint4* own = ring + slot * 2 * W * 32 + threadIdx.x;
        return add_bytes(own[0]) + add_bytes(own[W * 32]);
      });
  write_output(j.y, s);
  if (s == 0x9e3779b9u) *j.sink = s;  // keeps the sums
}

// ---- cp.async wide: each warp's iteration R steps (R x 64 bytes) of each of 16 rows ------------
// cp_async_kernel with warp w taking pieces w, w + W, ... of R consecutive steps: a copy
// instruction covers 32 / (4 R) rows x R * 64 bytes (4 R lanes a row) instead of 8 rows x 64
// bytes, and the warp reads its stage after its wait and a __syncwarp (a lane reads what other
// lanes copied), as a GEMV consumer with another lane mapping would.
template <int W, int S, int R>
__global__ void __launch_bounds__(W * 32, 2) cp_async_wide_kernel(Job j) {
  extern __shared__ uint4 ring[];        // [S][W][16 rows][R * 4] uint4
  constexpr int kStage = kRows * R * 4;  // uint4 a warp's stage
  constexpr int kLanesRow = 4 * R, kRowsInstr = 32 / kLanesRow;
  const int G = gridDim.x, tiles_total = j.N / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int pieces = (j.K + 64 * R - 1) / (64 * R);
  const int per_tile = warp < pieces ? (pieces - warp + W - 1) / W : 0;
  uint4* const mine = ring + warp * kStage;  // slot s at + s * W * kStage
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows;
      const int c = (warp + f_it * W) * R * 4 + lane % kLanesRow;  // 16-byte chunk of the row
      const bool ok = c < j.K / 16;
#pragma unroll
      for (int i = 0; i < kRows / kRowsInstr; ++i) {
        const int r = i * kRowsInstr + lane / kLanesRow;
        const uint8_t* src = j.w + static_cast<int64_t>(n0 + r) * j.K + 16 * min(c, j.K / 16 - 1);
        const uint32_t dst = smem_u32(mine + slot * W * kStage + r * kLanesRow + lane % kLanesRow);
        cp_async16(dst, src, ok);
      }
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  const uint32_t s = cp_async_ring<S>(
      j, tiles, per_tile, [] {}, fetch, [](int) {},
      [&](int slot) {
        __syncwarp();  // the other lanes' copies
        const uint4* st = mine + slot * W * kStage;
        uint32_t sum = 0;
#pragma unroll
        for (int v = lane; v < kStage; v += 32) sum += add_bytes(st[(v + 5 * (v / 32)) % kStage]);
        __syncwarp();  // read before the slot is refilled
        return sum;
      });
  write_output(j.y, s);
  if (s == 0x9e3779b9u) *j.sink = s;
}

// ---- bulk: a producer warp, cp.async.bulk and mbarriers -------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred p;\n W: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      " @!p bra W;\n}" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(b))
      : "memory");
}

template <int C, int S>  // C consumer warps, a ring of S stages
__global__ void __launch_bounds__((C + 1) * 32) bulk_kernel(Job j) {
  extern __shared__ __align__(128) uint8_t smem[];  // [S][16][kPitch], then full[S], empty[S]
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + S * kRows * kPitch);
  uint64_t* empty = full + S;
  const int G = gridDim.x, tiles_total = j.N / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;
  const int stages_a_tile = (j.K + kPiece - 1) / kPiece, total = tiles * stages_a_tile;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) mbar_init(full + i, 1), mbar_init(empty + i, C);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  pdl_launch_dependents();
  if (warp == C) {  // the producer: lane r copies row r's piece of every stage
    for (int i = 0; i < total; ++i) {
      const int slot = i % S, tile = i / stages_a_tile, st = i % stages_a_tile;
      const int n0 = (blockIdx.x + tile * G) * kRows, k0 = st * kPiece;
      const uint32_t piece = min(kPiece, j.K - k0);
      if (i >= S) mbar_wait(empty + slot, ((i / S) - 1) & 1);
      if (lane == 0) mbar_expect(full + slot, piece * kRows);
      __syncwarp();
      if (lane < kRows)
        bulk_copy(smem + (slot * kRows + lane) * kPitch,
                  j.w + static_cast<int64_t>(n0 + lane) * j.K + k0, piece, full + slot);
    }
    return;  // the producer never reads the previous kernel's output nor writes
  }
  pdl_wait();
  uint32_t s = read_input(j.x, threadIdx.x, C * 32);
  const int t = lane & 3, g = lane >> 2;
  for (int i = 0; i < total; ++i) {
    const int slot = i % S, st = i % stages_a_tile;
    const int steps = min(kPiece, j.K - st * kPiece) / 64;  // 64 bytes of 16 rows a step
    mbar_wait(full + slot, (i / S) & 1);
    const uint8_t* base = smem + slot * kRows * kPitch + 16 * t;
    for (int step = warp; step < steps; step += C) {
      s += add_bytes(*reinterpret_cast<const uint4*>(base + g * kPitch + 64 * step));
      s += add_bytes(*reinterpret_cast<const uint4*>(base + (g + 8) * kPitch + 64 * step));
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + slot);
  }
  write_output(j.y, s);
  if (s == 0x9e3779b9u) *j.sink = s;
}

// ---- warp rings: every warp its own ring of bulk copies ---------------------------------------
// W warps, each streaming its own (tile, piece) items through a private ring of S stages of
// 16 rows x P bytes: the warp reads a stage and refills the slot itself (no producer warp, no
// barrier between warps: a slot is refilled as soon as the one warp that reads it is done).
// Warp w takes pieces w, w + W, ... (P bytes of K) of each of the CTA's tiles. A stage is
// TENSOR: one cp.async.bulk.tensor.2d copy of a box of 16 rows x P bytes (`map` over w [N, K]);
// with P = 64 a warp's stage is exactly one step of gemv_fp8_persistent_kernel's warp;
// else: 16 row copies (cp.async.bulk by lanes 0-15, one row each). Both complete on the stage's
// mbarrier.
template <int W, int S, int P, bool TENSOR>
__global__ void __launch_bounds__(W * 32, 2)
    warp_ring_kernel(const __grid_constant__ CUtensorMap map, Job j) {
  extern __shared__ __align__(128) uint8_t smem[];  // [W][S][16][P], then full [W][S]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* const ring = smem + warp * S * kRows * P;
  uint64_t* const full = reinterpret_cast<uint64_t*>(smem + W * S * kRows * P) + warp * S;
  const int G = gridDim.x, tiles_total = j.N / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;
  const int pieces = (j.K + P - 1) / P;
  const int per_tile = warp < pieces ? (pieces - warp + W - 1) / W : 0;
  const int total = tiles * per_tile;
  if (lane == 0) {
    for (int i = 0; i < S; ++i) mbar_init(full + i, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  const auto issue = [&](int i) {  // item i into slot i % S
    const int slot = i % S, k0 = (warp + (i % per_tile) * W) * P;
    const int n0 = (blockIdx.x + (i / per_tile) * G) * kRows;
    uint8_t* const stage = ring + slot * kRows * P;
    if constexpr (TENSOR) {
      if (lane == 0) {
        mbar_expect(full + slot, kRows * P);  // the whole box, bytes past K zero-filled
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_u32(stage)),
            "l"(reinterpret_cast<uint64_t>(&map)), "r"(k0), "r"(n0), "r"(smem_u32(full + slot))
            : "memory");
      }
    } else {
      const uint32_t bytes = min(P, j.K - k0);
      if (lane == 0) mbar_expect(full + slot, bytes * kRows);
      __syncwarp();
      if (lane < kRows)
        bulk_copy(stage + lane * P, j.w + static_cast<int64_t>(n0 + lane) * j.K + k0, bytes,
                  full + slot);
    }
  };
  pdl_launch_dependents();
  for (int i = 0; i < min(S, total); ++i) issue(i);
  pdl_wait();
  uint32_t s = read_input(j.x, threadIdx.x, W * 32);
  for (int i = 0; i < total; ++i) {
    const int slot = i % S;
    mbar_wait(full + slot, (i / S) & 1);
    const uint4* st = reinterpret_cast<const uint4*>(ring + slot * kRows * P);
#pragma unroll
    for (int v = lane; v < kRows * P / 16; v += 32) s += add_bytes(st[v]);
    __syncwarp();
    if (i + S < total) issue(i + S);
  }
  write_output(j.y, s);
  if (s == 0x9e3779b9u) *j.sink = s;
}

// A tensor map over w [N, K] bytes with boxes of 16 rows x `box` bytes.
CUtensorMap weight_map(const Job& j, int box) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    BENCH_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                cudaEnableDefault, &q));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  CUtensorMap m;
  const cuuint64_t dims[2] = {cuuint64_t(j.K), cuuint64_t(j.N)}, strides[1] = {cuuint64_t(j.K)};
  const cuuint32_t boxes[2] = {cuuint32_t(box), kRows}, elem[2] = {1, 1};
  if (encode(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(j.w), dims, strides, boxes,
             elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
             CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    std::exit(1);
  }
  return m;
}

// ---- wgmma: a tensor-core consumer reading the weights from shared memory ------------------
constexpr int kStage = 256;  // K bytes of the 16 rows a warpgroup stage (4 KB)

// Shared-memory matrix descriptor of a K-major operand without swizzle: core matrices of 8 rows x
// 16 bytes (128 contiguous bytes), `lbo` bytes to the next one along K, `sbo` along the rows.
__device__ __forceinline__ uint64_t gmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr >> 4) & 0x3fff) | uint64_t((lbo >> 4) & 0x3fff) << 16 |
         uint64_t((sbo >> 4) & 0x3fff) << 32;
}

// d[64 x 16] (+)= a[64 x 32] (registers, e4m3) * b[32 x 16] (shared memory, e4m3), fp32;
// accumulate false: d is overwritten.
__device__ __forceinline__ void wgmma_m64n16k32(float (&d)[8], const uint32_t (&a)[4], uint64_t b,
                                                bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma: sm_90a only
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)));
#else
  __trap();
#endif
}

// 0: wgmma.fence (registers written before the wgmmas that read them), 1: commit the wgmmas
// issued since the last commit as a group, 2: wait for every group.
__device__ __forceinline__ void wgmma_sync(int what) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (what == 0) asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
  if (what == 1) asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  if (what == 2) asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#else
  __trap();
#endif
}

// Four warpgroups; warpgroup q takes the 256-byte K stages q, q + 4, ... of every 16-row tile
// (CTA b: tiles b, b + G, ...) through its own cp.async ring of S stages. Shared memory: x's
// terms [3][K], the rings [4][S][4 KB], the partial sums [4][16].
template <int S, int P>
__global__ void __launch_bounds__(512, P) wgmma_kernel(Job j) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* xs = smem;  // [3][K]
  uint8_t* rings = smem + (3 * j.K + 127) / 128 * 128;
  float* part = reinterpret_cast<float*>(rings + 4 * S * kRows * kStage);  // [4][16]
  const int G = gridDim.x, tiles_total = j.N / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;
  const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127, warp = tid >> 5, lane = tid & 31;
  const int stages = j.K / kStage;
  const int per_tile = wg < stages ? (stages - wg + 3) / 4 : 0;  // this warpgroup's stages
  uint8_t* ring = rings + wg * S * kRows * kStage;
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows, k0 = (wg + 4 * f_it) * kStage;
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        // Chunk c: row (c & 7) + 8 ((c >> 3) & 1), 16-byte piece c >> 4, stored at 16 c: the
        // core-matrix layout is then linear in c (no bank conflicts).
        const int c = tid + 128 * q, r = (c & 7) | (c & 8), kc = c >> 4;
        const uint8_t* src = j.w + static_cast<int64_t>(n0 + r) * j.K + k0 + 16 * kc;
        const uint32_t dst = smem_u32(ring + slot * kRows * kStage + 16 * c);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
      }
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  for (int i = threadIdx.x; i < 3 * j.K / 16; i += 512)
    reinterpret_cast<uint4*>(xs)[i] = __ldcg(reinterpret_cast<const uint4*>(j.xt) + i);
  __syncthreads();
  // A's rows 0-2 are x's terms: warp 0, lanes g = lane / 4 < 3; every other row is zero.
  const int g = lane >> 2, t = lane & 3;
  const bool a_live = warp == 0 && g < 3;
  const uint8_t* xrow = xs + min(g, 2) * j.K + 4 * t;
  int slot = 0;
  for (int ti = 0; ti < tiles; ++ti) {
    float d[8] = {};
    for (int it = 0; it < per_tile; ++it) {
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 2) : "memory");
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory");  // the stage has landed
      fetch(slot == 0 ? S - 1 : slot - 1);  // the stage before this one is free
      const int k0 = (wg + 4 * it) * kStage;
      const uint32_t base = smem_u32(ring + slot * kRows * kStage);
      // Two halves of four wgmmas (128 of K each), each into fresh sums that are then added in
      // fp32: the tensor cores' fp8 sums keep fewer bits than fp32 over longer runs.
      float h[2][8];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t a[4][4] = {};  // loaded first: wgmma reads them asynchronously
        if (a_live) {
#pragma unroll
          for (int s4 = 0; s4 < 4; ++s4) {
            const int kk = k0 + 128 * half + 32 * s4;
            a[s4][0] = *reinterpret_cast<const uint32_t*>(xrow + kk);
            a[s4][2] = *reinterpret_cast<const uint32_t*>(xrow + kk + 16);
          }
        }
        wgmma_sync(0);
#pragma unroll
        for (int s4 = 0; s4 < 4; ++s4)  // 32 bytes of K: four core matrices from 512 (4 half + s4)
          wgmma_m64n16k32(h[half], a[s4], gmma_desc(base + 512 * (4 * half + s4), 256, 128),
                          s4 > 0);
        wgmma_sync(1);
      }
      wgmma_sync(2);
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] += h[0][e] + h[1][e];
      slot = slot == S - 1 ? 0 : slot + 1;
    }
    // d[i]: row 16 warp + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t + (i & 1). Rows 0-2
    // (warp 0, g < 3, i in {0, 1, 4, 5}) are the terms' sums: y = s0 d0 + s1 d1 + s2 d2.
    if (warp == 0) {
      float c[4] = {d[0], d[1], d[4], d[5]};
      const float sc = g < 3 ? j.xs[g] : 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        c[e] *= sc;
        c[e] += __shfl_down_sync(0xffffffffu, c[e], 4);
        c[e] += __shfl_down_sync(0xffffffffu, c[e], 8);  // lanes 0-3: rows 0 + 1 + 2 (+ 3: 0)
      }
      if (g == 0) {
        part[wg * 16 + 2 * t] = c[0];
        part[wg * 16 + 2 * t + 1] = c[1];
        part[wg * 16 + 8 + 2 * t] = c[2];
        part[wg * 16 + 9 + 2 * t] = c[3];
      }
    }
    __syncthreads();
    if (threadIdx.x < kRows) {
      const int n = (blockIdx.x + ti * G) * kRows + threadIdx.x;
      j.yf[n] = part[threadIdx.x] + part[16 + threadIdx.x] + part[32 + threadIdx.x] +
                part[48 + threadIdx.x];
    }
    __syncthreads();
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

// ---- the chain -------------------------------------------------------------------------------
struct Variant {
  std::string name;
  bool bulk;
  int warps, stages, per_sm;  // bulk: consumer warps; wgmma: warps 0
  int piece = 0;        // warp bulk: bytes of a row a stage (bulk false); tma 2d: minus those bytes
  int l2_prefetch = 0;  // cp.async: cp_async_kernel's PF
  int wide = 0;         // cp.async: steps a warp's iteration (cp_async_wide_kernel's R)
};

int grid_for(int N, int slots) {  // persistent_grid: fewest tiles a CTA, then fewest CTAs
  const int tiles = N / kRows, per = (tiles + slots - 1) / slots;
  return (tiles + per - 1) / per;
}

template <typename K, typename... Args>
void launch(K kernel, int grid, int threads, int smem, cudaStream_t s, bool pdl,
            const Args&... args) {
  cudaLaunchConfig_t c = {};
  c.gridDim = dim3(grid);
  c.blockDim = dim3(threads);
  c.dynamicSmemBytes = smem;
  c.stream = s;
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  c.attrs = &a;
  c.numAttrs = 1;
  BENCH_CUDA(cudaLaunchKernelEx(&c, kernel, args...));
}

template <int W, int S, int R>
void run_cp_async_wide(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = S * W * kRows * R * 64;
  BENCH_CUDA(cudaFuncSetAttribute(cp_async_wide_kernel<W, S, R>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch(cp_async_wide_kernel<W, S, R>, grid_for(j.N, 2 * sms), W * 32, smem, s, pdl, j);
}

template <int W, int S, int PF = 0>
void run_cp_async(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = S * 2 * W * 32 * 16;
  BENCH_CUDA(cudaFuncSetAttribute(cp_async_kernel<W, S, PF>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch(cp_async_kernel<W, S, PF>, grid_for(j.N, 2 * sms), W * 32, smem, s, pdl, j);
}

template <int C, int S>
void run_bulk(int sms, int per_sm, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = S * kRows * kPitch + 2 * S * 8;
  BENCH_CUDA(
      cudaFuncSetAttribute(bulk_kernel<C, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch(bulk_kernel<C, S>, grid_for(j.N, per_sm * sms), (C + 1) * 32, smem, s, pdl, j);
}

template <int S, int P = 2>
void run_wgmma(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const auto kernel = wgmma_kernel<S, P>;
  const int smem = (3 * j.K + 127) / 128 * 128 + 4 * S * kRows * kStage + 4 * 16 * 4;
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (3 * 11008 + 127) / 128 * 128 + 4 * S * kRows * kStage + 256));
  launch(kernel, grid_for(j.N, P * sms), 512, smem, s, pdl, j);
}

template <int W, int S, int P, bool TENSOR>
void run_warp_ring(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = W * S * kRows * P + W * S * 8;
  const auto kernel = warp_ring_kernel<W, S, P, TENSOR>;
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const CUtensorMap map = TENSOR ? weight_map(j, P) : CUtensorMap{};
  launch(kernel, grid_for(j.N, 2 * sms), W * 32, smem, s, pdl, map, j);
}

void run(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
  if (v.piece < 0) {  // tma 2d: boxes of 16 rows x -piece bytes
    const int key = v.warps * 10000 - v.piece * 10 + v.stages;
    switch (key) {
      case 160643:
        return run_warp_ring<16, 3, 64, true>(sms, j, s, pdl);
      case 160644:
        return run_warp_ring<16, 4, 64, true>(sms, j, s, pdl);
      case 160646:
        return run_warp_ring<16, 6, 64, true>(sms, j, s, pdl);
      case 161283:
        return run_warp_ring<16, 3, 128, true>(sms, j, s, pdl);
      case 162561:
        return run_warp_ring<16, 1, 256, true>(sms, j, s, pdl);
      case 82562:
        return run_warp_ring<8, 2, 256, true>(sms, j, s, pdl);
      default:
        std::fprintf(stderr, "no tma shape %d\n", key);
        std::exit(2);
    }
  }
  if (v.piece > 0) {
    const int key = v.warps * 10000 + v.piece * 10 + v.stages;
    switch (key) {
      case 160643:
        return run_warp_ring<16, 3, 64, false>(sms, j, s, pdl);
      case 160644:
        return run_warp_ring<16, 4, 64, false>(sms, j, s, pdl);
      case 160646:
        return run_warp_ring<16, 6, 64, false>(sms, j, s, pdl);
      case 161282:
        return run_warp_ring<16, 2, 128, false>(sms, j, s, pdl);
      case 161283:
        return run_warp_ring<16, 3, 128, false>(sms, j, s, pdl);
      case 81286:
        return run_warp_ring<8, 6, 128, false>(sms, j, s, pdl);
      case 82562:
        return run_warp_ring<8, 2, 256, false>(sms, j, s, pdl);
      case 82563:
        return run_warp_ring<8, 3, 256, false>(sms, j, s, pdl);
      case 45123:
        return run_warp_ring<4, 3, 512, false>(sms, j, s, pdl);
      case 162561:
        return run_warp_ring<16, 1, 256, false>(sms, j, s, pdl);
      case 122561:
        return run_warp_ring<12, 1, 256, false>(sms, j, s, pdl);
      default:
        std::fprintf(stderr, "no warp bulk shape %d\n", key);
        std::exit(2);
    }
  }
  if (!v.bulk && v.warps == 0) {
    if (v.per_sm == 1)
      return v.stages == 6 ? run_wgmma<6, 1>(sms, j, s, pdl) : run_wgmma<8, 1>(sms, j, s, pdl);
    return v.stages == 3 ? run_wgmma<3>(sms, j, s, pdl) : run_wgmma<4>(sms, j, s, pdl);
  }
  if (!v.bulk && v.wide > 0) {
    switch (v.warps * 100 + v.wide * 10 + v.stages) {
      case 1613:
        return run_cp_async_wide<16, 3, 1>(sms, j, s, pdl);
      case 1622:
        return run_cp_async_wide<16, 2, 2>(sms, j, s, pdl);
      case 1623:
        return run_cp_async_wide<16, 3, 2>(sms, j, s, pdl);
      case 1641:
        return run_cp_async_wide<16, 1, 4>(sms, j, s, pdl);
      case 842:
        return run_cp_async_wide<8, 2, 4>(sms, j, s, pdl);
      case 843:
        return run_cp_async_wide<8, 3, 4>(sms, j, s, pdl);
      default:
        std::fprintf(stderr, "no wide cp.async shape\n");
        std::exit(2);
    }
  }
  if (!v.bulk) {
    switch (v.l2_prefetch) {
      case 1:
        return run_cp_async<16, 3, 1>(sms, j, s, pdl);
      case 2:
        return run_cp_async<16, 3, 2>(sms, j, s, pdl);
      case 3:
        return run_cp_async<16, 3, 3>(sms, j, s, pdl);
      default:
        return run_cp_async<16, 3>(sms, j, s, pdl);
    }
  }
  const int key = v.warps * 100 + v.stages;
  switch (key) {
    case 804:
      return run_bulk<8, 4>(sms, v.per_sm, j, s, pdl);
    case 806:
      return run_bulk<8, 6>(sms, v.per_sm, j, s, pdl);
    case 1604:
      return run_bulk<16, 4>(sms, v.per_sm, j, s, pdl);
    case 1606:
      return run_bulk<16, 6>(sms, v.per_sm, j, s, pdl);
    case 1603:
      return run_bulk<16, 3>(sms, v.per_sm, j, s, pdl);
    case 403:
      return run_bulk<4, 3>(sms, v.per_sm, j, s, pdl);
    case 406:
      return run_bulk<4, 6>(sms, v.per_sm, j, s, pdl);
    case 808:
      return run_bulk<8, 8>(sms, v.per_sm, j, s, pdl);
    default:
      std::fprintf(stderr, "no bulk shape %d\n", key);
      std::exit(2);
  }
}

// x [K] as three e4m3 terms with scales: x ~ s0 h + s1 m + s2 l (each term the e4m3 rounding of
// what the ones before it left, scaled so its largest magnitude is 448).
void split_terms(const std::vector<float>& x, std::vector<uint8_t>& t, float (&sc)[3]) {
  const size_t K = x.size();
  t.assign(3 * K, 0);
  std::vector<double> r(x.begin(), x.end());
  for (int i = 0; i < 3; ++i) {
    double mx = 0;
    for (double v : r) mx = std::max(mx, std::abs(v));
    sc[i] = mx > 0 ? static_cast<float>(mx / 448) : 1.0f;
    for (size_t k = 0; k < K; ++k) {
      t[i * K + k] = rill::fp8::e4m3_from_float(static_cast<float>(r[k] / sc[i]));
      r[k] -= double(sc[i]) * rill::fp8::e4m3_to_float(t[i * K + k]);
    }
  }
}

// One wgmma GEMV against the fp64 product of the same e4m3 weights with x itself.
bool check_wgmma(int sms, cudaStream_t s) {
  bool ok = true;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto [N, K] : {std::pair{4096, 4096}, {4096, 11008}, {12288, 4096}}) {
    std::vector<uint8_t> w(size_t(N) * K);
    for (auto& b : w) b = rill::fp8::e4m3_from_float(normal(rng) * 16);
    std::vector<float> x(K);
    for (float& v : x) v = normal(rng) * (rng() % 64 == 0 ? 30.0f : 1.0f);  // some outliers
    std::vector<uint8_t> terms;
    float sc[3];
    split_terms(x, terms, sc);
    uint8_t *dw = nullptr, *dt = nullptr;
    float *dsc = nullptr, *dy = nullptr;
    BENCH_CUDA(cudaMalloc(&dw, w.size()));
    BENCH_CUDA(cudaMalloc(&dt, terms.size()));
    BENCH_CUDA(cudaMalloc(&dsc, sizeof(sc)));
    BENCH_CUDA(cudaMalloc(&dy, N * sizeof(float)));
    BENCH_CUDA(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(dt, terms.data(), terms.size(), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(dsc, sc, sizeof(sc), cudaMemcpyHostToDevice));
    Job j{dw, N, K, nullptr, nullptr, nullptr, dt, dsc, dy};
    for (int S : {3, 8}) {  // two CTAs an SM (64 registers a thread) and one
      BENCH_CUDA(cudaMemset(dy, 0xff, N * sizeof(float)));
      if (S == 3)
        run_wgmma<3>(sms, j, s, false);
      else
        run_wgmma<8, 1>(sms, j, s, false);
      BENCH_CUDA(cudaStreamSynchronize(s));
      std::vector<float> y(N);
      BENCH_CUDA(cudaMemcpy(y.data(), dy, N * sizeof(float), cudaMemcpyDeviceToHost));
      double worst = 0, ymax = 0, worst_terms = 0;
      for (int n = 0; n < N; ++n) {
        double ref = 0, ref_terms = 0;
        for (int k = 0; k < K; ++k) {
          const double wv = rill::fp8::e4m3_to_float(w[size_t(n) * K + k]);
          ref += wv * x[k];
          double xt = 0;
          for (int i = 0; i < 3; ++i)
            xt += double(sc[i]) * rill::fp8::e4m3_to_float(terms[i * K + k]);
          ref_terms += wv * xt;
        }
        ymax = std::max(ymax, std::abs(ref));
        worst = std::max(worst, std::abs(y[n] - ref));
        worst_terms = std::max(worst_terms, std::abs(ref_terms - ref));
      }
      const double rel = worst / ymax;
      std::printf(
          "check wgmma ring %d, N %d K %d: max |y - y64| / max |y64| = %.3g (x's terms "
          "alone %.3g)\n",
          S, N, K, rel, worst_terms / ymax);
      ok = ok && rel < 1e-4;
    }
    BENCH_CUDA(cudaFree(dw));
    BENCH_CUDA(cudaFree(dt));
    BENCH_CUDA(cudaFree(dsc));
    BENCH_CUDA(cudaFree(dy));
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 32;
  bool random = false;  // weight bytes: all 0x01 (the default) or random
  bool check = false;
  for (int i = 1; i < argc; i += 2) {
    if (std::string(argv[i]) == "--check") {
      check = true;
      --i;
    } else if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s [--layers N] [--weights ones|random] [--check]\n", argv[0]);
      return 2;
    } else if (std::string(argv[i]) == "--layers") {
      layers = std::atoi(argv[i + 1]);
    } else if (std::string(argv[i]) == "--weights" &&
               (std::string(argv[i + 1]) == "ones" || std::string(argv[i + 1]) == "random")) {
      random = std::string(argv[i + 1]) == "random";
    } else {
      std::fprintf(stderr, "usage: %s [--layers N] [--weights ones|random] [--check]\n", argv[0]);
      return 2;
    }
  }
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  if (check) return check_wgmma(sms, s) ? 0 : 1;
  const rill::bench::Ceilings ceil = rill::bench::measure_ceilings(s);

  const int shapes[4][2] = {{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}};
  size_t layer_bytes = 0;
  for (const auto& sh : shapes) layer_bytes += size_t(sh[0]) * sh[1];
  const size_t total = layer_bytes * layers;
  uint8_t* w = nullptr;
  uint4* xy = nullptr;
  uint32_t* sink = nullptr;
  BENCH_CUDA(cudaMalloc(&w, total));
  if (random) {
    rill::bench::fill_uniform_half(w, total / 2, 17, 1.0f, s);
  } else {
    BENCH_CUDA(cudaMemset(w, 1, total));
  }
  BENCH_CUDA(cudaMalloc(&xy, 2 * kXBytes));
  BENCH_CUDA(cudaMemset(xy, 0, 2 * kXBytes));
  BENCH_CUDA(cudaMalloc(&sink, 4));
  // wgmma: x's terms (any e4m3 bytes but NaN: 0x11), their scales and y.
  uint8_t* xt = nullptr;
  float *xsc = nullptr, *yf = nullptr;
  BENCH_CUDA(cudaMalloc(&xt, 3 * 11008));
  BENCH_CUDA(cudaMemset(xt, 0x11, 3 * 11008));
  BENCH_CUDA(cudaMalloc(&xsc, 3 * sizeof(float)));
  BENCH_CUDA(cudaMemset(xsc, 0, 3 * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&yf, 22016 * sizeof(float)));

  std::vector<Job> jobs;
  size_t off = 0;
  for (int l = 0; l < layers; ++l)
    for (const auto& sh : shapes) {
      const int i = static_cast<int>(jobs.size());
      jobs.push_back({w + off, sh[0], sh[1], xy + (i & 1) * (kXBytes / 16),
                      xy + ((i + 1) & 1) * (kXBytes / 16), sink, xt, xsc, yf});
      off += size_t(sh[0]) * sh[1];
    }
  // One grid over every byte: [total / 4096, 4096].
  const Job whole{w, static_cast<int>(total / 4096), 4096, xy, xy + kXBytes / 16, sink};

  const std::vector<Variant> variants = {
      {"cp.async 16w ring 3, 2/SM", false, 16, 3, 2},
      {"bulk 16+1w ring 3, 2/SM", true, 16, 3, 2},
      {"bulk 8+1w ring 4, 2/SM", true, 8, 4, 2},
      {"bulk 8+1w ring 6, 1/SM", true, 8, 6, 1},
      {"bulk 8+1w ring 8, 1/SM", true, 8, 8, 1},
      {"bulk 16+1w ring 6, 1/SM", true, 16, 6, 1},
      {"bulk 4+1w ring 6, 1/SM", true, 4, 6, 1},
      {"bulk 8+1w ring 6, 2/SM", true, 8, 6, 2},
      {"bulk 4+1w ring 3, 3/SM", true, 4, 3, 3},
      {"wgmma 4wg ring 3, 2/SM", false, 0, 3, 2},
      {"wgmma 4wg ring 4, 2/SM", false, 0, 4, 2},
      {"wgmma 4wg ring 6, 1/SM", false, 0, 6, 1},
      {"wgmma 4wg ring 8, 1/SM", false, 0, 8, 1},
      {"warp bulk 16w 16x64 ring 3", false, 16, 3, 2, 64},
      {"warp bulk 16w 16x64 ring 4", false, 16, 4, 2, 64},
      {"warp bulk 16w 16x64 ring 6", false, 16, 6, 2, 64},
      {"warp bulk 16w 16x128 ring 2", false, 16, 2, 2, 128},
      {"warp bulk 16w 16x128 ring 3", false, 16, 3, 2, 128},
      {"warp bulk 8w 16x128 ring 6", false, 8, 6, 2, 128},
      {"warp bulk 8w 16x256 ring 2", false, 8, 2, 2, 256},
      {"warp bulk 8w 16x256 ring 3", false, 8, 3, 2, 256},
      {"warp bulk 4w 16x512 ring 3", false, 4, 3, 2, 512},
      {"warp bulk 16w 16x256 ring 1", false, 16, 1, 2, 256},
      {"warp bulk 12w 16x256 ring 1", false, 12, 1, 2, 256},
      {"cp.async 16w 16x64 ring 3 *", false, 16, 3, 2, 0, 0, 1},
      {"cp.async 16w 16x128 ring 2 *", false, 16, 2, 2, 0, 0, 2},
      {"cp.async 16w 16x128 ring 3 *", false, 16, 3, 2, 0, 0, 2},
      {"cp.async 16w 16x256 ring 1 *", false, 16, 1, 2, 0, 0, 4},
      {"cp.async 8w 16x256 ring 2 *", false, 8, 2, 2, 0, 0, 4},
      {"cp.async 8w 16x256 ring 3 *", false, 8, 3, 2, 0, 0, 4},
      {"cp.async + L2 next tile", false, 16, 3, 2, 0, 1},
      {"cp.async + L2 first, next", false, 16, 3, 2, 0, 2},
      {"cp.async + L2 2 ahead", false, 16, 3, 2, 0, 3},
      {"tma 2d 16w 16x64 ring 3", false, 16, 3, 2, -64},
      {"tma 2d 16w 16x64 ring 4", false, 16, 4, 2, -64},
      {"tma 2d 16w 16x64 ring 6", false, 16, 6, 2, -64},
      {"tma 2d 16w 16x128 ring 3", false, 16, 3, 2, -128},
      {"tma 2d 16w 16x256 ring 1", false, 16, 1, 2, -256},
      {"tma 2d 8w 16x256 ring 2", false, 8, 2, 2, -256},
  };
  std::printf(
      "stream chain: %d layers of the Llama-2-7B fp8 GEMVs (%.2f GB, %s bytes), %d SMs; "
      "copy %.0f GB/s, read %.0f GB/s (%s)\n",
      layers, total / 1e9, random ? "random" : "0x01", sms, ceil.copy_gbps, ceil.read_gbps,
      ceil.device.c_str());
  std::printf("%-28s %5s %10s %10s %8s %8s\n", "staging", "PDL", "chain ms", "GB/s", "% copy",
              "% read");
  for (const Variant& v : variants)
    for (bool pdl : {true, false}) {
      if (!pdl && v.name != variants[0].name && v.name != variants[3].name) continue;
      cudaGraph_t g;
      cudaGraphExec_t exec;
      BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (const Job& j : jobs) run(v, sms, j, s, pdl);
      BENCH_CUDA(cudaStreamEndCapture(s, &g));
      BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
      const double ms =
          rill::bench::median_ms([&] { BENCH_CUDA(cudaGraphLaunch(exec, s)); }, s, 3, 15);
      BENCH_CUDA(cudaGraphExecDestroy(exec));
      BENCH_CUDA(cudaGraphDestroy(g));
      const double gbps = total / ms / 1e6;
      std::printf("%-28s %5s %10.3f %10.0f %7.1f%% %7.1f%%\n", v.name.c_str(), pdl ? "on" : "off",
                  ms, gbps, 100 * gbps / ceil.copy_gbps, 100 * gbps / ceil.read_gbps);
    }
  for (const Variant& v : {variants[0], variants[3], variants[1]}) {
    const double ms = rill::bench::median_ms([&] { run(v, sms, whole, s, false); }, s, 3, 15);
    const double gbps = total / ms / 1e6;
    std::printf("%-28s %5s %10.3f %10.0f %7.1f%% %7.1f%%  (one grid)\n", v.name.c_str(), "-", ms,
                gbps, 100 * gbps / ceil.copy_gbps, 100 * gbps / ceil.read_gbps);
  }
  BENCH_CUDA(cudaFree(w));
  BENCH_CUDA(cudaFree(xy));
  BENCH_CUDA(cudaFree(sink));
  BENCH_CUDA(cudaFree(xt));
  BENCH_CUDA(cudaFree(xsc));
  BENCH_CUDA(cudaFree(yf));
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
