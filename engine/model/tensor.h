// A read-only view of one weight tensor in host memory (a memory-mapped checkpoint or a buffer
// the loader owns), shared by the CPU and CUDA runners.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/dtype.h"

namespace rill {

struct Fp8Scales;  // engine/model/fp8_weights.h

struct Tensor {
  std::string name;  // name in the checkpoint, for error messages
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;         // row-major
  const void* data = nullptr;         // nullptr: absent (e.g. no bias)
  std::shared_ptr<const void> owner;  // keeps the mapping / buffer alive
  /// kF8E4M3 weights: their dequantization scales (attach_fp8_scales, quantize_fp8_per_channel).
  std::shared_ptr<const Fp8Scales> scales;

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::string shape_str() const;  // "[4096, 4096]"
  /// All elements converted to float32 (fp8 weights dequantized with their scales; kInvalidArgument
  /// for an fp8 tensor without them).
  std::vector<float> to_f32() const;
  void to_f32(float* dst) const;
};

/// A tensor that owns a float32 buffer (used where the loader must rearrange weights).
Tensor make_f32_tensor(std::string name, std::vector<int64_t> shape, std::vector<float> values);

/// Concatenates tensors along dim 0 (all must share dtype and trailing dims); absent ones skipped.
Tensor concat_rows(const std::string& name, const std::vector<const Tensor*>& parts);

}  // namespace rill
