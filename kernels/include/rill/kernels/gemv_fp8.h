// Weight-only fp8 GEMV for decode batches (1-16 rows): y[m, n] = sum_k x[m, k] * w[n, k] *
// scale(n, k) with e4m3 weights read once (16-byte loads, 16 weights each), x in fp16/bf16, the
// products on the tensor cores in the activation dtype (e4m3 converts exactly to either) and fp32
// accumulation. The same epilogues as the 16-bit GEMV (gemv.h): kStore and kSiluMul.
#pragma once

#include <cstddef>
#include <string>

#include "rill/kernels/common.h"
#include "rill/kernels/gemv.h"

namespace rill::kernels {

/// Where a weight's dequantization scales are (fp32 on the device).
enum class Fp8ScaleLayout : int {
  /// One per output row: scale [N] (per-channel, and per-tensor scales expanded to rows).
  kPerRow = 0,
  /// One per output row and 128 columns: scale [ceil(K / 128), N], row n of column block kb at
  /// kb * N + n (cuBLASLt's VEC128_32F layout, so the GEMM reads the same table). 128 x 128 block
  /// scales are expanded to it at load.
  kBlock128 = 1,
};

/// Columns of x / w per scale of kBlock128.
constexpr int kFp8ScaleBlock = 128;

/// A residual add and the RMSNorm after it, split over two GEMVs of a decode step instead of an
/// add + norm kernel between them (CudaTuning::fp8_norm_in_gemv): the GEMV whose output joins
/// the residual stream (attention's o, the MLP's down) adds it and writes the norm's input
/// without its 1 / rms (Fp8NormOut); the GEMV that reads that input (the next qkv, gate|up)
/// applies each row's 1 / rms to its sums (Fp8NormIn), from per-CTA sums of squares the first
/// one left. One kernel boundary fewer per norm.
struct Fp8NormOut {
  /// [M, N] fp32: residual[m, n] += dtype(s[m, n]), the value a kStore GEMV would have stored
  /// (add_norm adds that stored delta). y then holds dtype(residual[m, n] * weight[n]) instead
  /// of s. Null: a plain kStore. N % 16 == 0; residual and weight 16-byte aligned.
  float* residual = nullptr;
  const void* weight = nullptr;  // [N] dtype: the RMSNorm's weight
  /// [M, ceil(N / 16)]: sumsq[m, b] = the sum over the 16 rows of CTA b of residual[m, n]^2 (the
  /// new values), added in a fixed order.
  float* sumsq = nullptr;
};
/// Most sums Fp8NormIn takes (M * K / 16: each CTA stages them in shared memory).
constexpr int kFp8NormInMaxSums = 16384;
struct Fp8NormIn {
  /// [M, K / 16]: Fp8NormOut::sumsq of the GEMV that wrote x (its N is this one's K). Every sum
  /// s[m, n] is multiplied by 1 / sqrt(sum_b sumsq[m, b] / K + eps) before the epilogue. Null:
  /// x is used as it is. M * K / 16 <= kFp8NormInMaxSums.
  const float* sumsq = nullptr;
  float eps = 1e-5f;
};

struct Fp8GemvParams {
  DType dtype = DType::kBF16;    // of x, y and bias
  int M = 0, N = 0, K = 0;       // M <= 16, K % 16 == 0
  const void* x = nullptr;       // [M, K] dtype, 16-byte aligned rows
  const void* w = nullptr;       // [N, K] e4m3, 16-byte aligned
  const float* scale = nullptr;  // see Fp8ScaleLayout
  Fp8ScaleLayout scale_layout = Fp8ScaleLayout::kPerRow;
  void* y = nullptr;   // [M, N] (dtype), fp32 when y_f32; kSiluMul: [M, N / 2]
  bool y_f32 = false;  // kStore only
  /// kStore, or kSiluMul: w rows in tiles of 16 (8 gate rows, then their 8 up rows; N % 16 == 0)
  /// and y[m, 8j + r] = dtype(silu(g) * u) with g = dtype(s[m, 16j + r] * scale) + bias[16j + r]
  /// and u likewise from row 16j + 8 + r: what a kStore GEMV followed by the activation kernel
  /// (ActivationParams::interleaved) computes.
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  const void* bias = nullptr;  // kSiluMul: optional [N], rows as w's
  int config = -1;             // CTA shape 0 .. gemv_fp8_num_configs() - 1; -1: the default
  /// For the default shape: the kernel launched before this one is short (attention, add + norm),
  /// so its CTAs sit resident under PDL for a while before their inputs are ready: stage the
  /// weights through a shared-memory ring, which lets several iterations stream before the wait
  /// (the same sums as without), in persistent CTAs (two an SM, each looping over row tiles with
  /// its ring streaming on across them).
  bool deep_prologue = false;
  /// kStore only, with y in the dtype: the residual add and the next norm's input (see
  /// Fp8NormOut).
  Fp8NormOut norm_out;
  /// x is an Fp8NormOut's y: its rows' 1 / rms applied to the sums.
  Fp8NormIn norm_in;
};

/// A CTA shape: `warps` split K, each taking `unroll` 64-column steps per iteration; the weights
/// wait double-buffered in registers (stages == 0) or in a shared-memory ring of `stages`
/// iterations filled by cp.async. The sums depend on `warps` only.
int gemv_fp8_num_configs();
GemvConfigInfo gemv_fp8_config_info(int config);  // .silu is always true
std::string gemv_fp8_config_name(int config);
/// The shape launch_gemv_fp8 uses for weights [N, K] when config is -1 (see deep_prologue).
int gemv_fp8_default_config(int N, int K, bool deep_prologue = false);
/// The shape of `warps` warps x 1 step with a ring of `stages` iterations (the same sums as the
/// register shapes with those warps), or -1 when none exists.
int gemv_fp8_ring_config(int warps, int stages);
/// Most rows of x a launch takes (two mma column tiles of 8).
constexpr int kFp8GemvMaxRows = 16;

/// cudaErrorInvalidValue (with last_kernel_error_detail) for M > 16, K % 16 != 0, a bad scale
/// layout, a misaligned or null operand; callers fall back to a GEMM.
cudaError_t launch_gemv_fp8(const Fp8GemvParams& p, cudaStream_t stream);

/// Device memory launch_gemv_fp8_pair's grid barrier keeps between launches: zeroed once, 8-byte
/// aligned, used by one stream at a time.
constexpr size_t kFp8PairBarrierBytes = 8;

/// launch_gemv_fp8(first) then launch_gemv_fp8(second), where `second` reads what `first` wrote
/// (a decode layer's down projection with Fp8NormOut, then the next layer's qkv with Fp8NormIn),
/// as one kernel of persistent CTAs with a grid barrier between the two when both take the deep
/// prologue's shape (deep_prologue, config -1 or that shape), kStore, the same dtype and scale
/// layout, at most 8 rows, x small enough to stage in shared memory, and every CTA of the grid
/// fits on the GPU at once; else as the two launches. The same outputs either way, bit for bit.
/// Errors as launch_gemv_fp8's.
cudaError_t launch_gemv_fp8_pair(const Fp8GemvParams& first, const Fp8GemvParams& second,
                                 void* barrier, cudaStream_t stream);
/// Whether launch_gemv_fp8_pair runs these as one kernel on the current device.
bool gemv_fp8_pair_fuses(const Fp8GemvParams& first, const Fp8GemvParams& second,
                         const void* barrier);

}  // namespace rill::kernels
