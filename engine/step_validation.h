// Checks shared by every runner before a step touches any state.
#pragma once

#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "engine/runner.h"

namespace rill {

/// Throws (kNotFound / kInvalidArgument) unless every input names a known sequence once, has
/// tokens, and every token id is in [0, vocab_size). Returns (id, token count) per input, as
/// KvCacheManager::check_append takes them.
std::vector<std::pair<SeqId, int64_t>> validate_step(std::span<const StepInput> inputs, int vocab_size,
                                                     const std::function<bool(SeqId)>& known);

}  // namespace rill
