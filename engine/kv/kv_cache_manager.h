// Block tables of every sequence over one paged KV pool. It owns metadata only; the runner owns
// the storage ([num_layers][num_blocks][2][num_kv_heads][block_size][head_dim]) and reads the
// geometry and block table of each sequence from here.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv/block_allocator.h"
#include "engine/kv/cache_policy.h"

namespace rill {

using SeqId = int64_t;

struct KvSequence {
  CachePolicy policy;
  KvGeometry geometry;
  std::vector<int32_t> block_table;  // logical block (slot / block_size) -> pool block
  int64_t num_tokens = 0;            // stream length: tokens appended so far
  int max_blocks = 0;                // blocks this sequence can ever hold
  bool released = false;             // its blocks were released (offloaded): nothing appends
  int released_blocks = 0;           // while released: the blocks it had
};

struct KvStats {
  int blocks_total = 0;
  int blocks_used = 0;
  int blocks_free = 0;
  int64_t evicted_tokens = 0;  // tokens dropped from streaming windows, over all sequences
  int sequences_full = 0;
  int sequences_streaming = 0;
};

class KvCacheManager {
 public:
  /// `max_context`: the model's position limit, which bounds `full` sequences.
  KvCacheManager(int num_blocks, int block_size, int max_context, int sliding_window = 0);

  int block_size() const { return block_size_; }
  int max_context() const { return max_context_; }

  /// Geometry a policy gives (validates it: kInvalidArgument on a bad n_sink / window).
  KvGeometry geometry_for(const CachePolicy& policy) const;
  /// Blocks needed to hold `prompt_tokens` now, and the most the sequence can ever need when it
  /// generates up to `max_new_tokens` more. Streaming sequences never exceed sinks + window.
  int blocks_needed_now(const CachePolicy& policy, int64_t prompt_tokens) const;
  int blocks_needed_max(const CachePolicy& policy, int64_t prompt_tokens, int64_t max_new_tokens) const;
  int num_free_blocks() const { return allocator_.num_free(); }
  int num_blocks() const { return allocator_.num_blocks(); }
  /// Blocks the pool must hand the sequence for `n` more tokens (0 once a ring is full).
  int blocks_to_append(SeqId id, int64_t n) const;
  /// Blocks the sequence holds now and the most it will ever hold.
  int blocks_held(SeqId id) const;

  void add_sequence(SeqId id, const CachePolicy& policy);
  /// Makes room for `n` more tokens and advances the stream; returns the first new position.
  /// kOutOfRange past the context limit of a `full` sequence; kResourceExhausted when the pool
  /// is out of blocks (the sequence is left unchanged).
  int64_t append(SeqId id, int64_t n);
  /// Throws (as append would) unless appending inputs[i].second tokens to every listed sequence
  /// fits: the context limit of each and the free blocks of the pool together.
  void check_append(const std::vector<std::pair<SeqId, int64_t>>& appends) const;
  /// Offloading: frees the sequence's pool blocks but keeps its stream, so the runner can copy
  /// their contents elsewhere first and bring them back with reacquire_blocks. Returns the block
  /// table it had (logical order). The sequence takes no appends until reacquired.
  std::vector<int32_t> release_blocks(SeqId id);
  /// Gives a released sequence as many pool blocks as it had (its logical blocks, in order) and
  /// returns the new table; kResourceExhausted, with nothing changed, when the pool lacks them.
  const std::vector<int32_t>& reacquire_blocks(SeqId id);
  /// Frees every block of the sequence (finished or cancelled). Unknown ids are ignored.
  void remove_sequence(SeqId id);
  bool has_sequence(SeqId id) const { return seqs_.count(id) != 0; }
  const KvSequence& sequence(SeqId id) const;
  /// Tokens a `full` sequence may still append; streaming sequences are unbounded.
  int64_t remaining_capacity(SeqId id) const;
  KvStats stats() const;

 private:
  int blocks_for(const KvGeometry& g, int64_t tokens) const;

  BlockAllocator allocator_;
  int block_size_;
  int max_context_;
  int sliding_window_;
  int64_t evicted_tokens_ = 0;
  std::unordered_map<SeqId, KvSequence> seqs_;
};

}  // namespace rill
