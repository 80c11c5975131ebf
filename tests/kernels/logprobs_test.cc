// GPU log-probabilities (launch_logprobs) against an fp64 CPU reference: the log-softmax of the
// raw row at the sampled token, and the top N (logit descending, lower id on ties). Odd
// vocabularies take the scalar path, multiples of 4 the float4 one; large ones split rows over a
// cluster. Rows with many ties, -inf entries, fewer finite entries than N and constant rows check
// the tie order and the candidate bound. The ids must match exactly (the kernel orders the same
// fp32 values as the reference); log-probabilities within fp32 summation error.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "rill/kernels/logprobs.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct RefRow {
  double sampled = 0;
  std::vector<int> ids;
  std::vector<double> logprobs;
};

RefRow reference(const float* row, int vocab, int token, int n) {
  double mx = -kInf;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, double(row[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(row[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<int> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return row[a] > row[b]; });
  RefRow r;
  r.sampled = double(row[token]) - lse;
  for (int i = 0; i < std::min(n, vocab); ++i) {
    r.ids.push_back(ids[i]);
    r.logprobs.push_back(double(row[ids[i]]) - lse);
  }
  return r;
}

enum class Fill { kNormal, kTies, kSomeInf, kFewFinite, kConstant };
const char* fill_name(Fill f) {
  switch (f) {
    case Fill::kNormal:
      return "normal";
    case Fill::kTies:
      return "ties";
    case Fill::kSomeInf:
      return "some -inf";
    case Fill::kFewFinite:
      return "3 finite";
    case Fill::kConstant:
      return "constant";
  }
  return "?";
}

std::vector<float> make_row(int vocab, Fill fill, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> row(vocab);
  for (float& x : row) {
    switch (fill) {
      case Fill::kNormal:
        x = normal(rng);
        break;
      case Fill::kTies:
        x = std::round(normal(rng) * 0.5f);
        break;  // ~10 distinct values
      case Fill::kSomeInf:
        x = u(rng) < 0.4f ? -INFINITY : normal(rng);
        break;
      case Fill::kFewFinite:
        x = -INFINITY;
        break;
      case Fill::kConstant:
        x = 1.5f;
        break;
    }
  }
  if (fill == Fill::kFewFinite)
    for (int k = 0; k < 3; ++k) row[rng() % vocab] = normal(rng);
  if (fill == Fill::kSomeInf) row[rng() % vocab] = normal(rng);  // never all -inf
  return row;
}

bool close(double got, double want) {
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 5e-5 + 1e-6 * std::abs(want);
}

// One launch over rows of every fill (plus a skipped row) at `vocab`, each asking for `n`
// alternatives, output rows of width 1 + 2 * max_top.
void check(int vocab, int n, int max_top, uint32_t seed) {
  SCOPED_TRACE("vocab " + std::to_string(vocab) + " n " + std::to_string(n) + " max_top " +
               std::to_string(max_top));
  std::mt19937 rng(seed);
  const std::vector<Fill> fills = {Fill::kNormal,    Fill::kTies,     Fill::kSomeInf,
                                   Fill::kFewFinite, Fill::kConstant, Fill::kNormal};
  const int R = static_cast<int>(fills.size()), width = 1 + 2 * max_top;
  std::vector<float> logits;
  std::vector<int32_t> tokens(R), top_n(R, n);
  top_n[R - 1] = -1;  // skipped: its output row stays as it was
  for (int r = 0; r < R; ++r) {
    const auto row = make_row(vocab, fills[r], rng);
    logits.insert(logits.end(), row.begin(), row.end());
    tokens[r] = static_cast<int32_t>(rng() % vocab);
  }
  DeviceBuffer d_logits(logits.size(), 4), d_tokens(R, 4), d_top(R, 4), d_out(size_t(R) * width, 4);
  d_logits.upload(logits.data());
  d_tokens.upload(tokens.data());
  d_top.upload(top_n.data());
  d_out.poison();
  kernels::LogprobsParams p;
  p.num_rows = R;
  p.vocab = vocab;
  p.max_top = max_top;
  p.logits = d_logits.as<float>();
  p.tokens = d_tokens.as<int32_t>();
  p.top_n = d_top.as<int32_t>();
  p.out = d_out.as<float>();
  CUDA_OK(kernels::launch_logprobs(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> out(size_t(R) * width);
  d_out.download(out.data());
  EXPECT_TRUE(d_out.check_guards());
  EXPECT_TRUE(d_logits.check_guards());

  for (int r = 0; r < R; ++r) {
    SCOPED_TRACE(std::string("row ") + std::to_string(r) + " (" + fill_name(fills[r]) + ")");
    const float* o = &out[size_t(r) * width];
    if (top_n[r] < 0) {
      for (int i = 0; i < width; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &o[i], 4);
        ASSERT_EQ(bits, 0xFFFFFFFFu) << "skipped row written at " << i;
      }
      continue;
    }
    const RefRow want = reference(&logits[size_t(r) * vocab], vocab, tokens[r], n);
    EXPECT_TRUE(close(o[0], want.sampled)) << "sampled: " << o[0] << " vs " << want.sampled;
    for (int i = 0; i < max_top; ++i) {
      int32_t id;
      std::memcpy(&id, &o[1 + 2 * i], 4);
      if (i >= static_cast<int>(want.ids.size())) {
        EXPECT_EQ(id, -1) << "slot " << i << " past min(n, vocab)";
        continue;
      }
      ASSERT_EQ(id, want.ids[i]) << "top " << i;
      EXPECT_TRUE(close(o[2 + 2 * i], want.logprobs[i]))
          << "top " << i << ": " << o[2 + 2 * i] << " vs " << want.logprobs[i];
    }
  }
}

TEST(Logprobs, MatchesTheFp64Reference) {
  RILL_REQUIRE_GPU();
  uint32_t seed = 1;
  // 1, 7, 769, 32001: scalar path (32001 over a cluster); the rest float4, 128256 and 152064
  // over clusters of 8.
  for (int vocab : {1, 7, 769, 32000, 32001, 128256, 152064})
    for (int n : {0, 1, 5, 20}) check(vocab, n, kernels::kLogprobsMaxTop, seed++);
  check(769, 5, 5, seed++);  // a narrower output row
  check(128256, 3, 7, seed++);
}

TEST(Logprobs, RejectsBadArguments) {
  RILL_REQUIRE_GPU();
  DeviceBuffer logits(64, 4), tokens(1, 4), out(64, 4);
  kernels::LogprobsParams p;
  p.num_rows = 1;
  p.vocab = 64;
  p.logits = logits.as<float>();
  p.tokens = tokens.as<int32_t>();
  p.out = out.as<float>();
  p.max_top = kernels::kLogprobsMaxTop + 1;
  EXPECT_EQ(kernels::launch_logprobs(p, nullptr), cudaErrorInvalidValue);
  p.max_top = kernels::kLogprobsMaxTop;
  p.vocab = 1 << 20;  // the candidate bound exceeds shared memory: refused before any launch
  EXPECT_EQ(kernels::launch_logprobs(p, nullptr), cudaErrorInvalidValue);
  p.vocab = 64;
  p.max_top = 2;
  p.logits = nullptr;
  EXPECT_EQ(kernels::launch_logprobs(p, nullptr), cudaErrorInvalidValue);
  p.num_rows = 0;
  EXPECT_EQ(kernels::launch_logprobs(p, nullptr), cudaSuccess);
}

TEST(Logprobs, CopyRowsCopiesTheRowsThatAsk) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (int vocab : {769, 1024, 128256}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const std::vector<int32_t> top_n = {0, -1, 3, -1, 20};
    const int R = static_cast<int>(top_n.size());
    const auto src = random_vector(size_t(R) * vocab, rng, 3.0f);
    DeviceBuffer d_src(src.size(), 4), d_dst(src.size(), 4), d_top(R, 4);
    d_src.upload(src.data());
    d_top.upload(top_n.data());
    d_dst.poison();
    CUDA_OK(kernels::launch_copy_logprob_rows(R, vocab, d_top.as<int32_t>(), d_src.as<float>(),
                                              d_dst.as<float>(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> dst(src.size());
    d_dst.download(dst.data());
    EXPECT_TRUE(d_dst.check_guards());
    for (int r = 0; r < R; ++r) {
      const size_t off = size_t(r) * vocab;
      if (top_n[r] >= 0) {
        EXPECT_EQ(std::memcmp(&dst[off], &src[off], size_t(vocab) * 4), 0) << "row " << r;
      } else {
        uint32_t bits;
        std::memcpy(&bits, &dst[off + vocab / 2], 4);
        EXPECT_EQ(bits, 0xFFFFFFFFu) << "row " << r << " should be untouched";
      }
    }
  }
}

// Informational: time per launch at Llama-3's vocabulary (the target is well under 10 us per
// row at batch 1).
TEST(Logprobs, TimingAt128k) {
  RILL_REQUIRE_GPU();
  const int vocab = 128256;
  std::mt19937 rng(9);
  for (int R : {1, 8, 64, 256}) {
    const auto logits = random_vector(size_t(R) * vocab, rng, 4.0f);
    std::vector<int32_t> tokens(R, 17), top_n(R, kernels::kLogprobsMaxTop);
    DeviceBuffer d_logits(logits.size(), 4), d_tokens(R, 4), d_top(R, 4),
        d_out(size_t(R) * (1 + 2 * kernels::kLogprobsMaxTop), 4);
    d_logits.upload(logits.data());
    d_tokens.upload(tokens.data());
    d_top.upload(top_n.data());
    kernels::LogprobsParams p;
    p.num_rows = R;
    p.vocab = vocab;
    p.max_top = kernels::kLogprobsMaxTop;
    p.logits = d_logits.as<float>();
    p.tokens = d_tokens.as<int32_t>();
    p.top_n = d_top.as<int32_t>();
    p.out = d_out.as<float>();
    for (int i = 0; i < 3; ++i) CUDA_OK(kernels::launch_logprobs(p, nullptr));
    cudaEvent_t a, b;
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
    constexpr int kIters = 50;
    CUDA_OK(cudaEventRecord(a, nullptr));
    for (int i = 0; i < kIters; ++i) CUDA_OK(kernels::launch_logprobs(p, nullptr));
    CUDA_OK(cudaEventRecord(b, nullptr));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    const double us = 1e3 * ms / kIters;
    std::printf("logprobs V=%d top %d: R=%3d %8.2f us per launch, %6.2f us per row, %6.0f GB/s\n",
                vocab, kernels::kLogprobsMaxTop, R, us, us / R, R * vocab * 4.0 / (us * 1e3));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
}

}  // namespace
}  // namespace rill::testing
