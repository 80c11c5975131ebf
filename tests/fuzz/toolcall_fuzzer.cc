// The tool-call parsers (engine/toolcall): a model's reply fed to ToolCallParser in pieces, for
// each family (Hermes / Qwen, Llama-3 JSON, Mistral) with two declared tools.
// Input: byte 0 picks the family (% 3), whether parallel calls are allowed (bit 2) and the size
// of the pieces (bits 3-5: 1 to 8 bytes); the rest is the reply. Checks: nothing escapes but a
// rill::Error, every call names a declared function, and with parallel calls off at most one
// call comes back. Any sanitizer report is a bug.
//
// Seeds: tests/fuzz/corpus/toolcall; dictionary: toolcall.dict (the families' markers).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "engine/toolcall/tool_parser.h"
#include "engine/toolcall/tools.h"

namespace {

using namespace rill;
using namespace rill::toolcall;

const ToolSpec& tools(bool parallel) {
  static const auto make = [](bool p) {
    ToolSpec spec;
    spec.tools = parse_tools(nlohmann::ordered_json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}])"));
    spec.parallel_tool_calls = p;
    return spec;
  };
  static const ToolSpec with = make(true), without = make(false);
  return parallel ? with : without;
}

// Counts the calls `d` starts (a call's first delta carries its id and name).
void check(const ParsedDelta& d, const ToolSpec& spec, int* calls) {
  for (const ToolCallDelta& c : d.calls) {
    if (!c.id.empty()) {
      ++*calls;
      bool declared = false;
      for (const ToolDef& t : spec.tools) declared |= t.name == c.name;
      if (!declared) {
        std::fprintf(stderr, "a call of an undeclared function '%s'\n", c.name.c_str());
        std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const ToolFamily families[] = {ToolFamily::kHermes, ToolFamily::kLlama3Json,
                                        ToolFamily::kMistral, ToolFamily::kMistralArgs};
  const ToolFamily family = families[data[0] % 4];
  const bool parallel = (data[0] >> 2) & 1;
  const size_t piece = ((data[0] >> 3) & 7) + 1;
  const std::string_view reply(reinterpret_cast<const char*>(data + 1), size - 1);
  const ToolSpec& spec = tools(parallel);
  int calls = 0;
  try {
    ToolCallParser parser(family, spec, [] { return std::string("call_0"); });
    for (size_t at = 0; at < reply.size(); at += piece) {
      ParsedDelta d;
      parser.feed(reply.substr(at, piece), d);
      check(d, spec, &calls);
    }
    ParsedDelta d;
    parser.finish(d);
    check(d, spec, &calls);
  } catch (const Error&) {
  }
  if (!parallel && calls > 1) {
    std::fprintf(stderr, "%d calls with parallel_tool_calls off\n", calls);
    std::abort();
  }
  return 0;
}
