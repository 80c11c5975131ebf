// Drives StepPlanner directly, without a model or runner: a PlanHost over a bare KvCacheManager
// and a launch that appends each input's tokens to the pool and "samples" token 7.
#pragma once

#include <memory>
#include <vector>

#include "engine/scheduler/plan_host.h"
#include "engine/scheduler/step_planner.h"

namespace rill::testing {

class KvOnlyHost final : public PlanHost {
 public:
  KvOnlyHost(int num_blocks, int block_size, int max_context)
      : kv_(num_blocks, block_size, max_context) {}
  const KvCacheManager& kv() const override { return kv_; }
  void add_sequence(const SequenceSpec& spec) override {
    if (refuse_next) {
      const Error e = *refuse_next;
      refuse_next.reset();
      throw e;
    }
    kv_.add_sequence(spec.id, spec.cache, spec.prefix ? &*spec.prefix : nullptr);
    ++added;
  }
  void remove_sequence(SeqId id) override {
    kv_.remove_sequence(id);
    ++removed;
  }
  void restart_sampling(SeqId, const SamplingParams&) override { ++restarts; }
  void restore_sequence(SeqId) override { throw Error(ErrorCode::kInternal, "no offloads here"); }
  bool restore_done(SeqId) override { return true; }
  bool reclaim(int, const SessionState*) override { return false; }

  /// Appends every input to the pool, as a runner's launch would, and gives each sampling input
  /// its token.
  void launch(const PlannedStep& step) {
    for (size_t i = 0; i < step.inputs.size(); ++i) {
      kv_.append(step.inputs[i].id, static_cast<int64_t>(step.inputs[i].tokens.size()));
      if (step.inputs[i].sample) step.seqs[i]->generated.push_back(7);
    }
  }

  std::optional<Error> refuse_next;  // the next add_sequence throws this
  int added = 0, removed = 0, restarts = 0;

 private:
  KvCacheManager kv_;
};

/// A waiting request of `prompt_tokens` tokens (`order`: arrival number).
inline SequencePtr planner_seq(int prompt_tokens, int priority, uint64_t order,
                               int max_tokens = 1000) {
  auto s = std::make_shared<Sequence>();
  s->request.prompt.assign(static_cast<size_t>(prompt_tokens), 5);
  s->request.priority = priority;
  s->request.max_tokens = max_tokens;
  s->request.prefix_caching = false;
  s->order = order;
  s->arrival = Clock::time_point{} + std::chrono::seconds(order);
  s->order_deadline = s->arrival;
  return s;
}

}  // namespace rill::testing
