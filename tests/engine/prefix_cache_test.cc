// The prefix cache's metadata on the CPU: SHA-256 against FIPS 180-4 vectors, chain hashes that
// change with everything that changes a block, the block pool's states and LRU eviction, and the
// KV-cache manager publishing, matching, sharing, evicting and copying ring blocks on write, with
// every block's holders checked against the block tables after each operation.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <string>

#include "engine/error.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/kv_cache_manager.h"

namespace rill {
namespace {

std::string hex(const Sha256Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) s += digits[b >> 4], s += digits[b & 15];
  return s;
}

std::span<const uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::vector<int32_t> iota_tokens(int n, int32_t from = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(Sha256, MatchesFips180Vectors) {
  EXPECT_EQ(hex(sha256(bytes(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256(bytes("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a', fed in uneven pieces across block boundaries.
  Sha256 h;
  const std::string chunk(997, 'a');
  size_t left = 1'000'000;
  while (left > 0) {
    const size_t n = std::min(left, chunk.size());
    h.update(bytes(std::string_view(chunk).substr(0, n)));
    left -= n;
  }
  EXPECT_EQ(hex(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(BlockHash, ChangesWithEverythingThatChangesTheBlock) {
  const BlockHash root = prefix_chain_root("model-a", 0, "");
  EXPECT_EQ(root, prefix_chain_root("model-a", 0, ""));
  EXPECT_NE(root, prefix_chain_root("model-b", 0, ""));
  EXPECT_NE(root, prefix_chain_root("model-a", 4, ""));
  EXPECT_NE(root, prefix_chain_root("model-a", 0, "tenant"));
  // Length-prefixed fields: moving a byte from identity to salt changes the root.
  EXPECT_NE(prefix_chain_root("ab", 0, "c"), prefix_chain_root("a", 0, "bc"));
  const std::vector<int32_t> t = iota_tokens(16);
  const BlockHash b = chain_block_hash(root, t);
  EXPECT_EQ(b, chain_block_hash(root, t));
  EXPECT_NE(b, chain_block_hash(prefix_chain_root("model-a", 0, "tenant"), t));
  std::vector<int32_t> u = t;
  u[7] += 1;
  EXPECT_NE(b, chain_block_hash(root, u));
  EXPECT_NE(b, chain_block_hash(root, std::span<const int32_t>(t).first(15)));
  EXPECT_NE(b, chain_block_hash(b, t)) << "the same tokens one block later";
}

TEST(BlockPool, FreeCachedUsedAlwaysAddUpAndEvictionIsLeastRecentlyReleased) {
  BlockPool p(4);
  const int32_t a = p.allocate(false), b = p.allocate(false);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  const BlockHash ha = chain_block_hash(prefix_chain_root("m", 0, ""), iota_tokens(4));
  const BlockHash hb = chain_block_hash(ha, iota_tokens(4));
  EXPECT_TRUE(p.publish(a, ha));
  EXPECT_TRUE(p.publish(b, hb));
  EXPECT_EQ(p.find(ha), a);
  p.release(b, false);  // released first: evicted first
  p.release(a, false);
  EXPECT_EQ(p.num_cached(), 2);
  EXPECT_EQ(p.num_free(), 2);
  EXPECT_EQ(p.num_used(), 0);
  p.check();
  p.acquire(a, false);  // a hit takes a cached block back
  EXPECT_EQ(p.num_cached(), 1);
  EXPECT_EQ(p.holders(a), 1);
  EXPECT_EQ(p.allocate(false), 2);
  EXPECT_EQ(p.allocate(false), 3);
  EXPECT_EQ(p.allocate(false), b) << "no free block left: the cached one is evicted";
  EXPECT_EQ(p.find(hb), -1);
  EXPECT_EQ(p.evictions(), 1);
  EXPECT_EQ(p.allocate(false), -1);
  EXPECT_FALSE(p.publish(b, ha)) << "a second block with the same contents stays private";
  EXPECT_THROW(p.acquire(17, false), Error);
  p.check();
  p.release(b, false);
  EXPECT_THROW(p.release(b, false), Error) << "double release";
  EXPECT_THROW(p.acquire(b, false), Error) << "a free block is allocated, not acquired";
  p.check();
}

TEST(BlockPool, CopyOnWriteReserveCountsTheCopiesRingsWillMake) {
  BlockPool p(8);
  const BlockHash h = chain_block_hash(prefix_chain_root("m", 0, ""), iota_tokens(4));
  const int32_t b = p.allocate(true);  // a ring's own block
  EXPECT_EQ(p.cow_reserve(), 0) << "alone, it writes in place";
  p.publish(b, h);
  EXPECT_EQ(p.reserve_growth(b, false), 1);
  p.acquire(b, false);  // a full sequence shares it: the ring must copy
  EXPECT_EQ(p.cow_reserve(), 1);
  p.acquire(b, true);  // a second ring: both copy while the full one stays
  EXPECT_EQ(p.cow_reserve(), 2);
  p.release(b, false);  // the full one leaves: the last ring will write in place
  EXPECT_EQ(p.cow_reserve(), 1);
  p.release(b, true);  // one ring leaves: the other holds it alone
  EXPECT_EQ(p.cow_reserve(), 0);
  p.drop_overwriter(b);  // and writes in place
  EXPECT_EQ(p.cow_reserve(), 0);
  p.check();
}

// Fills a sequence with `tokens`, one append per chunk of `chunk` tokens.
void feed(KvCacheManager& kv, SeqId id, std::span<const int32_t> tokens, size_t chunk = 1000) {
  for (size_t i = 0; i < tokens.size(); i += chunk) {
    const size_t n = std::min(chunk, tokens.size() - i);
    kv.append(id, tokens.subspan(i, n));
    kv.check_invariants();
  }
}

SeqId add_cached(KvCacheManager& kv, SeqId id, const CachePolicy& p,
                 std::span<const int32_t> tokens, std::string_view salt = "") {
  const PrefixMatch m = kv.match_prefix(p, kv.prefix_root(p, salt), tokens);
  kv.add_sequence(id, p, &m);
  kv.check_invariants();
  return id;
}

TEST(KvPrefixCache, IdenticalPromptsShareFullBlocksAndLeaveOneTokenToCompute) {
  KvCacheManager kv(64, 16, 1024, 0, "test-model");
  const CachePolicy full = CachePolicy::full();
  const std::vector<int32_t> prompt = iota_tokens(40);  // 2 full blocks + 8
  add_cached(kv, 1, full, prompt);
  EXPECT_EQ(kv.sequence(1).num_tokens, 0);
  feed(kv, 1, prompt, 7);
  EXPECT_EQ(kv.stats().blocks_used, 3);
  // Same prompt: both full blocks hit.
  const BlockHash root = kv.prefix_root(full, "");
  PrefixMatch m = kv.match_prefix(full, root, prompt);
  EXPECT_EQ(m.tokens, 32);
  ASSERT_EQ(m.blocks.size(), 2u);
  EXPECT_EQ(m.blocks[0], kv.sequence(1).block_table[0]);
  EXPECT_EQ(m.pool_blocks, 0) << "held blocks cost the pool nothing";
  kv.add_sequence(2, full, &m);
  EXPECT_EQ(kv.sequence(2).num_tokens, 32);
  EXPECT_EQ(kv.sequence(2).cached_tokens, 32);
  EXPECT_EQ(kv.stats().blocks_used, 3) << "shared, not copied";
  feed(kv, 2, std::span<const int32_t>(prompt).subspan(32));
  EXPECT_EQ(kv.stats().blocks_used, 4);
  // A prompt of exactly 32 tokens hits one block only: its last token is computed.
  EXPECT_EQ(kv.match_prefix(full, root, std::span<const int32_t>(prompt).first(32)).tokens, 16);
  EXPECT_EQ(kv.match_prefix(full, root, std::span<const int32_t>(prompt).first(33)).tokens, 32);
  // One differing token in the second block: the first block only.
  std::vector<int32_t> other = prompt;
  other[20] = 7;
  EXPECT_EQ(kv.match_prefix(full, root, other).tokens, 16);
  // Another salt (tenant) or another model never shares.
  EXPECT_EQ(kv.match_prefix(full, kv.prefix_root(full, "tenant-b"), prompt).tokens, 0);
  KvCacheManager other_model(64, 16, 1024, 0, "another-model");
  EXPECT_NE(other_model.prefix_root(full, ""), root);
  kv.remove_sequence(1);
  kv.remove_sequence(2);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_used, 0);
  EXPECT_EQ(kv.stats().blocks_cached, 2)
      << "the full blocks stay cached; the partial ones are freed";
  EXPECT_EQ(kv.stats().blocks_free, 62);
  m = kv.match_prefix(full, root, prompt);
  EXPECT_EQ(m.tokens, 32);
  EXPECT_EQ(m.pool_blocks, 2) << "cached blocks leave the evictable set when taken";
}

TEST(KvPrefixCache, SequencesWithoutAMatchNeitherReadNorPublish) {
  KvCacheManager kv(16, 16, 1024, 0, "m");
  const std::vector<int32_t> prompt = iota_tokens(40);
  kv.add_sequence(1, CachePolicy::full());  // opted out
  feed(kv, 1, prompt);
  EXPECT_EQ(
      kv.match_prefix(CachePolicy::full(), kv.prefix_root(CachePolicy::full(), ""), prompt).tokens,
      0);
  kv.remove_sequence(1);
  EXPECT_EQ(kv.stats().blocks_cached, 0);
}

TEST(KvPrefixCache, AStepThatNeverLaunchedLeavesNothingPublished) {
  KvCacheManager kv(16, 16, 1024, 0, "m");
  const CachePolicy full = CachePolicy::full();
  const std::vector<int32_t> prompt = iota_tokens(40);
  add_cached(kv, 1, full, prompt);
  kv.append(1, prompt);  // then the runner fails to launch the step
  kv.discard_published(1);
  kv.append(1, iota_tokens(16, 500));
  kv.check_invariants();
  EXPECT_EQ(kv.match_prefix(full, kv.prefix_root(full, ""), prompt).tokens, 0);
  kv.remove_sequence(1);
  EXPECT_EQ(kv.stats().blocks_cached, 0) << "and nothing more after it";
  EXPECT_EQ(kv.stats().blocks_free, 16);
}

TEST(KvPrefixCache, EvictsLeastRecentlyReleasedAndMatchesStopAtTheFirstMiss) {
  KvCacheManager kv(6, 16, 1024, 0, "m");
  const CachePolicy full = CachePolicy::full();
  const BlockHash root = kv.prefix_root(full, "");
  const std::vector<int32_t> a = iota_tokens(65, 0), b = iota_tokens(33, 5000);
  add_cached(kv, 1, full, a);
  feed(kv, 1, a);
  kv.remove_sequence(1);  // 4 cached blocks (+1 partial freed)
  EXPECT_EQ(kv.stats().blocks_cached, 4);
  add_cached(kv, 2, full, b);
  feed(kv, 2, b);  // 3 blocks: 2 free ones, then the least recently released cached one
  kv.check_invariants();
  EXPECT_EQ(kv.stats().cache_evictions, 1);
  // a's last block went first (released in reverse order): its head still hits.
  EXPECT_EQ(kv.match_prefix(full, root, a).tokens, 48);
  kv.remove_sequence(2);
  add_cached(kv, 3, full, iota_tokens(6 * 16, 9000));
  feed(kv, 3, iota_tokens(6 * 16, 9000));  // the whole pool
  EXPECT_EQ(kv.stats().blocks_cached, 0);
  EXPECT_EQ(kv.match_prefix(full, root, a).tokens, 0) << "evicted";
  kv.check_invariants();
}

TEST(KvPrefixCache, SampledTokensArePublishedOnceReported) {
  KvCacheManager kv(16, 4, 1024, 0, "m");
  const CachePolicy full = CachePolicy::full();
  const BlockHash root = kv.prefix_root(full, "");
  const std::vector<int32_t> prompt = iota_tokens(6);
  add_cached(kv, 1, full, prompt);
  feed(kv, 1, prompt);
  // A decode step that feeds the sample of the step before it (kLastSampled), reported late.
  const int32_t unknown[] = {-1};
  kv.append(1, unknown);
  std::vector<int32_t> expect = prompt;
  expect.push_back(42);
  expect.push_back(0);  // anything: the match leaves the last token out
  EXPECT_EQ(kv.match_prefix(full, root, expect).tokens, 4)
      << "the block with the unknown token is not named";
  kv.resolve_sampled(1, 42);
  kv.check_invariants();
  EXPECT_EQ(kv.match_prefix(full, root, expect).tokens, 4) << "7 of 8 tokens appended";
  // A sample reported before the step that feeds it.
  kv.resolve_sampled(1, 43);
  kv.append(1, unknown);
  expect.back() = 43;
  expect.push_back(0);
  EXPECT_EQ(kv.match_prefix(full, root, expect).tokens, 8);
  // A wrong sample: the chain names what was fed, so nothing past the prompt matches.
  std::vector<int32_t> wrong = expect;
  wrong[6] = 41;
  EXPECT_EQ(kv.match_prefix(full, root, wrong).tokens, 4);
}

TEST(KvPrefixCache, StreamingSharesSinksAndLeadingWindowWithFullWhenAligned) {
  KvCacheManager kv(64, 16, 4096, 0, "m");
  const CachePolicy full = CachePolicy::full(), stream = CachePolicy::streaming(16, 40);
  EXPECT_EQ(kv.prefix_root(full, ""), kv.prefix_root(stream, ""))
      << "n_sink a block multiple: same layout";
  EXPECT_NE(kv.prefix_root(full, ""), kv.prefix_root(CachePolicy::streaming(4, 40), ""));
  const std::vector<int32_t> prompt = iota_tokens(100);
  add_cached(kv, 1, full, prompt);
  feed(kv, 1, prompt);
  // Up to n_sink + window = 56 positions attend to everything before them: 3 blocks.
  PrefixMatch m = kv.match_prefix(stream, kv.prefix_root(stream, ""), prompt);
  EXPECT_EQ(m.tokens, 48);
  EXPECT_EQ(m.pool_blocks, 2) << "the ring will copy its 2 shared window blocks";
  kv.add_sequence(2, stream, &m);
  kv.check_invariants();
  EXPECT_EQ(kv.cow_reserve(), 2);
  EXPECT_EQ(kv.stats().blocks_used, 7);
  // The ring (48 slots after the sink block) wraps at position 16 + 48 = 64: the first window
  // block is copied before the write; the copy keeps the positions still in the window.
  feed(kv, 2, std::span<const int32_t>(prompt).subspan(48, 16), 1);
  EXPECT_TRUE(kv.take_copies().empty());
  const int32_t shared = kv.sequence(2).block_table[1];
  feed(kv, 2, std::span<const int32_t>(prompt).subspan(64, 1));
  const std::vector<BlockCopy> copies = kv.take_copies();
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared);
  EXPECT_EQ(copies[0].dst, kv.sequence(2).block_table[1]);
  EXPECT_NE(kv.sequence(2).block_table[1], shared);
  EXPECT_EQ(kv.sequence(1).block_table[1], shared) << "the full sequence keeps its block";
  EXPECT_EQ(kv.cow_reserve(), 1);
  // The full sequence leaves: the second window block is the ring's alone and written in place.
  kv.remove_sequence(1);
  EXPECT_EQ(kv.cow_reserve(), 0);
  const int32_t alone = kv.sequence(2).block_table[2];
  feed(kv, 2, iota_tokens(16, 7000), 1);
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_EQ(kv.sequence(2).block_table[2], alone);
  // A block overwritten in place left the index; the original of the copied one is still cached.
  EXPECT_EQ(kv.match_prefix(full, kv.prefix_root(full, ""), prompt).tokens, 32);
  kv.remove_sequence(2);
  kv.check_invariants();
}

TEST(KvPrefixCache, StreamingWithUnalignedSinksSharesWithTheSamePolicy) {
  KvCacheManager kv(64, 16, 4096, 0, "m");
  const CachePolicy stream = CachePolicy::streaming(4, 60);  // sink block [0, 4), window 64 slots
  const BlockHash root = kv.prefix_root(stream, "");
  const std::vector<int32_t> prompt = iota_tokens(300);
  add_cached(kv, 1, stream, prompt);
  feed(kv, 1, std::span<const int32_t>(prompt).first(60), 13);
  PrefixMatch m = kv.match_prefix(stream, root, prompt);
  EXPECT_EQ(m.tokens, 4 + 3 * 16) << "the sink block, then whole window blocks";
  kv.add_sequence(2, stream, &m);
  kv.check_invariants();
  // Both run far past the window: rings wrap over the shared blocks, copying them first.
  feed(kv, 1, std::span<const int32_t>(prompt).subspan(60), 1);
  feed(kv, 2, std::span<const int32_t>(prompt).subspan(52), 5);
  EXPECT_EQ(kv.take_copies().size(), 3u)
      << "one copy per shared window block; the sink stays shared";
  EXPECT_EQ(kv.sequence(1).block_table[0], kv.sequence(2).block_table[0]);
  EXPECT_EQ(kv.cow_reserve(), 0);
  kv.remove_sequence(1);
  kv.remove_sequence(2);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_cached, 1) << "only the sink block is still in place";
}

TEST(KvPrefixCache, SlidingWindowModelsShareBelowTheWindowAndCopyOnWrap) {
  KvCacheManager kv(64, 16, 4096, /*sliding_window=*/48, "m");
  const CachePolicy full = CachePolicy::full();
  const BlockHash root = kv.prefix_root(full, "");
  const std::vector<int32_t> prompt = iota_tokens(200);
  add_cached(kv, 1, full, prompt);
  feed(kv, 1, std::span<const int32_t>(prompt).first(48));
  PrefixMatch m = kv.match_prefix(full, root, prompt);
  EXPECT_EQ(m.tokens, 48) << "the whole window, still in place";
  kv.add_sequence(2, full, &m);
  EXPECT_EQ(kv.cow_reserve(), 0)
      << "a full ring takes its copies as it appends, not from the reserve";
  // Position 48 wraps onto block 0, which sequence 1 also holds: no new block, one copy.
  EXPECT_EQ(kv.sequence(2).block_table.size(), 3u);
  EXPECT_EQ(kv.blocks_to_append(2, 1), 1);
  kv.append(2, std::span<const int32_t>(prompt).subspan(48, 1));
  EXPECT_EQ(kv.take_copies().size(), 1u);
  kv.check_invariants();
  // A ring that wraps within one append publishes only the blocks still in place after it.
  kv.remove_sequence(1);
  kv.remove_sequence(2);
  KvCacheManager fresh(64, 16, 4096, 48, "m");
  add_cached(fresh, 3, full, prompt);
  feed(fresh, 3, std::span<const int32_t>(prompt).first(50));
  EXPECT_EQ(fresh.match_prefix(full, root, prompt).tokens, 0)
      << "block 0 was overwritten by position 48";
}

TEST(KvPrefixCache, ReleasedSequencesComeBackFromTheCache) {
  KvCacheManager kv(32, 16, 4096, 0, "m");
  const CachePolicy stream = CachePolicy::streaming(16, 200);
  const std::vector<int32_t> prompt = iota_tokens(70);
  add_cached(kv, 1, stream, prompt);
  feed(kv, 1, prompt);
  const std::vector<int32_t> before = kv.sequence(1).block_table;
  kv.release_blocks(1);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_cached, 4);
  std::vector<bool> from_cache;
  const std::vector<int32_t> after = kv.reacquire_blocks(1, &from_cache);
  ASSERT_EQ(after.size(), 5u);
  for (int b = 0; b < 4; ++b) {
    EXPECT_TRUE(from_cache[b]) << b;
    EXPECT_EQ(after[b], before[b]);
  }
  EXPECT_FALSE(from_cache[4]) << "the partial block is copied back";
  kv.check_invariants();
  // Evicted meanwhile: copied back instead.
  kv.release_blocks(1);
  add_cached(kv, 2, CachePolicy::full(), iota_tokens(32 * 16, 5000));
  feed(kv, 2, iota_tokens(32 * 16 - 1, 5000));
  kv.remove_sequence(2);
  kv.reacquire_blocks(1, &from_cache);
  EXPECT_EQ(std::count(from_cache.begin(), from_cache.end(), true), 0);
  kv.check_invariants();
}

// Random sequences over a few shared prefixes in a small pool, full and streaming, appended,
// resolved, released, removed: holders always equal the block tables, and nothing is lost.
TEST(KvPrefixCache, RandomOperationsKeepEveryInvariant) {
  std::mt19937 rng(7);
  KvCacheManager kv(40, 8, 4096, 0, "m");
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) prefixes.push_back(iota_tokens(8 + 37 * i, 1000 * i));
  const CachePolicy policies[] = {CachePolicy::full(), CachePolicy::streaming(8, 30),
                                  CachePolicy::streaming(3, 20)};
  std::unordered_map<SeqId, std::vector<int32_t>> live;
  SeqId next = 1;
  int hits = 0, copies = 0, evictions_seen = 0;
  for (int op = 0; op < 3000; ++op) {
    const int what = static_cast<int>(rng() % 10);
    if (what < 3 && live.size() < 6) {
      std::vector<int32_t> prompt = prefixes[rng() % 3];
      for (int i = static_cast<int>(rng() % 20); i > 0; --i)
        prompt.push_back(static_cast<int32_t>(rng() % 50));
      const CachePolicy& p = policies[rng() % 3];
      const PrefixMatch m = kv.match_prefix(p, kv.prefix_root(p, rng() % 4 ? "" : "salt"), prompt);
      if (kv.blocks_needed_max(p, static_cast<int64_t>(prompt.size()), 100) -
              static_cast<int>(m.blocks.size()) + m.pool_blocks + kv.cow_reserve() >
          kv.num_free_blocks())
        continue;
      kv.add_sequence(next, p, &m);
      hits += m.tokens > 0;
      live[next++] = std::vector<int32_t>(prompt.begin() + m.tokens, prompt.end());
    } else if (what < 8 && !live.empty()) {
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      const KvSequence& s = kv.sequence(it->first);
      if (s.released) {
        try {
          kv.reacquire_blocks(it->first);
        } catch (const Error& e) {
          ASSERT_EQ(e.code(), ErrorCode::kResourceExhausted);
        }
      } else {
        std::vector<int32_t> toks = it->second.empty()
                                        ? std::vector<int32_t>{static_cast<int32_t>(rng() % 50)}
                                        : it->second;
        if (!s.policy.is_streaming() && s.num_tokens + static_cast<int64_t>(toks.size()) > 200) {
          kv.remove_sequence(it->first);
          live.erase(it);
        } else {
          try {
            kv.check_append({{it->first, static_cast<int64_t>(toks.size())}});
            kv.append(it->first, toks);
            it->second.clear();
          } catch (const Error& e) {
            ASSERT_EQ(e.code(), ErrorCode::kResourceExhausted);
          }
          copies += static_cast<int>(kv.take_copies().size());
        }
      }
    } else if (what == 8 && !live.empty()) {
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      if (!kv.sequence(it->first).released) kv.release_blocks(it->first);
    } else if (!live.empty()) {
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      kv.remove_sequence(it->first);
      live.erase(it);
    }
    ASSERT_NO_THROW(kv.check_invariants()) << "after operation " << op;
    const KvStats st = kv.stats();
    ASSERT_EQ(st.blocks_free + st.blocks_cached + st.blocks_used, st.blocks_total);
  }
  for (const auto& [id, rest] : live) kv.remove_sequence(id);
  kv.check_invariants();
  EXPECT_EQ(kv.stats().blocks_used, 0);
  evictions_seen = static_cast<int>(kv.stats().cache_evictions);
  EXPECT_GT(hits, 50);
  EXPECT_GT(copies, 5);
  EXPECT_GT(evictions_seen, 50);
}

}  // namespace
}  // namespace rill
