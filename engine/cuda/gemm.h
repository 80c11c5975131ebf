// y[M, N] = x[M, K] * w[N, K]^T for the CUDA runner: cuBLAS (tensor cores, fp32 accumulation)
// for every size, and Rill's GEMV kernel for M <= 8 on the weight shapes where start-up
// measurements showed it faster. Safe inside CUDA-graph capture (fixed cuBLAS workspace).
#pragma once

#include <map>
#include <tuple>
#include <utility>

#include "engine/cuda/cuda_util.h"
#include "rill/kernels/common.h"

namespace rill::cuda {

class Gemm {
 public:
  Gemm(kernels::DType dtype, cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Enqueues y = x w^T on the stream. y is dtype, or fp32 when y_f32.
  void run(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32 = false);
  /// Times GEMV against cuBLAS for M = 1..8 on weight `w` [N, K] and remembers the largest M
  /// for which GEMV wins. `scratch_x`/`scratch_y` hold at least 8 rows.
  void tune(const void* w, int N, int K, bool y_f32, void* scratch_x, void* scratch_y);
  /// Disables the GEMV path (cuBLAS for everything), e.g. to measure what it buys.
  void set_gemv_enabled(bool on) { gemv_enabled_ = on; }
  /// Largest M that uses GEMV for this shape (0: none).
  int gemv_max_m(int N, int K, bool y_f32) const;

 private:
  void run_cublas(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32);
  kernels::DType dtype_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceMemory workspace_;
  bool gemv_enabled_ = true;
  std::map<std::tuple<int, int, bool>, int> gemv_max_m_;  // (N, K, y_f32) -> largest M
};

}  // namespace rill::cuda
