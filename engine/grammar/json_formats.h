// JSON schema string formats as regular expressions (regex_compiler.h's subset), bounded so a
// model cannot run on inside one: date, time, date-time (RFC 3339), duration (ISO 8601),
// uuid, email, hostname, ipv4, ipv6 (full form or one "::"), uri (scheme ":" printable ASCII).
#pragma once

#include <string>
#include <string_view>

namespace rill::grammar {

/// The pattern of format `name`, or null when the format is not supported.
const std::string* format_regex(std::string_view name);

}  // namespace rill::grammar
