#include "engine/model/quantization.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/error.h"

namespace rill {
namespace {

using nlohmann::json;

constexpr const char* kSupported =
    "supported: compressed-tensors float-quantized fp8 (8-bit float weights with per-tensor, "
    "per-channel or 128x128 block scales; static per-tensor or dynamic per-token activations) "
    "and quant_method fp8 (weight_block_size [128, 128], or per-tensor scales without it)";

[[noreturn]] void unsupported(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kUnsupported,
              source + ": quantization " + what + " is not supported (" + kSupported + ")");
}

[[noreturn]] void invalid(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, source + ": quantization_config: " + what);
}

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// An int field: `fallback` when absent or null, kNotAnInt when it is anything but an integer
// within int's range (a string, a fraction, 1e300: converting such a float to int would be
// undefined), so that every comparison with a supported value fails.
constexpr int kNotAnInt = std::numeric_limits<int>::min();
int int_or(const json& j, const char* key, int fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (it->is_number_unsigned())
    return it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int>::max())
               ? static_cast<int>(it->get<uint64_t>())
               : kNotAnInt;
  if (it->is_number_integer()) {
    const int64_t x = it->get<int64_t>();
    return x > kNotAnInt && x <= std::numeric_limits<int>::max() ? static_cast<int>(x) : kNotAnInt;
  }
  if (it->is_number_float()) {
    const double x = it->get<double>();
    return x == std::trunc(x) && x > kNotAnInt && x <= std::numeric_limits<int>::max()
               ? static_cast<int>(x)
               : kNotAnInt;
  }
  return kNotAnInt;
}

// A bool field: `fallback` when absent or null; any other type is not a bool (json's value()
// would throw a type error instead of a rill::Error).
bool bool_or(const json& j, const char* key, bool fallback, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) invalid(source, std::string("'") + key + "' must be true or false");
  return it->get<bool>();
}

// A field as the config wrote it, for messages ("?" when absent).
std::string raw(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() ? "?" : it->is_string() ? it->get<std::string>() : it->dump();
}

std::vector<std::string> string_list(const json& j, const char* key, const std::string& source) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) invalid(source, std::string("'") + key + "' must be a list of names");
  for (const auto& v : *it) {
    if (!v.is_string()) invalid(source, std::string("'") + key + "' must be a list of names");
    out.push_back(v.get<std::string>());
  }
  return out;
}

// "int4 weights (type=int, num_bits=4, strategy=group)": what a compressed-tensors args object is.
std::string args_summary(const json& a) {
  const std::string type = str_or(a, "type", "?"), bits = raw(a, "num_bits");
  return type + bits + " (type=" + type + ", num_bits=" + bits +
         ", strategy=" + str_or(a, "strategy", "?") + ")";
}

// compressed-tensors `weights`: 8-bit symmetric floats with tensor, channel or 128x128 block
// scales.
void parse_ct_weights(const json& w, QuantizationConfig& q, const std::string& source) {
  if (!w.is_object()) unsupported(source, "compressed-tensors scheme without weight quantization");
  if (str_or(w, "type", "") != "float" || int_or(w, "num_bits", 0) != 8)
    unsupported(source, "compressed-tensors weights " + args_summary(w));
  if (!bool_or(w, "symmetric", true, source))
    unsupported(source, "compressed-tensors asymmetric fp8 weights");
  if (w.contains("dynamic") && w["dynamic"].is_boolean() && w["dynamic"].get<bool>())
    unsupported(source, "compressed-tensors dynamic weight scales");
  const std::string strategy = str_or(w, "strategy", "");
  if (strategy == "tensor") {
    q.weights = WeightScaleKind::kTensor;
  } else if (strategy == "channel") {
    q.weights = WeightScaleKind::kChannel;
  } else if (strategy == "block") {
    const auto it = w.find("block_structure");
    if (it == w.end() || !it->is_array() || it->size() != 2 || (*it)[0] != 128 || (*it)[1] != 128)
      unsupported(source, "compressed-tensors fp8 block_structure " +
                              (it == w.end() ? std::string("(missing)") : it->dump()) +
                              " (only [128, 128])");
    q.weights = WeightScaleKind::kBlock;
    q.block_rows = q.block_cols = 128;
  } else {
    unsupported(source, "compressed-tensors fp8 weights with strategy '" + strategy + "'");
  }
}

// compressed-tensors `input_activations`: absent (weight-only), 8-bit floats static per tensor,
// dynamic per token, or dynamic per 128-group (with block weights).
void parse_ct_inputs(const json& a, QuantizationConfig& q, const std::string& source) {
  q.activations = q.weights == WeightScaleKind::kBlock ? ActivationQuant::kDynamicPerGroup
                                                       : ActivationQuant::kDynamicPerToken;
  if (a.is_null()) return;  // weight-only: prefill GEMMs quantize activations per token anyway
  if (!a.is_object() || str_or(a, "type", "") != "float" || int_or(a, "num_bits", 0) != 8)
    unsupported(source, "compressed-tensors input activations " + args_summary(a));
  const bool dynamic = a.contains("dynamic") && !a["dynamic"].is_null() &&
                       !(a["dynamic"].is_boolean() && !a["dynamic"].get<bool>());
  const std::string strategy = str_or(a, "strategy", "");
  if (!dynamic) {
    if (strategy != "tensor")
      unsupported(source, "compressed-tensors static activations with strategy '" + strategy + "'");
    q.activations = ActivationQuant::kStaticPerTensor;
    return;
  }
  if (strategy == "group" && int_or(a, "group_size", 0) != 128)
    unsupported(source, "compressed-tensors dynamic activation groups of " + raw(a, "group_size") +
                            " (only 128)");
  if (strategy != "token" && strategy != "tensor" && strategy != "group")
    unsupported(source, "compressed-tensors dynamic activations with strategy '" + strategy + "'");
}

// The checkpoint's calibrated KV-cache scales: compressed-tensors' (and vLLM fp8's)
// `kv_cache_scheme` (8-bit float, static, per tensor or per attention head), or AutoFP8's
// `kv_cache_quant_targets` (k_proj / v_proj output scales, per tensor).
void parse_kv_scheme(const json& qc, QuantizationConfig& q) {
  const auto targets = qc.find("kv_cache_quant_targets");
  if (targets != qc.end() && targets->is_array() && !targets->empty())
    q.kv_scales = KvScaleScheme::kPerTensor;
  const auto it = qc.find("kv_cache_scheme");
  if (it == qc.end() || it->is_null()) return;
  q.kv_scales = KvScaleScheme::kPerTensor;
  if (!it->is_object()) return;  // e.g. a bare "fp8"
  const json& s = *it;
  const std::string strategy = str_or(s, "strategy", "tensor");
  const bool dynamic =
      s.contains("dynamic") && s["dynamic"].is_boolean() && s["dynamic"].get<bool>();
  if (str_or(s, "type", "float") != "float" || int_or(s, "num_bits", 8) != 8 || dynamic ||
      (strategy != "tensor" && strategy != "attn_head")) {
    q.kv_scales = KvScaleScheme::kUnsupported;
    q.kv_scheme_summary = (dynamic ? "dynamic " : "") + args_summary(s);
  } else if (strategy == "attn_head") {
    q.kv_scales = KvScaleScheme::kPerHead;
  }
}

void parse_compressed_tensors(const json& qc, QuantizationConfig& q, const std::string& source) {
  q.method = QuantMethod::kCompressedTensors;
  if (qc.contains("sparsity_config") && qc["sparsity_config"].is_object() &&
      str_or(qc["sparsity_config"], "format", "dense") != "dense")
    unsupported(source, "compressed-tensors sparsity format '" +
                            str_or(qc["sparsity_config"], "format", "?") + "'");
  const auto groups = qc.find("config_groups");
  if (groups == qc.end() || !groups->is_object() || groups->empty())
    invalid(source, "compressed-tensors needs a non-empty 'config_groups' object");
  if (groups->size() != 1)
    unsupported(source, "compressed-tensors with " + std::to_string(groups->size()) +
                            " config groups (mixed schemes; one group is supported)");
  const json& g = groups->begin().value();
  if (!g.is_object())
    invalid(source, "config group '" + groups->begin().key() + "' is not an object");
  const std::string format = str_or(g, "format", str_or(qc, "format", ""));
  if (format != "float-quantized")
    unsupported(source, "compressed-tensors format '" + format + "'");
  parse_ct_weights(g.contains("weights") ? g["weights"] : json(), q, source);
  parse_ct_inputs(g.contains("input_activations") ? g["input_activations"] : json(), q, source);
  if (g.contains("output_activations") && !g["output_activations"].is_null())
    unsupported(source, "compressed-tensors output activation quantization");
  q.targets = string_list(g, "targets", source);
  if (q.targets.empty())
    invalid(source, "config group '" + groups->begin().key() + "' has no targets");
  q.ignore = string_list(qc, "ignore", source);
  parse_kv_scheme(qc, q);
}

// quant_method "fp8": transformers' FineGrainedFP8Config (weight_block_size [128, 128],
// weight_scale_inv, dynamic activations), or, without weight_block_size, the per-tensor format of
// AutoFP8 / vLLM's fp8 checkpoints (weight_scale, static input_scale or dynamic activations,
// ignored_layers).
void parse_fp8(const json& qc, QuantizationConfig& q, const std::string& source) {
  q.method = QuantMethod::kFp8;
  const std::string fmt = str_or(qc, "fmt", "e4m3");
  if (fmt != "e4m3") unsupported(source, "fp8 with fmt '" + fmt + "'");
  const std::string act = str_or(qc, "activation_scheme", "dynamic");
  const auto it = qc.find("weight_block_size");
  if (it == qc.end() || it->is_null()) {
    if (act != "dynamic" && act != "static")
      unsupported(source, "fp8 with activation_scheme '" + act + "'");
    q.weights = WeightScaleKind::kTensor;
    q.activations =
        act == "static" ? ActivationQuant::kStaticPerTensor : ActivationQuant::kDynamicPerToken;
    q.ignore = string_list(qc, "ignored_layers", source);
  } else {
    if (!it->is_array() || it->size() != 2 || (*it)[0] != 128 || (*it)[1] != 128)
      unsupported(source, "fp8 with weight_block_size " + it->dump() + " (only [128, 128])");
    if (act != "dynamic")
      unsupported(source, "fp8 block scales with activation_scheme '" + act + "'");
    q.weights = WeightScaleKind::kBlock;
    q.block_rows = q.block_cols = 128;
    q.activations = ActivationQuant::kDynamicPerGroup;
    q.ignore = string_list(qc, "modules_to_not_convert", source);
  }
  q.targets = {"Linear"};
  parse_kv_scheme(qc, q);
  // The output embedding is never converted (transformers' get_keys_to_not_convert, AutoFP8).
  q.ignore.insert(q.ignore.end(), {"lm_head", "embed_out"});
}

bool matches(const std::string& pattern, const std::string& module) {
  if (pattern.rfind("re:", 0) == 0) {
    try {
      return std::regex_match(module, std::regex(pattern.substr(3)));
    } catch (const std::regex_error&) {
      return false;  // checked when parsed (parse_quantization_config)
    }
  }
  return pattern == module;
}

void check_patterns(const std::vector<std::string>& patterns, const std::string& source) {
  for (const std::string& p : patterns) {
    if (p.rfind("re:", 0) != 0) continue;
    try {
      std::regex r(p.substr(3));
    } catch (const std::regex_error& e) {
      invalid(source, "bad regular expression '" + p + "': " + e.what());
    }
  }
}

}  // namespace

const char* QuantizationConfig::scale_suffix() const {
  return method == QuantMethod::kFp8 && weights == WeightScaleKind::kBlock ? "weight_scale_inv"
                                                                           : "weight_scale";
}

bool QuantizationConfig::quantizes(const std::string& module) const {
  if (!quantized()) return false;
  for (const std::string& p : ignore)
    if (matches(p, module)) return false;
  // Every module asked about is a linear layer, so the class name "Linear" takes them all.
  for (const std::string& t : targets)
    if (t == "Linear" || matches(t, module)) return true;
  return false;
}

std::string QuantizationConfig::describe() const {
  if (!quantized()) return "none";
  std::string s = std::string("fp8 (") +
                  (method == QuantMethod::kFp8 ? "quant_method fp8" : "compressed-tensors") + ", ";
  switch (weights) {
    case WeightScaleKind::kTensor:
      s += "per-tensor";
      break;
    case WeightScaleKind::kChannel:
      s += "per-channel";
      break;
    case WeightScaleKind::kBlock:
      s += "128x128 block";
      break;
  }
  s += " weight scales, ";
  switch (activations) {
    case ActivationQuant::kDynamicPerToken:
      s += "dynamic per-token";
      break;
    case ActivationQuant::kDynamicPerGroup:
      s += "dynamic per-token-group";
      break;
    case ActivationQuant::kStaticPerTensor:
      s += "static per-tensor";
      break;
  }
  s += " activations";
  switch (kv_scales) {
    case KvScaleScheme::kNone:
      break;
    case KvScaleScheme::kPerTensor:
      s += "; calibrated per-tensor KV-cache scales for --kv-cache-dtype fp8";
      break;
    case KvScaleScheme::kPerHead:
      s += "; calibrated per-head KV-cache scales for --kv-cache-dtype fp8 (each layer's largest)";
      break;
    case KvScaleScheme::kUnsupported:
      s += "; KV-cache scheme " + kv_scheme_summary + " is not supported: its scales are not read";
      break;
  }
  return s + ")";
}

QuantizationConfig parse_quantization_config(const json& config, const std::string& source) {
  QuantizationConfig q;
  const auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return q;
  if (!it->is_object()) invalid(source, "not a JSON object");
  const json& qc = *it;
  const std::string method = str_or(qc, "quant_method", "");
  if (method == "compressed-tensors") {
    parse_compressed_tensors(qc, q, source);
  } else if (method == "fp8") {
    parse_fp8(qc, q, source);
  } else {
    unsupported(
        source,
        "method '" + (method.empty() ? std::string("(missing quant_method)") : method) + "'");
  }
  check_patterns(q.ignore, source);
  check_patterns(q.targets, source);
  return q;
}

WeightQuant resolve_quantization(const std::string& requested,
                                 const QuantizationConfig& checkpoint) {
  if (requested == "auto") return checkpoint.quantized() ? WeightQuant::kFp8 : WeightQuant::kNone;
  if (requested == "fp8") return WeightQuant::kFp8;
  if (requested == "none") return WeightQuant::kNone;
  throw Error(ErrorCode::kInvalidArgument,
              "unsupported quantization '" + requested + "' (auto, fp8, none)");
}

std::string describe_quantization(WeightQuant mode, const QuantizationConfig& checkpoint) {
  if (mode == WeightQuant::kNone) return "none";
  if (checkpoint.quantized()) return checkpoint.describe();
  return "fp8 (per-channel weight scales computed at load, dynamic per-token activations)";
}

}  // namespace rill
