// rill.v1 messages <-> engine types, shared by the Generate and Session reactors and the unary
// methods: statuses, sampling, the per-request generation fields, token chunks, final
// information and sessions. No call handling here.
#pragma once

#include <string>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/runner/runner.h"
#include "engine/scheduler/request.h"
#include "engine/scheduler/session.h"
#include "engine/tokenizer/tokenizer.h"
#include "rill/v1/rill.pb.h"
#include "server/error_mapping.h"

namespace rill::server {

namespace pb = ::rill::v1;

/// The status for an error, its retry hint (overload) in the trailing metadata.
grpc::Status to_status(grpc::CallbackServerContext* call, const ErrorReply& e);

/// Chat messages as the JSON the renderer takes, checked (normalize_chat_messages).
nlohmann::json chat_messages_json(const pb::ChatMessages& in);

/// The fields set in `in` written over `s`; validates the result (kInvalidArgument).
void apply_sampling(const pb::SamplingParameters& in, SamplingParams& s);

pb::CachePolicy to_pb(const CachePolicy& c);
CachePolicy from_pb(const pb::CachePolicy& c);

/// The fields GenerateRequest and SessionTurn share (stop strings and ids, max / min tokens,
/// ignore_eos, logprobs, special tokens) onto `r`; `max_tokens` keeps its value when unset.
/// Throws kInvalidArgument for a value out of range.
template <typename Message>
void apply_generation_fields(const Message& in, Request& r) {
  r.stop.assign(in.stop().begin(), in.stop().end());
  r.stop_token_ids.assign(in.stop_token_ids().begin(), in.stop_token_ids().end());
  if (in.has_max_tokens()) r.max_tokens = in.max_tokens();
  if (r.max_tokens < 0) throw Error(ErrorCode::kInvalidArgument, "max_tokens must be >= 0");
  r.min_tokens = in.min_tokens();
  if (r.min_tokens < 0) throw Error(ErrorCode::kInvalidArgument, "min_tokens must be >= 0");
  r.ignore_eos = in.ignore_eos();
  if (in.logprobs() < 0 || in.logprobs() > kMaxTopLogprobs + 1)
    throw Error(ErrorCode::kInvalidArgument,
                "logprobs must be in [0, " + std::to_string(kMaxTopLogprobs + 1) + "]");
  r.logprobs = in.logprobs() - 1;
  r.skip_special_tokens = !in.include_special_tokens();
  r.cache_salt = in.cache_salt();  // its length is checked with the request (validate_request)
  if (in.has_prefix_caching()) r.prefix_caching = in.prefix_caching();
}

/// Appends a chunk's ids, text and log-probabilities to a stream message.
void append_chunk(pb::GenerateResponse& m, const TokenChunk& c, const Tokenizer& tok);
/// The final information of a request that ended without an error.
void fill_final(pb::FinalInfo& f, const FinalEvent& e);

/// SessionOptions from the message (sampling defaults over the engine's defaults).
SessionOptions from_pb(const pb::SessionOptions& in);
void fill_session_info(pb::SessionInfo& out, const SessionInfo& info);

}  // namespace rill::server
