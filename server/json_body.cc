#include "server/json_body.h"

#include <string>

#include "engine/error.h"

namespace rill::server {

std::size_t json_nesting_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // unbalanced text is the parser's to refuse
    }
  }
  return deepest;
}

nlohmann::json parse_json_object(std::string_view body, bool empty_is_object) {
  if (body.empty() && empty_is_object) return nlohmann::json::object();
  if (json_nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    throw Error(ErrorCode::kInvalidArgument,
                "the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels of objects and arrays (the server's limit)");
  nlohmann::json b;
  try {
    b = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("invalid JSON body: ") + e.what());
  }
  if (!b.is_object()) throw Error(ErrorCode::kInvalidArgument, "the body must be a JSON object");
  return b;
}

}  // namespace rill::server
