// Tensor parallelism on one host's GPUs (docs/tensor_parallel.md):
//  1. NCCL all-reduce latency (bf16, in place) from 8 KB to 64 MB over --world GPUs: per op,
//     eagerly and as 20 ops replayed in one CUDA graph (how a decode step issues them), medians
//     of CUDA-event timings after warm-up, with the bus bandwidth 2 (n - 1) / n * bytes / time;
//  2. batch-1 decode TPOT of --model at each of --tp (0: the plain CUDA runner; N: a group of N,
//     1 included), one sequence with --context cached tokens, median of --steps steps, one step
//     at a time and with two in flight (the serving engine's pipelining);
//  3. the all-reduce's share of the batch-1 step: 2 per layer (o, down) of hidden bf16 values
//     and one of the embeddings (counted at the same latency), at the in-graph latency measured
//     for their size;
//  4. where peer memory serves: the residual add + norm that follows an all-reduce, for 1 ..
//     512 token rows of the model's hidden size, as NCCL's all-reduce then add_norm against
//     add_norm with the all-reduce fused in (kernels::PeerSum), in CUDA graphs: the crossover
//     behind CudaTuning::peer_sum_max_tokens; and each TP size's TPOT with NCCL only.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <thread>

#include "bench/bench_util.h"
#include "engine/cuda/cuda_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/tp/host_collective.h"
#include "engine/tp/nccl_collective.h"
#include "engine/tp/peer_group.h"
#include "engine/tp/tp_factory.h"
#include "rill/kernels/gemv.h"
#include "tools/common/engine_flags.h"

namespace rill {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct AllReduceRow {
  size_t bytes = 0;
  double eager_us = 0, graph_us = 0;
};

// Rank `rank`'s part of the all-reduce benchmark (its own thread and GPU); rank 0 fills `rows`.
void all_reduce_rank(int rank, int world, const tp::NcclId& id, tp::HostCollective& host,
                     const std::vector<size_t>& sizes, std::vector<AllReduceRow>& rows) {
  BENCH_CUDA(cudaSetDevice(rank));
  const auto comm = tp::make_nccl_collective(id, world, rank);
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* buf = nullptr;
  BENCH_CUDA(cudaMalloc(&buf, sizes.back()));
  BENCH_CUDA(cudaMemset(buf, 0, sizes.back()));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  constexpr int kOpsPerGraph = 20, kWarmup = 5, kIters = 25;
  for (size_t bytes : sizes) {
    const size_t count = bytes / 2;  // bf16
    auto time = [&](const std::function<void()>& launch) {
      std::vector<double> ms;
      for (int i = 0; i < kWarmup + kIters; ++i) {
        host.min(rank, 0);  // start together: the time is the collective's, not a rank's wait
        BENCH_CUDA(cudaEventRecord(a, s));
        launch();
        BENCH_CUDA(cudaEventRecord(b, s));
        BENCH_CUDA(cudaEventSynchronize(b));
        float t = 0;
        BENCH_CUDA(cudaEventElapsedTime(&t, a, b));
        if (i >= kWarmup) ms.push_back(t);
      }
      return median(ms);
    };
    const double eager =
        time([&] { comm->all_reduce_sum(buf, count, cuda::CollectiveType::kBF16, s); });
    cudaGraph_t g;
    BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kOpsPerGraph; ++i)
      comm->all_reduce_sum(buf, count, cuda::CollectiveType::kBF16, s);
    BENCH_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
    const double graph = time([&] { BENCH_CUDA(cudaGraphLaunch(exec, s)); }) / kOpsPerGraph;
    BENCH_CUDA(cudaGraphExecDestroy(exec));
    BENCH_CUDA(cudaGraphDestroy(g));
    if (rank == 0) rows.push_back({bytes, eager * 1e3, graph * 1e3});
  }
  BENCH_CUDA(cudaFree(buf));
  BENCH_CUDA(cudaStreamDestroy(s));
}

// Median ms per op of `launch` (kOps ops, captured in one CUDA graph on `s`), the ranks
// starting each replay together.
double time_in_graph(int rank, tp::HostCollective& host, cudaStream_t s,
                     const std::function<void()>& launch) {
  constexpr int kOps = 20, kWarmup = 5, kIters = 25;
  cudaGraph_t g;
  BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kOps; ++i) launch();
  BENCH_CUDA(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  BENCH_CUDA(cudaGraphInstantiate(&exec, g, 0));
  cudaEvent_t a, b;
  BENCH_CUDA(cudaEventCreate(&a));
  BENCH_CUDA(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < kWarmup + kIters; ++i) {
    host.min(rank, 0);
    BENCH_CUDA(cudaEventRecord(a, s));
    BENCH_CUDA(cudaGraphLaunch(exec, s));
    BENCH_CUDA(cudaEventRecord(b, s));
    BENCH_CUDA(cudaEventSynchronize(b));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, a, b));
    if (i >= kWarmup) ms.push_back(t / kOps);
  }
  BENCH_CUDA(cudaEventDestroy(a));
  BENCH_CUDA(cudaEventDestroy(b));
  BENCH_CUDA(cudaGraphExecDestroy(exec));
  BENCH_CUDA(cudaGraphDestroy(g));
  return median(ms);
}

struct PeerSumRow {
  int tokens = 0;
  double nccl_us = 0, fused_us = 0;
};

// Rank `rank`'s part of the crossover table: NCCL all-reduce + add_norm against the fused
// add_norm over `peers`, bf16 rows of `hidden`.
void peer_sum_rank(int rank, int world, const tp::NcclId& id, tp::HostCollective& host,
                   const tp::PeerGroup& peers, int hidden, const std::vector<int>& tokens,
                   std::vector<PeerSumRow>& rows) {
  BENCH_CUDA(cudaSetDevice(rank));
  const auto comm = tp::make_nccl_collective(id, world, rank);
  cudaStream_t s;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t max_rows = size_t(tokens.back());
  void *residual, *delta, *weight, *out;
  BENCH_CUDA(cudaMalloc(&residual, max_rows * hidden * 4));
  BENCH_CUDA(cudaMalloc(&delta, max_rows * hidden * 2));
  BENCH_CUDA(cudaMalloc(&weight, size_t(hidden) * 2));
  BENCH_CUDA(cudaMalloc(&out, max_rows * hidden * 2));
  BENCH_CUDA(cudaMemset(residual, 0, max_rows * hidden * 4));
  BENCH_CUDA(cudaMemset(delta, 0, max_rows * hidden * 2));
  BENCH_CUDA(cudaMemset(weight, 0, size_t(hidden) * 2));
  BENCH_CUDA(cudaDeviceSynchronize());
  const kernels::PeerSum fused = peers.params(rank, host.exchange(rank, delta));
  for (int T : tokens) {
    kernels::AddNormParams p;
    p.dtype = kernels::DType::kBF16;
    p.num_tokens = T;
    p.hidden = hidden;
    p.residual = static_cast<float*>(residual);
    p.delta0 = delta;
    p.weight0 = weight;
    p.out0 = out;
    const double nccl = time_in_graph(rank, host, s, [&] {
      comm->all_reduce_sum(delta, size_t(T) * hidden, cuda::CollectiveType::kBF16, s);
      BENCH_CUDA(kernels::launch_add_norm(p, s));
    });
    p.peers = fused;
    const double peer = time_in_graph(rank, host, s, [&] {
      BENCH_CUDA(kernels::launch_add_norm(p, s));
    });
    if (rank == 0) rows.push_back({T, nccl * 1e3, peer * 1e3});
  }
  for (void* p : {residual, delta, weight, out}) BENCH_CUDA(cudaFree(p));
  BENCH_CUDA(cudaStreamDestroy(s));
}

void peer_sum_table(int world, int hidden) {
  std::vector<int> gpus(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) gpus[static_cast<size_t>(r)] = r;
  const auto peers = tp::PeerGroup::make(gpus);
  if (!peers) {
    std::printf("\nno peer access between the GPUs: NCCL serves every all-reduce\n");
    return;
  }
  const std::vector<int> tokens = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  const tp::NcclId id = tp::make_nccl_id();
  tp::HostCollective host(world);
  std::vector<PeerSumRow> rows;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back(
        [&, r] { peer_sum_rank(r, world, id, host, *peers, hidden, tokens, rows); });
  for (auto& t : threads) t.join();
  std::printf("\nall-reduce + residual add + RMS norm, bf16 rows of %d, %d GPUs, per op in a CUDA "
              "graph (medians)\n",
              hidden, world);
  std::printf("%8s %14s %18s %10s\n", "tokens", "NCCL + add us", "fused peer-sum us", "ratio");
  for (const PeerSumRow& r : rows)
    std::printf("%8d %14.1f %18.1f %9.2fx\n", r.tokens, r.nccl_us, r.fused_us,
                r.nccl_us / r.fused_us);
}

std::vector<AllReduceRow> all_reduce_table(int world, std::vector<size_t> sizes) {
  std::sort(sizes.begin(), sizes.end());
  const tp::NcclId id = tp::make_nccl_id();
  tp::HostCollective host(world);
  std::vector<AllReduceRow> rows;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] { all_reduce_rank(r, world, id, host, sizes, rows); });
  for (auto& t : threads) t.join();
  std::printf("\nNCCL %s all-reduce, bf16 in place, %d GPUs (medians of CUDA-event timings)\n",
              tp::nccl_version().c_str(), world);
  std::printf("%10s %12s %12s %14s\n", "bytes", "eager us", "in graph us", "bus GB/s");
  for (const AllReduceRow& r : rows) {
    const double bus = 2.0 * (world - 1) / world * double(r.bytes) / (r.graph_us * 1e-6) / 1e9;
    std::printf("%10zu %12.1f %12.1f %14.1f\n", r.bytes, r.eager_us, r.graph_us, bus);
  }
  return rows;
}

struct Tpot {
  double step_ms = 0, pipelined_ms = 0;
};

// Batch-1 decode with `context` cached tokens: the median step, one at a time and pipelined.
Tpot time_tpot(ModelRunner& r, int context, int steps) {
  std::mt19937 rng(1);
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % uint32_t(r.config().vocab_size));
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  for (size_t at = 0; at < prompt.size(); at += 2048) {
    const size_t n = std::min<size_t>(2048, prompt.size() - at);
    const StepInput in{1, std::span<const int32_t>(prompt.data() + at, n), LogitsMode::kNone,
                       false};
    r.step(std::span<const StepInput>(&in, 1));
  }
  Tpot t;
  int32_t next = 1;
  std::vector<double> ms;
  for (int s = 0; s < steps + 8; ++s) {
    const StepInput in{1, std::span<const int32_t>(&next, 1), LogitsMode::kNone, true};
    const auto t0 = Clock::now();
    next = r.step(std::span<const StepInput>(&in, 1)).sampled[0];
    if (s >= 8) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  t.step_ms = median(ms);
  ms.clear();
  const int32_t last = kLastSampled;
  const StepInput pending{1, std::span<const int32_t>(&last, 1), LogitsMode::kNone, true};
  r.launch(std::span<const StepInput>(&pending, 1));
  auto t0 = Clock::now();
  for (int s = 0; s < steps + 8; ++s) {
    r.launch(std::span<const StepInput>(&pending, 1));
    r.finish();
    const auto t1 = Clock::now();
    if (s >= 8) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    t0 = t1;
  }
  r.finish();
  t.pipelined_ms = median(ms);
  r.remove_sequence(1);
  return t;
}

int run(const cli::Args& args) {
  EngineOptions eo = cli::engine_options(args);
  eo.device = "cuda";
  eo.max_batch = 8;
  eo.max_step_tokens = 2048;
  int visible = 0;
  BENCH_CUDA(cudaGetDeviceCount(&visible));
  const int world = std::min(args.get_int("world") > 0 ? args.get_int("world") : visible, 8);
  std::vector<AllReduceRow> ar;
  const Model model = load_model(args.get("model"));
  const size_t hidden_bytes = size_t(model.config.hidden_size) * 2;
  if (world >= 2 && !args.on("no-allreduce")) {
    std::vector<size_t> sizes = {hidden_bytes, 8u << 10};
    for (size_t b = 16u << 10; b <= (64u << 20); b *= 4) sizes.push_back(b);
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    ar = all_reduce_table(world, sizes);
    peer_sum_table(world, model.config.hidden_size);
  }
  std::printf("\nbatch-1 decode, %s, %d cached tokens (median of %d steps)\n",
              args.get("model").c_str(), args.get_int("context"), args.get_int("steps"));
  std::printf("%-28s %12s %16s\n", "runner", "step ms", "pipelined ms");
  double tp1 = 0;
  const CudaTuning base = eo.cuda_tuning;
  struct Run {
    int tp = 0;
    bool nccl_only = false;
    std::vector<std::pair<int, int>> configs;  // projection -> GEMV CTA shape
  };
  std::vector<Run> runs;
  for (int n : bench::int_list(args.get("tp"))) {
    if (n > 1) runs.push_back({n, true, {}});
    runs.push_back({n, false, {}});
    std::stringstream list(args.get("projection-gemv-configs"));
    for (std::string item; std::getline(list, item, ',');) {
      if (item.empty()) continue;
      std::replace(item.begin(), item.end(), '+', ',');
      runs.push_back({n, false, bench::int_pairs(item)});
    }
  }
  for (const Run& run : runs) {
    const int n = run.tp;
    const bool nccl_only = run.nccl_only;
    std::unique_ptr<ModelRunner> r;
    eo.tensor_parallel_size = std::max(1, n);
    eo.cuda_tuning = base;
    if (nccl_only) eo.cuda_tuning.peer_sum_max_tokens = 0;
    std::string shapes;
    for (const auto& [projection, config] : run.configs) {
      eo.cuda_tuning.projection_config(projection) = config;
      shapes += " " + std::to_string(projection) + ":" + kernels::gemv_config_name(config);
    }
    if (n == 0) {
      r = std::make_unique<CudaRunner>(model, eo);
    } else {
      r = tp::make_cuda_tp_runner(model, eo);
    }
    const Tpot t = time_tpot(*r, args.get_int("context"), args.get_int("steps"));
    r.reset();
    if (n == 1 && run.configs.empty()) tp1 = t.pipelined_ms;
    const std::string name =
        (n == 0 ? "plain" : "TP=" + std::to_string(n) + (nccl_only ? " NCCL" : "")) + shapes;
    std::printf("%-28s %12.3f %16.3f", name.c_str(), t.step_ms, t.pipelined_ms);
    if (n > 1 && tp1 > 0) std::printf("   %.2fx TP=1", tp1 / t.pipelined_ms);
    std::printf("\n");
    if (n == world && n > 1 && nccl_only) {
      for (const AllReduceRow& row : ar)
        if (row.bytes == hidden_bytes) {
          const int count = 2 * model.config.num_layers + 1;  // o, down; the embeddings
          const double ms = count * row.graph_us / 1e3;
          std::printf("  all-reduce share at TP=%d: %d x %.1f us = %.3f ms of %.3f ms (%.0f%%)\n",
                      n, count, row.graph_us, ms, t.pipelined_ms, 100.0 * ms / t.pipelined_ms);
        }
    }
  }
  return 0;
}

}  // namespace
}  // namespace rill

int main(int argc, char** argv) {
  using namespace rill;
  cli::Args args("rill-tp-bench", "NCCL all-reduce latency and tensor-parallel batch-1 TPOT.");
  cli::add_engine_flags(args);
  args.option("tp", "0,1,2", "runners to time: 0 the plain CUDA runner, N a group of N GPUs");
  args.option("world", "0", "GPUs of the all-reduce benchmark (0: all visible)");
  args.option("context", "512", "cached tokens of the decoding sequence");
  args.option("steps", "64", "decode steps timed");
  args.flag("no-allreduce", "skip the all-reduce benchmark");
  args.option("projection-gemv-configs", "",
              "also time each runner with single GEMVs forced to CTA shapes: a list of variants, "
              "each projection:shape[+projection:shape...] (projection 1 qkv, 2 o, 4 gate|up, "
              "8 down, 16 LM head; shape an index of rill-gemv-bench's shapes)");
  args.parse(argc, argv);
  try {
    return run(args);
  } catch (const Error& e) {
    std::fprintf(stderr, "rill-tp-bench: error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
}
