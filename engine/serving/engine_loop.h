// The engine loop: the one thread that owns the model runner. Each iteration it takes new
// requests, finishes cancelled and timed-out ones, plans a step, launches it, and then finishes
// the step launched before (two in flight, so the GPU never waits for the host), turning its
// sampled tokens into stop / length decisions and handing them to the output thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/runner/runner.h"
#include "engine/scheduler/scheduler_config.h"
#include "engine/scheduler/scheduling_policy.h"
#include "engine/scheduler/step_planner.h"
#include "engine/serving/engine_metrics.h"
#include "engine/serving/engine_stats.h"
#include "engine/serving/output_processor.h"
#include "engine/serving/runner_plan_host.h"
#include "engine/serving/session_keeper.h"
#include "engine/serving/session_table.h"
#include "engine/util/thread_pool.h"

namespace rill {

class EngineLoop {
 public:
  EngineLoop(ModelRunner& runner, const SchedulerConfig& config, EngineMetrics& metrics,
             OutputProcessor& output, SessionTable& sessions);
  ~EngineLoop();  // stop() if still running

  /// Thread-safe: hand over a new request / a sequence a stop string ended / wake the loop.
  void enqueue(SequencePtr seq);
  void stop_string_matched(SequencePtr seq);
  void wake();
  /// Finishes every request (cancelled, with `message`), waits for steps in flight, ends the
  /// thread.
  void stop(const std::string& message);

  EngineStats stats() const;
  /// Requests handed over and not yet finished by the loop (queued included).
  int64_t pending() const { return pending_.load(); }

 private:
  struct InFlight {
    std::vector<SequencePtr> seqs;  // per input
    std::vector<SeqId> runner_ids;  // per input, at launch
    std::vector<bool> sampled;      // per input
    std::vector<bool> late;         // per input: launched with mask_later
    bool masks_due = false;         // some input is late and supply_masks has not run
    int tokens = 0;
    StepComposition composition;  // for the step-cost model once the runner timed it
    double launch_ms = 0;         // host time of the runner's launch (the trace log shows it)
  };
  void run();
  void take_inbox(std::vector<SequencePtr>& stopped);
  void expire(Clock::time_point now);
  void apply(const StepDecisions& d);  // what the plan host did not apply
  void launch(PlannedStep& step);
  void finish_oldest();
  // The newest step's late masks, from the matchers finish_oldest just advanced.
  void supply_late_masks();
  // A due supply_masks with no masks (the step's samples are dropped): before draining steps.
  void release_late_masks();
  // Feeds the step the runner just timed to the model (`launch_ms`: its launch's host time).
  void learn_step_cost(const StepComposition& c, double launch_ms);
  void finish(const SequencePtr& s, FinishReason reason,
              std::optional<int32_t> stop_token = std::nullopt,
              ErrorCode code = ErrorCode::kInternal, std::string message = {});
  void fail_all(const std::string& message);
  bool constraint_ended(const SequencePtr& s, ConstraintState::Next next);
  bool live_sample(const InFlight& f, size_t k) const;  // input k's sample is the sequence's own
  static bool ends_at_stop_id(const Sequence& s, int32_t tok);
  std::vector<ConstraintState::Next> advance_constraints(const InFlight& f, const StepOutput& out);
  void publish_stats(Clock::time_point now);
  void publish_prefix_cache(const KvStats& kv);
  void flush_output();

  ModelRunner& runner_;
  const SchedulerConfig& config_;
  EngineMetrics& metrics_;
  OutputProcessor& output_;
  SessionKeeper
      sessions_;  // before planner_: the planner reclaims idle sessions' blocks through it
  RunnerPlanHost plan_host_;
  std::unique_ptr<SchedulingPolicy> policy_;
  StepPlanner planner_;
  int64_t preemptions_ = 0;  // preemptions the planner decided, in total
  std::vector<SequencePtr> running_, waiting_;
  std::deque<InFlight> in_flight_;
  OutputBatch batch_;  // what this iteration hands to the output thread

  mutable std::mutex mu_;  // guards the inbox, stop request and stats
  std::condition_variable cv_;
  std::vector<SequencePtr> inbox_, stopped_;
  bool stop_requested_ = false;
  std::string stop_message_;
  EngineStats stats_;
  std::atomic<int64_t> pending_{0};
  std::atomic<int64_t> last_step_ns_{0};  // steady-clock time of the last finished step
  // Recent finished steps and generated tokens, for the rates in stats().
  std::deque<std::pair<Clock::time_point, int>> recent_steps_;
  std::deque<Clock::time_point> recent_finishes_;
  int64_t steps_ = 0;
  int64_t prefix_cache_evictions_ = 0;  // KvStats::cache_evictions at the last publish
  double device_busy_s_ = 0;
  bool cost_model_trusted_ = false;      // logged when it first becomes trusted
  Clock::time_point cost_model_logged_;  // and at debug level now and then
  std::unique_ptr<ThreadPool> mask_pool_;  // grammar masks of a step's constrained sequences
  std::thread thread_;
};

}  // namespace rill
