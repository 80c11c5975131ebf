// tojson: Python's json.dumps as transformers calls it (ensure_ascii=False by default).
#include <algorithm>
#include <cstdio>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

void escape_unit(std::string& out, uint32_t unit) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", unit);
  out += buf;
}

struct JsonWriter {
  int indent;
  std::string item_sep;
  std::string key_sep;
  bool sort_keys;
  bool ensure_ascii;
  std::string out;

  void string(const std::string& s) {
    out += '"';
    for (size_t i = 0; i < s.size();) {
      const char ch = s[i];
      const auto c = static_cast<unsigned char>(ch);
      switch (ch) {
        case '"':
          out += "\\\"";
          ++i;
          continue;
        case '\\':
          out += "\\\\";
          ++i;
          continue;
        case '\n':
          out += "\\n";
          ++i;
          continue;
        case '\r':
          out += "\\r";
          ++i;
          continue;
        case '\t':
          out += "\\t";
          ++i;
          continue;
        case '\b':
          out += "\\b";
          ++i;
          continue;
        case '\f':
          out += "\\f";
          ++i;
          continue;
        default:
          break;
      }
      if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
        escape_unit(out, c);
        ++i;
      } else if (c < 0x80 || !ensure_ascii) {
        out += ch;
        ++i;
      } else {
        const char32_t cp = utf8::next(s, i);
        if (cp >= 0x10000) {
          escape_unit(out, 0xD800 + ((cp - 0x10000) >> 10));
          escape_unit(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
        } else {
          escape_unit(out, cp);
        }
      }
    }
    out += '"';
  }

  void newline(int level) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  }

  void value(const Value& v, int level) {
    if (v.is_none()) {
      out += "null";
    } else if (v.is_bool()) {
      out += v.as_bool() ? "true" : "false";
    } else if (v.is_int()) {
      out += v.repr();
    } else if (v.is_float()) {
      const std::string r = python_float_repr(v.as_float());
      out += r == "nan" ? "NaN" : r == "inf" ? "Infinity" : r == "-inf" ? "-Infinity" : r;
    } else if (v.is_string()) {
      string(v.as_string());
    } else if (v.is_list() && !v.as_list().view) {  // lists and tuples, not iterators
      check_walk_level(level + 1);
      list(v.as_list().items, level);
    } else if (v.is_dict()) {
      check_walk_level(level + 1);
      dict(v.as_dict().items, level);
    } else {
      fail("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }

  void list(const ValueList& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      value(items[i], level + 1);
    }
    newline(level);
    out += ']';
  }

  // Python's json converts str, int, float, bool and None keys to strings.
  static std::string key_string(const Value& k) {
    if (k.is_string()) return k.as_string();
    if (k.is_bool()) return k.as_bool() ? "true" : "false";
    if (k.is_none()) return "null";
    if (k.is_int()) return k.repr();
    if (k.is_float()) {
      const std::string r = python_float_repr(k.as_float());
      return r == "nan" ? "NaN" : r == "inf" ? "Infinity" : r == "-inf" ? "-Infinity" : r;
    }
    fail("keys must be str, int, float, bool or None, not " + k.type_name());
  }

  void dict(const DictItems& items, int level) {
    if (items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> order;
    for (const auto& e : items) order.push_back(&e);
    if (sort_keys)  // Python sorts the original keys: mixed str and int keys raise
      std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
        return compare_values(a->first, b->first) < 0;
      });
    out += '{';
    for (size_t i = 0; i < order.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      string(key_string(order[i]->first));
      out += key_sep;
      value(order[i]->second, level + 1);
    }
    newline(level);
    out += '}';
  }
};

}  // namespace

std::string json_dumps(const Value& value, int indent, const std::string* item_sep,
                       const std::string* key_sep, bool sort_keys, bool ensure_ascii) {
  JsonWriter w{indent,
               item_sep ? *item_sep : (indent >= 0 ? "," : ", "),
               key_sep ? *key_sep : ": ",
               sort_keys,
               ensure_ascii,
               {}};
  w.value(value, 0);
  return std::move(w.out);
}

}  // namespace rill::jinja
