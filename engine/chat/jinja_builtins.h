// Jinja built-ins: filters, tests, methods of str / dict / list values, and the global
// functions transformers' environment offers (range, namespace, dict, raise_exception,
// strftime_now). Semantics follow jinja2 3.1 and Python; tojson is transformers' version
// (json.dumps with ensure_ascii=False).
#pragma once

#include <optional>
#include <string>

#include "engine/chat/jinja_value.h"

namespace rill::jinja {

/// Whether a filter / test exists (the `filter` and `test` tests, map() and select()).
bool is_filter(const std::string& name);
bool is_test(const std::string& name);

/// `operand | name(args)`. An unknown name raises jinja2's run-time error ("No filter named
/// 'x' found."): like jinja2 inside an {% if %}, a template may name filters it never runs.
Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
/// `operand is name(args)`; an unknown name raises when evaluated, as filters do.
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);

/// `s.name` where name is a str method: a bound callable, or nullopt.
std::optional<Value> string_method(const std::string& s, const std::string& name);

/// `obj.name` where name is a method of str / dict / list: a bound callable, or nullopt.
/// Methods that would mutate a list or dict raise on call, as in jinja2's immutable sandbox.
std::optional<Value> get_method(const Value& obj, const std::string& name);

/// Every namespace() one render creates. They are kept alive until the render ends and then
/// emptied before they are released: a namespace can hold itself (`ns.x = [ns]`) or start a
/// long chain (`ns.next = namespace(...)` in a loop), and emptying them one by one frees such
/// structures without leaking and without recursing down the chain.
class NamespaceRegistry {
 public:
  NamespaceRegistry() = default;
  NamespaceRegistry(const NamespaceRegistry&) = delete;
  NamespaceRegistry& operator=(const NamespaceRegistry&) = delete;
  ~NamespaceRegistry();
  void add(const Value& ns) { namespaces_.push_back(ns); }

 private:
  ValueList namespaces_;
};

/// The global functions: range, namespace, dict, raise_exception, strftime_now. namespace()
/// records what it creates in `registry`, which must outlive every use of these functions.
DictEntries global_functions(NamespaceRegistry* registry);

/// Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
/// indent < 0: no newlines. Default separators: (", ", ": "), or (",", ": ") with an indent.
std::string json_dumps(const Value& value, int indent = -1, const std::string* item_sep = nullptr,
                       const std::string* key_sep = nullptr, bool sort_keys = false,
                       bool ensure_ascii = false);

/// Python-style comparison for sort(): -1, 0, 1; throws on unorderable types.
int compare_values(const Value& a, const Value& b);

/// `obj.name` (jinja2's getattr): namespace attributes, the attributes of loops, macros and
/// groupby tuples, methods, then dict keys; else undefined.
Value get_attribute(const Value& obj, const std::string& name);

/// Python's pprint.pformat(value) (width 80, dict keys sorted).
std::string python_pformat(const Value& value);

/// Python's str.lower() / str.upper() (Unicode case mapping of single code points, from the
/// tokenizer's Unicode tables).
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);

/// Python's round(x, ndigits) for a float: the exact binary value rounded half to even
/// (round(2.675, 2) is 2.67 because 2.675 is stored as 2.67499999...).
double python_round(double x, int64_t ndigits);

/// Python's html.unescape: named (HTML5) and numeric character references.
std::string html_unescape(const std::string& s);

/// Python's str.isspace() of one code point (Unicode White_Space plus U+001C..U+001F).
bool python_isspace(char32_t cp);
/// Python's str.split() without a separator: runs of Unicode whitespace, at most `maxsplit`
/// splits (-1: all), from the right when `from_right` (rsplit).
std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right);
/// Python's str.splitlines(): breaks at LF, CR, CRLF, VT, FF, U+001C..U+001E, U+0085,
/// U+2028, U+2029.
std::vector<std::string> python_splitlines(const std::string& s, bool keepends);

/// Python's str.strip()/lstrip()/rstrip() without arguments or with a set of characters.
std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right);

}  // namespace rill::jinja
