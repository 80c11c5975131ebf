// Element types of weights on disk and in memory, and host-side fp16/bf16 conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rill {

enum class DType { kF32, kF16, kBF16 };

inline size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* dtype_name(DType t);           // "float32", "float16", "bfloat16"
DType parse_dtype(const std::string& name);  // accepts those names and "fp16"/"bf16"/"fp32"; throws

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

/// Converts `n` elements of type `src_type` at `src` to float32.
void convert_to_f32(DType src_type, const void* src, float* dst, size_t n);

}  // namespace rill
