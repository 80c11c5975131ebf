#include "engine/tokenizer/normalizer.h"

#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

std::string UnicodeNormalizer::normalize(std::string_view text) const {
  switch (form_) {
    case UnicodeForm::kNfc:
      return unicode::nfc(text);
    case UnicodeForm::kNfd:
      return unicode::nfd(text);
    case UnicodeForm::kNfkc:
      return unicode::nfkc(text);
    case UnicodeForm::kNfkd:
      return unicode::nfkd(text);
  }
  return std::string(text);
}

std::string LowercaseNormalizer::normalize(std::string_view text) const {
  return unicode::to_lower(text);
}

std::string StripNormalizer::normalize(std::string_view text) const {
  size_t begin = 0;
  size_t end = text.size();
  if (left_) {
    while (begin < end) {
      size_t next = begin;
      if (!unicode::is_white_space(utf8::next(text, next))) break;
      begin = next;
    }
  }
  if (right_) {
    while (end > begin) {
      const size_t prev = utf8::prev_boundary(text, end);
      if (!unicode::is_white_space(utf8::peek(text, prev))) break;
      end = prev;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string PrependNormalizer::normalize(std::string_view text) const {
  if (text.empty()) return std::string();
  return prefix_ + std::string(text);
}

ReplaceNormalizer::ReplaceNormalizer(std::string literal, std::string content)
    : literal_(std::move(literal)), content_(std::move(content)) {}

ReplaceNormalizer::ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string content)
    : regex_(std::move(regex)), content_(std::move(content)) {}

std::string ReplaceNormalizer::normalize(std::string_view text) const {
  if (!regex_) return replace_all(text, literal_, content_);
  std::string out;
  size_t pos = 0;
  for (const auto& [b, e] : regex_->find_all(text)) {
    out.append(text.substr(pos, b - pos));
    out.append(content_);
    pos = e;
  }
  out.append(text.substr(pos));
  return out;
}

std::string SequenceNormalizer::normalize(std::string_view text) const {
  std::string current(text);
  for (const auto& step : steps_) current = step->normalize(current);
  return current;
}

}  // namespace rill
