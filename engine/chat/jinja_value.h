// Run-time values of the Jinja interpreter, with Python's semantics where jinja2 follows Python:
// truthiness, equality (1 == 1.0 == True), ints of any size, dicts with any hashable keys,
// str() of lists and dicts in repr style, float repr. Lists and dicts are shared and immutable
// (jinja2's ImmutableSandboxedEnvironment); the only mutable object is a namespace(), whose
// attributes `{% set ns.x = ... %}` assigns.
//
// Nesting is bounded: every list and dict records its depth and none may exceed kMaxValueDepth,
// and every walk over values (repr, ==, ordering, tojson, pprint) counts its depth too (through
// namespaces, whose contents can change after they are stored), so nothing recurses deeper than
// that bound whatever the template or its input builds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/chat/jinja_bigint.h"

namespace rill::jinja {

class Value;
using ValueList = std::vector<Value>;

/// Name -> value pairs: keyword arguments, namespace() attributes, global functions.
using DictEntries = std::vector<std::pair<std::string, Value>>;
/// A dict's items in insertion order, like a Python dict. Keys are hashable values (str, int,
/// float, bool, None, tuples of those); JSON objects give string keys.
using DictItems = std::vector<std::pair<Value, Value>>;

/// Lists, dicts and tuples nest at most this deep (client JSON arrives bounded to 64 levels).
inline constexpr int kMaxValueDepth = 512;

/// List views that stand for Python iterators: the results of jinja2's lazy filters (map,
/// select, reject, selectattr, rejectattr, unique, batch, items) and of reverse on a list. Like
/// the Python objects they are always truthy, have no len(), cannot be indexed or serialized.
inline constexpr const char kGeneratorView[] = "generator";
inline constexpr const char kReverseIteratorView[] = "list_reverseiterator";

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
  /// Set for dict.items() / keys() / values(), which Python prints as dict_items([...]).
  const char* view = nullptr;
  int depth = 1;  // 1 + the deepest item's depth
  /// groupby's (grouper, list) tuples: attribute names of the items, else null.
  const std::vector<std::string>* fields = nullptr;
};
struct Dict {
  DictItems items;
  int depth = 1;  // 1 + the deepest key's or value's depth
  /// The value of a key equal to `key` (Python's ==, so 1, 1.0 and True are one key).
  const Value* find(const Value& key) const;
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
  /// Attributes a template can read (a macro's name and arguments).
  DictEntries attrs;
  /// How str() shows it ("<Macro 'm'>"); empty: describe(), else "<function name>".
  std::string display;
  /// Attributes computed when read (loop.index, loop.cycle, ...): the value, or undefined. A
  /// loop object is made for every iteration, so it computes what a template asks for only.
  std::function<Value(const std::string&)> lookup;
  std::function<std::string()> describe;
};

class Value {
 public:
  using ListPtr = std::shared_ptr<const List>;
  using DictPtr = std::shared_ptr<const Dict>;
  using NamespacePtr = std::shared_ptr<Namespace>;
  using CallablePtr = std::shared_ptr<const Callable>;
  using BigIntPtr = std::shared_ptr<const BigInt>;
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, ListPtr,
                               DictPtr, NamespacePtr, CallablePtr, BigIntPtr>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int v) : v_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : v_(v) {}
  Value(double v) : v_(v) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(Undefined u) : v_(std::move(u)) {}
  /// An int: int64 when it fits, else a BigInt.
  Value(const BigInt& v);

  static Value undefined(std::string name = {}) { return Value(Undefined{std::move(name)}); }
  /// Throws TemplateError when an item is already kMaxValueDepth deep. `fields` names a named
  /// tuple's items (groupby's grouper / list).
  static Value list(ValueList items, bool is_tuple = false, const char* view = nullptr,
                    const std::vector<std::string>* fields = nullptr);
  /// A dict with string keys.
  static Value dict(const DictEntries& entries);
  /// Keys must be unique (by equals()) and hashable; see check_hashable().
  static Value dict(DictItems items);
  static Value make_namespace(DictEntries attrs);
  static Value function(std::string name, Function fn, DictEntries attrs = {},
                        std::string display = {});
  /// A callable object whose attributes and printed form are computed on demand.
  static Value object(std::string name, Function fn,
                      std::function<Value(const std::string&)> lookup,
                      std::function<std::string()> describe);
  /// A JSON value as Python would see it after json.loads (objects keep their key order).
  /// Throws TemplateError when nested deeper than kMaxValueDepth.
  static Value from_json(const nlohmann::ordered_json& j);
  /// The same from a nlohmann::json (its objects iterate in key order).
  static Value from_json(const nlohmann::json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  /// An int of any size (not bool).
  bool is_int() const {
    return std::holds_alternative<int64_t>(v_) || std::holds_alternative<BigIntPtr>(v_);
  }
  /// An int beyond int64.
  bool is_big_int() const { return std::holds_alternative<BigIntPtr>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v_); }
  bool is_tuple() const { return is_list() && as_list().is_tuple; }
  /// A Python iterator (see kGeneratorView): truthy, no len(), not subscriptable.
  bool is_lazy() const {
    return is_list() &&
           (as_list().view == kGeneratorView || as_list().view == kReverseIteratorView);
  }
  /// The same items as a lazy iterator of kind `view`.
  static Value lazy(ValueList items, const char* view = kGeneratorView) {
    return list(std::move(items), false, view);
  }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v_); }
  bool is_namespace() const { return std::holds_alternative<NamespacePtr>(v_); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(v_); }

  // Accessors; a value of another type throws TemplateError naming both types.
  bool as_bool() const { return get<bool>("bool"); }
  /// An int that fits int64 (a larger one raises Python's OverflowError message).
  int64_t as_int() const;
  /// An int or bool of any size.
  BigInt as_big_int() const;
  double as_float() const { return get<double>("float"); }
  /// int, bool or float as a double (Python arithmetic promotion); an int too large for a
  /// double raises OverflowError's message.
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
  /// repr() of a value met `level` containers deep in an enclosing walk.
  std::string repr_at(int level) const;
  /// Python's type name, for error messages ("str", "dict", "NoneType").
  std::string type_name() const;
  /// Python's ==.
  bool equals(const Value& other) const;
  bool equals_at(const Value& other, int level) const;
  /// Raises "unhashable type: 'list'" unless the value can be a dict key.
  void check_hashable() const;
  /// 0 for scalars, namespaces and callables; a list's or dict's recorded depth.
  int depth() const;
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

/// Python's comparison of two numbers (bool, int of any size, float), exact across types:
/// -1, 0, 1, or 2 when either is NaN (unordered).
int compare_numbers(const Value& a, const Value& b);

/// Raises "value nested too deeply" when a recursive walk over values enters a container at
/// `level` (the top value is level 1) beyond kMaxValueDepth.
void check_walk_level(int level);

/// Python's float repr: shortest round-trip digits, '1.0', '1e+16', '1e-05'.
std::string python_float_repr(double v);
/// The UTF-8 characters (code points) of a string, each as its bytes; Python indexes, slices
/// and measures strings by code point.
std::vector<std::string> utf8_chars(const std::string& s);
/// Python's repr of a str: single quotes unless the text holds ' and no ".
std::string python_string_repr(const std::string& s);

}  // namespace rill::jinja
