// Errors of the grammar engine: every bad constraint (invalid or unsupported schema keyword,
// regex or grammar syntax, a limit) is a rill::Error(kInvalidArgument) whose message names
// the problem; the front ends report it as 400 / INVALID_ARGUMENT.
#pragma once

#include <string>

#include "engine/error.h"

namespace rill::grammar {

[[noreturn]] inline void fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

}  // namespace rill::grammar
