// Request bodies as JSON: one parser for every HTTP endpoint, bounded in nesting depth.
//
// nlohmann::json parses iteratively, but copying, comparing and serializing a value recurse
// once per level, so an 80 KB body of 40,000 '[' would overflow the stack later on the request
// path (the chat template's tojson, a copy into the engine request). The depth is therefore
// checked on the raw text before the parser runs, and nothing downstream sees a deeper value.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

namespace rill::server {

/// The deepest nesting any request body may have: objects and arrays count one level each, so
/// {"messages": [{"content": "x"}]} is 3 deep. Documented in docs/api.md.
inline constexpr std::size_t kMaxJsonDepth = 64;

/// The greatest nesting depth of objects and arrays in `text` (0 for a scalar), counted without
/// parsing and without recursion; brackets inside strings do not count. Stops counting (and
/// returns) as soon as the depth exceeds `limit`.
std::size_t json_nesting_depth(std::string_view text, std::size_t limit);

/// Parses a request body that must be a JSON object ("" reads as {} when `empty_is_object`).
/// Throws Error(kInvalidArgument) for invalid JSON, a body that is not an object, or nesting
/// deeper than kMaxJsonDepth (the message names the limit).
nlohmann::json parse_json_object(std::string_view body, bool empty_is_object = false);

}  // namespace rill::server
