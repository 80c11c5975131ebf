// Log-probabilities of a sampled token (StepInput::logprobs) on the host: the CPU runner's
// answer and the reference the CUDA runner's kernel is tested against.
#pragma once

#include <cstdint>
#include <span>

#include "engine/runner/runner.h"

namespace rill {

/// log-softmax of the raw `logits` row ([vocab]) at `token`, and the `top_n` most likely tokens
/// (most likely first, ties to the lower id). The log-sum-exp is summed in fp64. -inf logits are
/// allowed (their logprob is -inf); top_n is clamped to the vocabulary size.
SampleLogprobs compute_logprobs(std::span<const float> logits, int32_t token, int top_n);

}  // namespace rill
