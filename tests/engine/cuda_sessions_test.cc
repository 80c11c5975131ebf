// The CUDA runner's support for sessions: an idle sequence's cache copied to host memory and
// back (into other pool blocks, while other sequences run and reuse the freed ones) continues
// exactly as a sequence that never left; a new turn's sampler restart draws as a fresh sequence
// over the same cache does.
// GPU tests: they skip visibly where no GPU exists and run on the GPU machine before changes land.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runner_factory.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#endif

namespace rill {
namespace {

#ifdef RILL_HAVE_CUDA

std::unique_ptr<CudaRunner> runner_with_host_memory(const Model& m, bool async_offload = false) {
  EngineOptions o;
  o.cuda_tuning.async_offload = async_offload;
  o.device = "cuda";
  o.max_batch = 16;
  o.max_step_tokens = 2048;
  o.gpu_memory_fraction = 0.3;
  o.host_kv_cache_bytes = 64ll << 20;
  return std::make_unique<CudaRunner>(m, o);
}

std::vector<int32_t> eval_tokens(size_t n) {
  const auto ids =
      testing::load_golden("default_eval_ids.json").at("eval_ids").get<std::vector<int32_t>>();
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n)};
}

StepOutput one_step(ModelRunner& r, std::vector<StepInput> inputs) {
  return r.step(inputs);
}

TEST(CudaSessions, OffloadAndRestoreContinueExactlyAsANeverMovedSequence) {
  REQUIRE_CUDA();
  const Model m = load_model(testing::source_path("models/rill-shakespeare"));
  auto r = runner_with_host_memory(m);
  const int V = m.config.vocab_size;
  const CachePolicy p = CachePolicy::streaming(4, 60);  // the ring wraps: 150 tokens fed
  const std::vector<int32_t> prompt = eval_tokens(150);
  const int host_total = r->host_kv_blocks();
  ASSERT_GT(host_total, 10);
  for (SeqId id : {1, 2}) r->add_sequence({id, p, {.temperature = 0.0f}});
  for (size_t pos = 0; pos < prompt.size(); pos += 50) {
    const std::span<const int32_t> chunk(prompt.data() + pos, 50);
    one_step(*r, {{1, chunk, LogitsMode::kNone, false}, {2, chunk, LogitsMode::kNone, false}});
  }
  // Offload 1 while a step of both is in flight (the copy must follow it on the stream).
  const int32_t tok = prompt[0];
  const std::vector<StepInput> both = {
      {1, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, false},
      {2, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, false}};
  r->launch(both);
  const int held = r->kv().blocks_held(1);
  r->offload_sequence(1);
  r->finish();
  EXPECT_EQ(r->kv().blocks_held(1), 0);
  EXPECT_EQ(r->host_kv_blocks_free(), host_total - held);
  EXPECT_THROW(one_step(*r, {{1, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, false}}),
               Error);
  // Another sequence takes the freed blocks and writes them.
  r->add_sequence({3, p, {.temperature = 0.0f}});
  const std::vector<int32_t> other = eval_tokens(300);
  one_step(*r, {{3, std::span<const int32_t>(other.data() + 150, 150), LogitsMode::kNone, false}});
  r->restore_sequence(1);  // copies beside the steps; the first step with it waits on the device
  EXPECT_EQ(r->kv().blocks_held(1), held);
  // Both decode greedily in the same steps: the same tokens and logits.
  std::vector<int32_t> next = {prompt[1], prompt[1]};
  for (int step = 0; step < 24; ++step) {
    const StepOutput o =
        one_step(*r, {{1, std::span<const int32_t>(&next[0], 1), LogitsMode::kLast, true},
                      {2, std::span<const int32_t>(&next[1], 1), LogitsMode::kLast, true}});
    ASSERT_EQ(o.sampled[0], o.sampled[1]) << "step " << step;
    double num = 0, den = 0;
    for (int v = 0; v < V; ++v) {
      const double a = o.logits[o.logits_row[0] * V + v], b = o.logits[o.logits_row[1] * V + v];
      num += (a - b) * (a - b);
      den += b * b;
    }
    EXPECT_LT(std::sqrt(num / den), 1e-6) << "step " << step;
    next = {o.sampled[0], o.sampled[1]};
  }
  EXPECT_TRUE(r->restore_done(1));
  EXPECT_EQ(r->host_kv_blocks_free(), host_total);
  uint64_t offloads = 0, restores = 0;
  for (const KvTransfer& t : r->completed_transfers()) {
    (t.restore ? restores : offloads) += 1;
    EXPECT_EQ(t.blocks, held);
    EXPECT_GT(t.seconds, 0);
  }
  EXPECT_EQ(offloads, 1u);
  EXPECT_EQ(restores, 1u);
}

// CudaTuning::async_offload: the offload copies beside the steps; the sequence holds its blocks
// (releasing_blocks) until the copy has ended, then frees them; a step of it is refused while
// offloaded; restored (after the release, and before it: the blocks kept), it continues exactly
// as the sequence that never moved.
TEST(CudaSessions, AsyncOffloadFreesBlocksWhenTheCopyEndsAndChangesNoToken) {
  REQUIRE_CUDA();
  const Model m = load_model(testing::source_path("models/rill-shakespeare"));
  for (const bool restore_before_release : {false, true}) {
    auto r = runner_with_host_memory(m, /*async_offload=*/true);
    const CachePolicy p = CachePolicy::streaming(4, 60);
    const std::vector<int32_t> prompt = eval_tokens(150);
    const int host_total = r->host_kv_blocks();
    for (SeqId id : {1, 2}) r->add_sequence({id, p, {.temperature = 0.0f}});
    for (size_t pos = 0; pos < prompt.size(); pos += 50) {
      const std::span<const int32_t> chunk(prompt.data() + pos, 50);
      one_step(*r, {{1, chunk, LogitsMode::kNone, false}, {2, chunk, LogitsMode::kNone, false}});
    }
    const int held = r->kv().blocks_held(1);
    const int32_t tok = prompt[0];
    const std::vector<StepInput> both = {
        {1, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, false},
        {2, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, false}};
    const std::vector<StepInput> first(both.begin(), both.begin() + 1);
    r->launch(both);
    r->offload_sequence(1);  // after the step in flight, on the copy stream
    EXPECT_EQ(r->releasing_blocks(), held);
    EXPECT_EQ(r->kv().blocks_held(1), held) << "blocks are kept until the copy has read them";
    EXPECT_THROW(r->launch(first), Error);
    r->finish();
    if (!restore_before_release) {
      cudaDeviceSynchronize();
      r->completed_transfers();  // releases what the ended copies read
      EXPECT_EQ(r->releasing_blocks(), 0);
      EXPECT_EQ(r->kv().blocks_held(1), 0);
      EXPECT_EQ(r->host_kv_blocks_free(), host_total - held);
      r->add_sequence({3, p, {.temperature = 0.0f}});  // takes and writes the freed blocks
      const std::vector<int32_t> other = eval_tokens(300);
      one_step(*r,
               {{3, std::span<const int32_t>(other.data() + 150, 150), LogitsMode::kNone, false}});
    }
    r->restore_sequence(1);
    EXPECT_EQ(r->kv().blocks_held(1), held);
    EXPECT_EQ(r->releasing_blocks(), 0);
    std::vector<int32_t> next = {prompt[1], prompt[1]};
    for (int step = 0; step < 24; ++step) {
      const StepOutput o =
          one_step(*r, {{1, std::span<const int32_t>(&next[0], 1), LogitsMode::kNone, true},
                        {2, std::span<const int32_t>(&next[1], 1), LogitsMode::kNone, true}});
      ASSERT_EQ(o.sampled[0], o.sampled[1])
          << "step " << step << " restore_before_release " << restore_before_release;
      next = {o.sampled[0], o.sampled[1]};
    }
    EXPECT_TRUE(r->restore_done(1));
    EXPECT_EQ(r->host_kv_blocks_free(), host_total);
  }
}

// A restore's copy runs beside the steps of other sequences: they go on while it copies, and the
// restored sequence, stepped only once restore_done(), continues as one that never moved.
TEST(CudaSessions, RestoreCopiesBesideOtherSteps) {
  REQUIRE_CUDA();
  const Model m = load_model(testing::source_path("models/rill-shakespeare"));
  auto r = runner_with_host_memory(m);
  const CachePolicy p = CachePolicy::streaming(4, 60);
  const std::vector<int32_t> prompt = eval_tokens(100);
  for (SeqId id : {1, 2, 3}) r->add_sequence({id, p, {.temperature = 0.0f}});
  for (SeqId id : {1, 2}) one_step(*r, {{id, prompt, LogitsMode::kNone, false}});
  one_step(*r, {{3, std::span<const int32_t>(prompt.data(), 10), LogitsMode::kNone, false}});
  r->offload_sequence(1);
  r->restore_sequence(1);
  int32_t tok = prompt[0];
  int steps_while_copying = 0;
  while (!r->restore_done(1)) {  // sequence 3 keeps decoding meanwhile
    tok =
        one_step(*r, {{3, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, true}}).sampled[0];
    ++steps_while_copying;
  }
  std::vector<int32_t> next = {prompt[1], prompt[1]};
  for (int step = 0; step < 12; ++step) {
    const StepOutput o =
        one_step(*r, {{1, std::span<const int32_t>(&next[0], 1), LogitsMode::kNone, true},
                      {2, std::span<const int32_t>(&next[1], 1), LogitsMode::kNone, true}});
    ASSERT_EQ(o.sampled[0], o.sampled[1])
        << "step " << step << " (" << steps_while_copying << " steps while copying)";
    next = {o.sampled[0], o.sampled[1]};
  }
}

TEST(CudaSessions, HostMemoryFullIsRefusedAndChangesNothing) {
  REQUIRE_CUDA();
  const Model m = load_model(testing::source_path("models/rill-shakespeare"));
  EngineOptions o;
  o.device = "cuda";
  o.max_batch = 4;
  o.max_step_tokens = 512;
  o.gpu_memory_fraction = 0.3;
  o.host_kv_cache_bytes = 0;
  CudaRunner r(m, o);
  r.add_sequence({1, CachePolicy::streaming(4, 60), {}});
  const std::vector<int32_t> prompt = eval_tokens(40);
  one_step(r, {{1, prompt, LogitsMode::kNone, false}});
  const int held = r.kv().blocks_held(1);
  try {
    r.offload_sequence(1);
    ADD_FAILURE() << "offload without host memory accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  }
  EXPECT_EQ(r.kv().blocks_held(1), held);
  one_step(r, {{1, std::span<const int32_t>(prompt.data(), 1), LogitsMode::kNone, true}});
}

// After restart_sampling, a seeded sequence draws what a fresh sequence with that seed draws over
// the same cache: the draw counter starts again at 0.
TEST(CudaSessions, RestartedSamplingDrawsAsAFreshSequence) {
  REQUIRE_CUDA();
  const Model m = load_model(testing::source_path("models/rill-shakespeare"));
  auto r = runner_with_host_memory(m);
  const CachePolicy p = CachePolicy::streaming(4, 60);
  const std::vector<int32_t> prompt = eval_tokens(90);
  SamplingParams first{.temperature = 0.9f, .top_p = 0.95f};
  first.seed = 11;
  r->add_sequence({1, p, first});
  std::vector<int32_t> fed = prompt;
  int32_t last = one_step(*r, {{1, prompt, LogitsMode::kNone, true}}).sampled[0];
  for (int i = 0; i < 9; ++i) {
    fed.push_back(last);
    last =
        one_step(*r, {{1, std::span<const int32_t>(&last, 1), LogitsMode::kNone, true}}).sampled[0];
  }
  SamplingParams second{.temperature = 1.1f, .top_k = 40};
  second.seed = 7;
  r->restart_sampling(1, second);
  // The fresh twin: the same tokens fed without sampling, then the same turn with sampling.
  r->add_sequence({2, p, second});
  one_step(*r, {{2, fed, LogitsMode::kNone, false}});
  std::vector<int32_t> turn = {last};
  const std::vector<int32_t> more = eval_tokens(120);
  turn.insert(turn.end(), more.begin() + 100, more.end());
  std::vector<int32_t> a_in = turn, b_in = turn;
  for (int step = 0; step < 16; ++step) {
    const StepOutput o =
        one_step(*r, {{1, a_in, LogitsMode::kNone, true}, {2, b_in, LogitsMode::kNone, true}});
    ASSERT_EQ(o.sampled[0], o.sampled[1]) << "step " << step;
    a_in = {o.sampled[0]};
    b_in = {o.sampled[1]};
  }
  // With penalties the restart takes a penalty state row and clears it.
  SamplingParams penalised = second;
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.5f;
  r->restart_sampling(1, penalised);
  const StepOutput o = one_step(*r, {{1, turn, LogitsMode::kNone, true}});
  EXPECT_GE(o.sampled[0], 0);
}

#else

TEST(CudaSessions, RequiresCuda) {
  GTEST_SKIP() << "built without CUDA: GPU test skipped";
}

#endif

}  // namespace
}  // namespace rill
