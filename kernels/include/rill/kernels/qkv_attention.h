// One decode token's qkv projection (fp8 weights) and its decode attention in one kernel, for
// models without GQA: the kernel boundary between the two becomes a wait, per head, for the
// CTAs that project that head's q, k and v.
#pragma once

#include <cuda_runtime.h>

#include "rill/kernels/attention.h"
#include "rill/kernels/gemv_fp8.h"

namespace rill::kernels {

/// The attention splits of the fused kernel: one per 16 dims of a head (a CTA each, which also
/// projects those 16 dims of the head's q, k and v).
int decode_qkv_attention_splits(int head_dim);

/// True when launch_decode_qkv_attention serves these launches: one sequence of one token
/// (qkv.M == 1, attn.num_seqs == 1), as many kv heads as query heads, head_dim 128, qkv.N ==
/// 3 * num_heads * head_dim, qkv a plain store (kStore, the dtype, no bias, no Fp8NormOut; an
/// Fp8NormIn is taken) into attn.q, x of at most 32 KB (staged in shared memory), attention with
/// RoPE fused in (DecodeRope), a workspace (the splits merge through it; cluster_merge is not
/// read), and attn.num_splits == decode_qkv_attention_splits(head_dim). The launch also needs
/// every CTA (num_heads * splits) resident at once and fails otherwise. qkv's CTA shape and deep_prologue are not read: the
/// GEMV runs launch_gemv_fp8's deep-prologue shape (the same sums).
bool decode_qkv_attention_supported(const Fp8GemvParams& qkv, const DecodeAttentionParams& attn);

/// launch_gemv_fp8(qkv) followed by launch_decode_attention(attn), the same bytes (q, the newest
/// K / V in the cache, the attention output), in one kernel. cudaErrorInvalidValue where
/// decode_qkv_attention_supported does not hold.
cudaError_t launch_decode_qkv_attention(const Fp8GemvParams& qkv, const DecodeAttentionParams& attn,
                                        cudaStream_t stream);

}  // namespace rill::kernels
