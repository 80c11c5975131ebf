#include "engine/toolcall/constraint.h"

namespace rill::toolcall {
namespace {

using ojson = nlohmann::ordered_json;

// {"type": "object", "properties": {"name": {"const": N}, <args_key>: parameters}, ...}
ojson call_schema(const ToolDef& tool, const std::string& args_key) {
  ojson properties = ojson::object();
  properties["name"] = {{"const", tool.name}};
  properties[args_key] = tool.parameters;
  return {{"type", "object"},
          {"properties", std::move(properties)},
          {"required", {"name", args_key}},
          {"additionalProperties", false}};
}

// Mistral v11: [TOOL_CALLS]name[ARGS]{..}, repeated with parallel_tool_calls.
CallConstraint name_args_constraint(const FamilySyntax& syntax, const ToolSpec& spec) {
  ojson alternatives = ojson::array();
  for (const ToolDef* t : spec.callable())
    alternatives.push_back({{"tag", t->name + syntax.args_marker}, {"schema", t->parameters}});
  CallConstraint c;
  c.prefix = syntax.open;
  c.tagged = true;
  c.schema = {{"alternatives", std::move(alternatives)}, {"separator", syntax.open}};
  if (!spec.parallel_tool_calls) c.schema["max_items"] = 1;
  return c;
}

}  // namespace

std::optional<CallConstraint> call_constraint(ToolFamily family, const ToolSpec& spec) {
  if (family == ToolFamily::kNone) return std::nullopt;
  const FamilySyntax syntax = family_syntax(family);
  if (family == ToolFamily::kMistralArgs) return name_args_constraint(syntax, spec);
  const std::string& args_key = syntax.args_keys.front();
  ojson one;
  const std::vector<const ToolDef*> tools = spec.callable();
  if (tools.size() == 1) {
    one = call_schema(*tools.front(), args_key);
  } else {
    ojson branches = ojson::array();
    for (const ToolDef* t : tools) branches.push_back(call_schema(*t, args_key));
    one = {{"anyOf", std::move(branches)}};
  }
  CallConstraint c;
  switch (family) {
    case ToolFamily::kHermes:
      c.prefix = syntax.open + "\n";
      c.schema = std::move(one);
      c.suffix = "\n" + syntax.close;
      break;
    case ToolFamily::kLlama3Json:
      c.schema = std::move(one);
      break;
    case ToolFamily::kMistral:
      c.prefix = syntax.open;
      c.schema = {{"type", "array"}, {"items", std::move(one)}, {"minItems", 1}};
      if (!spec.parallel_tool_calls) c.schema["maxItems"] = 1;
      break;
    case ToolFamily::kMistralArgs:  // name_args_constraint
    case ToolFamily::kNone:
      break;
  }
  return c;
}

}  // namespace rill::toolcall
