// Errors inside the Jinja interpreter. ChatTemplate turns them into rill::Error
// (kInvalidArgument): a template's raise_exception(msg) keeps exactly its message; every other
// error names the template line it happened on.
#pragma once

#include <stdexcept>
#include <string>

namespace rill::jinja {

class TemplateError : public std::runtime_error {
 public:
  /// line 0: not known yet (the evaluator fills in the line of the node being evaluated).
  explicit TemplateError(const std::string& message, int line = 0, bool raised = false)
      : std::runtime_error(message), line_(line), raised_(raised) {}
  int line() const { return line_; }
  /// True for raise_exception(msg) from the template itself.
  bool raised_by_template() const { return raised_; }

 private:
  int line_;
  bool raised_;
};

[[noreturn]] inline void fail(const std::string& message) { throw TemplateError(message); }

}  // namespace rill::jinja
