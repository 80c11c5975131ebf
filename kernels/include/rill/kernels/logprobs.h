// Log-probabilities of sampled tokens on the GPU (the log-softmax of raw logits rows), so full
// logits never travel to the host for them: per row the sampled token's log-probability and the
// top N alternatives (most likely first, ties to the lower id), as a compact row of floats.
#pragma once

#include "rill/kernels/common.h"

namespace rill::kernels {

/// Most alternatives one row may ask for.
inline constexpr int kLogprobsMaxTop = 20;

struct LogprobsParams {
  int num_rows = 0;                 // R
  int vocab = 0;                    // V
  int max_top = 0;                  // output row width is 1 + 2 * max_top (<= kLogprobsMaxTop)
  const float* logits = nullptr;    // [R, V] fp32 raw logits (not modified)
  const int32_t* tokens = nullptr;  // [R] the token whose log-probability each row reports
  const int32_t* top_n = nullptr;   // [R] alternatives per row in [0, max_top]; -1 skips the row
  /// [R, 1 + 2 * max_top]: the log-probability of tokens[r] (NaN outside the vocabulary), then
  /// max_top pairs (token id as int32 bits, log-probability), most likely first; pairs past
  /// min(top_n[r], V) hold id -1. Rows with top_n[r] < 0 are left untouched.
  float* out = nullptr;
};

/// One pass over each row (a cluster of up to 8 CTAs splits it): log-sum-exp in fp32, the
/// sampled token's logit, and the exact top-N under the order (logit desc, id asc).
cudaError_t launch_logprobs(const LogprobsParams& p, cudaStream_t stream);

/// dst[r, :] = src[r, :] for the rows with top_n[r] >= 0, both [num_rows, vocab] fp32: keeps the
/// raw logits of the rows that ask for log-probabilities before the sampler edits them in place.
cudaError_t launch_copy_logprob_rows(int num_rows, int vocab, const int32_t* top_n,
                                     const float* src, float* dst, cudaStream_t stream);

}  // namespace rill::kernels
