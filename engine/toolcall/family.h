// Tool-call formats by model family, how a model's family is found, and the server flag that
// overrides it. Each family's syntax (what opens, separates and closes calls) drives the one
// streaming parser (tool_parser.h).
#pragma once

#include <string>
#include <vector>

namespace rill::toolcall {

enum class ToolFamily {
  kNone,    // tool calls are not parsed (the reply is content)
  kHermes,  // Hermes / Qwen: <tool_call>\n{"name": .., "arguments": {..}}\n</tool_call>, repeated
  kLlama3Json,  // Llama 3.x: {"name": .., "parameters": {..}}, optionally after <|python_tag|>,
                // several separated by ';'
  kMistral,  // Mistral (tokenizer before v11): [TOOL_CALLS][{"name": .., "arguments": {..}}, ...]
  kMistralArgs,  // Mistral tokenizer v11+ (Mistral-Small-3.x, Magistral, Devstral):
                 // [TOOL_CALLS]name[ARGS]{..}, repeated. Both Mistral families parse both
                 // forms (which one a reply uses is seen after the marker); they differ in the
                 // form a forced call is constrained to.
};

/// "hermes", "llama3_json", "mistral", "mistral_v11", "none".
const char* tool_family_name(ToolFamily family);

/// The --tool-call-parser value: "auto" (detect), or a family name. Returns false for another
/// value. `auto_detect` is set for "auto".
bool parse_tool_parser_flag(const std::string& value, ToolFamily& family, bool& auto_detect);

/// The family a chat template writes its calls in, found from the template text (the markers it
/// renders assistant tool calls with), else from the tokenizer's special tokens (`vocab_markers`:
/// the added tokens' contents). kNone when neither says.
///  - "[TOOL_CALLS]" with "[ARGS]" -> Mistral v11 (name[ARGS]{..}); "[TOOL_CALLS]" alone ->
///    Mistral (the JSON list)
///  - "<tool_call>" (without GLM's "<arg_key>") -> Hermes
///  - "<|python_tag|>", or "ipython" with Llama 3's "<|start_header_id|>" -> Llama 3 JSON
ToolFamily detect_tool_family(const std::string& template_source,
                              const std::vector<std::string>& vocab_markers = {});

/// What a family's calls look like, for the parser and the constraint builder.
struct FamilySyntax {
  std::string open;           // the marker opening the call(s) ("" for none)
  std::string close;          // the marker closing each call (Hermes), else ""
  bool open_anywhere = true;  // the marker may follow content (else only at the reply's start)
  bool bare_start = false;    // a '{' at the reply's start opens a call without the marker
  bool list = false;          // the calls are a JSON array after the marker (Mistral)
  char separator = 0;         // between calls after the first (Llama ';'; Mistral ',' in the list)
  std::string args_marker;    // Mistral v11: after the open marker, a name, this, the arguments
  std::vector<std::string> args_keys;  // the keys holding the arguments, the first preferred
};

FamilySyntax family_syntax(ToolFamily family);

/// A fresh call id for the family: "call_" + 32 random hex digits (random_id), except Mistral's,
/// whose templates accept only 9 alphanumeric characters (random hex digits).
std::string new_call_id(ToolFamily family);

}  // namespace rill::toolcall
