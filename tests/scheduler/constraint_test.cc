// Structured outputs through the serving engine (CPU runner, default model, which writes no
// JSON unaided): constrained requests produce what their constraint allows and end "stop" when
// it is complete, "length" at max_tokens; unconstrained requests beside them are unchanged;
// preemption changes no constrained output; bad constraints are refused at submit.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::Collected;
using testing::EngineFixture;
using testing::random_prompt;
using testing::reference_tokens;

Request constrained(grammar::ConstraintKind kind, std::string text, int max_tokens, uint32_t seed) {
  return testing::constrained_request(kind, std::move(text), max_tokens, seed, 12);
}

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":6},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2},
  "ok":{"type":"boolean"}},
  "required":["name","age","tags","ok"]})";

void expect_schema_shape(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_TRUE(j.at("name").is_string() && j.at("name").get<std::string>().size() <= 6) << text;
  EXPECT_TRUE(j.at("age").is_number_integer()) << text;
  EXPECT_LE(j.at("age").get<int>(), 120);
  EXPECT_TRUE(j.at("tags").is_array() && j.at("tags").size() <= 2) << text;
  EXPECT_TRUE(j.at("ok").is_boolean()) << text;
  // Properties in the schema's order.
  EXPECT_LT(text.find("\"name\""), text.find("\"age\"")) << text;
  EXPECT_LT(text.find("\"tags\""), text.find("\"ok\"")) << text;
}

TEST(Constraints, JsonSchemaGreedyAndSampledBesideUnconstrainedOnes) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 16;
  EngineFixture f(cfg);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    if (i % 3 == 2) {  // unconstrained neighbours: their outputs must not change
      Request r;
      r.prompt = random_prompt(20 + i, 500 + i);
      r.sampling.temperature = i % 2 ? 0.8f : 0.0f;
      r.sampling.seed = 40 + i;
      r.max_tokens = 30;
      reqs.push_back(r);
      continue;
    }
    Request r = constrained(grammar::ConstraintKind::kJsonSchema, kSchema, 400, 100 + i);
    if (i % 2) r.sampling.temperature = 1.0f, r.sampling.seed = 7 + i, r.sampling.top_p = 0.95f;
    reqs.push_back(r);
  }
  std::vector<RequestHandle> handles;
  for (const Request& r : reqs) handles.push_back(f.engine->submit(r));
  int stopped = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Collected c = collect(handles[i]);
    ASSERT_EQ(c.finals, 1) << "request " << i;
    if (!reqs[i].constraint) {
      EXPECT_EQ(c.ids, reference_tokens(reqs[i])) << "request " << i;
      continue;
    }
    // The model pads with the whitespace the grammar allows between JSON tokens (a newline and
    // up to 20 spaces): a few run out of tokens ("length"), which is checked by the e2e tests.
    ASSERT_TRUE(c.final.reason == FinishReason::kStop || c.final.reason == FinishReason::kLength)
        << "request " << i << ": " << c.final.error_message;
    if (c.final.reason == FinishReason::kLength) continue;
    ++stopped;
    EXPECT_FALSE(c.final.stop_token.has_value());  // ended by the grammar, not a sampled EOS
    expect_schema_shape(c.text);
  }
  EXPECT_GE(stopped, 4);
}

TEST(Constraints, ChoiceRegexAndLengthMidValue) {
  EngineFixture f;
  Request choice = constrained(grammar::ConstraintKind::kChoice, "", 50, 3);
  choice.constraint->spec.choices = {"to be", "not to be", "question"};
  choice.sampling.temperature = 1.0f;
  choice.sampling.seed = 11;
  Request regex = constrained(grammar::ConstraintKind::kRegex, R"([A-Z][a-z]{2,5}-\d{3})", 50, 4);
  Request cut = constrained(grammar::ConstraintKind::kRegex, R"(x[a-z]{40})", 5, 5);
  RequestHandle hc = f.engine->submit(choice), hr = f.engine->submit(regex),
                hx = f.engine->submit(cut);
  const Collected c = collect(hc), r = collect(hr), x = collect(hx);
  EXPECT_EQ(c.final.reason, FinishReason::kStop);
  EXPECT_TRUE(c.text == "to be" || c.text == "not to be" || c.text == "question") << c.text;
  EXPECT_EQ(r.final.reason, FinishReason::kStop);
  EXPECT_TRUE(std::regex_match(r.text, std::regex(R"([A-Z][a-z]{2,5}-\d{3})"))) << r.text;
  EXPECT_EQ(x.final.reason, FinishReason::kLength);  // max_tokens mid-value
  EXPECT_EQ(x.ids.size(), 5u);
  EXPECT_TRUE(std::regex_match(x.text, std::regex("x[a-z]*"))) << x.text;
}

TEST(Constraints, PreemptionChangesNoConstrainedOutput) {
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = constrained(grammar::ConstraintKind::kRegex, "[a-z ]{60}", 60, 300 + i);
    r.prompt = random_prompt(30 + i * 5, 200 + i);
    if (i % 2) r.sampling.temperature = 1.0f, r.sampling.seed = 77 + i;
    reqs.push_back(r);
  }
  auto run = [&](SchedulerConfig cfg, CpuRunnerOptions o, int& preempted) {
    EngineFixture f(cfg, o);
    std::vector<RequestHandle> hs;
    for (const Request& r : reqs) hs.push_back(f.engine->submit(r));
    std::vector<std::vector<int32_t>> out;
    for (RequestHandle& h : hs) {
      const Collected c = collect(h);
      EXPECT_EQ(c.final.reason, FinishReason::kStop) << c.final.error_message;
      EXPECT_EQ(c.text.size(), 60u);
      preempted += c.final.usage.preemptions;
      out.push_back(c.ids);
    }
    return out;
  };
  int none = 0, some = 0;
  SchedulerConfig tight;
  tight.kv_watermark = 0;
  const auto roomy = run({}, {.num_threads = 1}, none);
  const auto squeezed = run(tight, {.num_threads = 1, .block_size = 16, .num_blocks = 16}, some);
  EXPECT_GT(some, 0);
  EXPECT_EQ(roomy, squeezed);
}

TEST(Constraints, ForcedTokensComeFirstAndSessionsTakeOnePerTurn) {
  EngineFixture f;
  const int32_t special = *testing::default_model().tokenizer->eos_id();  // any id will do
  Request r = constrained(grammar::ConstraintKind::kChoice, "", 20, 9);
  r.constraint->spec.choices = {"yes", "no"};
  r.constraint->forced_tokens = {17, special};
  r.ignore_eos = true;
  RequestHandle h = f.engine->submit(r);
  const Collected c = collect(h);
  ASSERT_EQ(c.final.reason, FinishReason::kStop) << c.final.error_message;
  ASSERT_GE(c.ids.size(), 3u);
  EXPECT_EQ(c.ids[0], 17);
  EXPECT_EQ(c.ids[1], special);

  SessionOptions so;
  so.cache = CachePolicy::streaming(4, 128);
  const SessionInfo s = f.engine->create_session(so);
  for (int turn = 0; turn < 3; ++turn) {
    Request t = constrained(grammar::ConstraintKind::kRegex, turn == 1 ? "[0-9]{4}" : "[a-z]{3}",
                            20, 20 + turn);
    t.session_id = s.options.id;
    RequestHandle th = f.engine->submit(t);
    const Collected tc = collect(th);
    ASSERT_EQ(tc.final.reason, FinishReason::kStop) << tc.final.error_message;
    EXPECT_TRUE(std::regex_match(tc.text, std::regex(turn == 1 ? "[0-9]{4}" : "[a-z]{3}")))
        << tc.text;
  }
}

TEST(Constraints, BadConstraintsAreRefusedAtSubmitNamingTheProblem) {
  EngineFixture f;
  auto refused = [&](Request r) -> std::string {
    try {
      f.engine->submit(std::move(r));
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      return e.what();
    }
    return "(accepted)";
  };
  EXPECT_NE(
      refused(constrained(grammar::ConstraintKind::kJsonSchema, R"({"not":{}})", 5, 1)).find("not"),
      std::string::npos);
  EXPECT_NE(
      refused(constrained(grammar::ConstraintKind::kJsonSchema, "{", 5, 1)).find("json_schema"),
      std::string::npos);
  EXPECT_NE(refused(constrained(grammar::ConstraintKind::kRegex, "(a", 5, 1)).find("regex"),
            std::string::npos);
  EXPECT_NE(
      refused(constrained(grammar::ConstraintKind::kGrammar, "root ::= (", 5, 1)).find("grammar"),
      std::string::npos);
  Request forced = constrained(grammar::ConstraintKind::kJsonObject, "", 5, 1);
  forced.constraint->forced_tokens = {1 << 30};
  EXPECT_NE(refused(forced).find("forced token"), std::string::npos);
  // The engine still serves.
  Request ok = constrained(grammar::ConstraintKind::kChoice, "", 5, 1);
  ok.constraint->spec.choices = {"a"};
  RequestHandle h = f.engine->submit(ok);
  const Collected c = collect(h);
  EXPECT_EQ(c.final.reason, FinishReason::kStop);
  EXPECT_EQ(c.text, "a");
}

// The default model reported 40,000 tokens wide: a vocabulary large enough for the serving
// engine's load-time warm-up of the constraint cache (ids past the tokenizer's are special).
class WideVocabRunner : public testing::ForwardingRunner {
 public:
  WideVocabRunner() : ForwardingRunner(testing::default_model()) {
    config_ = ForwardingRunner::config();
    config_.vocab_size = 40000;
  }
  const ModelConfig& config() const override { return config_; }

 private:
  ModelConfig config_;
};

// The warm-up runs in the background from construction: an engine destroyed at once stops it
// (no hang, no crash), and a constraint compiled while it runs is compiled as usual.
TEST(Constraints, LoadTimeWarmUpStopsAtShutdownAndLetsRequestsCompile) {
  const auto started = std::chrono::steady_clock::now();
  { EngineFixture f({}, std::make_unique<WideVocabRunner>()); }
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  EngineFixture f({}, std::make_unique<WideVocabRunner>());
  OutputConstraint c;
  c.spec.kind = grammar::ConstraintKind::kJsonSchema;
  c.spec.text = kSchema;
  EXPECT_NO_THROW(f.engine->check_constraint(c));
  c.spec.text = R"({"type":"strin"})";
  EXPECT_THROW(f.engine->check_constraint(c), Error);
}

}  // namespace
}  // namespace rill
