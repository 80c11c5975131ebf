// The GPU sampler at vocab 32000 and 128256, batch 1 / 64 / 256: greedy, top-p 0.9 (the search
// over the whole row until the candidates fit in shared memory) and top-k 50 + top-p 0.9. The
// kernel overwrites its logits, so every call restores them first (a device copy, timed alone
// and subtracted); GB/s counts one read of the logits.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/bench_random.cuh"
#include "bench/bench_util.h"
#include "rill/kernels/sampling.h"

namespace {

using rill::bench::median_ms;
namespace k = rill::kernels;

// Logits ~ 3 * (sum of 4 uniforms - 2): a roughly normal spread with sigma ~ 1.7.
__global__ void fill_logits(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (uint32_t j = 0; j < 4; ++j) {
      s += rill::bench::hash_uniform(i, seed + j * 0x9e3779b9u) + 0.5f;
    }
    p[i] = 3.0f * (s - 2.0f);
  }
}

}  // namespace

int main() {
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreate(&s));
  const rill::bench::Ceilings c = rill::bench::measure_ceilings(s);
  std::printf("device: %s, copy bandwidth %.0f GB/s\n", c.device.c_str(), c.copy_gbps);
  std::printf(
      "ms: one launch_sample (restore copy subtracted); GB/s: one fp32 read of the logits\n\n");
  struct Mode {
    const char* name;
    float temperature, top_p;
    int top_k;
  };
  const Mode modes[] = {{"greedy", 0.0f, 1.0f, 0},
                        {"top-p 0.9", 0.8f, 0.9f, 0},
                        {"top-k 50 top-p 0.9", 0.8f, 0.9f, 50}};
  for (int vocab : {32000, 128256}) {
    for (int batch : {1, 64, 256}) {
      const size_t n = size_t(batch) * vocab;
      float *pristine, *logits;
      int32_t* tokens;
      k::SamplingRow* rows;
      BENCH_CUDA(cudaMalloc(&pristine, n * 4));
      BENCH_CUDA(cudaMalloc(&logits, n * 4));
      BENCH_CUDA(cudaMalloc(&tokens, batch * 4));
      BENCH_CUDA(cudaMalloc(&rows, batch * sizeof(k::SamplingRow)));
      fill_logits<<<1024, 256, 0, s>>>(pristine, n, 1234u + vocab);
      BENCH_CUDA(cudaGetLastError());
      const double copy_ms = median_ms(
          [&] {
            BENCH_CUDA(cudaMemcpyAsync(logits, pristine, n * 4, cudaMemcpyDeviceToDevice, s));
          },
          s, 5, 30);
      for (const Mode& m : modes) {
        std::vector<k::SamplingRow> host(batch);
        for (int i = 0; i < batch; ++i) {
          host[i].temperature = m.temperature;
          host[i].top_p = m.top_p;
          host[i].top_k = m.top_k;
          host[i].seed = 42 + i;
          host[i].step = 7;
        }
        BENCH_CUDA(
            cudaMemcpy(rows, host.data(), batch * sizeof(k::SamplingRow), cudaMemcpyHostToDevice));
        k::SampleBatch p;
        p.num_rows = batch;
        p.vocab = vocab;
        p.logits = logits;
        p.rows = rows;
        p.out_tokens = tokens;
        const double both = median_ms(
            [&] {
              BENCH_CUDA(cudaMemcpyAsync(logits, pristine, n * 4, cudaMemcpyDeviceToDevice, s));
              BENCH_CUDA(k::launch_sample(p, s));
            },
            s, 5, 30);
        const double ms = std::max(both - copy_ms, 1e-6);
        const double gbps = double(n) * 4 / (ms * 1e-3) / 1e9;
        std::printf("vocab %6d batch %3d  %-20s %9.4f ms  %8.0f GB/s  %5.1f%% of copy\n", vocab,
                    batch, m.name, ms, gbps, 100.0 * gbps / c.copy_gbps);
      }
      BENCH_CUDA(cudaFree(pristine));
      BENCH_CUDA(cudaFree(logits));
      BENCH_CUDA(cudaFree(tokens));
      BENCH_CUDA(cudaFree(rows));
    }
  }
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
