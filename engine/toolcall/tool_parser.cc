#include "engine/toolcall/tool_parser.h"

#include <algorithm>
#include <limits>

namespace rill::toolcall {
namespace {

// Tool names are at most 64 bytes in OpenAI's API; a longer run after [TOOL_CALLS] is not one.
constexpr size_t kMaxNameBytes = 256;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Appends a call delta, merged into the previous one when it is the same call's.
void add_call_delta(ParsedDelta& out, int index, std::string id, std::string name,
                    std::string args) {
  if (id.empty() && !out.calls.empty() && out.calls.back().index == index) {
    out.calls.back().arguments += args;
    return;
  }
  out.calls.push_back({index, std::move(id), std::move(name), std::move(args)});
}

}  // namespace

void ParsedMessage::apply(const ParsedDelta& d) {
  content += d.content;
  for (const ToolCallDelta& c : d.calls) {
    if (c.index == static_cast<int>(tool_calls.size()))
      tool_calls.push_back({c.id, c.name, c.arguments});
    else if (c.index >= 0 && c.index < static_cast<int>(tool_calls.size()))
      tool_calls[c.index].arguments += c.arguments;
  }
}

ToolCallParser::ToolCallParser(ToolFamily family, const ToolSpec& spec, IdGenerator new_id)
    : family_(family),
      syntax_(family_syntax(family)),
      max_calls_(spec.parallel_tool_calls ? std::numeric_limits<size_t>::max() : 1),
      new_id_(std::move(new_id)) {
  for (const ToolDef* t : spec.callable()) names_.push_back(t->name);
  if (!new_id_) new_id_ = [family] { return new_call_id(family); };
  if (family == ToolFamily::kNone || !spec.active()) state_ = State::kPassThrough;
}

void ToolCallParser::feed(std::string_view text, ParsedDelta& out) {
  for (char c : text) step(c, out);
}

void ToolCallParser::emit_content(std::string_view text, ParsedDelta& out) {
  out.content.append(text);
}

void ToolCallParser::step(char c, ParsedDelta& out) {
  switch (state_) {
    case State::kPassThrough:
      out.content += c;
      return;
    case State::kStart:
    case State::kContent:
      content_byte(c, out);
      return;
    case State::kOpen:
    case State::kListNext:
      if (is_ws(c)) {
        fallback_ += c;
      } else if (state_ == State::kOpen && syntax_.list && c == '[') {
        fallback_ += c;
        in_list_ = true;
        state_ = State::kListNext;
      } else if (c == '{') {
        start_call(c, out);
      } else if (state_ == State::kOpen && !syntax_.args_marker.empty()) {
        state_ = State::kName;
        name_.clear();
        name_byte(c, out);
      } else {
        fallback_ += c;
        not_a_call(out);
      }
      return;
    case State::kCall:
      call_byte(c, out);
      return;
    case State::kAfterCall:
      after_call_byte(c, out);
      return;
    case State::kName:
      name_byte(c, out);
      return;
    case State::kArgsOpen:
      args_open_byte(c, out);
      return;
    case State::kArgs:
      args_byte(c, out);
      return;
  }
}

// Content: holds whitespace and what may be the start of the open marker.
void ToolCallParser::content_byte(char c, ParsedDelta& out) {
  const std::string& open = syntax_.open;
  if (!partial_.empty() || (!open.empty() && c == open.front())) {
    const std::string candidate = partial_ + c;
    if (candidate == open) {
      fallback_ = ws_ + open;
      ws_.clear();
      partial_.clear();
      state_ = State::kOpen;
      return;
    }
    if (open.compare(0, candidate.size(), candidate) == 0) {
      partial_ = candidate;
      return;
    }
    const std::string held = ws_ + partial_;  // not a marker after all
    ws_.clear();
    partial_.clear();
    emit_content(held, out);
    if (state_ == State::kStart && !syntax_.open_anywhere) state_ = State::kPassThrough;
    step(c, out);  // c may start the marker afresh (partial_ is empty: one level only)
    return;
  }
  if (state_ == State::kStart && syntax_.bare_start && c == '{') {
    fallback_ = ws_;
    ws_.clear();
    start_call(c, out);
    return;
  }
  if (is_ws(c)) {
    ws_ += c;
    return;
  }
  state_ =
      (state_ == State::kStart && !syntax_.open_anywhere) ? State::kPassThrough : State::kContent;
  emit_content(ws_, out);
  ws_.clear();
  out.content += c;
}

void ToolCallParser::start_call(char c, ParsedDelta& out) {
  reader_ = std::make_unique<CallReader>(&names_, syntax_.args_keys);
  state_ = State::kCall;
  call_byte(c, out);
}

// A call's first delta (its id and name), unless it is one more than max_calls_.
void ToolCallParser::commit_call(const std::string& name, std::string args, ParsedDelta& out) {
  fallback_.clear();
  dropping_ = static_cast<size_t>(returned_) >= max_calls_;
  if (!dropping_) {
    index_ = returned_++;
    add_call_delta(out, index_, new_id_(), name, std::move(args));
  }
}

void ToolCallParser::call_byte(char c, ParsedDelta& out) {
  const bool was_committed = reader_->committed();
  if (!was_committed) fallback_ += c;
  std::string name, args;
  const CallReader::Status s = reader_->feed(c, name, args);
  if (!was_committed && reader_->committed()) {
    commit_call(name, std::move(args), out);
  } else if (!args.empty() && !dropping_) {
    add_call_delta(out, index_, {}, {}, args);
  }
  switch (s) {
    case CallReader::Status::kMore:
      return;
    case CallReader::Status::kDone:
      reader_.reset();
      state_ = State::kAfterCall;
      return;
    case CallReader::Status::kFailed:
      not_a_call(out);
      return;
    case CallReader::Status::kBroken:
      reader_.reset();
      in_list_ = false;
      state_ = State::kPassThrough;
      out.content += c;
      return;
  }
}

// Mistral v11: `name[ARGS]`. A name is a declared tool's, so it is short and has no spaces;
// anything else is not a call.
void ToolCallParser::name_byte(char c, ParsedDelta& out) {
  fallback_ += c;
  name_ += c;
  const std::string& marker = syntax_.args_marker;
  if (name_.size() > marker.size() && name_.ends_with(marker)) {
    const std::string name = name_.substr(0, name_.size() - marker.size());
    if (std::find(names_.begin(), names_.end(), name) == names_.end()) return not_a_call(out);
    state_ = State::kArgsOpen;
    return;
  }
  if (is_ws(c) || c == '{' || name_.size() > kMaxNameBytes + marker.size()) not_a_call(out);
}

void ToolCallParser::args_open_byte(char c, ParsedDelta& out) {
  if (is_ws(c)) {
    fallback_ += c;
    return;
  }
  if (c != '{') {
    fallback_ += c;
    return not_a_call(out);
  }
  args_.reset();
  args_.feed(c);
  state_ = State::kArgs;
  commit_call(name_.substr(0, name_.size() - syntax_.args_marker.size()), std::string(1, c), out);
}

// The committed call's arguments: they stream while they stay valid JSON.
void ToolCallParser::args_byte(char c, ParsedDelta& out) {
  const JsonScanner::Result r = args_.feed(c);
  if (r == JsonScanner::Result::kError) {  // the call keeps what streamed; the rest is content
    state_ = State::kPassThrough;
    out.content += c;
    return;
  }
  if (!dropping_) add_call_delta(out, index_, {}, {}, std::string(1, c));
  if (r == JsonScanner::Result::kDone) state_ = State::kAfterCall;
}

// After a call: the close marker (Hermes), a separator (Llama ';', ',' in Mistral's list), the
// list's end, or content.
void ToolCallParser::after_call_byte(char c, ParsedDelta& out) {
  const std::string& close = syntax_.close;
  if (!close.empty()) {
    if (partial_.empty() && is_ws(c)) return;
    const std::string candidate = partial_ + c;
    if (candidate == close) {
      partial_.clear();
      state_ = State::kContent;
    } else if (close.compare(0, candidate.size(), candidate) == 0) {
      partial_ = candidate;
    } else {  // no close marker: what follows the call is content
      const std::string held = partial_;
      partial_.clear();
      state_ = State::kContent;
      for (char h : held) content_byte(h, out);
      step(c, out);
    }
    return;
  }
  if (is_ws(c)) return;
  const bool next =
      syntax_.list ? (in_list_ && c == ',') : (syntax_.separator != 0 && c == syntax_.separator);
  if (next) {
    fallback_.assign(1, c);
    state_ = State::kListNext;
    return;
  }
  if (in_list_ && c == ']') {
    in_list_ = false;
    state_ = State::kContent;
    return;
  }
  in_list_ = false;
  state_ = syntax_.open_anywhere ? State::kContent : State::kPassThrough;
  step(c, out);
}

// The text since the marker formed no call: it is content.
void ToolCallParser::not_a_call(ParsedDelta& out) {
  emit_content(fallback_, out);
  fallback_.clear();
  reader_.reset();
  in_list_ = false;
  state_ = syntax_.open_anywhere ? State::kContent : State::kPassThrough;
}

void ToolCallParser::finish(ParsedDelta& out) {
  switch (state_) {
    case State::kOpen:
    case State::kListNext:
    case State::kName:
    case State::kArgsOpen:
      not_a_call(out);
      break;
    case State::kCall:
      if (reader_->committed()) {
        reader_.reset();  // cut short (max_tokens): the call keeps what streamed
      } else {
        not_a_call(out);
      }
      break;
    case State::kAfterCall:
      partial_.clear();  // a close marker cut short belongs to the call
      break;
    default:
      break;
  }
  // Whitespace around calls is not content; a reply without calls keeps all of its text.
  if (returned_ == 0) emit_content(ws_, out);
  emit_content(partial_, out);
  ws_.clear();
  partial_.clear();
  state_ = State::kPassThrough;
}

}  // namespace rill::toolcall
