// The decode chain (decode_chain.h): one persistent grid runs a layer's o, gate|up and down GEMVs,
// the two residual adds + norms, and the next layer's QKV GEMV.
//
// Work: GEMV stage s has ceil(N_s / 16) tiles of 16 weight rows; CTA b computes tiles b, b + G,
// b + 2G, ... (G CTAs, all resident), each exactly as gemv_ring_kernel's 16-warp CTA computes
// its one tile. Between stages a grid barrier; after o and after down, every CTA computes the
// whole add + norm of the M rows into shared memory (the next GEMV's x) and stores its share of
// the updated residual.
//
// Weights: every thread copies its own 16-byte chunks into a ring of kStages iterations in shared
// memory (cp.async), kStages - 1 iterations ahead of its mma, along the sequence of all its
// iterations over all stages. So the ring crosses tile and stage boundaries: at a barrier, the
// next stage's first weights are already on their way.
#include <algorithm>
#include <string>

#include "add_norm_row.cuh"
#include "gemv_tile.cuh"
#include "launch.cuh"
#include "rill/kernels/decode_chain.h"

namespace rill::kernels {
namespace {

using gemv_tile::kMaxM;
using gemv_tile::kRows;

constexpr int kWarps = 16, kThreads = kWarps * 32;  // the default GEMV's CTA (same sums)
constexpr int kStages = 5;                          // ring depth, as the deep-prologue GEMV
constexpr int kSlot = 2 * kThreads;                 // uint4 per ring slot: lo and hi per thread
constexpr int kRingBytes = kStages * kSlot * 16;
constexpr int kPartialBytes = kWarps * 4 * 32 * 4;
constexpr int kMaxHidden = 2 * norm_row::kMaxThreads * kVec;  // norm rows of <= 2 items
constexpr int kMaxGemvStages = 4;

// Shared memory: the ring, the warps' partial sums, then M normalised rows of hidden + 8
// elements (the pad spreads the rows over the banks).
__host__ __device__ constexpr int x_stride(int hidden) {
  return hidden + kVec;
}
size_t smem_bytes(int M, int hidden) {
  return kRingBytes + kPartialBytes + size_t(M) * x_stride(hidden) * 2;
}

struct GemvStage {
  const void* w;  // [N, K]
  int N, K;
};
struct Stages {
  GemvStage s[kMaxGemvStages];
  int count;
};

// One thread's weight copies: its iterations over stages, its CTA's tiles of each, and its warp's
// steps of each tile, in the order the mma consumes them.
struct Producer {
  int stage, n0, s0;  // the next iteration; stage == count when none is left
  int chunks, steps;
  const uint4 *lo, *hi;

  __device__ void enter(const Stages& st, int stage_, int n0_) {
    stage = stage_;
    n0 = n0_;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    for (; stage < st.count; ++stage, n0 = blockIdx.x * kRows) {
      const GemvStage& s = st.s[stage];
      chunks = s.K / kVec;
      steps = (chunks + 3) / 4;
      if (n0 >= s.N || warp >= steps) continue;  // no tile of this CTA, or no step of this warp
      const char* w = static_cast<const char*>(s.w);
      lo = reinterpret_cast<const uint4*>(w + int64_t(min(n0 + g, s.N - 1)) * s.K * 2);
      hi = reinterpret_cast<const uint4*>(w + int64_t(min(n0 + g + 8, s.N - 1)) * s.K * 2);
      s0 = warp;
      return;
    }
  }
  // Copies the next iteration into the ring slot at `slot` (this thread's address in it) and
  // commits a group (an empty one past the end, so that every iteration commits one).
  __device__ void issue(const Stages& st, uint32_t slot) {
    if (stage < st.count) {
      gemv_tile::copy_w<kWarps, 1>(slot, lo, hi, s0, threadIdx.x & 3, chunks);
      s0 += kWarps;
      if (s0 >= steps) enter(st, stage, n0 + gridDim.x * kRows);
    }
    attn::cp_async_commit();
  }
};

enum class XFrom { kGlobal, kGlobalCoherent, kShared };

// One GEMV stage over this CTA's tiles: y = x w^T with epilogue EPI, the weights from the ring.
template <typename T, XFrom X, GemvEpilogue EPI>
__device__ void gemv_stage(const Stages& st, Producer& prod, int& slot, uint4* ring,
                           float (*partial)[4][32], const GemvStage& s, const T* x, int x_ld,
                           void* y, const T* bias, int M) {
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int chunks = s.K / kVec, steps = (chunks + 3) / 4;
  const uint4* x_row = reinterpret_cast<const uint4*>(x + int64_t(min(g, M - 1)) * x_ld);
  const bool x_live = g < M;
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);
  for (int n0 = blockIdx.x * kRows; n0 < s.N; n0 += gridDim.x * kRows) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = warp; s0 < steps; s0 += kWarps) {
      const int refill = slot == 0 ? kStages - 1 : slot - 1;
      prod.issue(st, mine + refill * kSlot * 16);
      const int c = s0 * 4 + t;
      uint4 xv = make_uint4(0, 0, 0, 0);
      if (c < chunks && x_live) {
        if constexpr (X == XFrom::kGlobal) {
          xv = __ldg(x_row + c);
        } else if constexpr (X == XFrom::kGlobalCoherent) {
          xv = __ldcg(x_row + c);
        } else {
          xv = x_row[c];
        }
      }
      attn::cp_async_wait<kStages - 1>();
      const uint4* own = ring + slot * kSlot + threadIdx.x;
      const uint4 lo = own[0], hi = own[kThreads];
      gemv_tile::mma_16816<T>(acc, lo.x, hi.x, lo.y, hi.y, xv.x, xv.y);
      gemv_tile::mma_16816<T>(acc, lo.z, hi.z, lo.w, hi.w, xv.z, xv.w);
      slot = slot == kStages - 1 ? 0 : slot + 1;
    }
    gemv_tile::sum_warps_and_store<T, kWarps, EPI>(acc, partial, y, bias, M, s.N, false, n0);
    __syncthreads();  // warp 0 has read the partials before the next tile writes them
  }
}

// Grid barrier over the G resident CTAs: the `round`-th of this launch.
__device__ void grid_barrier(unsigned* count, unsigned round) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(count, 1u);
    const unsigned target = round * gridDim.x;
    unsigned seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    } while (seen < target);
  }
  __syncthreads();
}

// residual_out (this CTA's share of the chunks) = residual_in + delta (+ bias); xs = the M rows
// normalised, as add_norm's kernel computes them.
template <typename T, int ITEMS>
__device__ void norm_rows(const DecodeChainParams& p, const float* residual_in, float* residual_out,
                          const void* delta, const void* bias, const void* weight,
                          const void* norm_bias, T* xs, float* scratch) {
  const norm_row::Shape shape = norm_row::row_shape(p.hidden);
  for (int m = 0; m < p.M; ++m) {
    const int64_t off = int64_t(m) * p.hidden;
    norm_row::Row<T> a;
    a.residual_in = residual_in + off;
    a.residual_out = residual_out + off;
    a.store_every = gridDim.x;
    a.store_phase = blockIdx.x;
    a.delta0 = static_cast<const T*>(delta) + off;
    a.bias0 = static_cast<const T*>(bias);
    a.delta1 = a.bias1 = nullptr;
    a.weight0 = static_cast<const T*>(weight);
    a.norm_bias0 = static_cast<const T*>(norm_bias);
    a.weight1 = a.norm_bias1 = nullptr;
    a.out0 = xs + int64_t(m) * x_stride(p.hidden);
    a.out1 = nullptr;
    a.hidden = p.hidden;
    a.threads = shape.threads;
    a.layer = p.norm == NormType::kLayer;
    a.eps = p.eps;
    norm_row::add_norm_row<T, true, ITEMS, true>(a, scratch);
  }
  __syncthreads();  // the rows are in shared memory
}

// grid: G <= the CTAs that fit at once; block kThreads; dynamic shared memory smem_bytes().
template <typename T, int ITEMS>
__global__ void __launch_bounds__(kThreads, 2) decode_chain_kernel(DecodeChainParams p, Stages st) {
  extern __shared__ uint4 ring[];
  __shared__ float scratch[32];
  float(*partial)[4][32] = reinterpret_cast<float(*)[4][32]>(ring + kStages * kSlot);
  T* xs = reinterpret_cast<T*>(ring + kStages * kSlot + kPartialBytes / 16);
  const uint32_t mine = attn::smem_addr(ring + threadIdx.x);

  // Every CTA reaches this only once resident, so dependents (the next attention) launch after
  // the whole grid is: none of their CTAs can take a slot a CTA of this grid waits for.
  pdl_launch_dependents();
  Producer prod;
  prod.enter(st, 0, blockIdx.x * kRows);
  for (int i = 0; i < kStages - 1; ++i) prod.issue(st, mine + i * kSlot * 16);
  pdl_wait();

  int slot = 0;
  const T* no_bias = nullptr;
  gemv_stage<T, XFrom::kGlobal, GemvEpilogue::kStore>(st, prod, slot, ring, partial, st.s[0],
                                                      static_cast<const T*>(p.attn), p.q_dim, p.o,
                                                      no_bias, p.M);
  grid_barrier(p.sync, 1);
  norm_rows<T, ITEMS>(p, p.residual, p.residual_mid, p.o, p.bo, p.mlp_norm, p.mlp_norm_bias, xs,
                      scratch);
  gemv_stage<T, XFrom::kShared, GemvEpilogue::kSiluMul>(st, prod, slot, ring, partial, st.s[1], xs,
                                                        x_stride(p.hidden), p.act,
                                                        static_cast<const T*>(p.bup), p.M);
  grid_barrier(p.sync, 2);
  gemv_stage<T, XFrom::kGlobalCoherent, GemvEpilogue::kStore>(st, prod, slot, ring, partial,
                                                              st.s[2], static_cast<const T*>(p.act),
                                                              p.intermediate, p.m, no_bias, p.M);
  if (p.wqkv) {
    grid_barrier(p.sync, 3);
    norm_rows<T, ITEMS>(p, p.residual_mid, p.residual, p.m, p.bdown, p.next_norm, p.next_norm_bias,
                        xs, scratch);
    gemv_stage<T, XFrom::kShared, GemvEpilogue::kStore>(st, prod, slot, ring, partial, st.s[3], xs,
                                                        x_stride(p.hidden), p.qkv, no_bias, p.M);
  }
  attn::cp_async_wait<0>();  // only empty groups are left; for form's sake

  // The last CTA out has seen every barrier pass: no CTA reads the counters any more.
  if (threadIdx.x == 0 && atomicAdd(p.sync + 1, 1u) == gridDim.x - 1) {
    p.sync[0] = 0;
    p.sync[1] = 0;
  }
}

// The CTAs of `kernel` that fit on the device at once with `smem` bytes (0: none).
int resident_ctas(const void* kernel, size_t smem) {
  int dev = 0, sms = 0, per_sm = 0, optin = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
      smem + 128 > size_t(optin) ||  // 128: the static scratch
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - 128) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem) !=
          cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return sms * per_sm;
}

template <typename T, int ITEMS>
const void* kernel_for() {
  return reinterpret_cast<const void*>(decode_chain_kernel<T, ITEMS>);
}

template <typename Body>
cudaError_t dispatch_items(int hidden, Body&& body) {
  return norm_row::row_shape(hidden).items == 1 ? body.template operator()<1>()
                                                : body.template operator()<2>();
}

// Grid size per (kernel, M), measured once (Rill drives one device).
template <typename T, int ITEMS>
int grid_for(int M, int hidden) {
  static int grids[kMaxM + 1] = {};
  if (grids[M] == 0) grids[M] = resident_ctas(kernel_for<T, ITEMS>(), smem_bytes(M, hidden));
  return grids[M];
}

std::string shape_problem(int M, int hidden, int q_dim, int intermediate, int qkv_dim) {
  if (M < 1 || M > kMaxM) return "M=" + std::to_string(M) + " outside 1..8";
  if (hidden <= 0 || hidden > kMaxHidden) return "hidden=" + std::to_string(hidden);
  for (int d : {hidden, q_dim, intermediate, qkv_dim})
    if (d <= 0 || d % kVec != 0) return "a dimension is not a positive multiple of 8";
  return "";
}

}  // namespace

bool decode_chain_supported(DType dtype, int M, int hidden, int q_dim, int intermediate,
                            int qkv_dim) {
  if (!shape_problem(M, hidden, q_dim, intermediate, qkv_dim).empty()) return false;
  const cudaError_t fits = dispatch_dtype(dtype, [&]<typename T>() {
    return dispatch_items(hidden, [&]<int ITEMS>() {
      return grid_for<T, ITEMS>(M, hidden) > 0 ? cudaSuccess : cudaErrorInvalidValue;
    });
  });
  return fits == cudaSuccess;
}

cudaError_t launch_decode_chain(const DecodeChainParams& p, cudaStream_t stream) {
  if (const std::string why = shape_problem(p.M, p.hidden, p.q_dim, p.intermediate, p.qkv_dim);
      !why.empty())
    return invalid_argument("decode_chain: " + why);
  if (p.norm != NormType::kRms && p.norm != NormType::kLayer)
    return invalid_argument("decode_chain: unknown norm type");
  const void* required[] = {p.attn, p.wo,  p.o,     p.residual, p.residual_mid, p.mlp_norm,
                            p.wup,  p.act, p.wdown, p.m,        p.sync};
  for (const void* q : required)
    if (!q) return invalid_argument("decode_chain: a required pointer is null");
  if (p.residual == p.residual_mid)
    return invalid_argument("decode_chain: residual and residual_mid must differ");
  if (p.wqkv && (!p.qkv || !p.next_norm))
    return invalid_argument("decode_chain: wqkv needs qkv and next_norm");
  const void* aligned[] = {p.attn,
                           p.wo,
                           p.o,
                           p.residual,
                           p.residual_mid,
                           p.bo,
                           p.mlp_norm,
                           p.mlp_norm_bias,
                           p.wup,
                           p.act,
                           p.wdown,
                           p.m,
                           p.bdown,
                           p.next_norm,
                           p.next_norm_bias,
                           p.wqkv};
  for (const void* q : aligned)
    if (!is_aligned16(q)) return invalid_argument("decode_chain: pointers must be 16-byte aligned");
  Stages st = {};
  st.s[0] = {p.wo, p.hidden, p.q_dim};
  st.s[1] = {p.wup, 2 * p.intermediate, p.hidden};
  st.s[2] = {p.wdown, p.hidden, p.intermediate};
  st.s[3] = {p.wqkv, p.qkv_dim, p.hidden};
  st.count = p.wqkv ? 4 : 3;
  return dispatch_dtype(p.dtype, [&]<typename T>() {
    return dispatch_items(p.hidden, [&]<int ITEMS>() {
      const int grid = grid_for<T, ITEMS>(p.M, p.hidden);
      if (grid == 0) return invalid_argument("decode_chain: no CTA fits on this device");
      return launch_kernel(decode_chain_kernel<T, ITEMS>, dim3(grid), dim3(kThreads),
                           smem_bytes(p.M, p.hidden), stream, p, st);
    });
  });
}

}  // namespace rill::kernels
