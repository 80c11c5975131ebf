#include "bench/bench_util.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "bench/bench_random.cuh"

namespace rill::bench {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error at %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

double median_ms(const std::function<void()>& fn, cudaStream_t stream, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) {
    BENCH_CUDA(cudaEventRecord(a, stream));
    fn();
    BENCH_CUDA(cudaEventRecord(b, stream));
    BENCH_CUDA(cudaEventSynchronize(b));
    BENCH_CUDA(cudaEventElapsedTime(&ms[i], a, b));
  }
  BENCH_CUDA(cudaEventDestroy(a));
  BENCH_CUDA(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[iters / 2];
}

namespace {

__global__ void fill_half_kernel(__half* p, size_t n, uint32_t seed, float scale, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2half(hash_uniform(i, seed) * scale + offset);
}

__global__ void fill_float_kernel(float* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = hash_uniform(i, seed) * scale;
}

// Read-only streaming: every thread sums 16-byte loads (the GEMV's load instruction) over a
// grid-stride loop, four in flight; one word per CTA is written so nothing is optimised away.
__global__ void __launch_bounds__(512)
    read_kernel(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ sink) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                   : "l"(p + i + u * stride));
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= p[i].x;
  acc = __reduce_xor_sync(0xffffffffu, acc);
  if (threadIdx.x == 0) sink[blockIdx.x] = acc;
}

}  // namespace

void fill_uniform_half(void* p, size_t n, uint32_t seed, float scale, cudaStream_t stream,
                       float offset) {
  fill_half_kernel<<<1024, 256, 0, stream>>>(static_cast<__half*>(p), n, seed, scale, offset);
  BENCH_CUDA(cudaGetLastError());
}

void fill_uniform_float(float* p, size_t n, uint32_t seed, float scale, cudaStream_t stream) {
  fill_float_kernel<<<1024, 256, 0, stream>>>(p, n, seed, scale);
  BENCH_CUDA(cudaGetLastError());
}

Ceilings measure_ceilings(cudaStream_t stream) {
  Ceilings c;
  cudaDeviceProp prop{};
  int dev = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaGetDeviceProperties(&prop, dev));
  c.device = prop.name;
  c.l2_bytes = prop.l2CacheSize;
  // Copy: 1 GiB each way, far beyond L2.
  const size_t bytes = size_t(1) << 30;
  void *src, *dst;
  BENCH_CUDA(cudaMalloc(&src, bytes));
  BENCH_CUDA(cudaMalloc(&dst, bytes));
  BENCH_CUDA(cudaMemsetAsync(src, 1, bytes, stream));
  const double copy_ms = median_ms([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream); },
                                   stream, 3, 15);
  c.copy_gbps = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
  // Read: the same 1 GiB read once, two 512-thread CTAs per SM.
  const int read_blocks = 2 * prop.multiProcessorCount;
  uint32_t* sink;
  BENCH_CUDA(cudaMalloc(&sink, read_blocks * sizeof(uint32_t)));
  const double read_ms = median_ms(
      [&] {
        read_kernel<<<read_blocks, 512, 0, stream>>>(static_cast<const uint4*>(src), bytes / 16,
                                                     sink);
      },
      stream, 3, 15);
  BENCH_CUDA(cudaGetLastError());
  c.read_gbps = bytes / (read_ms * 1e-3) / 1e9;
  BENCH_CUDA(cudaFree(sink));
  BENCH_CUDA(cudaFree(src));
  BENCH_CUDA(cudaFree(dst));
  // GEMM: 8192^3 fp16 with fp32 accumulation on random data.
  const int n = 8192;
  __half *a, *b, *d;
  BENCH_CUDA(cudaMalloc(&a, size_t(n) * n * 2));
  BENCH_CUDA(cudaMalloc(&b, size_t(n) * n * 2));
  BENCH_CUDA(cudaMalloc(&d, size_t(n) * n * 2));
  fill_uniform_half(a, size_t(n) * n, 1, 1.0f, stream);
  fill_uniform_half(b, size_t(n) * n, 2, 1.0f, stream);
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, stream);
  const float one = 1, zero = 0;
  const double gemm_ms = median_ms(
      [&] {
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16F, n, b, CUDA_R_16F, n, &zero, d,
                     CUDA_R_16F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      stream, 3, 10);
  c.gemm_tflops = 2.0 * n * double(n) * n / (gemm_ms * 1e-3) / 1e12;
  cublasDestroy(h);
  BENCH_CUDA(cudaFree(a));
  BENCH_CUDA(cudaFree(b));
  BENCH_CUDA(cudaFree(d));
  return c;
}

std::vector<int> int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

std::vector<std::pair<int, int>> int_pairs(const std::string& s) {
  std::vector<std::pair<int, int>> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const int a = std::stoi(item.substr(0, colon));
    out.emplace_back(a, colon == std::string::npos ? a : std::stoi(item.substr(colon + 1)));
  }
  return out;
}

}  // namespace rill::bench
