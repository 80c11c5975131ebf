// The one place where engine errors become protocol answers: a rill::Error code (and an
// OverloadedError's retry hint) maps to a gRPC status code, an HTTP status and the OpenAI error
// body's type / code. Both front ends call map_error and nothing else decides a status.
#pragma once

#include <exception>
#include <optional>
#include <string>

#include <grpcpp/support/status_code_enum.h>

#include "engine/error.h"

namespace rill::server {

struct ErrorReply {
  grpc::StatusCode grpc_code = grpc::StatusCode::INTERNAL;
  int http_status = 500;
  std::string type;  // OpenAI error "type": invalid_request_error, server_error, ...
  std::string code;  // OpenAI error "code": the engine's code name (e.g. "invalid_argument")
  std::string message;
  std::string param;                    // the offending request field, when known
  std::optional<double> retry_after_s;  // overload: seconds before a retry is likely admitted
};

/// Maps an engine error code (plus message, offending field and retry hint) to both protocols.
ErrorReply map_error(ErrorCode code, std::string message, std::string param = {},
                     std::optional<double> retry_after_s = {});

/// Same for an exception caught at the engine boundary: rill::Error (OverloadedError's retry hint
/// included), std::bad_alloc, anything else as internal.
ErrorReply map_exception(const std::exception& e, std::string param = {});

/// Whole seconds for an HTTP Retry-After header (at least 1).
int retry_after_header_seconds(double retry_after_s);

}  // namespace rill::server
