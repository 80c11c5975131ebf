// The KV pool's blocks with reference counts and the prefix cache's index. A block is in exactly
// one of three states:
//   free    no holder, not indexed: handed out first;
//   cached  no holder, indexed by its hash: kept for a later request with the same prefix, and
//           evicted (least recently released first) when no free block is left;
//   used    one holder or more (sequences whose block tables name it).
// so free + cached + used == total at all times. Only indexed blocks have several holders (a
// sequence finds a shared block through the index), and an indexed block is never written.
//
// Copy-on-write reserve. A ring (StreamingLLM window) overwrites its blocks when it wraps; a ring
// block still shared then must be copied first (KvCacheManager::append). Holders that will still
// overwrite a block are its "overwriters"; copies owed for block b are
//   0 without overwriters, else overwriters_b when a holder that does not overwrite it remains,
//   else overwriters_b - 1 (the last one writes in place),
// and cow_reserve() sums them, so that admission keeps that many blocks back.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_hash.h"

namespace rill {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(ref_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_cached() const { return num_cached_; }
  int num_used() const { return num_used_; }
  /// Blocks allocate() can hand out: free ones, then cached ones (evicted).
  int num_available() const { return num_free() + num_cached(); }
  int64_t evictions() const { return evictions_; }
  int cow_reserve() const { return cow_reserve_; }

  /// A block for a new holder: a free one, else the least recently released cached one (dropped
  /// from the index). -1 when none is left.
  int32_t allocate(bool overwriter);
  /// One more holder of a used or cached block (kInternal for a free one).
  void acquire(int32_t block, bool overwriter);
  /// A holder lets go (kInternal when the block has none): the last makes it cached when it is
  /// indexed, else free.
  void release(int32_t block, bool overwriter);
  /// A holder that was an overwriter has overwritten (or will never overwrite) the block.
  void drop_overwriter(int32_t block);

  /// Indexes a used block under `hash`; false (nothing changed) when another block has it.
  bool publish(int32_t block, const BlockHash& hash);
  /// Takes a used block out of the index: it becomes private to its holder.
  void unpublish(int32_t block);
  /// The indexed block with `hash`, or -1.
  int32_t find(const BlockHash& hash) const;

  int holders(int32_t block) const { return ref_.at(block); }
  int overwriters(int32_t block) const { return overwriters_.at(block); }
  bool indexed(int32_t block) const { return indexed_.at(block); }
  const BlockHash& hash(int32_t block) const { return hash_.at(block); }
  /// How much cow_reserve() would grow if `block` gained a holder.
  int reserve_growth(int32_t block, bool overwriter) const;

  /// Throws kInternal unless the states, counts, index and reserve agree (tests).
  void check() const;

 private:
  static int owed(int ref, int overwriters);  // copies owed for one block (see above)
  void set_counts(int32_t block, int ref, int overwriters);
  void lru_push(int32_t block);  // most recently released end
  void lru_remove(int32_t block);
  void check_id(int32_t block, const char* what) const;

  std::vector<int32_t> ref_, overwriters_;
  std::vector<uint8_t> indexed_;
  std::vector<BlockHash> hash_;
  std::vector<int32_t> prev_, next_;       // LRU links of cached blocks (-1: none)
  int32_t lru_head_ = -1, lru_tail_ = -1;  // least / most recently released
  std::vector<int32_t> free_;              // stack; low ids on top of a fresh pool
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> index_;
  int num_cached_ = 0, num_used_ = 0;
  int cow_reserve_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace rill
