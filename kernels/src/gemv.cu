// Decode GEMV, y[m, n] = sum_k x[m, k] w[n, k] for M <= 8, at the memory bandwidth limit.
//
// The weight matrix is read exactly once, with 16-byte streaming loads; the products run on the
// tensor cores (mma.sync m16n8k16, fp32 accumulation) so that M = 8 costs no more than M = 1:
// the mma's n = 8 columns are the (up to) 8 rows of x, its 16 rows are 16 rows of w.
//
// Tile: a CTA of W warps owns 16 rows of w and splits K among its warps. In one "step" a warp
// covers 32 values of k: lane (g = lane / 4, t = lane % 4) loads 8 consecutive k (chunk 4s + t) of
// w rows g and g + 8 and of x row g. A dot product does not care in which order its k arrive,
// so each 16-byte chunk is fed to two mmas as it lies in registers: the mma's k slots
// {2t, 2t+1, 2t+8, 2t+9} take the chunk's elements {0, 1, 2, 3} (first mma) and {4, 5, 6, 7}
// (second), identically for the A (w) and B (x) fragments, which is all the product needs.
// The accumulator fragment then holds y[2t + {0, 1}][row g and g + 8]; the W warps' partial sums
// are added in a fixed order through shared memory, and warp 0 applies the epilogue: lane (g, t)
// holds rows g and g + 8 of the tile, which is what the fused epilogues need (a gate row and its
// up row; the tile's 16 rows for a sum of squares, reduced over g with three shuffles).
//
// Fused input (GemvNorm): after the dependency wait, warp m sums row m's partial sums of squares
// in a fixed order and leaves 1 / rms in shared memory; each lane then builds its 16-byte x chunk
// from 8 fp32 residual values and 8 norm weights instead of loading it.
#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dispatch.cuh"
#include "launch.cuh"
#include "rill/kernels/gemv.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kRows = 16;  // rows of w per CTA (the mma's M)
constexpr int kMaxM = 8;   // the mma's N

// CTA shapes (warps splitting K, steps per warp per iteration). Many warps with shallow
// unrolling measured best on H100: the loads in flight come from thread-level parallelism and
// the double buffer. Index 0 and 1 are the defaults (gemv_default_config); the others stay
// for rill-gemv-bench to compare against.
struct Config {
  int warps, unroll;
};
constexpr Config kConfigs[] = {{16, 2}, {32, 2}, {8, 4}, {4, 4}, {16, 4}, {8, 2}};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
constexpr int kFusedConfigs = 2;  // configs with the fused variants (norm input, epilogues)

// Streaming load of weights, read once: keep them out of L1 so x stays there.
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// c += A (16 x 16, row) * B (16 x 8, col), fp32 accumulators.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
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

/// Device view of GemvParams.
struct GemvArgs {
  const void* x;
  const void* w;
  void* y;
  const void* bias;
  float* ssq_out;
  const float* residual;  // the norm's input
  const void* norm_weight;
  const float* ssq;
  int ssq_parts;
  float eps;
  int M, N, K;
  bool y_f32;
};

/// 1 / rms of x row m (see GemvNorm), for m < M; warp m of the CTA computes it. The partial
/// sums are read 8 per lane at a time, all in flight together (one L2 round trip per 256 parts,
/// paid by every CTA before its first product), and added in a fixed order.
__device__ __forceinline__ float norm_inverse(const GemvArgs& a, int m, int lane) {
  const float* part = a.ssq + static_cast<int64_t>(m) * a.ssq_parts;
  constexpr int kBatch = 8;
  float s = 0.0f;
  for (int base = 0; base < a.ssq_parts; base += 32 * kBatch) {
    float v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * 32 + lane;
      v[j] = i < a.ssq_parts ? part[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) s += v[j];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return 1.0f / sqrtf(s / a.K + a.eps);
}

/// The 16-byte x chunk c (8 values of k) of an x row: loaded from x_row, or built from the
/// residual row res_row as RMSNorm(residual) * weight.
template <typename T, bool NORM>
__device__ __forceinline__ uint4 load_x(const uint4* x_row, const float4* res_row,
                                        const uint4* norm_weight, int c, float inv) {
  if constexpr (!NORM) {
    return __ldg(x_row + c);
  } else {
    const float4 lo = __ldg(res_row + 2 * c), hi = __ldg(res_row + 2 * c + 1);
    const uint4 wv = __ldg(norm_weight + c);
    const T* w = reinterpret_cast<const T*>(&wv);
    const float v[kVec] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
#pragma unroll
    for (int e = 0; e < kVec; ++e) o[e] = from_float<T>(v[e] * inv * to_float<T>(w[e]));
    return out;
  }
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));  // the activation kernel's formula
}

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

/// Warp 0, lane (g, t): s[i] is the sum of x row m = 2t + (i & 1) and w row n0 + g (+ 8 for
/// i >= 2), n0 = 16 * tile. Writes the output of the epilogue EPI.

template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void epilogue(const GemvArgs& a, const float (&s)[4], int tile, int g,
                                         int t) {
  const int n0 = tile * kRows;
  const T* bias = static_cast<const T*>(a.bias);
  if constexpr (EPI == GemvEpilogue::kStore) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
      if (m < a.M && n < a.N) {
        const int64_t at = static_cast<int64_t>(m) * a.N + n;
        if (a.y_f32) {
          static_cast<float*>(a.y)[at] = s[i];
        } else {
          static_cast<T*>(a.y)[at] = from_float<T>(s[i]);
        }
      }
    }
  } else if constexpr (EPI == GemvEpilogue::kAddResidual) {
    float sq[2] = {0.0f, 0.0f};  // per m = 2t, 2t + 1: this lane's rows' squares
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int m = 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
      if (m < a.M && n < a.N) {
        float* r = static_cast<float*>(a.y) + static_cast<int64_t>(m) * a.N + n;
        const float v =
            *r + (to_float<T>(from_float<T>(s[i])) + (bias ? to_float<T>(bias[n]) : 0.0f));
        *r = v;
        sq[i & 1] += v * v;
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // over g: lanes t, t + 4, ..., t + 28, in a fixed order
      sq[j] += __shfl_xor_sync(0xffffffffu, sq[j], 4);
      sq[j] += __shfl_xor_sync(0xffffffffu, sq[j], 8);
      sq[j] += __shfl_xor_sync(0xffffffffu, sq[j], 16);
    }
    if (g == 0) {
      const int parts = (a.N + 15) / 16;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        if (2 * t + j < a.M) a.ssq_out[static_cast<int64_t>(2 * t + j) * parts + tile] = sq[j];
    }
  } else {  // kSiluMul: rows n0 + g (gate) and n0 + 8 + g (up) -> output 8 * tile + g
    const int half = a.N / 2;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 2 * t + j;
      if (m < a.M) {
        float gate = to_float<T>(from_float<T>(s[j])), up = to_float<T>(from_float<T>(s[j + 2]));
        if (bias) gate += to_float<T>(bias[n0 + g]), up += to_float<T>(bias[n0 + 8 + g]);
        static_cast<T*>(a.y)[static_cast<int64_t>(m) * half + tile * 8 + g] =
            from_float<T>(silu(gate) * up);
      }
    }
  }
}

// grid (ceil(N / 16)), block W * 32. K % 8 == 0, x and w 16-byte aligned.
// Weights are double-buffered in registers: the loads of the next U steps are issued before the
// mmas of the current ones. The first loads are issued before pdl_wait(), overlapping the
// previous kernel's tail: weights never depend on it.
template <typename T, int W, int U, bool NORM, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32) gemv_kernel(const GemvArgs a) {
  __shared__ float partial[W][4][32];
  __shared__ float inv_rms[kMaxM];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int N = a.N, K = a.K;
  const int tiles = (N + kRows - 1) / kRows;
  // Rows past N are clamped (loaded, never stored) so that no load needs a row predicate.
  const T* w = static_cast<const T*>(a.w);
  const uint4 *w_lo, *w_hi;
  auto select_rows = [&](int tile) {
    const int n0 = tile * kRows;
    w_lo = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
    w_hi = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K);
  };
  const int64_t x_row = min(g, a.M - 1);
  const bool x_live = g < a.M;  // x rows past M are zero columns of B
  const uint4* x_vec = NORM ? nullptr : static_cast<const uint4*>(a.x) + x_row * K / kVec;
  const float4* res_vec = NORM ? reinterpret_cast<const float4*>(a.residual + x_row * K) : nullptr;
  const uint4* norm_weight = static_cast<const uint4*>(a.norm_weight);
  const int chunks = K / kVec;
  const int steps = (chunks + 3) / 4;
  constexpr int kStride = W * U;  // steps per loop iteration of the CTA

  int tile = blockIdx.x;
  select_rows(tile);
  pdl_launch_dependents();
  uint4 lo[U], hi[U];
  load_w<W, U>(w_lo, w_hi, warp, t, chunks, lo, hi);
  pdl_wait();

  float inv = 1.0f;
  if constexpr (NORM) {
    static_assert(W >= kMaxM, "one warp per x row");
    if (warp < a.M) {
      const float v = norm_inverse(a, warp, lane);
      if (lane == 0) inv_rms[warp] = v;
    }
    __syncthreads();
    inv = inv_rms[x_row];
  }

  // One tile per CTA, or (a grid smaller than the tiles) several in turn: then the prologue
  // above is paid once per CTA, and each tile's first weights load during the previous tile's
  // reduction.
  for (;;) {
    const int n0 = tile * kRows;
    // kAddResidual: pull warp 0's residual values into L1 now (no registers held, which would
    // cost occupancy), so that the epilogue's read does not wait on L2.
    if constexpr (EPI == GemvEpilogue::kAddResidual) {
      if (warp == 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int m = 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
          if (m < a.M && n < N)
            prefetch_l1(static_cast<const float*>(a.y) + static_cast<int64_t>(m) * N + n);
        }
      }
    }

    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = warp; s0 < steps; s0 += kStride) {
      uint4 xv[U], next_lo[U], next_hi[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = (s0 + u * W) * 4 + t;
        xv[u] = make_uint4(0, 0, 0, 0);
        if (c < chunks && x_live) xv[u] = load_x<T, NORM>(x_vec, res_vec, norm_weight, c, inv);
      }
      load_w<W, U>(w_lo, w_hi, s0 + kStride, t, chunks, next_lo, next_hi);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        mma_16816<T>(acc, lo[u].x, hi[u].x, lo[u].y, hi[u].y, xv[u].x, xv[u].y);
        mma_16816<T>(acc, lo[u].z, hi[u].z, lo[u].w, hi[u].w, xv[u].z, xv[u].w);
        lo[u] = next_lo[u];
        hi[u] = next_hi[u];
      }
    }
    const int next = NORM ? tile + gridDim.x : tiles;  // plain GEMVs: one tile per CTA
    if (next < tiles) {
      select_rows(next);
      load_w<W, U>(w_lo, w_hi, warp, t, chunks, lo, hi);
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
    __syncthreads();
    if (warp == 0) {
      float sum[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        sum[i] = partial[0][i][lane];
#pragma unroll
        for (int v = 1; v < W; ++v) sum[i] += partial[v][i][lane];
      }
      epilogue<T, EPI>(a, sum, tile, g, t);
    }
    if (next >= tiles) break;
    __syncthreads();  // `partial` is reused by the next tile
    tile = next;
  }
}

/// CTAs that fit on the device at once for `kernel` (blocks per SM x SMs), cached per kernel.
template <typename Kernel>
int resident_ctas(Kernel kernel, int threads) {
  static thread_local std::vector<std::pair<const void*, int>> cache;
  const void* key = reinterpret_cast<const void*>(kernel);
  for (const auto& [k, v] : cache)
    if (k == key) return v;
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess)
    return 0;  // unknown: one CTA per tile
  cache.emplace_back(key, sms * per_sm);
  return sms * per_sm;
}

// With a norm, every CTA first sums the partial sums of squares (an L2 round trip and a barrier
// before its first product): the grid is then capped at the CTAs resident at once, each looping
// over tiles, so that the prologue is paid once per CTA rather than once per 16 rows.
template <typename T, int W, int U, bool NORM, GemvEpilogue EPI>
cudaError_t launch_epilogue(const GemvParams& p, const GemvArgs& a, cudaStream_t stream) {
  auto kernel = gemv_kernel<T, W, U, NORM, EPI>;
  int ctas = (p.N + kRows - 1) / kRows;
  if constexpr (NORM) {
    const int resident = resident_ctas(kernel, W * 32);
    if (resident > 0) ctas = std::min(ctas, resident);
  }
  return launch_kernel(kernel, dim3(ctas), dim3(W * 32), 0, stream, a);
}

template <typename T, int W, int U, bool NORM>
cudaError_t launch_shape(const GemvParams& p, const GemvArgs& a, cudaStream_t stream) {
  switch (p.epilogue) {
    case GemvEpilogue::kStore:
      return launch_epilogue<T, W, U, NORM, GemvEpilogue::kStore>(p, a, stream);
    case GemvEpilogue::kAddResidual:
      return launch_epilogue<T, W, U, NORM, GemvEpilogue::kAddResidual>(p, a, stream);
    case GemvEpilogue::kSiluMul:
      return launch_epilogue<T, W, U, NORM, GemvEpilogue::kSiluMul>(p, a, stream);
  }
  return invalid_argument("gemv: unknown epilogue");
}

/// The plain GEMV in every CTA shape; the fused variants in the two default shapes only.
template <typename T, int I = 0>
cudaError_t launch_config(const GemvParams& p, const GemvArgs& a, cudaStream_t stream) {
  if constexpr (I == kNumConfigs) {
    return invalid_argument("gemv: unknown config " + std::to_string(p.config));
  } else {
    if (p.config != I) return launch_config<T, I + 1>(p, a, stream);
    constexpr Config c = kConfigs[I];
    const bool fused = p.norm.residual || p.epilogue != GemvEpilogue::kStore;
    if constexpr (I < kFusedConfigs) {
      if (p.norm.residual) return launch_shape<T, c.warps, c.unroll, true>(p, a, stream);
      return launch_shape<T, c.warps, c.unroll, false>(p, a, stream);
    } else {
      if (fused)
        return invalid_argument("gemv: fused variants exist for configs 0 and 1 only, not " +
                                std::to_string(p.config));
      return launch_kernel(gemv_kernel<T, c.warps, c.unroll, false, GemvEpilogue::kStore>,
                           dim3((p.N + kRows - 1) / kRows), dim3(c.warps * 32), 0, stream, a);
    }
  }
}

}  // namespace

cudaError_t launch_gemv(const GemvParams& p, cudaStream_t stream) {
  if (p.M < 0 || p.N < 0 || p.K < 0) return invalid_argument("gemv: negative size");
  if (p.M > kMaxM) return invalid_argument("gemv: M=" + std::to_string(p.M) + " > 8");
  if (p.K % kVec != 0)
    return invalid_argument("gemv: K=" + std::to_string(p.K) + " is not a multiple of 8");
  if (p.config < -1 || p.config >= kNumConfigs)
    return invalid_argument("gemv: unknown config " + std::to_string(p.config));
  const bool norm = p.norm.residual != nullptr;
  switch (p.epilogue) {
    case GemvEpilogue::kStore:
      if (p.bias) return invalid_argument("gemv: kStore takes no bias");
      break;
    case GemvEpilogue::kAddResidual:
      if (!p.ssq_out) return invalid_argument("gemv: kAddResidual needs ssq_out");
      if (p.y_f32) return invalid_argument("gemv: kAddResidual updates an fp32 residual");
      break;
    case GemvEpilogue::kSiluMul:
      if (p.N % 16 != 0)
        return invalid_argument("gemv: kSiluMul needs N % 16 == 0, N=" + std::to_string(p.N));
      if (p.y_f32) return invalid_argument("gemv: kSiluMul writes the dtype");
      break;
    default:
      return invalid_argument("gemv: unknown epilogue");
  }
  if (p.M == 0 || p.N == 0) return cudaSuccess;
  if ((!norm && !p.x) || !p.w || !p.y) return invalid_argument("gemv: null pointer");
  if (!is_aligned16(p.x) || !is_aligned16(p.w))
    return invalid_argument("gemv: x and w must be 16-byte aligned");
  if (norm) {
    if (!p.norm.weight || !p.norm.ssq || p.norm.ssq_parts <= 0)
      return invalid_argument("gemv: a norm needs its weight and partial sums of squares");
    if (!is_aligned16(p.norm.residual) || !is_aligned16(p.norm.weight))
      return invalid_argument("gemv: the norm's residual and weight must be 16-byte aligned");
  }
  GemvParams q = p;
  if (q.config < 0) q.config = gemv_default_config(p.N, p.K);
  const GemvArgs a{p.x,         p.w,           p.y,        p.bias,
                   p.ssq_out,   p.norm.residual, p.norm.weight, p.norm.ssq,
                   p.norm.ssq_parts, p.norm.eps, p.M,        p.N,
                   p.K,         p.y_f32};
  return dispatch_dtype(q.dtype, [&]<typename T>() { return launch_config<T>(q, a, stream); });
}

int gemv_default_config(int N, int K) {
  // Measured on H100 (rill-gemv-bench, docs/performance.md): 16 warps x 2 steps is best or
  // within 1% on every Llama shape; long rows (K >= 8192) and 128k-row LM heads gain 1-2% from
  // 32 warps. A fixed rule, not a start-up timing, so that every run computes bit-identical
  // results (the warps' partial sums are added in an order that depends on the CTA shape).
  return (K >= 8192 || N >= 65536) ? 1 : 0;
}

int gemv_ssq_parts(int N) {
  return (N + kRows - 1) / kRows;
}

int gemv_num_configs() {
  return kNumConfigs;
}

std::string gemv_config_name(int config) {
  if (config < 0 || config >= kNumConfigs) return "?";
  return std::to_string(kConfigs[config].warps) + "w x" + std::to_string(kConfigs[config].unroll);
}

}  // namespace rill::kernels
