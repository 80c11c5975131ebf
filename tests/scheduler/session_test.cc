// Sessions on the CPU runner: a long multi-turn session gives exactly the tokens of one
// continuous streaming sequence fed the same turns, in constant KV memory; offloading its cache
// to host memory between turns changes nothing; expiry (never-used sessions too), a concurrent
// turn, unknown sessions, over-long ids and non-streaming policies get their documented errors;
// every live session is counted; closing a session frees its blocks, and a session closed and
// created again under the same id is a new incarnation that the old one's turns never touch.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>

#include "engine/serving/ids.h"
#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::Collected;
using testing::EngineFixture;
using testing::random_prompt;

constexpr int kSink = 4, kWindow = 60;

// A turn's new tokens: a few random ids (distinct per turn).
std::vector<int32_t> turn_tokens(int turn) {
  return random_prompt(3 + turn % 9, 7000 + turn);
}

Request turn_request(const std::string& session, int turn, int max_tokens,
                     std::vector<int32_t> stops) {
  Request r;
  r.session_id = session;
  r.prompt = turn_tokens(turn);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.stop_token_ids = std::move(stops);
  r.ignore_eos = true;
  return r;
}

SessionOptions streaming_session(std::string id = {}) {
  SessionOptions o;
  o.id = std::move(id);
  o.cache = CachePolicy::streaming(kSink, kWindow);
  return o;
}

struct TurnResult {
  std::vector<int32_t> ids;
  bool stopped = false;  // ended by a stop id (else by max_tokens)
};

// One streaming sequence fed every turn in order, greedy, on its own runner: each turn feeds the
// previous turn's final sample (never fed back by that turn) and its new tokens, then samples
// until a stop id or max_tokens, feeding each sample but the last.
std::vector<TurnResult> continuous_reference(int turns, int max_tokens,
                                             const std::vector<int32_t>& stops) {
  CpuRunner runner(testing::default_model(), {.num_threads = 1});
  SamplingParams greedy;
  greedy.temperature = 0;
  runner.add_sequence({1, CachePolicy::streaming(kSink, kWindow), greedy});
  std::optional<int32_t> pending;
  std::vector<TurnResult> out;
  for (int t = 0; t < turns; ++t) {
    std::vector<int32_t> in;
    if (pending) in.push_back(*pending);
    const std::vector<int32_t> fresh = turn_tokens(t);
    in.insert(in.end(), fresh.begin(), fresh.end());
    TurnResult r;
    for (;;) {
      const StepInput step{1, in, LogitsMode::kNone, true};
      const int32_t tok = runner.step(std::span<const StepInput>(&step, 1)).sampled[0];
      pending = tok;
      if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
        r.stopped = true;
        break;
      }
      r.ids.push_back(tok);
      if (static_cast<int>(r.ids.size()) == max_tokens) break;
      in = {tok};
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Stop ids the greedy reference produces now and then, so turns end both ways.
std::vector<int32_t> frequent_tokens(int max_tokens) {
  const std::vector<TurnResult> probe = continuous_reference(20, max_tokens, {});
  std::vector<int> count(testing::default_model().config.vocab_size, 0);
  for (const TurnResult& r : probe)
    for (int32_t t : r.ids) ++count[t];
  const auto top = std::max_element(count.begin(), count.end()) - count.begin();
  return {static_cast<int32_t>(top)};
}

// Turns [first, first + turns) of the session, one after another.
std::vector<TurnResult> run_session(ServingEngine& e, const std::string& id, int first, int turns,
                                    int max_tokens, const std::vector<int32_t>& stops,
                                    std::vector<int>* blocks_after = nullptr) {
  std::vector<TurnResult> out;
  for (int t = first; t < first + turns; ++t) {
    RequestHandle h = e.submit(turn_request(id, t, max_tokens, stops));
    const Collected c = collect(h);
    EXPECT_EQ(c.finals, 1) << "turn " << t;
    EXPECT_TRUE(c.final.reason == FinishReason::kStop || c.final.reason == FinishReason::kLength)
        << "turn " << t << ": " << c.final.error_message;
    out.push_back({c.ids, c.final.reason == FinishReason::kStop});
    if (blocks_after) blocks_after->push_back(e.stats().kv_blocks_used);
  }
  return out;
}

void expect_same_turns(const std::vector<TurnResult>& got, const std::vector<TurnResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(got[t].ids, want[t].ids) << "turn " << t;
    EXPECT_EQ(got[t].stopped, want[t].stopped) << "turn " << t;
  }
}

template <typename Pred>
bool wait_for(const ServingEngine& e, Pred pred,
              std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (pred(e.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

double metric(const MetricsRegistry& registry, const std::string& name) {
  for (const MetricFamily& fam : registry.snapshot())
    if (fam.name == name) return fam.series.at(0).value;
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

// The value of `name`'s series labelled state=`state` (rill_sessions).
double sessions_in(const MetricsRegistry& registry, const std::string& state) {
  for (const MetricFamily& fam : registry.snapshot())
    if (fam.name == "rill_sessions")
      for (const MetricSeries& s : fam.series)
        for (const auto& [k, v] : s.labels)
          if (k == "state" && v == state) return s.value;
  ADD_FAILURE() << "no rill_sessions{state=" << state << "}";
  return 0;
}

template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

template <typename Fn>
std::string error_of(Fn&& fn, ErrorCode code) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(Sessions, TwoHundredTurnsEqualOneContinuousStreamInConstantMemory) {
  constexpr int kTurns = 200, kMaxTokens = 8;
  const std::vector<int32_t> stops = frequent_tokens(kMaxTokens);
  const std::vector<TurnResult> want = continuous_reference(kTurns, kMaxTokens, stops);
  const auto stopped =
      std::count_if(want.begin(), want.end(), [](const TurnResult& r) { return r.stopped; });
  ASSERT_GT(stopped, 10) << "the reference should end turns both ways";
  ASSERT_LT(stopped, kTurns - 10);

  EngineFixture f;
  const SessionInfo created = f.engine->create_session(streaming_session());
  std::vector<int> blocks;
  const std::vector<TurnResult> got =
      run_session(*f.engine, created.options.id, 0, kTurns, kMaxTokens, stops, &blocks);
  expect_same_turns(got, want);

  // Sinks (one block) + the window's ring (60 -> 64 tokens, 4 blocks): constant once full.
  const int full = 1 + 4;
  for (int t = 20; t < kTurns; ++t) EXPECT_EQ(blocks[t], full) << "turn " << t;
  const SessionInfo info = f.engine->session_info(created.options.id);
  EXPECT_EQ(info.turns, kTurns);
  EXPECT_GT(info.tokens_seen, 2000);
  EXPECT_EQ(info.tokens_cached, kSink + kWindow);
  EXPECT_EQ(info.tokens_evicted, info.tokens_seen - info.tokens_cached);
  EXPECT_EQ(info.residence, SessionResidence::kGpu);
}

TEST(Sessions, OffloadingToHostMemoryBetweenTurnsChangesNoToken) {
  constexpr int kTurns = 40, kMaxTokens = 8;
  const std::vector<int32_t> stops = frequent_tokens(kMaxTokens);
  const std::vector<TurnResult> want = continuous_reference(kTurns, kMaxTokens, stops);
  SchedulerConfig cfg;
  cfg.session_gpu_fraction = 0;  // every idle session's cache goes to host memory
  EngineFixture f(cfg);
  const std::string id = f.engine->create_session(streaming_session("offloaded")).options.id;
  std::vector<TurnResult> got;
  for (int t = 0; t < kTurns; ++t) {
    got.push_back(run_session(*f.engine, id, t, 1, kMaxTokens, stops).front());
    // Between turns the loop moves the idle cache out of the pool.
    ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }))
        << "turn " << t;
    EXPECT_EQ(f.engine->session_info(id).residence, SessionResidence::kHost);
  }
  expect_same_turns(got, want);
  EXPECT_EQ(metric(f.metrics, "rill_session_offloads_total"), kTurns);
  EXPECT_EQ(metric(f.metrics, "rill_session_restores_total"), kTurns - 1);
}

// Sessions on several threads at once in a pool too small for all of them (6 x 5 blocks, 20
// blocks): idle caches are offloaded for the budget and reclaimed for admissions, and restored
// while the others' turns run. Each session still equals the continuous reference.
TEST(Sessions, ConcurrentSessionsWithOffloadEqualTheReference) {
  constexpr int kSessions = 6, kTurns = 15, kMaxTokens = 6;
  const std::vector<int32_t> stops = frequent_tokens(kMaxTokens);
  const std::vector<TurnResult> want = continuous_reference(kTurns, kMaxTokens, stops);
  SchedulerConfig cfg;
  cfg.session_gpu_fraction = 0.5;
  EngineFixture f(cfg, {.num_threads = 1, .num_blocks = 20});
  std::vector<std::vector<TurnResult>> got(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i)
    threads.emplace_back([&, i] {
      const std::string id = f.engine->create_session(streaming_session()).options.id;
      got[i] = run_session(*f.engine, id, 0, kTurns, kMaxTokens, stops);
      EXPECT_TRUE(f.engine->close_session(id));
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    SCOPED_TRACE("session " + std::to_string(i));
    expect_same_turns(got[i], want);
  }
  EXPECT_GT(metric(f.metrics, "rill_session_restores_total"), 0);
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
}

// For ThreadSanitizer (scripts/test_tsan.sh), light enough to run there: turns of four sessions
// on four threads in a pool that forces offloads and reclaims, one session closed mid-turn.
TEST(Sessions, ConcurrentTurnsOffloadsAndClosesFinishCleanly) {
  SchedulerConfig cfg;
  cfg.session_gpu_fraction = 0.3;
  EngineFixture f(cfg, {.num_threads = 1, .num_blocks = 12});
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      const std::string id = f.engine->create_session(streaming_session()).options.id;
      for (int t = 0; t < 4; ++t) {
        RequestHandle h = f.engine->submit(turn_request(id, t, i == 3 && t == 3 ? 100000 : 3, {}));
        if (i == 3 && t == 3) {
          EXPECT_TRUE(f.engine->close_session(id));
          EXPECT_EQ(collect(h).final.reason, FinishReason::kCancelled);
          return;
        }
        const Collected c = collect(h);
        EXPECT_EQ(c.final.reason, FinishReason::kLength) << c.final.error_message;
      }
      EXPECT_TRUE(f.engine->close_session(id));
    });
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(wait_for(
      *f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0 && s.running == 0; }));
  EXPECT_GT(metric(f.metrics, "rill_session_offloads_total"), 0);
}

// The CPU runner with restores that take a few polls to finish, as the CUDA runner's copies do
// while steps run: turns wait for their copy, restores for queued turns start ahead.
class SlowRestoreRunner final : public testing::ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  void restart_sampling(SeqId id, const SamplingParams& p) override {
    EXPECT_EQ(polls_.count(id), 0u) << "a sampler restarted before its restore finished";
    ForwardingRunner::restart_sampling(id, p);
  }
  void restore_sequence(SeqId id) override {
    ForwardingRunner::restore_sequence(id);
    polls_[id] = 3;
  }
  bool restore_done(SeqId id) override {
    auto it = polls_.find(id);
    if (it == polls_.end()) return true;
    if (--it->second > 0) return false;
    polls_.erase(it);
    return true;
  }
  void launch(std::span<const StepInput> inputs) override {
    for (const StepInput& in : inputs)
      EXPECT_EQ(polls_.count(in.id), 0u) << "stepped while restoring";
    ForwardingRunner::launch(inputs);
  }

 private:
  std::unordered_map<SeqId, int> polls_;  // restores still "copying": polls left
};

TEST(Sessions, TurnsWaitForRestoresThatCopyBesideTheSteps) {
  constexpr int kSessions = 4, kTurns = 6, kMaxTokens = 6;
  const std::vector<int32_t> stops = frequent_tokens(kMaxTokens);
  const std::vector<TurnResult> want = continuous_reference(kTurns, kMaxTokens, stops);
  const Model& m = testing::default_model();
  SchedulerConfig cfg;
  cfg.session_gpu_fraction = 0;
  cfg.queue_timeout = std::chrono::hours(1);
  const std::vector<int> eos = m.stop_token_ids();
  cfg.eos_token_ids.assign(eos.begin(), eos.end());
  MetricsRegistry metrics;
  ServingEngine engine(std::make_unique<SlowRestoreRunner>(m), *m.tokenizer, cfg, metrics);
  std::vector<std::vector<TurnResult>> got(kSessions);
  std::vector<std::thread> threads;
  for (int i = 0; i < kSessions; ++i)
    threads.emplace_back([&, i] {
      const std::string id = engine.create_session(streaming_session()).options.id;
      for (int t = 0; t < kTurns; ++t) {
        got[i].push_back(run_session(engine, id, t, 1, kMaxTokens, stops).front());
        // The idle cache goes to host memory before the next turn, which then restores it.
        const auto until = Clock::now() + std::chrono::seconds(30);
        while (engine.session_info(id).residence != SessionResidence::kHost && Clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    SCOPED_TRACE("session " + std::to_string(i));
    expect_same_turns(got[i], want);
  }
  EXPECT_EQ(metric(metrics, "rill_session_restores_total"), kSessions * (kTurns - 1));
}

// Seeded sampling with penalties: each turn restarts the sampler, so a session gives the same
// tokens whether its cache stayed in the pool or went to host memory between turns.
TEST(Sessions, SeededTurnsAreUnchangedByOffload) {
  auto run = [](double gpu_fraction) {
    SchedulerConfig cfg;
    cfg.session_gpu_fraction = gpu_fraction;
    EngineFixture f(cfg);
    const std::string id = f.engine->create_session(streaming_session()).options.id;
    std::vector<std::vector<int32_t>> out;
    for (int t = 0; t < 12; ++t) {
      Request r = turn_request(id, t, 10, {});
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = 42 + t;
      r.sampling.repetition_penalty = 1.3f;
      r.sampling.frequency_penalty = 0.4f;
      RequestHandle h = f.engine->submit(r);
      out.push_back(collect(h).ids);
      wait_for(*f.engine,
               [&](const EngineStats& s) { return gpu_fraction > 0 || s.kv_blocks_used == 0; });
    }
    return out;
  };
  EXPECT_EQ(run(0.0), run(0.5));
}

TEST(Sessions, EveryIdleSessionBeyondTheBudgetGoesToHostMemoryAndComesBack) {
  SchedulerConfig cfg;
  cfg.session_gpu_fraction = 0;
  EngineFixture f(cfg);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i)
    ids.push_back(f.engine->create_session(streaming_session()).options.id);
  for (const std::string& id : ids) run_session(*f.engine, id, 0, 1, 4, {});
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
  for (const std::string& id : ids)
    EXPECT_EQ(f.engine->session_info(id).residence, SessionResidence::kHost) << id;
  for (const std::string& id : ids) run_session(*f.engine, id, 1, 1, 4, {});
  EXPECT_EQ(metric(f.metrics, "rill_session_restores_total"), 5);
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
  EXPECT_EQ(metric(f.metrics, "rill_session_offloads_total"), 10);
}

TEST(Sessions, IdleSessionsExpireAfterTheirTtl) {
  SchedulerConfig cfg;
  cfg.session_idle_ttl = std::chrono::milliseconds(200);
  EngineFixture f(cfg);
  const std::string id = f.engine->create_session(streaming_session()).options.id;
  run_session(*f.engine, id, 0, 1, 4, {});
  EXPECT_GT(f.engine->stats().kv_blocks_used, 0);
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
  const std::string msg =
      error_of([&] { f.engine->submit(turn_request(id, 1, 4, {})); }, ErrorCode::kNotFound);
  EXPECT_NE(msg.find("session " + id + " expired: idle for more than 0.2 s"), std::string::npos)
      << msg;
  error_of([&] { f.engine->session_info(id); }, ErrorCode::kNotFound);
}

TEST(Sessions, WithoutHostRoomIdleSessionsBeyondTheBudgetExpire) {
  SchedulerConfig cfg;
  cfg.session_gpu_fraction = 0;
  EngineFixture f(cfg, {.num_threads = 1, .host_kv_cache_bytes = 0});
  const std::string id = f.engine->create_session(streaming_session()).options.id;
  run_session(*f.engine, id, 0, 1, 4, {});
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
  const std::string msg =
      error_of([&] { f.engine->submit(turn_request(id, 1, 4, {})); }, ErrorCode::kNotFound);
  EXPECT_NE(msg.find("expired: no room for idle sessions"), std::string::npos) << msg;
}

TEST(Sessions, ATurnWhileTheLastRunsIsRefused) {
  EngineFixture f;
  const std::string id = f.engine->create_session(streaming_session()).options.id;
  RequestHandle first = f.engine->submit(turn_request(id, 0, 100000, {}));
  const std::string msg = error_of([&] { f.engine->submit(turn_request(id, 1, 4, {})); },
                                   ErrorCode::kFailedPrecondition);
  EXPECT_NE(msg.find("previous turn is still running"), std::string::npos) << msg;
  EXPECT_TRUE(f.engine->session_info(id).turn_running);
  first.cancel();  // a cancelled turn keeps what it fed; the session goes on
  const Collected c = collect(first);
  EXPECT_EQ(c.final.reason, FinishReason::kCancelled);
  // Once the final event is out, the next turn is taken.
  RequestHandle next = f.engine->submit(turn_request(id, 1, 4, {}));
  EXPECT_EQ(collect(next).finals, 1);
}

TEST(Sessions, ClosingFreesTheCacheAndCancelsARunningTurn) {
  EngineFixture f;
  const std::string a = f.engine->create_session(streaming_session("a")).options.id;
  run_session(*f.engine, a, 0, 2, 6, {});
  EXPECT_GT(f.engine->stats().kv_blocks_used, 0);
  EXPECT_TRUE(f.engine->close_session(a));
  EXPECT_FALSE(f.engine->close_session(a));
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
  error_of([&] { f.engine->session_info(a); }, ErrorCode::kNotFound);

  const std::string b = f.engine->create_session(streaming_session("b")).options.id;
  RequestHandle h = f.engine->submit(turn_request(b, 0, 100000, {}));
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 1; }));
  EXPECT_TRUE(f.engine->close_session(b));
  EXPECT_EQ(collect(h).final.reason, FinishReason::kCancelled);
  ASSERT_TRUE(wait_for(
      *f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0 && s.running == 0; }));
}

TEST(Sessions, BadSessionsAndTurnsAreRefused) {
  SchedulerConfig cfg;
  cfg.max_sessions = 2;
  EngineFixture f(cfg);
  SessionOptions full;
  full.cache = CachePolicy::full();
  const std::string msg =
      error_of([&] { f.engine->create_session(full); }, ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("sessions need the streaming cache policy"), std::string::npos) << msg;
  error_of([&] { f.engine->submit(turn_request("nope", 0, 4, {})); }, ErrorCode::kNotFound);
  f.engine->create_session(streaming_session("x"));
  error_of([&] { f.engine->create_session(streaming_session("x")); }, ErrorCode::kInvalidArgument);
  f.engine->create_session(streaming_session());
  error_of([&] { f.engine->create_session(streaming_session()); }, ErrorCode::kResourceExhausted);
  // A refused turn (bad token id) leaves the session free for the next one.
  Request bad = turn_request("x", 0, 4, {});
  bad.prompt[0] = -5;
  error_of([&] { f.engine->submit(bad); }, ErrorCode::kInvalidArgument);
  RequestHandle ok = f.engine->submit(turn_request("x", 0, 4, {}));
  EXPECT_EQ(collect(ok).finals, 1);
}

// Regression (issue 27): a session created but never given a turn was neither counted in
// rill_sessions nor expired, so max_sessions of them locked creation until a restart.
TEST(Sessions, NeverUsedSessionsAreCountedAndExpireByTheIdleTtl) {
  SchedulerConfig cfg;
  cfg.max_sessions = 2;
  cfg.session_idle_ttl = std::chrono::milliseconds(300);
  EngineFixture f(cfg);
  const std::string a = f.engine->create_session(streaming_session()).options.id;
  const std::string b = f.engine->create_session(streaming_session()).options.id;
  EXPECT_TRUE(eventually([&] { return sessions_in(f.metrics, "new") == 2; }));
  error_of([&] { f.engine->create_session(streaming_session()); }, ErrorCode::kResourceExhausted);
  // Idle since their creation: both expire by the TTL, and creation is open again.
  for (const std::string& id : {a, b}) {
    ASSERT_TRUE(eventually([&] {
      try {
        f.engine->session_info(id);
        return false;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("expired: idle for more than 0.3 s"),
                  std::string::npos)
            << e.what();
        return true;
      }
    })) << id;
  }
  EXPECT_TRUE(eventually([&] { return sessions_in(f.metrics, "new") == 0; }));
  f.engine->create_session(streaming_session());
  f.engine->create_session(streaming_session());
  EXPECT_TRUE(eventually([&] { return sessions_in(f.metrics, "new") == 2; }));
}

// Every live session is in exactly one state of rill_sessions: new, active, idle or offloaded.
TEST(Sessions, EveryLiveSessionIsCountedOnce) {
  EngineFixture f;
  const std::string used = f.engine->create_session(streaming_session("used")).options.id;
  run_session(*f.engine, used, 0, 1, 4, {});
  const std::string busy = f.engine->create_session(streaming_session("busy")).options.id;
  RequestHandle running = f.engine->submit(turn_request(busy, 0, 100000, {}));
  f.engine->create_session(streaming_session("unused"));
  // {new, active, between turns (idle in the pool or offloaded)}.
  const auto counts = [&] {
    return std::vector<double>{
        sessions_in(f.metrics, "new"), sessions_in(f.metrics, "active"),
        sessions_in(f.metrics, "idle") + sessions_in(f.metrics, "offloaded")};
  };
  EXPECT_TRUE(eventually([&] { return counts() == std::vector<double>{1, 1, 1}; }));
  running.cancel();
  collect(running);
  EXPECT_TRUE(f.engine->close_session("unused"));
  EXPECT_TRUE(eventually([&] { return counts() == std::vector<double>{0, 0, 2}; }));
  EXPECT_TRUE(f.engine->close_session(used));
  EXPECT_TRUE(f.engine->close_session(busy));
  EXPECT_TRUE(eventually([&] { return counts() == std::vector<double>{0, 0, 0}; }));
}

// Regression (issue 27): closing a session while its turn runs and creating one with the same
// id gives a new incarnation. The old turn's end leaves it alone, a turn planned against the old
// one is refused, and closing by the old incarnation (a gRPC Session call that created the old
// one ending) leaves the new one open.
TEST(Sessions, ATurnEndsOnlyTheSessionItBelongsTo) {
  EngineFixture f;
  const SessionInfo old_info = f.engine->create_session(streaming_session("x"));
  run_session(*f.engine, "x", 0, 1, 4, {});
  RequestHandle old_turn = f.engine->submit(turn_request("x", 1, 100000, {}));
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 1; }));
  EXPECT_TRUE(f.engine->close_session("x"));
  const SessionInfo fresh = f.engine->create_session(streaming_session("x"));
  EXPECT_NE(fresh.incarnation, old_info.incarnation);
  EXPECT_EQ(collect(old_turn).final.reason, FinishReason::kCancelled);
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 0; }));

  SessionInfo now = f.engine->session_info("x");
  EXPECT_EQ(now.incarnation, fresh.incarnation);
  EXPECT_EQ(now.turns, 0);
  EXPECT_EQ(now.tokens_seen, 0);
  EXPECT_EQ(now.residence, SessionResidence::kNone);
  EXPECT_FALSE(now.turn_running);

  Request stale = turn_request("x", 0, 4, {});
  stale.session_incarnation = old_info.incarnation;
  const std::string msg = error_of([&] { f.engine->submit(stale); }, ErrorCode::kNotFound);
  EXPECT_NE(msg.find("a new session has the same id"), std::string::npos) << msg;
  EXPECT_FALSE(f.engine->close_session("x", old_info.incarnation));
  EXPECT_EQ(f.engine->session_info("x").incarnation, fresh.incarnation);

  // The new session starts its stream afresh: its first turn equals a new session's.
  const std::vector<TurnResult> want = continuous_reference(2, 6, {});
  Request first = turn_request("x", 0, 6, {});
  first.session_incarnation = fresh.incarnation;
  RequestHandle h = f.engine->submit(first);
  EXPECT_EQ(collect(h).ids, want[0].ids);
  EXPECT_TRUE(f.engine->close_session("x", fresh.incarnation));
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0; }));
}

// For ThreadSanitizer: sessions created, used, closed and created again under the same ids on
// several threads, with a TTL short enough that some expire meanwhile. Afterwards no session is
// left uncounted and no block is held.
TEST(Sessions, ConcurrentTurnsOnRecreatedIdsLeaveNothingBehind) {
  SchedulerConfig cfg;
  cfg.session_idle_ttl = std::chrono::milliseconds(5);
  EngineFixture f(cfg, {.num_threads = 1, .num_blocks = 24});
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      const std::string id = "t" + std::to_string(i % 2);  // two threads share each id
      for (int round = 0; round < 6; ++round) {
        try {
          f.engine->create_session(streaming_session(id));
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();  // in use
        }
        try {
          RequestHandle h = f.engine->submit(turn_request(id, round, 3 + round % 3, {}));
          if (round % 2) f.engine->close_session(id);
          EXPECT_EQ(collect(h).finals, 1);
          ++finished;
        } catch (const Error& e) {  // closed, expired or busy under the other thread
          EXPECT_TRUE(e.code() == ErrorCode::kNotFound ||
                      e.code() == ErrorCode::kFailedPrecondition)
              << e.what();
        }
      }
      f.engine->close_session(id);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_GT(finished.load(), 4);
  for (const char* state : {"new", "active", "idle", "offloaded"})
    EXPECT_TRUE(eventually([&] { return sessions_in(f.metrics, state) == 0; })) << state;
  ASSERT_TRUE(wait_for(
      *f.engine, [](const EngineStats& s) { return s.kv_blocks_used == 0 && s.running == 0; }));
}

TEST(Sessions, IdsOverTheLimitAreRefusedNamingIt) {
  EngineFixture f;
  const std::string longest(kMaxIdBytes, 'a');
  EXPECT_EQ(f.engine->create_session(streaming_session(longest)).options.id, longest);
  const std::string msg =
      error_of([&] { f.engine->create_session(streaming_session(longest + "a")); },
               ErrorCode::kInvalidArgument);
  EXPECT_NE(msg.find("session id is 129 bytes, over the limit of 128"), std::string::npos) << msg;
  error_of([&] { f.engine->session_info(std::string(100000, 'a')); }, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(f.engine->close_session(std::string(100000, 'a')));
}

}  // namespace
}  // namespace rill
