// What a test runner's steps carried and the device time each was given, for runners that
// report synthetic step times to the serving engine (step-cost model tests and simulations).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <stdexcept>
#include <vector>

#include "engine/runner/runner.h"

namespace rill::testing {

struct LoggedStep {
  int rows = 0;         // one-token inputs (decodes)
  int64_t prefill = 0;  // tokens of longer inputs (prompt chunks)
  int chunks = 0;
  double ms = 0;  // the device time the runner reports for it

  /// The composition of a step of `inputs` (ms left 0).
  static LoggedStep of(std::span<const StepInput> inputs) {
    LoggedStep s;
    for (const StepInput& in : inputs) {
      if (in.tokens.size() == 1) {
        ++s.rows;
      } else {
        ++s.chunks;
        s.prefill += static_cast<int64_t>(in.tokens.size());
      }
    }
    return s;
  }
};

/// Steps launched and finished, oldest first (thread-safe: the engine's loop launches and
/// finishes, the test reads).
class StepLog {
 public:
  void launched(const LoggedStep& s) {
    std::lock_guard lock(mu_);
    pending_.push_back(s);
  }
  /// The oldest step launched and not finished (its time is the runner's to wait out).
  double next_ms() const {
    std::lock_guard lock(mu_);
    return pending_.empty() ? 0 : pending_.front().ms;
  }
  void finished() {
    std::lock_guard lock(mu_);
    if (pending_.empty()) throw std::logic_error("StepLog: no step launched");
    last_ms_ = pending_.front().ms;
    steps_.push_back(pending_.front());
    pending_.pop_front();
  }
  double last_ms() const {
    std::lock_guard lock(mu_);
    return last_ms_;
  }
  std::vector<LoggedStep> steps() const {
    std::lock_guard lock(mu_);
    return steps_;
  }

 private:
  mutable std::mutex mu_;
  std::deque<LoggedStep> pending_;
  std::vector<LoggedStep> steps_;
  double last_ms_ = 0;
};

}  // namespace rill::testing
