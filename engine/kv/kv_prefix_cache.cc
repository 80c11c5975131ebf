// KvCacheManager's prefix cache: chain roots, lookups at admission, and the chain each sequence
// extends as its tokens are appended (publishing its blocks). See kv_cache_manager.h.
#include <algorithm>
#include <string>

#include "engine/error.h"
#include "engine/kv/kv_cache_manager.h"

namespace rill {

int KvCacheManager::shareable_blocks(const KvGeometry& g) const {
  // Up to the horizon, attention sees every earlier position (a window has not yet dropped any),
  // so the keys and values are those of a `full` cache at the same positions.
  const int64_t horizon = g.window ? int64_t{g.n_sink} + g.window : max_context_;
  return g.ring_base / block_size_ + static_cast<int>((horizon - g.n_sink) / block_size_);
}

BlockHash KvCacheManager::prefix_root(const CachePolicy& policy, std::string_view salt) const {
  const KvGeometry g = geometry_for(policy);
  const int64_t layout = g.n_sink % block_size_ ? g.n_sink : 0;
  return prefix_chain_root(identity_ + ";block_size=" + std::to_string(block_size_), layout, salt);
}

PrefixMatch KvCacheManager::match_prefix(const CachePolicy& policy, const BlockHash& root,
                                         std::span<const int32_t> tokens,
                                         std::vector<BlockHash>* memo) const {
  const KvGeometry g = geometry_for(policy);
  PrefixMatch m;
  m.root = root;
  // At least the last token is computed: its logits give the first sample.
  const int64_t limit = static_cast<int64_t>(tokens.size()) - 1;
  const int blocks = shareable_blocks(g);
  BlockHash parent = root;
  for (int k = 0; k < blocks; ++k) {
    const auto [first, end] = block_positions(g, k);
    if (end > limit) break;
    BlockHash h;
    if (memo && k < static_cast<int>(memo->size())) {
      h = (*memo)[k];
    } else {
      h = chain_block_hash(parent, tokens.subspan(first, end - first));
      if (memo && k == static_cast<int>(memo->size())) memo->push_back(h);
    }
    const int32_t b = pool_.find(h);
    if (b < 0) break;
    // Every ring block taken here lies below the horizon, so the new sequence will overwrite it.
    const bool ring = overwrite_position(g, k) != INT64_MAX && policy.is_streaming();
    m.pool_blocks += (pool_.holders(b) == 0 ? 1 : 0) + pool_.reserve_growth(b, ring);
    m.blocks.push_back(b);
    m.hashes.push_back(h);
    m.tokens = end;
    parent = h;
  }
  return m;
}

void KvCacheManager::resolve_sampled(SeqId id, int32_t token) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;  // removed while its step was in flight
  KvSequence& s = it->second;
  PrefixChain& c = s.prefix;
  if (!c.active) return;
  if (!c.tail.empty() && c.tail.back() < 0) {
    c.tail.back() = token;
    advance_chain(s);
  } else {
    c.sampled = token;
  }
}

// Hashes every block whose tokens are all appended and known, publishing those still in place;
// a block an index already has under its hash (the same contents computed twice) stays private.
void KvCacheManager::advance_chain(KvSequence& s) {
  PrefixChain& c = s.prefix;
  if (s.released) return;
  const int limit = shareable_blocks(s.geometry);
  size_t used = 0;
  while (c.blocks < limit) {
    const auto [first, end] = block_positions(s.geometry, c.blocks);
    const size_t len = static_cast<size_t>(end - first);
    if (c.tail.size() - used < len) break;
    const std::span<const int32_t> tokens(c.tail.data() + used, len);
    if (std::any_of(tokens.begin(), tokens.end(), [](int32_t t) { return t < 0; }))
      break;  // sample pending
    c.last = chain_block_hash(c.last, tokens);
    if (s.num_tokens <= overwrite_position(s.geometry, c.blocks))
      pool_.publish(s.block_table[c.blocks], c.last);
    ++c.blocks;
    used += len;
  }
  c.tail.erase(c.tail.begin(), c.tail.begin() + static_cast<std::ptrdiff_t>(used));
  if (c.blocks >= limit) stop_chain(s);
}

void KvCacheManager::discard_published(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  KvSequence& s = it->second;
  stop_chain(s);
  for (const int32_t b : s.block_table)
    if (pool_.holders(b) == 1) pool_.unpublish(b);
}

void KvCacheManager::stop_chain(KvSequence& s) {
  PrefixChain& c = s.prefix;
  c.active = false;
  c.tail.clear();
  c.tail.shrink_to_fit();
  c.sampled.reset();
}

}  // namespace rill
