// Prefill attention of one chunk against itself and the paged KV cache (StreamingLLM sinks +
// window), FlashAttention-2 style on tensor cores (mma.sync m16n8k16, fp32 accumulators).
//
// prefill_attention_kernel: grid (ceil(max_tokens / 64), num_heads, num_seqs), 128 threads; the
// CTA owns 64 query rows of one head (its 4 warps 16 rows each), the longest rows first. Keys are
// streamed through shared memory in tiles of 64 rows, gathered one row at a time (a row is the
// cache slot's K/V through the block table, or a chunk row of qkv) with cp.async, double
// buffered. Two phases, so a tile never mixes the two queries:
//   1. sinks, scored with the Q_sink tile: key idx < sink_cache is cache slot idx, the rest the
//      chunk rows [0, sink_fresh) (visible iff row <= query);
//   2. window, scored with the Q tile: chunk-relative key kk in [kk_lo, q1), kk < 0 being the old
//      token -1 - kk steps before the chunk (ring rel old_head_rel + 1 + kk), kk >= 0 a chunk row;
//      tiles are aligned to the query tiles so the causal diagonal is one tile.
// q_sink is read only in phase 1 (it may be null when no sequence has sinks). max_tokens must be
// at least every sequence's num_tokens (it sizes the grid).
// Per tile and warp: S = Q K^T (ldmatrix from padded rows, conflict-free), logits scaled by
// scale * log2(e), masked only where the tile is not entirely visible, online softmax on the
// accumulator fragments (row max over the 4 lanes of a quad), P re-packed in registers as the A
// operand of O += P V (V through ldmatrix.trans). Shared memory: Q + 2 x (K, V) tiles, 87 KB for
// head_dim 128 (two CTAs per SM). Head dims 64, 80, 96 and 128; 80 and 96 (Phi-2, Pythia-2.8B,
// Phi-3-mini) copy their rows' 10 or 12 chunks with 16 threads per row (PrefillShape::kLanes).
//
// fp8 (e4m3) cache: cache rows are copied as raw bytes into a staging tile (16 KB more at head_dim
// 128) and converted to the activation type (x * scale, one rounding) by the thread that copied
// them, so the tiles the tensor cores read are the same; the chunk's own rows still come from qkv.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>
#include <string>

#include "attention_mma.cuh"
#include "attention_util.cuh"
#include "dispatch.cuh"
#include "fp8.cuh"
#include "launch.cuh"
#include "rill/kernels/attention.h"

namespace rill::kernels {
namespace {

using attn::ex2;
using attn::PagedKv;

constexpr int kPrefillThreads = 128;  // 4 warps x 16 query rows
constexpr int kTile = 64;             // query rows per CTA, keys per K/V tile
constexpr float kLog2e = 1.4426950408889634f;

/// Launch arguments shared by all instantiations (device view of PrefillAttentionParams).
struct PrefillArgs {
  const void* qkv;     // [total_tokens, qkv_stride]: q | k | v
  int64_t qkv_stride;  // elements
  int k_col, v_col;    // first column of k and of v (kv head 0)
  const void* q_sink;  // [total_tokens, num_heads * head_dim]
  const PrefillSeq* seqs;
  const void* cache;  // this layer
  int64_t block_stride, kv_stride;
  int block_size, block_shift;
  int num_heads, group;
  float scale_log2;  // scale * log2(e)
  void* out;         // [total_tokens, num_heads * head_dim]
  float k_scale, v_scale;  // fp8 cache
};

template <int D>
struct PrefillShape {
  // Shared-memory row pitch in elements: a 16-byte pad keeps ldmatrix conflict-free (also at
  // head_dim 80 and 96: rows 176 and 208 bytes apart start in 8 distinct 16-byte bank groups).
  static constexpr int kPitch = D + 8;
  static constexpr int kTileElems = kTile * kPitch;
  static constexpr int kSmemBytes = 5 * kTileElems * 2;  // Q, 2 x K, 2 x V
  static constexpr int kChunks = D / 8;                  // 16-byte chunks per row
  // Threads copying one row: kChunks rounded up to a power of two, so that a pass covers whole
  // rows. head_dim 64 and 128: all of them copy; 80 and 96 (10 and 12 chunks on 16 lanes): the
  // top lanes of each row stay idle in the tile loads (kIdleLanes), the MMAs are unchanged.
  static constexpr int kLanes = kChunks <= 8 ? 8 : 16;
  static constexpr bool kIdleLanes = kLanes != kChunks;
  static constexpr int kRowsPerPass = kPrefillThreads / kLanes;
  static constexpr int kPasses = kTile / kRowsPerPass;
  static_assert(D % 16 == 0 && kChunks <= 16 && kTile % kRowsPerPass == 0, "unsupported head_dim");
  /// True for the threads that copy nothing (a chunk past the row).
  static __device__ __forceinline__ bool idle(int chunk) { return kIdleLanes && chunk >= kChunks; }
};

/// One CTA's view of its sequence and head (C: the cache element type, T or Fp8).
template <typename T, typename C = T>
struct PrefillCtx {
  PagedKv<C> kv;     // cache rows of this kv head
  const T* chunk_k;  // K of chunk row 0, this kv head; row r at + r * qkv_stride
  int64_t qkv_stride;
  int64_t v_minus_k;  // V of a chunk row is this many elements after its K
  int q_offset, n_tok, q0, q1;
  int sink_cache, sink_fresh, n_sink_keys;
  int cache_window, old_head_rel, window, ring_base, ring;
};

/// Source rows of sink-phase key idx; false past the sink keys.
template <typename T>
__device__ __forceinline__ bool sink_key(const PrefillCtx<T>& c, int idx, const T*& k,
                                         const T*& v) {
  if (idx >= c.n_sink_keys) return false;
  if (idx < c.sink_cache) {
    k = c.kv.k_row(idx);
    v = k + c.kv.kv_stride;
  } else {
    k = c.chunk_k + (idx - c.sink_cache) * c.qkv_stride;
    v = k + c.v_minus_k;
  }
  return true;
}

__device__ __forceinline__ bool sink_visible(int sink_cache, int n_sink_keys, int qq, int idx) {
  return idx < n_sink_keys && (idx < sink_cache || idx - sink_cache <= qq);
}

template <typename T, typename C>
__device__ __forceinline__ bool window_visible(const PrefillCtx<T, C>& c, int qq, int kk) {
  return kk >= -c.cache_window && qq - kk < c.window &&
         (kk < 0 || (kk >= c.sink_fresh && kk <= qq));
}

/// True when every (query row of the CTA, key of window tile k0) pair is visible: no mask needed.
template <typename T, typename C>
__device__ __forceinline__ bool window_tile_full(const PrefillCtx<T, C>& c, int k0) {
  const int k_last = k0 + kTile - 1;
  return k0 >= -c.cache_window && c.q1 - 1 - k0 < c.window &&
         (k_last < 0 || (max(k0, 0) >= c.sink_fresh && k_last <= c.q0));
}

/// Q tile (rows q0 .. q0 + 63 of q_base; zeros past the chunk) into sq, asynchronously.
template <typename T, int D, typename C>
__device__ __forceinline__ void load_q_tile(const PrefillCtx<T, C>& c, const T* q_base,
                                            int64_t q_stride, T* sq) {
  using Sh = PrefillShape<D>;
  const int chunk = threadIdx.x % Sh::kLanes;
  if (Sh::idle(chunk)) return;
#pragma unroll
  for (int pass = 0; pass < Sh::kPasses; ++pass) {
    const int r = threadIdx.x / Sh::kLanes + pass * Sh::kRowsPerPass;
    const bool valid = c.q0 + r < c.n_tok;
    const T* src = valid ? q_base + static_cast<int64_t>(c.q_offset + c.q0 + r) * q_stride : q_base;
    attn::cp_async16(attn::smem_addr(sq + r * Sh::kPitch + chunk * 8), src + chunk * 8, valid);
  }
}

/// K and V rows of tile k0 into (sk, sv), asynchronously; invalid rows are zero-filled.
/// Window phase: keys outside [kk_lo, q1) are invalid.
template <typename T, int D, bool kSink>
__device__ __forceinline__ void load_kv_tile(const PrefillCtx<T>& c, int k0, int kk_lo, T* sk,
                                             T* sv) {
  using Sh = PrefillShape<D>;
  const int chunk = threadIdx.x % Sh::kLanes;
  const int row0 = threadIdx.x / Sh::kLanes;
  if (Sh::idle(chunk)) return;
  // Old window keys are consecutive in the ring: one division per tile, then wrap-around adds.
  unsigned off = 0;
  if (!kSink && k0 < 0) off = attn::ring_offset(c.old_head_rel + 1 + k0 + row0, c.ring);
#pragma unroll
  for (int pass = 0; pass < Sh::kPasses; ++pass) {
    const int r = row0 + pass * Sh::kRowsPerPass;
    const T* k = c.chunk_k;  // any readable address when the row is invalid
    const T* v = c.chunk_k;
    bool valid;
    if (kSink) {
      valid = sink_key(c, k0 + r, k, v);
    } else {
      const int kk = k0 + r;
      valid = kk >= kk_lo && kk < c.q1;
      if (valid && kk < 0) {
        k = c.kv.k_row(c.ring_base + static_cast<int>(off));
        v = k + c.kv.kv_stride;
      } else if (valid) {
        k = c.chunk_k + kk * c.qkv_stride;
        v = k + c.v_minus_k;
      }
      off += Sh::kRowsPerPass;
      while (off >= static_cast<unsigned>(c.ring)) off -= static_cast<unsigned>(c.ring);
    }
    const int so = r * Sh::kPitch + chunk * 8;
    attn::cp_async16(attn::smem_addr(sk + so), k + chunk * 8, valid);
    attn::cp_async16(attn::smem_addr(sv + so), v + chunk * 8, valid);
  }
}

/// fp8 cache: as load_kv_tile, but a cache row lands as raw e4m3 bytes in (rk, rv) ([kTile][D]
/// bytes each, 8-byte copies at the same (row, chunk) as its tile elements) for convert_kv_tile;
/// chunk rows and invalid rows go to (sk, sv) as before. Returns the passes that read the cache.
template <typename T, int D, bool kSink>
__device__ __forceinline__ uint32_t load_kv_tile_fp8(const PrefillCtx<T, Fp8>& c, int k0, int kk_lo,
                                                     T* sk, T* sv, unsigned char* rk,
                                                     unsigned char* rv) {
  using Sh = PrefillShape<D>;
  const int chunk = threadIdx.x % Sh::kLanes;
  const int row0 = threadIdx.x / Sh::kLanes;
  if (Sh::idle(chunk)) return 0;
  unsigned off = 0;
  if (!kSink && k0 < 0) off = attn::ring_offset(c.old_head_rel + 1 + k0 + row0, c.ring);
  uint32_t from_cache = 0;
#pragma unroll
  for (int pass = 0; pass < Sh::kPasses; ++pass) {
    const int r = row0 + pass * Sh::kRowsPerPass;
    const T* k = c.chunk_k;  // any readable address when the row is invalid
    const T* v = c.chunk_k;
    const Fp8* ck = nullptr;  // the row's K in the cache, when it comes from there
    bool valid;
    if (kSink) {
      const int idx = k0 + r;
      valid = idx < c.n_sink_keys;
      if (valid && idx < c.sink_cache) {
        ck = c.kv.k_row(idx);
      } else if (valid) {
        k = c.chunk_k + (idx - c.sink_cache) * c.qkv_stride;
        v = k + c.v_minus_k;
      }
    } else {
      const int kk = k0 + r;
      valid = kk >= kk_lo && kk < c.q1;
      if (valid && kk < 0) {
        ck = c.kv.k_row(c.ring_base + static_cast<int>(off));
      } else if (valid) {
        k = c.chunk_k + kk * c.qkv_stride;
        v = k + c.v_minus_k;
      }
      off += Sh::kRowsPerPass;
      while (off >= static_cast<unsigned>(c.ring)) off -= static_cast<unsigned>(c.ring);
    }
    if (ck) {
      const int ro = r * D + chunk * 8;
      attn::cp_async8(attn::smem_addr(rk + ro), ck + chunk * 8);
      attn::cp_async8(attn::smem_addr(rv + ro), ck + c.kv.kv_stride + chunk * 8);
      from_cache |= 1u << pass;
    } else {
      const int so = r * Sh::kPitch + chunk * 8;
      attn::cp_async16(attn::smem_addr(sk + so), k + chunk * 8, valid);
      attn::cp_async16(attn::smem_addr(sv + so), v + chunk * 8, valid);
    }
  }
  return from_cache;
}

/// Eight e4m3 values times `scale`, rounded to T, as a 16-byte vector.
template <typename T>
__device__ __forceinline__ uint4 fp8x8_to(const uint2& raw, float scale) {
  float f[8];
  unpack8_fp8(raw, f);
  return make_uint4(
      attn::pack2<T>(f[0] * scale, f[1] * scale), attn::pack2<T>(f[2] * scale, f[3] * scale),
      attn::pack2<T>(f[4] * scale, f[5] * scale), attn::pack2<T>(f[6] * scale, f[7] * scale));
}

/// The cache rows of a tile that this thread copied (`from_cache` from load_kv_tile_fp8, landed:
/// after cp.async.wait_group), converted from (rk, rv) into (sk, sv). Only the copying thread
/// reads its raw bytes, so no barrier is needed before, nor before they are overwritten.
template <typename T, int D>
__device__ __forceinline__ void convert_kv_tile(uint32_t from_cache, const unsigned char* rk,
                                                const unsigned char* rv, T* sk, T* sv,
                                                float k_scale, float v_scale) {
  using Sh = PrefillShape<D>;
  const int chunk = threadIdx.x % Sh::kLanes;  // idle lanes copied nothing: from_cache is 0
  const int row0 = threadIdx.x / Sh::kLanes;
#pragma unroll
  for (int pass = 0; pass < Sh::kPasses; ++pass) {
    if (!((from_cache >> pass) & 1u)) continue;
    const int r = row0 + pass * Sh::kRowsPerPass;
    const int ro = r * D + chunk * 8, so = r * Sh::kPitch + chunk * 8;
    *reinterpret_cast<uint4*>(sk + so) =
        fp8x8_to<T>(*reinterpret_cast<const uint2*>(rk + ro), k_scale);
    *reinterpret_cast<uint4*>(sv + so) =
        fp8x8_to<T>(*reinterpret_cast<const uint2*>(rv + ro), v_scale);
  }
}

/// Per-thread accumulators of rows g and g + 8 of the warp's 16 query rows (g = lane / 4):
/// acc holds the O fragments (n-tile j: dims 8j + 2t, +1 of both rows), m the running max of
/// base-2 logits (identical across the quad), l this thread's share of the running sum (summed
/// across the quad at the end).
template <int D>
struct RowState {
  float acc[D / 8][4];
  float m[2];
  float l[2];
};

using ScoreTile = float[kTile / 8][4];  // S fragments: n-tile j holds keys 8j + 2t, +1

/// S = Q K^T for the warp's 16 rows and the tile's 64 keys (ldmatrix row addresses as in
/// attention_mma.cuh: A takes rows (l & 7) + 8 * bit3 of l, column block l >> 4; K takes rows
/// (l & 7) + 8 * (l >> 4), column block bit3).
template <typename T, int D>
__device__ __forceinline__ void qk_tile(const T* sq, const T* sk, ScoreTile& s) {
  using Sh = PrefillShape<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int ar = (lane & 7) + ((lane >> 3) & 1) * 8, ac = (lane >> 4) * 8;
  const int kr = (lane & 7) + (lane >> 4) * 8, kc = ((lane >> 3) & 1) * 8;
  const uint32_t q_addr = attn::smem_addr(sq + (warp * 16 + ar) * Sh::kPitch + ac);
  const uint32_t k_addr = attn::smem_addr(sk + kr * Sh::kPitch + kc);
#pragma unroll
  for (int j = 0; j < kTile / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t qa[4];
    attn::ldmatrix_x4(qa, q_addr + ks * 32);
#pragma unroll
    for (int kp = 0; kp < kTile / 16; ++kp) {
      uint32_t kb[4];
      attn::ldmatrix_x4(kb, k_addr + (kp * 16 * Sh::kPitch + ks * 16) * 2);
      attn::mma_16816<T>(s[2 * kp], qa, kb[0], kb[1]);
      attn::mma_16816<T>(s[2 * kp + 1], qa, kb[2], kb[3]);
    }
  }
}

/// Scales S to base-2 logits, masks it unless the whole tile is visible, and turns it into P
/// (online softmax: row max across the quad, O and l rescaled once per tile).
template <typename T, int D, bool kSink, typename C>
__device__ __forceinline__ void softmax_tile(const PrefillCtx<T, C>& c, int k0, float scale_log2,
                                             ScoreTile& s, RowState<D>& st) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qr = c.q0 + warp * 16 + lane / 4;  // query rows qr (e < 2) and qr + 8 (e >= 2)
  const int kt = k0 + 2 * (lane % 4);          // key of element e = 0 in n-tile 0
  const bool masked = kSink || !window_tile_full(c, k0);
#pragma unroll
  for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[j][e] *= scale_log2;
      if (masked) {
        const int qq = qr + (e >= 2 ? 8 : 0), kk = kt + 8 * j + (e & 1);
        const bool vis =
            kSink ? sink_visible(c.sink_cache, c.n_sink_keys, qq, kk) : window_visible(c, qq, kk);
        if (!vis) s[j][e] = -INFINITY;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = st.m[r];
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_use = mx == -INFINITY ? 0.0f : mx;  // row without a visible key yet
    const float alpha = ex2(st.m[r] - m_use);
    st.m[r] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
      s[j][2 * r] = ex2(s[j][2 * r] - m_use);
      s[j][2 * r + 1] = ex2(s[j][2 * r + 1] - m_use);
      sum += s[j][2 * r] + s[j][2 * r + 1];
    }
    st.l[r] = st.l[r] * alpha + sum;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) st.acc[j][2 * r] *= alpha, st.acc[j][2 * r + 1] *= alpha;
  }
}

/// O += P V: the P fragments of key n-tiles 2c, 2c + 1 are the A fragment of key chunk c;
/// V goes through ldmatrix.trans (rows (l & 7) + 8 * bit3, column block l >> 4).
template <typename T, int D>
__device__ __forceinline__ void pv_tile(const ScoreTile& p, const T* sv, RowState<D>& st) {
  using Sh = PrefillShape<D>;
  const int lane = threadIdx.x % 32;
  const int vr = (lane & 7) + ((lane >> 3) & 1) * 8, vc = (lane >> 4) * 8;
  const uint32_t v_addr = attn::smem_addr(sv + vr * Sh::kPitch + vc);
#pragma unroll
  for (int c = 0; c < kTile / 16; ++c) {
    const uint32_t pa[4] = {attn::pack2<T>(p[2 * c][0], p[2 * c][1]),
                            attn::pack2<T>(p[2 * c][2], p[2 * c][3]),
                            attn::pack2<T>(p[2 * c + 1][0], p[2 * c + 1][1]),
                            attn::pack2<T>(p[2 * c + 1][2], p[2 * c + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      attn::ldmatrix_x4_trans(vb, v_addr + (c * 16 * Sh::kPitch + dp * 16) * 2);
      attn::mma_16816<T>(st.acc[2 * dp], pa, vb[0], vb[1]);
      attn::mma_16816<T>(st.acc[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
}

/// One 64-key tile for the warp's 16 rows: S = Q K^T, mask, online softmax, O += P V.
template <typename T, int D, bool kSink, typename C>
__device__ __forceinline__ void attend_tile(const PrefillCtx<T, C>& c, int k0, float scale_log2,
                                            const T* sq, const T* sk, const T* sv,
                                            RowState<D>& st) {
  ScoreTile s;
  qk_tile<T, D>(sq, sk, s);
  softmax_tile<T, D, kSink>(c, k0, scale_log2, s, st);
  pv_tile<T, D>(s, sv, st);
}

/// All tiles of one phase, double buffered: tile t + 1 loads while tile t is computed.
template <typename T, int D, bool kSink>
__device__ __forceinline__ void run_phase(const PrefillCtx<T>& c, const T* q_base, int64_t q_stride,
                                          int k_start, int n_tiles, int kk_lo, float scale_log2,
                                          T* sq, T* sk, T* sv, RowState<D>& st) {
  using Sh = PrefillShape<D>;
  load_q_tile<T, D>(c, q_base, q_stride, sq);
  load_kv_tile<T, D, kSink>(c, k_start, kk_lo, sk, sv);
  attn::cp_async_commit();
  for (int t = 0; t < n_tiles; ++t) {
    const int stage = t & 1;
    if (t + 1 < n_tiles) {
      load_kv_tile<T, D, kSink>(c, k_start + (t + 1) * kTile, kk_lo,
                                sk + (stage ^ 1) * Sh::kTileElems,
                                sv + (stage ^ 1) * Sh::kTileElems);
      attn::cp_async_commit();
      attn::cp_async_wait<1>();
    } else {
      attn::cp_async_wait<0>();
    }
    __syncthreads();  // tile t (and Q) visible to all warps
    attend_tile<T, D, kSink>(c, k_start + t * kTile, scale_log2, sq, sk + stage * Sh::kTileElems,
                             sv + stage * Sh::kTileElems, st);
    __syncthreads();  // stage free for tile t + 2; Q free for the next phase
  }
}

/// run_phase for an fp8 cache: tile t is converted once it has landed, then tile t + 1 is issued
/// (its raw bytes reuse the one staging tile: each thread has converted its own) and lands while
/// tile t is computed.
template <typename T, int D, bool kSink>
__device__ __forceinline__ void run_phase_fp8(const PrefillCtx<T, Fp8>& c, const T* q_base,
                                              int64_t q_stride, int k_start, int n_tiles, int kk_lo,
                                              float scale_log2, float k_scale, float v_scale, T* sq,
                                              T* sk, T* sv, unsigned char* raw, RowState<D>& st) {
  using Sh = PrefillShape<D>;
  unsigned char* rk = raw;
  unsigned char* rv = raw + kTile * D;
  load_q_tile<T, D>(c, q_base, q_stride, sq);
  uint32_t from_cache = load_kv_tile_fp8<T, D, kSink>(c, k_start, kk_lo, sk, sv, rk, rv);
  attn::cp_async_commit();
  for (int t = 0; t < n_tiles; ++t) {
    const int stage = t & 1;
    attn::cp_async_wait<0>();  // tile t (and Q) landed: this thread's copies
    convert_kv_tile<T, D>(from_cache, rk, rv, sk + stage * Sh::kTileElems,
                          sv + stage * Sh::kTileElems, k_scale, v_scale);
    if (t + 1 < n_tiles) {
      from_cache = load_kv_tile_fp8<T, D, kSink>(c, k_start + (t + 1) * kTile, kk_lo,
                                                 sk + (stage ^ 1) * Sh::kTileElems,
                                                 sv + (stage ^ 1) * Sh::kTileElems, rk, rv);
      attn::cp_async_commit();
    }
    __syncthreads();  // tile t (and Q) visible to all warps
    attend_tile<T, D, kSink>(c, k_start + t * kTile, scale_log2, sq, sk + stage * Sh::kTileElems,
                             sv + stage * Sh::kTileElems, st);
    __syncthreads();  // stage free for tile t + 2; Q free for the next phase
  }
}

// C: the cache element type (T, or Fp8).
template <typename T, typename C, int D>
__global__ void __launch_bounds__(kPrefillThreads, 2)
    prefill_attention_kernel(const PrefillArgs a) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  using Sh = PrefillShape<D>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + Sh::kTileElems;      // [2][kTile][kPitch]
  T* sv = sk + 2 * Sh::kTileElems;  // [2][kTile][kPitch]
  unsigned char* raw = smem_raw + Sh::kSmemBytes;  // fp8: [K, V][kTile][D] bytes

  const PrefillSeq seq = a.seqs[blockIdx.z];
  const int n_tok = max(seq.num_tokens, 0);
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kTile;  // the longest rows start first
  if (q0 >= n_tok) return;
  const int head = blockIdx.y, kvh = head / a.group;

  PrefillCtx<T, C> c;
  c.kv = PagedKv<C>{static_cast<const C*>(a.cache) + static_cast<int64_t>(kvh) * a.block_size * D,
                    seq.geo.block_table,
                    a.block_stride,
                    a.kv_stride,
                    a.block_shift,
                    D};
  const T* qkv = static_cast<const T*>(a.qkv);
  c.chunk_k = qkv + static_cast<int64_t>(seq.q_offset) * a.qkv_stride + a.k_col + kvh * D;
  c.qkv_stride = a.qkv_stride;
  c.v_minus_k = a.v_col - a.k_col;
  c.q_offset = seq.q_offset;
  c.n_tok = n_tok;
  c.q0 = q0;
  c.q1 = min(q0 + kTile, n_tok);
  c.sink_cache = max(seq.sink_cache, 0);
  c.sink_fresh = min(max(seq.sink_fresh, 0), n_tok);
  c.n_sink_keys = c.sink_cache + min(c.sink_fresh, c.q1);
  c.cache_window = max(seq.cache_window, 0);
  c.old_head_rel = seq.old_head_rel;
  c.window = seq.window;
  c.ring_base = seq.geo.ring_base;
  c.ring = seq.geo.ring_size > 0 ? seq.geo.ring_size : 0x7fffffff;

  RowState<D> st;
#pragma unroll
  for (int j = 0; j < D / 8; ++j) st.acc[j][0] = st.acc[j][1] = st.acc[j][2] = st.acc[j][3] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;

  const int64_t q_sink_stride = static_cast<int64_t>(a.num_heads) * D;
  if (c.n_sink_keys > 0) {
    if constexpr (kIsFp8<C>) {
      run_phase_fp8<T, D, true>(c, static_cast<const T*>(a.q_sink) + head * D, q_sink_stride, 0,
                                (c.n_sink_keys + kTile - 1) / kTile, 0, a.scale_log2, a.k_scale,
                                a.v_scale, sq, sk, sv, raw, st);
    } else {
      run_phase<T, D, true>(c, static_cast<const T*>(a.q_sink) + head * D, q_sink_stride, 0,
                            (c.n_sink_keys + kTile - 1) / kTile, 0, a.scale_log2, sq, sk, sv, st);
    }
  }
  const int64_t lo =
      max(static_cast<int64_t>(-c.cache_window), static_cast<int64_t>(q0) - c.window + 1);
  if (lo < c.q1) {
    const int kk_lo = static_cast<int>(lo);
    const int k_start = kk_lo & ~(kTile - 1);  // floor to a multiple of 64 (also when negative)
    if constexpr (kIsFp8<C>) {
      run_phase_fp8<T, D, false>(c, qkv + head * D, a.qkv_stride, k_start,
                                 (c.q1 - k_start + kTile - 1) / kTile, kk_lo, a.scale_log2,
                                 a.k_scale, a.v_scale, sq, sk, sv, raw, st);
    } else {
      run_phase<T, D, false>(c, qkv + head * D, a.qkv_stride, k_start,
                             (c.q1 - k_start + kTile - 1) / kTile, kk_lo, a.scale_log2, sq, sk, sv,
                             st);
    }
  }

  // O / l, written as pairs of elements.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st.l[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int qq = q0 + warp * 16 + g + 8 * r;
    if (qq >= n_tok) continue;
    T* o = static_cast<T*>(a.out) + static_cast<int64_t>(seq.q_offset + qq) * q_sink_stride +
           head * D + 2 * t4;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const uint32_t w = attn::pack2<T>(st.acc[j][2 * r] * inv, st.acc[j][2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(o + 8 * j) = w;
    }
  }
}

template <typename T, typename C, int D>
cudaError_t launch_prefill_typed(const PrefillArgs& args, int max_tokens, int num_seqs,
                                 cudaStream_t stream) {
  using Sh = PrefillShape<D>;
  constexpr int kSmemBytes = Sh::kSmemBytes + (kIsFp8<C> ? 2 * kTile * D : 0);
  const auto kernel = prefill_attention_kernel<T, C, D>;
  // Once per device (common.h): setting the attribute on every launch made the host wait for
  // the kernel's launches still in flight, so a step with prompt chunks launched behind the
  // whole step before it (docs/scheduler.md, "The client-side gap").
  if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBytes);
      err != cudaSuccess)
    return err;
  const dim3 grid((max_tokens + kTile - 1) / kTile, args.num_heads, num_seqs);
  launch_kernel(kernel, dim3(grid), dim3(kPrefillThreads), kSmemBytes, stream, args);
  return launch_status();
}

/// The prefill kernel's head dims: 64 and 128 (Llama, Mistral, Qwen), 80 (Phi-2, Pythia-2.8B)
/// and 96 (Phi-3-mini).
using PrefillHeadDims = HeadDims<64, 80, 96, 128>;

}  // namespace

cudaError_t launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream) {
  if (const cudaError_t e = check_head_dim<PrefillHeadDims>(p.head_dim); e != cudaSuccess) return e;
  if (const std::string why =
          attn::shape_problem(p.num_seqs, p.num_heads, p.num_kv_heads, p.head_dim, p.layout);
      !why.empty())
    return invalid_argument("prefill attention: " + why);
  const int64_t row = static_cast<int64_t>(p.num_heads + 2 * p.num_kv_heads) * p.head_dim;
  if (p.qkv_stride < row || p.qkv_stride % 8 != 0)
    return invalid_argument("prefill attention: qkv_stride=" + std::to_string(p.qkv_stride) +
                            " must be >= " + std::to_string(row) + " and a multiple of 8");
  if (p.num_seqs == 0 || p.max_tokens <= 0) return cudaSuccess;
  if (p.qkv == nullptr || p.seqs == nullptr || p.cache == nullptr || p.out == nullptr)
    return invalid_argument("prefill attention: null qkv, seqs, cache or out");
  // The tile loads copy 16-byte chunks; the output is written in 4-byte pairs.
  if (!attn::aligned16(p.qkv) || !attn::aligned16(p.cache) || !attn::aligned16(p.q_sink) ||
      !attn::aligned16(p.out))
    return invalid_argument(
        "prefill attention: qkv, q_sink, cache and out must be 16-byte aligned");

  PrefillArgs args{};
  args.qkv = p.qkv;
  args.qkv_stride = p.qkv_stride;
  args.k_col = p.num_heads * p.head_dim;
  args.v_col = (p.num_heads + p.num_kv_heads) * p.head_dim;
  args.q_sink = p.q_sink;
  args.seqs = p.seqs;
  args.cache = p.cache;
  args.block_stride = p.layout.block_stride();
  args.kv_stride = p.layout.kv_stride();
  args.block_size = p.layout.block_size;
  args.block_shift = attn::log2_pow2(p.layout.block_size);
  args.num_heads = p.num_heads;
  args.group = p.num_heads / p.num_kv_heads;
  args.scale_log2 = p.scale * kLog2e;
  args.out = p.out;
  args.k_scale = p.layout.k_scale;
  args.v_scale = p.layout.v_scale;
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    return dispatch_kv_dtype<T>(p.layout.cache_dtype, [&]<typename C>() {
      return dispatch_head_dim(PrefillHeadDims{}, p.head_dim, [&]<int D>() {
        return launch_prefill_typed<T, C, D>(args, p.max_tokens, p.num_seqs, stream);
      });
    });
  });
}

}  // namespace rill::kernels
