// rill-loadtest's accounting: the Prometheus text parser, per-request latencies (vLLM's TPOT and
// ITL), run summaries and throughputs, time series, the sweep's saturation rule, and the SSE
// parser both clients share.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clients/common/sse_parser.h"
#include "clients/rill_loadtest/prom_text.h"
#include "clients/rill_loadtest/request.h"
#include "clients/rill_loadtest/run_report.h"
#include "clients/rill_loadtest/summary.h"
#include "clients/rill_loadtest/time_series.h"

namespace rill::loadtest {
namespace {

TEST(PromText, ParsesSamplesLabelsAndSpecialValues) {
  const std::string text =
      "# HELP rill_requests_total Finished requests.\n"
      "# TYPE rill_requests_total counter\n"
      "rill_requests_total{model_name=\"m\",finished_reason=\"length\"} 6\n"
      "rill_requests_total{model_name=\"m\",finished_reason=\"stop\"} 2\n"
      "rill_requests_total{model_name=\"a\\\"b\\\\c\\nd\",finished_reason=\"stop\"} 1\r\n"
      "\n"
      "rill_ttft_bucket{le=\"+Inf\"} 3\n"
      "rill_requests_running 4 1700000000000\n"
      "rill_x{} NaN\n"
      "rill_y -Inf\n";
  const PromSnapshot s = PromSnapshot::parse(text);
  EXPECT_DOUBLE_EQ(s.sum("rill_requests_total"), 9);
  EXPECT_DOUBLE_EQ(s.sum("rill_requests_total", {{"finished_reason", "stop"}}), 3);
  EXPECT_DOUBLE_EQ(s.sum("rill_requests_total", {{"model_name", "a\"b\\c\nd"}}), 1);
  EXPECT_DOUBLE_EQ(s.sum("rill_requests_total", {{"finished_reason", "cancelled"}}), 0);
  EXPECT_DOUBLE_EQ(s.sum("rill_ttft_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_DOUBLE_EQ(s.sum("rill_requests_running"), 4);  // the timestamp is not the value
  EXPECT_DOUBLE_EQ(s.sum("rill_missing"), 0);
  EXPECT_TRUE(std::isinf(s.sum("rill_y")));
  EXPECT_EQ(s.label_values("rill_requests_total", "finished_reason"),
            (std::vector<std::string>{"length", "stop"}));
  EXPECT_THROW(PromSnapshot::parse("rill_a{x=\"1\" 2\n"), std::invalid_argument);
  EXPECT_THROW(PromSnapshot::parse("rill_a 12abc\n"), std::invalid_argument);
}

RequestRecord record(double start, std::vector<double> chunks, std::vector<int> tokens, double end,
                     int64_t output) {
  RequestRecord r;
  r.start_s = start;
  r.chunk_times_s = std::move(chunks);
  r.chunk_tokens = std::move(tokens);
  r.end_s = end;
  r.output_tokens = output;
  r.prompt_tokens = 10;
  r.finish_reason = "length";
  return r;
}

TEST(Latency, FollowsVllmDefinitions) {
  // 5 tokens in 4 chunks (the third carries 2): TPOT divides by output - 1 = 4 tokens, ITL has
  // one gap per pair of chunks (3), the 2-token chunk's gap counted once.
  const RequestRecord r = record(1.0, {1.2, 1.3, 1.5, 1.6}, {1, 1, 2, 1}, 1.7, 5);
  const RequestLatency l = latency_of(r);
  EXPECT_NEAR(l.ttft_s, 0.2, 1e-12);
  EXPECT_NEAR(l.e2e_s, 0.7, 1e-12);
  ASSERT_TRUE(l.tpot_s);
  EXPECT_NEAR(*l.tpot_s, 0.5 / 4, 1e-12);
  ASSERT_EQ(l.itl_s.size(), 3u);
  EXPECT_NEAR(l.itl_s[1], 0.2, 1e-12);
  EXPECT_EQ(r.tokens_received(), 5);
  EXPECT_FALSE(latency_of(record(0, {0.1}, {1}, 0.2, 1)).tpot_s);  // one token: no TPOT
}

TEST(Summary, CountsThroughputsAndGoodput) {
  std::vector<RequestRecord> rs;
  rs.push_back(record(0.0, {0.1, 0.2}, {1, 1}, 0.3, 2));  // ttft 0.1, tpot 0.2
  rs.push_back(record(0.5, {1.0, 1.1}, {1, 1}, 1.5, 2));  // ttft 0.5, tpot 0.5
  RequestRecord failed = record(1.0, {}, {}, 1.1, 0);
  failed.error = "HTTP 503";
  rs.push_back(failed);
  RequestRecord cancelled = record(1.0, {1.2}, {3}, 1.3, 3);
  cancelled.cancelled = true;
  rs.push_back(cancelled);

  const RunSummary s = summarize_run(rs, 0.0, 2.0, parse_slo("ttft:200"));
  EXPECT_EQ(s.requests, 4);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.errors.at("HTTP 503"), 1);
  EXPECT_EQ(s.finish_reasons.at("length"), 2);
  EXPECT_EQ(s.input_tokens, 20);
  EXPECT_EQ(s.output_tokens, 4);
  EXPECT_EQ(s.output_tokens_all, 7);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_throughput, 2.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 12.0);
  ASSERT_TRUE(s.goodput);
  EXPECT_DOUBLE_EQ(*s.goodput, 0.5);  // only the first meets TTFT <= 200 ms
  EXPECT_EQ(s.ttft.count, 2u);
  EXPECT_NEAR(s.ttft.mean, 0.3, 1e-12);
  EXPECT_NEAR(s.tpot.mean, 0.35, 1e-12);
  EXPECT_EQ(s.itl.count, 2u);
  EXPECT_EQ(s.max_in_flight, 3);          // at t = 1.0..1.1
  EXPECT_DOUBLE_EQ(s.offered_rate, 4.0);  // 4 sent by t = 1.0
  EXPECT_FALSE(summarize_run(rs, 0.0, 2.0, Slo{}).goodput);
}

TEST(Summary, CachedTokensHitRateAndTtftByTurn) {
  std::vector<RequestRecord> rs;
  for (int conv = 0; conv < 2; ++conv)
    for (int turn = 0; turn < 3; ++turn) {
      RequestRecord r = record(turn, {turn + 0.1 * (turn + 1) + 0.01 * conv}, {1}, turn + 0.5, 1);
      r.conversation = conv;
      r.turn = turn;
      r.cached_tokens = 5 * turn;  // of 10 prompt tokens (record's default)
      rs.push_back(r);
    }
  const RunSummary s = summarize_run(rs, 0.0, 3.0, Slo{});
  EXPECT_EQ(s.cached_tokens, 2 * (0 + 5 + 10));
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate, 30.0 / 60.0);
  ASSERT_EQ(s.turns.size(), 3u);
  for (int t = 0; t < 3; ++t) {
    EXPECT_EQ(s.turns[t].turn, t);
    EXPECT_EQ(s.turns[t].ttft.count, 2u);
    EXPECT_NEAR(s.turns[t].ttft.median, 0.1 * (t + 1) + 0.005, 1e-9);
    EXPECT_EQ(s.turns[t].prompt_tokens, 20);
    EXPECT_EQ(s.turns[t].cached_tokens, 10 * t);
  }
  rs.resize(1);  // single turns: no per-turn figures
  EXPECT_TRUE(summarize_run(rs, 0.0, 3.0, Slo{}).turns.empty());
}

TEST(TimeSeries, BucketsTokensCompletionsAndInFlight) {
  std::vector<RequestRecord> rs;
  rs.push_back(record(0.0, {0.5, 1.5}, {1, 2}, 1.6, 3));
  rs.push_back(record(0.2, {2.5}, {4}, 2.7, 4));
  const std::vector<TimeBucket> ts = time_series(rs, 0.0, 3.0, 1.0);
  ASSERT_EQ(ts.size(), 3u);
  EXPECT_DOUBLE_EQ(ts[0].output_tokens_per_s, 1);
  EXPECT_DOUBLE_EQ(ts[1].output_tokens_per_s, 2);
  EXPECT_DOUBLE_EQ(ts[2].output_tokens_per_s, 4);
  EXPECT_DOUBLE_EQ(ts[1].completed_per_s, 1);
  EXPECT_EQ(ts[0].ttft_count, 1);
  EXPECT_NEAR(ts[0].mean_ttft_s, 0.5, 1e-12);
  EXPECT_EQ(ts[1].ttft_count, 0);
  EXPECT_EQ(ts[0].in_flight, 2);
  EXPECT_EQ(ts[1].in_flight, 1);
  EXPECT_EQ(ts[2].in_flight, 0);
}

PhaseReport point(const std::string& mode, double throughput, double offered, double ttft) {
  PhaseReport p;
  p.mode = mode;
  p.summary.request_throughput = throughput;
  p.summary.offered_rate = offered;
  p.summary.ttft.count = 1;
  p.summary.ttft.median = ttft;
  return p;
}

TEST(Saturation, OpenLoopThroughputClosedLoopGainAndTtftGrowth) {
  const PhaseReport first = point("open", 1.0, 1.0, 0.1);
  EXPECT_EQ(saturation_reason(first, nullptr, first, 0.9, 5), "");
  const PhaseReport keeps_up = point("open", 3.8, 4.0, 0.2);
  EXPECT_EQ(saturation_reason(first, &first, keeps_up, 0.9, 5), "");
  const PhaseReport falls_behind = point("open", 3.0, 4.0, 0.2);
  EXPECT_NE(saturation_reason(first, &first, falls_behind, 0.9, 5), "");
  const PhaseReport slow_ttft = point("open", 4.0, 4.0, 0.6);
  EXPECT_NE(saturation_reason(first, &first, slow_ttft, 0.9, 5).find("TTFT"), std::string::npos);

  const PhaseReport c1 = point("closed", 10.0, 0, 0.1);
  const PhaseReport c2 = point("closed", 15.0, 0, 0.1);
  const PhaseReport c3 = point("closed", 15.5, 0, 0.1);  // < 1.1 x 15
  EXPECT_EQ(saturation_reason(c1, &c1, c2, 0.9, 5), "");
  EXPECT_NE(saturation_reason(c1, &c2, c3, 0.9, 5), "");
}

TEST(SseParser, SplitsEventsAcrossArbitraryPieces) {
  const std::string stream =
      "data: {\"a\":1}\r\n\r\n: comment\n\ndata:{\"b\":2}\n\nevent: x\ndata: [DONE]\n\n";
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    rill::client::SseParser p;
    std::vector<std::string> got;
    for (size_t i = 0; i < stream.size(); i += piece)
      for (std::string& d : p.feed(std::string_view(stream).substr(i, piece))) got.push_back(d);
    EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"})) << piece;
    EXPECT_EQ(p.pending_bytes(), 0u);
  }
}

}  // namespace
}  // namespace rill::loadtest
