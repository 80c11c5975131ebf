// Tool calling over gRPC: rill.v1.ToolOptions -> the engine's ToolSpec (the same checks as HTTP),
// and the stream side, which parses a reply's text into content and ToolCallDelta pieces.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "engine/serving/request.h"
#include "engine/toolcall/tool_parser.h"
#include "rill/v1/rill.pb.h"

namespace rill::server {

/// The tools of a chat request (FieldError "tool_options..." for a bad one; a tool's
/// parameters_json must be a JSON object nested at most kMaxJsonDepth deep).
toolcall::ToolSpec tool_spec_from_pb(const ::rill::v1::ToolOptions& in);

/// One stream's calls: with an active spec and a family, each chunk's text goes through the
/// parser, the message gets the content as `text` and the calls as `tool_calls`; without, the
/// chunk is appended as is.
class StreamToolCalls {
 public:
  StreamToolCalls() = default;
  StreamToolCalls(toolcall::ToolFamily family, const toolcall::ToolSpec& spec);

  /// `chunk` with its text replaced by the content the parser released; its calls into `m`.
  TokenChunk on_chunk(::rill::v1::GenerateResponse& m, TokenChunk chunk);
  /// The end of the reply: what the parser held back, into `m`. Returns whether the reply made
  /// calls (its finish_reason is then "tool_calls" when it stopped on its own).
  bool on_final(::rill::v1::GenerateResponse& m);

 private:
  void add(::rill::v1::GenerateResponse& m, const toolcall::ParsedDelta& d);
  std::optional<toolcall::ToolCallParser> parser_;
};

}  // namespace rill::server
