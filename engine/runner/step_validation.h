// Checks shared by every runner before a step touches any state.
#pragma once

#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "engine/runner/runner.h"

namespace rill {

/// Throws (kNotFound / kInvalidArgument) unless every input names a known sequence once, has
/// tokens, and every token id is in [0, vocab_size), or is kLastSampled as the only token of a
/// sequence for which `sampled_last` is true (it sampled in the step launched just before), and
/// `logprobs` is in [-1, kMaxTopLogprobs]; `mask` and `mask_later` only with `sample`, not both.
/// Returns (id, token count) per input, as KvCacheManager::check_append takes them.
std::vector<std::pair<SeqId, int64_t>> validate_step(
    std::span<const StepInput> inputs, int vocab_size, const std::function<bool(SeqId)>& known,
    const std::function<bool(SeqId)>& sampled_last);

/// Checks supply_masks' argument against `due`, the ids of the last launched step's mask_later
/// rows (empty: nothing due): throws kInvalidArgument naming the problem. Returns per mask the
/// index of its row in `due`.
std::vector<size_t> validate_late_masks(std::span<const LateMask> masks, std::span<const SeqId> due,
                                        int vocab_size);
/// Throws kInvalidArgument from `call` (launch / finish) while late masks are `due`.
void check_no_masks_due(bool due, const char* call);

/// Throws kInvalidArgument unless the sampling parameters are valid and every generated token id
/// of `spec` is in [0, vocab_size).
void validate_sequence(const SequenceSpec& spec, int vocab_size);

/// Throws kInvalidArgument when `in_flight` steps are already launched and not finished.
void check_launch_room(int in_flight);
/// Throws kInvalidArgument: finish() with no step in flight.
[[noreturn]] void throw_nothing_in_flight();

}  // namespace rill
