// The CUDA runner's paths the serving loop takes: seeded sampling that reproduces, decode steps
// launched before the previous one finishes (kLastSampled) and the rules for steps in flight,
// preempted sequences resumed from their generated tokens, and log-probabilities from eager,
// graph and pipelined steps.
// GPU tests: they skip visibly where no GPU exists and run on the GPU machine before changes land.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/offline/generator.h"
#include "engine/runner_factory.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"
#include "tests/engine/pipelining.h"
#include "tests/engine/resume_logprobs.h"

namespace rill {
namespace {

using testing::golden_cases;
using testing::load_golden;
using testing::source_path;

#ifdef RILL_HAVE_CUDA

using testing::cuda_runner;

TEST(CudaRunner, SeededSamplingIsReproducible) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  auto r = cuda_runner(m);
  GenerationRequest req;
  req.prompt = m.tokenizer->encode("ROMEO:", true);
  req.sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 5};
  req.max_tokens = 48;
  req.ignore_eos = true;
  const auto a = generate(*r, 1, req, nullptr), b = generate(*r, 2, req, nullptr);
  EXPECT_EQ(a.tokens, b.tokens);
  req.sampling.seed = 6;
  EXPECT_NE(generate(*r, 3, req, nullptr).tokens, a.tokens);
}

// Steps in flight: decode step n + 1 launched with kLastSampled tokens before step n is finished
// gives the tokens of plain steps, from graphs and eager launches, greedy and seeded with
// penalties (the sampler's step counter and penalty state advance on the device), also when a
// sequence is removed while a step holding it is in flight.
TEST(CudaRunner, PipelinedDecodeEqualsSteps) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t k = 0; k < 3; ++k) prompts.push_back(cases[k].prompt);
  SamplingParams seeded{
      .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .repetition_penalty = 1.1f, .seed = 5};
  for (bool graphs : {true, false}) {
    for (const SamplingParams& sp : {SamplingParams{.temperature = 0.0f}, seeded}) {
      SCOPED_TRACE(std::string(graphs ? "graphs" : "eager") +
                   (sp.greedy() ? " greedy" : " seeded"));
      auto tokens = [&](bool pipelined) {  // one runner at a time: each takes 30% of the GPU
        auto r = cuda_runner(m, graphs);
        return testing::decode_tokens(*r, prompts, CachePolicy::streaming(4, 28), 40, pipelined,
                                      sp);
      };
      const auto plain = tokens(false), piped = tokens(true);
      ASSERT_EQ(plain[0].size(), 41u);
      EXPECT_EQ(piped, plain);
    }
  }
}

TEST(CudaRunner, StepsInFlightFollowTheRules) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  for (bool graphs : {true, false}) {
    auto r = cuda_runner(m, graphs);
    testing::expect_launch_rules(*r);
    // Logits go through one host buffer: two steps returning them cannot be in flight together.
    r->add_sequence({7, CachePolicy::full(), {}});
    r->add_sequence({8, CachePolicy::full(), {}});
    const int32_t prompt[2] = {3, 4};
    StepInput a{7, std::span<const int32_t>(prompt, 2), LogitsMode::kLast, false};
    StepInput b{8, std::span<const int32_t>(prompt, 2), LogitsMode::kLast, false};
    r->launch(std::span<const StepInput>(&a, 1));
    EXPECT_THROW(r->launch(std::span<const StepInput>(&b, 1)), Error);
    EXPECT_EQ(r->kv().sequence(8).num_tokens, 0);
    EXPECT_EQ(r->finish().logits.size(), size_t(m.config.vocab_size));
    r->launch(std::span<const StepInput>(&b, 1));
    EXPECT_EQ(r->finish().logits.size(), size_t(m.config.vocab_size));
  }
}

// A preempted sequence resumed with SequenceSpec::generated samples the uninterrupted tokens: the
// draw counter starts at generated.size() and the GPU penalty state counts them as output (and
// the tokens fed before the first sample as prompt). The prompt and the generated tokens are fed
// again in the uninterrupted run's chunking (Refeed::kReplay), so the logits are the same bits:
// a recomputed prefill would round differently in half precision and could flip a near tie.
TEST(CudaRunner, ResumedSequenceSamplesTheUninterruptedTokens) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  const SamplingParams seeded{.temperature = 0.8f,
                              .top_p = 0.9f,
                              .repetition_penalty = 1.2f,
                              .presence_penalty = 0.3f,
                              .frequency_penalty = 0.4f,
                              .seed = 3};
  for (bool graphs : {true, false}) {
    auto r = cuda_runner(m, graphs);
    for (const SamplingParams& sp : {SamplingParams{.temperature = 0.0f}, seeded}) {
      SCOPED_TRACE(std::string(graphs ? "graphs" : "eager") + (sp.greedy() ? " greedy" : " seeded"));
      testing::expect_resume_equals_uninterrupted(*r, cases[0].prompt, sp, 24,
                                                  {testing::Refeed::kReplay});
    }
  }
}

// Tokens, log-probabilities and (optionally) raw logits rows of a prefill step and `steps` decode
// steps of several sequences, each asking for asks[k] alternatives.
struct LogprobRun {
  std::vector<std::vector<int32_t>> tokens;                // [seq][step]
  std::vector<std::vector<SampleLogprobs>> logprobs;       // [seq][step]
  std::vector<std::vector<std::vector<float>>> logits;     // [seq][step][vocab] (with_logits)
};

LogprobRun run_logprobs(ModelRunner& r, const std::vector<std::vector<int32_t>>& prompts,
                        const std::vector<int>& asks, const SamplingParams& sp, int steps,
                        bool pipelined, bool with_logits) {
  const int n = static_cast<int>(prompts.size());
  const size_t V = r.config().vocab_size;
  const LogitsMode mode = with_logits ? LogitsMode::kLast : LogitsMode::kNone;
  LogprobRun out;
  out.tokens.resize(n);
  out.logprobs.resize(n);
  out.logits.resize(n);
  auto record = [&](const StepOutput& o) {
    EXPECT_EQ(o.logprobs.size(), size_t(n)) << "some input asked";
    for (int k = 0; k < n; ++k) {
      out.tokens[k].push_back(o.sampled[k]);
      out.logprobs[k].push_back(k < static_cast<int>(o.logprobs.size()) ? o.logprobs[k] : SampleLogprobs{});
      if (with_logits)
        out.logits[k].emplace_back(o.logits.begin() + o.logits_row[k] * V,
                                   o.logits.begin() + (o.logits_row[k] + 1) * V);
    }
  };
  std::vector<StepInput> in;
  for (int k = 0; k < n; ++k) {
    r.add_sequence({SeqId(k), CachePolicy::full(), sp});
    in.push_back({SeqId(k), prompts[k], mode, true, asks[k]});
  }
  record(r.step(in));
  std::vector<int32_t> next(n);
  auto inputs = [&](bool last) {
    in.clear();
    for (int k = 0; k < n; ++k) {
      next[k] = last ? kLastSampled : out.tokens[k].back();
      in.push_back({SeqId(k), std::span<const int32_t>(&next[k], 1), mode, true, asks[k]});
    }
    return in;
  };
  if (!pipelined) {
    for (int s = 0; s < steps; ++s) record(r.step(inputs(false)));
  } else {
    r.launch(inputs(false));
    for (int s = 1; s <= steps; ++s) {
      if (s < steps) r.launch(inputs(true));
      record(r.finish());
    }
  }
  for (int k = 0; k < n; ++k) r.remove_sequence(SeqId(k));
  return out;
}

// Log-probabilities on the GPU, under penalised seeded sampling (the sampler's logits differ
// from the raw ones they describe): from eager steps equal to the log-softmax of the kLast logits
// those steps return; from graph-replayed decode steps and from steps in flight (kLastSampled)
// the same tokens and values as from eager steps; and, teacher-forced on the same tokens, within
// 2 * max |logit difference| (log-softmax is 2-Lipschitz in the max norm) of the CPU runner's.
TEST(CudaRunner, LogprobsInEagerGraphAndPipelinedSteps) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto cases = golden_cases(load_golden("default_model.json"));
  const std::vector<std::vector<int32_t>> prompts = {cases[0].prompt, cases[1].prompt,
                                                     cases[2].prompt, cases[0].prompt};
  const std::vector<int> asks = {kMaxTopLogprobs, 0, 5, -1};
  const SamplingParams sp{.temperature = 0.9f,
                          .top_p = 0.95f,
                          .repetition_penalty = 1.3f,
                          .presence_penalty = 0.5f,
                          .frequency_penalty = 0.5f,
                          .seed = 8};
  constexpr int kSteps = 24;
  LogprobRun eager;
  {
    auto r = cuda_runner(m, false);
    eager = run_logprobs(*r, prompts, asks, sp, kSteps, false, true);
  }
  for (size_t k = 0; k < prompts.size(); ++k)
    for (int s = 0; s <= kSteps; ++s) {
      SCOPED_TRACE("eager: seq " + std::to_string(k) + " step " + std::to_string(s));
      const SampleLogprobs& got = eager.logprobs[k][s];
      if (asks[k] < 0) {
        EXPECT_TRUE(got.top.empty());
        continue;
      }
      const auto want = testing::reference_logprobs(eager.logits[k][s], eager.tokens[k][s], asks[k] + 1);
      testing::expect_logprobs_near(got, want, asks[k], 1e-4);
    }
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "graphs, two steps in flight" : "graphs");
    auto r = cuda_runner(m, true);
    const LogprobRun g = run_logprobs(*r, prompts, asks, sp, kSteps, pipelined, false);
    ASSERT_EQ(g.tokens, eager.tokens);
    for (size_t k = 0; k < prompts.size(); ++k)
      for (int s = 0; s <= kSteps; ++s) {
        const SampleLogprobs& e = eager.logprobs[k][s];
        testing::expect_logprobs_near(g.logprobs[k][s], e, e.top.size(), 1e-5);
      }
  }
  // The CPU runner, fed the GPU's tokens.
  CpuRunner cpu(m, {.num_threads = 4});
  const size_t V = m.config.vocab_size;
  double worst_gap = 0;
  for (size_t k = 0; k < prompts.size(); ++k) {
    if (asks[k] < 0) continue;
    cpu.add_sequence({SeqId(k), CachePolicy::full(), {}});
    for (int s = 0; s <= kSteps; ++s) {
      SCOPED_TRACE("cpu: seq " + std::to_string(k) + " step " + std::to_string(s));
      const std::vector<int32_t> feed = s == 0 ? prompts[k] : std::vector<int32_t>{eager.tokens[k][s - 1]};
      StepInput in{SeqId(k), feed, LogitsMode::kLast, false};
      const StepOutput o = cpu.step(std::span<const StepInput>(&in, 1));
      ASSERT_EQ(o.logits.size(), V);
      double gap = 0;
      for (size_t i = 0; i < V; ++i) gap = std::max(gap, std::abs(double(o.logits[i]) - eager.logits[k][s][i]));
      worst_gap = std::max(worst_gap, gap);
      const auto want = testing::reference_logprobs(o.logits, eager.tokens[k][s], asks[k] + 1);
      testing::expect_logprobs_near(eager.logprobs[k][s], want, asks[k], 2 * gap + 1e-4);
    }
    cpu.remove_sequence(SeqId(k));
  }
  EXPECT_LT(worst_gap, 2.0) << "the GPU's logits should be within half-precision reach of the CPU's";
  // Nobody asks: no log-probabilities.
  auto r = cuda_runner(m, true);
  r->add_sequence({1, CachePolicy::full(), {}});
  StepInput plain{1, prompts[0], LogitsMode::kNone, true};
  EXPECT_TRUE(r->step(std::span<const StepInput>(&plain, 1)).logprobs.empty());
}

#else
TEST(CudaRunner, ServingPathsNeedCuda) { GTEST_SKIP() << "built without CUDA: CUDA runner tests skipped"; }
#endif

}  // namespace
}  // namespace rill
