#include "engine/cuda/cuda_support.h"

#include <algorithm>

#include "engine/error.h"

namespace rill {
namespace {

// Each limit mirrors a check of the kernel launchers (kernels/src/), which stay the authority at
// run time: a launch that fails on a model accepted here is an internal error. Sizes need no
// alignment: where a row is not a multiple of 8 elements the norms, the embedding and the
// activation take their scalar paths and the GEMMs go to cuBLAS (Gemm::uses_gemv); q | k | v rows
// are multiples of 16 elements with any of the head dims below (prefill attention needs 8).
constexpr int kHeadDims[] = {64, 80, 96, 128};  // attention_prefill.cu, attention_decode.cu
constexpr int kMaxHidden = 16384;               // add_norm.cu: 512 threads x 4 items x 8
constexpr int kMaxVocab = (1 << 24) - 1;        // sampling.cu: counts summed exactly as floats
constexpr int kMaxHeads = 65535;                // prefill attention's grid.y
constexpr int kFp8LaneDims = 16;                // attention_decode.cu: 16 e4m3 per 16-byte load
constexpr int kFp8Chunk = 16;  // gemv_fp8.cu: 16 e4m3 weights per 16-byte load of a row

std::string list(std::span<const int> v) {
  std::string s;
  for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

const char* act_name(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return "silu";
    case Activation::kGeluErf:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

}  // namespace

std::span<const int> cuda_supported_head_dims() {
  return kHeadDims;
}

DType cuda_compute_dtype(const std::string& requested, DType stored) {
  if (requested == "float16" || requested == "fp16" || requested == "half") return DType::kF16;
  if (requested == "bfloat16" || requested == "bf16") return DType::kBF16;
  if (requested != "auto")
    throw Error(ErrorCode::kInvalidArgument,
                "unsupported CUDA dtype '" + requested + "' (auto, float16, bfloat16)");
  return stored == DType::kBF16 ? DType::kBF16 : DType::kF16;
}

std::optional<std::string> cuda_unsupported_reason(const ModelConfig& c, DType compute,
                                                   KvCacheDType kv, WeightQuant quant) {
  using std::to_string;
  if (compute != DType::kF16 && compute != DType::kBF16)
    return std::string("compute dtype ") + dtype_name(compute) + " (supported: float16, bfloat16)";
  if (std::find(std::begin(kHeadDims), std::end(kHeadDims), c.head_dim) == std::end(kHeadDims))
    return "head_dim=" + to_string(c.head_dim) + " (supported: " + list(kHeadDims) + ")";
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    return "num_attention_heads=" + to_string(c.num_heads) +
           ", num_key_value_heads=" + to_string(c.num_kv_heads) + " (supported: whole GQA groups)";
  if (c.num_heads > kMaxHeads)
    return "num_attention_heads=" + to_string(c.num_heads) + " (supported: up to " +
           to_string(kMaxHeads) + ")";
  if (c.rope.rotary_dim < 0 || c.rope.rotary_dim % 2 != 0 || c.rope.rotary_dim > c.head_dim)
    return "rotary_dim=" + to_string(c.rope.rotary_dim) +
           " (supported: even, 0 .. head_dim=" + to_string(c.head_dim) + ")";
  if (c.hidden_size <= 0 || c.hidden_size > kMaxHidden)
    return "hidden_size=" + to_string(c.hidden_size) + " (supported: 1 .. " +
           to_string(kMaxHidden) + ")";
  if (c.vocab_size <= 0 || c.vocab_size > kMaxVocab)
    return "vocab_size=" + to_string(c.vocab_size) + " (supported: 1 .. " + to_string(kMaxVocab) +
           ")";
  if (c.gated_mlp && c.act != Activation::kSilu)
    return std::string("gated MLP with hidden_act=") + act_name(c.act) + " (supported: silu)";
  if (!c.gated_mlp && c.act == Activation::kSilu)
    return "non-gated MLP with hidden_act=silu (supported: gelu, gelu_tanh)";
  if (kv == KvCacheDType::kFp8E4M3 && c.head_dim % kFp8LaneDims != 0)
    return "fp8 KV cache with head_dim=" + to_string(c.head_dim) + " (supported: multiples of " +
           to_string(kFp8LaneDims) + ")";
  if (quant == WeightQuant::kFp8)  // the widths the fp8 GEMV reads a row of (its K)
    for (const auto& [what, k] : {std::pair{"hidden_size", c.hidden_size},
                                  std::pair{"num_attention_heads * head_dim", c.q_dim()},
                                  std::pair{"intermediate_size", c.intermediate_size}})
      if (k % kFp8Chunk != 0)
        return std::string("fp8 weights with ") + what + "=" + to_string(k) +
               " (supported: multiples of " + to_string(kFp8Chunk) + ")";
  return std::nullopt;
}

}  // namespace rill
