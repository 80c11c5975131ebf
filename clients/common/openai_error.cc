#include "clients/common/openai_error.h"

#include <nlohmann/json.hpp>

namespace rill::client {

std::string openai_error_message(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string())
    return j["error"]["message"].get<std::string>();
  return body;
}

}  // namespace rill::client
