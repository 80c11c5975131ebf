// Shared by the scheduler tests: the default model on the CPU runner behind a ServingEngine,
// collecting a request's events, and the offline generator as the independent reference.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/cpu_runner.h"
#include "engine/model/model.h"
#include "engine/offline/generator.h"
#include "engine/serving/serving_engine.h"

namespace rill::testing {

inline const Model& default_model() {
  static const Model m = load_model(std::string(RILL_SOURCE_DIR) + "/models/rill-shakespeare");
  return m;
}

struct EngineFixture {
  explicit EngineFixture(SchedulerConfig config = {}, CpuRunnerOptions options = {.num_threads = 1})
      : EngineFixture(config, std::make_unique<CpuRunner>(default_model(), options)) {}
  EngineFixture(SchedulerConfig config, std::unique_ptr<ModelRunner> runner) {
    const Model& m = default_model();
    // Slow machines (sanitizers, a loaded CI) must not turn queueing into queue timeouts; the
    // queue-timeout test sets its own per request.
    config.queue_timeout = std::chrono::hours(1);
    const std::vector<int> stops = m.stop_token_ids();
    config.eos_token_ids.assign(stops.begin(), stops.end());
    engine = std::make_unique<ServingEngine>(std::move(runner), *m.tokenizer, config, metrics);
  }
  MetricsRegistry metrics{MetricLabels{{"model_name", "rill-shakespeare"}}};
  std::unique_ptr<ServingEngine> engine;
};

/// A runner that forwards everything to a CpuRunner: tests derive from it to change one thing
/// (step limits, how long a restore takes) and keep the reference runner's results.
class ForwardingRunner : public ModelRunner {
 public:
  explicit ForwardingRunner(const Model& m, const CpuRunnerOptions& options = {.num_threads = 1})
      : inner_(m, options) {}
  std::string name() const override { return inner_.name(); }
  const ModelConfig& config() const override { return inner_.config(); }
  const KvCacheManager& kv() const override { return inner_.kv(); }
  void add_sequence(const SequenceSpec& spec) override { inner_.add_sequence(spec); }
  void remove_sequence(SeqId id) override { inner_.remove_sequence(id); }
  void restart_sampling(SeqId id, const SamplingParams& p) override { inner_.restart_sampling(id, p); }
  int host_kv_blocks() const override { return inner_.host_kv_blocks(); }
  int host_kv_blocks_free() const override { return inner_.host_kv_blocks_free(); }
  void offload_sequence(SeqId id) override { inner_.offload_sequence(id); }
  void restore_sequence(SeqId id) override { inner_.restore_sequence(id); }
  bool restore_done(SeqId id) override { return inner_.restore_done(id); }
  std::vector<KvTransfer> completed_transfers() override { return inner_.completed_transfers(); }
  void launch(std::span<const StepInput> inputs) override { inner_.launch(inputs); }
  StepOutput finish() override { return inner_.finish(); }
  void supply_masks(std::span<const LateMask> masks) override { inner_.supply_masks(masks); }

 protected:
  const CpuRunner& inner() const { return inner_; }

 private:
  CpuRunner inner_;
};

/// A CPU runner that checks the KV pool after every call that changes it (on the engine's loop
/// thread): every block's holders are exactly the block tables naming it (none freed while in
/// use) and free + cached + used == total. Counts what it saw in atomics the test reads.
class CheckingRunner final : public ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  void add_sequence(const SequenceSpec& spec) override {
    checked([&] { ForwardingRunner::add_sequence(spec); });
  }
  void remove_sequence(SeqId id) override {
    checked([&] { ForwardingRunner::remove_sequence(id); });
  }
  void offload_sequence(SeqId id) override {
    checked([&] { ForwardingRunner::offload_sequence(id); });
  }
  void restore_sequence(SeqId id) override {
    checked([&] { ForwardingRunner::restore_sequence(id); });
  }
  void launch(std::span<const StepInput> inputs) override {
    checked([&] { ForwardingRunner::launch(inputs); });
  }
  StepOutput finish() override {
    StepOutput out;
    checked([&] { out = ForwardingRunner::finish(); });
    return out;
  }

  std::atomic<int64_t> checks{0}, failures{0}, copies{0}, max_cached{0};
  std::string first_failure;  // written once, before `failures` becomes 1

 private:
  template <typename Fn>
  void checked(Fn&& fn) {
    struct Check {  // after fn, also when it throws
      CheckingRunner& r;
      ~Check() { r.check(); }
    } check{*this};
    fn();
  }
  void check() {
    ++checks;
    std::string why;
    try {
      inner().kv().check_invariants();
      const KvStats s = inner().kv().stats();
      if (s.blocks_free + s.blocks_cached + s.blocks_used != s.blocks_total)
        why = "free + cached + used != total";
      copies = s.block_copies;
      if (s.blocks_cached > max_cached) max_cached = s.blocks_cached;
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty() && failures.load() == 0) {
      first_failure = why;
      ++failures;
    }
  }
};

/// Everything one request produced.
struct Collected {
  std::vector<int32_t> ids;
  std::string text;
  std::vector<SampleLogprobs> logprobs;
  std::vector<std::string> chunk_texts;
  FinalEvent final;
  int finals = 0;
  bool timed_out = false;
};

inline Collected collect(RequestHandle& h, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  Collected c;
  for (;;) {
    auto e = h.next(timeout);
    if (!e) {
      c.timed_out = c.finals == 0;
      return c;
    }
    if (auto* chunk = std::get_if<TokenChunk>(&*e)) {
      EXPECT_EQ(c.finals, 0) << "a chunk after the final event";
      c.ids.insert(c.ids.end(), chunk->ids.begin(), chunk->ids.end());
      c.text += chunk->text;
      c.chunk_texts.push_back(chunk->text);
      c.logprobs.insert(c.logprobs.end(), chunk->logprobs.begin(), chunk->logprobs.end());
    } else {
      c.final = std::get<FinalEvent>(*e);
      ++c.finals;
    }
  }
}

inline std::vector<int32_t> random_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  const int vocab = default_model().config.vocab_size;
  std::vector<int32_t> p(n);
  for (auto& t : p) t = static_cast<int32_t>(rng() % vocab);
  return p;
}

/// A greedy request held to a constraint of `kind` (`text`: its schema, regex or grammar) with a
/// random prompt of `prompt_len` tokens.
inline Request constrained_request(grammar::ConstraintKind kind, std::string text, int max_tokens,
                                   uint32_t seed, int prompt_len) {
  Request r;
  r.prompt = random_prompt(prompt_len, seed);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  OutputConstraint c;
  c.spec.kind = kind;
  c.spec.text = std::move(text);
  r.constraint = std::move(c);
  return r;
}

/// The request run alone through the offline generator on its own runner: the reference.
/// Returns the streamed tokens (a final stop token removed).
inline std::vector<int32_t> reference_tokens(const Request& r) {
  const Model& m = default_model();
  static CpuRunner runner(m, {.num_threads = 1});  // one conversion of the weights for every test
  GenerationRequest g;
  g.prompt = r.prompt;
  g.sampling = r.sampling;
  g.cache = r.cache;
  g.max_tokens = r.max_tokens;
  const std::vector<int> stops = m.stop_token_ids();
  if (!r.ignore_eos) g.stop_token_ids.assign(stops.begin(), stops.end());
  g.stop_token_ids.insert(g.stop_token_ids.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  GenerationResult res = generate(runner, 1, g, {});
  if (res.finish == FinishReason::kStop) res.tokens.pop_back();
  return res.tokens;
}

}  // namespace rill::testing
