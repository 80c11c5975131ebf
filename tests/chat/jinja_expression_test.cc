// Expressions of the Jinja interpreter: literals and Python-style printing, operators, attribute
// and item access, slicing, undefined values, filters, tests, str/dict methods and globals.
// Expected strings were checked against jinja2 3.1 set up as transformers sets it up.
#include <gtest/gtest.h>

#include "tests/chat/test_util.h"

namespace rill {
namespace {

using nlohmann::ordered_json;
using testing::render;
using testing::render_error;

TEST(JinjaPrint, PythonReprOfValues) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }} {{ (1,) }} "
                   "{{ {'a': [1.0, 2.50, 1e20, 1e-7]} }} {{ none }} {{ True }} {{ False }}"),
            "[1, 'a', None, True, 1.5, {'k': \"it's\"}] (1,) {'a': [1.0, 2.5, 1e+20, 1e-07]} "
            "None True False");
}

TEST(JinjaPrint, FloatsLikePython) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 100000000000000000.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} "
                   "{{ 2.0 * 3 }} {{ -0.0 }}"),
            "1.0 1e+17 0.0001 1e-05 0.3333333333333333 6.0 -0.0");
}

TEST(JinjaPrint, StringEscapes) {
  EXPECT_EQ(render("{{ 'a\\tb\\n' }}{{ \"q\\\"q\" }}{{ 'it\\'s' }}{{ '\\u00e9' }}{{ 'x' 'y' }}"),
            "a\tb\nq\"qit'séxy");
  // \u, \U and \x escapes encode through engine/util/utf8.h, at every length boundary.
  EXPECT_EQ(render("{{ '\\x7f\\x80\\u07ff\\u0800\\uffff\\U00010000\\U0010FFFF' }}"),
            "\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf");
  // A lone surrogate has no UTF-8 form (U+FFFD); past U+10FFFF Python refuses the literal.
  EXPECT_EQ(render("{{ '\\ud800' }}"), "\xef\xbf\xbd");
  EXPECT_NE(render_error("{{ '\\U00110000' }}").find("bad escape"), std::string::npos);
  EXPECT_EQ(render("{{ '%c%c' % (233, 128077) }} {{ 'é👍' | tojson(ensure_ascii=true) }}"),
            "é👍 \"\\u00e9\\ud83d\\udc4d\"");
}

TEST(JinjaOperators, Arithmetic) {
  EXPECT_EQ(render("{{ 3 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"),
            "1.5 2.0 3 -4 2 1024");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} "
                   "{{ [1] + [2] }} {{ 10 - 2.5 }} {{ -2 ** 2 }} {{ 1 + true }}"),
            "7 9 a1None ababab [1, 2] 7.5 4 2");
}

TEST(JinjaOperators, ComparisonMembershipLogic) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 2 not in [1,3] }} "
                   "{{ 'k' in {'k': 1} }} {{ not 1 == 2 }} {{ 'b' > 'a' }} {{ [1,2] < [1,3] }}"),
            "True True True True True True True True");
  EXPECT_EQ(render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ 'a' if false else 'b' }} "
                   "{{ 'a' if true }}[{{ 'a' if false }}]"),
            "x y [] b a[]");
  EXPECT_EQ(render("{{ 'tool_calls' in m }}{{ 'x' in m }}{{ m.tool_calls | length }}",
                   {{"m", {{"role", "assistant"}, {"tool_calls", {1, 2}}}}}),
            "TrueFalse2");
}

TEST(JinjaAccess, AttributesItemsAndUndefined) {
  const ordered_json vars = {{"d", {{"k", 1}, {"nested", {{"x", "X"}}}}}, {"xs", {"p", "q"}}};
  EXPECT_EQ(render("{{ d.k }}{{ d['k'] }}{{ d.nested.x }}{{ xs.0 }}{{ xs[1] }}", vars), "11Xpq");
  EXPECT_EQ(render("[{{ missing }}][{{ missing is defined }}][{{ d.nokey }}]"
                   "[{{ d['nokey'] is undefined }}][{{ missing | default('dflt') }}]"
                   "[{{ missing | length }}][{{ d.get('nokey', 'g') }}]",
                   vars),
            "[][False][][True][dflt][0][g]");
  EXPECT_EQ(render("{% set d = {'a': 1, 'b': [2, {'c': 3}]} %}{{ d.b[1].c }}{{ d | length }}"
                   "{{ {'x': 1, 'x': 2} }}"),
            "32{'x': 2}");
}

TEST(JinjaAccess, Slicing) {
  EXPECT_EQ(render("{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ 'hello'[1:3] }}"
                   "{{ 'héllo'[::-1] }}{{ xs[-1] }}{{ xs[10:] }}",
                   {{"xs", {1, 2, 3, 4}}}),
            "[2, 3, 4][1, 2, 3][4, 3, 2, 1][1, 3]elolléh4[]");
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(render("{{ '  hi  ' | trim }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|"
                   "{{ 'hello world' | capitalize }}|{{ 'hello big-world' | title }}|"
                   "{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'x' | center(5) }}|"
                   "{{ 'one two  three' | wordcount }}|{{ '<a&b>' | e }}|{{ 'xyx' | trim('x') }}"),
            "hi|ABC|abc|Hello world|Hello Big-World|bba|  x  |3|&lt;a&amp;b&gt;|y");
}

TEST(JinjaFilters, Sequences) {
  EXPECT_EQ(render("{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | join(', ') }} "
                   "{{ xs | reverse | list }} {{ xs | sort }} {{ xs | sort(reverse=true) }} "
                   "{{ ['b','A','a'] | unique | list }} {{ [3,1,2] | max }} {{ [3,1,2] | min }} "
                   "{{ [1,2,3] | sum }}",
                   {{"xs", {"c", "a", "b"}}}),
            "3 c b c, a, b ['b', 'a', 'c'] ['a', 'b', 'c'] ['c', 'b', 'a'] ['b', 'A'] 3 1 6");
  EXPECT_EQ(render("{{ {'a': 1} | items | list }} {{ 'ab' | list }} "
                   "{{ [1,2,3,4,5] | batch(2) | list }}"),
            "[('a', 1)] ['a', 'b'] [[1, 2], [3, 4], [5]]");
}

TEST(JinjaFilters, MapAndSelect) {
  const ordered_json ms = {{{"role", "user"}, {"content", "u1"}},
                           {{"role", "assistant"}, {"content", "a1"}},
                           {{"role", "user"}, {"content", "u2"}}};
  EXPECT_EQ(
      render("{{ ms | map(attribute='role') | list }} "
             "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | join }} "
             "{{ ms | rejectattr('role', 'eq', 'user') | list | length }} "
             "{{ [1,2,3,4] | select('even') | list }} {{ [1,2,3] | reject('odd') | list }} "
             "{{ ['1','2'] | map('int') | sum }} {{ ms | selectattr('missing') | list }}",
             {{"ms", ms}}),
      "['user', 'assistant', 'user'] u1u2 1 [2, 4] [2] 3 []");
}

TEST(JinjaFilters, Numbers) {
  EXPECT_EQ(render("{{ '42' | int }} {{ 'x' | int }} {{ 3.9 | int }} {{ '2.5' | float }} "
                   "{{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 7 | string }} "
                   "{{ 3 | round }}"),
            "42 0 3 2.5 3 2.57 2.0 7 3");
}

TEST(JinjaFilters, ToJsonIsPythonJsonDumps) {
  ordered_json d = ordered_json::object();
  d["b"] = {1, 2.0, "é\"\n"};
  d["a"] = ordered_json::object();
  d["c"] = ordered_json::array();
  EXPECT_EQ(render("{{ d | tojson }}", {{"d", d}}),
            R"({"b": [1, 2.0, "é\"\n"], "a": {}, "c": []})");
  EXPECT_EQ(
      render("{{ d | tojson(indent=2) }}", {{"d", d}}),
      "{\n  \"b\": [\n    1,\n    2.0,\n    \"é\\\"\\n\"\n  ],\n  \"a\": {},\n  \"c\": []\n}");
  ordered_json e = ordered_json::object();
  e["b"] = 1;
  e["a"] = true;
  EXPECT_EQ(
      render(
          "{{ d | tojson(sort_keys=true) }} {{ d | tojson(separators=(',', ':')) }} "
          "{{ 'é' | tojson(ensure_ascii=true) }} {{ none | tojson }} {{ [] | tojson(indent=4) }}",
          {{"d", e}}),
      R"({"a": true, "b": 1} {"b":1,"a":true} "\u00e9" null [])");
}

TEST(JinjaFilters, Indent) {
  EXPECT_EQ(
      render("{{ 'line1\\nline2\\n\\nline3' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}"),
      "line1\n  line2\n\n  line3|  a\n  b");
}

TEST(JinjaTests, AllTheChatTemplateTests) {
  EXPECT_EQ(
      render("{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ 'a' is string }}"
             "{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}"
             "{{ 'a' is sequence }}{{ none is none }}{{ true is true }}{{ false is false }}"
             "{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(4) }}"
             "{{ 'a' is equalto 'a' }}{{ 1 is eq 1 }}{{ 1 is not none }}{{ x is undefined }}"
             "{{ true is number }}{{ true is integer }}"),
      "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrueFalse");
}

TEST(JinjaMethods, Strings) {
  EXPECT_EQ(
      render("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}"
             "[{{ '  s  '.strip() }}][{{ '  s  '.lstrip() }}][{{ '  s  '.rstrip() }}]"
             "{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}"
             "{{ 'abc'.upper() }}{{ 'hello world'.title() }}{{ 'aXa'.replace('a', 'b') }}"
             "{{ 'héllo'.find('l') }}{{ 'banana'.count('an') }}{{ '{} and {}'.format(1, 'x') }}"
             "{{ '-'.join(['a','b']) }}{{ 'x</think>y'.split('</think>')[-1] }}"),
      "TrueTrue[s][s  ][  s]['a', 'b', '', 'c']['a', 'b']['a', 'b c']ABCHello WorldbXb221 "
      "and xa-by");
}

TEST(JinjaMethods, DictsAndGlobals) {
  EXPECT_EQ(render("{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}"
                   "{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 0) }}",
                   {{"d", {{"a", 1}, {"b", 2}}}}),
            "['a', 'b'][1, 2][('a', 1), ('b', 2)]1None0");
  EXPECT_EQ(render("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ dict(a=1, b='x') }}"
                   "{{ namespace(a=1).a }}"),
            "[0, 1, 2][1, 3, 5]{'a': 1, 'b': 'x'}1");
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
}

TEST(JinjaFilters, LazyResultsBehaveLikePythonIterators) {
  // map / select / reject / unique / batch / items and reverse of a list return iterators in
  // jinja2: always truthy, no len(), not subscriptable.
  EXPECT_EQ(
      render(
          "{{ 'T' if [] | select('odd') else 'F' }}{{ 'T' if [] | select('odd') | list else 'F' }}"
          "{{ [3, 1] | reverse | join }}{{ [1, 2] | map('string') | first }}"),
      "TF131");
  EXPECT_EQ(render_error("{{ [1] | select('odd') | length }}"),
            "chat template line 1: object of type 'generator' has no len()");
  EXPECT_EQ(render("[{{ ([1] | map('string'))[0] }}]"), "[]");
}

TEST(JinjaPrint, DictViewsAndPercentFormatting) {
  EXPECT_EQ(render("{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.items() | length }} "
                   "{{ d.keys() | list }}",
                   {{"d", {{"a", 1}}}}),
            "dict_items([('a', 1)]) dict_keys(['a']) dict_values([1]) 1 ['a']");
  EXPECT_EQ(render("{{ '%s has %d items (%r)' % ('list', 3, 'x') }} {{ '%s' % 5 }} "
                   "{{ '100%%' % () }} {{ '%s-%s' | format(1, 'a') }}"),
            "list has 3 items ('x') 5 100% 1-a");
  EXPECT_EQ(
      render("{{ 3.0 is odd }} {{ 4.0 is even }} {{ 7.5 is divisibleby 2.5 }} {{ false | round }}"),
      "True True True 0");
}

TEST(JinjaFilters, UnicodeCaseMapping) {
  EXPECT_EQ(
      render("{{ 'héllo wörld ñ' | upper }} {{ 'ÉCOLE Ω' | lower }} {{ 'élan vital' | title }} "
             "{{ 'élan' | capitalize }} {{ 'привет мир'.title() }} {{ 'straße'.upper() }}"),
      "HÉLLO WÖRLD Ñ école ω Élan Vital Élan Привет Мир STRASSE");
}

}  // namespace
}  // namespace rill
