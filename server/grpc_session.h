// The rill.v1.Rill/Session call: one ServerBidiReactor per call. The client opens (creates or
// attaches to) a session, then sends turns one at a time; each turn's tokens stream back, then
// a message with its final information. A turn sent while one runs, or refused by the engine,
// gets a TurnError message and the call goes on; a session that is gone (expired, deleted) ends
// the call with NOT_FOUND. The call's end (WritesDone after the last final, cancel, disconnect)
// closes a session the call created and frees its cache.
#pragma once

#include <memory>

#include <grpcpp/grpcpp.h>

#include "rill/v1/rill.pb.h"
#include "server/serving_context.h"
#include "server/wake_queue.h"

namespace rill::server {

/// A new reactor for one Session call; it deletes itself when the call is done.
grpc::ServerBidiReactor<::rill::v1::SessionRequest, ::rill::v1::SessionResponse>*
start_session_call(ServingContext& ctx, std::shared_ptr<WakeQueue> wakes,
                   grpc::CallbackServerContext* call);

}  // namespace rill::server
