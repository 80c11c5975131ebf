// Weight-only fp8 GEMV for decode, y[m, n] = sum_k x[m, k] w[n, k] scale(n, k), M <= 16.
//
// The layout of gemv.cu with e4m3 weights: a CTA of W warps owns 16 rows of w and splits K among
// its warps; in one step a warp covers 64 columns: lane (g = lane / 4, t = lane % 4) loads the
// 16-byte chunk 4s + t (16 weights) of w rows g and g + 8, and the same 16 columns of x rows g
// (and g + 8 for M > 8) as two 16-byte loads. Each chunk feeds four m16n8k16 mmas, four weights
// each: k slots {2t, 2t+1} take elements {4j, 4j+1} of the chunk and {2t+8, 2t+9} take
// {4j+2, 4j+3}, identically for w (A) and x (B), which is all a dot product needs.
//
// e4m3 -> 16-bit pairs (gemv_fp8_tile.cuh's e4m3x2): fp16 by one cvt.rn.f16x2.e4m3x2 a pair;
// bf16, which has no such instruction on Hopper (through fp32 it would take four a pair), by
// moving the sign and the 7 exponent+mantissa bits into place (prmt, shift, mask) and one
// half-precision multiply by a power of two for the exponent bias. Against the shift-and-mask
// form both dtypes took before (about six instructions a pair), 515 cached, batch 1: Llama-2-7B
// (fp16) 2.79 against 2.85 ms, Llama-3-8B (bf16) 3.25 against 3.30 (docs/performance.md F23).
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
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dispatch.cuh"
#include "gemv_fp8_persistent.cuh"
#include "gemv_fp8_tile.cuh"
#include "launch.cuh"
#include "rill/kernels/gemv_fp8.h"

namespace rill::kernels {
namespace {

using namespace fp8_gemv;  // NOLINT(google-build-using-namespace): this file's building blocks

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
static_assert(kConfigs[kDeepConfig].warps == kConfigs[0].warps &&
              kConfigs[kDeepConfig].stages > 0 && kConfigs[kDeepConfig].persistent > 0);

// Experiment knobs (branch only).
int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
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
    // x staged in shared memory when it is small enough and P CTAs an SM still fit (1 KB a CTA
    // is the system's).
    int smem_per_sm = 0;
    if (cudaError_t err = cudaDeviceGetAttribute(
            &smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
        err != cudaSuccess)
      return err;
    constexpr int kBytes = ring_bytes<C.warps, 1, C.stages>() + 2 * C.warps * MT * 4 * 32 * 4;
    const int parts_bytes = p.norm_in.sumsq ? (p.M * (p.K / kRows) + 3) / 4 * 16 : 0;
    const int x_bytes = p.M * p.K * static_cast<int>(sizeof(T));
    const bool xs =
        x_bytes <= kFp8GemvXStageMaxBytes &&
        C.persistent * (kBytes + x_bytes + parts_bytes + out_bytes + 1024) <= smem_per_sm;
    const auto kernel =
        xs ? gemv_fp8_persistent_kernel<T, C.warps, C.stages, C.persistent, MT, BLOCK, EPI, true>
           : gemv_fp8_persistent_kernel<T, C.warps, C.stages, C.persistent, MT, BLOCK, EPI, false>;
    if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel),
                                             kBytes + kFp8GemvXStageMaxBytes + kNormMaxBytes +
                                                 16 + kPersistentNormOutMaxBytes);
        err != cudaSuccess)
      return err;
    const int pad = p.norm_in.sumsq && EPI == GemvEpilogue::kStore ? env_int("RILL_QKV_PAD") : 0;
    return launch_kernel(kernel, dim3(grid), dim3(C.warps * 32),
                         kBytes + (xs ? x_bytes : 0) + parts_bytes + out_bytes + pad, stream, x, w,
                         p.scale, p.y, bias, nrm, p.M, p.N, p.K, y_f32);
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

cudaError_t check_params(const Fp8GemvParams& p) {
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
  return cudaSuccess;
}

// gemv_fp8_pair_kernel's grid and shared memory for `a` then `b`; `fused` false where they run
// as two kernels.
struct PairShape {
  bool fused = false;
  int g1 = 0, g2 = 0, smem = 0;
};

template <typename T, bool BLOCK>
cudaError_t pair_shape(const Fp8GemvParams& a, const Fp8GemvParams& b, PairShape& out) {
  constexpr Config C = kConfigs[kDeepConfig];
  out = {};
  int device = 0, sms = 0, smem_per_sm = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
      err != cudaSuccess)
    return err;
  if (cudaError_t err = cudaDeviceGetAttribute(
          &smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
      err != cudaSuccess)
    return err;
  // What persistent_gemv keeps past the ring and the partials (launch_shape's rule, x staged).
  const auto extra_bytes = [](const Fp8GemvParams& p, int grid) {
    const int tiles = ((p.N + kRows - 1) / kRows + grid - 1) / grid;
    const int out_bytes = p.norm_out.residual
                              ? tiles * (p.M * kRows * 4 + kRows * static_cast<int>(sizeof(T)))
                              : 0;
    const int x_bytes = p.M * p.K * static_cast<int>(sizeof(T));
    if (out_bytes > kPersistentNormOutMaxBytes || x_bytes > kFp8GemvXStageMaxBytes) return -1;
    const int parts_bytes = p.norm_in.sumsq ? (p.M * (p.K / kRows) + 3) / 4 * 16 : 0;
    return x_bytes + parts_bytes + out_bytes;
  };
  const int g1 = persistent_grid(a.N, sms * C.persistent);
  const int g2 = persistent_grid(b.N, sms * C.persistent);
  const int e1 = extra_bytes(a, g1), e2 = extra_bytes(b, g2);
  constexpr int kBytes = ring_bytes<C.warps, 1, C.stages>() + 2 * C.warps * 4 * 32 * 4;
  const int smem = kBytes + std::max(e1, e2);
  if (e1 < 0 || e2 < 0 || C.persistent * (smem + 1024) > smem_per_sm) return cudaSuccess;
  const auto kernel = gemv_fp8_pair_kernel<T, C.warps, C.stages, C.persistent, BLOCK>;
  if (cudaError_t err = allow_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
      err != cudaSuccess)
    return err;
  // Every CTA resident at once, or the barrier would wait for CTAs that cannot start.
  int per_sm = 0;
  if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel,
                                                                      C.warps * 32, smem);
      err != cudaSuccess)
    return err;
  if (per_sm * sms < std::max(g1, g2)) return cudaSuccess;
  out = {true, g1, g2, smem};
  return cudaSuccess;
}

// launch_gemv_fp8_pair past its checks: one pair kernel, or (dry_run) only whether it would run.
template <typename T>
cudaError_t launch_pair(const Fp8GemvParams& a, const Fp8GemvParams& b, void* barrier,
                        cudaStream_t stream, bool dry_run, bool& fused) {
  const auto go = [&]<bool BLOCK>() -> cudaError_t {
    PairShape shape;
    if (cudaError_t err = pair_shape<T, BLOCK>(a, b, shape); err != cudaSuccess) return err;
    fused = shape.fused;
    if (!fused || dry_run) return cudaSuccess;
    constexpr Config C = kConfigs[kDeepConfig];
    const auto args = [](const Fp8GemvParams& p) {
      const NormArgs<T> nrm{p.norm_out.residual, static_cast<const T*>(p.norm_out.weight),
                            p.norm_out.sumsq, p.norm_in.sumsq, p.norm_in.eps};
      return PersistentGemv<T>{static_cast<const T*>(p.x), static_cast<const uint8_t*>(p.w),
                               p.scale, p.y, nrm, p.M, p.N, p.K, p.y_f32};
    };
    return launch_kernel(gemv_fp8_pair_kernel<T, C.warps, C.stages, C.persistent, BLOCK>,
                         dim3(std::max(shape.g1, shape.g2)), dim3(C.warps * 32), shape.smem,
                         stream, args(a), shape.g1, args(b), shape.g2,
                         static_cast<GridBarrierState*>(barrier), env_int("RILL_PAIR_SPIN_NS"),
                         env_int("RILL_PAIR_ARRIVE_LATE"));
  };
  return a.scale_layout == Fp8ScaleLayout::kBlock128 ? go.template operator()<true>()
                                                     : go.template operator()<false>();
}

// Both checked and non-empty: whether the pair kernel may take them at all.
bool pair_applies(const Fp8GemvParams& a, const Fp8GemvParams& b, const void* barrier) {
  const auto deep = [](const Fp8GemvParams& p) {
    return (p.config < 0 ? gemv_fp8_default_config(p.N, p.K, p.deep_prologue) : p.config) ==
           kDeepConfig;
  };
  return barrier && (reinterpret_cast<uintptr_t>(barrier) & 7) == 0 && a.dtype == b.dtype &&
         a.scale_layout == b.scale_layout && a.epilogue == GemvEpilogue::kStore &&
         b.epilogue == GemvEpilogue::kStore && a.M <= 8 && b.M <= 8 && deep(a) && deep(b);
}

}  // namespace

cudaError_t launch_gemv_fp8(const Fp8GemvParams& p, cudaStream_t stream) {
  if (cudaError_t err = check_params(p); err != cudaSuccess || p.M == 0 || p.N == 0) return err;
  Fp8GemvParams q = p;
  if (q.config < 0) q.config = gemv_fp8_default_config(p.N, p.K, p.deep_prologue);
  return dispatch_dtype(q.dtype, [&]<typename T>() { return launch_config<T>(q, stream); });
}

cudaError_t launch_gemv_fp8_pair(const Fp8GemvParams& first, const Fp8GemvParams& second,
                                 void* barrier, cudaStream_t stream) {
  if (cudaError_t err = check_params(first); err != cudaSuccess) return err;
  if (cudaError_t err = check_params(second); err != cudaSuccess) return err;
  bool fused = false;
  if (first.M > 0 && first.N > 0 && second.M > 0 && second.N > 0 &&
      pair_applies(first, second, barrier))
    if (cudaError_t err = dispatch_dtype(first.dtype, [&]<typename T>() {
          return launch_pair<T>(first, second, barrier, stream, false, fused);
        });
        err != cudaSuccess || fused)
      return err;
  if (cudaError_t err = launch_gemv_fp8(first, stream); err != cudaSuccess) return err;
  return launch_gemv_fp8(second, stream);
}

bool gemv_fp8_pair_fuses(const Fp8GemvParams& first, const Fp8GemvParams& second,
                         const void* barrier) {
  if (check_params(first) != cudaSuccess || check_params(second) != cudaSuccess ||
      first.M == 0 || first.N == 0 || second.M == 0 || second.N == 0 ||
      !pair_applies(first, second, barrier))
    return false;
  bool fused = false;
  const cudaError_t err = dispatch_dtype(first.dtype, [&]<typename T>() {
    return launch_pair<T>(first, second, const_cast<void*>(barrier), nullptr, true, fused);
  });
  return err == cudaSuccess && fused;
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
