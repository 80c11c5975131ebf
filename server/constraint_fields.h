// The structured-output fields of a request, in protocol-neutral form: OpenAI's
// `response_format` and vLLM's `guided_json` / `guided_regex` / `guided_choice` /
// `guided_grammar` over HTTP (docs/api.md "Structured outputs"), the forced tool call of
// `tool_choice` "required" / a named function, and the check that compiles a constraint (cached)
// and names the field it came from.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/serving/request.h"
#include "engine/serving/serving_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/toolcall/family.h"
#include "engine/toolcall/tools.h"

namespace rill::server {

/// A constraint and the request field it came from (errors name it).
struct FieldConstraint {
  OutputConstraint constraint;
  std::string field;
};

/// The constraint fields of an HTTP body; nullopt without one (or with response_format
/// {"type": "text"}). JSON schemas are read again from `body_text` in key order, since outputs
/// follow the schema's property order. FieldError naming the field for a malformed value or
/// for two constraints at once.
std::optional<FieldConstraint> parse_constraint_fields(const nlohmann::json& body,
                                                       std::string_view body_text);

/// The forced call of `spec` (tool_choice "required" or a named function) in `family`'s format
/// (toolcall::call_constraint): its JSON schema between literal prefix and suffix, the reply
/// ending after the suffix. A prefix that is a special token (Mistral's [TOOL_CALLS]) is forced
/// as that token id. nullopt when the choice forces no call or the family has no format.
std::optional<FieldConstraint> tool_call_constraint(toolcall::ToolFamily family,
                                                    const toolcall::ToolSpec& spec,
                                                    const Tokenizer& tok);

/// Compiles `c` (ServingEngine::check_constraint) and rethrows its errors as FieldError(c.field).
void check_field_constraint(ServingEngine& engine, const FieldConstraint& c);

}  // namespace rill::server
