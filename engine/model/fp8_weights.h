// fp8 (e4m3) weights on the host: the scales a quantized checkpoint stores beside each weight,
// checked and attached to the weight's Tensor at load, and per-channel quantization of 16/32-bit
// weights (`--quantization fp8`). Tensor::to_f32 dequantizes with them, which is how the CPU
// reference runs an fp8 model; the CUDA runner uploads the bytes and the scales.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/quantization.h"
#include "engine/model/tensor.h"

namespace rill {

/// Dequantization scales of an fp8 weight [rows, cols]: w[r][c] = e4m3[r][c] * at(r, c), one
/// value per block of block_rows x block_cols (the last blocks of a row or column may be partial).
/// Per-tensor: one block of rows x cols; per-channel: 1 x cols; block-scaled: 128 x 128.
struct Fp8Scales {
  std::string name;  // the scale tensor in the checkpoint, or "<weight> (scales computed at load)"
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 1, block_cols = 1;
  std::vector<float> values;  // [grid_rows(), grid_cols()], row-major; finite and positive
  /// Static per-tensor activation scale (compressed-tensors `input_scale`): the W8A8 GEMM
  /// quantizes x as e4m3(x / input_scale). 0: activations get dynamic scales.
  float input_scale = 0;

  int64_t grid_rows() const { return (rows + block_rows - 1) / block_rows; }
  int64_t grid_cols() const { return (cols + block_cols - 1) / block_cols; }
  float at(int64_t r, int64_t c) const {
    return values[static_cast<size_t>((r / block_rows) * grid_cols() + c / block_cols)];
  }
  /// The same scales with one block row per weight row (block_rows 1): the layout in which rows
  /// can be gathered, concatenated or interleaved.
  Fp8Scales per_row() const;
  /// Rows `rows` (indices into this weight's rows) of per_row(), in that order.
  Fp8Scales gather_rows(const std::vector<int64_t>& rows) const;
};

/// Finds the scales of every fp8 weight in `tensors` ("<module>.weight" with "<module>.
/// weight_scale" or ".weight_scale_inv", and "<module>.input_scale" for static activations),
/// checks them against `q` and attaches them to the weight. A missing scale tensor, one of the
/// wrong shape, or a value that is not finite and positive is refused (kInvalidArgument) with
/// the tensor named; so is an fp8 tensor that is not a weight, or one in a checkpoint without a
/// quantization_config.
void attach_fp8_scales(const QuantizationConfig& q, std::map<std::string, Tensor>& tensors,
                       const std::string& source);

/// e4m3 bytes and per-channel scales (max |w| of the row / 448; 1 for a row of zeros) of a
/// 16/32-bit weight [rows, cols]; fp8 weights come back as they are. Runs on several threads for
/// large weights. Throws kInvalidArgument naming the weight when it holds a non-finite value.
Tensor quantize_fp8_per_channel(const Tensor& w);

/// True for an fp8 weight with its scales (what attach_fp8_scales / quantize_fp8_per_channel
/// make).
inline bool is_fp8(const Tensor& t) {
  return t.dtype == DType::kF8E4M3 && t.scales != nullptr;
}

}  // namespace rill
