// Internal helpers of the kernel library: dtype dispatch, error reporting, vector types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "rill/kernels/common.h"

namespace rill::kernels {

/// Records why a launcher rejected its arguments and returns cudaErrorInvalidValue.
cudaError_t invalid_argument(const std::string& why);

/// Calls body.template operator()<T>() with T = __half or __nv_bfloat16 for `dtype`.
template <typename Body>
cudaError_t dispatch_dtype(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::kF16: return body.template operator()<__half>();
    case DType::kBF16: return body.template operator()<__nv_bfloat16>();
  }
  return invalid_argument("unsupported dtype " + std::to_string(static_cast<int>(dtype)));
}

/// The head dims a kernel is instantiated for (FlashInfer's DISPATCH_HEAD_DIM as a type): one
/// list per kernel family, which both the launcher's argument check and the dispatch read.
template <int... Ds>
struct HeadDims {
  static constexpr bool contains(int head_dim) { return ((head_dim == Ds) || ...); }
};

/// "unsupported head_dim=N" unless `head_dim` is in `Dims`; cudaSuccess otherwise.
template <typename Dims>
cudaError_t check_head_dim(int head_dim) {
  return Dims::contains(head_dim)
             ? cudaSuccess
             : invalid_argument("unsupported head_dim=" + std::to_string(head_dim));
}

/// Calls body.template operator()<D>() with D = head_dim when HeadDims<Ds...> has it; otherwise
/// returns check_head_dim's error.
template <int... Ds, typename Body>
cudaError_t dispatch_head_dim(HeadDims<Ds...>, int head_dim, Body&& body) {
  cudaError_t err = cudaSuccess;
  const bool found = ((head_dim == Ds && (err = body.template operator()<Ds>(), true)) || ...);
  return found ? err : check_head_dim<HeadDims<Ds...>>(head_dim);
}

template <typename T> __device__ __forceinline__ float to_float(T x);
template <> __device__ __forceinline__ float to_float<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/// The launch error of the kernel just launched (cudaGetLastError; also clears it).
inline cudaError_t launch_status() { return cudaGetLastError(); }

}  // namespace rill::kernels
