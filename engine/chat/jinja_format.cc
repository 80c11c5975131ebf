// Python's printf-style formatting (`'%.2f' % x`, jinja2's format filter) and round(): the
// spec grammar %[(key)][flags][width][.precision][length]conversion, with Python's rules for
// which values each conversion accepts and its error messages.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/chat/jinja_builtins.h"
#include "engine/chat/jinja_error.h"
#include "engine/chat/jinja_ops.h"
#include "engine/util/utf8.h"

namespace rill::jinja {
namespace {

// A sandbox bound on width and precision, so no format string allocates without limit.
constexpr int64_t kMaxFormatWidth = 1 << 16;

struct Spec {
  bool left = false, plus = false, space = false, alternate = false, zero = false;
  int64_t width = -1;
  int64_t precision = -1;
  char conversion = 0;
};

// Pulls the next positional argument (or the single non-tuple argument).
class ArgSource {
 public:
  explicit ArgSource(const Value& args) : args_(args) {
    if (args.is_tuple()) {
      items_ = &args.as_list().items;
    } else if (args.is_dict() || (args.is_list() && !args.is_lazy())) {
      mapping_ = true;  // Python: any mapping but a tuple or str may serve %(key)s
    }
  }
  const Value& next() {
    if (items_) {
      if (index_ >= items_->size()) fail("not enough arguments for format string");
      return (*items_)[index_++];
    }
    if (used_single_) fail("not enough arguments for format string");
    used_single_ = true;
    return args_;
  }
  Value lookup(const std::string& key) const {
    if (!mapping_) fail("format requires a mapping");
    if (!args_.is_dict()) fail("list indices must be integers or slices, not str");
    const Value* v = args_.as_dict().find(key);
    if (!v) fail(python_string_repr(key));  // KeyError's message is the key's repr
    return *v;
  }
  void check_all_used() const {
    if (items_ ? index_ < items_->size() : (!used_single_ && !mapping_))
      fail("not all arguments converted during string formatting");
  }

 private:
  const Value& args_;
  const ValueList* items_ = nullptr;
  size_t index_ = 0;
  bool used_single_ = false;
  bool mapping_ = false;
};

int64_t read_number(const std::string& fmt, size_t& i, const char* what) {
  int64_t n = 0;
  while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
    n = n * 10 + (fmt[i++] - '0');
    if (n > kMaxFormatWidth) fail(std::string(what) + " too big");
  }
  return n;
}

int64_t star_argument(ArgSource& source, const char* what) {
  const Value& v = source.next();
  if (!v.is_int() && !v.is_bool()) fail("* wants int");
  const int64_t n = v.is_bool() ? v.as_bool() : v.as_int();
  if (n > kMaxFormatWidth || n < -kMaxFormatWidth) fail(std::string(what) + " too big");
  return n;
}

// Parses flags, width, precision and the conversion after "%" (and any "(key)").
Spec parse_spec(const std::string& fmt, size_t& i, ArgSource& source) {
  Spec spec;
  for (; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '-')
      spec.left = true;
    else if (c == '+')
      spec.plus = true;
    else if (c == ' ')
      spec.space = true;
    else if (c == '#')
      spec.alternate = true;
    else if (c == '0')
      spec.zero = true;
    else
      break;
  }
  if (i < fmt.size() && fmt[i] == '*') {
    ++i;
    spec.width = star_argument(source, "width");
    if (spec.width < 0) {
      spec.left = true;
      spec.width = -spec.width;
    }
  } else {
    spec.width = read_number(fmt, i, "width");
  }
  if (i < fmt.size() && fmt[i] == '.') {
    ++i;
    if (i < fmt.size() && fmt[i] == '*') {
      ++i;
      spec.precision = std::max<int64_t>(star_argument(source, "precision"), 0);
    } else {
      spec.precision = read_number(fmt, i, "precision");
    }
  }
  while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
  if (i >= fmt.size()) fail("incomplete format");
  spec.conversion = fmt[i];
  return spec;
}

std::string pad(const std::string& body, const Spec& spec) {
  const auto length = static_cast<int64_t>(utf8_chars(body).size());
  if (spec.width <= length) return body;
  const std::string fill(static_cast<size_t>(spec.width - length), ' ');
  return spec.left ? body + fill : fill + body;
}

// sign + prefix + digits, padded: zeros go between the prefix and the digits.
std::string pad_number(bool negative, const std::string& prefix, const std::string& digits,
                       const Spec& spec) {
  const std::string sign = negative ? "-" : spec.plus ? "+" : spec.space ? " " : "";
  const auto length = static_cast<int64_t>(sign.size() + prefix.size() + digits.size());
  if (spec.width <= length) return sign + prefix + digits;
  const auto fill = static_cast<size_t>(spec.width - length);
  if (spec.left) return sign + prefix + digits + std::string(fill, ' ');
  if (spec.zero) return sign + prefix + std::string(fill, '0') + digits;
  return std::string(fill, ' ') + sign + prefix + digits;
}

std::string format_integer(const Value& x, const Spec& spec) {
  const char c = spec.conversion;
  BigInt n;
  if (x.is_float()) {
    if (c != 'd' && c != 'i' && c != 'u')
      fail(std::string("%") + c + " format: an integer is required, not float");
    const double d = x.as_float();
    if (std::isnan(d)) fail("cannot convert float NaN to integer");
    if (std::isinf(d)) fail("cannot convert float infinity to integer");
    n = BigInt::from_double(std::trunc(d));
  } else if (x.is_int() || x.is_bool()) {
    n = x.as_big_int();
  } else {
    fail(std::string("%") + c +
         (c == 'd' || c == 'i' || c == 'u' ? " format: a real number is required, not "
                                           : " format: an integer is required, not ") +
         x.type_name());
  }
  std::string digits;
  std::string prefix;
  if (c == 'o' || c == 'x' || c == 'X') {
    digits = n.magnitude_in_base(c == 'o' ? 8 : 16);
    if (spec.alternate) prefix = c == 'o' ? "0o" : c == 'x' ? "0x" : "0X";
    if (c == 'X')
      for (char& ch : digits) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  } else {
    digits = (n.negative() ? -n : n).to_string();
  }
  if (spec.precision > static_cast<int64_t>(digits.size()))
    digits.insert(0, static_cast<size_t>(spec.precision) - digits.size(), '0');
  return pad_number(n.negative(), prefix, digits, spec);
}

std::string format_float(const Value& x, const Spec& spec) {
  if (!x.is_number()) fail("must be real number, not " + x.type_name());
  const double d = x.to_double();
  const char c = spec.conversion;
  const bool upper = c == 'E' || c == 'F' || c == 'G';
  if (!std::isfinite(d)) {
    std::string word = std::isnan(d) ? "nan" : "inf";
    if (upper) word = std::isnan(d) ? "NAN" : "INF";
    return pad_number(std::isinf(d) && d < 0, "", word, spec);
  }
  const int precision = static_cast<int>(spec.precision < 0 ? 6 : spec.precision);
  const char conversion[2] = {c == 'F' ? 'f' : c, '\0'};
  const std::string cfmt =
      std::string("%") + (spec.alternate ? "#" : "") + ".*" + conversion;  // digits only
  const int n = std::snprintf(nullptr, 0, cfmt.c_str(), precision, std::fabs(d));
  std::string digits(static_cast<size_t>(n), '\0');
  std::snprintf(digits.data(), digits.size() + 1, cfmt.c_str(), precision, std::fabs(d));
  return pad_number(std::signbit(d), "", digits, spec);
}

// Python's ascii(): repr with every non-ASCII code point escaped.
std::string ascii_repr(const Value& x) {
  const std::string repr = x.repr();
  std::string out;
  for (size_t i = 0; i < repr.size();) {
    if (static_cast<unsigned char>(repr[i]) < 0x80) {
      out += repr[i++];
      continue;
    }
    const char32_t cp = utf8::next(repr, i);
    char buf[16];
    if (cp < 0x100)
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
    else if (cp < 0x10000)
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
    else
      std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
    out += buf;
  }
  return out;
}

std::string format_char(const Value& x, const Spec& spec) {
  if (x.is_string()) {
    if (utf8_chars(x.as_string()).size() != 1) fail("%c requires int or char");
    return pad(x.as_string(), spec);
  }
  if (!x.is_int() && !x.is_bool()) fail("%c requires int or char");
  const BigInt n = x.as_big_int();
  if (n.negative() || BigInt::compare(n, BigInt(0x10FFFF)) > 0)
    fail("%c arg not in range(0x110000)");
  std::string out;
  utf8::append(out, static_cast<char32_t>(n.to_int64()));
  return pad(out, spec);
}

std::string format_text(const std::string& text, const Spec& spec) {
  if (spec.precision < 0) return pad(text, spec);
  const std::vector<std::string> chars = utf8_chars(text);
  std::string cut;
  for (size_t k = 0; k < chars.size() && static_cast<int64_t>(k) < spec.precision; ++k)
    cut += chars[k];
  return pad(cut, spec);
}

std::string format_one(const Value& x, const Spec& spec, size_t at) {
  switch (spec.conversion) {
    case 's':
      return format_text(x.str(), spec);
    case 'r':
      return format_text(x.repr(), spec);
    case 'a':
      return format_text(ascii_repr(x), spec);
    case 'c':
      return format_char(x, spec);
    case 'd':
    case 'i':
    case 'u':
    case 'o':
    case 'x':
    case 'X':
      return format_integer(x, spec);
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      return format_float(x, spec);
    default: {
      char buf[96];
      std::snprintf(buf, sizeof buf, "unsupported format character '%c' (0x%x) at index %zu",
                    spec.conversion, static_cast<unsigned char>(spec.conversion), at);
      fail(buf);
    }
  }
}

}  // namespace

std::string percent_format(const std::string& fmt, const Value& args) {
  ArgSource source(args);
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    if (fmt[i] == '%') {
      out += '%';
      continue;
    }
    Value keyed;
    bool has_key = false;
    if (fmt[i] == '(') {  // %(key)s, parentheses inside the key nest
      int depth = 1;
      const size_t start = ++i;
      while (i < fmt.size() && depth > 0) {
        depth += fmt[i] == '(' ? 1 : fmt[i] == ')' ? -1 : 0;
        ++i;
      }
      if (depth > 0) fail("incomplete format key");
      keyed = source.lookup(fmt.substr(start, i - 1 - start));
      has_key = true;
    }
    const Spec spec = parse_spec(fmt, i, source);
    if (spec.conversion == '%') {
      out += '%';
      continue;
    }
    out += format_one(has_key ? keyed : source.next(), spec, i);
  }
  source.check_all_used();
  return out;
}

double python_round(double x, int64_t ndigits) {
  if (!std::isfinite(x) || x == 0.0) return x;
  // Beyond these, rounding cannot change a double (CPython's NDIGITS_MAX / MIN).
  if (ndigits > 323) return x;
  if (ndigits < -308) return std::copysign(0.0, x);
  if (ndigits >= 0) {
    // printf rounds the exact binary value to nearest, ties to even, like CPython's dtoa:
    // 2.675 is 2.67499999... in binary, so it rounds down.
    const int n = std::snprintf(nullptr, 0, "%.*f", static_cast<int>(ndigits), x);
    std::string text(static_cast<size_t>(n), '\0');
    std::snprintf(text.data(), text.size() + 1, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(text.c_str(), nullptr);
  }
  // Round to a multiple of 10^-ndigits, exactly: the integer part's digits decide, the
  // fraction only breaks ties.
  const double ip = std::trunc(x);
  const bool has_fraction = x != ip;
  char buf[400];  // |ip| < 1.8e308: at most 309 digits
  std::snprintf(buf, sizeof buf, "%.0f", std::fabs(ip));
  std::string digits = buf;
  const auto cut = static_cast<size_t>(-ndigits);
  if (digits.size() < cut) digits.insert(0, cut - digits.size(), '0');
  const std::string tail = digits.substr(digits.size() - cut);
  std::string head = digits.substr(0, digits.size() - cut);
  if (head.empty()) head = "0";
  const std::string half = "5" + std::string(cut - 1, '0');
  const int c = tail.compare(half);
  const bool odd = (head.back() - '0') % 2 == 1;
  const bool up = c > 0 || (c == 0 && (has_fraction || odd));
  if (up) {  // increment the decimal string
    size_t k = head.size();
    while (k > 0 && head[k - 1] == '9') head[--k] = '0';
    if (k == 0)
      head.insert(0, "1");
    else
      ++head[k - 1];
  }
  const double magnitude = std::strtod((head + std::string(cut, '0')).c_str(), nullptr);
  return std::copysign(magnitude, x);
}

}  // namespace rill::jinja
