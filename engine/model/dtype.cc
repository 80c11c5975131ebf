#include "engine/model/dtype.h"

#include "engine/error.h"
#include "engine/model/fp8.h"

namespace rill {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF8E4M3:
      return "float8_e4m3fn";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32" || name == "F32") return DType::kF32;
  if (name == "float16" || name == "fp16" || name == "half" || name == "F16") return DType::kF16;
  if (name == "bfloat16" || name == "bf16" || name == "BF16") return DType::kBF16;
  throw Error(ErrorCode::kUnsupported,
              "unsupported dtype '" + name + "' (float32, float16, bfloat16)");
}

KvCacheDType parse_kv_cache_dtype(const std::string& name) {
  if (name == "auto") return KvCacheDType::kAuto;
  if (name == "fp8") return KvCacheDType::kFp8E4M3;
  throw Error(ErrorCode::kInvalidArgument, "unsupported KV-cache dtype '" + name + "' (auto, fp8)");
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (absx >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (absx < 0x33000001u) return sign;             // below half the smallest subnormal
  int exp = static_cast<int>(absx >> 23) - 127;
  uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
  int shift = exp < -14 ? (-14 - exp) + 13 : 13;  // subnormals shift further
  uint32_t half = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
  if (exp < -14) return sign | static_cast<uint16_t>(half);
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(exp + 15) << 10) + (half - 0x400u));
}

void convert_to_f32(DType src_type, const void* src, float* dst, size_t n) {
  switch (src_type) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = fp8::e4m3_to_float(s[i]);
      return;
    }
  }
}

}  // namespace rill
