// The CPU reference engine on fp8 checkpoints: on each fp8 fixture it computes exactly what it
// computes on the fixture's dequantized fp32 model (same logits bit for bit, same greedy tokens),
// whatever --quantization says; with --quantization fp8 on the default (bf16) model, the
// teacher-forced perplexity of its golden text stays within 2% of bf16.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/offline/perplexity.h"
#include "engine/runner_factory.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using testing::load_golden;
using testing::source_path;

const char* const kFixtures[] = {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"};
const char* const kPrompts[] = {"KING HENRY:", "O, what a noble mind is here o'erthrown!",
                                "Thou art"};

struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // every step's
  double min_margin = INFINITY;
};

Greedy run_greedy(const Model& m, WeightQuant quant, const std::string& prompt, int steps) {
  CpuRunner r(m, {.num_threads = 2, .quantization = quant});
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  Greedy g;
  std::vector<int32_t> feed = m.tokenizer->encode(prompt);
  for (int s = 0; s < steps; ++s) {
    StepInput in{1, feed, LogitsMode::kLast, true};
    const StepOutput o = r.step(std::span<const StepInput>(&in, 1));
    std::vector<float> top(o.logits.begin(), o.logits.end());
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<>());
    g.min_margin = std::min(g.min_margin, double(top[0]) - top[1]);
    g.logits.insert(g.logits.end(), o.logits.begin(), o.logits.end());
    g.tokens.push_back(o.sampled[0]);
    feed = {o.sampled[0]};
  }
  return g;
}

TEST(Fp8Cpu, Fp8CheckpointEqualsItsDequantizedModel) {
  for (const char* name : kFixtures) {
    const auto dir = source_path(std::string("tests/fixtures/") + name);
    const Model fp8 = load_model(dir), deq = load_model(dir / "dequantized");
    EXPECT_FALSE(deq.config.quant.quantized());
    for (const char* prompt : kPrompts) {
      const Greedy ref = run_greedy(deq, WeightQuant::kNone, prompt, 32);
      for (WeightQuant mode : {WeightQuant::kFp8, WeightQuant::kNone}) {
        const Greedy got = run_greedy(fp8, mode, prompt, 32);
        EXPECT_EQ(got.tokens, ref.tokens) << name << " '" << prompt << "'";
        EXPECT_EQ(got.logits, ref.logits) << name << " '" << prompt << "': logits differ";
      }
      // Goldens need a clear winner at every greedy step (tools/make_golden.py's MIN_MARGIN).
      EXPECT_GT(ref.min_margin, 1e-3) << name << " '" << prompt << "'";
      std::printf("%s '%s': min greedy margin %.4f\n", name, prompt, ref.min_margin);
    }
  }
}

// transformers on the dequantized weights (tools/make_fp8_goldens.py): tokens exact, logits to
// fp32 tolerance, like every architecture fixture (golden_test.cc).
TEST(Fp8Cpu, MatchesTransformersOnTheDequantizedWeights) {
  for (const char* name : kFixtures) {
    const auto path = source_path(std::string("tests/golden/") + name + ".json");
    if (!std::filesystem::exists(path))
      GTEST_SKIP() << path
                   << " is missing: run tools/make_fp8_goldens.py (transformers) to write it";
    const auto g = load_golden(std::string(name) + ".json");
    const Model m = load_model(source_path(g.at("model").get<std::string>()));
    for (const auto& c : testing::golden_cases(g)) {
      CpuRunner r(m, {.num_threads = 2});
      r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
      std::vector<int32_t> feed = c.prompt, got;
      for (size_t step = 0; step < c.greedy.size(); ++step) {
        StepInput in{1, feed, LogitsMode::kLast, true};
        const StepOutput o = r.step(std::span<const StepInput>(&in, 1));
        if (step < c.logits.size()) {
          double worst = 0, scale = 1;
          for (size_t v = 0; v < c.logits[step].size(); ++v) {
            worst = std::max(worst, std::abs(double(o.logits[v]) - c.logits[step][v]));
            scale = std::max(scale, std::abs(double(c.logits[step][v])));
          }
          EXPECT_LT(worst, 2e-4 * scale) << name << " step " << step;
        }
        got.push_back(o.sampled[0]);
        feed = {o.sampled[0]};
      }
      EXPECT_EQ(got, c.greedy) << name << ": greedy tokens differ from transformers";
    }
  }
}

// --quantization fp8 (per-channel scales at load) on the default bf16 model: teacher-forced
// perplexity of the first 1,024 held-out tokens within 2% of bf16 (rill-ppl checks the whole text
// on the GPU).
TEST(Fp8Cpu, QuantizingTheDefaultModelAtLoadKeepsPerplexityWithinTwoPercent) {
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const auto g = load_golden("default_eval_ids.json");
  std::vector<int32_t> ids = g.at("eval_ids").get<std::vector<int32_t>>();
  ids.resize(std::min<size_t>(ids.size(), 1024));
  const int32_t bos = g.at("bos_id").get<int32_t>();
  PplConfig cfg;
  cfg.method = PplMethod::kFull;
  cfg.context = 512;
  double ppl[2];
  for (WeightQuant mode : {WeightQuant::kNone, WeightQuant::kFp8}) {
    CpuRunner r(m, {.num_threads = 2, .quantization = mode});
    ppl[mode == WeightQuant::kFp8] = evaluate_perplexity(r, ids, bos, cfg).ppl;
  }
  std::printf("perplexity bf16 %.4f, fp8 %.4f (%+.2f%%)\n", ppl[0], ppl[1],
              100 * (ppl[1] / ppl[0] - 1));
  EXPECT_NE(ppl[1], ppl[0]);  // the weights did change
  EXPECT_LT(std::abs(ppl[1] / ppl[0] - 1), 0.02);
}

// Logits of every position of a 40-token prompt (one prefill step) on the CPU engine.
std::vector<float> prefill_logits(const Model& m, const CpuRunnerOptions& o) {
  CpuRunner r(m, o);
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  std::vector<int32_t> prompt = m.tokenizer->encode("KING HENRY: O, what a noble mind is here");
  prompt.resize(40, 7);
  StepInput in{1, prompt, LogitsMode::kAll, false};
  return r.step(std::span<const StepInput>(&in, 1)).logits;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// CpuRunnerOptions::fp8_activation_rows, the CUDA W8A8 GEMMs' e4m3 activations on the CPU: off
// (-1) or for steps of at most that many tokens nothing changes; on, every fixture's prefill
// logits move by what e4m3 activations cost (the CUDA fp8 test's reference), and only under
// --quantization fp8 / auto (none runs the dequantized weights in 16 bits on CUDA).
TEST(Fp8Cpu, EmulatedW8A8ActivationsMoveThePrefillOnly) {
  for (const char* name : kFixtures) {
    const Model m = load_model(source_path(std::string("tests/fixtures/") + name));
    CpuRunnerOptions o{.num_threads = 2, .quantization = WeightQuant::kFp8};
    const std::vector<float> ref = prefill_logits(m, o);
    o.fp8_activation_rows = 40;  // a step of 40 tokens stays on the GEMV
    EXPECT_EQ(prefill_logits(m, o), ref) << name;
    o.fp8_activation_rows = 16;
    const std::vector<float> emulated = prefill_logits(m, o);
    const double cost = rel_l2(emulated, ref);
    const size_t V = m.config.vocab_size;
    double worst_row = 0;
    for (size_t r = 0; r < ref.size() / V; ++r)
      worst_row =
          std::max(worst_row, rel_l2({emulated.begin() + r * V, emulated.begin() + (r + 1) * V},
                                     {ref.begin() + r * V, ref.begin() + (r + 1) * V}));
    std::printf(
        "%s: e4m3 activations move the prefill logits by %.4f (relative L2; worst row %.4f)\n",
        name, cost, worst_row);
    EXPECT_GT(cost, 1e-3) << name;
    EXPECT_LT(cost, 0.6) << name;
    // The CUDA runner's split (cuda::Gemm::fp8_gemm_rows): no rows quantized changes nothing,
    // all of them is the default; every fp8 layer asks, with its shape, in a step with prefill.
    int calls = 0;
    o.fp8_gemm_rows = [&](const Fp8GemmQuery& q) {
      ++calls;
      EXPECT_EQ(q.rows, 40);
      EXPECT_GT(q.n, 0);
      EXPECT_GT(q.k, 0);
      // One 128-column block of a K = 128 layer is a per-row scale (as on CUDA).
      EXPECT_EQ(q.block, std::string(name) == "fp8_block" && q.k > 128) << q.n << " x " << q.k;
      EXPECT_TRUE(q.prefill);
      EXPECT_FALSE(q.lm_head);  // the fixtures keep their LM heads in 16 bits
      return int64_t{0};
    };
    EXPECT_EQ(prefill_logits(m, o), ref) << name;
    EXPECT_EQ(calls, 4 * m.config.num_layers) << name;  // qkv, o, gate | up, down
    o.fp8_gemm_rows = [](const Fp8GemmQuery& q) { return q.rows; };
    EXPECT_EQ(prefill_logits(m, o), emulated) << name;
    o.fp8_gemm_rows = nullptr;
    o.quantization = WeightQuant::kNone;
    EXPECT_EQ(prefill_logits(m, o), ref) << name << ": emulated without fp8 weights";
  }
}

// The query tells the emulation what decides the CUDA runner's GEMM rows (cuda::Gemm::
// padded_rows): whether the step carries a prompt chunk (prefill or mixed steps round their
// GEMMs' rows up, decode-only steps do not), and the step's real rows.
TEST(Fp8Cpu, GemmRowsQueryNamesTheStepKind) {
  const Model m = load_model(source_path("tests/fixtures/fp8_ct_channel"));
  CpuRunnerOptions o{.num_threads = 2, .quantization = WeightQuant::kFp8};
  o.fp8_activation_rows = 1;  // every step of two tokens or more emulates W8A8 activations
  std::vector<std::pair<int64_t, bool>> asked;  // (rows, prefill) per step, first layer's qkv
  o.fp8_gemm_rows = [&](const Fp8GemmQuery& q) {
    if (asked.empty() || asked.back() != std::make_pair(q.rows, q.prefill))
      asked.emplace_back(q.rows, q.prefill);
    return q.rows;
  };
  CpuRunner r(m, o);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  const int32_t one[2] = {10, 11};
  for (SeqId id : {1, 2, 3}) r.add_sequence({id, CachePolicy::full(), {.temperature = 0.0f}});
  std::vector<StepInput> step = {{1, prompt, LogitsMode::kNone, false},
                                 {2, prompt, LogitsMode::kNone, false}};
  r.step(step);  // prefill: 10 rows
  step = {{1, std::span<const int32_t>(&one[0], 1), LogitsMode::kNone, false},
          {2, std::span<const int32_t>(&one[1], 1), LogitsMode::kNone, false}};
  r.step(step);  // decode only: 2 rows
  step.push_back({3, std::span<const int32_t>(prompt).first(3), LogitsMode::kNone, false});
  r.step(step);  // mixed: 2 decode rows and a 3-token chunk
  const std::vector<std::pair<int64_t, bool>> want = {{10, true}, {2, false}, {5, true}};
  EXPECT_EQ(asked, want);
}

// The engine option reaches the CPU runner (make_runner) and bad names are refused.
TEST(Fp8Cpu, EngineOptionQuantization) {
  const Model m = load_model(source_path("tests/fixtures/fp8_block"));
  EngineOptions o;
  o.device = "cpu";
  for (const char* q : {"auto", "fp8", "none"}) {
    o.quantization = q;
    EXPECT_NO_THROW(make_runner(m, o)) << q;
  }
  o.quantization = "int4";
  try {
    make_runner(m, o);
    ADD_FAILURE() << "int4 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("(auto, fp8, none)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rill
