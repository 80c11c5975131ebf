// Jinja filters (jinja2 3.1 semantics), dispatched by name.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <unordered_map>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"

namespace rill::jinja {
namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&);

std::string to_lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string to_upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

int64_t length_of(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(utf8_chars(v.as_string()).size());
  if (v.is_list()) return static_cast<int64_t>(v.as_list().items.size());
  if (v.is_dict()) return static_cast<int64_t>(v.as_dict().entries.size());
  if (v.is_undefined()) return 0;
  fail("object of type '" + v.type_name() + "' has no len()");
}

Value f_length(const Value& v, const CallArgs&) { return Value(length_of(v)); }

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
  const int width = indent.is_int() ? static_cast<int>(indent.as_int()) : -1;
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
    out += attribute.is_none() ? item.str() : get_attribute(item, attribute.str()).str();
  }
  return Value(std::move(out));
}

Value f_upper(const Value& v, const CallArgs&) { return Value(to_upper(v.str())); }
Value f_lower(const Value& v, const CallArgs&) { return Value(to_lower(v.str())); }

Value f_capitalize(const Value& v, const CallArgs&) {
  std::string s = to_lower(v.str());
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return Value(std::move(s));
}

Value f_title(const Value& v, const CallArgs&) {
  // jinja2: split on runs of [-\s({[<], then item[0].upper() + item[1:].lower().
  const std::string s = v.str();
  std::string out;
  bool word_start = true;
  for (char c : s) {
    const bool sep = std::isspace(static_cast<unsigned char>(c)) || c == '-' || c == '(' ||
                     c == '{' || c == '[' || c == '<';
    if (sep) {
      out += c;
      word_start = true;
    } else {
      out += static_cast<char>(word_start ? std::toupper(static_cast<unsigned char>(c))
                                          : std::tolower(static_cast<unsigned char>(c)));
      word_start = false;
    }
  }
  return Value(std::move(out));
}

Value f_replace(const Value& v, const CallArgs& a) {
  const Value method = get_method(Value(v.str()), "replace").value();
  CallArgs args = a;
  return method.as_callable().fn(args);
}

Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) fail("items filter expects a mapping, got " + v.type_name());
  ValueList out;
  for (const auto& [k, x] : v.as_dict().entries) out.push_back(Value::list({Value(k), x}, true));
  return Value::list(std::move(out));
}

Value f_list(const Value& v, const CallArgs&) { return Value::list(v.iterate()); }

Value f_first(const Value& v, const CallArgs&) {
  const ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const CallArgs&) {
  const ValueList items = v.iterate();
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_default(const Value& v, const CallArgs& a) {
  const bool boolean = a.get(1, "boolean", Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get(0, "default_value", Value(""));
  return v;
}

Value f_string(const Value& v, const CallArgs&) { return Value(v.str()); }

Value f_int(const Value& v, const CallArgs& a) {
  const Value fallback = a.get(0, "default", Value(0));
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) return Value(static_cast<int64_t>(v.as_float()));
  if (!v.is_string()) return fallback;
  const std::string s = strip_chars(v.as_string(), nullptr, true, true);
  try {
    size_t used = 0;
    const int64_t i = std::stoll(s, &used, 10);
    if (used == s.size()) return Value(i);
    const double d = std::stod(s, &used);
    if (used == s.size()) return Value(static_cast<int64_t>(d));
  } catch (const std::exception&) {
  }
  return fallback;
}

Value f_float(const Value& v, const CallArgs& a) {
  const Value fallback = a.get(0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  if (!v.is_string()) return fallback;
  const std::string s = strip_chars(v.as_string(), nullptr, true, true);
  try {
    size_t used = 0;
    const double d = std::stod(s, &used);
    if (used == s.size()) return Value(d);
  } catch (const std::exception&) {
  }
  return fallback;
}

Value f_abs(const Value& v, const CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  fail("bad operand type for abs(): '" + v.type_name() + "'");
}

Value f_round(const Value& v, const CallArgs& a) {
  const int64_t precision = a.get(0, "precision", Value(0)).as_int();
  const std::string method = a.get(1, "method", Value("common")).str();
  if (!v.is_number()) fail("round filter expects a number");
  if (v.is_int()) return v;  // Python's round(int, n) stays an int
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.to_double() * scale;
  double r;
  if (method == "common") r = std::nearbyint(x);  // Python's round: half to even
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else fail("method must be common, ceil or floor");
  return Value(r / scale);
}

// A callable applying a filter / test / attribute lookup, for map, select and friends.
Value f_map(const Value& v, const CallArgs& a) {
  ValueList out;
  const Value attribute = a.get(99, "attribute");
  if (!attribute.is_undefined()) {
    const Value fallback = a.get(99, "default");
    for (const Value& item : v.iterate()) {
      Value x = get_attribute(item, attribute.str());
      out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (a.args.empty()) fail("map requires a filter name or attribute=");
  const std::string name = a.args[0].str();
  if (!is_filter(name)) fail("no filter named '" + name + "'");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const Value& item : v.iterate()) out.push_back(apply_filter(name, item, rest));
  return Value::list(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.args.empty()) fail("selectattr/rejectattr need an attribute name");
    attribute = a.args[next++].str();
  }
  std::string test;
  if (next < a.args.size()) test = a.args[next++].str();
  if (!test.empty() && !is_test(test)) fail("no test named '" + test + "'");
  CallArgs test_args;
  test_args.args.assign(a.args.begin() + static_cast<std::ptrdiff_t>(next), a.args.end());
  ValueList out;
  for (const Value& item : v.iterate()) {
    const Value x = by_attr ? get_attribute(item, attribute) : item;
    const bool pass = test.empty() ? x.truthy() : apply_test(test, x, test_args);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, const CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, false); }

// The key unique / sort compare by: an attribute, lowercased strings unless case_sensitive.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_none() || attribute.is_undefined()
                ? item
                : get_attribute(item, attribute.str());
  if (!case_sensitive && k.is_string()) return Value(to_lower(k.as_string()));
  return k;
}

Value f_unique(const Value& v, const CallArgs& a) {
  const bool case_sensitive = a.get(0, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(1, "attribute", Value(None{}));
  ValueList out, seen;
  for (const Value& item : v.iterate()) {
    const Value k = sort_key(item, attribute, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(k); }))
      continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_sort(const Value& v, const CallArgs& a) {
  const bool reverse = a.get(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = a.get(1, "case_sensitive", Value(false)).truthy();
  const Value attribute = a.get(2, "attribute", Value(None{}));
  ValueList items = v.iterate();
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(sort_key(x, attribute, case_sensitive),
                                 sort_key(y, attribute, case_sensitive));
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value f_reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::vector<std::string> chars = utf8_chars(v.as_string());
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
    return Value(std::move(out));
  }
  ValueList items = v.iterate();
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_indent(const Value& v, const CallArgs& a) {
  const Value width = a.get(0, "width", Value(4));
  const bool first = a.get(1, "first", Value(false)).truthy();
  const bool blank = a.get(2, "blank", Value(false)).truthy();
  if (width.is_int() && (width.as_int() < 0 || width.as_int() > 1024)) fail("indent width out of range");
  const std::string pad = width.is_string() ? width.as_string()
                                            : std::string(static_cast<size_t>(width.as_int()), ' ');
  std::vector<std::string> lines;  // str.splitlines() of s + "\n"
  const std::string s = v.str() + "\n";
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] == '\n') {
      lines.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += '\n';
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  return Value(first ? pad + out : out);
}

Value f_safe(const Value& v, const CallArgs&) { return v.is_string() ? v : Value(v.str()); }

Value f_escape(const Value& v, const CallArgs&) {
  std::string out;
  for (char c : v.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

Value f_wordcount(const Value& v, const CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  for (char c : v.str()) {
    const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                   static_cast<unsigned char>(c) >= 0x80;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_center(const Value& v, const CallArgs& a) {
  const std::string s = v.str();
  const int64_t w = a.get(0, "width", Value(80)).as_int();
  if (w > 1 << 20) fail("center width too large");
  const auto width = static_cast<size_t>(std::max<int64_t>(w, 0));
  const size_t len = utf8_chars(s).size();
  if (width <= len) return Value(s);
  const size_t total = width - len;
  const size_t left = total / 2 + (total & width & 1);  // CPython's centering rule
  return Value(std::string(left, ' ') + s + std::string(total - left, ' '));
}

Value f_batch(const Value& v, const CallArgs& a) {
  const int64_t size = a.get(0, "linecount").as_int();
  if (size <= 0) fail("batch size must be positive");
  const Value fill = a.get(1, "fill_with", Value(None{}));
  ValueList out, row;
  for (const Value& item : v.iterate()) {
    row.push_back(item);
    if (static_cast<int64_t>(row.size()) == size) out.push_back(Value::list(std::move(row))), row = {};
  }
  if (!row.empty()) {
    if (!fill.is_none())
      while (static_cast<int64_t>(row.size()) < size) row.push_back(fill);
    out.push_back(Value::list(std::move(row)));
  }
  return Value::list(std::move(out));
}

Value f_attr(const Value& v, const CallArgs& a) { return get_attribute(v, a.get(0, "name").str()); }

Value f_min_max(const Value& v, bool want_max) {
  const ValueList items = v.iterate();
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  Value best = items[0];
  for (const Value& x : items) {
    const int c = compare_values(sort_key(x, Value(None{}), false), sort_key(best, Value(None{}), false));
    if (want_max ? c > 0 : c < 0) best = x;
  }
  return best;
}
Value f_min(const Value& v, const CallArgs&) { return f_min_max(v, false); }
Value f_max(const Value& v, const CallArgs&) { return f_min_max(v, true); }

Value f_sum(const Value& v, const CallArgs& a) {
  const Value attribute = a.get(0, "attribute", Value(None{}));
  Value total = a.get(1, "start", Value(0));
  for (const Value& x : v.iterate())
    total = binary("+", total, attribute.is_none() ? x : get_attribute(x, attribute.str()));
  return total;
}

Value f_format(const Value& v, const CallArgs& a) {
  // printf-style "%s" / "%d" / "%%" (jinja2's format filter is `s % args`).
  const std::string s = v.str();
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char spec = s[++i];
    if (spec == '%') {
      out += '%';
    } else if (spec == 's' || spec == 'd' || spec == 'r') {
      if (next >= a.args.size()) fail("not enough arguments for format string");
      const Value& x = a.args[next++];
      out += spec == 'r' ? x.repr() : spec == 'd' ? std::to_string(static_cast<int64_t>(x.to_double())) : x.str();
    } else {
      fail(std::string("unsupported format character '") + spec + "'");
    }
  }
  return Value(std::move(out));
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"trim", f_trim},           {"length", f_length},       {"count", f_length},
      {"tojson", f_tojson},       {"join", f_join},           {"upper", f_upper},
      {"lower", f_lower},         {"capitalize", f_capitalize}, {"title", f_title},
      {"replace", f_replace},     {"items", f_items},         {"list", f_list},
      {"first", f_first},         {"last", f_last},           {"default", f_default},
      {"d", f_default},           {"string", f_string},       {"int", f_int},
      {"float", f_float},         {"abs", f_abs},             {"round", f_round},
      {"map", f_map},             {"select", f_select},       {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"unique", f_unique},
      {"sort", f_sort},           {"reverse", f_reverse},     {"indent", f_indent},
      {"safe", f_safe},           {"e", f_escape},            {"escape", f_escape},
      {"wordcount", f_wordcount}, {"center", f_center},       {"batch", f_batch},
      {"attr", f_attr},           {"min", f_min},             {"max", f_max},
      {"sum", f_sum},             {"format", f_format},
  };
  return kFilters;
}

}  // namespace

bool is_filter(const std::string& name) { return filters().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '" + name + "'");
  return it->second(operand, args);
}

}  // namespace rill::jinja
