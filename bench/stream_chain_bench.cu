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
// Also one kernel over all the bytes (the bulk shape), for the ceiling of a single long grid.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
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
};

// ---- cp.async: gemv_fp8_persistent_kernel's staging ----------------------------------------
template <int W, int S>
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
      const uint4* own = ring + slot * 2 * W * 32 + threadIdx.x;
      s += add_bytes(own[0]) + add_bytes(own[W * 32]);
      slot = slot == S - 1 ? 0 : slot + 1;
    }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  write_output(j.y, s);
  if (s == 0x9e3779b9u) *j.sink = s;  // keeps the sums
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

// ---- the chain -------------------------------------------------------------------------------
struct Variant {
  std::string name;
  bool bulk;
  int warps, stages, per_sm;  // bulk: consumer warps
};

int grid_for(int N, int slots) {  // persistent_grid: fewest tiles a CTA, then fewest CTAs
  const int tiles = N / kRows, per = (tiles + slots - 1) / slots;
  return (tiles + per - 1) / per;
}

template <typename K>
void launch(K kernel, int grid, int threads, int smem, cudaStream_t s, const Job& j, bool pdl) {
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
  BENCH_CUDA(cudaLaunchKernelEx(&c, kernel, j));
}

template <int W, int S>
void run_cp_async(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = S * 2 * W * 32 * 16;
  BENCH_CUDA(cudaFuncSetAttribute(cp_async_kernel<W, S>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch(cp_async_kernel<W, S>, grid_for(j.N, 2 * sms), W * 32, smem, s, j, pdl);
}

template <int C, int S>
void run_bulk(int sms, int per_sm, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = S * kRows * kPitch + 2 * S * 8;
  BENCH_CUDA(
      cudaFuncSetAttribute(bulk_kernel<C, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  launch(bulk_kernel<C, S>, grid_for(j.N, per_sm * sms), (C + 1) * 32, smem, s, j, pdl);
}

void run(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
  if (!v.bulk) return run_cp_async<16, 3>(sms, j, s, pdl);
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

}  // namespace

int main(int argc, char** argv) {
  int layers = 32;
  bool random = false;  // weight bytes: all 0x01 (the default) or random
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--layers") {
      layers = std::atoi(argv[i + 1]);
    } else if (std::string(argv[i]) == "--weights" &&
               (std::string(argv[i + 1]) == "ones" || std::string(argv[i + 1]) == "random")) {
      random = std::string(argv[i + 1]) == "random";
    } else {
      std::fprintf(stderr, "usage: %s [--layers N] [--weights ones|random]\n", argv[0]);
      return 2;
    }
  }
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
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

  std::vector<Job> jobs;
  size_t off = 0;
  for (int l = 0; l < layers; ++l)
    for (const auto& sh : shapes) {
      const int i = static_cast<int>(jobs.size());
      jobs.push_back({w + off, sh[0], sh[1], xy + (i & 1) * (kXBytes / 16),
                      xy + ((i + 1) & 1) * (kXBytes / 16), sink});
      off += size_t(sh[0]) * sh[1];
    }
  // One grid over every byte: [total / 4096, 4096].
  const Job whole{w, static_cast<int>(total / 4096), 4096, xy, xy + kXBytes / 16, sink};

  const std::vector<Variant> variants = {
      {"cp.async 16w ring 3, 2/SM", false, 16, 3, 2}, {"bulk 16+1w ring 3, 2/SM", true, 16, 3, 2},
      {"bulk 8+1w ring 4, 2/SM", true, 8, 4, 2},      {"bulk 8+1w ring 6, 1/SM", true, 8, 6, 1},
      {"bulk 8+1w ring 8, 1/SM", true, 8, 8, 1},      {"bulk 16+1w ring 6, 1/SM", true, 16, 6, 1},
      {"bulk 4+1w ring 6, 1/SM", true, 4, 6, 1},      {"bulk 8+1w ring 6, 2/SM", true, 8, 6, 2},
      {"bulk 4+1w ring 3, 3/SM", true, 4, 3, 3},
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
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
