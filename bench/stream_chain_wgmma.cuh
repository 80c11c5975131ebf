// rill-stream-chain-bench's wgmma probe: a tensor-core consumer of the weight stream (not an
// engine kernel; docs/performance.md F29) and its check against the fp64 product.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "bench/stream_chain_staging.cuh"
#include "engine/model/fp8.h"

namespace rill::bench::stream_chain {

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

// One 256-byte stage of a warpgroup (its weights at shared address `base`, x's terms from `xrow`
// at K offset k0) added to d.
__device__ __forceinline__ void wgmma_stage(float (&d)[8], const uint8_t* xrow, bool a_live, int k0,
                                            uint32_t base) {
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
      wgmma_m64n16k32(h[half], a[s4], gmma_desc(base + 512 * (4 * half + s4), 256, 128), s4 > 0);
    wgmma_sync(1);
  }
  wgmma_sync(2);
#pragma unroll
  for (int e = 0; e < 8; ++e) d[e] += h[0][e] + h[1][e];
}

// The end of a tile (w rows n0 ..): the terms' sums of each warpgroup into `part` ([4][16]),
// then y from the four partials.
__device__ __forceinline__ void wgmma_store_tile(const Job& j, const float (&d)[8], float* part,
                                                 int wg, int warp, int g, int t, int n0) {
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
    const int n = n0 + threadIdx.x;
    j.yf[n] = part[threadIdx.x] + part[16 + threadIdx.x] + part[32 + threadIdx.x] +
              part[48 + threadIdx.x];
  }
  __syncthreads();
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
      wgmma_stage(d, xrow, a_live, (wg + 4 * it) * kStage, smem_u32(ring + slot * kRows * kStage));
      slot = slot == S - 1 ? 0 : slot + 1;
    }
    wgmma_store_tile(j, d, part, wg, warp, g, t, (blockIdx.x + ti * G) * kRows);
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
}

template <int S, int P = 2>
void run_wgmma(int sms, const Job& j, cudaStream_t s, bool pdl) {
  const auto kernel = wgmma_kernel<S, P>;
  const int smem = (3 * j.K + 127) / 128 * 128 + 4 * S * kRows * kStage + 4 * 16 * 4;
  BENCH_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (3 * 11008 + 127) / 128 * 128 + 4 * S * kRows * kStage + 256));
  launch(kernel, grid_for(j.N, P * sms), 512, smem, s, pdl, j);
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

}  // namespace rill::bench::stream_chain
