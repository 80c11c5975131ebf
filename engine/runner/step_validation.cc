#include "engine/runner/step_validation.h"

#include <algorithm>
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
    if (in.mask_later && (!in.sample || !in.mask.empty()))
      throw Error(ErrorCode::kInvalidArgument,
                  "sequence " + std::to_string(in.id) + ": mask_later needs `sample` and no mask");
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

std::vector<size_t> validate_late_masks(std::span<const LateMask> masks, std::span<const SeqId> due,
                                        int vocab_size) {
  if (due.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "supply_masks: the last launched step has no mask_later row waiting for a mask");
  const size_t words = (static_cast<size_t>(vocab_size) + 31) / 32;
  std::vector<size_t> rows;
  std::unordered_set<SeqId> seen;
  for (const LateMask& m : masks) {
    const auto it = std::find(due.begin(), due.end(), m.id);
    if (it == due.end())
      throw Error(ErrorCode::kInvalidArgument,
                  "supply_masks: sequence " + std::to_string(m.id) +
                      " is not a mask_later row of the last launched step");
    if (!seen.insert(m.id).second)
      throw Error(ErrorCode::kInvalidArgument,
                  "supply_masks: sequence " + std::to_string(m.id) + " named twice");
    if (m.mask.size() != words)
      throw Error(ErrorCode::kInvalidArgument, "supply_masks: sequence " + std::to_string(m.id) +
                                                   ": a token mask needs " + std::to_string(words) +
                                                   " words (" + std::to_string(m.mask.size()) +
                                                   " given)");
    rows.push_back(static_cast<size_t>(it - due.begin()));
  }
  return rows;
}

void check_no_masks_due(bool due, const char* call) {
  if (due)
    throw Error(ErrorCode::kInvalidArgument,
                std::string(call) +
                    ": the last launched step's mask_later rows are waiting for supply_masks()");
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
