// Grammar masks in the step input (StepInput::mask) on the CPU runner and the CUDA runner: a
// constrained row only ever samples allowed tokens (greedy and seeded sampling), unconstrained
// rows beside it are unchanged bit for bit, CUDA graphs and eager launches agree, and a mask of
// the wrong size is refused; masks supplied after launch (StepInput::mask_later,
// ModelRunner::supply_masks) sample the same tokens. The GPU part skips visibly without a GPU.
#include <gtest/gtest.h>

#include <random>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"
#include "tests/engine/masked_replay.h"

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

// As run(r, masks, true), driven as the engine drives constrained rows beside others: step s+1
// is launched (kLastSampled, the constrained rows with mask_later) before step s is finished,
// and its masks are supplied after that finish (ModelRunner::supply_masks).
std::vector<std::vector<int32_t>> run_late(ModelRunner& r,
                                           const std::vector<std::vector<uint32_t>>& masks) {
  const int n = 4;
  std::vector<std::vector<int32_t>> out(n);
  std::vector<int32_t> prompt{1, 17, 33, 250, 9, 41};
  const int32_t last = kLastSampled;
  for (int k = 0; k < n; ++k) {
    SamplingParams p;
    p.temperature = k % 2 ? 1.0f : 0.0f;
    p.seed = 5 + k;
    r.add_sequence({SeqId(k + 1), CachePolicy::full(), p});
  }
  auto record = [&](const StepOutput& o) {
    for (int k = 0; k < n; ++k) out[k].push_back(o.sampled[k]);
  };
  std::vector<StepInput> first;
  for (int k = 0; k < n; ++k) {  // nothing in flight: masks at launch
    first.push_back({SeqId(k + 1), prompt, LogitsMode::kNone, true});
    if (k == 0 || k == 3) first.back().mask = masks[k == 0 ? 0 : 2];
  }
  r.launch(first);
  const LateMask late[2] = {{SeqId(1), masks[0]}, {SeqId(4), masks[2]}};
  for (int step = 1; step < 25; ++step) {
    std::vector<StepInput> in;
    for (int k = 0; k < n; ++k) {
      in.push_back({SeqId(k + 1), std::span<const int32_t>(&last, 1), LogitsMode::kNone, true});
      in.back().mask_later = k == 0 || k == 3;
    }
    r.launch(in);
    record(r.finish());
    r.supply_masks(late);
  }
  record(r.finish());
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

// Masks supplied after launch sample exactly what masks given at launch sample (greedy and
// seeded), with two steps in flight.
TEST(MaskedStep, CpuRunnerLateMasksEqualMasksAtLaunch) {
  CpuRunner r(model(), {.num_threads = 1});
  const auto masks = make_masks(4, model().config.vocab_size);
  const auto at_launch = run(r, masks, true);
  EXPECT_EQ(run_late(r, masks), at_launch);
}

// The protocol: while late masks are due, launch() and the step's finish() refuse; a bad
// supply_masks changes nothing; a row not named samples unconstrained; a removed sequence's row
// samples nothing.
TEST(MaskedStep, CpuRunnerLateMaskProtocolErrors) {
  CpuRunner r(model(), {.num_threads = 1});
  const int V = model().config.vocab_size;
  const std::vector<uint32_t> only7 = [&] {
    std::vector<uint32_t> m((V + 31) / 32, 0);
    m[0] = 1u << 7;
    return m;
  }();
  std::vector<int32_t> prompt{1, 17, 33};
  const int32_t last = kLastSampled;
  for (SeqId id : {1, 2, 3}) r.add_sequence({id, CachePolicy::full(), {.temperature = 0.0f}});
  EXPECT_THROW(r.supply_masks({}), Error) << "nothing due";
  std::vector<StepInput> in;
  for (SeqId id : {1, 2, 3}) in.push_back({id, prompt, LogitsMode::kNone, true});
  StepInput both = in[0];
  both.mask = only7;
  both.mask_later = true;
  EXPECT_THROW(r.launch(std::span<const StepInput>(&both, 1)), Error) << "mask and mask_later";
  r.launch(in);
  for (StepInput& i : in) {
    i.tokens = std::span<const int32_t>(&last, 1);
    i.mask_later = true;
  }
  r.launch(in);
  const StepOutput first = r.finish();  // the step before the due one finishes
  EXPECT_THROW(r.finish(), Error) << "the due step";
  EXPECT_THROW(r.launch(in), Error) << "a launch while masks are due";
  const std::vector<uint32_t> short_mask(3, ~0u);
  const LateMask bad_size[1] = {{SeqId(1), short_mask}};
  EXPECT_THROW(r.supply_masks(bad_size), Error);
  const LateMask unknown[1] = {{SeqId(9), only7}};
  EXPECT_THROW(r.supply_masks(unknown), Error);
  const LateMask twice[2] = {{SeqId(1), only7}, {SeqId(1), only7}};
  EXPECT_THROW(r.supply_masks(twice), Error);
  r.remove_sequence(SeqId(3));
  const LateMask good[1] = {{SeqId(1), only7}};
  r.supply_masks(good);
  EXPECT_THROW(r.supply_masks(good), Error) << "supplied once";
  const StepOutput second = r.finish();
  EXPECT_EQ(second.sampled[0], 7);
  EXPECT_GE(second.sampled[1], 0) << "unnamed: unconstrained";
  EXPECT_EQ(second.sampled[2], -1) << "removed";
  // Greedy, unconstrained: sequence 2 continues as if it had been stepped alone.
  CpuRunner ref(model(), {.num_threads = 1});
  ref.add_sequence({SeqId(2), CachePolicy::full(), {.temperature = 0.0f}});
  StepInput p{SeqId(2), prompt, LogitsMode::kNone, true};
  EXPECT_EQ(ref.step(std::span<const StepInput>(&p, 1)).sampled[0], first.sampled[1]);
  const int32_t t = first.sampled[1];
  StepInput d{SeqId(2), std::span<const int32_t>(&t, 1), LogitsMode::kNone, true};
  EXPECT_EQ(ref.step(std::span<const StepInput>(&d, 1)).sampled[0], second.sampled[1]);
}

#ifdef RILL_HAVE_CUDA
TEST(MaskedStep, CudaRunnerSamplesOnlyAllowedTokensWithAndWithoutGraphs) {
  REQUIRE_CUDA();
  const auto masks = make_masks(4, model().config.vocab_size);
  // One runner alive at a time: each sizes its KV pool to 30% of the GPU counting what is
  // already in use, so a second one alive beside the first would get none.
  std::vector<std::vector<int32_t>> plain, masked;
  {
    auto graphs = testing::cuda_runner(model(), true);
    plain = run(*graphs, masks, false);
    masked = run(*graphs, masks, true);
  }
  check(plain, masked, masks);
  auto eager = testing::cuda_runner(model(), false);
  EXPECT_EQ(run(*eager, masks, true), masked) << "graph replay must equal eager launches";
}

// Late masks (the forward pass enqueued at launch, the mask upload and sampling at
// supply_masks) sample what masks at launch sample, with and without graphs, and the greedy rows
// are the CPU runner's masked argmaxes (teacher-forced, near ties excepted).
TEST(MaskedStep, CudaRunnerLateMasksEqualMasksAtLaunch) {
  REQUIRE_CUDA();
  const auto masks = make_masks(4, model().config.vocab_size);
  std::vector<std::vector<int32_t>> at_launch, late;
  {  // one runner alive at a time (see above)
    auto graphs = testing::cuda_runner(model(), true);
    at_launch = run(*graphs, masks, true);
    late = run_late(*graphs, masks);
    EXPECT_EQ(late, at_launch) << "graphs";
    EXPECT_EQ(run(*graphs, masks, false), run(*graphs, masks, false))
        << "unconstrained graphs after";
  }
  {
    auto eager = testing::cuda_runner(model(), false);
    EXPECT_EQ(run_late(*eager, masks), at_launch) << "eager";
  }
  // The greedy rows against the CPU reference, teacher-forced (bf16 near ties excepted).
  CpuRunner cpu(model(), {.num_threads = 4});
  const std::vector<int32_t> prompt{1, 17, 33, 250, 9, 41};
  EXPECT_GT(
      testing::expect_greedy_agrees(
          cpu, prompt, late[0], [&](size_t) { return std::span<const uint32_t>(masks[0]); }, 0.25),
      12)
      << "greedy constrained row";
  EXPECT_GT(testing::expect_greedy_agrees(
                cpu, prompt, late[2], [](size_t) { return std::span<const uint32_t>(); }, 0.25),
            12)
      << "greedy unconstrained row";
}
#endif

}  // namespace
}  // namespace rill
