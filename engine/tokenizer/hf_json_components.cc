// Factories for the tokenizer.json components: normalizer, pre_tokenizer, decoder and
// post_processor objects, keyed on their "type".
#include <cctype>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/hf_json.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill {

using nlohmann::json;

namespace {

// {"String": "..."} or {"Regex": "..."}: a literal or a compiled regex (one of the two set).
struct Pattern {
  std::string literal;
  std::unique_ptr<Regex> regex;
};

Pattern read_pattern(const json& j, const JsonReader& r, const char* what) {
  const json& p = r.field(j, "pattern", what);
  Pattern out;
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    out.literal = p["String"].get<std::string>();
  } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    out.regex = r.regex(p["Regex"].get<std::string>(), what);
  } else {
    r.fail(ErrorCode::kInvalidArgument,
           std::string(what) + " pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
  return out;
}

SplitBehavior read_behavior(const json& j, const JsonReader& r, const char* what,
                            SplitBehavior fallback) {
  if (!j.contains("behavior") || j["behavior"].is_null()) return fallback;
  std::string name = r.str(j, "behavior", what);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "removed") return SplitBehavior::kRemoved;
  if (name == "isolated") return SplitBehavior::kIsolated;
  if (name == "mergedwithprevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "mergedwithnext") return SplitBehavior::kMergedWithNext;
  if (name == "contiguous") return SplitBehavior::kContiguous;
  r.fail(ErrorCode::kUnsupported,
         std::string("unsupported ") + what + " behavior '" + j["behavior"].dump() + "'");
}

// prepend_scheme ("first" / "always" / "never"), or the legacy add_prefix_space flag.
PrependScheme read_prepend_scheme(const json& j, const JsonReader& r, const char* what) {
  if (auto scheme = r.opt_str(j, "prepend_scheme")) {
    if (*scheme == "first") return PrependScheme::kFirst;
    if (*scheme == "always") return PrependScheme::kAlways;
    if (*scheme == "never") return PrependScheme::kNever;
    r.fail(ErrorCode::kUnsupported,
           std::string("unsupported ") + what + " prepend_scheme '" + *scheme + "'");
  }
  return r.flag(j, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

// Rust's is_ascii_punctuation || general category P* (HF's is_punc), locale-independent.
bool is_punctuation(char32_t c) {
  const bool ascii_punct = (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
                           (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  return ascii_punct || unicode::has_property(c, unicode::kPunctuation);
}

template <typename T>
std::vector<std::unique_ptr<T>> make_list(const json& j, const char* key, const JsonReader& r,
                                          const char* what,
                                          std::unique_ptr<T> (*make)(const json&,
                                                                     const JsonReader&)) {
  const json& list = r.field(j, key, what);
  if (!list.is_array())
    r.fail(ErrorCode::kInvalidArgument, std::string(what) + "." + key + " must be an array");
  std::vector<std::unique_ptr<T>> out;
  for (const json& item : list) {
    if (auto step = make(item, r)) out.push_back(std::move(step));
  }
  return out;
}

class ByteLevelNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    return byte_level::encode_bytes(text);
  }
};

class StripAccentsNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    for (size_t pos = 0; pos < text.size();) {
      const char32_t c = utf8::next(text, pos);
      if (unicode::category(c) != unicode::Category::kMn) utf8::append(out, c);
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& j, const JsonReader& r) {
  if (j.is_null()) return nullptr;
  const std::string type = r.type_of(j, "normalizer");
  if (type == "Sequence") {
    return std::make_unique<SequenceNormalizer>(
        make_list<Normalizer>(j, "normalizers", r, "normalizer", &make_normalizer));
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(UnicodeForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(r.flag(j, "strip_left", true),
                                             r.flag(j, "strip_right", true));
  }
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(r.str(j, "prepend", "Prepend normalizer"));
  if (type == "Replace") {
    Pattern p = read_pattern(j, r, "Replace normalizer");
    std::string content = r.str(j, "content", "Replace normalizer");
    if (p.regex) return std::make_unique<ReplaceNormalizer>(std::move(p.regex), std::move(content));
    return std::make_unique<ReplaceNormalizer>(std::move(p.literal), std::move(content));
  }
  r.fail(ErrorCode::kUnsupported, "unsupported normalizer type '" + type + "'");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const JsonReader& r) {
  if (j.is_null()) return nullptr;
  const std::string type = r.type_of(j, "pre_tokenizer");
  if (type == "Sequence") {
    return std::make_unique<SequencePreTokenizer>(
        make_list<PreTokenizer>(j, "pretokenizers", r, "pre_tokenizer", &make_pre_tokenizer));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(r.flag(j, "add_prefix_space", true),
                                                   r.flag(j, "use_regex", true));
  }
  if (type == "Split") {
    Pattern p = read_pattern(j, r, "Split pre_tokenizer");
    auto pattern = p.regex ? make_regex_pattern(std::move(p.regex))
                           : make_literal_pattern(std::move(p.literal));
    return std::make_unique<SplitPreTokenizer>(
        std::move(pattern), read_behavior(j, r, "Split pre_tokenizer", SplitBehavior::kRemoved),
        r.flag(j, "invert", false));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(
        utf8::encode(r.single_char(j, "replacement", "Metaspace pre_tokenizer")),
        read_prepend_scheme(j, r, "Metaspace pre_tokenizer"), r.flag(j, "split", true));
  }
  if (type == "Digits") {
    const bool individual = r.flag(j, "individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(
        make_char_pattern(&unicode::is_number),
        individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous, false);
  }
  if (type == "Punctuation") {
    return std::make_unique<SplitPreTokenizer>(
        make_char_pattern(&is_punctuation),
        read_behavior(j, r, "Punctuation pre_tokenizer", SplitBehavior::kIsolated), false);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<SplitPreTokenizer>(make_char_pattern(&unicode::is_white_space),
                                               SplitBehavior::kRemoved, false);
  }
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(
        make_regex_pattern(r.regex(R"(\w+|[^\w\s]+)", "Whitespace")), SplitBehavior::kRemoved,
        true);
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    steps.push_back(std::make_unique<SplitPreTokenizer>(make_char_pattern(&unicode::is_white_space),
                                                        SplitBehavior::kRemoved, false));
    steps.push_back(std::make_unique<SplitPreTokenizer>(make_char_pattern(&is_punctuation),
                                                        SplitBehavior::kIsolated, false));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "CharDelimiterSplit") {
    const char32_t d = r.single_char(j, "delimiter", "CharDelimiterSplit pre_tokenizer");
    return std::make_unique<SplitPreTokenizer>(
        make_char_pattern([d](char32_t c) { return c == d; }), SplitBehavior::kRemoved, false);
  }
  r.fail(ErrorCode::kUnsupported, "unsupported pre_tokenizer type '" + type + "'");
}

std::unique_ptr<Decoder> make_decoder(const json& j, const JsonReader& r) {
  if (j.is_null()) return nullptr;
  const std::string type = r.type_of(j, "decoder");
  if (type == "Sequence") {
    return std::make_unique<SequenceDecoder>(
        make_list<Decoder>(j, "decoders", r, "decoder", &make_decoder));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    Pattern p = read_pattern(j, r, "Replace decoder");
    std::string content = r.str(j, "content", "Replace decoder");
    if (p.regex) return std::make_unique<ReplaceDecoder>(std::move(p.regex), std::move(content));
    return std::make_unique<ReplaceDecoder>(std::move(p.literal), std::move(content));
  }
  if (type == "Strip") {
    const int64_t start = r.integer(j, "start", "Strip decoder");
    const int64_t stop = r.integer(j, "stop", "Strip decoder");
    if (start < 0 || stop < 0)
      r.fail(ErrorCode::kInvalidArgument, "Strip decoder start/stop must be >= 0");
    return std::make_unique<StripDecoder>(r.single_char(j, "content", "Strip decoder"),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(r.single_char(j, "replacement", "Metaspace decoder"),
                                              read_prepend_scheme(j, r, "Metaspace decoder"));
  }
  if (type == "WordPiece") {
    return std::make_unique<WordPieceDecoder>(r.opt_str(j, "prefix").value_or("##"),
                                              r.flag(j, "cleanup", true));
  }
  if (type == "BPEDecoder") {
    return std::make_unique<BpeSuffixDecoder>(r.opt_str(j, "suffix").value_or("</w>"));
  }
  r.fail(ErrorCode::kUnsupported, "unsupported decoder type '" + type + "'");
}

namespace {

// Roberta/Bert store cls and sep as ["<s>", 0].
int32_t pair_id(const json& j, const char* key, const JsonReader& r, const char* what) {
  const json& p = r.field(j, key, what);
  if (!p.is_array() || p.size() != 2 || !p[1].is_number_integer()) {
    r.fail(ErrorCode::kInvalidArgument, std::string(what) + "." + key + " must be [token, id]");
  }
  return p[1].get<int32_t>();
}

std::unique_ptr<PostProcessor> make_template(const json& j, const JsonReader& r) {
  const json& single = r.field(j, "single", "TemplateProcessing");
  const json& specials = j.contains("special_tokens") ? j["special_tokens"] : json::object();
  if (!single.is_array())
    r.fail(ErrorCode::kInvalidArgument, "TemplateProcessing.single must be an array");
  std::vector<TemplatePostProcessor::Item> items;
  for (const json& item : single) {
    if (item.contains("Sequence")) {
      items.push_back({true, {}});
    } else if (item.contains("SpecialToken")) {
      const std::string name = r.str(item["SpecialToken"], "id", "TemplateProcessing SpecialToken");
      if (!specials.contains(name) || !specials[name].contains("ids")) {
        r.fail(ErrorCode::kInvalidArgument,
               "TemplateProcessing special token '" + name + "' is missing from special_tokens");
      }
      items.push_back({false, specials[name]["ids"].get<std::vector<int32_t>>()});
    } else {
      r.fail(ErrorCode::kInvalidArgument,
             "TemplateProcessing item " + item.dump() + " is not understood");
    }
  }
  return std::make_unique<TemplatePostProcessor>(std::move(items));
}

class NoOpPostProcessor : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const json& j, const JsonReader& r) {
  if (j.is_null()) return nullptr;
  const std::string type = r.type_of(j, "post_processor");
  if (type == "Sequence") {
    return std::make_unique<SequencePostProcessor>(
        make_list<PostProcessor>(j, "processors", r, "post_processor", &make_post_processor));
  }
  if (type == "TemplateProcessing") return make_template(j, r);
  if (type == "ByteLevel") return std::make_unique<NoOpPostProcessor>();  // offsets only
  if (type == "RobertaProcessing") {
    return std::make_unique<WrapPostProcessor>(pair_id(j, "cls", r, "RobertaProcessing"),
                                               pair_id(j, "sep", r, "RobertaProcessing"));
  }
  if (type == "BertProcessing") {
    return std::make_unique<WrapPostProcessor>(pair_id(j, "cls", r, "BertProcessing"),
                                               pair_id(j, "sep", r, "BertProcessing"));
  }
  r.fail(ErrorCode::kUnsupported, "unsupported post_processor type '" + type + "'");
}

}  // namespace rill
