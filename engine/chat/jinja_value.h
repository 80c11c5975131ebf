// Run-time values of the Jinja interpreter, with Python's semantics where jinja2 follows Python:
// truthiness, equality (1 == 1.0 == True), str() of lists and dicts in repr style, float repr.
// Lists and dicts are shared and immutable (jinja2's ImmutableSandboxedEnvironment); the only
// mutable object is a namespace(), whose attributes `{% set ns.x = ... %}` assigns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace rill::jinja {

class Value;
using ValueList = std::vector<Value>;

/// A dict keeps insertion order like a Python dict. Keys are strings (JSON objects, dict
/// literals with string keys, namespace() kwargs).
using DictEntries = std::vector<std::pair<std::string, Value>>;

/// Positional and keyword arguments of a call.
struct CallArgs;

/// A callable: a global function, a bound method or a macro.
using Function = std::function<Value(CallArgs&)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

struct List {
  ValueList items;
  bool is_tuple = false;
};
struct Dict {
  DictEntries entries;
  const Value* find(const std::string& key) const;
};
/// namespace(): the one mutable object (attribute assignment from any scope).
struct Namespace {
  DictEntries attrs;
  Value* find(const std::string& key);
};
struct Callable {
  std::string name;
  Function fn;
};

class Value {
 public:
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using NamespacePtr = std::shared_ptr<Namespace>;
  using CallablePtr = std::shared_ptr<const Callable>;
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr,
                               DictPtr, NamespacePtr, CallablePtr>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : v_(v) {}
  Value(double v) : v_(v) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Undefined u) : v_(std::move(u)) {}

  static Value undefined(std::string name = {}) { return Value(Undefined{std::move(name)}); }
  static Value list(ValueList items, bool is_tuple = false);
  static Value dict(DictEntries entries);
  static Value make_namespace(DictEntries attrs);
  static Value function(std::string name, Function fn);
  /// A JSON value as Python would see it after json.loads (objects keep their key order).
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v_); }
  bool is_tuple() const { return is_list() && as_list().is_tuple; }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v_); }
  bool is_namespace() const { return std::holds_alternative<NamespacePtr>(v_); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(v_); }

  // Accessors; a value of another type throws TemplateError naming both types.
  bool as_bool() const { return get<bool>("bool"); }
  int64_t as_int() const { return get<int64_t>("int"); }
  double as_float() const { return get<double>("float"); }
  /// int, bool or float as a double (Python arithmetic promotion).
  double to_double() const;
  const std::string& as_string() const { return get<std::string>("str"); }
  const List& as_list() const { return *get<ListPtr>("list"); }
  const Dict& as_dict() const { return *get<DictPtr>("dict"); }
  Namespace& as_namespace() const { return *get<NamespacePtr>("Namespace"); }
  const Callable& as_callable() const { return *get<CallablePtr>("function"); }
  const std::string& undefined_name() const { return get<Undefined>("Undefined").name; }

  /// Python's bool(x); Undefined is falsy.
  bool truthy() const;
  /// Python's str(x) (jinja2 prints with it): None -> "None", lists in repr style.
  std::string str() const;
  /// Python's repr(x).
  std::string repr() const;
  /// Python's type name, for error messages ("str", "dict", "NoneType").
  std::string type_name() const;
  /// Python's ==.
  bool equals(const Value& other) const;
  /// The items a for loop visits: list items, dict keys, string characters.
  ValueList iterate() const;

 private:
  template <typename T>
  const T& get(const char* expected) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    wrong_type(expected);
  }
  [[noreturn]] void wrong_type(const char* expected) const;

  Storage v_;
};

/// Positional and keyword arguments of a call.
struct CallArgs {
  ValueList args;
  DictEntries kwargs;
  /// Positional argument `index`, else keyword `name`, else `fallback`.
  Value get(size_t index, const std::string& name, Value fallback = Value()) const;
};

/// Python's float repr: shortest round-trip digits, '1.0', '1e+16', '1e-05'.
std::string python_float_repr(double v);
/// The UTF-8 characters (code points) of a string, each as its bytes; Python indexes, slices
/// and measures strings by code point.
std::vector<std::string> utf8_chars(const std::string& s);
/// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string python_string_repr(const std::string& s);

}  // namespace rill::jinja
