// Residual add of one sub-layer fused with the norm (RMS or LayerNorm) of the next.
//
// One CTA per token row. Each thread owns ITEMS chunks of 8 consecutive elements and keeps the
// updated fp32 residual of its chunks in registers, so the row is read once and the statistics
// are an exact two-pass computation (mean, then sum of squared deviations) without re-reading.
#include <algorithm>

#include "fp8.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "rill/kernels/elementwise.h"
#include "vec.cuh"

namespace rill::kernels {
namespace {

// 512 threads leave 128 registers per thread for the row held in registers.
constexpr int kMaxThreads = 512;
constexpr int kMaxItems = 4;  // hidden <= kMaxThreads * kMaxItems * kVec = 16384

// Loads chunk [base, base + 8) of an optional [hidden] or row-offset operand (0 when null or
// past the end), scalar when !VEC.
template <typename T, bool VEC>
__device__ __forceinline__ void load_chunk(const T* p, int base, int hidden, float (&f)[kVec]) {
  if constexpr (VEC) {
    if (base < hidden) {
      load8(p, f);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? to_float<T>(p[e]) : 0.0f;
}

template <bool VEC>
__device__ __forceinline__ void load_chunk_f32(const float* p, int base, int hidden,
                                               float (&f)[kVec]) {
  if constexpr (VEC) {
    if (base < hidden) {
      load8(p, f);
      return;
    }
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e) f[e] = base + e < hidden ? p[e] : 0.0f;
}

template <bool VEC>
__device__ __forceinline__ void store_chunk_f32(float* p, int base, int hidden,
                                                const float (&f)[kVec]) {
  if (VEC && base < hidden) {
    store8(p, f);
    return;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    if (base + e < hidden) p[e] = f[e];
}

// out[base..] = n * weight (+ norm_bias) for the chunk.
template <typename T, bool VEC>
__device__ __forceinline__ void store_norm(T* out, const T* weight, const T* norm_bias, int base,
                                           int hidden, const float (&n)[kVec]) {
  float w[kVec], b[kVec] = {};
  load_chunk<T, VEC>(weight + base, base, hidden, w);
  if (norm_bias) load_chunk<T, VEC>(norm_bias + base, base, hidden, b);
  float y[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) y[e] = n[e] * w[e] + b[e];
  if (VEC && base < hidden) {
    store8(out + base, y);
    return;
  }
#pragma unroll
  for (int e = 0; e < kVec; ++e)
    if (base + e < hidden) out[base + e] = from_float<T>(y[e]);
}

// The same (vector access only: AddNormParams::out0_fp8 needs hidden % 8 == 0), and `stored`
// gets the chunk as stored (T rounded back to float); out null: nothing is stored.
template <typename T>
__device__ __forceinline__ void store_norm_kept(T* out, const T* weight, const T* norm_bias,
                                                int base, int hidden, const float (&n)[kVec],
                                                float (&stored)[kVec]) {
  float w[kVec], b[kVec] = {};
  load_chunk<T, true>(weight + base, base, hidden, w);
  if (norm_bias) load_chunk<T, true>(norm_bias + base, base, hidden, b);
  uint4 u;
  T* h = reinterpret_cast<T*>(&u);
#pragma unroll
  for (int e = 0; e < kVec; ++e) {
    h[e] = from_float<T>(n[e] * w[e] + b[e]);
    stored[e] = to_float<T>(h[e]);
  }
  if (out) *reinterpret_cast<uint4*>(out + base) = u;
}

// r += delta[base..] (+ bias[base..]) for an optional delta.
template <typename T, bool VEC>
__device__ __forceinline__ void add_delta(const T* delta, const T* bias, int base, int hidden,
                                          float (&r)[kVec]) {
  if (!delta) return;
  float d[kVec], b[kVec] = {};
  load_chunk<T, VEC>(delta + base, base, hidden, d);
  if (bias) load_chunk<T, VEC>(bias + base, base, hidden, b);
#pragma unroll
  for (int e = 0; e < kVec; ++e) r[e] += d[e] + b[e];
}

// PeerSum's barrier (see elementwise.h): thread 0 of CTA b counts this launch, tells CTA b of
// every other rank, and waits until each of them has counted as many; then the CTA goes on.
// Release/acquire at system scope order the peers' earlier writes (their delta rows) before
// the reads that follow.
__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ void peer_barrier(const PeerSum& ps) {
  if (threadIdx.x == 0) {
    const int b = blockIdx.x;
    const uint32_t epoch = ps.epochs[b] + 1;
    ps.epochs[b] = epoch;
    for (int r = 0; r < ps.world; ++r)
      if (r != ps.rank) store_release_sys(ps.flags[r] + ps.rank * kMaxPeerCtas + b, epoch);
    for (int r = 0; r < ps.world; ++r) {
      if (r == ps.rank) continue;
      const uint32_t* arrived = ps.flags[ps.rank] + r * kMaxPeerCtas + b;
      // A peer is at most one launch ahead (it waits for this CTA at its next one): compare
      // modulo 2^32.
      for (uint32_t spins = 1; static_cast<int32_t>(load_acquire_sys(arrived) - epoch) < 0;
           ++spins)
        if (ps.abort && spins % 1024 == 0 && *static_cast<const volatile int*>(ps.abort)) break;
    }
  }
  __syncthreads();
}

// r += (the sum over ranks of their delta0 chunks [base, base + 8), in rank order) + bias. The
// chunks are read past the caches (other GPUs wrote them). Vector access only (hidden % 8 == 0,
// aligned buffers: launch_add_norm checks).
template <typename T>
__device__ __forceinline__ void add_peer_deltas(const PeerSum& ps, int64_t row_off,
                                                const T* bias, int base, int hidden,
                                                float (&r)[kVec]) {
  static_assert(sizeof(T) == 2);
  if (base >= hidden) return;
  float d[kVec] = {}, b[kVec] = {};
  for (int k = 0; k < ps.world; ++k) {
    const T* p = static_cast<const T*>(ps.delta0[k]) + row_off + base;
    const uint4 u = __ldcv(reinterpret_cast<const uint4*>(p));
    const T* h = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int e = 0; e < kVec; ++e) d[e] += to_float<T>(h[e]);
  }
  if (bias) load8(bias + base, b);
#pragma unroll
  for (int e = 0; e < kVec; ++e) r[e] += d[e] + b[e];
}

// One row of add_norm_kernel: output row i (residual row p.rows[i] or i).
template <typename T, bool VEC, int ITEMS, bool PEERS>
__device__ __forceinline__ void add_norm_row(const AddNormParams& p, int64_t i, float* scratch) {
  const int hidden = p.hidden;
  const int64_t row = p.rows ? p.rows[i] : i;
  float* residual = p.residual + row * hidden;  // [hidden]
  const int64_t row_off = row * hidden;  // residual and deltas by the gathered row; outputs by i
  const T* delta0 = p.delta0 ? static_cast<const T*>(p.delta0) + row_off : nullptr;  // [hidden]
  const T* delta1 = p.delta1 ? static_cast<const T*>(p.delta1) + row_off : nullptr;
  const T* bias0 = static_cast<const T*>(p.bias0);
  const T* bias1 = static_cast<const T*>(p.bias1);

  float r[ITEMS][kVec];
  float sum = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = (it * blockDim.x + threadIdx.x) * kVec;
    load_chunk_f32<VEC>(residual + base, base, hidden, r[it]);
    if constexpr (PEERS)
      add_peer_deltas<T>(p.peers, row_off, bias0, base, hidden, r[it]);
    else
      add_delta<T, VEC>(delta0, bias0, base, hidden, r[it]);
    add_delta<T, VEC>(delta1, bias1, base, hidden, r[it]);
    if (delta0 || delta1) store_chunk_f32<VEC>(residual + base, base, hidden, r[it]);
#pragma unroll
    for (int e = 0; e < kVec; ++e) sum += r[it][e];  // elements past the end are 0
  }

  // Statistics in fp32: mean (LayerNorm only), then the mean square about it.
  const bool layer = p.type == NormType::kLayer;
  const float mean = layer ? block_sum(sum, scratch) / hidden : 0.0f;
  float sq = 0.0f;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = (it * blockDim.x + threadIdx.x) * kVec;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float d = base + e < hidden ? r[it][e] - mean : 0.0f;
      sq += d * d;
    }
  }
  const float inv = 1.0f / sqrtf(block_sum(sq, scratch) / hidden + p.eps);

  const int64_t off = i * hidden;
  T* out0 = p.out0 ? static_cast<T*>(p.out0) + off : nullptr;  // null: e4m3 only (out0_fp8)
  T* out1 = p.out1 ? static_cast<T*>(p.out1) + off : nullptr;
  float amax = 0.0f;  // of out0's row as stored (p.out0_fp8)
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = (it * blockDim.x + threadIdx.x) * kVec;
    if (base >= hidden) break;
    float n[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) n[e] = (r[it][e] - mean) * inv;
    if (VEC && p.out0_fp8) {  // out0's chunk as stored stays in r for the quantization below
      float y[kVec];
      store_norm_kept<T>(out0, static_cast<const T*>(p.weight0),
                         static_cast<const T*>(p.norm_bias0), base, hidden, n, y);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        r[it][e] = y[e];
        amax = fmaxf(amax, fabsf(y[e]));
      }
    } else {
      store_norm<T, VEC>(out0, static_cast<const T*>(p.weight0),
                         static_cast<const T*>(p.norm_bias0), base, hidden, n);
    }
    if (out1)
      store_norm<T, VEC>(out1, static_cast<const T*>(p.weight1),
                         static_cast<const T*>(p.norm_bias1), base, hidden, n);
  }
  if (!VEC || !p.out0_fp8) return;
  const float scale = act_scale_fp8(block_reduce(amax, Max{}, 0.0f, scratch));
  if (threadIdx.x == 0) p.out0_scales[i] = scale;
#pragma unroll
  for (int it = 0; it < ITEMS; ++it) {
    const int base = (it * blockDim.x + threadIdx.x) * kVec;
    if (base >= hidden) break;
    *reinterpret_cast<uint2*>(p.out0_fp8 + off + base) = quantize8_fp8(r[it], scale);
  }
}

// grid (num_tokens; with PEERS min(num_tokens, p.peers.ctas)), block: a multiple of 32 threads
// with blockDim * ITEMS * 8 >= hidden. VEC: every row and vector is 16-byte aligned (hidden % 8
// == 0, aligned pointers). PEERS: p.peers is on (VEC only).
template <typename T, bool VEC, int ITEMS, bool PEERS = false>
__global__ void __launch_bounds__(kMaxThreads) add_norm_kernel(AddNormParams p) {
  static_assert(VEC || !PEERS);
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
  if constexpr (!PEERS) {
    add_norm_row<T, VEC, ITEMS, false>(p, blockIdx.x, scratch);
  } else {  // fewer CTAs than rows: each takes every gridDim.x-th row after the barrier
    peer_barrier(p.peers);
    for (int64_t i = blockIdx.x; i < p.num_tokens; i += gridDim.x) {
      add_norm_row<T, VEC, ITEMS, true>(p, i, scratch);
      __syncthreads();  // scratch is reused by the next row's sums
    }
  }
}

template <typename T, bool VEC, bool PEERS = false>
cudaError_t launch_items(const AddNormParams& p, int items, int threads, cudaStream_t stream) {
  const dim3 grid(PEERS ? std::min(p.num_tokens, p.peers.ctas) : p.num_tokens);
  switch (items) {
    case 1:
      launch_kernel(add_norm_kernel<T, VEC, 1, PEERS>, grid, dim3(threads), 0, stream, p);
      break;
    case 2:
      launch_kernel(add_norm_kernel<T, VEC, 2, PEERS>, grid, dim3(threads), 0, stream, p);
      break;
    default:
      launch_kernel(add_norm_kernel<T, VEC, kMaxItems, PEERS>, grid, dim3(threads), 0, stream, p);
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
  if (!p.residual || !p.weight0 || (!p.out0 && !p.out0_fp8))
    return invalid_argument("add_norm: residual, weight0 and out0 (or out0_fp8) are required");
  if ((p.bias0 && !p.delta0) || (p.bias1 && !p.delta1))
    return invalid_argument("add_norm: a bias without its delta");
  if (p.out1 && !p.weight1) return invalid_argument("add_norm: out1 without weight1");
  if (!p.out0_fp8 != !p.out0_scales)
    return invalid_argument("add_norm: out0_fp8 and out0_scales go together");
  if (p.out0_fp8 && (p.hidden % kVec != 0 || (reinterpret_cast<uintptr_t>(p.out0_fp8) & 7u)))
    return invalid_argument("add_norm: out0_fp8 needs hidden % 8 == 0 and 8-byte alignment");
  if (const PeerSum& ps = p.peers; ps.world != 0) {
    if (ps.world < 1 || ps.world > kMaxPeerRanks || ps.rank < 0 || ps.rank >= ps.world)
      return invalid_argument("add_norm: peers: bad world or rank");
    if (ps.ctas < 1 || ps.ctas > kMaxPeerCtas)
      return invalid_argument("add_norm: peers: ctas outside [1, kMaxPeerCtas]");
    if (!p.delta0 || p.delta1 || p.delta0 != ps.delta0[ps.rank] || !ps.epochs)
      return invalid_argument("add_norm: peers: delta0 must be this rank's buffer, no delta1");
    for (int r = 0; r < ps.world; ++r)
      if (!ps.delta0[r] || !ps.flags[r])
        return invalid_argument("add_norm: peers: a rank's buffers are missing");
  }
  const void* ptrs[] = {p.residual,   p.delta0, p.bias0,   p.delta1,     p.bias1, p.weight0,
                        p.norm_bias0, p.out0,   p.weight1, p.norm_bias1, p.out1};
  const bool vec = p.hidden % kVec == 0 &&
                   std::all_of(std::begin(ptrs), std::end(ptrs), is_aligned16) &&
                   std::all_of(std::begin(p.peers.delta0), std::end(p.peers.delta0), is_aligned16);
  const int chunks = (p.hidden + kVec - 1) / kVec;
  const int items = chunks <= kMaxThreads       ? 1
                    : chunks <= 2 * kMaxThreads ? 2
                                                : kMaxItems;  // 4096: 1 x 512
  const int threads = ((chunks + items - 1) / items + 31) / 32 * 32;
  if (p.out0_fp8 && !vec)
    return invalid_argument("add_norm: out0_fp8 needs 16-byte aligned rows and operands");
  if (p.peers.world != 0 && !vec)
    return invalid_argument("add_norm: peers need hidden % 8 == 0 and 16-byte aligned buffers");
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    if (p.peers.world != 0) return launch_items<T, true, true>(p, items, threads, stream);
    return vec ? launch_items<T, true>(p, items, threads, stream)
               : launch_items<T, false>(p, items, threads, stream);
  });
}

}  // namespace rill::kernels
