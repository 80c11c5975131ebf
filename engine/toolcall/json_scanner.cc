#include "engine/toolcall/json_scanner.h"

namespace rill::toolcall {
namespace {

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

void JsonScanner::reset() {
  state_ = State::kValue;
  stack_.clear();
  string_is_key_ = false;
  unicode_left_ = 0;
  literal_.clear();
}

// A value ended: the top-level one is done, one inside a container waits for ',' or a close.
JsonScanner::Result JsonScanner::end_value() {
  if (stack_.empty()) {
    state_ = State::kDone;
    return Result::kDone;
  }
  state_ = State::kAfterValue;
  return Result::kMore;
}

JsonScanner::Result JsonScanner::start_value(char c) {
  string_is_key_ = false;
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= kMaxDepth) break;
      stack_.push_back(c);
      state_ = c == '{' ? State::kObjectFirst : State::kArrayFirst;
      return Result::kMore;
    case '"':
      state_ = State::kString;
      return Result::kMore;
    case 't':
      literal_ = "rue";
      state_ = State::kLiteral;
      return Result::kMore;
    case 'f':
      literal_ = "alse";
      state_ = State::kLiteral;
      return Result::kMore;
    case 'n':
      literal_ = "ull";
      state_ = State::kLiteral;
      return Result::kMore;
    case '-':
      state_ = State::kNumMinus;
      return Result::kMore;
    case '0':
      state_ = State::kNumZero;
      return Result::kMore;
    default:
      if (c >= '1' && c <= '9') {
        state_ = State::kNumInt;
        return Result::kMore;
      }
  }
  state_ = State::kError;
  return Result::kError;
}

// Number states. A byte that cannot continue the number ends it where the number may end (the
// byte is then read as structural), else the input is invalid.
JsonScanner::Result JsonScanner::number(char c) {
  switch (state_) {
    case State::kNumMinus:
      if (c == '0') return state_ = State::kNumZero, Result::kMore;
      if (is_digit(c)) return state_ = State::kNumInt, Result::kMore;
      break;
    case State::kNumZero:
    case State::kNumInt:
      if (state_ == State::kNumInt && is_digit(c)) return Result::kMore;
      if (c == '.') return state_ = State::kNumDot, Result::kMore;
      if (c == 'e' || c == 'E') return state_ = State::kNumExp, Result::kMore;
      if (stack_.empty()) break;  // a top-level number never completes (header comment)
      state_ = State::kAfterValue;
      return structural(c);
    case State::kNumDot:
      if (is_digit(c)) return state_ = State::kNumFrac, Result::kMore;
      break;
    case State::kNumFrac:
      if (is_digit(c)) return Result::kMore;
      if (c == 'e' || c == 'E') return state_ = State::kNumExp, Result::kMore;
      if (stack_.empty()) break;
      state_ = State::kAfterValue;
      return structural(c);
    case State::kNumExp:
      if (c == '+' || c == '-') return state_ = State::kNumExpSign, Result::kMore;
      if (is_digit(c)) return state_ = State::kNumExpDigits, Result::kMore;
      break;
    case State::kNumExpSign:
      if (is_digit(c)) return state_ = State::kNumExpDigits, Result::kMore;
      break;
    case State::kNumExpDigits:
      if (is_digit(c)) return Result::kMore;
      if (stack_.empty()) break;
      state_ = State::kAfterValue;
      return structural(c);
    default:
      break;
  }
  state_ = State::kError;
  return Result::kError;
}

// Between tokens: whitespace, ',' ':' and closing brackets, or the start of a value or key.
JsonScanner::Result JsonScanner::structural(char c) {
  if (is_ws(c)) return Result::kMore;
  switch (state_) {
    case State::kValue:
      return start_value(c);
    case State::kArrayFirst:
      if (c == ']') {
        stack_.pop_back();
        return end_value();
      }
      return start_value(c);
    case State::kObjectFirst:
    case State::kObjectKey:
      if (c == '}' && state_ == State::kObjectFirst) {
        stack_.pop_back();
        return end_value();
      }
      if (c != '"') break;
      state_ = State::kString;
      string_is_key_ = true;
      return Result::kMore;
    case State::kColon:
      if (c != ':') break;
      state_ = State::kValue;
      return Result::kMore;
    case State::kAfterValue: {
      const char open = stack_.back();
      if (c == ',') {
        state_ = open == '{' ? State::kObjectKey : State::kValue;
        string_is_key_ = false;
        return Result::kMore;
      }
      if ((open == '{' && c == '}') || (open == '[' && c == ']')) {
        stack_.pop_back();
        string_is_key_ = false;
        return end_value();
      }
      break;
    }
    default:
      break;
  }
  state_ = State::kError;
  return Result::kError;
}

JsonScanner::Result JsonScanner::feed(char c) {
  switch (state_) {
    case State::kDone:
    case State::kError:
      state_ = State::kError;
      return Result::kError;
    case State::kString:
      if (c == '"') {
        if (string_is_key_) {
          state_ = State::kColon;
          return Result::kMore;
        }
        return end_value();
      }
      if (c == '\\') return state_ = State::kEscape, Result::kMore;
      if (static_cast<unsigned char>(c) < 0x20) break;
      return Result::kMore;
    case State::kEscape:
      if (c == 'u') {
        unicode_left_ = 4;
        return state_ = State::kUnicode, Result::kMore;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' ||
          c == 't')
        return state_ = State::kString, Result::kMore;
      break;
    case State::kUnicode:
      if (!is_hex(c)) break;
      if (--unicode_left_ == 0) state_ = State::kString;
      return Result::kMore;
    case State::kLiteral:
      if (literal_.empty() || c != literal_.front()) break;
      literal_.erase(0, 1);
      if (literal_.empty()) return end_value();
      return Result::kMore;
    case State::kNumMinus:
    case State::kNumZero:
    case State::kNumInt:
    case State::kNumDot:
    case State::kNumFrac:
    case State::kNumExp:
    case State::kNumExpSign:
    case State::kNumExpDigits:
      return number(c);
    default:
      return structural(c);
  }
  state_ = State::kError;
  return Result::kError;
}

}  // namespace rill::toolcall
