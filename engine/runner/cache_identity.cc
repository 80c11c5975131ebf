#include "engine/runner/cache_identity.h"

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
  return id;
}

}  // namespace rill
