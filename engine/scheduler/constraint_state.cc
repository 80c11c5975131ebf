#include "engine/scheduler/constraint_state.h"

#include <algorithm>
#include <chrono>

namespace rill {

ConstraintState::ConstraintState(std::shared_ptr<const grammar::CompiledConstraint> c,
                                 std::vector<int32_t> forced)
    : c_(std::move(c)), matcher_(c_), forced_(std::move(forced)), mask_(c_->vocab->mask_words()) {
  refill();
}

ConstraintState::Next ConstraintState::advance(int32_t token) {
  if (forced_done_ < forced_.size()) {
    if (token != forced_[forced_done_]) return Next::kRejected;
    ++forced_done_;
  } else if (!matcher_.accept(token)) {
    return Next::kRejected;
  }
  refill();
  return status_;
}

void ConstraintState::refill() {
  const auto t0 = std::chrono::steady_clock::now();
  const grammar::Vocabulary& v = *c_->vocab;
  std::fill(mask_.begin(), mask_.end(), 0u);
  if (forced_done_ < forced_.size()) {
    const auto id = static_cast<uint32_t>(forced_[forced_done_]);
    mask_[id >> 5] |= 1u << (id & 31);
    status_ = Next::kContinue;
  } else {
    matcher_.fill_mask(mask_);
    // EOS bits aside, is anything allowed? (Checked word by word; EOS ids are few.)
    bool other = false;
    for (size_t w = 0; w < mask_.size() && !other; ++w) {
      uint32_t bits = mask_[w];
      if (bits == 0) continue;
      for (int32_t e : v.eos_ids())
        if (static_cast<size_t>(e >> 5) == w) bits &= ~(1u << (e & 31));
      other = bits != 0;
    }
    if (other)
      status_ = Next::kContinue;
    else
      status_ = matcher_.can_end() || matcher_.terminated() ? Next::kComplete : Next::kStuck;
  }
  last_mask_us_ =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace rill
