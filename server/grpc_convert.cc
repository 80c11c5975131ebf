#include "server/grpc_convert.h"

#include "server/chat_prompt.h"

namespace rill::server {

grpc::Status to_status(grpc::CallbackServerContext* call, const ErrorReply& e) {
  if (e.retry_after_s) {
    call->AddTrailingMetadata("retry-after-ms",
                              std::to_string(static_cast<long long>(*e.retry_after_s * 1e3)));
  }
  return grpc::Status(e.grpc_code, e.message);
}

nlohmann::json chat_messages_json(const pb::ChatMessages& in) {
  nlohmann::json messages = nlohmann::json::array();
  for (const pb::ChatMessage& m : in.messages())
    messages.push_back({{"role", m.role()}, {"content", m.content()}});
  return normalize_chat_messages(messages);
}

void apply_sampling(const pb::SamplingParameters& s, SamplingParams& out) {
  if (s.has_temperature()) out.temperature = s.temperature();
  if (s.has_top_k()) out.top_k = s.top_k();
  if (s.has_top_p()) out.top_p = s.top_p();
  if (s.has_min_p()) out.min_p = s.min_p();
  if (s.has_repetition_penalty()) out.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) out.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) out.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) out.seed = s.seed();
  out.validate();
}

pb::CachePolicy to_pb(const CachePolicy& c) {
  pb::CachePolicy out;
  out.set_kind(c.is_streaming() ? pb::CachePolicy::KIND_STREAMING : pb::CachePolicy::KIND_FULL);
  out.set_n_sink(c.n_sink);
  out.set_window(c.window);
  return out;
}

CachePolicy from_pb(const pb::CachePolicy& c) {
  if (c.kind() == pb::CachePolicy::KIND_STREAMING)
    return CachePolicy::streaming(c.n_sink(), c.window());
  return CachePolicy::full();
}

void append_chunk(pb::GenerateResponse& m, const TokenChunk& c, const Tokenizer& tok) {
  for (int32_t id : c.ids) m.add_token_ids(id);
  m.mutable_text()->append(c.text);
  for (const SampleLogprobs& lp : c.logprobs) {
    pb::TokenLogprobs* x = m.add_logprobs();
    x->set_logprob(lp.sampled);
    for (const TokenLogprob& t : lp.top) {
      pb::TopLogprob* y = x->add_top();
      y->set_token_id(t.token);
      y->set_token(tok.id_to_token(t.token));
      y->set_logprob(t.logprob);
    }
  }
}

void fill_final(pb::FinalInfo& f, const FinalEvent& e) {
  f.set_finish_reason(finish_reason_name(e.reason));
  f.set_stop_string(e.stop_string);
  if (e.stop_token) f.set_stop_token_id(*e.stop_token);
  f.mutable_usage()->set_prompt_tokens(e.usage.prompt_tokens);
  f.mutable_usage()->set_completion_tokens(e.usage.completion_tokens);
  f.mutable_usage()->set_evicted_tokens(e.usage.evicted_tokens);
  f.mutable_usage()->set_preemptions(e.usage.preemptions);
  f.mutable_usage()->set_cached_tokens(e.usage.cached_tokens);
  f.mutable_timings()->set_queue_s(e.timings.queue_s);
  f.mutable_timings()->set_ttft_s(e.timings.ttft_s);
  f.mutable_timings()->set_tpot_s(e.timings.tpot_s);
  f.mutable_timings()->set_e2e_s(e.timings.e2e_s);
  f.set_message(e.error_message);
}

SessionOptions from_pb(const pb::SessionOptions& in) {
  SessionOptions o;
  o.id = in.session_id();
  o.cache = from_pb(in.cache());
  apply_sampling(in.sampling(), o.sampling);
  if (in.has_max_tokens()) o.max_tokens = in.max_tokens();
  if (o.max_tokens < 0) throw Error(ErrorCode::kInvalidArgument, "max_tokens must be >= 0");
  return o;
}

void fill_session_info(pb::SessionInfo& out, const SessionInfo& info) {
  const SessionOptions& o = info.options;
  pb::SessionOptions* po = out.mutable_options();
  po->set_session_id(o.id);
  *po->mutable_cache() = to_pb(o.cache);
  pb::SamplingParameters* s = po->mutable_sampling();
  s->set_temperature(o.sampling.temperature);
  s->set_top_k(o.sampling.top_k);
  s->set_top_p(o.sampling.top_p);
  s->set_min_p(o.sampling.min_p);
  s->set_repetition_penalty(o.sampling.repetition_penalty);
  s->set_presence_penalty(o.sampling.presence_penalty);
  s->set_frequency_penalty(o.sampling.frequency_penalty);
  s->set_seed(o.sampling.seed);
  po->set_max_tokens(o.max_tokens);
  out.set_turns(info.turns);
  out.set_tokens_seen(info.tokens_seen);
  out.set_tokens_evicted(info.tokens_evicted);
  out.set_tokens_cached(info.tokens_cached);
  out.set_turn_running(info.turn_running);
  out.set_residence(session_residence_name(info.residence));
  out.set_idle_s(info.idle_s);
}

}  // namespace rill::server
