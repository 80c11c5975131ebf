// Philox4x32-10 counter-based generator (Salmon et al., SC'11), usable on host and device, so
// the CPU and CUDA samplers draw the same uniform for the same (seed, step): a request's
// randomness depends on its seed and position only, never on batching.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define RILL_HD __host__ __device__ __forceinline__
#else
#define RILL_HD inline
#endif

namespace rill {

RILL_HD void philox_round(uint32_t ctr[4], const uint32_t key[2]) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * ctr[0];
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * ctr[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  const uint32_t c0 = hi1 ^ ctr[1] ^ key[0];
  const uint32_t c2 = hi0 ^ ctr[3] ^ key[1];
  ctr[0] = c0;
  ctr[1] = lo1;
  ctr[2] = c2;
  ctr[3] = lo0;
}

/// Uniform float in [0, 1) for draw number `step` of stream `seed` (24 random bits).
RILL_HD float philox_uniform(uint64_t seed, uint64_t step) {
  uint32_t ctr[4] = {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0x52494c4cu, 0u};
  uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int i = 0; i < 10; ++i) {
    philox_round(ctr, key);
    key[0] += 0x9E3779B9u;
    key[1] += 0xBB67AE85u;
  }
  return static_cast<float>(ctr[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace rill
