// Offline generation of one request on a runner: chunked prefill, then decode steps until a
// stop token, max_tokens, the context limit, or the callback cancels. rill-run uses it; the
// scheduler drives runners directly with many sequences per step.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/kv/cache_policy.h"
#include "engine/runner/runner.h"
#include "engine/runner/sampling.h"

namespace rill {


struct GenerationRequest {
  std::vector<int32_t> prompt;          // token ids, BOS included if the model wants one
  SamplingParams sampling;
  CachePolicy cache;
  int max_tokens = 256;
  std::vector<int32_t> stop_token_ids;  // generation ends after one of these (it is not emitted)
  bool ignore_eos = false;              // do not stop on stop_token_ids
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (the stop token included, when one ended it)
  FinishReason finish = FinishReason::kLength;
  int prompt_tokens = 0;
  double ttft_s = 0;   // request start to the first generated token
  double tpot_s = 0;   // mean time per output token after the first
  double total_s = 0;
};

/// Called for each generated token that is not a stop token; return false to cancel.
using TokenCallback = std::function<bool(int32_t token)>;

/// Runs `req` as sequence `id` on `runner` (which must not know `id`); the sequence is removed
/// before returning, also on error. Throws kOutOfRange if the prompt alone exceeds the context.
GenerationResult generate(ModelRunner& runner, SeqId id, const GenerationRequest& req, const TokenCallback& on_token,
                          int prefill_chunk = 512);

}  // namespace rill
