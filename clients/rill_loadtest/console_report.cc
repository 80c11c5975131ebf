// The console summary: vLLM `bench serve`'s table layout, with the server's figures beside the
// client's and the consistency checks.
#include <cmath>

#include "clients/rill_loadtest/reports.h"

namespace rill::loadtest {
namespace {

void line(std::FILE* out, const char* name, const std::string& value) {
  std::fprintf(out, "%-44s %s\n", name, value.c_str());
}

std::string num(double v, int precision = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

std::string count(int64_t v) {
  return std::to_string(v);
}

void latency_block(std::FILE* out, const char* title, const Summary& s,
                   const std::optional<double>& server_mean) {
  std::fprintf(out, "%s\n", title);
  line(out, "  Mean (ms):",
       num(s.mean * 1e3) + (server_mean ? "   (server " + num(*server_mean * 1e3) + ")" : ""));
  line(out, "  Median (ms):", num(s.median * 1e3));
  line(out, "  Std (ms):", num(s.std * 1e3));
  line(out, "  P90 (ms):", num(s.p90 * 1e3));
  line(out, "  P99 (ms):", num(s.p99 * 1e3));
}

void print_phase(const PhaseReport& p, std::FILE* out) {
  const RunSummary& s = p.summary;
  const ServerDelta* d = p.server ? &*p.server : nullptr;
  std::fprintf(out, "============ Serving Benchmark Result (%s loop, %s %g) ============\n",
               p.mode.c_str(), p.mode == "open" ? "rate" : "concurrency", p.load);
  line(out, "Successful requests:", count(s.completed));
  line(out, "Failed requests:", count(s.failed));
  for (const auto& [code, n] : s.errors) line(out, ("  " + code + ":").c_str(), count(n));
  if (s.cancelled) line(out, "Cancelled by the client:", count(s.cancelled));
  line(out, "Max requests in flight:", count(s.max_in_flight));
  line(out, "Benchmark duration (s):", num(s.duration_s));
  line(out, "Total input tokens:", count(s.input_tokens));
  line(out, "Total generated tokens:", count(s.output_tokens));
  line(out, "Prompt tokens from the prefix cache:",
       count(s.cached_tokens) + " (" + num(100 * s.prefix_cache_hit_rate, 1) + "%)");
  if (p.mode == "open") line(out, "Offered request rate (req/s):", num(s.offered_rate));
  line(out, "Request throughput (req/s):", num(s.request_throughput));
  if (s.goodput) line(out, "Request goodput (req/s):", num(*s.goodput));
  line(out, "Output token throughput (tok/s):", num(s.output_throughput));
  line(out, "Total token throughput (tok/s):", num(s.total_token_throughput));
  latency_block(out, "---------------Time to First Token----------------", s.ttft,
                d ? d->ttft_mean_s : std::nullopt);
  if (!s.turns.empty()) {
    std::fprintf(out, "---------------TTFT by turn (ms)------------------\n");
    for (const TurnSummary& t : s.turns)
      line(out, ("  turn " + std::to_string(t.turn + 1) + " median / p90, cached:").c_str(),
           num(t.ttft.median * 1e3) + " / " + num(t.ttft.p90 * 1e3) + ", " +
               num(t.prompt_tokens ? 100.0 * t.cached_tokens / t.prompt_tokens : 0, 1) + "%");
  }
  latency_block(out, "-----Time per Output Token (excl. 1st token)------", s.tpot,
                d ? d->tpot_mean_s : std::nullopt);
  latency_block(out, "---------------Inter-token Latency----------------", s.itl,
                d ? d->itl_mean_s : std::nullopt);
  latency_block(out, "----------------End-to-end Latency---------------", s.e2e,
                d ? d->e2e_mean_s : std::nullopt);
  if (d) {
    std::fprintf(out, "-------------Server /metrics (deltas)-------------\n");
    for (const auto& [reason, n] : d->requests_by_reason)
      if (n != 0) line(out, ("  requests " + reason + ":").c_str(), num(n, 0));
    line(out, "  generation tokens:", num(d->generation_tokens, 0));
    line(out, "  prompt tokens:", num(d->prompt_tokens, 0));
    if (d->prefix_cache_queries > 0)
      line(out, "  prefix cache hits / queries:",
           num(d->prefix_cache_hits, 0) + " / " + num(d->prefix_cache_queries, 0) + " tokens (" +
               num(100 * d->prefix_cache_hits / d->prefix_cache_queries, 1) + "%), " +
               num(d->prefix_cache_evictions, 0) + " blocks evicted");
    for (const ConsistencyCheck& c : p.checks)
      line(out, ("  check " + c.name + ":").c_str(),
           std::string(c.passed ? "ok" : "MISMATCH") + " (" + c.detail + ")");
  }
  if (d && d->itl_p50_s)
    line(out, "  ITL p50 / p99 (ms, histogram):",
         num(*d->itl_p50_s * 1e3) + " / " + num(d->itl_p99_s.value_or(0) * 1e3));
  if (p.streams) {
    std::fprintf(out, "-------Long-lived streams during the load--------\n");
    line(out, "  ITL mean / p50 / p99 (ms):",
         num(p.streams->itl.mean * 1e3) + " / " + num(p.streams->itl.median * 1e3) + " / " +
             num(p.streams->itl.p99 * 1e3));
    line(out, "  ITL p99 / steady mean:", num(p.streams->p99_over_steady) + "x");
    line(out, "  All gaps p50 / p99 (ms, + requests):",
         num(p.streams->itl_all.median * 1e3) + " / " + num(p.streams->itl_all.p99 * 1e3));
  }
  if (p.saturated) line(out, "Saturated:", p.saturation_reason);
  std::fprintf(out, "==================================================\n");
}

void print_streams(const StreamsBaseline& b, std::FILE* out) {
  std::fprintf(out, "======== Long-lived streams before the load ========\n");
  line(out,
       "Streams:", count(b.streams) + (b.failed ? " (" + count(b.failed) + " ended early)" : ""));
  line(out, "Steady window (s):", num(b.load_start_s - b.ready_s));
  line(out, "ITL mean / p50 / p99 (ms):",
       num(b.itl_before.mean * 1e3) + " / " + num(b.itl_before.median * 1e3) + " / " +
           num(b.itl_before.p99 * 1e3));
}

}  // namespace

void print_console_report(const RunReport& report, std::FILE* out) {
  if (report.warmup_requests)
    std::fprintf(out, "Warm-up: %lld requests (%lld errors), excluded from the figures\n",
                 static_cast<long long>(report.warmup_requests),
                 static_cast<long long>(report.warmup_errors));
  if (!report.metrics_error.empty())
    std::fprintf(out, "Server /metrics not available: %s\n", report.metrics_error.c_str());
  if (report.streams) print_streams(*report.streams, out);
  for (const PhaseReport& p : report.phases) print_phase(p, out);
  if (!report.sweep()) return;
  std::fprintf(out, "Sweep (%s):\n%12s %12s %12s %12s %12s %12s  %s\n",
               report.phases.empty() ? "" : report.phases[0].mode.c_str(), "load", "req/s", "tok/s",
               "TTFT p50 ms", "TPOT p50 ms", "E2E p50 ms", "saturated");
  for (const PhaseReport& p : report.phases)
    std::fprintf(out, "%12g %12.2f %12.1f %12.2f %12.2f %12.2f  %s\n", p.load,
                 p.summary.request_throughput, p.summary.output_throughput,
                 p.summary.ttft.median * 1e3, p.summary.tpot.median * 1e3,
                 p.summary.e2e.median * 1e3, p.saturated ? p.saturation_reason.c_str() : "no");
}

}  // namespace rill::loadtest
