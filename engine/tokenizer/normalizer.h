// Normalizers of Hugging Face tokenizers (normalizers/*): text -> text, applied to each piece
// of the input between added tokens.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/regex.h"

namespace rill {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };

/// NFC / NFD / NFKC / NFKD.
class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  std::string normalize(std::string_view text) const override;

 private:
  UnicodeForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override;
};

/// Strips White_Space on the left and/or right.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override;

 private:
  bool left_;
  bool right_;
};

/// Prepends a string to non-empty text.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override;

 private:
  std::string prefix_;
};

/// Replaces every (non-overlapping, left to right) match of a literal or a regex.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::string content);
  ReplaceNormalizer(std::unique_ptr<Regex> regex, std::string content);
  std::string normalize(std::string_view text) const override;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override;

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

/// Replaces every occurrence of `from` in text by `to` (empty `from`: text unchanged).
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace rill
