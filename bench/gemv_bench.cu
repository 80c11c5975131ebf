// Decode GEMV at the Llama-7B shapes, M = 1..8, beside cuBLAS (cublasGemmEx, fp16, fp32
// accumulation) on the same data, so the engine can pick per shape. Each timed call reads a
// different copy of the weights (a working set of several times the L2), as decode does.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "bench/bench_util.h"
#include "rill/kernels/elementwise.h"
#include "rill/kernels/gemv.h"

namespace {

using rill::bench::median_ms;

struct Shape {
  const char* name;
  int N, K;
};

// Median ms of replaying, as one CUDA graph, what `enqueue` launches on `stream`.
double graph_ms(cudaStream_t stream, const std::function<void()>& enqueue) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
  BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = median_ms([&] { BENCH_CUDA(cudaGraphLaunch(exec, stream)); }, stream, 3, 15);
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(graph));
  return ms;
}

// The four projections of 32 Llama-2-7B layers (distinct weights) back to back at M = 1, captured
// in one CUDA graph: what the GEMVs cost inside a decode step, where launch latency is hidden and
// each kernel's ramp meets the previous one's tail. Then the same chain with the step's small
// kernels in place (residual add + RMSNorm before qkv and gate_up, SiLU-and-mul before down), with
// programmatic dependent launch on and off.
void layer_chain(cudaStream_t stream, double copy_gbps) {
  constexpr int kLayers = 32, H = 4096, I = 11008;
  const int shapes[4][2] = {{3 * H, H}, {H, H}, {2 * I, H}, {H, I}};
  std::vector<__half*> w(kLayers * 4);
  double bytes = 0;
  for (int l = 0; l < kLayers; ++l)
    for (int k = 0; k < 4; ++k) {
      const size_t n = size_t(shapes[k][0]) * shapes[k][1];
      BENCH_CUDA(cudaMalloc(&w[l * 4 + k], n * sizeof(__half)));
      rill::bench::fill_uniform_half(w[l * 4 + k], n, 100 + l * 4 + k, 0.05f, stream);
      bytes += n * sizeof(__half);
    }
  __half *h, *qkv, *attn, *o, *up, *act, *down, *norm_w;
  float* residual;
  BENCH_CUDA(cudaMalloc(&h, H * 2));
  BENCH_CUDA(cudaMalloc(&qkv, 3 * H * 2));
  BENCH_CUDA(cudaMalloc(&attn, H * 2));
  BENCH_CUDA(cudaMalloc(&o, H * 2));
  BENCH_CUDA(cudaMalloc(&up, 2 * I * 2));
  BENCH_CUDA(cudaMalloc(&act, I * 2));
  BENCH_CUDA(cudaMalloc(&down, H * 2));
  BENCH_CUDA(cudaMalloc(&norm_w, H * 2));
  BENCH_CUDA(cudaMalloc(&residual, H * 4));
  rill::bench::fill_uniform_half(h, H, 1, 1.0f, stream);
  rill::bench::fill_uniform_half(attn, H, 2, 1.0f, stream);
  rill::bench::fill_uniform_half(norm_w, H, 3, 1.0f, stream);
  BENCH_CUDA(cudaMemsetAsync(residual, 0, H * 4, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  int config = -1;  // the CTA shape of every GEMV in the chain (-1: the default rule)
  auto gemv = [&](const __half* x, const __half* wt, __half* y, int N, int K) {
    rill::kernels::GemvParams p;
    p.config = config;
    p.M = 1;
    p.N = N;
    p.K = K;
    p.x = x;
    p.w = wt;
    p.y = y;
    BENCH_CUDA(rill::kernels::launch_gemv(p, stream));
  };
  // fused: the residual add and the next norm in one kernel; unfused: the add (as a kernel that
  // also normalizes into a scratch row, the cost of a plain add kernel) and then the norm.
  auto add_norm = [&](const __half* delta, __half* out, bool fused) {
    rill::kernels::AddNormParams p;
    p.num_tokens = 1;
    p.hidden = H;
    p.residual = residual;
    p.delta0 = delta;
    p.weight0 = norm_w;
    p.out0 = fused ? out : act;
    BENCH_CUDA(rill::kernels::launch_add_norm(p, stream));
    if (fused) return;
    p.delta0 = nullptr;
    p.out0 = out;
    BENCH_CUDA(rill::kernels::launch_add_norm(p, stream));
  };
  auto silu = [&] {
    rill::kernels::ActivationParams p;
    p.num_tokens = 1;
    p.width = I;
    p.in = up;
    p.out = act;
    BENCH_CUDA(rill::kernels::launch_activation(p, stream));
  };
  std::printf("\n32 Llama-2-7B layers of GEMVs at M = 1 in one CUDA graph (%.2f GB of weights)\n",
              bytes / 1e9);
  // The default shape with and without PDL, then every shared-memory ring shape with PDL.
  struct Run {
    int config, small, pdl;
  };
  std::vector<Run> runs;
  for (int small : {0, 1, 2})  // none; fused add + norm; add and norm as two kernels
    for (int pdl : {1, 0}) runs.push_back({-1, small, pdl});
  for (int c = 0; c < rill::kernels::gemv_num_configs(); ++c)
    if (rill::kernels::gemv_config_info(c).stages > 0)
      for (int small : {0, 1}) runs.push_back({c, small, 1});
  for (const Run& run : runs) {
    const int small = run.small, pdl = run.pdl;
    config = run.config;
    rill::kernels::set_programmatic_launch(pdl);
    const double ms = graph_ms(stream, [&] {
      for (int l = 0; l < kLayers; ++l) {
        if (small) add_norm(down, h, small == 1);
        gemv(h, w[l * 4 + 0], qkv, 3 * H, H);
        gemv(attn, w[l * 4 + 1], o, H, H);
        if (small) add_norm(o, h, small == 1);
        gemv(h, w[l * 4 + 2], up, 2 * I, H);
        if (small) silu();
        gemv(small ? act : up, w[l * 4 + 3], down, H, I);
      }
    });
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    std::printf("  %-34s %-14s PDL %-3s %8.3f ms  %6.0f GB/s  %5.1f%% of copy\n",
                small == 0   ? "GEMVs only"
                : small == 1 ? "GEMVs + add_norm x2 + SiLU-mul"
                             : "GEMVs + (add, norm) x2 + SiLU-mul",
                config < 0 ? "default" : rill::kernels::gemv_config_name(config).c_str(),
                pdl ? "on" : "off", ms, gbps, 100 * gbps / copy_gbps);
  }
  rill::kernels::set_programmatic_launch(true);
  for (__half* p : w) BENCH_CUDA(cudaFree(p));
  for (void* p : {(void*)h, (void*)qkv, (void*)attn, (void*)o, (void*)up, (void*)act, (void*)down,
                  (void*)norm_w, (void*)residual})
    BENCH_CUDA(cudaFree(p));
}

// GEMV against cuBLAS at M = 1..8, then every CTA shape at M = 1 and 8, for weights [s.N, s.K].
void bench_shape(const Shape& s, cublasHandle_t handle, cudaStream_t stream, int l2_bytes,
                 const rill::bench::Ceilings& ceil) {
  constexpr int kMaxM = 8;
  const size_t w_elems = size_t(s.N) * s.K;
  const size_t w_bytes = w_elems * sizeof(__half);
  // Enough copies that the working set is at least 4x the L2 (at least 2 copies).
  const int copies = rill::bench::copies_beyond_l2(w_bytes, l2_bytes);
  std::vector<__half*> w(copies);
  for (int c = 0; c < copies; ++c) {
    BENCH_CUDA(cudaMalloc(&w[c], w_bytes));
    rill::bench::fill_uniform_half(w[c], w_elems, 17 + c, 0.05f, stream);
  }
  __half *x, *y;
  BENCH_CUDA(cudaMalloc(&x, size_t(kMaxM) * s.K * sizeof(__half)));
  BENCH_CUDA(cudaMalloc(&y, size_t(kMaxM) * s.N * sizeof(__half)));
  rill::bench::fill_uniform_half(x, size_t(kMaxM) * s.K, 3, 2.0f, stream);
  BENCH_CUDA(cudaGetLastError());
  int next = 0;
  // Median ms of the GEMV at batch M with CTA shape `config` (-1: the default rule).
  auto time_gemv = [&](int M, int config) {
    rill::kernels::GemvParams p;
    p.dtype = rill::kernels::DType::kF16;
    p.M = M;
    p.N = s.N;
    p.K = s.K;
    p.x = x;
    p.y = y;
    p.config = config;
    return median_ms(
        [&] {
          p.w = w[next++ % copies];
          BENCH_CUDA(rill::kernels::launch_gemv(p, stream));
        },
        stream, 5, 50);
  };
  for (int M = 1; M <= kMaxM; ++M) {
    const double bytes = double(w_bytes) + 2.0 * M * s.K + 2.0 * M * s.N;
    const double ours = time_gemv(M, -1);
    const float one = 1.0f, zero = 0.0f;
    // Column-major view: y^T (N x M) = w (K x N)^T * x^T (K x M).
    const double theirs = median_ms(
        [&] {
          const cublasStatus_t st =
              cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.N, M, s.K, &one, w[next++ % copies],
                           CUDA_R_16F, s.K, x, CUDA_R_16F, s.K, &zero, y, CUDA_R_16F, s.N,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          if (st != CUBLAS_STATUS_SUCCESS) {
            std::fprintf(stderr, "cublasGemmEx failed: %d\n", int(st));
            std::exit(1);
          }
        },
        stream, 5, 50);
    const double ours_gbps = bytes / (ours * 1e-3) / 1e9,
                 theirs_gbps = bytes / (theirs * 1e-3) / 1e9;
    std::printf("%-8s %6d %6d %2d | %9.4f %8.0f %5.1f%% | %9.4f %8.0f %5.1f%% | %s\n", s.name, s.N,
                s.K, M, ours, ours_gbps, 100.0 * ours_gbps / ceil.copy_gbps, theirs, theirs_gbps,
                100.0 * theirs_gbps / ceil.copy_gbps, ours <= theirs ? "rill" : "cublas");
  }
  // Every CTA shape of the GEMV kernel (gemv_default_config picks one by shape).
  for (int M : {1, 8}) {
    std::printf("%-8s %2d   shapes:", s.name, M);
    for (int config = 0; config < rill::kernels::gemv_num_configs(); ++config) {
      const double ms = time_gemv(M, config);
      const double gbps = (double(w_bytes) + 2.0 * M * s.K + 2.0 * M * s.N) / (ms * 1e-3) / 1e9;
      std::printf("  %s %.1f%%", rill::kernels::gemv_config_name(config).c_str(),
                  100.0 * gbps / ceil.copy_gbps);
    }
    std::printf("\n");
  }
  for (__half* p : w) BENCH_CUDA(cudaFree(p));
  BENCH_CUDA(cudaFree(x));
  BENCH_CUDA(cudaFree(y));
}

}  // namespace

int main() {
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  const rill::bench::Ceilings ceil = rill::bench::measure_ceilings(stream);
  const int l2_bytes = ceil.l2_bytes;
  std::printf("device: %s, copy bandwidth %.0f GB/s, read-only %.0f GB/s, L2 %d MB\n",
              ceil.device.c_str(), ceil.copy_gbps, ceil.read_gbps, l2_bytes >> 20);
  std::printf("GB/s counts the weights, x and y once; %% is of the copy bandwidth.\n\n");
  std::printf("%-8s %6s %6s %2s | %9s %8s %6s | %9s %8s %6s | %s\n", "shape", "N", "K", "M",
              "rill ms", "GB/s", "%", "cublas ms", "GB/s", "%", "faster");

  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    return 1;
  }
  cublasSetStream(handle, stream);
  const Shape shapes[] = {{"qkv", 12288, 4096},
                          {"o", 4096, 4096},
                          {"gate_up", 22016, 4096},
                          {"down", 4096, 11008},
                          {"lm_head", 32000, 4096},
                          {"l3_qkv", 6144, 4096},
                          {"l3_up", 28672, 4096},
                          {"l3_down", 4096, 14336},
                          {"l3_head", 128256, 4096}};
  for (const Shape& s : shapes) bench_shape(s, handle, stream, l2_bytes, ceil);
  cublasDestroy(handle);
  layer_chain(stream, ceil.copy_gbps);
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}
