#include "engine/kv/block_hash.h"

#include <vector>

namespace rill {

namespace {

// Type tags: a root and a block never encode alike.
constexpr uint8_t kRootTag = 0x52;   // 'R'
constexpr uint8_t kBlockTag = 0x42;  // 'B'

void put_u64(Sha256& h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.update(b);
}

void put_bytes(Sha256& h, std::string_view s) {
  put_u64(h, s.size());
  h.update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

}  // namespace

BlockHash prefix_chain_root(std::string_view identity, int64_t layout, std::string_view salt) {
  Sha256 h;
  const uint8_t tag[] = {kRootTag};
  h.update(tag);
  put_bytes(h, "rill.prefix-cache.v1");
  put_bytes(h, identity);
  put_u64(h, static_cast<uint64_t>(layout));
  put_bytes(h, salt);
  return h.finish();
}

BlockHash chain_block_hash(const BlockHash& parent, std::span<const int32_t> tokens) {
  // tag, parent digest, token count, tokens as little-endian int32: at most 45 + 4 * block_size
  // bytes, encoded into one buffer so that the hash sees a single update.
  uint8_t stack[1 + 32 + 8 + 4 * 64];
  std::vector<uint8_t> heap;
  const size_t bytes = 1 + 32 + 8 + 4 * tokens.size();
  uint8_t* p = stack;
  if (bytes > sizeof(stack)) {
    heap.resize(bytes);
    p = heap.data();
  }
  p[0] = kBlockTag;
  std::memcpy(p + 1, parent.data(), 32);
  for (int i = 0; i < 8; ++i) p[33 + i] = static_cast<uint8_t>(uint64_t{tokens.size()} >> (8 * i));
  uint8_t* t = p + 41;
  for (const int32_t token : tokens) {
    const uint32_t u = static_cast<uint32_t>(token);
    t[0] = static_cast<uint8_t>(u), t[1] = static_cast<uint8_t>(u >> 8);
    t[2] = static_cast<uint8_t>(u >> 16), t[3] = static_cast<uint8_t>(u >> 24);
    t += 4;
  }
  return sha256(std::span<const uint8_t>(p, bytes));
}

}  // namespace rill
