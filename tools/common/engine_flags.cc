#include "tools/common/engine_flags.h"

#include <charconv>

#include "engine/error.h"
#include "engine/runner/sampling_fields.h"

namespace rill::cli {

std::string default_model_dir() { return RILL_DEFAULT_MODEL_DIR; }

void add_engine_flags(Args& a) {
  a.option("model", default_model_dir(), "Hugging Face model directory or llama2.c .bin");
  a.option("device", "auto", "auto | cpu | cuda");
  a.option("threads", "0", "CPU threads (0: all cores)");
  a.option("block-size", "16", "tokens per KV-cache block");
  a.option("dtype", "auto", "CUDA weight dtype: auto | float16 | bfloat16");
  a.option("gpu-memory-fraction", "0.9", "share of free GPU memory for weights and KV cache");
  a.option("kv-cache-dtype", "auto",
           "KV-cache element type: auto (the model's dtype) | fp8 (e4m3, half the bytes)");
  a.option("quantization", "auto",
           "linear weights: auto (what the checkpoint says) | fp8 (e4m3; per-channel scales at "
           "load where the checkpoint has none) | none (the model dtype)");
  a.option("tensor-parallel-size", "1",
           "GPUs the model is split over (tensor parallelism; with --device cpu, emulated)");
  a.option("gpus", "", "GPUs of the tensor-parallel ranks, e.g. 0,1 (default: 0 .. N-1)");
  a.flag("no-cuda-graphs", "launch decode steps eagerly instead of replaying CUDA graphs");
  a.flag("no-fused-decode",
         "run SiLU-and-mul of small-batch decode as its own kernel instead of in the gate|up GEMV");
}

EngineOptions engine_options(const Args& a) {
  EngineOptions o;
  o.device = a.get("device");
  o.cpu_threads = a.get_int("threads");
  o.block_size = a.get_int("block-size");
  o.dtype = a.get("dtype");
  o.gpu_memory_fraction = a.get_double("gpu-memory-fraction");
  o.cuda_tuning.cuda_graphs = !a.on("no-cuda-graphs");
  o.cuda_tuning.fused_decode = !a.on("no-fused-decode");
  o.kv_cache_dtype = a.get("kv-cache-dtype");
  o.tensor_parallel_size = a.get_int("tensor-parallel-size");
  o.gpus = a.get("gpus");
  if (o.tensor_parallel_size < 1 || o.tensor_parallel_size > 8)
    a.fail("--tensor-parallel-size must be in [1, 8]");
  if (o.block_size <= 0) a.fail("--block-size must be positive");
  if (!(o.gpu_memory_fraction > 0 && o.gpu_memory_fraction <= 1)) a.fail("--gpu-memory-fraction must be in (0, 1]");
  if (o.kv_cache_dtype != "auto" && o.kv_cache_dtype != "fp8")
    a.fail("--kv-cache-dtype must be auto or fp8, got '" + o.kv_cache_dtype + "'");
  o.quantization = a.get("quantization");
  if (o.quantization != "auto" && o.quantization != "fp8" && o.quantization != "none")
    a.fail("--quantization must be auto, fp8 or none, got '" + o.quantization + "'");
  return o;
}

namespace {

// --top-p for top_p.
std::string flag_name(const SamplingField& f) {
  std::string name = f.name;
  for (char& c : name)
    if (c == '_') c = '-';
  return name;
}

// A flag's text as the number a client would send: integers exactly (a uint64 seed too).
SamplingNumber flag_number(const Args& a, const std::string& flag, const SamplingField& f) {
  if (sampling_field_type(f) == SamplingFieldType::kFloat) return a.get_double(flag);
  const std::string v = a.get(flag);
  const char* end = v.data() + v.size();
  int64_t i = 0;
  if (auto r = std::from_chars(v.data(), end, i); r.ec == std::errc() && r.ptr == end) return i;
  uint64_t u = 0;
  if (auto r = std::from_chars(v.data(), end, u); r.ec == std::errc() && r.ptr == end) return u;
  a.fail("--" + flag + " expects an integer, got '" + v + "'");
}

}  // namespace

void add_sampling_flags(Args& a) {
  for (const SamplingField& f : sampling_fields()) {
    const std::string fallback = format_sampling_number(default_sampling_value(f));
    const std::string source = f.in_generation_config
                                   ? "default: generation_config.json, else " + fallback
                                   : "default " + fallback;
    a.option(flag_name(f), "",
             std::string(f.doc) + "; " + sampling_range_text(f) + " (" + source + ")");
  }
  a.flag("greedy", "greedy decoding (temperature 0)");
}

SamplingParams sampling_params(const Args& a, const GenerationDefaults& d) {
  SamplingParams p = resolve_sampling_defaults({}, d.sampling);
  for (const SamplingField& f : sampling_fields()) {
    const std::string flag = flag_name(f);
    if (!a.given(flag)) continue;
    try {
      set_sampling_field(p, f, flag_number(a, flag, f));
    } catch (const FieldError& e) {
      a.fail("--" + flag + ": " + e.what());
    }
  }
  if (a.on("greedy")) p.temperature = 0.0f;
  return p;
}

void add_cache_flags(Args& a) {
  a.option("cache", "full", "KV-cache policy: full | streaming");
  a.option("sink", "4", "streaming: attention-sink tokens kept");
  a.option("window", "252", "streaming: most recent tokens kept");
}

CachePolicy cache_policy(const Args& a) {
  const std::string c = a.get("cache");
  if (c == "full") return CachePolicy::full();
  if (c == "streaming") return CachePolicy::streaming(a.get_int("sink"), a.get_int("window"));
  a.fail("--cache must be full or streaming, got '" + c + "'");
}

}  // namespace rill::cli
