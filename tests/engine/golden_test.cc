// The CPU reference engine against transformers: every architecture fixture and the default
// model reproduce the golden greedy tokens exactly and the golden logits within fp32 tolerance.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using testing::golden_cases;
using testing::load_golden;
using testing::source_path;

// fp32 everywhere, different summation order than PyTorch: logits agree to ~1e-5 relative.
constexpr double kLogitTol = 2e-4;

void check_model(const std::string& golden_name, int threads) {
  const auto g = load_golden(golden_name);
  const Model m = load_model(source_path(g.at("model").get<std::string>()));
  CpuRunner r(m, {.num_threads = threads});
  SeqId id = 1;
  for (const auto& c : golden_cases(g)) {
    r.add_sequence({id, CachePolicy::full(), {.temperature = 0.0f}});
    std::vector<int32_t> got;
    std::vector<int32_t> feed = c.prompt;
    for (size_t step = 0; step < c.greedy.size(); ++step) {
      StepInput in{id, feed, step < c.logits.size() ? LogitsMode::kLast : LogitsMode::kNone, true};
      const StepOutput o = r.step(std::span<const StepInput>(&in, 1));
      if (step < c.logits.size()) {
        double worst = 0, scale = 1;
        for (size_t v = 0; v < c.logits[step].size(); ++v) {
          worst = std::max(worst, std::abs(double(o.logits[v]) - c.logits[step][v]));
          scale = std::max(scale, std::abs(double(c.logits[step][v])));
        }
        EXPECT_LT(worst, kLogitTol * scale) << golden_name << " step " << step;
      }
      got.push_back(o.sampled[0]);
      feed = {o.sampled[0]};
    }
    EXPECT_EQ(got, c.greedy) << golden_name << ": greedy tokens differ from transformers";
    r.remove_sequence(id++);
  }
}

class FixtureGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureGolden, CpuMatchesTransformers) { check_model(GetParam() + ".json", 2); }

INSTANTIATE_TEST_SUITE_P(Architectures, FixtureGolden, ::testing::ValuesIn(testing::fixture_names()));

TEST(DefaultModelGolden, CpuMatchesTransformers) { check_model("default_model.json", 2); }

TEST(DefaultModelGolden, ChunkedPrefillGivesTheSameGreedyTokens) {
  const auto g = load_golden("default_model.json");
  const Model m = load_model(source_path(g.at("model").get<std::string>()));
  CpuRunner r(m, {.num_threads = 2});
  const auto c = golden_cases(g)[1];  // the longest prompt
  r.add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  int32_t next = -1;
  for (size_t pos = 0; pos < c.prompt.size(); pos += 3) {  // prompt in chunks of 3
    const size_t n = std::min<size_t>(3, c.prompt.size() - pos);
    StepInput in{1, std::span<const int32_t>(c.prompt.data() + pos, n), LogitsMode::kNone, pos + n == c.prompt.size()};
    next = r.step(std::span<const StepInput>(&in, 1)).sampled[0];
  }
  EXPECT_EQ(next, c.greedy[0]);
}

TEST(DefaultModelGolden, TokenizerMatchesHuggingFace) {
  const auto g = load_golden("default_tokenizer.json");
  const Model m = load_model(source_path(g.at("tokenizer").get<std::string>()));
  for (const auto& c : g.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    EXPECT_EQ(m.tokenizer->encode(text, true), c.at("ids").get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(m.tokenizer->encode(text, false), c.at("ids_no_special").get<std::vector<int32_t>>()) << text;
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    EXPECT_EQ(m.tokenizer->decode(ids, true), c.at("decoded").get<std::string>()) << text;
    EXPECT_EQ(m.tokenizer->decode(ids, false), c.at("decoded_with_special").get<std::string>()) << text;
  }
}

}  // namespace
}  // namespace rill
