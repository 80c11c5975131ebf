// Fixed-size KV blocks handed out from a free stack: O(1) allocate and free; any free block
// serves any request, so the pool never fragments.
#pragma once

#include <cstdint>
#include <vector>

namespace rill {

class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);
  /// A free block id, or -1 when none is left.
  int32_t allocate();
  /// Returns `block` to the pool. Throws kInternal on a double free or a foreign id.
  void free(int32_t block);
  int num_blocks() const { return static_cast<int>(in_use_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks() - num_free(); }

 private:
  std::vector<int32_t> free_;  // stack of free ids
  std::vector<bool> in_use_;
};

}  // namespace rill
