// Activation quantization to e4m3 for the W8A8 GEMMs (rill/kernels/quantize_fp8.h): one CTA per
// token. Per token: the block's max |x| (or the static scale), then every 8 values stored as 8
// bytes; rows of up to 16,384 values stay in registers between the two (one read, every load in
// flight at once: at 2,048 tokens the two-pass kernel moved 0.9-1.3 TB/s), wider ones are read
// twice (the second time from L1/L2). Per 128-column group: a half-warp per group (16 lanes x 8
// values), its max by butterfly.
#include <string>

#include "dispatch.cuh"
#include "fp8.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "rill/kernels/quantize_fp8.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 128;                    // columns per scale (kPerGroup128)
constexpr int kLanesPerGroup = kGroup / kVec;  // 16
__device__ __forceinline__ float scale_of(float amax) { return act_scale_fp8(amax); }

__device__ __forceinline__ uint2 quantize8(const float (&f)[kVec], float scale) {
  return quantize8_fp8(f, scale);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_per_token_kernel(const T* __restrict__ x,  // [num_tokens, width]
                              uint8_t* __restrict__ out, float* __restrict__ scales, int width,
                              const float* __restrict__ static_scale) {
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* row = x + t * width;
  const int vecs = width / kVec;
  float scale;
  if (static_scale) {
    scale = *static_scale;
  } else {
    float amax = 0.0f;
    for (int v = threadIdx.x; v < vecs; v += kThreads) {
      float f[kVec];
      load8(row + v * kVec, f);
#pragma unroll
      for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(f[i]));
    }
    scale = scale_of(block_reduce(amax, Max{}, 0.0f, scratch));
  }
  if (threadIdx.x == 0) scales[t] = scale;
  for (int v = threadIdx.x; v < vecs; v += kThreads) {
    float f[kVec];
    load8(row + v * kVec, f);
    *reinterpret_cast<uint2*>(out + t * width + v * kVec) = quantize8(f, scale);
  }
}

// The same with the row held in registers, R vectors a thread (width <= R x kThreads x 8): one
// read of the row, every load issued before the maximum is reduced. Dynamic scales only.
template <typename T, int R>
__global__ void __launch_bounds__(kThreads)
    quantize_per_token_regs_kernel(const T* __restrict__ x,  // [num_tokens, width]
                                   uint8_t* __restrict__ out, float* __restrict__ scales,
                                   int width) {
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* row = x + t * width;
  const int vecs = width / kVec;
  uint4 u[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int v = threadIdx.x + r * kThreads;
    if (v < vecs) u[r] = *reinterpret_cast<const uint4*>(row + v * kVec);
  }
  float amax = 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (threadIdx.x + r * kThreads >= vecs) continue;
    const T* h = reinterpret_cast<const T*>(&u[r]);
#pragma unroll
    for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(to_float<T>(h[i])));
  }
  const float scale = scale_of(block_reduce(amax, Max{}, 0.0f, scratch));
  if (threadIdx.x == 0) scales[t] = scale;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int v = threadIdx.x + r * kThreads;
    if (v >= vecs) continue;
    const T* h = reinterpret_cast<const T*>(&u[r]);
    float f[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) f[i] = to_float<T>(h[i]);
    *reinterpret_cast<uint2*>(out + t * width + v * kVec) = quantize8(f, scale);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_per_group_kernel(const T* __restrict__ x,  // [num_tokens, width]
                              uint8_t* __restrict__ out,
                              float* __restrict__ scales,  // [groups, num_tokens]
                              int num_tokens, int width) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* row = x + t * width;
  const int vecs = width / kVec, groups = (width + kGroup - 1) / kGroup;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, half = lane / kLanesPerGroup;
  constexpr int kWarps = kThreads / 32;
  // Each warp takes two groups per iteration (one per half-warp); every lane runs every
  // iteration so the shuffles see the whole warp.
  for (int base = 2 * warp; base < groups; base += 2 * kWarps) {
    const int g = base + half, v = g * kLanesPerGroup + lane % kLanesPerGroup;
    const bool live = g < groups && v < vecs;
    float f[kVec] = {};
    if (live) load8(row + v * kVec, f);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(f[i]));
#pragma unroll
    for (int o = kLanesPerGroup / 2; o > 0; o >>= 1) amax = fmaxf(amax, shfl_xor(amax, o));
    const float scale = scale_of(amax);
    if (live) *reinterpret_cast<uint2*>(out + t * width + v * kVec) = quantize8(f, scale);
    if (g < groups && lane % kLanesPerGroup == 0) scales[int64_t(g) * num_tokens + t] = scale;
  }
}

}  // namespace

cudaError_t launch_quantize_fp8(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.width < 0) return invalid_argument("quantize_fp8: negative size");
  if (p.width % kVec != 0)
    return invalid_argument("quantize_fp8: width=" + std::to_string(p.width) +
                            " is not a multiple of 8");
  if (p.mode != ActQuantMode::kPerToken && p.mode != ActQuantMode::kPerGroup128)
    return invalid_argument("quantize_fp8: unknown mode");
  if (p.mode == ActQuantMode::kPerGroup128 && p.static_scale)
    return invalid_argument("quantize_fp8: a static scale is per tensor (kPerToken)");
  if (p.num_tokens == 0 || p.width == 0) return cudaSuccess;
  if (!p.x || !p.out || !p.scales) return invalid_argument("quantize_fp8: null pointer");
  if (!is_aligned16(p.x) || (reinterpret_cast<uintptr_t>(p.out) & 7u))
    return invalid_argument("quantize_fp8: x must be 16-byte and out 8-byte aligned");
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    const T* x = static_cast<const T*>(p.x);
    const int per_thread = (p.width / kVec + kThreads - 1) / kThreads;  // vectors a thread
    if (p.mode == ActQuantMode::kPerToken && !p.static_scale && per_thread <= 8) {
      auto regs = [&](auto kernel) {
        return launch_kernel(kernel, dim3(p.num_tokens), dim3(kThreads), 0, stream, x, p.out,
                             p.scales, p.width);
      };
      if (per_thread <= 2) return regs(quantize_per_token_regs_kernel<T, 2>);
      if (per_thread <= 4) return regs(quantize_per_token_regs_kernel<T, 4>);
      return regs(quantize_per_token_regs_kernel<T, 8>);
    }
    if (p.mode == ActQuantMode::kPerToken)
      return launch_kernel(quantize_per_token_kernel<T>, dim3(p.num_tokens), dim3(kThreads), 0,
                           stream, x, p.out, p.scales, p.width, p.static_scale);
    return launch_kernel(quantize_per_group_kernel<T>, dim3(p.num_tokens), dim3(kThreads), 0,
                         stream, x, p.out, p.scales, p.num_tokens, p.width);
  });
}

}  // namespace rill::kernels
