// PREFIX.json (everything) and PREFIX.csv (one row per request).
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "clients/rill_loadtest/reports.h"
#include "clients/rill_loadtest/time_series.h"

namespace rill::loadtest {
namespace {

using nlohmann::json;

// Gaps to the microsecond (the streams' thousands of them).
json rounded(const std::vector<double>& gaps) {
  json out = json::array();
  for (double g : gaps) out.push_back(std::round(g * 1e6) / 1e6);
  return out;
}

json summary_json(const Summary& s) {
  return {{"count", s.count}, {"mean", s.mean},     {"std", s.std},
          {"min", s.min},     {"median", s.median}, {"p90", s.p90},
          {"p95", s.p95},     {"p99", s.p99},       {"max", s.max}};
}

json optional_json(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

json turns_json(const std::vector<TurnSummary>& turns) {
  json out = json::array();
  for (const TurnSummary& t : turns)
    out.push_back({{"turn", t.turn},
                   {"ttft_s", summary_json(t.ttft)},
                   {"prompt_tokens", t.prompt_tokens},
                   {"cached_tokens", t.cached_tokens}});
  return out;
}

json run_summary_json(const RunSummary& s) {
  return {{"requests", s.requests},
          {"completed", s.completed},
          {"failed", s.failed},
          {"cancelled", s.cancelled},
          {"errors", s.errors},
          {"finish_reasons", s.finish_reasons},
          {"duration_s", s.duration_s},
          {"input_tokens", s.input_tokens},
          {"output_tokens", s.output_tokens},
          {"cached_tokens", s.cached_tokens},
          {"prefix_cache_hit_rate", s.prefix_cache_hit_rate},
          {"turns", turns_json(s.turns)},
          {"output_tokens_including_cancelled", s.output_tokens_all},
          {"request_throughput", s.request_throughput},
          {"output_token_throughput", s.output_throughput},
          {"total_token_throughput", s.total_token_throughput},
          {"offered_rate", s.offered_rate},
          {"goodput", optional_json(s.goodput)},
          {"good_requests", s.good_requests},
          {"max_in_flight", s.max_in_flight},
          {"ttft_s", summary_json(s.ttft)},
          {"tpot_s", summary_json(s.tpot)},
          {"itl_s", summary_json(s.itl)},
          {"e2e_s", summary_json(s.e2e)}};
}

json server_json(const ServerDelta& d) {
  return {{"requests_by_reason", d.requests_by_reason},
          {"requests", d.requests},
          {"generation_tokens", d.generation_tokens},
          {"prompt_tokens", d.prompt_tokens},
          {"rejected", d.rejected},
          {"evicted_tokens", d.evicted_tokens},
          {"prefix_cache_queries", d.prefix_cache_queries},
          {"prefix_cache_hits", d.prefix_cache_hits},
          {"prefix_cache_evictions", d.prefix_cache_evictions},
          {"ttft_mean_s", optional_json(d.ttft_mean_s)},
          {"tpot_mean_s", optional_json(d.tpot_mean_s)},
          {"itl_mean_s", optional_json(d.itl_mean_s)},
          {"e2e_mean_s", optional_json(d.e2e_mean_s)},
          {"itl_p50_s", optional_json(d.itl_p50_s)},
          {"itl_p99_s", optional_json(d.itl_p99_s)},
          {"running_before", d.running_before},
          {"running_after", d.running_after}};
}

json record_json(const RequestRecord& r, double phase_start) {
  const RequestLatency l = latency_of(r);
  json j = {{"id", r.id},
            {"conversation", r.conversation},
            {"turn", r.turn},
            {"start_s", r.start_s - phase_start},
            {"end_s", r.end_s - phase_start},
            {"group", r.group},
            {"prompt_tokens", r.prompt_tokens},
            {"cached_tokens", r.cached_tokens},
            {"output_tokens", r.output_tokens},
            {"finish_reason", r.finish_reason},
            {"cancelled", r.cancelled},
            {"error", r.error},
            {"error_message", r.error_message},
            {"chunks", r.chunk_times_s.size()},
            {"ttft_s", r.chunk_times_s.empty() ? json(nullptr) : json(l.ttft_s)},
            {"tpot_s", optional_json(l.tpot_s)},
            {"e2e_s", l.e2e_s},
            {"itl_s", l.itl_s}};
  return j;
}

json phase_json(const PhaseReport& p) {
  json series = json::array();
  for (const TimeBucket& b : time_series(p.result.records, p.result.start_s, p.result.end_s))
    series.push_back({{"t_s", b.t_s},
                      {"completed_per_s", b.completed_per_s},
                      {"output_tokens_per_s", b.output_tokens_per_s},
                      {"mean_ttft_s", b.ttft_count ? json(b.mean_ttft_s) : json(nullptr)},
                      {"mean_e2e_s", b.e2e_count ? json(b.mean_e2e_s) : json(nullptr)},
                      {"in_flight", b.in_flight}});
  json checks = json::array();
  for (const ConsistencyCheck& c : p.checks)
    checks.push_back({{"name", c.name}, {"passed", c.passed}, {"detail", c.detail}});
  json records = json::array();
  for (const RequestRecord& r : p.result.records)
    records.push_back(record_json(r, p.result.start_s));
  json streams = nullptr;
  if (p.streams)
    streams = {{"itl_s", summary_json(p.streams->itl)},
               {"itl_all_s", summary_json(p.streams->itl_all)},
               {"p99_over_steady", p.streams->p99_over_steady},
               {"gaps_s", rounded(p.streams->itl_s)}};
  return {{"mode", p.mode},
          {"load", p.load},
          {"summary", run_summary_json(p.summary)},
          {"server", p.server ? server_json(*p.server) : json(nullptr)},
          {"checks", checks},
          {"saturated", p.saturated},
          {"saturation_reason", p.saturation_reason},
          {"streams", streams},
          {"time_series", series},
          {"requests", records}};
}

json config_json(const LoadTestOptions& o) {
  const WorkloadConfig& w = o.workload;
  const auto dist = [](const LengthDist& d) {
    static const char* kNames[] = {"fixed", "uniform", "normal"};
    return json{{"mean", d.mean}, {"kind", kNames[static_cast<int>(d.kind)]}, {"ratio", d.ratio}};
  };
  return {{"argv", o.argv},
          {"protocol", o.use_grpc ? "grpc" : "http"},
          {"target", o.transport.target},
          {"metrics_url", o.metrics_url},
          {"mode", o.concurrency ? "closed" : "open"},
          {"rate", std::isinf(o.rate) ? json("inf") : json(o.rate)},
          {"burstiness", o.burstiness},
          {"constant_arrivals", o.constant_arrivals},
          {"concurrency", o.concurrency ? json(*o.concurrency) : json(nullptr)},
          {"ramp_up_s", o.ramp_up_s},
          {"num_requests", o.num_requests},
          {"duration_s", o.duration_s},
          {"warmup_requests", o.warmup_requests},
          {"sweep", o.sweep},
          {"saturation_throughput_ratio", o.saturation_throughput_ratio},
          {"saturation_ttft_factor", o.saturation_ttft_factor},
          {"input_len", dist(w.input_len)},
          {"output_len", dist(w.output_len)},
          {"prompts_file", w.prompts_file},
          {"shared_prefix_groups", w.shared_prefix_groups},
          {"shared_prefix_len", w.shared_prefix_len},
          {"turns", w.turns},
          {"chat", w.chat},
          {"ignore_eos", w.ignore_eos},
          {"cache", w.cache},
          {"sink", w.sink},
          {"window", w.window},
          {"cancel_fraction", w.cancel_fraction},
          {"slo", o.slo_spec},
          {"targets", o.targets_spec},
          {"streams",
           {{"count", o.streams.count},
            {"prompt_len", o.streams.prompt_len},
            {"sink", o.streams.sink},
            {"window", o.streams.window},
            {"settle_s", o.streams.settle_s}}},
          {"seed", o.seed}};
}

}  // namespace

json report_json(const RunReport& report) {
  json phases = json::array();
  for (const PhaseReport& p : report.phases) phases.push_back(phase_json(p));
  json sweep = json::array();
  if (report.sweep())
    for (const PhaseReport& p : report.phases)
      sweep.push_back({{"load", p.load},
                       {"request_throughput", p.summary.request_throughput},
                       {"output_token_throughput", p.summary.output_throughput},
                       {"offered_rate", p.summary.offered_rate},
                       {"ttft_median_s", p.summary.ttft.median},
                       {"ttft_p99_s", p.summary.ttft.p99},
                       {"tpot_median_s", p.summary.tpot.median},
                       {"e2e_median_s", p.summary.e2e.median},
                       {"saturated", p.saturated},
                       {"saturation_reason", p.saturation_reason}});
  json streams = nullptr;
  if (report.streams)
    streams = {{"streams", report.streams->streams},
               {"failed", report.streams->failed},
               {"ready_s", report.streams->ready_s},
               {"load_start_s", report.streams->load_start_s},
               {"itl_before_s", summary_json(report.streams->itl_before)},
               {"gaps_before_s", rounded(report.streams->itl_before_s)}};
  return {{"tool", "rill-loadtest"},
          {"config", config_json(*report.options)},
          {"warmup", {{"requests", report.warmup_requests}, {"errors", report.warmup_errors}}},
          {"metrics_error", report.metrics_error},
          {"streams", streams},
          {"phases", phases},
          {"sweep", sweep}};
}

void write_json_and_csv(const RunReport& report, const std::string& prefix) {
  std::ofstream json_out(prefix + ".json");
  json_out << report_json(report).dump(1) << "\n";
  std::ofstream csv(prefix + ".csv");
  csv << "phase,load,id,conversation,turn,start_s,end_s,ttft_s,tpot_s,e2e_s,prompt_tokens,"
         "output_tokens,chunks,finish_reason,cancelled,error,cached_tokens,group\n";
  for (size_t i = 0; i < report.phases.size(); ++i) {
    const PhaseReport& p = report.phases[i];
    for (const RequestRecord& r : p.result.records) {
      const RequestLatency l = latency_of(r);
      csv << i << ',' << p.load << ',' << r.id << ',' << r.conversation << ',' << r.turn << ','
          << r.start_s - p.result.start_s << ',' << r.end_s - p.result.start_s << ',';
      if (!r.chunk_times_s.empty()) csv << l.ttft_s;
      csv << ',';
      if (l.tpot_s) csv << *l.tpot_s;
      csv << ',' << l.e2e_s << ',' << r.prompt_tokens << ',' << r.output_tokens << ','
          << r.chunk_times_s.size() << ',' << r.finish_reason << ',' << (r.cancelled ? 1 : 0) << ','
          << r.error << ',' << r.cached_tokens << ',' << r.group << '\n';
    }
  }
  if (!json_out || !csv) throw std::runtime_error("cannot write " + prefix + ".json/.csv");
}

}  // namespace rill::loadtest
