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
/// programmatic_launch() is on, in thread-block clusters of `cluster` CTAs when that is given.
/// Returns the launch error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_clusters(dim3 cluster, void (*kernel)(Params...), dim3 grid,
                                      dim3 block, size_t smem, cudaStream_t stream,
                                      Args&&... args) {
  if (cudaError_t err = apply_smem_carveout(reinterpret_cast<const void*>(kernel));
      err != cudaSuccess)
    return err;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2] = {};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = programmatic_launch() ? 1 : 0;
  config.attrs = attrs;
  config.numAttrs = 1;
  if (cluster.x * cluster.y * cluster.z > 1) {
    attrs[1].id = cudaLaunchAttributeClusterDimension;
    attrs[1].val.clusterDim.x = cluster.x;
    attrs[1].val.clusterDim.y = cluster.y;
    attrs[1].val.clusterDim.z = cluster.z;
    config.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  return launch_kernel_in_clusters(dim3(1, 1, 1), kernel, grid, block, smem, stream,
                                   std::forward<Args>(args)...);
}

/// True when `kernel` can run clusters of `size` <= 8 (portable) CTAs of `threads` threads with
/// `smem` bytes of dynamic shared memory (allowed to the kernel beforehand) on this device.
template <typename... Params>
bool cluster_size_fits(void (*kernel)(Params...), int size, int threads, size_t smem = 0) {
  if (size > 8) return false;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(size);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = size;
  attr.val.clusterDim.y = attr.val.clusterDim.z = 1;
  config.attrs = &attr;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return clusters > 0;
}

}  // namespace rill::kernels
