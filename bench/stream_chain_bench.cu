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
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/stream_chain_staging.cuh"
#include "bench/stream_chain_wgmma.cuh"

namespace {

// This bench's kernels and their launch.
using namespace rill::bench::stream_chain;  // NOLINT(google-build-using-namespace)

// ---- the chain -------------------------------------------------------------------------------
struct Variant {
  std::string name;
  bool bulk;
  int warps, stages, per_sm;  // bulk: consumer warps; wgmma: warps 0
  int piece = 0;        // warp bulk: bytes of a row a stage (bulk false); tma 2d: minus those bytes
  int l2_prefetch = 0;  // cp.async: cp_async_kernel's PF
  int wide = 0;         // cp.async: steps a warp's iteration (cp_async_wide_kernel's R)
};

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

template <int W, int S, int P, bool TENSOR>
void run_warp_ring(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const int smem = W * S * kRows * P + W * S * 8;
  const auto kernel = warp_ring_kernel<W, S, P, TENSOR>;
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const CUtensorMap map = TENSOR ? weight_map(j, P) : CUtensorMap{};
  launch(kernel, grid_for(j.N, 2 * sms), W * 32, smem, s, pdl, map, j);
}

// Tensor-copy rings: boxes of 16 rows x -v.piece bytes.
void run_tensor_ring(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
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

// Warp rings of row copies: 16 rows x v.piece bytes a stage.
void run_row_ring(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
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

void run_wgmma_probe(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
  if (v.per_sm == 1)
    return v.stages == 6 ? run_wgmma<6, 1>(sms, j, s, pdl) : run_wgmma<8, 1>(sms, j, s, pdl);
  return v.stages == 3 ? run_wgmma<3>(sms, j, s, pdl) : run_wgmma<4>(sms, j, s, pdl);
}

// The cp.async rings: wide rows (v.wide steps a warp's iteration), else the persistent kernel's
// shape with the L2 prefetch v.l2_prefetch.
void run_cp_async_variant(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
  if (v.wide > 0) {
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

// A producer warp's bulk copies.
void run_bulk_variant(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
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

// One GEMV of the chain with variant v.
void run(const Variant& v, int sms, const Job& j, cudaStream_t s, bool pdl) {
  if (v.piece < 0) return run_tensor_ring(v, sms, j, s, pdl);
  if (v.piece > 0) return run_row_ring(v, sms, j, s, pdl);
  if (!v.bulk && v.warps == 0) return run_wgmma_probe(v, sms, j, s, pdl);
  if (!v.bulk) return run_cp_async_variant(v, sms, j, s, pdl);
  run_bulk_variant(v, sms, j, s, pdl);
}

const std::vector<Variant> kVariants = {
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

// Device memory of a run: the weights of every layer, the inputs the kernels pass on, and the
// wgmma probe's x terms, scales and output.
struct Buffers {
  uint8_t* w = nullptr;
  uint4* xy = nullptr;
  uint32_t* sink = nullptr;
  uint8_t* xt = nullptr;
  float *xsc = nullptr, *yf = nullptr;
};

Buffers allocate(size_t total, bool random, cudaStream_t s) {
  Buffers b;
  BENCH_CUDA(cudaMalloc(&b.w, total));
  if (random) {
    rill::bench::fill_uniform_half(b.w, total / 2, 17, 1.0f, s);
  } else {
    BENCH_CUDA(cudaMemset(b.w, 1, total));
  }
  BENCH_CUDA(cudaMalloc(&b.xy, 2 * kXBytes));
  BENCH_CUDA(cudaMemset(b.xy, 0, 2 * kXBytes));
  BENCH_CUDA(cudaMalloc(&b.sink, 4));
  // wgmma: x's terms (any e4m3 bytes but NaN: 0x11), their scales and y.
  BENCH_CUDA(cudaMalloc(&b.xt, 3 * 11008));
  BENCH_CUDA(cudaMemset(b.xt, 0x11, 3 * 11008));
  BENCH_CUDA(cudaMalloc(&b.xsc, 3 * sizeof(float)));
  BENCH_CUDA(cudaMemset(b.xsc, 0, 3 * sizeof(float)));
  BENCH_CUDA(cudaMalloc(&b.yf, 22016 * sizeof(float)));
  return b;
}

void release(const Buffers& b) {
  BENCH_CUDA(cudaFree(b.w));
  BENCH_CUDA(cudaFree(b.xy));
  BENCH_CUDA(cudaFree(b.sink));
  BENCH_CUDA(cudaFree(b.xt));
  BENCH_CUDA(cudaFree(b.xsc));
  BENCH_CUDA(cudaFree(b.yf));
}

constexpr int kShapes[4][2] = {{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}};

// The chain's GEMVs, layer by layer, each reading the input the one before it wrote.
std::vector<Job> make_jobs(const Buffers& b, int layers) {
  std::vector<Job> jobs;
  size_t off = 0;
  for (int l = 0; l < layers; ++l)
    for (const auto& sh : kShapes) {
      const int i = static_cast<int>(jobs.size());
      jobs.push_back({b.w + off, sh[0], sh[1], b.xy + (i & 1) * (kXBytes / 16),
                      b.xy + ((i + 1) & 1) * (kXBytes / 16), b.sink, b.xt, b.xsc, b.yf});
      off += size_t(sh[0]) * sh[1];
    }
  return jobs;
}

// Every variant's chain as one graph (with and without PDL for two of them), then three as one
// grid over every byte (`whole`); a table row each.
void time_variants(const std::vector<Job>& jobs, const Job& whole, size_t total, int sms,
                   const rill::bench::Ceilings& ceil, cudaStream_t s) {
  const std::vector<Variant>& variants = kVariants;
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

  size_t layer_bytes = 0;
  for (const auto& sh : kShapes) layer_bytes += size_t(sh[0]) * sh[1];
  const size_t total = layer_bytes * layers;
  const Buffers b = allocate(total, random, s);
  const std::vector<Job> jobs = make_jobs(b, layers);
  // One grid over every byte: [total / 4096, 4096].
  const Job whole{b.w, static_cast<int>(total / 4096), 4096, b.xy, b.xy + kXBytes / 16, b.sink};
  std::printf(
      "stream chain: %d layers of the Llama-2-7B fp8 GEMVs (%.2f GB, %s bytes), %d SMs; "
      "copy %.0f GB/s, read %.0f GB/s (%s)\n",
      layers, total / 1e9, random ? "random" : "0x01", sms, ceil.copy_gbps, ceil.read_gbps,
      ceil.device.c_str());
  time_variants(jobs, whole, total, sms, ceil, s);
  release(b);
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
