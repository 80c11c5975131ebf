// Decoders of Hugging Face tokenizers (decoders/*): each rewrites the list of token strings
// (HF's decode_chain); the final text is the concatenation of what the last one returns.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/regex.h"

namespace rill {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  /// True for ByteFallback (and sequences containing it): the incremental detokenizer must
  /// then hold runs of <0xXX> tokens back until they end, since a run decodes as a whole.
  virtual bool has_byte_fallback() const { return false; }
};

/// GPT-2 byte-level: chars back to bytes, then UTF-8 with U+FFFD for invalid sequences.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

/// Runs of <0xXX> tokens become their bytes if valid UTF-8, else one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
  bool has_byte_fallback() const override { return true; }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

/// Replaces matches of a literal or regex in each token.
class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::string content)
      : literal_(std::move(literal)), content_(std::move(content)) {}
  ReplaceDecoder(std::unique_ptr<Regex> regex, std::string content)
      : regex_(std::move(regex)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

/// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

/// `replacement` -> ' ', except in the first token where (unless prepend_scheme is never) the
/// replacement characters are dropped.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, PrependScheme scheme)
      : replacement_(replacement), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  char32_t replacement_;
  PrependScheme scheme_;
};

/// BERT's "##" continuation prefix, with optional tokenization-space cleanup.
class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string prefix_;
  bool cleanup_;
};

/// End-of-word suffix -> space (nothing after the last token).
class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;
  bool has_byte_fallback() const override;

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

/// The byte of a "<0xXX>" token (HF ByteFallback's test), or -1.
int parse_byte_token(std::string_view token);

}  // namespace rill
