// The table of sampling fields (engine/runner/sampling_fields.h): its checks are the one
// validation of every protocol, its defaults chain is request > server > model > OpenAI, the
// model's come from generation_config.json, and docs/api.md's field table is its rendering.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runner/sampling_fields.h"

namespace rill {
namespace {

const SamplingField& field(const char* name) {
  const SamplingField* f = find_sampling_field(name);
  if (!f) throw std::runtime_error(std::string("no sampling field ") + name);
  return *f;
}

// The FieldError message and field of setting `name` to `v`; "" when accepted.
std::string refusal(const char* name, const SamplingNumber& v) {
  SamplingParams p;
  try {
    set_sampling_field(p, field(name), v);
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), name);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(SamplingFields, TableNamesEveryFieldOnceWithItsDefault) {
  std::set<std::string> names;
  for (const SamplingField& f : sampling_fields()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_NE(std::string(f.doc), "") << f.name;
    EXPECT_EQ(find_sampling_field(f.name), &f);
    // The default (SamplingParams' initializer) is itself valid.
    SamplingParams p;
    EXPECT_NO_THROW(set_sampling_field(p, f, default_sampling_value(f))) << f.name;
  }
  EXPECT_EQ(names.size(), 8u);
  EXPECT_EQ(find_sampling_field("nope"), nullptr);
  EXPECT_EQ(sampling_range_text(field("top_p")), "(0, 1]");
  EXPECT_EQ(sampling_range_text(field("repetition_penalty")), "[0.01, 100]");
  EXPECT_EQ(sampling_range_text(field("top_k")), "-1 or [0, 2147483647]");
  EXPECT_EQ(sampling_range_text(field("seed")), "[-2^63, 2^64)");
}

TEST(SamplingFields, RangesAndMessages) {
  // The values the HTTP and gRPC front ends used to disagree on.
  EXPECT_EQ(refusal("temperature", 100.5), "'temperature' must be in [0, 100]");
  EXPECT_EQ(refusal("temperature", -1.0), "'temperature' must be in [0, 100]");
  EXPECT_EQ(refusal("temperature", std::nan("")), "'temperature' must be in [0, 100]");
  EXPECT_EQ(refusal("temperature", 1e300), "'temperature' must be in [0, 100]");
  EXPECT_EQ(refusal("repetition_penalty", 0.005), "'repetition_penalty' must be in [0.01, 100]");
  EXPECT_EQ(refusal("top_p", 0.0),
            "'top_p' must be in (0, 1]");  // an open bound names the field too
  EXPECT_EQ(refusal("top_p", 1.5), "'top_p' must be in (0, 1]");
  EXPECT_EQ(refusal("top_k", int64_t{-2}), "'top_k' must be -1 (off) or in [0, 2147483647]");
  EXPECT_EQ(refusal("top_k", uint64_t{1} << 40), "'top_k' must be -1 (off) or in [0, 2147483647]");
  EXPECT_EQ(refusal("top_k", 2.5), "'top_k' must be an integer");
  EXPECT_EQ(refusal("seed", 0.5), "'seed' must be an integer");
  EXPECT_EQ(refusal("seed", 1e30), "'seed' must be an integer in [-2^63, 2^64)");
  EXPECT_EQ(refusal("presence_penalty", 2.5), "'presence_penalty' must be in [-2, 2]");
  // Accepted: closed bounds, integral doubles for integers, every uint64 seed.
  EXPECT_EQ(refusal("temperature", 100.0), "");
  EXPECT_EQ(refusal("top_p", 1.0), "");
  EXPECT_EQ(refusal("top_k", 3.0), "");
  EXPECT_EQ(refusal("seed", std::numeric_limits<uint64_t>::max()), "");
}

TEST(SamplingFields, FloatsAreCheckedAsTheFloatsTheyAreStoredAs) {
  // 0.01 as a JSON double and as a proto float (0.0099999998) are the same stored value.
  EXPECT_EQ(refusal("repetition_penalty", 0.01), "");
  EXPECT_EQ(refusal("repetition_penalty", static_cast<double>(0.01f)), "");
}

TEST(SamplingFields, AliasesAndSignedSeeds) {
  SamplingParams p;
  p.top_k = 7;
  set_sampling_field(p, field("top_k"), int64_t{-1});  // vLLM's "off"
  EXPECT_EQ(p.top_k, 0);
  set_sampling_field(p, field("seed"), int64_t{-1});  // two's complement, as before
  EXPECT_EQ(p.seed, std::numeric_limits<uint64_t>::max());
  set_sampling_field(p, field("temperature"), int64_t{2});
  EXPECT_EQ(p.temperature, 2.0f);
  EXPECT_EQ(std::get<double>(get_sampling_field(p, field("temperature"))), 2.0);
  EXPECT_EQ(std::get<uint64_t>(get_sampling_field(p, field("seed"))),
            std::numeric_limits<uint64_t>::max());
}

TEST(SamplingFields, ValidateNamesTheFieldAndTakesNoAlias) {
  SamplingParams p;
  p.top_p = 0;
  try {
    p.validate();
    FAIL() << "top_p 0 accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.field(), "top_p");
    EXPECT_STREQ(e.what(), "'top_p' must be in (0, 1]");
  }
  p = {};
  p.top_k = -1;  // stored values are normalized: -1 never reaches the samplers
  EXPECT_THROW(p.validate(), FieldError);
  p = {};
  p.temperature = 1000;
  EXPECT_THROW(p.validate(), FieldError);
  EXPECT_NO_THROW(SamplingParams{}.validate());
}

TEST(SamplingFields, DefaultsChainRequestServerModelOpenAI) {
  SamplingOverrides model, server;
  model.set(field("temperature"), 0.6);
  model.set(field("top_p"), 0.9);
  server.set(field("top_p"), 0.5);
  server.set(field("seed"), uint64_t{11});
  EXPECT_TRUE(server.has(field("seed")));
  EXPECT_FALSE(server.has(field("temperature")));
  const SamplingParams p = resolve_sampling_defaults(server, model);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);  // the model's
  EXPECT_FLOAT_EQ(p.top_p, 0.5f);        // the server's over the model's
  EXPECT_EQ(p.seed, 11u);
  EXPECT_FLOAT_EQ(p.min_p, 0.0f);  // OpenAI's
  EXPECT_THROW(server.set(field("min_p"), 2.0), FieldError);
  EXPECT_FALSE(server.has(field("min_p")));
}

class GenerationConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rill_gen_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path write(const std::string& text) {
    const auto file = dir_ / "generation_config.json";
    std::ofstream(file) << text;
    return file;
  }
  std::filesystem::path dir_;
};

TEST_F(GenerationConfigTest, ReadsTheSamplingKeysItKnows) {
  const auto g = load_generation_config(write(
      R"({"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.8, "min_p": 0.05,
          "repetition_penalty": 1.05, "presence_penalty": 1.5, "max_new_tokens": 64, "eos_token_id": [1, 2]})"));
  const SamplingParams p = resolve_sampling_defaults({}, g.sampling);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_FLOAT_EQ(p.top_p, 0.8f);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.05f);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.0f);  // not a generation_config key (transformers has none)
  EXPECT_EQ(g.max_new_tokens, 64);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{1, 2}));
}

TEST_F(GenerationConfigTest, DoSampleFalseIsGreedyAbsentIsAsGiven) {
  auto g = load_generation_config(write(R"({"do_sample": false, "temperature": 0.6, "top_p": 0.8,
                                            "repetition_penalty": 1.2})"));
  SamplingParams p = resolve_sampling_defaults({}, g.sampling);
  EXPECT_TRUE(p.greedy());
  EXPECT_FLOAT_EQ(p.top_p, 1.0f);               // greedy ignores it, as transformers does
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.2f);  // penalties apply to greedy decoding too
  g = load_generation_config(write(R"({"temperature": 0.6})"));
  p = resolve_sampling_defaults({}, g.sampling);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  g = load_generation_config(write(R"({"bos_token_id": 1})"));
  EXPECT_TRUE(g.sampling.empty());
  EXPECT_TRUE(load_generation_config(dir_ / "missing.json").sampling.empty());
}

TEST_F(GenerationConfigTest, BadValuesNameTheFileAndTheKey) {
  const auto file = write(R"({"top_p": 0})");
  try {
    load_generation_config(file);
    FAIL() << "top_p 0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'top_p' must be in (0, 1]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_generation_config(write("{")), Error);
  EXPECT_THROW(load_generation_config(write("[1]")), Error);
}

// docs/api.md's table of sampling fields is this table, row for row.
std::string docs_row(const SamplingField& f) {
  std::ostringstream row;
  row << "| `" << f.name << "` | " << sampling_field_type_name(f) << " | "
      << format_sampling_number(default_sampling_value(f)) << " | " << sampling_range_text(f)
      << " | " << (f.in_generation_config ? "yes" : "no") << " | " << f.doc << " |";
  return row.str();
}

TEST(SamplingFields, DocsTableIsTheTable) {
  std::ifstream in(std::string(RILL_SOURCE_DIR) + "/docs/api.md");
  ASSERT_TRUE(in) << "docs/api.md";
  std::vector<std::string> rows;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "<!-- sampling-fields-table: begin -->")
      inside = true;
    else if (line == "<!-- sampling-fields-table: end -->")
      inside = false;
    else if (inside && line.starts_with("| `"))
      rows.push_back(line);
  }
  std::string expected;
  for (const SamplingField& f : sampling_fields()) expected += docs_row(f) + "\n";
  std::string actual;
  for (const std::string& r : rows) actual += r + "\n";
  EXPECT_EQ(actual, expected) << "docs/api.md's sampling-fields table must read:\n" << expected;
}

}  // namespace
}  // namespace rill
