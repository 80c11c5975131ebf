#include "server/constraint_fields.h"

#include "engine/error.h"
#include "engine/toolcall/constraint.h"
#include "server/json_fields.h"

namespace rill::server {

using grammar::ConstraintKind;
using nlohmann::json;

namespace {

constexpr const char* kGuided[] = {"guided_json", "guided_regex", "guided_choice",
                                   "guided_grammar"};
constexpr size_t kMaxChoices = 4096;

FieldConstraint make(std::string field, ConstraintKind kind, std::string text = {}) {
  FieldConstraint c;
  c.field = std::move(field);
  c.constraint.spec.kind = kind;
  c.constraint.spec.text = std::move(text);
  return c;
}

// A schema given as an object (kept in the client's key order) or as JSON text (vLLM).
std::string schema_text(const nlohmann::ordered_json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_object() && !v.is_boolean())
    throw FieldError(field, field + " must be a JSON schema (an object)");
  return v.dump();
}

std::optional<FieldConstraint> response_format(const nlohmann::ordered_json& rf) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw FieldError("response_format", "response_format must be an object with a string 'type'");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return make("response_format", ConstraintKind::kJsonObject);
  if (type != "json_schema")
    throw FieldError("response_format",
                     "response_format.type must be 'text', 'json_object' or "
                     "'json_schema' (got '" +
                         type + "')");
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
    throw FieldError("response_format", "response_format.json_schema must be an object");
  const auto& js = rf["json_schema"];
  if (js.contains("name") && !js["name"].is_string())
    throw FieldError("response_format", "response_format.json_schema.name must be a string");
  if (js.contains("strict") && !js["strict"].is_boolean() && !js["strict"].is_null())
    throw FieldError("response_format", "response_format.json_schema.strict must be a boolean");
  if (!js.contains("schema"))
    throw FieldError("response_format", "response_format.json_schema.schema is required");
  // strict or not, the output is held to the schema (docs/api.md).
  return make("response_format", ConstraintKind::kJsonSchema,
              schema_text(js["schema"], "response_format.json_schema.schema"));
}

FieldConstraint guided(const nlohmann::ordered_json& v, const std::string& key) {
  if (key == "guided_json") return make(key, ConstraintKind::kJsonSchema, schema_text(v, key));
  if (key == "guided_choice") {
    if (!v.is_array() || v.empty() || v.size() > kMaxChoices)
      throw FieldError(key, key + " must be a non-empty list of at most " +
                                std::to_string(kMaxChoices) + " strings");
    FieldConstraint c = make(key, ConstraintKind::kChoice);
    for (const auto& s : v) {
      if (!s.is_string()) throw FieldError(key, key + " must be a list of strings");
      c.constraint.spec.choices.push_back(s.get<std::string>());
    }
    return c;
  }
  if (!v.is_string()) throw FieldError(key, key + " must be a string");
  return make(key, key == "guided_regex" ? ConstraintKind::kRegex : ConstraintKind::kGrammar,
              v.get<std::string>());
}

}  // namespace

std::optional<FieldConstraint> parse_constraint_fields(const json& b, std::string_view body_text) {
  std::vector<std::string> present;
  if (has_field(b, "response_format")) present.emplace_back("response_format");
  for (const char* k : kGuided)
    if (has_field(b, k)) present.emplace_back(k);
  if (present.empty()) return std::nullopt;
  if (present.size() > 1)
    throw FieldError(present[1], "at most one constraint per request: " + present[0] + " and " +
                                     present[1] + " were both given");
  // The body parsed already (depth checked), so reading it again in key order cannot fail.
  const auto ordered = nlohmann::ordered_json::parse(body_text);
  const std::string& key = present[0];
  if (key == "response_format") return response_format(ordered[key]);
  return guided(ordered[key], key);
}

std::optional<FieldConstraint> tool_call_constraint(toolcall::ToolFamily family,
                                                    const toolcall::ToolSpec& spec,
                                                    const Tokenizer& tok) {
  const auto mode = spec.choice.mode;
  if (mode != toolcall::ToolChoiceMode::kRequired && mode != toolcall::ToolChoiceMode::kNamed)
    return std::nullopt;
  const std::optional<toolcall::CallConstraint> call = toolcall::call_constraint(family, spec);
  if (!call) return std::nullopt;
  FieldConstraint c =
      make("tool_choice", call->tagged ? ConstraintKind::kTaggedJson : ConstraintKind::kJsonSchema,
           call->schema.dump());
  c.constraint.spec.prefix = call->prefix;
  c.constraint.spec.suffix = call->suffix;
  // A special token no text grammar admits: the longest leading one is forced as its id.
  for (size_t n = call->prefix.size(); n > 0; --n) {
    const std::optional<int32_t> id = tok.token_to_id(std::string_view(call->prefix).substr(0, n));
    if (id && tok.is_special(*id)) {
      c.constraint.forced_tokens.push_back(*id);
      c.constraint.spec.prefix = call->prefix.substr(n);
      break;
    }
  }
  return c;
}

void check_field_constraint(ServingEngine& engine, const FieldConstraint& c) {
  try {
    engine.check_constraint(c.constraint);
  } catch (const FieldError&) {
    throw;
  } catch (const Error& e) {
    throw FieldError(c.field, e.what(), e.code());
  }
}

}  // namespace rill::server
