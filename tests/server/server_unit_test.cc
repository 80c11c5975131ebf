// Unit tests of the server pieces that need no engine: Prometheus exposition (checked by
// promtool too), the error mapping, configuration parsing and validation, chat messages and
// session chat deltas.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "engine/serving/request.h"
#include "server/chat_prompt.h"
#include "server/error_mapping.h"
#include "server/json_fields.h"
#include "server/metrics_exposition.h"
#include "server/server_config.h"

namespace rill::server {
namespace {

std::vector<MetricFamily> sample_families() {
  const MetricLabels model = {{"model_name", "tiny \"quoted\" \\ name\nx"}};
  MetricFamily ttft{"rill_time_to_first_token_seconds",
                    "Time to first token.\nSecond line \\ slash",
                    MetricType::kHistogram,
                    {}};
  MetricSeries h;
  h.labels = model;
  h.histogram.bounds = {0.001, 0.5, 1, 2.5};
  h.histogram.cumulative = {0, 3, 4, 4, 5};
  h.histogram.sum = 7.25;
  h.histogram.count = 5;
  ttft.series.push_back(h);
  MetricFamily reqs{"rill_requests_total", "Finished requests.", MetricType::kCounter, {}};
  MetricSeries a, b;
  a.labels = model;
  a.labels.push_back({"finished_reason", "stop"});
  a.value = 3;
  b.labels = model;
  b.labels.push_back({"finished_reason", "length"});
  b.value = 1e20;
  reqs.series = {a, b};
  MetricFamily usage{"rill_kv_cache_usage_ratio", "KV use.", MetricType::kGauge, {}};
  MetricSeries g;
  g.labels = model;
  g.value = 0.125;
  usage.series.push_back(g);
  MetricFamily empty{"rill_preemptions_total", "Preemptions.", MetricType::kCounter, {}};
  return {ttft, reqs, usage, empty};
}

TEST(MetricsExposition, FormatsValues) {
  EXPECT_EQ(format_prometheus_value(0), "0");
  EXPECT_EQ(format_prometheus_value(3), "3");
  EXPECT_EQ(format_prometheus_value(0.125), "0.125");
  EXPECT_EQ(format_prometheus_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_prometheus_value(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(format_prometheus_value(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(format_prometheus_value(1e-7)), 1e-7);
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsExposition, RendersHistogramsCountersGauges) {
  const std::string text = render_prometheus(sample_families());
  const std::string labels = R"(model_name="tiny \"quoted\" \\ name\nx")";
  EXPECT_NE(text.find("# HELP rill_time_to_first_token_seconds Time to first token.\\nSecond line "
                      "\\\\ slash\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE rill_time_to_first_token_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_bucket{" + labels + ",le=\"0.001\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_bucket{" + labels + ",le=\"0.5\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_bucket{" + labels + ",le=\"2.5\"} 4\n"),
            std::string::npos);
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_bucket{" + labels + ",le=\"+Inf\"} 5\n"),
            std::string::npos);
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_sum{" + labels + "} 7.25\n"),
            std::string::npos);
  EXPECT_NE(text.find("rill_time_to_first_token_seconds_count{" + labels + "} 5\n"),
            std::string::npos);
  EXPECT_NE(text.find("rill_requests_total{" + labels + ",finished_reason=\"stop\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE rill_kv_cache_usage_ratio gauge\nrill_kv_cache_usage_ratio{" +
                      labels + "} 0.125\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE rill_preemptions_total counter\n"), std::string::npos);
}

// promtool (Debian's prometheus package) is the independent judge of the format.
TEST(MetricsExposition, PassesPromtool) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "promtool not installed";
  const auto path = std::filesystem::temp_directory_path() /
                    ("rill_metrics_" + std::to_string(getpid()) + ".txt");
  std::ofstream(path) << render_prometheus(sample_families());
  const std::string cmd = "promtool check metrics < " + path.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[256];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  const int rc = pclose(p);
  std::filesystem::remove(path);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "promtool lint findings";
}

TEST(ErrorMapping, EveryCodeHasBothProtocols) {
  struct Case {
    ErrorCode code;
    grpc::StatusCode grpc;
    int http;
  };
  const Case cases[] = {
      {ErrorCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT, 400},
      {ErrorCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE, 400},
      {ErrorCode::kNotFound, grpc::StatusCode::NOT_FOUND, 404},
      {ErrorCode::kUnsupported, grpc::StatusCode::UNIMPLEMENTED, 400},
      {ErrorCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED, 503},
      {ErrorCode::kUnavailable, grpc::StatusCode::UNAVAILABLE, 503},
      {ErrorCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED, 504},
      {ErrorCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION, 409},
      {ErrorCode::kInternal, grpc::StatusCode::INTERNAL, 500},
      {ErrorCode::kCancelled, grpc::StatusCode::CANCELLED, 499},
  };
  for (const Case& c : cases) {
    const ErrorReply r = map_error(c.code, "m");
    EXPECT_EQ(r.grpc_code, c.grpc) << error_code_name(c.code);
    EXPECT_EQ(r.http_status, c.http) << error_code_name(c.code);
    EXPECT_FALSE(r.type.empty());
    EXPECT_EQ(r.code, error_code_name(c.code));
  }
}

TEST(ErrorMapping, OverloadCarriesRetryAfter) {
  const ErrorReply r = map_exception(OverloadedError("queue full", 2.2));
  EXPECT_EQ(r.http_status, 503);
  EXPECT_EQ(r.grpc_code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(r.retry_after_s.has_value());
  EXPECT_DOUBLE_EQ(*r.retry_after_s, 2.2);
  EXPECT_EQ(retry_after_header_seconds(2.2), 3);
  EXPECT_EQ(retry_after_header_seconds(0.01), 1);
  const ErrorReply f = map_exception(FieldError("max_tokens", "bad"));
  EXPECT_EQ(f.param, "max_tokens");
  EXPECT_EQ(f.http_status, 400);
  EXPECT_EQ(map_exception(std::runtime_error("x")).http_status, 500);
}

std::string write_temp(const std::string& text) {
  static int n = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("rill_cfg_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

std::string config_error(const std::string& json) {
  try {
    validate_config(load_config_file(write_temp(json)));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ServerConfig, ShippedConfigsAreValid) {
  for (const auto& f :
       std::filesystem::directory_iterator(std::string(RILL_SOURCE_DIR) + "/configs")) {
    SCOPED_TRACE(f.path().string());
    EXPECT_NO_THROW(validate_config(load_config_file(f.path().string())));
  }
}

TEST(ServerConfig, ReadsSectionsAndRejectsNamingTheField) {
  const ServerConfig c = load_config_file(write_temp(
      R"({"http_port": 0, "engine": {"block_size": 32, "device": "cpu"}, "scheduler": {"queue_timeout_ms": 5}})"));
  EXPECT_EQ(c.http_port, 0);
  EXPECT_EQ(c.engine.block_size, 32);
  EXPECT_EQ(c.engine.device, "cpu");
  EXPECT_EQ(c.scheduler.queue_timeout.count(), 5);
  EXPECT_NE(config_error(R"({"http_port": 70000})").find("http_port"), std::string::npos);
  EXPECT_NE(config_error(R"({"http_port": "x"})").find("http_port"), std::string::npos);
  EXPECT_NE(config_error(R"({"bogus": 1})").find("bogus"), std::string::npos);
  EXPECT_NE(config_error(R"({"engine": {"block_size": 3}})").find("engine.block_size"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"engine": {"device": "tpu"}})").find("engine.device"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"scheduler": {"max_num_seqs": 0}})").find("scheduler.max_num_seqs"),
            std::string::npos);
  EXPECT_NE(config_error(R"({"log_level": "loud"})").find("log_level"), std::string::npos);
  EXPECT_NE(config_error("{not json").find("config"), std::string::npos);
}

TEST(ServerConfig, FlagsOverrideTheFile) {
  const std::string file = write_temp(R"({"http_port": 1234, "grpc_port": 4321})");
  std::vector<std::string> args = {"rill-server", "--config",       file,   "--http-port",
                                   "0",           "--max-num-seqs", "7",    "--queue-timeout-ms",
                                   "9",           "--cuda-graphs",  "false"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ServerConfig c;
  ASSERT_TRUE(parse_command_line(static_cast<int>(argv.size()), argv.data(), c));
  EXPECT_EQ(c.http_port, 0);
  EXPECT_EQ(c.grpc_port, 4321);
  EXPECT_EQ(c.scheduler.max_num_seqs, 7);
  EXPECT_EQ(c.scheduler.queue_timeout.count(), 9);
  EXPECT_FALSE(c.engine.cuda_tuning.cuda_graphs);
  // Scheduler fields left unset take the runner's defaults; those given stay.
  SchedulerConfig defaults;
  defaults.max_num_seqs = 64;
  defaults.max_num_batched_tokens = 512;
  apply_scheduler_defaults(c, defaults);
  EXPECT_EQ(c.scheduler.max_num_seqs, 7);
  EXPECT_EQ(c.scheduler.max_num_batched_tokens, 512);
  std::vector<std::string> bad = {"rill-server", "--http-port", "abc"};
  std::vector<char*> bargv;
  for (auto& a : bad) bargv.push_back(a.data());
  ServerConfig d;
  EXPECT_THROW(parse_command_line(static_cast<int>(bargv.size()), bargv.data(), d), Error);
}

TEST(ServerConfig, PrefixCachingDefaultsPerRunner) {
  // On by default on both runners (CudaPrefixCache.* pass on the H100); an explicit
  // --no-prefix-caching wins over either.
  EXPECT_TRUE(scheduler_defaults("cpu").enable_prefix_caching);
  EXPECT_TRUE(scheduler_defaults("cuda").enable_prefix_caching);
  ServerConfig c;
  c.explicit_fields.insert("scheduler.enable_prefix_caching");
  c.scheduler.enable_prefix_caching = false;
  apply_scheduler_defaults(c, scheduler_defaults("cuda"));
  EXPECT_FALSE(c.scheduler.enable_prefix_caching);
}

TEST(ServerConfig, EveryBooleanFlagHasANoForm) {
  auto parse = [](std::vector<std::string> args) {
    args.insert(args.begin(), "rill-server");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    ServerConfig c;
    EXPECT_TRUE(parse_command_line(static_cast<int>(argv.size()), argv.data(), c));
    apply_scheduler_defaults(c, SchedulerConfig{});  // must not undo an explicit flag
    return c;
  };
  EXPECT_TRUE(parse({}).scheduler.enable_prefix_caching) << "on by default";
  EXPECT_FALSE(parse({"--no-prefix-caching"}).scheduler.enable_prefix_caching);
  EXPECT_FALSE(parse({"--prefix-caching", "false"}).scheduler.enable_prefix_caching);
  // Alone, a boolean flag means true, also when another flag follows it.
  const ServerConfig alone = parse({"--prefix-caching", "--max-sessions", "5"});
  EXPECT_TRUE(alone.scheduler.enable_prefix_caching);
  EXPECT_EQ(alone.scheduler.max_sessions, 5);
  EXPECT_FALSE(parse({"--no-cuda-graphs"}).engine.cuda_tuning.cuda_graphs);
  EXPECT_FALSE(load_config_file(write_temp(R"({"scheduler": {"enable_prefix_caching": false}})"))
                   .scheduler.enable_prefix_caching);
}

TEST(ChatPrompt, NormalizesAndRenders) {
  const auto msgs = normalize_chat_messages(nlohmann::json::parse(
      R"([{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Speak"}, {"type": "text", "text": "!"}]}])"));
  EXPECT_EQ(BuiltinChatRenderer().render(msgs, true),
            "SYSTEM:\nBe brief.\n\nUSER:\nSpeak!\n\nASSISTANT:\n");
  EXPECT_THROW(normalize_chat_messages(nlohmann::json::array()), Error);
  EXPECT_THROW(
      normalize_chat_messages(nlohmann::json::parse(R"([{"role": "wizard", "content": "x"}])")),
      Error);
  EXPECT_THROW(
      normalize_chat_messages(nlohmann::json::parse(R"([{"role": "user", "content": 3}])")), Error);
  EXPECT_THROW(normalize_chat_messages(nlohmann::json::parse(R"("hi")")), Error);
}

TEST(ChatPrompt, ContentPartTypesOfAnyJsonTypeAreInvalidArguments) {
  // Found by the HTTP request fuzzer: a part whose "type" was not a string threw a JSON type
  // error, answered 500 as an internal error.
  for (const char* type : {"1", "null", "[]", "{\"a\": 1}", "true"}) {
    const auto messages = nlohmann::json::parse(
        std::string(R"([{"role": "user", "content": [{"type": )") + type + R"(, "text": "x"}]}])");
    EXPECT_THROW(normalize_chat_messages(messages), Error) << type;
  }
}

TEST(JsonFields, CachePolicyOfAnotherTypeNamesTheField) {
  // Found by the HTTP request fuzzer: {"policy": 4} threw a JSON type error (500).
  for (const char* policy : {"4", "[]", "{}", "true"}) {
    const auto body = nlohmann::json::parse(std::string(R"({"cache": {"policy": )") + policy +
                                            R"(, "window": 8}})");
    try {
      parse_cache_field(body);
      ADD_FAILURE() << policy;
    } catch (const FieldError& e) {
      EXPECT_EQ(e.field(), "cache.policy") << policy;
    }
  }
  EXPECT_FALSE(
      parse_cache_field(nlohmann::json::parse(R"({"cache": {"policy": null}})"))->is_streaming());
}

}  // namespace
}  // namespace rill::server

namespace rill::server {
namespace {

nlohmann::json msg(const char* role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

// ChatML, as Qwen's template writes it: the reply's end-of-turn marker is the template's, and a
// model that stops on it does not feed it to the cache.
class ChatMlRenderer final : public ChatRenderer {
 public:
  explicit ChatMlRenderer(bool trim = false) : trim_(trim) {}
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& /*tools*/ = nullptr) const override {
    std::string out;
    for (const auto& m : messages) {
      std::string content = m.at("content").get<std::string>();
      if (trim_ && !content.empty() && content.back() == ' ') content.pop_back();
      out += "<|im_start|>" + m.at("role").get<std::string>() + "\n" + content + "<|im_end|>\n";
    }
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  bool has_special_tokens() const override { return true; }
  std::string name() const override { return "chatml"; }

 private:
  bool trim_;
};

// What a session's cache holds after each turn (the delta fed, the reply generated, and the stop
// token when the model ended on the template's own closing) is exactly the render of the whole
// conversation: each delta closes the previous reply once and opens the next turn.
TEST(ChatPrompt, SessionDeltasRebuildTheWholeConversation) {
  const BuiltinChatRenderer builtin;
  const ChatMlRenderer chatml;
  const std::vector<std::pair<const ChatRenderer*, std::string>> cases = {
      {&builtin, ""}, {&chatml, ""}, {&chatml, "<|im_end|>"}};
  for (const auto& [r, stop] : cases) {
    nlohmann::json history = nlohmann::json::array(), all = nlohmann::json::array();
    std::string cache;
    for (int turn = 0; turn < 4; ++turn) {
      nlohmann::json news = nlohmann::json::array();
      if (turn == 0) news.push_back(msg("system", "Be brief."));
      news.push_back(msg("user", "question " + std::to_string(turn)));
      cache += chat_turn_delta(*r, history, stop, news);
      for (const auto& m : news) all.push_back(m);
      EXPECT_EQ(cache, r->render(all, true)) << r->name() << " stop '" << stop << "' turn " << turn;
      const std::string reply = "answer " + std::to_string(turn);
      cache += reply + stop;
      all.push_back(msg("assistant", reply));
      history = next_chat_history(history, news, reply);
      // Constant memory: the system message and the last exchange.
      ASSERT_EQ(history.size(), 3u);
      EXPECT_EQ(history[0]["role"], "system");
      EXPECT_EQ(history[1]["content"], "question " + std::to_string(turn));
      EXPECT_EQ(history[2]["content"], reply);
    }
    const std::string next =
        chat_turn_delta(*r, history, stop, nlohmann::json::array({msg("user", "q")}));
    EXPECT_EQ(next.find("answer 3"), std::string::npos) << "a delta never repeats the reply";
  }
}

TEST(ChatPrompt, SessionDeltaAfterAStopTokenTheTemplateDoesNotWrite) {
  const BuiltinChatRenderer builtin;
  const nlohmann::json news = nlohmann::json::array({msg("user", "hi")});
  const nlohmann::json history = next_chat_history(nlohmann::json::array(), news, "hello");
  // The cache holds "hello</s>": the template's separator follows it.
  EXPECT_EQ(chat_turn_delta(builtin, history, "</s>", nlohmann::json::array({msg("user", "more")})),
            "\n\nUSER:\nmore\n\nASSISTANT:\n");
}

TEST(ChatPrompt, SessionDeltaWhenTheTemplateRewritesTheReply) {
  const ChatMlRenderer trimming(/*trim=*/true);
  const nlohmann::json news = nlohmann::json::array({msg("user", "hi")});
  const nlohmann::json history = next_chat_history(nlohmann::json::array(), news, "hello ");
  // The render no longer starts with what was fed ("hello " with its space): the delta is what
  // follows the rendered history, never the reply again.
  EXPECT_EQ(chat_turn_delta(trimming, history, "", nlohmann::json::array({msg("user", "more")})),
            "<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatPrompt, SessionHistoryKeepsTheNewestSystemMessage) {
  nlohmann::json h =
      next_chat_history(nlohmann::json::array(),
                        nlohmann::json::array({msg("system", "a"), msg("user", "u1")}), "r1");
  h = next_chat_history(h, nlohmann::json::array({msg("user", "u2")}), "r2");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0]["content"], "a");
  h = next_chat_history(h, nlohmann::json::array({msg("system", "b"), msg("user", "u3")}), "r3");
  EXPECT_EQ(h[0]["content"], "b");
  EXPECT_EQ(h[1]["content"], "u3");
  // Without a system message the history is the last exchange only.
  h = next_chat_history(nlohmann::json::array(), nlohmann::json::array({msg("user", "x")}), "y");
  EXPECT_EQ(h.size(), 2u);
}

}  // namespace
}  // namespace rill::server
