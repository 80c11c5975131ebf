// Long-lived streams (--streams, issue 33): K requests with StreamingLLM caches that decode for
// the whole run while the measured load arrives. Their inter-token latency before the load is
// their steady pace; during each phase it shows what the new prompts' prefill cost them, which
// is what a TPOT-aware scheduler keeps.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "clients/rill_loadtest/load_runner.h"
#include "clients/rill_loadtest/stats.h"
#include "clients/rill_loadtest/stream_client.h"
#include "clients/rill_loadtest/workload.h"

namespace rill::loadtest {

struct StreamsOptions {
  int count = 0;          // 0: none
  int prompt_len = 1024;  // synthetic prompt tokens of each stream
  int sink = 4;           // their cache: sinks + window (constant cost per token)
  int window = 1020;
  double settle_s = 3;  // steady decoding after the last stream's first token, before the load
};

/// Runs the streams over a transport. Thread-safe towards the transport's callbacks.
class BackgroundStreams {
 public:
  BackgroundStreams(StreamClient& client, Workload& workload, const StreamsOptions& options);
  ~BackgroundStreams();  // asks the streams still running to stop (does not wait)

  /// Starts the streams and returns once each has its first token and settle_s more have
  /// passed. Throws std::runtime_error when a stream ends first (its error), or after
  /// `timeout_s` without every first token.
  void start(double timeout_s = 600);
  /// Stops every stream at its next chunk (the client cancels it) and returns their records;
  /// throws std::runtime_error when they do not end within `timeout_s`.
  std::vector<RequestRecord> stop(double timeout_s = 60);

 private:
  // What the transport's callbacks write: shared, so a callback that comes late (after stop()
  // gave up, or after this object is gone) writes somewhere valid.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<RequestRecord> done;  // records handed back by the transport
  };
  void stop_all();

  StreamClient& client_;
  Workload& workload_;
  StreamsOptions options_;
  std::vector<RequestSpec> specs_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

/// The streams' steady pace, measured between their last first token and the load's start.
struct StreamsBaseline {
  int streams = 0;
  int failed = 0;           // ended before they were stopped (an error or a finish)
  double ready_s = 0;       // the last stream's first token (seconds since the epoch)
  double load_start_s = 0;  // the first phase's start
  Summary itl_before;       // seconds
  std::vector<double> itl_before_s;
};

/// The streams during one phase (its start to its last completion).
struct StreamsDuring {
  Summary itl;                 // the streams' gaps
  Summary itl_all;             // the streams' and the phase's requests' gaps together
  double p99_over_steady = 0;  // itl.p99 / the baseline's mean gap
  std::vector<double> itl_s;
};

/// Gaps between consecutive token chunks of `streams` that start at or after `from_s` and end at
/// or before `to_s` (seconds since the epoch).
std::vector<double> stream_gaps(const std::vector<RequestRecord>& streams, double from_s,
                                double to_s);

StreamsBaseline streams_baseline(const std::vector<RequestRecord>& streams, double load_start_s);
StreamsDuring streams_during(const std::vector<RequestRecord>& streams, const PhaseResult& phase,
                             const StreamsBaseline& baseline);

}  // namespace rill::loadtest
