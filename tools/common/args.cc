#include "tools/common/args.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace rill::cli {

Args::Args(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Args::option(const std::string& name, const std::string& fallback, const std::string& help) {
  specs_[name] = {fallback, help, false, false};
  order_.push_back(name);
}

void Args::multi(const std::string& name, const std::string& help) {
  specs_[name] = {"", help, false, true};
  order_.push_back(name);
}

void Args::flag(const std::string& name, const std::string& help) {
  specs_[name] = {"", help, true, false};
  order_.push_back(name);
}

void Args::fail(const std::string& message) const {
  std::fprintf(stderr, "%s: %s\n(see %s --help)\n", program_.c_str(), message.c_str(), program_.c_str());
  std::exit(2);
}

std::string Args::usage() const {
  std::string u = "usage: " + program_ + " [options]\n" + summary_ + "\n\noptions:\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string left = "  --" + name + (s.is_flag ? "" : " VALUE");
    if (left.size() < 28) left.resize(28, ' ');
    u += left + " " + s.help;
    if (!s.is_flag && !s.repeat && !s.fallback.empty()) u += " (default: " + s.fallback + ")";
    u += "\n";
  }
  return u;
}

void Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
    if (a.rfind("--", 0) != 0) fail("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) fail("unknown option --" + name);
    if (it->second.is_flag) {
      if (inline_value) fail("--" + name + " takes no value");
      values_[name] = {"1"};
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) fail("--" + name + " needs a value");
      value = argv[++i];
    }
    if (it->second.repeat) values_[name].push_back(value);
    else values_[name] = {value};
  }
}

std::string Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end() && !it->second.empty()) return it->second.back();
  return specs_.at(name).fallback;
}

bool Args::given(const std::string& name) const { return values_.count(name) != 0; }
bool Args::on(const std::string& name) const { return values_.count(name) != 0; }
std::vector<std::string> Args::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

long long Args::get_int64(const std::string& name) const {
  const std::string v = get(name);
  try {
    size_t used = 0;
    long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    fail("--" + name + " expects an integer, got '" + v + "'");
  }
}

int Args::get_int(const std::string& name) const {
  const long long x = get_int64(name);
  if (x < -2147483647ll || x > 2147483647ll) fail("--" + name + " is out of range");
  return static_cast<int>(x);
}

double Args::get_double(const std::string& name) const {
  const std::string v = get(name);
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return x;
  } catch (const std::exception&) {
    fail("--" + name + " expects a number, got '" + v + "'");
  }
}

}  // namespace rill::cli
