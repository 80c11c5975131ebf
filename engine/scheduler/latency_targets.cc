#include "engine/scheduler/latency_targets.h"

namespace rill {

LatencyTarget resolve_target(std::optional<std::chrono::milliseconds> requested,
                             std::chrono::milliseconds server) {
  const std::chrono::milliseconds t = requested.value_or(server);
  if (requested && requested->count() == 0) return {};
  if (t.count() <= 0) return {LatencyTarget::Kind::kAuto, 0};
  return {LatencyTarget::Kind::kFixed, std::chrono::duration<double>(t).count()};
}

std::chrono::milliseconds ordering_slack(const LatencyTarget& ttft,
                                         std::chrono::milliseconds queue_timeout) {
  switch (ttft.kind) {
    case LatencyTarget::Kind::kFixed:
      return std::chrono::milliseconds(static_cast<int64_t>(ttft.seconds * 1e3));
    case LatencyTarget::Kind::kAuto:
      return kAutoOrderingTtft;
    case LatencyTarget::Kind::kNone:
      break;
  }
  return queue_timeout;
}

double target_seconds(const LatencyTarget& t, double auto_s) {
  switch (t.kind) {
    case LatencyTarget::Kind::kFixed:
      return t.seconds;
    case LatencyTarget::Kind::kAuto:
      return auto_s;
    case LatencyTarget::Kind::kNone:
      break;
  }
  return 0;
}

SloOutcome judge_slo(double ttft_target_s, double tpot_target_s, const RequestTimings& timings,
                     bool first_token, int generated, FinishReason reason) {
  SloOutcome o;
  o.ttft_target_s = ttft_target_s;
  o.tpot_target_s = tpot_target_s;
  if (reason == FinishReason::kError) return o;
  if (ttft_target_s > 0) {
    if (first_token)
      o.ttft_met = timings.ttft_s <= ttft_target_s;
    else if (reason == FinishReason::kDeadline)
      o.ttft_met = false;
  }
  if (tpot_target_s > 0 && generated > 1) o.tpot_met = timings.tpot_s <= tpot_target_s;
  return o;
}

}  // namespace rill
