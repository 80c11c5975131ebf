// The Jinja chat-template interpreter (engine/chat): lexer, parser and evaluator, through
// ChatTemplate as the server uses it. The input is a template, optionally followed by a NUL
// byte and the JSON the template renders (a list of messages, or an object with "messages",
// "tools" and "extra" like conversations.json's); without it, one of the conversations of
// tests/fixtures/chat_templates/conversations.json (picked by the input's size). Message JSON
// deeper than the server's body limit (server/json_body.h) is skipped, as the server refuses it.
// Every failure must be a rill::Error (a syntax error naming the line, raise_exception, a
// sandbox limit); anything else escaping, or any sanitizer report, is a bug.
//
// Seeds: tests/fuzz/corpus/jinja plus every template in tests/fixtures/chat_templates and the
// default model's (scripts/test_fuzz.sh passes those directories); dictionary: jinja.dict.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/error.h"
#include "server/json_body.h"

namespace {

using ordered_json = nlohmann::ordered_json;

const ordered_json& conversations() {
  static const ordered_json* all = [] {
    std::ifstream in(std::string(RILL_SOURCE_DIR) +
                     "/tests/fixtures/chat_templates/conversations.json");
    std::stringstream ss;
    ss << in.rdbuf();
    return new ordered_json(ordered_json::parse(ss.str())["conversations"]);
  }();
  return *all;
}

void render(std::string_view source, const ordered_json& input, bool add_generation_prompt) {
  const rill::ChatTemplate t(std::string(source), "<s>", "</s>",
                             ordered_json{{"unk_token", "<unk>"}, {"pad_token", "<pad>"}});
  rill::ChatTemplateOptions options;
  options.add_generation_prompt = add_generation_prompt;
  if (input.contains("tools")) options.tools = input["tools"];
  if (input.contains("extra") && input["extra"].is_object()) options.extra = input["extra"];
  t.render(input.contains("messages") ? input["messages"] : ordered_json::array(), options);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  conversations();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view source = in.substr(0, nul);
  ordered_json input;
  if (nul == std::string_view::npos) {
    input = conversations()[size % conversations().size()];
  } else {
    const std::string_view text = in.substr(nul + 1);
    if (rill::server::json_nesting_depth(text, rill::server::kMaxJsonDepth) >
        rill::server::kMaxJsonDepth)
      return 0;
    input = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (input.is_discarded()) return 0;
    if (input.is_array()) input = ordered_json{{"messages", input}};
    if (!input.is_object()) return 0;
  }
  try {
    render(source, input, size % 2 == 1);
  } catch (const rill::Error&) {
    // A template error, raised or found: what the server answers 400 with.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "the chat template threw a %s, not a rill::Error: %s\n", typeid(e).name(),
                 e.what());
    std::abort();
  }
  return 0;
}
