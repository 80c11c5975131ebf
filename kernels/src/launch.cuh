// Kernel launches with programmatic dependent launch (PDL, Hopper and later).
//
// A decode step is ~300 short kernels; between two of them the GPU normally drains the first
// grid completely before it starts launching the second. With PDL a kernel may be launched as
// soon as every CTA of its predecessor has called pdl_launch_dependents(); it then runs its
// independent prologue (a GEMV issues its first weight loads) and blocks in pdl_wait() until
// the predecessor has completed and its writes are visible.
//
// Contract for every kernel launched through launch_kernel():
//   - pdl_wait() runs before the first read of data another kernel writes and before the first
//     global write (so no write overtakes a predecessor still reading), in every CTA, before any
//     early return. Completion is then transitive: a grid completes only after its predecessor.
//   - pdl_launch_dependents() may run anywhere; Rill's kernels call it first thing. Dependents
//     only start after *all* CTAs of this grid reached it, i.e. once the whole grid is resident,
//     so waiting CTAs never take SM slots from CTAs of this grid. The launch chain thus runs one
//     or more kernels ahead: the next GEMV's CTAs sit resident and stream their first weights
//     while the small kernels before it (norm, RoPE, attention) run.
// Both are no-ops when the kernel was launched without the attribute or below sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "rill/kernels/common.h"

namespace rill::kernels {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when
/// programmatic_launch() is on. Returns the launch error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = programmatic_launch() ? 1 : 0;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace rill::kernels
