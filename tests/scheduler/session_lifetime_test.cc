// A session and its turns are freed when the session ends: closed by the client, expired, or
// still open when the engine stops. Observed through what a turn owns: its request's event
// notifier, freed with the turn.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::EngineFixture;
using testing::random_prompt;

SessionOptions streaming_session(std::string id) {
  SessionOptions o;
  o.id = std::move(id);
  o.cache = CachePolicy::streaming(4, 60);
  return o;
}

// Runs one turn of session `id` to its end; `watch` expires once the turn is freed.
void run_turn(ServingEngine& e, const std::string& id, std::weak_ptr<int>& watch,
              int max_tokens = 4) {
  Request r;
  r.session_id = id;
  r.prompt = random_prompt(5, 11);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  auto owned = std::make_shared<int>(0);
  watch = owned;
  RequestHandle h = e.submit(std::move(r), [owned] {});
  collect(h);
}

bool freed_soon(const std::weak_ptr<int>& watch) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!watch.expired() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return watch.expired();
}

TEST(SessionLifetime, AnEndedSessionFreesItsLastTurn) {
  // Found by the server tests under LeakSanitizer (scripts/test_asan.sh): a session and its last
  // turn held each other (SessionState::turn, Sequence::session), so neither was ever freed:
  // every closed or expired session leaked its state, its last request and its event channel.
  std::weak_ptr<int> closed, expired, open, cancelled;
  {
    SchedulerConfig cfg;
    cfg.session_idle_ttl = std::chrono::milliseconds(300);
    EngineFixture f(cfg);
    ServingEngine& e = *f.engine;
    e.create_session(streaming_session("closed"));
    run_turn(e, "closed", closed);
    ASSERT_TRUE(e.close_session("closed"));
    EXPECT_TRUE(freed_soon(closed)) << "a closed session";

    e.create_session(streaming_session("expired"));
    run_turn(e, "expired", expired);
    EXPECT_TRUE(freed_soon(expired)) << "an expired session";

    // Closed while its turn runs: the turn is cancelled, then freed.
    e.create_session(streaming_session("running"));
    {
      Request r;
      r.session_id = "running";
      r.prompt = random_prompt(5, 12);
      r.max_tokens = 100000;
      r.ignore_eos = true;
      auto owned = std::make_shared<int>(0);
      cancelled = owned;
      RequestHandle h = e.submit(std::move(r), [owned] {});
      ASSERT_TRUE(e.close_session("running"));
      EXPECT_EQ(collect(h).final.reason, FinishReason::kCancelled);
    }
    EXPECT_TRUE(freed_soon(cancelled)) << "a session closed during its turn";

    e.create_session(streaming_session("open"));
    run_turn(e, "open", open);
  }
  EXPECT_TRUE(open.expired()) << "a session still open when the engine stops";
}

}  // namespace
}  // namespace rill
