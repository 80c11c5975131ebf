// Jinja filters on text and markup (jinja2 3.1 and markupsafe semantics): indent, center,
// wordcount, escape, truncate, striptags, urlencode, xmlattr, filesizeformat, pprint.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_filter_table.h"
#include "engine/chat/jinja_ops.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

// markupsafe.escape of str(value).
std::string escape_html(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value f_escape(const Value& v, const CallArgs&) {
  return Value(escape_html(v.str()));
}

Value f_indent(const Value& v, const CallArgs& a) {
  const Value width = a.get(0, "width", Value(4));
  const bool first = a.get(1, "first", Value(false)).truthy();
  const bool blank = a.get(2, "blank", Value(false)).truthy();
  if (width.is_int() && (width.as_int() < 0 || width.as_int() > 1024))
    fail("indent width out of range");
  const std::string pad =
      width.is_string() ? width.as_string() : std::string(static_cast<size_t>(width.as_int()), ' ');
  // jinja2: (s + "\n").splitlines(), then every line but the first indented (blank lines only
  // with blank=True), joined with "\n".
  const std::vector<std::string> lines = python_splitlines(v.str() + "\n", false);
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += '\n';
    if (blank || !lines[i].empty()) out += pad;
    out += lines[i];
  }
  return Value(first ? pad + out : out);
}

// len(re.findall(r"\w+", s)): Python's \w is a letter, a number or '_'.
Value f_wordcount(const Value& v, const CallArgs&) {
  int64_t n = 0;
  bool in_word = false;
  const std::string s = v.str();
  for (size_t i = 0; i < s.size();) {
    const char32_t cp = utf8::next(s, i);
    const bool w = cp == '_' || unicode::is_letter(cp) || unicode::is_number(cp);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_center(const Value& v, const CallArgs& a) {
  const Value method = get_method(Value(v.str()), "center").value();
  CallArgs args;
  args.args.push_back(a.get(0, "width", Value(80)));
  return method.as_callable().fn(args);
}

// truncate(length=255, killwords=False, end='...', leeway=5).
Value f_truncate(const Value& v, const CallArgs& a) {
  const int64_t length = a.get(0, "length", Value(255)).as_int();
  const bool killwords = a.get(1, "killwords", Value(false)).truthy();
  const std::string end = a.get(2, "end", Value("...")).str();
  const Value leeway_v = a.get(3, "leeway", Value(None{}));
  const int64_t leeway = leeway_v.is_none() ? 5 : leeway_v.as_int();
  const auto end_length = static_cast<int64_t>(utf8_chars(end).size());
  if (length < end_length)
    fail("expected length >= " + std::to_string(end_length) + ", got " + std::to_string(length));
  if (leeway < 0) fail("expected leeway >= 0, got " + std::to_string(leeway));
  if (!v.is_string()) fail("object of type '" + v.type_name() + "' has no len()");
  const std::vector<std::string> chars = utf8_chars(v.as_string());
  if (static_cast<int64_t>(chars.size()) <= length + leeway) return v;
  std::string head;
  for (int64_t i = 0; i < length - end_length; ++i) head += chars[static_cast<size_t>(i)];
  if (!killwords) {  // drop the last, possibly cut, word: head.rsplit(" ", 1)[0]
    const size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value(head + end);
}

// markupsafe's striptags: comments, then tags removed, whitespace collapsed, then unescaped.
Value f_striptags(const Value& v, const CallArgs&) {
  const std::string s = v.str();
  std::string no_comments;
  for (size_t i = 0; i < s.size();) {
    const size_t start = s.find("<!--", i);
    const size_t end = start == std::string::npos ? start : s.find("-->", start);
    if (end == std::string::npos) {
      no_comments += s.substr(i);
      break;
    }
    no_comments += s.substr(i, start - i);
    i = end + 3;
  }
  std::string no_tags;
  for (size_t i = 0; i < no_comments.size();) {
    const size_t start = no_comments.find('<', i);
    const size_t end = start == std::string::npos ? start : no_comments.find('>', start);
    if (end == std::string::npos) {
      no_tags += no_comments.substr(i);
      break;
    }
    no_tags += no_comments.substr(i, start - i);
    i = end + 1;
  }
  std::string collapsed;
  for (const std::string& word : split_whitespace(no_tags, -1, false))
    collapsed += (collapsed.empty() ? "" : " ") + word;
  return Value(html_unescape(collapsed));
}

// urllib.parse.quote of the UTF-8 bytes: letters, digits and _.-~ stay, plus '/' unless for a
// query string, where spaces become '+'.
std::string url_quote(const Value& v, bool for_query) {
  std::string out;
  for (unsigned char c : v.str()) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~' ||
        (!for_query && c == '/')) {
      out += static_cast<char>(c);
    } else if (for_query && c == ' ') {
      out += '+';
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

Value f_urlencode(const Value& v, const CallArgs&) {
  if (v.is_string() || !(v.is_list() || v.is_dict() || v.is_undefined()))
    return Value(url_quote(v, false));
  std::string out;
  auto add = [&](const Value& k, const Value& x) {
    out += (out.empty() ? "" : "&") + url_quote(k, true) + "=" + url_quote(x, true);
  };
  if (v.is_dict()) {
    for (const auto& [k, x] : v.as_dict().items) add(k, x);
  } else {
    for (const Value& pair : v.iterate()) {
      const ValueList kv = pair.iterate();
      if (kv.size() != 2)
        fail(kv.size() < 2
                 ? "not enough values to unpack (expected 2, got " + std::to_string(kv.size()) + ")"
                 : "too many values to unpack (expected 2)");
      add(kv[0], kv[1]);
    }
  }
  return Value(std::move(out));
}

// xmlattr(autospace=True): ` key="value"` for every item whose value is not None/undefined.
Value f_xmlattr(const Value& v, const CallArgs& a) {
  const bool autospace = a.get(0, "autospace", Value(true)).truthy();
  if (!v.is_dict()) fail("'" + v.type_name() + "' object has no attribute 'items'");
  std::string out;
  for (const auto& [k, x] : v.as_dict().items) {
    if (x.is_none() || x.is_undefined()) continue;
    if (!k.is_string()) fail("expected string or bytes-like object, got '" + k.type_name() + "'");
    for (char c : k.as_string())
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == '/' ||
          c == '>' || c == '=')
        fail("Invalid character in attribute name: " + k.repr());
    out +=
        (out.empty() ? "" : " ") + escape_html(k.as_string()) + "=\"" + escape_html(x.str()) + "\"";
  }
  return Value(autospace && !out.empty() ? " " + out : out);
}

// filesizeformat(binary=False): "1 Byte", "12 Bytes", "1.0 kB" ... "1.0 YB" (or KiB ... YiB).
Value f_filesizeformat(const Value& v, const CallArgs& a) {
  const bool binary_units = a.get(0, "binary", Value(false)).truthy();
  double bytes;
  if (v.is_number()) {
    bytes = v.to_double();
  } else {
    const Value f = apply_filter("float", v, CallArgs{{Value(None{})}, {}});
    if (f.is_none()) fail("could not convert " + v.type_name() + " to float: " + v.repr());
    bytes = f.to_double();
  }
  const double base = binary_units ? 1024 : 1000;
  static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return Value("1 Byte");
  if (bytes < base) return Value(apply_filter("int", Value(bytes), {}).repr() + " Bytes");
  double unit = base;
  const char* prefix = "";
  for (int i = 0; i < 8; ++i) {
    unit = std::pow(base, i + 2);
    prefix = binary_units ? kBinary[i] : kDecimal[i];
    if (bytes < unit) break;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, prefix);
  return Value(std::string(buf));
}

Value f_pprint(const Value& v, const CallArgs&) {
  return Value(python_pformat(v));
}

}  // namespace

void add_text_filters(FilterTable& t) {
  t["e"] = f_escape;
  t["escape"] = f_escape;
  t["forceescape"] = f_escape;
  t["indent"] = f_indent;
  t["wordcount"] = f_wordcount;
  t["center"] = f_center;
  t["truncate"] = f_truncate;
  t["striptags"] = f_striptags;
  t["urlencode"] = f_urlencode;
  t["xmlattr"] = f_xmlattr;
  t["filesizeformat"] = f_filesizeformat;
  t["pprint"] = f_pprint;
}

}  // namespace rill::jinja
