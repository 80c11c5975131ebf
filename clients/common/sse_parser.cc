#include "clients/common/sse_parser.h"

namespace rill::client {

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  for (char c : bytes)
    if (c != '\r') pending_ += c;
  std::vector<std::string> payloads;
  size_t end;
  while ((end = pending_.find("\n\n")) != std::string::npos) {
    const std::string_view event(pending_.data(), end);
    size_t pos = 0;
    while (pos < event.size()) {
      size_t nl = event.find('\n', pos);
      if (nl == std::string_view::npos) nl = event.size();
      const std::string_view line = event.substr(pos, nl - pos);
      pos = nl + 1;
      if (!line.starts_with("data:")) continue;
      std::string_view data = line.substr(5);
      if (data.starts_with(' ')) data.remove_prefix(1);
      payloads.emplace_back(data);
    }
    pending_.erase(0, end + 2);
  }
  return payloads;
}

}  // namespace rill::client
