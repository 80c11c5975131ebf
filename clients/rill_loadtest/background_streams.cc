#include "clients/rill_loadtest/background_streams.h"

#include <algorithm>
#include <stdexcept>

namespace rill::loadtest {

BackgroundStreams::BackgroundStreams(StreamClient& client, Workload& workload,
                                     const StreamsOptions& options)
    : client_(client), workload_(workload), options_(options) {}

BackgroundStreams::~BackgroundStreams() {
  stop_all();
}

void BackgroundStreams::stop_all() {
  for (const RequestSpec& s : specs_) s.control->stop.store(true);
}

void BackgroundStreams::start(double timeout_s) {
  for (int i = 0; i < options_.count; ++i) {
    specs_.push_back(workload_.long_stream(options_.prompt_len, options_.sink, options_.window));
    RequestRecord record;
    record.id = i;
    record.conversation = i;
    client_.start(specs_.back(), std::move(record), [shared = shared_](RequestRecord&& r) {
      std::lock_guard lock(shared->mu);
      shared->done.push_back(std::move(r));
      shared->cv.notify_all();
    });
  }
  const auto started = [&] {
    return std::all_of(specs_.begin(), specs_.end(),
                       [](const RequestSpec& s) { return s.control->started.load(); });
  };
  // Waits until `until` or until `ready()`; throws when a stream ended meanwhile.
  auto wait = [&](Clock::time_point until, auto ready) {
    std::unique_lock lock(shared_->mu);
    while (!ready() && Clock::now() < until) {
      if (!shared_->done.empty()) {
        const RequestRecord& r = shared_->done.front();
        throw std::runtime_error(
            "a long-lived stream ended before the load: " +
            (r.error.empty() ? "finish " + r.finish_reason : r.error + " " + r.error_message));
      }
      shared_->cv.wait_for(lock, std::chrono::milliseconds(10));
    }
  };
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  wait(deadline, started);
  if (!started())
    throw std::runtime_error("the long-lived streams did not all start within the timeout");
  wait(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(options_.settle_s)),
       [] { return false; });
}

std::vector<RequestRecord> BackgroundStreams::stop(double timeout_s) {
  stop_all();
  std::unique_lock lock(shared_->mu);
  const bool all = shared_->cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                                        [&] { return shared_->done.size() == specs_.size(); });
  if (!all) throw std::runtime_error("the long-lived streams did not stop within the timeout");
  std::vector<RequestRecord> out = std::move(shared_->done);
  std::sort(out.begin(), out.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.id < b.id; });
  return out;
}

std::vector<double> stream_gaps(const std::vector<RequestRecord>& streams, double from_s,
                                double to_s) {
  std::vector<double> gaps;
  for (const RequestRecord& r : streams)
    for (size_t k = 1; k < r.chunk_times_s.size(); ++k)
      if (r.chunk_times_s[k - 1] >= from_s && r.chunk_times_s[k] <= to_s)
        gaps.push_back(r.chunk_times_s[k] - r.chunk_times_s[k - 1]);
  return gaps;
}

StreamsBaseline streams_baseline(const std::vector<RequestRecord>& streams, double load_start_s) {
  StreamsBaseline b;
  b.streams = static_cast<int>(streams.size());
  b.load_start_s = load_start_s;
  for (const RequestRecord& r : streams) {
    if (!r.cancelled) ++b.failed;  // every stream is stopped by the client
    if (!r.chunk_times_s.empty()) b.ready_s = std::max(b.ready_s, r.chunk_times_s.front());
  }
  b.itl_before_s = stream_gaps(streams, b.ready_s, load_start_s);
  b.itl_before = summarize(b.itl_before_s);
  return b;
}

StreamsDuring streams_during(const std::vector<RequestRecord>& streams, const PhaseResult& phase,
                             const StreamsBaseline& baseline) {
  StreamsDuring d;
  d.itl_s = stream_gaps(streams, phase.start_s, phase.end_s);
  d.itl = summarize(d.itl_s);
  std::vector<double> all = d.itl_s;
  for (const RequestRecord& r : phase.records)
    if (r.ok() && !r.chunk_times_s.empty()) {
      const RequestLatency l = latency_of(r);
      all.insert(all.end(), l.itl_s.begin(), l.itl_s.end());
    }
  d.itl_all = summarize(std::move(all));
  if (baseline.itl_before.mean > 0) d.p99_over_steady = d.itl.p99 / baseline.itl_before.mean;
  return d;
}

}  // namespace rill::loadtest
