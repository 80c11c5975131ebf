// Structured outputs through the serving engine on the CUDA runner: a batch of constrained
// requests (JSON schema, regex, choice; greedy and seeded) beside unconstrained ones, their rows
// pipelined with late masks (the forward pass of a step queued before the host has the masks,
// the sampling after). Every output is valid under its constraint, and every greedy output is
// the CPU reference's masked argmax at each token (teacher-forced, bf16 near ties excepted).
// GPU test: it skips visibly where no GPU exists and runs on the GPU machine before changes land.
#include <gtest/gtest.h>

#include <regex>

#include <nlohmann/json.hpp>

#include "engine/grammar/constraint.h"
#include "engine/grammar/vocabulary.h"
#include "engine/scheduler/constraint_state.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/masked_replay.h"
#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

#ifdef RILL_HAVE_CUDA

using testing::collect;
using testing::Collected;
using testing::default_model;
using testing::EngineFixture;
using testing::random_prompt;

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":6},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "ok":{"type":"boolean"}},
  "required":["name","age","ok"]})";

Request constrained(grammar::ConstraintKind kind, std::string text, uint32_t seed) {
  Request r;
  r.prompt = random_prompt(12, seed);
  r.sampling.temperature = 0;
  r.max_tokens = 120;
  OutputConstraint c;
  c.spec.kind = kind;
  c.spec.text = std::move(text);
  r.constraint = std::move(c);
  return r;
}

TEST(CudaConstraints, PipelinedConstrainedBatchIsValidAndMatchesTheCpuRunner) {
  REQUIRE_CUDA();
  const Model& m = default_model();
  SchedulerConfig cfg = scheduler_defaults("cuda");
  cfg.max_num_seqs = 16;
  cfg.max_num_batched_tokens = 2048;  // testing::cuda_runner's tokens a step
  EngineFixture gpu(cfg, testing::cuda_runner(m));
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) {
    Request r;
    switch (i % 4) {
      case 0:
        r = constrained(grammar::ConstraintKind::kJsonSchema, kSchema, 100 + i);
        break;
      case 1:
        r = constrained(grammar::ConstraintKind::kRegex, R"([A-Z][a-z]{2,8}-\d{3})", 100 + i);
        break;
      case 2:
        r = constrained(grammar::ConstraintKind::kChoice, "", 100 + i);
        r.constraint->spec.choices = {"to be", "not to be", "question"};
        break;
      default:  // unconstrained neighbours
        r.prompt = random_prompt(20, 100 + i);
        r.sampling.temperature = 0.8f;
        r.sampling.seed = 3 + i;
        r.max_tokens = 60;
    }
    if (r.constraint && i >= 8) r.sampling.temperature = 1.0f, r.sampling.seed = 7 + i;
    reqs.push_back(r);
  }
  std::vector<RequestHandle> hs;
  for (const Request& r : reqs) hs.push_back(gpu.engine->submit(r));
  const std::vector<int> stops = m.stop_token_ids();
  grammar::ConstraintCache cache(
      grammar::Vocabulary::from_tokenizer(*m.tokenizer, m.config.vocab_size,
                                          std::vector<int32_t>(stops.begin(), stops.end())),
      {});
  CpuRunner cpu(m, {.num_threads = 4});
  int strict = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Collected c = collect(hs[i]);
    ASSERT_EQ(c.finals, 1) << i;
    if (!reqs[i].constraint) {
      EXPECT_EQ(c.final.reason, FinishReason::kLength) << i << ": " << c.final.error_message;
      continue;
    }
    ASSERT_TRUE(c.final.reason == FinishReason::kStop || c.final.reason == FinishReason::kLength)
        << i << ": " << c.final.error_message;
    if (c.final.reason == FinishReason::kStop) {
      switch (i % 4) {
        case 0:
          EXPECT_TRUE(nlohmann::json::parse(c.text).is_object()) << c.text;
          break;
        case 1:
          EXPECT_TRUE(std::regex_match(c.text, std::regex(R"([A-Z][a-z]{2,8}-\d{3})"))) << c.text;
          break;
        default:
          EXPECT_TRUE(c.text == "to be" || c.text == "not to be" || c.text == "question") << c.text;
      }
    }
    // The grammar accepts every token; greedy ones are the CPU's masked argmax.
    ConstraintState state(cache.get(reqs[i].constraint->spec), {});
    if (reqs[i].sampling.temperature > 0) {
      for (int32_t t : c.ids) {
        ASSERT_NE(state.advance(t), ConstraintState::Next::kRejected) << "request " << i;
      }
      continue;
    }
    strict += testing::expect_greedy_agrees(
        cpu, reqs[i].prompt, c.ids,
        [&](size_t k) {
          if (k > 0) {
            EXPECT_NE(state.advance(c.ids[k - 1]), ConstraintState::Next::kRejected);
          }
          return state.mask();
        },
        0.25);
  }
  EXPECT_GT(strict, 20);
}

#else

TEST(CudaConstraints, NeedCuda) {
  GTEST_SKIP() << "built without CUDA: CUDA runner tests skipped";
}

#endif

}  // namespace
}  // namespace rill
