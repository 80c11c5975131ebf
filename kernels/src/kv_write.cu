// K/V scatter into the paged cache: the k | v part of each qkv row to its slot, copied into a
// 16-bit cache or quantized into an fp8 one (fp8.cuh).
#include <string>

#include "fp8.cuh"
#include "kv_cache.cuh"
#include "launch.cuh"
#include "rill/kernels/elementwise.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kThreads = 128;

// Stores 8 (VEC) or 1 element(s) of src at dst: a copy for a 16-bit cache (C = T), the e4m3
// bytes of x / scale for an fp8 cache (8 bytes per vector).
template <typename T, typename C, bool VEC>
__device__ __forceinline__ void store_kv(C* dst, const T* src, float scale) {
  if constexpr (kIsFp8<C>) {
    if constexpr (VEC) {
      float f[kVec];
      load8(src, f);
      uint2 u;
      u.x = quantize2_fp8(f[0], f[1], scale) | quantize2_fp8(f[2], f[3], scale) << 16;
      u.y = quantize2_fp8(f[4], f[5], scale) | quantize2_fp8(f[6], f[7], scale) << 16;
      *reinterpret_cast<uint2*>(dst) = u;
    } else {
      *reinterpret_cast<uint8_t*>(dst) = quantize_fp8(to_float<T>(*src), scale);
    }
  } else {
    if constexpr (VEC) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
      *dst = *src;
    }
  }
}

// grid (num_tokens). VEC: 8 elements per step (head_dim, qkv_stride multiples of 8, aligned
// pointers). C: the cache element type (T, or Fp8 with the K or V scale).
template <typename T, typename C, bool VEC>
__global__ void __launch_bounds__(kThreads)
    kv_write_kernel(const T* __restrict__ qkv,               // [num_tokens, qkv_stride]
                    const int32_t* __restrict__ cache_slot,  // [num_tokens]
                    C* __restrict__ cache,                   // this layer
                    KvCacheLayout layout, int num_heads, int qkv_stride) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  const int64_t t = blockIdx.x;
  const int32_t slot = cache_slot[t];
  if (!kv_cache_slot_valid(layout, slot)) return;
  const int head_dim = layout.head_dim;
  const int kv_width = layout.num_kv_heads * head_dim;  // elements of k (and of v) per row
  const T* src =
      qkv + t * qkv_stride + static_cast<int64_t>(num_heads) * head_dim;  // k heads | v heads
  constexpr int kStep = VEC ? kVec : 1;
  for (int e = threadIdx.x * kStep; e < 2 * kv_width; e += kThreads * kStep) {
    const int is_v = e >= kv_width;
    const int rem = e - is_v * kv_width;
    const int head = rem / head_dim, d = rem - head * head_dim;
    C* dst = cache + kv_cache_k_offset(layout, slot, head) + is_v * kv_cache_v_offset(layout) + d;
    store_kv<T, C, VEC>(dst, src + e, is_v ? layout.v_scale : layout.k_scale);
  }
}

}  // namespace

cudaError_t launch_kv_write(const KvWriteParams& p, cudaStream_t stream) {
  if (p.dtype != DType::kF16 && p.dtype != DType::kBF16)
    return invalid_argument("kv_write: unsupported dtype");
  if (p.num_tokens < 0) return invalid_argument("kv_write: negative num_tokens");
  if (p.num_tokens == 0) return cudaSuccess;
  const KvCacheLayout& l = p.layout;
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || l.block_size <= 0 ||
      l.num_blocks < 0)
    return invalid_argument("kv_write: bad shape");
  if (l.num_kv_heads != p.num_kv_heads || l.head_dim != p.head_dim)
    return invalid_argument("kv_write: layout disagrees with num_kv_heads/head_dim");
  if (const std::string why = kv_dtype_problem(l); !why.empty())
    return invalid_argument("kv_write: " + why);
  if (p.qkv_stride < (p.num_heads + 2 * p.num_kv_heads) * p.head_dim)
    return invalid_argument("kv_write: qkv_stride=" + std::to_string(p.qkv_stride) + " too small");
  if (!p.qkv || !p.cache_slot || !p.cache) return invalid_argument("kv_write: null pointer");
  const bool vec = p.head_dim % kVec == 0 && p.qkv_stride % kVec == 0 && is_aligned16(p.qkv) &&
                   is_aligned16(p.cache);
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    return dispatch_kv_dtype<T>(l.cache_dtype, [&]<typename C>() {
      const auto* qkv = static_cast<const T*>(p.qkv);
      auto* cache = static_cast<C*>(p.cache);
      if (vec) {
        launch_kernel(kv_write_kernel<T, C, true>, dim3(p.num_tokens), dim3(kThreads), 0, stream,
                      qkv, p.cache_slot, cache, l, p.num_heads, p.qkv_stride);
      } else {
        launch_kernel(kv_write_kernel<T, C, false>, dim3(p.num_tokens), dim3(kThreads), 0, stream,
                      qkv, p.cache_slot, cache, l, p.num_heads, p.qkv_stride);
      }
      return launch_status();
    });
  });
}

}  // namespace rill::kernels
