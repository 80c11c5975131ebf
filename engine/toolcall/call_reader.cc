#include "engine/toolcall/call_reader.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace rill::toolcall {
namespace {

// Keys and names are short: a longer one is not a call.
constexpr size_t kMaxKeyBytes = 256;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The string a complete JSON string literal stands for ("" when it is not one).
std::string decode_string(const std::string& literal) {
  const auto v = nlohmann::json::parse(literal, nullptr, /*allow_exceptions=*/false);
  return v.is_string() ? v.get<std::string>() : std::string();
}

}  // namespace

CallReader::CallReader(const std::vector<std::string>* names, std::vector<std::string> args_keys)
    : names_(names), args_keys_(std::move(args_keys)) {}

bool CallReader::is_args_key(const std::string& key) const {
  return std::find(args_keys_.begin(), args_keys_.end(), key) != args_keys_.end();
}

CallReader::Status CallReader::end_key() {
  key_ = decode_string(raw_);
  const bool known = key_ == "name" || is_args_key(key_) || key_ == "id" || key_ == "type";
  if (!committed_ && !known) return Status::kFailed;
  return Status::kMore;
}

// The first byte of a value at the call object's top level.
CallReader::Status CallReader::begin_value(char c, std::string& name, std::string& args) {
  if (key_ == "name" && !have_name_) {
    if (c != '"') return fail();
    slot_ = Slot::kName;
    raw_.assign(1, c);
    return Status::kMore;
  }
  if (is_args_key(key_) && !have_args_) {
    if (c != '{') return fail();
    have_args_ = true;
    slot_ = Slot::kArgs;
    if (have_name_) {
      committed_ = true;
      name = name_;
      args += c;
    } else {
      held_args_.assign(1, c);
    }
    return Status::kMore;
  }
  if (!committed_ && key_ != "id" && key_ != "type") return Status::kFailed;  // a repeated key
  slot_ = Slot::kSkip;
  return Status::kMore;
}

// A top-level value just ended.
CallReader::Status CallReader::end_value(std::string& name, std::string& args) {
  if (slot_ == Slot::kName) {
    name_ = decode_string(raw_);
    if (!names_ || std::find(names_->begin(), names_->end(), name_) == names_->end()) return fail();
    have_name_ = true;
    if (have_args_ && !committed_) {  // the arguments came first: commit with all of them
      committed_ = true;
      name = name_;
      args += held_args_;
      held_args_.clear();
    }
  } else if (slot_ == Slot::kArgs) {
    args_done_ = true;
  }
  slot_ = Slot::kNone;
  return Status::kMore;
}

CallReader::Status CallReader::feed(char c, std::string& name, std::string& args) {
  if (!committed_ && ++bytes_ > kMaxUncommittedBytes) return Status::kFailed;
  const bool top = scanner_.depth() == 1;
  const bool key_start = top && scanner_.awaiting_key() && c == '"';
  const bool value_start = top && scanner_.awaiting_value() && !is_ws(c);
  const JsonScanner::Result r = scanner_.feed(c);
  if (r == JsonScanner::Result::kError) return fail();
  if (r == JsonScanner::Result::kDone) {
    if (!have_name_ || !have_args_ || !args_done_) return fail();
    return Status::kDone;
  }
  if (key_start) {
    slot_ = Slot::kKey;
    raw_.assign(1, c);
    return Status::kMore;
  }
  // The name and the arguments are a string and an object, so no value ends on its first byte.
  if (value_start) return begin_value(c, name, args);
  switch (slot_) {
    case Slot::kKey:
      raw_ += c;
      if (raw_.size() > kMaxKeyBytes) return fail();
      if (scanner_.awaiting_colon()) {
        slot_ = Slot::kNone;
        return end_key();
      }
      break;
    case Slot::kName:
      raw_ += c;
      if (raw_.size() > kMaxKeyBytes) return fail();
      if (scanner_.depth() == 1 && scanner_.after_value()) return end_value(name, args);
      break;
    case Slot::kArgs:
      (committed_ ? args : held_args_) += c;
      if (scanner_.depth() == 1 && scanner_.after_value()) return end_value(name, args);
      break;
    case Slot::kSkip:
      if (scanner_.depth() == 1 && (scanner_.after_value() || scanner_.awaiting_key()))
        slot_ = Slot::kNone;
      break;
    case Slot::kNone:
      break;
  }
  return Status::kMore;
}

}  // namespace rill::toolcall
