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
//
// Norms across kernels (Fp8NormOut / Fp8NormIn): a producing GEMV's warp 0 adds its rows to the
// residual stream, stores them times the norm's weight and leaves each row's sum of squares over
// its 16 rows (a butterfly over the lanes holding them); a consuming GEMV's warp m % W adds those
// sums for row m, and warp 0 multiplies the row's sums by 1 / rms before the epilogue. What they
// read of the previous kernel's output (the residual rows, the sums) is copied to shared memory
// by cp.async right after the PDL wait, so neither the CTA's start nor its epilogue waits a round
// trip for it. Fixed orders throughout: the same bits each run.
//
// Three kernels share that tile: gemv_fp8_kernel double-buffers the weights in registers;
// gemv_fp8_ring_kernel stages them through a cp.async ring in shared memory and issues several
// iterations before its PDL wait (Fp8GemvParams::deep_prologue), as gemv.cu's ring kernel does;
// gemv_fp8_persistent_kernel is that ring in CTAs that loop over tiles (the deep prologue's
// shape).
#include <string>
#include <type_traits>

#include "attention_mma.cuh"
#include "dispatch.cuh"
#include "gemv_mma.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "rill/kernels/gemv_fp8.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

constexpr int kRows = 16;              // rows of w per CTA (the mma's M)
constexpr int kChunk = 16;             // e4m3 per 16-byte load
constexpr int kStepCols = 4 * kChunk;  // columns one warp covers per step
static_assert(kFp8ScaleBlock % kStepCols == 0, "a step stays inside one scale block");

// CTA shapes: warps splitting K, steps per warp per iteration, and where the weights wait
// between load and use: stages == 0 in registers (gemv_fp8_kernel), stages > 0 in a shared-memory
// ring of that many iterations (gemv_fp8_ring_kernel). The sums depend on `warps` only.
struct Config {
  int warps, unroll, stages;
  int persistent = 0;  // > 0: gemv_fp8_persistent_kernel, this many CTAs an SM (stages > 1)
};
// 16 x 2 moves as many bytes per step as the 16-bit GEMV's default (64 per row per warp). The
// rings are its twins (16 warps, the same sums) at depths 3 .. 6: 16 KB a slot, so up to 96 KB,
// two CTAs an SM; then the persistent rings of 3 and 4, two CTAs an SM.
constexpr Config kConfigs[] = {{16, 2, 0},    {8, 2, 0},  {8, 4, 0},  {16, 1, 0},
                               {32, 1, 0},    {4, 4, 0},  {16, 1, 4}, {16, 1, 3},
                               {16, 1, 5},    {16, 1, 6}, {16, 1, 3, 2}, {16, 1, 4, 2}};
// Fp8NormOut's staged rows and weights a persistent CTA may take (else its ring twin runs).
constexpr int kPersistentNormOutMaxBytes = 16 * 1024;
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
// Fp8GemvParams::deep_prologue's shape: the persistent ring of 3, 16 warps (the sums of the
// default shape). H100, 515 cached, every decode projection, against the ring of 4 it replaced:
// 7B 2.852 / 3.028 ms at 1 token, 3.712 / 4.072 at 8, 5.228 / 5.336 at 16 (docs/performance.md
// F19).
constexpr int kDeepConfig = 10;
static_assert(kConfigs[kDeepConfig].warps == kConfigs[0].warps && kConfigs[kDeepConfig].stages > 0 &&
              kConfigs[kDeepConfig].persistent > 0);

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

/// Fp8NormOut and Fp8NormIn as the kernels take them (null pointers: off).
template <typename T>
struct NormArgs {
  float* residual;
  const T* weight;
  float* out_sumsq;  // [M, gridDim.x]
  const float* in_sumsq;  // [M, K / kRows]
  float eps;
};

/// Where a CTA keeps the norms' inputs (shared memory): Fp8NormOut's residual rows [M][16] and
/// norm weight [16] of its 16 rows; Fp8NormIn's sums [M][K / 16] and the rows' 1 / rms.
template <typename T>
struct NormStage {
  float* res;    // static [kFp8GemvMaxRows * kRows]
  T* gamma;      // static [kRows], 16-byte aligned
  float* parts;  // dynamic [M * K / kRows]
  float* rs;     // static [kFp8GemvMaxRows]
};

__device__ __forceinline__ void cp_async4(uint32_t dst, const float* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}

/// Issues the copies of the norms' inputs into `st`, right after pdl_wait() (the previous kernel
/// wrote them). Uncommitted: they join the thread's next cp.async group; the kernels commit and
/// wait for everything before their final barrier.
template <typename T>
__device__ __forceinline__ void stage_norm_inputs(const NormArgs<T>& nrm, const NormStage<T>& st,
                                                  int M, int N, int K, int n0) {
  const int tid = threadIdx.x;
  if (nrm.residual) {
    if (tid < 4 * M) {  // 4 x 16 bytes of each residual row
      const int m = tid >> 2, q = tid & 3;
      attn::cp_async16(attn::smem_addr(st.res + m * kRows + 4 * q),
                       nrm.residual + static_cast<int64_t>(m) * N + n0 + 4 * q, true);
    } else if (tid < 4 * M + 2) {  // 2 x 16 bytes of the weight
      const int q = tid - 4 * M;
      attn::cp_async16(attn::smem_addr(st.gamma + 8 * q), nrm.weight + n0 + 8 * q, true);
    }
  }
  if (nrm.in_sumsq) {
    const int count = M * (K / kRows);
    if (count % 4 == 0 && (reinterpret_cast<uintptr_t>(nrm.in_sumsq) & 15) == 0) {
      for (int i = 4 * tid; i < count; i += 4 * blockDim.x)  // 16 bytes a copy
        attn::cp_async16(attn::smem_addr(st.parts + i), nrm.in_sumsq + i, true);
    } else {
      for (int i = tid; i < count; i += blockDim.x)
        cp_async4(attn::smem_addr(st.parts + i), nrm.in_sumsq + i);
    }
  }
}

/// Fp8NormIn: rs[m] = 1 / rms of x row m (m < M) from the staged sums, by warp m % W: lane l
/// adds sums l, l + 32, ... in order, then a butterfly. After the barrier that follows the
/// copies; warp 0 reads rs after the next one.
template <typename T, int W>
__device__ __forceinline__ void norm_in_factors(const NormArgs<T>& nrm, const NormStage<T>& st,
                                                int M, int K) {
  if (!nrm.in_sumsq) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, parts = K / kRows;
  for (int m = warp; m < M; m += W) {
    float ss = 0.0f;
    for (int i = lane; i < parts; i += 32) ss += st.parts[m * parts + i];
    ss = warp_reduce(ss, Sum{});
    if (lane == 0) st.rs[m] = rsqrtf(ss / static_cast<float>(K) + nrm.eps);
  }
}

/// Fp8NormOut's epilogue, warp 0, lane (g, t), x tile mt (s as store_tile's): the residual add,
/// y = dtype(residual * weight), and the rows' sums of squares over the CTA's 16 rows.
template <typename T>
__device__ __forceinline__ void store_norm_out(const float (&s)[4], T* __restrict__ y,
                                               const NormArgs<T>& nrm, const NormStage<T>& st,
                                               int M, int N, int n0, int g, int t, int mt) {
  float ss[2] = {0.0f, 0.0f};  // x rows 8 mt + 2t and + 1
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = 8 * mt + 2 * t + (i & 1), n = n0 + g + (i >= 2 ? 8 : 0);
    if (m < M && n < N) {
      const int64_t at = static_cast<int64_t>(m) * N + n;
      const float r = st.res[m * kRows + n - n0] + to_float<T>(from_float<T>(s[i]));
      nrm.residual[at] = r;
      y[at] = from_float<T>(r * to_float<T>(st.gamma[n - n0]));
      ss[i & 1] += r * r;
    }
  }
#pragma unroll
  for (int o = 4; o < 32; o <<= 1) {  // over g: the lanes of the other 14 rows
    ss[0] += shfl_xor(ss[0], o);
    ss[1] += shfl_xor(ss[1], o);
  }
  if (g == 0) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int m = 8 * mt + 2 * t + j;
      if (m < M) nrm.out_sumsq[static_cast<int64_t>(m) * (N / kRows) + n0 / kRows] = ss[j];
    }
  }
}

/// Warp 0, lane (g, t), x tile mt: s[i] is the sum of x row m = 8 mt + 2t + (i & 1) and w row
/// n0 + g (+ 8 for i >= 2), already scaled. Writes y (kStore) or silu(gate) * up (kSiluMul).
template <typename T, GemvEpilogue EPI>
__device__ __forceinline__ void store_tile(const float (&s)[4], void* __restrict__ y,
                                           const T* __restrict__ bias, const NormArgs<T>& nrm,
                                           const NormStage<T>& st, int M, int N, bool y_f32, int n0,
                                           int g, int t, int mt) {
  if constexpr (EPI == GemvEpilogue::kStore) {
    if (nrm.residual) {
      store_norm_out<T>(s, static_cast<T*>(y), nrm, st, M, N, n0, g, t, mt);
      return;
    }
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

/// This thread's place in its CTA's tile, as both kernels lay it out: warp `warp`, lane
/// (g = lane / 4, t = lane % 4) of the CTA owning w rows n0 .. n0 + 15, which reads w rows n0 + g
/// and n0 + g + 8 (r_lo, r_hi) and x rows 8 mt + g over `steps` steps of 4 16-byte chunks
/// (`chunks` per row). Rows past N are clamped (loaded, never stored), x rows past M are zero
/// columns of B (x_live false).
template <typename T, int MT>
struct LaneTile {
  int warp, g, t, n0, chunks, steps, r_lo, r_hi;
  const uint4 *w_lo, *w_hi, *x_row[MT];
  bool x_live[MT];
  __device__ __forceinline__ LaneTile(const T* x, const uint8_t* w, int M, int N, int K)
      : LaneTile(x, w, M, N, K, blockIdx.x * kRows) {}
  __device__ __forceinline__ LaneTile(const T* x, const uint8_t* w, int M, int N, int K, int row0)
      : warp(threadIdx.x >> 5),
        g((threadIdx.x & 31) >> 2),
        t(threadIdx.x & 3),
        n0(row0),
        chunks(K / kChunk),
        steps((K / kChunk + 3) / 4),
        r_lo(min(n0 + g, N - 1)),
        r_hi(min(n0 + g + 8, N - 1)),
        w_lo(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(r_lo) * K)),
        w_hi(reinterpret_cast<const uint4*>(w + static_cast<int64_t>(r_hi) * K)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int m = 8 * mt + g;
      x_live[mt] = m < M;
      x_row[mt] = reinterpret_cast<const uint4*>(x + static_cast<int64_t>(min(m, M - 1)) * K);
    }
  }
};

/// Step s's x chunks (zeros past the end of K and for dead rows) and, kBlock128, the scales of
/// rows r_lo and r_hi for its 128-column block (zeros past the last step).
template <typename T, int MT, bool BLOCK>
__device__ __forceinline__ void load_step(const LaneTile<T, MT>& L, const float* __restrict__ scale,
                                          int N, int s, uint4 (&xv)[MT][2], float (&sc)[2]) {
  const int c = s * 4 + L.t;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    xv[mt][0] = xv[mt][1] = make_uint4(0, 0, 0, 0);
    if (c < L.chunks && L.x_live[mt]) {
      xv[mt][0] = __ldg(L.x_row[mt] + 2 * c);
      xv[mt][1] = __ldg(L.x_row[mt] + 2 * c + 1);
    }
  }
  if constexpr (BLOCK) {
    const float* row = scale + static_cast<int64_t>(s * kStepCols / kFp8ScaleBlock) * N;
    sc[0] = s < L.steps ? __ldg(row + L.r_lo) : 0.0f;
    sc[1] = s < L.steps ? __ldg(row + L.r_hi) : 0.0f;
  }
}

/// acc += one step: the chunk's mmas straight into the sums (kPerRow), or into a zeroed tile that
/// is scaled by the step's block scales and then added (kBlock128).
template <typename T, int MT, bool BLOCK>
__device__ __forceinline__ void add_step(float (&acc)[MT][4], const uint4& lo, const uint4& hi,
                                         const uint4 (&xv)[MT][2], const float (&sc)[2]) {
  if constexpr (BLOCK) {
    float step[MT][4] = {};
    mma_chunk<T, MT>(step, lo, hi, xv);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][i] += step[mt][i] * sc[i >> 1];
  } else {
    mma_chunk<T, MT>(acc, lo, hi, xv);
  }
}

/// This warp's sums into its row of the partials ([W][MT][4][32] floats of shared memory).
template <int MT>
__device__ __forceinline__ void store_partials(float (*partial)[MT][4][32], int warp,
                                               const float (&acc)[MT][4]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][mt][i][lane] = acc[mt][i];
}

/// Warp 0's part of sum_warps_and_store: the partials of the W warps in warp order, the row
/// scales and 1 / rms, then the epilogue.
template <typename T, int W, int MT, bool BLOCK, GemvEpilogue EPI>
__device__ __forceinline__ void reduce_and_store(const LaneTile<T, MT>& L,
                                                 const float (*partial)[MT][4][32],
                                                 const float* __restrict__ scale,
                                                 void* __restrict__ y, const T* __restrict__ bias,
                                                 const NormArgs<T>& nrm, const NormStage<T>& st,
                                                 int M, int N, bool y_f32) {
  const int lane = threadIdx.x & 31;
  const float row_scale[2] = {BLOCK ? 1.0f : __ldg(scale + L.r_lo),
                              BLOCK ? 1.0f : __ldg(scale + L.r_hi)};
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float sum[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      sum[i] = partial[0][mt][i][lane];
#pragma unroll
      for (int v = 1; v < W; ++v) sum[i] += partial[v][mt][i][lane];
      sum[i] *= row_scale[i >> 1];
      const int m = 8 * mt + 2 * L.t + (i & 1);
      if (nrm.in_sumsq && m < M) sum[i] *= st.rs[m];
    }
    store_tile<T, EPI>(sum, y, bias, nrm, st, M, N, y_f32, L.n0, L.g, L.t, mt);
  }
}

/// The W warps' sums added in warp order through `partial` ([W][MT][4][32] floats of shared
/// memory), the row scales (kPerRow) and Fp8NormIn's 1 / rms, then the epilogue by warp 0. Every
/// thread calls it, after a barrier that follows the norms' staged copies.
template <typename T, int W, int MT, bool BLOCK, GemvEpilogue EPI>
__device__ __forceinline__ void sum_warps_and_store(
    const LaneTile<T, MT>& L, const float (&acc)[MT][4], float (*partial)[MT][4][32],
    const float* __restrict__ scale, void* __restrict__ y, const T* __restrict__ bias,
    const NormArgs<T>& nrm, const NormStage<T>& st, int M, int N, int K, bool y_f32) {
  store_partials<MT>(partial, L.warp, acc);
  norm_in_factors<T, W>(nrm, st, M, K);
  __syncthreads();
  if (L.warp == 0)
    reduce_and_store<T, W, MT, BLOCK, EPI>(L, partial, scale, y, bias, nrm, st, M, N, y_f32);
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
                    void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm, int M,
                    int N, int K, bool y_f32) {
  __shared__ float partial[W][MT][4][32];
  __shared__ float res[kFp8GemvMaxRows * kRows], rs[kFp8GemvMaxRows];
  __shared__ __align__(16) T gamma[kRows];
  extern __shared__ __align__(16) float norm_parts[];  // Fp8NormIn's sums: M * K / 16 floats
  const NormStage<T> st{res, gamma, norm_parts, rs};
  const LaneTile<T, MT> L(x, w, M, N, K);
  constexpr int kStride = W * U;

  pdl_launch_dependents();
  uint4 lo[U], hi[U];
  load_w<W, U>(L.w_lo, L.w_hi, L.warp, L.t, L.chunks, lo, hi);
  pdl_wait();
  stage_norm_inputs<T>(nrm, st, M, N, K, L.n0);

  float acc[MT][4] = {};
  for (int s0 = L.warp; s0 < L.steps; s0 += kStride) {
    uint4 xv[U][MT][2];
    float sc[U][2];  // kBlock128: this step's scales of rows g and g + 8
#pragma unroll
    for (int u = 0; u < U; ++u) load_step<T, MT, BLOCK>(L, scale, N, s0 + u * W, xv[u], sc[u]);
    uint4 next_lo[U], next_hi[U];
    load_w<W, U>(L.w_lo, L.w_hi, s0 + kStride, L.t, L.chunks, next_lo, next_hi);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      add_step<T, MT, BLOCK>(acc, lo[u], hi[u], xv[u], sc[u]);
      lo[u] = next_lo[u];
      hi[u] = next_hi[u];
    }
  }

  if (nrm.residual || nrm.in_sumsq) {
    attn::cp_async_commit();
    attn::cp_async_wait<0>();
    __syncthreads();
  }
  sum_warps_and_store<T, W, MT, BLOCK, EPI>(L, acc, partial, scale, y, bias, nrm, st, M, N, K,
                                            y_f32);
}

template <int W, int U, int S>
constexpr int ring_bytes() {
  return S * U * 2 * W * 32 * 16;
}

// gemv_fp8_kernel with the weights staged through a ring of S iterations in shared memory
// ([S][U][lo, hi][thread] 16-byte chunks, 16 KB per step of 16 warps): each thread copies its own
// chunks and reads back only those, so cp.async.wait_group orders it and no barrier is needed.
// S - 1 iterations are issued before pdl_wait(), so a CTA launched early under PDL streams that
// much of its tile while its predecessor (attention, add + norm) still runs; the register kernel
// has only its first U steps in flight there. Same steps in the same order per warp as
// gemv_fp8_kernel with W warps (any U): the same sums, bit for bit.
//
// Two CTAs per SM for up to 16 warps, as gemv_ring_kernel (a ring of 4 x 16 KB plus the other
// CTA's fits the 228 KB of an H100 SM).
template <typename T, int W, int U, int S, int MT, bool BLOCK, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32, W <= 16 ? 2 : 1)
    gemv_fp8_ring_kernel(const T* __restrict__ x,          // [M, K]
                         const uint8_t* __restrict__ w,    // [N, K] e4m3
                         const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                         void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm,
                         int M, int N, int K, bool y_f32) {
  static_assert(ring_bytes<W, U, S>() >= W * MT * 4 * 32 * int(sizeof(float)),
                "the ring holds the partials");
  extern __shared__ uint4 ring[];  // then Fp8NormIn's sums: M * K / 16 floats
  __shared__ float res[kFp8GemvMaxRows * kRows], rs[kFp8GemvMaxRows];
  __shared__ __align__(16) T gamma[kRows];
  const NormStage<T> st{res, gamma, reinterpret_cast<float*>(ring + S * U * 2 * W * 32), rs};
  const LaneTile<T, MT> L(x, w, M, N, K);
  constexpr int kStride = W * U;
  constexpr int kSlot = U * 2 * W * 32;  // uint4 per ring slot
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) {
    copy_w<W, U>(mine + p * kSlot * 16, L.w_lo, L.w_hi, L.warp + p * kStride, L.t, L.chunks);
    attn::cp_async_commit();
  }
  pdl_wait();
  stage_norm_inputs<T>(nrm, st, M, N, K, L.n0);

  float acc[MT][4] = {};
  int slot = 0;  // the slot of iteration s0; the slot before it is refilled
  for (int s0 = L.warp; s0 < L.steps; s0 += kStride) {
    const int refill = slot == 0 ? S - 1 : slot - 1;
    copy_w<W, U>(mine + refill * kSlot * 16, L.w_lo, L.w_hi, s0 + (S - 1) * kStride, L.t, L.chunks);
    attn::cp_async_commit();
    uint4 xv[U][MT][2];
    float sc[U][2];
#pragma unroll
    for (int u = 0; u < U; ++u) load_step<T, MT, BLOCK>(L, scale, N, s0 + u * W, xv[u], sc[u]);
    attn::cp_async_wait<S - 1>();
    const uint4* own = ring + slot * kSlot + threadIdx.x;
#pragma unroll
    for (int u = 0; u < U; ++u)
      add_step<T, MT, BLOCK>(acc, own[(2 * u) * W * 32], own[(2 * u + 1) * W * 32], xv[u], sc[u]);
    slot = slot == S - 1 ? 0 : slot + 1;
  }

  attn::cp_async_commit();   // the norms' copies where no iteration ran
  attn::cp_async_wait<0>();  // the zero-filled copies past the end, the norms' inputs
  __syncthreads();           // every warp is done with the ring: it becomes the partials
  auto partial = reinterpret_cast<float(*)[MT][4][32]>(ring);  // [W][MT][4][32]
  sum_warps_and_store<T, W, MT, BLOCK, EPI>(L, acc, partial, scale, y, bias, nrm, st, M, N, K,
                                            y_f32);
}

// Fp8NormOut's inputs for the `tiles` tiles a persistent CTA owns (tile i of them at w row
// 16 (blockIdx.x + i G)): residual rows [i][M][16] in st.res, weights [i][16] in st.gamma; and
// Fp8NormIn's sums as stage_norm_inputs. Right after pdl_wait(); uncommitted, as there.
template <typename T>
__device__ __forceinline__ void stage_norm_inputs_tiles(const NormArgs<T>& nrm,
                                                        const NormStage<T>& st, int M, int N,
                                                        int K, int tiles) {
  if (nrm.residual) {
    const int per_tile = 4 * M + 2;  // 16-byte copies: 4 a residual row, 2 of the weight
    for (int i = threadIdx.x; i < tiles * per_tile; i += blockDim.x) {
      const int ti = i / per_tile, c = i % per_tile;
      const int n0 = (blockIdx.x + ti * gridDim.x) * kRows;
      if (c < 4 * M) {
        const int m = c >> 2, q = c & 3;
        attn::cp_async16(attn::smem_addr(st.res + (ti * M + m) * kRows + 4 * q),
                         nrm.residual + static_cast<int64_t>(m) * N + n0 + 4 * q, true);
      } else {
        const int q = c - 4 * M;
        attn::cp_async16(attn::smem_addr(st.gamma + ti * kRows + 8 * q), nrm.weight + n0 + 8 * q,
                         true);
      }
    }
  }
  NormArgs<T> in_only = nrm;
  in_only.residual = nullptr;
  stage_norm_inputs<T>(in_only, st, M, N, K, 0);
}

// gemv_fp8_ring_kernel made persistent: a grid of at most P CTAs an SM (persistent_grid), CTA b
// computing the 16-row tiles b, b + G, b + 2G, ... one after another while its cp.async ring
// streams on across the tiles, so an SM's weight stream does not stop for a CTA to end and the
// next to start (the ring kernel runs 3 to 5 such waves of short CTAs on the 7B's qkv and
// gate|up), and every CTA ends at about the same time. The x chunks (and block scales) are loaded
// one iteration ahead, across tiles too, so no iteration waits an L2 round trip for them. Warp w
// takes steps w, w + W, ... of every tile in that order (n_w iterations a tile): the sums of the
// register kernel with W warps, bit for bit.
// The warps' partial sums go through a second, double-buffered area (the ring keeps streaming
// meanwhile): one barrier a tile, after which warp 0 writes the tile while the others go on.
// One CTA an SM (16 warps) ran at 55% of copy against 87% for two (docs/performance.md F19).
//
// Shared memory: the ring [S][2][W * 32] uint4, the partials [2][W][MT][4][32] floats, then the
// norms' inputs (Fp8NormIn's sums [M][K / 16], Fp8NormOut's rows [tiles][M][16] and weights
// [tiles][16]).
template <typename T, int W, int S, int P, int MT, bool BLOCK, GemvEpilogue EPI>
__global__ void __launch_bounds__(W * 32, P)
    gemv_fp8_persistent_kernel(const T* __restrict__ x,          // [M, K]
                               const uint8_t* __restrict__ w,    // [N, K] e4m3
                               const float* __restrict__ scale,  // [N] or [ceil(K / 128), N]
                               void* __restrict__ y, const T* __restrict__ bias, NormArgs<T> nrm,
                               int M, int N, int K, bool y_f32) {
  extern __shared__ uint4 ring[];
  constexpr int kSlot = 2 * W * 32;  // uint4 per ring slot (one step of every thread)
  constexpr int kPartialFloats = W * MT * 4 * 32;
  float* const partials = reinterpret_cast<float*>(ring + S * kSlot);  // [2][kPartialFloats]
  float* const norm_smem = partials + 2 * kPartialFloats;
  __shared__ float rs[kFp8GemvMaxRows];
  const int G = gridDim.x, tiles_total = (N + kRows - 1) / kRows;
  const int tiles = (tiles_total - static_cast<int>(blockIdx.x) + G - 1) / G;  // this CTA's
  const int warp = threadIdx.x >> 5, t = threadIdx.x & 3, g = (threadIdx.x & 31) >> 2;
  const int chunks = K / kChunk, steps = (chunks + 3) / 4;
  const int per_tile = warp < steps ? (steps - warp + W - 1) / W : 0;  // this warp's iterations
  // Fp8NormIn's sums (rounded up to 16 bytes), then Fp8NormOut's rows and weights.
  const int parts = nrm.in_sumsq ? (M * (K / kRows) + 3) / 4 * 4 : 0;
  float* const res = norm_smem + parts;
  const NormStage<T> st_all{res, reinterpret_cast<T*>(res + (nrm.residual ? tiles * M * kRows : 0)),
                            norm_smem, rs};
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);

  // The copy iterator: this warp's iteration `f_it` of tile `f_tile`, S - 1 ahead of the use.
  int f_tile = 0, f_it = 0;
  const auto fetch = [&](int slot) {
    if (per_tile > 0 && f_tile < tiles) {
      const int n0 = (blockIdx.x + f_tile * G) * kRows;
      const uint4* w_lo = reinterpret_cast<const uint4*>(
          w + static_cast<int64_t>(min(n0 + g, N - 1)) * K);
      const uint4* w_hi = reinterpret_cast<const uint4*>(
          w + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K);
      copy_w<W, 1>(mine + slot * kSlot * 16, w_lo, w_hi, warp + f_it * W, t, chunks);
      if (++f_it == per_tile) f_it = 0, ++f_tile;
    }
    attn::cp_async_commit();  // empty past the end: the group count stays in step
  };

  pdl_launch_dependents();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) fetch(p);
  pdl_wait();
  const bool norms = nrm.residual || nrm.in_sumsq;
  if (norms) {  // a group of its own, complete once S - 1 iterations have been waited for
    stage_norm_inputs_tiles<T>(nrm, st_all, M, N, K, tiles);
    attn::cp_async_commit();
  }

  int slot = 0;
  // The x chunks (and block scales) of the iteration about to run: loaded one iteration ahead,
  // across tiles too, so no iteration waits for them.
  uint4 xv[MT][2];
  float sc[2];
  if (per_tile > 0 && tiles > 0)
    load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, blockIdx.x * kRows), scale, N, warp,
                            xv, sc);
  for (int ti = 0; ti < tiles; ++ti) {
    const LaneTile<T, MT> L(x, w, M, N, K, (blockIdx.x + ti * G) * kRows);
    float acc[MT][4] = {};
    for (int it = 0; it < per_tile; ++it) {
      fetch(slot == 0 ? S - 1 : slot - 1);
      uint4 xn[MT][2];
      float sn[2];
      if (it + 1 < per_tile) {
        load_step<T, MT, BLOCK>(L, scale, N, warp + (it + 1) * W, xn, sn);
      } else if (ti + 1 < tiles) {
        load_step<T, MT, BLOCK>(LaneTile<T, MT>(x, w, M, N, K, (blockIdx.x + (ti + 1) * G) * kRows),
                                scale, N, warp, xn, sn);
      }
      attn::cp_async_wait<S - 1>();
      const uint4* own = ring + slot * kSlot + threadIdx.x;
      add_step<T, MT, BLOCK>(acc, own[0], own[W * 32], xv, sc);
      slot = slot == S - 1 ? 0 : slot + 1;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) xv[mt][0] = xn[mt][0], xv[mt][1] = xn[mt][1];
      sc[0] = sn[0], sc[1] = sn[1];
    }
    float(*partial)[MT][4][32] =
        reinterpret_cast<float(*)[MT][4][32]>(partials + (ti & 1) * kPartialFloats);
    store_partials<MT>(partial, warp, acc);
    if (ti == 0 && norms) {
      // The norms' group is done once S - 1 iterations were waited for; else wait for it here.
      if (per_tile < S - 1) attn::cp_async_wait<0>();
      __syncthreads();  // every thread's staged copies are visible
      norm_in_factors<T, W>(nrm, st_all, M, K);
    }
    __syncthreads();  // the partials (and rs) of tile ti; the other buffer is free again
    if (warp == 0) {
      NormStage<T> st = st_all;
      st.res += ti * M * kRows;
      st.gamma += ti * kRows;
      reduce_and_store<T, W, MT, BLOCK, EPI>(L, partial, scale, y, bias, nrm, st, M, N, y_f32);
    }
  }
  attn::cp_async_wait<0>();  // nothing in flight into shared memory at exit
}

/// Tiles (16 rows each) per CTA and the grid of the persistent kernel for N rows on `sms` SMs:
/// the fewest tiles a CTA that fit the SMs, then the fewest CTAs for that (so the CTAs end
/// together).
inline int persistent_grid(int N, int sms) {
  const int tiles = (N + kRows - 1) / kRows;
  const int per = (tiles + sms - 1) / sms;
  return (tiles + per - 1) / per;
}

template <typename T, Config C, int MT, bool BLOCK, GemvEpilogue EPI>
cudaError_t launch_shape(const Fp8GemvParams& p, cudaStream_t stream) {
  const int blocks = (p.N + kRows - 1) / kRows;
  const T* x = static_cast<const T*>(p.x);
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  const T* bias = static_cast<const T*>(p.bias);
  const bool y_f32 = EPI == GemvEpilogue::kStore && p.y_f32;
  const NormArgs<T> nrm{p.norm_out.residual, static_cast<const T*>(p.norm_out.weight),
                        p.norm_out.sumsq, p.norm_in.sumsq, p.norm_in.eps};
  // Fp8NormIn's sums in dynamic shared memory (after the ring); the kernels may take up to
  // kFp8NormInMaxSums of them (one attribute value per kernel).
  const int norm_bytes = p.norm_in.sumsq ? p.M * (p.K / kRows) * 4 : 0;
  constexpr int kNormMaxBytes = kFp8NormInMaxSums * 4;
  if constexpr (C.persistent) {
    static_assert(C.unroll == 1 && C.stages > 1);
    int device = 0, sms = 0;
    if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
    if (cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        err != cudaSuccess)
      return err;
    const int grid = persistent_grid(p.N, sms * C.persistent);
    const int tiles = (blocks + grid - 1) / grid;  // the most a CTA takes
    const int out_bytes = p.norm_out.residual
                              ? tiles * (p.M * kRows * 4 + kRows * static_cast<int>(sizeof(T)))
                              : 0;
    if (out_bytes > kPersistentNormOutMaxBytes)  // the ring twin, the same sums
      return launch_shape<T, Config{C.warps, 1, C.stages}, MT, BLOCK, EPI>(p, stream);
    const auto kernel =
        gemv_fp8_persistent_kernel<T, C.warps, C.stages, C.persistent, MT, BLOCK, EPI>;
    constexpr int kBytes = ring_bytes<C.warps, 1, C.stages>() + 2 * C.warps * MT * 4 * 32 * 4;
    if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel),
                                             kBytes + kNormMaxBytes + 16 +
                                                 kPersistentNormOutMaxBytes);
        err != cudaSuccess)
      return err;
    const int parts_bytes = p.norm_in.sumsq ? (p.M * (p.K / kRows) + 3) / 4 * 16 : 0;
    return launch_kernel(kernel, dim3(grid), dim3(C.warps * 32), kBytes + parts_bytes + out_bytes,
                         stream, x, w, p.scale, p.y, bias, nrm, p.M, p.N, p.K, y_f32);
  } else if constexpr (C.stages == 0) {
    const auto kernel = gemv_fp8_kernel<T, C.warps, C.unroll, MT, BLOCK, EPI>;
    if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kNormMaxBytes);
        err != cudaSuccess)
      return err;
    return launch_kernel(kernel, dim3(blocks), dim3(C.warps * 32), norm_bytes, stream, x, w,
                         p.scale, p.y, bias, nrm, p.M, p.N, p.K, y_f32);
  } else {
    const auto kernel = gemv_fp8_ring_kernel<T, C.warps, C.unroll, C.stages, MT, BLOCK, EPI>;
    constexpr int kBytes = ring_bytes<C.warps, C.unroll, C.stages>();
    // Once per kernel and device (a thread per GPU under tensor parallelism), not per launch.
    if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel),
                                             kBytes + kNormMaxBytes);
        err != cudaSuccess)
      return err;
    return launch_kernel(kernel, dim3(blocks), dim3(C.warps * 32), kBytes + norm_bytes, stream, x,
                         w, p.scale, p.y, bias, nrm, p.M, p.N, p.K, y_f32);
  }
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
  if (p.norm_out.residual) {
    if (p.epilogue != GemvEpilogue::kStore || p.y_f32)
      return invalid_argument("gemv_fp8: norm_out needs kStore into the dtype");
    if (!p.norm_out.weight || !p.norm_out.sumsq)
      return invalid_argument("gemv_fp8: norm_out needs the norm's weight and sumsq");
    if (p.N % kRows != 0)
      return invalid_argument("gemv_fp8: norm_out needs N % 16 == 0, N=" + std::to_string(p.N));
    if (!is_aligned16(p.norm_out.residual) || !is_aligned16(p.norm_out.weight))
      return invalid_argument("gemv_fp8: norm_out's residual and weight must be 16-byte aligned");
  }
  if (p.norm_in.sumsq) {
    if (!(p.norm_in.eps >= 0.0f)) return invalid_argument("gemv_fp8: norm_in.eps must be >= 0");
    if (p.M * (p.K / kRows) > kFp8NormInMaxSums)
      return invalid_argument("gemv_fp8: norm_in takes M * K / 16 <= " +
                              std::to_string(kFp8NormInMaxSums));
  }
  if (p.M == 0 || p.N == 0) return cudaSuccess;
  if (!p.x || !p.w || !p.y || !p.scale) return invalid_argument("gemv_fp8: null pointer");
  if (!is_aligned16(p.x) || !is_aligned16(p.w))
    return invalid_argument("gemv_fp8: x and w must be 16-byte aligned");
  Fp8GemvParams q = p;
  if (q.config < 0) q.config = gemv_fp8_default_config(p.N, p.K, p.deep_prologue);
  return dispatch_dtype(q.dtype, [&]<typename T>() { return launch_config<T>(q, stream); });
}

int gemv_fp8_default_config(int /*N*/, int /*K*/, bool deep_prologue) {
  // 16 warps x 2 steps: the bytes per step and CTA of the 16-bit GEMV's default shape, its best
  // on every Llama shape. A fixed rule (no start-up timing), so every run computes the same sums;
  // deep_prologue takes a ring twin (16 warps: the same sums).
  return deep_prologue ? kDeepConfig : 0;
}

int gemv_fp8_ring_config(int warps, int stages) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (kConfigs[i].warps == warps && kConfigs[i].unroll == 1 && kConfigs[i].stages == stages &&
        !kConfigs[i].persistent)
      return i;
  return -1;
}

int gemv_fp8_num_configs() {
  return kNumConfigs;
}

GemvConfigInfo gemv_fp8_config_info(int config) {
  if (config < 0 || config >= kNumConfigs) return {};
  const Config& c = kConfigs[config];
  return {c.warps, c.unroll, c.stages, true};
}

std::string gemv_fp8_config_name(int config) {
  if (config < 0 || config >= kNumConfigs) return "?";
  const Config& c = kConfigs[config];
  return std::to_string(c.warps) + "w x" + std::to_string(c.unroll) +
         (c.stages ? " ring" + std::to_string(c.stages) : "") + (c.persistent ? " persistent" : "");
}

}  // namespace rill::kernels
