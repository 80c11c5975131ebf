#include "engine/tokenizer/decoder.h"

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/util/utf8.h"

namespace rill {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (utf8::is_valid(bytes)) {
    out.push_back(bytes);
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) out.push_back(utf8::encode(utf8::kReplacement));
  }
  bytes.clear();
}

std::string cleanup_spaces(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},     {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
  };
  for (const auto& [from, to] : kRules) s = replace_all(s, from, to);
  return s;
}

}  // namespace

int parse_byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  const int hi = hex_value(token[3]);
  const int lo = hex_value(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  for (const std::string& token : tokens) {
    const size_t mark = bytes.size();
    bool mapped = true;
    for (size_t pos = 0; pos < token.size() && mapped;) {
      const int b = byte_level::char_to_byte(utf8::next(token, pos));
      if (b < 0) {
        mapped = false;
      } else {
        bytes.push_back(static_cast<char>(b));
      }
    }
    if (!mapped) {  // e.g. an added token: its text as is
      bytes.resize(mark);
      bytes += token;
    }
  }
  tokens = {utf8::from_lossy(bytes)};
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  for (std::string& token : tokens) {
    const int b = parse_byte_token(token);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
      continue;
    }
    flush_bytes(bytes, out);
    out.push_back(std::move(token));
  }
  flush_bytes(bytes, out);
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string joined;
  for (const auto& t : tokens) joined += t;
  tokens = {std::move(joined)};
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    if (!regex_) {
      token = replace_all(token, literal_, content_);
      continue;
    }
    std::string out;
    size_t pos = 0;
    for (const auto& [b, e] : regex_->find_all(token)) {
      out.append(token, pos, b - pos);
      out.append(content_);
      pos = e;
    }
    out.append(token, pos, std::string::npos);
    token = std::move(out);
  }
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& token : tokens) {
    std::u32string cps = utf8::to_u32(token);
    size_t begin = 0;
    while (begin < start_ && begin < cps.size() && cps[begin] == content_) ++begin;
    size_t end = cps.size();
    for (size_t i = 0; i < stop_ && end > begin && cps[end - 1] == content_; ++i) --end;
    token = utf8::from_u32(std::u32string_view(cps).substr(begin, end - begin));
  }
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  const std::string rep = utf8::encode(replacement_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool drop = i == 0 && scheme_ != PrependScheme::kNever;
    tokens[i] = replace_all(tokens[i], rep, drop ? "" : " ");
  }
}

void WordPieceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& token = tokens[i];
    if (i != 0) {
      if (!prefix_.empty() && token.compare(0, prefix_.size(), prefix_) == 0) {
        token.erase(0, prefix_.size());
      } else {
        token = " " + token;
      }
    }
    if (cleanup_) token = cleanup_spaces(std::move(token));
  }
}

void BpeSuffixDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }
}

void SequenceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (const auto& step : steps_) step->decode_chain(tokens);
}

bool SequenceDecoder::has_byte_fallback() const {
  for (const auto& step : steps_) {
    if (step->has_byte_fallback()) return true;
  }
  return false;
}

}  // namespace rill
