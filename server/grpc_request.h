// rill.v1.GenerateRequest -> rill::Request, as the Generate call converts its request (defined in
// grpc_service.cc; declared here for the request fuzzer, tests/fuzz/grpc_request_fuzzer.cc).
#pragma once

#include <grpcpp/grpcpp.h>

#include "engine/serving/request.h"
#include "rill/v1/rill.pb.h"
#include "server/serving_context.h"

namespace rill::server {

/// The engine request of a Generate call: its input (text, token ids or chat messages) as prompt
/// ids, sampling, generation fields, cache policy, priority and the earlier of its own deadline
/// and the call's. Throws rill::Error on bad input.
Request to_request(ServingContext& ctx, const ::rill::v1::GenerateRequest& in,
                   grpc::CallbackServerContext* call);

}  // namespace rill::server
