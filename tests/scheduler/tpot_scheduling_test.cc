// TPOT-aware scheduling on the CPU engine with a runner whose steps report a synthetic device
// time (a known linear cost): once the step-cost model is warm, prompt chunks are sized so that
// each step stays within the streams' TPOT target, greedy outputs are those of fixed-budget
// chunking, tight TTFT targets are admitted first, and finished requests are judged against
// their targets in the final event and the metrics.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "tests/scheduler/scheduler_test_util.h"
#include "tests/scheduler/step_log.h"

namespace rill {
namespace {

using std::chrono::milliseconds;
using testing::collect;
using testing::Collected;
using testing::random_prompt;

// The synthetic device: 2 ms + 0.1 ms per one-token input, and for a step with longer inputs
// (prefill chunks) 1 ms + 0.02 ms per token of them. `sleep` makes each step also take that
// long in real time (for judging TPOT deterministically).
class TimedRunner final : public testing::ForwardingRunner {
 public:
  using Step = testing::LoggedStep;
  explicit TimedRunner(const Model& m, milliseconds sleep = milliseconds(0), int granularity = 1)
      : ForwardingRunner(m), sleep_(sleep), granularity_(granularity) {}
  int prefill_token_granularity() const override { return granularity_; }

  void launch(std::span<const StepInput> inputs) override {
    Step s = Step::of(inputs);
    s.ms = 2 + 0.1 * s.rows + (s.prefill > 0 ? 1 + 0.02 * static_cast<double>(s.prefill) : 0);
    ForwardingRunner::launch(inputs);
    log_.launched(s);
  }
  StepOutput finish() override {
    StepOutput out = ForwardingRunner::finish();
    if (sleep_.count() > 0) std::this_thread::sleep_for(sleep_);
    log_.finished();
    return out;
  }
  double last_step_device_ms() const override { return log_.last_ms(); }
  std::vector<Step> steps() const { return log_.steps(); }

 private:
  milliseconds sleep_;
  int granularity_;
  testing::StepLog log_;
};

struct TimedEngine {
  explicit TimedEngine(SchedulerConfig config, milliseconds sleep = milliseconds(0),
                       int granularity = 1) {
    const Model& m = testing::default_model();
    config.queue_timeout = std::chrono::hours(1);
    config.min_prefill_tokens = 16;
    config.warmup_prefill_tokens = 32;
    auto r = std::make_unique<TimedRunner>(m, sleep, granularity);
    runner = r.get();
    engine = std::make_unique<ServingEngine>(std::move(r), *m.tokenizer, config, metrics);
  }
  MetricsRegistry metrics{MetricLabels{{"model_name", "rill-shakespeare"}}};
  TimedRunner* runner = nullptr;
  std::unique_ptr<ServingEngine> engine;
};

Request greedy(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

template <typename Pred>
bool wait_for(const ServingEngine& e, Pred pred,
              std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (pred(e.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// Four long streams with a 12 ms TPOT target (synthetic: their decode step is 2.4 ms), then short
// prompts one by one until the cost model is warm.
std::vector<RequestHandle> start_streams(ServingEngine& e, std::optional<milliseconds> tpot) {
  std::vector<RequestHandle> streams;
  for (int i = 0; i < 4; ++i) {
    Request r = greedy(random_prompt(20 + 20 * i, 100 + i), 1'000'000);
    r.cache = CachePolicy::streaming(4, 60);
    r.tpot_target = tpot;
    streams.push_back(e.submit(r));
  }
  EXPECT_TRUE(wait_for(e, [](const EngineStats& s) { return s.running == 4 && s.waiting == 0; }));
  // Prompt lengths whose last chunk is never one token (the synthetic device counts those as
  // decode rows); ten more once the model is trusted, so its fit has settled.
  const int lengths[] = {20, 40, 50, 70, 90};
  int more = 10;
  for (int i = 0; i < 60 && more > 0; ++i) {
    if (e.stats().step_cost_trusted) --more;
    RequestHandle h = e.submit(greedy(random_prompt(lengths[i % 5], 200 + i), 2));
    collect(h);
  }
  EXPECT_TRUE(e.stats().step_cost_trusted);
  return streams;
}

// Feeds a prompt of `tokens` tokens (a StreamingLLM cache, `max_tokens` answered) beside the
// running streams and returns the steps from its submission to its end.
std::vector<TimedRunner::Step> feed_prompt(TimedEngine& t, int tokens, uint32_t seed,
                                           int max_tokens = 2) {
  const size_t from = t.runner->steps().size();
  Request big = greedy(random_prompt(tokens, seed), max_tokens);
  big.cache = CachePolicy::streaming(4, 480);
  RequestHandle h = t.engine->submit(big);
  EXPECT_EQ(collect(h).final.reason, FinishReason::kLength);
  const std::vector<TimedRunner::Step> steps = t.runner->steps();
  return {steps.begin() + static_cast<std::ptrdiff_t>(from), steps.end()};
}

// Streams behind their explicit 12 ms target (every step takes >= 12 ms in real time, and the
// target is held as a mean at 0.9 x 12 ms) allow no more than the least prefill a step: a long
// prompt is fed min_prefill_tokens at a time, and every such step stays within the per-step
// bound. (Streams ahead of their target absorb longer steps: StepPlanner.Explicit* and the
// PrefillBudget tests size those steps.)
TEST(TpotScheduling, StreamsBehindTheirExplicitTargetTakeOnlyTheLeastPrefill) {
  TimedEngine t(scheduler_defaults("cpu"), milliseconds(12));  // min_prefill_tokens 16
  std::vector<RequestHandle> streams = start_streams(*t.engine, milliseconds(12));
  const std::vector<TimedRunner::Step> steps = feed_prompt(t, 450, 7, 4);
  int64_t largest = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].prefill == 0) continue;
    largest = std::max(largest, steps[i].prefill);
    EXPECT_LE(steps[i].ms, 0.9 * 12 + 0.05) << "step " << i << ": " << steps[i].rows << " rows, "
                                            << steps[i].prefill << " prompt tokens";
  }
  EXPECT_GT(largest, 0);
  EXPECT_LE(largest, 16 + 20) << "the least prefill (a short prompt's chunk may come with it)";
  for (RequestHandle& s : streams) s.cancel();
}

// ... unless the prompt has an explicit TTFT target that the least prefill a step would miss
// and a full step meets (synthetic: about 29 steps of 3.7 ms against one of 12.4 ms, for a
// target of 100 ms, which leaves the engine 87 ms to plan its first step, loaded machines
// included): then it is fed alone at the full token budget. A target that passes (5 ms)
// means overload: the server is behind the targets it was given, no TPOT target holds prefill
// back, and the prompt is fed at the full budget as a fixed budget would.
TEST(TpotScheduling, ATtftTargetAtStakeIsFedAtTheFullBudget) {
  for (const int ttft_ms : {100, 5}) {
    TimedEngine t(scheduler_defaults("cpu"), milliseconds(12));
    std::vector<RequestHandle> streams = start_streams(*t.engine, milliseconds(12));
    const size_t from = t.runner->steps().size();
    Request big = greedy(random_prompt(450, 7), 4);
    big.cache = CachePolicy::streaming(4, 480);
    big.ttft_target = milliseconds(ttft_ms);
    RequestHandle h = t.engine->submit(big);
    EXPECT_EQ(collect(h).final.reason, FinishReason::kLength);
    const std::vector<TimedRunner::Step> steps = t.runner->steps();
    int64_t largest = 0;
    for (size_t i = from; i < steps.size(); ++i) largest = std::max(largest, steps[i].prefill);
    EXPECT_GE(largest, 400) << "fed at the full budget";
    const EngineStats st = t.engine->stats();
    if (ttft_ms == 100) {
      EXPECT_GE(st.ttft_overrides, 1);
      EXPECT_EQ(st.overloaded_steps, 0);
    } else {
      EXPECT_EQ(st.ttft_overrides, 0) << "missed either way";
      EXPECT_GE(st.overloaded_steps, 1);
    }
    for (RequestHandle& s : streams) s.cancel();
  }
}

// Auto targets: 2x the steady step of the batch being built. Four streams alone step in 2.4 ms
// (target 0.85 x 4.8 ms: about 35 prompt tokens a step); with 40 requests queued behind the
// prompt the batch will hold 45 rows, a 6.5 ms step (target 11.7 ms: about 400 tokens).
TEST(TpotScheduling, AutoTargetsFollowTheBatchBeingBuiltQueueIncluded) {
  for (const int queued : {0, 40}) {
    TimedEngine t(scheduler_defaults("cpu"));
    std::vector<RequestHandle> streams = start_streams(*t.engine, std::nullopt);
    const size_t from = t.runner->steps().size();
    Request big = greedy(random_prompt(450, 7), 2);
    big.cache = CachePolicy::streaming(4, 480);
    RequestHandle h = t.engine->submit(big);
    std::vector<RequestHandle> small;
    for (int i = 0; i < queued; ++i) small.push_back(t.engine->submit(greedy(random_prompt(8, 500 + i), 2)));
    collect(h);
    for (RequestHandle& x : small) collect(x);
    const std::vector<TimedRunner::Step> steps = t.runner->steps();
    int64_t largest = 0;
    for (size_t i = from; i < steps.size(); ++i) largest = std::max(largest, steps[i].prefill);
    if (queued == 0)
      EXPECT_LE(largest, 60) << "the four streams' own pace";
    else
      EXPECT_GE(largest, 300) << "the pace of the batch the queue will make";
    for (RequestHandle& s : streams) s.cancel();
  }
}

// A runner whose steps with prefill cost the same up to a multiple of 32 tokens (as the CUDA
// runner's GEMM rows, rounded to 64): every step whose chunk the target cut short is topped up
// to a multiple of 32 tokens, decode rows included; only the prompt's last chunk is not.
TEST(TpotScheduling, ChunksFillTheRunnersGranularity) {
  TimedEngine t(scheduler_defaults("cpu"), milliseconds(0), 32);
  std::vector<RequestHandle> streams = start_streams(*t.engine, std::nullopt);
  const std::vector<TimedRunner::Step> steps = feed_prompt(t, 450, 9);
  int64_t fed = 0;
  int cut = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].prefill == 0) continue;
    fed += steps[i].prefill;
    if (fed >= 450) break;  // the last chunk takes what is left
    ++cut;
    EXPECT_EQ((steps[i].rows + steps[i].prefill) % 32, 0)
        << "step " << i << ": " << steps[i].rows << " rows, " << steps[i].prefill << " prompt tokens";
  }
  EXPECT_GT(cut, 2) << "the target cut the prompt into chunks";
  for (RequestHandle& s : streams) s.cancel();
}

TEST(TpotScheduling, WithoutTargetsOrWithTheBudgetOffStepsFillTheTokenBudget) {
  for (const bool aware : {true, false}) {
    SchedulerConfig c = scheduler_defaults("cpu");
    c.tpot_aware = aware;
    TimedEngine t(c);
    // Batch streams (target 0) constrain nothing; with tpot_aware off, targets are ignored.
    std::vector<RequestHandle> streams =
        start_streams(*t.engine, aware ? milliseconds(0) : milliseconds(12));
    int64_t largest = 0;
    for (const TimedRunner::Step& step : feed_prompt(t, 700, 8)) largest = std::max(largest, step.prefill);
    EXPECT_EQ(largest, 512 - 4) << "aware " << aware;  // max_num_batched_tokens less the decodes
    for (RequestHandle& s : streams) s.cancel();
  }
}

TEST(TpotScheduling, GreedyOutputsAreThoseOfFixedBudgetChunking) {
  std::vector<std::vector<int32_t>> outputs[2];
  for (const bool aware : {true, false}) {
    SchedulerConfig c = scheduler_defaults("cpu");
    c.tpot_aware = aware;
    TimedEngine t(c);
    std::vector<RequestHandle> hs;
    for (int i = 0; i < 3; ++i) {
      Request r = greedy(random_prompt(30, 300 + i), 120);
      r.cache = CachePolicy::streaming(4, 60);
      r.tpot_target = milliseconds(5);
      hs.push_back(t.engine->submit(r));
    }
    for (int i = 0; i < 6; ++i)
      hs.push_back(t.engine->submit(greedy(random_prompt(100 + 60 * i, 400 + i), 20)));
    for (RequestHandle& h : hs) outputs[aware ? 0 : 1].push_back(collect(h).ids);
  }
  ASSERT_EQ(outputs[0].size(), outputs[1].size());
  for (size_t i = 0; i < outputs[0].size(); ++i)
    EXPECT_EQ(outputs[0][i], outputs[1][i]) << "request " << i;
}

TEST(TpotScheduling, TightTtftTargetsAreAdmittedFirstAndBatchRequestsLast) {
  SchedulerConfig c = scheduler_defaults("cpu");
  c.max_num_seqs = 1;
  TimedEngine t(c);
  Request blocker = greedy(random_prompt(5, 1), 40);
  RequestHandle hb = t.engine->submit(blocker);
  ASSERT_TRUE(wait_for(*t.engine, [](const EngineStats& s) { return s.running == 1; }));
  Request batch = greedy(random_prompt(5, 2), 3), loose = greedy(random_prompt(5, 3), 3),
          tight = greedy(random_prompt(5, 4), 3);
  batch.ttft_target = milliseconds(0);
  loose.ttft_target = milliseconds(30'000);
  tight.ttft_target = milliseconds(100);
  RequestHandle h_batch = t.engine->submit(batch);
  RequestHandle h_loose = t.engine->submit(loose);
  RequestHandle h_auto = t.engine->submit(greedy(random_prompt(5, 5), 3));  // auto: ordered as 1 s
  RequestHandle h_tight = t.engine->submit(tight);
  const double q_tight = collect(h_tight).final.timings.queue_s,
               q_auto = collect(h_auto).final.timings.queue_s,
               q_loose = collect(h_loose).final.timings.queue_s,
               q_batch = collect(h_batch).final.timings.queue_s;
  EXPECT_LT(q_tight, q_auto);
  EXPECT_LT(q_auto, q_loose);
  EXPECT_LT(q_loose, q_batch);
  collect(hb);
}

double counter(const MetricsRegistry& m, const std::string& name, const std::string& kind) {
  for (const MetricFamily& f : m.snapshot())
    if (f.name == name)
      for (const MetricSeries& s : f.series)
        for (const auto& [k, v] : s.labels)
          if (k == "kind" && v == kind) return s.value;
  return -1;
}

TEST(TpotScheduling, FinishedRequestsAreJudgedAgainstTheirTargets) {
  TimedEngine t(scheduler_defaults("cpu"), milliseconds(4));  // every step takes >= 4 ms
  for (const char* name : {"rill_slo_met_total", "rill_slo_missed_total"})
    for (const char* kind : {"ttft", "tpot"})
      EXPECT_EQ(counter(t.metrics, name, kind), 0) << name << kind;
  Request r = greedy(random_prompt(10, 1), 6);
  r.ttft_target = milliseconds(60'000);
  r.tpot_target = milliseconds(1);
  RequestHandle h = t.engine->submit(r);
  const FinalEvent f = collect(h).final;
  EXPECT_EQ(f.timings.slo.ttft_met, std::optional<bool>(true));
  EXPECT_EQ(f.timings.slo.tpot_met, std::optional<bool>(false));
  EXPECT_DOUBLE_EQ(f.timings.slo.ttft_target_s, 60.0);
  EXPECT_DOUBLE_EQ(f.timings.slo.tpot_target_s, 0.001);
  Request none = greedy(random_prompt(10, 2), 6);
  none.ttft_target = milliseconds(0);
  none.tpot_target = milliseconds(0);
  RequestHandle hn = t.engine->submit(none);
  const FinalEvent fn = collect(hn).final;
  EXPECT_FALSE(fn.timings.slo.ttft_met.has_value() || fn.timings.slo.tpot_met.has_value());
  EXPECT_EQ(counter(t.metrics, "rill_slo_met_total", "ttft"), 1);
  EXPECT_EQ(counter(t.metrics, "rill_slo_missed_total", "tpot"), 1);
  EXPECT_EQ(counter(t.metrics, "rill_slo_missed_total", "ttft"), 0);
  EXPECT_EQ(counter(t.metrics, "rill_slo_met_total", "tpot"), 0);

  // Auto targets are derived once the cost model is warm: 2x the steady step, 2x the unqueued TTFT.
  std::vector<RequestHandle> streams = start_streams(*t.engine, std::nullopt);
  RequestHandle ha = t.engine->submit(greedy(random_prompt(40, 9), 8));
  const FinalEvent fa = collect(ha).final;
  EXPECT_GT(fa.timings.slo.ttft_target_s, 0.0);
  EXPECT_GT(fa.timings.slo.tpot_target_s, 0.0);
  EXPECT_TRUE(fa.timings.slo.ttft_met.has_value() && fa.timings.slo.tpot_met.has_value());
  for (RequestHandle& s : streams) s.cancel();
}

TEST(TpotScheduling, TargetsOutOfRangeAreRefusedNamingTheField) {
  testing::EngineFixture f;
  for (const milliseconds bad : {milliseconds(-1), milliseconds(3'600'001)}) {
    for (const bool ttft : {true, false}) {
      Request r = greedy(random_prompt(5, 1), 2);
      (ttft ? r.ttft_target : r.tpot_target) = bad;
      try {
        f.engine->submit(r);
        ADD_FAILURE() << "accepted " << bad.count();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find(ttft ? "ttft_target" : "tpot_target"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace rill
