// Error type thrown at the engine's API boundary. One style, kept everywhere in engine/:
// functions throw rill::Error with a code and a message that names the file/request and the
// problem; the server maps the code to a gRPC status / HTTP code in one place.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace rill {

enum class ErrorCode {
  kInvalidArgument,    // bad request, bad flag, bad file contents
  kNotFound,           // missing file, unknown sequence id
  kUnsupported,        // architecture, dtype, feature we do not implement
  kResourceExhausted,  // out of KV blocks / memory
  kOutOfRange,         // context limit reached
  kInternal,           // CUDA / cuBLAS failure, broken invariant
  kCancelled,
  kUnavailable,        // not serving now: loading, draining, stalled
  kDeadlineExceeded,   // a request's deadline passed
  kFailedPrecondition, // not allowed in the current state (a session turn while one runs)
};

const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

/// A bad value in a named request field ("top_p", "cache.window"): the front ends report the
/// field (the OpenAI error body's "param", gRPC's `error-param` trailing metadata).
class FieldError : public Error {
 public:
  FieldError(std::string field, const std::string& message,
             ErrorCode code = ErrorCode::kInvalidArgument)
      : Error(code, message), field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

}  // namespace rill
