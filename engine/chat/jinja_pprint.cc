// Python's pprint.pformat (the pprint filter): PrettyPrinter(width=80, indent=1,
// sort_dicts=True). A value whose repr fits the remaining width is written as its repr (dicts
// with sorted keys); a longer dict, list or tuple is broken one item per line, and a longer str
// into implicitly concatenated chunks split after whitespace.
#include <algorithm>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

constexpr int64_t kWidth = 80;

int64_t chars(const std::string& s) {
  return static_cast<int64_t>(utf8::count(s));
}

// pprint's _safe_key: Python's < where it works, else the type names ("<class 'int'>" before
// "<class 'str'>").
bool safe_less(const Value& a, const Value& b) {
  try {
    return compare_values(a, b) < 0;
  } catch (const TemplateError&) {
    return "<class '" + a.type_name() + "'>" < "<class '" + b.type_name() + "'>";
  }
}

std::vector<const std::pair<Value, Value>*> sorted_items(const Dict& d) {
  std::vector<const std::pair<Value, Value>*> items;
  for (const auto& item : d.items) items.push_back(&item);
  std::stable_sort(items.begin(), items.end(),
                   [](const auto* x, const auto* y) { return safe_less(x->first, y->first); });
  return items;
}

bool is_plain_container(const Value& v) {
  return v.is_dict() || (v.is_list() && !v.as_list().view);
}

class Printer {
 public:
  std::string out;

  // pprint's _safe_repr: repr, with dict keys sorted at every level.
  std::string safe_repr(const Value& v, int level) {
    if (!is_plain_container(v)) return v.repr();
    check_walk_level(level);
    std::string parts;
    if (v.is_dict()) {
      for (const auto* item : sorted_items(v.as_dict()))
        parts += (parts.empty() ? "" : ", ") + safe_repr(item->first, level + 1) + ": " +
                 safe_repr(item->second, level + 1);
      return "{" + parts + "}";
    }
    const List& l = v.as_list();
    for (const Value& item : l.items)
      parts += (parts.empty() ? "" : ", ") + safe_repr(item, level + 1);
    if (!l.is_tuple) return "[" + parts + "]";
    return l.items.size() == 1 ? "(" + parts + ",)" : "(" + parts + ")";
  }

  void format(const Value& v, int64_t indent, int64_t allowance, int level) {
    const std::string rep = safe_repr(v, level + 1);
    if (chars(rep) <= kWidth - indent - allowance) {
      out += rep;
      return;
    }
    check_walk_level(level + 1);
    if (v.is_dict()) {
      pprint_dict(v.as_dict(), indent, allowance, level + 1);
    } else if (v.is_list() && !v.as_list().view) {
      const List& l = v.as_list();
      const std::string end = !l.is_tuple ? "]" : l.items.size() == 1 ? ",)" : ")";
      out += l.is_tuple ? "(" : "[";
      format_items(l.items, indent, allowance + static_cast<int64_t>(end.size()), level + 1);
      out += end;
    } else if (v.is_string() && !v.as_string().empty()) {
      pprint_str(v.as_string(), indent, allowance, level + 1);
    } else {
      out += rep;
    }
  }

 private:
  void pprint_dict(const Dict& d, int64_t indent, int64_t allowance, int level) {
    out += '{';
    const auto items = sorted_items(d);
    indent += 1;
    for (size_t i = 0; i < items.size(); ++i) {
      const bool last = i + 1 == items.size();
      const std::string key = safe_repr(items[i]->first, level);
      out += key + ": ";
      format(items[i]->second, indent + chars(key) + 2, last ? allowance + 1 : 1, level);
      if (!last) out += ",\n" + std::string(static_cast<size_t>(indent), ' ');
    }
    out += '}';
  }

  void format_items(const ValueList& items, int64_t indent, int64_t allowance, int level) {
    indent += 1;
    for (size_t i = 0; i < items.size(); ++i) {
      const bool last = i + 1 == items.size();
      if (i > 0) out += ",\n" + std::string(static_cast<size_t>(indent), ' ');
      format(items[i], indent, last ? allowance : 1, level);
    }
  }

  // Splits `line` into runs of non-whitespace followed by whitespace (re.findall(r'\S*\s*')).
  static std::vector<std::string> word_parts(const std::string& line) {
    std::vector<std::string> parts;
    size_t i = 0;
    while (i < line.size()) {
      const size_t start = i;
      while (i < line.size() && !python_isspace(utf8::peek(line, i))) utf8::next(line, i);
      while (i < line.size() && python_isspace(utf8::peek(line, i))) utf8::next(line, i);
      parts.push_back(line.substr(start, i - start));
    }
    return parts;
  }

  void pprint_str(const std::string& s, int64_t indent, int64_t allowance, int level) {
    std::vector<std::string> chunks;
    const std::vector<std::string> lines = python_splitlines(s, true);
    if (level == 1) {
      indent += 1;
      allowance += 1;
    }
    int64_t max_width1 = kWidth - indent;
    const int64_t max_width = kWidth - indent;
    std::string rep;
    for (size_t i = 0; i < lines.size(); ++i) {
      rep = python_string_repr(lines[i]);
      const bool last_line = i + 1 == lines.size();
      if (last_line) max_width1 -= allowance;
      if (chars(rep) <= max_width1) {
        chunks.push_back(rep);
        continue;
      }
      const std::vector<std::string> parts = word_parts(lines[i]);
      int64_t max_width2 = max_width;
      std::string current;
      for (size_t j = 0; j < parts.size(); ++j) {
        const std::string candidate = current + parts[j];
        if (j + 1 == parts.size() && last_line) max_width2 -= allowance;
        if (chars(python_string_repr(candidate)) > max_width2) {
          if (!current.empty()) chunks.push_back(python_string_repr(current));
          current = parts[j];
        } else {
          current = candidate;
        }
      }
      if (!current.empty()) chunks.push_back(python_string_repr(current));
    }
    if (chunks.size() == 1) {  // pprint writes the last line's repr here
      out += rep;
      return;
    }
    if (level == 1) out += '(';
    for (size_t i = 0; i < chunks.size(); ++i) {
      if (i > 0) out += "\n" + std::string(static_cast<size_t>(indent), ' ');
      out += chunks[i];
    }
    if (level == 1) out += ')';
  }
};

}  // namespace

std::string python_pformat(const Value& v) {
  Printer p;
  p.format(v, 0, 0, 0);
  return std::move(p.out);
}

}  // namespace rill::jinja
