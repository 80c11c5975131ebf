// Incremental parser of a server-sent-events body (text/event-stream): bytes in, the `data:`
// payloads of complete events out. Shared by rill-client and rill-loadtest, whose HTTP
// transports read the stream in arbitrary pieces.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rill::client {

/// Accumulates stream bytes and splits them into events (a blank line ends an event).
class SseParser {
 public:
  /// Appends `bytes` and returns the data payloads of every event now complete, in order (one
  /// payload per `data:` line; carriage returns dropped, one space after the colon removed).
  std::vector<std::string> feed(std::string_view bytes);

  /// Bytes received that do not yet form a complete event.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace rill::client
