// The serving engine on the CPU runner and the default model: continuous batching gives every
// request the tokens it gets alone, cancellation frees blocks at once, limits refuse with the
// right errors, preemption changes no output, stop strings are honoured across tokens and never
// streamed, and every request gets exactly one final event.
#include <gtest/gtest.h>

#include <thread>

#include "tests/scheduler/scheduler_test_util.h"

namespace rill {
namespace {

using testing::collect;
using testing::Collected;
using testing::EngineFixture;
using testing::random_prompt;
using testing::reference_tokens;

Request greedy(std::vector<int32_t> prompt, int max_tokens) {
  Request r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_tokens = max_tokens;
  return r;
}

// Waits until the engine's stats satisfy `pred` (the loop publishes them every iteration).
template <typename Pred>
bool wait_for(const ServingEngine& e, Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (pred(e.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

TEST(ServingEngine, SixtyFourMixedRequestsEqualTheirRunsAlone) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 24;              // queueing
  cfg.max_num_batched_tokens = 192;   // chunked prefill beside running decodes
  EngineFixture f(cfg);
  std::vector<Request> reqs;
  for (int i = 0; i < 64; ++i) {
    Request r = greedy(random_prompt(1 + (i * 37) % 300, 100 + i), 4 + (i * 13) % 40);
    if (i % 3 == 1) r.cache = CachePolicy::streaming(4, 60);  // evicts: prompts reach 300 tokens
    if (i % 2 == 1) {                                           // seeded sampling, any batch
      r.sampling.temperature = 0.9f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = 1000 + i;
      if (i % 4 == 3) r.sampling.frequency_penalty = 0.5f, r.sampling.repetition_penalty = 1.2f;
    }
    r.ignore_eos = i % 5 == 0;
    reqs.push_back(r);
  }
  std::vector<RequestHandle> handles;
  for (const Request& r : reqs) handles.push_back(f.engine->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Collected c = collect(handles[i]);
    ASSERT_EQ(c.finals, 1) << "request " << i;
    EXPECT_TRUE(c.final.reason == FinishReason::kStop || c.final.reason == FinishReason::kLength)
        << "request " << i << ": " << finish_reason_name(c.final.reason) << " " << c.final.error_message;
    EXPECT_EQ(c.ids, reference_tokens(reqs[i])) << "request " << i << " " << reqs[i].cache.to_string();
    EXPECT_EQ(c.final.usage.completion_tokens, static_cast<int>(c.ids.size()));
    EXPECT_EQ(c.final.usage.prompt_tokens, static_cast<int>(reqs[i].prompt.size()));
    if (c.final.reason == FinishReason::kLength) {
      EXPECT_EQ(static_cast<int>(c.ids.size()), reqs[i].max_tokens);
    }
    if (reqs[i].cache.is_streaming() && reqs[i].prompt.size() + c.ids.size() > 4 + 64 + 1) {
      EXPECT_GT(c.final.usage.evicted_tokens, 0) << "request " << i;
    }
  }
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 0 && s.waiting == 0; }));
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);
}

TEST(ServingEngine, TextEqualsTheDetokenizedTokens) {
  EngineFixture f;
  const auto& tok = *testing::default_model().tokenizer;
  Request r = greedy(tok.encode("ROMEO:\nBut soft, what light"), 60);
  RequestHandle h = f.engine->submit(r);
  Collected c = collect(h);
  ASSERT_EQ(c.finals, 1);
  std::vector<int32_t> all = r.prompt;
  all.insert(all.end(), c.ids.begin(), c.ids.end());
  EXPECT_EQ(c.text, tok.decode(all).substr(tok.decode(r.prompt).size()));
  EXPECT_GT(c.final.timings.ttft_s, 0);
  EXPECT_GE(c.final.timings.e2e_s, c.final.timings.ttft_s);
}

TEST(ServingEngine, StopStringsSpanningTokensAreHonouredAndNeverStreamed) {
  EngineFixture f;
  const auto& tok = *testing::default_model().tokenizer;
  Request base = greedy(tok.encode("KING HENRY:\n"), 80);
  base.ignore_eos = true;
  RequestHandle h0 = f.engine->submit(base);
  const Collected ref = collect(h0);
  ASSERT_GT(ref.text.size(), 40u);
  int tried = 0;
  for (size_t start : {ref.text.size() / 3, ref.text.size() / 2, ref.text.size() * 2 / 3}) {
    const std::string stop = ref.text.substr(start, 5);
    const size_t at = ref.text.find(stop);
    Request r = base;
    r.stop = {"never-in-the-output-xyz", stop};
    RequestHandle h = f.engine->submit(r);
    const Collected c = collect(h);
    ASSERT_EQ(c.finals, 1);
    EXPECT_EQ(c.final.reason, FinishReason::kStop);
    EXPECT_EQ(c.final.stop_string, stop);
    EXPECT_EQ(c.text, ref.text.substr(0, at)) << "stop '" << stop << "'";
    EXPECT_EQ(c.text.find(stop), std::string::npos);
    // No chunk ends with a prefix of the stop string that the final text does not have.
    EXPECT_LE(c.ids.size(), ref.ids.size());
    EXPECT_EQ(c.final.usage.completion_tokens, static_cast<int>(c.ids.size()));
    ++tried;
  }
  EXPECT_EQ(tried, 3);
}

TEST(ServingEngine, CancelDuringPrefillAndDecodeFreesBlocksAndLeavesOthersUnchanged) {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 32;  // a long prompt prefills over many steps
  EngineFixture f(cfg);
  Request other = greedy(random_prompt(50, 7), 40);
  Request long_prompt = greedy(random_prompt(450, 8), 50);
  Request long_decode = greedy(random_prompt(20, 9), 500);
  long_decode.ignore_eos = true;
  RequestHandle ho = f.engine->submit(other);
  RequestHandle hp = f.engine->submit(long_prompt);
  RequestHandle hd = f.engine->submit(long_decode);
  // Prefill: cancel while the long prompt is still being fed.
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.steps >= 2; }));
  hp.cancel();
  // Decode: cancel once tokens are streaming.
  auto first = hd.next(std::chrono::seconds(60));
  ASSERT_TRUE(first && std::holds_alternative<TokenChunk>(*first));
  EXPECT_TRUE(f.engine->cancel(hd.id()));
  const Collected cp = collect(hp), cd = collect(hd), co = collect(ho);
  EXPECT_EQ(cp.final.reason, FinishReason::kCancelled);
  EXPECT_LT(cp.ids.size(), 50u);
  EXPECT_EQ(cd.final.reason, FinishReason::kCancelled);
  EXPECT_LT(cd.ids.size(), 499u);
  EXPECT_EQ(co.ids, reference_tokens(other));
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 0; }));
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);
  EXPECT_FALSE(f.engine->cancel(hd.id()));  // finished: no longer live
}

TEST(ServingEngine, CancelledRequestsBlocksAreFreeWhenItsFinalEventArrives) {
  EngineFixture f;
  Request r = greedy(random_prompt(100, 3), 1000);
  r.ignore_eos = true;
  RequestHandle h = f.engine->submit(r);
  ASSERT_TRUE(h.next(std::chrono::seconds(60)).has_value());
  const int used = f.engine->stats().kv_blocks_used;
  EXPECT_GE(used, 100 / 16);
  h.cancel();
  const Collected c = collect(h);
  EXPECT_EQ(c.final.reason, FinishReason::kCancelled);
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);  // stats are published before events go out
}

TEST(ServingEngine, DroppingTheHandleCancelsTheRequest) {
  EngineFixture f;
  Request r = greedy(random_prompt(10, 4), 100000);
  r.ignore_eos = true;
  {
    RequestHandle h = f.engine->submit(r);
    ASSERT_TRUE(h.next(std::chrono::seconds(60)).has_value());
  }
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 0 && s.kv_blocks_used == 0; }));
}

TEST(ServingEngine, QueueLimitsRefuseWithRetryAfterAndEveryRequestGetsOneFinal) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1;
  cfg.max_queued_requests = 3;
  EngineFixture f(cfg);
  Request r = greedy(random_prompt(10, 5), 200);
  r.ignore_eos = true;
  std::vector<RequestHandle> handles;
  handles.push_back(f.engine->submit(r));
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 1; }));
  for (int i = 0; i < 3; ++i) handles.push_back(f.engine->submit(r));
  try {
    f.engine->submit(r);
    FAIL() << "the fifth request should be refused";
  } catch (const OverloadedError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_GE(e.retry_after_s(), 1.0);
    EXPECT_NE(std::string(e.what()).find("limit 3"), std::string::npos) << e.what();
  }
  for (auto& h : handles) {
    const Collected c = collect(h);
    EXPECT_EQ(c.finals, 1);
    EXPECT_EQ(c.final.reason, FinishReason::kLength);
    EXPECT_EQ(c.ids.size(), 200u);
  }
}

TEST(ServingEngine, RequestsThatCanNeverRunAreRefusedNamingTheLimit) {
  SchedulerConfig cfg;
  cfg.max_sink = 8;
  EngineFixture f(cfg);
  const int context = testing::default_model().config.max_position_embeddings;
  const int vocab = testing::default_model().config.vocab_size;
  auto refused = [&](Request r, const std::string& needle) {
    try {
      f.engine->submit(std::move(r));
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const OverloadedError&) {
      ADD_FAILURE() << "overloaded; expected: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(greedy({}, 5), "prompt is empty");
  refused(greedy(random_prompt(context + 1, 1), 5), "exceeds the model's context");
  refused(greedy({1, vocab, 2}, 5), "out of range");
  refused(greedy({1, -1}, 5), "out of range");
  refused(greedy({1}, -1), "max_tokens");
  Request lp = greedy({1}, 5);
  lp.logprobs = 21;
  refused(lp, "logprobs");
  Request sink = greedy({1}, 5);
  sink.cache = CachePolicy::streaming(9, 100);
  refused(sink, "n_sink 9 exceeds the server limit 8");
  sink.cache = CachePolicy::streaming(4, context);
  refused(sink, "exceeds the model context");
  Request temp = greedy({1}, 5);
  temp.sampling.temperature = -1;
  refused(temp, "temperature");
  Request stop = greedy({1}, 5);
  stop.stop = {""};
  refused(stop, "stop strings");
  // A streaming request over the context is fine: it never ends for lack of room.
  Request ok = greedy(random_prompt(context + 50, 2), 3);
  ok.cache = CachePolicy::streaming(4, 124);
  RequestHandle h = f.engine->submit(ok);
  EXPECT_EQ(collect(h).ids.size(), 3u);
}

TEST(ServingEngine, TinyKvPoolPreemptsFullRequestsWithoutChangingOutputs) {
  SchedulerConfig cfg;
  cfg.kv_watermark = 0;
  EngineFixture f(cfg, {.num_threads = 1, .block_size = 16, .num_blocks = 20});
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    Request r = greedy(random_prompt(30 + i * 5, 200 + i), 70);
    r.ignore_eos = true;
    if (i % 2) r.sampling.temperature = 1.0f, r.sampling.seed = 77 + i, r.sampling.presence_penalty = 0.4f;
    reqs.push_back(r);
  }
  std::vector<RequestHandle> handles;
  for (const Request& r : reqs) handles.push_back(f.engine->submit(r));
  int preempted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Collected c = collect(handles[i]);
    ASSERT_EQ(c.finals, 1);
    EXPECT_EQ(c.ids, reference_tokens(reqs[i])) << "request " << i;
    preempted += c.final.usage.preemptions;
  }
  EXPECT_GT(preempted, 0);
  EXPECT_EQ(f.engine->stats().preemptions, preempted);
  EXPECT_EQ(f.engine->stats().kv_blocks_used, 0);
}

TEST(ServingEngine, StreamingRequestsReserveTheirBlocksAndAreNeverPreempted) {
  SchedulerConfig cfg;
  cfg.kv_watermark = 0;
  EngineFixture f(cfg, {.num_threads = 1, .block_size = 16, .num_blocks = 24});
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = greedy(random_prompt(40, 300 + i), 120);
    r.ignore_eos = true;
    r.cache = i % 2 ? CachePolicy::streaming(4, 60) : CachePolicy::full();  // 5 blocks for life
    reqs.push_back(r);
  }
  std::vector<RequestHandle> handles;
  for (const Request& r : reqs) handles.push_back(f.engine->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Collected c = collect(handles[i]);
    EXPECT_EQ(c.ids, reference_tokens(reqs[i])) << "request " << i;
    if (reqs[i].cache.is_streaming()) {
      EXPECT_EQ(c.final.usage.preemptions, 0);
      EXPECT_GT(c.final.usage.evicted_tokens, 0);
    }
  }
}

TEST(ServingEngine, MinTokensMaxTokensZeroDeadlineAndQueueTimeout) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1;
  EngineFixture f(cfg);
  Request zero = greedy(random_prompt(5, 1), 0);
  RequestHandle hz = f.engine->submit(zero);
  Collected cz = collect(hz);
  EXPECT_EQ(cz.final.reason, FinishReason::kLength);
  EXPECT_TRUE(cz.ids.empty());

  Request min = greedy(random_prompt(5, 2), 30);
  min.min_tokens = 30;
  min.stop_token_ids = {};
  RequestHandle hm = f.engine->submit(min);
  EXPECT_EQ(collect(hm).ids.size(), 30u);

  Request slow = greedy(random_prompt(5, 3), 100000);
  slow.ignore_eos = true;
  // Long enough for a first token on a loaded or sanitized build (300 ms was not under TSan).
  slow.deadline = Clock::now() + std::chrono::milliseconds(1000);
  RequestHandle hs = f.engine->submit(slow);
  Request queued = greedy(random_prompt(5, 4), 5);
  queued.queue_timeout = std::chrono::milliseconds(50);
  RequestHandle hq = f.engine->submit(queued);  // max_num_seqs 1: waits behind `slow`
  const Collected cq = collect(hq);
  EXPECT_EQ(cq.final.reason, FinishReason::kDeadline);
  EXPECT_NE(cq.final.error_message.find("queue timeout"), std::string::npos);
  const Collected cs = collect(hs);
  EXPECT_EQ(cs.final.reason, FinishReason::kDeadline);
  EXPECT_GT(cs.ids.size(), 0u);
}

TEST(ServingEngine, PriorityRunsFirstAndAgingBoundsTheWait) {
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1;
  cfg.aging_per_s = 0;  // strict priorities
  EngineFixture f(cfg);
  Request blocker = greedy(random_prompt(5, 1), 40);
  blocker.ignore_eos = true;
  RequestHandle hb = f.engine->submit(blocker);
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 1; }));
  Request low = greedy(random_prompt(5, 2), 5), high = greedy(random_prompt(5, 3), 5);
  low.priority = 10;
  high.priority = -10;
  RequestHandle hl = f.engine->submit(low);
  RequestHandle hh = f.engine->submit(high);
  const Collected cl = collect(hl), ch = collect(hh);
  EXPECT_LT(ch.final.timings.queue_s, cl.final.timings.queue_s);
  collect(hb);
}

TEST(ServingEngine, DrainFinishesInFlightAndRefusesNewRequests) {
  EngineFixture f;
  Request r = greedy(random_prompt(10, 1), 20);
  RequestHandle h = f.engine->submit(r);
  EXPECT_TRUE(f.engine->drain(std::chrono::seconds(60)));
  EXPECT_EQ(collect(h).finals, 1);
  EXPECT_TRUE(f.engine->stats().draining);
  try {
    f.engine->submit(r);
    FAIL() << "accepted while draining";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  }
}

TEST(ServingEngine, DrainTimeoutCancelsWhatIsLeft) {
  EngineFixture f;
  Request r = greedy(random_prompt(10, 1), 1000000);
  r.ignore_eos = true;
  RequestHandle h = f.engine->submit(r);
  EXPECT_FALSE(f.engine->drain(std::chrono::milliseconds(200)));
  const Collected c = collect(h);
  EXPECT_EQ(c.final.reason, FinishReason::kCancelled);
}

// A runner whose steps take at most 4 sequences and 64 tokens (as a CUDA runner built with
// max_batch 4 would): a scheduler configured past them is refused at construction.
class SmallStepRunner final : public testing::ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  std::string name() const override { return "small"; }
  int max_step_sequences() const override { return 4; }
  int max_step_tokens() const override { return 64; }
};

TEST(ServingEngine, RefusesLimitsPastTheRunnersStep) {
  const Model& m = testing::default_model();
  MetricsRegistry metrics;
  auto make = [&](int seqs, int tokens) {
    SchedulerConfig c;
    c.max_num_seqs = seqs;
    c.max_num_batched_tokens = tokens;
    return std::make_unique<ServingEngine>(std::make_unique<SmallStepRunner>(m), *m.tokenizer, c, metrics);
  };
  EXPECT_NO_THROW(make(4, 64));
  try {
    make(8, 64);
    ADD_FAILURE() << "max_num_seqs 8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_num_seqs 8 exceeds the small runner's 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make(4, 65), Error);
}

TEST(ServingEngine, MetricsCountWhatHappened) {
  EngineFixture f;
  for (int i = 0; i < 3; ++i) {
    RequestHandle h = f.engine->submit(greedy(random_prompt(8, i), 6));
    collect(h);
  }
  double finished = 0, prompt = 0, ttft_count = 0, generated = 0;
  for (const MetricFamily& fam : f.metrics.snapshot())
    for (const MetricSeries& s : fam.series) {
      if (fam.name == "rill_requests_total") finished += s.value;
      if (fam.name == "rill_prompt_tokens_total") prompt += s.value;
      if (fam.name == "rill_generation_tokens_total") generated += s.value;
      if (fam.name == "rill_time_to_first_token_seconds") ttft_count += static_cast<double>(s.histogram.count);
      EXPECT_EQ(s.labels.front().first, "model_name");
    }
  EXPECT_EQ(finished, 3);
  EXPECT_EQ(prompt, 24);
  EXPECT_EQ(ttft_count, 3);
  EXPECT_GT(generated, 0);
}

TEST(ServingEngine, SlowConsumerIsCancelledAtItsBound) {
  SchedulerConfig cfg;
  cfg.max_buffered_chunks = 8;
  EngineFixture f(cfg);
  Request r = greedy(random_prompt(5, 1), 1000);
  r.ignore_eos = true;
  RequestHandle h = f.engine->submit(r);
  ASSERT_TRUE(wait_for(*f.engine, [](const EngineStats& s) { return s.running == 0 && s.steps > 8; }));
  // The loop publishes running == 0 before the output thread has delivered the final event: poll
  // until it has (a loaded machine showed the gap).
  std::vector<RequestEvent> events;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    h.poll(events);
    if (!events.empty() && std::holds_alternative<FinalEvent>(events.back())) break;
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(events.empty());
  const auto* fin = std::get_if<FinalEvent>(&events.back());
  ASSERT_NE(fin, nullptr);
  EXPECT_EQ(fin->reason, FinishReason::kCancelled);
  EXPECT_NE(fin->error_message.find("too slow"), std::string::npos);
  EXPECT_LE(events.size(), 9u);
}

}  // namespace
}  // namespace rill
