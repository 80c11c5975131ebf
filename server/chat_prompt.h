// Chat messages -> prompt text. The model's own chat template (engine/chat, a Jinja
// interpreter) renders when the model has one; otherwise a plain built-in template. Both sit
// behind ChatRenderer so the front ends do not care which.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/model/model.h"

namespace rill::server {

class ChatRenderer {
 public:
  virtual ~ChatRenderer() = default;
  /// `messages`: [{"role": ..., "content": ...}, ...] (checked by the caller); `tools`: the
  /// request's tools as the template sees them (toolcall::tools_template_json), or null. Throws
  /// rill::Error(kInvalidArgument) with the template's message when it rejects them.
  virtual std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& tools = nullptr) const = 0;
  /// Whether the rendered text already holds the special tokens (BOS) the model wants, so the
  /// tokenizer must not add them again.
  virtual bool has_special_tokens() const = 0;
  virtual std::string name() const = 0;
  /// The Jinja source ("" for the built-in template): the tool-call family is read from it.
  virtual std::string template_source() const { return {}; }
};

/// "ROLE:\ncontent\n\n" per message, then "ASSISTANT:\n" for the generation prompt: plain text
/// any base model continues (the default model is trained on plays in this very shape).
class BuiltinChatRenderer final : public ChatRenderer {
 public:
  /// Tools are not rendered (the plain template has no place for them).
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr) const override;
  bool has_special_tokens() const override { return false; }
  std::string name() const override { return "builtin"; }
};

/// The model's chat template when it has one, else the built-in one.
std::unique_ptr<ChatRenderer> make_chat_renderer(const Model& model);

/// Whether `tmpl` renders an assistant's tool-call arguments as a JSON object (it applies tojson
/// or items to them) rather than as OpenAI's JSON string: found by rendering a probe call both
/// ways. Such templates get each call's "arguments" string parsed into an object.
bool template_wants_object_arguments(const ChatTemplate& tmpl);

/// Checks the OpenAI shape of `messages` (non-empty array of objects with string "role" and
/// string or text-part-array "content"; an assistant's "tool_calls" as
/// [{"id", "type": "function", "function": {"name", "arguments"}}], a tool message's
/// "tool_call_id" a string) and returns it with every content flattened to a string (null for an
/// assistant's: ""). Throws kInvalidArgument naming the offending element.
nlohmann::json normalize_chat_messages(const nlohmann::json& messages);

/// The text a session's chat turn feeds to the session's cache. `history` is what the previous
/// turns left (next_chat_history; empty before the first turn), `reply_end` the text the cache
/// holds after the last reply besides it (the stop token or stop string that ended it: the
/// engine feeds a turn's last sample too), `new_messages` the turn's own (normalized). First
/// turn: the whole render with the generation prompt. Later turns (as llama.cpp's server finds
/// its cache prefix): render(history + new, generation prompt) minus what the cache already
/// holds, i.e. the previous turn's render with its generation prompt, the reply and
/// `reply_end`, so the reply's closing (end-of-turn tokens, separators) is fed once. Throws
/// kInvalidArgument when the template rejects the messages or the delta is empty.
/// `tools` are rendered with every render (a session's turns should give the same ones: templates
/// print them at the start, so other tools change the prefix the cache holds).
std::string chat_turn_delta(const ChatRenderer& renderer, const nlohmann::json& history,
                            const std::string& reply_end, const nlohmann::json& new_messages,
                            const nlohmann::ordered_json& tools = nullptr);

/// The history the next turn's delta needs once a turn of `new_messages` replied `reply`: the
/// system message (the newest one given), the turn's last other message and the reply. Templates
/// render a message by its role, its parity in the user/assistant alternation and whether it is
/// first, all of which this trimmed history keeps, so its render is a prefix of the full one.
nlohmann::json next_chat_history(const nlohmann::json& history, const nlohmann::json& new_messages,
                                 const std::string& reply);

}  // namespace rill::server
