// rill-serve-bench: an in-process offline driver of the serving engine. It pushes N requests of
// given prompt / output lengths through the scheduler (all at once, or at a Poisson rate) and
// reports throughput and the latencies a serving benchmark reports: time to first token, time
// per output token (after the first), inter-token latency, end to end; mean, median, p90, p99.
// With --measure-decode it also reports the loop's step interval and the device's idle share
// while every stream decodes (the CUDA runner's per-step device time). With --decode-streams K,
// K long generations start first; once they stream, the N requests arrive, and the report gives
// the streams' inter-token latency before and while the new prompts are prefilled.
// SPDLOG_LEVEL=trace logs every step: its composition, device time and the step-cost model's
// prediction (docs/scheduler.md).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include <spdlog/cfg/env.h>

#include "engine/error.h"
#include "engine/serving/serving_engine.h"
#include "tools/common/engine_flags.h"
#include "tools/common/latency_stats.h"

using namespace rill;
using rill::cli::mean;
using rill::cli::percentile;
using rill::cli::secs;

namespace {

struct Trace {  // one request, as its consumer saw it
  Clock::time_point sent;
  std::vector<Clock::time_point> token_times;  // one per token id received
  FinalEvent final;
  bool done = false;
};

void print_row(const char* name, const std::vector<double>& v) {
  std::printf("%-6s ms  mean %9.3f  median %9.3f  p90 %9.3f  p99 %9.3f  (n=%zu)\n", name, mean(v) * 1e3,
              percentile(v, 50) * 1e3, percentile(v, 90) * 1e3, percentile(v, 99) * 1e3, v.size());
}

// Wakes the collector for every request with new events.
class ReadyQueue {
 public:
  void push(size_t i) {
    {
      std::lock_guard l(mu_);
      q_.push_back(i);
    }
    cv_.notify_one();
  }
  bool pop(size_t& i) {
    std::unique_lock l(mu_);
    if (!cv_.wait_for(l, std::chrono::seconds(600), [&] { return !q_.empty(); })) return false;
    i = q_.front();
    q_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> q_;
};

}  // namespace

int main(int argc, char** argv) {
  spdlog::cfg::load_env_levels();
  cli::Args args("rill-serve-bench", "offline throughput and latency of the serving engine");
  cli::add_engine_flags(args);
  cli::add_cache_flags(args);
  args.option("num-requests", "64", "requests to send");
  args.option("input-len", "256", "prompt tokens per request (random ids)");
  args.option("output-len", "256", "tokens generated per request (EOS ignored)");
  args.option("rate", "inf", "requests per second (Poisson arrivals); inf: all at once");
  args.option("max-num-seqs", "256", "sequences per step");
  args.option("max-num-batched-tokens", "8192", "tokens per step (decode + prefill chunks)");
  args.option("tpot-aware", "true",
              "size prefill by the step-cost model within the streams' TPOT targets (false: fill "
              "--max-num-batched-tokens every step)");
  args.option("tpot-target-ms", "0",
              "TPOT target of every request (0: auto, 2x the steady decode step)");
  args.option("ttft-target-ms", "0",
              "TTFT target of every request (0: auto, 2x the unqueued TTFT)");
  args.option("temperature", "0", "sampling temperature (0: greedy)");
  args.option("seed", "1", "prompt and sampling seed");
  args.option("decode-streams", "0", "long generations running before the requests arrive");
  args.option("decode-prompt-len", "64", "prompt tokens of each decode stream");
  args.option("decode-len", "100000", "tokens each decode stream may generate (cancelled at the end)");
  args.option("decode-window", "0",
              "decode streams keep a StreamingLLM cache of 4 sinks + this window (constant cost per "
              "token, so their steady TPOT does not drift with context); 0: the --cache policy");
  args.flag("measure-decode", "report the step interval and device idle share while all requests decode");
  args.parse(argc, argv);
  try {
    const Model model = load_model(args.get("model"));
    EngineOptions eo = cli::engine_options(args);
    SchedulerConfig sc = scheduler_defaults("cuda");
    sc.max_num_seqs = args.get_int("max-num-seqs");
    sc.max_num_batched_tokens = args.get_int("max-num-batched-tokens");
    const std::string aware = args.get("tpot-aware");
    if (aware != "true" && aware != "false") args.fail("--tpot-aware must be true or false");
    sc.tpot_aware = aware == "true";
    sc.tpot_target = std::chrono::milliseconds(args.get_int("tpot-target-ms"));
    sc.ttft_target = std::chrono::milliseconds(args.get_int("ttft-target-ms"));
    // The runner sized for the scheduler's steps unless the engine flags say otherwise.
    if (!args.given("max-batch")) eo.max_batch = sc.max_num_seqs;
    if (!args.given("max-step-tokens"))
      eo.max_step_tokens = std::max(sc.max_num_batched_tokens, sc.max_num_seqs);
    const int n = args.get_int("num-requests"), in_len = args.get_int("input-len"),
              out_len = args.get_int("output-len");
    if (n <= 0 || in_len <= 0 || out_len <= 0) args.fail("--num-requests, --input-len, --output-len must be > 0");
    const int k_streams = args.get_int("decode-streams");
    if (k_streams < 0) args.fail("--decode-streams must be >= 0");
    const int total = k_streams + n;  // decode streams first, then the measured requests
    sc.max_queued_requests = total;
    sc.max_queued_prompt_tokens = static_cast<int64_t>(total) * std::max(in_len, args.get_int("decode-prompt-len"));
    sc.queue_timeout = std::chrono::hours(1);
    const std::vector<int> stops = model.stop_token_ids();
    sc.eos_token_ids.assign(stops.begin(), stops.end());
    std::unique_ptr<ModelRunner> runner = make_runner(model, eo);
    const std::string runner_name = runner->name();
    MetricsRegistry metrics;
    ServingEngine engine(std::move(runner), *model.tokenizer, sc, metrics);

    std::mt19937_64 rng(static_cast<uint64_t>(args.get_int64("seed")));
    std::vector<Request> reqs(total);
    for (int i = 0; i < total; ++i) {
      Request& r = reqs[i];
      const bool stream = i < k_streams;
      r.prompt.resize(stream ? args.get_int("decode-prompt-len") : in_len);
      for (auto& t : r.prompt) t = static_cast<int32_t>(rng() % model.config.vocab_size);
      r.max_tokens = stream ? args.get_int("decode-len") : out_len;
      r.ignore_eos = true;
      r.cache = stream && args.get_int("decode-window") > 0 ? CachePolicy::streaming(4, args.get_int("decode-window"))
                                                            : cli::cache_policy(args);
      r.sampling.temperature = static_cast<float>(args.get_double("temperature"));
      r.sampling.seed = rng();
    }
    const std::string rate_s = args.get("rate");
    const double rate = rate_s == "inf" ? 0 : std::stod(rate_s);
    std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);

    std::vector<Trace> traces(total);
    std::vector<RequestHandle> handles(total);
    ReadyQueue ready;
    std::mutex handles_mu;
    std::atomic<int> streams_started{0};
    std::atomic<int64_t> main_start_ns{0};
    const auto t0 = Clock::now();
    std::thread sender([&] {
      auto next = t0;
      for (int i = 0; i < total; ++i) {
        if (i == k_streams && k_streams > 0) {  // the streams run steadily for a second first
          while (streams_started.load() < k_streams) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          std::this_thread::sleep_for(std::chrono::seconds(1));
          next = Clock::now();
          main_start_ns.store(next.time_since_epoch().count());
        }
        if (rate > 0 && i >= k_streams) {
          next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
          std::this_thread::sleep_until(next);
        }
        traces[i].sent = Clock::now();
        RequestHandle h = engine.submit(reqs[i], [&ready, i] { ready.push(static_cast<size_t>(i)); });
        std::lock_guard l(handles_mu);
        handles[i] = std::move(h);
        ready.push(static_cast<size_t>(i));
      }
    });
    // Decode window: from all requests streaming to the first one finishing.
    int started = 0, finished = 0, main_finished = 0;
    EngineStats window_a{}, window_b{};
    Clock::time_point wa{}, wb{};
    std::vector<RequestEvent> events;
    while (main_finished < n) {
      size_t i;
      if (!ready.pop(i)) throw Error(ErrorCode::kInternal, "no events for 600 s");
      events.clear();
      {
        std::lock_guard l(handles_mu);
        if (!handles[i].valid()) continue;
        handles[i].poll(events);
      }
      const auto now = Clock::now();
      for (RequestEvent& e : events) {
        if (auto* c = std::get_if<TokenChunk>(&e)) {
          if (traces[i].token_times.empty() && !c->ids.empty()) {
            if (static_cast<int>(i) < k_streams) ++streams_started;
            else if (++started == n) {
              window_a = engine.stats();
              wa = now;
            }
          }
          traces[i].token_times.insert(traces[i].token_times.end(), c->ids.size(), now);
        } else {
          traces[i].final = std::get<FinalEvent>(e);
          traces[i].done = true;
          if (static_cast<int>(i) >= k_streams) ++main_finished;
          if (finished++ == 0 && started == n) {
            window_b = engine.stats();
            wb = now;
          }
        }
      }
    }
    sender.join();
    const auto t1 = Clock::now();
    {
      std::lock_guard l(handles_mu);
      for (int i = 0; i < k_streams; ++i) handles[i].cancel();
    }

    std::vector<double> ttft, tpot, itl, e2e;
    int64_t out_tokens = 0, errors = 0;
    for (int i = k_streams; i < total; ++i) {
      const Trace& t = traces[i];
      if (t.final.reason == FinishReason::kError || t.final.reason == FinishReason::kDeadline) ++errors;
      out_tokens += static_cast<int64_t>(t.token_times.size());
      if (t.token_times.empty()) continue;
      ttft.push_back(secs(t.sent, t.token_times.front()));
      if (t.token_times.size() > 1)
        tpot.push_back(secs(t.token_times.front(), t.token_times.back()) / (t.token_times.size() - 1));
      for (size_t k = 1; k < t.token_times.size(); ++k) itl.push_back(secs(t.token_times[k - 1], t.token_times[k]));
      e2e.push_back(secs(t.sent, t.token_times.back()));
    }
    const double dur = secs(t0, t1);
    std::printf("rill-serve-bench: %s, %s runner, %d requests of %d prompt + %d output tokens, rate %s\n",
                model.path.filename().string().c_str(), runner_name.c_str(), n, in_len, out_len, rate_s.c_str());
    std::printf("duration %.3f s | %.2f req/s | output %.1f tok/s | total %.1f tok/s | errors %lld\n", dur,
                n / dur, out_tokens / dur, (out_tokens + static_cast<double>(n) * in_len) / dur,
                static_cast<long long>(errors));
    print_row("TTFT", ttft);
    print_row("TPOT", tpot);
    print_row("ITL", itl);
    print_row("E2E", e2e);
    if (k_streams > 0) {  // the streams' ITL before the requests arrived, and while they ran
      // "Before" starts at the last stream's first token: the gaps while the streams' own prompts
      // were still being fed are no steady pace (they inflated it by ~10% until issue 33).
      const Clock::time_point split{Clock::duration(main_start_ns.load())};
      Clock::time_point ready{};
      for (int i = 0; i < k_streams; ++i)
        if (!traces[i].token_times.empty()) ready = std::max(ready, traces[i].token_times.front());
      std::vector<double> before, during;
      for (int i = 0; i < k_streams; ++i) {
        const auto& tt = traces[i].token_times;
        for (size_t k = 1; k < tt.size(); ++k) {
          if (tt[k] <= split) {
            if (tt[k - 1] >= ready) before.push_back(secs(tt[k - 1], tt[k]));
          } else if (tt[k] <= t1) {
            during.push_back(secs(tt[k - 1], tt[k]));
          }
        }
      }
      std::printf("%d decode streams:\n", k_streams);
      print_row("ITL-0", before);
      print_row("ITL-1", during);
      std::printf("p99 ITL while requests arrive / mean ITL before: %.2fx\n",
                  percentile(during, 99) / std::max(1e-12, mean(before)));
    }
    if (args.on("measure-decode") && wb > wa && window_b.steps > window_a.steps) {
      const double span = secs(wa, wb);
      const int64_t steps = window_b.steps - window_a.steps;
      const double busy = window_b.device_busy_s - window_a.device_busy_s;
      std::printf("decode window: %lld steps in %.3f s, loop step %.4f ms", static_cast<long long>(steps), span,
                  span / steps * 1e3);
      if (busy > 0) std::printf(", device busy %.4f ms per step, idle %.2f%%", busy / steps * 1e3, 100.0 * (1 - busy / span));
      std::printf("\n");
    }
    return errors ? 1 : 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
}
