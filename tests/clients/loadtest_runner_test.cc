// rill-loadtest's load runner over a fake transport that answers every request after a fixed
// delay from a thread of its own (as the real transports call back from theirs): closed-loop
// slots bound the requests in flight, request counts round up to whole conversations whose
// turns carry their history, open loops follow their arrival schedule, and a phase with nothing
// to send ends at once.
#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "clients/rill_loadtest/load_runner.h"
#include "clients/rill_loadtest/summary.h"

namespace rill::loadtest {
namespace {

namespace asio = boost::asio;

// Answers each request with `tokens` tokens in one chunk after `delay`, on its own thread.
class FakeClient final : public StreamClient {
 public:
  FakeClient(Clock::time_point epoch, std::chrono::milliseconds delay)
      : epoch_(epoch),
        delay_(delay),
        work_(asio::make_work_guard(io_)),
        thread_([this] { io_.run(); }) {}

  ~FakeClient() override {
    work_.reset();
    thread_.join();
  }

  void start(const RequestSpec& spec, RequestRecord record, DoneCallback done) override {
    record.start_s = seconds_since(epoch_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      specs_.push_back(spec);
    }
    auto timer = std::make_shared<asio::steady_timer>(io_, delay_);
    timer->async_wait([this, timer, spec, record = std::move(record),
                       done = std::move(done)](const boost::system::error_code&) mutable {
      record.chunk_times_s = {seconds_since(epoch_)};
      record.chunk_tokens = {spec.max_tokens};
      record.output_tokens = spec.max_tokens;
      record.finish_reason = "length";
      record.text = "answer " + std::to_string(record.id);
      record.end_s = seconds_since(epoch_);
      done(std::move(record));
    });
  }

  std::vector<RequestSpec> specs() {
    std::lock_guard<std::mutex> lock(mutex_);
    return specs_;
  }

 private:
  Clock::time_point epoch_;
  std::chrono::milliseconds delay_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<RequestSpec> specs_;
};

Workload make_workload(int turns) {
  WorkloadConfig c;
  c.input_len = parse_length_dist(4, "fixed");
  c.output_len = parse_length_dist(3, "fixed");
  c.turns = turns;
  return Workload(c, {}, {11, 12, 13, 14, 15}, {"one", "two", "three"}, 1.0);
}

// A runner over a fake client that answers after `delay`, for conversations of `turns`.
struct Rig {
  Rig(std::chrono::milliseconds delay, int turns)
      : client(epoch, delay), workload(make_workload(turns)), runner(client, workload, epoch) {}
  Clock::time_point epoch = Clock::now();
  FakeClient client;
  Workload workload;
  LoadRunner runner;
};

TEST(LoadRunner, ClosedLoopKeepsItsSlotsBusy) {
  Rig rig(std::chrono::milliseconds(20), 1);
  LoadPlan plan;
  plan.closed_loop = true;
  plan.concurrency = 4;
  plan.num_requests = 20;
  const PhaseResult r = rig.runner.run(plan);
  ASSERT_EQ(r.records.size(), 20u);
  const RunSummary s = summarize_run(r.records, r.start_s, r.end_s, Slo{});
  EXPECT_EQ(s.max_in_flight, 4);
  EXPECT_EQ(s.completed, 20);
  EXPECT_EQ(s.output_tokens, 60);
  // 20 requests of 20 ms, 4 at a time: about 100 ms.
  EXPECT_GE(r.end_s - r.start_s, 0.095);
  for (const RequestSpec& spec : rig.client.specs()) EXPECT_EQ(spec.prompt_ids.size(), 4u);
}

TEST(LoadRunner, TurnsRoundUpToWholeConversationsWithTheirHistory) {
  Rig rig(std::chrono::milliseconds(1), 3);
  LoadPlan plan;
  plan.closed_loop = true;
  plan.concurrency = 2;
  plan.num_requests = 7;  // 3 conversations of 3 turns
  const PhaseResult r = rig.runner.run(plan);
  ASSERT_EQ(r.records.size(), 9u);
  EXPECT_EQ(r.conversations, 3);
  for (const RequestSpec& spec : rig.client.specs()) {
    ASSERT_TRUE(spec.chat);
    ASSERT_EQ(spec.messages.size() % 2, 1u);  // user, (assistant, user) per later turn
    for (size_t i = 1; i < spec.messages.size(); i += 2) {
      EXPECT_EQ(spec.messages[i].role, "assistant");
      EXPECT_EQ(spec.messages[i].content.rfind("answer ", 0), 0u);
    }
  }
}

TEST(LoadRunner, OpenLoopFollowsTheSchedule) {
  Rig rig(std::chrono::milliseconds(200), 1);
  LoadPlan plan;
  plan.arrivals = {.rate = 100, .constant = true};
  plan.num_requests = 10;
  const PhaseResult r = rig.runner.run(plan);
  ASSERT_EQ(r.records.size(), 10u);
  // Arrivals every 10 ms whatever the 200 ms answers: all 10 in flight together.
  const RunSummary s = summarize_run(r.records, r.start_s, r.end_s, Slo{});
  EXPECT_EQ(s.max_in_flight, 10);
  std::vector<double> starts;
  for (const RequestRecord& rec : r.records) starts.push_back(rec.start_s - r.start_s);
  std::sort(starts.begin(), starts.end());
  // Timers are absolute: a send is never early, and a late wake-up does not delay the rest.
  for (size_t i = 0; i < starts.size(); ++i) {
    EXPECT_GE(starts[i], 0.01 * static_cast<double>(i + 1) - 0.001) << i;
    EXPECT_LE(starts[i], 0.01 * static_cast<double>(i + 1) + 0.05) << i;
  }
}

TEST(LoadRunner, PhaseWithNothingToSendEndsAtOnce) {
  Rig rig(std::chrono::milliseconds(1), 1);
  LoadPlan plan;
  plan.arrivals = {.rate = 0.001, .constant = true};  // first arrival at 1000 s
  plan.duration_s = 0.5;
  const auto t0 = Clock::now();
  const PhaseResult r = rig.runner.run(plan);
  EXPECT_TRUE(r.records.empty());
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 0.4);
}

}  // namespace
}  // namespace rill::loadtest
