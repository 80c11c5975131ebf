#include "server/grpc_convert.h"

#include <variant>

#include "engine/runner/sampling_fields.h"
#include "server/chat_prompt.h"

namespace rill::server {

grpc::Status to_status(grpc::CallbackServerContext* call, const ErrorReply& e) {
  if (e.retry_after_s) {
    call->AddTrailingMetadata("retry-after-ms",
                              std::to_string(static_cast<long long>(*e.retry_after_s * 1e3)));
  }
  if (!e.param.empty()) call->AddTrailingMetadata("error-param", e.param);
  return grpc::Status(e.grpc_code, e.message);
}

nlohmann::json chat_messages_json(const pb::ChatMessages& in) {
  nlohmann::json messages = nlohmann::json::array();
  for (const pb::ChatMessage& m : in.messages()) {
    nlohmann::json j = {{"role", m.role()}, {"content", m.content()}};
    if (m.tool_calls_size() > 0) {
      nlohmann::json calls = nlohmann::json::array();
      for (const pb::ToolCall& c : m.tool_calls())
        calls.push_back({{"id", c.id()},
                         {"type", "function"},
                         {"function", {{"name", c.name()}, {"arguments", c.arguments()}}}});
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id().empty()) j["tool_call_id"] = m.tool_call_id();
    messages.push_back(std::move(j));
  }
  return normalize_chat_messages(messages);
}

namespace {

namespace gpb = ::google::protobuf;

// The proto field of a table row. A missing one is a build mismatch that
// tests/server/sampling_fields_server_test.cc catches before it ships.
const gpb::FieldDescriptor& proto_field(const SamplingField& f) {
  const gpb::FieldDescriptor* fd = pb::SamplingParameters::descriptor()->FindFieldByName(f.name);
  if (!fd)
    throw Error(ErrorCode::kInternal, std::string("rill.proto lacks sampling field ") + f.name);
  return *fd;
}

SamplingNumber proto_number(const gpb::Message& m, const gpb::FieldDescriptor& fd) {
  const gpb::Reflection& r = *m.GetReflection();
  switch (fd.cpp_type()) {
    case gpb::FieldDescriptor::CPPTYPE_FLOAT:
      return static_cast<double>(r.GetFloat(m, &fd));
    case gpb::FieldDescriptor::CPPTYPE_DOUBLE:
      return r.GetDouble(m, &fd);
    case gpb::FieldDescriptor::CPPTYPE_INT32:
      return static_cast<int64_t>(r.GetInt32(m, &fd));
    case gpb::FieldDescriptor::CPPTYPE_INT64:
      return static_cast<int64_t>(r.GetInt64(m, &fd));
    case gpb::FieldDescriptor::CPPTYPE_UINT32:
      return static_cast<uint64_t>(r.GetUInt32(m, &fd));
    case gpb::FieldDescriptor::CPPTYPE_UINT64:
      return static_cast<uint64_t>(r.GetUInt64(m, &fd));
    default:
      throw Error(ErrorCode::kInternal, "sampling field " + fd.name() + " is not a number");
  }
}

void set_proto_number(gpb::Message& m, const gpb::FieldDescriptor& fd, const SamplingNumber& v) {
  const gpb::Reflection& r = *m.GetReflection();
  const double d = std::visit([](auto x) { return static_cast<double>(x); }, v);
  switch (fd.cpp_type()) {
    case gpb::FieldDescriptor::CPPTYPE_FLOAT:
      return r.SetFloat(&m, &fd, static_cast<float>(d));
    case gpb::FieldDescriptor::CPPTYPE_DOUBLE:
      return r.SetDouble(&m, &fd, d);
    case gpb::FieldDescriptor::CPPTYPE_INT32:
      return r.SetInt32(&m, &fd, static_cast<int32_t>(d));
    case gpb::FieldDescriptor::CPPTYPE_INT64:
      return r.SetInt64(&m, &fd, static_cast<int64_t>(d));
    case gpb::FieldDescriptor::CPPTYPE_UINT32:
      return r.SetUInt32(&m, &fd, static_cast<uint32_t>(d));
    case gpb::FieldDescriptor::CPPTYPE_UINT64:
      return r.SetUInt64(
          &m, &fd,
          std::holds_alternative<uint64_t>(v) ? std::get<uint64_t>(v) : static_cast<uint64_t>(d));
    default:
      throw Error(ErrorCode::kInternal, "sampling field " + fd.name() + " is not a number");
  }
}

}  // namespace

void apply_sampling(const pb::SamplingParameters& in, SamplingParams& out) {
  const gpb::Reflection& r = *in.GetReflection();
  for (const SamplingField& f : sampling_fields()) {
    const gpb::FieldDescriptor& fd = proto_field(f);
    if (r.HasField(in, &fd)) set_sampling_field(out, f, proto_number(in, fd));
  }
}

void fill_sampling(pb::SamplingParameters& out, const SamplingParams& s) {
  for (const SamplingField& f : sampling_fields())
    set_proto_number(out, proto_field(f), get_sampling_field(s, f));
}

pb::CachePolicy to_pb(const CachePolicy& c) {
  pb::CachePolicy out;
  out.set_kind(c.is_streaming() ? pb::CachePolicy::KIND_STREAMING : pb::CachePolicy::KIND_FULL);
  out.set_n_sink(c.n_sink);
  out.set_window(c.window);
  return out;
}

CachePolicy from_pb(const pb::CachePolicy& c) {
  switch (c.kind()) {
    case pb::CachePolicy::KIND_FULL:
      return CachePolicy::full();
    case pb::CachePolicy::KIND_STREAMING:
      return checked_streaming_cache(c.n_sink(), c.window());
    default:  // proto3 enums are open: a newer client's kind arrives as its number
      throw FieldError("cache.kind", "'cache.kind' must be KIND_FULL or KIND_STREAMING (got " +
                                         std::to_string(static_cast<int>(c.kind())) + ")");
  }
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
  pb::Slo& slo = *f.mutable_slo();
  slo.set_ttft_target_s(e.timings.slo.ttft_target_s);
  slo.set_tpot_target_s(e.timings.slo.tpot_target_s);
  if (e.timings.slo.ttft_met) slo.set_ttft_met(*e.timings.slo.ttft_met);
  if (e.timings.slo.tpot_met) slo.set_tpot_met(*e.timings.slo.tpot_met);
  f.set_message(e.error_message);
}

SessionOptions from_pb(const pb::SessionOptions& in, const SamplingParams& defaults) {
  SessionOptions o;
  o.id = in.session_id();
  o.cache = from_pb(in.cache());
  o.sampling = defaults;
  apply_sampling(in.sampling(), o.sampling);
  if (in.has_max_tokens()) o.max_tokens = checked_token_count("max_tokens", in.max_tokens());
  return o;
}

void fill_session_info(pb::SessionInfo& out, const SessionInfo& info) {
  const SessionOptions& o = info.options;
  pb::SessionOptions* po = out.mutable_options();
  po->set_session_id(o.id);
  *po->mutable_cache() = to_pb(o.cache);
  fill_sampling(*po->mutable_sampling(), o.sampling);
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
