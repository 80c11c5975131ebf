// Tokenizes text with the server's own tokenizer (POST /tokenize over HTTP, Tokenize over gRPC),
// so synthetic prompts have exact token counts for the model being served.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "clients/rill_loadtest/loadtest_options.h"

namespace rill::loadtest {

/// The token ids of `text` without special tokens; throws std::runtime_error on failure.
std::vector<int32_t> tokenize_remote(const LoadTestOptions& options, const std::string& text);

}  // namespace rill::loadtest
