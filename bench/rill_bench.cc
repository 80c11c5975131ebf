// rill-bench: end-to-end decode and prefill timings of the CUDA engine for any model directory,
// each printed beside the ceiling measured in the same run (device copy bandwidth for decode,
// cuBLAS GEMM rate for prefill), plus a per-category breakdown of one decode step.
//   rill-bench --model DIR --batch 1,64 --context 512,1024 [--cache streaming --sink 4 --window 252]
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "bench/kernel_trace.h"
#include "engine/cuda/cuda_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "rill/kernels/gemv.h"
#include "rill/kernels/gemv_fp8.h"
#include "tools/common/engine_flags.h"

using namespace rill;

namespace {

using bench::int_list;
using bench::int_pairs;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

using Clock = std::chrono::steady_clock;

struct DecodeResult {
  double step_ms = 0;
  double gpu_ms = 0;  // the part of a step the GPU spends (upload, graph, download), median
  int cached = 0;  // tokens each sequence attends to during the timed steps
  std::vector<bench::KernelRecord> kernels;  // the timed steps' kernels, when traced
};

// How time_decode runs its timed steps:
//   kSteps      step() after step(): a step's wall time, host work and synchronisation included;
//   kPipelined  each step launched (kLastSampled tokens) before the one before it is finished,
//               as a serving loop runs them: the interval between two finish() returns, i.e. the
//               time per output token a streaming caller sees;
//   kProfile    kSteps, eager, with per-category CUDA events (r.profile());
//   kTrace      kSteps with CUPTI recording the kernels (DecodeResult::kernels).
enum class DecodeTiming { kSteps, kPipelined, kProfile, kTrace };

constexpr int kWarmupSteps = 3;  // untimed (graph capture)

// One decode input per sequence 0 .. tokens.size() - 1, the token of each from `tokens`.
std::vector<StepInput> decode_inputs(const std::vector<int32_t>& tokens) {
  std::vector<StepInput> in;
  for (size_t b = 0; b < tokens.size(); ++b)
    in.push_back({SeqId(b), std::span<const int32_t>(&tokens[b], 1), LogitsMode::kNone, true});
  return in;
}

// Wall and GPU ms of `steps` synchronous decode steps after the warm-up, from tokens `next`.
void run_steps(CudaRunner& r, std::vector<int32_t> next, int steps, bool trace, DecodeResult& res,
               std::vector<double>& ms, std::vector<double>& gpu) {
  std::unique_ptr<bench::KernelTrace> tracer;
  for (int s = 0; s < steps + kWarmupSteps; ++s) {
    if (trace && s == kWarmupSteps) tracer = std::make_unique<bench::KernelTrace>();
    const auto t0 = Clock::now();
    const StepOutput o = r.step(decode_inputs(next));
    const double dt = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (s >= kWarmupSteps) {
      ms.push_back(dt);
      gpu.push_back(r.last_step_gpu_ms());
    }
    next = o.sampled;
  }
  if (tracer) res.kernels = tracer->stop();
}

// The same with two steps in flight: the interval between finish() returns.
void run_pipelined(CudaRunner& r, const std::vector<int32_t>& first, int steps,
                   std::vector<double>& ms, std::vector<double>& gpu) {
  r.launch(decode_inputs(first));
  const std::vector<int32_t> last(first.size(), kLastSampled);
  const std::vector<StepInput> pending = decode_inputs(last);  // spans into `last`
  auto t0 = Clock::now();
  for (int s = 0; s < steps + kWarmupSteps; ++s) {
    r.launch(pending);
    r.finish();
    const auto t1 = Clock::now();
    if (s >= kWarmupSteps) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      gpu.push_back(r.last_step_gpu_ms());
    }
    t0 = t1;
  }
  r.finish();
}

// `batch` sequences with `context` tokens of cache each; times `steps` decode steps (median).
DecodeResult time_decode(CudaRunner& r, int batch, int context, const CachePolicy& policy,
                         int steps, std::mt19937& rng, int max_step_tokens,
                         DecodeTiming timing = DecodeTiming::kSteps) {
  const int V = r.config().vocab_size;
  std::uniform_int_distribution<int> tok(0, V - 1);
  // Attend to ~`context` tokens mid-run; a full cache must also fit the warm-up and timed steps.
  int prompt = std::max(1, context - steps / 2);
  if (!policy.is_streaming())
    prompt = std::min(prompt, r.kv().max_context() - steps - 2 * kWarmupSteps);
  std::vector<std::vector<int32_t>> prompts(batch, std::vector<int32_t>(prompt));
  for (auto& p : prompts)
    for (auto& t : p) t = tok(rng);
  for (int b = 0; b < batch; ++b) r.add_sequence({b, policy, {.temperature = 0.0f}});
  const int chunk = std::min(2048, max_step_tokens);
  for (int pos = 0; pos < prompt; pos += chunk) {  // prefill in chunks, several sequences per step
    const int n = std::min(chunk, prompt - pos);
    const int per_step = std::max(1, max_step_tokens / n);
    for (int b0 = 0; b0 < batch; b0 += per_step) {
      std::vector<StepInput> in;
      for (int b = b0; b < std::min(batch, b0 + per_step); ++b)
        in.push_back({b, std::span<const int32_t>(prompts[b].data() + pos, n), LogitsMode::kNone, false});
      r.step(in);
    }
  }
  std::vector<int32_t> next(batch);
  for (auto& t : next) t = tok(rng);
  std::vector<double> ms, gpu;
  DecodeResult res;
  if (timing == DecodeTiming::kProfile) r.set_profiling(true);
  r.set_step_timing(true);
  if (timing == DecodeTiming::kPipelined) {
    run_pipelined(r, next, steps, ms, gpu);
  } else {
    run_steps(r, next, steps, timing == DecodeTiming::kTrace, res, ms, gpu);
  }
  res.step_ms = median(ms);
  res.gpu_ms = median(gpu);
  r.set_step_timing(false);
  if (timing == DecodeTiming::kProfile) r.profile_snapshot_and_stop();
  const KvGeometry g = r.kv().geometry_for(policy);
  const int64_t len = r.kv().sequence(0).num_tokens - steps / 2;
  res.cached = static_cast<int>(policy.is_streaming() ? std::min<int64_t>(len, g.n_sink + g.window) : len);
  for (int b = 0; b < batch; ++b) r.remove_sequence(b);
  return res;
}

// K and V of every layer; elem_bytes 2 (fp16 / bf16) or 1 (fp8 cache).
double kv_bytes_per_token(const ModelConfig& c, int elem_bytes) {
  return 2.0 * c.num_layers * c.kv_dim() * elem_bytes;
}

size_t gpu_used_bytes() {
  size_t free_b = 0, total_b = 0;
  BENCH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

// One sequence generating `n` tokens (sampled, seed 1) through the runner, one step per token:
// time per token just after the cache window filled versus over the last 5%, and GPU memory.
int long_stream(CudaRunner& r, const CachePolicy& policy, int64_t n) {
  const int V = r.config().vocab_size;
  r.add_sequence({1, policy, {.temperature = 0.8f, .top_p = 0.95f, .seed = 1}});
  int32_t tok = 0;
  std::vector<float> ms(n);
  const size_t mem0 = gpu_used_bytes();
  size_t mem_max = mem0;
  const auto t_start = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    StepInput in{1, std::span<const int32_t>(&tok, 1), LogitsMode::kNone, true};
    const auto t0 = Clock::now();
    tok = r.step(std::span<const StepInput>(&in, 1)).sampled[0];
    ms[i] = std::chrono::duration<float, std::milli>(Clock::now() - t0).count();
    if (tok < 0 || tok >= V) throw Error(ErrorCode::kInternal, "sampled token out of range");
    if (i % (n / 20 + 1) == 0) {
      mem_max = std::max(mem_max, gpu_used_bytes());
      std::printf("  token %10lld  blocks %5d  GPU used %.1f MiB  step %.3f ms\n", static_cast<long long>(i),
                  r.kv().stats().blocks_used, gpu_used_bytes() / 1048576.0, ms[i]);
    }
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  const int64_t cap = policy.is_streaming() ? policy.n_sink + policy.window : r.kv().max_context();
  const int64_t span = std::max<int64_t>(1000, n / 20);
  auto med = [&](int64_t a, int64_t b) {
    a = std::clamp<int64_t>(a, 0, n);
    b = std::clamp<int64_t>(b, a, n);
    return median(std::vector<double>(ms.begin() + a, ms.begin() + b));
  };
  const double early = med(cap, cap + span), late = med(n - n / 20, n);
  std::printf("long stream (%s): %lld tokens in %.1f s\n", policy.to_string().c_str(), static_cast<long long>(n), total_s);
  std::printf("  time per token just after the window filled (tokens %lld..%lld): %.4f ms\n",
              static_cast<long long>(cap), static_cast<long long>(cap + span), early);
  std::printf("  time per token over the last 5%%: %.4f ms (%+.2f%%)\n", late, 100 * (late - early) / early);
  std::printf("  GPU memory used: %.1f MiB at start, %.1f MiB at most, %.1f MiB at the end; KV blocks %d\n",
              mem0 / 1048576.0, mem_max / 1048576.0, gpu_used_bytes() / 1048576.0, r.kv().stats().blocks_used);
  r.remove_sequence(1);
  return 0;
}

}  // namespace

// What the tables of one run share.
struct Bench {
  CudaRunner& r;
  const cli::Args& args;
  const EngineOptions& eo;
  const ModelConfig& c;
  const bench::Ceilings& ceil;
  double wbytes, kv_token_bytes;
  CachePolicy policy;
  int steps;
  std::mt19937 rng{1};
};

// Decode step times per batch and context, the default configuration and then each optimisation
// switched off on its own.
// One decode configuration: the default, or one optimisation switched off or forced.
struct Variant {
  std::string off;  // "" for the default, else what differs from it
  bool graphs = true, gemv = true, pdl = true, fused = true;
  int splits = 0;        // decode attention's split count (0: automatic)
  int split_cap = 0;     // the automatic policy's CTAs an SM (0: the run's)
  int gemv_config = -1;  // the GEMV's CTA shape (-1: the default rule)
  int gemv_deep = -1;    // mask of GEMVs with a deep prologue (-1: the run's)
  int fp8_deep = -1;     // the same for fp8 GEMVs (-1: the run's)
  bool early_kv = true, cluster = true;
  int rope_in_attention = -1;  // -1: the runner's rule, 0 / 1: forced off / on
  int decode_mma = -1;         // CudaTuning::decode_mma (-1: the runner's rule)
  bool fp8_norm_in_gemv = true;  // false: CudaTuning::fp8_norm_in_gemv off
  bool fp8_pair = true;          // false: CudaTuning::fp8_pair_down_qkv off
  // CTA shapes of single GEMVs (CudaTuning::projection_gemv_config): projection -> shape.
  std::vector<std::pair<int, int>> projection_configs;
  std::vector<std::pair<int, int>> fp8_projection_configs;  // the same for fp8 GEMVs
};

// The default, then each configuration the flags ask for at this batch size.
std::vector<Variant> decode_variants(const cli::Args& args, int batch) {
  std::vector<Variant> variants{{""}};
  for (int cap : int_list(args.get("split-cap-sweep"))) {
    Variant v{"attention split policy at " + std::to_string(cap) + " CTAs an SM"};
    v.split_cap = cap;
    variants.push_back(v);
  }
  for (int splits : int_list(args.get("splits-sweep"))) {
    Variant v{"attention in " + std::to_string(splits) + " splits"};
    v.splits = splits;
    variants.push_back(v);
  }
  if (batch <= 8) {
    for (int config : int_list(args.get("gemv-configs"))) {
      Variant v{"GEMV shape " + kernels::gemv_config_name(config)};
      v.gemv_config = config;
      variants.push_back(v);
    }
    for (const bool fp8 : {false, true}) {
      std::stringstream list(args.get(fp8 ? "fp8-projection-gemv-configs" : "projection-gemv-configs"));
      for (std::string item; std::getline(list, item, ',');) {
        if (item.empty()) continue;
        std::replace(item.begin(), item.end(), '+', ',');
        Variant v{fp8 ? "fp8 GEMV shapes" : "GEMV shapes"};
        auto& pairs = fp8 ? v.fp8_projection_configs : v.projection_configs;
        pairs = int_pairs(item);
        for (const auto& [projection, config] : pairs)
          v.off += " " + std::to_string(projection) + ":" +
                   (fp8 ? kernels::gemv_fp8_config_name(config) : kernels::gemv_config_name(config));
        variants.push_back(v);
      }
    }
    for (int mask : int_list(args.get("gemv-deep-masks"))) {
      Variant v{"GEMV deep-prologue mask " + std::to_string(mask)};
      v.gemv_deep = mask;
      variants.push_back(v);
    }
    for (int mask : int_list(args.get("fp8-gemv-deep-masks"))) {
      Variant v{"fp8 GEMV deep-prologue mask " + std::to_string(mask)};
      v.fp8_deep = mask;
      variants.push_back(v);
    }
  }
  if (args.on("graphs-off-too")) variants.push_back({"off: graphs", false});
  if (args.on("gemv-off-too") && batch <= 8) variants.push_back({"off: GEMV", true, false});
  if (args.on("pdl-off-too")) variants.push_back({"off: PDL", true, true, false});
  if (args.on("early-kv-off-too")) {
    Variant v{"off: early K/V loads"};
    v.early_kv = false;
    variants.push_back(v);
  }
  if (args.on("cluster-off-too")) {
    Variant v{"off: cluster merge"};
    v.cluster = false;
    variants.push_back(v);
  }
  if (args.on("decode-mma-off-too")) {
    Variant v{"off: tensor-core decode attention"};
    v.decode_mma = 0;
    variants.push_back(v);
  }
  if (args.on("fp8-norm-off-too")) {
    Variant v{"off: norms in the fp8 GEMVs"};
    v.fp8_norm_in_gemv = false;
    variants.push_back(v);
  }
  if (args.on("fp8-pair-off-too")) {
    Variant v{"off: fp8 down + next qkv as one kernel"};
    v.fp8_pair = false;
    variants.push_back(v);
  }
  if (args.on("fusion-off-too") && batch <= 8)
    variants.push_back({"off: fusion", true, true, true, false});
  for (int on : {0, 1}) {
    if (!args.on(on ? "rope-fusion-on-too" : "rope-fusion-off-too")) continue;
    Variant v{on ? "forced: RoPE in attention" : "off: RoPE in attention"};
    v.rope_in_attention = on;
    variants.push_back(v);
  }
  return variants;
}

// The tuning of variant v: the run's own (`base`, from the engine flags and --gemv-deep-*) with
// what v changes.
CudaTuning variant_tuning(const Variant& v, const CudaTuning& base) {
  CudaTuning t = base;
  t.cuda_graphs = v.graphs && base.cuda_graphs;
  t.gemv = v.gemv;
  t.programmatic_launch = v.pdl;
  t.fused_decode = v.fused && base.fused_decode;
  t.decode_splits = v.splits;
  if (v.split_cap > 0) t.decode_split_ctas_per_sm = v.split_cap;
  t.gemv_config = v.gemv_config;
  if (v.gemv_deep >= 0) t.gemv_deep_mask = v.gemv_deep;
  if (v.fp8_deep >= 0) t.fp8_gemv_deep_mask = v.fp8_deep;
  t.early_kv_loads = v.early_kv;
  t.cluster_merge = v.cluster;
  for (const bool fp8 : {false, true})
    for (const auto& [projection, config] : fp8 ? v.fp8_projection_configs : v.projection_configs) {
      if (projection <= 0 || projection > CudaTuning::kHead ||
          !std::has_single_bit(unsigned(projection)))
        throw Error(ErrorCode::kInvalidArgument, "GEMV projection: 1, 2, 4, 8 or 16, got " +
                                                     std::to_string(projection));
      (fp8 ? t.fp8_projection_gemv_config[CudaTuning::projection_index(projection)]
           : t.projection_config(projection)) = config;
    }
  if (v.rope_in_attention >= 0)
    t.rope_in_attention = v.rope_in_attention == 1 ? RopeInAttention::kOn : RopeInAttention::kOff;
  if (v.decode_mma >= 0) t.decode_mma = v.decode_mma;
  t.fp8_norm_in_gemv = v.fp8_norm_in_gemv && base.fp8_norm_in_gemv;
  t.fp8_pair_down_qkv = v.fp8_pair && base.fp8_pair_down_qkv;
  return t;
}

void decode_table(Bench& b) {
  CudaRunner& r = b.r;
  const EngineOptions& eo = b.eo;
  const CachePolicy& policy = b.policy;
  std::mt19937& rng = b.rng;
  const CudaTuning base = r.tuning();  // the run's, restored at the end
  // Untimed decode for about a second first, so the GPU's clocks have ramped up before the first
  // configuration is timed (the first one otherwise read up to 3% slow).
  for (const auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(1);)
    time_decode(r, 1, 64, policy, 32, rng, eo.max_step_tokens);
  std::printf(
      "\ndecode (%s cache): median step time (wall, as a caller sees it), the GPU's part of it, "
      "and the time per step with the next step launched before each finishes (pipelined)\n",
      policy.to_string().c_str());
  std::printf("%6s %8s %10s %8s %10s %10s %12s %10s  %s\n", "batch", "cached", "step ms", "GPU ms",
              "piped ms", "tok/s", "GB/s moved", "% of copy", "variant");
  for (int batch : int_list(b.args.get("batch"))) {
    for (int ctx : int_list(b.args.get("context"))) {
      if (ctx > b.c.max_position_embeddings && !policy.is_streaming()) continue;
      for (const Variant& v : decode_variants(b.args, batch)) {
        r.set_tuning(variant_tuning(v, base));
        const DecodeResult d = time_decode(r, batch, ctx, policy, b.steps, rng, eo.max_step_tokens);
        const DecodeResult piped = time_decode(r, batch, ctx, policy, b.steps, rng,
                                               eo.max_step_tokens, DecodeTiming::kPipelined);
        const double bytes = b.wbytes + double(batch) * d.cached * b.kv_token_bytes;
        const double gbps = bytes / (d.step_ms * 1e-3) / 1e9;
        std::printf("%6d %8d %10.3f %8.3f %10.3f %10.0f %12.0f %9.1f%%  %s\n", batch, d.cached,
                    d.step_ms, d.gpu_ms, piped.step_ms, batch * 1e3 / d.step_ms, gbps,
                    100 * gbps / b.ceil.copy_gbps, v.off.c_str());
      }
    }
  }
  r.set_tuning(base);
}

// Parameters of the model (every weight, whatever its dtype): 2 flops per parameter and token.
double parameter_count(const ModelConfig& c) {
  const double H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const double linear = H * c.qkv_dim() + H * c.q_dim() + (c.gated_mlp ? 3 : 2) * H * I;
  const double norms = c.norm == NormKind::kLayerNorm ? 4 * H : 2 * H;
  return c.num_layers * (linear + norms) + V * H * (c.tie_word_embeddings ? 1 : 2) + H;
}

// One prompt per step: time, tokens/s and TFLOP/s against the GEMM ceiling.
void prefill_table(Bench& b) {
  CudaRunner& r = b.r;
  const ModelConfig& c = b.c;

  const std::vector<int> prefills = int_list(b.args.get("prefill"));
  if (!prefills.empty() && prefills[0] > 0) {
    std::printf("\nprefill: one prompt in one step\n%8s %10s %12s %12s %10s\n", "tokens", "ms",
                "tokens/s", "TFLOP/s", "% of GEMM");
    for (int n : prefills) {
      if (n > b.eo.max_step_tokens || n > c.max_position_embeddings) continue;
      std::uniform_int_distribution<int> tok(0, c.vocab_size - 1);
      std::vector<int32_t> prompt(n);
      for (auto& t : prompt) t = tok(b.rng);
      std::vector<double> ms;
      for (int it = 0; it < 8; ++it) {
        r.add_sequence({1000, CachePolicy::full(), {.temperature = 0.0f}});
        StepInput in{1000, prompt, LogitsMode::kNone, true};
        const auto t0 = Clock::now();
        r.step(std::span<const StepInput>(&in, 1));
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        r.remove_sequence(1000);
      }
      ms.erase(ms.begin(), ms.begin() + 2);
      const double t = median(ms);
      const double params = parameter_count(c);
      const double attn = 4.0 * n * n / 2 * c.head_dim * c.num_heads * c.num_layers;
      const double tflops = (2.0 * params * n + attn) / (t * 1e-3) / 1e12;
      std::printf("%8d %10.2f %12.0f %12.1f %9.1f%%\n", n, t, n * 1e3 / t, tflops,
                  100 * tflops / b.ceil.gemm_tflops);
    }
  }
}

// Where one prefill step's time goes: each kernel name's critical-path charge and summed resident
// time over one traced prompt of the first --prefill length, largest charge first.
void prefill_trace(Bench& b) {
  const std::vector<int> prefills = int_list(b.args.get("prefill"));
  if (prefills.empty() || prefills[0] <= 0 || !bench::kernel_trace_available()) return;
  const int n = prefills[0];
  std::uniform_int_distribution<int> tok(0, b.c.vocab_size - 1);
  std::vector<int32_t> prompt(n);
  for (auto& t : prompt) t = tok(b.rng);
  std::vector<bench::KernelRecord> kernels;
  for (int it = 0; it < 2; ++it) {  // the first meets every shape; the second is traced
    b.r.add_sequence({1000, CachePolicy::full(), {.temperature = 0.0f}});
    StepInput in{1000, prompt, LogitsMode::kNone, true};
    std::unique_ptr<bench::KernelTrace> tracer;
    if (it == 1) tracer = std::make_unique<bench::KernelTrace>();
    b.r.step(std::span<const StepInput>(&in, 1));
    if (tracer) kernels = tracer->stop();
    b.r.remove_sequence(1000);
  }
  if (kernels.empty()) return;
  // Under PDL a kernel is resident while it waits for its predecessor, so resident times overlap;
  // the critical-path charge (kernel_trace.h) is what each kernel adds to the step.
  for (bench::KernelRecord& k : kernels) k.launch = 0;  // one step
  const bench::StepAttribution a = bench::attribute_steps(kernels);
  struct Sum {
    double resident_ms = 0, marginal_ms = 0;
    int launches = 0;
  };
  std::map<std::string, Sum> by_name;
  for (const bench::KernelRecord& k : kernels) {
    Sum& s = by_name[k.name];
    s.resident_ms += static_cast<double>(k.end - k.start) / 1e6;
    ++s.launches;
  }
  for (const auto& row : a.rows)  // labels are "name [CTAs] after previous"
    by_name[row.label.substr(0, row.label.find(" ["))].marginal_ms += row.marginal_ms;
  std::vector<std::pair<std::string, Sum>> rows(by_name.begin(), by_name.end());
  std::sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) {
    return x.second.marginal_ms > y.second.marginal_ms;
  });
  std::printf("\nkernels of one %d-token prefill step: span %.3f ms (critical-path charge: each "
              "instant to the earliest-started resident kernel)\n",
              n, a.span_ms);
  std::printf("  %-64s %8s %11s %11s %7s\n", "kernel", "launches", "charged ms", "resident ms",
              "share");
  for (const auto& [name, v] : rows)
    std::printf("  %-64.64s %8d %11.3f %11.3f %6.1f%%\n", name.c_str(), v.launches,
                v.marginal_ms, v.resident_ms, 100 * v.marginal_ms / std::max(a.span_ms, 1e-9));
}

// Per-category GPU time of eager decode steps at the first batch and context.
// Where a graph-replayed decode step's time goes: each kernel's share of the critical path
// (bench/kernel_trace.h), for every batch and context.
void print_trace(Bench& b, int batch, const Variant& v, const DecodeResult& d);

void trace_table(Bench& b) {
  if (!bench::kernel_trace_available()) {
    std::printf("\nkernel trace: this build has no CUPTI\n");
    return;
  }
  const CudaTuning base = b.r.tuning();
  for (int batch : int_list(b.args.get("batch"))) {
    for (int ctx : int_list(b.args.get("context"))) {
      for (const Variant& v : decode_variants(b.args, batch)) {
        b.r.set_tuning(variant_tuning(v, base));
        const DecodeResult d = time_decode(b.r, batch, ctx, b.policy, b.steps, b.rng,
                                           b.eo.max_step_tokens, DecodeTiming::kTrace);
        print_trace(b, batch, v, d);
      }
    }
  }
  b.r.set_tuning(base);
}

// One traced configuration's table: each kernel's share of the critical path.
void print_trace(Bench& b, int batch, const Variant& v, const DecodeResult& d) {
  const bench::StepAttribution a = bench::attribute_steps(d.kernels);
  std::printf(
      "\nkernel timeline of a decode step (batch %d, %d cached, %s%s%s, %d steps traced): "
      "step %.3f ms while traced, kernels span %.3f ms\n",
      batch, d.cached, b.eo.cuda_tuning.cuda_graphs ? "CUDA graph" : "eager",
      v.off.empty() ? "" : ", ",
      v.off.c_str(), a.steps, d.step_ms, a.span_ms);
  std::printf("  %-64s %9s %12s %7s %12s\n", "kernel [CTAs] after the kernel launched before it",
              "per step", "critical ms", "share", "resident us");
  for (const auto& row : a.rows)
    std::printf("  %-64s %9.1f %12.3f %6.1f%% %12.1f\n", row.label.c_str(), row.launches,
                row.marginal_ms, 100 * row.marginal_ms / std::max(a.span_ms, 1e-9),
                row.resident_us);
}

void breakdown(Bench& b) {
  const int batch = int_list(b.args.get("batch")).front();
  const int ctx = int_list(b.args.get("context")).front();
  const DecodeResult d = time_decode(b.r, batch, ctx, b.policy, 16, b.rng, b.eo.max_step_tokens,
                                     DecodeTiming::kProfile);
  const StepProfile& p = b.r.profile();
  const double per = 1.0 / std::max(1, p.steps);
  const double kernels = (p.gemm_ms + p.attention_ms + p.norm_elementwise_ms + p.sampling_ms) * per;
  std::printf("\nbreakdown of one decode step (batch %d, %d cached, eager launches, %d steps)\n",
              batch, d.cached, p.steps);
  std::printf(
      "  GEMMs %.3f ms | attention %.3f ms | norms, rope, activations, embedding %.3f ms | "
      "sampling "
      "%.3f ms\n  sum of kernels %.3f ms | eager step wall time %.3f ms | gaps and host %.3f ms\n",
      p.gemm_ms * per, p.attention_ms * per, p.norm_elementwise_ms * per, p.sampling_ms * per,
      kernels, d.step_ms, d.step_ms - kernels);
}

// The command line: the engine and cache flags, what to time, and the variants to time it in.
void declare_flags(cli::Args& args) {
  cli::add_engine_flags(args);
  args.option("batch", "1,8,64", "decode batch sizes");
  args.option("context", "128,512,1024", "tokens in each sequence's cache while decoding");
  args.option("steps", "32", "timed decode steps per configuration (median reported)");
  args.option("prefill", "2048", "prefill prompt lengths (0: skip)");
  args.flag("graphs-off-too", "also time every decode configuration with CUDA graphs off");
  args.flag("gemv-off-too", "also time batch <= 8 decode with the GEMV path off (cuBLAS only)");
  args.flag("pdl-off-too",
            "also time every decode configuration with programmatic dependent launch off");
  args.flag(
      "fusion-off-too",
      "also time batch <= 8 decode with SiLU-and-mul as its own kernel, not in the gate|up GEMV");
  args.flag("rope-fusion-off-too",
            "also time every decode configuration with RoPE and the K/V write as their own kernel, "
            "not inside decode attention");
  args.flag("rope-fusion-on-too",
            "also time every decode configuration with RoPE forced into decode attention (by "
            "default only models without GQA run it there)");
  args.option("split-cap-sweep", "",
              "also time decode with the automatic split policy capped at each of these CTAs an "
              "SM (CudaTuning::decode_split_ctas_per_sm; the default is 4)");
  args.option("splits-sweep", "",
              "also time decode with decode attention forced to each of these split counts");
  args.option("gemv-configs", "",
              "also time batch <= 8 decode with every GEMV forced to each of these CTA shapes "
              "(indices of rill-gemv-bench's shapes)");
  args.option("fp8-projection-gemv-configs", "",
              "also time batch <= 8 decode with single fp8 GEMVs forced to CTA shapes: as "
              "--projection-gemv-configs, shapes indices of rill-gemv-fp8-bench's");
  args.option("gemv-deep-masks", "",
              "also time batch <= 8 decode with each of these masks of GEMVs staging weights "
              "through shared memory (1 qkv, 2 o, 4 gate|up, 8 down, 16 LM head)");
  args.option("projection-gemv-configs", "",
              "also time batch <= 8 decode with single GEMVs forced to CTA shapes: a list of "
              "variants, each projection:shape[+projection:shape...] (projection 1 qkv, 2 o, "
              "4 gate|up, 8 down, 16 LM head; shape an index of rill-gemv-bench's shapes)");
  args.option("gemv-deep-config", "-1",
              "CTA shape of the GEMVs with a deep prologue (index of rill-gemv-bench's shapes; -1: "
              "the default)");
  args.option(
      "gemv-deep-mask", "-1",
      "the mask of GEMVs with a deep prologue for the whole run (-1: the runner's default)");
  args.option("fp8-gemv-deep-masks", "",
              "also time batch <= 8 decode with each of these masks of fp8 GEMVs staging weights "
              "through shared memory (bits as --gemv-deep-masks; 0: none)");
  args.option("fp8-gemv-deep-mask", "-1",
              "the mask of fp8 GEMVs with a deep prologue for the whole run (-1: the runner's "
              "rule, o, gate|up and qkv from two tokens on)");
  args.option("fp8-gemv-deep-config", "-1",
              "CTA shape of the fp8 GEMVs with a deep prologue (index of rill-gemv-fp8-bench's "
              "shapes; -1: the default)");
  args.option("fp8-gemv-max-rows", "-1",
              "fp8 weights: the largest step (tokens) that runs the fp8 GEMV, not the W8A8 GEMM "
              "(0 .. 16; -1: the runner's default)");
  args.option("fp8-fused-quant", "-1",
              "fp8 weights: 1 the norms and the activation write the W8A8 GEMMs' input as e4m3 "
              "themselves, 0 a quantization kernel before each GEMM does; -1: the runner's default");
  args.option("fp8-fast-accum", "-1",
              "fp8 weights: 1 the W8A8 GEMMs use cuBLASLt's fast accumulation, 0 they promote "
              "partial sums to fp32; -1: the runner's default");
  args.option("fp8-norm-in-gemv", "-1",
              "fp8 weights: 1 decode steps run the residual adds and norms inside the GEMVs "
              "around them, 0 as add_norm kernels; -1: the runner's default");
  args.flag("fp8-norm-off-too",
            "also time decode with the fp8 GEMVs' residual adds and norms as add_norm kernels");
  args.option("fp8-pair-down-qkv", "-1",
              "fp8 weights: 1 a layer's down GEMV and the next layer's qkv run as one kernel "
              "(with the norms in the GEMVs), 0 as two; -1: the runner's default");
  args.flag("fp8-pair-off-too",
            "also time decode with each down GEMV and the next qkv as two kernels");
  args.option("carveout", "-1",
              "shared-memory carveout (percent) every kernel asks for; -1: the driver's choice");
  args.flag("early-kv-off-too",
            "also time decode with attention waiting for the previous kernel before any K/V load");
  args.flag("cluster-off-too",
            "also time decode with attention splits merged through global memory, not a cluster");
  args.flag("decode-mma-off-too",
            "also time decode with attention on CUDA cores where it would run on tensor cores "
            "(GQA groups of 4 to 8)");
  args.flag("trace",
            "print each kernel's share of a decode step's critical path (CUPTI trace of the "
            "graph replays) for every batch and context");
  args.flag("prefill-trace",
            "print each kernel's summed time in one prefill step of the first --prefill length "
            "(CUPTI trace)");
  args.flag("breakdown", "print a per-category breakdown of one decode step (eager launches)");
  args.option("long-stream", "0", "generate this many tokens in one sequence (use --cache streaming) and "
              "compare time per token just after the window filled with the last 5%, and GPU memory");
  cli::add_cache_flags(args);
}

int main(int argc, char** argv) {
  cli::Args args("rill-bench",
                 "Decode and prefill benchmarks of the CUDA engine, against measured ceilings.");
  declare_flags(args);
  args.parse(argc, argv);
  try {
    EngineOptions eo = cli::engine_options(args);
    eo.device = "cuda";
    const Model model = load_model(args.get("model"));
    kernels::set_smem_carveout(args.get_int("carveout"));
    eo.cuda_tuning.gemv_deep_config = args.get_int("gemv-deep-config");
    if (args.get_int("gemv-deep-mask") >= 0)
      eo.cuda_tuning.gemv_deep_mask = args.get_int("gemv-deep-mask");
    eo.cuda_tuning.fp8_gemv_deep_mask = args.get_int("fp8-gemv-deep-mask");
    eo.cuda_tuning.fp8_gemv_deep_config = args.get_int("fp8-gemv-deep-config");
    if (const int q = args.get_int("fp8-fused-quant"); q >= 0) eo.cuda_tuning.fp8_fused_quant = q != 0;
    if (const int f = args.get_int("fp8-fast-accum"); f >= 0) eo.cuda_tuning.fp8_fast_accum = f != 0;
    if (const int f = args.get_int("fp8-norm-in-gemv"); f >= 0)
      eo.cuda_tuning.fp8_norm_in_gemv = f != 0;
    if (const int f = args.get_int("fp8-pair-down-qkv"); f >= 0)
      eo.cuda_tuning.fp8_pair_down_qkv = f != 0;
    if (args.get_int("fp8-gemv-max-rows") >= 0)
      eo.cuda_tuning.fp8_gemv_max_rows = args.get_int("fp8-gemv-max-rows");
    const auto t_load = Clock::now();
    CudaRunner r(model, eo);
    const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
    cudaStream_t s;
    BENCH_CUDA(cudaStreamCreate(&s));
    const bench::Ceilings ceil = bench::measure_ceilings(s);
    const ModelConfig& c = model.config;
    const double wbytes = static_cast<double>(r.weight_bytes());
    std::printf("device: %s | copy %.0f GB/s | read %.0f GB/s | GEMM %.0f TFLOP/s\n",
                ceil.device.c_str(), ceil.copy_gbps, ceil.read_gbps, ceil.gemm_tflops);
    const double kv_token_bytes = kv_bytes_per_token(c, r.kv_element_bytes());
    std::printf(
        "model: %s (%s), %.2f GB of weights (%s; linear layers: %s), %d layers, KV %.0f KB/token "
        "(%s); runner ready in %.1f s\n",
        args.get("model").c_str(), c.architecture.c_str(), wbytes / 1e9,
        r.dtype() == kernels::DType::kF16 ? "fp16" : "bf16",
        describe_quantization(resolve_quantization(eo.quantization, c.quant), c.quant).c_str(),
        c.num_layers, kv_token_bytes / 1e3, r.kv_element_bytes() == 1 ? "fp8" : "16-bit", load_s);
    const CachePolicy policy = cli::cache_policy(args);
    if (args.get_int64("long-stream") > 0) return long_stream(r, policy, args.get_int64("long-stream"));
    Bench b{r, args, eo, c, ceil, wbytes, kv_token_bytes, policy, args.get_int("steps")};
    decode_table(b);
    prefill_table(b);
    if (args.on("breakdown")) breakdown(b);
    if (args.on("trace")) trace_table(b);
    if (args.on("prefill-trace")) prefill_trace(b);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rill-bench: error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  } catch (const std::exception& e) {  // e.g. CUPTI refusing to trace (--trace)
    std::fprintf(stderr, "rill-bench: error: %s\n", e.what());
    return 1;
  }
}
