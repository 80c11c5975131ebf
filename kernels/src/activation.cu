// Activations of the MLP, computed in fp32 with PyTorch's formulas:
//   silu(x) = x / (1 + exp(-x))                                  (kSiluMul: silu(gate) * up)
//   gelu_erf(x) = 0.5 x (1 + erf(x / sqrt(2)))
//   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
// kSiluMul reads gate and up from the two halves of each input row, or (interleaved) from
// alternating tiles of 8: [g0..g7 u0..u7 g8..g15 u8..u15 ...], the CUDA runner's gate|up layout.
//
// With ActivationParams::out_fp8 (the W8A8 down projection's input) activation_fp8_kernel writes
// the rows as e4m3 itself, one CTA per token holding its row in registers: the same T values,
// then launch_quantize_fp8's per-token bytes and scale of them, with no T row written unless out
// is given and no quantization kernel after.
#include <algorithm>
#include <string>

#include "fp8.cuh"
#include "launch.cuh"
#include "reduce.cuh"
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

constexpr int kFp8Batch = 2;  // vectors of 8 a thread loads before it computes them

// grid (num_tokens), N threads, dynamic shared memory width * sizeof(T): one token's row. First
// pass over the row's vectors of 8, kFp8Batch a thread at a time with their loads issued first:
// activated and rounded to T into shared memory (and to out when given), the max |y| kept. Then
// the row's scale (the block's max), and a second pass quantizes the T values from shared memory,
// as quantize_fp8.cu's per-token kernel would quantize the T row. Shared memory rather than
// registers keeps the CTA small, so several rows are in flight on an SM (one CTA of 256 or 688
// threads holding the row in registers moved 1.2-1.6 TB/s at 2,048 x 11,008). Few rows (decode
// batches) take 1,024 threads a row, so that their loads still fill the GPU (launch_fp8).
template <typename T, ActKind KIND, int N>
__global__ void __launch_bounds__(N)
    activation_fp8_kernel(const T* __restrict__ in,    // [T, 2I] (kSiluMul) or [T, I]
                          const T* __restrict__ bias,  // optional [2I] or [I]
                          T* __restrict__ out,         // optional [T, I]
                          uint8_t* __restrict__ out_fp8, float* __restrict__ scales,  // [T, I], [T]
                          int width, bool interleaved) {
  extern __shared__ uint4 stored[];  // [width / 8] the T row
  __shared__ float scratch[32];
  pdl_launch_dependents();
  pdl_wait();
  constexpr bool kGated = KIND == ActKind::kSiluMul;
  const int64_t t = blockIdx.x;
  const int vecs = width / kVec;
  const T* row = in + t * (kGated ? 2 : 1) * width;
  const int up_off = interleaved ? kVec : width;
  float amax = 0.0f;
  for (int v0 = threadIdx.x; v0 < vecs; v0 += kFp8Batch * N) {
    float x[kFp8Batch][kVec], u[kFp8Batch][kVec];
#pragma unroll
    for (int b = 0; b < kFp8Batch; ++b) {
      const int v = v0 + b * N;
      if (v >= vecs) continue;
      const int gj = (kGated && interleaved ? 2 : 1) * v * kVec;  // the gate (or only) columns
      load_biased<T, true>(row + gj, bias ? bias + gj : nullptr, x[b]);
      if constexpr (kGated)
        load_biased<T, true>(row + gj + up_off, bias ? bias + gj + up_off : nullptr, u[b]);
    }
#pragma unroll
    for (int b = 0; b < kFp8Batch; ++b) {
      const int v = v0 + b * N;
      if (v >= vecs) continue;
      float y[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float a = kGated ? activate<KIND>(x[b][e]) * u[b][e] : activate<KIND>(x[b][e]);
        y[e] = to_float<T>(from_float<T>(a));
        amax = fmaxf(amax, fabsf(y[e]));
      }
      store8(reinterpret_cast<T*>(stored + v), y);
      if (out) store8(out + t * width + v * kVec, y);
    }
  }
  // block_reduce's barrier also publishes `stored`.
  const float scale = act_scale_fp8(block_reduce(amax, Max{}, 0.0f, scratch));
  if (threadIdx.x == 0) scales[t] = scale;
  for (int v = threadIdx.x; v < vecs; v += N) {
    float y[kVec];
    load8(reinterpret_cast<const T*>(stored + v), y);
    *reinterpret_cast<uint2*>(out_fp8 + t * width + v * kVec) = quantize8_fp8(y, scale);
  }
}

// Rows a launch must have for the 256-thread CTAs (kFp8RowsFor256 and up): H100, 2,048 x
// 11,008 (Llama-2-7B prefill) took 55 us a layer with 256 threads, 72 with 688.
constexpr int kFp8RowsFor256 = 1024;

template <typename T, ActKind KIND>
cudaError_t launch_fp8(const ActivationParams& p, cudaStream_t stream) {
  const size_t smem = size_t(p.width) * sizeof(T);  // <= 32 KB: kActivationFp8MaxWidth
  auto go = [&](auto kernel, int threads) {
    return launch_kernel(kernel, dim3(p.num_tokens), dim3(threads), smem, stream,
                         static_cast<const T*>(p.in), static_cast<const T*>(p.bias),
                         static_cast<T*>(p.out), p.out_fp8, p.out_scales, p.width, p.interleaved);
  };
  if (p.num_tokens >= kFp8RowsFor256) return go(activation_fp8_kernel<T, KIND, 256>, 256);
  return go(activation_fp8_kernel<T, KIND, 1024>, 1024);
}

template <typename T, ActKind KIND>
cudaError_t launch_kind(const ActivationParams& p, bool vec, cudaStream_t stream) {
  if (p.out_fp8) return launch_fp8<T, KIND>(p, stream);
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
  if (!p.in || (!p.out && !p.out_fp8)) return invalid_argument("activation: null pointer");
  if (!p.out_fp8 != !p.out_scales)
    return invalid_argument("activation: out_fp8 and out_scales go together");
  if (p.interleaved && (p.kind != ActKind::kSiluMul || p.width % kVec != 0))
    return invalid_argument("activation: interleaved gate|up needs kSiluMul and width % 8 == 0");
  const bool vec =
      p.width % kVec == 0 && is_aligned16(p.in) && is_aligned16(p.bias) && is_aligned16(p.out);
  if (p.out_fp8 &&
      (!vec || p.width > kActivationFp8MaxWidth || (reinterpret_cast<uintptr_t>(p.out_fp8) & 7u)))
    return invalid_argument("activation: out_fp8 needs width % 8 == 0, width <= " +
                            std::to_string(kActivationFp8MaxWidth) +
                            ", 16-byte aligned in, bias and out and an 8-byte aligned out_fp8");
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
