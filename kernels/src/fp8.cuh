// fp8 (e4m3) KV-cache elements: the cache element type dispatch and the conversions of the
// kernels that store K/V (rope_kv, kv_write) and read them (decode and prefill attention).
// Stored = e4m3(saturate(x / scale)), round to nearest even (cvt.rn.satfinite.e4m3x2.f32 on
// sm_89+); read = float(stored) * scale, where e4m3 -> fp16 -> fp32 is exact. The host encoder of
// the CPU engine and of the tests (engine/model/fp8.h) gives the same bytes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "dispatch.cuh"

namespace rill::kernels {

/// Cache element type of an fp8 cache (a type tag; the kernels move its bytes).
using Fp8 = __nv_fp8_e4m3;

template <typename C>
inline constexpr bool kIsFp8 = std::is_same_v<C, Fp8>;

/// Calls body.template operator()<C>() with the cache element type: C = T (the activation type)
/// for KvDType::kSame, Fp8 for kFp8E4M3.
template <typename T, typename Body>
cudaError_t dispatch_kv_dtype(KvDType kv, Body&& body) {
  switch (kv) {
    case KvDType::kSame:
      return body.template operator()<T>();
    case KvDType::kFp8E4M3:
      return body.template operator()<Fp8>();
  }
  return invalid_argument("unsupported KV-cache dtype " + std::to_string(static_cast<int>(kv)));
}

/// "" when the layout's element type and scales are usable, else why not (for the launchers).
inline std::string kv_dtype_problem(const KvCacheLayout& l) {
  if (l.cache_dtype != KvDType::kSame && l.cache_dtype != KvDType::kFp8E4M3)
    return "unsupported KV-cache dtype " + std::to_string(static_cast<int>(l.cache_dtype));
  if (l.cache_dtype == KvDType::kFp8E4M3 &&
      !(std::isfinite(l.k_scale) && l.k_scale > 0 && std::isfinite(l.v_scale) && l.v_scale > 0))
    return "fp8 KV cache: k_scale and v_scale must be finite and positive";
  return "";
}

/// Two values stored as e4m3 (a in the low byte): e4m3(saturate(x / scale)).
__device__ __forceinline__ uint32_t quantize2_fp8(float a, float b, float scale) {
  return __nv_cvt_float2_to_fp8x2(make_float2(__fdiv_rn(a, scale), __fdiv_rn(b, scale)),
                                  __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ uint8_t quantize_fp8(float x, float scale) {
  return __nv_cvt_float_to_fp8(__fdiv_rn(x, scale), __NV_SATFINITE, __NV_E4M3);
}

/// A dynamic activation scale (the W8A8 GEMMs' per-token / per-group one): the span's max |x|
/// maps to 448, the largest e4m3; 1 for a span of zeros.
__device__ __forceinline__ float act_scale_fp8(float amax) {
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

/// Eight values as e4m3 bytes (little-endian: value 0 in the lowest byte).
__device__ __forceinline__ uint2 quantize8_fp8(const float (&f)[8], float scale) {
  uint2 q;
  q.x = quantize2_fp8(f[0], f[1], scale) | (quantize2_fp8(f[2], f[3], scale) << 16);
  q.y = quantize2_fp8(f[4], f[5], scale) | (quantize2_fp8(f[6], f[7], scale) << 16);
  return q;
}

/// The two e4m3 values in the low 16 bits of w as floats (low byte first), unscaled.
__device__ __forceinline__ float2 fp8x2_to_float2(uint32_t w) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(h));
}

/// Four e4m3 values of a 32-bit word (lowest byte first) as floats, unscaled.
__device__ __forceinline__ void fp8x4_to_float(uint32_t w, float* f) {
  const float2 a = fp8x2_to_float2(w), b = fp8x2_to_float2(w >> 16);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

/// Sixteen e4m3 values in a 16-byte vector as floats, unscaled.
__device__ __forceinline__ void unpack16_fp8(const uint4& v, float (&f)[16]) {
  fp8x4_to_float(v.x, f);
  fp8x4_to_float(v.y, f + 4);
  fp8x4_to_float(v.z, f + 8);
  fp8x4_to_float(v.w, f + 12);
}

/// Eight e4m3 values in 8 bytes as floats, unscaled.
__device__ __forceinline__ void unpack8_fp8(const uint2& v, float (&f)[8]) {
  fp8x4_to_float(v.x, f);
  fp8x4_to_float(v.y, f + 4);
}

}  // namespace rill::kernels
