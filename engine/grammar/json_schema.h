// JSON schema -> grammar rules (docs/structured_outputs.md has the full list of keywords).
//
// Every schema that is an object, array or alternation becomes a rule of its own and is
// compiled from a work list, so nothing recurses on the schema's depth; $ref targets are rules
// compiled once and referenced (recursive schemas are recursive rules). Keywords outside the
// supported set are refused with an error naming the keyword and its JSON pointer.
//
// Output shape: properties in the schema's order (required ones always, optional ones may be
// left out), no additional properties when "properties" is given and "additionalProperties"
// is absent (OpenAI's strict mode and XGrammar's default), and between tokens at most one
// space or one newline followed by up to 20 spaces/tabs (llama.cpp's policy: the model cannot
// loop on whitespace). Numbers have at most 20 integer digits, 20 fraction digits and 3
// exponent digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace rill::grammar {

/// Deepest nesting of objects/arrays in a schema's text (as HTTP request bodies).
inline constexpr size_t kMaxSchemaDepth = 64;

/// Deepest nesting of brackets in JSON text outside strings (the scan stops once past `limit`),
/// checked before the recursive JSON parser runs.
size_t text_depth(std::string_view t, size_t limit);

/// Adds the rules of `schema_text` (a JSON schema document) to `g`; returns the rule matching
/// one value of the schema. Throws rill::Error(kInvalidArgument) "json_schema: ...".
int32_t add_json_schema(Grammar& g, std::string_view schema_text, const GrammarLimits& limits);

/// Adds the rules of any JSON object (response_format json_object); returns its rule.
int32_t add_json_object(Grammar& g);

}  // namespace rill::grammar
