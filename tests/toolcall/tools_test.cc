#include "engine/toolcall/tools.h"

#include <gtest/gtest.h>

#include "engine/error.h"

namespace rill::toolcall {
namespace {

using ojson = nlohmann::ordered_json;

ojson weather_tool(const std::string& name = "get_weather") {
  return ojson::parse(R"({"type": "function", "function": {"name": ")" + name +
                      R"(", "description": "Weather now", "parameters": {"type": "object",
                      "properties": {"city": {"type": "string"}}, "required": ["city"]}}})");
}

// The FieldError's message for `tools`, or "" when they are accepted.
std::string tools_error(const ojson& tools) {
  try {
    parse_tools(tools);
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "tools");
    return e.what();
  }
  return "";
}

TEST(Tools, ParsesAFunctionTool) {
  const auto tools = parse_tools(ojson::array({weather_tool()}));
  ASSERT_EQ(tools.size(), 1u);
  EXPECT_EQ(tools[0].name, "get_weather");
  EXPECT_EQ(tools[0].description, "Weather now");
  EXPECT_EQ(tools[0].parameters["required"][0], "city");
  // The template sees OpenAI's shape, the schema's key order kept.
  const ojson t = tools_template_json(tools);
  EXPECT_EQ(t[0]["type"], "function");
  EXPECT_EQ(t[0]["function"]["parameters"].dump(),
            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
}

TEST(Tools, MissingParametersAreAnEmptyObjectSchema) {
  const auto tools =
      parse_tools(ojson::parse(R"([{"type": "function", "function": {"name": "now"}}])"));
  EXPECT_EQ(tools[0].parameters.dump(), R"({"type":"object","properties":{}})");
}

TEST(Tools, RefusesBadToolsNamingThem) {
  EXPECT_NE(tools_error(ojson::object()).find("must be an array"), std::string::npos);
  EXPECT_NE(tools_error(ojson::parse(R"([{"type": "retrieval"}])")).find("tools[0]: type must be"),
            std::string::npos);
  EXPECT_NE(tools_error(ojson::array({weather_tool("bad name")}))
                .find("tools[0] ('bad name'): function.name must match"),
            std::string::npos);
  EXPECT_NE(tools_error(ojson::array({weather_tool(std::string(65, 'a'))})).find("longer than 64"),
            std::string::npos);
  EXPECT_NE(tools_error(ojson::array({weather_tool(""), weather_tool()})).find("tools[0]"),
            std::string::npos);
  EXPECT_NE(tools_error(ojson::array({weather_tool(), weather_tool()}))
                .find("tools[1] ('get_weather'): a tool of this name is declared twice"),
            std::string::npos);
  ojson t = weather_tool();
  t["function"]["parameters"] = ojson::parse(R"({"type": "string"})");
  EXPECT_NE(tools_error(ojson::array({t})).find("must be an object schema"), std::string::npos);
  t["function"]["parameters"] = "{}";
  EXPECT_NE(tools_error(ojson::array({t})).find("must be a JSON schema object"), std::string::npos);
  t["function"]["parameters"] = ojson::parse(R"({"type": "object", "required": "city"})");
  EXPECT_NE(tools_error(ojson::array({t})).find("required must be an array"), std::string::npos);
  t["function"]["parameters"] = ojson::parse(R"({"properties": []})");
  EXPECT_NE(tools_error(ojson::array({t})).find("properties must be an object"), std::string::npos);
  ojson many = ojson::array();
  for (size_t i = 0; i <= kMaxTools; ++i) many.push_back(weather_tool("f" + std::to_string(i)));
  EXPECT_NE(tools_error(many).find("at most 128"), std::string::npos);
}

TEST(ToolChoice, ModesAndNamedFunctions) {
  const auto tools = parse_tools(ojson::array({weather_tool()}));
  EXPECT_EQ(parse_tool_choice("none", tools).mode, ToolChoiceMode::kNone);
  EXPECT_EQ(parse_tool_choice("auto", tools).mode, ToolChoiceMode::kAuto);
  EXPECT_EQ(parse_tool_choice("required", tools).mode, ToolChoiceMode::kRequired);
  const ToolChoice named = parse_tool_choice(
      nlohmann::json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"), tools);
  EXPECT_EQ(named.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(named.name, "get_weather");
  EXPECT_EQ(parse_tool_choice("none", {}).mode, ToolChoiceMode::kNone);
}

TEST(ToolChoice, RefusesUnknownNamesAndModes) {
  const auto tools = parse_tools(ojson::array({weather_tool()}));
  auto message = [&](const nlohmann::json& c, const std::vector<ToolDef>& t) -> std::string {
    try {
      parse_tool_choice(c, t);
    } catch (const FieldError& e) {
      EXPECT_EQ(e.field(), "tool_choice");
      return e.what();
    }
    return "";
  };
  EXPECT_NE(
      message(nlohmann::json::parse(R"({"type": "function", "function": {"name": "get_time"}})"),
              tools)
          .find("'get_time', which is not among the request's tools"),
      std::string::npos);
  EXPECT_NE(message("sometimes", tools).find("must be"), std::string::npos);
  EXPECT_NE(message("required", {}).find("no tools are given"), std::string::npos);
  EXPECT_NE(message(nlohmann::json::parse(R"({"type": "function"})"), tools).find("must be"),
            std::string::npos);
  EXPECT_NE(message(7, tools).find("must be"), std::string::npos);
}

TEST(ToolChoice, GrpcForm) {
  const auto tools = parse_tools(ojson::array({weather_tool()}));
  EXPECT_EQ(tool_choice_from_name("", "", tools).mode, ToolChoiceMode::kAuto);
  EXPECT_EQ(tool_choice_from_name("required", "", tools).mode, ToolChoiceMode::kRequired);
  EXPECT_EQ(tool_choice_from_name("", "get_weather", tools).mode, ToolChoiceMode::kNamed);
  EXPECT_THROW(tool_choice_from_name("", "nope", tools), FieldError);
  EXPECT_THROW(tool_choice_from_name("function", "", tools), FieldError);
  EXPECT_THROW(tool_choice_from_name("required", "get_weather", tools), FieldError);
}

TEST(ToolSpec, CallableAndActive) {
  ToolSpec spec;
  spec.tools = parse_tools(ojson::array({weather_tool("a"), weather_tool("b")}));
  EXPECT_TRUE(spec.active());
  EXPECT_EQ(spec.callable().size(), 2u);
  spec.choice = {ToolChoiceMode::kNamed, "b"};
  ASSERT_EQ(spec.callable().size(), 1u);
  EXPECT_EQ(spec.callable()[0]->name, "b");
  spec.choice = {ToolChoiceMode::kNone, ""};
  EXPECT_FALSE(spec.active());
}

}  // namespace
}  // namespace rill::toolcall
