#include "engine/serving/request_channel.h"

namespace rill {

RequestChannel::RequestChannel(std::string id, EventNotifier notify, int max_buffered)
    : id_(std::move(id)), notify_(std::move(notify)), max_buffered_(max_buffered) {}

void RequestChannel::wake() {
  cv_.notify_all();
  if (notify_) notify_();  // outside the lock: the consumer may poll() from inside it
}

bool RequestChannel::push_chunk(TokenChunk chunk) {
  {
    std::lock_guard lock(mu_);
    if (detached_ || final_pushed_) return false;
    if (buffered_chunks_ >= max_buffered_) {
      if (!cancelled_.exchange(true)) cancel_reason_ = "consumer too slow: too many unread events";
      return false;
    }
    events_.emplace_back(std::move(chunk));
    ++buffered_chunks_;
  }
  wake();
  return true;
}

void RequestChannel::push_final(FinalEvent final) {
  {
    std::lock_guard lock(mu_);
    if (final_pushed_) return;
    final_pushed_ = true;
    if (detached_) return;
    events_.emplace_back(std::move(final));
  }
  wake();
}

std::string RequestChannel::cancel_reason() const {
  std::lock_guard lock(mu_);
  return cancel_reason_;
}

bool RequestChannel::poll(std::vector<RequestEvent>& out) {
  std::lock_guard lock(mu_);
  while (!events_.empty()) {
    if (std::holds_alternative<FinalEvent>(events_.front()))
      final_taken_ = true;
    else
      --buffered_chunks_;
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return !final_taken_;
}

std::optional<RequestEvent> RequestChannel::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (final_taken_) return std::nullopt;
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  RequestEvent e = std::move(events_.front());
  events_.pop_front();
  if (std::holds_alternative<FinalEvent>(e))
    final_taken_ = true;
  else
    --buffered_chunks_;
  return e;
}

void RequestChannel::cancel(const char* reason) {
  std::lock_guard lock(mu_);
  if (final_pushed_ || cancelled_.load()) return;
  cancel_reason_ = reason;
  cancelled_.store(true, std::memory_order_release);
}

void RequestChannel::detach() {
  std::lock_guard lock(mu_);
  detached_ = true;
  events_.clear();
  if (!final_pushed_ && !cancelled_.load()) {
    cancel_reason_ = "client went away";
    cancelled_.store(true, std::memory_order_release);
  }
}

RequestHandle::RequestHandle(std::shared_ptr<RequestChannel> channel)
    : channel_(std::move(channel)) {}

RequestHandle& RequestHandle::operator=(RequestHandle&& other) noexcept {
  if (this != &other) {
    if (channel_) channel_->detach();
    channel_ = std::move(other.channel_);
  }
  return *this;
}

RequestHandle::~RequestHandle() {
  if (channel_) channel_->detach();
}

const std::string& RequestHandle::id() const {
  static const std::string kNone;
  return channel_ ? channel_->id() : kNone;
}

bool RequestHandle::poll(std::vector<RequestEvent>& out) {
  return channel_ && channel_->poll(out);
}

std::optional<RequestEvent> RequestHandle::next(std::chrono::milliseconds timeout) {
  return channel_ ? channel_->next(timeout) : std::nullopt;
}

void RequestHandle::cancel() {
  if (channel_) channel_->cancel("cancelled by the client");
}

}  // namespace rill
