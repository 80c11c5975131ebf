// The front ends' side of tool calling (engine/toolcall does the work): which family the served
// model writes its calls in, the OpenAI request fields (tools, tool_choice,
// parallel_tool_calls), and calls as OpenAI's JSON (whole and as stream deltas).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "engine/toolcall/family.h"
#include "engine/toolcall/tool_parser.h"
#include "engine/toolcall/tools.h"
#include "server/chat_prompt.h"

namespace rill::server {

/// --tool-call-parser: a family by name, or for "auto" the one the chat template (else the
/// tokenizer's special tokens) shows (toolcall::detect_tool_family). Logs the choice.
toolcall::ToolFamily resolve_tool_family(const std::string& flag, const ChatRenderer& chat,
                                         const Tokenizer& tok);

/// The tool fields of a chat body: "tools" (read again from `body_text` in key order, so the
/// template prints the schemas as the client wrote them), "tool_choice" (default "auto" with
/// tools, "none" without), "parallel_tool_calls" (default true). Throws FieldError naming the
/// field.
toolcall::ToolSpec parse_tool_fields(const nlohmann::json& body, std::string_view body_text);

/// [{"id", "type": "function", "function": {"name", "arguments"}}].
nlohmann::json tool_calls_json(const std::vector<toolcall::ToolCall>& calls);

/// A stream's delta.tool_calls: [{"index", "id", "type", "function": {"name", "arguments"}}]
/// with id, type and name in a call's first delta only.
nlohmann::json tool_call_deltas_json(const std::vector<toolcall::ToolCallDelta>& deltas);

}  // namespace rill::server
