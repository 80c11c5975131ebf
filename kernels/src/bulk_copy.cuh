// Copies by the copy engine (Hopper's bulk copies, cp.async.bulk) into shared memory, completing
// on an mbarrier: the thread that issues one goes on at once, and whoever waits on the barrier
// sees the bytes once all of them have landed.
#pragma once

#include <cstdint>

namespace rill::kernels::bulk {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// An mbarrier in shared memory that `count` arrivals complete (one thread initializes it; the
/// fence makes the initialization visible to the copy engine).
__device__ __forceinline__ void init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/// One arrival on `bar` that also announces `bytes` more bytes of copies completing on it.
__device__ __forceinline__ void arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}

/// Waits until the phase of `bar` with this parity has completed.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n WAIT:\n"  // a label local to this block
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n}" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

/// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared `dst`,
/// completing on `bar`.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

}  // namespace rill::kernels::bulk
