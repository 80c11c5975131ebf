// Which models the CUDA runner can run: every shape and type its kernels' dispatch accepts,
// checked before anything is allocated so that an unsupported model fails at load (or falls back
// to the CPU runner with --device auto), never at its first request. Plain C++ without CUDA: CPU
// builds and CPU tests use it too.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "engine/model/dtype.h"
#include "engine/model/model_config.h"
#include "engine/model/quantization.h"

namespace rill {

/// Head dims of the attention kernels' dispatch (prefill and decode; kernels/include/rill/kernels/
/// attention.h): 64 and 128 (Llama, Mistral, Qwen), 80 (Phi-2, Pythia-2.8B), 96 (Phi-3-mini).
std::span<const int> cuda_supported_head_dims();

/// The dtype the CUDA runner computes in: `requested` ("auto", "float16" / "fp16" / "half",
/// "bfloat16" / "bf16"), "auto" meaning bf16 for bf16 checkpoints and fp16 otherwise. Throws
/// kInvalidArgument for another name.
DType cuda_compute_dtype(const std::string& requested, DType stored);

/// Why the CUDA runner cannot run a model of config `c` computing in `compute` (kF16 or kBF16)
/// with a KV cache of `kv` and linear weights `quant`; nullopt when it can. The reason names the
/// model's value and what is supported, e.g. "head_dim=8 (supported: 64, 80, 96, 128)".
std::optional<std::string> cuda_unsupported_reason(const ModelConfig& c, DType compute,
                                                   KvCacheDType kv = KvCacheDType::kAuto,
                                                   WeightQuant quant = WeightQuant::kNone);

}  // namespace rill
