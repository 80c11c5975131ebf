// W8A8 fp8 GEMMs on the tensor cores through cuBLASLt (Hopper): y[M, N] = sum_k xq[m, k] sx(m, k)
// w[n, k] sw(n, k), e4m3 x e4m3 with fp32 accumulation, y in the activation dtype or fp32.
// Accumulation: with Problem::fast_accum, cuBLASLt's fast accumulation (the tensor cores'
// accumulator throughout, as vLLM's Hopper fp8 kernels run); without it, partial sums promoted
// to fp32 periodically (slower, more exact). Scales: per token x per row
// (OUTER_VEC_32F on both operands), or per 128 columns of each token x per 128 columns of each row
// (VEC128_32F on both), the layouts of kernels::Fp8ScaleLayout and kernels::ActQuantMode. Plans
// (descriptors and the heuristic's algorithm) are cached per problem, so steps captured in CUDA
// graphs make no new ones.
#pragma once

#include <cublasLt.h>

#include <map>
#include <tuple>
#include <vector>

#include "engine/cuda/cuda_util.h"
#include "rill/kernels/common.h"

namespace rill::cuda {

class Fp8Gemm {
 public:
  /// `workspace`: device memory cuBLASLt may use, stream-ordered on `stream` (it may be shared
  /// with other work on the same stream).
  Fp8Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  /// One problem: M tokens, weights [N, K], 128-column scales or per-row ones, output type.
  struct Problem {
    int M = 0, N = 0, K = 0;
    bool block = false;
    kernels::DType dtype = kernels::DType::kBF16;
    bool y_f32 = false;
    bool fast_accum = false;  // CUBLASLT_MATMUL_DESC_FAST_ACCUM
    std::tuple<int, int, int, bool, int, bool, bool> key() const {
      return {M, N, K, block, static_cast<int>(dtype), y_f32, fast_accum};
    }
  };
  /// True when cuBLASLt has an algorithm for `p` (K % 16 == 0; block: K % 128 == 0).
  bool supported(const Problem& p);
  /// The most leading rows of `p` cuBLASLt takes: p.M where it has an algorithm, else the largest
  /// of M rounded down to a multiple of 4, 8, .., 128 that it has one for; 0: none. On H100
  /// (cuBLASLt 13.1) per-token x per-row scales took every M tried, 128-column scales M = 128
  /// but not M = 33, so a prefill chunk runs its leading rows on the tensor cores and the rest
  /// (fewer than 128) through the GEMV.
  int rows(const Problem& p);
  /// Enqueues y = xq w^T with the scales described above; supported(p) must hold.
  void run(const Problem& p, const uint8_t* xq, const float* x_scale, const void* w,
           const float* w_scale, void* y);
  /// One of cuBLASLt's heuristic results (a named struct: nvcc 13.0's front end crashes on a
  /// std::vector of cuBLASLt's anonymous typedef'd structs).
  struct Candidate {
    cublasLtMatmulAlgo_t algo{};
    size_t workspace_bytes = 0;  // what the algorithm uses of the workspace
    float waves = 0;             // its grid over the SMs, in waves (1.0: every SM busy once)
  };
  /// Up to `max` of cuBLASLt's algorithms for `p` (the same descriptors and workspace limit), in
  /// its heuristic's order; the plan's is the first of a query for one. Empty where supported(p)
  /// fails. For rill-gemm-fp8-bench, which times the candidates.
  std::vector<Candidate> heuristics(const Problem& p, int max);
  /// run() with `algo` (one of heuristics(p, ..)'s) instead of the plan's.
  void run(const Problem& p, const cublasLtMatmulAlgo_t& algo, const uint8_t* xq,
           const float* x_scale, const void* w, const float* w_scale, void* y);

 private:
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool ok = false;
  };
  Plan& plan(const Problem& p);
  // Up to `max` heuristic results for the plan's descriptors (none when the query fails).
  std::vector<Candidate> query(const Plan& plan, int max);
  // y = xq w^T through `algo` with the plan's descriptors; throws when the plan has none.
  void enqueue(Plan& pl, const cublasLtMatmulAlgo_t& algo, const uint8_t* xq, const float* x_scale,
               const void* w, const float* w_scale, void* y);
  static void destroy(Plan& plan);

  cudaStream_t stream_;
  void* workspace_;
  size_t workspace_bytes_;
  cublasLtHandle_t handle_ = nullptr;
  // Problems seen; prefill chunks of every length up to the step budget make at most a few
  // thousand (a few KB each), dropped when the runner goes.
  std::map<std::tuple<int, int, int, bool, int, bool, bool>, Plan> plans_;
};

}  // namespace rill::cuda
