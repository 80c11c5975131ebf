// The tokenizer (engine/tokenizer): text -> ids -> text, and ids -> streamed text. Tokenizers:
// the shipped default model's (byte-level BPE) and fixtures of the other pipelines
// (tests/fixtures/tokenizers: GPT-2 and Llama-3 byte-level BPE, Qwen2 with NFC, Llama-2
// SentencePiece-style with byte fallback, added tokens that strip whitespace). Properties:
//   - every id encode() returns is in [0, vocab_size);
//   - byte-level tokenizers without a normalizer round-trip: decode(encode(s)) == s, for s made
//     valid UTF-8 first (encode reads invalid UTF-8 like String::from_utf8_lossy);
//   - for ids from encode() and for arbitrary ids (any id a model may sample), the
//     IncrementalDetokenizer's pushes plus flush equal decode() of the whole, also after a
//     context (the text's encoding standing for the prompt): decode(context + ids) after what
//     it shares with decode(context) (tokenizer.h, tests/tokenizer/detokenizer_test.cc).
//
// Input: byte 0 picks the tokenizer (bits 0-3), add_special_tokens (bit 4) and
// skip_special_tokens (bit 5); bytes 1.. are the text, and also, read as little-endian 16-bit
// values, the arbitrary ids. Seeds: tests/fuzz/corpus/tokenizer; dictionary: tokenizer.dict.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/util/utf8.h"

namespace {

struct Case {
  rill::Tokenizer tok;
  bool round_trips;  // byte-level pre-tokenizer and decoder, no normalizer
  std::string name;
};

std::vector<Case>& cases() {
  static std::vector<Case>* all = [] {
    const std::string root = RILL_SOURCE_DIR;
    const std::string fixtures = root + "/tests/fixtures/tokenizers/";
    auto* v = new std::vector<Case>();  // reachable for the whole run: not a leak
    auto add = [&](const std::string& dir, bool round_trips) {
      v->push_back({rill::Tokenizer::from_hf_dir(dir), round_trips, dir});
    };
    add(root + "/models/rill-shakespeare", true);
    add(fixtures + "gpt2", true);
    add(fixtures + "llama3", true);
    add(fixtures + "qwen2", false);
    add(fixtures + "llama2_sp", false);
    add(fixtures + "variant_added_tokens", false);
    return v;
  }();
  return *all;
}

[[noreturn]] void fail(const Case& c, const char* what, std::string_view want,
                       std::string_view got) {
  std::fprintf(stderr, "%s: %s\n  want (%zu bytes): %.*s\n  got  (%zu bytes): %.*s\n",
               c.name.c_str(), what, want.size(), static_cast<int>(want.size()), want.data(),
               got.size(), static_cast<int>(got.size()), got.data());
  std::abort();
}

// Streams `ids` after `context` and compares with one decode.
void check_streaming(const Case& c, const std::vector<int32_t>& context,
                     const std::vector<int32_t>& ids, bool skip_special) {
  rill::IncrementalDetokenizer detok(c.tok, skip_special, context);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  std::vector<int32_t> all = context;
  all.insert(all.end(), ids.begin(), ids.end());
  const std::string whole = c.tok.decode(all, skip_special);
  const std::string prefix = c.tok.decode(context, skip_special);
  // Where the ids change how the context's end decodes (a character completed, a byte run made
  // invalid), the stream continues after the longest common prefix, on a character boundary.
  size_t common = 0;
  while (common < prefix.size() && common < whole.size() && prefix[common] == whole[common])
    ++common;
  while (common > 0 && common < whole.size() &&
         (static_cast<unsigned char>(whole[common]) & 0xC0) == 0x80)
    --common;
  const std::string want = whole.substr(common);
  if (streamed != want) fail(c, "streamed text differs from decode()", want, streamed);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cases();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Case& c = cases()[(data[0] & 0x0f) % cases().size()];
  const bool add_special = data[0] & 0x10, skip_special = data[0] & 0x20;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int32_t vocab = c.tok.vocab_size();

  const std::vector<int32_t> ids = c.tok.encode(text, add_special);
  for (int32_t id : ids)
    if (id < 0 || id >= vocab) fail(c, "encode() returned an id out of range", "", "");
  if (c.round_trips) {
    const std::vector<int32_t> plain = add_special ? c.tok.encode(text, false) : ids;
    const std::string want = rill::utf8::from_lossy(text);
    const std::string got = c.tok.decode(plain, /*skip_special_tokens=*/false);
    if (got != want) fail(c, "decode(encode(text)) is not the text", want, got);
  }
  check_streaming(c, {}, ids, skip_special);

  // Arbitrary ids (a model may sample any): 16 bits each, within the vocabulary.
  std::vector<int32_t> sampled;
  for (size_t i = 0; i + 1 < text.size(); i += 2)
    sampled.push_back(static_cast<int32_t>(
        (static_cast<uint8_t>(text[i]) | static_cast<uint8_t>(text[i + 1]) << 8) % vocab));
  check_streaming(c, {}, sampled, skip_special);
  // After a prompt: the text's own encoding.
  check_streaming(c, ids, sampled, skip_special);
  return 0;
}
