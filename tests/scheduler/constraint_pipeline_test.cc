// Constrained rows in the two-step pipeline (CPU runner, default model): a constrained sequence
// is launched every step like an unconstrained one, its row taking a late mask
// (StepInput::mask_later, supplied once the step before is finished); its tokens equal a serial
// reference that steps it alone, one step in flight, masks given at launch (the rule before the
// pipeline); the grammar's end conditions hold at the pipeline's edges; a cancellation, a runner
// error and a runner that ignores the late masks while a constrained step is in flight end the
// right requests and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <regex>

#include "engine/grammar/constraint.h"
#include "engine/grammar/vocabulary.h"
#include "engine/scheduler/constraint_state.h"
#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::Collected;
using testing::default_model;
using testing::EngineFixture;
using testing::ForwardingRunner;
using testing::random_prompt;
using testing::reference_tokens;

Request constrained(grammar::ConstraintKind kind, std::string text, int max_tokens, uint32_t seed) {
  return testing::constrained_request(kind, std::move(text), max_tokens, seed, 10 + static_cast<int>(seed % 7));
}

Request choice(std::vector<std::string> choices, int max_tokens, uint32_t seed) {
  Request r = constrained(grammar::ConstraintKind::kChoice, "", max_tokens, seed);
  r.constraint->spec.choices = std::move(choices);
  return r;
}

Request plain(int max_tokens, uint32_t seed) {
  Request r;
  r.prompt = random_prompt(15, seed);
  r.sampling.temperature = seed % 2 ? 0.9f : 0.0f;
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  return r;
}

struct Serial {
  std::vector<int32_t> ids;
  FinishReason reason = FinishReason::kError;
};

// The request alone on its own CPU runner, one step at a time, its mask given at launch from a
// matcher advanced after each finished step: the rule the pipeline replaced. Ends as the engine
// documents: a sampled EOS "stop" (not streamed), a complete grammar "stop" after its last
// token, max_tokens "length".
Serial serial_reference(const Request& r) {
  const Model& m = default_model();
  static CpuRunner runner(m, {.num_threads = 1});
  const std::vector<int> stops = m.stop_token_ids();
  const std::vector<int32_t> eos(stops.begin(), stops.end());
  static grammar::ConstraintCache cache(
      grammar::Vocabulary::from_tokenizer(*m.tokenizer, m.config.vocab_size, eos), {});
  ConstraintState state(cache.get(r.constraint->spec), r.constraint->forced_tokens);
  runner.add_sequence({SeqId(1), r.cache, r.sampling});
  Serial out;
  if (state.status() == ConstraintState::Next::kComplete) {  // ends before any step
    runner.remove_sequence(SeqId(1));
    out.reason = FinishReason::kStop;
    return out;
  }
  StepInput in{SeqId(1), r.prompt, LogitsMode::kNone, true};
  int32_t tok = 0;
  for (;;) {
    in.mask = state.mask();
    tok = runner.step(std::span<const StepInput>(&in, 1)).sampled[0];
    if (std::find(eos.begin(), eos.end(), tok) != eos.end() && !r.ignore_eos &&
        static_cast<int>(out.ids.size()) >= r.min_tokens) {
      out.reason = FinishReason::kStop;
      break;
    }
    const ConstraintState::Next next = state.advance(tok);
    EXPECT_NE(next, ConstraintState::Next::kRejected);
    out.ids.push_back(tok);
    if (next == ConstraintState::Next::kComplete) {
      out.reason = FinishReason::kStop;
      break;
    }
    if (static_cast<int>(out.ids.size()) >= r.max_tokens) {
      out.reason = FinishReason::kLength;
      break;
    }
    in.tokens = std::span<const int32_t>(&tok, 1);
  }
  runner.remove_sequence(SeqId(1));
  return out;
}

// Records, per launch, which runner sequences sampled and which took late masks; can make the
// Nth supply_masks throw, or pass no masks at all (a runner that ignores them).
class RecordingRunner final : public ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  void launch(std::span<const StepInput> inputs) override {
    ForwardingRunner::launch(inputs);
    std::lock_guard lock(mu);
    const int step = launches++;
    for (const StepInput& in : inputs) {
      if (in.sample) sampled_at[in.id].push_back(step);
      late_rows += in.mask_later;
    }
  }
  void supply_masks(std::span<const LateMask> masks) override {
    const int call = supplies++;
    if (call == fail_at) throw Error(ErrorCode::kInternal, "injected supply_masks failure");
    if (ignore_masks) {
      ForwardingRunner::supply_masks({});
      return;
    }
    ForwardingRunner::supply_masks(masks);
  }

  std::mutex mu;
  std::map<SeqId, std::vector<int>> sampled_at;  // runner id -> launches that sampled it
  int launches = 0;
  int64_t late_rows = 0;
  std::atomic<int> supplies{0};
  std::atomic<int> fail_at{-1};
  std::atomic<bool> ignore_masks{false};
};

struct Fixture {
  Fixture() {
    auto r = std::make_unique<RecordingRunner>(default_model());
    runner = r.get();
    engine = std::make_unique<EngineFixture>(SchedulerConfig{}, std::move(r));
  }
  RecordingRunner* runner = nullptr;
  std::unique_ptr<EngineFixture> engine;
};

TEST(ConstraintPipeline, ConstrainedRowsSampleEveryStepAndEqualTheSerialRule) {
  Fixture f;
  std::vector<Request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(plain(40, 900 + i));
  reqs.push_back(constrained(grammar::ConstraintKind::kRegex, "[a-z ]{36}", 36, 11));
  Request sampled = constrained(grammar::ConstraintKind::kRegex, "[a-z ]{30}", 40, 12);
  sampled.sampling.temperature = 1.0f, sampled.sampling.seed = 5, sampled.sampling.top_p = 0.9f;
  reqs.push_back(sampled);
  reqs.push_back(constrained(grammar::ConstraintKind::kJsonObject, "", 32, 13));
  Request penalised = constrained(grammar::ConstraintKind::kRegex, "[a-e]{5}-[0-9]{25}", 40, 14);
  penalised.sampling.temperature = 0.7f, penalised.sampling.seed = 9;
  penalised.sampling.repetition_penalty = 1.3f;
  reqs.push_back(penalised);
  std::vector<RequestHandle> hs;
  for (const Request& r : reqs) hs.push_back(f.engine->engine->submit(r));
  std::vector<Collected> got;
  for (RequestHandle& h : hs) got.push_back(collect(h));
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(got[i].finals, 1) << i;
    if (!reqs[i].constraint) {
      EXPECT_EQ(got[i].ids, reference_tokens(reqs[i])) << i;
      continue;
    }
    const Serial want = serial_reference(reqs[i]);
    EXPECT_EQ(got[i].ids, want.ids) << "request " << i;
    EXPECT_EQ(got[i].final.reason, want.reason)
        << "request " << i << ": " << got[i].final.error_message;
  }
  // Every sequence sampled in consecutive launches from its first sample to its last: the
  // constrained ones no longer sit out the step launched while their sample is in flight.
  std::lock_guard lock(f.runner->mu);
  EXPECT_GT(f.runner->late_rows, 60);
  for (const auto& [id, steps] : f.runner->sampled_at)
    for (size_t k = 1; k < steps.size(); ++k)
      EXPECT_EQ(steps[k], steps[k - 1] + 1) << "sequence " << id << " skipped a step";
}

// A constraint may end on any sample: the prefill's (whose next row is in flight already), a
// decode's, max_tokens exactly there; a complete grammar that allows only EOS ends "stop"
// without it; forced tokens come first; an EOS-only grammar ends at once. Each equals the
// serial rule beside unconstrained neighbours, and nothing of the row in flight leaks.
TEST(ConstraintPipeline, GrammarEndConditionsAtThePipelinesEdges) {
  Fixture f;
  std::vector<Request> reqs;
  reqs.push_back(plain(30, 700));
  reqs.push_back(choice({"a", "b"}, 10, 21));              // complete at the prefill's sample
  reqs.push_back(choice({"to be", "not to be"}, 10, 22));  // complete a few steps in
  for (int n : {1, 2, 3})  // length at the prefill's sample and the two after
    reqs.push_back(constrained(grammar::ConstraintKind::kRegex, "x[a-z]{40}", n, 30 + n));
  Request forced = choice({"yes", "no"}, 10, 40);
  forced.constraint->forced_tokens = {17, 18};
  reqs.push_back(forced);
  Request eos_only = constrained(grammar::ConstraintKind::kRegex, "", 10, 41);  // complete
  reqs.push_back(eos_only);
  reqs.push_back(plain(25, 701));
  std::vector<RequestHandle> hs;
  for (const Request& r : reqs) hs.push_back(f.engine->engine->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Collected c = collect(hs[i]);
    ASSERT_EQ(c.finals, 1) << i;
    if (!reqs[i].constraint) {
      EXPECT_EQ(c.ids, reference_tokens(reqs[i])) << i;
      continue;
    }
    const Serial want = serial_reference(reqs[i]);
    EXPECT_EQ(c.ids, want.ids) << "request " << i;
    EXPECT_EQ(c.final.reason, want.reason) << "request " << i << ": " << c.final.error_message;
    EXPECT_FALSE(c.final.stop_token.has_value()) << i;
  }
  const Collected ab = [&] {
    RequestHandle h = f.engine->engine->submit(choice({"a", "b"}, 10, 21));
    return collect(h);
  }();
  EXPECT_TRUE(ab.text == "a" || ab.text == "b") << ab.text;
  EXPECT_EQ(ab.final.reason, FinishReason::kStop);
}

// A constrained request cancelled while its rows are in flight ends "cancelled"; the others,
// constrained or not, are unchanged.
TEST(ConstraintPipeline, CancellationWhileAConstrainedStepIsInFlight) {
  Fixture f;
  Request victim = constrained(grammar::ConstraintKind::kRegex, "[a-z ]{300}", 300, 50);
  Request other = constrained(grammar::ConstraintKind::kRegex, "[a-z ]{40}", 40, 51);
  Request neighbour = plain(40, 702);
  RequestHandle hv = f.engine->engine->submit(victim);
  RequestHandle ho = f.engine->engine->submit(other), hn = f.engine->engine->submit(neighbour);
  int got = 0;
  while (got < 5) {  // some tokens out: its rows are in the pipeline
    auto e = hv.next(std::chrono::seconds(60));
    ASSERT_TRUE(e.has_value());
    ASSERT_TRUE(std::holds_alternative<TokenChunk>(*e));
    got += static_cast<int>(std::get<TokenChunk>(*e).ids.size());
  }
  hv.cancel();
  const Collected v = collect(hv);
  EXPECT_EQ(v.final.reason, FinishReason::kCancelled);
  const Collected o = collect(ho), n = collect(hn);
  EXPECT_EQ(o.ids, serial_reference(other).ids);
  EXPECT_EQ(o.final.reason, FinishReason::kStop);
  EXPECT_EQ(n.ids, reference_tokens(neighbour));
}

// A runner whose supply_masks fails fails the requests in flight (the loop drains the runner,
// releasing the due masks) and the engine serves the next constrained request; a runner that
// drops the late masks is caught: the token outside the mask is never streamed.
TEST(ConstraintPipeline, RunnerErrorsOfLateMasks) {
  Fixture f;
  f.runner->fail_at = 3;
  Request a = constrained(grammar::ConstraintKind::kRegex, "[a-z ]{40}", 40, 60);
  Request b = plain(40, 703);
  RequestHandle ha = f.engine->engine->submit(a), hb = f.engine->engine->submit(b);
  const Collected ca = collect(ha), cb = collect(hb);
  EXPECT_EQ(ca.final.reason, FinishReason::kError);
  EXPECT_NE(ca.final.error_message.find("injected supply_masks failure"), std::string::npos)
      << ca.final.error_message;
  EXPECT_EQ(cb.final.reason, FinishReason::kError);
  RequestHandle again = f.engine->engine->submit(a);
  const Collected c = collect(again);
  EXPECT_EQ(c.ids, serial_reference(a).ids);
  EXPECT_EQ(c.final.reason, FinishReason::kStop) << c.final.error_message;

  f.runner->ignore_masks = true;  // greedy digits: the unmasked model soon picks a non-digit
  Request digits = constrained(grammar::ConstraintKind::kRegex, "[0-9]{60}", 60, 61);
  RequestHandle hd = f.engine->engine->submit(digits);
  const Collected d = collect(hd);
  EXPECT_EQ(d.final.reason, FinishReason::kError);
  EXPECT_NE(d.final.error_message.find("outside the constraint's mask"), std::string::npos)
      << d.final.error_message;
  EXPECT_TRUE(std::regex_match(d.text, std::regex("[0-9]*"))) << d.text;
}

}  // namespace
}  // namespace rill
