// How a program asks for its model runner: device, dtypes, memory and the CUDA runner's tuning.
// The runners read it; make_runner (engine/runner_factory.h) chooses between them.
//
// engine_option_table() describes every field once: its JSON key (the server's
// "engine.<key>"), its command-line spelling, help, and allowed values. The server's CLI11 flags
// and configuration file (server/server_config.cc) and the tools' flags
// (tools/common/engine_flags.cc) are both built from it, so an option is spelled and checked the
// same way by every program. A boolean `--x` also has `--no-x`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "engine/cuda/cuda_tuning.h"

namespace rill {

struct EngineOptions {
  std::string device = "auto";       // auto | cpu | cuda
  int block_size = 16;               // tokens per KV block
  int cpu_threads = 0;               // CPU runner: 0 = all cores
  int64_t cpu_kv_cache_bytes = 256ll << 20;
  int64_t host_kv_cache_bytes = 1ll << 30;  // host memory for offloaded session caches (pinned
                                            // on the CUDA runner, allocated at start); 0: none
  double gpu_memory_fraction = 0.90; // CUDA runner: share of free memory for weights + KV pool
  std::string dtype = "auto";        // CUDA runner: auto | float16 | bfloat16
  int max_batch = 256;               // CUDA runner: most sequences in one step
  int max_step_tokens = 8192;        // CUDA runner: most tokens in one step (prefill chunks)
  std::string kv_cache_dtype = "auto";  // auto (the model's dtype) | fp8 (e4m3 with the
                                        // checkpoint's calibrated scales, else 1; the CPU runner
                                        // rounds K/V through it to emulate the CUDA one)
  std::string quantization = "auto";  // decoder linear weights: auto (what the checkpoint says) |
                                      // fp8 (e4m3; per-channel scales at load where the
                                      // checkpoint has none) | none (the model dtype)
  CudaTuning cuda_tuning;            // CUDA runner: graphs, GEMV shapes, fusions (cuda_tuning.h)
  /// Tensor parallelism (docs/tensor_parallel.md): the model split over this many GPUs of the
  /// host, one rank each; 1: one runner. With --device cpu, ranks emulated on CPU threads.
  int tensor_parallel_size = 1;
  /// The GPUs of the ranks, "0,1" (each visible, once, as many as tensor_parallel_size); empty:
  /// devices 0 .. N-1. Given with a size of 1, the one GPU the runner uses.
  std::string gpus;
};

/// The values a numeric option may take: [min, max], either end open where marked.
struct OptionRange {
  double min, max;
  bool min_open = false, max_open = false;
};

/// "[1, 1024]", "(0, 1]".
std::string option_range_text(const OptionRange& r);

struct EngineOption {
  const char* key;   // JSON: "block_size" (the server's "engine.block_size")
  const char* flag;  // every program's flag: "--block-size"
  const char* help;
  std::variant<int*, int64_t*, double*, bool*, std::string*> target;
  std::optional<OptionRange> range = std::nullopt;  // numbers
  std::vector<std::string> choices = {};            // strings: the values allowed
  bool power_of_two = false;                        // integers: and a power of two
};

/// Every field of `o`, pointing into it.
std::vector<EngineOption> engine_option_table(EngineOptions& o);

/// Why the option's current value is not allowed ("must be in [1, 1024] (got 0)", "must be
/// auto, cpu or cuda (got 'gpu')"); empty when it is.
std::string engine_option_problem(const EngineOption& option);

}  // namespace rill
