// Element types of weights on disk and in memory, and host-side fp16/bf16 conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rill {

/// kF8E4M3: fp8 weights of a quantized checkpoint (OCP E4M3FN, engine/model/fp8.h); a Tensor of
/// this type carries its dequantization scales (engine/model/fp8_weights.h).
enum class DType { kF32, kF16, kBF16, kF8E4M3 };

inline size_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : t == DType::kF8E4M3 ? 1 : 2;
}
const char* dtype_name(DType t);  // "float32", "float16", "bfloat16", "float8_e4m3fn"
/// A compute / storage dtype by name: the three above and "fp16"/"bf16"/"fp32" (not fp8, which
/// only checkpoints store); throws kUnsupported.
DType parse_dtype(const std::string& name);

/// Element type of the KV cache: the model's compute dtype (`auto`), or fp8 e4m3 with per-tensor
/// scales of 1 (`fp8`, vLLM's --kv-cache-dtype fp8; engine/model/fp8.h), half the bytes per token.
enum class KvCacheDType { kAuto, kFp8E4M3 };
KvCacheDType parse_kv_cache_dtype(
    const std::string& name);  // "auto" | "fp8"; throws kInvalidArgument

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// Round-to-nearest-even, NaN preserved (same as PyTorch's conversion).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round-to-nearest-even, saturates to inf like IEEE

/// Converts `n` elements of type `src_type` at `src` to float32 (fp8: the raw e4m3 values, no
/// scale; Tensor::to_f32 applies a weight's scales).
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);

}  // namespace rill
