// The weight-only fp8 GEMV (rill/kernels/gemv_fp8.h) at the Llama-2-7B and Llama-3-8B shapes,
// M = 1..16, per-row and 128-column block scales, beside the 16-bit GEMV at M = 1 on the same
// shape: GB/s counts the bytes each reads (e4m3 weights + scales, or fp16 weights), % is of the
// copy bandwidth. Each timed call reads a different copy of the weights (a working set of several
// times the L2), as decode does. Then every CTA shape at M = 1 and 16 (register-buffered, then the
// shared-memory rings: "ringS"), and 32 layers of the 7B shape's GEMVs in one CUDA graph (what the
// GEMVs cost inside a decode step; --chain-shapes: other layers' shapes), per shape and as the
// engine chooses them (the deep prologue for every projection).
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/gemv_fp8.h"

namespace {

using rill::bench::median_ms;
using rill::kernels::Fp8ScaleLayout;

struct Shape {
  const char* name;
  int N, K;
};

size_t scale_floats(Fp8ScaleLayout l, int N, int K) {
  return l == Fp8ScaleLayout::kPerRow ? size_t(N) : size_t((K + 127) / 128) * N;
}

// Weights of every copy, x and y for one shape.
struct Buffers {
  std::vector<void*> w8, scale, w16;
  void *x = nullptr, *y = nullptr;
  int copies = 0;
};

Buffers allocate(const Shape& s, int l2_bytes, cudaStream_t stream) {
  Buffers b;
  const size_t elems = size_t(s.N) * s.K;
  b.copies = rill::bench::copies_beyond_l2(elems, l2_bytes);
  for (int c = 0; c < b.copies; ++c) {
    void *w8, *sc;
    BENCH_CUDA(cudaMalloc(&w8, elems));
    BENCH_CUDA(cudaMalloc(&sc, scale_floats(Fp8ScaleLayout::kBlock128, s.N, s.K) * 4));
    // Random e4m3 bytes (NaN codes included: timing does not care), scales 2^-6 .. 2^-4.
    rill::bench::fill_uniform_half(w8, elems / 2, 17 + c, 0.05f, stream);
    rill::bench::fill_uniform_float(static_cast<float*>(sc),
                                    scale_floats(Fp8ScaleLayout::kBlock128, s.N, s.K), 5 + c, 0.01f,
                                    stream);
    b.w8.push_back(w8);
    b.scale.push_back(sc);
  }
  // The 16-bit GEMV reads twice the bytes per copy: half the copies keep the same working set.
  for (int c = 0; c < std::max(2, b.copies / 2); ++c) {
    void* w16;
    BENCH_CUDA(cudaMalloc(&w16, elems * 2));
    rill::bench::fill_uniform_half(w16, elems, 31 + c, 0.05f, stream);
    b.w16.push_back(w16);
  }
  BENCH_CUDA(cudaMalloc(&b.x, size_t(rill::kernels::kFp8GemvMaxRows) * s.K * 2));
  BENCH_CUDA(cudaMalloc(&b.y, size_t(rill::kernels::kFp8GemvMaxRows) * s.N * 4));
  rill::bench::fill_uniform_half(b.x, size_t(rill::kernels::kFp8GemvMaxRows) * s.K, 3, 2.0f,
                                 stream);
  BENCH_CUDA(cudaStreamSynchronize(stream));
  return b;
}

void release(Buffers& b) {
  for (auto* v : {&b.w8, &b.scale, &b.w16})
    for (void* p : *v) BENCH_CUDA(cudaFree(p));
  BENCH_CUDA(cudaFree(b.x));
  BENCH_CUDA(cudaFree(b.y));
}

rill::kernels::Fp8GemvParams fp8_params(const Shape& s, const Buffers& b, int M, Fp8ScaleLayout l,
                                        int config) {
  rill::kernels::Fp8GemvParams p;
  p.dtype = rill::kernels::DType::kBF16;
  p.M = M;
  p.N = s.N;
  p.K = s.K;
  p.x = b.x;
  p.y = b.y;
  p.scale_layout = l;
  p.config = config;
  return p;
}

double time_fp8(const Shape& s, const Buffers& b, int M, Fp8ScaleLayout l, int config,
                cudaStream_t stream) {
  rill::kernels::Fp8GemvParams p = fp8_params(s, b, M, l, config);
  int next = 0;
  return median_ms(
      [&] {
        const int c = next++ % b.copies;
        p.w = b.w8[c];
        p.scale = static_cast<const float*>(b.scale[c]);
        BENCH_CUDA(rill::kernels::launch_gemv_fp8(p, stream));
      },
      stream, 5, 50);
}

double fp8_bytes(const Shape& s, int M, Fp8ScaleLayout l) {
  return double(s.N) * s.K + 4.0 * scale_floats(l, s.N, s.K) + 2.0 * M * s.K + 2.0 * M * s.N;
}

void bench_shape(const Shape& s, int l2_bytes, double copy_gbps, cudaStream_t stream) {
  Buffers b = allocate(s, l2_bytes, stream);
  int next = 0;
  rill::kernels::GemvParams p16 =
      rill::kernels::gemv_params(rill::kernels::DType::kBF16, 1, s.N, s.K, b.x, nullptr, b.y);
  const double ms16 = median_ms(
      [&] {
        p16.w = b.w16[next++ % b.w16.size()];
        BENCH_CUDA(rill::kernels::launch_gemv(p16, stream));
      },
      stream, 5, 50);
  const double gbps16 = (2.0 * s.N * s.K + 2.0 * s.K + 2.0 * s.N) / (ms16 * 1e-3) / 1e9;
  std::printf("%-8s %6d %6d  bf16 GEMV M=1: %8.4f ms %5.1f%%\n", s.name, s.N, s.K, ms16,
              100 * gbps16 / copy_gbps);
  for (Fp8ScaleLayout l : {Fp8ScaleLayout::kPerRow, Fp8ScaleLayout::kBlock128}) {
    std::printf("%-8s %-9s", s.name, l == Fp8ScaleLayout::kPerRow ? "per-row" : "block128");
    for (int M : {1, 2, 4, 8, 12, 16}) {
      const double ms = time_fp8(s, b, M, l, -1, stream);
      std::printf("  M=%-2d %7.4f ms %5.1f%%", M, ms,
                  100 * fp8_bytes(s, M, l) / (ms * 1e-3) / 1e9 / copy_gbps);
    }
    std::printf("   (M=1 vs bf16: %.2fx)\n", ms16 / time_fp8(s, b, 1, l, -1, stream));
  }
  for (int M : {1, 16}) {
    std::printf("%-8s M=%-2d shapes:", s.name, M);
    for (int c = 0; c < rill::kernels::gemv_fp8_num_configs(); ++c) {
      const double ms = time_fp8(s, b, M, Fp8ScaleLayout::kPerRow, c, stream);
      std::printf("  %s %.1f%%", rill::kernels::gemv_fp8_config_name(c).c_str(),
                  100 * fp8_bytes(s, M, Fp8ScaleLayout::kPerRow) / (ms * 1e-3) / 1e9 / copy_gbps);
    }
    std::printf("\n");
  }
  release(b);
}

// 32 layers of fp8 GEMVs (the Llama-2-7B's unless --chain-shapes says) at M = 1 (distinct weights,
// gate|up with SiLU-and-mul) in one CUDA graph: the default shape, the engine's choice at one token
// (Fp8GemvParams:: deep_prologue for all four, as CudaTuning::fp8_gemv_deep_mask's default rule),
// then every shape forced on all four. Here a GEMV's predecessor is another GEMV, not the short
// attention or add + norm kernel the engine puts before o and gate|up, so the ring's early loads
// have less to overlap than in a decode step (rill-bench --trace shows that). `shapes`: the layer's
// four projections as {N, K} (qkv, o, gate|up, down); the 7B's by default.
void layer_chain(cudaStream_t stream, double copy_gbps, bool ones, const int (&shapes)[4][2]) {
  constexpr int kLayers = 32;
  int I = 0, N_max = 0;  // the largest K and N: x and y
  for (const auto& s : shapes) I = std::max(I, s[1]), N_max = std::max(N_max, s[0]);
  std::vector<void*> w(kLayers * 4), sc(kLayers * 4);
  double bytes = 0;
  for (int i = 0; i < kLayers * 4; ++i) {
    const size_t n = size_t(shapes[i % 4][0]) * shapes[i % 4][1];
    BENCH_CUDA(cudaMalloc(&w[i], n));
    BENCH_CUDA(cudaMalloc(&sc[i], size_t(shapes[i % 4][0]) * 4));
    if (ones) {
      BENCH_CUDA(cudaMemsetAsync(w[i], 1, n, stream));
    } else {
      rill::bench::fill_uniform_half(w[i], n / 2, 100 + i, 0.05f, stream);
    }
    rill::bench::fill_uniform_float(static_cast<float*>(sc[i]), shapes[i % 4][0], 7 + i, 0.01f,
                                    stream);
    bytes += n + shapes[i % 4][0] * 4.0;
  }
  void *x, *y;
  BENCH_CUDA(cudaMalloc(&x, size_t(I) * 2));
  BENCH_CUDA(cudaMalloc(&y, size_t(N_max) * 2));
  rill::bench::fill_uniform_half(x, I, 1, 1.0f, stream);
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::printf(
      "\n32 layers of fp8 GEMVs (N x K %d x %d, %d x %d, %d x %d, %d x %d) at M = 1 in one CUDA "
      "graph (%.2f GB, %s weight bytes)\n",
      shapes[0][0], shapes[0][1], shapes[1][0], shapes[1][1], shapes[2][0], shapes[2][1],
      shapes[3][0], shapes[3][1], bytes / 1e9, ones ? "0x01" : "random");
  constexpr int kEngine = -2;  // a row, not a config: the engine's choice per projection
  std::vector<int> rows = {-1, kEngine};
  for (int c = 0; c < rill::kernels::gemv_fp8_num_configs(); ++c) rows.push_back(c);
  for (int config : rows) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kLayers * 4; ++i) {
      rill::kernels::Fp8GemvParams p;
      p.dtype = rill::kernels::DType::kBF16;
      p.M = 1;
      p.N = shapes[i % 4][0];
      p.K = shapes[i % 4][1];
      p.x = x;
      p.w = w[i];
      p.scale = static_cast<const float*>(sc[i]);
      p.y = y;
      p.config = config == kEngine ? -1 : config;
      p.deep_prologue = config == kEngine;  // CudaRunner::fp8_deep_gemv: all but the LM head
      if (i % 4 == 2) p.epilogue = rill::kernels::GemvEpilogue::kSiluMul;
      BENCH_CUDA(rill::kernels::launch_gemv_fp8(p, stream));
    }
    BENCH_CUDA(cudaStreamEndCapture(stream, &graph));
    BENCH_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    const double ms = median_ms([&] { BENCH_CUDA(cudaGraphLaunch(exec, stream)); }, stream, 3, 15);
    BENCH_CUDA(cudaGraphExecDestroy(exec));
    BENCH_CUDA(cudaGraphDestroy(graph));
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    const std::string name = config == kEngine ? "engine (deep, all four)"
                             : config < 0      ? "default"
                                               : rill::kernels::gemv_fp8_config_name(config);
    std::printf("  %-24s %8.3f ms  %6.0f GB/s  %5.1f%% of copy\n", name.c_str(), ms, gbps,
                100 * gbps / copy_gbps);
  }
  for (void* p : w) BENCH_CUDA(cudaFree(p));
  for (void* p : sc) BENCH_CUDA(cudaFree(p));
  BENCH_CUDA(cudaFree(x));
  BENCH_CUDA(cudaFree(y));
}

}  // namespace

// "N:K,N:K,N:K,N:K" (qkv, o, gate|up, down) into `out`; false if malformed or out of int's
// range (from_chars reports that, where sscanf's %d would be undefined).
bool parse_chain_shapes(const std::string& text, std::array<std::array<int, 2>, 4>& out) {
  const char *p = text.data(), *end = text.data() + text.size();
  for (int i = 0; i < 4; ++i)
    for (int d = 0; d < 2; ++d) {
      const auto [next, ec] = std::from_chars(p, end, out[i][d]);
      if (ec != std::errc() || out[i][d] <= 0) return false;
      p = next;
      const char sep = d == 0 ? ':' : i < 3 ? ',' : '\0';
      if (sep == '\0') break;
      if (p == end || *p++ != sep) return false;
    }
  for (const auto& s : out)
    if (s[1] % 16 != 0) return false;      // K: whole 16-byte chunks
  return p == end && out[2][0] % 16 == 0;  // gate|up: whole SiLU-and-mul tiles
}

int main(int argc, char** argv) {
  bool chain_only = false, ones = false;
  std::vector<std::array<std::array<int, 2>, 4>> chains;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--chain-only") {
      chain_only = true;
    } else if (a == "--chain-shapes" && i + 1 < argc &&
               parse_chain_shapes(argv[i + 1], chains.emplace_back())) {
      ++i;
    } else if (a == "--weights" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "ones" || std::string(argv[i + 1]) == "random")) {
      ones = std::string(argv[++i]) == "ones";
    } else {
      std::fprintf(stderr,
                   "usage: %s [--chain-only] [--weights ones|random] [--chain-shapes "
                   "N:K,N:K,N:K,N:K]...\n"
                   "  --weights: the layer chain's weight bytes (default random; ones: all 0x01)\n"
                   "  --chain-shapes: a layer chain of these qkv, o, gate|up and down shapes "
                   "(repeatable;\n    default the Llama-2-7B's: 12288:4096,4096:4096,22016:4096,"
                   "4096:11008)\n",
                   argv[0]);
      return 2;
    }
  }
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreate(&stream));
  const rill::bench::Ceilings ceil = rill::bench::measure_ceilings(stream);
  const int l2_bytes = ceil.l2_bytes;
  std::printf("device: %s, copy bandwidth %.0f GB/s, L2 %d MB; bf16 activations\n\n",
              ceil.device.c_str(), ceil.copy_gbps, l2_bytes >> 20);
  const Shape shapes[] = {{"qkv", 12288, 4096},    {"o", 4096, 4096},      {"gate_up", 22016, 4096},
                          {"down", 4096, 11008},   {"l3_qkv", 6144, 4096}, {"l3_up", 28672, 4096},
                          {"l3_down", 4096, 14336}};
  if (!chain_only)
    for (const Shape& s : shapes) bench_shape(s, l2_bytes, ceil.copy_gbps, stream);
  if (chains.empty())
    chains.push_back({{{12288, 4096}, {4096, 4096}, {22016, 4096}, {4096, 11008}}});
  for (const auto& c : chains) {
    const int shapes[4][2] = {
        {c[0][0], c[0][1]}, {c[1][0], c[1][1]}, {c[2][0], c[2][1]}, {c[3][0], c[3][1]}};
    layer_chain(stream, ceil.copy_gbps, ones, shapes);
  }
  BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}
