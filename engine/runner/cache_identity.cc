#include "engine/runner/cache_identity.h"

#include <cstdio>
#include <cstring>

namespace rill {

std::string kv_cache_identity(const Model& model, std::string_view runner,
                              std::string_view compute_dtype, std::string_view kv_dtype) {
  const ModelConfig& c = model.config;
  const auto n = [](auto v) { return std::to_string(v); };
  std::string id =
      "runner=" + std::string(runner) + ";model=" + model.path.string() + ";arch=" + c.architecture;
  id += ";shape=" + n(c.vocab_size) + "," + n(c.hidden_size) + "," + n(c.intermediate_size) + "," +
        n(c.num_layers) + "," + n(c.num_heads) + "," + n(c.num_kv_heads) + "," + n(c.head_dim) +
        "," + n(c.sliding_window);
  id += ";rope=" + n(c.rope.theta) + "," + n(c.rope.rotary_dim) + "," + c.rope.scaling + "," +
        n(c.rope.factor);
  id += ";stored=" + std::string(dtype_name(c.stored_dtype)) +
        ";compute=" + std::string(compute_dtype) + ";kv=" + std::string(kv_dtype);
  if (kv_dtype.starts_with("fp8")) {       // what the stored bytes are multiplied by
    uint64_t h = 14695981039346656037ull;  // FNV-1a over the layers' (k, v) scale bits
    for (const LayerWeights& l : model.weights.layers)
      for (float s : {l.kv_scales.k, l.kv_scales.v}) {
        uint32_t bits;
        std::memcpy(&bits, &s, sizeof(bits));
        for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 1099511628211ull;
      }
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    id += ";kv_scales=" + std::string(hex);
  }
  return id;
}

}  // namespace rill
