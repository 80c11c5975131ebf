// add_norm with PeerSum (the fused one-shot all-reduce of tensor parallelism) against a CPU
// reference of the same fp32 operations: every rank's residual equals the reference bit for bit
// (the ranks' partial sums added in rank order) and the ranks agree with each other, eagerly and
// replayed from CUDA graphs (the barrier's counters carry over), with and without a row gather.
// The ranks run on two GPUs with peer access where the machine has them, else all on one GPU
// (one stream each: the barrier only needs the ranks' CTAs resident at once, so the cases keep
// world x rows small). A rank left alone waits until the abort flag ends its wait.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rill/kernels/elementwise.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::DType;

// GPUs the ranks spread over: 2 when devices 0 and 1 can read each other's memory (peer access
// enabled here), else 1.
int peer_devices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) return 1;
  int a = 0, b = 0;
  cudaDeviceCanAccessPeer(&a, 0, 1);
  cudaDeviceCanAccessPeer(&b, 1, 0);
  if (!a || !b) return 1;
  for (int d : {0, 1}) {
    cudaSetDevice(d);
    if (cudaDeviceEnablePeerAccess(1 - d, 0) == cudaErrorPeerAccessAlreadyEnabled)
      cudaGetLastError();
  }
  cudaSetDevice(0);
  return 2;
}

struct Rank {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<DeviceBuffer> residual, delta, out, flags, epochs;
};

struct GroupCase {
  int world, hidden, tokens;
  bool gather, graphs;
  int rounds;
  int ctas = kernels::kMaxPeerCtas;  // fewer than tokens: CTAs take several rows
};

// A case's inputs (rounded to the dtype) and the CPU reference of its outputs.
struct GroupData {
  std::vector<int32_t> rows;               // [T] residual rows (gathered or 0 .. T-1)
  std::vector<float> residual;             // [R, H]
  std::vector<std::vector<float>> delta;   // [W][R, H]: each rank's partial sums
  std::vector<float> bias, weight;         // [H]
  std::vector<float> want_res, want_out;   // after c.rounds launches: [R, H], [T, H]
};

GroupData make_group_data(const GroupCase& c, DType dt, std::mt19937& rng) {
  const int W = c.world, H = c.hidden, T = c.tokens;
  const int R = c.gather ? T + 3 : T;  // residual and delta rows
  GroupData g;
  auto& [rows, residual, delta, bias, weight, want_res, want_out] = g;
  rows.resize(T);
  for (int i = 0; i < T; ++i) rows[i] = c.gather ? (i * 7 + 2) % R : i;  // distinct: 7, R coprime
  residual = random_vector(size_t(R) * H, rng, 2.0f);
  delta.resize(W);
  for (auto& d : delta) d = rounded_random(size_t(R) * H, rng, dt);
  bias = rounded_random(H, rng, dt, 0.3f);
  weight = round_to(random_vector(H, rng, 0.5f), dt);
  for (float& w : weight) w = from_half_bits(to_half_bits(w + 1.0f, dt), dt);

  // Reference: each round r += (((0 + d_0) + d_1) + ...) + bias on the gathered rows, in fp32.
  want_res = residual;
  for (int round = 0; round < c.rounds; ++round)
    for (int i = 0; i < T; ++i)
      for (int j = 0; j < H; ++j) {
        const size_t at = size_t(rows[i]) * H + j;
        float d = 0.0f;
        for (int k = 0; k < W; ++k) d += delta[k][at];
        want_res[at] += d + bias[j];
      }
  want_out.assign(size_t(T) * H, 0.0f);
  for (int i = 0; i < T; ++i) {
    const float* r = want_res.data() + size_t(rows[i]) * H;
    double sq = 0;
    for (int j = 0; j < H; ++j) sq += double(r[j]) * r[j];
    const double inv = 1.0 / std::sqrt(sq / H + 1e-5);
    for (int j = 0; j < H; ++j) want_out[size_t(i) * H + j] = float(r[j] * inv * weight[j]);
  }
  want_out = round_to(want_out, dt);
  return g;
}

// Launches c.rounds add_norms on every rank, all from this thread (every rank's launch before
// any waits), replayed from one captured graph per rank with c.graphs.
void launch_rounds(const GroupCase& c, const std::vector<Rank>& ranks,
                   const std::function<kernels::AddNormParams(int)>& params) {
  const int W = c.world;
  std::vector<cudaGraphExec_t> execs(W, nullptr);
  if (c.graphs)
    for (int k = 0; k < W; ++k) {
      CUDA_OK(cudaSetDevice(ranks[k].device));
      cudaGraph_t g;
      CUDA_OK(cudaStreamBeginCapture(ranks[k].stream, cudaStreamCaptureModeThreadLocal));
      CUDA_OK(kernels::launch_add_norm(params(k), ranks[k].stream));
      CUDA_OK(cudaStreamEndCapture(ranks[k].stream, &g));
      CUDA_OK(cudaGraphInstantiate(&execs[k], g, 0));
      CUDA_OK(cudaGraphDestroy(g));
    }
  for (int round = 0; round < c.rounds; ++round)
    for (int k = 0; k < W; ++k) {
      CUDA_OK(cudaSetDevice(ranks[k].device));
      if (c.graphs)
        CUDA_OK(cudaGraphLaunch(execs[k], ranks[k].stream));
      else
        CUDA_OK(kernels::launch_add_norm(params(k), ranks[k].stream));
    }
  for (int k = 0; k < W; ++k) {
    CUDA_OK(cudaSetDevice(ranks[k].device));
    CUDA_OK(cudaStreamSynchronize(ranks[k].stream));
    if (execs[k]) CUDA_OK(cudaGraphExecDestroy(execs[k]));
  }
}

void run_group(const GroupCase& c, DType dt, int devices, std::mt19937& rng) {
  SCOPED_TRACE(std::string(dt == DType::kF16 ? "f16" : "bf16") + " world=" +
               std::to_string(c.world) + " hidden=" + std::to_string(c.hidden) +
               " T=" + std::to_string(c.tokens) + " ctas=" + std::to_string(c.ctas) +
               (c.gather ? " rows" : "") +
               (c.graphs ? " graphs" : " eager") + " devices=" + std::to_string(devices));
  const int W = c.world, H = c.hidden, T = c.tokens;
  const GroupData data = make_group_data(c, dt, rng);
  const auto& [rows, residual, delta, bias, weight, want_res, want_out] = data;
  std::vector<Rank> ranks(W);
  std::vector<std::unique_ptr<DeviceBuffer>> shared;  // per device: bias, weight, rows
  std::vector<const void*> bias_on(devices), weight_on(devices), rows_on(devices);
  for (int d = 0; d < devices; ++d) {
    CUDA_OK(cudaSetDevice(d));
    for (auto [v, bytes, out] : {std::tuple{&bias, 2, &bias_on}, {&weight, 2, &weight_on}}) {
      shared.push_back(std::make_unique<DeviceBuffer>(v->size(), bytes));
      shared.back()->upload_floats(*v, dt);
      (*out)[d] = shared.back()->get();
    }
    shared.push_back(std::make_unique<DeviceBuffer>(rows.size(), 4));
    shared.back()->upload(rows.data());
    rows_on[d] = shared.back()->get();
  }
  kernels::PeerSum ps;
  ps.world = W;
  ps.ctas = c.ctas;
  for (int k = 0; k < W; ++k) {
    Rank& rk = ranks[k];
    rk.device = k % devices;
    CUDA_OK(cudaSetDevice(rk.device));
    CUDA_OK(cudaStreamCreateWithFlags(&rk.stream, cudaStreamNonBlocking));
    rk.residual = std::make_unique<DeviceBuffer>(residual.size(), 4);
    rk.residual->upload_floats(residual, dt);
    rk.delta = std::make_unique<DeviceBuffer>(delta[k].size(), 2);
    rk.delta->upload_floats(delta[k], dt);
    rk.out = std::make_unique<DeviceBuffer>(size_t(T) * H, 2);
    rk.out->poison();
    rk.flags = std::make_unique<DeviceBuffer>(size_t(kernels::kMaxPeerRanks) * kernels::kMaxPeerCtas, 4);
    rk.epochs = std::make_unique<DeviceBuffer>(kernels::kMaxPeerCtas, 4);
    CUDA_OK(cudaMemset(rk.flags->get(), 0, rk.flags->bytes()));
    CUDA_OK(cudaMemset(rk.epochs->get(), 0, rk.epochs->bytes()));
    ps.delta0[k] = rk.delta->get();
    ps.flags[k] = rk.flags->as<uint32_t>();
  }
  for (int d = 0; d < devices; ++d) {
    CUDA_OK(cudaSetDevice(d));
    CUDA_OK(cudaDeviceSynchronize());
  }
  auto params = [&](int k) {
    const Rank& rk = ranks[k];
    kernels::AddNormParams p;
    p.dtype = dt;
    p.num_tokens = T;
    p.hidden = H;
    p.residual = rk.residual->as<float>();
    p.delta0 = rk.delta->get();
    p.bias0 = bias_on[rk.device];
    p.weight0 = weight_on[rk.device];
    p.out0 = rk.out->get();
    p.rows = c.gather ? static_cast<const int32_t*>(rows_on[rk.device]) : nullptr;
    p.peers = ps;
    p.peers.rank = k;
    p.peers.epochs = rk.epochs->as<uint32_t>();
    return p;
  };
  launch_rounds(c, ranks, params);
  std::vector<float> out0;
  for (int k = 0; k < W; ++k) {
    Rank& rk = ranks[k];
    CUDA_OK(cudaSetDevice(rk.device));
    CUDA_OK(cudaStreamDestroy(rk.stream));
    SCOPED_TRACE("rank " + std::to_string(k));
    EXPECT_TRUE(rk.residual->check_guards());
    EXPECT_TRUE(rk.out->check_guards());
    const std::vector<float> got_res = rk.residual->download_floats(dt);
    EXPECT_LE(max_abs_error(got_res, want_res), 0.0) << "residual (same fp32 operations)";
    const std::vector<float> got = rk.out->download_floats(dt);
    expect_close(got, want_out, dt, "out0");
    if (k == 0)
      out0 = got;
    else
      EXPECT_EQ(max_abs_error(got, out0), 0.0) << "every rank computes the same bits";
    std::vector<uint32_t> epochs(kernels::kMaxPeerCtas);
    rk.epochs->download(epochs.data());
    for (int b = 0; b < kernels::kMaxPeerCtas; ++b)
      ASSERT_EQ(epochs[b], b < std::min(T, c.ctas) ? uint32_t(c.rounds) : 0u) << "CTA " << b;
  }
  CUDA_OK(cudaSetDevice(0));
}

TEST(PeerSum, RanksSumInRankOrderAndAgreeEagerAndInGraphs) {
  RILL_REQUIRE_GPU();
  const int devices = peer_devices();
  std::mt19937 rng(5);
  for (DType dt : kDTypes) {
    // world x CTAs stay resident at once on one GPU (an add_norm CTA may take a whole SM).
    run_group({2, 4096, 1, false, false, 3}, dt, devices, rng);
    run_group({2, 4096, 16, false, true, 4}, dt, devices, rng);
    run_group({2, 8192, 5, true, false, 2}, dt, devices, rng);
    run_group({2, 4096, 300, false, true, 2, 16}, dt, devices, rng);  // 18-19 rows a CTA
    run_group({4, 5120, 3, false, true, 3}, dt, devices, rng);
    run_group({4, 1024, 37, true, true, 2, 5}, dt, devices, rng);
    run_group({8, 4096, 2, false, false, 2}, dt, devices, rng);
    run_group({8, 2048, 64, false, false, 2, 3}, dt, devices, rng);
    run_group({1, 2048, 7, false, true, 2}, dt, devices, rng);  // a group of one: its own sum
  }
}

TEST(PeerSum, ARankWaitsForTheOthersUntilTheAbortFlagEndsTheWait) {
  RILL_REQUIRE_GPU();
  const int H = 1024;
  int* abort_flag = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&abort_flag), sizeof(int), cudaHostAllocMapped));
  *abort_flag = 0;
  DeviceBuffer residual(H, 4), delta0(H, 2), delta1(H, 2), weight(H, 2), out(H, 2);
  DeviceBuffer flags(size_t(kernels::kMaxPeerRanks) * kernels::kMaxPeerCtas, 4);
  DeviceBuffer epochs(kernels::kMaxPeerCtas, 4);
  for (DeviceBuffer* b : {&residual, &delta0, &delta1, &weight, &out, &flags, &epochs})
    CUDA_OK(cudaMemset(b->get(), 0, b->bytes()));
  kernels::AddNormParams p;
  p.dtype = DType::kBF16;
  p.num_tokens = 1;
  p.hidden = H;
  p.residual = residual.as<float>();
  p.delta0 = delta0.get();
  p.weight0 = weight.get();
  p.out0 = out.get();
  p.peers.world = 2;
  p.peers.rank = 0;
  p.peers.ctas = 1;
  p.peers.delta0[0] = delta0.get();
  p.peers.delta0[1] = delta1.get();
  p.peers.flags[0] = flags.as<uint32_t>();
  p.peers.flags[1] = flags.as<uint32_t>() + 1;  // rank 1 never launches: nobody signals rank 0
  p.peers.epochs = epochs.as<uint32_t>();
  p.peers.abort = abort_flag;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(kernels::launch_add_norm(p, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady) << "rank 0 must wait for rank 1";
  *static_cast<volatile int*>(abort_flag) = 1;
  const auto t0 = std::chrono::steady_clock::now();
  while (cudaStreamQuery(s) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CUDA_OK(cudaStreamSynchronize(s));  // ended by the flag (a hang fails the test above, not here)
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFreeHost(abort_flag));
}

TEST(PeerSum, RejectsBadArguments) {
  float f[64];
  kernels::AddNormParams p;
  p.num_tokens = 1;
  p.hidden = 64;
  p.residual = f;
  p.weight0 = f;
  p.out0 = f;
  p.delta0 = f;
  p.peers.world = 2;
  p.peers.delta0[0] = f;
  p.peers.delta0[1] = f + 32;
  uint32_t flags[2];
  p.peers.flags[0] = p.peers.flags[1] = flags;
  p.peers.epochs = flags;
  auto rejects = [&](auto change, const char* what) {
    kernels::AddNormParams q = p;
    change(q);
    EXPECT_EQ(kernels::launch_add_norm(q, nullptr), cudaErrorInvalidValue) << what;
  };
  rejects([](auto& q) { q.peers.world = kernels::kMaxPeerRanks + 1; }, "too many ranks");
  rejects([](auto& q) { q.peers.rank = 2; }, "rank outside the world");
  rejects([](auto& q) { q.peers.ctas = 0; }, "no CTA");
  rejects([](auto& q) { q.peers.ctas = kernels::kMaxPeerCtas + 1; }, "too many CTAs");
  rejects([](auto& q) { q.delta0 = q.peers.delta0[1]; }, "delta0 not this rank's buffer");
  rejects([&](auto& q) { q.delta1 = f; }, "a second delta");
  rejects([](auto& q) { q.peers.epochs = nullptr; }, "no counters");
  rejects([](auto& q) { q.peers.flags[1] = nullptr; }, "a rank without flags");
  rejects([](auto& q) { q.hidden = 60; }, "hidden not a multiple of 8");
}

}  // namespace
}  // namespace rill::testing
