// Limits that hold across all of the HTTP server's connections (docs/api.md#limits), apart from
// any socket so that unit tests can drive them:
//  - ConnectionTable: at most max_connections are open. At the cap a new connection takes the
//    place of the longest-idle one (a connection waiting for the first byte of its next
//    request, with nothing buffered), as nginx reuses idle keep-alive connections; when none is
//    idle it is refused (answered 503, or closed when too many refusals are under way).
//  - BodyBudget: the bytes of request bodies received but not yet complete, summed over every
//    connection, stay within max_buffered_body_bytes; the read that would pass it is refused.
//  - LogThrottle: one log line per period for an event that may repeat thousands of times a
//    second (accept failures, refusals), with the count of those not logged.
// Worst case of request memory: max_buffered_body_bytes for bodies plus, per connection, the
// header limit and one read buffer (kMaxHeaderBytes + kReadBufferBytes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>

namespace rill::server {

/// Largest request header block (request line and fields) of one request.
inline constexpr int64_t kMaxHeaderBytes = 64 * 1024;
/// What one connection buffers besides its body: the header and one socket read.
inline constexpr int64_t kReadBufferBytes = kMaxHeaderBytes + 16 * 1024;
/// Descriptors kept for everything but HTTP connections: the gRPC listener and its connections,
/// the engine, model files, logs, epoll and event descriptors.
inline constexpr int kReservedFds = 128;
/// Connections over the cap answered 503 at the same time; beyond, they are closed unanswered.
inline constexpr int kMaxRefusing = 32;

/// The connection cap in force: `configured`, lowered so that every admitted connection, the
/// refusals under way, one spare descriptor and kReservedFds fit in `fd_limit` (RLIMIT_NOFILE);
/// at least 1.
int connection_cap(int configured, uint64_t fd_limit);

class ConnectionTable {
 public:
  /// Closes an idle connection: called outside the table's lock, from any thread (it posts the
  /// close to the connection's own strand).
  using Evict = std::function<void()>;

  explicit ConnectionTable(int max_connections);

  /// A new connection: its id (> 0) while fewer than max_connections are open, or at the cap
  /// when the longest-idle connection gives up its place (its Evict is moved to `*evicted`, for
  /// the caller to run outside any lock); 0 when refused.
  uint64_t admit(Evict* evicted);
  /// The connection closed. An evicted connection's id is already gone (no-op).
  void release(uint64_t id);
  /// The connection waits for the first byte of its next request with nothing buffered: it may
  /// be evicted.
  void set_idle(uint64_t id, Evict evict);
  /// The connection received bytes: it is no longer evictable. False when it was evicted
  /// meanwhile (it must close).
  bool set_busy(uint64_t id);
  /// Takes the longest-idle connection out of the table, freeing its descriptor once the
  /// returned Evict runs (descriptor exhaustion); an empty function when none is idle.
  Evict evict_longest_idle();

  /// A refusal (503 answer) may start: false when kMaxRefusing are under way.
  bool begin_refusal();
  void end_refusal();

  int max_connections() const { return max_; }
  int open() const;
  int idle() const;
  int refusing() const { return refusing_.load(); }

 private:
  struct Entry {
    bool idle = false;
    std::list<uint64_t>::iterator pos;  // in idle_, when idle
    Evict evict;
  };
  Evict take_longest_idle_locked();

  const int max_;
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, Entry> open_;
  std::list<uint64_t> idle_;  // oldest first
  std::atomic<int> refusing_{0};
};

class BodyBudget {
 public:
  explicit BodyBudget(int64_t max_bytes) : max_(max_bytes) {}
  /// Charges `bytes` more to the budget; false (nothing charged) when the total would pass it.
  bool try_charge(int64_t bytes);
  void release(int64_t bytes) { used_.fetch_sub(bytes); }
  int64_t used() const { return used_.load(); }
  int64_t max_bytes() const { return max_; }

 private:
  const int64_t max_;
  std::atomic<int64_t> used_{0};
};

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogThrottle(Clock::duration period = std::chrono::seconds(10)) : period_(period) {}
  /// Counts one event. When a line is due (the first event, then at most one per period):
  /// returns how many events it stands for (this one and those not logged since the last
  /// line); else 0.
  int64_t note(Clock::time_point now = Clock::now());

 private:
  const Clock::duration period_;
  std::mutex mu_;
  Clock::time_point last_{};
  bool logged_ = false;
  int64_t pending_ = 0;
};

}  // namespace rill::server
