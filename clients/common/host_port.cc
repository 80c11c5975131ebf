#include "clients/common/host_port.h"

#include <stdexcept>

namespace rill::client {

std::pair<std::string, std::string> split_host_port(const std::string& target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == target.size())
    throw std::invalid_argument("expected HOST:PORT, got '" + target + "'");
  std::string host = target.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return {host, target.substr(colon + 1)};
}

}  // namespace rill::client
