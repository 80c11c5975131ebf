// JSON schema -> grammar: documents the schema admits (in the emitted shape) are sentences,
// others are not; unsupported keywords are refused by name.
#include <gtest/gtest.h>

#include "engine/error.h"
#include "tests/grammar/test_util.h"

namespace rill::grammar {
namespace {

CompiledGrammar schema(const std::string& s) {
  return CompiledGrammar(
      build_grammar(ConstraintSpec{ConstraintKind::kJsonSchema, s, {}, "", ""}, {}), {},
      std::chrono::steady_clock::now());
}

void expect(const std::string& s, std::vector<std::string> good, std::vector<std::string> bad) {
  const auto g = schema(s);
  for (const auto& d : good) EXPECT_TRUE(testing::complete(g, d)) << s << " should accept " << d;
  for (const auto& d : bad) EXPECT_FALSE(testing::complete(g, d)) << s << " should refuse " << d;
}

std::string error_of(const std::string& s) {
  try {
    build_grammar(ConstraintSpec{ConstraintKind::kJsonSchema, s, {}, "", ""}, {});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, Objects) {
  expect(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]})",
      {R"({"b":"x"})", R"({"a":1,"b":""})", R"({ "a": -3, "b": "q\"\u00e9", "c": true })",
       R"({"b":"x","c":false})", "{\n  \"a\": 1,\n  \"b\": \"y\"\n}"},
      {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","d":1})", R"({"b":"x",})",
       R"({"b":1})", R"({  "b":"x"})"});
  expect(
      R"({"type":"object","properties":{"a":{"type":"null"}},"additionalProperties":{"type":"integer"}})",
      {R"({})", R"({"a":null,"z":1,"y":2})", R"({"q":5})"},
      {R"({"q":"s"})", R"({"q":1,"a":null})"});
  expect(R"({"type":"object"})", {R"({})", R"({"x":[1,{"y":null}]})"}, {R"([])"});
}

TEST(JsonSchema, ArraysAndTuples) {
  expect(R"({"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3})",
         {"[1]", "[1.5,-2e10,0]", "[ 1 , 2 ]"}, {"[]", "[1,2,3,4]", "[01]", "[1.]", "[\"a\"]"});
  expect(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
         {"[]", R"(["a"])", R"(["a",1])"}, {R"(["a",1,2])", "[1]"});
  expect(R"({"type":"array","prefixItems":[{"const":1}],"items":{"type":"boolean"},"minItems":2})",
         {"[1,true]", "[1,false,true]"}, {"[1]", "[true,1]"});
}

TEST(JsonSchema, ScalarsEnumsConstAndAlternatives) {
  expect(R"({"enum":["red",2,null,{"a":[1]}]})", {R"("red")", "2", "null", R"({"a":[1]})"},
         {R"("blue")", "3"});
  expect(R"({"const":"x"})", {R"("x")"}, {R"("y")"});
  expect(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})", {"5", R"("ab")"},
         {R"("abc")", "true"});
  expect(R"({"type":["string","null"]})", {R"("a")", "null"}, {"1"});
  expect(R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("abé")", R"("a\n")"},
         {R"("a")", R"("abcd")"});
  expect(R"({"type":"string","pattern":"^[a-z]+\\d$"})", {R"("abc1")"}, {R"("abc")", R"("Abc1")"});
  expect(R"({"type":"string","pattern":"b"})", {R"("abc")", R"("b")"}, {R"("ac")"});
  expect(R"({"type":"string","format":"date"})", {R"("2024-02-29")"},
         {R"("2024-13-01")", R"("24-01-01")"});
  expect(R"({"type":"string","format":"date-time"})",
         {R"("2024-02-29T10:20:30Z")", R"("2024-02-29T10:20:30.5+01:00")"},
         {R"("2024-02-29 10:20:30")"});
  expect(R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
         {R"("123e4567")"});
  expect(R"({"type":"string","format":"email"})", {R"("a.b@example.com")"},
         {R"("ab.example.com")"});
  expect(R"({"type":"string","format":"ipv4"})", {R"("192.168.0.255")"}, {R"("256.1.1.1")"});
  expect(R"({"type":"string","format":"ipv6"})",
         {R"("::1")", R"("fe80::1:2")", R"("1:2:3:4:5:6:7:8")"}, {R"("1::2::3")"});
}

TEST(JsonSchema, IntegerBoundsExactly) {
  const std::vector<std::pair<std::string, std::pair<int, int>>> cases = {
      {R"({"type":"integer","minimum":-17,"maximum":123})", {-17, 123}},
      {R"({"type":"integer","exclusiveMinimum":7,"exclusiveMaximum":1000})", {8, 999}},
      {R"({"type":"integer","minimum":-1000,"maximum":-20})", {-1000, -20}},
      {R"({"type":"integer","minimum":0.5,"maximum":9.5})", {1, 9}}};
  for (const auto& [s, range] : cases) {
    const auto g = schema(s);
    for (int v = -1200; v <= 1200; ++v)
      EXPECT_EQ(testing::complete(g, std::to_string(v)), v >= range.first && v <= range.second)
          << s << " " << v;
    EXPECT_FALSE(testing::complete(g, "007"));
  }
  expect(R"({"type":"integer","minimum":5})", {"5", "99999999999"}, {"4", "-5"});
  expect(R"({"type":"integer","maximum":-5})", {"-5", "-99999999"}, {"-4", "0"});
  expect(R"({"type":"number","minimum":0,"maximum":10})", {"0", "9.99", "10", "10.0"},
         {"-1", "10.5", "11"});
  expect(R"({"type":"number","exclusiveMinimum":0,"maximum":1})", {"0.5", "1"},
         {"0", "0.0", "1.5"});
}

TEST(JsonSchema, RefsAndRecursion) {
  expect(
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})",
      {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
      {R"({"v":1})"});
  expect(R"({"type":"object","properties":{"self":{"$ref":"#"}}})",
         {R"({})", R"({"self":{"self":{}}})"}, {R"({"self":1})"});
}

TEST(JsonSchema, RefusesUnsupportedKeywordsByName) {
  EXPECT_EQ(error_of(R"({"type":"object","not":{}})"),
            "json_schema: unsupported keyword 'not' at '#'");
  EXPECT_EQ(error_of(R"({"properties":{"a":{"type":"integer","multipleOf":3}}})"),
            "json_schema: unsupported keyword 'multipleOf' at '#/properties/a'");
  EXPECT_EQ(error_of(R"({"type":"object","minProperties":1})"),
            "json_schema: unsupported keyword 'minProperties' at '#'");
  EXPECT_EQ(error_of(R"({"type":"array","uniqueItems":true})"),
            "json_schema: unsupported keyword 'uniqueItems' (true) at '#'");
  EXPECT_EQ(error_of(R"({"type":"string","format":"color"})"),
            "json_schema: unsupported format 'color' at '#'");
  EXPECT_EQ(error_of(R"({"$ref":"#/$defs/missing"})"),
            "json_schema: $ref '#/$defs/missing' does not resolve at '#'");
  EXPECT_EQ(error_of(R"({"$ref":"http://x/y.json"})"),
            "json_schema: only local $ref ('#...') is supported, not 'http://x/y.json' at '#'");
  EXPECT_EQ(error_of(R"({"type":"strng"})"), "json_schema: unknown type 'strng' at '#'");
  EXPECT_EQ(error_of(R"({"type":"object","properties":{},"required":["a"]})"),
            "json_schema: required property 'a' is not in 'properties' at '#'");
  EXPECT_EQ(error_of(R"({"type":"string","pattern":"(a"})"),
            "json_schema: pattern: missing ')' at offset 2");
  EXPECT_NE(error_of("{").find("invalid JSON"), std::string::npos);
  EXPECT_EQ(error_of(std::string(70, '[') + std::string(70, ']')),
            "json_schema: nesting deeper than the limit of 64");
  EXPECT_EQ(error_of(R"({"type":"integer","minimum":5,"maximum":1})"),
            "json_schema: integer bounds admit no value at '#'");
  EXPECT_EQ(error_of(R"({"type":"number","minimum":-1.5})"),
            "json_schema: number bound 'minimum' must be an integer (fractional bounds are "
            "supported for type integer only) at '#'");
}

TEST(JsonSchema, OpenAiStrictModeExample) {
  expect(R"({"type":"object","properties":{
      "steps":{"type":"array","items":{"type":"object","properties":{"explanation":{"type":"string"},"output":{"type":"string"}},
               "required":["explanation","output"],"additionalProperties":false}},
      "final_answer":{"type":"string"},
      "unit":{"type":["string","null"],"enum":["c","f",null]}},
      "required":["steps","final_answer","unit"],"additionalProperties":false,"$defs":{}})",
         {R"({"steps":[{"explanation":"a","output":"b"}],"final_answer":"x","unit":null})",
          R"({"steps":[],"final_answer":"","unit":"c"})"},
         {R"({"steps":[],"final_answer":"","unit":"k"})",
          R"({"steps":[{"explanation":"a"}],"final_answer":"x","unit":null})"});
}

}  // namespace
}  // namespace rill::grammar
