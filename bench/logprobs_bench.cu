// Log-probabilities (launch_logprobs) at vocab 32000, 128256 and 152064, batch 1 / 64 / 256,
// with 0, 5 and 20 alternatives per row, and the copy of the raw rows the engine makes before
// sampling (launch_copy_logprob_rows). The kernel leaves its logits alone: no restore between
// calls. GB/s counts one fp32 read of the logits (the copy: a read and a write).
#include <cstdio>
#include <vector>

#include "bench/bench_random.cuh"
#include "bench/bench_util.h"
#include "rill/kernels/logprobs.h"

namespace {

using rill::bench::median_ms;
namespace k = rill::kernels;

// Logits ~ 3 * (sum of 4 uniforms - 2): a roughly normal spread with sigma ~ 1.7.
__global__ void fill_logits(float* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (uint32_t j = 0; j < 4; ++j)
      s += rill::bench::hash_uniform(i, seed + j * 0x9e3779b9u) + 0.5f;
    p[i] = 3.0f * (s - 2.0f);
  }
}

}  // namespace

int main() {
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreate(&s));
  const rill::bench::Ceilings c = rill::bench::measure_ceilings(s);
  std::printf("device: %s, copy bandwidth %.0f GB/s\n", c.device.c_str(), c.copy_gbps);
  std::printf("ms: one launch; us/row: ms / batch; GB/s: fp32 bytes of the logits moved\n\n");
  for (int vocab : {32000, 128256, 152064}) {
    for (int batch : {1, 64, 256}) {
      const size_t n = size_t(batch) * vocab;
      float *logits, *copy, *out;
      int32_t *tokens, *top_n;
      BENCH_CUDA(cudaMalloc(&logits, n * 4));
      BENCH_CUDA(cudaMalloc(&copy, n * 4));
      BENCH_CUDA(cudaMalloc(&out, size_t(batch) * (1 + 2 * k::kLogprobsMaxTop) * 4));
      BENCH_CUDA(cudaMalloc(&tokens, batch * 4));
      BENCH_CUDA(cudaMalloc(&top_n, batch * 4));
      fill_logits<<<1024, 256, 0, s>>>(logits, n, 99u + vocab);
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaMemsetAsync(tokens, 0, batch * 4, s));
      BENCH_CUDA(cudaMemsetAsync(top_n, 0, batch * 4, s));  // every row copied
      const double copy_ms = median_ms(
          [&] { BENCH_CUDA(k::launch_copy_logprob_rows(batch, vocab, top_n, logits, copy, s)); }, s,
          5, 30);
      std::printf("vocab %6d batch %3d  copy rows   %9.4f ms  %7.2f us/row  %6.0f GB/s\n", vocab,
                  batch, copy_ms, 1e3 * copy_ms / batch, 2.0 * n * 4 / (copy_ms * 1e-3) / 1e9);
      for (int top : {0, 5, 20}) {
        const std::vector<int32_t> host(batch, top);
        BENCH_CUDA(cudaMemcpy(top_n, host.data(), batch * 4, cudaMemcpyHostToDevice));
        k::LogprobsParams p;
        p.num_rows = batch;
        p.vocab = vocab;
        p.max_top = k::kLogprobsMaxTop;
        p.logits = logits;
        p.tokens = tokens;
        p.top_n = top_n;
        p.out = out;
        const double ms = median_ms([&] { BENCH_CUDA(k::launch_logprobs(p, s)); }, s, 5, 30);
        std::printf("vocab %6d batch %3d  top %2d      %9.4f ms  %7.2f us/row  %6.0f GB/s\n", vocab,
                    batch, top, ms, 1e3 * ms / batch, double(n) * 4 / (ms * 1e-3) / 1e9);
      }
      BENCH_CUDA(cudaFree(logits));
      BENCH_CUDA(cudaFree(copy));
      BENCH_CUDA(cudaFree(out));
      BENCH_CUDA(cudaFree(tokens));
      BENCH_CUDA(cudaFree(top_n));
    }
  }
  BENCH_CUDA(cudaStreamDestroy(s));
  return 0;
}
