// Helpers for the chat template tests: render a template string with variables.
#pragma once

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/chat/chat_template.h"
#include "engine/error.h"

namespace rill::testing {

/// Renders `source` with no messages and `vars` as extra template variables.
inline std::string render(const std::string& source,
                          const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  ChatTemplateOptions options;
  options.extra = vars;
  return ChatTemplate(source).render(nlohmann::ordered_json::array(), options);
}

/// The message of the rill::Error that parsing or rendering `source` throws ("" if none).
inline std::string render_error(const std::string& source,
                                const nlohmann::ordered_json& vars = nlohmann::ordered_json::object()) {
  try {
    render(source, vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

}  // namespace rill::testing
