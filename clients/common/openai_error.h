// The message of an OpenAI-shaped error body ({"error": {"message": ...}}), which rill-server's
// HTTP API answers on failure and sends as a last SSE event when a stream fails.
#pragma once

#include <string>

namespace rill::client {

/// error.message of `body`, or `body` itself when it is not such an object.
std::string openai_error_message(const std::string& body);

}  // namespace rill::client
