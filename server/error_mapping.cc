#include "server/error_mapping.h"

#include <cmath>
#include <new>

#include "engine/serving/request.h"

namespace rill::server {

ErrorReply map_error(ErrorCode code, std::string message, std::string param,
                     std::optional<double> retry_after_s) {
  ErrorReply r;
  r.message = std::move(message);
  r.param = std::move(param);
  r.code = error_code_name(code);
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:  // a prompt over the context: the request's fault
      r.grpc_code = code == ErrorCode::kOutOfRange ? grpc::StatusCode::OUT_OF_RANGE
                                                   : grpc::StatusCode::INVALID_ARGUMENT;
      r.http_status = 400;
      r.type = "invalid_request_error";
      break;
    case ErrorCode::kNotFound:
      r.grpc_code = grpc::StatusCode::NOT_FOUND;
      r.http_status = 404;
      r.type = "not_found_error";
      break;
    case ErrorCode::kUnsupported:
      r.grpc_code = grpc::StatusCode::UNIMPLEMENTED;
      r.http_status = 400;
      r.type = "invalid_request_error";
      break;
    case ErrorCode::kResourceExhausted:
      r.grpc_code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      r.http_status = 503;
      r.type = "overloaded_error";
      r.retry_after_s = retry_after_s.value_or(1.0);
      break;
    case ErrorCode::kCancelled:
      r.grpc_code = grpc::StatusCode::CANCELLED;
      r.http_status = 499;  // client closed request (nginx's convention); rarely seen by anyone
      r.type = "cancelled_error";
      break;
    case ErrorCode::kUnavailable:
      r.grpc_code = grpc::StatusCode::UNAVAILABLE;
      r.http_status = 503;
      r.type = "unavailable_error";
      if (retry_after_s) r.retry_after_s = retry_after_s;
      break;
    case ErrorCode::kDeadlineExceeded:
      r.grpc_code = grpc::StatusCode::DEADLINE_EXCEEDED;
      r.http_status = 504;
      r.type = "timeout_error";
      break;
    case ErrorCode::kFailedPrecondition:
      r.grpc_code = grpc::StatusCode::FAILED_PRECONDITION;
      r.http_status = 409;
      r.type = "conflict_error";
      break;
    case ErrorCode::kInternal:
      r.grpc_code = grpc::StatusCode::INTERNAL;
      r.http_status = 500;
      r.type = "server_error";
      break;
  }
  return r;
}

ErrorReply map_exception(const std::exception& e, std::string param) {
  if (const auto* o = dynamic_cast<const OverloadedError*>(&e))
    return map_error(o->code(), o->what(), std::move(param), o->retry_after_s());
  if (const auto* fe = dynamic_cast<const FieldError*>(&e))
    return map_error(fe->code(), fe->what(), param.empty() ? fe->field() : std::move(param));
  if (const auto* re = dynamic_cast<const Error*>(&e))
    return map_error(re->code(), re->what(), std::move(param));
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return map_error(ErrorCode::kResourceExhausted, "out of memory");
  return map_error(ErrorCode::kInternal, e.what(), std::move(param));
}

int retry_after_header_seconds(double retry_after_s) {
  if (!std::isfinite(retry_after_s) || retry_after_s < 1.0) return 1;
  return static_cast<int>(std::ceil(std::min(retry_after_s, 3600.0)));
}

}  // namespace rill::server
