// Block tables of every sequence over one paged KV pool, and the prefix cache over its blocks.
// It owns metadata only; the runner owns the storage
// ([num_layers][num_blocks][2][num_kv_heads][block_size][head_dim]), reads the geometry and block
// table of each sequence from here, and performs the block copies it asks for (take_copies).
//
// Prefix caching (docs/scheduler.md, docs/streaming.md). A sequence added with a PrefixMatch
// starts from cached blocks (shared, reference-counted) and publishes each of its own blocks once
// the block is complete and its tokens are known, under a hash chained over the tokens before it
// (block_hash.h). A block is shareable while its keys and values are what plain causal attention
// gives at those positions: below n_sink + window for a streaming cache (window for a
// sliding-window model), and while the ring has not overwritten it. A ring never writes into a
// block another sequence holds: it copies the block first (copy-on-write), or takes it out of the
// index when it is the only holder.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv/block_allocator.h"
#include "engine/kv/block_hash.h"
#include "engine/kv/block_pool.h"
#include "engine/kv/cache_policy.h"

namespace rill {

using SeqId = int64_t;

/// The cached blocks a new sequence can start from (KvCacheManager::match_prefix).
struct PrefixMatch {
  BlockHash root{};               // the sequence's chain root (KvCacheManager::prefix_root)
  std::vector<int32_t> blocks;    // pool blocks holding its leading blocks, in order
  std::vector<BlockHash> hashes;  // their hashes, parallel to `blocks`
  int64_t tokens = 0;             // stream positions they hold: the sequence starts there
  int pool_blocks = 0;            // what taking them costs the pool beyond `blocks`: cached ones
                                  // leave the evictable set, and copies rings may owe join the
                                  // copy-on-write reserve
};

/// A block's contents copied to another before a step writes (KvCacheManager::take_copies).
struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
};

/// A sequence's progress along its hash chain (publishing its blocks).
struct PrefixChain {
  bool active = false;             // hashing and publishing its complete blocks
  BlockHash root{}, last{};        // last: the hash of block `blocks - 1` (root when none)
  int blocks = 0;                  // leading blocks hashed
  std::vector<int32_t> tail;       // tokens appended after them (the last may be kLastSampled)
  std::optional<int32_t> sampled;  // a sample reported before the input that feeds it
};

struct KvSequence {
  CachePolicy policy;
  KvGeometry geometry;
  std::vector<int32_t> block_table;  // logical block (slot / block_size) -> pool block
  int64_t num_tokens = 0;            // stream length: tokens appended so far
  int max_blocks = 0;                // blocks this sequence can ever hold
  bool released = false;             // its blocks were released (offloaded): nothing appends
  int released_blocks = 0;           // while released: the blocks it had
  std::vector<std::optional<BlockHash>> released_hashes;  // while released: indexed blocks' hashes
  int64_t cached_tokens = 0;  // positions it took from the prefix cache when added
  PrefixChain prefix;
};

struct KvStats {
  int blocks_total = 0;
  int blocks_used = 0;          // held by sequences
  int blocks_free = 0;          // neither held nor cached
  int blocks_cached = 0;        // prefix cache: held by none, kept for reuse (evictable)
  int64_t evicted_tokens = 0;   // tokens dropped from streaming windows, over all sequences
  int64_t cache_evictions = 0;  // cached blocks reused for other contents
  int64_t block_copies = 0;     // copy-on-write: shared blocks a ring copied before overwriting
  int sequences_full = 0;
  int sequences_streaming = 0;
};

class KvCacheManager {
 public:
  /// `max_context`: the model's position limit, which bounds `full` sequences. `identity`: what
  /// besides the tokens decides a block's contents in this pool (model, weight and KV dtypes,
  /// quantization); it seeds every prefix chain.
  KvCacheManager(int num_blocks, int block_size, int max_context, int sliding_window = 0,
                 std::string identity = {});

  int block_size() const { return block_size_; }
  int max_context() const { return max_context_; }

  /// Geometry a policy gives (validates it: kInvalidArgument on a bad n_sink / window).
  KvGeometry geometry_for(const CachePolicy& policy) const;
  /// Blocks needed to hold `prompt_tokens` now, and the most the sequence can ever need when it
  /// generates up to `max_new_tokens` more. Streaming sequences never exceed sinks + window.
  int blocks_needed_now(const CachePolicy& policy, int64_t prompt_tokens) const;
  int blocks_needed_max(const CachePolicy& policy, int64_t prompt_tokens,
                        int64_t max_new_tokens) const;
  /// Blocks an allocation can take now: free ones and cached ones (evicted as needed).
  int num_free_blocks() const { return pool_.num_available(); }
  int num_blocks() const { return pool_.num_blocks(); }
  /// Blocks rings still owe copies of shared blocks they will overwrite (block_pool.h).
  int cow_reserve() const { return pool_.cow_reserve(); }
  /// Blocks the pool must hand the sequence for `n` more tokens: new ones (0 once a ring is
  /// full) and copies of shared blocks its ring overwrites.
  int blocks_to_append(SeqId id, int64_t n) const;
  /// Blocks the sequence holds now and the most it will ever hold.
  int blocks_held(SeqId id) const;

  // Prefix caching (kv_prefix_cache.cc).

  /// Root of the hash chain of a sequence with `policy` and the request's `salt`.
  BlockHash prefix_root(const CachePolicy& policy, std::string_view salt) const;
  /// The longest run of leading blocks of `tokens` that the cache holds, leaving at least one
  /// token to compute. `memo` (optional, kept by the caller for the same root and tokens)
  /// carries block hashes from one call to the next, so a request retried at admission is hashed
  /// once.
  PrefixMatch match_prefix(const CachePolicy& policy, const BlockHash& root,
                           std::span<const int32_t> tokens,
                           std::vector<BlockHash>* memo = nullptr) const;
  /// Tells the chain of sequence `id` the token its last step sampled: it stands for the
  /// kLastSampled input of a step launched before the sample reached the host (or of the next).
  void resolve_sampled(SeqId id, int32_t token);
  /// A step that appended to the sequence could not be launched: its blocks may never be
  /// written, so those it alone holds leave the index and it publishes nothing more.
  void discard_published(SeqId id);
  /// Copies the appends since the last call asked for; the runner performs them before the step
  /// that follows writes any block.
  std::vector<BlockCopy> take_copies() { return std::exchange(copies_, {}); }

  /// Registers a sequence. With `prefix` (from match_prefix in this state of the pool), it takes
  /// part in prefix caching: it starts from prefix->blocks (num_tokens = prefix->tokens) and
  /// publishes its own blocks. Without, it neither reads nor publishes.
  void add_sequence(SeqId id, const CachePolicy& policy, const PrefixMatch* prefix = nullptr);
  /// Makes room for tokens.size() more tokens and advances the stream; returns the first new
  /// position. The tokens (kLastSampled where a step feeds the previous sample; see
  /// resolve_sampled) name the blocks the sequence publishes. kOutOfRange past the context limit
  /// of a `full` sequence; kResourceExhausted when the pool is out of blocks (the sequence is
  /// left unchanged).
  int64_t append(SeqId id, std::span<const int32_t> tokens);
  /// As above without token ids: the sequence publishes nothing from here on.
  int64_t append(SeqId id, int64_t n);
  /// Throws (as append would) unless appending inputs[i].second tokens to every listed sequence
  /// fits: the context limit of each and the free blocks of the pool together.
  void check_append(const std::vector<std::pair<SeqId, int64_t>>& appends) const;
  /// Offloading: lets go of the sequence's pool blocks but keeps its stream, so the runner can
  /// copy their contents elsewhere first and bring them back with reacquire_blocks. Returns the
  /// block table it had (logical order). The sequence takes no appends until reacquired.
  std::vector<int32_t> release_blocks(SeqId id);
  /// Gives a released sequence its logical blocks back, in order, and returns the new table:
  /// blocks the prefix cache still holds are taken from it (`from_cache[b]` true: nothing to
  /// copy), the rest are new. kResourceExhausted, with nothing changed, when the pool lacks them.
  const std::vector<int32_t>& reacquire_blocks(SeqId id, std::vector<bool>* from_cache = nullptr);
  /// Lets go of every block of the sequence (finished or cancelled): cached ones stay for later
  /// requests. Unknown ids are ignored.
  void remove_sequence(SeqId id);
  bool has_sequence(SeqId id) const { return seqs_.count(id) != 0; }
  const KvSequence& sequence(SeqId id) const;
  /// Tokens a `full` sequence may still append; streaming sequences are unbounded.
  int64_t remaining_capacity(SeqId id) const;
  KvStats stats() const;
  /// Throws kInternal unless the pool is consistent and every block's holders are exactly the
  /// sequences whose tables name it (tests).
  void check_invariants() const;

 private:
  KvSequence& find(SeqId id);
  int blocks_for(const KvGeometry& g, int64_t tokens) const;
  // Logical block k: the stream positions [first, end) it holds before a ring overwrites it.
  std::pair<int64_t, int64_t> block_positions(const KvGeometry& g, int k) const;
  // The position whose write first overwrites logical block k (INT64_MAX: never).
  int64_t overwrite_position(const KvGeometry& g, int k) const;
  // Leading logical blocks whose contents may be shared (plain causal attention, in place).
  int shareable_blocks(const KvGeometry& g) const;
  // True while the sequence holds block k as a streaming ring that will still overwrite it.
  bool overwriter(const KvSequence& s, int k) const;
  // Logical blocks [first, end) that positions [s.num_tokens, end) overwrite for the first time.
  std::pair<int, int> first_overwrites(const KvSequence& s, int64_t end) const;
  // Copies of shared blocks that appending up to `end` makes the ring of `s` overwrite.
  int copies_needed(const KvSequence& s, int64_t end) const;
  void overwrite_blocks(KvSequence& s, int64_t end);  // copy-on-write / unpublish before writes
  int64_t grow(SeqId id, KvSequence& s, int64_t n);   // allocation and stream advance of append
  void advance_chain(KvSequence& s);                  // hashes and publishes complete blocks
  void stop_chain(KvSequence& s);

  BlockPool pool_;
  int block_size_;
  int max_context_;
  int sliding_window_;
  std::string identity_;
  int64_t evicted_tokens_ = 0;
  std::unordered_map<SeqId, KvSequence> seqs_;
  std::vector<BlockCopy> copies_;
  int64_t block_copies_ = 0;
};

}  // namespace rill
