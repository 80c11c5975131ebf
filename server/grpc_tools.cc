#include "server/grpc_tools.h"

#include "engine/error.h"
#include "server/json_body.h"

namespace rill::server {

namespace pb = ::rill::v1;

toolcall::ToolSpec tool_spec_from_pb(const pb::ToolOptions& in) {
  toolcall::ToolSpec spec;
  if (static_cast<size_t>(in.tools_size()) > toolcall::kMaxTools)
    throw FieldError("tool_options.tools", "'tool_options.tools' has more than " +
                                               std::to_string(toolcall::kMaxTools) + " tools");
  for (int i = 0; i < in.tools_size(); ++i) {
    const pb::Tool& t = in.tools(i);
    toolcall::ToolDef d;
    d.name = t.name();
    d.description = t.description();
    if (t.parameters_json().empty()) {
      d.parameters = {{"type", "object"}, {"properties", nlohmann::ordered_json::object()}};
    } else {
      if (json_nesting_depth(t.parameters_json(), kMaxJsonDepth) <= kMaxJsonDepth)
        d.parameters = nlohmann::ordered_json::parse(t.parameters_json(), nullptr, false);
      if (d.parameters.is_discarded()) d.parameters = nullptr;
      if (!d.parameters.is_object())
        throw FieldError("tool_options.tools", "tools[" + std::to_string(i) +
                                                   "]: parameters_json must be a JSON object "
                                                   "nested at most " +
                                                   std::to_string(kMaxJsonDepth) + " levels deep");
    }
    try {
      toolcall::validate_tool(d, static_cast<size_t>(i));
    } catch (const FieldError& e) {
      throw FieldError("tool_options.tools", e.what());
    }
    for (const toolcall::ToolDef& other : spec.tools)
      if (other.name == d.name)
        throw FieldError("tool_options.tools", "tools[" + std::to_string(i) + "] ('" + d.name +
                                                   "'): a tool of this name is declared twice");
    spec.tools.push_back(std::move(d));
  }
  try {
    spec.choice = toolcall::tool_choice_from_name(in.tool_choice(), in.function_name(), spec.tools);
  } catch (const FieldError& e) {
    throw FieldError("tool_options.tool_choice", e.what());
  }
  if (in.tool_choice().empty() && in.function_name().empty() && spec.tools.empty())
    spec.choice.mode = toolcall::ToolChoiceMode::kNone;
  if (in.has_parallel_tool_calls()) spec.parallel_tool_calls = in.parallel_tool_calls();
  return spec;
}

StreamToolCalls::StreamToolCalls(toolcall::ToolFamily family, const toolcall::ToolSpec& spec) {
  if (spec.active() && family != toolcall::ToolFamily::kNone) parser_.emplace(family, spec);
}

void StreamToolCalls::add(pb::GenerateResponse& m, const toolcall::ParsedDelta& d) {
  for (const toolcall::ToolCallDelta& c : d.calls) {
    pb::ToolCallDelta* out = m.add_tool_calls();
    out->set_index(c.index);
    out->set_id(c.id);
    out->set_name(c.name);
    out->set_arguments(c.arguments);
  }
}

TokenChunk StreamToolCalls::on_chunk(pb::GenerateResponse& m, TokenChunk chunk) {
  if (!parser_) return chunk;
  toolcall::ParsedDelta d;
  parser_->feed(chunk.text, d);
  chunk.text = std::move(d.content);
  add(m, d);
  return chunk;
}

bool StreamToolCalls::on_final(pb::GenerateResponse& m) {
  if (!parser_) return false;
  toolcall::ParsedDelta d;
  parser_->finish(d);
  m.mutable_text()->append(d.content);
  add(m, d);
  return parser_->calls() > 0;
}

}  // namespace rill::server
