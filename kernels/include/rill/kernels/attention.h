// Attention over the paged KV cache with StreamingLLM sinks + window (and plain full caches).
//
// Keys are stored rotated at their stream position. Window keys are scored with the query
// rotated at its stream position (`q`), sink keys with the query rotated at its in-cache
// position (`q_sink`), which reproduces the paper's positions-within-the-cache exactly: only
// relative distances enter RoPE scores, and window distances equal stream distances.
//
// Head dims supported by the dispatch: 64, 80, 96, 128 (and 32, 256 for decode); others return
// cudaErrorInvalidValue with a message ("unsupported head_dim=72"). The CUDA runner checks a
// model against these at load (engine/cuda/cuda_support.h keeps the list: change both together).
#pragma once

#include <cstddef>

#include "rill/kernels/common.h"

namespace rill::kernels {

/// One decoding sequence; its newest token (the query's own k/v) is already in the cache.
/// Keys: sinks at slots [0, num_sink) scored with q_sink, and window tokens with rel index
/// head_rel - d for d in [0, window_count), at slot ring_base + ((rel mod ring_size) + ring_size) % ring_size.
struct DecodeSeq {
  SeqCacheGeometry geo;
  int32_t num_sink = 0;
  int32_t head_rel = 0;
  int32_t window_count = 0;
};

/// RoPE, the QKV bias and the write of each sequence's newest K and V, fused into decode attention
/// (a step of decode rows only; the engine otherwise runs launch_rope_kv first). With `table` set:
///   - q (q_stride) points at each sequence's raw QKV row, [q heads | k heads | v heads] x
///   head_dim,
///     as the QKV projection wrote it; q_sink is not read;
///   - every CTA rotates its heads' q at positions[s] (table[s][0..1]) and, for the sinks, at
///     sink_positions[s] (table[s][2..3]), and the newest key at positions[s], exactly as
///     launch_rope_kv stores them (same arithmetic, same rounding: the output is bit-identical);
///   - the newest key and value are written to the cache (which must be writable) at their slot.
struct DecodeRope {
  const float* table = nullptr;  // [num_seqs][4][rotary_dim / 2] (launch_rope_table), or null
  int rotary_dim = 0;
  const void* qkv_bias = nullptr;  // [(num_heads + 2 * num_kv_heads) * head_dim] or null
};

struct DecodeAttentionParams {
  DType dtype = DType::kF16;
  int num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;                 // usually 1 / sqrt(head_dim)
  const void* q = nullptr;            // row s at q + s * q_stride: [num_heads, head_dim]
  int64_t q_stride = 0;
  const void* q_sink = nullptr;       // row s at q_sink + s * q_sink_stride
  int64_t q_sink_stride = 0;
  const DecodeSeq* seqs = nullptr;    // [num_seqs] device
  const void* cache = nullptr;        // this layer's cache
  KvCacheLayout layout;
  void* out = nullptr;                // [num_seqs, num_heads * head_dim]
  /// Split-K: each (sequence, kv head) is split into `num_splits` parts of at least
  /// `min_keys_per_split` keys (empty parts only report themselves empty); the CTAs of the parts
  /// write partial results to `workspace`, and the last of them to finish merges them in a fixed
  /// order (deterministic; no second kernel). num_splits is fixed per launch so the grid never
  /// depends on data: safe under CUDA graphs.
  int num_splits = 1;
  int min_keys_per_split = 256;
  /// Issue the first K/V loads before waiting for the previous kernel (PDL). Every row but each
  /// sequence's newest (key n_keys - 1, which this step's K/V write produces) must then be
  /// complete before the previous kernel started. false: wait first (for measurements).
  bool early_kv_loads = true;
  /// num_splits <= 8: the splits of one (sequence, kv head) run as a thread-block cluster and
  /// merge through distributed shared memory, not through the workspace (same result, bit for
  /// bit). Used where the device can hold such clusters; false: always the workspace merge.
  bool cluster_merge = true;
  /// num_splits > 1: 16-byte aligned, decode_attention_workspace_bytes(num_seqs, num_heads,
  /// head_dim, num_splits) bytes or more; zeroed once after allocation (cudaMemset), see below.
  void* workspace = nullptr;
  DecodeRope rope;  // see DecodeRope; off by default
  /// Which kernel runs: -1 chooses (tensor cores where decode_mma_supported() holds), 0 the
  /// CUDA-core kernel, 1 the tensor-core kernel (cudaErrorInvalidValue where it does not apply).
  int use_mma = -1;
};
/// Bytes of the split-K workspace (0 when num_splits <= 1). Layout: records of
/// (roundup(head_dim, 4) + 4) floats, 16-byte aligned, indexed [num_splits][num_seqs][num_heads]:
///   acc[head_dim] (padded) | m | l | counter (int32) | unused
/// (unnormalized partial output, base-2 max logit and sum of one split and head). The counter word
/// of record (split 0, seq, h0) counts the finished splits of the CTA group serving the heads from
/// h0 (one group per sequence, kv head and head chunk).
/// Contract: every counter word is zero before the first launch on a workspace (cudaMemset it to
/// zero once at allocation); each launch resets the counters it used, leaving them zero for the
/// next launch or CUDA-graph replay. Partials never land on a counter word, so one workspace sized
/// for the largest num_seqs and num_splits serves launches with any smaller ones, as long as
/// head_dim stays the same (a record's size depends on it). Launches sharing a workspace must be
/// ordered (one stream).
size_t decode_attention_workspace_bytes(int num_seqs, int num_heads, int head_dim, int num_splits);
/// True when decode attention can take RoPE fused in (DecodeRope) for these shapes: each lane's
/// 16 bytes of a head row lie on one side of the rotary halves (rotary_dim / 2 a multiple of 8
/// dims, or of 16 with an fp8 cache).
bool decode_rope_supported(int head_dim, int rotary_dim, KvDType cache_dtype);
/// True when the tensor-core decode kernel serves these shapes: GQA groups of 4 to 8 query heads
/// (the 8 columns of one mma.sync tile), head_dim 64 or 128, with RoPE fused in (DecodeRope) or
/// not. It runs the same math (fp32 softmax, 16-bit P) as prefill attention, one mma per 16 keys
/// and 16 dims instead of 2 * group FMAs per K/V element, so large-batch GQA decode is no longer
/// issue-bound.
bool decode_mma_supported(int num_heads, int num_kv_heads, int head_dim);
cudaError_t launch_decode_attention(const DecodeAttentionParams& p, cudaStream_t stream);

/// One prefill chunk of T tokens at stream positions c0 .. c0 + T - 1. The cache holds the
/// sequence as it was before the chunk; the chunk's own keys/values come from the qkv rows
/// (written to the cache afterwards by launch_kv_write). With kk the key index relative to the
/// chunk (chunk row, or -1 - d for the old token d steps before the chunk) and qq the query row:
///   cache sinks  s in [0, sink_cache):     visible to every query, scored with q_sink;
///   chunk sinks  rows [0, sink_fresh):     visible iff kk <= qq, scored with q_sink;
///   old window   d in [0, cache_window):   rel index old_head_rel - d in the cache, visible iff qq - kk < window;
///   chunk window rows [sink_fresh, T):     visible iff kk <= qq and qq - kk < window; scored with q.
struct PrefillSeq {
  SeqCacheGeometry geo;
  int32_t q_offset = 0;       // first row of the chunk in qkv / q_sink / out
  int32_t num_tokens = 0;     // T
  int32_t sink_cache = 0;
  int32_t sink_fresh = 0;
  int32_t cache_window = 0;
  int32_t old_head_rel = 0;
  int32_t window = 0x7fffffff;
};

struct PrefillAttentionParams {
  DType dtype = DType::kF16;
  int num_seqs = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  const void* qkv = nullptr;          // [total_tokens, qkv_stride]: q (rotated) | k (rotated) | v
  int qkv_stride = 0;
  const void* q_sink = nullptr;       // [total_tokens, num_heads * head_dim]
  const PrefillSeq* seqs = nullptr;   // [num_seqs] device
  const void* cache = nullptr;        // this layer's cache
  KvCacheLayout layout;
  void* out = nullptr;                // [total_tokens, num_heads * head_dim]
  int max_tokens = 0;                 // largest T over the sequences (sizes the grid)
};
cudaError_t launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream);

}  // namespace rill::kernels
