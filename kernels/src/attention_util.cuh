// Device helpers shared by the attention kernels: ring arithmetic, paged-cache addressing, a
// base-2 exponential and 16-byte vector loads / conversions.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <string>

#include "dispatch.cuh"
#include "fp8.cuh"

namespace rill::kernels::attn {

/// Offset of rel index `rel` in a ring of `ring` slots: ((rel mod ring) + ring) % ring without the
/// int32 overflow of the literal formula when ring = INT32_MAX (a linear cache).
__device__ __forceinline__ int ring_offset(int rel, int ring) {
  int r = rel % ring;
  if (r < 0) r += ring;
  return r;
}

/// One sequence's rows of one kv head in one layer's paged cache
/// ([num_blocks][2][num_kv_heads][block_size][head_dim]); block_size is a power of two.
template <typename T>
struct PagedKv {
  const T* cache;  // this layer, already offset to the kv head: + g * block_size * head_dim
  const int32_t* block_table;  // this sequence's row
  int64_t block_stride;        // elements from one block to the next
  int64_t kv_stride;           // elements from a block's K to its V
  int block_shift;             // log2(block_size)
  int head_dim;

  /// Physical slot (block * block_size + offset) of logical cache slot `slot`.
  __device__ __forceinline__ int phys_slot(int slot) const {
    const int mask = (1 << block_shift) - 1;
    return (__ldg(block_table + (slot >> block_shift)) << block_shift) | (slot & mask);
  }
  /// K row of a physical slot; the V row is kv_stride elements further.
  __device__ __forceinline__ const T* k_row_phys(int phys) const {
    const int mask = (1 << block_shift) - 1;
    return cache + static_cast<int64_t>(phys >> block_shift) * block_stride +
           static_cast<int64_t>(phys & mask) * head_dim;
  }
  /// K row of logical cache slot `slot`.
  __device__ __forceinline__ const T* k_row(int slot) const { return k_row_phys(phys_slot(slot)); }
};

/// 2^x (MUFU.EX2); ex2(-inf) = 0. Logits are pre-scaled by log2(e), so this is exp.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/// 16-byte streaming load of data that is read once (KV rows): read-only path, no L1 allocation.
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

/// The two 16-bit elements of a 32-bit word as floats (low half first).
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w);
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t w) {
  __half2 h;
  static_assert(sizeof(h) == sizeof(w));
  memcpy(&h, &w, sizeof(w));
  return __half22float2(h);
}
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t w) {
  // bf16 -> fp32 is exact: the bf16 bits are the high half of the float.
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

/// Two floats rounded to a packed pair of T (first in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, sizeof(w));
  return w;
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, sizeof(w));
  return w;
}

/// Eight elements of T in a 16-byte vector as floats.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const float2 a = unpack2<T>(v.x), b = unpack2<T>(v.y), c = unpack2<T>(v.z), d = unpack2<T>(v.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

/// log2 of a power of two (host).
inline int log2_pow2(int x) {
  int s = 0;
  while ((1 << s) < x) ++s;
  return s;
}
inline bool is_pow2(int x) {
  return x > 0 && (x & (x - 1)) == 0;
}
inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

/// The checks both attention launchers make ("" when the arguments are usable, else why not):
/// sequence and head counts, whole GQA groups, a cache layout matching the heads, a power-of-two
/// block size and a usable cache element type.
inline std::string shape_problem(int num_seqs, int num_heads, int num_kv_heads, int head_dim,
                                 const KvCacheLayout& l) {
  if (num_seqs < 0 || num_seqs > 65535) return "num_seqs=" + std::to_string(num_seqs);
  if (num_heads <= 0 || num_heads > 65535 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0)
    return "num_heads=" + std::to_string(num_heads) +
           " is not a multiple of num_kv_heads=" + std::to_string(num_kv_heads);
  if (l.num_kv_heads != num_kv_heads || l.head_dim != head_dim)
    return "cache layout does not match the heads";
  if (!is_pow2(l.block_size))
    return "block_size=" + std::to_string(l.block_size) + " is not a power of two";
  return kv_dtype_problem(l);
}

}  // namespace rill::kernels::attn
