// Log-probabilities of sampled tokens as the runners return them (StepInput::logprobs) and the
// serving engine hands them to front ends (TokenChunk::logprobs): a leaf header, so that front
// ends take them from the request API (engine/serving/request.h) without the runner interface.
#pragma once

#include <cstdint>
#include <vector>

namespace rill {

/// Most alternatives a step returns per sampled token (StepInput::logprobs).
inline constexpr int kMaxTopLogprobs = 20;

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

/// Log-probabilities of one sampled token under the model's distribution (log-softmax of the raw
/// logits: before penalties, temperature and truncation, as vLLM's default).
struct SampleLogprobs {
  float sampled = 0;              // of the sampled token
  std::vector<TokenLogprob> top;  // the N most likely tokens, most likely first (ties: lower id)
};

}  // namespace rill
