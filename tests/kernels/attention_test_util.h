// Helpers shared by the decode and prefill attention tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/fp8.h"
#include "rill/kernels/common.h"

namespace rill::testing {

/// Slot offset of rel index `rel` in a ring of `ring` slots (non-negative modulo).
inline int ring_offset(long long rel, long long ring) {
  long long r = rel % ring;
  if (r < 0) r += ring;
  return static_cast<int>(r);
}

/// Normalized-error and max-abs tolerances of attention outputs from rounded inputs.
inline double tolerance(kernels::DType t) { return t == kernels::DType::kF16 ? 2e-3 : 1e-2; }
inline double max_abs_tolerance(kernels::DType t) { return t == kernels::DType::kF16 ? 1e-2 : 4e-2; }

/// The e4m3 bytes of a cache held as floats (layout l: each element quantized with the scale of
/// its K or V half of the block); `cache` becomes what the kernels read back, e4m3 * scale (NaN
/// poison stays NaN). References computed on it see the dequantized cache.
inline std::vector<uint8_t> quantize_cache(std::vector<float>& cache,
                                           const kernels::KvCacheLayout& l) {
  std::vector<uint8_t> bytes(cache.size());
  for (size_t i = 0; i < cache.size(); ++i) {
    const bool is_v = static_cast<int64_t>(i) % l.block_stride() >= l.kv_stride();
    const float scale = is_v ? l.v_scale : l.k_scale;
    bytes[i] = fp8::e4m3_from_float(cache[i] / scale);
    cache[i] = fp8::e4m3_to_float(bytes[i]) * scale;
  }
  return bytes;
}

/// "f16" or "bf16", and the fp8 cache with its scales when there is one.
inline std::string describe_types(kernels::DType t, kernels::KvDType kv, float k_scale,
                                  float v_scale) {
  std::string s = t == kernels::DType::kF16 ? "f16" : "bf16";
  if (kv == kernels::KvDType::kFp8E4M3)
    s += " fp8 cache (k_scale " + std::to_string(k_scale) + ", v_scale " + std::to_string(v_scale) +
         ")";
  return s;
}

}  // namespace rill::testing
