// Activation quantization for the W8A8 fp8 GEMMs of prefill: x [num_tokens, width] (fp16/bf16)
// to e4m3 with fp32 scales, stored = e4m3(saturate(x / scale)), rounded to nearest even.
#pragma once

#include <cstdint>

#include "rill/kernels/common.h"

namespace rill::kernels {

enum class ActQuantMode : int {
  /// One scale per token: max |x| of the row / 448 (1 for a row of zeros); scales [num_tokens]
  /// (cuBLASLt's OUTER_VEC_32F).
  kPerToken = 0,
  /// One scale per token and 128 columns: scales [ceil(width / 128), num_tokens], group g of
  /// token t at g * num_tokens + t (cuBLASLt's VEC128_32F).
  kPerGroup128 = 1,
};

struct QuantizeFp8Params {
  DType dtype = DType::kBF16;
  int num_tokens = 0, width = 0;  // width % 8 == 0
  const void* x = nullptr;        // [num_tokens, width], 16-byte aligned rows
  uint8_t* out = nullptr;         // [num_tokens, width] e4m3, 8-byte aligned rows
  float* scales = nullptr;        // see ActQuantMode
  ActQuantMode mode = ActQuantMode::kPerToken;
  /// kPerToken only: a static per-tensor scale (one fp32 on the device) used for every token
  /// instead of the row maximum (compressed-tensors `input_scale`); it is also written to scales.
  const float* static_scale = nullptr;
};

/// cudaErrorInvalidValue for a width not a multiple of 8, a static scale with kPerGroup128, or
/// misaligned / null operands.
cudaError_t launch_quantize_fp8(const QuantizeFp8Params& p, cudaStream_t stream);

}  // namespace rill::kernels
