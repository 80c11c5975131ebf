#include "engine/toolcall/tools.h"

#include <set>

#include "engine/error.h"

namespace rill::toolcall {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad_tool(size_t index, const std::string& name, const std::string& why) {
  std::string where = "tools[" + std::to_string(index) + "]";
  if (!name.empty()) where += " ('" + name + "')";
  throw FieldError("tools", where + ": " + why);
}

bool valid_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

// The name as printed in messages: at most the limit plus an ellipsis, so a 1 MB "name" does not
// make a 1 MB error.
std::string shown_name(const std::string& name) {
  return name.size() <= kMaxToolNameBytes ? name : name.substr(0, kMaxToolNameBytes) + "...";
}

}  // namespace

std::vector<const ToolDef*> ToolSpec::callable() const {
  std::vector<const ToolDef*> out;
  for (const ToolDef& t : tools)
    if (choice.mode != ToolChoiceMode::kNamed || t.name == choice.name) out.push_back(&t);
  return out;
}

void validate_tool(const ToolDef& tool, size_t index) {
  const std::string shown = shown_name(tool.name);
  if (tool.name.empty()) bad_tool(index, "", "function.name is required and must not be empty");
  if (tool.name.size() > kMaxToolNameBytes)
    bad_tool(index, shown,
             "function.name is longer than " + std::to_string(kMaxToolNameBytes) + " characters");
  for (char c : tool.name)
    if (!valid_name_char(c))
      bad_tool(index, shown, "function.name must match ^[a-zA-Z0-9_-]{1,64}$");
  const ojson& p = tool.parameters;
  if (!p.is_object()) bad_tool(index, shown, "function.parameters must be a JSON schema object");
  if (p.contains("type") && p["type"] != "object")
    bad_tool(index, shown, "function.parameters must be an object schema (\"type\": \"object\")");
  if (p.contains("properties") && !p["properties"].is_object())
    bad_tool(index, shown, "function.parameters.properties must be an object");
  if (p.contains("required")) {
    if (!p["required"].is_array())
      bad_tool(index, shown, "function.parameters.required must be an array of strings");
    for (const ojson& r : p["required"])
      if (!r.is_string())
        bad_tool(index, shown, "function.parameters.required must be an array of strings");
  }
}

std::vector<ToolDef> parse_tools(const ojson& tools) {
  if (!tools.is_array()) throw FieldError("tools", "'tools' must be an array of tool objects");
  if (tools.size() > kMaxTools)
    throw FieldError("tools", "'tools' has " + std::to_string(tools.size()) + " tools; at most " +
                                  std::to_string(kMaxTools) + " are allowed");
  std::vector<ToolDef> out;
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    if (!t.is_object()) bad_tool(i, "", "must be an object");
    if (!t.contains("type") || t["type"] != "function")
      bad_tool(i, "", "type must be \"function\"");
    if (!t.contains("function") || !t["function"].is_object())
      bad_tool(i, "", "function must be an object");
    const ojson& f = t["function"];
    ToolDef d;
    if (!f.contains("name") || !f["name"].is_string())
      bad_tool(i, "", "function.name is required and must be a string");
    d.name = f["name"].get<std::string>();
    if (f.contains("description") && !f["description"].is_null()) {
      if (!f["description"].is_string())
        bad_tool(i, shown_name(d.name), "function.description must be a string");
      d.description = f["description"].get<std::string>();
    }
    if (f.contains("parameters") && !f["parameters"].is_null())
      d.parameters = f["parameters"];
    else
      d.parameters = {{"type", "object"}, {"properties", ojson::object()}};
    if (f.contains("strict") && !f["strict"].is_null()) {
      if (!f["strict"].is_boolean())
        bad_tool(i, shown_name(d.name), "function.strict must be a boolean");
      d.strict = f["strict"].get<bool>();
    }
    validate_tool(d, i);
    if (!names.insert(d.name).second) bad_tool(i, d.name, "a tool of this name is declared twice");
    out.push_back(std::move(d));
  }
  return out;
}

namespace {

ToolChoice named_choice(const std::string& name, const std::vector<ToolDef>& tools,
                        const char* field) {
  for (const ToolDef& t : tools)
    if (t.name == name) return {ToolChoiceMode::kNamed, name};
  throw FieldError(field, "'" + std::string(field) + "' names the function '" + shown_name(name) +
                              "', which is not among the request's tools");
}

ToolChoice mode_choice(const std::string& mode, const std::vector<ToolDef>& tools,
                       const char* field) {
  ToolChoice c;
  if (mode == "none")
    c.mode = ToolChoiceMode::kNone;
  else if (mode == "auto")
    c.mode = ToolChoiceMode::kAuto;
  else if (mode == "required")
    c.mode = ToolChoiceMode::kRequired;
  else
    throw FieldError(field, "'" + std::string(field) +
                                "' must be \"none\", \"auto\", \"required\" or a named function");
  if (c.mode != ToolChoiceMode::kNone && tools.empty())
    throw FieldError(field,
                     "'" + std::string(field) + "' is \"" + mode + "\" but no tools are given");
  return c;
}

}  // namespace

ToolChoice parse_tool_choice(const nlohmann::json& choice, const std::vector<ToolDef>& tools) {
  if (choice.is_string()) return mode_choice(choice.get<std::string>(), tools, "tool_choice");
  const auto bad = [] {
    throw FieldError("tool_choice",
                     "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                     "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  };
  if (!choice.is_object() || !choice.contains("type") || choice["type"] != "function" ||
      !choice.contains("function") || !choice["function"].is_object())
    bad();
  const nlohmann::json& f = choice["function"];
  if (!f.contains("name") || !f["name"].is_string()) bad();
  return named_choice(f["name"].get<std::string>(), tools, "tool_choice");
}

ToolChoice tool_choice_from_name(const std::string& mode, const std::string& function_name,
                                 const std::vector<ToolDef>& tools) {
  if (!function_name.empty()) {
    if (!mode.empty() && mode != "function")
      throw FieldError("tool_choice",
                       "'tool_choice' must be empty or \"function\" when a function is named");
    return named_choice(function_name, tools, "tool_choice");
  }
  if (mode.empty()) return {};
  if (mode == "function")
    throw FieldError("tool_choice", "'tool_choice' \"function\" needs a function name");
  return mode_choice(mode, tools, "tool_choice");
}

nlohmann::ordered_json tools_template_json(const std::vector<ToolDef>& tools) {
  ojson out = ojson::array();
  for (const ToolDef& t : tools) {
    ojson f = ojson::object();
    f["name"] = t.name;
    if (!t.description.empty()) f["description"] = t.description;
    f["parameters"] = t.parameters;
    if (t.strict) f["strict"] = true;
    out.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

const char* tool_choice_mode_name(ToolChoiceMode mode) {
  switch (mode) {
    case ToolChoiceMode::kNone:
      return "none";
    case ToolChoiceMode::kAuto:
      return "auto";
    case ToolChoiceMode::kRequired:
      return "required";
    case ToolChoiceMode::kNamed:
      return "function";
  }
  return "auto";
}

}  // namespace rill::toolcall
