#include "engine/kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace rill {

std::string CachePolicy::to_string() const {
  if (kind == Kind::kFull) return "full";
  return "streaming(n_sink=" + std::to_string(n_sink) + ", window=" + std::to_string(window) + ")";
}

KvCacheManager::KvCacheManager(int num_blocks, int block_size, int max_context, int sliding_window,
                               std::string identity)
    : pool_(num_blocks),
      block_size_(block_size),
      max_context_(max_context),
      sliding_window_(sliding_window),
      identity_(std::move(identity)) {
  if (block_size <= 0 || num_blocks <= 0 || max_context <= 0)
    throw Error(ErrorCode::kInvalidArgument,
                "KV cache needs positive num_blocks, block_size and context");
}

static int round_up(int v, int m) {
  return (v + m - 1) / m * m;
}

KvGeometry KvCacheManager::geometry_for(const CachePolicy& p) const {
  KvGeometry g;
  if (!p.is_streaming()) {
    // A sliding-window model (Mistral) never looks further back than its window, so its
    // `full` cache is a ring of that window: constant memory, identical attention.
    if (sliding_window_ > 0) {
      g.window = sliding_window_;
      g.ring_tokens = round_up(sliding_window_, block_size_);
    }
    return g;
  }
  if (p.n_sink < 0 || p.window <= 0)
    throw Error(ErrorCode::kInvalidArgument,
                "streaming cache needs n_sink >= 0 and window > 0 (got n_sink=" +
                    std::to_string(p.n_sink) + ", window=" + std::to_string(p.window) + ")");
  if (static_cast<int64_t>(p.n_sink) + p.window > max_context_)
    throw Error(ErrorCode::kInvalidArgument,
                "streaming cache n_sink + window = " + std::to_string(p.n_sink + p.window) +
                    " exceeds the model context " + std::to_string(max_context_));
  g.n_sink = p.n_sink;
  g.ring_base = round_up(p.n_sink, block_size_);
  g.ring_tokens = round_up(p.window, block_size_);
  g.window = p.window;
  return g;
}

int KvCacheManager::blocks_for(const KvGeometry& g, int64_t tokens) const {
  const int64_t sinks = std::min<int64_t>(tokens, g.n_sink);
  int64_t rest = tokens - sinks;
  if (g.ring_tokens) rest = std::min<int64_t>(rest, g.ring_tokens);
  const int64_t sink_blocks = (sinks + block_size_ - 1) / block_size_;
  const int64_t rest_blocks = (rest + block_size_ - 1) / block_size_;
  return static_cast<int>(sink_blocks + rest_blocks);
}

int KvCacheManager::blocks_needed_now(const CachePolicy& policy, int64_t prompt_tokens) const {
  return blocks_for(geometry_for(policy), prompt_tokens);
}

int KvCacheManager::blocks_needed_max(const CachePolicy& policy, int64_t prompt_tokens,
                                      int64_t max_new_tokens) const {
  const KvGeometry g = geometry_for(policy);
  int64_t total = prompt_tokens + max_new_tokens;
  if (!policy.is_streaming()) total = std::min<int64_t>(total, max_context_);
  return blocks_for(g, total);
}

KvSequence& KvCacheManager::find(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  return it->second;
}

const KvSequence& KvCacheManager::sequence(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  return it->second;
}

std::pair<int64_t, int64_t> KvCacheManager::block_positions(const KvGeometry& g, int k) const {
  const int sink_blocks = g.ring_base / block_size_;
  const int64_t bs = block_size_;
  if (k < sink_blocks) return {k * bs, std::min<int64_t>((k + 1) * bs, g.n_sink)};
  const int64_t first = g.n_sink + (k - sink_blocks) * bs;
  return {first, first + bs};
}

int64_t KvCacheManager::overwrite_position(const KvGeometry& g, int k) const {
  const int sink_blocks = g.ring_base / block_size_;
  if (!g.ring_tokens || k < sink_blocks) return INT64_MAX;
  return g.n_sink + g.ring_tokens + static_cast<int64_t>(k - sink_blocks) * block_size_;
}

bool KvCacheManager::overwriter(const KvSequence& s, int k) const {
  const int64_t at = overwrite_position(s.geometry, k);
  return s.policy.is_streaming() && at != INT64_MAX && s.num_tokens <= at;
}

std::pair<int, int> KvCacheManager::first_overwrites(const KvSequence& s, int64_t end) const {
  const KvGeometry& g = s.geometry;
  if (!g.ring_tokens) return {0, 0};
  const int sink_blocks = g.ring_base / block_size_;
  const int64_t ring_blocks = g.ring_tokens / block_size_;
  const int64_t base =
      g.n_sink + g.ring_tokens;  // overwrites ring block j at base + j * block_size
  auto first_at_or_after = [&](int64_t pos) {
    return std::min(ring_blocks, pos <= base ? 0 : (pos - base + block_size_ - 1) / block_size_);
  };
  return {sink_blocks + static_cast<int>(first_at_or_after(s.num_tokens)),
          sink_blocks + static_cast<int>(first_at_or_after(end))};
}

void KvCacheManager::add_sequence(SeqId id, const CachePolicy& policy, const PrefixMatch* prefix) {
  if (seqs_.count(id))
    throw Error(ErrorCode::kInvalidArgument, "sequence " + std::to_string(id) + " already exists");
  KvSequence s;
  s.policy = policy;
  s.geometry = geometry_for(policy);
  s.max_blocks = policy.is_streaming() || s.geometry.ring_tokens
                     ? blocks_for(s.geometry, INT64_MAX / 2)
                     : (max_context_ + block_size_ - 1) / block_size_;
  if (prefix) {
    const size_t n = prefix->blocks.size();
    if (prefix->hashes.size() != n ||
        (n > 0 && block_positions(s.geometry, static_cast<int>(n) - 1).second != prefix->tokens))
      throw Error(ErrorCode::kInternal,
                  "prefix match for sequence " + std::to_string(id) + " is malformed");
    for (size_t k = 0; k < n; ++k) {
      const int32_t b = prefix->blocks[k];
      if (b < 0 || b >= pool_.num_blocks() || !pool_.indexed(b) ||
          pool_.hash(b) != prefix->hashes[k])
        throw Error(ErrorCode::kInternal,
                    "prefix match for sequence " + std::to_string(id) + " is stale");
    }
    s.num_tokens = prefix->tokens;
    s.cached_tokens = prefix->tokens;
    for (size_t k = 0; k < n; ++k) {
      pool_.acquire(prefix->blocks[k], overwriter(s, static_cast<int>(k)));
      s.block_table.push_back(prefix->blocks[k]);
    }
    s.prefix.active = static_cast<int>(n) < shareable_blocks(s.geometry);
    s.prefix.root = prefix->root;
    s.prefix.last = n ? prefix->hashes.back() : prefix->root;
    s.prefix.blocks = static_cast<int>(n);
  }
  seqs_.emplace(id, std::move(s));
}

int KvCacheManager::copies_needed(const KvSequence& s, int64_t end) const {
  auto [first, last] = first_overwrites(s, end);
  last = std::min(last, static_cast<int>(s.block_table.size()));
  int copies = 0;
  for (int k = first; k < last; ++k) copies += pool_.holders(s.block_table[k]) > 1;
  return copies;
}

// Before a ring's first write into each of its blocks that a write up to `end` reaches: a block
// another sequence still holds is copied to a new one (the write goes there), one it holds alone
// leaves the index. Either way nobody else reads what the ring writes. Called before the append
// allocates: blocks it allocates are private already.
void KvCacheManager::overwrite_blocks(KvSequence& s, int64_t end) {
  auto [first, last] = first_overwrites(s, end);
  last = std::min(last, static_cast<int>(s.block_table.size()));
  const bool streaming = s.policy.is_streaming();
  for (int k = first; k < last; ++k) {
    const int32_t b = s.block_table[k];
    if (pool_.holders(b) > 1) {
      const int32_t copy = pool_.allocate(false);
      if (copy < 0)
        throw Error(ErrorCode::kInternal, "KV pool: no block for a copy that was checked");
      copies_.push_back({b, copy});
      ++block_copies_;
      pool_.release(b, streaming);
      s.block_table[k] = copy;
    } else {
      pool_.unpublish(b);
      if (streaming) pool_.drop_overwriter(b);
    }
  }
}

int64_t KvCacheManager::append(SeqId id, int64_t n) {
  KvSequence& s = find(id);
  stop_chain(s);  // no token ids: nothing more to publish
  return grow(id, s, n);
}

int64_t KvCacheManager::append(SeqId id, std::span<const int32_t> tokens) {
  KvSequence& s = find(id);
  const int64_t start = grow(id, s, static_cast<int64_t>(tokens.size()));
  PrefixChain& c = s.prefix;
  if (c.active) {
    if (!c.tail.empty() && c.tail.back() < 0) {
      stop_chain(s);  // an earlier sample never reported: its block cannot be named
    } else {
      if (tokens.size() == 1 && tokens[0] < 0 && c.sampled) {
        c.tail.push_back(*c.sampled);  // the sample reached the host before this step
      } else {
        c.tail.insert(c.tail.end(), tokens.begin(), tokens.end());
      }
      c.sampled.reset();
      advance_chain(s);
    }
  }
  return start;
}

// Allocates the blocks `n` more tokens need (and copies for shared blocks the ring overwrites),
// then advances the stream. Checks everything first: a refused append changes nothing.
int64_t KvCacheManager::grow(SeqId id, KvSequence& s, int64_t n) {
  if (s.released)
    throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is offloaded");
  const int64_t start = s.num_tokens, end = start + n;
  if (!s.policy.is_streaming() && end > max_context_)
    throw Error(ErrorCode::kOutOfRange,
                "sequence " + std::to_string(id) + " would reach " + std::to_string(end) +
                    " tokens, past the context limit " + std::to_string(max_context_));
  // Block table index = slot / block_size: sink blocks first, then ring/linear blocks. Both grow
  // in order, and sinks fill before anything else, so appending keeps indices aligned.
  const int need = blocks_for(s.geometry, end);
  const int have = static_cast<int>(s.block_table.size());
  const int take = need - have + copies_needed(s, end);
  if (take > pool_.num_available())
    throw Error(ErrorCode::kResourceExhausted,
                "KV cache out of blocks: sequence " + std::to_string(id) + " needs " +
                    std::to_string(take) + ", " + std::to_string(pool_.num_available()) + " free");
  overwrite_blocks(s, end);  // the blocks held before this append
  for (int k = have; k < need; ++k) s.block_table.push_back(pool_.allocate(overwriter(s, k)));
  if (s.policy.is_streaming())  // blocks allocated and overwritten within this append
    for (int k = have; k < need; ++k)
      if (overwriter(s, k) && overwrite_position(s.geometry, k) < end)
        pool_.drop_overwriter(s.block_table[k]);
  if (s.geometry.ring_tokens) {
    const int64_t cap = s.geometry.n_sink + s.geometry.ring_tokens;
    evicted_tokens_ += std::max<int64_t>(0, end - cap) - std::max<int64_t>(0, start - cap);
  }
  s.num_tokens = end;
  return start;
}

void KvCacheManager::check_append(const std::vector<std::pair<SeqId, int64_t>>& appends) const {
  int64_t blocks = 0;
  for (const auto& [id, n] : appends) {
    const KvSequence& s = sequence(id);
    if (s.released)
      throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is offloaded");
    const int64_t end = s.num_tokens + n;
    if (!s.policy.is_streaming() && end > max_context_)
      throw Error(ErrorCode::kOutOfRange,
                  "sequence " + std::to_string(id) + " would reach " + std::to_string(end) +
                      " tokens, past the context limit " + std::to_string(max_context_));
    blocks += blocks_for(s.geometry, end) - static_cast<int64_t>(s.block_table.size()) +
              copies_needed(s, end);
  }
  if (blocks > pool_.num_available())
    throw Error(ErrorCode::kResourceExhausted, "KV cache out of blocks: the step needs " +
                                                   std::to_string(blocks) + ", " +
                                                   std::to_string(pool_.num_available()) + " free");
}

int KvCacheManager::blocks_to_append(SeqId id, int64_t n) const {
  const KvSequence& s = sequence(id);
  const int64_t end = s.num_tokens + n;
  return blocks_for(s.geometry, end) - static_cast<int>(s.block_table.size()) +
         copies_needed(s, end);
}

int KvCacheManager::blocks_held(SeqId id) const {
  return static_cast<int>(sequence(id).block_table.size());
}

void KvCacheManager::remove_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const KvSequence& s = it->second;
  // Last block first: the least recently released cached blocks are evicted first, so a
  // prefix's tail goes before its head (which more requests share).
  for (int k = static_cast<int>(s.block_table.size()) - 1; k >= 0; --k)
    pool_.release(s.block_table[k], overwriter(s, k));
  seqs_.erase(it);
}

std::vector<int32_t> KvCacheManager::release_blocks(SeqId id) {
  KvSequence& s = find(id);
  if (s.released)
    throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is already offloaded");
  // Its blocks may come back as copies still in flight (CUDA copies beside the steps): none of
  // them is published from here on.
  stop_chain(s);
  std::vector<int32_t> table = std::move(s.block_table);
  s.block_table.clear();
  s.released_hashes.assign(table.size(), std::nullopt);
  for (int k = static_cast<int>(table.size()) - 1; k >= 0; --k) {
    if (pool_.indexed(table[k])) s.released_hashes[k] = pool_.hash(table[k]);
    pool_.release(table[k], overwriter(s, k));
  }
  s.released = true;
  s.released_blocks = static_cast<int>(table.size());
  return table;
}

const std::vector<int32_t>& KvCacheManager::reacquire_blocks(SeqId id,
                                                             std::vector<bool>* from_cache) {
  KvSequence& s = find(id);
  if (!s.released)
    throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is not offloaded");
  const int n = s.released_blocks;
  // Blocks the cache still holds are taken back first (a new allocation could evict them).
  std::vector<int32_t> table(static_cast<size_t>(n), -1);
  int cached = 0, fresh = 0;
  for (int k = 0; k < n; ++k) {
    if (s.released_hashes[k]) table[k] = pool_.find(*s.released_hashes[k]);
    if (table[k] < 0)
      ++fresh;
    else if (pool_.holders(table[k]) == 0)
      ++cached;
  }
  if (fresh > pool_.num_available() - cached)
    throw Error(ErrorCode::kResourceExhausted, "KV cache out of blocks: restoring sequence " +
                                                   std::to_string(id) + " needs " +
                                                   std::to_string(fresh + cached) + ", " +
                                                   std::to_string(pool_.num_available()) + " free");
  for (int k = 0; k < n; ++k)
    if (table[k] >= 0) pool_.acquire(table[k], overwriter(s, k));
  if (from_cache) from_cache->assign(static_cast<size_t>(n), false);
  for (int k = 0; k < n; ++k) {
    if (table[k] >= 0) {
      if (from_cache) (*from_cache)[k] = true;
      continue;
    }
    table[k] = pool_.allocate(overwriter(s, k));
  }
  s.block_table = std::move(table);
  s.released = false;
  s.released_blocks = 0;
  s.released_hashes.clear();
  return s.block_table;
}

int64_t KvCacheManager::remaining_capacity(SeqId id) const {
  const KvSequence& s = sequence(id);
  if (s.policy.is_streaming()) return INT64_MAX;
  return max_context_ - s.num_tokens;
}

KvStats KvCacheManager::stats() const {
  KvStats st;
  st.blocks_total = pool_.num_blocks();
  st.blocks_free = pool_.num_free();
  st.blocks_cached = pool_.num_cached();
  st.blocks_used = pool_.num_used();
  st.evicted_tokens = evicted_tokens_;
  st.cache_evictions = pool_.evictions();
  st.block_copies = block_copies_;
  for (const auto& [id, s] : seqs_)
    (s.policy.is_streaming() ? st.sequences_streaming : st.sequences_full)++;
  return st;
}

void KvCacheManager::check_invariants() const {
  pool_.check();
  std::vector<int> holders(static_cast<size_t>(pool_.num_blocks()), 0);
  std::vector<int> overwriters(holders.size(), 0);
  for (const auto& [id, s] : seqs_)
    for (size_t k = 0; k < s.block_table.size(); ++k) {
      const int32_t b = s.block_table[k];
      if (b < 0 || b >= pool_.num_blocks())
        throw Error(ErrorCode::kInternal,
                    "sequence " + std::to_string(id) + " names block " + std::to_string(b));
      ++holders[b];
      overwriters[b] += overwriter(s, static_cast<int>(k));
    }
  for (int32_t b = 0; b < pool_.num_blocks(); ++b)
    if (holders[b] != pool_.holders(b) || overwriters[b] != pool_.overwriters(b))
      throw Error(ErrorCode::kInternal,
                  "block " + std::to_string(b) + " has " + std::to_string(pool_.holders(b)) +
                      " holders (" + std::to_string(pool_.overwriters(b)) +
                      " overwriters) but block tables name it " + std::to_string(holders[b]) +
                      " times (" + std::to_string(overwriters[b]) + ")");
}

}  // namespace rill
