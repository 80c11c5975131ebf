// Automatic prefix caching on the CPU runner: every output equals the output with the cache off
// (and the request run alone), greedy and seeded with penalties, for identical prompts sent
// together and one after another, prompts sharing part of a block, prefixes evicted between
// requests, preemption and recompute, streaming requests whose rings wrap over shared blocks,
// and different cache_salt values (which never share); usage, stats and metrics count the
// cached tokens; a session's first turn starts from a cached prefix.
#include <gtest/gtest.h>

#include <thread>

#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::Collected;
using testing::EngineFixture;
using testing::random_prompt;
using testing::reference_tokens;

Request make(std::vector<int32_t> prompt, int max_tokens, int variant = 0) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  if (variant % 2 == 0) {
    r.sampling.temperature = 0;
  } else {  // seeded, with penalties (cached tokens count as prompt for the repetition penalty)
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 500 + variant;
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.frequency_penalty = 0.2f;
  }
  return r;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

SchedulerConfig cache_off(SchedulerConfig c = {}) {
  c.enable_prefix_caching = false;
  return c;
}

// The tokens `r` gets from an engine with the cache off (one engine per call: nothing cached).
std::vector<int32_t> cache_off_tokens(const Request& r) {
  EngineFixture off(cache_off());
  RequestHandle h = off.engine->submit(r);
  const Collected c = collect(h);
  EXPECT_EQ(c.final.usage.cached_tokens, 0);
  return c.ids;
}

double metric(const MetricsRegistry& registry, const std::string& name) {
  double v = 0;
  for (const MetricFamily& fam : registry.snapshot())
    if (fam.name == name)
      for (const MetricSeries& s : fam.series) v += s.value;
  return v;
}

// Submits every request at once and collects them in order.
std::vector<Collected> run_together(ServingEngine& e, const std::vector<Request>& reqs) {
  std::vector<RequestHandle> handles;
  for (const Request& r : reqs) handles.push_back(e.submit(r));
  std::vector<Collected> out;
  for (RequestHandle& h : handles) {
    out.push_back(collect(h));
    EXPECT_EQ(out.back().finals, 1);
  }
  return out;
}

Collected run_one(ServingEngine& e, const Request& r) {
  RequestHandle h = e.submit(r);
  return collect(h);
}

TEST(PrefixCache, IdenticalPromptsTogetherAndOneAfterAnotherEqualTheCacheOff) {
  EngineFixture on;
  const std::vector<int32_t> prompt = random_prompt(100, 1);
  for (int variant : {0, 1}) {
    const Request r = make(prompt, 24, variant);
    const std::vector<int32_t> want = cache_off_tokens(r);
    if (variant == 0) {
      EXPECT_EQ(want, reference_tokens(r));
    }
    for (const Collected& c : run_together(*on.engine, {r, r, r}))
      EXPECT_EQ(c.ids, want) << "together";
    const Collected after = run_one(*on.engine, r);
    EXPECT_EQ(after.ids, want) << "one after another";
    EXPECT_EQ(after.final.usage.cached_tokens, 96) << "6 full blocks; the last token is computed";
    EXPECT_EQ(after.final.usage.prompt_tokens, 100);
  }
  const EngineStats s = on.engine->stats();
  EXPECT_GE(s.prefix_cache_hits, 2 * 96);
  EXPECT_EQ(s.prefix_cache_queries, 8 * 100);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate,
                   static_cast<double>(s.prefix_cache_hits) / s.prefix_cache_queries);
  EXPECT_EQ(metric(on.metrics, "rill_prefix_cache_hits_total"),
            static_cast<double>(s.prefix_cache_hits));
  EXPECT_EQ(metric(on.metrics, "rill_prefix_cache_queries_total"), 800);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_GT(s.kv_blocks_cached, 0);
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached + s.kv_blocks_used, s.kv_blocks_total);
}

TEST(PrefixCache, PromptsSharingPartOfABlockReuseOnlyWholeBlocks) {
  EngineFixture on;
  const std::vector<int32_t> shared = random_prompt(40, 2);  // 2 whole blocks + 8 tokens
  run_one(*on.engine, make(concat(shared, random_prompt(5, 3)), 4));
  struct Case {
    std::vector<int32_t> prompt;
    int cached;
  };
  const std::vector<int32_t> head37(shared.begin(), shared.begin() + 37);
  const std::vector<int32_t> head32(shared.begin(), shared.begin() + 32);
  const std::vector<Case> cases = {
      {concat(head37, random_prompt(20, 4)), 32},  // shares 37 tokens: 2 blocks
      {concat(head32, random_prompt(3, 5)), 32},   // shares exactly 2 blocks
      {head32, 16},                                // 2 blocks, but its last token is computed
      {concat(random_prompt(1, 6), shared), 0},    // shifted by one token: nothing
  };
  for (size_t i = 0; i < cases.size(); ++i)
    for (int variant : {0, 1}) {
      const Request r = make(cases[i].prompt, 16, variant + 2 * static_cast<int>(i));
      const Collected c = run_one(*on.engine, r);
      EXPECT_EQ(c.ids, cache_off_tokens(r)) << "case " << i << " variant " << variant;
      if (variant == 0) {
        EXPECT_EQ(c.final.usage.cached_tokens, cases[i].cached) << "case " << i;
      }
    }
}

TEST(PrefixCache, PrefixesEvictedBetweenRequestsAreRecomputed) {
  SchedulerConfig cfg;
  cfg.kv_watermark = 0;
  EngineFixture on(cfg, {.num_threads = 1, .block_size = 16, .num_blocks = 16});
  const std::vector<int32_t> prompt = random_prompt(90, 7);
  const Request r = make(prompt, 20);
  const std::vector<int32_t> want = reference_tokens(r);
  EXPECT_EQ(run_one(*on.engine, r).ids, want);
  // Another fills the pool: the least recently released blocks go first (the prompt's tail).
  EXPECT_EQ(run_one(*on.engine, make(random_prompt(180, 8), 10)).ids.size(), 10u);
  const Collected partly = run_one(*on.engine, r);
  EXPECT_EQ(partly.ids, want);
  EXPECT_GT(partly.final.usage.cached_tokens, 0) << "its head survived";
  EXPECT_LT(partly.final.usage.cached_tokens, 80) << "its tail was evicted";
  for (int i = 0; i < 3; ++i) run_one(*on.engine, make(random_prompt(200, 9 + i), 30));
  const Collected evicted = run_one(*on.engine, r);
  EXPECT_EQ(evicted.ids, want);
  EXPECT_EQ(evicted.final.usage.cached_tokens, 0);
  EXPECT_GT(metric(on.metrics, "rill_prefix_cache_evictions_total"), 0);
  EXPECT_EQ(on.engine->stats().kv_blocks_used, 0);
}

TEST(PrefixCache, PreemptedRequestsRecomputeFromTheCacheWithoutChangingOutputs) {
  SchedulerConfig cfg;
  cfg.kv_watermark = 0;
  EngineFixture on(cfg, {.num_threads = 1, .block_size = 16, .num_blocks = 20});
  const std::vector<int32_t> shared = random_prompt(48, 10);
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back(make(concat(shared, random_prompt(4 + 3 * i, 20 + i)), 60, i));
  const std::vector<Collected> got = run_together(*on.engine, reqs);
  int preempted = 0, cached = 0;
  int64_t prompts = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(got[i].ids, reference_tokens(reqs[i])) << "request " << i;
    preempted += got[i].final.usage.preemptions;
    cached += got[i].final.usage.cached_tokens;
    prompts += static_cast<int64_t>(reqs[i].prompt.size());
  }
  EXPECT_GT(preempted, 0);
  EXPECT_GT(cached, 0);
  // Recomputations looked up their prompt and generated tokens again, and found some cached.
  const EngineStats s = on.engine->stats();
  EXPECT_GT(s.prefix_cache_queries, prompts);
  EXPECT_GT(s.prefix_cache_hits, cached) << "hits beyond the first admissions' (recomputations)";
  EXPECT_EQ(s.kv_blocks_used, 0);
}

// Starts `r` and waits for its first tokens (its prompt is in the cache by then).
std::pair<RequestHandle, std::vector<int32_t>> start(ServingEngine& e, const Request& r) {
  RequestHandle h = e.submit(r);
  std::vector<int32_t> ids;
  auto first = h.next(std::chrono::seconds(60));
  EXPECT_TRUE(first && std::holds_alternative<TokenChunk>(*first));
  if (first && std::holds_alternative<TokenChunk>(*first)) ids = std::get<TokenChunk>(*first).ids;
  return {std::move(h), std::move(ids)};
}

std::vector<int32_t> finish(std::pair<RequestHandle, std::vector<int32_t>>& started,
                            Collected* final = nullptr) {
  Collected rest = collect(started.first);
  EXPECT_EQ(rest.finals, 1);
  std::vector<int32_t> ids = started.second;
  ids.insert(ids.end(), rest.ids.begin(), rest.ids.end());
  if (final) *final = rest;
  return ids;
}

// A full request and streaming ones share the prompt's blocks; the rings then wrap over the
// shared window blocks while others still hold them (copied first), and after (in place).
TEST(PrefixCache, StreamingRingsWrapOverSharedBlocksWithoutChangingOutputs) {
  auto checking = std::make_unique<testing::CheckingRunner>(testing::default_model());
  testing::CheckingRunner& runner = *checking;
  EngineFixture on(SchedulerConfig{}, std::move(checking));
  const std::vector<int32_t> prompt = random_prompt(64, 11);
  const Request full = make(prompt, 120);
  Request aligned = make(prompt, 90, 1);  // n_sink a block multiple: shares with `full`
  aligned.cache = CachePolicy::streaming(16, 40);
  Request unaligned = make(prompt, 90);  // its own layout: shares with its twin only
  unaligned.cache = CachePolicy::streaming(4, 76);
  auto f = start(*on.engine, full);
  auto a = start(*on.engine, aligned);
  auto u1 = start(*on.engine, unaligned);
  auto u2 = start(*on.engine, unaligned);
  Collected fa, fu1, fu2;
  EXPECT_EQ(finish(a, &fa), reference_tokens(aligned));
  EXPECT_EQ(finish(u1, &fu1), reference_tokens(unaligned));
  EXPECT_EQ(finish(u2, &fu2), reference_tokens(unaligned));
  EXPECT_EQ(finish(f), reference_tokens(full));
  EXPECT_EQ(fa.final.usage.cached_tokens, 48)
      << "the sink block and window blocks below n_sink + window";
  EXPECT_GT(fa.final.usage.evicted_tokens, 0) << "the ring wrapped";
  EXPECT_EQ(fu1.final.usage.cached_tokens, 0) << "no other request has its layout";
  EXPECT_EQ(fu2.final.usage.cached_tokens, 4 + 3 * 16);
  // Afterwards: the full request's blocks are still cached; a new streaming request starts there.
  const Collected again = run_one(*on.engine, aligned);
  EXPECT_EQ(again.ids, reference_tokens(aligned));
  EXPECT_EQ(again.final.usage.cached_tokens, 48);
  EXPECT_EQ(on.engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(runner.failures.load(), 0) << runner.first_failure;
  EXPECT_GE(runner.copies.load(), 2)
      << "rings copied blocks others still held before overwriting them";
}

TEST(PrefixCache, DifferentSaltsNeverShare) {
  EngineFixture on;
  Request r = make(random_prompt(70, 12), 12);
  const std::vector<int32_t> want = reference_tokens(r);
  r.cache_salt = "tenant-a";
  EXPECT_EQ(run_one(*on.engine, r).ids, want);
  Request other = r;
  other.cache_salt = "tenant-b";
  Collected c = run_one(*on.engine, other);
  EXPECT_EQ(c.ids, want);
  EXPECT_EQ(c.final.usage.cached_tokens, 0);
  other.cache_salt.clear();
  c = run_one(*on.engine, other);
  EXPECT_EQ(c.final.usage.cached_tokens, 0) << "no salt is a salt of its own";
  c = run_one(*on.engine, r);
  EXPECT_EQ(c.ids, want);
  EXPECT_EQ(c.final.usage.cached_tokens, 64);
  r.cache_salt = std::string(kMaxCacheSaltBytes + 1, 's');
  try {
    on.engine->submit(r);
    ADD_FAILURE() << "an oversized cache_salt was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("cache_salt"), std::string::npos) << e.what();
  }
}

TEST(PrefixCache, OptedOutRequestsNeitherReadNorPublishAndTheSwitchTurnsItOff) {
  EngineFixture on;
  Request r = make(random_prompt(70, 13), 8);
  r.prefix_caching = false;
  run_one(*on.engine, r);
  Collected c = run_one(*on.engine, r);
  EXPECT_EQ(c.final.usage.cached_tokens, 0);
  r.prefix_caching = true;
  c = run_one(*on.engine, r);
  EXPECT_EQ(c.final.usage.cached_tokens, 0) << "the opted-out runs left nothing";
  EXPECT_EQ(on.engine->stats().prefix_cache_queries, 70) << "opted-out requests are not looked up";

  EngineFixture off(cache_off());
  for (int i = 0; i < 2; ++i) EXPECT_EQ(run_one(*off.engine, r).final.usage.cached_tokens, 0);
  EXPECT_EQ(off.engine->stats().prefix_cache_queries, 0);
  EXPECT_EQ(off.engine->stats().kv_blocks_cached, 0);
}

// A session's first turn starts from the blocks an earlier session, closed before its ring
// wrapped over them, left in the cache.
TEST(PrefixCache, ASessionsFirstTurnStartsFromACachedPrefix) {
  EngineFixture on, off(cache_off());
  const std::vector<int32_t> first_turn = random_prompt(50, 14);
  auto run_session = [&](ServingEngine& e, const std::string& id, int turns) {
    SessionOptions o;
    o.id = id;
    o.cache = CachePolicy::streaming(4, 60);
    e.create_session(o);
    std::vector<Collected> out;
    for (int t = 0; t < turns; ++t) {
      Request r = make(t == 0 ? first_turn : random_prompt(6, 15 + t), t == 0 ? 8 : 30);
      r.session_id = id;
      out.push_back(run_one(e, r));
    }
    e.close_session(id);
    return out;
  };
  const std::vector<Collected> want = run_session(*off.engine, "s", 3);
  run_session(*on.engine, "first", 1);
  const std::vector<Collected> got = run_session(*on.engine, "second", 3);
  for (size_t t = 0; t < want.size(); ++t) {
    EXPECT_EQ(got[t].ids, want[t].ids) << "turn " << t;
    EXPECT_EQ(got[t].final.usage.evicted_tokens, want[t].final.usage.evicted_tokens)
        << "turn " << t;
  }
  EXPECT_EQ(got[0].final.usage.cached_tokens, 4 + 2 * 16)
      << "the sink block and whole window blocks";
  EXPECT_EQ(got[1].final.usage.cached_tokens, 0) << "later turns continue the session's own cache";
  const auto until = Clock::now() + std::chrono::seconds(30);  // the loop frees a closed session
  while (on.engine->stats().kv_blocks_used > 0 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(on.engine->stats().kv_blocks_used, 0);
}

}  // namespace
}  // namespace rill
