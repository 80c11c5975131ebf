// Golden strings per family: each is fed whole, split at every point into two feeds, and byte by
// byte; every way must give the same message, with OpenAI's delta invariants (a call's id and
// name in its first delta only, indices in order) and nothing held back beyond a marker prefix.
#include "engine/toolcall/tool_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rill::toolcall {
namespace {

struct Expected {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

ToolSpec spec_of(std::vector<std::string> names, bool parallel = true) {
  ToolSpec s;
  for (auto& n : names) {
    ToolDef d;
    d.name = n;
    d.parameters = {{"type", "object"}};
    s.tools.push_back(d);
  }
  s.parallel_tool_calls = parallel;
  return s;
}

const ToolSpec kSpec = spec_of({"get_weather", "get_time"});

// Feeds `pieces` and checks the delta invariants; returns the message.
ParsedMessage run(ToolFamily family, const ToolSpec& spec, const std::vector<std::string>& pieces) {
  int next_id = 0;
  ToolCallParser p(family, spec, [&] { return "call_" + std::to_string(next_id++); });
  ParsedMessage m;
  std::vector<bool> named;
  auto apply = [&](const ParsedDelta& d) {
    for (const ToolCallDelta& c : d.calls) {
      if (c.index == static_cast<int>(named.size())) {
        EXPECT_EQ(c.id, "call_" + std::to_string(c.index));
        EXPECT_FALSE(c.name.empty());
        named.push_back(true);
      } else {
        EXPECT_LT(c.index, static_cast<int>(named.size()));
        EXPECT_TRUE(c.id.empty());
        EXPECT_TRUE(c.name.empty());
      }
    }
    m.apply(d);
  };
  for (const std::string& piece : pieces) {
    ParsedDelta d;
    p.feed(piece, d);
    apply(d);
  }
  ParsedDelta d;
  p.finish(d);
  apply(d);
  return m;
}

void expect_message(const ParsedMessage& m, const Expected& want, const std::string& how) {
  EXPECT_EQ(m.content, want.content) << how;
  ASSERT_EQ(m.tool_calls.size(), want.calls.size()) << how;
  for (size_t i = 0; i < want.calls.size(); ++i) {
    EXPECT_EQ(m.tool_calls[i].name, want.calls[i].first) << how;
    EXPECT_EQ(m.tool_calls[i].arguments, want.calls[i].second) << how;
  }
}

void check(ToolFamily family, const std::string& text, const Expected& want,
           const ToolSpec& spec = kSpec) {
  SCOPED_TRACE(text);
  expect_message(run(family, spec, {text}), want, "whole");
  for (size_t i = 1; i < text.size(); ++i)
    expect_message(run(family, spec, {text.substr(0, i), text.substr(i)}), want,
                   "split at " + std::to_string(i));
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_message(run(family, spec, bytes), want, "byte by byte");
}

TEST(HermesParser, OneCall) {
  check(ToolFamily::kHermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        {"", {{"get_weather", R"({"city": "Paris"})"}}});
}

TEST(HermesParser, SeveralCallsAndContentBefore) {
  check(ToolFamily::kHermes,
        "Let me check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\", \"days\": [1, 2.5e1, {\"x\": null}]}}\n</tool_call>\n<tool_call>\n{\"name\": "
        "\"get_time\", \"arguments\": {}}\n</tool_call>\n",
        {"Let me check.",
         {{"get_weather", R"({"city": "Paris", "days": [1, 2.5e1, {"x": null}]})"},
          {"get_time", "{}"}}});
}

TEST(HermesParser, ArgumentsBeforeNameAndExtraKeys) {
  check(ToolFamily::kHermes,
        "<tool_call>{\"arguments\": {\"tz\": \"UTC\"}, \"name\": \"get_time\"}</tool_call>",
        {"", {{"get_time", R"({"tz": "UTC"})"}}});
  check(ToolFamily::kHermes,
        "<tool_call>{\"id\": 7, \"type\": \"function\", \"name\": \"get_time\", \"arguments\": "
        "{\"a\": \"}</tool_call>\"}}</tool_call>",
        {"", {{"get_time", R"({"a": "}</tool_call>"})"}}});
}

TEST(HermesParser, PlainTextAndLookalikesAreContent) {
  check(ToolFamily::kHermes, "Hello <b>world</b> <tool and  </tool_call> \n",
        {"Hello <b>world</b> <tool and  </tool_call> \n", {}});
  check(ToolFamily::kHermes, "  indented\n\n", {"  indented\n\n", {}});
  check(ToolFamily::kHermes, "ends with a marker prefix <tool_c",
        {"ends with a marker prefix <tool_c", {}});
}

TEST(HermesParser, MalformedCallsAreContent) {
  for (const std::string bad :
       {"<tool_call>\n{\"name\" \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"launch_missiles\", \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"args\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{}\"}\n</tool_call>",
        "<tool_call>\n[\"get_weather\"]\n</tool_call>", "<tool_call>\n{\"name\": 3}",
        "<tool_call>\n{\"name\": \"get_weather\"}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arg", "<tool_call>"}) {
    check(ToolFamily::kHermes, bad, {bad, {}});
  }
  // A malformed call between good ones stays content; the others are calls.
  check(ToolFamily::kHermes,
        "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\n<tool_call>{oops}"
        "</tool_call>",
        {"\n<tool_call>{oops}</tool_call>", {{"get_time", "{}"}}});
}

TEST(HermesParser, CutShortAfterCommitKeepsTheCall) {
  // max_tokens mid-arguments: the call stands with the arguments streamed (finish_reason length).
  check(ToolFamily::kHermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa",
        {"", {{"get_weather", R"({"city": "Pa)"}}});
  // Invalid JSON after the arguments began: the call ends there, the rest is content.
  check(ToolFamily::kHermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": x}}</tool_call>",
        {"x}}</tool_call>", {{"get_weather", R"({"city": )"}}});
}

TEST(HermesParser, NoCloseMarkerThenContent) {
  check(ToolFamily::kHermes, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}} then text",
        {"then text", {{"get_time", "{}"}}});
}

TEST(HermesParser, NamedChoiceAndParallelOff) {
  ToolSpec named = kSpec;
  named.choice = {ToolChoiceMode::kNamed, "get_time"};
  const std::string weather =
      "<tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>";
  check(ToolFamily::kHermes, weather, {weather, {}}, named);
  const std::string two =
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>" + weather;
  check(ToolFamily::kHermes, two, {"", {{"get_time", "{}"}}},
        spec_of({"get_time", "get_weather"}, false));
}

TEST(HermesParser, InactiveSpecPassesEverythingThrough) {
  ToolSpec none = kSpec;
  none.choice = {ToolChoiceMode::kNone, ""};
  const std::string call = "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  check(ToolFamily::kHermes, call, {call, {}}, none);
  check(ToolFamily::kNone, call, {call, {}});
}

TEST(HermesParser, HoldsBackOnlyMarkerPrefixes) {
  ToolCallParser p(ToolFamily::kHermes, kSpec);
  ParsedDelta d;
  p.feed("Sure, <tool", d);
  EXPECT_EQ(d.content, "Sure,");  // the space may precede a marker, "<tool" may start one
  d = {};
  p.feed("box> here", d);
  EXPECT_EQ(d.content, " <toolbox> here");
}

TEST(HermesParser, StreamsArgumentsInChunks) {
  ToolCallParser p(ToolFamily::kHermes, kSpec, [] { return std::string("call_x"); });
  ParsedDelta d;
  p.feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci", d);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].id, "call_x");
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, "{\"ci");
  d = {};
  p.feed("ty\": \"Rome\"}}", d);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "ty\": \"Rome\"}");
  EXPECT_TRUE(d.calls[0].id.empty());
}

TEST(Llama3Parser, OneAndSeveralCalls) {
  check(ToolFamily::kLlama3Json,
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
        {"", {{"get_weather", R"({"city": "Oslo"})"}}});
  check(ToolFamily::kLlama3Json,
        "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; "
        "{\"name\": \"get_time\", \"arguments\": {}}",
        {"", {{"get_weather", R"({"city": "Oslo"})"}, {"get_time", "{}"}}});
  check(ToolFamily::kLlama3Json, "\n\n  {\"name\": \"get_time\", \"parameters\": {}}\n",
        {"", {{"get_time", "{}"}}});
}

TEST(Llama3Parser, ContentIsDecidedAtTheStart) {
  const std::string later = "The call would be {\"name\": \"get_time\", \"parameters\": {}}";
  check(ToolFamily::kLlama3Json, later, {later, {}});
  const std::string json_answer = "{\"answer\": 42}";
  check(ToolFamily::kLlama3Json, json_answer, {json_answer, {}});
  const std::string unknown = "{\"name\": \"nope\", \"parameters\": {}}";
  check(ToolFamily::kLlama3Json, unknown, {unknown, {}});
  check(ToolFamily::kLlama3Json, "<|python_tag|>print(1)", {"<|python_tag|>print(1)", {}});
  check(ToolFamily::kLlama3Json, "<|start|> hi", {"<|start|> hi", {}});
}

TEST(Llama3Parser, TextAfterCallsIsContent) {
  check(ToolFamily::kLlama3Json,
        "{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"bad\", \"parameters\": {}}",
        {"; {\"name\": \"bad\", \"parameters\": {}}", {{"get_time", "{}"}}});
  check(ToolFamily::kLlama3Json, "{\"name\": \"get_time\", \"parameters\": {}} done",
        {"done", {{"get_time", "{}"}}});
}

TEST(MistralParser, ListOfCalls) {
  check(ToolFamily::kMistral,
        "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}, "
        "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}, \"id\": \"abcdefghi\"}]",
        {"", {{"get_weather", R"({"city": "Lyon"})"}, {"get_time", R"({"tz": "CET"})"}}});
  check(ToolFamily::kMistral, "[TOOL_CALLS]{\"name\": \"get_time\", \"arguments\": {}}",
        {"", {{"get_time", "{}"}}});
}

TEST(MistralParser, ContentAndMalformed) {
  check(ToolFamily::kMistral, "Sure. [TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
        {"Sure.", {{"get_time", "{}"}}});
  for (const std::string bad : {"[TOOL_CALLS] get_time()", "[TOOL_CALLS][{\"name\": \"x\"}]",
                                "[TOOL_CALLS][", "[TOOL] [x]", "[[1, 2]]"}) {
    check(ToolFamily::kMistral, bad, {bad, {}});
  }
  check(ToolFamily::kMistral,
        "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}, {\"nom\": 1}]",
        {", {\"nom\": 1}]", {{"get_time", "{}"}}});
}

// Mistral tokenizer v11+ (Mistral-Small-3.x, Magistral, Devstral): each call is
// [TOOL_CALLS]name[ARGS]{..}. Either Mistral family reads either form.
TEST(MistralParser, NameArgsForm) {
  for (ToolFamily family : {ToolFamily::kMistralArgs, ToolFamily::kMistral}) {
    check(family, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Lyon\", \"days\": [1, {\"x\": null}]}",
          {"", {{"get_weather", R"({"city": "Lyon", "days": [1, {"x": null}]})"}}});
    check(family,
          "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"[ARGS]\"}[TOOL_CALLS]get_time[ARGS]{}",
          {"Sure.", {{"get_weather", R"({"city": "[ARGS]"})"}, {"get_time", "{}"}}});
    check(family, "[TOOL_CALLS]get_time[ARGS] {} \n[TOOL_CALLS] get_time[ARGS]{\"tz\":\"UTC\"}",
          {"", {{"get_time", "{}"}, {"get_time", R"({"tz":"UTC"})"}}});
  }
  // The list form keeps working under the v11 family.
  check(ToolFamily::kMistralArgs, "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
        {"", {{"get_time", "{}"}}});
}

TEST(MistralParser, NameArgsMalformedIsContent) {
  for (const std::string bad : std::vector<std::string>{
           "[TOOL_CALLS]unknown[ARGS]{}", "[TOOL_CALLS]get_time{}", "[TOOL_CALLS]get time[ARGS]{}",
           "[TOOL_CALLS]get_time[ARGS]x", "[TOOL_CALLS]get_time[ARGS]", "[TOOL_CALLS]get_time[AR",
           "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS]" + std::string(300, 'a') + "[ARGS]{}"}) {
    check(ToolFamily::kMistralArgs, bad, {bad, {}});
  }
  // Committed at '{': arguments that stop being JSON end the call; the rest is content.
  check(ToolFamily::kMistralArgs, "[TOOL_CALLS]get_time[ARGS]{\"a\": 1]} tail",
        {"]} tail", {{"get_time", R"({"a": 1)"}}});
  // Cut short (max_tokens): the call keeps what streamed.
  check(ToolFamily::kMistralArgs, "[TOOL_CALLS]get_time[ARGS]{\"a\": [1, 2",
        {"", {{"get_time", R"({"a": [1, 2)"}}});
}

TEST(MistralParser, NameArgsWithoutParallelCalls) {
  check(ToolFamily::kMistralArgs,
        "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}",
        {"", {{"get_time", "{}"}}}, spec_of({"get_weather", "get_time"}, /*parallel=*/false));
}

TEST(ToolCallParser, DefaultIds) {
  ToolCallParser hermes(ToolFamily::kHermes, kSpec);
  ParsedDelta d;
  hermes.feed("<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>", d);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(d.calls[0].id.size(), 5u + 32u);
  ToolCallParser mistral(ToolFamily::kMistral, kSpec);
  d = {};
  mistral.feed("[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]", d);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].id.size(), 9u);  // Mistral's templates check for 9 alphanumerics
}

}  // namespace
}  // namespace rill::toolcall
