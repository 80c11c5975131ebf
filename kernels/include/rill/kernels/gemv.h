// Matrix-vector products for small batches (decode at batch 1-8), where a GEMM library's tile
// shapes waste bandwidth: y[m, n] = sum_k x[m, k] * w[n, k], fp32 accumulation, 16-byte loads of
// the weight rows. Weights [N, K] row-major (as checkpoints store them).
#pragma once

#include <string>

#include "rill/kernels/common.h"

namespace rill::kernels {

/// What the GEMV does with its fp32 sums s[m, n].
enum class GemvEpilogue : int {
  /// y[m, n] = s (dtype, or fp32 when y_f32).
  kStore = 0,
  /// The gate|up projection of a gated MLP with SiLU-and-mul applied, which saves the activation
  /// kernel of every decode layer. w rows come in tiles of 16: rows 16j .. 16j+7 are gate rows
  /// 8j .. 8j+7, rows 16j+8 .. 16j+15 the up rows 8j .. 8j+7 (N % 16 == 0). y is [M, N / 2]:
  /// y[m, 8j + r] = dtype(silu(g) * u), g = dtype(s[m, 16j + r]) + bias[16j + r],
  /// u = dtype(s[m, 16j + 8 + r]) + bias[16j + 8 + r], i.e. exactly what a kStore GEMV followed
  /// by the activation kernel (ActivationParams::interleaved) computes.
  kSiluMul = 1,
};

struct GemvParams {
  DType dtype = DType::kF16;
  int M = 0, N = 0, K = 0;  // M <= 8
  const void* x = nullptr;  // [M, K]
  const void* w = nullptr;  // [N, K]
  void* y = nullptr;        // [M, N] (dtype), or fp32 when y_f32; kSiluMul: [M, N / 2]
  bool y_f32 = false;       // kStore only
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  const void* bias = nullptr;  // kSiluMul: optional [N], rows as w's
  int config = -1;             // CTA shape 0 .. gemv_num_configs() - 1; -1: gemv_default_config
  /// For the default shape: the kernel launched before this one is short (a norm, RoPE,
  /// attention), so its CTAs sit resident under PDL for a while before their inputs are ready:
  /// stage the weights through shared memory, which lets more of them stream before the wait.
  bool deep_prologue = false;
};
/// y = x w^T for M rows of x, weights [N, K]: kStore into the dtype, the default CTA shape.
inline GemvParams gemv_params(DType dtype, int M, int N, int K, const void* x, const void* w,
                              void* y) {
  GemvParams p;
  p.dtype = dtype;
  p.M = M;
  p.N = N;
  p.K = K;
  p.x = x;
  p.w = w;
  p.y = y;
  return p;
}
/// A CTA shape of the GEMV: `warps` split K, each taking `unroll` 32-wide steps per iteration;
/// the weights wait in registers (stages == 0) or in a shared-memory ring of `stages` iterations
/// filled by cp.async. Results depend on `warps` only. `silu`: kSiluMul exists for this shape.
struct GemvConfigInfo {
  int warps = 0, unroll = 0, stages = 0;
  bool silu = false;
  /// fp8: the warps take 256-byte pieces of K (the bulk kernel), not 64-byte steps: other sums.
  bool pieces = false;
};
/// The CTA shapes launch_gemv offers (rill-gemv-bench compares them).
int gemv_num_configs();
GemvConfigInfo gemv_config_info(int config);  // config in [0, gemv_num_configs())
std::string gemv_config_name(int config);
/// The CTA shape launch_gemv uses for weights [N, K] when config is -1 (see deep_prologue).
int gemv_default_config(int N, int K, bool deep_prologue = false);
/// The shape of `warps` warps x 1 step with a shared-memory ring of `stages` iterations (the
/// same sums as the default shape with those warps, at another depth), or -1 when none exists.
int gemv_ring_config(int warps, int stages);
/// cudaErrorInvalidValue when M > 8 or K is not a multiple of 8 (16-byte rows); callers fall back
/// to a GEMM.
cudaError_t launch_gemv(const GemvParams& p, cudaStream_t stream);

}  // namespace rill::kernels
