// Matrix-vector products for small batches (decode at batch 1-8), where a GEMM library's tile
// shapes waste bandwidth: y[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation, 16-byte loads of
// the weight rows. Weights [N, K] row-major (as checkpoints store them).
#pragma once

#include <string>

#include "rill/kernels/common.h"

namespace rill::kernels {

struct GemvParams {
  DType dtype = DType::kF16;
  int M = 0, N = 0, K = 0;        // M <= 8
  const void* x = nullptr;        // [M, K]
  const void* w = nullptr;        // [N, K]
  void* y = nullptr;              // [M, N] (dtype), or fp32 when y_f32
  bool y_f32 = false;
  int config = -1;  // CTA shape 0 .. gemv_num_configs() - 1; -1: gemv_default_config
};
/// The CTA shapes launch_gemv offers (rill-gemv-bench compares them).
int gemv_num_configs();
std::string gemv_config_name(int config);
/// The CTA shape launch_gemv uses for weights [N, K] when config is -1.
int gemv_default_config(int N, int K);
/// cudaErrorInvalidValue when M > 8 or K is not a multiple of 8 (16-byte rows); callers fall back to a GEMM.
cudaError_t launch_gemv(const GemvParams& p, cudaStream_t stream);

}  // namespace rill::kernels
