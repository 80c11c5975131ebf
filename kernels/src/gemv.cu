// Decode GEMV, y[m, n] = sum_k x[m, k] w[n, k] for M <= 8, at the memory bandwidth limit.
//
// The weight matrix is read exactly once, with 16-byte streaming loads; the products run on the
// tensor cores (mma.sync m16n8k16, fp32 accumulation) so that M = 8 costs no more than M = 1:
// the mma's n = 8 columns are the (up to) 8 rows of x, its 16 rows are 16 rows of w.
//
// Tile: a CTA of W warps owns 16 rows of w and splits K among its warps. In one "step" a warp
// covers 32 values of k: lane (g = lane / 4, t = lane % 4) loads 8 consecutive k (chunk 4s + t) of
// w rows g and g + 8 and of x row g. A dot product does not care in which order its k arrive,
// so each 16-byte chunk is fed to two mmas as it lies in registers: the mma's k slots
// {2t, 2t+1, 2t+8, 2t+9} take the chunk's elements {0, 1, 2, 3} (first mma) and {4, 5, 6, 7}
// (second), identically for the A (w) and B (x) fragments, which is all the product needs.
// The accumulator fragment then holds y[2t + {0, 1}][row g and g + 8]; the W warps' partial sums
// are added in a fixed order through shared memory. With the kSiluMul epilogue, rows g and g + 8
// of a tile are a gate row and its up row, so the lane holding both writes silu(gate) * up.
// With kRopeKv, rows g and g + 8 of a rotary tile are a dim of a q or k head and its rotation
// partner, so the lane holding both rotates them and writes them where the RoPE kernel would.
#include <algorithm>
#include <string>
#include <type_traits>

#include "attention_mma.cuh"
#include "dispatch.cuh"
#include "fp8.cuh"
#include "kv_cache.cuh"
#include "launch.cuh"
#include "rill/kernels/gemv.h"
#include "rope_math.cuh"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kRows = 16;  // rows of w per CTA (the mma's M)
constexpr int kMaxM = 8;   // the mma's N

// CTA shapes: warps splitting K, steps per warp per iteration, and where the weights wait
// between load and use. stages == 0: in registers, double-buffered (gemv_kernel); stages > 0: in
// a ring of that many iterations in shared memory, filled by cp.async (gemv_ring_kernel), which
// keeps stages - 1 iterations in flight without spending registers on them, and lets a CTA
// launched early under PDL stream that much of its tile while its predecessor finishes. Configs
// differ in speed only: the sums depend on `warps` alone (each warp adds its steps in order,
// then the warps' partials are added in warp order).
struct Config {
  int warps, unroll, stages;
  bool silu;  // kSiluMul and kRopeKv instances exist
};
constexpr Config kConfigs[] = {{16, 2, 0, true}, {32, 2, 0, true},  {8, 4, 0, false},
                               {4, 4, 0, false}, {16, 4, 0, false}, {8, 2, 0, false},
                               {16, 1, 6, true}, {8, 1, 8, true},   {16, 1, 4, true},
                               {16, 1, 5, true}, {32, 1, 3, true},  {32, 1, 2, true}};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
constexpr int kDeepConfig = 9;  // 16 warps x 1, cp.async ring of 5: GemvParams::deep_prologue
constexpr int kDeepWideConfig = 10;  // 32 warps x 1, ring of 3: the same for 32 warps x 2
static_assert(kConfigs[kDeepConfig].warps == kConfigs[0].warps && kConfigs[kDeepConfig].silu &&
              kConfigs[kDeepConfig].stages > 0);
static_assert(kConfigs[kDeepWideConfig].warps == kConfigs[1].warps &&
              kConfigs[kDeepWideConfig].silu && kConfigs[kDeepWideConfig].stages > 0);

// Streaming load of weights, read once: keep them out of L1 so x stays there. The L2::256B hint
// makes each miss fetch 256 bytes (a warp covers 64 contiguous bytes of each of its 16 rows per
// step, and its neighbours the next ones): Llama-2-7B batch 1 went from 5.49 to 5.25 ms.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// c += A (16 x 16, row) * B (16 x 8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// Loads the w chunks of the U steps starting at step s0 (zeros past the end of K).
template <int W, int U>
__device__ __forceinline__ void load_w(const uint4* w_lo, const uint4* w_hi, int s0, int t,
                                       int chunks, uint4 (&lo)[U], uint4 (&hi)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = (s0 + u * W) * 4 + t;
    lo[u] = hi[u] = make_uint4(0, 0, 0, 0);
    if (c < chunks) {
      lo[u] = load_stream(w_lo + c);
      hi[u] = load_stream(w_hi + c);
    }
  }
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));  // the activation kernel's formula
}

/// The rows of w a CTA owns: lane group g takes rows lo + g and hi + g. Plain tiles are rows
/// 16b .. 16b + 15 (hi = lo + 8). kRopeKv: tile j < rotary_dim / 16 of a q or k head pairs the
/// head's dims 8j .. 8j + 7 with their rotation partners rotary_dim / 2 further (the same rows
/// as the plain tile, paired otherwise); the head's other tiles are plain.
struct TileRows {
  int lo, hi;
  bool rotary;
};

template <GemvEpilogue EPI>
__device__ __forceinline__ TileRows tile_rows(const GemvParams& p) {
  const int b = blockIdx.x;
  if constexpr (EPI == GemvEpilogue::kRopeKv) {
    const RopeKvParams& r = p.rope;
    const int per_head = r.head_dim / kRows, head = b / per_head, j = b - head * per_head;
    if (head < r.num_heads + r.num_kv_heads && j < r.rotary_dim / kRows) {
      const int lo = head * r.head_dim + 8 * j;
      return {lo, lo + r.rotary_dim / 2, true};
    }
  }
  return {b * kRows, b * kRows + 8, false};
}

/// kRopeKv: what warp 0's epilogue needs besides the sums, gathered before the PDL wait (the
/// step's metadata and the weights are no kernel's output) into shared memory, [kRopeWords][32]
/// words by lane (g, t), j = 0, 1 for token m = 2t + j:
///   [4j + 0, 4j + 1]: cos, sin of the lane's rotary dim at positions[m] (rotary tiles);
///   [4j + 2, 4j + 3]: the same at sink_positions[m] (with q_sink);
///   [8 + j]: cache_slot[m] (an int; -1 when there is none);
///   [10 + e]: the QKV bias of row (lo, hi)[e] + g (0 without a bias).
constexpr int kRopeWords = 12;

template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void rope_prologue(const GemvParams& p, TileRows tr, float* tab) {
  if constexpr (EPI == GemvEpilogue::kRopeKv) {
    const int lane = threadIdx.x;
    if (lane >= 32) return;
    const RopeKvParams& r = p.rope;
    const int g = lane >> 2, t = lane & 3;
    const T* bias = static_cast<const T*>(r.qkv_bias);
    tab[10 * 32 + lane] = bias ? to_float<T>(bias[tr.lo + g]) : 0.0f;
    tab[11 * 32 + lane] = bias ? to_float<T>(bias[tr.hi + g]) : 0.0f;
    const float inv_freq = tr.rotary ? r.inv_freq[(tr.lo + g) % r.head_dim] : 0.0f;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 2 * t + j;
      if (m >= p.M) continue;
      reinterpret_cast<int32_t*>(tab)[(8 + j) * 32 + lane] = r.cache_slot ? r.cache_slot[m] : -1;
      if (!tr.rotary) continue;
      angle_sincos(r.positions[m], inv_freq, &tab[(4 * j + 1) * 32 + lane],
                   &tab[4 * j * 32 + lane]);
      if (r.q_sink)
        angle_sincos(r.sink_positions[m], inv_freq, &tab[(4 * j + 3) * 32 + lane],
                     &tab[(4 * j + 2) * 32 + lane]);
    }
  }
}

/// Stores v into element `at` of the cache as rope_kv does: the dtype value, or that value
/// quantized to e4m3 with `scale`.
template <typename T>
__device__ __forceinline__ void store_cache(void* cache, const KvCacheLayout& l, int64_t at,
                                            float v, float scale) {
  if (l.cache_dtype == KvDType::kFp8E4M3) {
    static_cast<uint8_t*>(cache)[at] = quantize_fp8(to_float<T>(from_float<T>(v)), scale);
  } else {
    static_cast<T*>(cache)[at] = from_float<T>(v);
  }
}

/// kRopeKv for lane (g, t) of warp 0: what rope_kv_kernel does with this lane's two rows of
/// tokens 2t and 2t + 1 (bias, rotation, q_sink, cache), on the sums rounded to the dtype, with
/// rope_prologue's table cs.
template <typename T>
__device__ __forceinline__ void rope_epilogue(const float (&s)[4], const GemvParams& p, TileRows tr,
                                              const float* cs, int g, int t) {
  const RopeKvParams& r = p.rope;
  const bool bias = r.qkv_bias != nullptr;
  const int hd = r.head_dim, half = r.rotary_dim / 2, lane = threadIdx.x;
  const int n[2] = {tr.lo + g, tr.hi + g};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int m = 2 * t + j;
    if (m >= p.M) continue;
    T* row = static_cast<T*>(p.y) + static_cast<int64_t>(m) * p.N;
    T* q_sink =
        r.q_sink ? static_cast<T*>(r.q_sink) + static_cast<int64_t>(m) * r.num_heads * hd : nullptr;
    const int32_t slot = reinterpret_cast<const int32_t*>(cs)[(8 + j) * 32 + lane];
    const bool store = r.cache && kv_cache_slot_valid(r.layout, slot);
    float x[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      x[e] = to_float<T>(from_float<T>(s[j + 2 * e]));
      if (bias) x[e] += cs[(10 + e) * 32 + lane];
    }
    if (tr.rotary) {
      const int head = n[0] / hd, dim = n[0] - head * hd;
      float y1, y2;
      rope_rotate(x[0], x[1], cs[4 * j * 32 + lane], cs[(4 * j + 1) * 32 + lane], y1, y2);
      row[n[0]] = from_float<T>(y1);
      row[n[1]] = from_float<T>(y2);
      if (head < r.num_heads) {
        if (q_sink) {
          rope_rotate(x[0], x[1], cs[(4 * j + 2) * 32 + lane], cs[(4 * j + 3) * 32 + lane], y1, y2);
          q_sink[head * hd + dim] = from_float<T>(y1);
          q_sink[head * hd + dim + half] = from_float<T>(y2);
        }
      } else if (store) {
        const int64_t k = kv_cache_k_offset(r.layout, slot, head - r.num_heads);
        store_cache<T>(r.cache, r.layout, k + dim, y1, r.layout.k_scale);
        store_cache<T>(r.cache, r.layout, k + dim + half, y2, r.layout.k_scale);
      }
      continue;
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {  // unrotated dims and v: bias only
      const int head = n[e] / hd, d = n[e] - head * hd;
      row[n[e]] = from_float<T>(x[e]);
      if (head < r.num_heads) {
        if (q_sink) q_sink[head * hd + d] = from_float<T>(x[e]);
      } else if (!store) {
      } else if (head < r.num_heads + r.num_kv_heads) {
        store_cache<T>(r.cache, r.layout, kv_cache_k_offset(r.layout, slot, head - r.num_heads) + d,
                       x[e], r.layout.k_scale);
      } else {
        const int g2 = head - r.num_heads - r.num_kv_heads;
        store_cache<T>(r.cache, r.layout,
                       kv_cache_k_offset(r.layout, slot, g2) + kv_cache_v_offset(r.layout) + d,
                       x[e], r.layout.v_scale);
      }
    }
  }
}

/// Warp 0, lane (g, t): s[i] is the sum of x row m = 2t + (i & 1) and w row tr.lo + g (tr.hi + g
/// for i >= 2). Writes y (kStore), silu(gate) * up (kSiluMul) or the RoPE kernel's outputs
/// (kRopeKv, with the angle table cs), see gemv.h.
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void epilogue(const float (&s)[4], const GemvParams& p, TileRows tr,
                                         const float* cs, int g, int t) {
  const int M = p.M, N = p.N;
  void* __restrict__ y = p.y;
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  const bool y_f32 = p.y_f32;
  const int n0 = tr.lo;  // kSiluMul: plain tiles
  if constexpr (EPI == GemvEpilogue::kRopeKv) {
    rope_epilogue<T>(s, p, tr, cs, g, t);
  } else if constexpr (EPI == GemvEpilogue::kStore) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * t + (i & 1), n = (i >= 2 ? tr.hi : tr.lo) + g;
      if (m < M && n < N) {
        const int64_t at = static_cast<int64_t>(m) * N + n;
        if (y_f32) {
          static_cast<float*>(y)[at] = s[i];
        } else {
          static_cast<T*>(y)[at] = from_float<T>(s[i]);
        }
      }
    }
  } else {  // rows n0 + g (gate) and n0 + 8 + g (up) -> output n0 / 2 + g
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 2 * t + j;
      if (m < M) {
        float gate = to_float<T>(from_float<T>(s[j])), up = to_float<T>(from_float<T>(s[j + 2]));
        if (bias) gate += to_float<T>(bias[n0 + g]), up += to_float<T>(bias[n0 + 8 + g]);
        static_cast<T*>(y)[static_cast<int64_t>(m) * (N / 2) + n0 / 2 + g] =
            from_float<T>(silu(gate) * up);
      }
    }
  }
}

/// What lane group g of the CTA owning rows tr reads: w rows tr.lo + g and tr.hi + g and x row g.
/// Rows past N are clamped (loaded, never stored) so that no load needs a row predicate; x rows
/// past M are zero columns of B (x_live false).
template <typename T>
struct LaneRows {
  const uint4 *w_lo, *w_hi, *x_row;
  bool x_live;
  __device__ __forceinline__ LaneRows(const GemvParams& p, TileRows tr, int g)
      : w_lo(row(p.w, min(tr.lo + g, p.N - 1), p.K)),
        w_hi(row(p.w, min(tr.hi + g, p.N - 1), p.K)),
        x_row(row(p.x, min(g, p.M - 1), p.K)),
        x_live(g < p.M) {}
  static __device__ __forceinline__ const uint4* row(const void* base, int r, int K) {
    return reinterpret_cast<const uint4*>(static_cast<const T*>(base) +
                                          static_cast<int64_t>(r) * K);
  }
};

/// The W warps' accumulators added in warp order through `partial` ([W][4][32] floats of shared
/// memory), then the epilogue by warp 0. Every thread of the CTA calls it.
template <typename T, int W, GemvEpilogue EPI>
__device__ __forceinline__ void sum_warps_and_store(const float (&acc)[4], float (*partial)[4][32],
                                                    const GemvParams& p, TileRows tr,
                                                    const float* cs) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float sum[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[i] = partial[0][i][lane];
#pragma unroll
    for (int v = 1; v < W; ++v) sum[i] += partial[v][i][lane];
  }
  epilogue<T, EPI>(sum, p, tr, cs, lane >> 2, lane & 3);
}

// grid (ceil(N / 16)), block W * 32, dynamic shared memory kRopeBytes for kRopeKv. K % 8 == 0,
// x and w 16-byte aligned.
// Weights are double-buffered in registers: the loads of the next U steps are issued before the
// mmas of the current ones. The first loads are issued before pdl_wait(), overlapping the
// previous kernel's tail: weights never depend on it.
template <typename T, int W, int U, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32) gemv_kernel(const GemvParams p) {
  __shared__ float partial[W][4][32];
  extern __shared__ float rope_cs[];  // kRopeKv: rope_prologue's table
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const TileRows tr = tile_rows<EPI>(p);
  const LaneRows<T> r(p, tr, g);
  const uint4 *w_lo = r.w_lo, *w_hi = r.w_hi, *x_row = r.x_row;
  const bool x_live = r.x_live;
  const int chunks = p.K / kVec;
  const int steps = (chunks + 3) / 4;
  constexpr int kStride = W * U;  // steps per loop iteration of the CTA

  pdl_launch_dependents();
  uint4 lo[U], hi[U];
  load_w<W, U>(w_lo, w_hi, warp, t, chunks, lo, hi);
  rope_prologue<T, EPI>(p, tr, rope_cs);
  pdl_wait();

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s0 = warp; s0 < steps; s0 += kStride) {
    uint4 xv[U], next_lo[U], next_hi[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = (s0 + u * W) * 4 + t;
      xv[u] = make_uint4(0, 0, 0, 0);
      if (c < chunks && x_live) xv[u] = __ldg(x_row + c);
    }
    load_w<W, U>(w_lo, w_hi, s0 + kStride, t, chunks, next_lo, next_hi);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      mma_16816<T>(acc, lo[u].x, hi[u].x, lo[u].y, hi[u].y, xv[u].x, xv[u].y);
      mma_16816<T>(acc, lo[u].z, hi[u].z, lo[u].w, hi[u].w, xv[u].z, xv[u].w);
      lo[u] = next_lo[u];
      hi[u] = next_hi[u];
    }
  }

  sum_warps_and_store<T, W, EPI>(acc, partial, p, tr, rope_cs);
}

// 16-byte copy of streamed weights into shared memory, L2::256B as load_stream; !valid reads
// nothing and zero-fills.
__device__ __forceinline__ void cp_async_stream(uint32_t dst, const uint4* src, bool valid) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Issues this thread's copies of the U steps starting at s0 into the ring slot at `slot`
// (this thread's first 16 bytes of it); zeros past the end of K.
template <int W, int U>
__device__ __forceinline__ void copy_w(uint32_t slot, const uint4* w_lo, const uint4* w_hi, int s0,
                                       int t, int chunks) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = (s0 + u * W) * 4 + t;
    const bool valid = c < chunks;
    cp_async_stream(slot + (2 * u) * W * 32 * 16, valid ? w_lo + c : w_lo, valid);
    cp_async_stream(slot + (2 * u + 1) * W * 32 * 16, valid ? w_hi + c : w_hi, valid);
  }
}

template <int W, int U, int S>
constexpr int ring_bytes() {
  return S * U * 2 * W * 32 * 16;
}

// gemv_kernel with the weights staged through a ring of S iterations in shared memory
// ([S][U][lo, hi][thread] 16-byte chunks): each thread copies its own chunks and reads back only
// those, so cp.async.wait_group orders it and no barrier is needed. S - 1 iterations are issued
// before pdl_wait(). Same steps in the same order as gemv_kernel with W warps: the same sums.
//
// Two CTAs per SM (launch bounds): left to itself the compiler takes 76 registers, which allows
// one, and Llama-2-7B batch 1 ran 0.1 ms slower (5.11 against 4.99 ms on the H100).
template <typename T, int W, int U, int S, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32, W <= 16 ? 2 : 1) gemv_ring_kernel(const GemvParams p) {
  static_assert(ring_bytes<W, U, S>() >= W * 4 * 32 * sizeof(float), "ring holds the partials");
  extern __shared__ uint4 ring[];  // then, for kRopeKv, rope_prologue's table
  float* rope_cs = reinterpret_cast<float*>(ring + ring_bytes<W, U, S>() / 16);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const TileRows tr = tile_rows<EPI>(p);
  const LaneRows<T> r(p, tr, g);
  const uint4 *w_lo = r.w_lo, *w_hi = r.w_hi, *x_row = r.x_row;
  const bool x_live = r.x_live;
  const int chunks = p.K / kVec;
  const int steps = (chunks + 3) / 4;
  constexpr int kStride = W * U;
  constexpr int kSlot = U * 2 * W * 32;  // uint4 per ring slot
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) {
    copy_w<W, U>(mine + p * kSlot * 16, w_lo, w_hi, warp + p * kStride, t, chunks);
    attn::cp_async_commit();
  }
  rope_prologue<T, EPI>(p, tr, rope_cs);
  pdl_wait();

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int slot = 0;  // the slot of iteration s0; the slot before it is refilled
  for (int s0 = warp; s0 < steps; s0 += kStride) {
    const int refill = slot == 0 ? S - 1 : slot - 1;
    copy_w<W, U>(mine + refill * kSlot * 16, w_lo, w_hi, s0 + (S - 1) * kStride, t, chunks);
    attn::cp_async_commit();
    uint4 xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = (s0 + u * W) * 4 + t;
      xv[u] = make_uint4(0, 0, 0, 0);
      if (c < chunks && x_live) xv[u] = __ldg(x_row + c);
    }
    attn::cp_async_wait<S - 1>();
    const uint4* own = ring + slot * kSlot + threadIdx.x;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint4 lo = own[(2 * u) * W * 32], hi = own[(2 * u + 1) * W * 32];
      mma_16816<T>(acc, lo.x, hi.x, lo.y, hi.y, xv[u].x, xv[u].y);
      mma_16816<T>(acc, lo.z, hi.z, lo.w, hi.w, xv[u].z, xv[u].w);
    }
    slot = slot == S - 1 ? 0 : slot + 1;
  }

  attn::cp_async_wait<0>();  // the zero-filled copies past the end
  __syncthreads();
  float(*partial)[4][32] = reinterpret_cast<float(*)[4][32]>(ring);  // [W][4][32]
  sum_warps_and_store<T, W, EPI>(acc, partial, p, tr, rope_cs);
}

// Launches config C's kernel with epilogue EPI.
template <typename T, Config C, GemvEpilogue EPI>
cudaError_t launch_shape(const GemvParams& p, cudaStream_t stream) {
  const int blocks = (p.N + kRows - 1) / kRows;
  constexpr int kRopeBytes = EPI == GemvEpilogue::kRopeKv ? kRopeWords * 32 * sizeof(float) : 0;
  if constexpr (C.stages == 0) {
    return launch_kernel(gemv_kernel<T, C.warps, C.unroll, EPI>, dim3(blocks), dim3(C.warps * 32),
                         kRopeBytes, stream, p);
  } else {
    const auto kernel = gemv_ring_kernel<T, C.warps, C.unroll, C.stages, EPI>;
    constexpr int kBytes = ring_bytes<C.warps, C.unroll, C.stages>() + kRopeBytes;
    // Once per kernel (Rill drives one device), not on every launch of a decode step.
    static const cudaError_t allowed =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (allowed != cudaSuccess) return allowed;
    return launch_kernel(kernel, dim3(blocks), dim3(C.warps * 32), kBytes, stream, p);
  }
}

template <typename T, int I = 0>
cudaError_t launch_config(const GemvParams& p, cudaStream_t stream) {
  if constexpr (I == kNumConfigs) {
    return invalid_argument("gemv: unknown config " + std::to_string(p.config));
  } else {
    if (p.config != I) return launch_config<T, I + 1>(p, stream);
    constexpr Config c = kConfigs[I];
    if (p.epilogue == GemvEpilogue::kStore)
      return launch_shape<T, c, GemvEpilogue::kStore>(p, stream);
    if constexpr (c.silu) {
      return p.epilogue == GemvEpilogue::kSiluMul
                 ? launch_shape<T, c, GemvEpilogue::kSiluMul>(p, stream)
                 : launch_shape<T, c, GemvEpilogue::kRopeKv>(p, stream);
    } else {
      return invalid_argument("gemv: config " + std::to_string(p.config) +
                              " has no kSiluMul or kRopeKv");
    }
  }
}

// "" when kRopeKv can run with p's shapes and RoPE arguments, else why not.
std::string rope_problem(const GemvParams& p) {
  const RopeKvParams& r = p.rope;
  if (!gemv_rope_fusable(r.head_dim, r.rotary_dim))
    return "head_dim " + std::to_string(r.head_dim) + " / rotary_dim " +
           std::to_string(r.rotary_dim) + " (needs multiples of 16, head_dim <= 256)";
  if (r.num_heads <= 0 || r.num_kv_heads <= 0 ||
      p.N != (r.num_heads + 2 * r.num_kv_heads) * r.head_dim)
    return "N=" + std::to_string(p.N) + " is not the qkv width of the heads";
  if (p.y_f32 || p.bias) return "writes the dtype and takes its bias in rope.qkv_bias";
  if (!r.positions || (r.rotary_dim > 0 && !r.inv_freq)) return "positions and inv_freq needed";
  if (r.q_sink && !r.sink_positions) return "q_sink without sink_positions";
  if (r.cache_slot && r.cache) {
    if (r.layout.num_kv_heads != r.num_kv_heads || r.layout.head_dim != r.head_dim ||
        r.layout.block_size <= 0 || r.layout.num_blocks < 0)
      return "cache layout disagrees with num_kv_heads/head_dim";
    return kv_dtype_problem(r.layout);
  }
  return "";
}

}  // namespace

cudaError_t launch_gemv(const GemvParams& p, cudaStream_t stream) {
  if (p.M < 0 || p.N < 0 || p.K < 0) return invalid_argument("gemv: negative size");
  if (p.M > kMaxM) return invalid_argument("gemv: M=" + std::to_string(p.M) + " > 8");
  if (p.K % kVec != 0)
    return invalid_argument("gemv: K=" + std::to_string(p.K) + " is not a multiple of 8");
  if (p.config < -1 || p.config >= kNumConfigs)
    return invalid_argument("gemv: unknown config " + std::to_string(p.config));
  if (p.epilogue == GemvEpilogue::kSiluMul) {
    if (p.N % 16 != 0)
      return invalid_argument("gemv: kSiluMul needs N % 16 == 0, N=" + std::to_string(p.N));
    if (p.y_f32) return invalid_argument("gemv: kSiluMul writes the dtype");
  } else if (p.epilogue == GemvEpilogue::kRopeKv) {
    if (const std::string why = rope_problem(p); !why.empty())
      return invalid_argument("gemv: kRopeKv: " + why);
  } else if (p.epilogue != GemvEpilogue::kStore) {
    return invalid_argument("gemv: unknown epilogue");
  } else if (p.bias) {
    return invalid_argument("gemv: kStore takes no bias");
  }
  if (p.M == 0 || p.N == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.y) return invalid_argument("gemv: null pointer");
  if (!is_aligned16(p.x) || !is_aligned16(p.w))
    return invalid_argument("gemv: x and w must be 16-byte aligned");
  GemvParams q = p;
  if (q.config < 0) q.config = gemv_default_config(p.N, p.K, p.deep_prologue);
  return dispatch_dtype(q.dtype, [&]<typename T>() { return launch_config<T>(q, stream); });
}

int gemv_default_config(int N, int /*K*/, bool deep_prologue) {
  // Measured on H100 (rill-gemv-bench, docs/performance.md): with the L2::256B loads 16 warps x 2
  // steps is best or within 1% on every Llama shape (32 warps fell to 49-67% on the 7B down
  // projection); 128k-row LM heads gain ~1% from 32 warps. A fixed rule, not a start-up timing,
  // so that every run computes bit-identical results (the warps' partial sums are added in an
  // order that depends on the CTA shape). With deep_prologue the twin with the same warps that
  // stages through a cp.async ring: 5 deep for 16 warps, 3 for 32 (same sums).
  if (N >= 65536) return deep_prologue ? kDeepWideConfig : 1;
  return deep_prologue ? kDeepConfig : 0;
}

int gemv_num_configs() {
  return kNumConfigs;
}

GemvConfigInfo gemv_config_info(int config) {
  if (config < 0 || config >= kNumConfigs) return {};
  const Config& c = kConfigs[config];
  return {c.warps, c.unroll, c.stages, c.silu};
}

std::string gemv_config_name(int config) {
  if (config < 0 || config >= kNumConfigs) return "?";
  const Config& c = kConfigs[config];
  return std::to_string(c.warps) + "w x" + std::to_string(c.unroll) +
         (c.stages ? " ring" + std::to_string(c.stages) : "");
}

}  // namespace rill::kernels
