// Builds small random-weight models in memory for engine tests that need no checkpoint.
#pragma once

#include <cmath>
#include <random>

#include "engine/model/model.h"

namespace rill::testing {

inline ModelConfig tiny_llama_config() {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.arch = Arch::kLlama;
  c.vocab_size = 97;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 4096;
  c.norm_eps = 1e-5f;
  c.rope.theta = 10000.0;
  c.rope.rotary_dim = 16;
  c.tie_word_embeddings = true;
  return c;
}

struct RandomModelOptions {
  uint32_t seed = 7;
  /// Matrices N(0, 1 / fan_in), so activations and attention logits keep their scale at any
  /// width (soft attention, logits of order 1); false: N(0, 0.3^2).
  bool fan_in_scaled = false;
  /// Every weight rounded to a value of this dtype, so that a runner computing in fp16 / bf16
  /// loads exactly the weights a CPU runner computes with.
  DType representable = DType::kF32;
};

/// Random weights (fixed seed) for `c`: Gaussian matrices, norm weights around 1.
inline Model random_model(const ModelConfig& c, const RandomModelOptions& o) {
  std::mt19937 rng(o.seed);
  std::normal_distribution<float> normal(0.0f, 0.3f), unit(0.0f, 1.0f);
  std::uniform_real_distribution<float> around_one(0.7f, 1.3f);
  auto round = [&](float x) {
    if (o.representable == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
    if (o.representable == DType::kF16) return f16_to_f32(f32_to_f16(x));
    return x;
  };
  auto mat = [&](const std::string& name, int64_t r, int64_t k) {
    std::vector<float> v(r * k);
    const float scale = 1.0f / std::sqrt(static_cast<float>(k));
    for (float& x : v) x = round(o.fan_in_scaled ? unit(rng) * scale : normal(rng));
    return make_f32_tensor(name, {r, k}, std::move(v));
  };
  auto vec = [&](const std::string& name, int64_t n, bool ones) {
    std::vector<float> v(n);
    for (float& x : v) x = round(ones ? around_one(rng) : normal(rng));
    return make_f32_tensor(name, {n}, std::move(v));
  };
  Model m;
  m.config = c;
  const int64_t h = c.hidden_size, in = c.intermediate_size;
  m.weights.embed = mat("embed", c.vocab_size, h);
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.attn_norm = vec("attn_norm", h, true);
    l.mlp_norm = vec("mlp_norm", h, true);
    if (c.norm == NormKind::kLayerNorm) {
      l.attn_norm_bias = vec("attn_norm_b", h, false);
      l.mlp_norm_bias = vec("mlp_norm_b", h, false);
    }
    l.q = mat("q", c.q_dim(), h);
    l.k = mat("k", c.kv_dim(), h);
    l.v = mat("v", c.kv_dim(), h);
    if (c.qkv_bias) {
      l.q_bias = vec("qb", c.q_dim(), false);
      l.k_bias = vec("kb", c.kv_dim(), false);
      l.v_bias = vec("vb", c.kv_dim(), false);
    }
    l.o = mat("o", h, c.q_dim());
    if (c.o_bias) l.o_bias = vec("ob", h, false);
    if (c.gated_mlp) l.gate = mat("gate", in, h);
    l.up = mat("up", in, h);
    l.down = mat("down", h, in);
    if (c.mlp_bias) {
      if (c.gated_mlp) l.gate_bias = vec("gb", in, false);
      l.up_bias = vec("ub", in, false);
      l.down_bias = vec("db", h, false);
    }
    m.weights.layers.push_back(std::move(l));
  }
  m.weights.final_norm = vec("final_norm", h, true);
  if (c.norm == NormKind::kLayerNorm) m.weights.final_norm_bias = vec("final_norm_b", h, false);
  m.weights.lm_head = c.tie_word_embeddings ? m.weights.embed : mat("lm_head", c.vocab_size, h);
  return m;
}

inline Model random_model(const ModelConfig& c, uint32_t seed = 7) {
  return random_model(c, RandomModelOptions{.seed = seed});
}

}  // namespace rill::testing
