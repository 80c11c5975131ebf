// What links a gRPC reactor to the engine's notifiers of its requests. A notifier runs on an
// engine thread and may outlive the reactor (a request finishing after the call ended) and the
// server (the WakeQueue drops posts once stopped), so it holds this link, never the reactor: it
// posts one wake-up at a time to the WakeQueue, and the wake-up calls the reactor's pump()
// under the link's lock while the reactor is attached. OnDone detaches it (waiting out a
// wake-up that is running pump()) before the reactor deletes itself.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "engine/serving/request_handle.h"
#include "server/wake_queue.h"

namespace rill::server {

/// A reactor a wake-up reaches: pump() takes its ready events and starts its next write.
class Pumped {
 public:
  virtual void pump() = 0;

 protected:
  ~Pumped() = default;
};

class ReactorLink {
 public:
  explicit ReactorLink(Pumped* reactor) : reactor_(reactor) {}

  /// A notifier for an engine request of the linked reactor. `self` is this link.
  static EventNotifier notifier(std::shared_ptr<ReactorLink> self,
                                std::shared_ptr<WakeQueue> wakes) {
    return [link = std::move(self), wq = std::move(wakes)] {
      if (link->queued_.exchange(true)) return;  // a wake-up is already on its way
      wq->post([link] {
        link->queued_.store(false);
        std::lock_guard<std::mutex> l(link->mu_);
        if (link->reactor_) link->reactor_->pump();
      });
    };
  }

  /// From OnDone: later wake-ups reach nothing.
  void detach() {
    std::lock_guard<std::mutex> l(mu_);  // waits out a wake-up running pump()
    reactor_ = nullptr;
  }

 private:
  std::mutex mu_;
  Pumped* reactor_;
  std::atomic<bool> queued_{false};
};

}  // namespace rill::server
