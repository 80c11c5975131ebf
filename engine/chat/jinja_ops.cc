#include "engine/chat/jinja_ops.h"

#include <cmath>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"

namespace rill::jinja {
namespace {

// A sandbox limit on `'x' * n` (jinja2's sandbox caps it too), so no template exhausts memory.
constexpr double kMaxRepeat = 16.0 * 1024 * 1024;

// jinja2's object_type_repr: "None", or "dict object".
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return v.type_name() + " object";
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() +
       "'");
}

bool is_integral(const Value& v) {
  return v.is_int() || v.is_bool();
}
int64_t integral(const Value& v) {
  return v.is_bool() ? v.as_bool() : v.as_int();
}

Value repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().items.size();
  if (n > 0 && static_cast<double>(unit) * static_cast<double>(n) > kMaxRepeat)
    fail("sequence repetition too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  ValueList out;
  for (int64_t i = 0; i < n; ++i)
    for (const auto& item : seq.as_list().items) out.push_back(item);
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

// Python's int arithmetic: int64 while it fits, BigInt beyond.
Value integer_arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (!a.is_big_int() && !b.is_big_int()) {
    const int64_t x = integral(a), y = integral(b);
    int64_t r = 0;
    bool overflow = false;
    if (op == "+") {
      overflow = __builtin_add_overflow(x, y, &r);
    } else if (op == "-") {
      overflow = __builtin_sub_overflow(x, y, &r);
    } else if (op == "*") {
      overflow = __builtin_mul_overflow(x, y, &r);
    } else if (op == "//" || op == "%") {
      if (x == INT64_MIN && y == -1) {
        overflow = true;
      } else {
        int64_t q = x / y;
        if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
        r = op == "//" ? q : x - q * y;
      }
    }
    if (!overflow) return Value(r);
  }
  const BigInt x = a.as_big_int(), y = b.as_big_int();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  BigInt q, r;
  BigInt::divmod_floor(x, y, q, r);
  return op == "//" ? Value(q) : Value(r);
}

Value power(const Value& a, const Value& b) {
  const bool ints = is_integral(a) && is_integral(b);
  if (ints && compare_numbers(b, Value(0)) >= 0) {
    if (b.is_big_int()) {  // only 0, 1 and -1 survive a huge exponent
      const int64_t base = a.is_big_int() ? 2 : integral(a);
      if (base == 0 || base == 1) return Value(base);
      if (base == -1) return Value(b.as_big_int().to_string().back() % 2 == 0 ? 1 : -1);
      fail("integer result too large (more than 4300 digits)");
    }
    if (!a.is_big_int()) {  // square-and-multiply while int64 holds
      int64_t base = integral(a), r = 1;
      bool overflow = false;
      for (int64_t e = integral(b); e > 0 && !overflow; e >>= 1) {
        if (e & 1) overflow = __builtin_mul_overflow(r, base, &r);
        if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
      if (!overflow) return Value(r);
    }
    return Value(BigInt::pow(a.as_big_int(), static_cast<uint64_t>(integral(b))));
  }
  const double x = a.to_double(), y = b.to_double();
  if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
  return Value(std::pow(x, y));
}

// CPython's float_divmod: the remainder takes the divisor's sign.
void float_divmod(double x, double y, double& floordiv, double& mod) {
  mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, x / y);
  }
}

// Python's int / int: the double nearest the exact quotient. Small ints convert exactly, so one
// division rounds once; larger ones divide to a quotient of 66+ bits whose last bit is sticky
// (set when the remainder is not zero), which the conversion to double then rounds once.
double int_true_divide(const Value& a, const Value& b) {
  const BigInt x = a.as_big_int(), y = b.as_big_int();
  if (x.bit_length() <= 53 && y.bit_length() <= 53) return a.to_double() / b.to_double();
  const bool negative = x.negative() != y.negative();
  const BigInt ax = x.negative() ? -x : x, ay = y.negative() ? -y : y;
  const auto diff = static_cast<int64_t>(ax.bit_length()) - static_cast<int64_t>(ay.bit_length());
  if (diff > 1100) fail("integer division result too large for a float");
  if (diff < -1100) return negative ? -0.0 : 0.0;  // below the smallest double
  const int64_t shift = 66 - diff;                 // |shift| <= 1166: bounded sizes
  const BigInt num = shift > 0 ? BigInt::shift_left(ax, static_cast<size_t>(shift)) : ax;
  const BigInt den = shift < 0 ? BigInt::shift_left(ay, static_cast<size_t>(-shift)) : ay;
  BigInt q, r;
  BigInt::divmod_floor(num, den, q, r);
  q = BigInt::shift_left(q, 1);
  if (!r.is_zero()) q = q + BigInt(1);
  const double magnitude = std::ldexp(q.to_double(), static_cast<int>(-shift - 1));
  if (std::isinf(magnitude)) fail("integer division result too large for a float");
  return negative ? -magnitude : magnitude;
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool ints = is_integral(a) && is_integral(b);
  if (op == "/") {
    if (!b.truthy()) fail("division by zero");
    if (ints) return Value(int_true_divide(a, b));
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (!b.truthy())
      fail(ints ? (op == "%" ? "integer modulo by zero" : "integer division or modulo by zero")
                : (op == "%" ? "float modulo" : "float floor division by zero"));
    if (ints) return integer_arithmetic(op, a, b);
    double floordiv = 0, mod = 0;
    float_divmod(a.to_double(), b.to_double(), floordiv, mod);
    return op == "//" ? Value(floordiv) : Value(mod);
  }
  if (op == "**") return power(a, b);
  if (ints) return integer_arithmetic(op, a, b);
  const double x = a.to_double(), y = b.to_double();
  return Value(op == "+" ? x + y : op == "-" ? x - y : x * y);
}

// Python's ordering for <, <=, >, >= (numbers, strings, lists/tuples elementwise); 2 means
// "unordered" (a NaN), for which every comparison is false.
int order(const Value& a, const Value& b, const std::string& op, int level = 1) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b);
  if (a.is_string() && b.is_string())
    return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() == b.as_string() ? 0 : 1;
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_lazy() && !b.is_lazy()) {
    check_walk_level(level);
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!x[i].equals_at(y[i], level + 1)) return order(x[i], y[i], op, level + 1);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail("'" + op + "' not supported between instances of '" + a.type_name() + "' and '" +
       b.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      fail("'in <string>' requires string as left operand, not " + item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& x : container.as_list().items)
      if (x.equals(item)) return true;
    return false;
  }
  if (container.is_dict()) {
    item.check_hashable();
    return container.as_dict().find(item) != nullptr;
  }
  if (container.is_undefined()) return false;
  fail("argument of type '" + container.type_name() + "' is not iterable");
}

// Python's slice.indices(length) for one bound.
int64_t clamp_bound(const Value& v, int64_t length, int64_t step, bool is_start) {
  if (v.is_undefined() || v.is_none()) {
    if (step > 0) return is_start ? 0 : length;
    return is_start ? length - 1 : -1;
  }
  if (!is_integral(v)) fail("slice indices must be integers or None");
  int64_t i = integral(v);
  if (i < 0) {
    i += length;
    if (i < 0) i = step < 0 ? -1 : 0;
  } else if (i >= length) {
    i = step < 0 ? length - 1 : length;
  }
  return i;
}

}  // namespace

void fail_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_name();
  fail(hint.empty() ? "value is undefined" : hint);
}

Value unary(const std::string& op, const Value& v) {
  if (op == "not") return Value(!v.truthy());
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) fail("bad operand type for unary " + op + ": '" + v.type_name() + "'");
  if (op == "+") return v.is_bool() ? Value(integral(v)) : v;
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_big_int() || integral(v) == INT64_MIN) return Value(-v.as_big_int());
  return Value(-integral(v));
}

Value binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.as_list().view &&
        !b.as_list().view) {
      ValueList items = a.as_list().items;
      for (const auto& x : b.as_list().items) items.push_back(x);
      return Value::list(std::move(items), a.is_tuple());
    }
    if (a.is_string()) fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (a.is_list()) fail("can only concatenate list (not \"" + b.type_name() + "\") to list");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, integral(b));
    if ((b.is_string() || b.is_list()) && is_integral(a)) return repeat(b, integral(a));
    if (a.is_string() || a.is_list() || b.is_string() || b.is_list())
      fail("can't multiply sequence by non-int of type '" +
           (a.is_string() || a.is_list() ? b : a).type_name() + "'");
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  unsupported(op, a, b);
}

bool compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.equals(b);
  if (op == "!=") return !a.equals(b);
  if (op == "in") return contains(b, a);
  if (op == "not in") return !contains(b, a);
  const int c = order(a, b, op);
  if (c == 2) return false;  // NaN: unordered
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_lazy())  // jinja2 turns the TypeError into an undefined value
    return Value::undefined("'" + obj.type_name() + " object' has no attribute " + key.repr());
  if ((obj.is_list() || obj.is_string()) && key.is_big_int())
    return Value::undefined(obj.type_name() + " object has no element " + key.repr());
  if ((obj.is_list() || obj.is_string()) && is_integral(key)) {
    const bool is_str = obj.is_string();
    const std::vector<std::string> chars =
        is_str ? utf8_chars(obj.as_string()) : std::vector<std::string>{};
    const auto length = static_cast<int64_t>(is_str ? chars.size() : obj.as_list().items.size());
    int64_t i = integral(key);
    if (i < 0) i += length;
    if (i < 0 || i >= length)
      return Value::undefined(obj.type_name() + " object has no element " + key.repr());
    return is_str ? Value(chars[static_cast<size_t>(i)])
                  : obj.as_list().items[static_cast<size_t>(i)];
  }
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined(object_type_repr(obj) + " has no element " + key.repr());
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_lazy() || (!obj.is_list() && !obj.is_string()))  // undefined, as in jinja2
    return Value::undefined("'" + obj.type_name() + "' object is not subscriptable");
  int64_t step = 1;
  if (!step_v.is_undefined() && !step_v.is_none()) {
    if (!is_integral(step_v)) fail("slice indices must be integers or None");
    step = integral(step_v);
    if (step == 0) fail("slice step cannot be zero");
  }
  const bool is_str = obj.is_string();
  const std::vector<std::string> chars =
      is_str ? utf8_chars(obj.as_string()) : std::vector<std::string>{};
  const auto length = static_cast<int64_t>(is_str ? chars.size() : obj.as_list().items.size());
  const int64_t begin = clamp_bound(start, length, step, true);
  const int64_t end = clamp_bound(stop, length, step, false);
  std::string text;
  ValueList items;
  for (int64_t i = begin; step > 0 ? i < end : i > end; i += step) {
    if (is_str)
      text += chars[static_cast<size_t>(i)];
    else
      items.push_back(obj.as_list().items[static_cast<size_t>(i)]);
  }
  if (is_str) return Value(std::move(text));
  return Value::list(std::move(items), obj.as_list().is_tuple);
}

Value get_attribute_checked(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  Value v = get_attribute(obj, name);
  if (v.is_undefined() && v.undefined_name().empty())
    return Value::undefined((obj.is_none() ? "'None'" : "'" + object_type_repr(obj) + "'") +
                            " has no attribute '" + name + "'");
  return v;
}

Value call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) fail("'" + callee.type_name() + "' object is not callable");
  return callee.as_callable().fn(args);
}

}  // namespace rill::jinja
