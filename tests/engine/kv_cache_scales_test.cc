// Calibrated fp8 KV-cache scales at load (engine/model/kv_cache_scales.h): every writer's tensor
// names, per-head scales reduced to the layer's largest, and the refusal of scales that are
// missing, of another shape, non-finite or not positive, with the layer and tensor named.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/model/kv_cache_scales.h"
#include "engine/model/model.h"
#include "tests/engine/checkpoint_writer.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using nlohmann::json;
using testing::copy_checkpoint;
using testing::error_of;
using testing::RawTensor;
using testing::source_path;
using testing::TempDir;

ModelConfig two_layers(KvScaleScheme scheme, Arch arch = Arch::kLlama) {
  ModelConfig c;
  c.arch = arch;
  c.num_layers = 2;
  c.num_kv_heads = 4;
  c.quant.kv_scales = scheme;
  return c;
}

Tensor scalar(const std::string& name, float v) {
  return make_f32_tensor(name, {}, {v});
}

// Reads the scales of `tensors` into two layers; the error message instead when refused.
std::string read(const ModelConfig& c, const std::map<std::string, Tensor>& tensors,
                 ModelWeights* out = nullptr) {
  ModelWeights w;
  w.layers.resize(c.num_layers);
  const std::string err = error_of([&] { read_kv_cache_scales(c, tensors, w, "ckpt"); });
  if (out) *out = w;
  return err;
}

TEST(KvCacheScales, ReadsEveryWritersNames) {
  const std::string a0 = "model.layers.0.self_attn", a1 = "model.layers.1.self_attn";
  std::map<std::string, Tensor> t = {
      {a0 + ".k_scale", scalar(a0 + ".k_scale", 0.5f)},                        // llm-compressor
      {a0 + ".v_scale", make_f32_tensor(a0 + ".v_scale", {1}, {2})},           // [1]
      {a1 + ".k_proj.k_scale", scalar(a1 + ".k_proj.k_scale", 3)},             // ModelOpt
      {a1 + ".v_proj.output_scale", scalar(a1 + ".v_proj.output_scale", 4)}};  // AutoFP8
  ModelWeights w;
  ASSERT_EQ(read(two_layers(KvScaleScheme::kPerTensor), t, &w), "<no error>");
  EXPECT_EQ(w.layers[0].kv_scales.k, 0.5f);
  EXPECT_EQ(w.layers[0].kv_scales.v, 2.0f);
  EXPECT_EQ(w.layers[1].kv_scales.k, 3.0f);
  EXPECT_EQ(w.layers[1].kv_scales.v, 4.0f);

  // Older AutoFP8: one kv_scale for both; GPT-NeoX's attention module.
  const std::string n0 = "gpt_neox.layers.0.attention", n1 = "gpt_neox.layers.1.attention";
  t = {{n0 + ".kv_scale", scalar(n0 + ".kv_scale", 0.25f)},
       {n1 + ".k_scale", scalar(n1 + ".k_scale", 1.5f)},
       {n1 + ".v_scale", scalar(n1 + ".v_scale", 0.75f)}};
  ASSERT_EQ(read(two_layers(KvScaleScheme::kPerTensor, Arch::kGptNeoX), t, &w), "<no error>");
  EXPECT_EQ(w.layers[0].kv_scales.k, 0.25f);
  EXPECT_EQ(w.layers[0].kv_scales.v, 0.25f);
  EXPECT_EQ(w.layers[1].kv_scales.k, 1.5f);
  EXPECT_EQ(w.layers[1].kv_scales.v, 0.75f);

  // Per KV head: each layer takes the largest, so no calibrated value clips.
  t.clear();
  for (const std::string& a : {a0, a1})
    for (const char* kv : {".k_scale", ".v_scale"})
      t[a + kv] = make_f32_tensor(a + kv, {4}, {0.5f, 3.0f, 1.0f, a == a0 ? 2.0f : 7.0f});
  ASSERT_EQ(read(two_layers(KvScaleScheme::kPerHead), t, &w), "<no error>");
  EXPECT_EQ(w.layers[0].kv_scales.k, 3.0f);
  EXPECT_EQ(w.layers[1].kv_scales.v, 7.0f);

  // No scheme (or one whose scales are not fp8's): the tensors are not read, the scales stay 1.
  for (KvScaleScheme s : {KvScaleScheme::kNone, KvScaleScheme::kUnsupported}) {
    ASSERT_EQ(read(two_layers(s), t, &w), "<no error>");
    EXPECT_EQ(w.layers[1].kv_scales.v, 1.0f);
  }
}

TEST(KvCacheScales, BadScalesAreRefusedWithTheLayerAndTensorNamed) {
  const std::string a = "model.layers.1.self_attn";
  auto full = [&] {
    std::map<std::string, Tensor> t;
    for (const std::string pre : {"model.layers.0.self_attn", a.c_str()})
      for (const char* kv : {".k_scale", ".v_scale"}) t[pre + kv] = scalar(pre + kv, 1);
    return t;
  };
  const ModelConfig c = two_layers(KvScaleScheme::kPerTensor);
  EXPECT_EQ(read(c, full()), "<no error>");
  auto has = [](const std::string& msg, const std::string& what) {
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  auto t = full();
  t.erase(a + ".v_scale");
  has(read(c, t),
      "ckpt: quantization_config declares calibrated KV-cache scales but the v scale "
      "of '" +
          a + "' is missing (looked for '" + a + ".v_scale', '" + a + ".v_proj.v_scale', '" + a +
          ".v_proj.output_scale', '" + a + ".kv_scale')");
  for (float bad : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    t = full();
    t[a + ".k_scale"] = scalar(a + ".k_scale", bad);
    has(read(c, t), "KV-cache scale tensor '" + a + ".k_scale' holds");
  }
  t = full();
  t[a + ".k_scale"] = make_f32_tensor(a + ".k_scale", {3}, {1, 1, 1});
  has(read(c, t), "KV-cache scale tensor '" + a +
                      ".k_scale' is float32 [3], expected a 16/32-bit "
                      "float [] or [1] (per tensor) or [4] (per KV head)");
  t[a + ".k_scale"] = make_f32_tensor(a + ".k_scale", {2, 2}, {1, 1, 1, 1});
  has(read(c, t), "is float32 [2, 2], expected");
}

// An "-FP8-KV" checkpoint end to end: the loader reads its BF16 scalars, the description says so.
TEST(KvCacheScales, AnFp8KvCheckpointLoadsItsScales) {
  TempDir d("kvscales");
  copy_checkpoint(source_path("tests/fixtures/fp8_ct_tensor"), d.path(),
                  [](json& c, std::map<std::string, RawTensor>& t) {
                    c["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8},
                                                                   {"type", "float"},
                                                                   {"strategy", "tensor"},
                                                                   {"dynamic", false},
                                                                   {"symmetric", true}};
                    for (int i = 0; i < 2; ++i)
                      for (const char* kv : {"k", "v"}) {
                        // bf16 0x3f00 = 0.5, 0x4040 = 3.0
                        const std::string bits =
                            kv[0] == 'k' ? std::string("\x00\x3f", 2) : std::string("\x40\x40", 2);
                        t["model.layers." + std::to_string(i) + ".self_attn." + kv + "_scale"] = {
                            "BF16", {}, bits};
                      }
                  });
  const Model m = load_model(d.path());
  EXPECT_EQ(m.config.quant.kv_scales, KvScaleScheme::kPerTensor);
  for (const LayerWeights& l : m.weights.layers) {
    EXPECT_EQ(l.kv_scales.k, 0.5f);
    EXPECT_EQ(l.kv_scales.v, 3.0f);
  }
  EXPECT_NE(m.config.quant.describe().find("calibrated per-tensor KV-cache scales"),
            std::string::npos);

  TempDir e("kvscales_missing");
  copy_checkpoint(
      source_path("tests/fixtures/fp8_ct_tensor"), e.path(),
      [](json& c, std::map<std::string, RawTensor>&) {
        c["quantization_config"]["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
      });
  EXPECT_NE(error_of([&] {
              load_model(e.path());
            }).find("the k scale of 'model.layers.0.self_attn' is missing"),
            std::string::npos);
}

}  // namespace
}  // namespace rill
