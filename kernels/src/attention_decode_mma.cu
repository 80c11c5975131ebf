// Decode attention on tensor cores for GQA groups of 4 to 8 query heads (mma.sync m16n8k16, fp32
// accumulators), FlashAttention-2 style, over the paged KV cache with StreamingLLM sinks + ring.
//
// Why: the CUDA-core kernel (attention_decode.cu) does 2 * group FMAs per K/V element per thread;
// at large batch (Llama-3-8B, group 4, 256 sequences) that bounds it by instruction issue, not by
// memory. Here one mma covers 16 keys x 16 dims x 8 heads. Measured on an H100 (rill-attention-
// bench, 32/8 heads, head_dim 128, batch 256 x 387 keys): fp8 cache 0.093 ms a layer against
// 0.145 (73% of copy bandwidth against 47%), bf16 cache 0.162 against 0.162 (84%).
//
// decode_attention_mma_kernel: grid (num_splits, num_kv_heads, num_seqs), 128 threads (4 warps).
// A CTA serves the whole group of one kv head over split s's key range (split_range, as the
// CUDA-core kernel). Keys are enumerated as in attention_decode.cu (sinks j < num_sink at slot j,
// scored with q_sink; window key j at rel index head_rel - (n_keys - 1 - j)), in tiles of 16 keys
// that never mix sinks and window; warp w takes tiles w, w + 4, ... and runs its own cp.async
// pipeline of them through shared memory (only __syncwarp inside the loop). A row's K and V are
// gathered through the block table by the 8 or 16 lanes that copy its 16-byte chunks (whole
// 128-byte lines per instruction); tails are zero-filled and masked.
//
// The group is the N side of the MMAs (transposed FlashAttention: heads are columns, keys and dims
// rows), so an 8-column tile holds groups up to 8 and no MMA work is spent on padding rows:
//   S^T (16 keys x 8 heads)  = K (16 x D, ldmatrix) . Q^T (D x 8, B fragments held in registers);
//   online softmax per column (= head): max over the 8 lanes of a column, fp32, base 2;
//   P^T (16 keys x 8 heads)  = S^T's C fragment packed to 16 bits and transposed in registers
//                              (movmatrix) into the B fragment of the next MMA;
//   O^T (D x 8 heads)       += V^T (D x 16, ldmatrix.trans of V) . P^T.
// Columns past the group hold zero queries: computed, never stored. At the end the 4 warps merge
// (m, l, O) through shared memory in warp order (deterministic), and with several splits the CTA
// hands its partial to the CUDA-core kernel's split merges (workspace + counter, or the cluster
// merge through distributed shared memory; attention_decode_merge.cuh), which give the same bits
// whichever CTA finishes last.
//
// fp8 (e4m3) cache: rows are cp.async'ed raw into the stages (half the bytes of a 16-bit tile,
// so more CTAs fit an SM: occupancy, not pipeline depth, was measured to set the speed) and turned
// into fp16 MMA fragments in registers: ldmatrix of the raw bytes (two e4m3 per b16), then
// cvt.f16x2.e4m3x2 (exact). K's fragments hold dims in the order ldmatrix gives them (Q^T's are
// loaded in the same order; a dot product does not care); V goes through ldmatrix.trans and a
// byte permute, so O^T's rows are dims in that order too, undone when the warps merge. The MMAs
// run in fp16 whatever the activation type: P in [0, 1] and e4m3 values are exact or finer in
// fp16, and bf16 queries are scaled by a power of two into fp16's range (folded into the logit
// scale). k_scale is folded into the logit scale and v_scale into the output, as the CUDA-core
// kernel does.
//
// PDL: the sequence table, block tables and every K/V row but each sequence's newest are no
// output of this step's kernels, so the first tiles are issued before pdl_wait(); the newest row
// (key n_keys - 1) is skipped in those and read directly once the wait has returned, as q is.
// The grid depends only on the launch arguments (CUDA-graph safe).
//
// RoPE fused in (DecodeRope, a separate instance): after pdl_wait() the CTA rotates the group's q
// (and its sink queries) from the raw QKV row into shared memory, one thread an element, and the B
// fragments are loaded from there; the newest key's row is never copied from the cache: the lanes
// that place it compute it from the raw row (rope_kv's arithmetic, see attention_decode_rope.cuh)
// and write it to the cache as well, so the output and the cache are bit-identical to rope_kv
// followed by this kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "attention_decode_merge.cuh"
#include "attention_decode_mma.cuh"
#include "attention_decode_rope.cuh"
#include "attention_mma.cuh"
#include "attention_util.cuh"
#include "dispatch.cuh"
#include "fp8.cuh"
#include "launch.cuh"

namespace rill::kernels::decode_attn {
namespace {

using attn::PagedKv;

constexpr int kWarps = kDecodeThreads / 32;  // 4
constexpr int kTileKeys = 16;                // keys per warp tile: the M of S^T
constexpr int kMaxGroup = 8;                 // heads per CTA: the N of one mma

/// Shared memory of one CTA for head_dim D and cache element type C: per warp, kStages stages of
/// (K, V) rows, [2][kTileKeys][kRowPitch] bytes (16-bit elements, or raw e4m3 bytes), x kWarps.
/// Rows are padded by 16 bytes, which keeps ldmatrix conflict-free. The merge of the warps reuses
/// it: [kWarps][kMaxGroup][D] sums, [kWarps][kMaxGroup] maxima and sums, then the split's partial
/// for the cluster merge ([kMaxGroup][D] sums, [kMaxGroup] (m, l)).
template <int D, typename C>
struct MmaShape {
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(C));
  static constexpr int kRowPitch = kRowBytes + 16;        // bytes
  static constexpr int kVOffset = kTileKeys * kRowPitch;  // bytes from a stage's K to its V
  static constexpr int kStageBytes = 2 * kVOffset;
  // 16-bit: 2 stages (3 CTAs per SM at head_dim 128); fp8: 3 (4 CTAs per SM). More stages cost
  // CTAs per SM and measured slower (H200, 16-bit: 3 stages 17% slower at batch 256; H100, fp8:
  // 4 stages 8% slower; fp8 with 2 stages measured the same as 3).
  static constexpr int kStages = kIsFp8<C> ? 3 : 2;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  // Copies: kChunks lanes per row, one 16-byte chunk each, so that every cp.async instruction
  // reads whole rows (full 128-byte lines; one 32-byte sector per row and instruction left the
  // DRAM bursts half used); kRowsPerPass rows per instruction, kPasses instructions per tile.
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kRowsPerPass = 32 / kChunks;
  static constexpr int kPasses = kTileKeys / kRowsPerPass;
  static constexpr int kMergeFloats = kWarps * kMaxGroup * (D + 2);
  static constexpr int kPartOffset = (kMergeFloats + 3) / 4 * 4;  // floats
  static constexpr int kPartFloats = kMaxGroup * D + 2 * kMaxGroup;
  static constexpr int kMergeBytes = (kPartOffset + kPartFloats) * 4;
  static constexpr int kSmemBytes =
      kWarps * kWarpBytes > kMergeBytes ? kWarps * kWarpBytes : kMergeBytes;
  static_assert(D % 32 == 0 && 32 % kChunks == 0 && kTileKeys % kRowsPerPass == 0,
                "head_dim must be 32, 64 or 128 (256 with an fp8 cache)");
};

/// RoPE fused in: the rotated window and sink queries are rows of kRopePitch elements (the pitch
/// keeps load_q_frags' reads conflict-free).
template <int D>
inline constexpr int kRopePitch = D + 8;
template <typename T, typename C, int D>
inline constexpr bool kRopeRowsFitAStage =
    2 * kMaxGroup * kRopePitch<D> * static_cast<int>(sizeof(T)) <= MmaShape<D, C>::kStageBytes;

/// The CTA's keys as tiles: tiles [0, n_sink) cover the sinks of the range, the rest its window
/// keys; tile `tau` holds keys [begin(tau), min(begin(tau) + 16, end(tau))).
struct KeyTiles {
  int lo, sink_end, n_sink, win_begin, hi, n_tiles;
  __device__ __forceinline__ bool sink(int tau) const { return tau < n_sink; }
  __device__ __forceinline__ int begin(int tau) const {
    return sink(tau) ? lo + tau * kTileKeys : win_begin + (tau - n_sink) * kTileKeys;
  }
  __device__ __forceinline__ int end(int tau) const { return sink(tau) ? sink_end : hi; }
};

/// Per-warp online-softmax state. Lane (g, t) = (lane / 4, lane % 4) holds heads 2t and 2t + 1:
/// acc[i] is O^T's m-tile i (c0, c1: row g; c2, c3: row g + 8; heads 2t, 2t + 1; the rows' dims:
/// out_dim), m the running max of base-2 logits (identical across g), l this lane's share of the
/// running sum (keys g and g + 8 of each tile; summed across g at the end).
template <int D>
struct WarpState {
  float acc[D / 16][4];
  float m[2];
  float l[2];
};

/// The dim of row `row` (0 .. 15) of O^T's m-tile i: 16i + row with a 16-bit cache; with fp8 the
/// order pv_fp8 produces (m-tiles 2b and 2b + 1: the even and the odd dims of 32-dim block b).
template <bool kFp8>
__device__ __forceinline__ int out_dim(int i, int row) {
  if constexpr (kFp8) {
    return 32 * (i / 2) + 16 * (row / 8) + 2 * (row % 8) + i % 2;
  } else {
    return 16 * i + row;
  }
}

/// RoPE fused in (DecodeRope): element d of raw QKV head row x (+ bias b) rotated by the angles of
/// table row `cs`, rounded to T, with roped()'s arithmetic (what rope_kv stores).
template <typename T>
__device__ __forceinline__ float roped_elem(const T* x, const T* b, const float* cs, int half,
                                            int d) {
  float own = to_float(x[d]);
  if (b) own = own + to_float(b[d]);
  if (d < 2 * half) {
    const bool first = d < half;
    const int pd = first ? d + half : d - half, i0 = first ? d : pd;
    float other = to_float(x[pd]);
    if (b) other = other + to_float(b[pd]);
    const float c = cs[i0], sn = cs[half + i0];
    own = first ? rope_first(own, other, c, sn) : rope_second(other, own, c, sn);
  }
  return to_float(from_float<T>(own));
}

/// Q^T's B fragments (k = dims, n = heads) of head h0 + g (zero for g >= nh): qw from q_row and
/// qs from q_sink_row (zero when null). k-step ks covers dims 16ks .. 16ks + 15: with a 16-bit
/// cache qf[ks][0] = dims 16ks + 2t, +1 and qf[ks][1] = 16ks + 8 + 2t, +1 (the MMA's order), in T;
/// with fp8 qf[ks][0] = dims 16ks + 4t, +1 and qf[ks][1] = 16ks + 4t + 2, +3 (the order scores_fp8
/// reads K in), in fp16 times 2^-e, e >= 0 the least that brings the CTA's largest |q| below 2^15
/// (0 for fp16 queries). Returns 2^e. Scalar loads: q rows need no alignment; heads `stride`
/// elements apart.
template <typename T, int D, bool kFp8>
__device__ __forceinline__ float load_q_frags(uint32_t (&qw)[D / 16][2], uint32_t (&qs)[D / 16][2],
                                              const T* q_row, const T* q_sink_row, int h0, int nh,
                                              int stride = D) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float fw[D / 16][4], fs[D / 16][4];
  float amax = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = kFp8 ? 16 * ks + 4 * t + e : 16 * ks + 8 * (e / 2) + 2 * t + e % 2;
      const int64_t at = static_cast<int64_t>(h0 + g) * stride + d;
      fw[ks][e] = g < nh ? to_float(q_row[at]) : 0.0f;
      fs[ks][e] = g < nh && q_sink_row ? to_float(q_sink_row[at]) : 0.0f;
      amax = fmaxf(amax, fmaxf(fabsf(fw[ks][e]), fabsf(fs[ks][e])));
    }
  float inv = 1.0f, scale = 1.0f;
  if constexpr (kFp8 && !std::is_same_v<T, __half>) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (amax >= 32768.0f) {  // bf16 queries beyond fp16's range (exact powers of two)
      const int e = ilogbf(amax) - 14;
      inv = ldexpf(1.0f, -e);
      scale = ldexpf(1.0f, e);
    }
  }
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if constexpr (kFp8) {
        qw[ks][half] = attn::pack2<__half>(fw[ks][2 * half] * inv, fw[ks][2 * half + 1] * inv);
        qs[ks][half] = attn::pack2<__half>(fs[ks][2 * half] * inv, fs[ks][2 * half + 1] * inv);
      } else {
        qw[ks][half] = attn::pack2<T>(fw[ks][2 * half], fw[ks][2 * half + 1]);
        qs[ks][half] = attn::pack2<T>(fs[ks][2 * half], fs[ks][2 * half + 1]);
      }
    }
  return scale;
}

/// Two e4m3 values (the low 16 bits of w, low byte first) as an fp16 pair, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint32_t w) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

/// S^T = K Q^T (16 keys x 8 heads) from a 16-bit K tile (ldmatrix matrices: keys 0-7 / 8-15 x
/// dims 0-7, then dims 8-15); two accumulators halve the dependent MMA chain.
template <typename T, int D>
__device__ __forceinline__ void scores_16bit(const unsigned char* sk,
                                             const uint32_t (&qf)[D / 16][2], float (&s)[4]) {
  constexpr int kPitch = MmaShape<D, T>::kRowPitch / 2;  // elements
  const int lane = threadIdx.x % 32;
  const int ar = (lane & 7) + ((lane >> 3) & 1) * 8, ac = (lane >> 4) * 8;
  const uint32_t k_addr = attn::smem_addr(reinterpret_cast<const T*>(sk) + ar * kPitch + ac);
  float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int ks = 0; ks < D / 16; ks += 2) {
    uint32_t a[4], b[4];
    attn::ldmatrix_x4(a, k_addr + ks * 32);
    attn::ldmatrix_x4(b, k_addr + (ks + 1) * 32);
    attn::mma_16816<T>(s, a, qf[ks][0], qf[ks][1]);
    attn::mma_16816<T>(s2, b, qf[ks + 1][0], qf[ks + 1][1]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] += s2[e];
}

/// S^T = K Q^T from raw e4m3 K rows: ldmatrix of 8 keys x 16 bytes (keys 0-7 / 8-15 x bytes
/// 32b .. 32b + 15, then 32b + 16 ..) gives lane (g, t) bytes 4t .. 4t + 3 of keys g and g + 8,
/// converted into the A fragments of k-steps 2b and 2b + 1 (dims 4t, 4t + 1 as k 2t, 2t + 1 and
/// dims 4t + 2, 4t + 3 as k 2t + 8, 2t + 9; qf holds the queries in that order).
template <int D>
__device__ __forceinline__ void scores_fp8(const unsigned char* sk, const uint32_t (&qf)[D / 16][2],
                                           float (&s)[4]) {
  constexpr int kPitch = MmaShape<D, Fp8>::kRowPitch;
  const int lane = threadIdx.x % 32;
  const int kr = (lane & 7) + ((lane >> 3) & 1) * 8, kc = (lane >> 4) * 16;
  const uint32_t k_addr = attn::smem_addr(sk + kr * kPitch + kc);
  float s2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int b = 0; b < D / 32; ++b) {
    uint32_t r[4];
    attn::ldmatrix_x4(r, k_addr + 32 * b);
    const uint32_t a0[4] = {e4m3x2_to_half2(r[0]), e4m3x2_to_half2(r[1]),
                            e4m3x2_to_half2(r[0] >> 16), e4m3x2_to_half2(r[1] >> 16)};
    const uint32_t a1[4] = {e4m3x2_to_half2(r[2]), e4m3x2_to_half2(r[3]),
                            e4m3x2_to_half2(r[2] >> 16), e4m3x2_to_half2(r[3] >> 16)};
    attn::mma_16816<__half>(s, a0, qf[2 * b][0], qf[2 * b][1]);
    attn::mma_16816<__half>(s2, a1, qf[2 * b + 1][0], qf[2 * b + 1][1]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) s[e] += s2[e];
}

/// Scales S^T (s[0], s[1]: key g, heads 2t, 2t + 1; s[2], s[3]: key g + 8) to base-2 logits,
/// masks keys >= n_valid, updates the online softmax per head (max over the 8 lanes of a column)
/// and returns P^T as the B fragment of the next MMA (k = keys, n = heads): the packed C fragment
/// of keys 0-7 (and 8-15) is an 8x8 matrix (row key g, cols heads 2t, 2t + 1) whose transpose
/// holds keys 2t, 2t + 1 of head g.
template <typename M, int D>
__device__ __forceinline__ void softmax_p(float (&s)[4], int n_valid, float scale_log2,
                                          WarpState<D>& st, uint32_t& p0, uint32_t& p1) {
  const int g = (threadIdx.x % 32) / 4;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    s[e] *= scale_log2;
    if (g + (e >= 2 ? 8 : 0) >= n_valid) s[e] = -INFINITY;
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float mx = fmaxf(s[hh], s[2 + hh]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float m_new = fmaxf(st.m[hh], mx);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // keep exp2 away from inf - inf
    const float alpha = ex2(st.m[hh] - m_use);
    st.m[hh] = m_new;
    s[hh] = ex2(s[hh] - m_use);
    s[2 + hh] = ex2(s[2 + hh] - m_use);
    st.l[hh] = st.l[hh] * alpha + s[hh] + s[2 + hh];
#pragma unroll
    for (int i = 0; i < D / 16; ++i) st.acc[i][hh] *= alpha, st.acc[i][2 + hh] *= alpha;
  }
  p0 = attn::movmatrix_trans(attn::pack2<M>(s[0], s[1]));
  p1 = attn::movmatrix_trans(attn::pack2<M>(s[2], s[3]));
}

/// O^T += V^T P^T from a 16-bit V tile: A = V^T through ldmatrix.trans (matrices: keys 0-7 x
/// dims 0-7, keys 0-7 x dims 8-15, keys 8-15 x dims 0-7, keys 8-15 x dims 8-15 of m-tile i).
template <typename T, int D>
__device__ __forceinline__ void pv_16bit(const unsigned char* sv, uint32_t p0, uint32_t p1,
                                         WarpState<D>& st) {
  constexpr int kPitch = MmaShape<D, T>::kRowPitch / 2;  // elements
  const int lane = threadIdx.x % 32;
  const int vr = (lane & 7) + (lane >> 4) * 8, vc = ((lane >> 3) & 1) * 8;
  const uint32_t v_addr = attn::smem_addr(reinterpret_cast<const T*>(sv) + vr * kPitch + vc);
#pragma unroll
  for (int i = 0; i < D / 16; ++i) {
    uint32_t a[4];
    attn::ldmatrix_x4_trans(a, v_addr + i * 32);
    attn::mma_16816<T>(st.acc[i], a, p0, p1);
  }
}

/// O^T += V^T P^T from raw e4m3 V rows: ldmatrix.trans of 8 keys x 16 bytes (keys 0-7 x bytes
/// 32b .., keys 0-7 x 32b + 16 .., keys 8-15 x 32b .., keys 8-15 x 32b + 16 ..) gives lane (g, t)
/// bytes 2g, 2g + 1 of keys 2t and 2t + 1; a byte permute pairs the two keys of each dim, so the
/// even dims make m-tile 2b's A fragment and the odd dims m-tile 2b + 1's (rows: out_dim<true>).
template <int D>
__device__ __forceinline__ void pv_fp8(const unsigned char* sv, uint32_t p0, uint32_t p1,
                                       WarpState<D>& st) {
  constexpr int kPitch = MmaShape<D, Fp8>::kRowPitch;
  const int lane = threadIdx.x % 32;
  const int vr = (lane & 7) + (lane >> 4) * 8, vc = ((lane >> 3) & 1) * 16;
  const uint32_t v_addr = attn::smem_addr(sv + vr * kPitch + vc);
#pragma unroll
  for (int b = 0; b < D / 32; ++b) {
    uint32_t r[4], even[4], odd[4];
    attn::ldmatrix_x4_trans(r, v_addr + 32 * b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // (key 2t: d, d + 1; key 2t + 1: d, d + 1) -> (d: both keys; d + 1: both keys)
      const uint32_t x = __byte_perm(r[i], 0, 0x3120);
      even[i] = e4m3x2_to_half2(x);
      odd[i] = e4m3x2_to_half2(x >> 16);
    }
    attn::mma_16816<__half>(st.acc[2 * b], even, p0, p1);
    attn::mma_16816<__half>(st.acc[2 * b + 1], odd, p0, p1);
  }
}

/// Merges the warps' states through shared memory (sm, see MmaShape) in warp order and writes
/// the output (one split), the split's partial to shared memory (cluster merge) or to the
/// workspace.
template <typename T, typename C, int D>
__device__ __forceinline__ void merge_warps(const DecodeArgs& a, WarpState<D>& st, float* sm, int nh,
                                            int split, int64_t row0, T* out) {
  using Sh = MmaShape<D, C>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  float* s_acc = sm;                              // [kWarps][kMaxGroup][D]
  float* s_m = s_acc + kWarps * kMaxGroup * D;    // [kWarps][kMaxGroup]
  float* s_l = s_m + kWarps * kMaxGroup;          // [kWarps][kMaxGroup]
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = st.l[hh];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    const int h = 2 * t + hh;
    float* o = s_acc + (warp * kMaxGroup + h) * D;
#pragma unroll
    for (int i = 0; i < D / 16; ++i) {
      o[out_dim<kIsFp8<C>>(i, g)] = st.acc[i][hh];
      o[out_dim<kIsFp8<C>>(i, g + 8)] = st.acc[i][2 + hh];
    }
    if (g == 0) s_m[warp * kMaxGroup + h] = st.m[hh], s_l[warp * kMaxGroup + h] = l;
  }
  __syncthreads();
  combine_parts<T, C, D, kMaxGroup, kWarps>(a, s_acc, s_m, s_l, nh, split, row0,
                                            sm + Sh::kPartOffset, out);
}

/// One warp's pipeline of 16-key tiles through its shared-memory stages (`mine`, S stages of
/// Sh::kStageBytes): local tile `it` is tile warp + it * kWarps of the split's range (KeyTiles).
/// This lane copies chunk c of rows row0 + p * kRowsPerPass of each tile (p < kPasses).
template <typename C, int D>
struct TilePipe {
  using Sh = MmaShape<D, C>;
  static constexpr int S = Sh::kStages, kPasses = Sh::kPasses, kRowsPerPass = Sh::kRowsPerPass;
  const DecodeSeq& sq;
  const PagedKv<C>& kv;
  const KeyTiles& kt;
  int warp, c, row0, n_keys, ring, n_local;
  unsigned char* mine;

  /// Physical slots of this lane's rows of local tile `it`; -1: past the range, or the newest key
  /// when `skip_new` (it is then read directly after pdl_wait()). Window keys of a tile are
  /// consecutive in the ring: one division per tile, then wrap-around adds.
  __device__ __forceinline__ void rows(int it, bool skip_new, int (&ps)[kPasses]) const {
#pragma unroll
    for (int p = 0; p < kPasses; ++p) ps[p] = -1;
    if (it >= n_local) return;
    const int tau = warp + it * kWarps;
    const int jb = kt.begin(tau) + row0, je = kt.end(tau);
    const bool sink = kt.sink(tau);
    unsigned off = sink ? 0u : attn::ring_offset(sq.head_rel - (n_keys - 1 - jb), ring);
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int j = jb + p * kRowsPerPass;
      if (j < je && !(skip_new && j == n_keys - 1))
        ps[p] = kv.phys_slot(sink ? j : sq.geo.ring_base + static_cast<int>(off));
      if (!sink) {
        off += kRowsPerPass;
        while (off >= static_cast<unsigned>(ring)) off -= static_cast<unsigned>(ring);
      }
    }
  }

  __device__ __forceinline__ unsigned char* stage(int it) const {
    return mine + (it % S) * Sh::kStageBytes;
  }

  /// Local tile `it`'s copies (rows `ps`, or zeros), one commit group per tile (empty past the
  /// last, so that group counting stays uniform).
  __device__ __forceinline__ void copy(int it, const int (&ps)[kPasses]) const {
    if (it < n_local) {
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
        const bool valid = ps[p] >= 0;
        const C* k = valid ? kv.k_row_phys(ps[p]) : kv.cache;
        const C* v = valid ? k + kv.kv_stride : kv.cache;
        unsigned char* dst = stage(it) + (row0 + p * kRowsPerPass) * Sh::kRowPitch + c * 16;
        attn::cp_async16(attn::smem_addr(dst), reinterpret_cast<const unsigned char*>(k) + c * 16,
                         valid);
        attn::cp_async16(attn::smem_addr(dst + Sh::kVOffset),
                         reinterpret_cast<const unsigned char*>(v) + c * 16, valid);
      }
    }
    attn::cp_async_commit();
  }

  /// Local tile `it` (one of the S - 1 copied early) without the newest key's row, which the
  /// previous kernel wrote: this lane's chunk of it, read now that the wait has returned.
  /// With RoPE fused in (`rope`, T the activation type) the chunk is computed from the raw QKV
  /// row instead, as rope_kv stores it, and written to the cache too (this CTA is the only one
  /// whose range holds the newest key of its kv head).
  template <typename T = C>
  __device__ __forceinline__ void place_newest(int it, int jb, int je, bool sink,
                                               const DecodeArgs* rope = nullptr, int seq = 0,
                                               int kvh = 0) const {
    const int j_new = n_keys - 1;
    if (j_new < jb || j_new >= min(je, jb + kTileKeys) || (j_new - jb) % kRowsPerPass != row0)
      return;
    const C* k_new =
        kv.k_row(sink ? j_new : sq.geo.ring_base + attn::ring_offset(sq.head_rel, ring));
    unsigned char* dst = stage(it) + (j_new - jb) * Sh::kRowPitch + c * 16;
    if (rope) {
      constexpr int E = 16 / static_cast<int>(sizeof(C));
      const DecodeArgs& a = *rope;
      uint4 kn, vn;
      roped_newest<T, C, E>(static_cast<const T*>(a.q) + seq * a.q_stride,
                            static_cast<const T*>(a.qkv_bias),
                            static_cast<int64_t>(a.num_heads + kvh) * D,
                            static_cast<int64_t>(a.num_heads + a.kv_heads + kvh) * D,
                            a.rope_table + static_cast<int64_t>(seq) * 4 * a.rot_half, a.rot_half,
                            c * E, a.k_scale, a.v_scale, kn, vn);
      *reinterpret_cast<uint4*>(dst) = kn;
      *reinterpret_cast<uint4*>(dst + Sh::kVOffset) = vn;
      unsigned char* w = reinterpret_cast<unsigned char*>(const_cast<C*>(k_new)) + c * 16;
      *reinterpret_cast<uint4*>(w) = kn;
      *reinterpret_cast<uint4*>(w + kv.kv_stride * sizeof(C)) = vn;
      return;
    }
    *reinterpret_cast<uint4*>(dst) =
        *reinterpret_cast<const uint4*>(reinterpret_cast<const unsigned char*>(k_new) + c * 16);
    *reinterpret_cast<uint4*>(dst + Sh::kVOffset) = *reinterpret_cast<const uint4*>(
        reinterpret_cast<const unsigned char*>(k_new + kv.kv_stride) + c * 16);
  }
};

/// One landed tile of `keys` keys (sk, sv): scores with the sink or the window queries, online
/// softmax, O^T += V^T P^T. (Two calls, not a selected array: the fragments stay in registers.)
template <typename T, typename C, int D>
__device__ __forceinline__ void attend_tile(const unsigned char* sk, const unsigned char* sv,
                                            bool sink, int keys, const uint32_t (&qw)[D / 16][2],
                                            const uint32_t (&qs)[D / 16][2], float scale_log2,
                                            WarpState<D>& st) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  uint32_t p0, p1;
  if constexpr (kIsFp8<C>) {
    if (sink) {
      scores_fp8<D>(sk, qs, s);
    } else {
      scores_fp8<D>(sk, qw, s);
    }
    softmax_p<__half, D>(s, keys, scale_log2, st, p0, p1);
    pv_fp8<D>(sv, p0, p1, st);
  } else {
    if (sink) {
      scores_16bit<T, D>(sk, qs, s);
    } else {
      scores_16bit<T, D>(sk, qw, s);
    }
    softmax_p<T, D>(s, keys, scale_log2, st, p0, p1);
    pv_16bit<T, D>(sv, p0, p1, st);
  }
}

/// The split's tiles among the CTA's warps (KeyTiles).
__device__ __forceinline__ KeyTiles key_tiles(KeyRange range, int num_sink) {
  KeyTiles kt;
  kt.lo = range.lo;
  kt.sink_end = min(range.hi, num_sink);
  kt.n_sink = kt.lo < kt.sink_end ? (kt.sink_end - kt.lo + kTileKeys - 1) / kTileKeys : 0;
  kt.win_begin = max(range.lo, num_sink);
  kt.hi = range.hi;
  kt.n_tiles =
      kt.n_sink + (kt.win_begin < kt.hi ? (kt.hi - kt.win_begin + kTileKeys - 1) / kTileKeys : 0);
  return kt;
}

/// RoPE fused in: the group's q heads (raw QKV row `raw` from head h0, + bias) and, with sinks,
/// their sink queries, each element rotated once, by one thread (consecutive threads, consecutive
/// dims: coalesced loads, one round trip), as rope_kv stores it, into [nh][kRopePitch] rows at
/// `rows` (window queries, then the sink queries kMaxGroup rows further) that load_q_frags reads
/// without bank conflicts. `rows` is warp 0's last pipeline stage, which no copy uses before the
/// key loop. (Each lane rotating its own fragments' elements was 5-10 us a layer slower.)
/// Ends with a barrier; returns the window rows.
template <typename T, int D>
__device__ __forceinline__ const T* rotate_queries(const DecodeArgs& a, const T* raw, int seq,
                                                   int h0, int nh, bool sinks, unsigned char* rows) {
  T* rot_w = reinterpret_cast<T*>(rows);
  T* rot_s = rot_w + kMaxGroup * kRopePitch<D>;
  const float* angles = a.rope_table + static_cast<int64_t>(seq) * 4 * a.rot_half;
  const T* bias = static_cast<const T*>(a.qkv_bias);
  for (int i = threadIdx.x; i < nh * D; i += kDecodeThreads) {
    const int h = i / D, d = i % D;
    const T* b = bias ? bias + static_cast<int64_t>(h0 + h) * D : nullptr;
    rot_w[h * kRopePitch<D> + d] =
        from_float<T>(roped_elem<T>(raw + h * D, b, angles, a.rot_half, d));
    if (sinks)
      rot_s[h * kRopePitch<D> + d] =
          from_float<T>(roped_elem<T>(raw + h * D, b, angles + 2 * a.rot_half, a.rot_half, d));
  }
  __syncthreads();
  return rot_w;
}

/// Attends split `split`'s key range (not empty) of sequence `seq` for the group of kv head kvh
/// and writes the output or the split's partial. `smem`: the warps' pipelines, then the merge.
template <typename T, typename C, int D, bool kRope>
__device__ __forceinline__ void attend_range_mma(const DecodeArgs& a, const DecodeSeq& sq,
                                                 KeyRange range, int split, int seq, int kvh,
                                                 T* out, unsigned char* smem) {
  using Sh = MmaShape<D, C>;
  using Pipe = TilePipe<C, D>;
  constexpr int S = Sh::kStages, kPasses = Sh::kPasses;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h0 = kvh * a.group, nh = a.group;
  const int num_sink = max(sq.num_sink, 0);
  const PagedKv<C> kv = head_kv<C, D>(a, sq, kvh);
  const KeyTiles kt = key_tiles(range, num_sink);
  const Pipe pipe{sq,
                  kv,
                  kt,
                  warp,
                  lane % Sh::kChunks,
                  lane / Sh::kChunks,
                  num_sink + max(sq.window_count, 0),
                  sq.geo.ring_size > 0 ? sq.geo.ring_size : 0x7fffffff,
                  warp < kt.n_tiles ? (kt.n_tiles - warp + kWarps - 1) / kWarps : 0,
                  smem + warp * Sh::kWarpBytes};
  const bool early = a.early_kv_loads;  // the newest key (the previous kernel's) is read later

  // Prologue: the first S - 1 tiles (their block-table lookups first, in one round trip).
  int first[S - 1][kPasses], ps[kPasses];
#pragma unroll
  // With RoPE fused in the newest row is never copied: this kernel writes it (place_newest).
  for (int it = 0; it < S - 1; ++it) pipe.rows(it, early || kRope, first[it]);
  pipe.rows(S - 1, kRope, ps);
#pragma unroll
  for (int it = 0; it < S - 1; ++it) pipe.copy(it, first[it]);

  pdl_wait();  // q, the newest K/V row and every global write come after it
  uint32_t qw[D / 16][2], qs[D / 16][2];
  const T* q_sink_row =
      kt.n_sink > 0 && !kRope ? static_cast<const T*>(a.q_sink) + seq * a.q_sink_stride : nullptr;
  const T* q_row = static_cast<const T*>(a.q) + seq * a.q_stride;
  int q_h0 = h0, q_stride = D;
  if constexpr (kRope) {
    static_assert(kRopeRowsFitAStage<T, C, D>);
    q_row = rotate_queries<T, D>(a, q_row + static_cast<int64_t>(h0) * D, seq, h0, nh,
                                 kt.n_sink > 0, smem + (S - 1) * Sh::kStageBytes);
    q_sink_row = kt.n_sink > 0 ? q_row + kMaxGroup * kRopePitch<D> : nullptr;
    q_h0 = 0;
    q_stride = kRopePitch<D>;
  }
  const float scale_log2 =
      a.scale_log2 * load_q_frags<T, D, kIsFp8<C>>(qw, qs, q_row, q_sink_row, q_h0, nh, q_stride);
  if constexpr (kRope) __syncthreads();  // every warp has its q: warp 0's last stage is free again
  if (a.late_dependents) pdl_launch_dependents();

  WarpState<D> st;
#pragma unroll
  for (int i = 0; i < D / 16; ++i) st.acc[i][0] = st.acc[i][1] = st.acc[i][2] = st.acc[i][3] = 0.0f;
  st.m[0] = st.m[1] = -INFINITY;
  st.l[0] = st.l[1] = 0.0f;

  for (int it = 0; it < pipe.n_local; ++it) {
    pipe.copy(it + S - 1, ps);  // into the stage tile it - 1 used (freed by its __syncwarp)
    pipe.rows(it + S, kRope, ps);
    attn::cp_async_wait<S - 1>();  // tile it has landed (this lane's copies)
    const int tau = warp + it * kWarps;
    const int jb = kt.begin(tau), je = kt.end(tau);
    if constexpr (kRope) {
      pipe.template place_newest<T>(it, jb, je, kt.sink(tau), &a, seq, kvh);
    } else {
      if (early && it < S - 1) pipe.place_newest(it, jb, je, kt.sink(tau));
    }
    __syncwarp();  // the tile is complete for every lane
    const unsigned char* sk = pipe.stage(it);
    attend_tile<T, C, D>(sk, sk + Sh::kVOffset, kt.sink(tau), je - jb, qw, qs, scale_log2, st);
    __syncwarp();  // every lane is done with the stage before it is refilled
  }
  attn::cp_async_wait<0>();

  __syncthreads();  // every warp is done with its pipeline: reuse the memory for the merge
  merge_warps<T, C, D>(a, st, reinterpret_cast<float*>(smem), nh, split,
                       static_cast<int64_t>(seq) * a.num_heads + h0, out);
}

// C: the cache element type (T, or Fp8). kRope: RoPE fused in (DecodeRope; a.q points at raw QKV
// rows), a separate instance so that the plain one stays as it was.
template <typename T, typename C, int D, bool kRope>
__global__ void __launch_bounds__(kDecodeThreads) decode_attention_mma_kernel(const DecodeArgs a) {
  if (!a.late_dependents) pdl_launch_dependents();  // see launch.cuh
  if (!a.early_kv_loads) pdl_wait();
  using Sh = MmaShape<D, C>;
  extern __shared__ __align__(16) unsigned char smem[];

  const int split = blockIdx.x, kvh = blockIdx.y, seq = blockIdx.z;
  const int h0 = kvh * a.group, nh = a.group;
  const int64_t row0 = static_cast<int64_t>(seq) * a.num_heads + h0;  // (seq, h0)
  T* out = static_cast<T*>(a.out) + row0 * D;
  float* part = reinterpret_cast<float*>(smem) + Sh::kPartOffset;

  const DecodeSeq sq = a.seqs[seq];
  const int n_keys = max(sq.num_sink, 0) + max(sq.window_count, 0);
  const KeyRange range =
      split_range(n_keys, split, a.num_splits, a.min_keys_per_split, a.block_size);
  if (range.lo < range.hi) {
    attend_range_mma<T, C, D, kRope>(a, sq, range, split, seq, kvh, out, smem);
  } else {  // an empty split, or a sequence without keys
    pdl_wait();
    if (a.num_splits == 1) {
      for (int i = threadIdx.x; i < nh * D; i += kDecodeThreads) out[i] = from_float<T>(0.0f);
    } else if (a.cluster) {
      if (threadIdx.x < nh) part[kMaxGroup * D + 2 * threadIdx.x] = -INFINITY;
    } else if (threadIdx.x < nh) {
      *reinterpret_cast<float2*>(ws_record<D>(a, split, row0 + threadIdx.x) + ws_ml_offset(D)) =
          make_float2(-INFINITY, 0.0f);
    }
  }
  if (a.num_splits > 1 && a.cluster)
    merge_splits_in_cluster<T, D, kMaxGroup>(a, nh, out, part);
  else if (a.num_splits > 1)
    merge_splits_if_last<T, D>(a, row0, nh, out, reinterpret_cast<float*>(smem));
}

template <typename T, typename C, int D, bool kRope>
cudaError_t launch_mma_typed(const DecodeArgs& args, int num_seqs, int num_kv_heads,
                             cudaStream_t stream) {
  constexpr int kSmem = MmaShape<D, C>::kSmemBytes;
  const auto kernel = decode_attention_mma_kernel<T, C, D, kRope>;
  if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem);
      err != cudaSuccess)
    return err;
  // Clusters of the splits of one group when the device can hold them (asked once per split
  // count; see launch_decode_typed in attention_decode.cu), else the workspace merge.
  static std::atomic<int> fits[kMaxClusterSplits + 1] = {};  // 0 unknown, 1 yes, -1 no
  DecodeArgs a = args;
  if (a.cluster && a.num_splits > 1 && a.num_splits <= kMaxClusterSplits) {
    std::atomic<int>& f = fits[a.num_splits];
    if (f.load() == 0)
      f.store(cluster_size_fits(kernel, a.num_splits, kDecodeThreads, kSmem) ? 1 : -1);
    a.cluster = f.load() > 0;
  } else {
    a.cluster = false;
  }
  const dim3 grid(a.num_splits, num_kv_heads, num_seqs);
  const cudaError_t err =
      launch_kernel_in_clusters(dim3(a.cluster ? a.num_splits : 1, 1, 1), kernel, grid,
                                dim3(kDecodeThreads), kSmem, stream, a);
  return err != cudaSuccess ? err : launch_status();
}

}  // namespace

cudaError_t launch_decode_attention_mma(const DecodeArgs& args, DType dtype, KvDType cache_dtype,
                                        int head_dim, int num_seqs, int num_kv_heads,
                                        cudaStream_t stream) {
  if (args.group > kMaxGroup || args.head_chunks != 1)
    return invalid_argument("decode attention (tensor cores): group of " +
                            std::to_string(args.group) + " heads");
  return dispatch_dtype(dtype, [&]<typename T>() {
    return dispatch_kv_dtype<T>(cache_dtype, [&]<typename C>() {
      return dispatch_head_dim(HeadDims<64, 128>{}, head_dim, [&]<int D>() {
        return args.rope_table
                   ? launch_mma_typed<T, C, D, true>(args, num_seqs, num_kv_heads, stream)
                   : launch_mma_typed<T, C, D, false>(args, num_seqs, num_kv_heads, stream);
      });
    });
  });
}

}  // namespace rill::kernels::decode_attn
