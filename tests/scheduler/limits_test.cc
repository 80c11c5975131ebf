// The serving engine's duration and queue limits: every duration it takes (queue and stall
// timeouts, session idle TTL, a request's queue timeout) is within [1 ms, 30 days], so that
// `now + duration` cannot wrap the steady clock, deadlines saturate instead of wrapping, and a
// queue of 0 (which refused every request as "overloaded") is refused at start.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "engine/serving/request_validation.h"
#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using std::chrono::milliseconds;

// 9.3e12 ms: the first value past the clock's range (int64 nanoseconds) from a typical uptime.
constexpr milliseconds kWrapping{9'300'000'000'000};

std::string scheduler_error(const SchedulerConfig& c) {
  try {
    validate_scheduler_config(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EngineLimits, DeadlinesSaturateInsteadOfWrapping) {
  const Clock::time_point now = Clock::now();
  EXPECT_EQ(deadline_after(now, kWrapping), Clock::time_point::max());
  EXPECT_EQ(deadline_after(now, milliseconds::max()), Clock::time_point::max());
  EXPECT_EQ(deadline_after(now, kMaxSchedulerDuration), now + kMaxSchedulerDuration);
  EXPECT_EQ(deadline_after(now, milliseconds(5)), now + milliseconds(5));
  EXPECT_EQ(deadline_after(now, milliseconds(-5)), now);
  EXPECT_GT(deadline_after(now, kWrapping), now);
}

TEST(EngineLimits, DurationsPastThirtyDaysAndAnEmptyQueueAreRefused) {
  EXPECT_EQ(scheduler_error({}), "");
  SchedulerConfig c;
  c.queue_timeout = kWrapping;
  EXPECT_NE(scheduler_error(c).find("queue_timeout must be in [1 ms, 30 days]"), std::string::npos);
  c = {};
  c.session_idle_ttl = kWrapping;
  EXPECT_NE(scheduler_error(c).find("session_idle_ttl"), std::string::npos);
  c = {};
  c.stall_timeout = kWrapping;
  EXPECT_NE(scheduler_error(c).find("stall_timeout"), std::string::npos);
  c = {};
  c.max_queued_requests = 0;
  EXPECT_NE(scheduler_error(c).find("max_queued_requests must be > 0"), std::string::npos);
  c = {};
  c.max_queued_prompt_tokens = 0;
  EXPECT_NE(scheduler_error(c).find("max_queued_prompt_tokens must be > 0"), std::string::npos);
  c = {};
  c.queue_timeout = c.session_idle_ttl = c.stall_timeout = kMaxSchedulerDuration;
  EXPECT_EQ(scheduler_error(c), "");
}

TEST(EngineLimits, TheLongestQueueTimeoutServesRequestsAndAWrappingOneIsRefused) {
  const Model& m = testing::default_model();
  MetricsRegistry metrics;
  SchedulerConfig config;
  config.queue_timeout = kMaxSchedulerDuration;
  config.session_idle_ttl = kMaxSchedulerDuration;
  ServingEngine engine(std::make_unique<CpuRunner>(m, CpuRunnerOptions{.num_threads = 1}),
                       *m.tokenizer, config, metrics);
  Request r;
  r.prompt = testing::random_prompt(5, 1);
  r.sampling.temperature = 0;
  r.max_tokens = 4;
  r.ignore_eos = true;
  RequestHandle h = engine.submit(r);
  const testing::Collected c = testing::collect(h);
  EXPECT_EQ(c.final.reason, FinishReason::kLength) << c.final.error_message;
  EXPECT_EQ(c.ids.size(), 4u);
  r.queue_timeout = kWrapping;
  try {
    engine.submit(r);
    ADD_FAILURE() << "a wrapping queue timeout was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("queue_timeout must be in [1 ms, 30 days]"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rill
