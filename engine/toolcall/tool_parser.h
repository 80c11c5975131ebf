// The streaming tool-call parser: the model's reply text in, content and tool-call deltas out,
// as OpenAI streams them (a call's index, its id and name in its first delta, its arguments'
// JSON text in chunks after). One parser serves every family through its FamilySyntax
// (family.h). It decides as early as the text allows whether it is content or a call, holds back
// only what may be the start of a call marker (and whitespace that may precede one), and returns
// text that does not form a call as content, never as a call.
//
// Mistral's two forms are told apart by the byte after [TOOL_CALLS]: '[' (or '{') opens the JSON
// list of calls, anything else a v11 call `name[ARGS]{..}` (FamilySyntax::args_marker).
//
// Once a call's name is known and its arguments have begun, the call stands: its arguments stream
// only as far as they are valid JSON, and if the text stops being JSON after that the call ends
// with what streamed and the rest of the reply is content.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/toolcall/call_reader.h"
#include "engine/toolcall/family.h"
#include "engine/toolcall/json_scanner.h"
#include "engine/toolcall/tools.h"

namespace rill::toolcall {

/// A piece of one call. `id` and `name` are set in the call's first delta only.
struct ToolCallDelta {
  int index = 0;
  std::string id;
  std::string name;
  std::string arguments;  // a chunk of the arguments' JSON text
};

/// What one feed produced: content text and call deltas (each in its own order).
struct ParsedDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object
};

/// A whole reply: what the deltas add up to.
struct ParsedMessage {
  std::string content;
  std::vector<ToolCall> tool_calls;
  void apply(const ParsedDelta& d);
};

class ToolCallParser {
 public:
  using IdGenerator = std::function<std::string()>;

  /// `spec`: the request's tools (the names a call may use, and with parallel_tool_calls false
  /// only the first call is returned; later ones are dropped). `new_id`: call ids (default
  /// new_call_id(family)).
  ToolCallParser(ToolFamily family, const ToolSpec& spec, IdGenerator new_id = {});

  /// Feeds the next text of the reply; appends what it makes to `out`.
  void feed(std::string_view text, ParsedDelta& out);
  /// The reply ended: releases what was held back.
  void finish(ParsedDelta& out);

  /// Calls returned so far.
  int calls() const { return returned_; }

 private:
  enum class State {
    kStart,        // nothing but whitespace yet
    kContent,      // looking for the open marker
    kOpen,         // after the marker: waiting for '[' (list), '{' or a name (args_marker)
    kListNext,     // in a list after '[' or ',': waiting for '{'
    kCall,         // reading a call object
    kName,         // Mistral v11: reading `name[ARGS]`
    kArgsOpen,     // Mistral v11: after `[ARGS]`, waiting for the arguments' '{'
    kArgs,         // Mistral v11: reading the arguments object (the call is committed)
    kAfterCall,    // after a call: the close marker, a separator or the list's end
    kPassThrough,  // the rest is content
  };

  void step(char c, ParsedDelta& out);
  void content_byte(char c, ParsedDelta& out);
  void start_call(char c, ParsedDelta& out);
  void call_byte(char c, ParsedDelta& out);
  void name_byte(char c, ParsedDelta& out);
  void args_open_byte(char c, ParsedDelta& out);
  void args_byte(char c, ParsedDelta& out);
  void commit_call(const std::string& name, std::string args, ParsedDelta& out);
  void after_call_byte(char c, ParsedDelta& out);
  void not_a_call(ParsedDelta& out);
  void emit_content(std::string_view text, ParsedDelta& out);

  ToolFamily family_;
  FamilySyntax syntax_;
  std::vector<std::string> names_;
  size_t max_calls_;
  IdGenerator new_id_;
  State state_ = State::kStart;
  std::string ws_;        // whitespace held (dropped if a marker follows)
  std::string partial_;   // a prefix of a marker held
  std::string fallback_;  // the text since the marker, returned as content if no call forms
  std::unique_ptr<CallReader> reader_;
  std::string name_;       // Mistral v11: the name and marker read so far (`get_weather[AR`)
  JsonScanner args_;       // Mistral v11: the arguments object
  int index_ = -1;         // the current call's index in the reply
  bool dropping_ = false;  // the current call is beyond max_calls_ (parsed, not returned)
  int returned_ = 0;
  bool in_list_ = false;
};

}  // namespace rill::toolcall
