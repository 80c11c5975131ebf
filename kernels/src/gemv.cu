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
// are added in a fixed order through shared memory. With the kSiluMul epilogue, rows g and g + 8
// of a tile are a gate row and its up row, so the lane holding both writes silu(gate) * up.
#include <algorithm>
#include <string>
#include <type_traits>

#include "attention_mma.cuh"
#include "dispatch.cuh"
#include "gemv_mma.cuh"
#include "launch.cuh"
#include "rill/kernels/gemv.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kRows = 16;  // rows of w per CTA (the mma's M)
constexpr int kMaxM = 8;   // the mma's N

// CTA shapes: warps splitting K, steps per warp per iteration, and where the weights wait
// between load and use. stages == 0: in registers, double-buffered (gemv_kernel); stages > 0: in
// a ring of that many iterations in shared memory, filled by cp.async (gemv_ring_kernel), which
// keeps stages - 1 iterations in flight without spending registers on them, and lets a CTA
// launched early under PDL stream that much of its tile while its predecessor finishes. Configs
// differ in speed only: the sums depend on `warps` alone (each warp adds its steps in order,
// then the warps' partials are added in warp order).
struct Config {
  int warps, unroll, stages;
  bool silu;  // a kSiluMul instance exists
};
constexpr Config kConfigs[] = {
    {16, 2, 0, true}, {32, 2, 0, true}, {8, 4, 0, false}, {4, 4, 0, false}, {16, 4, 0, false},
    {8, 2, 0, false}, {16, 1, 6, true}, {8, 1, 8, true},  {16, 1, 4, true}, {16, 1, 5, true},
    {32, 1, 3, true}, {32, 1, 2, true}, {16, 1, 3, true}};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
constexpr int kDeepConfig = 9;       // 16 warps x 1, cp.async ring of 5: GemvParams::deep_prologue
constexpr int kDeepWideConfig = 10;  // 32 warps x 1, ring of 3: the same for 32 warps x 2
static_assert(kConfigs[kDeepConfig].warps == kConfigs[0].warps && kConfigs[kDeepConfig].silu &&
              kConfigs[kDeepConfig].stages > 0);
static_assert(kConfigs[kDeepWideConfig].warps == kConfigs[1].warps &&
              kConfigs[kDeepWideConfig].silu && kConfigs[kDeepWideConfig].stages > 0);

/// Warp 0, lane (g, t): s[i] is the sum of x row m = 2t + (i & 1) and w row n0 + g (+ 8 for
/// i >= 2). Writes y (kStore) or silu(gate) * up (kSiluMul, see gemv.h).
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void epilogue(const float (&s)[4], void* __restrict__ y,
                                         const T* __restrict__ bias, int M, int N, bool y_f32,
                                         int n0, int g, int t) {
  store_lane_sums<T, EPI>(s, y, bias, M, N, y_f32, n0, 0, g, t);
}

/// This thread's place in its CTA's tile, as both kernels lay it out: warp `warp`, lane
/// (g = lane / 4, t = lane % 4) of the CTA owning w rows n0 .. n0 + 15, which reads w rows n0 + g
/// and n0 + g + 8 and x row g over `steps` steps of 4 16-byte chunks (`chunks` per row). Rows past
/// N are clamped (loaded, never stored) so that no load needs a row predicate; x rows past M are
/// zero columns of B (x_live false).
template <typename T>
struct LaneTile {
  int warp, g, t, n0, chunks, steps;
  const uint4 *w_lo, *w_hi, *x_row;
  bool x_live;
  __device__ __forceinline__ LaneTile(const T* x, const T* w, int M, int N, int K)
      : warp(threadIdx.x >> 5),
        g((threadIdx.x & 31) >> 2),
        t(threadIdx.x & 3),
        n0(blockIdx.x * kRows),
        chunks(K / kVec),
        steps((K / kVec + 3) / 4),
        w_lo(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g, N - 1)) * K)),
        w_hi(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K)),
        x_row(reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(g, M - 1)) * K)),
        x_live(g < M) {}
};

/// The W warps' accumulators added in warp order through `partial` ([W][4][32] floats of shared
/// memory), then the epilogue by warp 0. Every thread of the CTA calls it.
template <typename T, int W, GemvEpilogue EPI>
__device__ __forceinline__ void sum_warps_and_store(const float (&acc)[4], float (*partial)[4][32],
                                                    void* __restrict__ y,
                                                    const T* __restrict__ bias, int M, int N,
                                                    bool y_f32, int n0) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
  __syncthreads();
  if (warp != 0) return;
  float sum[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum[i] = partial[0][i][lane];
#pragma unroll
    for (int v = 1; v < W; ++v) sum[i] += partial[v][i][lane];
  }
  epilogue<T, EPI>(sum, y, bias, M, N, y_f32, n0, lane >> 2, lane & 3);
}

// grid (ceil(N / 16)), block W * 32. K % 8 == 0, x and w 16-byte aligned.
// Weights are double-buffered in registers: the loads of the next U steps are issued before the
// mmas of the current ones. The first loads are issued before pdl_wait(), overlapping the
// previous kernel's tail: weights never depend on it.
template <typename T, int W, int U, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32) gemv_kernel(const T* __restrict__ x,  // [M, K]
                                                      const T* __restrict__ w,  // [N, K]
                                                      void* __restrict__ y,     // see GemvEpilogue
                                                      const T* __restrict__ bias,  // kSiluMul
                                                      int M, int N, int K, bool y_f32) {
  __shared__ float partial[W][4][32];
  const LaneTile<T> L(x, w, M, N, K);
  const int warp = L.warp, t = L.t, chunks = L.chunks, steps = L.steps;
  const uint4 *w_lo = L.w_lo, *w_hi = L.w_hi, *x_row = L.x_row;
  const bool x_live = L.x_live;
  constexpr int kStride = W * U;  // steps per loop iteration of the CTA

  pdl_launch_dependents();
  uint4 lo[U], hi[U];
  load_w<W, U>(w_lo, w_hi, warp, t, chunks, lo, hi);
  pdl_wait();

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int s0 = warp; s0 < steps; s0 += kStride) {
    uint4 xv[U], next_lo[U], next_hi[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = (s0 + u * W) * 4 + t;
      xv[u] = make_uint4(0, 0, 0, 0);
      if (c < chunks && x_live) xv[u] = __ldg(x_row + c);
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

  sum_warps_and_store<T, W, EPI>(acc, partial, y, bias, M, N, y_f32, L.n0);
}

template <int W, int U, int S>
constexpr int ring_bytes() {
  return S * U * 2 * W * 32 * 16;
}

// gemv_kernel with the weights staged through a ring of S iterations in shared memory
// ([S][U][lo, hi][thread] 16-byte chunks): each thread copies its own chunks and reads back only
// those, so cp.async.wait_group orders it and no barrier is needed. S - 1 iterations are issued
// before pdl_wait(). Same steps in the same order as gemv_kernel with W warps: the same sums.
//
// Two CTAs per SM (launch bounds): left to itself the compiler takes 76 registers, which allows
// one, and Llama-2-7B batch 1 ran 0.1 ms slower (5.11 against 4.99 ms on the H100).
template <typename T, int W, int U, int S, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32, W <= 16 ? 2 : 1)
    gemv_ring_kernel(const T* __restrict__ x,  // [M, K]
                     const T* __restrict__ w,  // [N, K]
                     void* __restrict__ y, const T* __restrict__ bias, int M, int N, int K,
                     bool y_f32) {
  static_assert(ring_bytes<W, U, S>() >= W * 4 * 32 * sizeof(float), "ring holds the partials");
  extern __shared__ uint4 ring[];
  const LaneTile<T> L(x, w, M, N, K);
  const int warp = L.warp, t = L.t, chunks = L.chunks, steps = L.steps;
  const uint4 *w_lo = L.w_lo, *w_hi = L.w_hi, *x_row = L.x_row;
  const bool x_live = L.x_live;
  constexpr int kStride = W * U;
  constexpr int kSlot = U * 2 * W * 32;  // uint4 per ring slot
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) {
    copy_w<W, U>(mine + p * kSlot * 16, w_lo, w_hi, warp + p * kStride, t, chunks);
    attn::cp_async_commit();
  }
  pdl_wait();

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int slot = 0;  // the slot of iteration s0; the slot before it is refilled
  for (int s0 = warp; s0 < steps; s0 += kStride) {
    const int refill = slot == 0 ? S - 1 : slot - 1;
    copy_w<W, U>(mine + refill * kSlot * 16, w_lo, w_hi, s0 + (S - 1) * kStride, t, chunks);
    attn::cp_async_commit();
    uint4 xv[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = (s0 + u * W) * 4 + t;
      xv[u] = make_uint4(0, 0, 0, 0);
      if (c < chunks && x_live) xv[u] = __ldg(x_row + c);
    }
    attn::cp_async_wait<S - 1>();
    const uint4* own = ring + slot * kSlot + threadIdx.x;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint4 lo = own[(2 * u) * W * 32], hi = own[(2 * u + 1) * W * 32];
      mma_16816<T>(acc, lo.x, hi.x, lo.y, hi.y, xv[u].x, xv[u].y);
      mma_16816<T>(acc, lo.z, hi.z, lo.w, hi.w, xv[u].z, xv[u].w);
    }
    slot = slot == S - 1 ? 0 : slot + 1;
  }

  attn::cp_async_wait<0>();  // the zero-filled copies past the end
  __syncthreads();
  float(*partial)[4][32] = reinterpret_cast<float(*)[4][32]>(ring);  // [W][4][32]
  sum_warps_and_store<T, W, EPI>(acc, partial, y, bias, M, N, y_f32, L.n0);
}

// Launches config C's kernel with epilogue EPI.
template <typename T, Config C, GemvEpilogue EPI>
cudaError_t launch_shape(const GemvParams& p, cudaStream_t stream) {
  const int blocks = (p.N + kRows - 1) / kRows;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  const T* bias = static_cast<const T*>(p.bias);
  const bool y_f32 = EPI == GemvEpilogue::kStore && p.y_f32;
  if constexpr (C.stages == 0) {
    return launch_kernel(gemv_kernel<T, C.warps, C.unroll, EPI>, dim3(blocks), dim3(C.warps * 32),
                         0, stream, x, w, p.y, bias, p.M, p.N, p.K, y_f32);
  } else {
    const auto kernel = gemv_ring_kernel<T, C.warps, C.unroll, C.stages, EPI>;
    constexpr int kBytes = ring_bytes<C.warps, C.unroll, C.stages>();
    // Once per kernel and device (a thread per GPU under tensor parallelism), not per launch.
    if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kBytes);
        err != cudaSuccess)
      return err;
    return launch_kernel(kernel, dim3(blocks), dim3(C.warps * 32), kBytes, stream, x, w, p.y, bias,
                         p.M, p.N, p.K, y_f32);
  }
}

template <typename T, int I = 0>
cudaError_t launch_config(const GemvParams& p, cudaStream_t stream) {
  if constexpr (I == kNumConfigs) {
    return invalid_argument("gemv: unknown config " + std::to_string(p.config));
  } else {
    if (p.config != I) return launch_config<T, I + 1>(p, stream);
    constexpr Config c = kConfigs[I];
    if (p.epilogue == GemvEpilogue::kStore)
      return launch_shape<T, c, GemvEpilogue::kStore>(p, stream);
    if constexpr (c.silu) {
      return launch_shape<T, c, GemvEpilogue::kSiluMul>(p, stream);
    } else {
      return invalid_argument("gemv: config " + std::to_string(p.config) + " has no kSiluMul");
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
  if (p.epilogue == GemvEpilogue::kSiluMul) {
    if (p.N % 16 != 0)
      return invalid_argument("gemv: kSiluMul needs N % 16 == 0, N=" + std::to_string(p.N));
    if (p.y_f32) return invalid_argument("gemv: kSiluMul writes the dtype");
  } else if (p.epilogue != GemvEpilogue::kStore) {
    return invalid_argument("gemv: unknown epilogue");
  } else if (p.bias) {
    return invalid_argument("gemv: kStore takes no bias");
  }
  if (p.M == 0 || p.N == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.y) return invalid_argument("gemv: null pointer");
  if (!is_aligned16(p.x) || !is_aligned16(p.w))
    return invalid_argument("gemv: x and w must be 16-byte aligned");
  GemvParams q = p;
  if (q.config < 0) q.config = gemv_default_config(p.N, p.K, p.deep_prologue);
  return dispatch_dtype(q.dtype, [&]<typename T>() { return launch_config<T>(q, stream); });
}

int gemv_default_config(int N, int /*K*/, bool deep_prologue) {
  // Measured on H100 (rill-gemv-bench, docs/performance.md): with the L2::256B loads 16 warps x 2
  // steps is best or within 1% on every Llama shape (32 warps fell to 49-67% on the 7B down
  // projection); 128k-row LM heads gain ~1% from 32 warps. A fixed rule, not a start-up timing,
  // so that every run computes bit-identical results (the warps' partial sums are added in an
  // order that depends on the CTA shape). With deep_prologue the twin with the same warps that
  // stages through a cp.async ring: 5 deep for 16 warps, 3 for 32 (same sums).
  if (N >= 65536) return deep_prologue ? kDeepWideConfig : 1;
  return deep_prologue ? kDeepConfig : 0;
}

int gemv_ring_config(int warps, int stages) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (kConfigs[i].warps == warps && kConfigs[i].unroll == 1 && kConfigs[i].stages == stages)
      return i;
  return -1;
}

int gemv_num_configs() {
  return kNumConfigs;
}

GemvConfigInfo gemv_config_info(int config) {
  if (config < 0 || config >= kNumConfigs) return {};
  const Config& c = kConfigs[config];
  return {c.warps, c.unroll, c.stages, c.silu};
}

std::string gemv_config_name(int config) {
  if (config < 0 || config >= kNumConfigs) return "?";
  const Config& c = kConfigs[config];
  return std::to_string(c.warps) + "w x" + std::to_string(c.unroll) +
         (c.stages ? " ring" + std::to_string(c.stages) : "");
}

}  // namespace rill::kernels
