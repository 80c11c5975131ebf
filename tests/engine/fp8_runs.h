// Runner-level fp8 comparisons shared by the CPU (fp8_model_test.cc) and CUDA (cuda_fp8_test.cc)
// tests: a batch of prompts prefilled in one step (every position's logits) then teacher-forced
// decode steps, and the relative L2 distance of two runs' logits rows.
//
// Why the CUDA runner's W8A8 logits cannot equal the CPU emulation's: e4m3 has 3 mantissa bits,
// so its rounding boundaries sit 2^-4..2^-3 of a value apart, and the CUDA runner quantizes
// activations that its bf16 compute has already moved by a few bf16 ulps (2^-9..2^-7) from the
// CPU's fp32 ones. Every element within that distance of a boundary rounds to the other
// neighbour: a fraction p ~ |dx| / ulp_e4m3 of the elements, each off by a whole e4m3 step. The
// error energy p * ulp^2 grows like sqrt(|dx|), not like |dx|: a perturbation of one bf16 ulp
// already re-draws a large part of the quantization error (a fraction ~ 12 p of its energy). The
// random fixtures then amplify it through their layers like the quantization error itself.
// flip_spread() measures it on the CPU: two emulations whose activations are jittered
// independently by the size of bf16 compute error (CpuRunnerOptions::fp8_activation_jitter).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "engine/cpu/cpu_runner.h"
#include "engine/model/model.h"
#include "engine/runner/runner.h"

namespace rill::testing {

inline double rel_err(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Fp8Rows {
  std::vector<std::vector<float>> prefill;  // per sequence: its prompt's logits, every position
  std::vector<std::vector<float>> decode;   // per step: [batch, V]
};

/// Prefill of every prompt (one step, all logits), then teacher-forced decode steps of the whole
/// batch feeding `tokens[step][seq]`.
inline Fp8Rows run_fp8_rows(ModelRunner& r, const std::vector<std::vector<int32_t>>& prompts,
                            const std::vector<std::vector<int32_t>>& tokens,
                            const CachePolicy& policy = CachePolicy::full()) {
  Fp8Rows out;
  std::vector<StepInput> in;
  for (size_t s = 0; s < prompts.size(); ++s) {
    r.add_sequence({SeqId(s + 1), policy, {.temperature = 0.0f}});
    in.push_back({SeqId(s + 1), prompts[s], LogitsMode::kAll, false});
  }
  const StepOutput p = r.step(in);
  const int V = r.config().vocab_size;
  for (size_t s = 0; s < prompts.size(); ++s)
    out.prefill.emplace_back(p.logits.begin() + p.logits_row[s] * V,
                             p.logits.begin() + (p.logits_row[s] + prompts[s].size()) * V);
  for (const auto& step : tokens) {
    in.clear();
    for (size_t s = 0; s < prompts.size(); ++s)
      in.push_back({SeqId(s + 1), std::span<const int32_t>(&step[s], 1), LogitsMode::kLast, false});
    const StepOutput o = r.step(in);
    out.decode.push_back(o.logits);
  }
  for (size_t s = 0; s < prompts.size(); ++s) r.remove_sequence(SeqId(s + 1));
  return out;
}

/// `batch` prompts of exactly len + s % 3 tokens (the fixtures' byte-level tokenizer makes the
/// text ~60 tokens; a prefill of 20 such prompts would pass the 512 rows of logits one step may
/// return), padded with seeded random tokens.
inline std::vector<std::vector<int32_t>> fp8_prompts(const Model& m, int batch, int len) {
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> p(batch);
  for (int s = 0; s < batch; ++s) {
    p[s] = m.tokenizer->encode("KING HENRY: O, what a noble mind is here o'erthrown! Thou art");
    p[s].resize(std::min(p[s].size(), size_t(len + s % 3)));
    while (int(p[s].size()) < len + s % 3) p[s].push_back(int32_t(rng() % m.config.vocab_size));
  }
  return p;
}

/// The CPU's greedy tokens, `steps` decode steps found one at a time (teacher forcing for the
/// other runs).
inline std::vector<std::vector<int32_t>> fp8_greedy_tokens(
    ModelRunner& r, const std::vector<std::vector<int32_t>>& prompts, int steps,
    const CachePolicy& policy = CachePolicy::full()) {
  const int V = r.config().vocab_size, batch = int(prompts.size());
  std::vector<std::vector<int32_t>> tokens;
  Fp8Rows ref = run_fp8_rows(r, prompts, {}, policy);
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> next(batch);
    for (int s = 0; s < batch; ++s) {
      const float* row = step == 0 ? ref.prefill[s].data() + (prompts[s].size() - 1) * V
                                   : ref.decode[step - 1].data() + size_t(s) * V;
      next[s] = int32_t(std::max_element(row, row + V) - row);
    }
    tokens.push_back(next);
    ref = run_fp8_rows(r, prompts, tokens, policy);
  }
  return tokens;
}

/// Worst relative L2 distance of a logits row: over every prefill position and every decode row.
struct Fp8Distance {
  double prefill = 0, decode = 0;
};

inline Fp8Distance fp8_distance(const Fp8Rows& a, const Fp8Rows& b, int V) {
  Fp8Distance d;
  for (size_t s = 0; s < a.prefill.size(); ++s)
    for (size_t pos = 0; pos < a.prefill[s].size() / V; ++pos)
      d.prefill = std::max(d.prefill, rel_err(a.prefill[s].data() + pos * V,
                                              b.prefill[s].data() + pos * V, size_t(V)));
  for (size_t step = 0; step < a.decode.size(); ++step)
    for (size_t r = 0; r < a.decode[step].size() / V; ++r)
      d.decode = std::max(d.decode, rel_err(a.decode[step].data() + r * V,
                                            b.decode[step].data() + r * V, size_t(V)));
  return d;
}

/// A bf16 ulp relative to the value (2^-8 at the top of a binade, 2^-7 at its bottom): the
/// jitter of flip_spread, the size of one rounding of the CUDA runner's bf16 compute.
constexpr float kBf16Jitter = 0x1p-8f;

/// The flip noise of the W8A8 emulation `emulating` on these prompts and tokens.
struct Fp8FlipNoise {
  /// The worst row distance between emulations whose activations are jittered independently
  /// (pairwise over the seeds, the largest pair).
  Fp8Distance spread;
  /// [step][seq]: every jittered emulation's decode row has the same top-1 token; where not,
  /// the emulation's own flip noise decides the greedy token.
  std::vector<std::vector<char>> top1_stable;
};

inline Fp8FlipNoise fp8_flip_noise(const Model& m, CpuRunnerOptions emulating,
                                   const std::vector<std::vector<int32_t>>& prompts,
                                   const std::vector<std::vector<int32_t>>& tokens,
                                   const CachePolicy& policy, float jitter, int seeds) {
  const int V = m.config.vocab_size;
  std::vector<Fp8Rows> runs;
  emulating.fp8_activation_jitter = jitter;
  for (int s = 0; s < seeds; ++s) {
    emulating.fp8_activation_jitter_seed = uint32_t(s + 1);
    CpuRunner r(m, emulating);
    runs.push_back(run_fp8_rows(r, prompts, tokens, policy));
  }
  Fp8FlipNoise noise;
  for (int a = 0; a < seeds; ++a)
    for (int b = a + 1; b < seeds; ++b) {
      const Fp8Distance d = fp8_distance(runs[a], runs[b], V);
      noise.spread.prefill = std::max(noise.spread.prefill, d.prefill);
      noise.spread.decode = std::max(noise.spread.decode, d.decode);
    }
  auto top1 = [V](const float* row) { return std::max_element(row, row + V) - row; };
  for (size_t step = 0; step < tokens.size(); ++step) {
    noise.top1_stable.emplace_back(prompts.size(), 1);
    for (size_t seq = 0; seq < prompts.size(); ++seq)
      for (int a = 1; a < seeds; ++a)
        if (top1(runs[a].decode[step].data() + seq * V) !=
            top1(runs[0].decode[step].data() + seq * V))
          noise.top1_stable[step][seq] = 0;
  }
  return noise;
}

}  // namespace rill::testing
