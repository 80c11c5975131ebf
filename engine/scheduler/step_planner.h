// Composes one engine step (iteration-level scheduling): the decode token of every running
// sequence, then prefill chunks of partly prefilled ones, then new admissions from the waiting
// queue, within max_num_seqs, max_num_batched_tokens and the KV pool.
//
// KV budget. A `streaming` sequence needs a constant number of blocks for its whole life: it is
// admitted only when they are all free, and they stay reserved for it (never preempted for
// growth). A `full` sequence is admitted when its whole prefill fits beside the reservations,
// the unfinished prefills of running sequences and a small watermark; when running `full`
// sequences then run out of blocks, the lowest-priority, newest one not yet in this step is
// preempted (its blocks freed; it is recomputed later from prompt + generated tokens, with the
// same sampler state, so its output does not change).
//
// Sessions. A turn of a session continues the session's runner sequence: it is admitted when the
// blocks the sequence still lacks (its growth to sinks + window, or all of them when its cache
// was offloaded to host memory) fit; it restarts the sequence's sampler and feeds the earlier
// turn's final sample (when no step fed it) ahead of the new tokens. At most
// max_restores_per_step restores start per step; a turn is admitted once its copy is done (the
// copy runs beside the steps), and restores for the turns queued behind the head start ahead of
// their admission. When an admission lacks blocks, idle sessions' caches are reclaimed
// (offloaded or dropped) first.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/runner/runner.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/scheduler/sequence.h"

namespace rill {

struct PlannedStep {
  std::vector<StepInput> inputs;
  std::vector<SequencePtr> seqs;  // parallel to inputs
  bool empty() const { return inputs.empty(); }
};

class StepPlanner {
 public:
  /// `fail(seq, error)`: a sequence the runner refused at admission (the loop finishes it).
  /// `reclaim(blocks, keep)`: frees pool blocks held by idle sessions but `keep`; true when it
  /// freed any.
  using Reclaim = std::function<bool(int, const SessionState*)>;
  StepPlanner(ModelRunner& runner, const SchedulerConfig& config,
              std::function<void(const SequencePtr&, const Error&)> fail, Reclaim reclaim);

  /// Moves sequences between `running` and `waiting` (admission, preemption) and returns the
  /// step. `waiting` must be in scheduling order (WaitingOrder). Token spans point into the
  /// sequences and into this planner: valid until the next plan().
  PlannedStep plan(std::vector<SequencePtr>& running, std::vector<SequencePtr>& waiting, Clock::time_point now);

  int64_t preemptions() const { return preemptions_; }
  /// Prefix cache lookups of admitted sequences: tokens looked up and tokens found, in total.
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }

 private:
  struct Budget {
    int tokens;
    int seqs;
  };
  int free_blocks_for_growth(const std::vector<SequencePtr>& running) const;
  int owed_prefill_blocks(const std::vector<SequencePtr>& running) const;
  bool ensure_blocks(const SequencePtr& s, int blocks, std::vector<SequencePtr>& running,
                     std::vector<SequencePtr>& waiting, const std::vector<SequencePtr>& scheduled);
  void preempt(const SequencePtr& s, std::vector<SequencePtr>& waiting);
  int64_t chunk_that_fits(const Sequence& s, int64_t want, int free_blocks) const;
  // Admits `s` into the runner; false when it cannot start now (`shortfall`: the blocks it lacks).
  bool admit(const SequencePtr& s, const std::vector<SequencePtr>& running, Clock::time_point now, int& shortfall);
  bool admit_turn(const SequencePtr& s, int room, int& shortfall);  // a session's turn (`room`: free blocks)
  // `s` starts with `prefix` to feed, of which match->tokens are cached (`queried` looked up).
  void started(const SequencePtr& s, std::vector<int32_t> prefix, Clock::time_point now,
               const std::optional<PrefixMatch>& match = std::nullopt, int64_t queried = 0);
  // The cached blocks `s` can start from (nullopt: prefix caching is off for it).
  std::optional<PrefixMatch> lookup(Sequence& s, std::span<const int32_t> tokens);
  void prefetch_restores(const std::vector<SequencePtr>& running, const std::vector<SequencePtr>& waiting);
  void add_input(PlannedStep& step, const SequencePtr& s, std::span<const int32_t> tokens, bool sample);

  ModelRunner& runner_;
  const SchedulerConfig& config_;
  std::function<void(const SequencePtr&, const Error&)> fail_;
  Reclaim reclaim_;
  int restores_ = 0;  // restores of offloaded session caches started while planning this step
  SeqId next_runner_id_ = 1;
  int64_t preemptions_ = 0;
  std::vector<int32_t> decode_tokens_;  // the step's decode inputs (stable storage)
  int promised_ = 0;                     // blocks the step being planned takes for `full` sequences
  std::optional<PrefixMatch> turn_match_;  // admit_turn's lookup for a session's first turn
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
};

/// Orders `waiting` for scheduling: effective priority (priority - aging_per_s * seconds
/// waited; lower first), then arrival.
void sort_waiting(std::vector<SequencePtr>& waiting, double aging_per_s, Clock::time_point now);

}  // namespace rill
