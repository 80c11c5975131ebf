// RoPE fused with the bias add of the QKV projection and the write of K and V into the paged cache.
#pragma once

#include "rill/kernels/common.h"

namespace rill::kernels {

/// For every token t, in place on its qkv row (q | k | v, heads of head_dim each):
///   q, k, v += bias (when given);
///   q_sink[t] = q rotated at sink_positions[t]   (the in-cache position the paper gives a query
///                                                 when it looks at attention sinks)
///   q rotated at positions[t], k rotated at positions[t];
///   if cache_slot[t] >= 0: k and v stored in the cache at that slot.
/// Rotation (rotate-half convention, first rotary_dim dims of each head, the rest untouched):
///   angle_i = (pos * inv_freq[i]) reduced modulo 2*pi in double precision, so positions of
///   endless streams stay exact;  x_i' = x_i cos - x_{i+r/2} sin,  x_{i+r/2}' = x_{i+r/2} cos + x_i sin.
struct RopeKvParams {
  DType dtype = DType::kF16;
  int num_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  void* qkv = nullptr;                   // [num_tokens, qkv_stride]
  int qkv_stride = 0;                    // elements per row
  const void* qkv_bias = nullptr;        // [(num_heads + 2 * num_kv_heads) * head_dim] or null
  void* q_sink = nullptr;                // [num_tokens, num_heads * head_dim]
  // positions, sink_positions and inv_freq are read before the kernel waits for its predecessor
  // (PDL): no kernel that may still run when this one starts may write them.
  const int64_t* positions = nullptr;    // [num_tokens]
  const int64_t* sink_positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;       // [rotary_dim / 2]
  const int32_t* cache_slot = nullptr;   // [num_tokens]; null or < 0: do not store
  void* cache = nullptr;                 // this layer's cache
  KvCacheLayout layout;
  /// Optional: the step's angles from launch_rope_table (same positions, sink_positions and
  /// inv_freq; its sink half filled wherever q_sink is given), read after the kernel waits for its
  /// predecessor instead of computed by every CTA before it. The same bits either way. For large
  /// steps (prefill), where each token's CTAs would otherwise redo the double-precision angle
  /// reduction in every layer; a decode step hides that work behind the QKV GEMV.
  const float* table = nullptr;  // [num_tokens][4][rotary_dim / 2]
};
cudaError_t launch_rope_kv(const RopeKvParams& p, cudaStream_t stream);

/// The cosines and sines of a step's rotary angles, once per step for every layer's decode
/// attention with RoPE fused in (DecodeAttentionParams::rope), with rope_kv's arithmetic:
///   table[t][0][i] = cos(angle(positions[t], i)),       table[t][1][i] = sin(...),
///   table[t][2][i] = cos(angle(sink_positions[t], i)),  table[t][3][i] = sin(...)
/// for i < rotary_dim / 2 (the sink half only when sink_positions is given).
struct RopeTableParams {
  int num_tokens = 0, rotary_dim = 0;
  const int64_t* positions = nullptr;       // [num_tokens]
  const int64_t* sink_positions = nullptr;  // [num_tokens] or null
  const float* inv_freq = nullptr;          // [rotary_dim / 2]
  float* table = nullptr;                   // [num_tokens][4][rotary_dim / 2]
};
cudaError_t launch_rope_table(const RopeTableParams& p, cudaStream_t stream);

}  // namespace rill::kernels
