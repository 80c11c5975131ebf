// The server's side of latency targets without a network: the shared bounds check (HTTP and
// gRPC answer alike), gRPC's fields on GenerateRequest and SessionTurn, the verdicts in
// FinalInfo, and the configuration's defaults and their validation.
#include <functional>

#include <gtest/gtest.h>

#include "engine/scheduler/latency_targets.h"
#include "server/grpc_convert.h"
#include "server/request_fields.h"
#include "server/server_config.h"

namespace rill::server {
namespace {

using std::chrono::milliseconds;

template <typename Fn>
std::pair<std::string, std::string> refusal(Fn fn) {
  try {
    fn();
  } catch (const FieldError& e) {
    return {e.field(), e.what()};
  }
  return {};
}

TEST(LatencyTargetFields, SharedBounds) {
  EXPECT_EQ(checked_latency_target("ttft_target_ms", 0), milliseconds(0));
  EXPECT_EQ(checked_latency_target("tpot_target_ms", 3'600'000), milliseconds(3'600'000));
  EXPECT_EQ(refusal([] { checked_latency_target("ttft_target_ms", -1); }),
            std::make_pair(std::string("ttft_target_ms"),
                           std::string("'ttft_target_ms' must be in [0, 3600000]")));
  EXPECT_EQ(refusal([] { checked_latency_target("tpot_target_ms", 3'600'001); }).first,
            "tpot_target_ms");
}

template <typename Message>
void check_message() {
  Message m;
  Request r;
  apply_generation_fields(m, r, 100);
  EXPECT_FALSE(r.ttft_target.has_value());  // unset: the server's default
  EXPECT_FALSE(r.tpot_target.has_value());
  m.set_ttft_target_ms(0);  // set to 0: none
  m.set_tpot_target_ms(25);
  apply_generation_fields(m, r, 100);
  EXPECT_EQ(r.ttft_target, std::optional<milliseconds>(milliseconds(0)));
  EXPECT_EQ(r.tpot_target, std::optional<milliseconds>(milliseconds(25)));
  m.set_tpot_target_ms(3'600'001);
  EXPECT_EQ(refusal([&] { apply_generation_fields(m, r, 100); }),
            refusal([] { checked_latency_target("tpot_target_ms", 3'600'001); }));
}

TEST(LatencyTargetFields, GrpcGenerateAndSessionTurns) {
  check_message<pb::GenerateRequest>();
  check_message<pb::SessionTurn>();
}

TEST(LatencyTargetFields, FinalInfoCarriesTheVerdicts) {
  FinalEvent e;
  e.timings.slo = {0.5, 0.025, true, std::nullopt};
  pb::FinalInfo f;
  fill_final(f, e);
  EXPECT_DOUBLE_EQ(f.slo().ttft_target_s(), 0.5);
  EXPECT_DOUBLE_EQ(f.slo().tpot_target_s(), 0.025);
  EXPECT_TRUE(f.slo().has_ttft_met() && f.slo().ttft_met());
  EXPECT_FALSE(f.slo().has_tpot_met());  // not judged
  e.timings.slo.tpot_met = false;
  fill_final(f, e);
  EXPECT_TRUE(f.slo().has_tpot_met());
  EXPECT_FALSE(f.slo().tpot_met());
}

TEST(LatencyTargetFields, ServerDefaultsAndTheirBounds) {
  std::vector<std::string> args = {
      "rill-server", "--ttft-target-ms",     "500", "--tpot-target-ms",        "25", "--tpot-aware",
      "false",       "--min-prefill-tokens", "32",  "--warmup-prefill-tokens", "128"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ServerConfig c;
  ASSERT_TRUE(parse_command_line(static_cast<int>(argv.size()), argv.data(), c));
  EXPECT_EQ(c.scheduler.ttft_target, milliseconds(500));
  EXPECT_EQ(c.scheduler.tpot_target, milliseconds(25));
  EXPECT_FALSE(c.scheduler.tpot_aware);
  EXPECT_EQ(c.scheduler.min_prefill_tokens, 32);
  EXPECT_EQ(c.scheduler.warmup_prefill_tokens, 128);
  EXPECT_NO_THROW(validate_config(c));
  ServerConfig defaults;  // auto targets, TPOT-aware prefill
  EXPECT_TRUE(defaults.scheduler.tpot_aware);
  EXPECT_EQ(defaults.scheduler.ttft_target, milliseconds(0));
  for (auto [field, set] :
       std::vector<std::pair<std::string, std::function<void(SchedulerConfig&)>>>{
           {"scheduler.ttft_target_ms",
            [](SchedulerConfig& s) { s.ttft_target = milliseconds(-1); }},
           {"scheduler.tpot_target_ms",
            [](SchedulerConfig& s) { s.tpot_target = kMaxLatencyTarget + milliseconds(1); }},
           {"scheduler.min_prefill_tokens", [](SchedulerConfig& s) { s.min_prefill_tokens = 0; }},
           {"scheduler.warmup_prefill_tokens",
            [](SchedulerConfig& s) { s.warmup_prefill_tokens = 0; }}}) {
    ServerConfig bad;
    set(bad.scheduler);
    try {
      validate_config(bad);
      ADD_FAILURE() << field << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace rill::server
