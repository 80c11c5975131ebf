#include "engine/toolcall/constraint.h"

#include <gtest/gtest.h>

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

TEST(CallConstraint, NoFamilyNoConstraint) {
  EXPECT_FALSE(call_constraint(ToolFamily::kNone, two_tools({ToolChoiceMode::kRequired, ""})));
}

}  // namespace
}  // namespace rill::toolcall
