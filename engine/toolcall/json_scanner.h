// An incremental JSON validator: fed one byte at a time, it says whether the bytes so far are a
// prefix of a valid JSON value and when the value is complete. The tool-call parsers use it to
// stream a call's arguments only as far as they are valid JSON. Containers are tracked on an
// explicit stack (no recursion on the model's nesting depth), bounded by kMaxDepth.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace rill::toolcall {

class JsonScanner {
 public:
  /// Deepest nesting of objects and arrays accepted (deeper is an error).
  static constexpr size_t kMaxDepth = 128;

  enum class Result {
    kMore,   // still a valid prefix; the value is not complete
    kDone,   // this byte completed the top-level value (a container, string or literal)
    kError,  // no valid JSON value starts with the bytes so far
  };

  /// Feeds one byte. After kDone or kError the scanner must be reset() before further use. A
  /// top-level number is never complete (its end is only known from the next byte), so
  /// callers scan objects, arrays and strings; numbers inside containers are handled.
  Result feed(char c);
  void reset();

  /// Open containers (0 before the first '{' and after the value completed).
  size_t depth() const { return stack_.size(); }
  /// Where the scanner stands between bytes (what the next structural byte may be).
  bool awaiting_key() const { return state_ == State::kObjectFirst || state_ == State::kObjectKey; }
  bool awaiting_colon() const { return state_ == State::kColon; }
  bool awaiting_value() const { return state_ == State::kValue || state_ == State::kArrayFirst; }
  bool after_value() const { return state_ == State::kAfterValue; }

 private:
  enum class State {
    kValue,        // a value must start (after '[', ':' or ',' in an array, or at the top)
    kArrayFirst,   // after '[': a value or ']'
    kObjectFirst,  // after '{': a key or '}'
    kObjectKey,    // after ',' in an object: a key
    kColon,        // after a key: ':'
    kAfterValue,   // in a container after a value: ',' or the closing bracket
    kString,
    kEscape,
    kUnicode,  // inside \uXXXX; unicode_left_ hex digits to go
    kLiteral,  // true / false / null; literal_ is the rest to match
    kNumMinus,
    kNumZero,
    kNumInt,
    kNumDot,
    kNumFrac,
    kNumExp,
    kNumExpSign,
    kNumExpDigits,
    kDone,
    kError,
  };

  Result start_value(char c);
  Result end_value();
  Result number(char c);
  Result structural(char c);

  State state_ = State::kValue;
  std::vector<char> stack_;  // '{' or '['
  bool string_is_key_ = false;
  int unicode_left_ = 0;
  std::string literal_;
};

}  // namespace rill::toolcall
