#include "engine/kv/block_allocator.h"

#include <string>

#include "engine/error.h"

namespace rill {

BlockAllocator::BlockAllocator(int num_blocks) : in_use_(num_blocks > 0 ? num_blocks : 0, false) {
  free_.reserve(in_use_.size());
  // Low ids on top of the stack: a fresh pool hands out 0, 1, 2, ...
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  in_use_[b] = true;
  return b;
}

void BlockAllocator::free(int32_t block) {
  if (block < 0 || block >= num_blocks() || !in_use_[block])
    throw Error(ErrorCode::kInternal, "BlockAllocator: free of block " + std::to_string(block) +
                                          " that is not allocated");
  in_use_[block] = false;
  free_.push_back(block);
}

}  // namespace rill
