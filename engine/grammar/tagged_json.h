// Tagged JSON values -> grammar rules: one or more values, each a literal tag followed by a
// value of that tag's JSON schema, the values after the first each preceded by a literal
// separator. Tool calls whose name stands outside the JSON use it: Mistral v11's
// `get_weather[ARGS]{..}[TOOL_CALLS]get_time[ARGS]{..}` is the tags `get_weather[ARGS]` and
// `get_time[ARGS]` with the tools' parameter schemas, separated by `[TOOL_CALLS]`.
//
// The document (ConstraintKind::kTaggedJson's text):
//   {"alternatives": [{"tag": "get_weather[ARGS]", "schema": {..}}, ...],  // at least one
//    "separator": "[TOOL_CALLS]",   // optional, default ""
//    "max_items": 1}                // optional: at most this many values (default unbounded)
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

/// Adds the rules of `document` to `g`; returns the rule matching the whole sequence. Throws
/// rill::Error(kInvalidArgument) "tagged_json: ..." naming the field, or json_schema's errors.
int32_t add_tagged_json(Grammar& g, std::string_view document, const GrammarLimits& limits);

}  // namespace rill::grammar
