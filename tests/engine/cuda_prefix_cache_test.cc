// Prefix caching on the CUDA runner: a sequence that starts from cached blocks (shared with the
// sequence that computed them, copied on write when its ring wraps over them) gives the logits and
// greedy tokens of one that computed everything itself; blocks of generated tokens, named when a
// pipelined step reports its sample (kLastSampled), hold what a recompute gives; and the serving
// engine on the GPU gives the same tokens with the cache on and off, greedy and seeded.
// GPU tests: they skip visibly where no GPU exists and run on the GPU machine before changes land.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/model/model.h"
#include "engine/runner_factory.h"
#include "engine/serving/serving_engine.h"
#include "tests/engine/cuda_test_util.h"
#include "tests/engine/golden.h"

#ifdef RILL_HAVE_CUDA
#include "engine/cuda/cuda_runner.h"
#endif

namespace rill {
namespace {

#ifdef RILL_HAVE_CUDA

using testing::cuda_runner;
using testing::load_golden;
using testing::source_path;

std::vector<int32_t> eval_tokens(size_t from, size_t n) {
  const auto ids = load_golden("default_eval_ids.json").at("eval_ids").get<std::vector<int32_t>>();
  return {ids.begin() + static_cast<std::ptrdiff_t>(from),
          ids.begin() + static_cast<std::ptrdiff_t>(from + n)};
}

double rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
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
Decoded decode(ModelRunner& r, SeqId id, std::vector<int32_t> feed, int steps) {
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

void expect_same(const Decoded& got, const Decoded& want, const std::string& what) {
  ASSERT_EQ(got.tokens.size(), want.tokens.size());
  for (size_t s = 0; s < want.tokens.size(); ++s) {
    EXPECT_LT(rel_err(got.logits[s], want.logits[s]), 2e-2) << what << " step " << s;
    ASSERT_EQ(got.tokens[s], want.tokens[s]) << what << " step " << s;
  }
}

// For each policy: A computes the prompt and publishes it; B starts from A's blocks (while A
// still holds them, so B's ring copies them before it wraps) and must decode as C, which computed
// everything itself (nothing looked up). The streaming prompts stay within the ring (A's blocks
// are still in place), and B's decode steps wrap it.
TEST(CudaPrefixCache, StartingFromCachedBlocksEqualsComputingThem) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  struct Case {
    CachePolicy policy;
    size_t prompt_len;
    int64_t cached;  // whole blocks below the horizon, the prompt's last token left out
  };
  const Case cases[] = {
      {CachePolicy::full(), 200, 192},
      {CachePolicy::streaming(16, 120), 130, 128},     // 16 + 112 of 16 + 128 slots
      {CachePolicy::streaming(4, 100), 110, 4 + 96}};  // sink block [0, 4), 6 more
  for (bool graphs : {true, false}) {
    auto r = cuda_runner(m, graphs);
    SeqId id = 1;
    for (const Case& k : cases) {
      const CachePolicy& p = k.policy;
      const std::vector<int32_t> prompt = eval_tokens(0, k.prompt_len);
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
TEST(CudaPrefixCache, PipelinedSamplesNameTheirBlocks) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  auto r = cuda_runner(m);
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

// The serving engine on the CUDA runner with the cache on and off.
struct GpuEngine {
  GpuEngine(const Model& m, bool prefix_caching) {
    SchedulerConfig config;
    config.enable_prefix_caching = prefix_caching;
    config.max_num_seqs = 16;
    config.max_num_batched_tokens = 2048;
    config.queue_timeout = std::chrono::hours(1);
    const std::vector<int> stops = m.stop_token_ids();
    config.eos_token_ids.assign(stops.begin(), stops.end());
    engine = std::make_unique<ServingEngine>(cuda_runner(m), *m.tokenizer, config, metrics);
  }
  // Runs `reqs` in waves (each wave submitted at once, after the previous finished).
  std::vector<std::vector<int32_t>> run(const std::vector<std::vector<Request>>& waves,
                                        int* cached) {
    std::vector<std::vector<int32_t>> out;
    for (const std::vector<Request>& wave : waves) {
      std::vector<RequestHandle> handles;
      for (const Request& r : wave) handles.push_back(engine->submit(r));
      for (RequestHandle& h : handles) {
        std::vector<int32_t> ids;
        for (;;) {
          auto e = h.next(std::chrono::seconds(120));
          if (!e) {
            ADD_FAILURE() << "no final event";
            break;
          }
          if (auto* chunk = std::get_if<TokenChunk>(&*e)) {
            ids.insert(ids.end(), chunk->ids.begin(), chunk->ids.end());
            continue;
          }
          *cached += std::get<FinalEvent>(*e).usage.cached_tokens;
          break;
        }
        out.push_back(std::move(ids));
      }
    }
    return out;
  }
  MetricsRegistry metrics;
  std::unique_ptr<ServingEngine> engine;
};

TEST(CudaPrefixCache, ServingOutputsEqualTheCacheOff) {
  REQUIRE_CUDA();
  const Model m = load_model(source_path("models/rill-shakespeare"));
  const std::vector<int32_t> shared = eval_tokens(0, 150);
  auto request = [&](std::vector<int32_t> tail, int variant,
                     CachePolicy cache = CachePolicy::full()) {
    Request r;
    r.prompt = shared;
    r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    r.max_tokens = 60;
    r.ignore_eos = true;
    r.cache = cache;
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
  int cached_on = 0, cached_off = 0;
  const auto on = GpuEngine(m, true).run(waves, &cached_on);
  const auto off = GpuEngine(m, false).run(waves, &cached_off);
  ASSERT_EQ(on.size(), off.size());
  for (size_t i = 0; i < on.size(); ++i) EXPECT_EQ(on[i], off[i]) << "request " << i;
  EXPECT_GT(cached_on, 0);
  EXPECT_EQ(cached_off, 0);
}

#else

TEST(CudaPrefixCache, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA: CUDA prefix-cache tests skipped";
}

#endif

}  // namespace
}  // namespace rill
