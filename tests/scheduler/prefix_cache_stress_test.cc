// Prefix caching under load: random prompts drawn from a few shared prefixes (full and streaming,
// two tenants' salts, some opted out), cancels, dropped handles, deadlines and queue timeouts
// from several threads, in a pool so small that cached blocks are evicted all the time. After
// every runner call the pool is checked (testing::CheckingRunner): holders equal the block
// tables (no block freed while in use) and free + cached + used == total. Also run under
// ThreadSanitizer (scripts/test_tsan.sh).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

TEST(PrefixCacheStress, SharedPrefixesCancelsDeadlinesAndEvictionKeepThePoolConsistent) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 10;
  cfg.max_num_batched_tokens = 128;
  cfg.max_queued_requests = 40;
  cfg.max_buffered_chunks = 64;
  auto checking = std::make_unique<testing::CheckingRunner>(
      testing::default_model(),
      CpuRunnerOptions{.num_threads = 1, .block_size = 16, .num_blocks = 24});
  testing::CheckingRunner& runner = *checking;
  testing::EngineFixture f(cfg, std::move(checking));
  std::vector<std::vector<int32_t>> prefixes;
  // Short prompts and answers: many requests even under ThreadSanitizer (~20x slower).
  for (int i = 0; i < 5; ++i) prefixes.push_back(testing::random_prompt(17 + 16 * i, 900 + i));
  std::atomic<int> submitted{0}, finals{0}, bad{0}, cached{0};
  const auto until = Clock::now() + std::chrono::seconds(6);
  auto client = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<RequestHandle> live;
    while (Clock::now() < until) {
      Request r;
      r.prompt = prefixes[rng() % prefixes.size()];
      const std::vector<int32_t> tail =
          testing::random_prompt(1 + static_cast<int>(rng() % 30), rng());
      r.prompt.insert(r.prompt.end(), tail.begin(),
                      tail.begin() + static_cast<std::ptrdiff_t>(rng() % tail.size()));
      r.max_tokens = static_cast<int>(rng() % 16);
      r.sampling.temperature = rng() % 2 ? 0.0f : 0.8f;
      r.sampling.seed = rng();
      if (rng() % 4 == 0) r.sampling.repetition_penalty = 1.2f;
      r.ignore_eos = rng() % 2;
      // A third streaming with n_sink a block multiple (shares with full requests), a sixth with
      // n_sink 4 (its own layout; its ring wraps early).
      const uint32_t policy = rng() % 6;
      if (policy < 2) r.cache = CachePolicy::streaming(16, 40);
      if (policy == 2) r.cache = CachePolicy::streaming(4, 28);
      if (rng() % 4 == 0) r.cache_salt = "tenant-b";
      if (rng() % 8 == 0) r.prefix_caching = false;
      if (rng() % 5 == 0) r.deadline = Clock::now() + std::chrono::milliseconds(rng() % 200);
      if (rng() % 6 == 0) r.queue_timeout = std::chrono::milliseconds(rng() % 50);
      try {
        live.push_back(f.engine->submit(r));
        ++submitted;
      } catch (const OverloadedError&) {
      }
      if (!live.empty()) {
        const size_t k = rng() % live.size();
        // Cancel, drop or read one to its end now and then; most stay live a while (so that
        // requests overlap even where the model runs slowly, as under ThreadSanitizer).
        const uint32_t act = rng() % 6;
        if (act == 0) {
          live[k].cancel();
        } else if (act == 1) {
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
          ++finals;  // dropped
        } else if (act == 2 || live.size() > 4) {
          const testing::Collected c = testing::collect(live[k], std::chrono::seconds(120));
          if (c.finals != 1) ++bad;
          finals += c.finals;
          cached += c.final.usage.cached_tokens;
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
    for (RequestHandle& h : live) {
      const testing::Collected c = testing::collect(h, std::chrono::seconds(120));
      if (c.finals != 1) ++bad;
      finals += c.finals;
    }
  };
  std::vector<std::thread> clients;
  for (uint32_t t = 0; t < 3; ++t) clients.emplace_back(client, 31 + t);
  for (auto& c : clients) c.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(finals.load(), submitted.load());
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  EngineStats s = f.engine->stats();
  while ((s.running || s.waiting || s.kv_blocks_used) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    s = f.engine->stats();
  }
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.kv_blocks_used, 0) << "leaked KV blocks";
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached + s.kv_blocks_used, s.kv_blocks_total);
  EXPECT_EQ(runner.failures.load(), 0) << runner.first_failure;
  EXPECT_GT(runner.checks.load(), 0);
  // Few requests run under ThreadSanitizer (~20x slower): only ask for hits where many ran.
  double evictions = 0;
  for (const MetricFamily& fam : f.metrics.snapshot())
    if (fam.name == "rill_prefix_cache_evictions_total") evictions = fam.series.at(0).value;
  std::printf("submitted %d, hits %lld of %lld tokens, %.0f evictions, %lld copies, %lld checks\n",
              submitted.load(), static_cast<long long>(s.prefix_cache_hits),
              static_cast<long long>(s.prefix_cache_queries), evictions,
              static_cast<long long>(runner.copies.load()),
              static_cast<long long>(runner.checks.load()));
  if (submitted.load() > 30) {
    EXPECT_GT(runner.checks.load(), 100);
    EXPECT_GT(s.prefix_cache_hits, 0);
    EXPECT_GT(cached.load(), 0);
    EXPECT_GT(evictions, 0) << "the pool is small enough to evict";
  }
}

}  // namespace
}  // namespace rill
