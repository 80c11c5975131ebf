#include "engine/model/model_weights.h"

#include <cstring>

#include "engine/error.h"
#include "engine/model/fp8_weights.h"
#include "engine/model/kv_cache_scales.h"

namespace rill {
namespace {

class Picker {
 public:
  Picker(const std::map<std::string, Tensor>& tensors, const QuantizationConfig& quant,
         const std::string& source)
      : tensors_(tensors), quant_(quant), source_(source) {}

  /// "<module>.weight" of a linear layer: fp8 (scales attached) exactly where the
  /// quantization_config says the checkpoint quantized it.
  Tensor linear(const std::string& module, std::vector<int64_t> shape) const {
    Tensor t = get(module + ".weight", std::move(shape));
    if (t.dtype != DType::kF8E4M3 && quant_.quantizes(module))
      throw Error(ErrorCode::kInvalidArgument,
                  source_ + ": tensor '" + t.name + "' is " + dtype_name(t.dtype) +
                      " but quantization_config quantizes module '" + module +
                      "' (neither ignored nor stored as fp8)");
    return t;
  }

  Tensor get(const std::string& name, std::vector<int64_t> shape, bool required = true) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      if (!required) return Tensor{};
      throw Error(ErrorCode::kInvalidArgument, source_ + ": missing tensor '" + name + "'");
    }
    if (it->second.shape != shape) {
      Tensor want;
      want.shape = shape;
      throw Error(ErrorCode::kInvalidArgument, source_ + ": tensor '" + name + "' has shape " +
                                                   it->second.shape_str() + ", expected " +
                                                   want.shape_str());
    }
    return it->second;
  }

 private:
  const std::map<std::string, Tensor>& tensors_;
  const QuantizationConfig& quant_;
  const std::string& source_;
};

ModelWeights map_llama_family(const ModelConfig& c, const Picker& p) {
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), in = c.intermediate_size;
  ModelWeights w;
  w.embed = p.get("model.embed_tokens.weight", {c.vocab_size, h});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string pre = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = p.get(pre + "input_layernorm.weight", {h});
    l.q = p.linear(pre + "self_attn.q_proj", {q, h});
    l.k = p.linear(pre + "self_attn.k_proj", {kv, h});
    l.v = p.linear(pre + "self_attn.v_proj", {kv, h});
    l.q_bias = p.get(pre + "self_attn.q_proj.bias", {q}, c.qkv_bias);
    l.k_bias = p.get(pre + "self_attn.k_proj.bias", {kv}, c.qkv_bias);
    l.v_bias = p.get(pre + "self_attn.v_proj.bias", {kv}, c.qkv_bias);
    l.o = p.linear(pre + "self_attn.o_proj", {h, q});
    l.o_bias = p.get(pre + "self_attn.o_proj.bias", {h}, c.o_bias);
    l.mlp_norm = p.get(pre + "post_attention_layernorm.weight", {h});
    l.gate = p.linear(pre + "mlp.gate_proj", {in, h});
    l.up = p.linear(pre + "mlp.up_proj", {in, h});
    l.down = p.linear(pre + "mlp.down_proj", {h, in});
    l.up_bias = p.get(pre + "mlp.up_proj.bias", {in}, c.mlp_bias);
    l.down_bias = p.get(pre + "mlp.down_proj.bias", {h}, c.mlp_bias);
    l.gate_bias = p.get(pre + "mlp.gate_proj.bias", {in}, c.mlp_bias);
    w.layers.push_back(std::move(l));
  }
  w.final_norm = p.get("model.norm.weight", {h});
  w.lm_head = c.tie_word_embeddings ? w.embed : p.linear("lm_head", {c.vocab_size, h});
  return w;
}

// GPT-NeoX fuses q/k/v per head: rows [head][q|k|v][head_dim]. Split into separate q, k, v
// tensors (rows [head][head_dim]) so every architecture shares one layout.
void split_neox_qkv(const Tensor& fused, int heads, int head_dim, Tensor* out[3],
                    const std::string& name) {
  const size_t es = dtype_size(fused.dtype);
  const int64_t cols = fused.shape.size() == 2 ? fused.shape[1] : 1;
  const size_t row_bytes = static_cast<size_t>(cols) * es;
  for (int part = 0; part < 3; ++part) {
    auto buf =
        std::make_shared<std::vector<std::byte>>(static_cast<size_t>(heads) * head_dim * row_bytes);
    for (int hd = 0; hd < heads; ++hd) {
      const auto* src = static_cast<const std::byte*>(fused.data) +
                        (static_cast<size_t>(hd) * 3 + part) * head_dim * row_bytes;
      std::memcpy(buf->data() + static_cast<size_t>(hd) * head_dim * row_bytes, src,
                  head_dim * row_bytes);
    }
    Tensor& t = *out[part];
    t.name = name + "[" + "qkv"[part] + "]";
    t.dtype = fused.dtype;
    t.shape = fused.shape;
    t.shape[0] = static_cast<int64_t>(heads) * head_dim;
    t.data = buf->data();
    t.owner = std::shared_ptr<const void>(buf, buf->data());
    if (fused.scales) {  // fp8: the part's rows of the (per-row) scales
      std::vector<int64_t> rows;
      for (int hd = 0; hd < heads; ++hd)
        for (int r = 0; r < head_dim; ++r) rows.push_back((int64_t(hd) * 3 + part) * head_dim + r);
      t.scales = std::make_shared<const Fp8Scales>(fused.scales->gather_rows(rows));
    }
  }
}

ModelWeights map_gpt_neox(const ModelConfig& c, const Picker& p) {
  const int64_t h = c.hidden_size, q = c.q_dim(), in = c.intermediate_size;
  if (c.num_kv_heads != c.num_heads)
    throw Error(ErrorCode::kInvalidArgument, "GPT-NeoX has no grouped-query attention");
  ModelWeights w;
  w.embed = p.get("gpt_neox.embed_in.weight", {c.vocab_size, h});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string pre = "gpt_neox.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = p.get(pre + "input_layernorm.weight", {h});
    l.attn_norm_bias = p.get(pre + "input_layernorm.bias", {h});
    l.mlp_norm = p.get(pre + "post_attention_layernorm.weight", {h});
    l.mlp_norm_bias = p.get(pre + "post_attention_layernorm.bias", {h});
    Tensor qkv = p.linear(pre + "attention.query_key_value", {3 * q, h});
    Tensor* parts[3] = {&l.q, &l.k, &l.v};
    split_neox_qkv(qkv, c.num_heads, c.head_dim, parts, qkv.name);
    if (c.qkv_bias) {
      Tensor qkv_b = p.get(pre + "attention.query_key_value.bias", {3 * q});
      Tensor* bparts[3] = {&l.q_bias, &l.k_bias, &l.v_bias};
      split_neox_qkv(qkv_b, c.num_heads, c.head_dim, bparts, qkv_b.name);
    }
    l.o = p.linear(pre + "attention.dense", {h, q});
    l.o_bias = p.get(pre + "attention.dense.bias", {h}, c.o_bias);
    l.up = p.linear(pre + "mlp.dense_h_to_4h", {in, h});
    l.up_bias = p.get(pre + "mlp.dense_h_to_4h.bias", {in});
    l.down = p.linear(pre + "mlp.dense_4h_to_h", {h, in});
    l.down_bias = p.get(pre + "mlp.dense_4h_to_h.bias", {h});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = p.get("gpt_neox.final_layer_norm.weight", {h});
  w.final_norm_bias = p.get("gpt_neox.final_layer_norm.bias", {h});
  w.lm_head = c.tie_word_embeddings ? w.embed : p.linear("embed_out", {c.vocab_size, h});
  return w;
}

}  // namespace

ModelWeights map_hf_weights(const ModelConfig& config, const std::map<std::string, Tensor>& tensors,
                            const std::string& source) {
  Picker p(tensors, config.quant, source);
  ModelWeights w =
      config.arch == Arch::kGptNeoX ? map_gpt_neox(config, p) : map_llama_family(config, p);
  read_kv_cache_scales(config, tensors, w, source);
  return w;
}

}  // namespace rill
