// Jinja built-ins: filters, tests, methods of str / dict / list values, and the global
// functions transformers' environment offers (range, namespace, dict, raise_exception,
// strftime_now). Semantics follow jinja2 3.1 and Python; tojson is transformers' version
// (json.dumps with ensure_ascii=False).
#pragma once

#include <optional>
#include <string>

#include "engine/chat/jinja_value.h"

namespace rill::jinja {

/// Whether a filter / test exists (the parser rejects unknown ones, as jinja2 does).
bool is_filter(const std::string& name);
bool is_test(const std::string& name);

/// `operand | name(args)`.
Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args);
/// `operand is name(args)`.
bool apply_test(const std::string& name, const Value& operand, const CallArgs& args);

/// `obj.name` where name is a method of str / dict / list: a bound callable, or nullopt.
/// Methods that would mutate a list or dict raise on call, as in jinja2's immutable sandbox.
std::optional<Value> get_method(const Value& obj, const std::string& name);

/// The global functions: range, namespace, dict, raise_exception, strftime_now.
DictEntries global_functions();

/// Python's json.dumps(value, ensure_ascii=False, indent=indent, separators=..., sort_keys=...).
/// indent < 0: no newlines. Default separators: (", ", ": "), or (",", ": ") with an indent.
std::string json_dumps(const Value& value, int indent = -1, const std::string* item_sep = nullptr,
                       const std::string* key_sep = nullptr, bool sort_keys = false,
                       bool ensure_ascii = false);

/// Python-style comparison for sort(): -1, 0, 1; throws on unorderable types.
int compare_values(const Value& a, const Value& b);

/// Attribute lookup shared by the evaluator and filters (map(attribute=...), selectattr):
/// dict keys (dotted paths "a.b" allowed), namespace attributes, methods; else undefined.
Value get_attribute(const Value& obj, const std::string& name);

/// Python's str.strip()/lstrip()/rstrip() without arguments or with a set of characters.
std::string strip_chars(const std::string& s, const std::string* chars, bool left, bool right);

}  // namespace rill::jinja
