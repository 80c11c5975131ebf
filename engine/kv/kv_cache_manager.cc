#include "engine/kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

#include "engine/error.h"

namespace rill {

std::string CachePolicy::to_string() const {
  if (kind == Kind::kFull) return "full";
  return "streaming(n_sink=" + std::to_string(n_sink) + ", window=" + std::to_string(window) + ")";
}

KvCacheManager::KvCacheManager(int num_blocks, int block_size, int max_context, int sliding_window)
    : allocator_(num_blocks), block_size_(block_size), max_context_(max_context),
      sliding_window_(sliding_window) {
  if (block_size <= 0 || num_blocks <= 0 || max_context <= 0)
    throw Error(ErrorCode::kInvalidArgument, "KV cache needs positive num_blocks, block_size and context");
}

static int round_up(int v, int m) { return (v + m - 1) / m * m; }

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
    throw Error(ErrorCode::kInvalidArgument, "streaming cache needs n_sink >= 0 and window > 0 (got n_sink=" +
                                                 std::to_string(p.n_sink) + ", window=" + std::to_string(p.window) + ")");
  if (static_cast<int64_t>(p.n_sink) + p.window > max_context_)
    throw Error(ErrorCode::kInvalidArgument, "streaming cache n_sink + window = " +
                                                 std::to_string(p.n_sink + p.window) + " exceeds the model context " +
                                                 std::to_string(max_context_));
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

void KvCacheManager::add_sequence(SeqId id, const CachePolicy& policy) {
  if (seqs_.count(id)) throw Error(ErrorCode::kInvalidArgument, "sequence " + std::to_string(id) + " already exists");
  KvSequence s;
  s.policy = policy;
  s.geometry = geometry_for(policy);
  s.max_blocks = policy.is_streaming() || s.geometry.ring_tokens
                     ? blocks_for(s.geometry, INT64_MAX / 2)
                     : (max_context_ + block_size_ - 1) / block_size_;
  seqs_.emplace(id, std::move(s));
}

int64_t KvCacheManager::append(SeqId id, int64_t n) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  KvSequence& s = it->second;
  if (s.released) throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is offloaded");
  const int64_t start = s.num_tokens, end = start + n;
  if (!s.policy.is_streaming() && end > max_context_)
    throw Error(ErrorCode::kOutOfRange, "sequence " + std::to_string(id) + " would reach " + std::to_string(end) +
                                            " tokens, past the context limit " + std::to_string(max_context_));
  const int need = blocks_for(s.geometry, end);
  // Block table index = slot / block_size: sink blocks first, then ring/linear blocks. Both grow
  // in order, and sinks fill before anything else, so appending keeps indices aligned.
  const int have = static_cast<int>(s.block_table.size());
  if (need - have > allocator_.num_free())
    throw Error(ErrorCode::kResourceExhausted, "KV cache out of blocks: sequence " + std::to_string(id) + " needs " +
                                                   std::to_string(need - have) + ", " +
                                                   std::to_string(allocator_.num_free()) + " free");
  for (int b = have; b < need; ++b) s.block_table.push_back(allocator_.allocate());
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
    if (s.released) throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is offloaded");
    const int64_t end = s.num_tokens + n;
    if (!s.policy.is_streaming() && end > max_context_)
      throw Error(ErrorCode::kOutOfRange, "sequence " + std::to_string(id) + " would reach " + std::to_string(end) +
                                              " tokens, past the context limit " + std::to_string(max_context_));
    blocks += blocks_for(s.geometry, end) - static_cast<int64_t>(s.block_table.size());
  }
  if (blocks > allocator_.num_free())
    throw Error(ErrorCode::kResourceExhausted, "KV cache out of blocks: the step needs " + std::to_string(blocks) +
                                                   ", " + std::to_string(allocator_.num_free()) + " free");
}

int KvCacheManager::blocks_to_append(SeqId id, int64_t n) const {
  const KvSequence& s = sequence(id);
  return blocks_for(s.geometry, s.num_tokens + n) - static_cast<int>(s.block_table.size());
}

int KvCacheManager::blocks_held(SeqId id) const { return static_cast<int>(sequence(id).block_table.size()); }

void KvCacheManager::remove_sequence(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  for (int32_t b : it->second.block_table) allocator_.free(b);
  seqs_.erase(it);
}

std::vector<int32_t> KvCacheManager::release_blocks(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  KvSequence& s = it->second;
  if (s.released) throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is already offloaded");
  std::vector<int32_t> table = std::move(s.block_table);
  s.block_table.clear();
  for (int32_t b : table) allocator_.free(b);
  s.released = true;
  s.released_blocks = static_cast<int>(table.size());
  return table;
}

const std::vector<int32_t>& KvCacheManager::reacquire_blocks(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  KvSequence& s = it->second;
  if (!s.released) throw Error(ErrorCode::kInternal, "sequence " + std::to_string(id) + " is not offloaded");
  const int n = s.released_blocks;
  if (n > allocator_.num_free())
    throw Error(ErrorCode::kResourceExhausted, "KV cache out of blocks: restoring sequence " + std::to_string(id) +
                                                   " needs " + std::to_string(n) + ", " +
                                                   std::to_string(allocator_.num_free()) + " free");
  for (int b = 0; b < n; ++b) s.block_table.push_back(allocator_.allocate());
  s.released = false;
  s.released_blocks = 0;
  return s.block_table;
}

const KvSequence& KvCacheManager::sequence(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) throw Error(ErrorCode::kNotFound, "unknown sequence " + std::to_string(id));
  return it->second;
}

int64_t KvCacheManager::remaining_capacity(SeqId id) const {
  const KvSequence& s = sequence(id);
  if (s.policy.is_streaming()) return INT64_MAX;
  return max_context_ - s.num_tokens;
}

KvStats KvCacheManager::stats() const {
  KvStats st;
  st.blocks_total = allocator_.num_blocks();
  st.blocks_free = allocator_.num_free();
  st.blocks_used = allocator_.num_used();
  st.evicted_tokens = evicted_tokens_;
  for (const auto& [id, s] : seqs_) (s.policy.is_streaming() ? st.sequences_streaming : st.sequences_full)++;
  return st;
}

}  // namespace rill
