// Addressing of the paged KV cache on the device (see KvCacheLayout in rill/kernels/common.h):
// one layer is [num_blocks][2 (K, V)][num_kv_heads][block_size][head_dim].
#pragma once

#include <cstdint>

#include "rill/kernels/common.h"

namespace rill::kernels {

/// Element offset of the K vector of (slot, kv head); its V is kv_cache_v_offset() further.
__device__ __forceinline__ int64_t kv_cache_k_offset(const KvCacheLayout& l, int32_t slot,
                                                     int head) {
  const int32_t block = slot / l.block_size, offset = slot % l.block_size;
  const int64_t kv_stride = static_cast<int64_t>(l.num_kv_heads) * l.block_size * l.head_dim;
  return block * 2 * kv_stride + (static_cast<int64_t>(head) * l.block_size + offset) * l.head_dim;
}

__device__ __forceinline__ int64_t kv_cache_v_offset(const KvCacheLayout& l) {
  return static_cast<int64_t>(l.num_kv_heads) * l.block_size * l.head_dim;
}

/// True when `slot` names a slot of the cache (negative: do not store).
__device__ __forceinline__ bool kv_cache_slot_valid(const KvCacheLayout& l, int32_t slot) {
  return slot >= 0 && slot < static_cast<int64_t>(l.num_blocks) * l.block_size;
}

}  // namespace rill::kernels
