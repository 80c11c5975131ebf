// Random submits, cancels, dropped handles, deadlines and queue timeouts from several threads
// for a bounded time: every submitted request gets exactly one final event, nothing deadlocks,
// and no KV block is leaked; an engine destroyed the moment a stop string's final event arrives
// shuts down cleanly. Also built with ThreadSanitizer in CI (scripts/test.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

TEST(ServingEngineStress, RandomSubmitCancelTimeoutKeepsInvariants) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 12;
  cfg.max_num_batched_tokens = 96;
  cfg.max_queued_requests = 40;
  cfg.max_buffered_chunks = 64;
  testing::EngineFixture f(cfg, {.num_threads = 1, .block_size = 16, .num_blocks = 48});
  std::atomic<int> submitted{0}, refused{0}, finals{0}, bad{0};
  const auto until = Clock::now() + std::chrono::seconds(6);
  auto client = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<RequestHandle> live;
    while (Clock::now() < until) {
      Request r;
      r.prompt = testing::random_prompt(1 + rng() % 120, rng());
      r.max_tokens = static_cast<int>(rng() % 40);
      r.sampling.temperature = rng() % 2 ? 0.0f : 0.8f;
      r.sampling.seed = rng();
      r.ignore_eos = rng() % 2;
      if (rng() % 3 == 0) r.cache = CachePolicy::streaming(4, 28);
      if (rng() % 5 == 0) r.deadline = Clock::now() + std::chrono::milliseconds(rng() % 200);
      if (rng() % 5 == 0) r.queue_timeout = std::chrono::milliseconds(rng() % 50);
      if (rng() % 7 == 0) r.stop = {"e", "th"};
      r.priority = static_cast<int>(rng() % 3);
      try {
        live.push_back(f.engine->submit(r));
        ++submitted;
      } catch (const OverloadedError&) {
        ++refused;
      }
      // Act on a random live request: cancel, drop, or read it to the end.
      if (!live.empty()) {
        const size_t k = rng() % live.size();
        switch (rng() % 4) {
          case 0: live[k].cancel(); break;
          case 1: live.erase(live.begin() + static_cast<std::ptrdiff_t>(k)); ++finals; break;  // dropped
          default: {
            const testing::Collected c = testing::collect(live[k], std::chrono::seconds(60));
            if (c.finals != 1) ++bad;
            finals += c.finals;
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    }
    for (RequestHandle& h : live) {
      const testing::Collected c = testing::collect(h, std::chrono::seconds(60));
      if (c.finals != 1) ++bad;
      finals += c.finals;
    }
  };
  std::vector<std::thread> clients;
  for (uint32_t t = 0; t < 3; ++t) clients.emplace_back(client, 11 + t);
  for (auto& c : clients) c.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(finals.load(), submitted.load());
  EXPECT_GT(submitted.load(), 5);  // few under ThreadSanitizer, which slows the model ~20x
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  EngineStats s = f.engine->stats();
  while ((s.running || s.waiting || s.kv_blocks_used) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = f.engine->stats();
  }
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_blocks_used, 0) << "leaked KV blocks";
  EXPECT_FALSE(s.stalled);
}

// The output thread tells the loop about a matched stop string after it has delivered the final
// event; a client may destroy the engine in between. The loop must outlive the output thread
// (CI once crashed here: the loop was destroyed first and the output thread called into it).
TEST(ServingEngineStress, EngineDestroyedAsAStopStringsFinalArrives) {
  const auto& tok = *testing::default_model().tokenizer;
  Request r;
  r.prompt = tok.encode("KING HENRY:\n");
  r.sampling.temperature = 0;
  r.max_tokens = 8;
  r.ignore_eos = true;
  std::string first_text;
  {
    testing::EngineFixture f;
    RequestHandle h = f.engine->submit(r);
    first_text = testing::collect(h).text;
  }
  ASSERT_FALSE(first_text.empty());
  r.stop = {first_text.substr(0, 1)};  // matched by the first token
  int stopped = 0;
  const auto until = Clock::now() + std::chrono::seconds(3);
  for (int i = 0; i < 100 && Clock::now() < until; ++i) {
    testing::EngineFixture f;
    RequestHandle h = f.engine->submit(r);
    const testing::Collected c = testing::collect(h);
    ASSERT_EQ(c.finals, 1);
    stopped += c.final.reason == FinishReason::kStop;
  }  // the engine goes while its output thread may still be inside the stop string's handling
  EXPECT_GT(stopped, 0);
}

}  // namespace
}  // namespace rill
