// 16-byte vector access for the elementwise kernels: 8 elements of a 16-bit dtype or 4 floats
// per load/store, converted to/from fp32 in registers. Callers check alignment at run time
// (is_aligned16) and fall back to scalar access when a size or pointer is not aligned.
#pragma once

#include <cstdint>

#include "dispatch.cuh"

namespace rill::kernels {

/// Elements of a 16-bit dtype per 16-byte vector.
constexpr int kVec = 8;

/// True when p is null or 16-byte aligned (null: an optional operand that is not used).
inline bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/// f[0..8) = float(p[0..8)); p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&f)[kVec]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
  for (int i = 0; i < kVec; ++i) f[i] = to_float<T>(h[i]);
}

/// f[0..8) += float(p[0..8)); p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void add8(const T* p, float (&f)[kVec]) {
  float g[kVec];
  load8(p, g);
#pragma unroll
  for (int i = 0; i < kVec; ++i) f[i] += g[i];
}

/// p[0..8) = T(f[0..8)) (round to nearest); p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void store8(T* p, const float (&f)[kVec]) {
  uint4 u;
  T* h = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int i = 0; i < kVec; ++i) h[i] = from_float<T>(f[i]);
  *reinterpret_cast<uint4*>(p) = u;
}

/// fp32 rows: 8 floats as two 16-byte accesses; p must be 16-byte aligned.
__device__ __forceinline__ void load8(const float* p, float (&f)[kVec]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

__device__ __forceinline__ void store8(float* p, const float (&f)[kVec]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(f[0], f[1], f[2], f[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(f[4], f[5], f[6], f[7]);
}

}  // namespace rill::kernels
