// Prefix caching through a runner, for every runner (tests/engine/cpu_prefix_runner_test.cc,
// cuda_prefix_cache_test.cc): a sequence that starts from cached blocks (shared with the sequence
// that computed them, copied on write when its ring wraps over them) gives the logits and greedy
// tokens of one that computed everything itself; blocks of generated tokens, named when a
// pipelined step reports its sample (kLastSampled), hold what a recompute gives; and the serving
// engine gives the same tokens with the cache on and off, greedy and seeded.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/model/model.h"
#include "engine/runner/runner.h"
#include "engine/serving/serving_engine.h"
#include "tests/engine/golden.h"

namespace rill::testing {

/// A fresh runner of the model under test; `graphs`: CUDA graphs on (runners without ignore it).
using MakeRunner = std::function<std::unique_ptr<ModelRunner>(bool graphs)>;

inline std::vector<int32_t> eval_tokens(size_t from, size_t n) {
  const auto ids = load_golden("default_eval_ids.json").at("eval_ids").get<std::vector<int32_t>>();
  return {ids.begin() + static_cast<std::ptrdiff_t>(from),
          ids.begin() + static_cast<std::ptrdiff_t>(from + n)};
}

inline double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Greedy decode of sequence `id` (its prompt's tail `feed` not yet fed): the last-position logits
// and the token of each of `steps` steps.
struct Decoded {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
};
inline Decoded decode(ModelRunner& r, SeqId id, std::vector<int32_t> feed, int steps) {
  Decoded d;
  for (int s = 0; s < steps; ++s) {
    StepInput in{id, feed, LogitsMode::kLast, true};
    const StepOutput o = r.step(std::span<const StepInput>(&in, 1));
    d.logits.push_back(o.logits);
    d.tokens.push_back(o.sampled[0]);
    feed = {o.sampled[0]};
  }
  return d;
}

inline void expect_same(const Decoded& got, const Decoded& want, const std::string& what) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t s = 0; s < want.tokens.size(); ++s) {
    EXPECT_LT(rel_err(got.logits[s], want.logits[s]), 2e-2) << what << " step " << s;
    ASSERT_EQ(got.tokens[s], want.tokens[s]) << what << " step " << s;
  }
}

// For each policy: A computes the prompt and publishes it; B starts from A's blocks (while A
// still holds them, so B's ring copies them before it wraps) and must decode as C, which computed
// everything itself (nothing looked up). The streaming prompts stay within the ring (A's blocks
// are still in place), and B's decode steps wrap it. Each case has a prompt of its own: a full
// cache and a streaming one with block-aligned sinks lay out a prefix alike and share its blocks,
// so the blocks an earlier case left cached would serve B instead of A's.
inline void check_cached_blocks_equal_computing(const MakeRunner& make) {
  struct Case {
    CachePolicy policy;
    size_t prompt_len;
    int64_t cached;  // whole blocks below the horizon, the prompt's last token left out
    size_t from;     // where the prompt starts in the evaluation text
  };
  const Case cases[] = {
      {CachePolicy::full(), 200, 192, 0},
      {CachePolicy::streaming(16, 120), 130, 128, 200},     // 16 + 112 of 16 + 128 slots
      {CachePolicy::streaming(4, 100), 110, 4 + 96, 330}};  // sink block [0, 4), 6 more
  for (bool graphs : {true, false}) {
    auto r = make(graphs);
    SeqId id = 1;
    for (const Case& k : cases) {
      const CachePolicy& p = k.policy;
      const std::vector<int32_t> prompt = eval_tokens(k.from, k.prompt_len);
      SCOPED_TRACE(p.to_string() + (graphs ? " graphs" : " eager"));
      const BlockHash root = r->kv().prefix_root(p, "");
      const SeqId a = id++, b = id++, c = id++;
      r->add_sequence({a, p, {.temperature = 0.0f}, {}, PrefixMatch{.root = root}, {}});
      for (size_t pos = 0; pos < prompt.size(); pos += 64) {
        const StepInput in{a,
                           std::span<const int32_t>(prompt).subspan(
                               pos, std::min<size_t>(64, prompt.size() - pos)),
                           LogitsMode::kNone, false};
        r->step(std::span<const StepInput>(&in, 1));
      }
      const PrefixMatch match = r->kv().match_prefix(p, root, prompt);
      EXPECT_EQ(match.tokens, k.cached);
      r->add_sequence({b, p, {.temperature = 0.0f}, {}, match, prompt});
      ASSERT_EQ(r->kv().sequence(b).num_tokens, match.tokens);
      const Decoded got =
          decode(*r, b, std::vector<int32_t>(prompt.begin() + match.tokens, prompt.end()), 24);
      r->add_sequence({c, p, {.temperature = 0.0f}});
      const Decoded want = decode(*r, c, prompt, 24);
      expect_same(got, want, p.to_string());
      if (p.is_streaming()) {
        EXPECT_GT(r->kv().stats().block_copies, 0) << "B's ring copied A's blocks";
      }
      for (SeqId s : {a, b, c}) r->remove_sequence(s);
    }
  }
}

// Generated tokens fed as kLastSampled by pipelined steps: their blocks are published once
// finish() reports the samples, and hold what feeding those tokens as a prompt gives.
inline void check_pipelined_samples_name_their_blocks(const MakeRunner& make) {
  auto r = make(true);
  const CachePolicy p = CachePolicy::full();
  const BlockHash root = r->kv().prefix_root(p, "");
  const std::vector<int32_t> prompt = eval_tokens(0, 40);
  r->add_sequence({1, p, {.temperature = 0.0f}, {}, PrefixMatch{.root = root}, {}});
  // Step 0 feeds the prompt; step s (1..40) feeds step s-1's sample as kLastSampled, launched
  // before that sample reached the host.
  std::vector<int32_t> generated;
  StepInput first{1, prompt, LogitsMode::kNone, true};
  r->launch(std::span<const StepInput>(&first, 1));
  const int32_t last = kLastSampled;
  const StepInput next{1, std::span<const int32_t>(&last, 1), LogitsMode::kNone, true};
  for (int s = 0; s < 40; ++s) {
    r->launch(std::span<const StepInput>(&next, 1));
    generated.push_back(r->finish().sampled[0]);
  }
  generated.push_back(r->finish().sampled[0]);  // step 40's sample: never fed
  // 80 tokens fed (5 whole blocks, the last ending with a kLastSampled token), then the next.
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), generated.begin(), generated.end());
  const PrefixMatch match = r->kv().match_prefix(p, root, history);
  EXPECT_EQ(match.tokens, 80) << "every block of sampled tokens is named by the tokens fed";
  r->add_sequence({2, p, {.temperature = 0.0f}, {}, match, history});
  const Decoded got =
      decode(*r, 2, std::vector<int32_t>(history.begin() + match.tokens, history.end()), 8);
  r->add_sequence({3, p, {.temperature = 0.0f}});
  const Decoded want = decode(*r, 3, history, 8);
  expect_same(got, want, "after pipelined samples");
}

// What a request streamed: its tokens and, per token, the sampled token's logprob and the top 20.
struct Streamed {
  std::vector<int32_t> ids;
  std::vector<SampleLogprobs> logprobs;
};

// The serving engine on a runner with the cache on and off.
struct PrefixTestEngine {
  PrefixTestEngine(const Model& m, std::unique_ptr<ModelRunner> runner, bool prefix_caching) {
    SchedulerConfig config;
    config.enable_prefix_caching = prefix_caching;
    config.max_num_seqs = 16;
    config.max_num_batched_tokens = 2048;
    config.queue_timeout = std::chrono::hours(1);
    const std::vector<int> stops = m.stop_token_ids();
    config.eos_token_ids.assign(stops.begin(), stops.end());
    engine = std::make_unique<ServingEngine>(std::move(runner), *m.tokenizer, config, metrics);
  }
  // Runs `reqs` in waves (each wave submitted at once, after the previous finished).
  std::vector<Streamed> run(const std::vector<std::vector<Request>>& waves, int* cached) {
    std::vector<Streamed> out;
    for (const std::vector<Request>& wave : waves) {
      std::vector<RequestHandle> handles;
      for (const Request& r : wave) handles.push_back(engine->submit(r));
      for (RequestHandle& h : handles) {
        Streamed got;
        for (;;) {
          auto e = h.next(std::chrono::seconds(120));
          if (!e) {
            ADD_FAILURE() << "no final event";
            break;
          }
          if (auto* chunk = std::get_if<TokenChunk>(&*e)) {
            got.ids.insert(got.ids.end(), chunk->ids.begin(), chunk->ids.end());
            got.logprobs.insert(got.logprobs.end(), chunk->logprobs.begin(), chunk->logprobs.end());
            continue;
          }
          *cached += std::get<FinalEvent>(*e).usage.cached_tokens;
          break;
        }
        out.push_back(std::move(got));
      }
    }
    return out;
  }
  MetricsRegistry metrics;
  std::unique_ptr<ServingEngine> engine;
};

// The logprob of `id` among `lp`'s top tokens, if it is one of them.
inline std::optional<float> top_logprob(const SampleLogprobs& lp, int32_t id) {
  for (const TokenLogprob& t : lp.top)
    if (t.token == id) return t.logprob;
  return std::nullopt;
}

// `on` (cache on) against `off`. Exactly (the CPU runner: fp32, the same arithmetic whatever the
// batch), or closely: in 16-bit arithmetic a prefix's KV computed in a step of another shape
// rounds differently, so a stream with the cache on may leave the cache-off one where its choice
// is all but even. Closely: token for token, the sampled tokens' logprobs within `tol`, up to the
// first difference; there the two distributions agree (their most likely token and its logprob)
// and, for greedy requests, each stream's token is within `tol` of the other's choice. A sampled
// stream may part at any token: the sampler walks the kept tokens' cumulative mass in id order
// (kernels/src/sampling.cu), so a tiny shift of mass moves the draw to a neighbouring id, however
// unlikely. A cached KV that is wrong moves logprobs by far more than `tol`.
inline void expect_same_stream(const Streamed& on, const Streamed& off, bool greedy, bool exact,
                               const std::string& what) {
  if (exact) {
    EXPECT_EQ(on.ids, off.ids) << what;  // and close, as follows
  }
  constexpr float tol = 0.15f;
  ASSERT_EQ(on.ids.size(), off.ids.size()) << what;
  ASSERT_EQ(on.logprobs.size(), on.ids.size()) << what;
  ASSERT_EQ(off.logprobs.size(), off.ids.size()) << what;
  for (size_t i = 0; i < on.ids.size(); ++i) {
    const SampleLogprobs &a = on.logprobs[i], &b = off.logprobs[i];
    if (on.ids[i] == off.ids[i]) {
      EXPECT_NEAR(a.sampled, b.sampled, tol) << what << " token " << i;
      continue;
    }
    ASSERT_FALSE(a.top.empty() || b.top.empty()) << what;
    EXPECT_NEAR(a.top[0].logprob, b.top[0].logprob, tol) << what << " token " << i;
    if (greedy) {
      const std::optional<float> on_in_off = top_logprob(b, on.ids[i]);
      const std::optional<float> off_in_on = top_logprob(a, off.ids[i]);
      ASSERT_TRUE(on_in_off && off_in_on)
          << what << " token " << i << ": " << on.ids[i] << " (cache on) against " << off.ids[i]
          << ", not among the other's top logprobs";
      EXPECT_LT(b.sampled - *on_in_off, tol) << what << " token " << i << " (cache off's margin)";
      EXPECT_LT(a.sampled - *off_in_on, tol) << what << " token " << i << " (cache on's margin)";
    }
    std::printf("%s: the streams part at token %zu of %zu (%d against %d)\n", what.c_str(), i,
                on.ids.size(), on.ids[i], off.ids[i]);
    return;  // past the first difference the streams continue different texts
  }
}

/// `exact`: outputs equal token for token; else close (expect_same_stream).
inline void check_serving_outputs_equal_the_cache_off(const Model& m, const MakeRunner& make,
                                                      bool exact) {
  const std::vector<int32_t> shared = eval_tokens(0, 150);
  auto request = [&](std::vector<int32_t> tail, int variant,
                     CachePolicy cache = CachePolicy::full()) {
    Request r;
    r.prompt = shared;
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 60;
    r.ignore_eos = true;
    r.cache = cache;
    r.logprobs = 20;
    if (variant % 2)
      r.sampling = {
          .temperature = 0.8f, .top_p = 0.9f, .repetition_penalty = 1.2f, .seed = 11u + variant};
    else
      r.sampling.temperature = 0;
    return r;
  };
  // Identical prompts together, then again one after another; prompts sharing part of a block;
  // streaming requests whose rings wrap over the shared blocks.
  const std::vector<std::vector<Request>> waves = {
      {request({}, 0), request({}, 0), request({}, 1)},
      {request({}, 0), request({}, 1), request(eval_tokens(300, 5), 0),
       request(eval_tokens(310, 21), 1)},
      {request(eval_tokens(330, 3), 0, CachePolicy::streaming(16, 100)),
       request(eval_tokens(330, 3), 1, CachePolicy::streaming(16, 100)),
       request(eval_tokens(340, 9), 0, CachePolicy::streaming(4, 96)), request({}, 0)},
  };
  std::vector<bool> greedy;
  for (const auto& wave : waves)
    for (const Request& r : wave) greedy.push_back(r.sampling.temperature == 0);
  int cached_on = 0, cached_off = 0;
  const auto on = PrefixTestEngine(m, make(true), true).run(waves, &cached_on);
  const auto off = PrefixTestEngine(m, make(true), false).run(waves, &cached_off);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i)
    expect_same_stream(on[i], off[i], greedy[i], exact, "request " + std::to_string(i));
  EXPECT_GT(cached_on, 0);
  EXPECT_EQ(cached_off, 0);
}

}  // namespace rill::testing
