#include "engine/runner/step_validation.h"

#include <string>
#include <unordered_set>

#include "engine/error.h"

namespace rill {

std::vector<std::pair<SeqId, int64_t>> validate_step(
    std::span<const StepInput> inputs, int vocab_size, const std::function<bool(SeqId)>& known,
    const std::function<bool(SeqId)>& sampled_last) {
  std::vector<std::pair<SeqId, int64_t>> appends;
  std::unordered_set<SeqId> seen;
  for (const StepInput& in : inputs) {
    if (!known(in.id)) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(in.id));
    if (in.tokens.empty()) throw Error(ErrorCode::kInvalidArgument, "step input without tokens");
    if (!seen.insert(in.id).second)
      throw Error(ErrorCode::kInvalidArgument, "sequence " + std::to_string(in.id) + " twice in one step");
    if (in.logprobs < -1 || in.logprobs > kMaxTopLogprobs)
      throw Error(ErrorCode::kInvalidArgument, "logprobs " + std::to_string(in.logprobs) + " outside [-1, " +
                                                   std::to_string(kMaxTopLogprobs) + "]");
    if (!in.mask.empty() && (!in.sample || in.mask.size() != (static_cast<size_t>(vocab_size) + 31) / 32))
      throw Error(ErrorCode::kInvalidArgument,
                  "sequence " + std::to_string(in.id) + ": a token mask needs `sample` and " +
                      std::to_string((vocab_size + 31) / 32) + " words (" + std::to_string(in.mask.size()) +
                      " given)");
    if (in.tokens.size() == 1 && in.tokens[0] == kLastSampled) {
      if (!sampled_last(in.id))
        throw Error(ErrorCode::kInvalidArgument,
                    "sequence " + std::to_string(in.id) +
                        ": kLastSampled needs a token it sampled in the step launched just before");
      appends.emplace_back(in.id, 1);
      continue;
    }
    for (int32_t t : in.tokens)
      if (t < 0 || t >= vocab_size)
        throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(t) + " outside the vocabulary");
    appends.emplace_back(in.id, static_cast<int64_t>(in.tokens.size()));
  }
  return appends;
}

void validate_sequence(const SequenceSpec& spec, int vocab_size) {
  spec.sampling.validate();
  for (int32_t t : spec.generated)
    if (t < 0 || t >= vocab_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "generated token id " + std::to_string(t) + " outside the vocabulary");
  if (!spec.prefix) return;
  if (static_cast<int64_t>(spec.prefix_tokens.size()) < spec.prefix->tokens)
    throw Error(ErrorCode::kInvalidArgument,
                "prefix match of " + std::to_string(spec.prefix->tokens) +
                    " tokens without them (" + std::to_string(spec.prefix_tokens.size()) +
                    " given)");
  for (int32_t t : spec.prefix_tokens.first(static_cast<size_t>(spec.prefix->tokens)))
    if (t < 0 || t >= vocab_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "cached token id " + std::to_string(t) + " outside the vocabulary");
}

void check_launch_room(int in_flight) {
  if (in_flight >= ModelRunner::kMaxStepsInFlight)
    throw Error(ErrorCode::kInvalidArgument,
                std::to_string(in_flight) + " steps already in flight: finish() the oldest first");
}

void throw_nothing_in_flight() {
  throw Error(ErrorCode::kInvalidArgument, "finish() without a launched step");
}

}  // namespace rill
