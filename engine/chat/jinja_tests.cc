// Jinja tests (`x is name(args)`), jinja2 3.1 semantics on Python types.
#include <cctype>
#include <unordered_map>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"

namespace rill::jinja {
namespace {

using TestFn = bool (*)(const Value&, const CallArgs&);

const Value& arg0(const CallArgs& a, const char* test) {
  if (a.args.empty()) fail(std::string("test '") + test + "' needs an argument");
  return a.args[0];
}

bool t_defined(const Value& v, const CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(const Value& v, const CallArgs&) {
  return v.is_undefined();
}
bool t_none(const Value& v, const CallArgs&) {
  return v.is_none();
}
bool t_string(const Value& v, const CallArgs&) {
  return v.is_string();
}
bool t_number(const Value& v, const CallArgs&) {
  return v.is_number();
}
bool t_integer(const Value& v, const CallArgs&) {
  return v.is_int();
}
bool t_float(const Value& v, const CallArgs&) {
  return v.is_float();
}
bool t_boolean(const Value& v, const CallArgs&) {
  return v.is_bool();
}
bool t_mapping(const Value& v, const CallArgs&) {
  return v.is_dict();
}
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_sequence(const Value& v, const CallArgs&) {
  return v.is_string() || (v.is_list() && !v.is_lazy()) || v.is_dict() || v.is_undefined();
}
bool t_callable(const Value& v, const CallArgs&) {
  return v.is_callable();
}
bool t_true(const Value& v, const CallArgs&) {
  return v.is_bool() && v.as_bool();
}
bool t_false(const Value& v, const CallArgs&) {
  return v.is_bool() && !v.as_bool();
}
// jinja2: value % 2 == 1, value % 2 == 0, value % num == 0 (Python's %, floats included).
bool t_odd(const Value& v, const CallArgs&) {
  return binary("%", v, Value(2)).equals(Value(1));
}
bool t_even(const Value& v, const CallArgs&) {
  return binary("%", v, Value(2)).equals(Value(0));
}
bool t_divisibleby(const Value& v, const CallArgs& a) {
  return binary("%", v, arg0(a, "divisibleby")).equals(Value(0));
}
bool t_eq(const Value& v, const CallArgs& a) {
  return compare("==", v, arg0(a, "eq"));
}
bool t_ne(const Value& v, const CallArgs& a) {
  return compare("!=", v, arg0(a, "ne"));
}
bool t_lt(const Value& v, const CallArgs& a) {
  return compare("<", v, arg0(a, "lt"));
}
bool t_le(const Value& v, const CallArgs& a) {
  return compare("<=", v, arg0(a, "le"));
}
bool t_gt(const Value& v, const CallArgs& a) {
  return compare(">", v, arg0(a, "gt"));
}
bool t_ge(const Value& v, const CallArgs& a) {
  return compare(">=", v, arg0(a, "ge"));
}
bool t_in(const Value& v, const CallArgs& a) {
  return compare("in", v, arg0(a, "in"));
}
bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& o = arg0(a, "sameas");
  if (v.is_none() || v.is_bool() || o.is_none() || o.is_bool())
    return v.type_name() == o.type_name() && v.equals(o);
  return false;  // identity of other objects is not observable here
}
bool t_lower(const Value& v, const CallArgs&) {
  const std::string s = v.str();
  bool cased = false;
  for (char c : s) {
    if (std::isupper(static_cast<unsigned char>(c))) return false;
    cased = cased || std::islower(static_cast<unsigned char>(c));
  }
  return cased;
}
bool t_upper(const Value& v, const CallArgs&) {
  const std::string s = v.str();
  bool cased = false;
  for (char c : s) {
    if (std::islower(static_cast<unsigned char>(c))) return false;
    cased = cased || std::isupper(static_cast<unsigned char>(c));
  }
  return cased;
}
bool t_escaped(const Value&, const CallArgs&) {
  return false;
}
// `name is filter` / `name is test`: whether a filter / test of that name exists.
bool t_filter(const Value& v, const CallArgs&) {
  return v.is_string() && is_filter(v.as_string());
}
bool t_test(const Value& v, const CallArgs&) {
  return v.is_string() && is_test(v.as_string());
}

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"string", t_string},
      {"number", t_number},
      {"integer", t_integer},
      {"float", t_float},
      {"boolean", t_boolean},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"true", t_true},
      {"false", t_false},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"equalto", t_eq},
      {"eq", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"sameas", t_sameas},
      {"lower", t_lower},
      {"upper", t_upper},
      {"escaped", t_escaped},
      {"filter", t_filter},
      {"test", t_test},
  };
  return kTests;
}

}  // namespace

bool is_test(const std::string& name) {
  return tests().count(name) != 0;
}

bool apply_test(const std::string& name, const Value& operand, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) fail("No test named '" + name + "' found.");
  return it->second(operand, args);
}

}  // namespace rill::jinja
