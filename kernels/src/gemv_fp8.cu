// Weight-only fp8 GEMV for decode, y[m, n] = sum_k x[m, k] w[n, k] scale(n, k), M <= 16.
//
// The layout of gemv.cu with e4m3 weights: a CTA of W warps owns 16 rows of w and splits K among
// its warps; in one step a warp covers 64 columns: lane (g = lane / 4, t = lane % 4) loads the
// 16-byte chunk 4s + t (16 weights) of w rows g and g + 8, and the same 16 columns of x rows g
// (and g + 8 for M > 8) as two 16-byte loads. Each chunk feeds four m16n8k16 mmas, four weights
// each: k slots {2t, 2t+1} take elements {4j, 4j+1} of the chunk and {2t+8, 2t+9} take
// {4j+2, 4j+3}, identically for w (A) and x (B), which is all a dot product needs.
//
// e4m3 -> 16-bit pairs without conversion instructions (those run at a quarter of the integer
// rate on Hopper; bf16 would need four per pair and cap the kernel below bandwidth): the sign and
// the 7 exponent+mantissa bits are shifted into place, then one half-precision multiply by a
// power of two corrects the exponent bias (e4m3x2 below).
//
// Scales: kPerRow multiplies each row's fp32 sum in the epilogue; kBlock128 multiplies each
// step's mma result (the four lanes of a step cover 64 columns inside one 128-column block)
// before adding it to the running sums. The W warps' partial sums are added in warp order
// through shared memory, so results depend on W only.
#include <string>
#include <type_traits>

#include "dispatch.cuh"
#include "gemv_mma.cuh"
#include "launch.cuh"
#include "rill/kernels/gemv_fp8.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kRows = 16;              // rows of w per CTA (the mma's M)
constexpr int kChunk = 16;             // e4m3 per 16-byte load
constexpr int kStepCols = 4 * kChunk;  // columns one warp covers per step
static_assert(kFp8ScaleBlock % kStepCols == 0, "a step stays inside one scale block");

struct Config {
  int warps, unroll;
};
// 16 x 2 moves as many bytes per step as the 16-bit GEMV's default (64 per row per warp).
constexpr Config kConfigs[] = {{16, 2}, {8, 2}, {8, 4}, {16, 1}, {32, 1}, {4, 4}};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);

/// Two e4m3 values (bytes B0 and B1 of `v`) as a pair of T, exactly: the sign and the 7
/// exponent+mantissa bits are shifted into T's places, which gives the value times 2^-8 (fp16) or
/// 2^-120 (bf16), subnormal e4m3 landing on subnormal T; one T x2 multiply by 2^8 / 2^120 makes it
/// the value (half-precision multiplies take subnormal inputs, so every code converts exactly and
/// the mma sees normal numbers).
template <typename T, int B0, int B1>
__device__ __forceinline__ uint32_t e4m3x2(uint32_t v) {
  // Byte B0 to bits 0..7 and byte B1 to bits 16..23 (selector 4: a zero byte of the second
  // operand).
  const uint32_t w = __byte_perm(v, 0u, B0 | (4 << 4) | (B1 << 8) | (4 << 12));
  const uint32_t sign = (w & 0x00800080u) << 8;
  if constexpr (std::is_same_v<T, __half>) {
    const uint32_t scaled = sign | ((w & 0x007f007fu) << 7);  // the values times 2^-8
    const __half2 p = __hmul2(*reinterpret_cast<const __half2*>(&scaled),
                              __halves2half2(__ushort_as_half(0x5c00), __ushort_as_half(0x5c00)));
    return *reinterpret_cast<const uint32_t*>(&p);
  } else {
    const uint32_t scaled = sign | ((w & 0x007f007fu) << 4);  // the values times 2^-120
    const __nv_bfloat162 p =
        __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&scaled),
                __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80)));
    return *reinterpret_cast<const uint32_t*>(&p);
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// Loads the w chunks of the U steps starting at step s0 (zeros past the end of K).
template <int W, int U>
__device__ __forceinline__ void load_w(const uint4* w_lo, const uint4* w_hi, int s0, int t,
                                       int chunks, uint4 (&lo)[U], uint4 (&hi)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = (s0 + u * W) * 4 + t;
    lo[u] = hi[u] = make_uint4(0, 0, 0, 0);
    if (c < chunks) {
      lo[u] = load_stream(w_lo + c);
      hi[u] = load_stream(w_hi + c);
    }
  }
}

/// c[mt] += w chunk (rows g, g + 8) x x chunks (rows 8 mt + g): four mmas per x tile.
template <typename T, int MT>
__device__ __forceinline__ void mma_chunk(float (&c)[MT][4], const uint4& lo, const uint4& hi,
                                          const uint4 (&xv)[MT][2]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t wl = word(lo, j), wh = word(hi, j);
    const uint32_t a0 = e4m3x2<T, 0, 1>(wl), a1 = e4m3x2<T, 0, 1>(wh);
    const uint32_t a2 = e4m3x2<T, 2, 3>(wl), a3 = e4m3x2<T, 2, 3>(wh);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint4& xs = xv[mt][j / 2];  // x elements 8 (j / 2) .. + 7 of the chunk
      const uint32_t b0 = word(xs, 2 * (j % 2)), b1 = word(xs, 2 * (j % 2) + 1);
      mma_16816<T>(c[mt], a0, a1, a2, a3, b0, b1);
    }
  }
}

/// Warp 0, lane (g, t), x tile mt: s[i] is the sum of x row m = 8 mt + 2t + (i & 1) and w row
/// n0 + g (+ 8 for i >= 2), already scaled. Writes y (kStore) or silu(gate) * up (kSiluMul).
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void store_tile(const float (&s)[4], void* __restrict__ y,
                                           const T* __restrict__ bias, int M, int N, bool y_f32,
                                           int n0, int g, int t, int mt) {
  if constexpr (EPI == GemvEpilogue::kStore) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 8 * mt + 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
      if (m < M && n < N) {
        const int64_t at = static_cast<int64_t>(m) * N + n;
        if (y_f32) {
          static_cast<float*>(y)[at] = s[i];
        } else {
          static_cast<T*>(y)[at] = from_float<T>(s[i]);
        }
      }
    }
  } else {  // rows n0 + g (gate) and n0 + 8 + g (up) -> output n0 / 2 + g
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 8 * mt + 2 * t + j;
      if (m < M) {
        float gate = to_float<T>(from_float<T>(s[j])), up = to_float<T>(from_float<T>(s[j + 2]));
        if (bias) gate += to_float<T>(bias[n0 + g]), up += to_float<T>(bias[n0 + 8 + g]);
        static_cast<T*>(y)[static_cast<int64_t>(m) * (N / 2) + n0 / 2 + g] =
            from_float<T>(silu(gate) * up);
      }
    }
  }
}

// grid (ceil(N / 16)), block W * 32. K % 16 == 0, x and w 16-byte aligned. MT x tiles of 8 rows.
// Weights are double-buffered in registers: the loads of the next U steps are issued before the
// mmas of the current ones; the first ones before pdl_wait() (weights never depend on the
// previous kernel).
template <typename T, int W, int U, int MT, bool BLOCK, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32)
    gemv_fp8_kernel(const T* __restrict__ x,          // [M, K]
                    const uint8_t* __restrict__ w,    // [N, K] e4m3
                    const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                    void* __restrict__ y, const T* __restrict__ bias, int M, int N, int K,
                    bool y_f32) {
  __shared__ float partial[W][MT][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * kRows;
  const int chunks = K / kChunk, steps = (chunks + 3) / 4;
  // Rows past N are clamped (loaded, never stored), x rows past M are zero columns of B.
  const int r_lo = min(n0 + g, N - 1), r_hi = min(n0 + g + 8, N - 1);
  const uint4* w_lo = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(r_lo) * K);
  const uint4* w_hi = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(r_hi) * K);
  const uint4* x_row[MT];
  bool x_live[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int m = 8 * mt + g;
    x_live[mt] = m < M;
    x_row[mt] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(m, M - 1)) * K);
  }
  constexpr int kStride = W * U;

  pdl_launch_dependents();
  uint4 lo[U], hi[U];
  load_w<W, U>(w_lo, w_hi, warp, t, chunks, lo, hi);
  pdl_wait();

  float acc[MT][4] = {};
  for (int s0 = warp; s0 < steps; s0 += kStride) {
    uint4 xv[U][MT][2];
    float sc[U][2];  // kBlock128: this step's scales of rows g and g + 8
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * W, c = s * 4 + t;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        xv[u][mt][0] = xv[u][mt][1] = make_uint4(0, 0, 0, 0);
        if (c < chunks && x_live[mt]) {
          xv[u][mt][0] = __ldg(x_row[mt] + 2 * c);
          xv[u][mt][1] = __ldg(x_row[mt] + 2 * c + 1);
        }
      }
      if constexpr (BLOCK) {
        const float* row = scale + static_cast<int64_t>(s * kStepCols / kFp8ScaleBlock) * N;
        sc[u][0] = s < steps ? __ldg(row + r_lo) : 0.0f;
        sc[u][1] = s < steps ? __ldg(row + r_hi) : 0.0f;
      }
    }
    uint4 next_lo[U], next_hi[U];
    load_w<W, U>(w_lo, w_hi, s0 + kStride, t, chunks, next_lo, next_hi);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if constexpr (BLOCK) {
        float step[MT][4] = {};
        mma_chunk<T, MT>(step, lo[u], hi[u], xv[u]);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][i] += step[mt][i] * sc[u][i >> 1];
      } else {
        mma_chunk<T, MT>(acc, lo[u], hi[u], xv[u]);
      }
      lo[u] = next_lo[u];
      hi[u] = next_hi[u];
    }
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][mt][i][lane] = acc[mt][i];
  __syncthreads();
  if (warp != 0) return;
  const float row_scale[2] = {BLOCK ? 1.0f : __ldg(scale + r_lo),
                              BLOCK ? 1.0f : __ldg(scale + r_hi)};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float sum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sum[i] = partial[0][mt][i][lane];
#pragma unroll
      for (int v = 1; v < W; ++v) sum[i] += partial[v][mt][i][lane];
      sum[i] *= row_scale[i >> 1];
    }
    store_tile<T, EPI>(sum, y, bias, M, N, y_f32, n0, g, t, mt);
  }
}

template <typename T, Config C, int MT, bool BLOCK, GemvEpilogue EPI>
cudaError_t launch_shape(const Fp8GemvParams& p, cudaStream_t stream) {
  const int blocks = (p.N + kRows - 1) / kRows;
  return launch_kernel(
      gemv_fp8_kernel<T, C.warps, C.unroll, MT, BLOCK, EPI>, dim3(blocks), dim3(C.warps * 32), 0,
      stream, static_cast<const T*>(p.x), static_cast<const uint8_t*>(p.w), p.scale, p.y,
      static_cast<const T*>(p.bias), p.M, p.N, p.K, EPI == GemvEpilogue::kStore && p.y_f32);
}

// Run-time values to template constants: x tiles, scale layout, epilogue.
template <typename T, Config C>
cudaError_t launch_variant(const Fp8GemvParams& p, cudaStream_t stream) {
  const bool block = p.scale_layout == Fp8ScaleLayout::kBlock128;
  const bool silu = p.epilogue == GemvEpilogue::kSiluMul;
  auto go = [&]<int MT>() {
    if (block)
      return silu ? launch_shape<T, C, MT, true, GemvEpilogue::kSiluMul>(p, stream)
                  : launch_shape<T, C, MT, true, GemvEpilogue::kStore>(p, stream);
    return silu ? launch_shape<T, C, MT, false, GemvEpilogue::kSiluMul>(p, stream)
                : launch_shape<T, C, MT, false, GemvEpilogue::kStore>(p, stream);
  };
  return p.M > 8 ? go.template operator()<2>() : go.template operator()<1>();
}

template <typename T, int I = 0>
cudaError_t launch_config(const Fp8GemvParams& p, cudaStream_t stream) {
  if constexpr (I == kNumConfigs) {
    return invalid_argument("gemv_fp8: unknown config " + std::to_string(p.config));
  } else {
    if (p.config != I) return launch_config<T, I + 1>(p, stream);
    return launch_variant<T, kConfigs[I]>(p, stream);
  }
}

}  // namespace

cudaError_t launch_gemv_fp8(const Fp8GemvParams& p, cudaStream_t stream) {
  if (p.M < 0 || p.N < 0 || p.K < 0) return invalid_argument("gemv_fp8: negative size");
  if (p.M > kFp8GemvMaxRows)
    return invalid_argument("gemv_fp8: M=" + std::to_string(p.M) + " > " +
                            std::to_string(kFp8GemvMaxRows));
  if (p.K % kChunk != 0)
    return invalid_argument("gemv_fp8: K=" + std::to_string(p.K) + " is not a multiple of 16");
  if (p.config < -1 || p.config >= kNumConfigs)
    return invalid_argument("gemv_fp8: unknown config " + std::to_string(p.config));
  if (p.scale_layout != Fp8ScaleLayout::kPerRow && p.scale_layout != Fp8ScaleLayout::kBlock128)
    return invalid_argument("gemv_fp8: unknown scale layout");
  if (p.epilogue == GemvEpilogue::kSiluMul) {
    if (p.N % 16 != 0)
      return invalid_argument("gemv_fp8: kSiluMul needs N % 16 == 0, N=" + std::to_string(p.N));
    if (p.y_f32) return invalid_argument("gemv_fp8: kSiluMul writes the dtype");
  } else if (p.epilogue != GemvEpilogue::kStore) {
    return invalid_argument("gemv_fp8: unknown epilogue");
  } else if (p.bias) {
    return invalid_argument("gemv_fp8: kStore takes no bias");
  }
  if (p.M == 0 || p.N == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.y || !p.scale) return invalid_argument("gemv_fp8: null pointer");
  if (!is_aligned16(p.x) || !is_aligned16(p.w))
    return invalid_argument("gemv_fp8: x and w must be 16-byte aligned");
  Fp8GemvParams q = p;
  if (q.config < 0) q.config = gemv_fp8_default_config(p.N, p.K);
  return dispatch_dtype(q.dtype, [&]<typename T>() { return launch_config<T>(q, stream); });
}

int gemv_fp8_default_config(int /*N*/, int /*K*/) {
  // 16 warps x 2 steps: the bytes per step and CTA of the 16-bit GEMV's default shape, its best
  // on every Llama shape. A fixed rule (no start-up timing), so every run computes the same sums.
  return 0;
}

int gemv_fp8_num_configs() {
  return kNumConfigs;
}

GemvConfigInfo gemv_fp8_config_info(int config) {
  if (config < 0 || config >= kNumConfigs) return {};
  return {kConfigs[config].warps, kConfigs[config].unroll, 0, true};
}

std::string gemv_fp8_config_name(int config) {
  if (config < 0 || config >= kNumConfigs) return "?";
  return std::to_string(kConfigs[config].warps) + "w x" + std::to_string(kConfigs[config].unroll);
}

}  // namespace rill::kernels
