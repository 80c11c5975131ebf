// rill-session-bench: multi-turn sessions in the serving engine, in process.
//
//   --mode conversation: one long conversation kept as a session (sinks + window cache) for
//     --turns turns of --turn-len new tokens and --answer-len generated ones; then the same
//     conversation sent the usual way (the whole history re-sent each turn with a `full` cache)
//     until it reaches the model's context. Per turn: time to first token and KV blocks in use.
//   --mode offload: --streams long generations run; --sessions sessions each take a first turn
//     of --first-len tokens and go idle, most of them offloaded to host memory (the pool budget
//     for idle sessions is --session-gpu-fraction); then every session takes a second turn,
//     --concurrency at a time, restoring its cache. Reports restore times, the turns' TTFT
//     (restored against resident) and the streams' inter-token latency before and during.
// --json FILE writes every per-turn figure.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/serving/serving_engine.h"
#include "tools/common/engine_flags.h"
#include "tools/common/latency_stats.h"

using namespace rill;
using json = nlohmann::json;
using rill::cli::mean;
using rill::cli::percentile;
using rill::cli::secs;

namespace {

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

// One request as its consumer saw it: tokens, the time of the first, KV blocks in use then.
struct Turn {
  std::vector<int32_t> ids;
  double ttft_s = 0;
  int kv_blocks = 0;
  FinalEvent final;
};

Turn run_turn(ServingEngine& engine, const Request& r) {
  Turn t;
  const auto sent = Clock::now();
  RequestHandle h = engine.submit(r);
  for (;;) {
    auto e = h.next(std::chrono::minutes(10));
    if (!e) throw Error(ErrorCode::kInternal, "no event for 10 minutes");
    if (auto* c = std::get_if<TokenChunk>(&*e)) {
      if (t.ids.empty() && !c->ids.empty()) {
        t.ttft_s = secs(sent, Clock::now());
        t.kv_blocks = engine.stats().kv_blocks_used;
      }
      t.ids.insert(t.ids.end(), c->ids.begin(), c->ids.end());
    } else {
      t.final = std::get<FinalEvent>(*e);
      if (t.final.reason == FinishReason::kError || t.final.reason == FinishReason::kDeadline)
        throw Error(t.final.error_code, "turn failed: " + t.final.error_message);
      return t;
    }
  }
}

Request greedy_request(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

double histogram_mean(const MetricsRegistry& m, const std::string& name, uint64_t* count) {
  for (const MetricFamily& f : m.snapshot())
    if (f.name == name && !f.series.empty()) {
      *count = f.series[0].histogram.count;
      return f.series[0].histogram.count ? f.series[0].histogram.sum / f.series[0].histogram.count
                                         : 0;
    }
  *count = 0;
  return 0;
}

json conversation(ServingEngine& engine, const cli::Args& args, int vocab, int context) {
  const int turns = args.get_int("turns"), turn_len = args.get_int("turn-len"),
            answer = args.get_int("answer-len");
  SessionOptions so;
  so.cache = CachePolicy::streaming(args.get_int("sink"), args.get_int("window"));
  const std::string id = engine.create_session(so).options.id;
  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int64("seed")));
  std::vector<std::vector<int32_t>> history;  // per turn: its tokens then the answer
  json session = json::array(), resend = json::array();
  for (int t = 0; t < turns; ++t) {
    Request r = greedy_request(random_tokens(rng, turn_len, vocab), answer);
    r.session_id = id;
    const Turn res = run_turn(engine, r);
    history.push_back(r.prompt);
    history.back().insert(history.back().end(), res.ids.begin(), res.ids.end());
    session.push_back({{"turn", t},
                       {"ttft_ms", res.ttft_s * 1e3},
                       {"kv_blocks", res.kv_blocks},
                       {"prompt_tokens", r.prompt.size()}});
    if (t % 100 == 99)
      std::fprintf(stderr, "session turn %d: ttft %.2f ms\n", t + 1, res.ttft_s * 1e3);
  }
  // The same conversation re-sent whole each turn, until it no longer fits the context.
  std::vector<int32_t> prompt;
  for (int t = 0; t < turns; ++t) {
    const size_t own = history[t].size() - static_cast<size_t>(answer);  // the turn's new tokens
    std::vector<int32_t> p = prompt;
    p.insert(p.end(), history[t].begin(), history[t].begin() + static_cast<std::ptrdiff_t>(own));
    if (static_cast<int>(p.size()) + answer > context) break;
    const Turn res = run_turn(engine, greedy_request(p, answer));
    resend.push_back({{"turn", t},
                      {"ttft_ms", res.ttft_s * 1e3},
                      {"kv_blocks", res.kv_blocks},
                      {"prompt_tokens", p.size()}});
    prompt.insert(prompt.end(), history[t].begin(), history[t].end());
  }
  std::vector<double> early, late;
  for (const json& j : session) {
    const int t = j["turn"];
    if (t >= 10 && t < 110) early.push_back(j["ttft_ms"]);
    if (t >= turns - 100) late.push_back(j["ttft_ms"]);
  }
  const SessionInfo info = engine.session_info(id);
  json summary = {
      {"turns", turns},
      {"tokens_seen", info.tokens_seen},
      {"tokens_evicted", info.tokens_evicted},
      {"ttft_ms_turns_10_110", mean(early)},
      {"ttft_ms_last_100", mean(late)},
      {"last_over_early", mean(late) / std::max(1e-9, mean(early))},
      {"resend_turns", resend.size()},
      {"resend_last_ttft_ms", resend.empty() ? 0.0 : resend.back()["ttft_ms"].get<double>()}};
  std::printf(
      "session: %d turns (%lld tokens seen, %lld evicted); TTFT mean turns 10-110 %.3f ms, last "
      "100 %.3f ms "
      "(%.3fx); KV blocks first/last turn %d/%d\n",
      turns, static_cast<long long>(info.tokens_seen), static_cast<long long>(info.tokens_evicted),
      mean(early), mean(late), mean(late) / std::max(1e-9, mean(early)),
      session.front()["kv_blocks"].get<int>(), session.back()["kv_blocks"].get<int>());
  if (!resend.empty())
    std::printf(
        "re-sent history (full cache): %zu turns until the %d-token context; TTFT first %.3f ms, "
        "last %.3f ms "
        "(%d prompt tokens, %d KV blocks)\n",
        resend.size(), context, resend.front()["ttft_ms"].get<double>(),
        resend.back()["ttft_ms"].get<double>(), resend.back()["prompt_tokens"].get<int>(),
        resend.back()["kv_blocks"].get<int>());
  return {{"session", session}, {"resend", resend}, {"summary", summary}};
}

// Long generations whose inter-token gaps are recorded until stop().
class Streams {
 public:
  Streams(ServingEngine& engine, int n, int window, int vocab, std::mt19937_64& rng) {
    for (int i = 0; i < n; ++i) {
      Request r = greedy_request(random_tokens(rng, 64, vocab), 1 << 30);
      r.cache = CachePolicy::streaming(4, window);
      handles_.push_back(engine.submit(r));
    }
    times_.resize(n);
    for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { read(i); });
  }
  ~Streams() { stop(); }
  void stop() {
    for (RequestHandle& h : handles_) h.cancel();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
  }
  bool all_started() {
    std::lock_guard l(mu_);
    return std::all_of(times_.begin(), times_.end(), [](const auto& v) { return v.size() > 1; });
  }
  // Gaps between tokens that arrived within [a, b).
  std::vector<double> gaps(Clock::time_point a, Clock::time_point b) {
    std::lock_guard l(mu_);
    std::vector<double> g;
    for (const auto& v : times_)
      for (size_t k = 1; k < v.size(); ++k)
        if (v[k] >= a && v[k] < b) g.push_back(secs(v[k - 1], v[k]));
    return g;
  }

 private:
  void read(int i) {
    for (;;) {
      auto e = handles_[i].next(std::chrono::minutes(10));
      if (!e || std::holds_alternative<FinalEvent>(*e)) return;
      const auto now = Clock::now();
      std::lock_guard l(mu_);
      times_[i].insert(times_[i].end(), std::get<TokenChunk>(*e).ids.size(), now);
    }
  }
  std::vector<RequestHandle> handles_;
  std::mutex mu_;
  std::vector<std::vector<Clock::time_point>> times_;
  std::vector<std::thread> threads_;
};

json offload(ServingEngine& engine, const MetricsRegistry& metrics, const cli::Args& args,
             int vocab) {
  const int n = args.get_int("sessions"), first = args.get_int("first-len"),
            turn_len = args.get_int("turn-len"), answer = args.get_int("answer-len"),
            conc = std::max(1, args.get_int("concurrency"));
  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int64("seed")));
  Streams streams(engine, args.get_int("streams"), args.get_int("stream-window"), vocab, rng);
  while (!streams.all_started()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto base_a = Clock::now() - std::chrono::seconds(2), base_b = Clock::now();

  SessionOptions so;
  so.cache = CachePolicy::streaming(args.get_int("sink"), args.get_int("window"));
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(engine.create_session(so).options.id);
  // Turns of many sessions, `conc` at a time; per turn: TTFT and whether its cache was in host
  // memory.
  auto run_all = [&](int len, std::vector<double>& ttft, std::vector<bool>& restored) {
    std::mutex mu;
    size_t next = 0;
    std::vector<std::thread> workers;
    for (int w = 0; w < conc; ++w)
      workers.emplace_back([&] {
        for (;;) {
          size_t i;
          Request r;
          {
            std::lock_guard l(mu);
            if (next == ids.size()) return;
            i = next++;
            r = greedy_request(random_tokens(rng, len, vocab), answer);
          }
          r.session_id = ids[i];
          const bool host = engine.session_info(ids[i]).residence == SessionResidence::kHost;
          const Turn t = run_turn(engine, r);
          std::lock_guard l(mu);
          ttft.push_back(t.ttft_s);
          restored.push_back(host);
        }
      });
    for (std::thread& w : workers) w.join();
  };
  std::vector<double> first_ttft, second_ttft;
  std::vector<bool> first_restored, second_restored;
  run_all(first, first_ttft, first_restored);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(500));  // the budget offloads the idle caches
  int offloaded = 0;
  for (const std::string& id : ids)
    offloaded += engine.session_info(id).residence == SessionResidence::kHost;
  std::shuffle(ids.begin(), ids.end(), rng);
  const auto during_a = Clock::now();
  run_all(turn_len, second_ttft, second_restored);
  const auto during_b = Clock::now();
  streams.stop();

  std::vector<double> restored_ttft, resident_ttft;
  for (size_t i = 0; i < second_ttft.size(); ++i)
    (second_restored[i] ? restored_ttft : resident_ttft).push_back(second_ttft[i]);
  uint64_t restores = 0, offloads = 0;
  const double restore_s = histogram_mean(metrics, "rill_session_restore_seconds", &restores);
  const double offload_s = histogram_mean(metrics, "rill_session_offload_seconds", &offloads);
  const std::vector<double> before = streams.gaps(base_a, base_b),
                            during = streams.gaps(during_a, during_b);
  std::printf(
      "%d sessions (%d-token first turns, 4+%d caches), %d offloaded while idle; %llu offloads "
      "(device "
      "%.3f ms each), %llu restores (device %.3f ms each)\n",
      n, first, args.get_int("window"), offloaded, static_cast<unsigned long long>(offloads),
      offload_s * 1e3, static_cast<unsigned long long>(restores), restore_s * 1e3);
  std::printf(
      "second turns (%d new tokens, %d at a time): TTFT restored p50 %.2f p99 %.2f ms (n=%zu), "
      "resident p50 "
      "%.2f p99 %.2f ms (n=%zu)\n",
      turn_len, conc, percentile(restored_ttft, 50) * 1e3, percentile(restored_ttft, 99) * 1e3,
      restored_ttft.size(), percentile(resident_ttft, 50) * 1e3,
      percentile(resident_ttft, 99) * 1e3, resident_ttft.size());
  std::printf(
      "%d streams' ITL: before p50 %.3f p99 %.3f max %.3f ms; during the second turns p50 %.3f p99 "
      "%.3f max "
      "%.3f ms\n",
      args.get_int("streams"), percentile(before, 50) * 1e3, percentile(before, 99) * 1e3,
      percentile(before, 100) * 1e3, percentile(during, 50) * 1e3, percentile(during, 99) * 1e3,
      percentile(during, 100) * 1e3);
  return {{"sessions", n},
          {"offloaded_while_idle", offloaded},
          {"offloads", offloads},
          {"offload_ms", offload_s * 1e3},
          {"restores", restores},
          {"restore_ms", restore_s * 1e3},
          {"ttft_restored_ms",
           {{"p50", percentile(restored_ttft, 50) * 1e3},
            {"p99", percentile(restored_ttft, 99) * 1e3},
            {"n", restored_ttft.size()}}},
          {"ttft_resident_ms",
           {{"p50", percentile(resident_ttft, 50) * 1e3},
            {"p99", percentile(resident_ttft, 99) * 1e3},
            {"n", resident_ttft.size()}}},
          {"stream_itl_before_ms",
           {{"p50", percentile(before, 50) * 1e3},
            {"p99", percentile(before, 99) * 1e3},
            {"max", percentile(before, 100) * 1e3}}},
          {"stream_itl_during_ms",
           {{"p50", percentile(during, 50) * 1e3},
            {"p99", percentile(during, 99) * 1e3},
            {"max", percentile(during, 100) * 1e3}}}};
}

}  // namespace

int main(int argc, char** argv) {
  cli::Args args("rill-session-bench",
                 "multi-turn sessions: per-turn TTFT and memory; offload and restore");
  cli::add_engine_flags(args);
  args.option("mode", "conversation", "conversation | offload");
  args.option("sink", "4", "session cache: attention sinks");
  args.option("window", "1020", "session cache: window");
  args.option("turns", "1000", "conversation: turns");
  args.option("turn-len", "80", "new tokens per turn (random ids)");
  args.option("answer-len", "20", "tokens generated per turn (EOS ignored)");
  args.option("sessions", "100", "offload: sessions");
  args.option("first-len", "512", "offload: tokens of each session's first turn");
  args.option("concurrency", "8", "offload: turns running at once");
  args.option("streams", "16", "offload: long generations running throughout");
  args.option("stream-window", "1020", "offload: the streams' window (4 sinks)");
  args.option("session-gpu-fraction", "0.5",
              "pool share idle sessions may keep (beyond: host memory)");
  args.option("seed", "1", "token seed");
  args.option("json", "", "write every per-turn figure here");
  args.flag("no-prefix-caching",
            "automatic prefix caching off: the re-sent conversation recomputes its history");
  args.parse(argc, argv);
  try {
    const Model model = load_model(args.get("model"));
    EngineOptions eo = cli::engine_options(args);
    if (!args.given("max-batch")) eo.max_batch = 64;
    SchedulerConfig sc;
    sc.max_num_seqs = 64;
    sc.max_num_batched_tokens = 8192;
    sc.queue_timeout = std::chrono::hours(1);
    sc.max_sessions = std::max(1024, args.get_int("sessions"));
    sc.session_gpu_fraction = args.get_double("session-gpu-fraction");
    sc.enable_prefix_caching = !args.on("no-prefix-caching");
    MetricsRegistry metrics;
    ServingEngine engine(make_runner(model, eo), *model.tokenizer, sc, metrics);
    const std::string mode = args.get("mode");
    std::printf("rill-session-bench: %s, %s runner, mode %s\n",
                model.path.filename().string().c_str(), engine.runner_name().c_str(), mode.c_str());
    json out;
    if (mode == "conversation")
      out =
          conversation(engine, args, model.config.vocab_size, model.config.max_position_embeddings);
    else if (mode == "offload")
      out = offload(engine, metrics, args, model.config.vocab_size);
    else
      args.fail("--mode must be conversation or offload");
    if (!args.get("json").empty()) std::ofstream(args.get("json")) << out.dump(1) << "\n";
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
}
