#include "jinja/parser.h"

#include <cstdlib>
#include <set>

#include "jinja/error.h"
#include "jinja/lexer.h"

namespace cs::jinja {

namespace {

ExprPtr make(Expr::Kind kind, int line, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body run() {
    Body body = statements({});
    if (cur().kind != Tok::kEof) fail("unexpected '" + cur().text + "'");
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().kind == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == Tok::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++i_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++i_;
    return true;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError(TemplateErrorKind::kSyntax, cur().line, what);
  }
  std::string describe() const {
    switch (cur().kind) {
      case Tok::kEof: return "the end of the template";
      case Tok::kBlockEnd: return "'%}'";
      case Tok::kVarEnd: return "'}}'";
      case Tok::kText: return "text";
      default: return "'" + cur().text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', found " + describe());
  }
  std::string expect_name(const char* what) {
    if (cur().kind != Tok::kName) fail(std::string("expected ") + what + ", found " + describe());
    return next().text;
  }
  void expect_block_end(const char* stmt) {
    if (cur().kind != Tok::kBlockEnd) fail(std::string("unexpected ") + describe() + " in {% " + stmt + " %}");
    ++i_;
  }

  // ---- statements ----

  // Statements until a block tag whose name is in `ends` (left current).
  Body statements(const std::set<std::string>& ends) {
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.kind == Tok::kEof) {
        if (!ends.empty()) fail("the template ends inside a block: expected {% " + *ends.rbegin() + " %}");
        return body;
      }
      if (t.kind == Tok::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        ++i_;
      } else if (t.kind == Tok::kVarBegin) {
        ++i_;
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kPrint;
        s->line = t.line;
        s->expr = tuple_expr();
        if (cur().kind != Tok::kVarEnd) fail("unexpected " + describe() + " in {{ }}");
        ++i_;
        body.push_back(std::move(s));
      } else if (t.kind == Tok::kBlockBegin) {
        if (peek().kind == Tok::kName && ends.count(peek().text)) return body;
        ++i_;
        body.push_back(statement());
      } else {
        fail("unexpected " + describe());
      }
    }
  }

  // Consumes {% name %} (the end tag of a block).
  void end_tag(const char* name) {
    if (cur().kind != Tok::kBlockBegin) fail(std::string("expected {% ") + name + " %}");
    ++i_;
    if (!skip_name(name)) fail(std::string("expected {% ") + name + " %}, found " + describe());
    // jinja2 allows a name after endmacro / endblock; accept and ignore it.
    if (cur().kind == Tok::kName) ++i_;
    expect_block_end(name);
  }

  // Nesting deeper than any real template is refused before it can exhaust
  // the stack (the parser and the renderer recurse once per level).
  struct Nest {
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxDepth) p_.fail("the template nests deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };
  static constexpr int kMaxDepth = 100;

  std::unique_ptr<Stmt> statement() {
    const Nest nest(*this);
    const Token& t = cur();
    if (t.kind != Tok::kName) fail("expected a statement name after {%, found " + describe());
    const std::string n = t.text;
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    ++i_;
    if (n == "if") return if_stmt(std::move(s));
    if (n == "for") return for_stmt(std::move(s));
    if (n == "set") return set_stmt(std::move(s));
    if (n == "macro") return macro_stmt(std::move(s));
    if (n == "filter") return filter_stmt(std::move(s));
    if (n == "generation") {
      s->kind = Stmt::Kind::kBlock;
      expect_block_end("generation");
      s->bodies.push_back(statements({"endgeneration"}));
      end_tag("endgeneration");
      return s;
    }
    if (n == "break" || n == "continue") {
      s->kind = n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      if (loop_depth_ == 0) fail("{% " + n + " %} outside a for loop");
      expect_block_end(n.c_str());
      return s;
    }
    static const std::set<std::string> kUnsupported = {"include", "import", "from", "extends", "block",
                                                       "call", "do", "with", "autoescape", "trans"};
    if (kUnsupported.count(n)) fail("{% " + n + " %} is not supported in chat templates");
    fail("unknown statement {% " + n + " %}");
  }

  std::unique_ptr<Stmt> if_stmt(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kIf;
    s->conds.push_back(tuple_expr());
    expect_block_end("if");
    for (;;) {
      s->bodies.push_back(statements({"elif", "else", "endif"}));
      ++i_;  // {%
      const std::string n = next().text;
      if (n == "elif") {
        s->conds.push_back(tuple_expr());
        expect_block_end("elif");
      } else if (n == "else") {
        expect_block_end("else");
        s->bodies.push_back(statements({"endif"}));
        end_tag("endif");
        return s;
      } else {
        expect_block_end("endif");
        return s;
      }
    }
  }

  std::vector<std::string> targets() {
    std::vector<std::string> out;
    const bool paren = skip_op("(");
    do {
      out.push_back(expect_name("a variable name"));
    } while (skip_op(","));
    if (paren) expect_op(")");
    return out;
  }

  std::unique_ptr<Stmt> for_stmt(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kFor;
    s->targets = targets();
    if (!skip_name("in")) fail("expected 'in' in {% for %}, found " + describe());
    s->expr = tuple_expr(false);
    if (skip_name("if")) s->cond = expression();
    if (skip_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end("for");
    ++loop_depth_;
    s->bodies.push_back(statements({"else", "endfor"}));
    --loop_depth_;
    ++i_;
    if (next().text == "else") {
      expect_block_end("else");
      s->bodies.push_back(statements({"endfor"}));
      end_tag("endfor");
    } else {
      expect_block_end("endfor");
    }
    return s;
  }

  std::unique_ptr<Stmt> set_stmt(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kSet;
    if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == ".") {
      s->targets.push_back(next().text);
      ++i_;
      s->attr = expect_name("an attribute name");
    } else {
      s->targets = targets();
    }
    if (skip_op("=")) {
      s->expr = tuple_expr();
      expect_block_end("set");
      return s;
    }
    if (s->targets.size() != 1 || !s->attr.empty()) fail("a block {% set %} takes one name");
    if (is_op("|")) s->expr = filters(nullptr);
    expect_block_end("set");
    s->bodies.push_back(statements({"endset"}));
    end_tag("endset");
    return s;
  }

  std::unique_ptr<Stmt> macro_stmt(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kMacro;
    s->name = expect_name("a macro name");
    expect_op("(");
    while (!skip_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (skip_op(")")) break;
      MacroParam p;
      p.name = expect_name("a parameter name");
      if (skip_op("=")) p.default_value = expression();
      s->params.push_back(std::move(p));
    }
    expect_block_end("macro");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->bodies.push_back(statements({"endmacro"}));
    loop_depth_ = saved;
    end_tag("endmacro");
    return s;
  }

  std::unique_ptr<Stmt> filter_stmt(std::unique_ptr<Stmt> s) {
    s->kind = Stmt::Kind::kFilter;
    s->expr = filter_chain(nullptr, true);
    expect_block_end("filter");
    s->bodies.push_back(statements({"endfilter"}));
    end_tag("endfilter");
    return s;
  }

  // ---- expressions ----

  // expr [, expr ...] as a tuple when there is a comma.
  ExprPtr tuple_expr(bool condexpr = true) {
    const int line = cur().line;
    ExprPtr first = condexpr ? expression() : or_expr();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, line);
    t->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_expr_end()) break;
      t->args.push_back(condexpr ? expression() : or_expr());
    }
    return t;
  }

  bool at_expr_end() const {
    return cur().kind == Tok::kVarEnd || cur().kind == Tok::kBlockEnd || is_op(")") || is_op("]") || is_op("}") ||
           cur().kind == Tok::kEof;
  }

  ExprPtr expression() {
    const Nest nest(*this);
    ExprPtr e = or_expr();
    while (is_name("if")) {
      const int line = next().line;
      auto c = make(Expr::Kind::kCond, line);
      c->args.push_back(std::move(e));
      c->args.push_back(or_expr());
      c->args.push_back(skip_name("else") ? expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = make(Expr::Kind::kBinary, line, std::move(op));
    b->args.push_back(std::move(l));
    b->args.push_back(std::move(r));
    return b;
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = next().line;
      e = binary("or", std::move(e), and_expr(), line);
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = next().line;
      e = binary("and", std::move(e), not_expr(), line);
    }
    return e;
  }

  ExprPtr not_expr() {
    if (is_name("not")) {
      const int line = next().line;
      auto u = make(Expr::Kind::kUnary, line, "not");
      u->args.push_back(not_expr());
      return u;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      const int line = cur().line;
      std::string op;
      if (cur().kind == Tok::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = next().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && peek().kind == Tok::kName && peek().text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), math1(), line);
    }
  }

  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token t = next();
      e = binary(t.text, std::move(e), concat(), t.line);
    }
    return e;
  }

  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary("~", std::move(e), math2(), line);
    }
    return e;
  }

  ExprPtr math2() {
    ExprPtr e = pow_expr();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = next();
      e = binary(t.text, std::move(e), pow_expr(), t.line);
    }
    return e;
  }

  ExprPtr pow_expr() {
    ExprPtr e = unary(true);
    while (is_op("**")) {
      const int line = next().line;
      e = binary("**", std::move(e), unary(true), line);
    }
    return e;
  }

  ExprPtr unary(bool with_filter) {
    const Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token t = next();
      e = make(Expr::Kind::kUnary, t.line, t.text);
      e->args.push_back(unary(false));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    if (with_filter) e = filters(std::move(e));
    return e;
  }

  ExprPtr primary() {
    const Token t = cur();
    switch (t.kind) {
      case Tok::kName: {
        ++i_;
        auto lit = [&](Value v) {
          auto e = make(Expr::Kind::kLiteral, t.line);
          e->value = std::move(v);
          return e;
        };
        if (t.text == "true" || t.text == "True") return lit(Value(true));
        if (t.text == "false" || t.text == "False") return lit(Value(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        return make(Expr::Kind::kName, t.line, t.text);
      }
      case Tok::kString: {
        std::string s;
        while (cur().kind == Tok::kString) s += next().text;  // adjacent literals join
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->value = Value(std::move(s));
        return e;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        ++i_;
        auto e = make(Expr::Kind::kLiteral, t.line);
        if (t.kind == Tok::kInt) {
          errno = 0;
          const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
          if (errno == ERANGE) fail("the integer " + t.text + " is too large");
          e->value = Value(int64_t(v));
        } else {
          e->value = Value(std::strtod(t.text.c_str(), nullptr));
        }
        return e;
      }
      case Tok::kOp:
        if (t.text == "(") {
          ++i_;
          if (skip_op(")")) return make(Expr::Kind::kTuple, t.line);
          ExprPtr e = tuple_expr();
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ++i_;
          auto e = make(Expr::Kind::kList, t.line);
          while (!skip_op("]")) {
            if (!e->args.empty()) expect_op(",");
            if (skip_op("]")) break;
            e->args.push_back(expression());
          }
          return e;
        }
        if (t.text == "{") {
          ++i_;
          auto e = make(Expr::Kind::kDict, t.line);
          while (!skip_op("}")) {
            if (!e->args.empty()) expect_op(",");
            if (skip_op("}")) break;
            e->args.push_back(expression());
            expect_op(":");
            e->args.push_back(expression());
          }
          return e;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe() + " in an expression");
  }

  void call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!skip_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (skip_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs calls are not supported");
      if (cur().kind == Tok::kName && peek().kind == Tok::kOp && peek().text == "=") {
        std::string k = next().text;
        ++i_;
        e.kw.emplace_back(std::move(k), expression());
      } else {
        if (!e.kw.empty()) fail("a positional argument after a keyword argument");
        e.args.push_back(expression());
      }
    }
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = cur().line;
      if (skip_op(".")) {
        if (cur().kind != Tok::kName && cur().kind != Tok::kInt) fail("expected an attribute name after '.'");
        const Token t = next();
        if (t.kind == Tok::kInt) {
          auto it = make(Expr::Kind::kItem, line);
          it->args.push_back(std::move(e));
          auto idx = make(Expr::Kind::kLiteral, line);
          errno = 0;
          const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
          if (errno == ERANGE) fail("the integer " + t.text + " is too large");
          idx->value = Value(int64_t(v));
          it->args.push_back(std::move(idx));
          e = std::move(it);
        } else {
          auto a = make(Expr::Kind::kAttr, line, t.text);
          a->args.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (is_op("[")) {
        ++i_;
        e = subscript(std::move(e), line);
      } else if (is_op("(")) {
        auto c = make(Expr::Kind::kCall, line);
        c->args.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    bool slice = false;
    for (int k = 0; k < 3; ++k) {
      if (!is_op(":") && !is_op("]")) parts[k] = expression();
      if (k < 2 && skip_op(":")) {
        slice = true;
        continue;
      }
      break;
    }
    expect_op("]");
    if (!slice) {
      if (!parts[0]) fail("expected an index or a slice inside []");
      auto it = make(Expr::Kind::kItem, line);
      it->args.push_back(std::move(obj));
      it->args.push_back(std::move(parts[0]));
      return it;
    }
    auto s = make(Expr::Kind::kSlice, line);
    s->args.push_back(std::move(obj));
    for (auto& p : parts) s->args.push_back(std::move(p));
    return s;
  }

  // | name(args) ... and is [not] test ... after a value.
  ExprPtr filters(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        e = filter_chain(std::move(e), false);
      } else if (is_name("is")) {
        e = test(std::move(e));
      } else {
        return e;
      }
    }
  }

  // One filter (or, in a filter block, a chain of them) applied to e.
  ExprPtr filter_chain(ExprPtr e, bool block) {
    bool first = block;
    while (first || skip_op("|")) {
      first = false;
      const int line = cur().line;
      std::string name = expect_name("a filter name");
      while (skip_op(".")) name += "." + expect_name("a filter name");
      auto f = make(Expr::Kind::kFilter, line, name);
      f->args.push_back(std::move(e));
      if (is_op("(")) call_args(*f);
      e = std::move(f);
      if (!block) return e;
    }
    return e;
  }

  ExprPtr test(ExprPtr e) {
    const int line = next().line;  // is
    const bool negated = skip_name("not");
    std::string name = expect_name("a test name");
    while (skip_op(".")) name += "." + expect_name("a test name");
    auto t = make(Expr::Kind::kTest, line, name);
    t->negated = negated;
    t->args.push_back(std::move(e));
    if (is_op("(")) {
      call_args(*t);
    } else if ((cur().kind == Tok::kName || cur().kind == Tok::kString || cur().kind == Tok::kInt ||
                cur().kind == Tok::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("tests cannot be chained with 'is'");
      t->args.push_back(postfix(primary()));
    }
    return t;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::string_view source) { return Parser(lex(source)).run(); }

}  // namespace cs::jinja
