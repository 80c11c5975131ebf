// One thread that runs wake-ups posted from engine threads. An EventNotifier must not block or
// call back into the engine, so it posts here; the posted function then polls the request's
// handle and starts the next gRPC write. One thread serves every stream (no thread per stream).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace rill::server {

class WakeQueue {
 public:
  WakeQueue();
  ~WakeQueue();  // stop()
  /// Runs what is queued, then stops the thread; later posts are dropped. Idempotent.
  void stop();
  WakeQueue(const WakeQueue&) = delete;
  WakeQueue& operator=(const WakeQueue&) = delete;

  /// Queues `f` (a short critical section; never waits for `f` or for other work).
  void post(std::function<void()> f);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rill::server
