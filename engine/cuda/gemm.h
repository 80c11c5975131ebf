// y[M, N] = x[M, K] * w[N, K]^T for the CUDA runner: cuBLAS (tensor cores, fp32 accumulation)
// for every size, and Rill's GEMV kernel for M <= 8 on the weight shapes where start-up
// measurements showed it faster. Safe inside CUDA-graph capture (fixed cuBLAS workspace).
#pragma once

#include <map>
#include <tuple>
#include <utility>
#include <vector>

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
  /// Picks the GEMV kernel shape for weights [N, K] (timed at M = 1) and then times it against
  /// cuBLAS for M = 1..8, remembering the largest M for which GEMV wins. Successive timed calls
  /// cycle through `ws` (e.g. every layer's copy of the weight), so that, as in decode, the
  /// weights come from HBM rather than from the L2. `scratch_x`/`scratch_y` hold >= 8 rows.
  void tune(const std::vector<const void*>& ws, int N, int K, bool y_f32, void* scratch_x,
            void* scratch_y);
  /// Disables the GEMV path (cuBLAS for everything), e.g. to measure what it buys.
  void set_gemv_enabled(bool on) { gemv_enabled_ = on; }
  /// Largest M that uses GEMV for this shape (0: none).
  int gemv_max_m(int N, int K, bool y_f32) const;
  /// The GEMV kernel shape chosen for this weight shape (kernels::gemv_config_name), or -1.
  int gemv_config(int N, int K, bool y_f32) const;

 private:
  void run_cublas(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32);
  kernels::DType dtype_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceMemory workspace_;
  bool gemv_enabled_ = true;
  struct GemvChoice {
    int max_m = 0;   // largest M that uses GEMV
    int config = 0;  // kernels::GemvParams::config
  };
  std::map<std::tuple<int, int, bool>, GemvChoice> gemv_;  // by (N, K, y_f32)
};

}  // namespace rill::cuda
