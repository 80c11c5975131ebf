// The OpenAI-compatible API's JSON, without any HTTP: request bodies -> rill::Request (with the
// common OpenAI parameters and Rill's extensions, docs/api.md), engine events -> response bodies
// or server-sent-event chunks. http_server.cc moves the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/serving/request.h"
#include "engine/toolcall/tool_parser.h"
#include "server/error_mapping.h"
#include "server/serving_context.h"
#include "server/session_turn.h"

namespace rill::server {

enum class ApiKind { kCompletion, kChat };

struct ApiRequest {
  ApiKind kind = ApiKind::kCompletion;
  Request request;
  std::string model;  // the served name
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool return_token_ids = false;  // Rill extension: "token_ids" in every choice
  int top_logprobs = -1;          // -1: no logprobs; else the number of alternatives
  std::optional<TurnPlan> turn;   // with "session_id": the session turn this request is
  toolcall::ToolSpec tools;       // chat: "tools", "tool_choice", "parallel_tool_calls"
  toolcall::ToolFamily tool_family = toolcall::ToolFamily::kNone;  // the served model's
};

/// Parses and checks a /v1/completions or /v1/chat/completions body. Throws FieldError /
/// rill::Error (kInvalidArgument, kNotFound for an unknown model or session) with OpenAI-style
/// messages. With "session_id" the request is a turn of that session (session_turn.h).
ApiRequest parse_api_request(ServingContext& ctx, ApiKind kind, const std::string& body);

/// Builds the response (non-streaming) or the SSE chunks (streaming) of one request.
class ApiResponder {
 public:
  ApiResponder(const ApiRequest& req, const Tokenizer& tok, std::string id);
  /// Streaming: the bytes to send first (chat: the role chunk); empty otherwise.
  std::string start();
  /// Streaming: an SSE event; otherwise accumulates and returns "".
  std::string chunk(const TokenChunk& c);
  /// Streaming: the last chunk, the usage chunk (when asked for) and [DONE]; otherwise the whole
  /// JSON body. Not for kError (see error_body / sse_error).
  std::string final(const FinalEvent& f);
  /// The text generated so far (both modes): a session chat turn keeps it as the reply.
  const std::string& text() const { return text_; }
  /// Tool calls returned so far.
  int tool_calls() const { return parser_ ? parser_->calls() : 0; }

 private:
  nlohmann::json logprobs_json(const std::vector<int32_t>& ids,
                               const std::vector<SampleLogprobs>& lps, size_t text_offset) const;
  nlohmann::json envelope(bool chunk) const;
  static std::string sse(const nlohmann::json& j);
  // Streaming, tools: the delta of what the parser released (content and tool_calls).
  static nlohmann::json parsed_delta_json(const toolcall::ParsedDelta& d);
  nlohmann::json final_message() const;

  ApiKind kind_;
  bool stream_, include_usage_, return_ids_;
  int top_logprobs_;
  std::string model_, id_;
  int64_t created_;
  const Tokenizer& tok_;
  // Non-streaming accumulation.
  std::string text_;
  std::vector<int32_t> ids_;
  std::vector<SampleLogprobs> logprobs_;
  // Chat with tools: the reply parsed into content and calls (streamed deltas, or the message).
  std::optional<toolcall::ToolCallParser> parser_;
  toolcall::ParsedMessage message_;
};

/// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ErrorReply& e);
/// An error inside a started SSE stream: the error event and [DONE].
std::string sse_error(const ErrorReply& e);

/// JSON text that never throws on invalid UTF-8 (replaced by U+FFFD).
std::string dump_json(const nlohmann::json& j);

/// GET /v1/models.
std::string models_body(const ServingContext& ctx);

}  // namespace rill::server
