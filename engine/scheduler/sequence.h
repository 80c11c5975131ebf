// The engine-side state of one request: what the loop thread schedules. A request's life is one
// state machine, with its transitions in EngineLoop (engine_loop.cc):
//
//   waiting --admit--> running --(prompt fed)--> decoding --finish--> finished
//      ^                  |
//      +----preempt-------+   (KV blocks freed; recomputed from prompt + generated later)
//
// The request (prompt, parameters) and its tokens live here; a runner sequence is one
// *incarnation* (runner_id) of it, so a preempted request comes back under a new id and stale
// outputs of steps still in flight are recognised and dropped. The loop thread owns every field
// below `loop-owned`; the output thread reads only the immutable part.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/runner/runner.h"
#include "engine/scheduler/constraint_state.h"
#include "engine/scheduler/latency_targets.h"
#include "engine/serving/request.h"
#include "engine/serving/request_channel.h"
#include "engine/serving/session_state.h"

namespace rill {

enum class SeqPhase { kWaiting, kRunning, kFinished };

struct Sequence {
  // Immutable after submit.
  Request request;
  std::shared_ptr<RequestChannel> channel;
  uint64_t order = 0;  // arrival number: FCFS among equal priorities, "newest" for preemption
  Clock::time_point arrival;
  Clock::time_point queue_deadline;  // arrival + queue timeout
  std::vector<int32_t> eos_ids;      // the model's EOS ids (empty with ignore_eos)
  KvGeometry geometry;               // of its cache policy (evicted-token accounting)
  SessionPtr session;                // a session's turn: its runner sequence is the session's
  LatencyTarget ttft_target,
      tpot_target;  // the request's, or the server's default (latency_targets.h)
  Clock::time_point
      order_deadline;  // arrival + its TTFT target's ordering slack: queue and chunk order
  std::shared_ptr<const grammar::CompiledConstraint> compiled;  // Request::constraint, compiled

  // Written by the loop, read by the output thread.
  std::atomic<int> preemptions{0};
  std::atomic<double> queue_s{-1};   // arrival -> first scheduled; -1 until then
  // Set by the output thread once the final event is out (a stop string can end a request
  // before the loop knows).
  std::atomic<bool> finalized{false};
  // A session turn: the session's stream length before the turn, and the earlier turn's final
  // sample fed ahead of its prompt (0 or 1), for its evicted-token count. Set at admission.
  std::atomic<int64_t> stream_base{0};
  std::atomic<int> carried_tokens{0};
  // Prompt tokens its first admission took from the prefix cache (Usage::cached_tokens).
  std::atomic<int> cached_tokens{0};
  // Auto latency targets as the loop derived them (seconds; 0: not known), for judging the request.
  std::atomic<double> auto_ttft_target_s{0};
  std::atomic<double> auto_tpot_target_s{0};

  // Loop-owned.
  SeqPhase phase = SeqPhase::kWaiting;
  SeqId runner_id = -1;              // current incarnation; -1 while not in the runner
  std::vector<int32_t> generated;    // sampled tokens known on the host, in order
  std::vector<int32_t> prefix;       // this incarnation's prefill: prompt, then generated ones
  int64_t fed = 0;                   // tokens of `prefix` fed so far (prefill progress)
  int samples_in_flight = 0;         // launched, unfinished steps that sample this sequence
  bool sampled_in_last_launch = false;  // its next input may be kLastSampled
  bool at_context_limit = false;     // `full` cache cannot take another token
  int step_blocks = 0;               // blocks the step being planned will take for it
  int kv_budget_blocks = 0;          // its share of the planner's KV budget sums (kv_budget.h)
  bool counted = false;              // queue time and prompt tokens recorded (first schedule)
  std::optional<int32_t> last_sample;  // the newest sample of this incarnation (session turns)
  std::optional<Clock::time_point> first_sample_at;  // when its first token reached the loop
  double steady_sum_s = 0;  // the steady decode step, summed over the steps that decoded it
  int steady_steps = 0;     // ... and their count (auto TPOT target: factor x the mean)
  // Prefix caching: its chain root, and the hashes of its leading blocks computed so far (kept
  // across admission attempts and incarnations: they depend on the tokens, which only grow).
  std::optional<BlockHash> prefix_root;
  std::vector<BlockHash> prefix_hashes;
  // Structured output (with `compiled`): the grammar state after `generated`, and its mask. A
  // row launched while its previous sample is in flight takes its mask late (EngineLoop).
  std::unique_ptr<ConstraintState> constraint;

  bool prefilling() const { return fed < static_cast<int64_t>(prefix.size()); }
  /// Samples made or under way: the generation length once every step in flight finishes.
  int64_t samples_committed() const { return static_cast<int64_t>(generated.size()) + samples_in_flight; }
};

using SequencePtr = std::shared_ptr<Sequence>;

}  // namespace rill
