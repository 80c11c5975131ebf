// The tensor-core decode kernel's entry point for launch_decode_attention (attention_decode.cu),
// which checks the arguments, fills DecodeArgs and routes GQA groups here (see
// attention_decode_mma.cu for the algorithm).
#pragma once

#include <cuda_runtime.h>

#include "attention_decode_merge.cuh"
#include "rill/kernels/common.h"

namespace rill::kernels::decode_attn {

/// Launches decode_attention_mma_kernel: grid (num_splits, num_kv_heads, num_seqs), the whole GQA
/// group (args.group <= 8 heads, args.head_chunks == 1) in one CTA; head_dim 64 or 128.
cudaError_t launch_decode_attention_mma(const DecodeArgs& args, DType dtype, KvDType cache_dtype,
                                        int head_dim, int num_seqs, int num_kv_heads,
                                        cudaStream_t stream);

}  // namespace rill::kernels::decode_attn
