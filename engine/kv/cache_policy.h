// How a sequence's KV cache grows: `full` keeps every token up to the context limit;
// `streaming` keeps n_sink attention sinks plus a rolling window (Xiao et al., ICLR 2024).
#pragma once

#include <string>

namespace rill {

struct CachePolicy {
  enum class Kind { kFull, kStreaming };
  Kind kind = Kind::kFull;
  int n_sink = 0;  // streaming: first tokens pinned in the cache
  int window = 0;  // streaming: most recent tokens kept, the current one included

  static CachePolicy full() { return {}; }
  static CachePolicy streaming(int n_sink, int window) { return {Kind::kStreaming, n_sink, window}; }
  bool is_streaming() const { return kind == Kind::kStreaming; }
  std::string to_string() const;
};

/// Where a sequence's tokens live and what each query attends to; derived once from the policy.
/// Stream positions [0, n_sink) are sinks at slots [0, n_sink); later positions go to the region
/// starting at `ring_base` (a whole number of blocks), as a ring of `ring_tokens` slots or, when
/// ring_tokens == 0, linearly. Query i attends to sinks [0, min(n_sink, i + 1)) and to positions
/// [max(n_sink, i - window + 1), i] (window == 0: no lower bound).
struct KvGeometry {
  int n_sink = 0;
  int ring_base = 0;
  int ring_tokens = 0;
  int window = 0;

  /// Cache slot of stream position `pos`.
  long long slot(long long pos) const {
    if (pos < n_sink) return pos;
    const long long rel = pos - n_sink;
    return ring_base + (ring_tokens ? rel % ring_tokens : rel);
  }
  /// RoPE position of a query at stream position `pos` when it looks at the sinks: positions
  /// are assigned within the cache (sinks 0..n_sink-1, then the window), so the newest token
  /// sits at n_sink + window - 1 once the cache is full.
  long long sink_query_pos(long long pos) const {
    const long long cap = static_cast<long long>(n_sink) + window - 1;
    return (n_sink > 0 && window > 0 && pos > cap) ? cap : pos;
  }
};

}  // namespace rill
