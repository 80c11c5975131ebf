// Log-probabilities of sampled tokens (rill/kernels/logprobs.h). Each row is split over a
// cluster of S CTAs (S <= 8, about 16k logits each, so one row at batch 1 still spreads over
// several SMs); each CTA reads its contiguous slice of the row once:
//
//  1. one pass over the slice: each thread keeps an online (max, sum of exp(x - max)) and its
//     best element under the output order (larger logit, then lower id): its "thread best";
//  2. the CTA's exact n-th best thread best e0: each warp sorts its 32 thread bests (bitonic, by
//     shuffles) and the warps' sorted top-n lists are ranked against each other by binary search.
//     Exactly n threads hold a best >= e0, and every element >= e0 belongs to one of them, so
//     the candidates {x >= e0} number at most n * (elements per thread) and hold the slice's
//     n best;
//  3. those n threads read their elements again (cache hits) and append the candidates to shared
//     memory; ranking the candidates against each other gives the CTA's sorted top n;
//  4. after a cluster barrier CTA 0 gathers every CTA's list and (max, sum) through distributed
//     shared memory, ranks the sorted lists by binary search, combines the log-sum-exp and writes
//     the row.
// Ranks under a strict total order are unique, so the output does not depend on the order in
// which atomics appended the candidates: a row's result depends on its data only.
#include <cooperative_groups.h>
#include <atomic>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "dispatch.cuh"
#include "launch.cuh"
#include "reduce.cuh"
#include "rill/kernels/logprobs.h"

namespace rill::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxSplits = 8;        // CTAs per row: a portable cluster
constexpr int kSliceTarget = 16384;  // logits per CTA the split count aims at
constexpr int kCap = 4096;           // candidates one CTA holds (bounds the supported vocab)
constexpr int kNone = INT_MAX;       // id of "no element", ordered after every element
constexpr float kLog2e = 1.4426950408889634f;

struct Cand {
  float v;
  int id;
};

// The output order: the larger logit first, the lower id on ties, "none" last.
__device__ __forceinline__ bool better(const Cand& a, const Cand& b) {
  if (a.id == kNone) return false;
  if (b.id == kNone) return true;
  return a.v > b.v || (a.v == b.v && a.id < b.id);
}

__device__ __forceinline__ Cand shfl_xor_cand(Cand c, int m) {
  return {__shfl_xor_sync(0xffffffffu, c.v, m), __shfl_xor_sync(0xffffffffu, c.id, m)};
}

// Sorts the warp's 32 values, best in lane 0 (a bitonic network).
__device__ __forceinline__ Cand warp_sort(Cand c) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) {
      const Cand o = shfl_xor_cand(c, j);
      const bool keep_better = ((lane & j) == 0) == ((lane & k) == 0);
      if (better(o, c) == keep_better) c = o;
    }
  }
  return c;
}

// Rank of x = lists[own][index] among lists[num_lists][n], each sorted best first: its index
// plus, per other list, how many entries are better (a binary search). Exact when below n (a
// list whose n entries are all better than x makes it >= n).
__device__ int rank_in_lists(const Cand* lists, int num_lists, int n, int own, int index, Cand x) {
  int rank = index;
  for (int l = 0; l < num_lists; ++l) {
    if (l == own) continue;
    const Cand* list = lists + l * n;
    int lo = 0, hi = n;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (better(list[mid], x))
        lo = mid + 1;
      else
        hi = mid;
    }
    rank += lo;
  }
  return rank;
}

// (max, sum of exp(x - max)) of a set of logits; max -inf means no finite mass (sum 0).
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int mask) {
  return {__shfl_xor_sync(0xffffffffu, v.m, mask), __shfl_xor_sync(0xffffffffu, v.s, mask)};
}
__device__ __forceinline__ float rescale(MaxSum a, float m) {
  return a.m == -INFINITY ? 0.0f : a.s * exp2f((a.m - m) * kLog2e);
}
struct MaxSumOp {
  __device__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.m, b.m);
    return {m, rescale(a, m) + rescale(b, m)};
  }
};

// One thread's view of its elements: online max / sum and its best element.
struct ThreadScan {
  MaxSum ms{-INFINITY, 0.0f};
  Cand best{-INFINITY, kNone};

  // Elements of the thread, in increasing id order: `mx` is the largest of them, `first` the id
  // of its first occurrence.
  __device__ __forceinline__ void update_max(float mx, int first) {
    if (mx > ms.m || best.id == kNone) {
      ms.s = rescale(ms, mx);
      ms.m = mx;
      best = {mx, first};
    }
  }
  __device__ __forceinline__ void add(float x) {
    if (ms.m != -INFINITY) ms.s += exp2f((x - ms.m) * kLog2e);
  }
};

// Calls fn(x, id) for the thread's elements of row[begin, end), in increasing id order. The
// vector path needs begin and end multiples of 4 and a 16-byte aligned row.
template <bool kVec, typename Fn>
__device__ __forceinline__ void for_each_element(const float* row, int begin, int end, Fn&& fn) {
  if constexpr (kVec) {
    const float4* v4 = reinterpret_cast<const float4*>(row + begin);
    const int n4 = (end - begin) >> 2;
#pragma unroll 4
    for (int i = threadIdx.x; i < n4; i += kThreads) fn(v4[i], begin + 4 * i);
  } else {
    for (int i = begin + threadIdx.x; i < end; i += kThreads) fn(row[i], i);
  }
}

template <bool kVec>
__device__ ThreadScan scan_slice(const float* row, int begin, int end) {
  ThreadScan t;
  if constexpr (kVec) {
    for_each_element<true>(row, begin, end, [&](float4 q, int id) {
      const float mx = fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w));
      t.update_max(mx, id + (q.x == mx ? 0 : q.y == mx ? 1 : q.z == mx ? 2 : 3));
      t.add(q.x);
      t.add(q.y);
      t.add(q.z);
      t.add(q.w);
    });
  } else {
    for_each_element<false>(row, begin, end, [&](float x, int id) {
      t.update_max(x, id);
      t.add(x);
    });
  }
  return t;
}

struct Shared {
  Cand cand[kCap];                            // candidates >= e0, in append order
  Cand lists[kWarps * kLogprobsMaxTop];       // each warp's top-n thread bests, best first
  Cand top[kLogprobsMaxTop];                  // this CTA's top n, best first
  Cand merged[kMaxSplits * kLogprobsMaxTop];  // CTA 0: every CTA's top n
  MaxSum parts[kMaxSplits];                   // CTA 0: every CTA's (max, sum)
  MaxSum part;                                // this CTA's (max, sum)
  Cand e0;
  int count;
  MaxSum red[32];
};

// Steps 2 and 3: the CTA's sorted top n of its slice into sh.top (padded with "none").
template <bool kVec>
__device__ void slice_top(const float* row, int begin, int end, int n, const ThreadScan& t,
                          Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const Cand sorted = warp_sort(t.best);
  if (lane < n) sh.lists[warp * n + lane] = sorted;
  if (threadIdx.x < n) sh.top[threadIdx.x] = {0.0f, kNone};
  if (threadIdx.x == 0) {
    sh.e0 = {0.0f, kNone};  // stays "none" (everything a candidate) with fewer than n elements
    sh.count = 0;
  }
  __syncthreads();
  if (threadIdx.x < kWarps * n) {
    const Cand x = sh.lists[threadIdx.x];
    const int l = threadIdx.x / n, i = threadIdx.x % n;
    if (x.id != kNone && rank_in_lists(sh.lists, kWarps, n, l, i, x) == n - 1) sh.e0 = x;
  }
  __syncthreads();
  const Cand e0 = sh.e0;
  if (t.best.id != kNone && !better(e0, t.best)) {
    auto append = [&](float x, int id) {
      const Cand c{x, id};
      if (better(e0, c)) return;
      const int at = atomicAdd(&sh.count, 1);
      if (at < kCap) sh.cand[at] = c;  // the launcher's bound keeps at < kCap
    };
    if constexpr (kVec) {
      for_each_element<true>(row, begin, end, [&](float4 q, int id) {
        append(q.x, id);
        append(q.y, id + 1);
        append(q.z, id + 2);
        append(q.w, id + 3);
      });
    } else {
      for_each_element<false>(row, begin, end, append);
    }
  }
  __syncthreads();
  const int count = min(sh.count, kCap);
  for (int c = threadIdx.x; c < count; c += kThreads) {
    const Cand x = sh.cand[c];
    int r = 0;
    for (int d = 0; d < count; ++d) r += better(sh.cand[d], x);
    if (r < n) sh.top[r] = x;
  }
}

// Step 4 (CTA 0 of the row): sh.merged / sh.parts hold every CTA's list and (max, sum).
__device__ void write_row(const LogprobsParams& p, int row, int n, int splits, const float* logits,
                          Shared& sh) {
  float* o = p.out + static_cast<int64_t>(row) * (1 + 2 * p.max_top);
  MaxSum total = sh.parts[0];
  for (int s = 1; s < splits; ++s) total = MaxSumOp{}(total, sh.parts[s]);
  const float lse = total.m + logf(total.s);
  for (int i = min(n, p.vocab) + threadIdx.x; i < p.max_top; i += kThreads) {
    o[1 + 2 * i] = __int_as_float(-1);
    o[2 + 2 * i] = -INFINITY;
  }
  for (int j = threadIdx.x; j < splits * n; j += kThreads) {
    const Cand x = sh.merged[j];
    if (x.id == kNone) continue;
    const int r = rank_in_lists(sh.merged, splits, n, j / n, j % n, x);
    if (r < n) {
      o[1 + 2 * r] = __int_as_float(x.id);
      o[2 + 2 * r] = x.v - lse;
    }
  }
  if (threadIdx.x == 0) {
    const int32_t token = p.tokens[row];
    o[0] = token >= 0 && token < p.vocab ? logits[token] - lse : __int_as_float(0x7fc00000);
  }
}

// grid (splits, rows), clusters of `splits` CTAs along x; CTA x reads row[x * slice, ...).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    logprobs_kernel(LogprobsParams p, int splits, int slice) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  const int row = blockIdx.y;
  const int n = min(p.top_n ? p.top_n[row] : p.max_top, p.max_top);
  if (n < 0) return;  // the whole cluster returns: top_n is per row
  __shared__ Shared sh;
  const float* logits = p.logits + static_cast<int64_t>(row) * p.vocab;  // [vocab]
  const int begin = min(static_cast<int>(blockIdx.x) * slice, p.vocab);
  const int end = min(begin + slice, p.vocab);
  const ThreadScan t = scan_slice<kVec>(logits, begin, end);
  const MaxSum part = block_reduce(t.ms, MaxSumOp{}, MaxSum{-INFINITY, 0.0f}, sh.red);
  if (n > 0) slice_top<kVec>(logits, begin, end, n, t, sh);
  if (threadIdx.x == 0) sh.part = part;

  if (splits == 1) {
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += kThreads) sh.merged[j] = sh.top[j];
    if (threadIdx.x == 0) sh.parts[0] = sh.part;
    __syncthreads();
    write_row(p, row, n, 1, logits, sh);
    return;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's list and (max, sum) are written
  if (cluster.block_rank() == 0) {
    for (int j = threadIdx.x; j < splits * n; j += kThreads)
      sh.merged[j] = cluster.map_shared_rank(&sh, j / n)->top[j % n];
    if (threadIdx.x < splits)
      sh.parts[threadIdx.x] = cluster.map_shared_rank(&sh, threadIdx.x)->part;
    __syncthreads();
    write_row(p, row, n, splits, logits, sh);
  }
  cluster.sync();  // CTA 0 has read the others' shared memory before they exit
}

template <bool kVec>
__global__ void copy_rows_kernel(int vocab, const int32_t* __restrict__ top_n,
                                 const float* __restrict__ src, float* __restrict__ dst) {
  pdl_launch_dependents();  // see launch.cuh
  pdl_wait();               // before any dependent read or global write
  const int row = blockIdx.y;
  if (top_n[row] < 0) return;
  const int64_t off = static_cast<int64_t>(row) * vocab;
  const int stride = gridDim.x * blockDim.x;
  if constexpr (kVec) {
    const float4* s = reinterpret_cast<const float4*>(src + off);
    float4* d = reinterpret_cast<float4*>(dst + off);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab / 4; i += stride) d[i] = s[i];
  } else {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += stride)
      dst[off + i] = src[off + i];
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

cudaError_t launch_logprobs(const LogprobsParams& p, cudaStream_t stream) {
  if (p.num_rows < 0) return invalid_argument("logprobs: negative num_rows");
  if (p.num_rows == 0) return cudaSuccess;
  if (p.num_rows > 65535) return invalid_argument("logprobs: more than 65535 rows");
  if (p.vocab <= 0) return invalid_argument("logprobs: vocab must be positive");
  if (p.max_top < 0 || p.max_top > kLogprobsMaxTop)
    return invalid_argument("logprobs: max_top=" + std::to_string(p.max_top) + " outside [0, " +
                            std::to_string(kLogprobsMaxTop) + "]");
  if (!p.logits || !p.tokens || !p.out)
    return invalid_argument("logprobs: logits, tokens and out are required");
  const bool vec = p.vocab % 4 == 0 && aligned16(p.logits);
  int splits = std::clamp((p.vocab + kSliceTarget - 1) / kSliceTarget, 1, kMaxSplits);
  const int slice = ((p.vocab + splits - 1) / splits + 3) / 4 * 4;
  splits = (p.vocab + slice - 1) / slice;  // no empty CTA
  // Candidates per CTA are at most max_top * (elements per thread).
  const int per_thread =
      vec ? (slice + 4 * kThreads - 1) / (4 * kThreads) * 4 : (slice + kThreads - 1) / kThreads;
  if (p.max_top * per_thread > kCap)
    return invalid_argument("logprobs: vocab=" + std::to_string(p.vocab) + " too large for top " +
                            std::to_string(p.max_top));
  auto kernel = vec ? logprobs_kernel<true> : logprobs_kernel<false>;
  if (splits > 1) {
    // Atomic: a thread per GPU under tensor parallelism (identical GPUs give one answer).
    static std::atomic<int> fits[2][kMaxSplits + 1] =
        {};  // per kernel and size: 0 unknown, 1 yes, -1 no
    std::atomic<int>& f = fits[vec][splits];
    if (f.load() == 0) f.store(cluster_size_fits(kernel, splits, kThreads) ? 1 : -1);
    if (f.load() < 0)
      return invalid_argument("logprobs: clusters of " + std::to_string(splits) +
                              " CTAs do not fit this device");
  }
  launch_kernel_in_clusters(dim3(splits, 1, 1), kernel, dim3(splits, p.num_rows), dim3(kThreads), 0,
                            stream, p, splits, slice);
  return launch_status();
}

cudaError_t launch_copy_logprob_rows(int num_rows, int vocab, const int32_t* top_n,
                                     const float* src, float* dst, cudaStream_t stream) {
  if (num_rows < 0 || vocab <= 0) return invalid_argument("copy_logprob_rows: bad sizes");
  if (num_rows == 0) return cudaSuccess;
  if (num_rows > 65535) return invalid_argument("copy_logprob_rows: more than 65535 rows");
  if (!top_n || !src || !dst) return invalid_argument("copy_logprob_rows: null pointer");
  constexpr int kCopyThreads = 256;
  const bool vec = vocab % 4 == 0 && aligned16(src) && aligned16(dst);
  const int items = vec ? vocab / 4 : vocab;
  const int blocks = std::min((items + 4 * kCopyThreads - 1) / (4 * kCopyThreads), 64);
  launch_kernel(vec ? copy_rows_kernel<true> : copy_rows_kernel<false>, dim3(blocks, num_rows),
                dim3(kCopyThreads), 0, stream, vocab, top_n, src, dst);
  return launch_status();
}

}  // namespace rill::kernels
