// HOST:PORT targets as the clients take them on the command line.
#pragma once

#include <string>
#include <utility>

namespace rill::client {

/// HOST and PORT of HOST:PORT (the last colon splits; [v6]:port loses its brackets).
std::pair<std::string, std::string> split_host_port(const std::string& target);

}  // namespace rill::client
