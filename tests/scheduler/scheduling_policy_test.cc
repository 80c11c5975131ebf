// The scheduling-policy seam (scheduling_policy.h): ordering and victims as pure functions, and
// StepPlanner driven directly over a bare KV pool, its decisions returned in the step.
#include "engine/scheduler/scheduling_policy.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/scheduler/planner_harness.h"

namespace rill {
namespace {

using testing::KvOnlyHost;
using testing::planner_seq;

std::vector<uint64_t> orders(const std::vector<SequencePtr>& v) {
  std::vector<uint64_t> out;
  for (const SequencePtr& s : v) out.push_back(s->order);
  return out;
}

TEST(SchedulingPolicy, PriorityOrdersByPriorityThenTightTargetThenArrival) {
  const PriorityPolicy p(0.0);
  std::vector<SequencePtr> w = {planner_seq(4, 1, 1), planner_seq(4, 0, 2), planner_seq(4, 0, 3),
                                planner_seq(4, 0, 4)};
  w[3]->order_deadline = w[1]->order_deadline - std::chrono::seconds(10);  // a tight TTFT target
  p.order_waiting(w, Clock::time_point{} + std::chrono::seconds(5));
  EXPECT_EQ(orders(w), (std::vector<uint64_t>{4, 2, 3, 1}));
}

TEST(SchedulingPolicy, PriorityAgingLetsAnOldLowPriorityRequestAhead) {
  const PriorityPolicy p(1.0);  // one priority level per second waited
  std::vector<SequencePtr> w = {planner_seq(4, 3, 100), planner_seq(4, 0, 1)};
  w[0]->order_deadline = w[0]->arrival = Clock::time_point{};  // waited 10 s: effective -7
  w[1]->order_deadline = w[1]->arrival = Clock::time_point{} + std::chrono::seconds(9);  // -1
  p.order_waiting(w, Clock::time_point{} + std::chrono::seconds(10));
  EXPECT_EQ(orders(w), (std::vector<uint64_t>{100, 1}));
}

TEST(SchedulingPolicy, FcfsIgnoresPriorityButKeepsTightTargetsFirst) {
  const FcfsPolicy p;
  std::vector<SequencePtr> w = {planner_seq(4, 5, 1), planner_seq(4, 0, 2), planner_seq(4, -3, 3)};
  w[2]->order_deadline = w[0]->order_deadline - std::chrono::seconds(1);
  p.order_waiting(w, Clock::time_point{});
  EXPECT_EQ(orders(w), (std::vector<uint64_t>{3, 1, 2}));
}

TEST(SchedulingPolicy, VictimIsTheLastServedBelowTheGrowingOneInAnyCandidateOrder) {
  const PriorityPolicy prio(1.0);
  const FcfsPolicy fcfs;
  const SequencePtr a = planner_seq(4, 0, 3), b = planner_seq(4, 2, 1), c = planner_seq(4, 1, 2);
  const std::vector<SequencePtr> candidates = {b, a, c};
  EXPECT_EQ(prio.choose_victim(candidates, *a), b);  // lowest priority
  EXPECT_EQ(prio.choose_victim(candidates, *c), b);
  EXPECT_EQ(prio.choose_victim(candidates, *b), nullptr);  // nothing ranks below it
  EXPECT_EQ(fcfs.choose_victim(candidates, *b), a);        // the newest
  EXPECT_EQ(fcfs.choose_victim(candidates, *a), nullptr);
  std::vector<SequencePtr> running = candidates;
  prio.order_running(running);
  EXPECT_EQ(orders(running), (std::vector<uint64_t>{3, 2, 1}));
}

TEST(SchedulingPolicy, UnknownPolicyIsRefusedByName) {
  SchedulerConfig c;
  c.policy = "lifo";
  try {
    make_scheduling_policy(c);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("policy"), std::string::npos);
  }
  c.policy = "fcfs";
  EXPECT_EQ(make_scheduling_policy(c)->name(), "fcfs");
}

// Two requests grow until the pool runs out: the policy names who is preempted. `a` arrived
// second with the better priority, `b` first with the worse.
uint64_t first_preempted(const SchedulingPolicy& policy) {
  SchedulerConfig config;
  config.kv_watermark = 0;
  config.tpot_aware = false;
  KvOnlyHost host(/*num_blocks=*/8, /*block_size=*/4, /*max_context=*/1024);
  StepPlanner planner(host, config, policy);
  std::vector<SequencePtr> running, waiting = {planner_seq(6, 1, 1), planner_seq(6, 0, 2)};
  const Clock::time_point now{};
  for (int step = 0; step < 100; ++step) {
    policy.order_waiting(waiting, now);
    const PlannedStep planned = planner.plan(running, waiting, now);
    if (!planned.decisions.preempted.empty()) {
      EXPECT_EQ(host.removed, 1);
      EXPECT_EQ(waiting.size(), 1u);
      EXPECT_EQ(waiting.front(), planned.decisions.preempted.front());
      EXPECT_EQ(waiting.front()->phase, SeqPhase::kWaiting);
      return planned.decisions.preempted.front()->order;
    }
    host.launch(planned);
  }
  ADD_FAILURE() << "no preemption";
  return 0;
}

TEST(StepPlannerDirect, PriorityPreemptsTheWorsePriority) {
  EXPECT_EQ(first_preempted(PriorityPolicy(1.0)), 1u);
}

TEST(StepPlannerDirect, FcfsPreemptsTheNewest) {
  EXPECT_EQ(first_preempted(FcfsPolicy()), 2u);
}

TEST(StepPlannerDirect, AdmissionsAreDecisionsAndRefusalsAreReturnedNotApplied) {
  SchedulerConfig config;
  const PriorityPolicy policy(1.0);
  KvOnlyHost host(64, 4, 1024);
  StepPlanner planner(host, config, policy);
  std::vector<SequencePtr> running, waiting = {planner_seq(6, 0, 1), planner_seq(6, 0, 2)};
  host.refuse_next = Error(ErrorCode::kInvalidArgument, "bad sampling");
  PlannedStep step = planner.plan(running, waiting, Clock::time_point{});
  ASSERT_EQ(step.decisions.failed.size(), 1u);
  EXPECT_EQ(step.decisions.failed[0].seq->order, 1u);
  EXPECT_EQ(step.decisions.failed[0].error.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(step.decisions.admitted.empty());
  EXPECT_TRUE(step.empty());
  EXPECT_EQ(waiting.size(), 2u);  // finishing it is the loop's
  EXPECT_EQ(waiting.front()->phase, SeqPhase::kWaiting);

  waiting.front()->phase = SeqPhase::kFinished;  // as the loop's finish() would
  host.refuse_next = Error(ErrorCode::kResourceExhausted, "no penalty slots");
  step = planner.plan(running, waiting, Clock::time_point{});
  EXPECT_TRUE(step.decisions.failed.empty());  // not now, not refused
  EXPECT_TRUE(step.decisions.admitted.empty());
  ASSERT_EQ(waiting.size(), 1u);

  step = planner.plan(running, waiting, Clock::time_point{});
  ASSERT_EQ(step.decisions.admitted.size(), 1u);
  EXPECT_EQ(step.decisions.admitted[0]->order, 2u);
  EXPECT_EQ(running, step.decisions.admitted);
  EXPECT_TRUE(waiting.empty());
  ASSERT_EQ(step.inputs.size(), 1u);
  EXPECT_EQ(step.inputs[0].tokens.size(), 6u);
  EXPECT_TRUE(step.inputs[0].sample);
  EXPECT_EQ(host.added, 1);
}

}  // namespace
}  // namespace rill

namespace rill {
namespace {

// The planner's kept KV-budget sums (kv_budget.h) equal a walk of the running list after every
// step of random workloads: admissions, prefill chunks, decodes, preemptions and finishes of
// `full` and `streaming` requests in a pool small enough to preempt.
TEST(KvBudget, KeptSumsEqualARecomputationAfterRandomSteps) {
  for (const uint32_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    SchedulerConfig config;
    config.tpot_aware = false;
    config.max_num_batched_tokens = 48;
    config.enable_prefix_caching = false;
    const PriorityPolicy policy(1.0);
    KvOnlyHost host(/*num_blocks=*/40, /*block_size=*/4, /*max_context=*/128);
    StepPlanner planner(host, config, policy);
    std::vector<SequencePtr> running, waiting;
    uint64_t order = 0;
    int preemptions = 0, finished = 0;
    const Clock::time_point now{};
    for (int step = 0; step < 400; ++step) {
      for (int n = std::uniform_int_distribution<int>(0, 2)(rng); n > 0; --n) {
        SequencePtr s = planner_seq(std::uniform_int_distribution<int>(1, 40)(rng),
                                    std::uniform_int_distribution<int>(0, 2)(rng), ++order,
                                    std::uniform_int_distribution<int>(1, 40)(rng));
        if (rng() % 3 == 0) s->request.cache = CachePolicy::streaming(4, 16);
        waiting.push_back(s);
      }
      policy.order_waiting(waiting, now);
      const PlannedStep planned = planner.plan(running, waiting, now);
      ASSERT_EQ(planner.kv_budget(), KvBudget::recompute(host.kv(), running))
          << "seed " << seed << " step " << step;
      preemptions += static_cast<int>(planned.decisions.preempted.size());
      host.launch(planned);
      // The loop's part: finish what reached its length or its context, and a random one.
      for (size_t i = 0; i < running.size();) {
        Sequence& s = *running[i];
        const bool done =
            s.samples_committed() >= s.request.max_tokens || s.at_context_limit || rng() % 50 == 0;
        if (!done) {
          ++i;
          continue;
        }
        host.remove_sequence(s.runner_id);
        s.runner_id = -1;
        s.phase = SeqPhase::kFinished;
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        ++finished;
      }
    }
    EXPECT_GT(preemptions, 0) << "seed " << seed << ": the pool never ran short";
    EXPECT_GT(finished, 50) << "seed " << seed;
  }
}

// An explicit TPOT target is held as a mean over the request: beside a stream that ran ahead of
// its 25 ms target, a long prompt goes in one chunk; beside the same stream run late, the step
// takes only the least prefill (min_prefill_tokens) and the stream catches up. (A synthetic
// device: 10 ms for the decode row, 20 us a prompt token.)
TEST(StepPlanner, ExplicitTpotTargetsLetAStreamAheadOfItsPaceAbsorbALongStep) {
  for (const bool ahead : {true, false}) {
    SchedulerConfig config;
    config.max_num_batched_tokens = 4096;
    const PriorityPolicy policy(1.0);
    KvOnlyHost host(4096, 16, 8192);
    StepPlanner planner(host, config, policy);
    for (int i = 0; i < 40; ++i) {
      StepComposition c;
      c.decode_rows = 1;
      c.decode_keys = 100;
      planner.observe(c, 0.010);
      const int64_t n = i % 2 ? 64 : 512;
      planner.observe(c.with_chunk(n, n * n / 2), (10 + 0.02 * static_cast<double>(n)) * 1e-3);
    }
    ASSERT_TRUE(planner.cost_model().trusted()) << planner.cost_model().describe();
    const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
    std::vector<SequencePtr> running, waiting = {planner_seq(16, 0, 1)};
    host.launch(planner.plan(running, waiting, t0));  // admitted and fed: its first token
    const SequencePtr stream = running.at(0);
    stream->tpot_target = {LatencyTarget::Kind::kFixed, 0.025};
    stream->first_sample_at = t0;
    stream->generated.resize(20, 7);  // 19 intervals since
    waiting.push_back(planner_seq(4000, 0, 2));
    // Ahead: 19 intervals in 100 ms (allowance 22.5 ms x (19 + 64) - 100 ms - 63 x 10 ms =
    // 1,137.5 ms); late: in 2 s (none: 1,867.5 ms - 2 s - 630 ms < 0).
    static_assert(kPaceHorizon == 64);
    const Clock::time_point now = t0 + std::chrono::milliseconds(ahead ? 100 : 2000);
    const PlannedStep step = planner.plan(running, waiting, now);
    ASSERT_EQ(step.inputs.size(), 2u);
    const size_t chunk = step.inputs[1].tokens.size();
    if (ahead)
      EXPECT_EQ(chunk, 4000u);
    else
      EXPECT_EQ(chunk, static_cast<size_t>(config.min_prefill_tokens));
  }
}

// The queue is behind (auto TPOT targets yield) once a request with a TTFT target has waited past
// its ordering slack; batch requests (no TTFT target) and finished ones do not count.
TEST(StepPlanner, BackloggedOnceARequestWithATtftTargetWaitsPastItsOrderingSlack) {
  const SequencePtr auto_ttft = planner_seq(16, 0, 1), batch = planner_seq(16, 0, 2);
  auto_ttft->ttft_target = {LatencyTarget::Kind::kAuto, 0};
  auto_ttft->order_deadline = auto_ttft->arrival + kAutoOrderingTtft;
  batch->order_deadline = batch->arrival;  // none: never counts, however long it waits
  const Clock::time_point due = auto_ttft->order_deadline;
  std::vector<SequencePtr> waiting = {batch};
  EXPECT_FALSE(StepPlanner::backlogged(waiting, due + std::chrono::hours(1)));
  waiting.push_back(auto_ttft);
  EXPECT_FALSE(StepPlanner::backlogged(waiting, due));
  EXPECT_TRUE(StepPlanner::backlogged(waiting, due + std::chrono::milliseconds(1)));
  auto_ttft->phase = SeqPhase::kFinished;  // cancelled while queued
  EXPECT_FALSE(StepPlanner::backlogged(waiting, due + std::chrono::milliseconds(1)));
}

}  // namespace
}  // namespace rill
