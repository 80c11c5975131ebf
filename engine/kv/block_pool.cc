#include "engine/kv/block_pool.h"

#include <string>

#include "engine/error.h"

namespace rill {

namespace {

[[noreturn]] void broken(const std::string& what) {
  throw Error(ErrorCode::kInternal, "KV block pool: " + what);
}

}  // namespace

BlockPool::BlockPool(int num_blocks) {
  const size_t n = num_blocks > 0 ? static_cast<size_t>(num_blocks) : 0;
  ref_.assign(n, 0);
  overwriters_.assign(n, 0);
  indexed_.assign(n, 0);
  hash_.assign(n, BlockHash{});
  prev_.assign(n, -1);
  next_.assign(n, -1);
  free_.reserve(n);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // a fresh pool hands out 0, 1, ...
}

void BlockPool::check_id(int32_t block, const char* what) const {
  if (block < 0 || block >= num_blocks())
    broken(std::string(what) + " of block " + std::to_string(block) + ", not in the pool");
}

int BlockPool::owed(int ref, int overwriters) {
  if (overwriters == 0) return 0;
  return ref > overwriters ? overwriters : overwriters - 1;
}

int BlockPool::reserve_growth(int32_t block, bool overwriter) const {
  const int r = ref_.at(block), w = overwriters_.at(block);
  return owed(r + 1, w + (overwriter ? 1 : 0)) - owed(r, w);
}

void BlockPool::set_counts(int32_t block, int ref, int overwriters) {
  cow_reserve_ += owed(ref, overwriters) - owed(ref_[block], overwriters_[block]);
  ref_[block] = ref;
  overwriters_[block] = overwriters;
}

void BlockPool::lru_push(int32_t b) {
  prev_[b] = lru_tail_;
  next_[b] = -1;
  if (lru_tail_ >= 0)
    next_[lru_tail_] = b;
  else
    lru_head_ = b;
  lru_tail_ = b;
  ++num_cached_;
}

void BlockPool::lru_remove(int32_t b) {
  if (prev_[b] >= 0)
    next_[prev_[b]] = next_[b];
  else
    lru_head_ = next_[b];
  if (next_[b] >= 0)
    prev_[next_[b]] = prev_[b];
  else
    lru_tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  --num_cached_;
}

int32_t BlockPool::allocate(bool overwriter) {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (lru_head_ >= 0) {
    b = lru_head_;  // evicted: its prefix is recomputed by whoever needs it next
    lru_remove(b);
    index_.erase(hash_[b]);
    indexed_[b] = 0;
    ++evictions_;
  } else {
    return -1;
  }
  ++num_used_;
  set_counts(b, 1, overwriter ? 1 : 0);
  return b;
}

void BlockPool::acquire(int32_t b, bool overwriter) {
  check_id(b, "acquire");
  if (ref_[b] == 0) {
    if (!indexed_[b]) broken("acquire of free block " + std::to_string(b));
    lru_remove(b);
    ++num_used_;
  }
  set_counts(b, ref_[b] + 1, overwriters_[b] + (overwriter ? 1 : 0));
}

void BlockPool::release(int32_t b, bool overwriter) {
  check_id(b, "release");
  if (ref_[b] == 0) broken("release of block " + std::to_string(b) + " that has no holder");
  if (overwriter && overwriters_[b] == 0)
    broken("release of block " + std::to_string(b) + " by an overwriter it does not have");
  set_counts(b, ref_[b] - 1, overwriters_[b] - (overwriter ? 1 : 0));
  if (ref_[b] > 0) return;
  --num_used_;
  if (indexed_[b])
    lru_push(b);
  else
    free_.push_back(b);
}

void BlockPool::drop_overwriter(int32_t b) {
  check_id(b, "drop_overwriter");
  if (overwriters_[b] == 0) broken("block " + std::to_string(b) + " has no overwriter to drop");
  set_counts(b, ref_[b], overwriters_[b] - 1);
}

bool BlockPool::publish(int32_t b, const BlockHash& hash) {
  check_id(b, "publish");
  if (ref_[b] == 0) broken("publish of block " + std::to_string(b) + " that has no holder");
  if (indexed_[b]) return hash_[b] == hash;
  if (!index_.emplace(hash, b).second) return false;  // the same contents in another block
  indexed_[b] = 1;
  hash_[b] = hash;
  return true;
}

void BlockPool::unpublish(int32_t b) {
  check_id(b, "unpublish");
  if (ref_[b] == 0) broken("unpublish of block " + std::to_string(b) + " that has no holder");
  if (!indexed_[b]) return;
  index_.erase(hash_[b]);
  indexed_[b] = 0;
}

int32_t BlockPool::find(const BlockHash& hash) const {
  const auto it = index_.find(hash);
  return it == index_.end() ? -1 : it->second;
}

void BlockPool::check() const {
  int used = 0, cached = 0, reserve = 0;
  size_t indexed = 0;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    if (ref_[b] < 0 || overwriters_[b] < 0 || overwriters_[b] > ref_[b])
      broken("block " + std::to_string(b) + " has " + std::to_string(ref_[b]) + " holders, " +
             std::to_string(overwriters_[b]) + " overwriters");
    if (ref_[b] > 1 && !indexed_[b]) broken("block " + std::to_string(b) + " is shared unindexed");
    used += ref_[b] > 0;
    cached += ref_[b] == 0 && indexed_[b];
    reserve += owed(ref_[b], overwriters_[b]);
    if (indexed_[b]) {
      ++indexed;
      if (find(hash_[b]) != b) broken("block " + std::to_string(b) + " is not under its hash");
    }
  }
  int lru = 0;
  for (int32_t b = lru_head_; b >= 0; b = next_[b]) {
    if (ref_[b] != 0 || !indexed_[b]) broken("block " + std::to_string(b) + " in the LRU list");
    if (++lru > num_blocks()) broken("the LRU list loops");
  }
  for (int32_t b : free_)
    if (ref_[b] != 0 || indexed_[b]) broken("block " + std::to_string(b) + " on the free stack");
  if (used != num_used_ || cached != num_cached_ || lru != cached || indexed != index_.size() ||
      reserve != cow_reserve_ || num_free() + cached + used != num_blocks())
    broken("counts disagree: free " + std::to_string(num_free()) + " + cached " +
           std::to_string(cached) + " (" + std::to_string(num_cached_) + ") + used " +
           std::to_string(used) + " (" + std::to_string(num_used_) + ") of " +
           std::to_string(num_blocks()) + ", reserve " + std::to_string(reserve) + " (" +
           std::to_string(cow_reserve_) + ")");
}

}  // namespace rill
