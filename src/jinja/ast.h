// The syntax tree of a compiled template: expressions and statements, each
// with the source line errors name.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace cs::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kTuple,    // args (a tuple is a list here)
    kDict,     // args: key, value, key, value, ...
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], absent bounds are null
    kCall,     // args[0](args[1..], kw)
    kFilter,   // args[0] | name(args[1..], kw)
    kTest,     // args[0] is [not] name(args[1..], kw)
    kUnary,    // name args[0]: "not", "-", "+"
    kBinary,   // args[0] name args[1]: "or", "and", "==", "in", "not in", "+", "~", ...
    kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kw;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    kText,      // text
    kPrint,     // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; a trailing body without cond is else
    kFor,       // targets in expr [if cond]: bodies[0], else bodies[1]
    kSet,       // targets (or attr: targets[0].attr) = expr; or block set into targets[0]
    kMacro,     // name(params): bodies[0]
    kFilter,    // {% filter expr %}: expr is a kFilter on a null value
    kBreak,
    kContinue,
    kBlock,     // a body rendered in place ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::vector<std::string> targets;
  std::string attr;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<MacroParam> params;
  std::string name;
};

}  // namespace cs::jinja
