// RoPE fused with the QKV bias add, the sink-position copy of q and the K/V write to the cache.
//
// grid (num_tokens, unit blocks): a CTA first tabulates cos/sin of its token's angles in shared
// memory (angle reduced modulo 2 pi in double precision: positions of endless streams reach the
// millions and a float product would lose the angle), then its threads take work units:
//   q and k heads: a "pair" unit rotates dims [i, i + S) with their partners [i + r/2, i + r/2 +
//   S),
//                  a "tail" unit copies S dims of [rotary_dim, head_dim) (bias only);
//   v heads:       a unit copies S dims (bias only);
// with S = 8 (16-byte accesses) or 1 (scalar fallback). All math in fp32, one rounding per store,
// so the cache receives exactly the values written back to the qkv row (an fp8 cache: those
// values quantized, see fp8.cuh).
#include <algorithm>
#include <string>

#include "fp8.cuh"
#include "kv_cache.cuh"
#include "launch.cuh"
#include "rill/kernels/rope.h"
#include "rope_math.cuh"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;

// Loads S elements at p (+ bias at b, when given) into f.
template <typename T, int S>
__device__ __forceinline__ void load_s(const T* p, const T* b, float (&f)[kVec]) {
  if constexpr (S == kVec) {
    load8(p, f);
    if (b) add8(b, f);
  } else {
    f[0] = b ? to_float<T>(*p) + to_float<T>(*b) : to_float<T>(*p);  // as the vector path
  }
}

template <typename T, int S>
__device__ __forceinline__ void store_s(T* p, const float (&f)[kVec]) {
  if constexpr (S == kVec) {
    store8(p, f);
  } else {
    *p = from_float<T>(f[0]);
  }
}

// Stores S elements into a cache of element type C: the T values store_s writes, or for an fp8
// cache those T values quantized, e4m3(saturate(float(T(f)) / scale)).
template <typename T, typename C, int S>
__device__ __forceinline__ void store_kv(C* p, const float (&f)[kVec], float scale) {
  if constexpr (std::is_same_v<C, T>) {
    store_s<T, S>(p, f);
  } else if constexpr (S == kVec) {
    float r[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) r[e] = to_float<T>(from_float<T>(f[e]));
    uint2 u;
    u.x = quantize2_fp8(r[0], r[1], scale) | quantize2_fp8(r[2], r[3], scale) << 16;
    u.y = quantize2_fp8(r[4], r[5], scale) | quantize2_fp8(r[6], r[7], scale) << 16;
    *reinterpret_cast<uint2*>(p) = u;  // 8-byte aligned: multiples of 8 bytes past an aligned cache
  } else {
    *reinterpret_cast<uint8_t*>(p) = quantize_fp8(to_float<T>(from_float<T>(f[0])), scale);
  }
}

// Rotation of the pair (x1, x2) by the angles at table index i .. i + S.
template <int S>
__device__ __forceinline__ void rotate(const float (&x1)[kVec], const float (&x2)[kVec],
                                       const float* cos_t, const float* sin_t, float (&y1)[kVec],
                                       float (&y2)[kVec]) {
#pragma unroll
  for (int e = 0; e < S; ++e) {
    y1[e] = rope_first(x1[e], x2[e], cos_t[e], sin_t[e]);
    y2[e] = rope_second(x1[e], x2[e], cos_t[e], sin_t[e]);
  }
}

// C: the cache element type (T, or Fp8).
template <typename T, typename C, int S>
__global__ void __launch_bounds__(kThreads) rope_kv_kernel(RopeKvParams p) {
  // See launch.cuh. Positions (step metadata, uploaded before the step's kernels) and inv_freq
  // (weights) are no kernel's output: the angle table is built before pdl_wait(), overlapping
  // the previous kernel.
  // With p.table the angles are read from it after the wait (a kernel of this step wrote it).
  pdl_launch_dependents();
  __shared__ float angles[4][kMaxHeadDim / 2];  // cos, sin of the position; cos, sin of the sink's
  const int64_t t = blockIdx.x;
  const int head_dim = p.head_dim, half = p.rotary_dim / 2;
  const bool want_sink = p.q_sink != nullptr;
  if (!p.table)
    for (int i = threadIdx.x; i < half; i += kThreads) {
      angle_sincos(p.positions[t], p.inv_freq[i], &angles[1][i], &angles[0][i]);
      if (want_sink)
        angle_sincos(p.sink_positions[t], p.inv_freq[i], &angles[3][i], &angles[2][i]);
    }
  pdl_wait();  // before qkv (the GEMV's output) and any global write
  const float* ang = p.table ? p.table + t * 4 * half : nullptr;  // [4][half], angles' layout
  if (!p.table) __syncthreads();
  auto angle = [&](int which) { return ang ? ang + which * half : &angles[which][0]; };
  const float *cos_pos = angle(0), *sin_pos = angle(1), *cos_sink = angle(2),
              *sin_sink = angle(3);

  T* row = static_cast<T*>(p.qkv) + t * p.qkv_stride;  // [q heads | k heads | v heads] x head_dim
  const T* bias = static_cast<const T*>(p.qkv_bias);   // same layout, or null
  T* q_sink = want_sink ? static_cast<T*>(p.q_sink) + t * p.num_heads * head_dim : nullptr;
  const int32_t slot = p.cache_slot ? p.cache_slot[t] : -1;
  C* cache = kv_cache_slot_valid(p.layout, slot) && p.cache ? static_cast<C*>(p.cache) : nullptr;

  const int pair_units = half / S, tail_units = (head_dim - 2 * half) / S;
  const int qk_units = pair_units + tail_units, v_units = head_dim / S;
  const int qk_heads = p.num_heads + p.num_kv_heads;
  // v units only add the bias and store to the cache: without either they have nothing to do
  // (prefill rows, whose K/V the kv_write kernel stores after attention).
  const int total = qk_heads * qk_units + (bias || cache ? p.num_kv_heads * v_units : 0);
  for (int u = blockIdx.y * kThreads + threadIdx.x; u < total; u += gridDim.y * kThreads) {
    float x1[kVec], x2[kVec], y1[kVec], y2[kVec];
    if (u < qk_heads * qk_units) {
      const int head = u / qk_units, c = u - head * qk_units;
      const bool is_k = head >= p.num_heads;
      T* h = row + head * head_dim;
      const T* hb = bias ? bias + head * head_dim : nullptr;
      C* kc =
          is_k && cache ? cache + kv_cache_k_offset(p.layout, slot, head - p.num_heads) : nullptr;
      if (c < pair_units) {
        const int i = c * S;
        load_s<T, S>(h + i, hb ? hb + i : nullptr, x1);
        load_s<T, S>(h + i + half, hb ? hb + i + half : nullptr, x2);
        if (!is_k && q_sink) {
          rotate<S>(x1, x2, cos_sink + i, sin_sink + i, y1, y2);
          store_s<T, S>(q_sink + head * head_dim + i, y1);
          store_s<T, S>(q_sink + head * head_dim + i + half, y2);
        }
        rotate<S>(x1, x2, cos_pos + i, sin_pos + i, y1, y2);
        store_s<T, S>(h + i, y1);
        store_s<T, S>(h + i + half, y2);
        if (kc) {
          store_kv<T, C, S>(kc + i, y1, p.layout.k_scale);
          store_kv<T, C, S>(kc + i + half, y2, p.layout.k_scale);
        }
      } else {
        const int d = 2 * half + (c - pair_units) * S;
        load_s<T, S>(h + d, hb ? hb + d : nullptr, x1);
        if (hb) store_s<T, S>(h + d, x1);
        if (!is_k && q_sink) store_s<T, S>(q_sink + head * head_dim + d, x1);
        if (kc) store_kv<T, C, S>(kc + d, x1, p.layout.k_scale);
      }
    } else {
      const int v = u - qk_heads * qk_units;
      const int g = v / v_units, d = (v - g * v_units) * S;
      const int col = (qk_heads + g) * head_dim + d;
      load_s<T, S>(row + col, bias ? bias + col : nullptr, x1);
      if (bias) store_s<T, S>(row + col, x1);
      if (cache)
        store_kv<T, C, S>(
            cache + kv_cache_k_offset(p.layout, slot, g) + kv_cache_v_offset(p.layout) + d, x1,
            p.layout.v_scale);
    }
  }
}

// grid (num_tokens), kThreads: row t of the table, see RopeTableParams.
__global__ void __launch_bounds__(kThreads) rope_table_kernel(RopeTableParams p) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();
  const int half = p.rotary_dim / 2;
  const int64_t t = blockIdx.x;
  float* row = p.table + t * 4 * half;
  for (int i = threadIdx.x; i < half; i += kThreads) {
    angle_sincos(p.positions[t], p.inv_freq[i], &row[half + i], &row[i]);
    if (p.sink_positions)
      angle_sincos(p.sink_positions[t], p.inv_freq[i], &row[3 * half + i], &row[2 * half + i]);
  }
}

}  // namespace

cudaError_t launch_rope_table(const RopeTableParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0) return invalid_argument("rope_table: negative num_tokens");
  if (p.rotary_dim < 0 || p.rotary_dim % 2 || p.rotary_dim > kMaxHeadDim)
    return invalid_argument("rope_table: unsupported rotary_dim=" + std::to_string(p.rotary_dim));
  if (p.num_tokens == 0 || p.rotary_dim == 0) return cudaSuccess;
  if (!p.positions || !p.inv_freq || !p.table)
    return invalid_argument("rope_table: positions, inv_freq and table are required");
  launch_kernel(rope_table_kernel, dim3(p.num_tokens), dim3(kThreads), 0, stream, p);
  return launch_status();
}

cudaError_t launch_rope_kv(const RopeKvParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0) return invalid_argument("rope_kv: negative num_tokens");
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.num_heads <= 0 || p.num_kv_heads <= 0) return invalid_argument("rope_kv: bad head counts");
  if (p.head_dim <= 0 || p.head_dim % 2 || p.head_dim > kMaxHeadDim)
    return invalid_argument("rope_kv: unsupported head_dim=" + std::to_string(p.head_dim));
  if (p.rotary_dim < 0 || p.rotary_dim % 2 || p.rotary_dim > p.head_dim)
    return invalid_argument("rope_kv: unsupported rotary_dim=" + std::to_string(p.rotary_dim));
  if (p.qkv_stride < (p.num_heads + 2 * p.num_kv_heads) * p.head_dim)
    return invalid_argument("rope_kv: qkv_stride=" + std::to_string(p.qkv_stride) + " too small");
  if (!p.qkv || !p.positions || (p.rotary_dim > 0 && !p.inv_freq))
    return invalid_argument("rope_kv: qkv, positions and inv_freq are required");
  if (p.q_sink && !p.sink_positions)
    return invalid_argument("rope_kv: q_sink without sink_positions");
  const bool store = p.cache_slot && p.cache;
  if (store && (p.layout.num_kv_heads != p.num_kv_heads || p.layout.head_dim != p.head_dim ||
                p.layout.block_size <= 0 || p.layout.num_blocks < 0))
    return invalid_argument("rope_kv: cache layout disagrees with num_kv_heads/head_dim");
  if (const std::string why = kv_dtype_problem(p.layout); store && !why.empty())
    return invalid_argument("rope_kv: " + why);
  const bool vec = p.rotary_dim % (2 * kVec) == 0 && p.head_dim % kVec == 0 &&
                   p.qkv_stride % kVec == 0 && is_aligned16(p.qkv) && is_aligned16(p.qkv_bias) &&
                   is_aligned16(p.q_sink) && is_aligned16(p.cache);
  const int s = vec ? kVec : 1;
  const int units = (p.num_heads + p.num_kv_heads) * ((p.head_dim - p.rotary_dim / 2) / s) +
                    p.num_kv_heads * (p.head_dim / s);
  const dim3 grid(p.num_tokens, std::min((units + kThreads - 1) / kThreads, 65535));
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    return dispatch_kv_dtype<T>(store ? p.layout.cache_dtype : KvDType::kSame, [&]<typename C>() {
      if (vec) {
        launch_kernel(rope_kv_kernel<T, C, kVec>, dim3(grid), dim3(kThreads), 0, stream, p);
      } else {
        launch_kernel(rope_kv_kernel<T, C, 1>, dim3(grid), dim3(kThreads), 0, stream, p);
      }
      return launch_status();
    });
  });
}

}  // namespace rill::kernels
