#include "engine/toolcall/family.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace rill::toolcall {
namespace {

std::string fixture_template(const std::string& name) {
  std::ifstream f(std::string(RILL_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name +
                  ".jinja");
  std::stringstream s;
  s << f.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(ToolFamily, DetectedFromPublishedTemplates) {
  const std::pair<const char*, ToolFamily> cases[] = {
      {"qwen2.5", ToolFamily::kHermes},           {"qwen3", ToolFamily::kHermes},
      {"hermes-3-tool-use", ToolFamily::kHermes}, {"llama-3.1", ToolFamily::kLlama3Json},
      {"mistral-nemo", ToolFamily::kMistral},     {"glm-4.6", ToolFamily::kNone},
      {"functionary-v3.2", ToolFamily::kNone},    {"chatml", ToolFamily::kNone},
      {"mistral-v0.1", ToolFamily::kNone},        {"llama-2", ToolFamily::kNone},
  };
  for (const auto& [name, family] : cases)
    EXPECT_EQ(detect_tool_family(fixture_template(name)), family) << name;
}

// The assistant turn of Mistral-Small-3.2's published template (tokenizer v11+), the part that
// tells the form apart: each call is [TOOL_CALLS]name[ARGS]arguments.
constexpr const char* kMistralV11Template = R"({%- for tool in message['tool_calls'] %}
    {%- set arguments = tool['function']['arguments'] %}
    {%- if arguments is not string %}{%- set arguments = arguments|tojson|safe %}{%- endif %}
    {{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}
{%- endfor %})";

TEST(ToolFamily, MistralFormFromTheTemplate) {
  EXPECT_EQ(detect_tool_family(kMistralV11Template), ToolFamily::kMistralArgs);
  EXPECT_EQ(detect_tool_family(fixture_template("mistral-nemo")), ToolFamily::kMistral);
  EXPECT_EQ(detect_tool_family("{{ messages }}", {"[TOOL_CALLS]", "[ARGS]"}),
            ToolFamily::kMistralArgs);
  EXPECT_EQ(detect_tool_family("{{ messages }}", {"[ARGS]"}), ToolFamily::kNone);
}

TEST(ToolFamily, FallsBackToSpecialTokens) {
  EXPECT_EQ(detect_tool_family("{{ messages }}", {"<s>", "[TOOL_CALLS]"}), ToolFamily::kMistral);
  EXPECT_EQ(detect_tool_family("{{ messages }}", {"<tool_call>"}), ToolFamily::kHermes);
  EXPECT_EQ(detect_tool_family("{{ messages }}", {"<|python_tag|>"}), ToolFamily::kLlama3Json);
  EXPECT_EQ(detect_tool_family("{{ messages }}", {"<|eot_id|>"}), ToolFamily::kNone);
}

TEST(ToolFamily, ParserFlag) {
  ToolFamily f = ToolFamily::kNone;
  bool detect = false;
  EXPECT_TRUE(parse_tool_parser_flag("auto", f, detect));
  EXPECT_TRUE(detect);
  for (const char* name : {"hermes", "llama3_json", "mistral", "mistral_v11", "none"}) {
    ASSERT_TRUE(parse_tool_parser_flag(name, f, detect)) << name;
    EXPECT_FALSE(detect);
    EXPECT_STREQ(tool_family_name(f), name);
  }
  EXPECT_FALSE(parse_tool_parser_flag("qwen", f, detect));
}

}  // namespace
}  // namespace rill::toolcall
