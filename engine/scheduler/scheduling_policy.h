// Scheduling policy: the order in which waiting requests are admitted and running ones are
// served, and which running request gives its blocks up when another must grow (preemption).
// The planner (step_planner.h) asks these questions and nothing else about policy, as vLLM's
// RequestQueue separates FCFS from priority scheduling.
//
// Both policies keep the latency-target ordering: among requests otherwise equal, the one whose
// TTFT target leaves the least slack (Sequence::order_deadline, arrival + slack) goes first.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "engine/scheduler/scheduler_config.h"
#include "engine/scheduler/sequence.h"

namespace rill {

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  virtual std::string_view name() const = 0;
  /// Sorts `waiting` into admission order (front first) as of `now` (stable: ties keep their
  /// places).
  virtual void order_waiting(std::vector<SequencePtr>& waiting, Clock::time_point now) const = 0;
  /// True when running sequence `a` is served before `b` (and so outranks it: `b` may be
  /// preempted for `a`, never the reverse). A strict weak order.
  virtual bool runs_before(const Sequence& a, const Sequence& b) const = 0;
  /// Sorts `running` into serving order (stable).
  void order_running(std::vector<SequencePtr>& running) const;
  /// The sequence to preempt so that `for_seq` can grow: of the `candidates` that `for_seq`
  /// runs before, the one served last; nullptr when none. `candidates` may be in any order.
  SequencePtr choose_victim(std::span<const SequencePtr> candidates, const Sequence& for_seq) const;
};

/// First come, first served: arrival order (by order_deadline, then arrival), priorities
/// ignored; the newest running request is preempted first.
class FcfsPolicy final : public SchedulingPolicy {
 public:
  std::string_view name() const override { return "fcfs"; }
  void order_waiting(std::vector<SequencePtr>& waiting, Clock::time_point now) const override;
  bool runs_before(const Sequence& a, const Sequence& b) const override;
};

/// Priority with aging (lower `priority` first). Waiting requests are ordered by effective
/// priority, priority - aging_per_s * seconds since their order_deadline, so a low-priority
/// request is not starved by later high-priority arrivals; running ones by priority. Ties:
/// order_deadline, then arrival. The lowest-priority, newest running request is preempted first.
class PriorityPolicy final : public SchedulingPolicy {
 public:
  explicit PriorityPolicy(double aging_per_s) : aging_per_s_(aging_per_s) {}
  std::string_view name() const override { return "priority"; }
  void order_waiting(std::vector<SequencePtr>& waiting, Clock::time_point now) const override;
  bool runs_before(const Sequence& a, const Sequence& b) const override;

 private:
  double aging_per_s_;
};

/// The policy SchedulerConfig::policy names ("priority" or "fcfs"; kInvalidArgument otherwise).
std::unique_ptr<SchedulingPolicy> make_scheduling_policy(const SchedulerConfig& config);

}  // namespace rill
