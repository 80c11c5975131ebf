// The OpenAI-compatible HTTP front end on Boost.Beast: a few Asio threads serve every
// connection (no thread per connection). Routes: POST /v1/completions, POST
// /v1/chat/completions (JSON or server-sent events), the session endpoints (POST
// /v1/sessions, GET and DELETE /v1/sessions/{id}), GET /v1/models, POST /tokenize,
// POST /detokenize, GET /health, GET /metrics. docs/api.md lists every answer.
#pragma once

#include <memory>
#include <string>

#include "engine/serving/metrics_registry.h"
#include "server/serving_context.h"

namespace rill::server {

class HttpServer {
 public:
  /// Binds `host:port` (0: ephemeral) and starts `threads` threads. Throws kUnavailable when it
  /// cannot bind. Limits (connections, buffered bodies, body size) come from ctx.config().
  HttpServer(ServingContext& ctx, const MetricsRegistry& metrics, const std::string& host, int port,
             int threads);
  ~HttpServer();  // closes every connection and joins the threads
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;
  /// The connection cap in force: max_connections, lowered to fit RLIMIT_NOFILE
  /// (connection_cap in http_limits.h).
  int max_connections() const;
  /// Closes the listening socket; open connections carry on.
  void stop_accepting();
  /// Waits up to `timeout_s` for open generation streams to end, then stops every connection.
  void stop(double timeout_s);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rill::server
