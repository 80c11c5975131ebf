// Composes one engine step (iteration-level scheduling): the decode token of every running
// sequence, then prefill chunks of partly prefilled ones, then new admissions from the waiting
// queue, within max_num_seqs, max_num_batched_tokens and the KV pool.
//
// Planning is a function of its inputs: the running and waiting sequences, the KV pool (through
// a PlanHost, plan_host.h, which applies admissions, preemptions, restores and a turn's sampler
// restart while planning, since later choices of the step read their effect on the pool) and
// the scheduling policy (scheduling_policy.h: serving order, admission order, preemption
// victim). It returns the step and its decisions; the loop applies what the host does not
// (finishing refused requests, counting preemptions). It never sees the model runner.
//
// Prefill sizing (prefill_budget.h). The prompt tokens a step takes beside its decodes are as
// many as the step-cost model (step_cost_model.h, fitted from the steps the loop measures)
// predicts keep the step within the tightest TPOT target of the streams decoding in it;
// max_num_batched_tokens bounds them. Chunks and admissions go in order of priority, then TTFT
// target (tight ones first), then arrival. While the queue is backlogged (a request waited past
// its TTFT ordering slack), auto TPOT targets yield and steps fill max_num_batched_tokens
// (throughput first, as the fixed budget); explicit targets always hold.
//
// KV budget. A `streaming` sequence needs a constant number of blocks for its whole life: it is
// admitted only when they are all free, and they stay reserved for it (never preempted for
// growth). A `full` sequence is admitted when its whole prefill fits beside the reservations,
// the unfinished prefills of running sequences and a small watermark; when running `full`
// sequences then run out of blocks, the lowest-priority, newest one not yet in this step is
// preempted (its blocks freed; it is recomputed later from prompt + generated tokens, with the
// same sampler state, so its output does not change).
//
// Structured output. A constrained sequence (Sequence::constraint) is planned like any other:
// when its previous sample is still in flight, the loop launches its row with a late mask
// (StepInput::mask_later) and supplies the mask once that sample is known.
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
#include <vector>

#include "engine/error.h"
#include "engine/runner/runner.h"
#include "engine/scheduler/kv_budget.h"
#include "engine/scheduler/plan_host.h"
#include "engine/scheduler/prefill_budget.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/scheduler/scheduling_policy.h"
#include "engine/scheduler/sequence.h"
#include "engine/scheduler/step_cost_model.h"

namespace rill {

/// What a plan() decided besides the step's inputs, in the order it decided it.
struct StepDecisions {
  struct Failure {
    SequencePtr seq;
    Error error;
  };
  std::vector<SequencePtr> admitted;   // waiting -> running (the host added their sequences)
  std::vector<SequencePtr> preempted;  // running -> waiting (blocks freed; recomputed later)
  std::vector<SequencePtr> restarted;  // session turns whose sampler the host restarted
  std::vector<SeqId> restores;         // offloaded session caches whose copy back started
  std::vector<Failure> failed;         // refused by the host at admission: the loop finishes them
};

struct PlannedStep {
  std::vector<StepInput> inputs;
  std::vector<SequencePtr> seqs;  // parallel to inputs
  int decodes = 0;                // the first `decodes` inputs are decode tokens
  StepComposition composition;    // what the cost model learns from once the step is timed
  double steady_s = 0;            // the steady decode step predicted for this batch (0: unknown)
  StepDecisions decisions;
  bool empty() const { return inputs.empty(); }
};

class StepPlanner {
 public:
  /// `host` and `policy` outlive the planner.
  StepPlanner(PlanHost& host, const SchedulerConfig& config, const SchedulingPolicy& policy);

  /// Moves sequences between `running` and `waiting` (admission, preemption) and returns the
  /// step with its decisions. `running` is put in the policy's serving order; `waiting` must be
  /// in its admission order (SchedulingPolicy::order_waiting). Token spans point into the
  /// sequences and into this planner: valid until the next plan().
  PlannedStep plan(std::vector<SequencePtr>& running, std::vector<SequencePtr>& waiting, Clock::time_point now);

  /// Prefix cache lookups of admitted sequences: tokens looked up and tokens found, in total.
  int64_t prefix_queries() const { return prefix_queries_; }
  /// The KV budget's sums as the last plan() left them (tests compare them with a recomputation).
  const KvBudget::Sums& kv_budget() const { return budget_.sums(); }
  int64_t prefix_hits() const { return prefix_hits_; }
  /// Steps whose prefill filled the token budget because the next prompt's explicit TTFT target
  /// was at stake (ttft_at_stake), in total.
  int64_t ttft_overrides() const { return ttft_overrides_; }

  /// Some queued request with a TTFT target has waited past its ordering slack (its fixed
  /// target, kAutoOrderingTtft for auto): the server is behind its arrivals, and streams with
  /// auto TPOT targets stop holding prefill back (docs/scheduler.md, "Backlog").
  static bool backlogged(const std::vector<SequencePtr>& waiting, Clock::time_point now);
  /// Some request with an explicit TTFT target has no token yet and its target has passed
  /// (queued, or its prompt being fed): the server is behind the targets it was given, and no
  /// TPOT target holds prefill back; steps fill max_num_batched_tokens, as the fixed budget's do
  /// (docs/scheduler.md, "Overload").
  static bool overloaded(const std::vector<SequencePtr>& running,
                         const std::vector<SequencePtr>& waiting, Clock::time_point now);
  /// Steps planned while overloaded(), in total.
  int64_t overloaded_steps() const { return overloaded_steps_; }
  /// A step the runner measured (seconds on the device): the cost model learns from it.
  void observe(const StepComposition& c, double seconds) { cost_model_.observe(c, seconds); }
  const StepCostModel& cost_model() const { return cost_model_; }
  /// The unqueued TTFT (latency_targets.h) of a prompt of `tokens` tokens in a cache of geometry
  /// `g`, beside the streams of the last planned step; 0 while the cost model warms up.
  double unqueued_ttft_s(const KvGeometry& g, int64_t tokens) const {
    return rill::unqueued_ttft_s(cost_model_, last_decodes_, last_limits_, g, tokens);
  }

 private:
  struct Budget {
    int tokens;
    int seqs;
  };
  int free_blocks_for_growth() const;  // O(1): the kept sums (kv_budget.h)
  int owed_prefill_blocks() const;
  bool ensure_blocks(const SequencePtr& s, int blocks, std::vector<SequencePtr>& running,
                     std::vector<SequencePtr>& waiting, const std::vector<SequencePtr>& scheduled,
                     StepDecisions& d);
  void preempt(const SequencePtr& s, std::vector<SequencePtr>& waiting, StepDecisions& d);
  int64_t chunk_that_fits(const Sequence& s, int64_t want, int free_blocks) const;
  // Admits `s` into the runner; false when it cannot start now (`shortfall`: the blocks it lacks).
  bool admit(const SequencePtr& s, const std::vector<SequencePtr>& running, Clock::time_point now,
             int& shortfall, StepDecisions& d);
  // A session's turn (`room`: free blocks).
  bool admit_turn(const SequencePtr& s, int room, int& shortfall, StepDecisions& d);
  // `s` starts with `prefix` to feed, of which match->tokens are cached (`queried` looked up).
  void started(const SequencePtr& s, std::vector<int32_t> prefix, Clock::time_point now,
               const std::optional<PrefixMatch>& match = std::nullopt, int64_t queried = 0);
  // The cached blocks `s` can start from (nullopt: prefix caching is off for it).
  std::optional<PrefixMatch> lookup(Sequence& s, std::span<const int32_t> tokens);
  void prefetch_restores(const std::vector<SequencePtr>& waiting, StepDecisions& d);
  void add_input(PlannedStep& step, const SequencePtr& s, std::span<const int32_t> tokens, bool sample);
  // The step being planned: its inputs and decisions, the sequences it carries, and what is left
  // of the token and sequence budgets.
  struct StepDraft {
    PlannedStep step;
    std::vector<SequencePtr> scheduled;
    Budget b{0, 0};
    const Sequence* urgent = nullptr;  // the prompt whose TTFT is at stake: fed alone
  };
  // plan()'s three parts: the decodes (returns their composition), the chunks of prompts being
  // fed, the admissions (each with its first chunk).
  StepComposition place_decodes(std::vector<SequencePtr>& running, std::vector<SequencePtr>& waiting,
                                Clock::time_point now, StepDraft& d);
  void feed_prompts(std::vector<SequencePtr>& running, std::vector<SequencePtr>& waiting,
                    PrefillBudget& budget, StepDraft& d);
  void admit_prompts(std::vector<SequencePtr>& running, std::vector<SequencePtr>& waiting,
                     Clock::time_point now, PrefillBudget& budget, StepDraft& d);
  void add_chunk(const SequencePtr& s, int64_t n, const KvGeometry& g, int64_t start,
                 PrefillBudget& budget, StepDraft& d);
  // The budget of this step's prefill, once its decodes (`decodes`) are placed; sets
  // d.step.steady_s and d.urgent. `waiting`: requests queued; `backlogged`: see backlogged().
  PrefillBudget prefill_budget(const std::vector<SequencePtr>& running,
                               const std::vector<SequencePtr>& waiting,
                               const StepComposition& decodes, int token_cap, bool backlogged,
                               Clock::time_point now, StepDraft& d);
  // The next prompt whose explicit TTFT target can be met only if this step feeds it at the
  // full token budget, not as the streams' TPOT targets (last_limits_) would; else nullptr.
  const Sequence* ttft_at_stake(const std::vector<SequencePtr>& running,
                     const std::vector<SequencePtr>& waiting, const StepComposition& decodes,
                     Clock::time_point now) const;
  // A decoding sequence's TPOT target and progress (step_limits).
  StreamPace pace(const Sequence& s, Clock::time_point now) const;

  PlanHost& host_;
  const SchedulerConfig& config_;
  const SchedulingPolicy& policy_;
  KvBudget
      budget_;  // reserved and owed blocks of the running sequences, kept as the step is planned
  int restores_ = 0;  // restores of offloaded session caches started while planning this step
  SeqId next_runner_id_ = 1;
  std::vector<int32_t> decode_tokens_;  // the step's decode inputs (stable storage)
  int promised_ = 0;                     // blocks the step being planned takes for `full` sequences
  std::optional<PrefixMatch> turn_match_;  // admit_turn's lookup for a session's first turn
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  StepCostModel cost_model_;
  std::vector<StreamPace> targets_;  // TPOT targets of the step's decoding sequences
  double last_steady_s_ = 0;         // the steady step of the last step planned with one
  StepComposition last_decodes_;        // the last planned step's decodes and limits
  StepLimits last_limits_;
  int64_t ttft_overrides_ = 0;  // steps fed at the full budget for a TTFT at stake
  int64_t overloaded_steps_ = 0;  // steps planned while overloaded()
};

}  // namespace rill
