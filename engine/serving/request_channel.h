// The state one request's producer (the engine) and consumer (a RequestHandle) share: a queue of
// events, the cancel flag, and the consumer's wake-up. Bounded: a consumer that leaves more than
// `max_buffered` chunks untaken is a slow reader, and its request is cancelled.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>

#include "engine/serving/request_handle.h"

namespace rill {

class RequestChannel {
 public:
  RequestChannel(std::string id, EventNotifier notify, int max_buffered);

  const std::string& id() const { return id_; }

  // Engine side.
  /// Queues a chunk; false (and nothing queued) when the consumer is gone or too slow, in which
  /// case the request must be cancelled.
  bool push_chunk(TokenChunk chunk);
  /// Queues the final event (at most once; later calls are ignored).
  void push_final(FinalEvent final);
  bool cancel_requested() const { return cancelled_.load(std::memory_order_acquire); }
  /// Why the consumer wants out: "cancelled by the client", "client went away", "consumer too
  /// slow".
  std::string cancel_reason() const;

  // Consumer side (RequestHandle).
  bool poll(std::vector<RequestEvent>& out);
  std::optional<RequestEvent> next(std::chrono::milliseconds timeout);
  void cancel(const char* reason);
  void detach();  // the handle is gone: drop events from now on, cancel unless finished

 private:
  void wake();

  const std::string id_;
  const EventNotifier notify_;
  const int max_buffered_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  int buffered_chunks_ = 0;
  bool final_pushed_ = false;
  bool final_taken_ = false;
  bool detached_ = false;
  std::atomic<bool> cancelled_{false};
  const char* cancel_reason_ = "";
};

}  // namespace rill
