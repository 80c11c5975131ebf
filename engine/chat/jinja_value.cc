#include "engine/chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "engine/chat/jinja_error.h"
#include "engine/tokenizer/unicode.h"
#include "engine/util/utf8.h"

namespace rill::jinja {

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  for (const auto& [k, v] : items)
    if (k.equals(key)) return &v;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
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

void check_walk_level(int level) {
  if (level > kMaxValueDepth)
    fail("value nested too deeply (more than " + std::to_string(kMaxValueDepth) + " levels)");
}

Value::Value(const BigInt& v) {
  if (v.fits_int64())
    v_ = v.to_int64();
  else
    v_ = std::make_shared<const BigInt>(v);
}

Value Value::list(ValueList items, bool is_tuple, const char* view,
                  const std::vector<std::string>* fields) {
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  check_walk_level(depth + 1);
  Value v;
  v.v_ = std::make_shared<const List>(List{std::move(items), is_tuple, view, depth + 1, fields});
  return v;
}

Value Value::dict(const DictEntries& entries) {
  DictItems items;
  items.reserve(entries.size());
  for (const auto& [k, x] : entries) items.emplace_back(Value(k), x);
  return dict(std::move(items));
}

Value Value::dict(DictItems items) {
  int depth = 0;
  for (const auto& [k, x] : items) depth = std::max({depth, k.depth(), x.depth()});
  check_walk_level(depth + 1);
  Value v;
  v.v_ = std::make_shared<const Dict>(Dict{std::move(items), depth + 1});
  return v;
}

Value Value::make_namespace(DictEntries attrs) {
  Value v;
  v.v_ = std::make_shared<Namespace>(Namespace{std::move(attrs)});
  return v;
}

Value Value::function(std::string name, Function fn, DictEntries attrs, std::string display) {
  Value v;
  v.v_ = std::make_shared<const Callable>(
      Callable{std::move(name), std::move(fn), std::move(attrs), std::move(display), {}, {}});
  return v;
}

Value Value::object(std::string name, Function fn, std::function<Value(const std::string&)> lookup,
                    std::function<std::string()> describe) {
  Value v;
  v.v_ = std::make_shared<const Callable>(
      Callable{std::move(name), std::move(fn), {}, {}, std::move(lookup), std::move(describe)});
  return v;
}

namespace {

// Walks the JSON with an explicit level so that input nested deeper than any list may be is
// refused before the recursion goes further. Json: nlohmann::json or ordered_json.
template <typename Json>
Value json_to_value(const Json& j, int level) {
  using T = typename Json::value_t;
  switch (j.type()) {
    case T::null:
      return Value(None{});
    case T::boolean:
      return Value(j.template get<bool>());
    case T::number_integer:
      return Value(j.template get<int64_t>());
    case T::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(*BigInt::parse(std::to_string(u)));
    }
    case T::number_float:
      return Value(j.template get<double>());
    case T::string:
      return Value(j.template get<std::string>());
    case T::array: {
      check_walk_level(level);
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(json_to_value(e, level + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      check_walk_level(level);
      DictItems items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(Value(it.key()), json_to_value(it.value(), level + 1));
      return Value::dict(std::move(items));
    }
    default:
      fail("unsupported JSON value in chat template input");
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) {
  return json_to_value(j, 1);
}

Value Value::from_json(const nlohmann::json& j) {
  return json_to_value(j, 1);
}

void Value::wrong_type(const char* expected) const {
  if (is_undefined() && !undefined_name().empty()) fail(undefined_name());
  fail(std::string("expected ") + expected + ", got '" + type_name() + "'");
}

int64_t Value::as_int() const {
  if (is_big_int()) fail("cannot fit 'int' into an index-sized integer");
  return get<int64_t>("int");
}

BigInt Value::as_big_int() const {
  if (const auto* big = std::get_if<BigIntPtr>(&v_)) return **big;
  if (is_bool()) return BigInt(int64_t{as_bool()});
  return BigInt(get<int64_t>("int"));
}

double Value::to_double() const {
  if (is_float()) return as_float();
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  if (is_big_int()) {
    const double d = as_big_int().to_double();
    if (std::isinf(d)) fail("int too large to convert to float");
    return d;
  }
  if (is_int()) return static_cast<double>(as_int());
  fail("'" + type_name() + "' is not a number");
}

int Value::depth() const {
  if (const auto* l = std::get_if<ListPtr>(&v_)) return (*l)->depth;
  if (const auto* d = std::get_if<DictPtr>(&v_)) return (*d)->depth;
  return 0;
}

bool Value::truthy() const {
  return std::visit(
      [](const auto& x) -> bool {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>)
          return false;
        else if constexpr (std::is_same_v<T, bool>)
          return x;
        else if constexpr (std::is_same_v<T, int64_t>)
          return x != 0;
        else if constexpr (std::is_same_v<T, double>)
          return x != 0.0;
        else if constexpr (std::is_same_v<T, std::string>)
          return !x.empty();
        else if constexpr (std::is_same_v<T, ListPtr>)
          return x->view == kGeneratorView || x->view == kReverseIteratorView || !x->items.empty();
        else if constexpr (std::is_same_v<T, DictPtr>)
          return !x->items.empty();
        else
          return true;  // namespaces, callables, non-zero big ints
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
    // An ill-formed byte (never in strings that came through JSON) stands alone.
    const size_t n = std::max<size_t>(1, utf8::valid_sequence_length(s, i));
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

namespace {

// Python's str.isprintable() for one code point: not Other (Cc Cf Cs Co Cn) nor a separator
// other than the ASCII space.
bool python_printable(char32_t cp) {
  if (cp == ' ') return true;
  constexpr unicode::CategoryMask kHidden = unicode::kOther | unicode::kSeparator;
  return !unicode::has_property(cp, kHidden);
}

}  // namespace

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t cp = utf8::next(s, i);
    if (cp == static_cast<unsigned char>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!python_printable(cp)) {
      char buf[16];
      if (cp < 0x100)
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      else if (cp < 0x10000)
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      else
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s, start, i - start);
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
  return repr_at(1);
}

std::string Value::repr_at(int level) const {
  return std::visit(
      [level](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Undefined>)
          return "";
        else if constexpr (std::is_same_v<T, None>)
          return "None";
        else if constexpr (std::is_same_v<T, bool>)
          return x ? "True" : "False";
        else if constexpr (std::is_same_v<T, int64_t>)
          return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>)
          return python_float_repr(x);
        else if constexpr (std::is_same_v<T, std::string>)
          return python_string_repr(x);
        else if constexpr (std::is_same_v<T, BigIntPtr>)
          return x->to_string();
        else if constexpr (std::is_same_v<T, ListPtr>) {
          if (x->view == kGeneratorView || x->view == kReverseIteratorView)
            return std::string("<") + x->view + " object>";
          check_walk_level(level);
          std::string out = x->is_tuple ? "(" : "[";
          for (size_t i = 0; i < x->items.size(); ++i)
            out += (i ? ", " : "") + x->items[i].repr_at(level + 1);
          if (x->is_tuple && x->items.size() == 1) out += ",";
          out += x->is_tuple ? ")" : "]";
          return x->view ? std::string(x->view) + "(" + out + ")" : out;
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          check_walk_level(level);
          std::string out = "{";
          for (size_t i = 0; i < x->items.size(); ++i)
            out += (i ? ", " : "") + x->items[i].first.repr_at(level + 1) + ": " +
                   x->items[i].second.repr_at(level + 1);
          return out + "}";
        } else if constexpr (std::is_same_v<T, NamespacePtr>) {
          check_walk_level(level);
          std::string out = "<Namespace {";
          for (size_t i = 0; i < x->attrs.size(); ++i)
            out += (i ? ", " : "") + python_string_repr(x->attrs[i].first) + ": " +
                   x->attrs[i].second.repr_at(level + 1);
          return out + "}>";
        } else {
          if (!x->display.empty()) return x->display;
          return x->describe ? x->describe() : "<function " + x->name + ">";
        }
      },
      v_);
}

std::string Value::type_name() const {
  static const char* const kNames[] = {"Undefined", "NoneType", "bool", "int",
                                       "float",     "str",      "list", "dict",
                                       "Namespace", "function", "int"};
  if (is_tuple()) return "tuple";
  if (is_list() && as_list().view) return as_list().view;
  return kNames[v_.index()];
}

int compare_numbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    if (!a.is_big_int() && !b.is_big_int()) {
      const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
      const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return BigInt::compare(a.as_big_int(), b.as_big_int());
  }
  if (a.is_float() && b.is_float()) {
    const double x = a.as_float(), y = b.as_float();
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  // An int against a float, exactly: compare the int with floor(f), then the fraction.
  const bool flip = a.is_float();
  const double f = flip ? a.as_float() : b.as_float();
  const Value& i = flip ? b : a;
  int c;
  if (std::isnan(f)) return 2;
  if (std::isinf(f)) {
    c = f > 0 ? -1 : 1;
  } else {
    const double fl = std::floor(f);
    c = BigInt::compare(i.as_big_int(), BigInt::from_double(fl));
    if (c == 0 && f > fl) c = -1;
  }
  return flip ? -c : c;
}

bool Value::equals(const Value& other) const {
  return equals_at(other, 1);
}

bool Value::equals_at(const Value& other, int level) const {
  if (is_number() && other.is_number()) return compare_numbers(*this, other) == 0;
  if (v_.index() != other.v_.index()) return false;
  if (is_undefined() || is_none()) return true;
  if (is_string()) return as_string() == other.as_string();
  if (is_list()) {
    if (is_lazy() || other.is_lazy()) return &as_list() == &other.as_list();
    const List& a = as_list();
    const List& b = other.as_list();
    if (a.is_tuple != b.is_tuple || a.view != b.view || a.items.size() != b.items.size())
      return false;
    check_walk_level(level);
    for (size_t i = 0; i < a.items.size(); ++i)
      if (!a.items[i].equals_at(b.items[i], level + 1)) return false;
    return true;
  }
  if (is_dict()) {
    const Dict& a = as_dict();
    const Dict& b = other.as_dict();
    if (a.items.size() != b.items.size()) return false;
    check_walk_level(level);
    for (const auto& [k, v] : a.items) {
      const Value* o = b.find(k);
      if (!o || !v.equals_at(*o, level + 1)) return false;
    }
    return true;
  }
  if (is_namespace()) return &as_namespace() == &other.as_namespace();
  return &as_callable() == &other.as_callable();
}

void Value::check_hashable() const {
  if (is_dict() || is_namespace() || (is_list() && !is_tuple()))
    fail("unhashable type: '" + type_name() + "'");
  if (is_tuple())
    for (const Value& item : as_list().items) item.check_hashable();
}

ValueList Value::iterate() const {
  if (is_list()) return as_list().items;
  if (is_undefined()) return {};
  if (is_dict()) {
    ValueList keys;
    keys.reserve(as_dict().items.size());
    for (const auto& [k, v] : as_dict().items) keys.push_back(k);
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
