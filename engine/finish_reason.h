// Why a generation ended; shared by the offline generator and the serving scheduler.
#pragma once

namespace rill {

enum class FinishReason {
  kStop,       // an EOS / stop token id or a stop string
  kLength,     // max_tokens, or the context limit of a `full` cache
  kCancelled,  // the client cancelled or went away
  kDeadline,   // the request's total deadline or its queue timeout passed
  kError,      // the engine failed the request (the final event carries the error)
};

/// "stop", "length", "cancelled", "deadline", "error".
const char* finish_reason_name(FinishReason r);

}  // namespace rill
