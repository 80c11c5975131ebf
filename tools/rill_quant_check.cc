// rill-quant-check: how far fp8 weights move a model's logits from its 16-bit weights on the GPU.
// One sequence of --positions random tokens (fixed seed) is fed teacher-forced twice, with
// --quantization none and with --quantization fp8 (or what --quantization names): the first
// positions as one prefill step (fp8: the W8A8 GEMMs), the last --decode-positions one token a
// step (fp8: the weight-only GEMV). Prints, for each part, the cosine similarity of the two
// runs' logits per position (mean and minimum), their relative L2 distance and how often the
// top-1 token agrees.
// On the CPU (--device cpu) the fp8 run emulates what the CUDA runner computes: fp8 weights
// dequantized, and (--cpu-fp8-activations emulate, the default) the W8A8 GEMMs' e4m3
// activations in steps of more than --fp8-gemv-max-rows tokens (CpuRunnerOptions::
// fp8_activation_rows); `fp32` keeps the activations exact, which isolates the weights' part.
//   rill-quant-check --model /tmp/llama2-7b --positions 256
//   rill-quant-check --model /tmp/deep-small --device cpu --cpu-fp8-activations fp32
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "engine/cpu/cpu_runner.h"
#include "engine/error.h"
#include "engine/model/model.h"
#include "engine/runner_factory.h"
#include "tools/common/engine_flags.h"

using namespace rill;

namespace {

// The runner of `quant`: the engine's, or on the CPU with `emulate_w8a8` the CPU runner emulating
// the CUDA runner's e4m3 activations (runner_factory.cc's options plus fp8_activation_rows).
std::unique_ptr<ModelRunner> runner_for(const Model& m, EngineOptions o, const std::string& quant,
                                        bool emulate_w8a8) {
  o.quantization = quant;
  if (o.device != "cpu" || !emulate_w8a8) return make_runner(m, o);
  CpuRunnerOptions c;
  c.num_threads = o.cpu_threads;
  c.block_size = o.block_size;
  c.kv_cache_bytes = o.cpu_kv_cache_bytes;
  c.host_kv_cache_bytes = o.host_kv_cache_bytes;
  c.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  c.quantization = resolve_quantization(o.quantization, m.config.quant);
  c.fp8_activation_rows = o.cuda_tuning.fp8_gemv_max_rows;
  return std::make_unique<CpuRunner>(m, c);
}

// Logits [positions, V] of `tokens` fed to a fresh runner: `prefill` tokens in one step, the
// rest one per step.
std::vector<float> logits_of(const Model& m, const EngineOptions& o, const std::string& quant,
                             bool emulate_w8a8, const std::vector<int32_t>& tokens,
                             size_t prefill) {
  auto r = runner_for(m, o, quant, emulate_w8a8);
  r->add_sequence({1, CachePolicy::full(), {.temperature = 0.0f}});
  std::vector<float> out;
  for (size_t pos = 0; pos < tokens.size();) {
    const size_t n = pos == 0 ? prefill : 1;
    StepInput in{1, std::span<const int32_t>(tokens.data() + pos, n), LogitsMode::kAll, false};
    const StepOutput o2 = r->step(std::span<const StepInput>(&in, 1));
    out.insert(out.end(), o2.logits.begin(), o2.logits.end());
    pos += n;
  }
  return out;
}

struct Stats {
  double cos_mean = 0, cos_min = 1, rel_l2 = 0, top1 = 0;
};

Stats compare(const std::vector<float>& a, const std::vector<float>& b, size_t from, size_t to,
              int V) {
  Stats s;
  double num = 0, den = 0;
  for (size_t p = from; p < to; ++p) {
    const float* x = a.data() + p * V;
    const float* y = b.data() + p * V;
    double xy = 0, xx = 0, yy = 0;
    for (int v = 0; v < V; ++v) {
      xy += double(x[v]) * y[v];
      xx += double(x[v]) * x[v];
      yy += double(y[v]) * y[v];
      num += (double(x[v]) - y[v]) * (double(x[v]) - y[v]);
    }
    den += yy;
    const double cos = xy / std::sqrt(std::max(xx * yy, 1e-300));
    s.cos_mean += cos;
    s.cos_min = std::min(s.cos_min, cos);
    s.top1 += (std::max_element(x, x + V) - x) == (std::max_element(y, y + V) - y);
  }
  const double n = double(to - from);
  s.cos_mean /= n;
  s.top1 /= n;
  s.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Args args("rill-quant-check",
                 "Cosine similarity of fp8 and 16-bit logits over a teacher-forced sequence.");
  cli::add_engine_flags(args);
  args.option("positions", "256", "positions compared");
  args.option("decode-positions", "64", "of those, the last ones fed one token per step");
  args.option("seed", "1", "seed of the random token sequence");
  args.option("min-cosine", "0.99", "exit 1 when a part's mean cosine similarity is below this");
  args.option("cpu-fp8-activations", "emulate",
              "--device cpu: emulate (the CUDA runner's e4m3 activations in prefill steps) | "
              "fp32 (weight-only fp8)");
  args.option("fp8-fast-accum", "-1",
              "CUDA: 1 the W8A8 GEMMs use cuBLASLt's fast accumulation, 0 they do not; -1: the "
              "runner's default");
  args.option("fp8-norm-in-gemv", "-1",
              "CUDA: 1 decode steps run the residual adds and norms inside the fp8 GEMVs, 0 as "
              "add_norm kernels; -1: the runner's default");
  args.option("fp8-o-in-attention", "-1",
              "CUDA: 1 batch-1 decode runs the output projection inside decode attention where "
              "the shapes allow, 0 as its own GEMV; -1: the runner's default");
  args.parse(argc, argv);
  try {
    EngineOptions o = cli::engine_options(args);
    if (!args.given("max-batch")) o.max_batch = 8;
    if (const int f = args.get_int("fp8-fast-accum"); f >= 0) o.cuda_tuning.fp8_fast_accum = f != 0;
    if (const int f = args.get_int("fp8-norm-in-gemv"); f >= 0)
      o.cuda_tuning.fp8_norm_in_gemv = f != 0;
    if (const int f = args.get_int("fp8-o-in-attention"); f >= 0)
      o.cuda_tuning.fp8_o_in_attention = f != 0;
    const Model m = load_model(args.get("model"));
    const int positions = args.get_int("positions"), decode = args.get_int("decode-positions");
    if (positions < 2 || decode < 1 || decode >= positions)
      args.fail("need --positions >= 2 and 1 <= --decode-positions < --positions");
    if (positions > m.config.max_position_embeddings)
      args.fail("--positions exceeds the model's context");
    std::mt19937 rng(static_cast<uint32_t>(args.get_int("seed")));
    std::vector<int32_t> tokens(positions);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % m.config.vocab_size);
    const std::string quant = o.quantization == "auto" ? "fp8" : o.quantization;
    const std::string acts = args.get("cpu-fp8-activations");
    if (acts != "emulate" && acts != "fp32")
      args.fail("--cpu-fp8-activations must be emulate or fp32, not '" + acts + "'");
    const size_t prefill = size_t(positions - decode);
    const std::vector<float> ref = logits_of(m, o, "none", false, tokens, prefill);
    const std::vector<float> got = logits_of(m, o, quant, acts == "emulate", tokens, prefill);
    const int V = m.config.vocab_size;
    bool ok = true;
    std::printf("%s: --quantization %s against none, %d positions%s\n", args.get("model").c_str(),
                quant.c_str(), positions,
                o.device != "cpu"   ? ""
                : acts == "emulate" ? " (CPU, e4m3 activations emulated)"
                                    : " (CPU, weight-only: fp32 activations)");
    for (const auto& [name, from, to] : {std::tuple{"prefill", size_t(0), prefill},
                                         std::tuple{"decode", prefill, size_t(positions)}}) {
      const Stats s = compare(got, ref, from, to, V);
      std::printf(
          "  %-7s %3zu positions: cosine mean %.5f min %.5f | relative L2 %.4f | top-1 agrees "
          "%.1f%%\n",
          name, to - from, s.cos_mean, s.cos_min, s.rel_l2, 100 * s.top1);
      ok = ok && s.cos_mean >= args.get_double("min-cosine");
    }
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "rill-quant-check: error (%s): %s\n", error_code_name(e.code()), e.what());
    return 1;
  }
}
