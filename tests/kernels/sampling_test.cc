// GPU sampler against a CPU reference with the semantics of engine/runner/sampling.cc (penalties,
// temperature, kept set {p >= tau} with tau = max(tau_k, tau_p within top-k, tau_m), inverse-CDF
// draw in id order with philox_uniform(seed, step)), computed in double.
//
// Exactness: the kernel works in fp32, so a row whose outcome hinges on a difference below fp32
// noise (a value within 1e-4 of the threshold, a cumulative mass within 1e-5 of a target) is
// "ambiguous"; every other row must give exactly the reference token. Every row, ambiguous or
// not, must give a token of the kept set (with a 1e-3 slack on tau).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "rill/kernels/philox.h"
#include "rill/kernels/sampling.h"
#include "tests/kernels/gpu_test_util.h"

namespace rill::testing {
namespace {

using kernels::SamplingRow;

struct Ref {
  int token = -1;
  bool ambiguous = false;
  double tau = 0;            // kept set: prob >= tau
  std::vector<double> prob;  // softmax of the penalised logits / T (empty when greedy)
};

// Penalties in fp32, exactly as engine/runner/sampling.cc applies them.
void apply_penalties_ref(std::vector<float>& l, const SamplingRow& r, const uint8_t* seen,
                         const int32_t* counts) {
  if (r.state_slot < 0) return;
  for (size_t i = 0; i < l.size(); ++i) {
    const int c = counts ? counts[i] : 0;
    if (r.repetition_penalty != 1.0f && (c > 0 || (seen && seen[i])))
      l[i] = l[i] > 0 ? l[i] / r.repetition_penalty : l[i] * r.repetition_penalty;
    if (c > 0 && (r.frequency_penalty != 0.0f || r.presence_penalty != 0.0f))
      l[i] -= r.frequency_penalty * float(c) + r.presence_penalty;
  }
}

Ref reference(std::vector<float> l, const SamplingRow& r, const uint8_t* seen,
              const int32_t* counts, const uint32_t* mask = nullptr) {
  Ref out;
  const size_t n = l.size();
  apply_penalties_ref(l, r, seen, counts);
  if (mask) {
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
      if (!((mask[i >> 5] >> (i & 31)) & 1u))
        l[i] = -std::numeric_limits<float>::infinity();
      else
        any = true;
    }
    if (!any) {
      out.token = 0;  // nothing allowed: id 0, as the CPU sampler
      return out;
    }
  }
  const size_t amax = size_t(std::max_element(l.begin(), l.end()) - l.begin());
  if (r.temperature <= 1e-6f) {
    out.token = int(amax);
    for (size_t j = 0; j < n; ++j)
      if (j != amax && l[j] != l[amax] &&
          std::abs(l[j] - l[amax]) <= 1e-5 * std::max(1.0f, std::abs(l[amax])))
        out.ambiguous = true;
    return out;
  }
  const double mx = l[amax];
  double sum = 0;
  out.prob.resize(n);
  for (size_t i = 0; i < n; ++i) sum += out.prob[i] = std::exp((double(l[i]) - mx) / r.temperature);
  for (double& p : out.prob) p /= sum;
  std::vector<double> s(out.prob);
  std::sort(s.begin(), s.end(), std::greater<double>());
  double tau = r.min_p > 0 ? r.min_p * s[0] : 0.0;
  const size_t k = (r.top_k > 0 && size_t(r.top_k) < n) ? size_t(r.top_k) : n;
  if (k < n || r.top_p < 1.0f) {
    double tau_p = s[k - 1], mass_k = 0;
    for (size_t i = 0; i < k; ++i) mass_k += s[i];
    if (r.top_p < 1.0f) {
      if (k < n && s[k] >= s[k - 1] * (1 - 1e-4)) out.ambiguous = true;  // near-ties change mass_k
      const double target = r.top_p * mass_k;
      double cum = 0;
      for (size_t i = 0; i < k; ++i) {
        const double before = cum;
        cum += s[i];
        if (cum >= target) {
          tau_p = s[i];
          if (std::abs(cum - target) <= 1e-5 * mass_k || std::abs(before - target) <= 1e-5 * mass_k)
            out.ambiguous = true;
          break;
        }
      }
    }
    tau = std::max({tau, s[k - 1], tau_p});
  }
  if (mask) tau = std::max(tau, double(std::numeric_limits<float>::min()));
  out.tau = tau;
  double kept = 0;
  for (double p : out.prob) {
    if (p >= tau) kept += p;
    if (tau > 0 && p != tau && std::abs(p - tau) <= 1e-4 * tau) out.ambiguous = true;
  }
  const double target = double(philox_uniform(r.seed, r.step)) * kept;
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (out.prob[i] < tau) continue;
    const double before = cum;
    out.token = int(i);
    cum += out.prob[i];
    if (cum > target) {
      if (std::abs(cum - target) <= 1e-5 * kept || std::abs(before - target) <= 1e-5 * kept)
        out.ambiguous = true;
      break;
    }
  }
  return out;
}

struct Batch {
  int vocab = 0, num_slots = 0;
  std::vector<float> logits;  // [rows, vocab]
  std::vector<SamplingRow> rows;
  std::vector<uint8_t> prompt_mask;    // [num_slots, vocab]
  std::vector<int32_t> output_counts;  // [num_slots, vocab]
  std::vector<uint32_t> token_masks;   // [mask rows, mask_words] (SamplingRow::mask_row)
  int mask_words = 0;
};

struct BatchOut {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::vector<int32_t> output_counts;
};

void run_batch(const Batch& b, BatchOut* out) {
  const int R = int(b.rows.size());
  DeviceBuffer d_logits(b.logits.size(), 4), d_rows(R, sizeof(SamplingRow)), d_tokens(R, 4);
  DeviceBuffer d_mask(std::max<size_t>(b.prompt_mask.size(), 1), 1);
  DeviceBuffer d_counts(std::max<size_t>(b.output_counts.size(), 1), 4);
  d_logits.upload(b.logits.data());
  d_rows.upload(b.rows.data());
  d_tokens.poison();
  if (b.num_slots) {
    d_mask.upload(b.prompt_mask.data());
    d_counts.upload(b.output_counts.data());
  }
  kernels::SampleBatch p;
  p.num_rows = R;
  p.vocab = b.vocab;
  p.logits = d_logits.as<float>();
  p.rows = d_rows.as<SamplingRow>();
  p.output_counts = b.num_slots ? d_counts.as<int32_t>() : nullptr;
  p.prompt_mask = b.num_slots ? d_mask.as<uint8_t>() : nullptr;
  p.out_tokens = d_tokens.as<int32_t>();
  DeviceBuffer d_token_masks(std::max<size_t>(b.token_masks.size(), 1), 4);
  if (!b.token_masks.empty()) {
    d_token_masks.upload(b.token_masks.data());
    p.token_masks = d_token_masks.as<uint32_t>();
    p.mask_words = b.mask_words;
  }
  CUDA_OK(kernels::launch_sample(p, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_logits.check_guards());
  EXPECT_TRUE(d_tokens.check_guards());
  EXPECT_TRUE(d_counts.check_guards());
  out->tokens.resize(R);
  d_tokens.download(out->tokens.data());
  out->logits.resize(b.logits.size());
  d_logits.download(out->logits.data());
  out->output_counts.resize(b.output_counts.size());
  if (b.num_slots) d_counts.download(out->output_counts.data());
  for (int32_t t : out->tokens)
    ASSERT_TRUE(t >= 0 && t < b.vocab) << "token " << t << " unwritten or out of range";
}

// Checks every row against the reference; returns the number of ambiguous rows.
int check_against_reference(const Batch& b, const BatchOut& got) {
  int ambiguous = 0;
  for (size_t i = 0; i < b.rows.size(); ++i) {
    const SamplingRow& r = b.rows[i];
    const size_t off = size_t(r.state_slot) * b.vocab;
    const std::vector<float> logits(b.logits.begin() + i * b.vocab,
                                    b.logits.begin() + (i + 1) * b.vocab);
    const Ref ref = reference(
        logits, r, r.state_slot >= 0 && b.num_slots ? b.prompt_mask.data() + off : nullptr,
        r.state_slot >= 0 && b.num_slots ? b.output_counts.data() + off : nullptr,
        r.mask_row >= 0 ? b.token_masks.data() + size_t(r.mask_row) * b.mask_words : nullptr);
    const int token = got.tokens[i];
    SCOPED_TRACE("row " + std::to_string(i) + " T=" + std::to_string(r.temperature) +
                 " top_k=" + std::to_string(r.top_k) + " top_p=" + std::to_string(r.top_p) +
                 " min_p=" + std::to_string(r.min_p) + " seed=" + std::to_string(r.seed));
    if (!ref.prob.empty()) {
      EXPECT_GE(ref.prob[token], ref.tau * (1 - 1e-3))
          << "token " << token << " outside the kept set";
    }
    if (ref.ambiguous) {
      ++ambiguous;
    } else {
      EXPECT_EQ(token, ref.token);
    }
  }
  return ambiguous;
}

// Background N(0, 1) logits with 24 "spikes" at logits 4 + 0.45 j: well separated tokens that
// carry most of the mass, so thresholds and draws are rarely ambiguous.
std::vector<float> spiky_logits(int vocab, std::mt19937& rng) {
  std::vector<float> l = random_vector(vocab, rng);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  std::set<int> used;
  for (int j = 0; j < std::min(24, vocab / 2); ++j) {
    int id;
    do id = pick(rng);
    while (!used.insert(id).second);
    l[id] = 4.0f + 0.45f * float(j);
  }
  return l;
}

SamplingRow make_row(float temperature, int top_k, float top_p, float min_p, uint64_t seed,
                     uint64_t step) {
  SamplingRow r;
  r.temperature = temperature;
  r.top_k = top_k;
  r.top_p = top_p;
  r.min_p = min_p;
  r.seed = seed;
  r.step = step;
  return r;
}

// The parameter sets cycled through the rows of the exactness tests.
std::vector<SamplingRow> parameter_sets(int vocab) {
  return {
      make_row(1.0f, 0, 1.0f, 0.0f, 0, 0),          // plain sampling over the whole vocab
      make_row(0.8f, 5, 1.0f, 0.0f, 0, 0),          // top-k
      make_row(1.0f, 0, 0.9f, 0.0f, 0, 0),          // top-p
      make_row(1.2f, 0, 1.0f, 0.05f, 0, 0),         // min-p
      make_row(0.7f, 16, 0.8f, 0.02f, 0, 0),        // all three
      make_row(0.0f, 0, 1.0f, 0.0f, 0, 0),          // greedy
      make_row(1.0f, 1, 1.0f, 0.0f, 0, 0),          // top-k 1
      make_row(1.0f, vocab + 5, 1.0f, 0.0f, 0, 0),  // top-k >= vocab: off
      make_row(1.5f, 200, 0.95f, 0.0f, 0, 0),       // top-p within a larger top-k
  };
}

TEST(Sample, MatchesTheCpuReferenceOnSeparatedDistributions) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(21);
  for (int vocab : {97, 4096, 32000, 128256}) {
    SCOPED_TRACE("vocab=" + std::to_string(vocab));
    Batch b;
    b.vocab = vocab;
    const std::vector<SamplingRow> sets = parameter_sets(vocab);
    const int R = 72;
    for (int i = 0; i < R; ++i) {
      const std::vector<float> l = spiky_logits(vocab, rng);
      b.logits.insert(b.logits.end(), l.begin(), l.end());
      SamplingRow r = sets[i % sets.size()];
      r.seed = 1000 + i;
      r.step = i * 13;
      b.rows.push_back(r);
    }
    BatchOut got;
    run_batch(b, &got);
    const int ambiguous = check_against_reference(b, got);
    EXPECT_LE(ambiguous, R / 10) << "too many rows too close to call for the test to mean much";
  }
}

// Grammar masks (engine/grammar): masked rows draw only allowed tokens, for every parameter
// set, exactly as the reference; unmasked rows in the same batch give the tokens they give
// with no masks at all; a row whose mask allows nothing gives id 0.
TEST(Sample, TokenMasksAreHonouredAndCostUnmaskedRowsNothing) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(31);
  for (int vocab : {97, 4099, 128256}) {
    SCOPED_TRACE("vocab=" + std::to_string(vocab));
    Batch b;
    b.vocab = vocab;
    b.mask_words = (vocab + 31) / 32 + 1;  // a wider stride than needed, as a caller may use
    const std::vector<SamplingRow> sets = parameter_sets(vocab);
    const int R = 54;
    int mask_rows = 0;
    for (int i = 0; i < R; ++i) {
      const std::vector<float> l = spiky_logits(vocab, rng);
      b.logits.insert(b.logits.end(), l.begin(), l.end());
      SamplingRow r = sets[i % sets.size()];
      r.seed = 2000 + i;
      r.step = i * 7;
      if (i % 3 != 2) {
        r.mask_row = mask_rows++;
        std::vector<uint32_t> m(b.mask_words, 0);
        if (i != 0) {  // row 0 allows nothing
          const int allowed = i % 3 == 0 ? 1 + i % 4 : std::max(2, vocab / 20);
          for (int k = 0; k < allowed; ++k) {
            const int id = int(rng() % vocab);
            m[id >> 5] |= 1u << (id & 31);
          }
        }
        b.token_masks.insert(b.token_masks.end(), m.begin(), m.end());
      }
      b.rows.push_back(r);
    }
    BatchOut got;
    run_batch(b, &got);
    // Rows whose masks allow a few background tokens of the small vocabulary (N(0, 1) logits
    // close together) are more often too close to call: 6 of the 54 at vocab 97 on the H100.
    EXPECT_LE(check_against_reference(b, got), R / 6);
    for (int i = 0; i < R; ++i) {
      const SamplingRow& r = b.rows[i];
      if (r.mask_row < 0) continue;
      const uint32_t* m = b.token_masks.data() + size_t(r.mask_row) * b.mask_words;
      const int t = got.tokens[i];
      if (i == 0) {
        EXPECT_EQ(t, 0);
      } else {
        EXPECT_TRUE((m[t >> 5] >> (t & 31)) & 1u) << "row " << i << " drew disallowed token " << t;
      }
    }
    Batch unmasked = b;
    unmasked.token_masks.clear();
    for (auto& r : unmasked.rows) r.mask_row = -1;
    BatchOut plain;
    run_batch(unmasked, &plain);
    for (int i = 0; i < R; ++i) {
      if (b.rows[i].mask_row < 0) {
        EXPECT_EQ(got.tokens[i], plain.tokens[i]) << "row " << i;
      }
    }
  }
}

TEST(Sample, FlatDistributionsStayInTheKeptSet) {
  // Flat logits: the top-p candidates never fit in shared memory, so the whole search runs over
  // the row in global memory. Near-equal probabilities make exact tokens meaningless; the kept
  // set (with slack) and a spread of distinct tokens are checked.
  RILL_REQUIRE_GPU();
  std::mt19937 rng(22);
  for (int vocab : {32000, 128256}) {
    Batch b;
    b.vocab = vocab;
    const int R = 64;
    for (int i = 0; i < R; ++i) {
      const std::vector<float> l = random_vector(vocab, rng, 0.5f);
      b.logits.insert(b.logits.end(), l.begin(), l.end());
      b.rows.push_back(make_row(1.0f, i % 2 ? 0 : 20000, 0.5f, 0.0f, 77 + i, i));
    }
    BatchOut got;
    run_batch(b, &got);
    check_against_reference(b, got);
    EXPECT_GE(std::set<int32_t>(got.tokens.begin(), got.tokens.end()).size(), size_t(R * 9 / 10));
  }
}

TEST(Sample, EmpiricalFrequenciesMatchTheKeptDistribution) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(23);
  const int vocab = 97, R = 8192;
  const std::vector<float> l = random_vector(vocab, rng, 2.0f);
  for (const SamplingRow& params :
       {make_row(0.7f, 10, 0.8f, 0.02f, 0, 0), make_row(1.0f, 0, 1.0f, 0.0f, 0, 0),
        make_row(1.3f, 0, 0.6f, 0.0f, 0, 0)}) {
    Batch b;
    b.vocab = vocab;
    for (int i = 0; i < R; ++i) {
      b.logits.insert(b.logits.end(), l.begin(), l.end());
      SamplingRow r = params;
      r.seed = 5;
      r.step = uint64_t(i) * 7;  // one sequence's successive draws
      b.rows.push_back(r);
    }
    BatchOut got;
    run_batch(b, &got);
    EXPECT_LE(check_against_reference(b, got), R / 50);
    const Ref ref = reference(l, params, nullptr, nullptr);
    double kept = 0;
    for (double p : ref.prob) kept += p >= ref.tau ? p : 0;
    std::vector<int> hist(vocab);
    for (int32_t t : got.tokens) ++hist[t];
    for (int j = 0; j < vocab; ++j) {
      const double q = ref.prob[j] >= ref.tau ? ref.prob[j] / kept : 0.0;
      const double f = double(hist[j]) / R;
      EXPECT_NEAR(f, q, 5 * std::sqrt(q * (1 - q) / R) + 1e-3) << "token " << j;
    }
  }
}

TEST(Sample, SameSeedAndStepGiveTheSameTokens) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(24);
  Batch b;
  b.vocab = 32000;
  for (int i = 0; i < 16; ++i) {
    const std::vector<float> l = random_vector(b.vocab, rng, 1.5f);
    b.logits.insert(b.logits.end(), l.begin(), l.end());
    b.rows.push_back(make_row(0.9f, i % 3 ? 50 : 0, 0.9f, 0.01f, 9, 100));
  }
  BatchOut first, second;
  run_batch(b, &first);
  run_batch(b, &second);
  EXPECT_EQ(first.tokens, second.tokens);
  for (auto& r : b.rows) ++r.step;  // the next draw of each sequence differs somewhere
  BatchOut next;
  run_batch(b, &next);
  EXPECT_NE(first.tokens, next.tokens);
}

TEST(Sample, GreedyTakesTheLowestIdOnTies) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(25);
  for (int vocab : {97, 4096, 32000, 128256}) {
    Batch b;
    b.vocab = vocab;
    std::vector<int> want;
    for (int i = 0; i < 4; ++i) {
      std::vector<float> l = random_vector(vocab, rng);
      const std::vector<int> ties = {vocab - 1, (vocab / 3 + i) % vocab, (7 * i + 5) % vocab};
      for (int id : ties) l[id] = 9.5f;
      want.push_back(*std::min_element(ties.begin(), ties.end()));
      b.logits.insert(b.logits.end(), l.begin(), l.end());
      b.rows.push_back(make_row(i % 2 ? 0.0f : 1e-7f, 0, 1.0f, 0.0f, 0, 0));
    }
    b.logits.insert(b.logits.end(), vocab, 0.25f);  // all equal: id 0
    b.rows.push_back(make_row(0.0f, 0, 1.0f, 0.0f, 0, 0));
    want.push_back(0);
    b.logits.insert(b.logits.end(), vocab,
                    -std::numeric_limits<float>::infinity());  // all -inf: id 0
    b.rows.push_back(make_row(0.0f, 0, 1.0f, 0.0f, 0, 0));
    want.push_back(0);
    BatchOut got;
    run_batch(b, &got);
    EXPECT_EQ(got.tokens, std::vector<int32_t>(want.begin(), want.end())) << "vocab=" << vocab;
  }
}

TEST(Sample, PenaltiesAndCountsFollowTheCpuSampler) {
  RILL_REQUIRE_GPU();
  std::mt19937 rng(26);
  for (int vocab : {4096, 32000}) {
    Batch b;
    b.vocab = vocab;
    b.num_slots = 5;
    b.prompt_mask.assign(size_t(b.num_slots) * vocab, 0);
    b.output_counts.assign(size_t(b.num_slots) * vocab, 0);
    std::uniform_real_distribution<float> u(0, 1);
    for (size_t i = 0; i < b.prompt_mask.size(); ++i) {
      if (u(rng) < 0.03f) b.prompt_mask[i] = 1;
      if (u(rng) < 0.03f) b.output_counts[i] = 1 + int(u(rng) * 3);
    }
    // Greedy and sampling rows with penalties (distinct slots), one without state.
    const int slots[] = {2, 0, -1, 4, 1};
    for (int i = 0; i < 5; ++i) {
      std::vector<float> l = random_vector(vocab, rng, 2.0f);
      if (slots[i] >= 0)  // make the penalties decide: a penalised token at the top
        for (int j = 0; j < vocab; ++j)
          if (b.output_counts[size_t(slots[i]) * vocab + j]) l[j] += 3.0f;
      b.logits.insert(b.logits.end(), l.begin(), l.end());
      SamplingRow r = make_row(i < 3 ? 0.0f : 0.8f, i < 3 ? 0 : 20, 1.0f, 0.0f, 31 + i, 4);
      r.state_slot = slots[i];
      r.repetition_penalty = 1.3f;
      r.frequency_penalty = 0.4f;
      r.presence_penalty = 0.6f;
      b.rows.push_back(r);
    }
    BatchOut got;
    run_batch(b, &got);
    EXPECT_EQ(check_against_reference(b, got), 0);
    // Greedy rows keep the penalised logits in place.
    for (int i = 0; i < 3; ++i) {
      std::vector<float> want(b.logits.begin() + size_t(i) * vocab,
                              b.logits.begin() + size_t(i + 1) * vocab);
      const size_t off = size_t(std::max(slots[i], 0)) * vocab;
      apply_penalties_ref(want, b.rows[i], b.prompt_mask.data() + off,
                          b.output_counts.data() + off);
      const std::vector<float> have(got.logits.begin() + size_t(i) * vocab,
                                    got.logits.begin() + size_t(i + 1) * vocab);
      EXPECT_LE(normalized_error(have, want), 1e-6) << "row " << i;
      EXPECT_LE(max_abs_error(have, want), 1e-5) << "row " << i;
    }
    // Counts: +1 at (slot, token) for rows with a slot, nothing else.
    std::vector<int32_t> want_counts = b.output_counts;
    for (int i = 0; i < 5; ++i)
      if (slots[i] >= 0) ++want_counts[size_t(slots[i]) * vocab + got.tokens[i]];
    EXPECT_EQ(got.output_counts, want_counts);
  }
}

TEST(MarkPrompt, SetsTheSlotRowOnly) {
  RILL_REQUIRE_GPU();
  const int vocab = 1001, slots = 3, slot = 1;
  const std::vector<int32_t> tokens = {0, 5, 5, 1000, -3, 1001, 77, 999};
  DeviceBuffer d_mask(size_t(slots) * vocab, 1), d_tokens(tokens.size(), 4);
  std::vector<uint8_t> mask(size_t(slots) * vocab, 0);
  d_mask.upload(mask.data());
  d_tokens.upload(tokens.data());
  CUDA_OK(kernels::launch_mark_prompt(d_mask.as<uint8_t>(), vocab, slot, d_tokens.as<int32_t>(),
                                      int(tokens.size()), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(d_mask.check_guards());
  std::vector<uint8_t> got(mask.size());
  d_mask.download(got.data());
  for (int32_t t : tokens)
    if (t >= 0 && t < vocab) mask[size_t(slot) * vocab + t] = 1;
  EXPECT_EQ(got, mask);
}

TEST(Sample, RejectsBadArguments) {
  kernels::SampleBatch p;
  p.num_rows = 1;
  p.vocab = 0;
  EXPECT_EQ(kernels::launch_sample(p, nullptr), cudaErrorInvalidValue);
  p.vocab = 100;  // no logits / rows / out_tokens
  EXPECT_EQ(kernels::launch_sample(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace rill::testing
