// Model loading: every bad input gives a clear rill::Error naming the file and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/model/model_config.h"
#include "engine/model/model_weights.h"
#include "engine/model/safetensors.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("rill_loader_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file from a header object and a data blob.
std::string safetensors_bytes(const json& header, const std::string& data) {
  const std::string h = header.dump();
  uint64_t n = h.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + h + data;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Safetensors, ReadsTensorsOfEachDtype) {
  TempDir d;
  json h = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
            {"b", {{"dtype", "BF16"}, {"shape", {1, 2}}, {"data_offsets", {8, 12}}}},
            {"c", {{"dtype", "F16"}, {"shape", {1}}, {"data_offsets", {12, 14}}}},
            {"__metadata__", {{"format", "pt"}}}};
  const float a[2] = {1.5f, -2.0f};
  const uint16_t b[2] = {0x3f80, 0xc000}, c = 0x3c00;  // bf16 1, -2; fp16 1
  std::string data(reinterpret_cast<const char*>(a), 8);
  data += std::string(reinterpret_cast<const char*>(b), 4) + std::string(reinterpret_cast<const char*>(&c), 2);
  write_bytes(d.path() / "model.safetensors", safetensors_bytes(h, data));
  auto t = load_safetensors_dir(d.path());
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t.at("a").to_f32(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(t.at("b").to_f32(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(t.at("c").to_f32(), (std::vector<float>{1.0f}));
}

TEST(Safetensors, MalformedFilesGiveClearErrors) {
  TempDir d;
  const fs::path f = d.path() / "model.safetensors";
  write_bytes(f, "abc");
  EXPECT_NE(error_of([&] { SafetensorsFile::open(f); }).find("too small"), std::string::npos);
  uint64_t huge = 1 << 20;
  write_bytes(f, std::string(reinterpret_cast<const char*>(&huge), 8) + "{}");
  EXPECT_NE(error_of([&] { SafetensorsFile::open(f); }).find("exceeds the file size"), std::string::npos);
  write_bytes(f, safetensors_bytes(json::object(), "").replace(8, 2, "{x"));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(f); }).find("malformed header"), std::string::npos);
  json trunc = {{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}}};
  write_bytes(f, safetensors_bytes(trunc, std::string(8, '\0')));
  const std::string e = error_of([&] { SafetensorsFile::open(f); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(f.string()), std::string::npos) << "errors name the file: " << e;
  json wrong = {{"w", {{"dtype", "F32"}, {"shape", {3}}, {"data_offsets", {0, 16}}}}};
  write_bytes(f, safetensors_bytes(wrong, std::string(16, '\0')));
  EXPECT_NE(error_of([&] { SafetensorsFile::open(f); }).find("needs 12"), std::string::npos);
  json i8 = {{"w", {{"dtype", "I8"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}};
  write_bytes(f, safetensors_bytes(i8, std::string(4, '\0')));
  try {
    SafetensorsFile::open(f);
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(err.what()).find("I8"), std::string::npos);
  }
  EXPECT_NE(error_of([&] { SafetensorsFile::open(d.path() / "nope.safetensors"); }).find("cannot open"),
            std::string::npos);
}

TEST(Safetensors, ShapesWhoseSizeOverflowsAreRefused) {
  // Found by the safetensors fuzzer: [2^32, 2^32] elements overflowed int64 (undefined; in
  // practice 0, which matched the empty data_offsets and was accepted).
  TempDir d;
  const fs::path f = d.path() / "model.safetensors";
  json h = {{"w",
             {{"dtype", "F32"},
              {"shape", {int64_t{1} << 32, int64_t{1} << 32}},
              {"data_offsets", {0, 0}}}}};
  write_bytes(f, safetensors_bytes(h, ""));
  const std::string e = error_of([&] { SafetensorsFile::open(f); });
  EXPECT_NE(e.find("has shape [4294967296, 4294967296], more elements than"), std::string::npos)
      << e;
  // A zero dimension makes it empty whatever the others are.
  h["w"]["shape"] = {int64_t{1} << 62, int64_t{1} << 62, 0};
  write_bytes(f, safetensors_bytes(h, ""));
  EXPECT_EQ(SafetensorsFile::open(f).tensors().at("w").nbytes(), 0u);
}

TEST(Safetensors, ShardedIndex) {
  TempDir d;
  json h1 = {{"x", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  json h2 = {{"y", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}}};
  const float one = 1, two = 2;
  write_bytes(d.path() / "s1.safetensors", safetensors_bytes(h1, std::string(reinterpret_cast<const char*>(&one), 4)));
  write_bytes(d.path() / "s2.safetensors", safetensors_bytes(h2, std::string(reinterpret_cast<const char*>(&two), 4)));
  json idx = {{"weight_map", {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}}}};
  write_bytes(d.path() / "model.safetensors.index.json", idx.dump());
  auto t = load_safetensors_dir(d.path());
  EXPECT_EQ(t.at("y").to_f32()[0], 2.0f);
  idx["weight_map"]["z"] = "s3.safetensors";
  write_bytes(d.path() / "model.safetensors.index.json", idx.dump());
  EXPECT_NE(error_of([&] { load_safetensors_dir(d.path()); }).find("s3.safetensors"), std::string::npos);
  fs::remove(d.path() / "model.safetensors.index.json");
  EXPECT_NE(error_of([&] { load_safetensors_dir(d.path()); }).find("no model.safetensors"), std::string::npos);
}

json llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 10}, {"hidden_size", 8},
          {"intermediate_size", 12}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}, {"max_position_embeddings", 64}, {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0}, {"tie_word_embeddings", true}, {"torch_dtype", "bfloat16"}};
}

TEST(ModelConfig, ParsesBothTransformersSpellings) {
  json v4 = llama_config();
  v4["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  json v5 = llama_config();
  v5.erase("rope_theta");
  v5.erase("torch_dtype");
  v5["dtype"] = "bfloat16";
  v5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 10000.0}, {"factor", 8.0},
                           {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                           {"original_max_position_embeddings", 32}};
  const ModelConfig a = parse_hf_config(v4, "v4"), b = parse_hf_config(v5, "v5");
  EXPECT_EQ(a.rope.inv_freq(), b.rope.inv_freq());
  EXPECT_EQ(a.rope.scaling, "llama3");
  EXPECT_EQ(a.stored_dtype, DType::kBF16);
  EXPECT_EQ(a.head_dim, 4);
  EXPECT_EQ(a.num_kv_heads, 1);
  json neox = {{"architectures", {"GPTNeoXForCausalLM"}}, {"vocab_size", 10}, {"hidden_size", 16},
               {"intermediate_size", 64}, {"num_hidden_layers", 1}, {"num_attention_heads", 2},
               {"rotary_pct", 0.25}, {"rotary_emb_base", 10000}, {"max_position_embeddings", 64}};
  const ModelConfig n = parse_hf_config(neox, "neox");
  EXPECT_EQ(n.rope.rotary_dim, 2);
  EXPECT_TRUE(n.parallel_residual);
  EXPECT_EQ(n.norm, NormKind::kLayerNorm);
  EXPECT_EQ(n.act, Activation::kGeluErf);
}

TEST(ModelConfig, RejectsWhatItCannotRun) {
  json j = llama_config();
  j["architectures"] = {"BertModel"};
  try {
    parse_hf_config(j, "config.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("BertModel"), std::string::npos);
  }
  j = llama_config();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of([&] { parse_hf_config(j, "config.json"); }).find("multiple"), std::string::npos);
  j = llama_config();
  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(error_of([&] { parse_hf_config(j, "config.json"); }).find("yarn"), std::string::npos);
  j = llama_config();
  j.erase("hidden_size");
  EXPECT_NE(error_of([&] { parse_hf_config(j, "config.json"); }).find("hidden_size"), std::string::npos);
  j = llama_config();
  j["torch_dtype"] = "int8";
  EXPECT_NE(error_of([&] { parse_hf_config(j, "config.json"); }).find("int8"), std::string::npos);
}

TEST(ModelConfig, NumbersOutOfIntRangeAreRefused) {
  // Found by the config fuzzer: converting 1e300 (or -1e300, 1e20) to int is undefined; every
  // int field is now range-checked and named.
  for (const char* key :
       {"num_key_value_heads", "head_dim", "max_position_embeddings", "vocab_size"}) {
    for (const json& v : {json(1e300), json(-1e300), json(int64_t{1} << 40), json(2.5)}) {
      json j = llama_config();
      j[key] = v;
      const std::string e = error_of([&] { parse_hf_config(j, "config.json"); });
      EXPECT_NE(e.find(std::string("'") + key + "' must be an integer within"), std::string::npos)
          << key << " = " << v.dump() << ": " << e;
    }
  }
  json j = llama_config();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"original_max_position_embeddings", 1e20}};
  EXPECT_NE(error_of([&] {
              parse_hf_config(j, "config.json");
            }).find("'original_max_position_embeddings'"),
            std::string::npos);
  j = llama_config();
  j["partial_rotary_factor"] = 1e300;
  EXPECT_NE(error_of([&] { parse_hf_config(j, "config.json"); }).find("partial rotary factor"),
            std::string::npos);
  // Integral floats (configs written as 2048.0) still read.
  j = llama_config();
  j["max_position_embeddings"] = 128.0;
  EXPECT_EQ(parse_hf_config(j, "config.json").max_position_embeddings, 128);
}

TEST(ModelWeights, ShapeMismatchAndMissingTensorsAreNamed) {
  const ModelConfig c = parse_hf_config(llama_config(), "config.json");
  std::map<std::string, Tensor> t;
  std::vector<float> buf(1000);
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    Tensor x;
    x.name = name;
    x.shape = shape;
    x.data = buf.data();
    t[name] = x;
  };
  add("model.embed_tokens.weight", {10, 8});
  add("model.layers.0.input_layernorm.weight", {8});
  add("model.layers.0.self_attn.q_proj.weight", {8, 4});  // wrong: [8, 8]
  const std::string e = error_of([&] { map_hf_weights(c, t, "dir"); });
  EXPECT_NE(e.find("q_proj.weight' has shape [8, 4], expected [8, 8]"), std::string::npos) << e;
  add("model.layers.0.self_attn.q_proj.weight", {8, 8});
  EXPECT_NE(error_of([&] { map_hf_weights(c, t, "dir"); }).find("missing tensor 'model.layers.0.self_attn.k_proj.weight'"),
            std::string::npos);
}

}  // namespace
}  // namespace rill
