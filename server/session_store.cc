#include "server/session_store.h"

#include <chrono>

namespace rill::server {

void SessionStore::add(const std::string& id) {
  SessionEntry e;
  e.created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  std::lock_guard<std::mutex> lock(mu_);
  entries_[id] = std::move(e);
}

std::optional<SessionEntry> SessionStore::get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void SessionStore::update(const std::string& id, TurnKind kind, nlohmann::json history,
                          std::string reply_end) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = entries_.find(id);
  if (it == entries_.end()) return;
  it->second.kind = kind;
  it->second.history = std::move(history);
  it->second.reply_end = std::move(reply_end);
}

void SessionStore::forget(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.erase(id);
}

size_t SessionStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::vector<std::string> SessionStore::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back(id);
  return out;
}

}  // namespace rill::server
