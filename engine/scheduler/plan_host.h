// What the step planner may change while it plans, and nothing more: the KV pool's sequences.
// Each admission, preemption and restore changes the pool that later choices of the same step
// read (free blocks, a new sequence's geometry and cached prefix), and the runner may refuse an
// admission or a turn's sampler restart (kResourceExhausted: not now) that the planner must see
// at once; so the planner applies these through this interface while planning and records each
// in the step's decisions (PlannedStep::decisions). The engine loop implements it with the model
// runner and the session keeper (RunnerPlanHost); tests implement it over a bare KvCacheManager
// and call StepPlanner::plan directly.
#pragma once

#include "engine/kv/kv_cache_manager.h"
#include "engine/runner/runner.h"
#include "engine/serving/session_state.h"

namespace rill {

class PlanHost {
 public:
  virtual ~PlanHost() = default;
  virtual const KvCacheManager& kv() const = 0;
  /// Admits a sequence (ModelRunner::add_sequence: throws, changing nothing, when refused).
  virtual void add_sequence(const SequenceSpec& spec) = 0;
  /// Preempts one: frees its blocks (ModelRunner::remove_sequence).
  virtual void remove_sequence(SeqId id) = 0;
  /// A session's new turn on its kept sequence (ModelRunner::restart_sampling).
  virtual void restart_sampling(SeqId id, const SamplingParams& sampling) = 0;
  /// Starts copying an offloaded session cache back (ModelRunner::restore_sequence), and
  /// whether that copy is done.
  virtual void restore_sequence(SeqId id) = 0;
  virtual bool restore_done(SeqId id) = 0;
  /// Frees at least `blocks` pool blocks held by idle sessions other than `keep`'s; true when it
  /// freed any.
  virtual bool reclaim(int blocks, const SessionState* keep) = 0;
  /// ModelRunner::prefill_token_granularity (1 where there is no runner).
  virtual int prefill_token_granularity() const { return 1; }
};

}  // namespace rill
