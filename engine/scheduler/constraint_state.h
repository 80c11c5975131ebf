// The grammar state of one constrained request on the loop thread: its matcher, the forced
// tokens ahead of the grammar, and the mask of the tokens its next sample may take.
//
// The mask always describes the state after every token in Sequence::generated (the matcher
// follows the sampled tokens the loop accepts; outputs of steps dropped at a preemption never
// reach it), so a preempted or restarted sequence needs nothing rebuilt: its next sample is
// masked by the state its generated tokens left.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/grammar/matcher.h"

namespace rill {

class ConstraintState {
 public:
  enum class Next {
    kContinue,  // more tokens allowed
    kComplete,  // the grammar is complete and allows nothing but EOS (or EOS was taken)
    kRejected,  // the token was not allowed (the state is unchanged)
    kStuck,     // nothing allowed, not even EOS (the parser's per-byte item limit)
  };

  /// `forced`: token ids generated first, one per step, before the grammar starts (a special
  /// token such as Mistral's [TOOL_CALLS], which no grammar over text admits).
  ConstraintState(std::shared_ptr<const grammar::CompiledConstraint> c,
                  std::vector<int32_t> forced);

  /// Allowed next tokens: ceil(vocab / 32) words (StepInput::mask).
  std::span<const uint32_t> mask() const { return mask_; }
  /// Advances by a sampled token and recomputes the mask.
  Next advance(int32_t token);
  /// What the current mask allows: kContinue, kComplete or kStuck.
  Next status() const { return status_; }
  /// Host time of the last mask computation, microseconds.
  double last_mask_us() const { return last_mask_us_; }

 private:
  void refill();

  std::shared_ptr<const grammar::CompiledConstraint> c_;
  grammar::GrammarMatcher matcher_;
  std::vector<int32_t> forced_;
  size_t forced_done_ = 0;
  std::vector<uint32_t> mask_;
  Next status_ = Next::kContinue;
  double last_mask_us_ = 0;
};

}  // namespace rill
