// How many launches a stream holds before cudaLaunchKernel blocks the host (issue 33: eager
// mixed prefill + decode steps launch ~300-450 kernels each, and some of their launches held
// the host for 14-38 ms). Launches `--launches` kernels of `--kernel-us` each on one stream,
// with and without the programmatic-launch attribute Rill's kernels carry, after an optional
// CUDA graph of `--graph-nodes` such kernels (a decode step's replay ahead of them), and prints
// the first launch that held the host longer than `--block-us` and the pending launches then.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

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
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
