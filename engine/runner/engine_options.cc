#include "engine/runner/engine_options.h"

#include <cmath>
#include <cstdio>
#include <type_traits>

namespace rill {

namespace {

constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;

// 1099511627776 rather than 1.09951e+12: ranges and values read as they are typed.
std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15)
    return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string choices_text(const std::vector<std::string>& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i)
    out += (i == 0 ? "" : i + 1 == c.size() ? " or " : ", ") + c[i];
  return out;
}

}  // namespace

std::string option_range_text(const OptionRange& r) {
  return std::string(r.min_open ? "(" : "[") + number_text(r.min) + ", " + number_text(r.max) +
         (r.max_open ? ")" : "]");
}

std::vector<EngineOption> engine_option_table(EngineOptions& e) {
  return {
      {"device", "--device", "auto, cpu or cuda", &e.device, std::nullopt, {"auto", "cpu", "cuda"}},
      {"dtype",
       "--dtype",
       "CUDA weights: auto, float16 or bfloat16",
       &e.dtype,
       std::nullopt,
       {"auto", "float16", "bfloat16"}},
      {"kv_cache_dtype",
       "--kv-cache-dtype",
       "auto or fp8",
       &e.kv_cache_dtype,
       std::nullopt,
       {"auto", "fp8"}},
      {"quantization",
       "--quantization",
       "linear weights: auto (what the checkpoint says), fp8 or none",
       &e.quantization,
       std::nullopt,
       {"auto", "fp8", "none"}},
      {"block_size",
       "--block-size",
       "tokens per KV block (a power of two)",
       &e.block_size,
       OptionRange{1, 1024},
       {},
       /*power_of_two=*/true},
      {"cpu_threads", "--cpu-threads", "CPU runner threads (0: all cores)", &e.cpu_threads,
       OptionRange{0, 1024}},
      {"cpu_kv_cache_bytes", "--cpu-kv-cache-bytes", "CPU runner KV pool bytes",
       &e.cpu_kv_cache_bytes, OptionRange{1, kTiB}},
      {"host_kv_cache_bytes", "--host-kv-cache-bytes",
       "host memory for offloaded idle sessions' caches (pinned on the GPU, allocated at start)",
       &e.host_kv_cache_bytes, OptionRange{0, kTiB}},
      {"gpu_memory_fraction", "--gpu-memory-fraction", "share of free GPU memory for weights + KV",
       &e.gpu_memory_fraction, OptionRange{0, 1, /*min_open=*/true}},
      {"max_batch", "--max-batch", "CUDA runner: most sequences in one step", &e.max_batch,
       OptionRange{1, 4096}},
      {"max_step_tokens", "--max-step-tokens", "CUDA runner: most tokens in one step",
       &e.max_step_tokens, OptionRange{1, kMiB}},
      {"tensor_parallel_size", "--tensor-parallel-size",
       "GPUs the model is split over (tensor parallelism; with --device cpu, emulated)",
       &e.tensor_parallel_size, OptionRange{1, 8}},
      {"gpus", "--gpus", "GPUs of the ranks, e.g. 0,1 (default: 0 .. N-1)", &e.gpus},
      {"cuda_graphs", "--cuda-graphs", "replay decode steps as CUDA graphs",
       &e.cuda_tuning.cuda_graphs},
      {"precapture_graphs", "--precapture-graphs",
       "capture every decode CUDA graph (batch bucket x split count) at start-up, timed in the log",
       &e.cuda_tuning.precapture_graphs},
      {"async_offload", "--async-offload",
       "copy idle sessions' caches to host memory beside the steps (their blocks freed when "
       "the copy ends)",
       &e.cuda_tuning.async_offload},
      {"fused_decode", "--fused-decode", "SiLU-and-mul inside the decode gate|up GEMV",
       &e.cuda_tuning.fused_decode},
  };
}

std::string engine_option_problem(const EngineOption& o) {
  if (const auto* s = std::get_if<std::string*>(&o.target)) {
    if (o.choices.empty()) return {};
    for (const std::string& c : o.choices)
      if (**s == c) return {};
    return "must be " + choices_text(o.choices) + " (got '" + **s + "')";
  }
  if (!o.range) return {};
  const double v = std::visit(
      [](auto* p) -> double {
        if constexpr (std::is_arithmetic_v<std::remove_pointer_t<decltype(p)>>)
          return static_cast<double>(*p);
        else
          return 0;  // strings were handled above
      },
      o.target);
  const OptionRange& r = *o.range;
  const bool in = std::isfinite(v) && (r.min_open ? v > r.min : v >= r.min) &&
                  (r.max_open ? v < r.max : v <= r.max);
  if (!in) return "must be in " + option_range_text(r) + " (got " + number_text(v) + ")";
  if (o.power_of_two) {
    const auto n = static_cast<int64_t>(v);
    if ((n & (n - 1)) != 0)
      return "must be a power of two in " + option_range_text(r) + " (got " + number_text(v) + ")";
  }
  return {};
}

}  // namespace rill
