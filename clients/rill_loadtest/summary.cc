#include "clients/rill_loadtest/summary.h"

#include <algorithm>

namespace rill::loadtest {
namespace {

// The most requests in flight at once (a sweep over start/end events).
int64_t max_in_flight(const std::vector<RequestRecord>& records) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : records) {
    events.emplace_back(r.start_s, 1);
    events.emplace_back(r.end_s, -1);
  }
  std::sort(events.begin(), events.end());  // at equal times ends (-1) come first
  int64_t now = 0, most = 0;
  for (const auto& e : events) most = std::max(most, now += e.second);
  return most;
}

// Requests per second over the window in which they were sent: n / (last send - phase start).
// With arrivals from the phase's start this is the realized arrival rate (n gaps summed).
double offered_rate(const std::vector<RequestRecord>& records, double start_s) {
  double last = start_s;
  for (const RequestRecord& r : records) last = std::max(last, r.start_s);
  return last > start_s ? static_cast<double>(records.size()) / (last - start_s) : 0;
}

// TTFT and cached tokens per turn, when some conversation has more than one.
std::vector<TurnSummary> by_turn(const std::vector<RequestRecord>& records) {
  int turns = 0;
  for (const RequestRecord& r : records) turns = std::max(turns, r.turn + 1);
  if (turns < 2) return {};
  std::vector<std::vector<double>> ttft(static_cast<size_t>(turns));
  std::vector<TurnSummary> out(static_cast<size_t>(turns));
  for (const RequestRecord& r : records) {
    if (!r.ok()) continue;
    TurnSummary& t = out[static_cast<size_t>(r.turn)];
    t.prompt_tokens += r.prompt_tokens;
    t.cached_tokens += r.cached_tokens;
    if (!r.chunk_times_s.empty()) ttft[static_cast<size_t>(r.turn)].push_back(latency_of(r).ttft_s);
  }
  for (int k = 0; k < turns; ++k) {
    out[static_cast<size_t>(k)].turn = k;
    out[static_cast<size_t>(k)].ttft = summarize(std::move(ttft[static_cast<size_t>(k)]));
  }
  return out;
}

}  // namespace

RunSummary summarize_run(const std::vector<RequestRecord>& records, double start_s, double end_s,
                         const Slo& slo) {
  RunSummary s;
  s.requests = static_cast<int64_t>(records.size());
  s.duration_s = std::max(end_s - start_s, 1e-9);
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestRecord& r : records) {
    s.output_tokens_all += r.output_tokens;
    if (r.cancelled) {
      ++s.cancelled;
      continue;
    }
    if (!r.error.empty()) {
      ++s.failed;
      ++s.errors[r.error];
      continue;
    }
    ++s.completed;
    ++s.finish_reasons[r.finish_reason];
    s.input_tokens += r.prompt_tokens;
    s.cached_tokens += r.cached_tokens;
    s.output_tokens += r.output_tokens;
    if (r.chunk_times_s.empty()) continue;  // no token at all (max_tokens 0): no latencies
    const RequestLatency l = latency_of(r);
    ttft.push_back(l.ttft_s);
    e2e.push_back(l.e2e_s);
    if (l.tpot_s) tpot.push_back(*l.tpot_s);
    itl.insert(itl.end(), l.itl_s.begin(), l.itl_s.end());
    if (meets_slo(slo, l.ttft_s, l.tpot_s, l.e2e_s)) ++s.good_requests;
  }
  s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
  s.output_throughput = static_cast<double>(s.output_tokens) / s.duration_s;
  s.total_token_throughput = static_cast<double>(s.input_tokens + s.output_tokens) / s.duration_s;
  if (!slo.empty()) s.goodput = static_cast<double>(s.good_requests) / s.duration_s;
  s.offered_rate = offered_rate(records, start_s);
  s.ttft = summarize(std::move(ttft));
  s.tpot = summarize(std::move(tpot));
  s.itl = summarize(std::move(itl));
  s.e2e = summarize(std::move(e2e));
  s.max_in_flight = max_in_flight(records);
  if (s.input_tokens > 0)
    s.prefix_cache_hit_rate =
        static_cast<double>(s.cached_tokens) / static_cast<double>(s.input_tokens);
  s.turns = by_turn(records);
  return s;
}

}  // namespace rill::loadtest
