// The consumer's end of one request's event stream. The engine pushes events from its threads;
// the consumer takes them without blocking (poll, for reactors and event loops) or by waiting
// (next, for offline drivers and tests). Dropping the handle before the final event cancels the
// request: a consumer that went away never holds the engine up.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/serving/request.h"

namespace rill {

class RequestChannel;  // shared state; engine side in request_channel.h

class RequestHandle {
 public:
  RequestHandle() = default;
  explicit RequestHandle(std::shared_ptr<RequestChannel> channel);
  RequestHandle(RequestHandle&&) noexcept = default;
  RequestHandle& operator=(RequestHandle&& other) noexcept;
  ~RequestHandle();  // cancels the request unless its final event was taken

  const std::string& id() const;
  /// Appends every event that has arrived to `out`, without blocking. Returns false once the
  /// final event has been taken (then and later: the stream is closed).
  bool poll(std::vector<RequestEvent>& out);
  /// Waits up to `timeout` for the next event; nullopt on timeout or after the final event.
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout = std::chrono::hours(24));
  /// Asks the engine to stop the request; its final event (reason cancelled) still arrives.
  void cancel();
  bool valid() const { return channel_ != nullptr; }

 private:
  std::shared_ptr<RequestChannel> channel_;
};

/// Called on an engine thread each time new events are ready for a request's consumer. It must
/// not block or call back into the engine; typically it posts a wake-up to the consumer's
/// executor (a gRPC reactor, an Asio strand), which then poll()s.
using EventNotifier = std::function<void()>;

}  // namespace rill
