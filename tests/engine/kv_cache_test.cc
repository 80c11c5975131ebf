// StreamingLLM cache invariants on the CPU: sinks never evicted, the window wraps across block
// boundaries, blocks return to the pool, memory stays constant over 100,000 tokens.
#include <gtest/gtest.h>

#include <set>

#include "engine/error.h"
#include "engine/kv/kv_cache_manager.h"

namespace rill {
namespace {

TEST(BlockAllocator, AllocatesEveryBlockOnceAndRejectsDoubleFree) {
  BlockAllocator a(5);
  std::set<int> got;
  for (int i = 0; i < 5; ++i) got.insert(a.allocate());
  EXPECT_EQ(got.size(), 5u);
  EXPECT_EQ(a.allocate(), -1);
  a.free(3);
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_EQ(a.allocate(), 3);
  a.free(3);
  EXPECT_THROW(a.free(3), Error);
  EXPECT_THROW(a.free(17), Error);
}

TEST(KvGeometry, StreamingLayoutPinsSinksAndRingsTheWindow) {
  KvCacheManager kv(64, 16, 4096);
  const KvGeometry g = kv.geometry_for(CachePolicy::streaming(4, 252));
  EXPECT_EQ(g.n_sink, 4);
  EXPECT_EQ(g.ring_base, 16);     // sinks have their own block
  EXPECT_EQ(g.ring_tokens, 256);  // the window rounded up to whole blocks
  for (int j = 0; j < 4; ++j) EXPECT_EQ(g.slot(j), j);
  for (long long j = 4; j < 5000; ++j) {
    EXPECT_GE(g.slot(j), 16) << "window token " << j << " would overwrite a sink";
    EXPECT_LT(g.slot(j), 16 + 256);
    EXPECT_EQ(g.slot(j), g.slot(j + 256)) << "ring period";
  }
  // Consecutive window positions occupy consecutive slots across block boundaries, wrapping once.
  for (long long j = 4; j < 1000; ++j) {
    const long long next = g.slot(j + 1);
    EXPECT_TRUE(next == g.slot(j) + 1 || (g.slot(j) == 16 + 255 && next == 16)) << j;
  }
  // Positions within the cache (the paper): the newest query sits at n_sink + window - 1.
  EXPECT_EQ(g.sink_query_pos(10), 10);
  EXPECT_EQ(g.sink_query_pos(255), 255);
  EXPECT_EQ(g.sink_query_pos(100000), 255);
}

TEST(KvCacheManager, StreamingMemoryIsConstantOver100kTokens) {
  KvCacheManager kv(100, 16, 512);
  kv.add_sequence(1, CachePolicy::streaming(4, 252));
  const int max_blocks = kv.blocks_needed_max(CachePolicy::streaming(4, 252), 1, 1'000'000);
  EXPECT_EQ(max_blocks, 1 + 16);
  std::vector<int32_t> first_table;
  for (int64_t t = 0; t < 100'000; ++t) {
    ASSERT_EQ(kv.append(1, 1), t);
    const KvSequence& s = kv.sequence(1);
    ASSERT_LE(static_cast<int>(s.block_table.size()), max_blocks);
    if (t == 300) first_table = s.block_table;
    if (t > 300) {
      ASSERT_EQ(s.block_table, first_table) << "eviction must not move or reallocate blocks";
    }
  }
  const KvStats st = kv.stats();
  EXPECT_EQ(st.blocks_used, 17);
  EXPECT_EQ(st.sequences_streaming, 1);
  EXPECT_EQ(st.evicted_tokens, 100'000 - 4 - 256);
  EXPECT_EQ(kv.remaining_capacity(1), INT64_MAX);
}

TEST(KvCacheManager, BlocksReturnToThePoolOnRemove) {
  KvCacheManager kv(40, 16, 1024);
  kv.add_sequence(1, CachePolicy::full());
  kv.add_sequence(2, CachePolicy::streaming(2, 30));
  kv.append(1, 100);  // 7 blocks
  kv.append(2, 500);  // 1 sink block + 2 ring blocks
  EXPECT_EQ(kv.stats().blocks_used, 10);
  kv.remove_sequence(1);  // finished
  EXPECT_EQ(kv.stats().blocks_used, 3);
  kv.remove_sequence(2);  // cancelled
  EXPECT_EQ(kv.stats().blocks_used, 0);
  EXPECT_EQ(kv.num_free_blocks(), 40);
  kv.remove_sequence(2);  // unknown ids are ignored
}

TEST(KvCacheManager, FullPolicyStopsAtTheContextLimit) {
  KvCacheManager kv(100, 16, 128);
  kv.add_sequence(1, CachePolicy::full());
  kv.append(1, 120);
  EXPECT_EQ(kv.remaining_capacity(1), 8);
  EXPECT_THROW(kv.append(1, 9), Error);
  EXPECT_EQ(kv.sequence(1).num_tokens, 120) << "a failed append leaves the sequence unchanged";
  kv.append(1, 8);
  try {
    kv.append(1, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfRange);
  }
}

TEST(KvCacheManager, ExhaustionIsReportedAndLosesNothing) {
  KvCacheManager kv(4, 16, 1024);
  kv.add_sequence(1, CachePolicy::full());
  kv.add_sequence(2, CachePolicy::full());
  kv.append(1, 48);
  try {
    kv.check_append({{1, 1}, {2, 16}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
  }
  EXPECT_THROW(kv.append(2, 17), Error);
  EXPECT_EQ(kv.sequence(2).num_tokens, 0);
  EXPECT_EQ(kv.num_free_blocks(), 1);
}

TEST(KvCacheManager, AdmissionAccounting) {
  KvCacheManager kv(1000, 16, 2048);
  EXPECT_EQ(kv.blocks_needed_now(CachePolicy::full(), 33), 3);
  EXPECT_EQ(kv.blocks_needed_max(CachePolicy::full(), 33, 100), 9);
  EXPECT_EQ(kv.blocks_needed_max(CachePolicy::full(), 2000, 1000), 128) << "capped by the context";
  EXPECT_EQ(kv.blocks_needed_now(CachePolicy::streaming(4, 60), 3), 1);
  EXPECT_EQ(kv.blocks_needed_now(CachePolicy::streaming(4, 60), 10'000), 1 + 4);
  EXPECT_EQ(kv.blocks_needed_max(CachePolicy::streaming(20, 60), 5, 1'000'000), 2 + 4);
  EXPECT_THROW(kv.geometry_for(CachePolicy::streaming(4, 0)), Error);
  EXPECT_THROW(kv.geometry_for(CachePolicy::streaming(-1, 10)), Error);
  EXPECT_THROW(kv.geometry_for(CachePolicy::streaming(100, 2000)), Error) << "beyond the model context";
}

TEST(KvCacheManager, SlidingWindowModelsRingTheirFullCache) {
  KvCacheManager kv(100, 16, 4096, /*sliding_window=*/40);
  const KvGeometry g = kv.geometry_for(CachePolicy::full());
  EXPECT_EQ(g.n_sink, 0);
  EXPECT_EQ(g.window, 40);
  EXPECT_EQ(g.ring_tokens, 48);
  kv.add_sequence(1, CachePolicy::full());
  kv.append(1, 1000);
  EXPECT_EQ(kv.sequence(1).block_table.size(), 3u);
  EXPECT_EQ(kv.remaining_capacity(1), 4096 - 1000);
}

}  // namespace
}  // namespace rill
