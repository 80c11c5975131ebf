// Drives one phase of load (warm-up, a run, or one sweep point): open loop (arrivals on a
// schedule) or closed loop (a fixed number of client slots, each sending its next request when
// the previous one ended), bounded by a request count and/or a duration.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "clients/rill_loadtest/arrivals.h"
#include "clients/rill_loadtest/stream_client.h"
#include "clients/rill_loadtest/workload.h"

namespace rill::loadtest {

struct LoadPlan {
  bool closed_loop = false;
  ArrivalConfig arrivals;    // open loop
  int concurrency = 1;       // closed loop: client slots once ramped up
  double ramp_up_s = 0;      // closed loop: slots grow linearly from 1 to `concurrency`
  int64_t num_requests = 0;  // 0: unbounded (then duration_s bounds the phase)
  double duration_s = 0;     // 0: unbounded; no new request starts after it
  bool warmup = false;
  unsigned long long seed = 0;
};

/// The records and timing of one phase (seconds since the epoch).
struct PhaseResult {
  std::vector<RequestRecord> records;  // in completion order
  double start_s = 0, end_s = 0;       // first possible send; last completion
  int64_t conversations = 0;
};

/// Live counters, for the progress bar.
struct PhaseProgress {
  double elapsed_s = 0;
  int64_t finished = 0, in_flight = 0, errors = 0, target = 0;  // target 0: unknown
};

/// Runs phases over one transport. The calling thread runs the phase's event loop; transport
/// callbacks are posted into it, so the runner's state needs no locks.
class LoadRunner {
 public:
  LoadRunner(StreamClient& client, Workload& workload, Clock::time_point epoch)
      : client_(client), workload_(workload), epoch_(epoch) {}

  /// Runs `plan` to completion (every request started has ended). `on_progress`, when set, is
  /// called about five times a second.
  PhaseResult run(const LoadPlan& plan,
                  const std::function<void(const PhaseProgress&)>& on_progress = {});

 private:
  StreamClient& client_;
  Workload& workload_;
  Clock::time_point epoch_;
};

}  // namespace rill::loadtest
