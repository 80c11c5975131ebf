#include "engine/grammar/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar_error.h"
#include "engine/grammar/json_formats.h"
#include "engine/grammar/json_numbers.h"
#include "engine/grammar/regex_compiler.h"
#include "engine/grammar/utf8_class.h"

namespace rill::grammar {

namespace {

using json = nlohmann::ordered_json;

const std::set<std::string, std::less<>> kAnnotations = {
    "title",    "description", "$schema",  "$id",       "$comment", "default",
    "examples", "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
const std::set<std::string, std::less<>> kKeywords = {"type",
                                                      "enum",
                                                      "const",
                                                      "anyOf",
                                                      "oneOf",
                                                      "allOf",
                                                      "$ref",
                                                      "properties",
                                                      "required",
                                                      "additionalProperties",
                                                      "items",
                                                      "prefixItems",
                                                      "minItems",
                                                      "maxItems",
                                                      "uniqueItems",
                                                      "minLength",
                                                      "maxLength",
                                                      "pattern",
                                                      "format",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum"};

}  // namespace

size_t text_depth(std::string_view t, size_t limit) {
  size_t depth = 0, worst = 0;
  bool in_str = false, esc = false;
  for (char c : t) {
    if (in_str) {
      if (esc)
        esc = false;
      else if (c == '\\')
        esc = true;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"')
      in_str = true;
    else if (c == '{' || c == '[') {
      worst = std::max(worst, ++depth);
      if (worst > limit) return worst;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return worst;
}

namespace {

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const json& doc, const GrammarLimits& limits)
      : g_(g), doc_(doc), limits_(limits) {}

  int32_t run() {
    const int32_t root = schema_rule(doc_, "");
    while (!pending_.empty()) {
      auto [rule, schema, path] = pending_.back();
      pending_.pop_back();
      if (g_.rules().size() > limits_.max_rules)
        fail("json_schema: the schema needs more rules than the limit of " +
             std::to_string(limits_.max_rules));
      g_.define(rule, body(*schema, path));
    }
    return root;
  }

  // Shared rules of generic JSON.
  int32_t ws() {
    if (ws_ < 0) {
      ws_ = g_.add_rule("ws");
      g_.define(ws_, g_.optional(g_.choice(
                         {g_.literal(" "), g_.seq({g_.literal("\n"), g_.repeat(g_.byte_set([] {
                                                     ByteSet s = ByteSet::of(' ');
                                                     s.set('\t');
                                                     return s;
                                                   }()),
                                                                               0, 20)})})));
    }
    return g_.ref(ws_);
  }
  // One JSON string character, inline (a rule of its own would end after every character,
  // which the token tables cannot decide in advance); the expression is shared.
  int32_t char_rule() {
    if (char_ < 0) {
      const int32_t plain =
          utf8_class(g_, normalize({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, kMaxCodePoint}}));
      ByteSet esc;
      for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<uint8_t>(c));
      ByteSet hex = ByteSet::range('0', '9');
      hex |= ByteSet::range('a', 'f');
      hex |= ByteSet::range('A', 'F');
      const int32_t escape =
          g_.seq({g_.literal("\\"),
                  g_.choice({g_.byte_set(esc),
                             g_.seq({g_.literal("u"), g_.repeat(g_.byte_set(hex), 4, 4)})})});
      char_ = g_.choice({plain, escape});
    }
    return char_;
  }
  int32_t string_rule() {
    if (string_ < 0) {
      string_ = g_.add_rule("string");
      g_.define(string_,
                g_.seq({g_.literal("\""), g_.repeat(char_rule(), 0, -1), g_.literal("\"")}));
    }
    return g_.ref(string_);
  }
  int32_t number_expr(bool integer) {
    std::vector<int32_t> parts{
        g_.optional(g_.literal("-")),
        g_.choice({g_.literal("0"), g_.seq({g_.byte_set(ByteSet::range('1', '9')),
                                            g_.repeat(g_.byte_set(ByteSet::range('0', '9')), 0,
                                                      kMaxJsonDigits - 1)})})};
    if (!integer) {
      parts.push_back(g_.optional(g_.seq(
          {g_.literal("."), g_.repeat(g_.byte_set(ByteSet::range('0', '9')), 1, kMaxJsonDigits)})));
      ByteSet e = ByteSet::of('e');
      e.set('E');
      ByteSet sign = ByteSet::of('+');
      sign.set('-');
      parts.push_back(
          g_.optional(g_.seq({g_.byte_set(e), g_.optional(g_.byte_set(sign)),
                              g_.repeat(g_.byte_set(ByteSet::range('0', '9')), 1, 3)})));
    }
    return g_.seq(std::move(parts));
  }
  int32_t value_rule() {
    if (value_ < 0) {
      value_ = g_.add_rule("value");
      object_ = g_.add_rule("object");
      array_ = g_.add_rule("array");
      g_.define(value_,
                g_.choice({g_.ref(object_), g_.ref(array_), string_rule(), number_expr(false),
                           g_.literal("true"), g_.literal("false"), g_.literal("null")}));
      auto member = [&] {
        return g_.seq({string_rule(), ws(), g_.literal(":"), ws(), g_.ref(value_)});
      };
      g_.define(
          object_,
          g_.seq({g_.literal("{"), ws(),
                  g_.optional(g_.seq(
                      {member(), g_.repeat(g_.seq({ws(), g_.literal(","), ws(), member()}), 0, -1),
                       ws()})),
                  g_.literal("}")}));
      g_.define(
          array_,
          g_.seq({g_.literal("["), ws(),
                  g_.optional(g_.seq(
                      {g_.ref(value_),
                       g_.repeat(g_.seq({ws(), g_.literal(","), ws(), g_.ref(value_)}), 0, -1),
                       ws()})),
                  g_.literal("]")}));
    }
    return g_.ref(value_);
  }
  int32_t object_rule_id() {
    value_rule();
    return object_;
  }

 private:
  struct Pending {
    int32_t rule;
    const json* schema;
    std::string path;
  };

  [[noreturn]] void error(const std::string& path, const std::string& what) const {
    fail("json_schema: " + what + " at '" + (path.empty() ? "#" : "#" + path) + "'");
  }

  // A rule for the subschema (compiled later from the work list); $ref targets are shared.
  int32_t schema_rule(const json& s, const std::string& path) {
    if (g_.rules().size() >= limits_.max_rules)
      fail("json_schema: the schema needs more rules than the limit of " +
           std::to_string(limits_.max_rules));
    const int32_t r = g_.add_rule("s" + std::to_string(g_.rules().size()));
    pending_.push_back({r, &s, path});
    return r;
  }

  int32_t ref_rule(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#')
      error(path, "only local $ref ('#...') is supported, not '" + ref + "'");
    const json* target = &doc_;
    try {
      if (ref.size() > 1) target = &doc_.at(json::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      error(path, "$ref '" + ref + "' does not resolve");
    }
    const int32_t r = schema_rule(*target, ref.substr(1));
    refs_.emplace(ref, r);
    return r;
  }

  std::optional<int64_t> int_bound(const json& s, const char* key, const std::string& path,
                                   int adjust) {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    if (!v.is_number()) error(path, std::string("'") + key + "' must be a number");
    if (v.is_number_integer()) return v.get<int64_t>() + adjust;
    const double d = v.get<double>();
    if (d > 9.2e18 || d < -9.2e18) error(path, std::string("'") + key + "' is out of range");
    // A fractional bound of an integer: the nearest integer inside it.
    const double r = adjust > 0   ? std::floor(d) + 1
                     : adjust < 0 ? std::ceil(d) - 1
                                  : (std::string(key) == "minimum" ? std::ceil(d) : std::floor(d));
    return static_cast<int64_t>(r);
  }

  int32_t integer_body(const json& s, const std::string& path) {
    if (s.contains("multipleOf")) error(path, "unsupported keyword 'multipleOf'");
    auto lo = int_bound(s, "minimum", path, 0);
    auto hi = int_bound(s, "maximum", path, 0);
    if (auto x = int_bound(s, "exclusiveMinimum", path, 1)) lo = lo ? std::max(*lo, *x) : *x;
    if (auto x = int_bound(s, "exclusiveMaximum", path, -1)) hi = hi ? std::min(*hi, *x) : *x;
    if (!lo && !hi) return number_expr(true);
    if (lo && hi && *lo > *hi) error(path, "integer bounds admit no value");
    return integer_range(g_, lo, hi);
  }

  int32_t number_body(const json& s, const std::string& path) {
    const bool bounded = s.contains("minimum") || s.contains("maximum") ||
                         s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum");
    if (!bounded) return number_expr(false);
    // Supported: integral bounds with a lower bound >= 0: an integer part in [lo, hi - 1] with
    // any fraction, or hi itself (exclusive bounds exclude the bound itself).
    auto integral = [&](const char* k) -> std::optional<double> {
      if (!s.contains(k)) return std::nullopt;
      const json& v = s[k];
      if (!v.is_number() || std::floor(v.get<double>()) != v.get<double>() ||
          std::abs(v.get<double>()) > 1e18)
        error(path,
              std::string("number bound '") + k +
                  "' must be an integer (fractional bounds are supported for type integer only)");
      return v.get<double>();
    };
    auto mn = integral("minimum"), mx = integral("maximum"), xmn = integral("exclusiveMinimum"),
         xmx = integral("exclusiveMaximum");
    if ((mn && xmn) || (mx && xmx)) error(path, "both inclusive and exclusive bounds on one side");
    const double lo = mn ? *mn : xmn ? *xmn : -1;
    if (lo < 0)
      error(path, "number bounds need a lower bound >= 0 (use type integer for negative ranges)");
    const auto ilo = static_cast<int64_t>(lo);
    const int32_t digit = g_.byte_set(ByteSet::range('0', '9'));
    const int32_t frac_any =
        g_.optional(g_.seq({g_.literal("."), g_.repeat(digit, 1, kMaxJsonDigits)}));
    auto nonzero_frac = [&] {
      return g_.seq({g_.literal("."),
                     g_.repeat(g_.byte_set(ByteSet::range('0', '9')), 0, kMaxJsonDigits - 1),
                     g_.byte_set(ByteSet::range('1', '9'))});
    };
    std::vector<int32_t> alts;
    if (!mx && !xmx) {
      // [lo, inf): lo itself (only when inclusive), or more.
      alts.push_back(g_.seq({integer_range(g_, ilo, std::nullopt), frac_any}));
      if (xmn)
        alts = {g_.choice(
            {g_.seq({integer_range(g_, ilo, ilo), nonzero_frac()}),
             g_.seq({integer_range(g_, ilo + 1, std::nullopt),
                     g_.optional(
                         g_.seq({g_.literal("."), g_.repeat(g_.byte_set(ByteSet::range('0', '9')),
                                                            1, kMaxJsonDigits)}))})})};
      return g_.choice(std::move(alts));
    }
    const auto ihi = static_cast<int64_t>(mx ? *mx : *xmx);
    if (ihi < ilo || (ihi == ilo && (xmn || xmx))) error(path, "number bounds admit no value");
    // Integer part in [lo, hi-1]: any fraction (lo exclusive: lo needs a nonzero fraction).
    if (ihi - 1 >= ilo) {
      if (xmn) {
        alts.push_back(g_.seq({integer_range(g_, ilo, ilo), nonzero_frac()}));
        if (ihi - 1 >= ilo + 1)
          alts.push_back(g_.seq({integer_range(g_, ilo + 1, ihi - 1), frac_any}));
      } else {
        alts.push_back(g_.seq({integer_range(g_, ilo, ihi - 1), frac_any}));
      }
    }
    if (mx)
      alts.push_back(g_.seq(
          {integer_range(g_, ihi, ihi),
           g_.optional(g_.seq({g_.literal("."), g_.repeat(g_.literal("0"), 1, kMaxJsonDigits)}))}));
    return g_.choice(std::move(alts));
  }

  int32_t string_body(const json& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    const int n_kinds =
        (has_len ? 1 : 0) + (s.contains("pattern") ? 1 : 0) + (s.contains("format") ? 1 : 0);
    if (n_kinds > 1)
      error(path,
            "only one of 'pattern', 'format' and minLength/maxLength is supported on one string");
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) error(path, "'pattern' must be a string");
      const std::string p = s["pattern"].get<std::string>();
      RegexOptions o;
      o.json_string = true;
      o.max_repeat = limits_.max_repeat;
      o.what = "json_schema: pattern";
      const RegexResult r = compile_regex(g_, p, o);
      std::vector<int32_t> seq{g_.literal("\"")};
      if (!r.anchored_start) seq.push_back(g_.repeat(char_rule(), 0, -1));
      seq.push_back(r.expr);
      if (!r.anchored_end) seq.push_back(g_.repeat(char_rule(), 0, -1));
      seq.push_back(g_.literal("\""));
      return g_.seq(std::move(seq));
    }
    if (s.contains("format")) {
      if (!s["format"].is_string()) error(path, "'format' must be a string");
      const std::string f = s["format"].get<std::string>();
      const std::string* re = format_regex(f);
      if (!re) error(path, "unsupported format '" + f + "'");
      RegexOptions o;
      o.json_string = true;
      o.what = "json_schema: format";
      return g_.seq({g_.literal("\""), compile_regex(g_, *re, o).expr, g_.literal("\"")});
    }
    if (has_len) {
      const int32_t lo = count(s, "minLength", path, 0);
      const int32_t hi = s.contains("maxLength") ? count(s, "maxLength", path, 0) : -1;
      if (hi >= 0 && hi < lo) error(path, "maxLength is less than minLength");
      return g_.seq({g_.literal("\""), g_.repeat(char_rule(), lo, hi), g_.literal("\"")});
    }
    return string_rule();
  }

  int32_t count(const json& s, const char* key, const std::string& path, int32_t dflt) {
    if (!s.contains(key)) return dflt;
    const json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      error(path, std::string("'") + key + "' must be a non-negative integer");
    if (v.get<int64_t>() > limits_.max_repeat)
      error(path, std::string("'") + key + "' is above the limit of " +
                      std::to_string(limits_.max_repeat));
    return static_cast<int32_t>(v.get<int64_t>());
  }

  int32_t comma() { return g_.seq({ws(), g_.literal(","), ws()}); }

  int32_t array_body(const json& s, const std::string& path) {
    if (s.contains("uniqueItems") && s["uniqueItems"] != false)
      error(path, "unsupported keyword 'uniqueItems' (true)");
    const int32_t lo = count(s, "minItems", path, 0);
    const int32_t hi = s.contains("maxItems") ? count(s, "maxItems", path, 0) : -1;
    if (hi >= 0 && hi < lo) error(path, "maxItems is less than minItems");
    std::optional<int32_t> item;  // nullopt: no items beyond prefixItems
    if (!s.contains("items") || s["items"] == true)
      item = value_rule();
    else if (s["items"] != false)
      item = g_.ref(schema_rule(s["items"], path + "/items"));
    std::vector<int32_t> prefix;
    if (s.contains("prefixItems")) {
      const json& p = s["prefixItems"];
      if (!p.is_array()) error(path, "'prefixItems' must be an array");
      for (size_t i = 0; i < p.size(); ++i)
        prefix.push_back(schema_rule(p[i], path + "/prefixItems/" + std::to_string(i)));
    }
    const auto k = static_cast<int32_t>(prefix.size());
    if (!item && lo > k) error(path, "minItems exceeds the prefixItems with 'items': false");
    // Elements after the prefix: (, item){extra_lo, extra_hi}.
    int32_t tail = g_.empty();
    if (item && (hi < 0 || hi > k)) {
      const int32_t extra_lo = std::max(0, lo - k);
      const int32_t extra_hi = hi < 0 ? -1 : hi - k;
      if (k == 0) {
        const int32_t rest = g_.repeat(g_.seq({comma(), *item}), std::max(0, extra_lo - 1),
                                       extra_hi < 0 ? -1 : extra_hi - 1);
        const int32_t list = g_.seq({*item, rest});
        tail = extra_lo == 0 ? g_.optional(list) : list;
      } else {
        tail = g_.repeat(g_.seq({comma(), *item}), extra_lo, extra_hi);
      }
    }
    const int32_t required = std::min(lo, k);
    const int32_t last = hi < 0 ? k : std::min(hi, k);
    for (int32_t i = last - 1; i >= required; --i) {
      std::vector<int32_t> part;
      if (i > 0) part.push_back(comma());
      part.push_back(g_.ref(prefix[static_cast<size_t>(i)]));
      part.push_back(tail);
      tail = g_.optional(g_.seq(std::move(part)));
    }
    std::vector<int32_t> seq{g_.literal("["), ws()};
    for (int32_t i = 0; i < required; ++i) {
      if (i > 0) seq.push_back(comma());
      seq.push_back(g_.ref(prefix[static_cast<size_t>(i)]));
    }
    seq.push_back(tail);
    seq.push_back(ws());
    seq.push_back(g_.literal("]"));
    return g_.seq(std::move(seq));
  }

  int32_t object_body(const json& s, const std::string& path) {
    for (const char* k : {"patternProperties", "propertyNames", "minProperties", "maxProperties",
                          "dependentRequired", "dependentSchemas", "unevaluatedProperties"})
      if (s.contains(k)) error(path, std::string("unsupported keyword '") + k + "'");
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) error(path, "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) error(path, "'required' must be an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) error(path, "'required' must hold strings");
        if (!props.contains(r.get<std::string>()))
          error(path, "required property '" + r.get<std::string>() + "' is not in 'properties'");
        required.insert(r.get<std::string>());
      }
    }
    std::optional<int32_t> extra;  // value of additional properties
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a == true)
        extra = value_rule();
      else if (a.is_object())
        extra = g_.ref(schema_rule(a, path + "/additionalProperties"));
      else if (a != false)
        error(path, "'additionalProperties' must be a boolean or a schema");
    } else if (!s.contains("properties")) {
      extra = value_rule();
    }
    std::vector<int32_t> kv;
    std::vector<bool> req;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string key = json(it.key()).dump();
      const int32_t v = schema_rule(it.value(), path + "/properties/" + it.key());
      kv.push_back(g_.seq({g_.literal(key), ws(), g_.literal(":"), ws(), g_.ref(v)}));
      req.push_back(required.count(it.key()) > 0);
    }
    const size_t n = kv.size();
    // T_i: properties i.. after at least one; F_i: properties i.. with none before.
    std::vector<int32_t> t(n + 1), f(n + 1);
    for (size_t i = 0; i <= n; ++i) {
      t[i] = g_.add_rule("t" + std::to_string(g_.rules().size()));
      f[i] = g_.add_rule("f" + std::to_string(g_.rules().size()));
    }
    if (extra) {
      auto member = [&] { return g_.seq({string_rule(), ws(), g_.literal(":"), ws(), *extra}); };
      g_.define(t[n], g_.repeat(g_.seq({comma(), member()}), 0, -1));
      g_.define(f[n],
                g_.optional(g_.seq({member(), g_.repeat(g_.seq({comma(), member()}), 0, -1)})));
    } else {
      g_.define(t[n], g_.empty());
      g_.define(f[n], g_.empty());
    }
    for (size_t i = n; i-- > 0;) {
      const int32_t with_t = g_.seq({comma(), kv[i], g_.ref(t[i + 1])});
      g_.define(t[i], req[i] ? with_t : g_.choice({with_t, g_.ref(t[i + 1])}));
      const int32_t first = g_.seq({kv[i], g_.ref(t[i + 1])});
      g_.define(f[i], req[i] ? first : g_.choice({first, g_.ref(f[i + 1])}));
    }
    return g_.seq({g_.literal("{"), ws(), g_.ref(f[0]), ws(), g_.literal("}")});
  }

  int32_t typed_body(const std::string& type, const json& s, const std::string& path) {
    if (type == "string") return string_body(s, path);
    if (type == "integer") return integer_body(s, path);
    if (type == "number") return number_body(s, path);
    if (type == "boolean") return g_.choice({g_.literal("true"), g_.literal("false")});
    if (type == "null") return g_.literal("null");
    if (type == "object") return object_body(s, path);
    if (type == "array") return array_body(s, path);
    error(path, "unknown type '" + type + "'");
  }

  std::string inferred_type(const json& s) const {
    for (const char* k : {"properties", "additionalProperties", "required"})
      if (s.contains(k)) return "object";
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return "array";
    for (const char* k : {"pattern", "format", "minLength", "maxLength"})
      if (s.contains(k)) return "string";
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return "number";
    return "";
  }

  int32_t body(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) error(path, "schema 'false' admits no value");
      return value_rule();
    }
    if (!s.is_object()) error(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kAnnotations.count(it.key()) && !kKeywords.count(it.key()))
        error(path, "unsupported keyword '" + it.key() + "'");
    size_t constraints = 0;
    for (auto it = s.begin(); it != s.end(); ++it) constraints += kKeywords.count(it.key());
    if (s.contains("$ref")) {
      if (constraints > 1) error(path, "'$ref' with sibling keywords is not supported");
      if (!s["$ref"].is_string()) error(path, "'$ref' must be a string");
      return g_.ref(ref_rule(s["$ref"].get<std::string>(), path));
    }
    for (const char* k : {"anyOf", "oneOf", "allOf"}) {
      if (!s.contains(k)) continue;
      const json& list = s[k];
      if (!list.is_array() || list.empty())
        error(path, std::string("'") + k + "' must be a non-empty array");
      if (std::string(k) == "allOf" && list.size() != 1)
        error(path, "'allOf' with more than one schema is not supported");
      std::vector<int32_t> alts;
      for (size_t i = 0; i < list.size(); ++i)
        alts.push_back(g_.ref(schema_rule(list[i], path + "/" + k + "/" + std::to_string(i))));
      const int32_t choice = g_.choice(std::move(alts));
      if (constraints == 1) return choice;
      // Sibling keywords: both must hold; supported only as a type-less wrapper.
      error(path, std::string("'") + k + "' with sibling keywords is not supported");
    }
    if (s.contains("const")) return g_.literal(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty())
        error(path, "'enum' must be a non-empty array");
      std::vector<int32_t> alts;
      for (const json& v : s["enum"]) alts.push_back(g_.literal(v.dump()));
      return g_.choice(std::move(alts));
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string())
        types.push_back(t.get<std::string>());
      else if (t.is_array())
        for (const json& x : t) {
          if (!x.is_string()) error(path, "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      else
        error(path, "'type' must be a string or an array of strings");
    } else if (const std::string t = inferred_type(s); !t.empty()) {
      types.push_back(t);
    } else {
      return value_rule();
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) alts.push_back(typed_body(t, s, path));
    return g_.choice(std::move(alts));
  }

  Grammar& g_;
  const json& doc_;
  const GrammarLimits& limits_;
  std::vector<Pending> pending_;
  std::map<std::string, int32_t> refs_;
  int32_t ws_ = -1, char_ = -1, string_ = -1, value_ = -1, object_ = -1, array_ = -1;
};

}  // namespace

int32_t add_json_schema(Grammar& g, std::string_view schema_text, const GrammarLimits& limits) {
  if (schema_text.size() > limits.max_spec_bytes)
    fail("json_schema: the schema is " + std::to_string(schema_text.size()) +
         " bytes, more than the limit of " + std::to_string(limits.max_spec_bytes));
  if (text_depth(schema_text, kMaxSchemaDepth) > kMaxSchemaDepth)
    fail("json_schema: nesting deeper than the limit of " + std::to_string(kMaxSchemaDepth));
  json doc;
  try {
    doc = json::parse(schema_text);
  } catch (const std::exception& e) {
    fail(std::string("json_schema: invalid JSON: ") + e.what());
  }
  return SchemaCompiler(g, doc, limits).run();
}

int32_t add_json_object(Grammar& g) {
  static const json kEmpty = json::object();
  const GrammarLimits limits;
  return SchemaCompiler(g, kEmpty, limits).object_rule_id();
}

}  // namespace rill::grammar
