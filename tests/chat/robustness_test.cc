// Robustness: broken or hostile templates end in a rill::Error, never a crash, a hang or another
// exception type. Mutations of the real fixture templates (truncations, deleted and duplicated
// spans) are parsed and rendered; recursion and nesting are bounded.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tests/chat/test_util.h"

namespace rill {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using testing::render_error;

const fs::path kFixtures = fs::path(RILL_SOURCE_DIR) / "tests" / "fixtures" / "chat_templates";

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Renders `source` if it parses; returns false on anything but success or rill::Error.
bool renders_or_reports(const std::string& source, const ordered_json& messages) {
  try {
    ChatTemplateOptions options;
    options.add_generation_prompt = true;
    ChatTemplate(source, "<s>", "</s>").render(messages, options);
  } catch (const Error&) {
  } catch (...) {
    return false;
  }
  return true;
}

TEST(ChatTemplateRobustness, MutatedFixturesFailCleanly) {
  const ordered_json conversations =
      ordered_json::parse(read(kFixtures / "conversations.json"))["conversations"];
  std::mt19937 rng(1234);
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(kFixtures)) {
    if (entry.path().extension() != ".jinja") continue;
    const std::string source = read(entry.path());
    for (int i = 0; i < 60; ++i) {
      std::uniform_int_distribution<size_t> pos(0, source.size());
      size_t a = pos(rng), b = pos(rng);
      if (a > b) std::swap(a, b);
      std::string mutated;
      switch (i % 3) {
        case 0:
          mutated = source.substr(0, a);
          break;  // truncate
        case 1:
          mutated = source.substr(0, a) + source.substr(b);
          break;  // delete
        default:
          mutated = source.substr(0, b) + source.substr(a);
          break;  // duplicate
      }
      const auto& conv = conversations[static_cast<size_t>(i) % conversations.size()];
      EXPECT_TRUE(renders_or_reports(mutated, conv["messages"]))
          << entry.path().filename() << " mutation " << i;
      ++cases;
    }
  }
  EXPECT_GT(cases, 600);
}

TEST(ChatTemplateRobustness, RunawayMacroRecursionIsAnError) {
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}"),
            "chat template line 1: maximum recursion depth exceeded");
}

TEST(ChatTemplateRobustness, DeepNestingIsAnError) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(render_error(deep), "chat template syntax error at line 1: template nested too deeply");
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_NE(render_error(nots + "x }}").find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(render_error(ifs).find("nested too deeply"), std::string::npos);
  // Real templates nest far less: 20 levels of blocks and brackets are fine.
  std::string ok;
  for (int i = 0; i < 20; ++i) ok += "{% if true %}";
  ok += "{{ ((((((((((1)))))))))) }}";
  for (int i = 0; i < 20; ++i) ok += "{% endif %}";
  EXPECT_EQ(testing::render(ok), "1");
}

TEST(ChatTemplateRobustness, HostileValuesAreErrors) {
  for (const char* source :
       {"{{ 'x' * 1000000000 }}", "{{ range(1000000000000) | length }}", "{{ 2 ** 100000 }}",
        "{{ (10 ** 4000) ** 2 }}", "{{ 2 ** 1000000000000000000 }}", "{{ 10 ** 4299 * 10 ** 200 }}",
        "{{ 'a' | center(1e9) }}", "{{ [1] | batch('x') }}", "{{ range('a') }}",
        "{{ 'x'.split(None, 'y') }}", "{{ 'a' | indent(-3) }}", "{{ x.99999999999999999999999 }}",
        "{{ 1 / 0 }}", "{{ 1 // 0 }}", "{{ 5 % 0 }}", "{{ [1][:] [::0] }}", "{{ 'x' | round }}",
        "{{ none() }}", "{{ {}.pop('a') }}"}) {
    SCOPED_TRACE(source);
    EXPECT_NE(render_error(source), "");
  }
}

}  // namespace
}  // namespace rill
