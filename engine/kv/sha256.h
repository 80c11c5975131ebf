// SHA-256 (FIPS 180-4), incremental. The prefix cache names KV blocks by it (block_hash.h):
// a collision-resistant hash, so that no two different prefixes share a name, even when a client
// chooses its prompts to make them collide.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace rill {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  /// Appends `bytes` to the message.
  void update(std::span<const uint8_t> bytes);
  /// Pads the message and returns its digest; the object is spent (construct a new one).
  Sha256Digest finish();

 private:
  void compress(const uint8_t* block);  // one 64-byte block into state_

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;  // bytes in buffer_
  uint64_t length_ = 0;  // message bytes so far
};

/// SHA-256 of `bytes` in one call.
Sha256Digest sha256(std::span<const uint8_t> bytes);

}  // namespace rill
