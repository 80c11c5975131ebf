// Sampling on the GPU, so full logits never travel to the host. Same semantics as the CPU
// sampler (engine/runner/sampling.h): penalties, temperature, the kept set {p >= tau} with tau the
// largest of the top-k, top-p (within top-k) and min-p thresholds, inverse-CDF sampling in
// token-id order with philox_uniform(seed, step); temperature 0 is argmax (lowest id on ties).
#pragma once

#include "rill/kernels/common.h"

namespace rill::kernels {

/// One row's sampling parameters on the device: the engine's SamplingParams
/// (engine/runner/sampling.h) of the row's sequence, plus its penalty state and draw counter.
struct SamplingRow {
  float temperature = 1.0f;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_k = 0;
  int32_t state_slot = -1;  // row of output_counts / prompt_mask; -1: no penalty state
  uint64_t seed = 0;
  uint64_t step = 0;      // draws this sequence made before
  int32_t mask_row = -1;  // row of token_masks (a constrained sequence); -1: unconstrained
};

/// One launch_sample: the logits of a step's sampled rows, their SamplingRows, the penalty state
/// and where the tokens go.
struct SampleBatch {
  int num_rows = 0, vocab = 0;
  float* logits = nullptr;            // [num_rows, vocab] fp32, modified in place
  const SamplingRow* rows = nullptr;  // [num_rows] device
  int32_t* output_counts = nullptr;  // [num_slots, vocab]: +1 for each sampled token (if slot >= 0)
  const uint8_t* prompt_mask = nullptr;  // [num_slots, vocab]: 1 where the prompt has the token
  int32_t* out_tokens = nullptr;         // [num_rows]
  /// [num_mask_rows, mask_words] allowed-token bitsets of constrained rows (engine/grammar):
  /// bit (id & 31) of word id >> 5. Disallowed logits become -inf after the penalties, and a
  /// masked row never keeps a zero-probability token. Rows with mask_row -1 never read it.
  const uint32_t* token_masks = nullptr;
  int mask_words = 0;  // >= ceil(vocab / 32) when token_masks is set
};
cudaError_t launch_sample(const SampleBatch& p, cudaStream_t stream);

/// prompt_mask[slot, tokens[i]] = 1 for i < num_tokens.
cudaError_t launch_mark_prompt(uint8_t* prompt_mask, int vocab, int slot, const int32_t* tokens,
                               int num_tokens, cudaStream_t stream);

}  // namespace rill::kernels
