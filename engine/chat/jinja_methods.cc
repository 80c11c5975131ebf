// Methods of dict / list values (str methods: jinja_str_methods.cc), attribute lookup, case
// mapping, and the global functions.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <unordered_map>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

std::string unsafe_hint(const std::string& attr, const std::string& type) {
  return "access to attribute '" + attr + "' of '" + type + "' object is unsafe.";
}

std::optional<Value> dict_method(const Value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function(name, [d, name](CallArgs&) {
      ValueList out;
      for (const auto& [k, v] : d.as_dict().items)
        out.push_back(name == "items" ? Value::list({k, v}, true) : name == "keys" ? k : v);
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
      key.check_hashable();
      const Value* v = d.as_dict().find(key);
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
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // past INT64_MAX: past stop too
  }
  return Value::list(std::move(out));
}

// dict(mapping, **kwargs) / namespace(mapping, **kwargs): the mapping's items updated by the
// keyword arguments.
DictItems kwargs_with_mapping(CallArgs& a) {
  DictItems items;
  if (!a.args.empty()) {
    if (a.args.size() > 1)
      fail("expected at most 1 argument, got " + std::to_string(a.args.size()));
    if (!a.args[0].is_dict()) fail("expected a mapping argument");
    items = a.args[0].as_dict().items;
  }
  for (auto& [k, v] : a.kwargs) {
    // An init-capture: clang 14 (the fuzz build's) cannot capture a structured binding.
    auto it = std::find_if(items.begin(), items.end(), [&key = k](const auto& e) {
      return e.first.is_string() && e.first.as_string() == key;
    });
    if (it != items.end())
      it->second = v;
    else
      items.emplace_back(Value(k), v);
  }
  return items;
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
    if (chars) return chars->find(c) != std::string::npos;
    size_t pos = 0;
    return python_isspace(utf8::next(c, pos));
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
  if (obj.is_undefined()) return obj;
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().find(name)) return *v;
  } else if (obj.is_callable()) {  // loop.index, a macro's name
    const Callable& c = obj.as_callable();
    for (const auto& [k, v] : c.attrs)
      if (k == name) return v;
    if (c.lookup) {
      Value v = c.lookup(name);
      if (!v.is_undefined()) return v;
    }
  } else if (obj.is_list() && obj.as_list().fields) {  // groupby's grouper / list
    const auto& fields = *obj.as_list().fields;
    for (size_t i = 0; i < fields.size(); ++i)
      if (fields[i] == name) return obj.as_list().items[i];
  }
  if (obj.is_namespace() || obj.is_callable()) {
    // no methods
  } else if (auto method = get_method(obj, name)) {
    return *method;
  } else if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  }
  if (obj.is_none()) return Value::undefined("'None' has no attribute '" + name + "'");
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

NamespaceRegistry::~NamespaceRegistry() {
  for (Value& ns : namespaces_) ns.as_namespace().attrs.clear();
}

DictEntries global_functions(NamespaceRegistry* registry) {
  DictEntries g;
  g.emplace_back("range", Value::function("range", g_range));
  g.emplace_back("namespace", Value::function("namespace", [registry](CallArgs& a) {
                   DictEntries attrs;
                   for (auto& [k, v] : kwargs_with_mapping(a)) {
                     if (!k.is_string()) fail("namespace() attribute names must be strings");
                     attrs.emplace_back(k.as_string(), std::move(v));
                   }
                   Value ns = Value::make_namespace(std::move(attrs));
                   registry->add(ns);
                   return ns;
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
