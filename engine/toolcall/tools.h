// OpenAI-style tool definitions and the request's tool choice, checked structurally. The
// parameters schema is only checked for its outer shape (an object schema); compiling it into a
// constraint is the grammar engine's job. No protocol types: the front ends hand in JSON.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rill::toolcall {

/// Most tools one request may declare (OpenAI's limit).
inline constexpr size_t kMaxTools = 128;
/// Longest tool name (OpenAI's ^[a-zA-Z0-9_-]{1,64}$).
inline constexpr size_t kMaxToolNameBytes = 64;

/// One function tool: {"type": "function", "function": {"name", "description", "parameters"}}.
struct ToolDef {
  std::string name;
  std::string description;
  /// A JSON schema whose "type" is "object" ({"type": "object", "properties": {}} when the
  /// request gave none). Ordered: the template prints it in the client's key order.
  nlohmann::ordered_json parameters;
  /// The function's "strict" flag, passed to the template as given (false when absent).
  bool strict = false;
};

enum class ToolChoiceMode {
  kNone,      // never call: the output is plain content
  kAuto,      // the model decides; calls are parsed from its output
  kRequired,  // at least one call
  kNamed,     // one call of the named function
};

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kAuto;
  std::string name;  // kNamed only
};

/// Everything a chat request says about tools.
struct ToolSpec {
  std::vector<ToolDef> tools;
  ToolChoice choice;
  bool parallel_tool_calls = true;  // false: at most one call per reply

  /// Whether the reply is parsed for calls: tools given and a choice other than none.
  bool active() const { return !tools.empty() && choice.mode != ToolChoiceMode::kNone; }
  /// The tools a call may name: the named one for kNamed, else all.
  std::vector<const ToolDef*> callable() const;
};

/// Checks one tool's fields (name pattern, parameters an object schema). Throws
/// rill::FieldError("tools", "tools[i] ('name'): <problem>").
void validate_tool(const ToolDef& tool, size_t index);

/// The request's "tools" (an array of OpenAI tool objects) -> checked definitions. Throws
/// rill::FieldError("tools", ...) naming the tool (by index, and name when it has one) and the
/// problem: not an array, more than kMaxTools, a type other than "function", a bad name, a
/// duplicate name, parameters that are not an object schema.
std::vector<ToolDef> parse_tools(const nlohmann::ordered_json& tools);

/// The request's "tool_choice": "none" | "auto" | "required" |
/// {"type": "function", "function": {"name": N}} where N must be one of `tools`. Throws
/// rill::FieldError("tool_choice", ...); a choice other than none without tools is refused too.
ToolChoice parse_tool_choice(const nlohmann::json& choice, const std::vector<ToolDef>& tools);

/// A named choice, checked against the tools (the gRPC form); "" is kAuto.
ToolChoice tool_choice_from_name(const std::string& mode, const std::string& function_name,
                                 const std::vector<ToolDef>& tools);

/// The tools as the chat template sees them: OpenAI's objects
/// [{"type": "function", "function": {"name", "description", "parameters"}}].
nlohmann::ordered_json tools_template_json(const std::vector<ToolDef>& tools);

const char* tool_choice_mode_name(ToolChoiceMode mode);

}  // namespace rill::toolcall
