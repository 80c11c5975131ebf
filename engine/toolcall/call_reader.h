// Reads one tool-call object, {"name": "f", "arguments": {...}} (Llama: "parameters"), a byte at
// a time, for the streaming parsers. It commits to the call as soon as the name is known to be a
// callable tool and the arguments object has begun, then hands the arguments' JSON text on as it
// arrives, only as far as it is valid JSON (json_scanner.h). Before committing, anything unexpected
// (another key, an unknown name, invalid JSON, too many bytes) fails the read, so the caller can
// return the text as content.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/toolcall/json_scanner.h"

namespace rill::toolcall {

class CallReader {
 public:
  /// Bytes a call may take before it commits (a long "arguments" ahead of "name" is held).
  static constexpr size_t kMaxUncommittedBytes = 64 * 1024;

  enum class Status {
    kMore,    // keep feeding
    kDone,    // the object closed: a complete call
    kFailed,  // not a call (never committed): the caller returns the bytes as content
    kBroken,  // committed, then the text stopped being JSON: the call ends as streamed so far
  };

  /// `names`: the tools a call may name. `args_keys`: the keys holding the arguments.
  CallReader(const std::vector<std::string>* names, std::vector<std::string> args_keys);

  /// Feeds one byte (the first must be '{'). On commit, `name` is set (once); `args` receives
  /// the arguments' text from then on (its first bytes may arrive with the commit).
  Status feed(char c, std::string& name, std::string& args);

  bool committed() const { return committed_; }

 private:
  enum class Slot { kNone, kKey, kName, kArgs, kSkip };

  Status fail() { return committed_ ? Status::kBroken : Status::kFailed; }
  Status begin_value(char c, std::string& name, std::string& args);
  Status end_value(std::string& name, std::string& args);
  Status end_key();
  bool is_args_key(const std::string& key) const;

  const std::vector<std::string>* names_;
  std::vector<std::string> args_keys_;
  JsonScanner scanner_;
  Slot slot_ = Slot::kNone;
  std::string raw_;        // the key or name being read (JSON text)
  std::string key_;        // the last key read
  std::string name_;       // the decoded name
  std::string held_args_;  // arguments read before the name
  bool have_name_ = false, have_args_ = false, args_done_ = false, committed_ = false;
  size_t bytes_ = 0;
};

}  // namespace rill::toolcall
