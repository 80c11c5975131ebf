// The host image of one fused fp8 weight matrix as the CUDA runner uploads it: e4m3 bytes of the
// row concatenation of its parts (q | k | v, gate | up), and fp32 scales in the layout the fp8
// GEMV and the cuBLASLt GEMM read (kernels::Fp8ScaleLayout). Plain C++ (CPU builds test it).
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/tensor.h"

namespace rill::cuda {

struct Fp8Image {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // [rows, cols] e4m3
  /// false: one scale per row, [rows]; true: one per row and 128 columns, [ceil(cols / 128), rows]
  /// (column block kb of row r at kb * rows + r).
  bool block = false;
  std::vector<float> scales;
  /// Static activations: one input scale for the fused matrix, the largest of its parts' (so no
  /// part's activations saturate earlier than its own scale would let them); 0: dynamic.
  float input_scale = 0;

  /// w[r][c] = e4m3(bytes[r][c]) * scale of (r, c): for tests.
  float value(int64_t r, int64_t c) const;
};

/// The size of build_fp8_image(parts)'s image, without building it: its rows and columns and
/// whether its scales are per 128 columns.
struct Fp8ImageShape {
  int64_t rows = 0, cols = 0;
  bool block = false;
  size_t scale_count() const {
    return static_cast<size_t>(rows * (block ? (cols + 127) / 128 : 1));
  }
};
Fp8ImageShape fp8_image_shape(const std::vector<const Tensor*>& parts);

/// The image of the rows of `parts` (absent ones skipped; all [*, cols]): fp8 parts with their
/// scales, 16/32-bit ones quantized per channel. Per-tensor and per-channel scales become one per
/// row; 128 x 128 block scales one per row and 128 columns, which per-row scales of other parts
/// then repeat. `interleave_tile` > 0: exactly two parts of equal rows, their rows alternating in
/// tiles of that many (the gate | up layout of GemvEpilogue::kSiluMul). Throws kInvalidArgument
/// for parts of different widths or block sizes other than 128 columns.
Fp8Image build_fp8_image(const std::vector<const Tensor*>& parts, int interleave_tile = 0);

}  // namespace rill::cuda
