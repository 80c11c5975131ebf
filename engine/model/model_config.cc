#include "engine/model/model_config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/error.h"

namespace rill {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, source + ": " + what);
}

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

// An int field's value: an integer, or a float with an integral value (some configs write 2048.0),
// within int's range. Converting a larger value would overflow (undefined for a float).
int to_int(const json& v, const char* key, const std::string& source) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max()))
      return static_cast<int>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x >= std::numeric_limits<int>::min() && x <= std::numeric_limits<int>::max())
      return static_cast<int>(x);
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    if (x == std::trunc(x) && x >= std::numeric_limits<int>::min() &&
        x <= std::numeric_limits<int>::max())
      return static_cast<int>(x);
  }
  fail(source, std::string("'") + key + "' must be an integer within [" +
                   std::to_string(std::numeric_limits<int>::min()) + ", " +
                   std::to_string(std::numeric_limits<int>::max()) + "] (got " + v.dump() + ")");
}

int require_int(const json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) fail(source, std::string("missing integer '") + key + "'");
  return to_int(*it, key, source);
}

// An optional int field (absent or null: `fallback`).
int get_int_or(const json& j, const char* key, int fallback, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return to_int(*it, key, source);
}

std::vector<int> int_or_list(const json& v) {
  std::vector<int> out;
  if (v.is_number_integer()) out.push_back(v.get<int>());
  if (v.is_array())
    for (const auto& x : v)
      if (x.is_number_integer()) out.push_back(x.get<int>());
  return out;
}

Arch parse_arch(const std::string& name, const std::string& source) {
  if (name == "LlamaForCausalLM") return Arch::kLlama;
  if (name == "MistralForCausalLM") return Arch::kMistral;
  if (name == "Qwen2ForCausalLM") return Arch::kQwen2;
  if (name == "GPTNeoXForCausalLM") return Arch::kGptNeoX;
  throw Error(ErrorCode::kUnsupported,
              source + ": unsupported architecture '" + name +
                  "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, GPTNeoXForCausalLM)");
}

Activation parse_act(const std::string& name, const std::string& source) {
  if (name == "silu" || name == "swish") return Activation::kSilu;
  if (name == "gelu") return Activation::kGeluErf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return Activation::kGeluTanh;
  throw Error(ErrorCode::kUnsupported, source + ": unsupported hidden_act '" + name + "'");
}

// RoPE settings: transformers 5 keeps them in "rope_parameters"; 4.x in rope_theta / rope_scaling
// (GPT-NeoX: rotary_emb_base / rotary_pct).
void parse_rope(const json& j, ModelConfig& c, const std::string& source) {
  const bool neox = c.arch == Arch::kGptNeoX;
  json params = json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) params = j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) params = j["rope_scaling"];
  double theta = get_or<double>(j, neox ? "rotary_emb_base" : "rope_theta", 10000.0);
  theta = get_or<double>(j, "rope_theta", theta);
  theta = get_or<double>(params, "rope_theta", theta);
  double partial = get_or<double>(j, neox ? "rotary_pct" : "partial_rotary_factor", neox ? 0.25 : 1.0);
  partial = get_or<double>(j, "partial_rotary_factor", partial);
  partial = get_or<double>(params, "partial_rotary_factor", partial);
  std::string type = get_or<std::string>(params, "rope_type", get_or<std::string>(params, "type", "default"));
  c.rope.theta = theta;
  // Checked before the product is converted to int (out of range, that overflows).
  if (!(partial > 0 && partial <= 1))
    fail(source, "partial rotary factor " + std::to_string(partial) + " must be in (0, 1]");
  c.rope.rotary_dim = static_cast<int>(c.head_dim * partial);
  if (c.rope.rotary_dim % 2 != 0 || c.rope.rotary_dim <= 0 || c.rope.rotary_dim > c.head_dim)
    fail(source, "rotary dimension " + std::to_string(c.rope.rotary_dim) + " must be even and within head_dim");
  if (type == "default") {
    c.rope.scaling = "none";
  } else if (type == "linear") {
    c.rope.scaling = "linear";
    c.rope.factor = get_or<double>(params, "factor", 1.0);
  } else if (type == "llama3") {
    c.rope.scaling = "llama3";
    c.rope.factor = get_or<double>(params, "factor", 8.0);
    c.rope.low_freq_factor = get_or<double>(params, "low_freq_factor", 1.0);
    c.rope.high_freq_factor = get_or<double>(params, "high_freq_factor", 4.0);
    c.rope.original_max_position =
        get_int_or(params, "original_max_position_embeddings", 8192, source);
    if (c.rope.high_freq_factor <= c.rope.low_freq_factor)
      fail(source, "llama3 rope scaling needs high_freq_factor > low_freq_factor");
  } else {
    throw Error(ErrorCode::kUnsupported,
                source + ": unsupported rope scaling type '" + type + "' (supported: default, linear, llama3)");
  }
  if (c.rope.factor <= 0) fail(source, "rope scaling factor must be positive");
}

}  // namespace

std::vector<float> RopeConfig::inv_freq() const {
  const int n = rotary_dim / 2;
  std::vector<float> out(n);
  const double kTwoPi = 6.283185307179586;
  for (int i = 0; i < n; ++i) {
    // transformers: 1 / base^(arange(0, dim, 2) / dim), in float32.
    const float expo = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    float f = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(expo)));
    if (scaling == "linear") {
      f = static_cast<float>(f / factor);
    } else if (scaling == "llama3") {
      const double low_wavelen = original_max_position / low_freq_factor;
      const double high_wavelen = original_max_position / high_freq_factor;
      const double wavelen = kTwoPi / f;
      double g = wavelen > low_wavelen ? f / factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const double smooth = (original_max_position / wavelen - low_freq_factor) /
                              (high_freq_factor - low_freq_factor);
        g = (1 - smooth) * g / factor + smooth * g;
      }
      f = static_cast<float>(g);
    }
    out[i] = f;
  }
  return out;
}

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int v, const char* what) {
    if (v <= 0) fail(source, std::string(what) + " must be positive (got " + std::to_string(v) + ")");
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_heads, "num_attention_heads");
  positive(num_kv_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_heads % num_kv_heads != 0)
    fail(source, "num_attention_heads (" + std::to_string(num_heads) +
                     ") must be a multiple of num_key_value_heads (" + std::to_string(num_kv_heads) + ")");
  if (head_dim % 2 != 0) fail(source, "head_dim must be even");
  if (!(norm_eps > 0)) fail(source, "norm epsilon must be positive");
}

ModelConfig parse_hf_config(const json& j, const std::string& source) {
  if (!j.is_object()) fail(source, "not a JSON object");
  if (!j.contains("architectures") || !j["architectures"].is_array() || j["architectures"].empty())
    fail(source, "missing 'architectures'");
  ModelConfig c;
  try {
    c.architecture = j["architectures"][0].get<std::string>();
    c.arch = parse_arch(c.architecture, source);
    const bool neox = c.arch == Arch::kGptNeoX;
    c.vocab_size = require_int(j, "vocab_size", source);
    c.hidden_size = require_int(j, "hidden_size", source);
    c.intermediate_size = require_int(j, "intermediate_size", source);
    c.num_layers = require_int(j, "num_hidden_layers", source);
    c.num_heads = require_int(j, "num_attention_heads", source);
    c.num_kv_heads = get_int_or(j, "num_key_value_heads", c.num_heads, source);
    c.head_dim =
        get_int_or(j, "head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0, source);
    c.max_position_embeddings = get_int_or(j, "max_position_embeddings", 2048, source);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    std::string dtype = get_or<std::string>(j, "dtype", get_or<std::string>(j, "torch_dtype", "float32"));
    c.stored_dtype = parse_dtype(dtype);
    c.act = parse_act(get_or<std::string>(j, "hidden_act", neox ? "gelu" : "silu"), source);
    if (neox) {
      c.norm = NormKind::kLayerNorm;
      c.norm_eps = get_or<float>(j, "layer_norm_eps", 1e-5f);
      c.gated_mlp = false;
      c.parallel_residual = get_or<bool>(j, "use_parallel_residual", true);
      c.qkv_bias = c.o_bias = get_or<bool>(j, "attention_bias", true);
      c.mlp_bias = true;
    } else {
      c.norm = NormKind::kRmsNorm;
      c.norm_eps = get_or<float>(j, "rms_norm_eps", 1e-6f);
      c.qkv_bias = c.arch == Arch::kQwen2 || get_or<bool>(j, "attention_bias", false);
      c.o_bias = c.arch != Arch::kQwen2 && get_or<bool>(j, "attention_bias", false);
      c.mlp_bias = get_or<bool>(j, "mlp_bias", false);
      if (c.arch == Arch::kMistral) c.sliding_window = get_int_or(j, "sliding_window", 0, source);
      if (c.arch == Arch::kQwen2 && get_or<bool>(j, "use_sliding_window", false))
        throw Error(ErrorCode::kUnsupported, source + ": Qwen2 use_sliding_window=true is not supported");
    }
    c.validate(source);
    parse_rope(j, c, source);
    c.quant = parse_quantization_config(j, source);
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) c.bos_token_id = j["bos_token_id"].get<int>();
    if (j.contains("eos_token_id")) c.eos_token_ids = int_or_list(j["eos_token_id"]);
  } catch (const json::exception& e) {
    fail(source, std::string("bad field type: ") + e.what());
  }
  return c;
}

ModelConfig load_hf_config(const std::filesystem::path& config_json) {
  std::ifstream in(config_json);
  if (!in) throw Error(ErrorCode::kNotFound, config_json.string() + ": cannot open");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(config_json.string(), std::string("malformed JSON: ") + e.what());
  }
  return parse_hf_config(j, config_json.string());
}

}  // namespace rill
