#include "server/tool_calls.h"

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "server/json_fields.h"

namespace rill::server {

using nlohmann::json;

toolcall::ToolFamily resolve_tool_family(const std::string& flag, const ChatRenderer& chat,
                                         const Tokenizer& tok) {
  toolcall::ToolFamily family = toolcall::ToolFamily::kNone;
  bool detect = false;
  if (!toolcall::parse_tool_parser_flag(flag, family, detect))
    throw Error(ErrorCode::kInvalidArgument, "tool_call_parser: unknown parser '" + flag + "'");
  if (detect) {
    std::vector<std::string> markers;
    for (const char* m : {"[TOOL_CALLS]", "[ARGS]", "<tool_call>", "<|python_tag|>"})
      if (tok.token_to_id(m)) markers.emplace_back(m);
    family = toolcall::detect_tool_family(chat.template_source(), markers);
  }
  spdlog::info("tool calls: {} ({})", toolcall::tool_family_name(family),
               detect ? "detected" : "--tool-call-parser");
  return family;
}

toolcall::ToolSpec parse_tool_fields(const json& b, std::string_view body_text) {
  toolcall::ToolSpec spec;
  if (has_field(b, "tools")) {
    // The body parsed already (depth checked), so reading it again in key order cannot fail.
    const auto ordered = nlohmann::ordered_json::parse(body_text);
    spec.tools = toolcall::parse_tools(ordered["tools"]);
  }
  if (has_field(b, "tool_choice"))
    spec.choice = toolcall::parse_tool_choice(b["tool_choice"], spec.tools);
  else if (spec.tools.empty())
    spec.choice.mode = toolcall::ToolChoiceMode::kNone;
  if (has_field(b, "parallel_tool_calls"))
    spec.parallel_tool_calls = get_bool_field(b, "parallel_tool_calls");
  return spec;
}

json tool_calls_json(const std::vector<toolcall::ToolCall>& calls) {
  json out = json::array();
  for (const toolcall::ToolCall& c : calls)
    out.push_back({{"id", c.id},
                   {"type", "function"},
                   {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  return out;
}

json tool_call_deltas_json(const std::vector<toolcall::ToolCallDelta>& deltas) {
  json out = json::array();
  for (const toolcall::ToolCallDelta& d : deltas) {
    json j = {{"index", d.index}};
    json f = json::object();
    if (!d.id.empty()) {
      j["id"] = d.id;
      j["type"] = "function";
      f["name"] = d.name;
    }
    f["arguments"] = d.arguments;
    j["function"] = std::move(f);
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace rill::server
