// The engine loop's PlanHost: the model runner's sequences, and idle sessions' blocks reclaimed
// through the session keeper.
#pragma once

#include "engine/runner/runner.h"
#include "engine/scheduler/plan_host.h"
#include "engine/serving/session_keeper.h"

namespace rill {

class RunnerPlanHost final : public PlanHost {
 public:
  RunnerPlanHost(ModelRunner& runner, SessionKeeper& sessions)
      : runner_(runner), sessions_(sessions) {}
  const KvCacheManager& kv() const override { return runner_.kv(); }
  void add_sequence(const SequenceSpec& spec) override { runner_.add_sequence(spec); }
  void remove_sequence(SeqId id) override { runner_.remove_sequence(id); }
  void restart_sampling(SeqId id, const SamplingParams& sampling) override {
    runner_.restart_sampling(id, sampling);
  }
  void restore_sequence(SeqId id) override { runner_.restore_sequence(id); }
  bool restore_done(SeqId id) override { return runner_.restore_done(id); }
  bool reclaim(int blocks, const SessionState* keep) override {
    return sessions_.reclaim(blocks, keep);
  }
  int prefill_token_granularity() const override { return runner_.prefill_token_granularity(); }

 private:
  ModelRunner& runner_;
  SessionKeeper& sessions_;
};

}  // namespace rill
