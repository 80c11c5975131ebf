// Jinja operators with Python semantics: arithmetic, comparison, membership, subscription,
// slicing, attribute access and calls. Using an undefined value where jinja2's default
// Undefined raises (arithmetic, attribute of undefined, calling it) raises here too.
#pragma once

#include <string>

#include "engine/chat/jinja_value.h"

namespace rill::jinja {

/// "not", "-", "+".
Value unary(const std::string& op, const Value& v);
/// "+", "-", "*", "/", "//", "%", "**", "~". Ints never overflow (BigInt).
Value binary(const std::string& op, const Value& a, const Value& b);
/// "==", "!=", "<", "<=", ">", ">=", "in", "not in".
bool compare(const std::string& op, const Value& a, const Value& b);
/// obj[key]: list/str index (negative counts from the end), dict key; missing -> undefined.
Value get_item(const Value& obj, const Value& key);
/// obj[start:stop:step] on a list, tuple or string (undefined parts are None).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
/// obj.name: raises when obj is undefined, else get_attribute().
Value get_attribute_checked(const Value& obj, const std::string& name);
/// callee(args): raises when callee is not callable.
Value call(const Value& callee, CallArgs& args);
/// Python's printf-style `fmt % args`: %(key)s mapping keys, flags "-+ #0", width and
/// precision (also *), conversions d i u o x X e E f F g G c s r a %. `args` is the right
/// operand: a tuple supplies the arguments, a dict serves %(key) lookups, anything else is the
/// single argument.
std::string percent_format(const std::string& fmt, const Value& args);
/// Raises jinja2's UndefinedError for an undefined value.
[[noreturn]] void fail_undefined(const Value& undefined);

}  // namespace rill::jinja
