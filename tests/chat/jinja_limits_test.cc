// Bounds of the Jinja interpreter: nothing recurses deeper than a fixed bound, whatever a
// template builds or a client sends (messages arrive bounded to 64 levels of JSON nesting, but
// ChatTemplate does not rely on it), and runaway templates end in a clean rill::Error.
#include <gtest/gtest.h>

#include <string>

#include "tests/chat/test_util.h"

namespace rill {
namespace {

using nlohmann::ordered_json;
using testing::render;
using testing::render_error;

// [[[..."leaf"...]]], `depth` lists deep (parsed: nlohmann's parser does not recurse).
ordered_json nested_list(int depth) {
  const auto n = static_cast<size_t>(depth);
  return ordered_json::parse(std::string(n, '[') + "\"leaf\"" + std::string(n, ']'));
}

std::string render_messages(const std::string& source, const ordered_json& messages) {
  return ChatTemplate(source).render(messages);
}

TEST(JinjaLimits, ClientValuesNestedDeeperThanTheBoundAreAnError) {
  const std::string source = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}";
  // Deeper than the HTTP parser lets through, still fine here.
  ordered_json ok = ordered_json::array({{{"role", "user"}, {"content", nested_list(100)}}});
  EXPECT_EQ(render_messages(source, ok).size(), 100 * 2 + 6);
  const nlohmann::json deep_json =
      nlohmann::json::parse(std::string(2000, '[') + std::string(2000, ']'));
  try {
    ChatTemplate(source).render(
        nlohmann::json::array({{{"role", "user"}, {"content", deep_json}}}));
    ADD_FAILURE() << "rendered a 2,000-level value";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "chat template input: value nested too deeply (more than 512 levels)");
  }
  const ordered_json deep =
      ordered_json::array({{{"role", "user"}, {"content", nested_list(1000)}}});
  try {
    render_messages(source, deep);
    ADD_FAILURE() << "rendered a 1000-level value";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos) << e.what();
  }
}

TEST(JinjaLimits, TemplatesCannotBuildValuesDeeperThanTheBound) {
  EXPECT_NE(render_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
                         "{% set ns.x = [ns.x] %}{% endfor %}")
                .find("value nested too deeply (more than 512 levels)"),
            std::string::npos);
  // 500 levels are fine, and print.
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in range(500) %}"
                   "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | string | length }}"),
            "1001");
}

TEST(JinjaLimits, NamespaceChainsAndCyclesAreReleasedWithoutRecursion) {
  // A 200,000-long chain through namespace attributes: freed one namespace at a time.
  EXPECT_EQ(render("{% set ns = namespace(head=none) %}{% for i in range(200000) %}"
                   "{% set ns.head = namespace(next=ns.head, i=i) %}{% endfor %}"
                   "{{ ns.head.next.next.i }}"),
            "199997");
  // Printing it walks the chain, which stops at the bound instead of the stack.
  EXPECT_NE(render_error("{% set ns = namespace(head=none) %}{% for i in range(5000) %}"
                         "{% set ns.head = namespace(next=ns.head) %}{% endfor %}{{ ns.head }}")
                .find("nested too deeply"),
            std::string::npos);
  // A namespace holding itself renders, cannot be printed forever, and is released.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = [ns] %}"
                   "{{ ns.me | length }}{{ ns.me[0].me[0].me | length }}"),
            "11");
  EXPECT_NE(render_error("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}")
                .find("nested too deeply"),
            std::string::npos);
}

TEST(JinjaLimits, ExpressionChainsAreBounded) {
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 100000; ++i) filters += "|e";
  EXPECT_NE(render_error(filters + " }}").find("expression nested too deeply"), std::string::npos);
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  EXPECT_NE(render_error(sum + " }}").find("expression nested too deeply"), std::string::npos);
  std::string attrs = "{{ x";
  for (int i = 0; i < 100000; ++i) attrs += ".a";
  EXPECT_NE(render_error(attrs + " }}").find("expression nested too deeply"), std::string::npos);
  // Long flat chains real templates write are far below it.
  std::string ok = "{{ 0";
  for (int i = 0; i < 250; ++i) ok += "+1";
  EXPECT_EQ(render(ok + " }}"), "250");
}

TEST(JinjaLimits, RunawayRecursionIsAnError) {
  EXPECT_EQ(render_error("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}"),
            "chat template line 1: maximum recursion depth exceeded");
  EXPECT_EQ(render_error("{% macro m() %}{% if caller %}{% call m() %}{% endcall %}{% endif %}"
                         "{% endmacro %}{% call m() %}{% endcall %}"),
            "chat template line 1: maximum recursion depth exceeded");
  EXPECT_EQ(render_error("{% macro m() %}{{ caller() }}{% endmacro %}"
                         "{% macro r() %}{% call m() %}{{ r() }}{% endcall %}{% endmacro %}"
                         "{{ r() }}"),
            "chat template line 1: maximum recursion depth exceeded");
  // Recursion through deeply nested blocks: bounded in total, not only per level.
  std::string nested = "{% macro m(n) %}";
  for (int i = 0; i < 150; ++i) nested += "{% if true %}";
  nested += "{{ m(n + 1) }}";
  for (int i = 0; i < 150; ++i) nested += "{% endif %}";
  nested += "{% endmacro %}{{ m(0) }}";
  EXPECT_NE(render_error(nested).find("template nested too deeply while rendering"),
            std::string::npos);
  // 60 levels of a recursive loop over client-shaped data are fine.
  EXPECT_EQ(render("{% for x in [v] recursive %}{% if x is sequence and x is not string %}"
                   "{{ loop(x) }}{% else %}{{ x }}{% endif %}{% endfor %}",
                   {{"v", nested_list(60)}}),
            "leaf");
}

TEST(JinjaLimits, FormattingAndPaddingAreBounded) {
  EXPECT_NE(render_error("{{ '%999999999d' % 1 }}").find("width too big"), std::string::npos);
  EXPECT_NE(render_error("{{ '%.999999999f' % 1 }}").find("precision too big"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a'.center(100000000) }}").find("width too large"), std::string::npos);
  EXPECT_NE(render_error("{{ [1] | slice(100000000) | list }}").find("too large"),
            std::string::npos);
  EXPECT_EQ(render("{{ ('%5000d' % 1) | length }}"), "5000");
}

}  // namespace
}  // namespace rill
