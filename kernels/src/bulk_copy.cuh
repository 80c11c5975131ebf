// Hopper bulk copies (the copy engine behind TMA, 1-D form: no tensor map) into shared memory,
// completing on mbarriers (sm_90 PTX). A producer thread arms a "full" barrier with the bytes it
// expects and issues copies that count down those bytes; consumers wait on the barrier's phase
// parity, and hand the buffer back by arriving on an "empty" barrier.
#pragma once

#include <cstdint>

namespace rill::kernels::bulk {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Initializes an mbarrier expecting `count` arrivals per phase. Make it visible to the async
/// proxy with init_fence() and a CTA barrier before use.
__device__ __forceinline__ void init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
}

__device__ __forceinline__ void init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// One arrival that also adds `bytes` to the transaction count the phase waits for.
__device__ __forceinline__ void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

/// Blocks until the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to shared
/// memory; completion counts down `bar`'s transaction bytes.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

}  // namespace rill::kernels::bulk
