#include "server/session_entry.h"

#include <chrono>

namespace rill::server {

namespace {

int64_t unix_seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

SessionEntry::SessionEntry() : created_(unix_seconds_now()) {}

TurnHistory SessionEntry::history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return history_;
}

void SessionEntry::set_history(TurnHistory h) {
  std::lock_guard<std::mutex> lock(mu_);
  history_ = std::move(h);
}

std::shared_ptr<SessionEntry> session_entry(const SessionInfo& info) {
  return std::dynamic_pointer_cast<SessionEntry>(info.options.attachment);
}

}  // namespace rill::server
