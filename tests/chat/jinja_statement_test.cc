// Statements of the Jinja interpreter: whitespace control (with transformers' trim_blocks and
// lstrip_blocks), loops and loop variables, scoping, set, macros, generation and filter blocks,
// and errors naming the template line. Expected strings were checked against jinja2 3.1 set up
// as transformers sets it up.
#include <gtest/gtest.h>

#include "tests/chat/test_util.h"

namespace rill {
namespace {

using nlohmann::ordered_json;
using testing::render;
using testing::render_error;

TEST(JinjaWhitespace, TrimBlocksDropsTheNewlineAfterABlockTag) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
}

TEST(JinjaWhitespace, LstripBlocksDropsIndentBeforeBlockTagsOnly) {
  EXPECT_EQ(render("  {% if true %}\n  x\n  {% endif %}\nend"), "  x\nend");
  EXPECT_EQ(render("  {{ 'v' }}\n  {% set x = 1 %}\nz"), "  v\nz");  // not before {{
}

TEST(JinjaWhitespace, MinusStripsAllWhitespaceOnItsSide) {
  EXPECT_EQ(render("a  {{- ' b ' -}}  c\n{%- if true %} d {% endif -%}\n e"), "a b c d e");
}

TEST(JinjaWhitespace, PlusDisablesLstripAndTrim) {
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
}

TEST(JinjaWhitespace, Comments) {
  EXPECT_EQ(render("a\n  {# note #}\nb {#- c -#}  d"), "a\nbd");
}

TEST(JinjaWhitespace, OneTrailingNewlineIsDroppedAndCrlfNormalized) {
  EXPECT_EQ(render("a\n"), "a");
  EXPECT_EQ(render("a\r\nb\r\n\n"), "a\nb\n");
}

TEST(JinjaLoop, LoopVariables) {
  const ordered_json vars = {{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
                   vars),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(render("{% for x in xs %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}]{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "[<1>2][1<2>3][2<3>]");
  EXPECT_EQ(render("{% for x in range(4) %}{{ loop.cycle('a','b') }}{% endfor %}"), "abab");
}

TEST(JinjaLoop, ElseFilterAndUnpacking) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in xs if x is odd %}{{ x }}{{ loop.length }},{% endfor %}",
                   {{"xs", {1, 2, 3, 4, 5}}}),
            "13,33,53,");
  ordered_json d = ordered_json::object();
  d["b"] = 1;
  d["a"] = {1, "x"};
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
                   "{% for k, v in d|items %}{{ k }}{% endfor %}",
                   {{"d", d}}),
            "b=1;a=[1, 'x'];ba");
}

TEST(JinjaLoop, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}"
                   "{% if x is even %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "1");
}

TEST(JinjaLoop, NestedLoopsHaveTheirOwnLoopObject) {
  EXPECT_EQ(render("{% for a in [1,2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}"
                   "{% endfor %}{{ loop.index }};{% endfor %}"),
            "1x11y21;2x12y22;");
}

TEST(JinjaScope, SetInsideAForLoopDoesNotLeakOut) {
  EXPECT_EQ(
      render("{% set x = 1 %}{% for i in [1,2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}"),
      "23|1");
}

TEST(JinjaScope, NamespaceAttributesDo) {
  EXPECT_EQ(render("{% set ns = namespace(x=1, y='a') %}{% for i in [1,2] %}"
                   "{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}{{ ns.y }}"),
            "4a");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.found = true %}{{ ns.found }}"), "True");
}

TEST(JinjaScope, IfDoesNotOpenAScope) {
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
}

TEST(JinjaSet, BlockSetAndTuples) {
  EXPECT_EQ(render("{% set x %}hello {{ 'world' }}{% endset %}[{{ x }}]"), "[hello world]");
  EXPECT_EQ(render("{% set a, b = 1, 'two' %}{{ a }}{{ b }}"), "1two");
}

TEST(JinjaMacro, ArgumentsDefaultsAndScope) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Ann') }} {{ greet('Bob', punct='?') }} {{ greet(name='Cy') }}"),
            "Hi Ann! Hi Bob? Hi Cy!");
  EXPECT_EQ(render("{% set g = 'G' %}{% macro m() %}{% set g = 'local' %}{{ g }}{% endmacro %}"
                   "{{ m() }}{{ g }}"),
            "localG");
}

TEST(JinjaBlocks, GenerationRendersItsBodyUnchanged) {
  EXPECT_EQ(render("{% generation %}gen {{ 1 }}{% endgeneration %}"), "gen 1");
  EXPECT_EQ(render("{%- generation -%}\n  x\n{%- endgeneration %}"), "x");
}

TEST(JinjaBlocks, FilterBlock) {
  EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}"), "ABC D");
}

TEST(JinjaErrors, RaiseExceptionKeepsExactlyItsMessage) {
  EXPECT_EQ(render_error("line\n{{ raise_exception('Bad role: ' ~ 'x') }}"), "Bad role: x");
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render_error("a\n{% if x %}\nb"),
            "chat template syntax error at line 3: unexpected end of template, expected "
            "'endif'");
  EXPECT_EQ(render_error("ok\n\n{% do foo() %}"),
            "chat template syntax error at line 3: unsupported template tag 'do'");
  EXPECT_EQ(render_error("ok\n{% for x in [] recursive x %}{% endfor %}"),
            "chat template syntax error at line 2: expected '%}', got 'x'");
  EXPECT_EQ(render_error("{{ 'abc }}"),
            "chat template syntax error at line 1: unterminated string");
  EXPECT_EQ(render_error("{{ 1 + }}"), "chat template syntax error at line 1: unexpected '}}'");
  EXPECT_EQ(render_error("{{ (1 + }}"),  // an open bracket hides '}}', as in jinja2
            "chat template syntax error at line 1: unexpected end of template, expected '}}'");
}

TEST(JinjaErrors, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(render_error("x\n\n{{ missing.attr }}"),
            "chat template line 3: 'missing' is undefined");
  EXPECT_EQ(render_error("{% for m in ms %}\n{{ m.strip() }}{% endfor %}", {{"ms", {nullptr}}}),
            "chat template line 2: 'None' has no attribute 'strip'");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"),
            "chat template line 1: can only concatenate str (not \"int\") to str");
}

TEST(JinjaErrors, ValuesAreImmutableLikeJinjaSandbox) {
  EXPECT_EQ(render_error("{% set xs = [1] %}{% set _ = xs.append(2) %}{{ xs }}"),
            "chat template line 1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render_error("{% set d = {} %}{{ d.update({'a': 1}) }}"),
            "chat template line 1: access to attribute 'update' of 'dict' object is unsafe.");
  EXPECT_EQ(render_error("{% set s = 'x' %}{% set s.attr = 1 %}"),
            "chat template line 1: cannot assign attribute on non-namespace object");
}

}  // namespace
}  // namespace rill
