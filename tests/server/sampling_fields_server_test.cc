// The server's mapping of the sampling table: rill.proto's SamplingParameters has exactly the
// table's fields (so reflection finds each), both conversions agree with the table's checks and
// messages, and the server's defaults resolve in the documented order.
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/runner/sampling_fields.h"
#include "server/grpc_convert.h"
#include "server/request_fields.h"
#include "server/sampling_json.h"
#include "server/server_config.h"

namespace rill::server {
namespace {

namespace gpb = ::google::protobuf;
using nlohmann::json;

// The FieldError of `fn`, as the front ends report it.
template <typename Fn>
std::pair<std::string, std::string> refusal(Fn fn) {
  try {
    fn();
  } catch (const FieldError& e) {
    return {e.field(), e.what()};
  }
  return {};
}

TEST(SamplingProto, SamplingParametersHasExactlyTheTablesFields) {
  const gpb::Descriptor* d = pb::SamplingParameters::descriptor();
  std::set<std::string> table;
  for (const SamplingField& f : sampling_fields()) {
    table.insert(f.name);
    const gpb::FieldDescriptor* fd = d->FindFieldByName(f.name);
    ASSERT_NE(fd, nullptr) << "rill.proto's SamplingParameters lacks " << f.name;
    EXPECT_TRUE(fd->has_presence()) << f.name << " must be `optional` (unset takes the default)";
    const auto t = fd->cpp_type();
    switch (sampling_field_type(f)) {
      case SamplingFieldType::kFloat:
        EXPECT_TRUE(t == gpb::FieldDescriptor::CPPTYPE_FLOAT ||
                    t == gpb::FieldDescriptor::CPPTYPE_DOUBLE)
            << f.name;
        break;
      case SamplingFieldType::kInt32:
        EXPECT_EQ(t, gpb::FieldDescriptor::CPPTYPE_INT32) << f.name;
        break;
      case SamplingFieldType::kUint64:
        EXPECT_EQ(t, gpb::FieldDescriptor::CPPTYPE_UINT64) << f.name;
        break;
    }
  }
  for (int i = 0; i < d->field_count(); ++i)
    EXPECT_TRUE(table.count(d->field(i)->name()))
        << d->field(i)->name() << " is not in the sampling table";
}

TEST(SamplingProto, BothProtocolsRefuseTheSameValueAlike) {
  pb::SamplingParameters m;
  m.set_top_p(0);
  SamplingParams s;
  const auto grpc = refusal([&] { apply_sampling(m, s); });
  const auto http = refusal([&] { parse_sampling_fields(json{{"top_p", 0}}, s); });
  EXPECT_EQ(grpc, http);
  EXPECT_EQ(grpc.first, "top_p");
  m.Clear();
  m.set_temperature(150);
  EXPECT_EQ(refusal([&] { apply_sampling(m, s); }), refusal([&] {
              parse_sampling_fields(json{{"temperature", 150}}, s);
            }));
  m.Clear();
  m.set_repetition_penalty(0.005f);
  EXPECT_EQ(refusal([&] { apply_sampling(m, s); }).second,
            "'repetition_penalty' must be in [0.01, 100]");
}

TEST(SamplingProto, UnsetFieldsKeepTheDefaultsAndRoundTrip) {
  SamplingParams defaults;
  defaults.temperature = 0.6f;
  defaults.top_k = 20;
  pb::SamplingParameters m;
  m.set_top_p(0.5f);
  m.set_seed(std::numeric_limits<uint64_t>::max());
  SamplingParams s = defaults;
  apply_sampling(m, s);
  EXPECT_FLOAT_EQ(s.temperature, 0.6f);
  EXPECT_EQ(s.top_k, 20);
  EXPECT_FLOAT_EQ(s.top_p, 0.5f);
  EXPECT_EQ(s.seed, std::numeric_limits<uint64_t>::max());
  pb::SamplingParameters back;
  fill_sampling(back, s);
  SamplingParams again;
  apply_sampling(back, again);
  EXPECT_EQ(sampling_json(again), sampling_json(s));
  EXPECT_EQ(sampling_json(s)["temperature"], 0.6);  // the float's shortest text, not 0.6000000238
  json j = sampling_json(s);
  SamplingParams from_json;
  parse_sampling_fields(j, from_json);
  EXPECT_EQ(sampling_json(from_json), j);
}

TEST(SamplingJson, TypeErrorsNameTheField) {
  SamplingParams s;
  EXPECT_EQ(refusal([&] {
              parse_sampling_fields(json{{"top_k", "5"}}, s);
            }),
            std::make_pair(std::string("top_k"), std::string("'top_k' must be an integer")));
  EXPECT_EQ(refusal([&] {
              parse_sampling_fields(json{{"temperature", true}}, s);
            }).second,
            "'temperature' must be a number");
  EXPECT_NO_THROW(parse_sampling_fields(json{{"temperature", nullptr}, {"seed", -3}}, s));
  EXPECT_EQ(s.seed, static_cast<uint64_t>(-3));
}

TEST(SamplingJson, OverridesNameTheirPlace) {
  const SamplingOverrides o =
      sampling_overrides_from_json(json{{"temperature", 0.7}}, "default_sampling");
  EXPECT_EQ(sampling_overrides_json(o), (json{{"temperature", 0.7}}));
  EXPECT_EQ(refusal([] {
              sampling_overrides_from_json(json{{"top_p", 2}}, "default_sampling");
            }),
            std::make_pair(std::string("default_sampling.top_p"),
                           std::string("'default_sampling.top_p' must be in (0, 1]")));
  EXPECT_EQ(refusal([] {
              sampling_overrides_from_json(json{{"temp", 1}}, "default_sampling");
            }).second,
            "'default_sampling.temp' is not a sampling field");
  EXPECT_EQ(refusal([] {
              sampling_overrides_from_json(json{{"top_k", 1.5}}, "default_sampling");
            }).second,
            "'default_sampling.top_k' must be an integer");
  EXPECT_THROW(sampling_overrides_from_json(json::array(), "default_sampling"), FieldError);
}

TEST(SamplingDefaults, ServerOverModelOverOpenAI) {
  GenerationDefaults model;
  model.sampling.set(*find_sampling_field("temperature"), 0.6);
  model.sampling.set(*find_sampling_field("top_p"), 0.9);
  SamplingOverrides server;
  server.set(*find_sampling_field("top_p"), 0.5);
  SamplingParams p = server_sampling_defaults("auto", server, model);
  EXPECT_FLOAT_EQ(p.temperature, 0.6f);
  EXPECT_FLOAT_EQ(p.top_p, 0.5f);
  p = server_sampling_defaults("none", server, model);
  EXPECT_FLOAT_EQ(p.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.top_p, 0.5f);
  // A directory (or file) of its own.
  const auto dir = std::filesystem::temp_directory_path() / "rill_generation_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "generation_config.json") << R"({"temperature": 0.3, "top_k": 7})";
  p = server_sampling_defaults(dir.string(), {}, model);
  EXPECT_FLOAT_EQ(p.temperature, 0.3f);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_FLOAT_EQ(p.top_p, 1.0f);  // not the model's: that file replaces it
  p = server_sampling_defaults((dir / "generation_config.json").string(), {}, model);
  EXPECT_EQ(p.top_k, 7);
  EXPECT_THROW(server_sampling_defaults((dir / "missing").string(), {}, model), Error);
  std::filesystem::remove_all(dir);
}

TEST(SamplingDefaults, ConfigFileAndFlagTakeAnOverride) {
  const auto file = std::filesystem::temp_directory_path() / "rill_default_sampling_test.json";
  std::ofstream(file)
      << R"({"default_sampling": {"temperature": 0.25}, "generation_config": "none"})";
  ServerConfig c = load_config_file(file.string());
  EXPECT_EQ(c.generation_config, "none");
  EXPECT_FLOAT_EQ(c.default_sampling.values().temperature, 0.25f);
  EXPECT_EQ(json::parse(config_to_json(c))["default_sampling"], (json{{"temperature", 0.25}}));
  std::string path = file.string(), arg = R"({"top_k": 3})";
  std::vector<char*> argv = {const_cast<char*>("rill-server"), const_cast<char*>("--config"),
                             path.data(), const_cast<char*>("--default-sampling"), arg.data()};
  ServerConfig d;
  ASSERT_TRUE(parse_command_line(static_cast<int>(argv.size()), argv.data(), d));
  EXPECT_TRUE(d.default_sampling.has(*find_sampling_field("top_k")));
  EXPECT_FALSE(
      d.default_sampling.has(*find_sampling_field("temperature")));  // the flag replaces it
  std::ofstream(file) << R"({"default_sampling": {"top_p": 0}})";
  try {
    load_config_file(file.string());
    FAIL() << "top_p 0 accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "'default_sampling.top_p' must be in (0, 1]");
  }
  std::string bad = "{nope";
  argv = {const_cast<char*>("rill-server"), const_cast<char*>("--default-sampling"), bad.data()};
  ServerConfig e;
  EXPECT_THROW(parse_command_line(static_cast<int>(argv.size()), argv.data(), e), Error);
  std::filesystem::remove(file);
}

TEST(RequestFields, SharedChecks) {
  EXPECT_EQ(checked_stop_strings({"", "a", ""}), std::vector<std::string>{"a"});
  EXPECT_EQ(refusal([] { checked_stop_strings(std::vector<std::string>(17, "x")); }).first, "stop");
  EXPECT_EQ(refusal([] { checked_stop_strings({std::string(257, 'x')}); }).first, "stop");
  EXPECT_EQ(refusal([] { checked_token_count("max_tokens", -1); }).second,
            "'max_tokens' must be in [0, 16777216]");
  EXPECT_EQ(refusal([] { check_stop_token_ids({5, 100}, 100); }).first, "stop_token_ids");
  EXPECT_EQ(refusal([] { checked_streaming_cache(4, 0); }).second,
            "'cache.window' must be in [1, 2147483647]");
  EXPECT_EQ(refusal([] { checked_streaming_cache(-1, 8); }).first, "cache.n_sink");
  pb::CachePolicy c;
  c.set_kind(static_cast<pb::CachePolicy::Kind>(7));
  EXPECT_EQ(refusal([&] { from_pb(c); }).first, "cache.kind");
}

}  // namespace
}  // namespace rill::server
