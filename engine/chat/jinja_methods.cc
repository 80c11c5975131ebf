// Methods of str / dict / list values, attribute lookup, and the global functions.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <unordered_map>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"

namespace rill::jinja {
namespace {

bool is_py_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' ||
         (c >= 0x1c && c <= 0x1f);
}

// Byte offset -> code point index (Python indexes strings by code point).
int64_t char_index(const std::string& s, size_t byte) {
  int64_t n = 0;
  for (size_t i = 0; i < byte && i < s.size(); ++i)
    n += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> split(const std::string& s, const Value& sep_v, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep_v.is_none() || sep_v.is_undefined()) {
    size_t i = 0;
    while (true) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t end = s.size();
        while (end > i && is_py_space(s[end - 1])) --end;
        out.push_back(s.substr(i, end - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(s[j])) ++j;
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string sep = sep_v.str();
  if (sep.empty()) fail("empty separator");
  size_t start = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    const size_t at = s.find(sep, start);
    if (at == std::string::npos) break;
    out.push_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.push_back(s.substr(start));
  return out;
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.emplace_back(p);
  return Value::list(std::move(items));
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every character
    const auto chars = utf8_chars(s);
    for (const auto& c : chars) {
      if (count < 0 || done < count) out += to, ++done;
      out += c;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + to;
    start = at + from.size();
    ++done;
  }
  return out + s.substr(start);
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0
                  : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const auto& a : affix.as_list().items)
      if (one(a.str())) return true;
    return false;
  }
  if (!affix.is_string()) fail("startswith/endswith first arg must be str or a tuple of str");
  return one(affix.as_string());
}

// Python's str.format with "{}", "{0}" and "{name}" fields (no format specs).
std::string py_format(const std::string& s, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}';
      ++i;
      continue;
    }
    if (s[i] != '{') {
      out += s[i];
      continue;
    }
    const size_t end = s.find('}', i);
    if (end == std::string::npos) fail("Single '{' encountered in format string");
    const std::string field = s.substr(i + 1, end - i - 1);
    if (field.find_first_of(":!") != std::string::npos) fail("format specs are not supported");
    Value v;
    if (field.empty()) {
      v = a.get(auto_index++, "");
    } else if (std::all_of(field.begin(), field.end(),
                           [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      v = field.size() < 6 ? a.get(static_cast<size_t>(std::stoul(field)), "") : Value();
    } else {
      v = a.get(SIZE_MAX, field);
    }
    if (v.is_undefined()) fail("format field '" + field + "' has no argument");
    out += v.str();
    i = end;
  }
  return out;
}

// Python's str.title(): a cased character after an uncased one is uppercased, others lowered.
std::string title_case(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (const std::string& c : utf8_chars(s)) {
    const std::string lower = py_lower(c), upper = py_upper(c);
    const bool cased = lower != upper;
    out += cased ? (prev_cased ? lower : upper) : c;
    prev_cased = cased;
  }
  return out;
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [&](char c) { return pred(static_cast<unsigned char>(c)); });
}

std::optional<Value> string_method(const std::string& s, const std::string& name) {
  using A = CallArgs;
  Function fn;
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    fn = [s, prefix](A& a) { return Value(affix_match(s, a.get(0, "prefix"), prefix)); };
  } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    fn = [s, left, right](A& a) {
      const Value c = a.get(0, "chars", Value(None{}));
      const std::string set = c.is_string() ? c.as_string() : "";
      return Value(strip_chars(s, c.is_string() ? &set : nullptr, left, right));
    };
  } else if (name == "split") {
    fn = [s](A& a) {
      return string_list(
          split(s, a.get(0, "sep", Value(None{})), a.get(1, "maxsplit", Value(-1)).as_int()));
    };
  } else if (name == "splitlines") {
    fn = [s](A&) {
      std::vector<std::string> lines = split(s, Value("\n"), -1);
      if (!lines.empty() && lines.back().empty()) lines.pop_back();
      return string_list(lines);
    };
  } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    fn = [s, name](A& a) { return apply_filter(name, Value(s), a); };
    if (name == "title") fn = [s](A&) { return Value(title_case(s)); };
  } else if (name == "replace") {
    fn = [s](A& a) {
      return Value(replace_all(s, a.get(0, "old").str(), a.get(1, "new").str(),
                               a.get(2, "count", Value(-1)).as_int()));
    };
  } else if (name == "find" || name == "rfind" || name == "index") {
    fn = [s, name](A& a) {
      const std::string sub = a.get(0, "sub").str();
      const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos && name == "index") fail("substring not found");
      return Value(at == std::string::npos ? int64_t{-1} : char_index(s, at));
    };
  } else if (name == "count") {
    fn = [s](A& a) {
      const std::string sub = a.get(0, "sub").str();
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_chars(s).size()) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value(n);
    };
  } else if (name == "join") {
    fn = [s](A& a) {
      std::string out;
      bool first = true;
      for (const Value& v : a.get(0, "iterable").iterate()) {
        if (!v.is_string())
          fail("sequence item: expected str instance, " + v.type_name() + " found");
        out += (first ? "" : s) + v.as_string();
        first = false;
      }
      return Value(std::move(out));
    };
  } else if (name == "format") {
    fn = [s](A& a) { return Value(py_format(s, a)); };
  } else if (name == "isdigit") {
    fn = [s](A&) { return Value(all_chars(s, ::isdigit)); };
  } else if (name == "isalpha") {
    fn = [s](A&) { return Value(all_chars(s, ::isalpha)); };
  } else if (name == "isalnum") {
    fn = [s](A&) { return Value(all_chars(s, ::isalnum)); };
  } else if (name == "isspace") {
    fn = [s](A&) { return Value(all_chars(s, ::isspace)); };
  } else {
    return std::nullopt;
  }
  return Value::function(name, std::move(fn));
}

std::string unsafe_hint(const std::string& attr, const std::string& type) {
  return "access to attribute '" + attr + "' of '" + type + "' object is unsafe.";
}

std::optional<Value> dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(name, [d, name](CallArgs&) {
      ValueList out;
      for (const auto& [k, v] : d.as_dict().entries)
        out.push_back(name == "items"  ? Value::list({Value(k), v}, true)
                      : name == "keys" ? Value(k)
                                       : v);
      // A Python dict view; it prints as dict_items([...]) but iterates like a list.
      return Value::list(std::move(out), false,
                         name == "items"  ? "dict_items"
                         : name == "keys" ? "dict_keys"
                                          : "dict_values");
    });
  }
  if (name == "get") {
    return Value::function(name, [d](CallArgs& a) {
      const Value key = a.get(0, "key");
      const Value* v = key.is_string() ? d.as_dict().find(key.as_string()) : nullptr;
      return v ? *v : a.get(1, "default", Value(None{}));
    });
  }
  if (name == "copy") return Value::function(name, [d](CallArgs&) { return d; });
  static const char* const kUnsafe[] = {"pop", "popitem", "setdefault", "update", "clear"};
  for (const char* u : kUnsafe)
    if (name == u) return Value::undefined(unsafe_hint(name, "dict"));
  return std::nullopt;
}

std::optional<Value> list_method(const Value& l, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function(name, [l, name](CallArgs& a) {
      const Value x = a.get(0, "value");
      int64_t n = 0, i = 0;
      for (const auto& item : l.as_list().items) {
        if (item.equals(x)) {
          if (name == "index") return Value(i);
          ++n;
        }
        ++i;
      }
      if (name == "index") fail(x.repr() + " is not in list");
      return Value(n);
    });
  }
  if (name == "copy") return Value::function(name, [l](CallArgs&) { return l; });
  static const char* const kUnsafe[] = {"append", "extend",  "insert", "pop",
                                        "remove", "reverse", "sort",   "clear"};
  for (const char* u : kUnsafe)
    if (name == u) return Value::undefined(unsafe_hint(name, l.type_name()));
  return std::nullopt;
}

// A sandbox limit, like jinja2's MAX_RANGE (100,000); a template looping further is broken.
constexpr double kMaxRangeLength = 1e6;

Value g_range(CallArgs& a) {
  int64_t start = 0, stop, step = 1;
  if (a.args.empty() || a.args.size() > 3) fail("range expected 1 to 3 arguments");
  for (const auto& v : a.args)
    if (!v.is_int()) fail("range() arguments must be integers");
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  const double count =
      (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
  if (count > kMaxRangeLength) fail("range too big (more than 1,000,000 items)");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.emplace_back(i);
  return Value::list(std::move(out));
}

DictEntries kwargs_with_mapping(CallArgs& a) {
  DictEntries entries;
  if (!a.args.empty()) {
    if (!a.args[0].is_dict()) fail("expected a mapping argument");
    entries = a.args[0].as_dict().entries;
  }
  for (auto& [k, v] : a.kwargs) {
    // An init-capture: clang 14 (the fuzz build's) cannot capture a structured binding.
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&key = k](const auto& e) { return e.first == key; });
    if (it != entries.end())
      it->second = v;
    else
      entries.emplace_back(k, v);
  }
  return entries;
}

// Uppercase mapping built once by inverting the lowercase tables (first code point wins, so
// ASCII and the main alphabets map as Python does; multi-character uppercasings like ß -> SS
// are not applied).
const std::unordered_map<std::string, std::string>& upper_map() {
  static const std::unordered_map<std::string, std::string> kMap = [] {
    std::unordered_map<std::string, std::string> m;
    for (char32_t cp = 0x80; cp < 0x20000; ++cp) {
      if (cp >= 0xD800 && cp < 0xE000) continue;
      std::string upper;
      utf8::append(upper, cp);
      const std::string lower = unicode::to_lower(upper);
      if (lower != upper && utf8_chars(lower).size() == 1) m.emplace(lower, upper);
    }
    return m;
  }();
  return kMap;
}

}  // namespace

std::string py_lower(const std::string& s) {
  return unicode::to_lower(s);
}

std::string py_upper(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const std::string& c : utf8_chars(s)) {
    if (c.size() == 1) {
      out += static_cast<char>(std::toupper(static_cast<unsigned char>(c[0])));
      continue;
    }
    if (c == "\u00df") {  // ß: the one multi-character uppercasing common in chat text
      out += "SS";
      continue;
    }
    auto it = upper_map().find(c);
    out += it == upper_map().end() ? c : it->second;
  }
  return out;
}

std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right) {
  auto strip = [&](const std::string& c) {
    return chars ? chars->find(c) != std::string::npos : c.size() == 1 && is_py_space(c[0]);
  };
  const std::vector<std::string> cs = utf8_chars(s);
  size_t b = 0, e = cs.size();
  if (left)
    while (b < e && strip(cs[b])) ++b;
  if (right)
    while (e > b && strip(cs[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cs[i];
  return out;
}

int compare_values(const Value& a, const Value& b) {
  if (compare("<", a, b)) return -1;
  return compare("<", b, a) ? 1 : 0;
}

std::optional<Value> get_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return string_method(obj.as_string(), name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  return std::nullopt;
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (name.find('.') != std::string::npos) {  // filters' dotted paths: "function.name", "0"
    Value v = obj;
    size_t start = 0;
    while (true) {
      const size_t dot = name.find('.', start);
      const std::string part =
          name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      v = digits && part.size() < 18 ? get_item(v, Value(static_cast<int64_t>(std::stoll(part))))
                                     : get_attribute(v, part);
      if (dot == std::string::npos) return v;
      start = dot + 1;
    }
  }
  if (obj.is_undefined()) return obj;
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().find(name)) return *v;
  } else if (auto method = get_method(obj, name)) {
    return *method;
  } else if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  if (obj.is_none()) return Value::undefined("'None' has no attribute '" + name + "'");
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

DictEntries global_functions() {
  DictEntries g;
  g.emplace_back("range", Value::function("range", g_range));
  g.emplace_back("namespace", Value::function("namespace", [](CallArgs& a) {
                   return Value::make_namespace(kwargs_with_mapping(a));
                 }));
  g.emplace_back("dict", Value::function("dict", [](CallArgs& a) {
                   return Value::dict(kwargs_with_mapping(a));
                 }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](CallArgs& a) -> Value {
                   throw TemplateError(a.get(0, "message").str(), 0, true);
                 }));
  g.emplace_back("strftime_now", Value::function("strftime_now", [](CallArgs& a) {
                   const std::time_t now = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   char buf[256];
                   const size_t n =
                       std::strftime(buf, sizeof buf, a.get(0, "format").str().c_str(), &tm);
                   return Value(std::string(buf, n));
                 }));
  return g;
}

}  // namespace rill::jinja
