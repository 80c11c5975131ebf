// Grammar masks in the step input (StepInput::mask) on the CPU runner and the CUDA runner: a
// constrained row only ever samples allowed tokens (greedy and seeded sampling), unconstrained
// rows beside it are unchanged bit for bit, CUDA graphs and eager launches agree, and a mask of
// the wrong size is refused. The GPU part skips visibly without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using testing::source_path;

const Model& model() {
  static const Model m = load_model(source_path("models/rill-shakespeare"));
  return m;
}

// Sequence k's mask: 40 random allowed ids (k odd: unconstrained, no mask).
std::vector<std::vector<uint32_t>> make_masks(int n, int vocab) {
  std::mt19937 rng(30);
  std::vector<std::vector<uint32_t>> masks(n);
  for (int k = 0; k < n; k += 2) {
    masks[k].assign((vocab + 31) / 32, 0);
    for (int i = 0; i < 40; ++i) {
      const uint32_t id = rng() % static_cast<uint32_t>(vocab);
      masks[k][id >> 5] |= 1u << (id & 31);
    }
  }
  return masks;
}

bool allowed(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[id >> 5] >> (id & 31)) & 1u;
}

// 4 sequences (even: greedy, odd: seeded sampling), 24 decode steps; `masked` applies the masks.
std::vector<std::vector<int32_t>> run(ModelRunner& r,
                                      const std::vector<std::vector<uint32_t>>& masks,
                                      bool masked) {
  const int n = 4;
  std::vector<std::vector<int32_t>> out(n);
  std::vector<int32_t> prompt{1, 17, 33, 250, 9, 41};
  std::vector<int32_t> next(n);
  for (int k = 0; k < n; ++k) {
    SamplingParams p;
    p.temperature = k % 2 ? 1.0f : 0.0f;
    p.seed = 5 + k;
    r.add_sequence({SeqId(k + 1), CachePolicy::full(), p});
  }
  for (int step = 0; step < 25; ++step) {
    std::vector<StepInput> in;
    for (int k = 0; k < n; ++k) {
      StepInput i{
          SeqId(k + 1),
          step == 0 ? std::span<const int32_t>(prompt) : std::span<const int32_t>(&next[k], 1),
          LogitsMode::kNone, true};
      if (masked && (k == 0 || k == 3)) i.mask = masks[k == 0 ? 0 : 2];
      in.push_back(i);
    }
    const StepOutput o = r.step(in);
    for (int k = 0; k < n; ++k) out[k].push_back(next[k] = o.sampled[k]);
  }
  for (int k = 0; k < n; ++k) r.remove_sequence(SeqId(k + 1));
  return out;
}

void check(const std::vector<std::vector<int32_t>>& plain,
           const std::vector<std::vector<int32_t>>& masked,
           const std::vector<std::vector<uint32_t>>& masks) {
  for (int32_t t : masked[0]) EXPECT_TRUE(allowed(masks[0], t)) << t;
  for (int32_t t : masked[3]) EXPECT_TRUE(allowed(masks[2], t)) << t;
  EXPECT_NE(masked[0], plain[0]);  // the mask changed something
  EXPECT_EQ(masked[1], plain[1]);  // unconstrained rows are unchanged
  EXPECT_EQ(masked[2], plain[2]);
}

TEST(MaskedStep, CpuRunnerSamplesOnlyAllowedTokens) {
  CpuRunner r(model(), {.num_threads = 1});
  const auto masks = make_masks(4, model().config.vocab_size);
  check(run(r, masks, false), run(r, masks, true), masks);
  r.add_sequence({SeqId(9), CachePolicy::full(), {}});
  std::vector<int32_t> prompt{1, 2};
  std::vector<uint32_t> short_mask(3, ~0u);
  StepInput bad{SeqId(9), prompt, LogitsMode::kNone, true};
  bad.mask = short_mask;
  EXPECT_THROW(r.launch(std::span<const StepInput>(&bad, 1)), Error);
}

#ifdef RILL_HAVE_CUDA
TEST(MaskedStep, CudaRunnerSamplesOnlyAllowedTokensWithAndWithoutGraphs) {
  REQUIRE_CUDA();
  const auto masks = make_masks(4, model().config.vocab_size);
  auto eager = testing::cuda_runner(model(), false);
  auto graphs = testing::cuda_runner(model(), true);
  const auto plain = run(*graphs, masks, false);
  const auto masked = run(*graphs, masks, true);
  check(plain, masked, masks);
  EXPECT_EQ(run(*eager, masks, true), masked) << "graph replay must equal eager launches";
}
#endif

}  // namespace
}  // namespace rill
