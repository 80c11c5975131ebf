// rill.v1 messages <-> engine types, shared by the Generate and Session reactors and the unary
// methods: statuses, sampling, the per-request generation fields, token chunks, final
// information and sessions. No call handling here.
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/serving/request.h"
#include "engine/serving/session.h"
#include "engine/tokenizer/tokenizer.h"
#include "rill/v1/rill.pb.h"
#include "server/error_mapping.h"
#include "server/request_fields.h"

namespace rill::server {

namespace pb = ::rill::v1;

/// The status for an error; in the trailing metadata its retry hint (overload, "retry-after-ms")
/// and the request field at fault ("error-param": "top_p", HTTP's "param").
grpc::Status to_status(grpc::CallbackServerContext* call, const ErrorReply& e);

/// Chat messages as the JSON the renderer takes, checked (normalize_chat_messages).
nlohmann::json chat_messages_json(const pb::ChatMessages& in);

/// The fields set in `in` written over `s` (which holds the defaults), each checked by the
/// sampling table (sampling_fields.h) exactly as HTTP checks it. The proto fields are found by
/// the table's names through reflection, so a new table row needs only its proto field.
void apply_sampling(const pb::SamplingParameters& in, SamplingParams& s);
/// Every field of `s` set in `out`.
void fill_sampling(pb::SamplingParameters& out, const SamplingParams& s);

pb::CachePolicy to_pb(const CachePolicy& c);
/// FieldError("cache.kind") for a kind the proto does not define; streaming parts as HTTP
/// checks them (checked_streaming_cache).
CachePolicy from_pb(const pb::CachePolicy& c);

/// The fields GenerateRequest and SessionTurn share (stop strings and ids, max / min tokens,
/// ignore_eos, logprobs, special tokens, latency targets) onto `r`; `max_tokens` keeps its value
/// when unset. Throws FieldError for a value out of range, with HTTP's checks (request_fields.h).
template <typename Message>
void apply_generation_fields(const Message& in, Request& r, int vocab_size) {
  r.stop = checked_stop_strings({in.stop().begin(), in.stop().end()});
  r.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  check_stop_token_ids(r.stop_token_ids, vocab_size);
  if (in.has_max_tokens()) r.max_tokens = checked_token_count("max_tokens", in.max_tokens());
  r.min_tokens = checked_token_count("min_tokens", in.min_tokens());
  r.ignore_eos = in.ignore_eos();
  if (in.logprobs() < 0 || in.logprobs() > kMaxTopLogprobs + 1)
    throw FieldError("logprobs",
                     "'logprobs' must be in [0, " + std::to_string(kMaxTopLogprobs + 1) + "]");
  r.logprobs = in.logprobs() - 1;
  r.skip_special_tokens = !in.include_special_tokens();
  r.cache_salt = in.cache_salt();  // its length is checked with the request (validate_request)
  if (in.has_prefix_caching()) r.prefix_caching = in.prefix_caching();
  if (in.has_ttft_target_ms())
    r.ttft_target = checked_latency_target("ttft_target_ms", in.ttft_target_ms());
  if (in.has_tpot_target_ms())
    r.tpot_target = checked_latency_target("tpot_target_ms", in.tpot_target_ms());
}

/// Appends a chunk's ids, text and log-probabilities to a stream message.
void append_chunk(pb::GenerateResponse& m, const TokenChunk& c, const Tokenizer& tok);
/// The final information of a request that ended without an error.
void fill_final(pb::FinalInfo& f, const FinalEvent& e);

/// SessionOptions from the message: its sampling fields over `defaults` (the server's,
/// ModelInfo::sampling_defaults), as HTTP's POST /v1/sessions does.
SessionOptions from_pb(const pb::SessionOptions& in, const SamplingParams& defaults);
void fill_session_info(pb::SessionInfo& out, const SessionInfo& info);

}  // namespace rill::server
