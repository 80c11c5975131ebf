// cuBLASLt's candidates for Rill's W8A8 fp8 GEMMs (engine/cuda/gemm_fp8.h: e4m3 x e4m3, fp32
// accumulation, "TN", per-token x per-row OUTER_VEC_32F scales, bf16 output) at prefill shapes:
// is the heuristic's first algorithm, the one Fp8Gemm runs, the fastest of its top candidates?
// For each projection of Llama-2-7B and Llama-3-8B and each M (--m), the same descriptors as
// Fp8Gemm::plan ask cublasLtMatmulAlgoGetHeuristic for up to --algos results; each is timed
// (CUDA events, median of --iters after --warmup) on random operands, every timed call reading a
// different copy of the weights (a working set of several times the L2, as a prefill step's
// layers do). A table per problem lists the candidates in the heuristic's order with their
// configuration (tile, stages, cluster: cublasLt.h's enum names, generated from the toolkit's
// header at configure time), then Fp8Gemm::run itself and the 16-bit GEMM the runner takes for
// bf16 weights (Gemm::run, cublasGemmEx); "x #1" is a candidate's speed-up on the first (> 1:
// faster). Then the plan with cuBLASLt's fast accumulation (Fp8Gemm::Problem::fast_accum, the
// runner's CudaTuning::fp8_fast_accum): its rate and how far its output is from the plan's
// (largest |difference| over the largest |y|). A summary gives, per problem, the first, the best
// and the fast-accumulation rate, whether the best's output is bit-identical to the first's, and
// per model the time of --layers layers of the four projections at M = --sum-m.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_random.cuh"
#include "bench/bench_util.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/gemm_fp8.h"

namespace {

using rill::bench::median_ms;
using rill::cuda::Fp8Gemm;

struct Shape {
  const char* model;
  const char* name;
  int N, K;
};

const Shape kShapes[] = {
    {"llama2-7b", "qkv", 12288, 4096},     {"llama2-7b", "o", 4096, 4096},
    {"llama2-7b", "gate_up", 22016, 4096}, {"llama2-7b", "down", 4096, 11008},
    {"llama3-8b", "qkv", 6144, 4096},      {"llama3-8b", "o", 4096, 4096},
    {"llama3-8b", "gate_up", 28672, 4096}, {"llama3-8b", "down", 4096, 14336},
};

struct Options {
  std::vector<int> ms = {64, 256, 1024, 2048, 8192};
  std::vector<std::string> models = {"llama2-7b", "llama3-8b"};
  int algos = 16, warmup = 5, iters = 20, layers = 32, sum_m = 2048;
  bool bf16 = true;
};

// {kind, value, name} for cublasLt.h's MATMUL_TILE, MATMUL_STAGES and CLUSTER_SHAPE enums.
struct EnumName {
  const char* kind;
  long value;
  const char* name;
};
const EnumName kEnumNames[] = {
#include "cublaslt_names.inc"
    {nullptr, 0, nullptr}};

std::string enum_name(const char* kind, long value) {
  if (value == 0) return std::strcmp(kind, "CLUSTER_SHAPE") == 0 ? "auto" : "undef";
  for (const EnumName& e : kEnumNames)
    if (e.kind && std::strcmp(e.kind, kind) == 0 && e.value == value) return e.name;
  std::string id = "#";  // (not "#" + to_string: gcc 12's -Wrestrict false positive)
  id += std::to_string(value);
  return id;
}

// An algorithm's configuration attribute, whatever integer width this cuBLASLt stores it in.
long config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0 || bytes > 8)
    return -1;
  uint64_t v = 0;  // little-endian: the low bytes hold a narrower value
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, bytes, &bytes) != CUBLAS_STATUS_SUCCESS)
    return -1;
  return bytes == 4 ? long(int32_t(uint32_t(v))) : long(v);
}

// "  66 128x128   128x6    1x1x1  k1  r0 s0 o2": algorithm id, tile, stages, cluster, split-K
// count, reduction scheme, CTA swizzling, custom option (the table's "k r s o").
std::string describe(const cublasLtMatmulAlgo_t& a) {
  char buf[160];
  std::snprintf(
      buf, sizeof(buf), "%4ld %-9s %-8s %-6s k%-2ld r%ld s%ld o%-2ld",
      config(a, CUBLASLT_ALGO_CONFIG_ID),
      enum_name("MATMUL_TILE", config(a, CUBLASLT_ALGO_CONFIG_TILE_ID)).c_str(),
      enum_name("MATMUL_STAGES", config(a, CUBLASLT_ALGO_CONFIG_STAGES_ID)).c_str(),
      enum_name("CLUSTER_SHAPE", config(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)).c_str(),
      config(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), config(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
      config(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), config(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION));
  return buf;
}

// Finite e4m3 in (-448, 448) (no NaN codes), bf16 in [-scale/2, scale/2), scales in [s, 2s).
__global__ void fill_e4m3_kernel(__nv_fp8_e4m3* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = __nv_fp8_e4m3(rill::bench::hash_uniform(i, seed) * 880.0f);
}
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(rill::bench::hash_uniform(i, seed) * scale);
}
__global__ void fill_scale_kernel(float* p, size_t n, uint32_t seed, float s) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = s * (1.5f + rill::bench::hash_uniform(i, seed));
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  BENCH_CUDA(cudaMalloc(&p, bytes));
  return p;
}

// One shape's operands for M up to max_m: `copies` weight copies (e4m3 with per-row scales, and
// bf16 when measured), activations (e4m3 with per-token scales, bf16) and the output.
struct Operands {
  std::vector<void*> w8, w_scale, w16;
  void *x8 = nullptr, *x_scale = nullptr, *x16 = nullptr, *y = nullptr;
};

Operands allocate(const Shape& s, int max_m, bool bf16, int l2_bytes, cudaStream_t stream) {
  Operands o;
  const size_t nk = size_t(s.N) * s.K, mk = size_t(max_m) * s.K;
  for (int c = 0; c < rill::bench::copies_beyond_l2(nk, l2_bytes); ++c) {
    o.w8.push_back(alloc(nk));
    o.w_scale.push_back(alloc(size_t(s.N) * 4));
    fill_e4m3_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(o.w8.back()), nk,
                                               11 + c);
    fill_scale_kernel<<<64, 256, 0, stream>>>(static_cast<float*>(o.w_scale.back()), s.N, 41 + c,
                                              1e-3f);
  }
  for (int c = 0; bf16 && c < rill::bench::copies_beyond_l2(2 * nk, l2_bytes); ++c) {
    o.w16.push_back(alloc(2 * nk));
    fill_bf16_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(o.w16.back()), nk,
                                               71 + c, 0.1f);
  }
  o.x8 = alloc(mk);
  o.x_scale = alloc(size_t(max_m) * 4);
  fill_e4m3_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_fp8_e4m3*>(o.x8), mk, 3);
  fill_scale_kernel<<<64, 256, 0, stream>>>(static_cast<float*>(o.x_scale), max_m, 5, 1e-2f);
  if (bf16) {
    o.x16 = alloc(2 * mk);
    fill_bf16_kernel<<<1024, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(o.x16), mk, 7, 2.0f);
  }
  o.y = alloc(size_t(max_m) * s.N * 2);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(stream));
  return o;
}

void release(Operands& o) {
  for (auto* v : {&o.w8, &o.w_scale, &o.w16})
    for (void* p : *v) BENCH_CUDA(cudaFree(p));
  for (void* p : {o.x8, o.x_scale, o.x16, o.y})
    if (p) BENCH_CUDA(cudaFree(p));
}

// One problem's figures; times in ms, < 0 where not measured.
struct Result {
  const Shape* shape = nullptr;
  int M = 0;
  int candidates = 0, failed = 0, best_rank = 0;
  double first_ms = -1, best_ms = -1, plan_ms = -1, bf16_ms = -1;
  double fast_ms = -1, fast_diff = -1;  // the plan with fast accumulation; its relative difference
  bool identical = false;
};

double tflops(int M, const Shape& s, double ms) {
  return ms > 0 ? 2.0 * M * double(s.N) * s.K / (ms * 1e-3) / 1e12 : 0.0;
}

// `algo` (nullptr: the plan's, as the runner calls it) on weight copy 0, once, then timed over
// the copies; -1 when cuBLASLt refuses it.
double time_fp8(Fp8Gemm& gemm, const Fp8Gemm::Problem& p, const cublasLtMatmulAlgo_t* algo,
                const Operands& o, const Options& opt, cudaStream_t stream) {
  int next = 0;
  auto call = [&] {
    const size_t c = next++ % o.w8.size();
    const auto* x8 = static_cast<const uint8_t*>(o.x8);
    const auto* xs = static_cast<const float*>(o.x_scale);
    const auto* ws = static_cast<const float*>(o.w_scale[c]);
    if (algo)
      gemm.run(p, *algo, x8, xs, o.w8[c], ws, o.y);
    else
      gemm.run(p, x8, xs, o.w8[c], ws, o.y);
  };
  try {
    call();
    BENCH_CUDA(cudaStreamSynchronize(stream));
    return median_ms(call, stream, opt.warmup, opt.iters);
  } catch (const rill::Error& e) {
    std::printf("      failed: %s\n", e.what());
    return -1;
  }
}

// y after `algo` on weight copy 0 (bf16 [M, N] bytes).
std::vector<uint8_t> output(Fp8Gemm& gemm, const Fp8Gemm::Problem& p,
                            const cublasLtMatmulAlgo_t* algo, const Operands& o,
                            cudaStream_t stream) {
  const auto* x8 = static_cast<const uint8_t*>(o.x8);
  const auto* xs = static_cast<const float*>(o.x_scale);
  const auto* ws = static_cast<const float*>(o.w_scale[0]);
  BENCH_CUDA(cudaMemsetAsync(o.y, 0xff, size_t(p.M) * p.N * 2, stream));
  if (algo)
    gemm.run(p, *algo, x8, xs, o.w8[0], ws, o.y);
  else
    gemm.run(p, x8, xs, o.w8[0], ws, o.y);
  std::vector<uint8_t> y(size_t(p.M) * p.N * 2);
  BENCH_CUDA(cudaMemcpyAsync(y.data(), o.y, y.size(), cudaMemcpyDeviceToHost, stream));
  BENCH_CUDA(cudaStreamSynchronize(stream));
  return y;
}

// Largest |a - b| over the largest |a|, a and b bf16 outputs (bytes, little-endian).
double relative_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  auto value = [](const std::vector<uint8_t>& y, size_t i) {
    const uint32_t bits = uint32_t(y[2 * i] | (y[2 * i + 1] << 8)) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return double(f);
  };
  double diff = 0, top = 0;
  for (size_t i = 0; i < a.size() / 2; ++i) {
    diff = std::max(diff, std::abs(value(a, i) - value(b, i)));
    top = std::max(top, std::abs(value(a, i)));
  }
  return top > 0 ? diff / top : diff;
}

Result bench_problem(const Shape& s, int M, Fp8Gemm& gemm, rill::cuda::Gemm& gemm16,
                     const Operands& o, const Options& opt, cudaStream_t stream) {
  Result r;
  r.shape = &s;
  r.M = M;
  const Fp8Gemm::Problem p{M, s.N, s.K, false, rill::kernels::DType::kBF16, false};
  const std::vector<Fp8Gemm::Candidate> cands = gemm.heuristics(p, opt.algos);
  r.candidates = int(cands.size());
  std::printf("\n%s %s  M=%d N=%d K=%d: %zu candidates, in the heuristic's order\n", s.model,
              s.name, M, s.N, s.K, cands.size());
  std::printf("  %4s %4s %-9s %-8s %-6s %-13s %5s %6s %9s %7s  %5s\n", "rank", "id", "tile",
              "stages", "clust", "k r s o", "waves", "ws MB", "us", "TFLOP/s", "x #1");
  std::vector<double> ms(cands.size(), -1);
  for (size_t i = 0; i < cands.size(); ++i) {
    const Fp8Gemm::Candidate& c = cands[i];
    std::printf("  %4zu %s %5.2f %6.1f", i + 1, describe(c.algo).c_str(), c.waves,
                c.workspace_bytes / 1048576.0);
    std::fflush(stdout);
    ms[i] = time_fp8(gemm, p, &c.algo, o, opt, stream);
    if (ms[i] < 0) {
      ++r.failed;
      continue;
    }
    if (i == 0) r.first_ms = ms[i];
    if (r.best_ms < 0 || ms[i] < r.best_ms) {
      r.best_ms = ms[i];
      r.best_rank = int(i) + 1;
    }
    std::printf(" %9.1f %7.1f  %5.3f\n", ms[i] * 1e3, tflops(M, s, ms[i]),
                r.first_ms > 0 ? r.first_ms / ms[i] : 0.0);
  }
  if (cands.empty()) return r;
  r.plan_ms = time_fp8(gemm, p, nullptr, o, opt, stream);
  const std::vector<uint8_t> first = output(gemm, p, &cands[0].algo, o, stream);
  const bool plan_same = output(gemm, p, nullptr, o, stream) == first;
  std::printf("  Fp8Gemm::run (plan)   %9.1f us %7.1f TFLOP/s  output bit-identical to #1: %s\n",
              r.plan_ms * 1e3, tflops(M, s, r.plan_ms), plan_same ? "yes" : "no");
  Fp8Gemm::Problem fast = p;
  fast.fast_accum = true;
  r.fast_ms = time_fp8(gemm, fast, nullptr, o, opt, stream);
  if (r.fast_ms > 0) {
    r.fast_diff = relative_difference(output(gemm, p, nullptr, o, stream),
                                      output(gemm, fast, nullptr, o, stream));
    std::printf(
        "  plan, fast accumulate %9.1f us %7.1f TFLOP/s  %.3fx plan; max |diff| / max |y| "
        "%.2e\n",
        r.fast_ms * 1e3, tflops(M, s, r.fast_ms), r.plan_ms / r.fast_ms, r.fast_diff);
  }
  if (r.best_rank > 0) {
    r.identical = output(gemm, p, &cands[r.best_rank - 1].algo, o, stream) == first;
    std::printf("  best: #%d, %.3fx #1; output bit-identical to #1: %s\n", r.best_rank,
                r.first_ms > 0 ? r.first_ms / r.best_ms : 0.0, r.identical ? "yes" : "no");
  }
  if (opt.bf16) {
    int next = 0;
    r.bf16_ms =
        median_ms([&] { gemm16.run(o.x16, o.w16[next++ % o.w16.size()], o.y, M, s.N, s.K); },
                  stream, opt.warmup, opt.iters);
    std::printf("  bf16 cublasGemmEx     %9.1f us %7.1f TFLOP/s  (fp8 #1: %.2fx bf16)\n",
                r.bf16_ms * 1e3, tflops(M, s, r.bf16_ms),
                r.first_ms > 0 ? r.bf16_ms / r.first_ms : 0.0);
  }
  return r;
}

void summary(const std::vector<Result>& results, const Options& opt) {
  std::printf("\nSummary (TFLOP/s; best: the fastest candidate, its rank, its speed-up on #1)\n");
  std::printf("%-10s %-8s %5s %5s  %8s %8s %5s %7s  %9s  %8s  %8s %8s\n", "model", "proj", "M",
              "tried", "#1", "best", "rank", "best/#1", "identical", "bf16", "fast", "diff");
  for (const Result& r : results) {
    std::printf("%-10s %-8s %5d %2d/%-2d  %8.1f %8.1f %5d %7.3f  %9s  %8.1f  %8.1f %8.1e\n",
                r.shape->model, r.shape->name, r.M, r.candidates - r.failed, r.candidates,
                tflops(r.M, *r.shape, r.first_ms), tflops(r.M, *r.shape, r.best_ms), r.best_rank,
                r.first_ms > 0 && r.best_ms > 0 ? r.first_ms / r.best_ms : 0.0,
                r.best_rank == 0 ? "-"
                : r.identical    ? "yes"
                                 : "no",
                tflops(r.M, *r.shape, r.bf16_ms), tflops(r.M, *r.shape, r.fast_ms), r.fast_diff);
  }
  std::printf("\n%d layers of the four projections at M = %d (ms)\n", opt.layers, opt.sum_m);
  std::printf("%-10s %9s %9s %9s %9s %9s\n", "model", "#1", "best", "plan", "bf16", "fast");
  for (const std::string& model : opt.models) {
    double first = 0, best = 0, plan = 0, bf16 = 0, fast = 0;
    int n = 0;
    for (const Result& r : results) {
      if (r.shape->model != model || r.M != opt.sum_m) continue;
      first += r.first_ms;
      best += r.best_ms;
      plan += r.plan_ms;
      bf16 += r.bf16_ms;
      fast += r.fast_ms;
      ++n;
    }
    if (n == 4 && first > 0 && best > 0 && plan > 0)
      std::printf("%-10s %9.2f %9.2f %9.2f %9.2f %9.2f\n", model.c_str(), first * opt.layers,
                  best * opt.layers, plan * opt.layers, opt.bf16 ? bf16 * opt.layers : 0.0,
                  fast * opt.layers);
    else
      std::printf("%-10s (not every projection measured at M = %d)\n", model.c_str(), opt.sum_m);
  }
}

std::vector<std::string> str_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v && flag == "--m")
      opt.ms = rill::bench::int_list(v);
    else if (v && flag == "--models")
      opt.models = str_list(v);
    else if (v && flag == "--algos")
      opt.algos = std::atoi(v);
    else if (v && flag == "--warmup")
      opt.warmup = std::atoi(v);
    else if (v && flag == "--iters")
      opt.iters = std::atoi(v);
    else if (v && flag == "--layers")
      opt.layers = std::atoi(v);
    else if (v && flag == "--sum-m")
      opt.sum_m = std::atoi(v);
    else if (v && flag == "--bf16")
      opt.bf16 = std::atoi(v) != 0;
    else {
      std::fprintf(stderr,
                   "usage: %s [--m 64,256,1024,2048,8192] [--models llama2-7b,llama3-8b] "
                   "[--algos 16] [--warmup 5] [--iters 20] [--layers 32] [--sum-m 2048] "
                   "[--bf16 1]\n",
                   argv[0]);
      return 2;
    }
  }
  if (opt.ms.empty() || opt.algos < 1 || opt.iters < 1 || opt.warmup < 0) {
    std::fprintf(stderr, "--m needs a value, --algos and --iters >= 1, --warmup >= 0\n");
    return 2;
  }
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  const rill::bench::Ceilings ceil = rill::bench::measure_ceilings(stream);
  const int l2_bytes = ceil.l2_bytes;
  std::printf("device: %s, L2 %d MB, cuBLASLt %zu; fp16 cuBLAS 8192^3: %.0f TFLOP/s\n",
              ceil.device.c_str(), l2_bytes >> 20, cublasLtGetVersion(), ceil.gemm_tflops);
  std::printf("fp8: e4m3 x e4m3 -> bf16, per-token x per-row scales, %d warm-up + median of %d\n",
              opt.warmup, opt.iters);
  // Fp8Gemm with a 32 MiB workspace, as Gemm gives it; gemm16 is the runner's bf16 path.
  void* workspace = alloc(32u << 20);
  Fp8Gemm gemm(stream, workspace, 32u << 20);
  rill::cuda::Gemm gemm16(rill::kernels::DType::kBF16, stream);
  const int max_m = *std::max_element(opt.ms.begin(), opt.ms.end());
  std::vector<Result> results;
  for (const Shape& s : kShapes) {
    if (std::find(opt.models.begin(), opt.models.end(), s.model) == opt.models.end()) continue;
    Operands o = allocate(s, max_m, opt.bf16, l2_bytes, stream);
    for (int M : opt.ms) results.push_back(bench_problem(s, M, gemm, gemm16, o, opt, stream));
    release(o);
  }
  summary(results, opt);
  BENCH_CUDA(cudaFree(workspace));
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}
