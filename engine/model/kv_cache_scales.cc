#include "engine/model/kv_cache_scales.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/error.h"

namespace rill {
namespace {

[[noreturn]] void invalid(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, source + ": " + what);
}

// The layer's scale of `kv` ("k" or "v"): the first of the names the quantizers use that the
// checkpoint has, reduced to one value.
float layer_scale(const std::map<std::string, Tensor>& tensors, const std::string& attn, char kv,
                  int64_t kv_heads, const std::string& source) {
  const std::string x(1, kv);
  const std::vector<std::string> names = {
      attn + "." + x + "_scale", attn + "." + x + "_proj." + x + "_scale",
      attn + "." + x + "_proj.output_scale", attn + ".kv_scale"};
  auto it = tensors.end();
  for (const std::string& n : names)
    if ((it = tensors.find(n)) != tensors.end()) break;
  if (it == tensors.end()) {
    std::string tried;
    for (const std::string& n : names) tried += (tried.empty() ? "'" : ", '") + n + "'";
    invalid(source, "quantization_config declares calibrated KV-cache scales but the " + x +
                        " scale of '" + attn + "' is missing (looked for " + tried + ")");
  }
  const Tensor& t = it->second;
  const int64_t n = t.numel();
  if (t.dtype == DType::kF8E4M3 || t.shape.size() > 1 || (n != 1 && n != kv_heads))
    invalid(source, "KV-cache scale tensor '" + t.name + "' is " + dtype_name(t.dtype) + " " +
                        t.shape_str() + ", expected a 16/32-bit float [] or [1] (per tensor) or [" +
                        std::to_string(kv_heads) + "] (per KV head)");
  const std::vector<float> v = t.to_f32();
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || v[i] <= 0)
      invalid(source, "KV-cache scale tensor '" + t.name + "' holds " + std::to_string(v[i]) +
                          " at index " + std::to_string(i) +
                          " (scales must be finite and positive)");
  return *std::max_element(v.begin(), v.end());
}

}  // namespace

void read_kv_cache_scales(const ModelConfig& c, const std::map<std::string, Tensor>& tensors,
                          ModelWeights& w, const std::string& source) {
  const KvScaleScheme s = c.quant.kv_scales;
  if (s != KvScaleScheme::kPerTensor && s != KvScaleScheme::kPerHead) return;
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string attn = (c.arch == Arch::kGptNeoX ? "gpt_neox.layers." : "model.layers.") +
                             std::to_string(i) +
                             (c.arch == Arch::kGptNeoX ? ".attention" : ".self_attn");
    KvScales& k = w.layers[i].kv_scales;
    k.k = layer_scale(tensors, attn, 'k', c.num_kv_heads, source);
    k.v = layer_scale(tensors, attn, 'v', c.num_kv_heads, source);
  }
}

}  // namespace rill
