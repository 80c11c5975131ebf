// Residual add of one sub-layer fused with the norm (RMS or LayerNorm) of the next.
//
// One CTA per token row, computed by norm_row::add_norm_row (add_norm_row.cuh).
#include <algorithm>

#include "add_norm_row.cuh"
#include "launch.cuh"
#include "rill/kernels/elementwise.h"

namespace rill::kernels {
namespace {

using norm_row::kMaxItems;
using norm_row::kMaxThreads;

// grid (num_tokens), block: a multiple of 32 threads with blockDim * ITEMS * 8 >= hidden.
// VEC: every row and vector is 16-byte aligned (hidden % 8 == 0, aligned pointers).
template <typename T, bool VEC, int ITEMS>
__global__ void __launch_bounds__(kMaxThreads) add_norm_kernel(AddNormParams p) {
  // See launch.cuh. The norm weights and biases are no kernel's output: this thread's chunks of
  // them are pulled into L1 before the wait, so the stores at the end do not wait on the L2.
  pdl_launch_dependents();
  const void* params[4] = {p.weight0, p.norm_bias0, p.weight1, p.norm_bias1};
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = (it * blockDim.x + threadIdx.x) * kVec;
    if (base >= p.hidden) break;
    for (const void* v : params)
      if (v) asm volatile("prefetch.global.L1 [%0];" ::"l"(static_cast<const T*>(v) + base));
  }
  pdl_wait();  // before any dependent read or global write
  __shared__ float scratch[32];
  const int64_t i = blockIdx.x;
  const int64_t row = p.rows ? p.rows[i] : i;
  const int64_t row_off = row * p.hidden;  // residual and deltas by the gathered row; outputs by i
  const int64_t off = i * p.hidden;
  norm_row::Row<T> a;
  a.residual_in = a.residual_out = p.residual + row_off;                      // [hidden]
  a.delta0 = p.delta0 ? static_cast<const T*>(p.delta0) + row_off : nullptr;  // [hidden]
  a.delta1 = p.delta1 ? static_cast<const T*>(p.delta1) + row_off : nullptr;
  a.bias0 = static_cast<const T*>(p.bias0);
  a.bias1 = static_cast<const T*>(p.bias1);
  a.weight0 = static_cast<const T*>(p.weight0);
  a.norm_bias0 = static_cast<const T*>(p.norm_bias0);
  a.weight1 = static_cast<const T*>(p.weight1);
  a.norm_bias1 = static_cast<const T*>(p.norm_bias1);
  a.out0 = static_cast<T*>(p.out0) + off;
  a.out1 = p.out1 ? static_cast<T*>(p.out1) + off : nullptr;
  a.hidden = p.hidden;
  a.threads = blockDim.x;
  a.layer = p.type == NormType::kLayer;
  a.eps = p.eps;
  norm_row::add_norm_row<T, VEC, ITEMS, false>(a, scratch);
}

template <typename T, bool VEC>
cudaError_t launch_items(const AddNormParams& p, int items, int threads, cudaStream_t stream) {
  switch (items) {
    case 1:
      launch_kernel(add_norm_kernel<T, VEC, 1>, dim3(p.num_tokens), dim3(threads), 0, stream, p);
      break;
    case 2:
      launch_kernel(add_norm_kernel<T, VEC, 2>, dim3(p.num_tokens), dim3(threads), 0, stream, p);
      break;
    default:
      launch_kernel(add_norm_kernel<T, VEC, kMaxItems>, dim3(p.num_tokens), dim3(threads), 0,
                    stream, p);
      break;
  }
  return launch_status();
}

}  // namespace

cudaError_t launch_add_norm(const AddNormParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden < 0) return invalid_argument("add_norm: negative size");
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.hidden == 0 || p.hidden > kMaxThreads * kMaxItems * kVec)
    return invalid_argument("add_norm: unsupported hidden=" + std::to_string(p.hidden));
  if (p.type != NormType::kRms && p.type != NormType::kLayer)
    return invalid_argument("add_norm: unknown norm type");
  if (!p.residual || !p.weight0 || !p.out0)
    return invalid_argument("add_norm: residual, weight0 and out0 are required");
  if ((p.bias0 && !p.delta0) || (p.bias1 && !p.delta1))
    return invalid_argument("add_norm: a bias without its delta");
  if (p.out1 && !p.weight1) return invalid_argument("add_norm: out1 without weight1");
  const void* ptrs[] = {p.residual,   p.delta0, p.bias0,   p.delta1,     p.bias1, p.weight0,
                        p.norm_bias0, p.out0,   p.weight1, p.norm_bias1, p.out1};
  const bool vec =
      p.hidden % kVec == 0 && std::all_of(std::begin(ptrs), std::end(ptrs), is_aligned16);
  const auto [items, threads] = norm_row::row_shape(p.hidden);  // 4096: 1 x 512
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    return vec ? launch_items<T, true>(p, items, threads, stream)
               : launch_items<T, false>(p, items, threads, stream);
  });
}

}  // namespace rill::kernels
