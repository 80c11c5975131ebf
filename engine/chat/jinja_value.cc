#include "engine/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/chat/jinja_error.h"

namespace rill::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

Value* Namespace::find(const std::string& key) {
  for (auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}

Value CallArgs::get(size_t index, const std::string& name, Value fallback) const {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs)
    if (k == name) return v;
  return fallback;
}

Value Value::list(ValueList items, bool is_tuple) {
  Value v;
  v.v_ = std::make_shared<const List>(List{std::move(items), is_tuple});
  return v;
}

Value Value::dict(DictEntries entries) {
  Value v;
  v.v_ = std::make_shared<const Dict>(Dict{std::move(entries)});
  return v;
}

Value Value::make_namespace(DictEntries attrs) {
  Value v;
  v.v_ = std::make_shared<Namespace>(Namespace{std::move(attrs)});
  return v;
}

Value Value::function(std::string name, Function fn) {
  Value v;
  v.v_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictEntries entries;
      for (auto it = j.begin(); it != j.end(); ++it)
        entries.emplace_back(it.key(), from_json(it.value()));
      return dict(std::move(entries));
    }
    default: fail("unsupported JSON value in chat template input");
  }
}

void Value::wrong_type(const char* expected) const {
  if (is_undefined() && !undefined_name().empty()) fail(undefined_name());
  fail(std::string("expected ") + expected + ", got '" + type_name() + "'");
}

double Value::to_double() const {
  if (is_float()) return as_float();
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  fail("'" + type_name() + "' is not a number");
}

bool Value::truthy() const {
  return std::visit(
      [](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>) return false;
        else if constexpr (std::is_same_v<T, bool>) return x;
        else if constexpr (std::is_same_v<T, int64_t>) return x != 0;
        else if constexpr (std::is_same_v<T, double>) return x != 0.0;
        else if constexpr (std::is_same_v<T, std::string>) return !x.empty();
        else if constexpr (std::is_same_v<T, ListPtr>) return !x->items.empty();
        else if constexpr (std::is_same_v<T, DictPtr>) return !x->entries.empty();
        else return true;
      },
      v_);
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+02"
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  std::string out;
  if (decpt > 16 || decpt < -3) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." +
          digits.substr(static_cast<size_t>(decpt));
  }
  return negative ? "-" + out : out;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + quote;
}

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined>) return "";
        else if constexpr (std::is_same_v<T, None>) return "None";
        else if constexpr (std::is_same_v<T, bool>) return x ? "True" : "False";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) return python_float_repr(x);
        else if constexpr (std::is_same_v<T, std::string>) return python_string_repr(x);
        else if constexpr (std::is_same_v<T, ListPtr>) {
          std::string out = x->is_tuple ? "(" : "[";
          for (size_t i = 0; i < x->items.size(); ++i)
            out += (i ? ", " : "") + x->items[i].repr();
          if (x->is_tuple && x->items.size() == 1) out += ",";
          return out + (x->is_tuple ? ")" : "]");
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          std::string out = "{";
          for (size_t i = 0; i < x->entries.size(); ++i)
            out += (i ? ", " : "") + python_string_repr(x->entries[i].first) + ": " +
                   x->entries[i].second.repr();
          return out + "}";
        } else if constexpr (std::is_same_v<T, NamespacePtr>) {
          return "<Namespace>";
        } else {
          return "<function " + x->name + ">";
        }
      },
      v_);
}

std::string Value::type_name() const {
  static const char* const kNames[] = {"Undefined", "NoneType", "bool",      "int",     "float",
                                       "str",       "list",     "dict",      "Namespace",
                                       "function"};
  if (is_tuple()) return "tuple";
  return kNames[v_.index()];
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return to_double() == other.to_double();
    const int64_t a = is_bool() ? as_bool() : as_int();
    const int64_t b = other.is_bool() ? other.as_bool() : other.as_int();
    return a == b;
  }
  if (v_.index() != other.v_.index()) return false;
  if (is_undefined() || is_none()) return true;
  if (is_string()) return as_string() == other.as_string();
  if (is_list()) {
    const List& a = as_list();
    const List& b = other.as_list();
    if (a.is_tuple != b.is_tuple || a.items.size() != b.items.size()) return false;
    for (size_t i = 0; i < a.items.size(); ++i)
      if (!a.items[i].equals(b.items[i])) return false;
    return true;
  }
  if (is_dict()) {
    const Dict& a = as_dict();
    const Dict& b = other.as_dict();
    if (a.entries.size() != b.entries.size()) return false;
    for (const auto& [k, v] : a.entries) {
      const Value* o = b.find(k);
      if (!o || !v.equals(*o)) return false;
    }
    return true;
  }
  if (is_namespace()) return &as_namespace() == &other.as_namespace();
  return &as_callable() == &other.as_callable();
}

ValueList Value::iterate() const {
  if (is_list()) return as_list().items;
  if (is_undefined()) return {};
  if (is_dict()) {
    ValueList keys;
    for (const auto& [k, v] : as_dict().entries) keys.emplace_back(k);
    return keys;
  }
  if (is_string()) {
    ValueList chars;
    for (auto& c : utf8_chars(as_string())) chars.emplace_back(std::move(c));
    return chars;
  }
  fail("'" + type_name() + "' object is not iterable");
}

}  // namespace rill::jinja
