// How the HTTP front end reads a request: Beast's parser with the server's limits. One place, so
// that the request fuzzer (tests/fuzz/http_request_fuzzer.cc) parses bytes exactly as a
// connection does.
#pragma once

#include <cstdint>

#include <boost/beast/http.hpp>

#include "server/http_limits.h"

namespace rill::server {

using HttpRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

/// Sets a fresh parser's limits: the header (kMaxHeaderBytes) and the body (`max_body_bytes`,
/// the --max-body-bytes setting; larger: 413).
inline void limit_request_parser(HttpRequestParser& parser, std::int64_t max_body_bytes) {
  parser.body_limit(static_cast<std::uint64_t>(max_body_bytes));
  parser.header_limit(static_cast<std::uint32_t>(kMaxHeaderBytes));
}

}  // namespace rill::server
