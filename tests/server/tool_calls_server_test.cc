// The server's side of tool calling without a network: which published templates take tool-call
// arguments as objects, the checks of assistant tool calls and tool messages, the JSON of calls.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/error.h"
#include "server/chat_prompt.h"
#include "server/tool_calls.h"

namespace rill::server {
namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// tests/fixtures/chat_templates/<name>.json says which form of arguments each template is written
// for (tool_arguments: object | string); the probe must find the same for every template with
// tools.
TEST(ToolCallsServer, ArgumentFormOfPublishedTemplates) {
  const std::string dir = std::string(RILL_SOURCE_DIR) + "/tests/fixtures/chat_templates/";
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::filesystem::path meta_path = entry.path();
    meta_path.replace_extension(".json");
    const json meta = json::parse(read_file(meta_path));
    if (!meta.value("supports_tools", false)) continue;
    const std::string source = read_file(entry.path());
    if (source.find("tool_calls") == std::string::npos) continue;  // renders no calls (Kimi K2)
    const auto text = [&](const char* k) {
      return meta[k].is_string() ? meta[k].get<std::string>() : std::string();
    };
    const ChatTemplate tmpl(source, text("bos_token"), text("eos_token"));
    const bool wants_objects = template_wants_object_arguments(tmpl);
    SCOPED_TRACE(entry.path().filename().string());
    EXPECT_EQ(wants_objects, meta["tool_arguments"] == "object");
    ++checked;
  }
  EXPECT_GE(checked, 15);
}

std::string message_error(const json& messages) {
  try {
    normalize_chat_messages(messages);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ToolCallsServer, ChecksToolCallsAndToolMessages) {
  const json call = {
      {"id", "call_1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}};
  const json ok = {{{"role", "user"}, {"content", "hi"}},
                   {{"role", "assistant"}, {"tool_calls", {call}}},
                   {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "42"}}};
  EXPECT_EQ(message_error(ok), "");
  EXPECT_EQ(normalize_chat_messages(ok)[1]["content"], "");
  json bad = ok;
  bad[1]["tool_calls"][0]["function"].erase("name");
  EXPECT_EQ(message_error(bad), "messages[1].tool_calls[0].function.name must be a string");
  bad = ok;
  bad[1]["tool_calls"][0]["function"]["arguments"] = 5;
  EXPECT_EQ(message_error(bad),
            "messages[1].tool_calls[0].function.arguments must be a JSON string");
  bad = ok;
  bad[1]["tool_calls"] = "f()";
  EXPECT_EQ(message_error(bad), "messages[1].tool_calls must be an array");
  bad = ok;
  bad[0]["tool_calls"] = json::array({call});
  EXPECT_EQ(message_error(bad), "messages[0].tool_calls is only for assistant messages");
  bad = ok;
  bad[2]["tool_call_id"] = 1;
  EXPECT_EQ(message_error(bad), "messages[2].tool_call_id must be a string");
  bad = ok;
  bad[1].erase("tool_calls");
  EXPECT_EQ(message_error(bad), "messages[1].content must be a string or an array of text parts");
}

TEST(ToolCallsServer, CallsAsOpenAiJson) {
  const json whole = tool_calls_json({{"call_a", "f", R"({"x": 1})"}});
  EXPECT_EQ(
      whole.dump(),
      R"([{"function":{"arguments":"{\"x\": 1}","name":"f"},"id":"call_a","type":"function"}])");
  const json deltas = tool_call_deltas_json({{0, "call_a", "f", "{\"x\""}, {0, "", "", ": 1}"}});
  EXPECT_EQ(deltas[0]["id"], "call_a");
  EXPECT_EQ(deltas[0]["type"], "function");
  EXPECT_EQ(deltas[0]["function"]["name"], "f");
  EXPECT_FALSE(deltas[1].contains("id"));
  EXPECT_FALSE(deltas[1]["function"].contains("name"));
  EXPECT_EQ(deltas[1]["function"]["arguments"], ": 1}");
}

TEST(ToolCallsServer, ToolFieldsOfABody) {
  const std::string text =
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
         "properties": {"b": {}, "a": {}}}}}], "parallel_tool_calls": false})";
  const toolcall::ToolSpec spec = parse_tool_fields(json::parse(text), text);
  ASSERT_EQ(spec.tools.size(), 1u);
  EXPECT_EQ(spec.choice.mode, toolcall::ToolChoiceMode::kAuto);
  EXPECT_FALSE(spec.parallel_tool_calls);
  // The client's key order, not nlohmann::json's sorted one.
  EXPECT_EQ(spec.tools[0].parameters["properties"].begin().key(), "b");
  EXPECT_EQ(parse_tool_fields(json::object(), "{}").choice.mode, toolcall::ToolChoiceMode::kNone);
  const std::string bad = R"({"tool_choice": "required"})";
  EXPECT_THROW(parse_tool_fields(json::parse(bad), bad), FieldError);
}

}  // namespace
}  // namespace rill::server
