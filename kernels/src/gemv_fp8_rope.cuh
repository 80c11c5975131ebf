// The persistent fp8 GEMV's RoPE epilogue (Fp8GemvParams::rope): launch_rope_kv's work on a
// decode step's q | k | v rows done by the GEMV that computes them.
//
// A CTA takes its 16-row tiles in pairs ("units"). Within a q or k head of D dims (D / 16 tiles)
// whose first R dims rotate (half = R / 2): unit k < half / 16 is tiles k and k + half / 16, i.e.
// dims [16k, 16k + 16) and their rotary partners [16k + half, ...); the tail tiles (dims R .. D)
// pair up in order. A v head's unit k is tiles k and k + D / 32. After the second tile of a unit,
// warp 0's lane (g, t) holds, for x rows 2t and 2t + 1, the sums of rows g and g + 8 of both
// tiles: for a rotary unit both halves of four rotary pairs, which it rotates and stores.
//
// Per element, exactly as a kStore GEMV followed by rope_kv: x = float(T(s)) + float(bias), the
// rotation in fp32 with the step's angle table (rope_table), one rounding per store; the q rows
// rotated by the sink position into q_sink; k (rotated) and v into the cache slot, quantized for
// an fp8 cache as rope_kv does.
#pragma once

#include <cstdint>

#include "fp8.cuh"
#include "gemv_fp8_tile.cuh"
#include "kv_cache.cuh"
#include "rope_math.cuh"
#include "vec.cuh"

namespace rill::kernels::fp8_gemv {

/// RopeKvParams as the kernel takes it (q | k | v rows = y, [M][stride]).
template <typename T>
struct RopeArgs {
  T* qkv;
  int stride;                // elements per qkv row (N)
  const T* bias;             // [N] or null
  T* q_sink;                 // [M][num_heads * head_dim] or null
  const float* table;        // [M][4][half]: cos, sin of the position; of the sink position
  const int32_t* cache_slot; // [M] or null
  void* cache;               // this layer's cache or null
  KvCacheLayout layout;
  int num_heads, num_kv_heads, head_dim, half;
};

/// The tiles (0-based, 16 rows each) of unit u: {first, second}.
template <typename T>
__device__ __forceinline__ int2 rope_unit_tiles(const RopeArgs<T>& a, int u) {
  const int th = a.head_dim / kRows, per = th / 2, hr = a.half / kRows;
  const int head = u / per, k = u - head * per, base = head * th;
  if (head < a.num_heads + a.num_kv_heads) {
    if (k < hr) return make_int2(base + k, base + k + hr);
    const int j = k - hr;
    return make_int2(base + 2 * hr + 2 * j, base + 2 * hr + 2 * j + 1);
  }
  return make_int2(base + k, base + k + per);
}

/// Floats a lane of warp 0 stages in shared memory for its unit's epilogue: the cache slots of x
/// rows 2t and 2t + 1, then for each of its four sums (rope_store_unit's i) the cos and sin of the
/// position and of the sink position.
constexpr int kRopeStageFloats = 18;

/// Warp 0, lane (g, t), after unit u's first tile: cp.async copies of what rope_store_unit reads
/// of global memory into `st` (this lane's kRopeStageFloats), uncommitted: they join the weight
/// ring's next group, so the unit's second tile streams on while they land.
template <typename T>
__device__ __forceinline__ void rope_stage_unit(const RopeArgs<T>& a, int u, float* st, int M,
                                                int g, int t) {
  const int th = a.head_dim / kRows, per = th / 2, hr = a.half / kRows;
  const int head = u / per, k = u - head * per;
  const bool is_q = head < a.num_heads, rotary = head < a.num_heads + a.num_kv_heads && k < hr;
  const int d0 = (rope_unit_tiles(a, u).x - head * th) * kRows;
  for (int j = 0; j < 2; ++j)
    if (2 * t + j < M && a.cache_slot)
      cp_async4(attn::smem_addr(st + j), reinterpret_cast<const float*>(a.cache_slot + 2 * t + j));
  if (!rotary) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = 2 * t + (i & 1), da = d0 + g + 8 * (i >> 1);
    if (m >= M) continue;
    const float* ang = a.table + static_cast<int64_t>(m) * 4 * a.half + da;
    cp_async4(attn::smem_addr(st + 2 + 4 * i), ang);
    cp_async4(attn::smem_addr(st + 3 + 4 * i), ang + a.half);
    if (is_q && a.q_sink) {
      cp_async4(attn::smem_addr(st + 4 + 4 * i), ang + 2 * a.half);
      cp_async4(attn::smem_addr(st + 5 + 4 * i), ang + 3 * a.half);
    }
  }
}

/// One element into the cache at element offset `at`: the T value, or it quantized (fp8 cache).
template <typename T>
__device__ __forceinline__ void rope_store_cache(const RopeArgs<T>& a, int64_t at, float f,
                                                 float scale) {
  if (a.layout.cache_dtype == KvDType::kFp8E4M3)
    static_cast<uint8_t*>(a.cache)[at] = quantize_fp8(to_float<T>(from_float<T>(f)), scale);
  else
    static_cast<T*>(a.cache)[at] = from_float<T>(f);
}

/// Warp 0, lane (g, t), one x tile (M <= 8): s0 / s1 are the scaled sums of unit u's first and
/// second tile (i: x row 2t + (i & 1), tile row g + 8 (i >> 1)); st: what rope_stage_unit
/// copied (landed). Stores the unit's q | k | v values, q_sink and the cache entries.
template <typename T>
__device__ __forceinline__ void rope_store_unit(const RopeArgs<T>& a, int u, const float (&s0)[4],
                                                const float (&s1)[4], const float* st, int M, int g,
                                                int t) {
  const int th = a.head_dim / kRows, per = th / 2, hr = a.half / kRows;
  const int head = u / per, k = u - head * per;
  const int qk_heads = a.num_heads + a.num_kv_heads;
  const bool is_q = head < a.num_heads, is_v = head >= qk_heads, rotary = !is_v && k < hr;
  const int2 tiles = rope_unit_tiles(a, u);
  const int d0 = (tiles.x - head * th) * kRows, d1 = (tiles.y - head * th) * kRows;  // dims
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = 2 * t + (i & 1), r = g + 8 * (i >> 1);
    if (m >= M) continue;
    const int da = d0 + r, db = d1 + r;  // this lane's dims in the two tiles
    const int col = head * a.head_dim;
    T* row = a.qkv + static_cast<int64_t>(m) * a.stride + col;
    float xa = to_float<T>(from_float<T>(s0[i])), xb = to_float<T>(from_float<T>(s1[i]));
    if (a.bias) {
      xa += to_float<T>(a.bias[col + da]);
      xb += to_float<T>(a.bias[col + db]);
    }
    const int32_t slot = a.cache_slot ? __float_as_int(st[i & 1]) : -1;
    const bool store = a.cache && kv_cache_slot_valid(a.layout, slot);
    const int kv_head = head - a.num_heads - (is_v ? a.num_kv_heads : 0);
    const int64_t kc = store && !is_q ? kv_cache_k_offset(a.layout, slot, kv_head) +
                                            (is_v ? kv_cache_v_offset(a.layout) : 0)
                                      : 0;
    const float cache_scale = is_v ? a.layout.v_scale : a.layout.k_scale;
    T* sink = is_q && a.q_sink
                  ? a.q_sink + static_cast<int64_t>(m) * a.num_heads * a.head_dim + col
                  : nullptr;
    float ya = xa, yb = xb;
    if (rotary) {
      const float* ang = st + 2 + 4 * i;  // cos, sin; the sink's cos, sin
      if (sink) {
        sink[da] = from_float<T>(rope_first(xa, xb, ang[2], ang[3]));
        sink[db] = from_float<T>(rope_second(xa, xb, ang[2], ang[3]));
      }
      ya = rope_first(xa, xb, ang[0], ang[1]);
      yb = rope_second(xa, xb, ang[0], ang[1]);
    } else if (sink) {
      sink[da] = from_float<T>(xa);
      sink[db] = from_float<T>(xb);
    }
    row[da] = from_float<T>(ya);
    row[db] = from_float<T>(yb);
    if (store && !is_q) {
      rope_store_cache<T>(a, kc + da, ya, cache_scale);
      rope_store_cache<T>(a, kc + db, yb, cache_scale);
    }
  }
}

}  // namespace rill::kernels::fp8_gemv
