// fp8 checkpoints at load: quantization_config parsing (both formats, every scale layout), the
// refusal of every other scheme with the method, the scheme and what is supported named, and the
// refusal of scales that are missing, of the wrong shape, non-finite or not positive, with the
// tensor named.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/model/fp8_weights.h"
#include "engine/model/model.h"
#include "engine/model/quantization.h"
#include "tests/engine/checkpoint_writer.h"
#include "tests/engine/golden.h"

namespace rill {
namespace {

using nlohmann::json;
using testing::copy_checkpoint;
using testing::error_of;
using testing::raw_f32;
using testing::RawTensor;
using testing::source_path;
using testing::TempDir;

json ct_config(const json& weights, const json& inputs, const char* format = "float-quantized") {
  return {{"quantization_config",
           {{"quant_method", "compressed-tensors"},
            {"format", format},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", inputs}}}}},
            {"ignore", {"lm_head", "re:.*layers\\.1\\.mlp\\.down_proj"}}}}};
}

json fp8_args(const char* strategy, bool dynamic = false) {
  return {{"num_bits", 8},
          {"type", "float"},
          {"strategy", strategy},
          {"symmetric", true},
          {"dynamic", dynamic}};
}

TEST(QuantizationConfig, ParsesCompressedTensorsFp8Schemes) {
  const auto dyn =
      parse_quantization_config(ct_config(fp8_args("channel"), fp8_args("token", true)), "c.json");
  EXPECT_EQ(dyn.method, QuantMethod::kCompressedTensors);
  EXPECT_EQ(dyn.weights, WeightScaleKind::kChannel);
  EXPECT_EQ(dyn.activations, ActivationQuant::kDynamicPerToken);
  EXPECT_EQ(dyn.describe(),
            "fp8 (compressed-tensors, per-channel weight scales, dynamic per-token activations)");
  EXPECT_TRUE(dyn.quantizes("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(dyn.quantizes("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(dyn.quantizes("lm_head"));
  EXPECT_FALSE(dyn.quantizes("model.layers.1.mlp.down_proj"));  // the "re:" pattern
  EXPECT_STREQ(dyn.scale_suffix(), "weight_scale");

  const auto stat =
      parse_quantization_config(ct_config(fp8_args("tensor"), fp8_args("tensor")), "c");
  EXPECT_EQ(stat.weights, WeightScaleKind::kTensor);
  EXPECT_EQ(stat.activations, ActivationQuant::kStaticPerTensor);

  json block = fp8_args("block");
  block["block_structure"] = {128, 128};
  json group = fp8_args("group", true);
  group["group_size"] = 128;
  const auto blk = parse_quantization_config(ct_config(block, group), "c");
  EXPECT_EQ(blk.weights, WeightScaleKind::kBlock);
  EXPECT_EQ(blk.block_rows, 128);
  EXPECT_EQ(blk.activations, ActivationQuant::kDynamicPerGroup);

  const auto weight_only = parse_quantization_config(ct_config(fp8_args("channel"), nullptr), "c");
  EXPECT_EQ(weight_only.activations, ActivationQuant::kDynamicPerToken);

  EXPECT_FALSE(parse_quantization_config(json::object(), "c").quantized());
  EXPECT_EQ(parse_quantization_config(json::object(), "c").describe(), "none");

  EXPECT_EQ(dyn.kv_scales, KvScaleScheme::kNone);
}

// KV-cache schemes: an "-FP8-KV" checkpoint's calibrated scales (per tensor or per head), AutoFP8's
// k / v output scales, and schemes whose scales are not read; each named in the description.
TEST(QuantizationConfig, ParsesKvCacheSchemes) {
  json kv = ct_config(fp8_args("channel"), fp8_args("token", true));
  kv["quantization_config"]["kv_cache_scheme"] = fp8_args("tensor");
  const auto with_kv = parse_quantization_config(kv, "c");
  EXPECT_EQ(with_kv.kv_scales, KvScaleScheme::kPerTensor);
  EXPECT_EQ(with_kv.describe(),
            "fp8 (compressed-tensors, per-channel weight scales, dynamic per-token activations; "
            "calibrated per-tensor KV-cache scales for --kv-cache-dtype fp8)");
  kv["quantization_config"]["kv_cache_scheme"] = fp8_args("attn_head");
  const auto per_head = parse_quantization_config(kv, "c");
  EXPECT_EQ(per_head.kv_scales, KvScaleScheme::kPerHead);
  EXPECT_NE(per_head.describe().find("per-head KV-cache scales for --kv-cache-dtype fp8 (each "
                                     "layer's largest)"),
            std::string::npos);
  kv["quantization_config"]["kv_cache_scheme"] = {
      {"num_bits", 8}, {"type", "int"}, {"strategy", "tensor"}, {"symmetric", true}};
  const auto int8 = parse_quantization_config(kv, "c");
  EXPECT_EQ(int8.kv_scales, KvScaleScheme::kUnsupported);
  EXPECT_NE(int8.describe().find("KV-cache scheme int8 (type=int, num_bits=8, strategy=tensor) is "
                                 "not supported: its scales are not read"),
            std::string::npos)
      << int8.describe();
  kv["quantization_config"]["kv_cache_scheme"] = fp8_args("tensor", true);
  EXPECT_EQ(parse_quantization_config(kv, "c").kv_scales, KvScaleScheme::kUnsupported);
  kv["quantization_config"]["kv_cache_scheme"] = nullptr;
  EXPECT_EQ(parse_quantization_config(kv, "c").kv_scales, KvScaleScheme::kNone);
  // AutoFP8's per-tensor format with k / v output scales.
  const json autofp8 = {{"quantization_config",
                         {{"quant_method", "fp8"},
                          {"activation_scheme", "static"},
                          {"kv_cache_quant_targets", {"k_proj", "v_proj"}}}}};
  EXPECT_EQ(parse_quantization_config(autofp8, "c").kv_scales, KvScaleScheme::kPerTensor);
  json plain_fp8 = autofp8;
  plain_fp8["quantization_config"].erase("kv_cache_quant_targets");
  EXPECT_EQ(parse_quantization_config(plain_fp8, "c").kv_scales, KvScaleScheme::kNone);
}

TEST(QuantizationConfig, ParsesTransformersFp8BlockFormat) {
  const json j = {{"quantization_config",
                   {{"quant_method", "fp8"},
                    {"activation_scheme", "dynamic"},
                    {"fmt", "e4m3"},
                    {"weight_block_size", {128, 128}},
                    {"modules_to_not_convert", {"model.layers.0.mlp.gate_proj"}}}}};
  const auto q = parse_quantization_config(j, "c");
  EXPECT_EQ(q.method, QuantMethod::kFp8);
  EXPECT_EQ(q.weights, WeightScaleKind::kBlock);
  EXPECT_EQ(q.activations, ActivationQuant::kDynamicPerGroup);
  EXPECT_STREQ(q.scale_suffix(), "weight_scale_inv");
  EXPECT_TRUE(q.quantizes("model.layers.0.mlp.up_proj"));
  EXPECT_FALSE(q.quantizes("model.layers.0.mlp.gate_proj"));
  EXPECT_EQ(
      q.describe(),
      "fp8 (quant_method fp8, 128x128 block weight scales, dynamic per-token-group activations)");
}

// AutoFP8 / vLLM's per-tensor fp8 checkpoints: quant_method fp8 without weight_block_size.
TEST(QuantizationConfig, ParsesPerTensorFp8WithoutBlockSize) {
  const json j = {{"quantization_config",
                   {{"quant_method", "fp8"},
                    {"activation_scheme", "static"},
                    {"ignored_layers", {"model.layers.1.mlp.down_proj"}}}}};
  const auto q = parse_quantization_config(j, "c");
  EXPECT_EQ(q.weights, WeightScaleKind::kTensor);
  EXPECT_EQ(q.activations, ActivationQuant::kStaticPerTensor);
  EXPECT_STREQ(q.scale_suffix(), "weight_scale");
  EXPECT_FALSE(q.quantizes("model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(q.quantizes("lm_head"));
  EXPECT_TRUE(q.quantizes("model.layers.0.mlp.down_proj"));
  EXPECT_EQ(q.describe(),
            "fp8 (quant_method fp8, per-tensor weight scales, static per-tensor activations)");
  const auto dyn = parse_quantization_config(
      {{"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}}}, "c");
  EXPECT_EQ(dyn.activations, ActivationQuant::kDynamicPerToken);
}

// Each unsupported scheme: kUnsupported, the message names what it is and what is supported.
TEST(QuantizationConfig, RefusesEveryOtherSchemeNamingIt) {
  auto refused = [](const json& j, const std::string& names) {
    try {
      parse_quantization_config(j, "m/config.json");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
      const std::string msg = e.what();
      EXPECT_NE(msg.find(names), std::string::npos) << msg;
      EXPECT_NE(msg.find("supported: compressed-tensors float-quantized fp8"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("m/config.json"), std::string::npos) << msg;
      return;
    }
    ADD_FAILURE() << "accepted " << j.dump();
  };
  json int4 = {{"num_bits", 4}, {"type", "int"}, {"strategy", "group"}, {"group_size", 128}};
  refused(ct_config(int4, nullptr, "pack-quantized"), "format 'pack-quantized'");
  refused(ct_config(int4, nullptr), "int4 (type=int, num_bits=4, strategy=group)");
  json int8 = {{"num_bits", 8}, {"type", "int"}, {"strategy", "channel"}};
  refused(ct_config(int8, fp8_args("token", true), "int-quantized"), "format 'int-quantized'");
  refused(ct_config(int8, fp8_args("token", true)), "int8 (type=int, num_bits=8");
  json nvfp4 = {
      {"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"}, {"group_size", 16}};
  refused(ct_config(nvfp4, nvfp4, "nvfp4-pack-quantized"), "format 'nvfp4-pack-quantized'");
  refused(ct_config(nvfp4, nullptr), "float4 (type=float, num_bits=4, strategy=tensor_group)");
  refused(ct_config(fp8_args("group"), nullptr), "strategy 'group'");
  json block64 = fp8_args("block");
  block64["block_structure"] = {64, 64};
  refused(ct_config(block64, nullptr), "block_structure [64,64]");
  refused(ct_config(fp8_args("channel"), fp8_args("token")),
          "static activations with strategy 'token'");
  for (const char* m : {"mxfp4", "gptq", "awq", "bitsandbytes", "modelopt", "fbgemm_fp8", "hqq"})
    refused({{"quantization_config", {{"quant_method", m}}}}, std::string("method '") + m + "'");
  refused({{"quantization_config", json::object()}}, "(missing quant_method)");
  refused({{"quantization_config", {{"quant_method", "fp8"}, {"weight_block_size", {64, 64}}}}},
          "weight_block_size [64,64]");
  refused({{"quantization_config",
            {{"quant_method", "fp8"},
             {"activation_scheme", "static"},
             {"weight_block_size", {128, 128}}}}},
          "fp8 block scales with activation_scheme 'static'");
  refused({{"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "weird"}}}},
          "activation_scheme 'weird'");
  refused({{"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e5m2"}}}}, "fmt 'e5m2'");
  json two = ct_config(fp8_args("channel"), nullptr);
  two["quantization_config"]["config_groups"]["group_1"] =
      two["quantization_config"]["config_groups"]["group_0"];
  refused(two, "2 config groups");
}

// The code parse_quantization_config refuses `j` with (kInternal: accepted).
ErrorCode code_of(const json& j) {
  try {
    parse_quantization_config(j, "c");
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kInternal;
}

TEST(QuantizationConfig, MalformedFieldsAreInvalidArguments) {
  EXPECT_EQ(code_of({{"quantization_config", 3}}), ErrorCode::kInvalidArgument);
  json no_groups = ct_config(fp8_args("channel"), nullptr);
  no_groups["quantization_config"].erase("config_groups");
  EXPECT_EQ(code_of(no_groups), ErrorCode::kInvalidArgument);
  json bad_re = ct_config(fp8_args("channel"), nullptr);
  bad_re["quantization_config"]["ignore"] = {"re:(unclosed"};
  EXPECT_EQ(code_of(bad_re), ErrorCode::kInvalidArgument);
  json bad_list = ct_config(fp8_args("channel"), nullptr);
  bad_list["quantization_config"]["ignore"] = "lm_head";
  EXPECT_EQ(code_of(bad_list), ErrorCode::kInvalidArgument);
  json bad_symmetric = ct_config(fp8_args("channel"), nullptr);
  bad_symmetric["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = "yes";
  EXPECT_EQ(code_of(bad_symmetric), ErrorCode::kInvalidArgument);
}

// Numeric fields that are no int (past int's range, fractions, strings) are refused like any
// other value but 8 / 128, never converted (a float past int's range would be undefined
// behaviour: the model_config fuzzer found num_bits = 1e300).
TEST(QuantizationConfig, NumbersPastIntAreRefusedNotConverted) {
  json block = fp8_args("block");
  block["block_structure"] = {128, 128};
  for (const json& bits : {json(1e300), json(-1e300), json(8.5), json("8"), json(1ull << 40),
                           json(-(1ll << 40)), json(true)}) {
    SCOPED_TRACE(bits.dump());
    json w = fp8_args("channel");
    w["num_bits"] = bits;
    EXPECT_EQ(code_of(ct_config(w, nullptr)), ErrorCode::kUnsupported);
    json a = fp8_args("token", true);
    a["num_bits"] = bits;
    EXPECT_EQ(code_of(ct_config(fp8_args("channel"), a)), ErrorCode::kUnsupported);
    json g = fp8_args("group", true);
    g["group_size"] = bits;
    EXPECT_EQ(code_of(ct_config(block, g)), ErrorCode::kUnsupported);
    json kv = ct_config(fp8_args("channel"), nullptr);
    kv["quantization_config"]["kv_cache_scheme"] = {
        {"num_bits", bits}, {"type", "float"}, {"strategy", "tensor"}, {"dynamic", false}};
    EXPECT_EQ(parse_quantization_config(kv, "c").kv_scales, KvScaleScheme::kUnsupported);
  }
  json w = fp8_args("channel");
  w["num_bits"] = 8.0;  // an integral float is the integer
  EXPECT_TRUE(parse_quantization_config(ct_config(w, nullptr), "c").quantized());
  json g = fp8_args("group", true);
  g["group_size"] = 128;
  EXPECT_TRUE(parse_quantization_config(ct_config(block, g), "c").quantized());
}

TEST(QuantizationConfig, ResolvesTheRequestedMode) {
  const QuantizationConfig none;
  const auto fp8 = parse_quantization_config(ct_config(fp8_args("channel"), nullptr), "c");
  EXPECT_EQ(resolve_quantization("auto", none), WeightQuant::kNone);
  EXPECT_EQ(resolve_quantization("auto", fp8), WeightQuant::kFp8);
  EXPECT_EQ(resolve_quantization("fp8", none), WeightQuant::kFp8);
  EXPECT_EQ(resolve_quantization("none", fp8), WeightQuant::kNone);
  EXPECT_EQ(describe_quantization(WeightQuant::kFp8, none),
            "fp8 (per-channel weight scales computed at load, dynamic per-token activations)");
  EXPECT_EQ(describe_quantization(WeightQuant::kNone, fp8), "none");
  EXPECT_NE(error_of([&] {
              resolve_quantization("int8", none);
            }).find("unsupported quantization 'int8' (auto, fp8, none)"),
            std::string::npos);
}

// The fixtures load with their scales attached in the layout each format stores.
TEST(Fp8Checkpoint, FixturesLoadWithTheirScales) {
  const Model ch = load_model(source_path("tests/fixtures/fp8_ct_channel"));
  const Tensor& q = ch.weights.layers[0].q;
  ASSERT_TRUE(is_fp8(q));
  EXPECT_EQ(q.scales->block_rows, 1);
  EXPECT_EQ(q.scales->block_cols, 128);
  EXPECT_EQ(q.scales->name, "model.layers.0.self_attn.q_proj.weight_scale");
  EXPECT_EQ(ch.weights.lm_head.dtype, DType::kBF16);  // ignored
  EXPECT_EQ(ch.config.stored_dtype, DType::kBF16);

  const Model t = load_model(source_path("tests/fixtures/fp8_ct_tensor"));
  ASSERT_TRUE(is_fp8(t.weights.layers[1].down));
  EXPECT_EQ(t.weights.layers[1].down.scales->values.size(), 1u);
  EXPECT_NEAR(t.weights.layers[1].down.scales->input_scale, 16.0 / 448, 1e-7);

  const Model b = load_model(source_path("tests/fixtures/fp8_block"));
  const Tensor& down = b.weights.layers[0].down;  // [128, 256]: 1 x 2 blocks
  ASSERT_TRUE(is_fp8(down));
  EXPECT_EQ(down.scales->values.size(), 2u);
  const Tensor& k = b.weights.layers[0].k;  // [64, 128]: one partial block
  EXPECT_EQ(k.scales->values.size(), 1u);
  EXPECT_EQ(
      b.config.quant.describe(),
      "fp8 (quant_method fp8, 128x128 block weight scales, dynamic per-token-group activations)");
}

// Every weight dequantizes to exactly the float32 tensor of the dequantized model beside it.
TEST(Fp8Checkpoint, DequantizedWeightsEqualTheFixturesFp32Model) {
  for (const char* name : {"fp8_ct_channel", "fp8_ct_tensor", "fp8_block"}) {
    const auto dir = source_path(std::string("tests/fixtures/") + name);
    const Model q = load_model(dir), d = load_model(dir / "dequantized");
    for (size_t i = 0; i < q.weights.layers.size(); ++i) {
      const LayerWeights &a = q.weights.layers[i], &b = d.weights.layers[i];
      for (auto f : {&LayerWeights::q, &LayerWeights::k, &LayerWeights::v, &LayerWeights::o,
                     &LayerWeights::gate, &LayerWeights::up, &LayerWeights::down}) {
        ASSERT_TRUE(is_fp8(a.*f)) << name << " " << (a.*f).name;
        EXPECT_EQ((a.*f).to_f32(), (b.*f).to_f32()) << name << " " << (a.*f).name;
      }
      EXPECT_EQ(a.attn_norm.to_f32(), b.attn_norm.to_f32());
    }
    EXPECT_EQ(q.weights.lm_head.to_f32(), d.weights.lm_head.to_f32()) << name;
  }
}

// A copy of fp8_ct_tensor with one change; returns the load error ("<no error>" if it loads).
std::string load_error_after(
    const std::function<void(json&, std::map<std::string, RawTensor>&)>& edit) {
  TempDir d("fp8");
  copy_checkpoint(source_path("tests/fixtures/fp8_ct_tensor"), d.path(), edit);
  return error_of([&] { load_model(d.path()); });
}

TEST(Fp8Checkpoint, BadScalesAreRefusedWithTheTensorNamed) {
  const std::string w = "model.layers.1.mlp.up_proj.weight";
  const std::string s = "model.layers.1.mlp.up_proj.weight_scale";
  EXPECT_EQ(load_error_after([](json&, auto&) {}), "<no error>");
  auto has = [](const std::string& msg, const std::string& what) {
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  has(load_error_after([&](json&, auto& t) { t.erase(s); }),
      "fp8 weight '" + w + "' has no scale tensor '" + s + "'");
  has(load_error_after([&](json&, auto& t) {
        t[s] = raw_f32({2}, {1, 1});
      }),
      "scale tensor '" + s + "' has shape [2], expected []");
  for (float bad : {0.0f, -0.5f, std::nanf(""), INFINITY})
    has(load_error_after([&](json&, auto& t) { t[s] = raw_f32({1}, {bad}); }),
        "scale tensor '" + s + "' holds");
  has(load_error_after(
          [&](json&, auto& t) { t.erase("model.layers.0.self_attn.o_proj.input_scale"); }),
      "has no scale tensor 'model.layers.0.self_attn.o_proj.input_scale'");
  has(load_error_after([&](json&, auto& t) {
        t["model.layers.0.self_attn.o_proj.input_scale"] = raw_f32({1}, {0.0f});
      }),
      "scale tensor 'model.layers.0.self_attn.o_proj.input_scale' holds 0");
  // Per-channel scales of the wrong length.
  has(load_error_after([&](json& c, auto& t) {
        c["quantization_config"]["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
        for (auto& [name, raw] : t)
          if (name.ends_with(".weight_scale")) raw = raw_f32({3, 1}, {1, 1, 1});
      }),
      "has shape [3, 1], expected [");
  // An fp8 tensor in a checkpoint that declares no quantization.
  has(load_error_after([](json& c, auto&) { c.erase("quantization_config"); }),
      "is fp8 (F8_E4M3) but config.json has no quantization_config");
  // A module the config quantizes stored in bf16.
  has(load_error_after([&](json&, auto& t) {
        t[w] = {"BF16", t[w].shape, std::string(t[w].bytes.size() * 2, '\0')};
      }),
      "tensor '" + w + "' is bfloat16 but quantization_config quantizes module");
  // fp8 where Rill expects something else than a weight.
  has(load_error_after([](json&, auto& t) {
        t["model.layers.0.input_layernorm.bias"] = {"F8_E4M3", {128}, std::string(128, '\0')};
      }),
      "fp8 tensor 'model.layers.0.input_layernorm.bias' is not a weight");
  // An unsupported safetensors dtype is named.
  has(load_error_after([&](json&, auto& t) { t[w].dtype = "F8_E5M2"; }),
      "has dtype F8_E5M2 (supported: F32, F16, BF16, F8_E4M3)");
}

TEST(Fp8Weights, PerChannelQuantizationAtLoad) {
  // Row 0 spans +-448 units of 0.5, row 1 is zeros, row 2 is one value.
  std::vector<float> v(3 * 4, 0.0f);
  v[0] = 224.0f, v[1] = -1.0f, v[2] = 0.3f, v[3] = 100.0f;
  v[8] = -3.0f;
  const Tensor w = make_f32_tensor("w", {3, 4}, v);
  const Tensor q = quantize_fp8_per_channel(w);
  ASSERT_TRUE(is_fp8(q));
  EXPECT_EQ(q.scales->block_rows, 1);
  EXPECT_EQ(q.scales->values, (std::vector<float>{224.0f / 448, 1.0f, 3.0f / 448}));
  const std::vector<float> d = q.to_f32();
  EXPECT_EQ(d[0], 224.0f);  // the row maximum maps to 448 exactly
  EXPECT_EQ(d[8], -3.0f);
  EXPECT_EQ(d[4], 0.0f);
  for (size_t i = 0; i < v.size(); ++i)  // e4m3 keeps 3 mantissa bits: within 1/16 relative
    EXPECT_LE(std::abs(d[i] - v[i]), std::abs(v[i]) / 16 + 1e-6) << i;
  EXPECT_EQ(quantize_fp8_per_channel(q).data, q.data);  // fp8 stays as it is
  v[5] = std::nanf("");
  EXPECT_NE(error_of([&] {
              quantize_fp8_per_channel(make_f32_tensor("w", {3, 4}, v));
            }).find("cannot quantize 'w': row 1 holds a value that is not finite"),
            std::string::npos);
}

TEST(Fp8Weights, ScaleLayoutsExpandToRowsAndGather) {
  Fp8Scales s;
  s.rows = 5;
  s.cols = 300;
  s.block_rows = 2;
  s.block_cols = 128;
  s.values = {1, 2, 3, 4, 5, 6, 7, 8, 9};  // [3, 3]
  EXPECT_EQ(s.at(3, 129), 5.0f);
  const Fp8Scales r = s.per_row();
  EXPECT_EQ(r.block_rows, 1);
  EXPECT_EQ(r.values.size(), 15u);
  for (int64_t row = 0; row < 5; ++row)
    for (int64_t col : {0, 127, 128, 299}) EXPECT_EQ(r.at(row, col), s.at(row, col));
  const Fp8Scales g = s.gather_rows({4, 0});
  EXPECT_EQ(g.rows, 2);
  EXPECT_EQ(g.at(0, 260), s.at(4, 260));
  EXPECT_EQ(g.at(1, 5), s.at(0, 5));
}

}  // namespace
}  // namespace rill
