// The two sums of the KV budget the planner checks at every admission and growth
// (step_planner.h, "KV budget"), kept as the step is planned instead of walked from the running
// list each time:
//   reserved: blocks still owed to running `streaming` sequences, their whole life's worth
//             (max_blocks - held): never handed to others;
//   owed:     blocks running `full` sequences still need to finish feeding their prefill beyond
//             this step (needed_now(prefix) - held - step_blocks, at least 0).
// A sequence's share is kept in Sequence::kv_budget_blocks. reset() walks the running list once
// per step (appends at launch and finishes between steps change the shares); add, update and
// remove follow the planner's decisions within the step. recompute() is the walk, for tests.
#pragma once

#include <vector>

#include "engine/kv/kv_cache_manager.h"
#include "engine/scheduler/sequence.h"

namespace rill {

class KvBudget {
 public:
  struct Sums {
    int reserved = 0;
    int owed = 0;
    bool operator==(const Sums&) const = default;
  };

  explicit KvBudget(const KvCacheManager& kv) : kv_(kv) {}

  /// Every share from scratch: the start of a step.
  void reset(const std::vector<SequencePtr>& running);
  /// `s` joined the running sequences (admitted; in the pool).
  void add(Sequence& s);
  /// `s`'s share changed (its prefix or step_blocks): recomputed.
  void update(Sequence& s);
  /// `s` left the running sequences (preempted); call before its blocks are freed.
  void remove(Sequence& s);

  const Sums& sums() const { return sums_; }
  /// The sums walked from the running list (what the kept ones must equal).
  static Sums recompute(const KvCacheManager& kv, const std::vector<SequencePtr>& running);

 private:
  static int share(const KvCacheManager& kv, const Sequence& s);
  int& sum_of(const Sequence& s) {
    return s.request.cache.is_streaming() ? sums_.reserved : sums_.owed;
  }

  const KvCacheManager& kv_;
  Sums sums_;
};

}  // namespace rill
