// What a reply must look like when the request requires a call (tool_choice "required" or a
// named function), per family, as plain data for the grammar engine: a literal prefix, the JSON
// schema of the value that follows, and a literal suffix, after which the reply ends.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/toolcall/family.h"
#include "engine/toolcall/tools.h"

namespace rill::toolcall {

struct CallConstraint {
  std::string prefix;  // e.g. "<tool_call>\n" (Hermes), "[TOOL_CALLS]" (Mistral), "" (Llama)
  /// The call's JSON: an object {"name": const (one tool) or, over several tools, an anyOf with
  /// one branch per tool pairing its name with its parameters; the arguments key: the tool's
  /// parameters schema}, name first. Families that batch calls in one JSON value (Mistral) get an
  /// array of such objects (minItems 1; maxItems 1 without parallel_tool_calls).
  nlohmann::ordered_json schema;
  /// Mistral v11, whose calls' names stand outside the JSON: `schema` is instead a tagged_json
  /// document (engine/grammar/tagged_json.h): `name[ARGS]` + the tool's parameters, one per
  /// tool, calls after the first preceded by `[TOOL_CALLS]`.
  bool tagged = false;
  std::string suffix;  // e.g. "\n</tool_call>" (Hermes)
};

/// The constraint for `spec` (its choice must be kRequired or kNamed; its callable tools
/// non-empty) in `family`'s format; nullopt for ToolFamily::kNone (no known format to force).
std::optional<CallConstraint> call_constraint(ToolFamily family, const ToolSpec& spec);

}  // namespace rill::toolcall
