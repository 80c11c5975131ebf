// Warp and block reductions and scans with a fixed combination order, so a kernel gives
// bit-identical results from run to run (sampling must be reproducible for a given seed).
// Block-wide helpers need blockDim.x to be a multiple of 32 and every thread of the block to
// call them (they contain __syncthreads); `scratch` is __shared__ storage of 32 elements.
#pragma once

#include <cstdint>

namespace rill::kernels {

__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ int shfl_xor(int v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}

struct Sum {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// Reduction over the 32 lanes by a butterfly; every lane gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  return v;
}

/// Reduction over the block; every thread gets the result. `identity` fills the missing warps.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // earlier readers of scratch are done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  // Every warp combines the partials in the same order, so all threads see the same value.
  return warp_reduce(lane < num_warps ? scratch[lane] : identity, op);
}

template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  return block_reduce(v, Sum{}, T(0), scratch);
}

/// Inclusive prefix sum over the block in thread order; `total` receives the block's sum.
template <typename T>
__device__ __forceinline__ T block_inclusive_scan(T v, T* scratch, T& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  T w = lane < num_warps ? scratch[lane] : T(0);
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, w, o);
    if (lane >= o) w += up;
  }
  total = __shfl_sync(0xffffffffu, w, 31);
  const T before = __shfl_sync(0xffffffffu, w, (warp + 31) & 31);  // sum of warps [0, warp)
  return warp == 0 ? v : before + v;
}

}  // namespace rill::kernels
