// Methods of str values with Python's semantics: strings are indexed, measured and padded by
// code point; whitespace is Unicode whitespace; case mapping uses the tokenizer's tables.
#include <algorithm>
#include <unordered_map>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

// A sandbox bound on padding widths (center, ljust, rjust, zfill).
constexpr int64_t kMaxPadWidth = 1 << 20;

using U32 = std::u32string;
using StrMethod = Value (*)(const std::string& s, CallArgs& a);

std::string encode(const U32& text) {
  std::string out;
  for (char32_t cp : text) utf8::append(out, cp);
  return out;
}

Value string_list(const std::vector<std::string>& parts) {
  ValueList items;
  for (const auto& p : parts) items.emplace_back(p);
  return Value::list(std::move(items));
}

int64_t int_arg(const CallArgs& a, size_t index, const char* name, int64_t fallback) {
  const Value v = a.get(index, name, Value(fallback));
  if (v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    fail("'" + v.type_name() + "' object cannot be interpreted as an integer");
  return v.is_bool() ? v.as_bool() : v.as_int();
}

std::string str_arg(const CallArgs& a, size_t index, const char* name) {
  const Value v = a.get(index, name);
  if (!v.is_string())
    fail(std::string("must be str, not ") + (v.is_undefined() ? "Undefined" : v.type_name()));
  return v.as_string();
}

// Python's separator split: at most maxsplit splits (-1: all), from the right for rsplit.
std::vector<std::string> split_on(const std::string& s, const std::string& sep, int64_t maxsplit,
                                  bool from_right) {
  if (sep.empty()) fail("empty separator");
  std::vector<std::string> out;
  if (!from_right) {
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
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t at = s.rfind(sep, end - sep.size());
    if (at == std::string::npos) break;
    out.push_back(s.substr(at + sep.size(), end - at - sep.size()));
    end = at;
  }
  out.push_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

Value m_split(const std::string& s, CallArgs& a, bool from_right) {
  const Value sep = a.get(0, "sep", Value(None{}));
  const int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
  if (sep.is_none() || sep.is_undefined())
    return string_list(split_whitespace(s, maxsplit, from_right));
  if (!sep.is_string()) fail("must be str or None, not " + sep.type_name());
  return string_list(split_on(s, sep.as_string(), maxsplit, from_right));
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  size_t start = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every character
    for (const auto& c : utf8_chars(s)) {
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
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const auto& x : affix.as_list().items) {
      if (!x.is_string())
        fail("tuple for " + std::string(prefix ? "startswith" : "endswith") +
             " must only contain str, not " + x.type_name());
      if (one(x.as_string())) return true;
    }
    return false;
  }
  if (!affix.is_string())
    fail(std::string(prefix ? "startswith" : "endswith") +
         " first arg must be str or a tuple of str, not " + affix.type_name());
  return one(affix.as_string());
}

// Python's slice bounds [start:end] of a code-point string (None / missing: the ends).
void clamp_range(const CallArgs& a, size_t first, int64_t length, int64_t& start, int64_t& end) {
  auto bound = [&](size_t index, const char* name, int64_t fallback) {
    const Value v = a.get(index, name, Value(None{}));
    if (v.is_none()) return fallback;
    int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
    if (i < 0) i = std::max<int64_t>(i + length, 0);
    return std::min(i, length);
  };
  start = bound(first, "start", 0);
  end = bound(first + 1, "end", length);
}

// find / rfind / index / rindex(sub[, start[, end]]): the code-point index, or -1.
int64_t find_in(const std::string& s, CallArgs& a, bool from_right, bool must_find) {
  const U32 text = utf8::to_u32(s);
  const U32 sub = utf8::to_u32(str_arg(a, 0, "sub"));
  int64_t start = 0, end = 0;
  clamp_range(a, 1, static_cast<int64_t>(text.size()), start, end);
  int64_t found = -1;
  if (end - start >= static_cast<int64_t>(sub.size())) {
    const U32 window = text.substr(static_cast<size_t>(start), static_cast<size_t>(end - start));
    const size_t at = from_right ? window.rfind(sub) : window.find(sub);
    if (at != U32::npos) found = start + static_cast<int64_t>(at);
  }
  if (found < 0 && must_find) fail("substring not found");
  return found;
}

// Python's str.format with "{}", "{0}" and "{name}" fields (no format specs).
std::string py_format(const std::string& s, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((s[i] == '{' || s[i] == '}') && i + 1 < s.size() && s[i + 1] == s[i]) {
      out += s[i++];
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
                           [](char c) { return c >= '0' && c <= '9'; })) {
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

bool is_cased_upper(char32_t cp) {
  const std::string c = utf8::encode(cp);
  return py_lower(c) != c;
}
bool is_cased_lower(char32_t cp) {
  const std::string c = utf8::encode(cp);
  return py_upper(c) != c;
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

// All code points satisfy `pred`, and there is at least one.
template <typename Pred>
bool all_of(const std::string& s, Pred pred) {
  const U32 text = utf8::to_u32(s);
  return !text.empty() && std::all_of(text.begin(), text.end(), pred);
}

bool is_decimal(char32_t cp) {
  return unicode::category(cp) == unicode::Category::kNd;
}
bool is_numeric(char32_t cp) {
  return unicode::is_number(cp);
}

// islower / isupper: at least one cased character, and none of the other case.
Value case_test(const std::string& s, bool want_lower) {
  bool cased = false;
  for (char32_t cp : utf8::to_u32(s)) {
    if (want_lower ? is_cased_upper(cp) : is_cased_lower(cp)) return Value(false);
    cased = cased || (want_lower ? is_cased_lower(cp) : is_cased_upper(cp));
  }
  return Value(cased);
}

// center / ljust / rjust(width, fillchar=' ').
Value pad(const std::string& s, CallArgs& a, int align) {
  const int64_t width = int_arg(a, 0, "width", 0);
  if (width > kMaxPadWidth) fail("width too large");
  const Value fill_v = a.get(1, "fillchar", Value(" "));
  if (!fill_v.is_string() || utf8::count(fill_v.as_string()) != 1)
    fail("The fill character must be exactly one character long");
  const std::string& fill = fill_v.as_string();
  const auto length = static_cast<int64_t>(utf8::count(s));
  if (width <= length) return Value(s);
  const int64_t margin = width - length;
  const int64_t left = align < 0 ? 0 : align > 0 ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < margin; ++i) out += fill;
  return Value(std::move(out));
}

Value zfill(const std::string& s, CallArgs& a) {
  const int64_t width = int_arg(a, 0, "width", 0);
  if (width > kMaxPadWidth) fail("width too large");
  const auto length = static_cast<int64_t>(utf8::count(s));
  if (width <= length) return Value(s);
  const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  const std::string zeros(static_cast<size_t>(width - length), '0');
  return Value(sign ? s.substr(0, 1) + zeros + s.substr(1) : zeros + s);
}

Value partition(const std::string& s, CallArgs& a, bool from_right) {
  const std::string sep = str_arg(a, 0, "sep");
  if (sep.empty()) fail("empty separator");
  const size_t at = from_right ? s.rfind(sep) : s.find(sep);
  if (at == std::string::npos)
    return from_right ? Value::list({Value(""), Value(""), Value(s)}, true)
                      : Value::list({Value(s), Value(""), Value("")}, true);
  return Value::list({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))}, true);
}

Value strip_method(const std::string& s, CallArgs& a, bool left, bool right) {
  const Value c = a.get(0, "chars", Value(None{}));
  if (!c.is_none() && !c.is_string()) fail("strip arg must be None or str");
  const std::string set = c.is_string() ? c.as_string() : "";
  return Value(strip_chars(s, c.is_string() ? &set : nullptr, left, right));
}

const std::unordered_map<std::string, StrMethod>& methods() {
  static const std::unordered_map<std::string, StrMethod> kMethods = {
      {"startswith", [](const std::string& s,
                        CallArgs& a) { return Value(affix_match(s, a.get(0, "prefix"), true)); }},
      {"endswith", [](const std::string& s,
                      CallArgs& a) { return Value(affix_match(s, a.get(0, "suffix"), false)); }},
      {"strip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, true, true); }},
      {"lstrip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, true, false); }},
      {"rstrip", [](const std::string& s, CallArgs& a) { return strip_method(s, a, false, true); }},
      {"split", [](const std::string& s, CallArgs& a) { return m_split(s, a, false); }},
      {"rsplit", [](const std::string& s, CallArgs& a) { return m_split(s, a, true); }},
      {"splitlines",
       [](const std::string& s, CallArgs& a) {
         return string_list(python_splitlines(s, a.get(0, "keepends", Value(false)).truthy()));
       }},
      {"upper", [](const std::string& s, CallArgs&) { return Value(py_upper(s)); }},
      {"lower", [](const std::string& s, CallArgs&) { return Value(py_lower(s)); }},
      {"casefold", [](const std::string& s, CallArgs&) { return Value(py_lower(s)); }},
      {"title", [](const std::string& s, CallArgs&) { return Value(title_case(s)); }},
      {"capitalize",
       [](const std::string& s, CallArgs& a) { return apply_filter("capitalize", Value(s), a); }},
      {"swapcase",
       [](const std::string& s, CallArgs&) {
         std::string out;
         for (char32_t cp : utf8::to_u32(s)) {
           const std::string c = utf8::encode(cp);
           out += is_cased_upper(cp) ? py_lower(c) : is_cased_lower(cp) ? py_upper(c) : c;
         }
         return Value(std::move(out));
       }},
      {"replace",
       [](const std::string& s, CallArgs& a) {
         return Value(replace_all(s, str_arg(a, 0, "old"), str_arg(a, 1, "new"),
                                  int_arg(a, 2, "count", -1)));
       }},
      {"find",
       [](const std::string& s, CallArgs& a) { return Value(find_in(s, a, false, false)); }},
      {"rfind",
       [](const std::string& s, CallArgs& a) { return Value(find_in(s, a, true, false)); }},
      {"index",
       [](const std::string& s, CallArgs& a) { return Value(find_in(s, a, false, true)); }},
      {"rindex",
       [](const std::string& s, CallArgs& a) { return Value(find_in(s, a, true, true)); }},
      {"count",
       [](const std::string& s, CallArgs& a) {
         const std::string sub = str_arg(a, 0, "sub");
         if (sub.empty()) return Value(static_cast<int64_t>(utf8::count(s)) + 1);
         int64_t n = 0;
         for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
           ++n;
         return Value(n);
       }},
      {"join",
       [](const std::string& s, CallArgs& a) {
         std::string out;
         bool first = true;
         for (const Value& v : a.get(0, "iterable").iterate()) {
           if (!v.is_string())
             fail("sequence item: expected str instance, " + v.type_name() + " found");
           out += (first ? "" : s) + v.as_string();
           first = false;
         }
         return Value(std::move(out));
       }},
      {"format", [](const std::string& s, CallArgs& a) { return Value(py_format(s, a)); }},
      {"center", [](const std::string& s, CallArgs& a) { return pad(s, a, 0); }},
      {"ljust", [](const std::string& s, CallArgs& a) { return pad(s, a, -1); }},
      {"rjust", [](const std::string& s, CallArgs& a) { return pad(s, a, 1); }},
      {"zfill", [](const std::string& s, CallArgs& a) { return zfill(s, a); }},
      {"removeprefix",
       [](const std::string& s, CallArgs& a) {
         const std::string p = str_arg(a, 0, "prefix");
         return Value(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
       }},
      {"removesuffix",
       [](const std::string& s, CallArgs& a) {
         const std::string p = str_arg(a, 0, "suffix");
         const bool ends =
             !p.empty() && p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
         return Value(ends ? s.substr(0, s.size() - p.size()) : s);
       }},
      {"partition", [](const std::string& s, CallArgs& a) { return partition(s, a, false); }},
      {"rpartition", [](const std::string& s, CallArgs& a) { return partition(s, a, true); }},
      {"isdigit", [](const std::string& s, CallArgs&) { return Value(all_of(s, is_decimal)); }},
      {"isdecimal", [](const std::string& s, CallArgs&) { return Value(all_of(s, is_decimal)); }},
      {"isnumeric", [](const std::string& s, CallArgs&) { return Value(all_of(s, is_numeric)); }},
      {"isalpha",
       [](const std::string& s, CallArgs&) {
         return Value(all_of(s, [](char32_t cp) { return unicode::is_letter(cp); }));
       }},
      {"isalnum",
       [](const std::string& s, CallArgs&) {
         return Value(
             all_of(s, [](char32_t cp) { return unicode::is_letter(cp) || is_numeric(cp); }));
       }},
      {"isspace", [](const std::string& s, CallArgs&) { return Value(all_of(s, python_isspace)); }},
      {"islower", [](const std::string& s, CallArgs&) { return case_test(s, true); }},
      {"isupper", [](const std::string& s, CallArgs&) { return case_test(s, false); }},
      {"istitle",
       [](const std::string& s, CallArgs&) {
         // Upper case only after uncased characters, lower case only after cased ones.
         bool cased = false, prev_cased = false;
         for (char32_t cp : utf8::to_u32(s)) {
           if (is_cased_upper(cp) || is_cased_lower(cp)) {
             if (is_cased_upper(cp) == prev_cased) return Value(false);
             prev_cased = cased = true;
           } else {
             prev_cased = false;
           }
         }
         return Value(cased);
       }},
  };
  return kMethods;
}

}  // namespace

bool python_isspace(char32_t cp) {
  return unicode::is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F);
}

std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  const U32 text = utf8::to_u32(s);
  std::vector<std::string> out;
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < text.size() && python_isspace(text[i])) ++i;
      if (i >= text.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(encode(text.substr(i)));  // the rest keeps its trailing whitespace
        break;
      }
      size_t j = i;
      while (j < text.size() && !python_isspace(text[j])) ++j;
      out.push_back(encode(text.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  size_t end = text.size();
  while (true) {
    while (end > 0 && python_isspace(text[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(encode(text.substr(0, end)));  // the rest keeps its leading whitespace
      break;
    }
    size_t j = end;
    while (j > 0 && !python_isspace(text[j - 1])) --j;
    out.push_back(encode(text.substr(j, end - j)));
    end = j;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> python_splitlines(const std::string& s, bool keepends) {
  const U32 text = utf8::to_u32(s);
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                          c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') end = i + 2;
    out.push_back(encode(text.substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < text.size()) out.push_back(encode(text.substr(start)));
  return out;
}

std::optional<Value> string_method(const std::string& s, const std::string& name) {
  auto it = methods().find(name);
  if (it == methods().end()) return std::nullopt;
  const StrMethod method = it->second;
  return Value::function(name, [s, method](CallArgs& a) { return method(s, a); });
}

}  // namespace rill::jinja
