// A small command-line parser shared by the rill-* tools (the GPU host has no CLI11):
// --name value / --name=value options, boolean --flags, --help, and clear errors.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rill::cli {

class Args {
 public:
  Args(std::string program, std::string summary);
  /// Declares an option taking a value; `fallback` is shown in --help and returned by get().
  void option(const std::string& name, const std::string& fallback, const std::string& help);
  /// Declares an option that may repeat (values collected in order).
  void multi(const std::string& name, const std::string& help);
  void flag(const std::string& name, const std::string& help);

  /// Parses argv; on --help prints usage and exits 0, on a bad option prints why and exits 2.
  void parse(int argc, char** argv);

  std::string get(const std::string& name) const;
  bool given(const std::string& name) const;
  bool on(const std::string& name) const;  // a flag
  int get_int(const std::string& name) const;
  long long get_int64(const std::string& name) const;
  double get_double(const std::string& name) const;
  std::vector<std::string> all(const std::string& name) const;
  std::string usage() const;
  /// Exits 2 with "program: message".
  [[noreturn]] void fail(const std::string& message) const;

 private:
  struct Spec {
    std::string fallback, help;
    bool is_flag = false, repeat = false;
  };
  std::string program_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace rill::cli
