// Bulk copies global -> shared memory (cp.async.bulk, Hopper's copy engine: one instruction moves
// up to a row of bytes) completing on mbarriers, and the mbarrier operations a producer /
// consumer ring needs. sm_90 and later only.
#pragma once

#include <cstdint>

namespace rill::kernels::bulk {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// One thread: initializes barrier `b` for `count` arrivals a phase. Then fence_init() and a
/// barrier before any other thread uses it.
__device__ __forceinline__ void mbar_init(uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/// Arrives on `b` and makes its phase wait for `bytes` more of copies (the producer's arrival).
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
/// Blocks until the phase of `b` with parity `parity` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  asm volatile(
      "{\n"
      " .reg .pred done;\n"
      " WAIT:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT;\n"
      "}" ::"r"(smem_u32(b)),
      "r"(parity)
      : "memory");
}

/// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared
/// `dst`; their arrival counts against barrier `b`'s expected bytes.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(b))
      : "memory");
}

/// Barrier `id` (1 .. 15; 0 is __syncthreads') over the first `threads` threads of the CTA (a
/// multiple of 32): the consumers of a ring whose producer warp runs on.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace rill::kernels::bulk
