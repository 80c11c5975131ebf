#include "clients/common/grpc_status_name.h"

#include <array>

namespace rill::client {

std::string grpc_status_name(grpc::StatusCode code) {
  // Indexed by the code's value, 0..16, as grpc/status.h numbers them.
  static constexpr std::array<const char*, 17> kNames = {"OK",
                                                         "CANCELLED",
                                                         "UNKNOWN",
                                                         "INVALID_ARGUMENT",
                                                         "DEADLINE_EXCEEDED",
                                                         "NOT_FOUND",
                                                         "ALREADY_EXISTS",
                                                         "PERMISSION_DENIED",
                                                         "RESOURCE_EXHAUSTED",
                                                         "FAILED_PRECONDITION",
                                                         "ABORTED",
                                                         "OUT_OF_RANGE",
                                                         "UNIMPLEMENTED",
                                                         "INTERNAL",
                                                         "UNAVAILABLE",
                                                         "DATA_LOSS",
                                                         "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  if (i >= 0 && i < static_cast<int>(kNames.size())) return kNames[static_cast<size_t>(i)];
  return "code " + std::to_string(i);
}

}  // namespace rill::client
