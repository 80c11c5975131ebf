// The Jinja construct cases of tests/fixtures/jinja_cases.json rendered by Rill: each case's
// output, or its error message (after the "chat template line N: " prefix), must be exactly
// what jinja2 renders or raises. tools/check_jinja_cases.py checks the same file against jinja2
// (set up as transformers sets it up), so the expectations are jinja2's, not ours.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/chat/test_util.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

ordered_json load_cases() {
  std::ifstream in(fs::path(RILL_SOURCE_DIR) / "tests" / "fixtures" / "jinja_cases.json");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ordered_json::parse(ss.str())["cases"];
}

// The interpreter's own message, without the prefix that names the template line.
std::string bare_message(const std::string& what) {
  static const std::regex kPrefix("^chat template (syntax error at )?line [0-9]+: ");
  return std::regex_replace(what, kPrefix, "");
}

TEST(JinjaCases, RenderAsJinja2Does) {
  const ordered_json cases = load_cases();
  ASSERT_GT(cases.size(), 100u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    const ordered_json vars = c.contains("vars") ? c["vars"] : ordered_json::object();
    std::string output, error;
    try {
      output = testing::render(c["template"].get<std::string>(), vars);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      error = bare_message(e.what());
    }
    if (c.contains("output")) {
      EXPECT_EQ(error, "");
      EXPECT_EQ(output, c["output"].get<std::string>());
    } else {
      EXPECT_EQ(error, c["error"].get<std::string>());
    }
  }
}

}  // namespace
}  // namespace rill
