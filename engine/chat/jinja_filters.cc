// Jinja filters on single values (jinja2 3.1 semantics) and the filter dispatch.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <string>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_filter_table.h"
#include "engine/chat/jinja_ops.h"

namespace rill::jinja {
namespace {

bool is_py_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's int(text, base): surrounding whitespace, a sign, digits with single underscores
// between them, and for base 16/8/2 an optional 0x / 0o / 0b prefix.
std::optional<Value> parse_python_int(const std::string& raw, int base) {
  const std::string s = strip_chars(raw, nullptr, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
    if ((base == 16 && p == 'x') || (base == 8 && p == 'o') || (base == 2 && p == 'b')) {
      i += 2;
      if (i < s.size() && s[i] == '_') ++i;
    }
  }
  if (i >= s.size() || s.size() - i > 4300) return std::nullopt;
  BigInt value(0);
  const BigInt big_base(base);
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    if (c == '_') {
      if (!prev_digit) return std::nullopt;
      prev_digit = false;
      continue;
    }
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    value = value * big_base + BigInt(d);
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  return Value(negative ? -value : value);
}

// Python's float(text): whitespace, sign, digits (single underscores between), an exponent,
// or inf / infinity / nan in any case.
std::optional<double> parse_python_float(const std::string& raw) {
  std::string s = strip_chars(raw, nullptr, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool ok = i > 0 && i + 1 < s.size() &&
                      std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                      std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    digits += s[i];
  }
  std::string lower;
  for (char c : digits) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t sign = !lower.empty() && (lower[0] == '+' || lower[0] == '-') ? 1 : 0;
  const std::string word = lower.substr(sign);
  if (word == "inf" || word == "infinity" || word == "nan") {
    const double v = word == "nan" ? std::nan("") : HUGE_VAL;
    return lower[0] == '-' ? -v : v;
  }
  if (word.empty() || !(std::isdigit(static_cast<unsigned char>(word[0])) || word[0] == '.'))
    return std::nullopt;
  for (char c : word)
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != '+' &&
        c != '-')
      return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return std::nullopt;
  return v;
}

// int(f) for a float: its integral part exactly; inf and nan raise as in Python.
Value int_of_float(double d) {
  if (std::isnan(d)) fail("cannot convert float NaN to integer");
  if (std::isinf(d)) fail("cannot convert float infinity to integer");
  return Value(BigInt::from_double(std::trunc(d)));
}

Value f_length(const Value& v, const CallArgs&) {
  return Value(length_of(v));
}

Value f_trim(const Value& v, const CallArgs& a) {
  const Value chars = a.get(0, "chars");
  const std::string set = chars.is_string() ? chars.as_string() : std::string();
  return Value(strip_chars(v.str(), chars.is_string() ? &set : nullptr, true, true));
}

Value f_tojson(const Value& v, const CallArgs& a) {
  const bool ensure_ascii = a.get(0, "ensure_ascii", Value(false)).truthy();
  const Value indent = a.get(1, "indent", Value(None{}));
  const Value separators = a.get(2, "separators", Value(None{}));
  const bool sort_keys = a.get(3, "sort_keys", Value(false)).truthy();
  std::string item_sep, key_sep;
  const bool custom = separators.is_list() && separators.as_list().items.size() == 2;
  if (custom) {
    item_sep = separators.as_list().items[0].str();
    key_sep = separators.as_list().items[1].str();
  }
  int width = -1;
  if (indent.is_int()) {
    if (indent.as_int() > 1024) fail("tojson indent out of range");
    width = static_cast<int>(std::max<int64_t>(indent.as_int(), 0));
  }
  return Value(json_dumps(v, width, custom ? &item_sep : nullptr, custom ? &key_sep : nullptr,
                          sort_keys, ensure_ascii));
}

Value f_join(const Value& v, const CallArgs& a) {
  const std::string sep = a.get(0, "d", Value("")).str();
  const Value attribute = a.get(1, "attribute", Value(None{}));
  std::string out;
  bool first = true;
  for (const Value& item : v.iterate()) {
    if (!first) out += sep;
    first = false;
    out += attribute.is_none() ? item.str() : lookup_path(item, attribute).str();
  }
  return Value(std::move(out));
}

Value f_upper(const Value& v, const CallArgs&) {
  return Value(py_upper(v.str()));
}
Value f_lower(const Value& v, const CallArgs&) {
  return Value(py_lower(v.str()));
}

Value f_capitalize(const Value& v, const CallArgs&) {
  const std::vector<std::string> chars = utf8_chars(v.str());
  std::string out;
  for (size_t i = 0; i < chars.size(); ++i) out += i == 0 ? py_upper(chars[i]) : py_lower(chars[i]);
  return Value(std::move(out));
}

Value f_title(const Value& v, const CallArgs&) {
  // jinja2: split on runs of [-\s({[<], then item[0].upper() + item[1:].lower().
  std::string out;
  bool word_start = true;
  for (const std::string& c : utf8_chars(v.str())) {
    const bool sep = c.size() == 1 &&
                     (is_py_space(c[0]) || std::string("-({[<").find(c[0]) != std::string::npos);
    out += sep ? c : word_start ? py_upper(c) : py_lower(c);
    word_start = sep;
  }
  return Value(std::move(out));
}

Value f_replace(const Value& v, const CallArgs& a) {
  const Value method = get_method(Value(v.str()), "replace").value();
  CallArgs args = a;
  return method.as_callable().fn(args);
}

Value f_first(const Value& v, const CallArgs&) {
  const ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const CallArgs&) {
  if (v.is_lazy()) fail("'" + v.type_name() + "' object is not reversible");
  const ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_default(const Value& v, const CallArgs& a) {
  const bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
  return v;
}

Value f_string(const Value& v, const CallArgs&) {
  return Value(v.str());
}

// jinja2's int filter: int(value[, base]), else int(float(value)), else the default.
Value f_int(const Value& v, const CallArgs& a) {
  const Value fallback = a.get(0, "default", Value(0));
  const Value base_v = a.get(1, "base", Value(10));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) {
    if (std::isnan(v.as_float())) return fallback;  // ValueError -> the default
    return int_of_float(v.as_float());
  }
  if (!v.is_string()) return fallback;
  const int64_t base = base_v.is_int() ? base_v.as_int() : 10;
  if (base < 2 || base > 36) fail("int() base must be >= 2 and <= 36, or 0");
  if (auto n = parse_python_int(v.as_string(), static_cast<int>(base))) return *n;
  const std::optional<double> d = parse_python_float(v.as_string());
  if (!d || std::isnan(*d)) return fallback;
  return int_of_float(*d);
}

Value f_float(const Value& v, const CallArgs& a) {
  const Value fallback = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  if (!v.is_string()) return fallback;
  const std::optional<double> d = parse_python_float(v.as_string());
  return d ? Value(*d) : fallback;
}

Value f_abs(const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_int()) return v.as_big_int().negative() ? unary("-", v) : v;
  fail("bad operand type for abs(): '" + v.type_name() + "'");
}

// Python's int.__round__(ndigits) for ndigits < 0: to a multiple of 10^-ndigits, half to even.
Value round_int(const Value& v, int64_t ndigits) {
  if (ndigits >= 0) return v;
  if (-ndigits > 4300) return Value(0);
  const BigInt scale = BigInt::pow(BigInt(10), static_cast<uint64_t>(-ndigits));
  BigInt q, r;
  BigInt::divmod_floor(v.as_big_int(), scale, q, r);
  const int c = BigInt::compare(r + r, scale);
  const bool q_odd = (q.to_string().back() - '0') % 2 == 1;
  if (c > 0 || (c == 0 && q_odd)) q = q + BigInt(1);
  return Value(q * scale);
}

Value f_round(const Value& v, const CallArgs& a) {
  const Value precision_v = a.get(0, "precision", Value(0));
  const std::string method = a.get(1, "method", Value("common")).str();
  if (method != "common" && method != "ceil" && method != "floor")
    fail("method must be common, ceil or floor");
  if (!precision_v.is_int() && !precision_v.is_bool())
    fail("'" + precision_v.type_name() + "' object cannot be interpreted as an integer");
  const int64_t precision = precision_v.is_bool() ? precision_v.as_bool() : precision_v.as_int();
  if (!v.is_number()) fail("type " + v.type_name() + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_float()) return Value(python_round(v.as_float(), precision));
    return round_int(v.is_bool() ? Value(int64_t{v.as_bool()}) : v, precision);
  }
  // jinja2: math.ceil / floor(value * 10**precision) / 10**precision, a float.
  const Value scale = precision >= 0
                          ? Value(BigInt::pow(BigInt(10), static_cast<uint64_t>(precision)))
                          : Value(std::pow(10.0, static_cast<double>(precision)));
  const Value scaled = binary("*", v, scale);
  Value whole = scaled;
  if (scaled.is_float()) {
    const double d = scaled.as_float();
    if (std::isnan(d)) fail("cannot convert float NaN to integer");
    if (std::isinf(d)) fail("cannot convert float infinity to integer");
    whole = Value(BigInt::from_double(method == "ceil" ? std::ceil(d) : std::floor(d)));
  }
  return binary("/", whole, scale);
}

Value f_attr(const Value& v, const CallArgs& a) {
  return get_attribute(v, a.get(0, "name").str());
}

// jinja2's format filter: `value % args`, or `value % kwargs`.
Value f_format(const Value& v, const CallArgs& a) {
  if (!a.args.empty() && !a.kwargs.empty())
    fail("can't handle positional and keyword arguments at the same time");
  const Value operand = a.kwargs.empty() ? Value::list(a.args, true) : Value::dict(a.kwargs);
  return Value(percent_format(v.str(), operand));
}

Value f_safe(const Value& v, const CallArgs&) {
  return v.is_string() ? v : Value(v.str());
}

const FilterTable& filters() {
  static const FilterTable kFilters = [] {
    FilterTable t = {
        {"trim", f_trim},       {"length", f_length},
        {"count", f_length},    {"tojson", f_tojson},
        {"join", f_join},       {"upper", f_upper},
        {"lower", f_lower},     {"capitalize", f_capitalize},
        {"title", f_title},     {"replace", f_replace},
        {"first", f_first},     {"last", f_last},
        {"default", f_default}, {"d", f_default},
        {"string", f_string},   {"int", f_int},
        {"float", f_float},     {"abs", f_abs},
        {"round", f_round},     {"attr", f_attr},
        {"format", f_format},   {"safe", f_safe},
    };
    add_sequence_filters(t);
    add_text_filters(t);
    return t;
  }();
  return kFilters;
}

}  // namespace

int64_t length_of(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(utf8_chars(v.as_string()).size());
  if (v.is_lazy()) fail("object of type '" + v.type_name() + "' has no len()");
  if (v.is_list()) return static_cast<int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().items.size());
  if (v.is_undefined()) return 0;
  fail("object of type '" + v.type_name() + "' has no len()");
}

Value lookup_path(const Value& item, const Value& attribute, const Value& fallback) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& path = attribute.as_string();
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
      const bool digits =
          !part.empty() && part.size() < 19 && std::all_of(part.begin(), part.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
          });
      parts.push_back(digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  Value v = item;
  for (const Value& part : parts) {
    v = get_item(v, part);  // an undefined intermediate raises, as in jinja2
    if (v.is_undefined() && !fallback.is_undefined()) v = fallback;
  }
  return v;
}

bool is_filter(const std::string& name) {
  return filters().count(name) != 0;
}

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("No filter named '" + name + "' found.");
  return it->second(operand, args);
}

}  // namespace rill::jinja
