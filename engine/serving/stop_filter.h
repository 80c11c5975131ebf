// Holds generated tokens back while their text could be the start of a stop string, so that no
// part of a stop string is ever streamed, and finds stop strings across token boundaries.
// Tokens leave with their text: a token is released once all of its text is known not to begin
// a stop string. When a stop string matches, the text is cut where it starts; the tokens whose
// text starts before that point are released with it (the one holding the match's start too).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/serving/request.h"

namespace rill {

class StopFilter {
 public:
  explicit StopFilter(std::vector<std::string> stops);

  /// Adds a generated token and its text piece (may be empty: held-back UTF-8, special tokens).
  void add(int32_t id, std::string_view piece, const SampleLogprobs* logprobs);
  /// Adds text with no token of its own (the detokenizer's final flush).
  void add_text(std::string_view piece);
  /// Moves what may be streamed now into `out` (appending). After a match, nothing more.
  void take_ready(TokenChunk& out);
  /// Moves everything still held into `out` (the generation ended without a match).
  void take_rest(TokenChunk& out);

  bool matched() const { return matched_.has_value(); }
  const std::string& matched_stop() const { return *matched_; }

 private:
  struct Pending {
    int32_t id;
    bool has_id;
    std::optional<SampleLogprobs> logprobs;
    size_t end;  // offset in text_ just past this token's text
  };
  void scan();
  size_t held_suffix() const;  // longest suffix of text_ that is a proper prefix of a stop string

  std::vector<std::string> stops_;
  std::vector<Pending> pending_;
  std::string text_;  // the pending tokens' text
  size_t ready_tokens_ = 0, ready_bytes_ = 0;
  std::optional<std::string> matched_;
};

}  // namespace rill
