// Matrix-vector products for small batches (decode at batch 1-8), where a GEMM library's tile
// shapes waste bandwidth: y[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation, 16-byte loads of
// the weight rows. Weights [N, K] row-major (as checkpoints store them).
//
// At batch 1 a decode step is bound by the weight stream, and every small kernel between two
// GEMVs leaves the memory idle for its launch and run. So the GEMV can absorb its neighbours:
//   - input side (GemvNorm): x = RMSNorm(residual) computed as x is loaded, from the fp32
//     residual and per-tile partial sums of squares that the GEMV producing the residual left;
//   - output side (GemvEpilogue): the residual add of a sub-layer (o and down projections), or
//     SiLU(gate) * up of a gated MLP whose gate and up rows are interleaved in tiles of 8.
// Together they replace the add + norm kernels and the activation kernel of a Llama layer.
#pragma once

#include <string>

#include "rill/kernels/common.h"

namespace rill::kernels {

/// What the GEMV does with its fp32 sums s[m, n] (rounded to the dtype first, as a separate GEMM
/// output would be, so the fused and unfused paths compute the same values).
enum class GemvEpilogue : int {
  /// y[m, n] = s (dtype, or fp32 when y_f32).
  kStore = 0,
  /// y is the fp32 residual [M, N]: y[m, n] += dtype(s) + bias[n], and
  /// ssq_out[m, b] = sum over the 16 rows n of tile b (16b .. 16b + 15) of the new y[m, n]^2.
  kAddResidual = 1,
  /// w rows come in tiles of 16: rows 16j .. 16j+7 are gate rows 8j .. 8j+7, rows 16j+8 .. 16j+15
  /// the up rows 8j .. 8j+7 (N % 16 == 0). y[m, 8j + r] = dtype(silu(g) * u) with
  /// g = dtype(s[m, 16j + r]) + bias[16j + r], u = dtype(s[m, 16j + 8 + r]) + bias[16j + 8 + r];
  /// y is [M, N / 2].
  kSiluMul = 2,
};

/// RMSNorm folded into the input: x[m, k] = dtype(residual[m, k] * inv[m] * weight[k]) with
/// inv[m] = 1 / sqrt(sum_p ssq[m, p] / K + eps), the partial sums summed in a fixed order (so
/// every CTA, and every run, computes the same inv). ssq is what a kAddResidual GEMV with
/// N = K wrote (ssq_parts = gemv_ssq_parts(K)). Such a GEMV runs as many CTAs as fit on the
/// device at once, each looping over tiles of rows, so that the statistics are read once per CTA.
struct GemvNorm {
  const float* residual = nullptr;  // [M, K] fp32; null: no norm, x is the input
  const void* weight = nullptr;     // [K] dtype
  const float* ssq = nullptr;       // [M, ssq_parts]
  int ssq_parts = 0;
  float eps = 1e-6f;
};

struct GemvParams {
  DType dtype = DType::kF16;
  int M = 0, N = 0, K = 0;        // M <= 8
  const void* x = nullptr;        // [M, K]; unused with norm.residual
  GemvNorm norm;
  const void* w = nullptr;        // [N, K]
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  void* y = nullptr;              // see GemvEpilogue
  bool y_f32 = false;             // kStore only
  const void* bias = nullptr;     // optional [N] (kAddResidual, kSiluMul)
  float* ssq_out = nullptr;       // kAddResidual: [M, gemv_ssq_parts(N)]
  int config = -1;  // CTA shape 0 .. gemv_num_configs() - 1; -1: gemv_default_config
};
/// The CTA shapes launch_gemv offers (rill-gemv-bench compares them). The fused variants (a
/// norm, or an epilogue other than kStore) exist for shapes 0 and 1, the defaults.
int gemv_num_configs();
std::string gemv_config_name(int config);
/// The CTA shape launch_gemv uses for weights [N, K] when config is -1.
int gemv_default_config(int N, int K);
/// Partial sums of squares per row that a kAddResidual GEMV of N rows writes.
int gemv_ssq_parts(int N);
/// cudaErrorInvalidValue when M > 8 or K is not a multiple of 8 (16-byte rows); callers fall back to a GEMM.
cudaError_t launch_gemv(const GemvParams& p, cudaStream_t stream);

}  // namespace rill::kernels
