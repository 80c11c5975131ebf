// Timing and ceilings shared by Rill's benchmarks: CUDA-event timing with warm-up and medians,
// and the device's measured copy bandwidth and GEMM rate, which every result is compared to.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace rill::bench {

/// "1,2,4" -> {1, 2, 4} (empty items skipped).
std::vector<int> int_list(const std::string& s);
/// "2:4,1:2" -> {{2, 4}, {1, 2}}; a lone "2" is {2, 2}.
std::vector<std::pair<int, int>> int_pairs(const std::string& s);

/// Aborts with a message when a CUDA call fails (benchmarks have no error recovery).
void check(cudaError_t err, const char* what);
#define BENCH_CUDA(expr) ::rill::bench::check((expr), #expr)

/// Median time in milliseconds of `fn` (enqueued on `stream`), timed with CUDA events after
/// `warmup` untimed runs, over `iters` runs.
double median_ms(const std::function<void()>& fn, cudaStream_t stream, int warmup = 5, int iters = 30);

struct Ceilings {
  std::string device;
  double copy_gbps = 0;    // device-to-device copy, bytes read + written per second / 1e9
  double read_gbps = 0;    // read-only streaming with the GEMV's 16-byte loads, bytes read / 1e9
  double gemm_tflops = 0;  // cuBLAS fp16 8192^3 GEMM (random data)
  int l2_bytes = 0;        // the device's L2
};
/// Copies of a `bytes` operand to rotate through so that each use reads memory, not the L2: at
/// least 2, and together 4x the L2.
inline int copies_beyond_l2(size_t bytes, int l2_bytes) {
  return std::max<int>(2, int((4 * size_t(l2_bytes) + bytes - 1) / bytes));
}
/// Measures the ceilings once (about a second of GPU time).
Ceilings measure_ceilings(cudaStream_t stream);

/// p[i] = fp16(u_i * scale + offset) for i < n, u_i uniform in [-0.5, 0.5) from a hash of
/// (i, seed) (bench_random.cuh); enqueued on `stream`.
void fill_uniform_half(void* p, size_t n, uint32_t seed, float scale, cudaStream_t stream,
                       float offset = 0.0f);
/// The same in fp32 (no offset).
void fill_uniform_float(float* p, size_t n, uint32_t seed, float scale, cudaStream_t stream);

}  // namespace rill::bench
