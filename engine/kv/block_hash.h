// Names of KV blocks for the prefix cache: a block's hash is chained over its parent block's hash
// and its own token ids, and the chain starts from a root that holds everything else that decides
// the block's contents (the runner's model, weight and KV dtypes, quantization and block size, the
// layout of positions within blocks, and the request's cache_salt). Two blocks with the same hash
// hold the same keys and values, so one can stand in for the other.
//
// Why SHA-256. Its 256-bit digests make an accidental collision negligible: among 2^40 blocks
// (a pool turned over a million times) the chance of any collision is about 2^80 / 2^257 = 2^-177.
// And it is collision-resistant: no way is known to construct two inputs with one digest, so a
// client cannot craft a prompt whose blocks take the name of another tenant's (which would serve
// it their keys and values, or serve them garbage). A fast non-cryptographic hash (xxHash,
// MurmurHash) rules out the first but not the second. Inputs are length-prefixed and typed, so no
// two different (parent, tokens) or (identity, layout, salt) encode to the same bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "engine/kv/sha256.h"

namespace rill {

using BlockHash = Sha256Digest;

/// For unordered containers: the digest's first 8 bytes (already uniformly distributed).
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    std::memcpy(&v, h.data(), sizeof(v));
    return v;
  }
};

/// Root of a sequence's chain. `identity`: the runner's model and storage (see above); `layout`:
/// 0 where block k holds positions [k * block_size, (k + 1) * block_size) (full caches, and
/// streaming ones whose n_sink is a multiple of the block size), else the streaming n_sink (its
/// last sink block is partly empty and the window starts on a block boundary).
BlockHash prefix_chain_root(std::string_view identity, int64_t layout, std::string_view salt);

/// Hash of a block holding `tokens`, whose parent (the block before it in the sequence) has
/// `parent` (the root for the first block).
BlockHash chain_block_hash(const BlockHash& parent, std::span<const int32_t> tokens);

}  // namespace rill
