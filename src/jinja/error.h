// Errors of a template: where (the template's line) and what. Syntax errors
// come from compiling; the others from rendering, including the template's
// own raise_exception("..."), which a chat template uses to refuse a
// conversation (roles that do not alternate, say).
#pragma once
#include <string>

#include "base/error.h"

namespace cs::jinja {

enum class TemplateErrorKind {
  kSyntax,     // the template cannot be compiled
  kRaised,     // the template called raise_exception
  kUndefined,  // an attribute or call of an undefined value
  kType,       // an operation on values of the wrong type
  kLimit,      // the render went past its step or output limit
};

class TemplateError : public Error {
 public:
  TemplateError(TemplateErrorKind kind, int line, const std::string& what)
      : Error(line > 0 ? "template line " + std::to_string(line) + ": " + what : what), kind_(kind),
        line_(line), message_(what) {}
  TemplateErrorKind template_kind() const { return kind_; }
  int line() const { return line_; }
  // The message without the line ("Conversation roles must alternate").
  const std::string& message() const { return message_; }

 private:
  TemplateErrorKind kind_;
  int line_;
  std::string message_;
};

}  // namespace cs::jinja
