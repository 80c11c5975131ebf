// gRPC status codes by their canonical names, for error tallies ("grpc RESOURCE_EXHAUSTED").
#pragma once

#include <string>

#include <grpcpp/support/status.h>

namespace rill::client {

/// The canonical name of `code` ("UNAVAILABLE"), or "code N" for one outside the enum.
std::string grpc_status_name(grpc::StatusCode code);

}  // namespace rill::client
