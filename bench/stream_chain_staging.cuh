// rill-stream-chain-bench's staging kernels (stream_chain_bench.cu's header comment says what
// each measures): the job a kernel streams, the ways of staging its weights, and the launch.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "bench/bench_util.h"
#include "kernels/src/launch.cuh"

namespace rill::bench::stream_chain {

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

// ---- cp.async: gemv_fp8_persistent_kernel's staging ----------------------------------------
// Each cp.async kernel keeps its own ring loop, as F30 measured them (638f889): a shared loop
// helper (d34789c) ran some of these rings 5-16% slower on the H100 (2026-11-28: the 64-byte
// ring of 3 2.436 ms, the 128- and 256-byte rings of 2 2.535 / 2.564, against 2.31 / 2.19 / 2.21).
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
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(lo),
                   "r"(ok ? 16 : 0)
                   : "memory");
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + W * 32 * 16),
                   "l"(lo + 8 * j.K), "r"(ok ? 16 : 0)
                   : "memory");
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
  pdl_launch_dependents();
  if (PF >= 2)
    for (int p = 0; p < kAhead; ++p) prefetch_tile(p);
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  uint32_t s = read_input(j.x, threadIdx.x, W * 32);
  int slot = 0;
  for (int ti = 0; ti < tiles; ++ti)
    for (int it = 0; it < per_tile; ++it) {
      if (PF > 0 && it == 0) prefetch_tile(ti + kAhead);
      fetch(slot == 0 ? S - 1 : slot - 1);
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
      const uint4* own = ring + slot * 2 * W * 32 + threadIdx.x;
      s += add_bytes(own[0]) + add_bytes(own[W * 32]);
      slot = slot == S - 1 ? 0 : slot + 1;
    }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
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
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                     "r"(ok ? 16 : 0)
                     : "memory");
      }
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  uint32_t s = read_input(j.x, threadIdx.x, W * 32);
  int slot = 0;
  for (int ti = 0; ti < tiles; ++ti)
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
      __syncwarp();
      const uint4* st = mine + slot * W * kStage;
#pragma unroll
      for (int v = lane; v < kStage; v += 32) s += add_bytes(st[(v + 5 * (v / 32)) % kStage]);
      __syncwarp();  // read before the slot is refilled
      slot = slot == S - 1 ? 0 : slot + 1;
    }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
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

}  // namespace rill::bench::stream_chain
