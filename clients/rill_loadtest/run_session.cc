#include "clients/rill_loadtest/run_session.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include "clients/rill_loadtest/background_streams.h"
#include "clients/rill_loadtest/remote_tokenizer.h"

namespace rill::loadtest {
namespace {

Workload make_workload(const LoadTestOptions& o) {
  std::vector<PromptEntry> prompts;
  std::vector<int32_t> pool;
  std::vector<std::string> words;
  double tokens_per_word = 1;
  try {
    if (!o.workload.prompts_file.empty()) prompts = read_prompts(o.workload.prompts_file);
    pool = tokenize_remote(o, synthetic_passage());
  } catch (const std::exception& e) {
    throw SetupError(e.what());
  }
  std::istringstream in(synthetic_passage());
  for (std::string w; in >> w;) words.push_back(w);
  if (!words.empty()) tokens_per_word = static_cast<double>(pool.size()) / words.size();
  return Workload(o.workload, std::move(prompts), std::move(pool), std::move(words),
                  tokens_per_word);
}

LoadPlan plan_for(const LoadTestOptions& o, double load) {
  LoadPlan p;
  p.closed_loop = o.concurrency.has_value();
  p.concurrency = p.closed_loop ? static_cast<int>(load) : 1;
  p.arrivals = {load, o.burstiness, o.constant_arrivals, o.ramp_up_s};
  p.ramp_up_s = o.ramp_up_s;
  p.num_requests = o.num_requests;
  p.duration_s = o.duration_s;
  p.seed = o.seed;
  return p;
}

// Scrapes /metrics until the server has settled after a phase: the running gauge back at its
// baseline and `client_requests` more finished or refused requests (the server counts a
// cancellation when it notices the disconnect, a little after the client left). Gives up
// after 10 s.
std::optional<PromSnapshot> settled_scrape(const LoadTestOptions& o, const PromSnapshot& before,
                                           int64_t client_requests, std::string& error) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::optional<PromSnapshot> after;
  while (true) {
    after = scrape_metrics(o.metrics_url, error);
    if (!after) return after;
    const bool running_ok =
        after->sum("rill_requests_running") <= before.sum("rill_requests_running");
    const double counted = after->sum("rill_requests_total") - before.sum("rill_requests_total") +
                           after->sum("rill_requests_rejected_total") -
                           before.sum("rill_requests_rejected_total");
    if ((running_ok && counted >= static_cast<double>(client_requests)) || Clock::now() > deadline)
      return after;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

PhaseReport run_phase(const LoadTestOptions& o, LoadRunner& runner, ProgressBar& progress,
                      double load, RunReport& report) {
  PhaseReport phase;
  phase.mode = o.concurrency ? "closed" : "open";
  phase.load = load;
  std::string error;
  const std::optional<PromSnapshot> before = scrape_metrics(o.metrics_url, error);
  char label[64];
  std::snprintf(label, sizeof label, "%s %g", o.concurrency ? "concurrency" : "rate", load);
  phase.result =
      runner.run(plan_for(o, load), [&](const PhaseProgress& p) { progress.update(label, p); });
  progress.finish();
  phase.summary =
      summarize_run(phase.result.records, phase.result.start_s, phase.result.end_s, o.slo);
  std::optional<PromSnapshot> after;
  // Failed requests may never have reached the engine (a 404, an invalid prompt): only the
  // completed and cancelled ones must show up in the server's counts.
  if (before)
    after = settled_scrape(o, *before, phase.summary.completed + phase.summary.cancelled, error);
  if (before && after) {
    phase.server = server_delta(*before, *after);
    phase.checks = check_consistency(phase.summary, *phase.server, o.streams.count > 0);
  } else {
    report.metrics_error = error;
  }
  return phase;
}

// The run, or the sweep's points until one saturates.
void run_phases(const LoadTestOptions& o, LoadRunner& runner, ProgressBar& progress,
                RunReport& report) {
  if (o.sweep.empty()) {
    report.phases.push_back(
        run_phase(o, runner, progress, o.concurrency ? *o.concurrency : o.rate, report));
    return;
  }
  for (double load : o.sweep) {
    report.phases.push_back(run_phase(o, runner, progress, load, report));
    PhaseReport& cur = report.phases.back();
    const PhaseReport* prev =
        report.phases.size() > 1 ? &report.phases[report.phases.size() - 2] : nullptr;
    cur.saturation_reason = saturation_reason(
        report.phases.front(), prev, cur, o.saturation_throughput_ratio, o.saturation_ttft_factor);
    cur.saturated = !cur.saturation_reason.empty();
    if (cur.saturated) return;
  }
}

}  // namespace

RunReport run_session(const LoadTestOptions& o, ProgressBar& progress) {
  RunReport report;
  report.options = &o;
  const Clock::time_point epoch = Clock::now();
  std::unique_ptr<StreamClient> client;
  try {
    client =
        o.use_grpc ? make_grpc_client(o.transport, epoch) : make_http_client(o.transport, epoch);
  } catch (const std::exception& e) {
    throw SetupError("cannot reach " + o.transport.target + ": " + e.what());
  }
  Workload workload = make_workload(o);
  LoadRunner runner(*client, workload, epoch);

  if (o.warmup_requests > 0) {
    LoadPlan warm;
    warm.closed_loop = true;
    warm.concurrency = static_cast<int>(
        std::min<int64_t>(o.warmup_requests, o.concurrency ? std::max(1, *o.concurrency) : 4));
    warm.num_requests = o.warmup_requests;
    warm.warmup = true;
    const PhaseResult r =
        runner.run(warm, [&](const PhaseProgress& p) { progress.update("warm-up", p); });
    progress.finish();
    report.warmup_requests = static_cast<int64_t>(r.records.size());
    report.warmup_errors = std::count_if(r.records.begin(), r.records.end(),
                                         [](const RequestRecord& x) { return !x.error.empty(); });
  }

  std::optional<BackgroundStreams> streams;
  if (o.streams.count > 0) {
    streams.emplace(*client, workload, o.streams);
    try {
      streams->start();
    } catch (const std::exception& e) {
      throw SetupError(e.what());
    }
  }
  run_phases(o, runner, progress, report);
  if (streams) {
    std::vector<RequestRecord> records;
    try {
      records = streams->stop();
    } catch (const std::exception& e) {
      throw SetupError(e.what());
    }
    report.streams = streams_baseline(records, report.phases.front().result.start_s);
    for (PhaseReport& p : report.phases)
      p.streams = streams_during(records, p.result, *report.streams);
  }
  return report;
}

}  // namespace rill::loadtest
