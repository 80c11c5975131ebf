// The grammar engine (engine/grammar): the JSON-schema, regex, choice and GBNF front ends, the
// automaton and token-table compile against the default model's vocabulary, and the matcher.
// Input: byte 0 picks the language (% 6: JSON schema, json_object, regex, choice, GBNF, tagged
// JSON); then the spec text up to a NUL byte (choices: one per line); each byte after the NUL
// picks one of the tokens the matcher allows next (the n-th set bit of the mask), which it must
// then accept.
// Every failure must be a rill::Error (a refused spec, a limit); anything else escaping, a mask
// that allows a token accept() refuses, or any sanitizer report is a bug.
//
// Seeds: tests/fuzz/corpus/grammar; dictionary: json.dict (schemas).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/error.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/vocabulary.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

using namespace rill;
using namespace rill::grammar;

std::shared_ptr<const Vocabulary> vocabulary() {
  static const std::shared_ptr<const Vocabulary> vocab = [] {
    const Tokenizer tok =
        Tokenizer::from_hf_dir(std::string(RILL_SOURCE_DIR) + "/models/rill-shakespeare");
    std::vector<int32_t> eos;
    if (tok.eos_id()) eos.push_back(*tok.eos_id());
    return Vocabulary::from_tokenizer(tok, tok.vocab_size(), eos);
  }();
  return vocab;
}

ConstraintSpec spec_of(uint8_t kind, std::string_view text) {
  ConstraintSpec spec;
  spec.kind = static_cast<ConstraintKind>(kind % 6);
  if (spec.kind == ConstraintKind::kChoice) {
    size_t start = 0;
    while (start <= text.size()) {
      const size_t end = std::min(text.find('\n', start), text.size());
      spec.choices.emplace_back(text.substr(start, end - start));
      start = end + 1;
    }
  } else {
    spec.text = std::string(text);
  }
  return spec;
}

// Drives the matcher: each byte picks one allowed token.
void walk(const std::shared_ptr<const CompiledConstraint>& compiled, std::string_view picks) {
  GrammarMatcher m(compiled);
  std::vector<uint32_t> mask(static_cast<size_t>(vocabulary()->mask_words()));
  for (const unsigned char pick : picks) {
    if (m.terminated()) return;
    m.fill_mask(mask);
    std::vector<int32_t> allowed;
    for (size_t w = 0; w < mask.size(); ++w)
      for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1)
        allowed.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(bits)));
    if (allowed.empty()) return;  // a dead end (a limit reached): nothing may follow
    const int32_t token = allowed[pick % allowed.size()];
    if (!m.accept(token)) {
      std::fprintf(stderr, "the mask allowed token %d, which accept() refused\n", token);
      std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = all.find('\0');
  const std::string_view text = all.substr(0, nul);
  const std::string_view picks = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  GrammarLimits limits;
  limits.max_spec_bytes = 16 * 1024;  // keeps each input's compile short for the fuzzer
  limits.compile_timeout = std::chrono::milliseconds(2000);
  try {
    walk(compile_constraint(spec_of(data[0], text), vocabulary(), limits), picks.substr(0, 256));
  } catch (const Error&) {
  }
  return 0;
}
