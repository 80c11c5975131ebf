#include "engine/scheduler/scheduling_policy.h"

#include <algorithm>

#include "engine/error.h"

namespace rill {

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Tight TTFT targets first (order_deadline), then arrival.
bool arrives_before(const Sequence& a, const Sequence& b) {
  if (a.order_deadline != b.order_deadline) return a.order_deadline < b.order_deadline;
  return a.order < b.order;
}

}  // namespace

void SchedulingPolicy::order_running(std::vector<SequencePtr>& running) const {
  std::stable_sort(running.begin(), running.end(),
                   [&](const SequencePtr& a, const SequencePtr& b) { return runs_before(*a, *b); });
}

SequencePtr SchedulingPolicy::choose_victim(std::span<const SequencePtr> candidates,
                                            const Sequence& for_seq) const {
  SequencePtr victim;
  for (const SequencePtr& c : candidates)
    if (c.get() != &for_seq && runs_before(for_seq, *c) && (!victim || !runs_before(*c, *victim)))
      victim = c;
  return victim;
}

void FcfsPolicy::order_waiting(std::vector<SequencePtr>& waiting, Clock::time_point) const {
  std::stable_sort(waiting.begin(), waiting.end(), [](const SequencePtr& a, const SequencePtr& b) {
    return arrives_before(*a, *b);
  });
}

bool FcfsPolicy::runs_before(const Sequence& a, const Sequence& b) const {
  return arrives_before(a, b);
}

void PriorityPolicy::order_waiting(std::vector<SequencePtr>& waiting, Clock::time_point now) const {
  auto effective = [&](const Sequence& s) {
    return s.request.priority - aging_per_s_ * seconds(s.order_deadline, now);
  };
  std::stable_sort(waiting.begin(), waiting.end(), [&](const SequencePtr& a, const SequencePtr& b) {
    const double ea = effective(*a), eb = effective(*b);
    if (ea != eb) return ea < eb;
    return arrives_before(*a, *b);
  });
}

bool PriorityPolicy::runs_before(const Sequence& a, const Sequence& b) const {
  if (a.request.priority != b.request.priority) return a.request.priority < b.request.priority;
  return arrives_before(a, b);
}

std::unique_ptr<SchedulingPolicy> make_scheduling_policy(const SchedulerConfig& config) {
  if (config.policy == "priority") return std::make_unique<PriorityPolicy>(config.aging_per_s);
  if (config.policy == "fcfs") return std::make_unique<FcfsPolicy>();
  throw Error(ErrorCode::kInvalidArgument,
              "scheduler: policy must be priority or fcfs (got '" + config.policy + "')");
}

}  // namespace rill
