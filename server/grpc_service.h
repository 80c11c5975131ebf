// The rill.v1.Rill gRPC service on the callback API: Generate is one ServerWriteReactor per
// stream (one write in flight; the engine's notifier posts a wake-up that polls the request's
// handle and starts the next write); Session is one ServerBidiReactor per call
// (grpc_session.h); the unary methods answer inline. Plus the standard health
// service and server reflection.
#pragma once

#include <memory>
#include <string>

#include "server/serving_context.h"

namespace rill::server {

class GrpcServer {
 public:
  /// Binds `host:port` (0: ephemeral) and starts serving. Throws kUnavailable when it cannot bind.
  GrpcServer(ServingContext& ctx, const std::string& host, int port);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const;
  /// Health status follows the context (serving / not serving); called on state changes.
  void update_health();
  /// Stops accepting calls; in-flight streams get up to `deadline_s` to finish.
  void shutdown(double deadline_s);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rill::server
