#include "engine/toolcall/family.h"

#include "engine/serving/ids.h"

namespace rill::toolcall {
namespace {

bool has(const std::string& s, const char* what) {
  return s.find(what) != std::string::npos;
}

ToolFamily family_from_text(const std::string& text) {
  if (has(text, "[TOOL_CALLS]"))
    return has(text, "[ARGS]") ? ToolFamily::kMistralArgs : ToolFamily::kMistral;
  if (has(text, "<tool_call>") && !has(text, "<arg_key>")) return ToolFamily::kHermes;
  if (has(text, "<|python_tag|>") || (has(text, "ipython") && has(text, "<|start_header_id|>")))
    return ToolFamily::kLlama3Json;
  return ToolFamily::kNone;
}

}  // namespace

const char* tool_family_name(ToolFamily family) {
  switch (family) {
    case ToolFamily::kHermes:
      return "hermes";
    case ToolFamily::kLlama3Json:
      return "llama3_json";
    case ToolFamily::kMistral:
      return "mistral";
    case ToolFamily::kMistralArgs:
      return "mistral_v11";
    case ToolFamily::kNone:
      break;
  }
  return "none";
}

bool parse_tool_parser_flag(const std::string& value, ToolFamily& family, bool& auto_detect) {
  auto_detect = value == "auto";
  if (auto_detect) return true;
  for (ToolFamily f : {ToolFamily::kNone, ToolFamily::kHermes, ToolFamily::kLlama3Json,
                       ToolFamily::kMistral, ToolFamily::kMistralArgs}) {
    if (value == tool_family_name(f)) {
      family = f;
      return true;
    }
  }
  return false;
}

ToolFamily detect_tool_family(const std::string& template_source,
                              const std::vector<std::string>& vocab_markers) {
  if (const ToolFamily f = family_from_text(template_source); f != ToolFamily::kNone) return f;
  // No template hint: a tokenizer whose special tokens include a family's marker ("[ARGS]"
  // beside "[TOOL_CALLS]" marks a v11 Mistral tokenizer).
  std::string markers;
  for (const std::string& t : vocab_markers)
    if (t == "[TOOL_CALLS]" || t == "[ARGS]" || t == "<tool_call>" || t == "<|python_tag|>")
      markers += t;
  return family_from_text(markers);
}

FamilySyntax family_syntax(ToolFamily family) {
  FamilySyntax s;
  switch (family) {
    case ToolFamily::kHermes:
      s.open = "<tool_call>";
      s.close = "</tool_call>";
      s.args_keys = {"arguments", "parameters"};
      break;
    case ToolFamily::kLlama3Json:
      s.open = "<|python_tag|>";
      s.open_anywhere = false;
      s.bare_start = true;
      s.separator = ';';
      s.args_keys = {"parameters", "arguments"};
      break;
    case ToolFamily::kMistral:
    case ToolFamily::kMistralArgs:
      s.open = "[TOOL_CALLS]";
      s.list = true;
      s.separator = ',';
      s.args_keys = {"arguments", "parameters"};
      s.args_marker = "[ARGS]";
      break;
    case ToolFamily::kNone:
      break;
  }
  return s;
}

std::string new_call_id(ToolFamily family) {
  if (family == ToolFamily::kMistral || family == ToolFamily::kMistralArgs)
    return random_id("").substr(0, 9);
  return random_id("call_");
}

}  // namespace rill::toolcall
