// rill-loadtest's long-lived streams (--streams) over a fake transport whose streams emit a
// token every 5 ms until stopped: start waits for every first token and the settle time, stop
// returns cancelled records, and the before / during figures come from the right gaps; a stream
// that fails before the load fails the start. Also the histogram quantiles of /metrics deltas
// and the --targets parser.
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "clients/rill_loadtest/background_streams.h"
#include "clients/rill_loadtest/prom_text.h"

namespace rill::loadtest {
namespace {

namespace asio = boost::asio;

// Streams (requests with a control): a one-token chunk every `period` until stopped, then a
// cancelled record. `fail_stream`: that stream errors out after its second chunk instead.
class FakeStreams final : public StreamClient {
 public:
  FakeStreams(Clock::time_point epoch, std::chrono::milliseconds period, int fail_stream = -1)
      : epoch_(epoch),
        period_(period),
        fail_(fail_stream),
        work_(asio::make_work_guard(io_)),
        thread_([this] { io_.run(); }) {}
  ~FakeStreams() override {
    work_.reset();
    thread_.join();
  }
  void start(const RequestSpec& spec, RequestRecord record, DoneCallback done) override {
    record.start_s = seconds_since(epoch_);
    auto state = std::make_shared<State>(
        State{asio::steady_timer(io_), spec, std::move(record), std::move(done)});
    tick(state);
  }

 private:
  struct State {
    asio::steady_timer timer;
    RequestSpec spec;
    RequestRecord record;
    DoneCallback done;
  };
  void tick(const std::shared_ptr<State>& s) {
    s->timer.expires_after(period_);
    s->timer.async_wait([this, s](const boost::system::error_code&) {
      s->record.chunk_times_s.push_back(seconds_since(epoch_));
      s->record.chunk_tokens.push_back(1);
      s->spec.control->started.store(true);
      if (s->record.id == fail_ && s->record.chunk_times_s.size() == 2) {
        s->record.error = "stream error";
        return finish(s);
      }
      if (s->spec.control->stop.load()) {
        s->record.cancelled = true;
        return finish(s);
      }
      tick(s);
    });
  }
  void finish(const std::shared_ptr<State>& s) {
    s->record.end_s = seconds_since(epoch_);
    s->record.output_tokens = s->record.tokens_received();
    s->done(std::move(s->record));
  }

  Clock::time_point epoch_;
  std::chrono::milliseconds period_;
  int fail_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
};

Workload test_workload() {
  WorkloadConfig c;
  c.input_len = parse_length_dist(8, "fixed");
  c.output_len = parse_length_dist(4, "fixed");
  return Workload(c, {}, {1, 2, 3, 4, 5}, {"a", "b"}, 1.0);
}

TEST(BackgroundStreams, SettleThenStopGivesCancelledRecordsAndTheirGaps) {
  const Clock::time_point epoch = Clock::now();
  FakeStreams client(epoch, std::chrono::milliseconds(5));
  Workload workload = test_workload();
  BackgroundStreams streams(
      client, workload, {.count = 3, .prompt_len = 16, .sink = 4, .window = 60, .settle_s = 0.2});
  streams.start(10);
  const double load_start = seconds_since(epoch);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  PhaseResult phase;
  phase.start_s = load_start;
  phase.end_s = seconds_since(epoch);
  const std::vector<RequestRecord> records = streams.stop(10);
  ASSERT_EQ(records.size(), 3u);
  // The fake ticks every 5 ms at best: a loaded machine (the suite runs tests in parallel) only
  // makes ticks late, so counts are bounded below loosely and the mean gap from below exactly.
  for (const RequestRecord& r : records) {
    EXPECT_TRUE(r.cancelled);
    EXPECT_GT(r.chunk_times_s.size(), 20u);  // >= 0.4 s of chunks, ticks up to 20 ms late
  }
  const StreamsBaseline base = streams_baseline(records, load_start);
  EXPECT_EQ(base.streams, 3);
  EXPECT_EQ(base.failed, 0);
  EXPECT_GE(load_start - base.ready_s, 0.2);  // the settle time after the last first token
  EXPECT_GT(base.itl_before.count, 30u);
  EXPECT_GE(base.itl_before.mean, 0.0045);
  EXPECT_LT(base.itl_before.mean, 0.025);
  const StreamsDuring during = streams_during(records, phase, base);
  EXPECT_GT(during.itl.count, 30u);
  EXPECT_NEAR(during.p99_over_steady, during.itl.p99 / base.itl_before.mean, 1e-12);
  EXPECT_EQ(during.itl_all.count, during.itl.count);  // the phase had no requests
}

TEST(BackgroundStreams, AStreamThatFailsBeforeTheLoadFailsTheStart) {
  const Clock::time_point epoch = Clock::now();
  FakeStreams client(epoch, std::chrono::milliseconds(5), /*fail_stream=*/1);
  Workload workload = test_workload();
  BackgroundStreams streams(client, workload, {.count = 2, .settle_s = 1});
  try {
    streams.start(10);
    ADD_FAILURE() << "started";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("stream error"), std::string::npos) << e.what();
  }
}

TEST(BackgroundStreams, GapsCountOnlyWithinTheWindow) {
  RequestRecord a, b;
  a.chunk_times_s = {1.0, 1.01, 1.03, 1.06};
  b.chunk_times_s = {0.5, 1.02, 1.05};
  EXPECT_EQ(stream_gaps({a, b}, 1.0, 1.05),
            (std::vector<double>{1.01 - 1.0, 1.03 - 1.01, 1.05 - 1.02}));
  const std::vector<double> all = stream_gaps({a}, 0, 10);
  EXPECT_EQ(all.size(), 3u);
  // A stream that never produced a token only counts as failed when it was not stopped.
  RequestRecord dead;
  dead.error = "connect error";
  a.cancelled = b.cancelled = true;
  const StreamsBaseline base = streams_baseline({a, b, dead}, 1.05);
  EXPECT_EQ(base.failed, 1);
  EXPECT_DOUBLE_EQ(base.ready_s, 1.0);
}

TEST(HistogramQuantile, InterpolatesTheDeltaWithinItsBucket) {
  const PromSnapshot before = PromSnapshot::parse(
      "h_bucket{le=\"0.01\"} 10\nh_bucket{le=\"0.02\"} 10\nh_bucket{le=\"0.04\"} "
      "10\nh_bucket{le=\"+Inf\"} 10\n");
  // Gained: 50 in (0, 0.01], 40 in (0.01, 0.02], 8 in (0.02, 0.04], 2 above.
  const PromSnapshot after = PromSnapshot::parse(
      "h_bucket{le=\"0.01\"} 60\nh_bucket{le=\"0.02\"} 100\nh_bucket{le=\"0.04\"} "
      "108\nh_bucket{le=\"+Inf\"} 110\n");
  EXPECT_NEAR(*histogram_quantile(before, after, "h", 0.5), 0.01, 1e-12);
  EXPECT_NEAR(*histogram_quantile(before, after, "h", 0.7), 0.015, 1e-12);
  EXPECT_NEAR(*histogram_quantile(before, after, "h", 0.94), 0.03, 1e-12);
  EXPECT_NEAR(*histogram_quantile(before, after, "h", 0.99), 0.04,
              1e-12);  // in +Inf: the last bound
  EXPECT_FALSE(histogram_quantile(before, before, "h", 0.5).has_value());
  EXPECT_FALSE(histogram_quantile(before, after, "missing", 0.5).has_value());
}

TEST(Targets, ParseAndRefuse) {
  Targets t = parse_targets("ttft:500,tpot:25");
  EXPECT_EQ(t.ttft_ms, 500);
  EXPECT_EQ(t.tpot_ms, 25);
  t = parse_targets("tpot:0");
  EXPECT_FALSE(t.ttft_ms.has_value());
  EXPECT_EQ(t.tpot_ms, 0);
  for (const char* bad : {"ttft", "ttft:-1", "tpot:3600001", "e2e:5", "ttft:1.5", "tpot:x", ""})
    EXPECT_THROW(parse_targets(bad), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace rill::loadtest
