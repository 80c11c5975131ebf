#include "engine/scheduler/kv_budget.h"

#include <algorithm>

namespace rill {

int KvBudget::share(const KvCacheManager& kv, const Sequence& s) {
  if (s.request.cache.is_streaming())
    return kv.sequence(s.runner_id).max_blocks - kv.blocks_held(s.runner_id);
  return std::max(0, kv.blocks_needed_now(s.request.cache, static_cast<int64_t>(s.prefix.size())) -
                         kv.blocks_held(s.runner_id) - s.step_blocks);
}

void KvBudget::reset(const std::vector<SequencePtr>& running) {
  sums_ = {};
  for (const SequencePtr& s : running) add(*s);
}

void KvBudget::add(Sequence& s) {
  s.kv_budget_blocks = share(kv_, s);
  sum_of(s) += s.kv_budget_blocks;
}

void KvBudget::update(Sequence& s) {
  sum_of(s) -= s.kv_budget_blocks;
  add(s);
}

void KvBudget::remove(Sequence& s) {
  sum_of(s) -= s.kv_budget_blocks;
  s.kv_budget_blocks = 0;
}

KvBudget::Sums KvBudget::recompute(const KvCacheManager& kv,
                                   const std::vector<SequencePtr>& running) {
  Sums out;
  for (const SequencePtr& s : running)
    (s->request.cache.is_streaming() ? out.reserved : out.owed) += share(kv, *s);
  return out;
}

}  // namespace rill
