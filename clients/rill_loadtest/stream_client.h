// The asynchronous transport interface: start a streamed request, be called back once when it
// ends. Implementations never block the caller and never use a thread per stream.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "clients/rill_loadtest/request.h"

namespace rill::loadtest {

using Clock = std::chrono::steady_clock;

/// Seconds from `epoch` to now.
inline double seconds_since(Clock::time_point epoch) {
  return std::chrono::duration<double>(Clock::now() - epoch).count();
}

/// Called once per request, on a transport thread, with the completed record.
using DoneCallback = std::function<void(RequestRecord&&)>;

/// An asynchronous generation transport (HTTP/SSE or gRPC).
class StreamClient {
 public:
  virtual ~StreamClient() = default;

  /// Sends `spec`; fills `record`'s times (relative to the epoch given at construction), token
  /// counts, finish reason or error, and hands it to `done`. Cancels the stream itself once
  /// `spec.cancel_after_tokens` tokens arrived.
  virtual void start(const RequestSpec& spec, RequestRecord record, DoneCallback done) = 0;
};

struct TransportOptions {
  std::string target;    // HOST:PORT
  std::string model;     // HTTP: the model name to send ("" to omit it)
  double timeout_s = 0;  // per request; 0: none
  int io_threads = 1;    // HTTP: threads running the Asio event loop
  int channels = 4;      // gRPC: channels (HTTP/2 connections) the calls are spread over
};

/// HTTP/SSE over Boost.Beast's asynchronous API (POST /v1/completions or /chat/completions).
std::unique_ptr<StreamClient> make_http_client(const TransportOptions& options,
                                               Clock::time_point epoch);

/// gRPC rill.v1.Rill/Generate with the callback API (one ClientReadReactor per call).
std::unique_ptr<StreamClient> make_grpc_client(const TransportOptions& options,
                                               Clock::time_point epoch);

}  // namespace rill::loadtest
