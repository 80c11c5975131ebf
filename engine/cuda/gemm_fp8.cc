#include "engine/cuda/gemm_fp8.h"

namespace rill::cuda {
namespace {

cudaDataType_t out_type(const Fp8Gemm::Problem& p) {
  if (p.y_f32) return CUDA_R_32F;
  return p.dtype == kernels::DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
}

template <typename V>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  RILL_CUBLAS(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)));
}

}  // namespace

Fp8Gemm::Fp8Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  RILL_CUBLAS(cublasLtCreate(&handle_));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, plan] : plans_) destroy(plan);
  if (handle_) cublasLtDestroy(handle_);
}

void Fp8Gemm::destroy(Plan& plan) {
  if (plan.d) cublasLtMatrixLayoutDestroy(plan.d);
  if (plan.b) cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.a) cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.desc) cublasLtMatmulDescDestroy(plan.desc);
  plan = {};
}

// Column-major view, as for the 16-bit GEMMs (gemm.cc): y^T [N, M] = w [N, K] * xq^T [K, M], with
// A = w stored K x N (ld K, transposed) and B = xq stored K x M (ld K): the "TN" layout Hopper's
// fp8 kernels require. A's scales go with op(A)'s N rows, B's with its M columns.
Fp8Gemm::Plan& Fp8Gemm::plan(const Problem& p) {
  auto [it, inserted] = plans_.try_emplace(p.key());
  Plan& plan = it->second;
  if (!inserted) return plan;
  if (p.M <= 0 || p.N <= 0 || p.K % 16 != 0 || (p.block && p.K % 128 != 0)) return plan;
  RILL_CUBLAS(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  const int32_t mode = p.block ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                               : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  set(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, mode);
  set(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mode);
  set(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(p.fast_accum ? 1 : 0));
  // Real pointers are set per call (run); some libraries want non-null ones for the heuristic.
  set(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, workspace_);
  set(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, workspace_);
  RILL_CUBLAS(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_8F_E4M3, p.K, p.N, p.K));
  RILL_CUBLAS(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_8F_E4M3, p.K, p.M, p.K));
  RILL_CUBLAS(cublasLtMatrixLayoutCreate(&plan.d, out_type(p), p.N, p.M, p.N));
  const std::vector<Candidate> results = query(plan, 1);
  // No algorithm (shape, alignment, or a library without these scale modes): the caller falls
  // back to the GEMV, one 16-row tile at a time.
  if (results.empty()) {
    destroy(plan);
    return plan;
  }
  plan.algo = results[0].algo;
  plan.ok = true;
  return plan;
}

std::vector<Fp8Gemm::Candidate> Fp8Gemm::query(const Plan& plan, int max) {
  if (max <= 0) return {};
  cublasLtMatmulPreference_t pref = nullptr;
  RILL_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = workspace_bytes_;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  std::vector<cublasLtMatmulHeuristicResult_t> results(max);
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan.desc, plan.a, plan.b, plan.d, plan.d, pref, max, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<Candidate> out;
  for (int i = 0; st == CUBLAS_STATUS_SUCCESS && i < found; ++i)
    out.push_back({results[i].algo, results[i].workspaceSize, results[i].wavesCount});
  return out;
}

std::vector<Fp8Gemm::Candidate> Fp8Gemm::heuristics(const Problem& p, int max) {
  const Plan& pl = plan(p);
  if (!pl.ok) return {};
  return query(pl, max);
}

bool Fp8Gemm::supported(const Problem& p) {
  return plan(p).ok;
}

int Fp8Gemm::rows(const Problem& p) {
  if (p.M <= 0) return 0;
  if (supported(p)) return p.M;
  for (int align = 4; align <= 128; align *= 2) {
    Problem q = p;
    q.M = p.M / align * align;
    if (q.M <= 0) break;
    if (q.M != p.M && supported(q)) return q.M;
  }
  return 0;
}

void Fp8Gemm::run(const Problem& p, const uint8_t* xq, const float* x_scale, const void* w,
                  const float* w_scale, void* y) {
  Plan& pl = plan(p);
  enqueue(pl, pl.algo, xq, x_scale, w, w_scale, y);
}

void Fp8Gemm::run(const Problem& p, const cublasLtMatmulAlgo_t& algo, const uint8_t* xq,
                  const float* x_scale, const void* w, const float* w_scale, void* y) {
  enqueue(plan(p), algo, xq, x_scale, w, w_scale, y);
}

void Fp8Gemm::enqueue(Plan& pl, const cublasLtMatmulAlgo_t& algo, const uint8_t* xq,
                      const float* x_scale, const void* w, const float* w_scale, void* y) {
  if (!pl.ok) throw Error(ErrorCode::kInternal, "fp8 GEMM: no cuBLASLt algorithm for this problem");
  set(pl.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(w_scale));
  set(pl.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(x_scale));
  const float one = 1.0f, zero = 0.0f;
  RILL_CUBLAS(cublasLtMatmul(handle_, pl.desc, &one, w, pl.a, xq, pl.b, &zero, y, pl.d, y, pl.d,
                             &algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace rill::cuda
