// Host costs of launching an eager step (issue 33: some mixed prefill + decode steps held the
// host 14-38 ms in CudaRunner::launch, and their device time grew with it).
//  1. How many launches a stream holds before cudaLaunchKernel blocks the host: `--launches`
//     kernels of `--kernel-us` each on one stream, with and without the programmatic-launch
//     attribute Rill's kernels carry, after an optional CUDA graph of `--graph-nodes` such
//     kernels (a decode step's replay ahead of them); prints the first launch that held the
//     host longer than `--block-us`.
//  2. cuBLAS's host time for a GEMM shape it has not seen (cublasGemmEx, bf16, the Llama-2-7B
//     projections) against the same call repeated: a mixed step's token count M is new to
//     cuBLAS whenever the planner picks a chunk size it did not pick before.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cublas_v2.h>

#include "bench/bench_util.h"

namespace {

__global__ void busy(long long ns) {
  long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

void launch(cudaStream_t s, long long ns, bool pdl) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  config.stream = s;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attr;
  config.numAttrs = pdl ? 1 : 0;
  BENCH_CUDA(cudaLaunchKernelEx(&config, busy, ns));
}

struct Probe {
  int first_blocked = -1;  // index of the first launch that held the host > block_us
  double blocked_ms = 0;   // how long it held it
  double total_ms = 0;     // host time of all launches
};

Probe probe(cudaStream_t s, int launches, long long ns, bool pdl, int graph_nodes,
            double block_us) {
  cudaGraphExec_t exec = nullptr;
  if (graph_nodes > 0) {
    cudaGraph_t g;
    BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < graph_nodes; ++i) launch(s, ns, pdl);
    BENCH_CUDA(cudaStreamEndCapture(s, &g));
    BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
    BENCH_CUDA(cudaGraphDestroy(g));
    BENCH_CUDA(cudaGraphLaunch(exec, s));  // warm: the first replay uploads the graph
    BENCH_CUDA(cudaStreamSynchronize(s));
    BENCH_CUDA(cudaGraphLaunch(exec, s));
  }
  Probe p;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < launches; ++i) {
    const auto a = std::chrono::steady_clock::now();
    launch(s, ns, pdl);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
    if (p.first_blocked < 0 && us > block_us) {
      p.first_blocked = i;
      p.blocked_ms = us / 1e3;
    }
  }
  p.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  BENCH_CUDA(cudaStreamSynchronize(s));
  if (exec) BENCH_CUDA(cudaGraphExecDestroy(exec));
  return p;
}

// Host microseconds of one cublasGemmEx call y [M, N] = x [M, K] w^T (bf16, fp32 accumulation)
// on stream `s` (not waiting for the GPU).
double gemm_host_us(cublasHandle_t h, const void* x, const void* w, void* y, int M, int N, int K) {
  const float one = 1.0f, zero = 0.0f;
  const auto a = std::chrono::steady_clock::now();
  if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, w, CUDA_R_16BF, K, x, CUDA_R_16BF, K,
                   &zero, y, CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) !=
      CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasGemmEx failed\n");
    std::exit(1);
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
}

void cublas_first_calls(cudaStream_t s) {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(1);
  cublasSetStream(h, s);
  const int shapes[4][2] = {{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}};
  constexpr int kMaxM = 512;
  void *x, *w, *y;
  BENCH_CUDA(cudaMalloc(&x, size_t(kMaxM) * 11008 * 2));
  BENCH_CUDA(cudaMalloc(&w, size_t(22016) * 4096 * 2));
  BENCH_CUDA(cudaMalloc(&y, size_t(kMaxM) * 22016 * 2));
  BENCH_CUDA(cudaMemset(x, 0, size_t(kMaxM) * 11008 * 2));
  BENCH_CUDA(cudaMemset(w, 0, size_t(22016) * 4096 * 2));
  for (const auto& sh : shapes) gemm_host_us(h, x, w, y, 64, sh[0], sh[1]);  // handle warm-up
  BENCH_CUDA(cudaStreamSynchronize(s));
  std::printf("\ncuBLAS host time per call, the 4 Llama-2-7B projections (us; GPU not awaited)\n");
  std::printf("%6s %14s %14s %14s\n", "M", "first call", "repeated", "GPU step ms");
  for (int M : {97, 131, 203, 212, 176, 138, 102, 87, 74, 66, 62, 41, 289, 290, 64, 128, 256}) {
    double first = 0, again = 0;
    cudaEvent_t a, b;
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
    BENCH_CUDA(cudaEventRecord(a, s));
    for (const auto& sh : shapes) first += gemm_host_us(h, x, w, y, M, sh[0], sh[1]);
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    for (const auto& sh : shapes) again += gemm_host_us(h, x, w, y, M, sh[0], sh[1]);
    BENCH_CUDA(cudaStreamSynchronize(s));
    std::printf("%6d %14.1f %14.1f %14.3f\n", M, first, again, ms);
    BENCH_CUDA(cudaEventDestroy(a));
    BENCH_CUDA(cudaEventDestroy(b));
  }
  for (void* p : {x, w, y}) BENCH_CUDA(cudaFree(p));
  cublasDestroy(h);
}

}  // namespace

int main(int argc, char** argv) {
  int launches = 3000, graph_nodes = 300;
  double kernel_us = 20, block_us = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--launches") launches = std::atoi(argv[i + 1]);
    else if (flag == "--graph-nodes") graph_nodes = std::atoi(argv[i + 1]);
    else if (flag == "--kernel-us") kernel_us = std::atof(argv[i + 1]);
    else if (flag == "--block-us") block_us = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--launches N] [--graph-nodes N] [--kernel-us US] [--block-us US]\n", argv[0]);
      return 2;
    }
  }
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  launch(s, 1000, false);  // module load and context warm-up
  BENCH_CUDA(cudaStreamSynchronize(s));
  const long long ns = static_cast<long long>(kernel_us * 1e3);
  std::printf("launch queue: %d launches of %.0f us kernels on one stream; blocked = a launch "
              "holding the host > %.0f us\n",
              launches, kernel_us, block_us);
  std::printf("%-6s %-12s %14s %14s %12s\n", "PDL", "graph ahead", "first blocked", "held ms",
              "host ms");
  for (int nodes : {0, graph_nodes})
    for (bool pdl : {false, true}) {
      const Probe p = probe(s, launches, ns, pdl, nodes, block_us);
      std::printf("%-6s %-12d %14d %14.3f %12.1f\n", pdl ? "on" : "off", nodes, p.first_blocked,
                  p.blocked_ms, p.total_ms);
    }
  cublas_first_calls(s);
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
