#include "server/wake_queue.h"

namespace rill::server {

WakeQueue::WakeQueue() : thread_([this] { run(); }) {}

WakeQueue::~WakeQueue() {
  stop();
}

void WakeQueue::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void WakeQueue::post(std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    queue_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void WakeQueue::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    std::function<void()> f = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    f();
    lock.lock();
  }
}

}  // namespace rill::server
