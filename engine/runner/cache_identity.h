// What, besides the tokens, decides the contents of a runner's KV blocks: the root of every
// prefix-cache hash chain (engine/kv/block_hash.h). One pool belongs to one runner and one model,
// so this guards against a cache shared wider than that, and records what a block was made with.
#pragma once

#include <string>
#include <string_view>

#include "engine/model/model.h"

namespace rill {

/// "runner=<runner>;model=<path>;arch=...;shape=...;stored=<dtype>;compute=<dtype>;kv=<dtype>":
/// the model (path, architecture, sizes, RoPE), the dtype its weights are stored in and computed
/// in (quantization), and the KV cache's element type; for an fp8 cache (kv_dtype "fp8...") also
/// ";kv_scales=<hash>" of the layers' KV-cache scales.
std::string kv_cache_identity(const Model& model, std::string_view runner,
                              std::string_view compute_dtype, std::string_view kv_dtype);

}  // namespace rill
