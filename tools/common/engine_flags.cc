#include "tools/common/engine_flags.h"

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
  if (o.block_size <= 0) a.fail("--block-size must be positive");
  if (!(o.gpu_memory_fraction > 0 && o.gpu_memory_fraction <= 1)) a.fail("--gpu-memory-fraction must be in (0, 1]");
  if (o.kv_cache_dtype != "auto" && o.kv_cache_dtype != "fp8")
    a.fail("--kv-cache-dtype must be auto or fp8, got '" + o.kv_cache_dtype + "'");
  o.quantization = a.get("quantization");
  if (o.quantization != "auto" && o.quantization != "fp8" && o.quantization != "none")
    a.fail("--quantization must be auto, fp8 or none, got '" + o.quantization + "'");
  return o;
}

void add_sampling_flags(Args& a) {
  a.option("temperature", "", "sampling temperature, 0 = greedy (default: generation_config.json)");
  a.option("top-k", "", "keep the k most likely tokens (0: off)");
  a.option("top-p", "", "nucleus sampling mass (1: off)");
  a.option("min-p", "", "drop tokens below min-p x the top probability (0: off)");
  a.option("repetition-penalty", "", "penalty on tokens of the prompt and output (1: off)");
  a.option("presence-penalty", "0", "subtracted once from tokens already generated");
  a.option("frequency-penalty", "0", "subtracted per occurrence from tokens already generated");
  a.option("seed", "0", "random seed: the same seed and inputs give the same tokens");
  a.flag("greedy", "greedy decoding (temperature 0)");
}

SamplingParams sampling_params(const Args& a, const GenerationDefaults& d) {
  SamplingParams p;
  p.temperature = d.do_sample ? d.temperature : 0.0f;
  p.top_k = d.do_sample ? d.top_k : 0;
  p.top_p = d.do_sample ? d.top_p : 1.0f;
  p.min_p = d.do_sample ? d.min_p : 0.0f;
  p.repetition_penalty = d.repetition_penalty;
  if (a.given("temperature")) p.temperature = static_cast<float>(a.get_double("temperature"));
  if (a.given("top-k")) p.top_k = a.get_int("top-k");
  if (a.given("top-p")) p.top_p = static_cast<float>(a.get_double("top-p"));
  if (a.given("min-p")) p.min_p = static_cast<float>(a.get_double("min-p"));
  if (a.given("repetition-penalty")) p.repetition_penalty = static_cast<float>(a.get_double("repetition-penalty"));
  p.presence_penalty = static_cast<float>(a.get_double("presence-penalty"));
  p.frequency_penalty = static_cast<float>(a.get_double("frequency-penalty"));
  p.seed = static_cast<uint64_t>(a.get_int64("seed"));
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
