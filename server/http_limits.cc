#include "server/http_limits.h"

#include <algorithm>

namespace rill::server {

int connection_cap(int configured, uint64_t fd_limit) {
  // RLIM_INFINITY and other huge limits: the configured cap holds.
  const uint64_t overhead = static_cast<uint64_t>(kReservedFds) + kMaxRefusing + 1;
  const uint64_t room = fd_limit > overhead ? fd_limit - overhead : 1;
  return static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(configured, room)));
}

ConnectionTable::ConnectionTable(int max_connections) : max_(std::max(1, max_connections)) {}

ConnectionTable::Evict ConnectionTable::take_longest_idle_locked() {
  if (idle_.empty()) return {};
  const uint64_t victim = idle_.front();
  idle_.pop_front();
  auto it = open_.find(victim);
  Evict evict = std::move(it->second.evict);
  open_.erase(it);
  return evict;
}

uint64_t ConnectionTable::admit(Evict* evicted) {
  std::lock_guard lock(mu_);
  if (static_cast<int>(open_.size()) >= max_) {
    Evict e = take_longest_idle_locked();
    if (!e) return 0;
    *evicted = std::move(e);
  }
  const uint64_t id = next_id_++;
  open_.emplace(id, Entry{});
  return id;
}

void ConnectionTable::release(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  if (it->second.idle) idle_.erase(it->second.pos);
  open_.erase(it);
}

void ConnectionTable::set_idle(uint64_t id, Evict evict) {
  std::lock_guard lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  Entry& e = it->second;
  if (e.idle) idle_.erase(e.pos);
  e.idle = true;
  e.pos = idle_.insert(idle_.end(), id);
  e.evict = std::move(evict);
}

bool ConnectionTable::set_busy(uint64_t id) {
  std::lock_guard lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return false;
  Entry& e = it->second;
  if (e.idle) idle_.erase(e.pos);
  e.idle = false;
  e.evict = nullptr;
  return true;
}

ConnectionTable::Evict ConnectionTable::evict_longest_idle() {
  std::lock_guard lock(mu_);
  return take_longest_idle_locked();
}

bool ConnectionTable::begin_refusal() {
  int n = refusing_.load();
  while (n < kMaxRefusing)
    if (refusing_.compare_exchange_weak(n, n + 1)) return true;
  return false;
}

void ConnectionTable::end_refusal() {
  refusing_.fetch_sub(1);
}

int ConnectionTable::open() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(open_.size());
}

int ConnectionTable::idle() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(idle_.size());
}

bool BodyBudget::try_charge(int64_t bytes) {
  int64_t used = used_.load();
  while (true) {
    if (bytes > max_ - used) return false;
    if (used_.compare_exchange_weak(used, used + bytes)) return true;
  }
}

int64_t LogThrottle::note(Clock::time_point now) {
  std::lock_guard lock(mu_);
  ++pending_;
  if (logged_ && now - last_ < period_) return 0;
  logged_ = true;
  last_ = now;
  const int64_t n = pending_;
  pending_ = 0;
  return n;
}

}  // namespace rill::server
