// Activations of the MLP, computed in fp32 with PyTorch's formulas:
//   silu(x) = x / (1 + exp(-x))                                  (kSiluMul: silu(gate) * up)
//   gelu_erf(x) = 0.5 x (1 + erf(x / sqrt(2)))
//   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
// kSiluMul reads gate and up from the two halves of each input row, or (interleaved) from
// alternating tiles of 8: [g0..g7 u0..u7 g8..g15 u8..u15 ...], the CUDA runner's gate|up layout.
#include <algorithm>

#include "launch.cuh"
#include "rill/kernels/elementwise.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kThreads = 128;

template <ActKind KIND>
__device__ __forceinline__ float activate(float x) {
  if constexpr (KIND == ActKind::kGeluErf) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  } else if constexpr (KIND == ActKind::kGeluTanh) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  } else {
    return x / (1.0f + expf(-x));
  }
}

// Loads 8 (VEC) or 1 element(s) at p, plus the bias at b when given.
template <typename T, bool VEC>
__device__ __forceinline__ void load_biased(const T* p, const T* b, float (&f)[kVec]) {
  if constexpr (VEC) {
    load8(p, f);
    if (b) add8(b, f);
  } else {
    f[0] = to_float<T>(*p) + (b ? to_float<T>(*b) : 0.0f);
  }
}

// Grid-stride over (token, chunk) pairs; a chunk is 8 elements (VEC) or one. No __restrict__ on
// in/out: gelu may run in place (each element is read and written by the same thread).
template <typename T, ActKind KIND, bool VEC>
__global__ void __launch_bounds__(kThreads)
    activation_kernel(const T* in,    // [T, 2I] (kSiluMul, gate | up) or [T, I]
                      const T* bias,  // optional [2I] or [I]
                      T* out,         // [T, I]
                      int num_tokens, int width, bool interleaved) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  constexpr bool kGated = KIND == ActKind::kSiluMul;
  constexpr int kStep = VEC ? kVec : 1;
  constexpr int kIn = kGated ? 2 : 1;
  const int chunks_per_row = width / kStep;
  const int64_t total = static_cast<int64_t>(num_tokens) * chunks_per_row;
  for (int64_t c = blockIdx.x * int64_t(kThreads) + threadIdx.x; c < total;
       c += int64_t(gridDim.x) * kThreads) {
    const int64_t t = c / chunks_per_row;
    const int j = static_cast<int>(c - t * chunks_per_row) * kStep;
    // Element j's gate at column gj of the input row, its up at gj + up_off.
    const int gj = kGated && interleaved ? (j / kVec) * 2 * kVec + j % kVec : j;
    const int up_off = interleaved ? kVec : width;
    const T* src = in + t * kIn * width + gj;
    float x[kVec], y[kVec];
    load_biased<T, VEC>(src, bias ? bias + gj : nullptr, x);
    if constexpr (kGated) load_biased<T, VEC>(src + up_off, bias ? bias + gj + up_off : nullptr, y);
#pragma unroll
    for (int e = 0; e < kStep; ++e)
      y[e] = kGated ? activate<KIND>(x[e]) * y[e] : activate<KIND>(x[e]);
    T* dst = out + t * width + j;
    if constexpr (VEC) {
      store8(dst, y);
    } else {
      *dst = from_float<T>(y[0]);
    }
  }
}

template <typename T, ActKind KIND>
cudaError_t launch_kind(const ActivationParams& p, bool vec, cudaStream_t stream) {
  const int64_t chunks = static_cast<int64_t>(p.num_tokens) * (vec ? p.width / kVec : p.width);
  const int blocks =
      static_cast<int>(std::min<int64_t>((chunks + kThreads - 1) / kThreads, 1 << 20));
  const T* in = static_cast<const T*>(p.in);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
  if (vec) {
    launch_kernel(activation_kernel<T, KIND, true>, dim3(blocks), dim3(kThreads), 0, stream, in,
                  bias, out, p.num_tokens, p.width, p.interleaved);
  } else {
    launch_kernel(activation_kernel<T, KIND, false>, dim3(blocks), dim3(kThreads), 0, stream, in,
                  bias, out, p.num_tokens, p.width, p.interleaved);
  }
  return launch_status();
}

}  // namespace

cudaError_t launch_activation(const ActivationParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.width < 0) return invalid_argument("activation: negative size");
  if (p.num_tokens == 0 || p.width == 0) return cudaSuccess;
  if (!p.in || !p.out) return invalid_argument("activation: null pointer");
  if (p.interleaved && (p.kind != ActKind::kSiluMul || p.width % kVec != 0))
    return invalid_argument("activation: interleaved gate|up needs kSiluMul and width % 8 == 0");
  const bool vec =
      p.width % kVec == 0 && is_aligned16(p.in) && is_aligned16(p.bias) && is_aligned16(p.out);
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    switch (p.kind) {
      case ActKind::kSiluMul:
        return launch_kind<T, ActKind::kSiluMul>(p, vec, stream);
      case ActKind::kGeluErf:
        return launch_kind<T, ActKind::kGeluErf>(p, vec, stream);
      case ActKind::kGeluTanh:
        return launch_kind<T, ActKind::kGeluTanh>(p, vec, stream);
    }
    return invalid_argument("activation: unknown kind " + std::to_string(static_cast<int>(p.kind)));
  });
}

}  // namespace rill::kernels
