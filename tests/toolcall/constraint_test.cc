#include "engine/toolcall/constraint.h"

#include <gtest/gtest.h>

#include <chrono>

#include "engine/error.h"
#include "engine/toolcall/tool_parser.h"
#include "tests/grammar/test_util.h"

namespace rill::toolcall {
namespace {

using ojson = nlohmann::ordered_json;

ToolSpec two_tools(ToolChoice choice, bool parallel = true) {
  ToolSpec s;
  s.tools.push_back({"get_weather", "", ojson::parse(R"({"type": "object", "properties":
                     {"city": {"type": "string"}}, "required": ["city"]})"),
                     false});
  s.tools.push_back({"get_time", "", ojson::parse(R"({"type": "object"})"), false});
  s.choice = choice;
  s.parallel_tool_calls = parallel;
  return s;
}

TEST(CallConstraint, HermesNamed) {
  const auto c =
      call_constraint(ToolFamily::kHermes, two_tools({ToolChoiceMode::kNamed, "get_weather"}));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix, "<tool_call>\n");
  EXPECT_EQ(c->suffix, "\n</tool_call>");
  EXPECT_EQ(c->schema.dump(),
            R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":)"
            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},)"
            R"("required":["name","arguments"],"additionalProperties":false})");
}

TEST(CallConstraint, RequiredIsOneBranchPerTool) {
  const auto c =
      call_constraint(ToolFamily::kLlama3Json, two_tools({ToolChoiceMode::kRequired, ""}));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix, "");
  EXPECT_EQ(c->suffix, "");
  ASSERT_EQ(c->schema["anyOf"].size(), 2u);
  EXPECT_EQ(c->schema["anyOf"][1]["properties"]["name"]["const"], "get_time");
  // Llama 3 writes its arguments under "parameters", after the name.
  const ojson& props = c->schema["anyOf"][0]["properties"];
  EXPECT_EQ(props.begin().key(), "name");
  EXPECT_TRUE(props.contains("parameters"));
  EXPECT_EQ(c->schema["anyOf"][0]["required"], ojson::parse(R"(["name", "parameters"])"));
}

TEST(CallConstraint, MistralBatchesCallsInAnArray) {
  auto c = call_constraint(ToolFamily::kMistral, two_tools({ToolChoiceMode::kRequired, ""}));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->prefix, "[TOOL_CALLS]");
  EXPECT_EQ(c->schema["type"], "array");
  EXPECT_EQ(c->schema["minItems"], 1);
  EXPECT_FALSE(c->schema.contains("maxItems"));
  EXPECT_EQ(c->schema["items"]["anyOf"].size(), 2u);
  c = call_constraint(ToolFamily::kMistral, two_tools({ToolChoiceMode::kRequired, ""}, false));
  EXPECT_EQ(c->schema["maxItems"], 1);
}

// The grammar the server compiles from a call constraint: prefix + value + suffix.
grammar::CompiledGrammar compiled(const CallConstraint& c) {
  grammar::ConstraintSpec s;
  s.kind = c.tagged ? grammar::ConstraintKind::kTaggedJson : grammar::ConstraintKind::kJsonSchema;
  s.text = c.schema.dump();
  s.prefix = c.prefix;
  s.suffix = c.suffix;
  return grammar::CompiledGrammar(grammar::build_grammar(s, {}), {},
                                  std::chrono::steady_clock::now());
}

// What the parser makes of a reply: "name args" per call, and the content.
std::string parsed(ToolFamily family, const ToolSpec& spec, const std::string& reply) {
  ToolCallParser p(family, spec);
  ParsedMessage m;
  ParsedDelta d;
  p.feed(reply, d);
  p.finish(d);
  m.apply(d);
  std::string out = m.content;
  for (const ToolCall& c : m.tool_calls) out += "|" + c.name + " " + c.arguments;
  return out;
}

TEST(CallConstraint, MistralV11NamesEachCallBeforeItsArguments) {
  const ToolSpec spec = two_tools({ToolChoiceMode::kRequired, ""});
  const auto c = call_constraint(ToolFamily::kMistralArgs, spec);
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->tagged);
  EXPECT_EQ(c->prefix, "[TOOL_CALLS]");
  EXPECT_EQ(c->schema["separator"], "[TOOL_CALLS]");
  ASSERT_EQ(c->schema["alternatives"].size(), 2u);
  EXPECT_EQ(c->schema["alternatives"][0]["tag"], "get_weather[ARGS]");
  EXPECT_FALSE(c->schema.contains("max_items"));
  const grammar::CompiledGrammar g = compiled(*c);
  for (const std::string ok :
       {"[TOOL_CALLS]get_time[ARGS]{}", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}",
        "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}"}) {
    EXPECT_TRUE(grammar::testing::complete(g, ok)) << ok;
    EXPECT_NE(parsed(ToolFamily::kMistralArgs, spec, ok).find("|get_"), std::string::npos) << ok;
  }
  EXPECT_EQ(parsed(ToolFamily::kMistralArgs, spec,
                   "[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}"),
            "|get_time {}|get_weather {\"city\": \"Nice\"}");
  for (const std::string bad :
       {"[TOOL_CALLS]", "[TOOL_CALLS]get_weather[ARGS]{}", "[TOOL_CALLS]other[ARGS]{}",
        "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
        "[TOOL_CALLS]get_time[ARGS]{}get_time[ARGS]{}", "get_time[ARGS]{}"})
    EXPECT_FALSE(grammar::testing::complete(g, bad)) << bad;
}

TEST(CallConstraint, MistralV11NamedOrSingleCall) {
  auto c = call_constraint(ToolFamily::kMistralArgs,
                           two_tools({ToolChoiceMode::kNamed, "get_weather"}, false));
  ASSERT_TRUE(c);
  ASSERT_EQ(c->schema["alternatives"].size(), 1u);
  EXPECT_EQ(c->schema["max_items"], 1);
  const grammar::CompiledGrammar g = compiled(*c);
  EXPECT_TRUE(grammar::testing::complete(g, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}"));
  EXPECT_FALSE(
      grammar::testing::complete(g,
                                 "[TOOL_CALLS]get_weather[ARGS]{\"city\": "
                                 "\"Nice\"}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"X\"}"));
  EXPECT_FALSE(grammar::testing::complete(g, "[TOOL_CALLS]get_time[ARGS]{}"));
}

TEST(CallConstraint, TaggedJsonRefusesBadDocuments) {
  for (const char* doc :
       {"[]", "{}", R"({"alternatives": []})", R"({"alternatives": [{"tag": 1}]})",
        R"({"alternatives": [{"tag": "a", "schema": {}}], "max_items": 0})",
        R"({"alternatives": [{"tag": "a", "schema": {"type": "nope"}}]})"}) {
    grammar::ConstraintSpec s;
    s.kind = grammar::ConstraintKind::kTaggedJson;
    s.text = doc;
    EXPECT_THROW(grammar::build_grammar(s, {}), Error) << doc;
  }
  grammar::ConstraintSpec deep;
  deep.kind = grammar::ConstraintKind::kTaggedJson;
  deep.text = R"({"alternatives": [{"tag": "a", "schema": )" + std::string(5000, '[') + "]}]}";
  EXPECT_THROW(grammar::build_grammar(deep, {}), Error);
}

TEST(CallConstraint, NoFamilyNoConstraint) {
  EXPECT_FALSE(call_constraint(ToolFamily::kNone, two_tools({ToolChoiceMode::kRequired, ""})));
}

}  // namespace
}  // namespace rill::toolcall
