// Small blocking HTTP/1.1 calls for the set-up and bookkeeping around a run (scraping /metrics,
// POST /tokenize); the load itself goes through the asynchronous transports.
#pragma once

#include <string>

namespace rill::loadtest {

struct HttpReply {
  unsigned status = 0;
  std::string body;
};

/// Performs one request to http://HOST:PORT/path (`url` may also be just HOST:PORT/path).
/// Throws std::runtime_error when the server cannot be reached or the URL is malformed.
HttpReply http_call(const std::string& method, const std::string& url, const std::string& body,
                    double timeout_s = 10);

}  // namespace rill::loadtest
