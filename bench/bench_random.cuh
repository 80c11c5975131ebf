// Deterministic pseudo-random data for the benchmarks, from a hash of (index, seed), generated
// on the device so that gigabytes of weights fill in milliseconds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rill::bench {

__device__ __forceinline__ uint32_t hash_index(size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return x;
}

/// Uniform in [-0.5, 0.5), 16 bits of resolution.
__device__ __forceinline__ float hash_uniform(size_t i, uint32_t seed) {
  return static_cast<float>(hash_index(i, seed) & 0xffff) / 65536.0f - 0.5f;
}

}  // namespace rill::bench
