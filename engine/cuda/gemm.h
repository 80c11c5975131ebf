// y[M, N] = x[M, K] * w[N, K]^T for the CUDA runner: Rill's GEMV kernel for M <= 8 (decode;
// faster than cuBLAS at every Llama shape and M <= 8 on H100, docs/performance-history.md) and
// cuBLAS (tensor cores, fp32 accumulation) otherwise. The choice depends only on the operands, never
// on timings, so every run computes bit-identical results. Safe inside CUDA-graph capture
// (fixed cuBLAS workspace).
#pragma once

#include "engine/cuda/cuda_util.h"
#include "rill/kernels/common.h"
#include "rill/kernels/gemv.h"

namespace rill::cuda {

class Gemm {
 public:
  Gemm(kernels::DType dtype, cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// Enqueues y = x w^T on the stream. y is dtype, or fp32 when y_f32. deep_prologue: see
  /// kernels::GemvParams (used when the GEMV runs).
  /// `config`: the GEMV's CTA shape (-1: the forced or default one).
  void run(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32 = false,
           bool deep_prologue = false, int config = -1);
  /// Enqueues Rill's GEMV with its epilogue options (p.dtype is filled in).
  void gemv(kernels::GemvParams p);
  /// Disables the GEMV path (cuBLAS for everything), e.g. to measure what it buys.
  void set_gemv_enabled(bool on) { gemv_enabled_ = on; }
  /// The GEMV's CTA shape (kernels::gemv_config_info) for every GEMV that does not name one;
  /// -1: kernels::gemv_default_config. A shape without kSiluMul keeps the default for those.
  void set_gemv_config(int config) { gemv_config_ = config; }
  /// The same for the GEMVs with deep_prologue (before set_gemv_config's shape); -1: the default.
  void set_deep_config(int config) { deep_config_ = config; }
  /// The CTA shape gemv() launches for weights [N, K] when the caller names none (the forced one,
  /// or the default rule).
  int gemv_config(int N, int K, bool deep_prologue) const;
  /// True when run() takes the GEMV kernel for these operands.
  bool uses_gemv(const void* x, const void* w, int M, int K) const;

 private:
  // The shape set_deep_config / set_gemv_config forced on GEMVs with or without a deep
  // prologue (-1: none).
  int forced_config(bool deep_prologue) const {
    return deep_prologue && deep_config_ >= 0 ? deep_config_ : gemv_config_;
  }
  void run_cublas(const void* x, const void* w, void* y, int M, int N, int K, bool y_f32);
  kernels::DType dtype_;
  cudaStream_t stream_;
  cublasHandle_t handle_ = nullptr;
  DeviceMemory workspace_;
  bool gemv_enabled_ = true;
  int gemv_config_ = -1;
  int deep_config_ = -1;
};

}  // namespace rill::cuda
