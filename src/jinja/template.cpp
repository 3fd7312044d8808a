#include "jinja/template.h"

#include <climits>
#include <stdexcept>
#include <variant>
#include <cmath>

#include "jinja/builtins.h"
#include "jinja/parser.h"

namespace cs::jinja {

namespace {

// Variables of one frame: the template's top level, a loop iteration or a
// macro call. A name not set here is looked up in the parent (jinja2's
// scoping: a {% set %} inside a loop does not outlive the iteration).
struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  const Scope* parent = nullptr;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent)
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it)
        if (it->first == name) return &it->second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

[[noreturn]] void fail(TemplateErrorKind kind, int line, const std::string& what) {
  throw TemplateError(kind, line, what);
}

class Renderer {
 public:
  Renderer(const Dict& vars, const RenderOptions& opts) : opts_(opts) {
    add_globals();
    root_.parent = &globals_;
    for (const auto& [k, v] : vars.items) root_.set(k, v);
    env_.filter = [this](const std::string& n, const Value& v, Args& a) { return filter(n, v, a, 0); };
    env_.test = [this](const std::string& n, const Value& v, Args& a) { return test(n, v, a, 0); };
  }

  Str run(const Body& body) {
    out_.emplace_back();
    exec(body, root_);
    return std::move(out_.back());
  }
  uint64_t steps() const { return steps_; }

 private:
  // ---- statements ----

  Flow exec(const Body& body, Scope& s) {
    for (const auto& st : body)
      if (const Flow f = exec(*st, s); f != Flow::kNormal) return f;
    return Flow::kNormal;
  }

  Flow exec(const Stmt& st, Scope& s) {
    step(st.line);
    switch (st.kind) {
      case Stmt::Kind::kText: emit(Str(st.text)); return Flow::kNormal;
      case Stmt::Kind::kPrint: emit(eval(*st.expr, s).to_str()); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < st.conds.size(); ++i)
          if (eval(*st.conds[i], s).truthy()) return exec(st.bodies[i], s);
        return st.bodies.size() > st.conds.size() ? exec(st.bodies.back(), s) : Flow::kNormal;
      case Stmt::Kind::kFor: return for_loop(st, s);
      case Stmt::Kind::kSet: set(st, s); return Flow::kNormal;
      case Stmt::Kind::kMacro: s.set(st.name, macro(st)); return Flow::kNormal;
      case Stmt::Kind::kFilter: emit(filter_chain(*st.expr, Value(capture(st.bodies[0], s)), s).to_str()); return Flow::kNormal;
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kBlock: return exec(st.bodies[0], s);
    }
    return Flow::kNormal;
  }

  Str capture(const Body& body, Scope& s) {
    out_.emplace_back();
    exec(body, s);
    Str r = std::move(out_.back());
    out_.pop_back();
    return r;
  }

  void bind(Scope& s, const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      s.set(targets[0], v);
      return;
    }
    if (!v.is_list() || v.list().size() != targets.size())
      fail(TemplateErrorKind::kType, line,
           "cannot unpack " + v.type_name() + " into " + std::to_string(targets.size()) + " names");
    for (size_t i = 0; i < targets.size(); ++i) s.set(targets[i], v.list()[i]);
  }

  Flow for_loop(const Stmt& st, Scope& s) {
    const Value seq = eval(*st.expr, s);
    List items;
    try {
      items = iterate(seq);
    } catch (const TemplateError& e) {
      fail(e.template_kind(), st.line, e.message());
    }
    if (st.cond) {
      List kept;
      for (const Value& v : items) {
        Scope probe{{}, &s};
        bind(probe, st.targets, v, st.line);
        if (eval(*st.cond, probe).truthy()) kept.push_back(v);
      }
      items = std::move(kept);
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(st.line);
      Scope it{{}, &s};
      bind(it, st.targets, items[size_t(i)], st.line);
      it.set("loop", loop_object(items, i));
      const Flow f = exec(st.bodies[0], it);
      if (f == Flow::kBreak) break;
    }
    if (n == 0 && st.bodies.size() > 1) return exec(st.bodies[1], s);
    return Flow::kNormal;
  }

  Value loop_object(const List& items, int64_t i) {
    const int64_t n = int64_t(items.size());
    auto d = std::make_shared<Dict>();
    d->set("index0", Value(i));
    d->set("index", Value(i + 1));
    d->set("revindex0", Value(n - i - 1));
    d->set("revindex", Value(n - i));
    d->set("first", Value(i == 0));
    d->set("last", Value(i == n - 1));
    d->set("length", Value(n));
    d->set("depth", Value(int64_t(1)));
    d->set("depth0", Value(int64_t(0)));
    d->set("previtem", i > 0 ? items[size_t(i - 1)] : Value());
    d->set("nextitem", i + 1 < n ? items[size_t(i + 1)] : Value());
    d->set("cycle", Value(Callable{"cycle", [i](Args& a) {
                                     if (a.pos.empty()) type_error("no items for cycling given");
                                     return a.pos[size_t(i) % a.pos.size()];
                                   }}));
    d->is_namespace = true;  // attributes are its entries; no dict methods
    return Value(d);
  }

  void set(const Stmt& st, Scope& s) {
    Value v = st.bodies.empty() ? eval(*st.expr, s) : Value(capture(st.bodies[0], s));
    if (!st.bodies.empty() && st.expr) v = filter_chain(*st.expr, v, s);
    if (!st.attr.empty()) {
      const Value* ns = s.find(st.targets[0]);
      if (!ns || !ns->is_dict() || !ns->dict().is_namespace)
        fail(TemplateErrorKind::kType, st.line, "cannot assign attribute on non-namespace object '" + st.targets[0] + "'");
      ns->dict().set(st.attr, std::move(v));
      return;
    }
    bind(s, st.targets, v, st.line);
  }

  Value macro(const Stmt& st) {
    const Stmt* m = &st;
    return Value(Callable{st.name, [this, m](Args& a) { return call_macro(*m, a); }});
  }

  Value call_macro(const Stmt& m, Args& a) {
    if (a.pos.size() > m.params.size())
      type_error("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) + " argument(s)");
    if (++depth_ > opts_.max_depth) fail(TemplateErrorKind::kLimit, m.line, "macro calls nest deeper than " + std::to_string(opts_.max_depth));
    Scope local{{}, &root_};
    for (const auto& [k, v] : a.kw) {
      bool known = false;
      for (const MacroParam& p : m.params) known = known || p.name == k;
      if (!known) type_error("macro '" + m.name + "' takes no keyword argument '" + k + "'");
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      Value v = a.get(i, m.params[i].name);
      if (v.is_undefined() && m.params[i].default_value) v = eval(*m.params[i].default_value, local);
      local.set(m.params[i].name, v);
    }
    Str r = capture(m.bodies[0], local);
    --depth_;
    return Value(std::move(r));
  }

  // ---- expressions ----

  Value eval(const Expr& x, const Scope& s) {
    step(x.line);
    try {
      return eval_node(x, s);
    } catch (const TemplateError& e) {
      if (e.line() != 0) throw;
      throw TemplateError(e.template_kind(), x.line, e.message());
    } catch (const Error& e) {
      throw TemplateError(TemplateErrorKind::kType, x.line, e.what());
    } catch (const std::bad_variant_access&) {
      // A value of another type where an int, string, ... was needed
      // (a slice bound that is a string, say).
      throw TemplateError(TemplateErrorKind::kType, x.line, "a value of the wrong type");
    } catch (const std::logic_error& e) {  // std::stoll and friends out of range
      throw TemplateError(TemplateErrorKind::kType, x.line, e.what());
    }
  }

  // "'message.tool_calls' is undefined": the expression as written, where it
  // is a name, attribute or constant subscript.
  static std::string describe(const Expr& x) {
    std::string r(1, '\'');
    r += path(x);
    return r += "' is undefined";
  }
  static std::string path(const Expr& x) {
    switch (x.kind) {
      case Expr::Kind::kName: return x.name;
      case Expr::Kind::kAttr: return path(*x.args[0]) + "." + x.name;
      case Expr::Kind::kItem:
        if (x.args[1]->kind == Expr::Kind::kLiteral) return path(*x.args[0]) + "[" + x.args[1]->value.repr() + "]";
        return path(*x.args[0]) + "[...]";
      case Expr::Kind::kCall: return path(*x.args[0]) + "(...)";
      default: return "a value";
    }
  }

  Value eval_node(const Expr& x, const Scope& s) {
    switch (x.kind) {
      case Expr::Kind::kLiteral: return x.value;
      case Expr::Kind::kName: {
        const Value* v = s.find(x.name);
        return v ? *v : Value();
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        List l;
        for (const auto& a : x.args) l.push_back(eval(*a, s));
        return Value(std::move(l));
      }
      case Expr::Kind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < x.args.size(); i += 2) {
          const Value k = eval(*x.args[i], s);
          if (k.kind() == Value::Kind::kInt) d->int_keys.push_back(std::to_string(k.as_int()));
          else if (!k.is_string()) type_error("dict keys must be strings or integers here, not " + k.type_name());
          d->set(k.is_string() ? k.text() : std::to_string(k.as_int()), eval(*x.args[i + 1], s));
        }
        return Value(d);
      }
      case Expr::Kind::kAttr: {
        const Value obj = eval(*x.args[0], s);
        if (obj.is_undefined()) fail(TemplateErrorKind::kUndefined, x.line, describe(*x.args[0]));
        return get_attr(obj, x.name);
      }
      case Expr::Kind::kItem: {
        const Value obj = eval(*x.args[0], s);
        if (obj.is_undefined()) fail(TemplateErrorKind::kUndefined, x.line, describe(*x.args[0]));
        return get_item(obj, eval(*x.args[1], s));
      }
      case Expr::Kind::kSlice: return slice(x, s);
      case Expr::Kind::kCall: return call(x, s);
      case Expr::Kind::kFilter: return filter(x.name, eval(*x.args[0], s), args(x, s), x.line);
      case Expr::Kind::kTest: {
        const Value v = eval(*x.args[0], s);
        Args a = args(x, s);
        return Value(test(x.name, v, a, x.line) != x.negated);
      }
      case Expr::Kind::kUnary: {
        const Value v = eval(*x.args[0], s);
        if (x.name == "not") return Value(!v.truthy());
        if (v.kind() == Value::Kind::kInt) return x.name == "-" ? Value(int_sub(0, v.as_int())) : v;
        if (!v.is_number()) type_error("bad operand type for unary " + x.name + ": '" + v.type_name() + "'");
        return x.name == "-" ? Value(-v.as_number()) : v;
      }
      case Expr::Kind::kBinary: return binary(x, s);
      case Expr::Kind::kCond:
        if (eval(*x.args[1], s).truthy()) return eval(*x.args[0], s);
        return x.args[2] ? eval(*x.args[2], s) : Value();
    }
    return Value();
  }

  Args args(const Expr& x, const Scope& s) {
    Args a;
    for (size_t i = 1; i < x.args.size(); ++i) a.pos.push_back(eval(*x.args[i], s));
    for (const auto& [k, e] : x.kw) a.kw.emplace_back(k, eval(*e, s));
    return a;
  }

  Value call(const Expr& x, const Scope& s) {
    const Value f = eval(*x.args[0], s);
    if (f.is_undefined()) fail(TemplateErrorKind::kUndefined, x.line, describe(*x.args[0]));
    if (f.kind() != Value::Kind::kCallable) type_error("'" + f.type_name() + "' object is not callable");
    Args a = args(x, s);
    return f.callable().fn(a);
  }

  Value filter(const std::string& name, const Value& v, Args a, int line) {
    if (auto r = apply_filter(env_, name, v, a)) return *r;
    fail(TemplateErrorKind::kType, line, "no filter named '" + name + "'");
  }

  bool test(const std::string& name, const Value& v, Args& a, int line) {
    if (auto r = apply_test(name, v, a)) return *r;
    fail(TemplateErrorKind::kType, line, "no test named '" + name + "'");
  }

  // A {% filter %} or {% set x | f %} chain: its innermost value is `input`.
  Value filter_chain(const Expr& x, const Value& input, const Scope& s) {
    const Value v = x.args[0] ? filter_chain(*x.args[0], input, s) : input;
    return filter(x.name, v, args(x, s), x.line);
  }

  Value slice(const Expr& x, const Scope& s) {
    const Value obj = eval(*x.args[0], s);
    if (obj.is_undefined()) fail(TemplateErrorKind::kUndefined, x.line, describe(*x.args[0]));
    auto bound = [&](size_t i) {
      Value v = x.args[i] ? eval(*x.args[i], s) : Value::none();
      if (!v.is_none() && v.kind() != Value::Kind::kInt)
        type_error("slice indices must be integers or None, not " + v.type_name());
      return v;
    };
    const Value b = bound(1), e = bound(2), st = bound(3);
    const int64_t step = st.is_none() ? 1 : st.as_int();
    if (step == 0) type_error("slice step cannot be zero");
    List items;
    if (obj.is_list()) items = obj.list();
    else if (obj.is_string()) items = iterate(obj);
    else type_error("'" + obj.type_name() + "' object is not subscriptable");
    const int64_t n = int64_t(items.size());
    auto norm = [&](const Value& v, int64_t def) {
      if (v.is_none()) return def;
      int64_t i = v.as_int();
      if (i < 0) i += n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t lo = norm(b, step > 0 ? 0 : n - 1), hi = norm(e, step > 0 ? n : -1);
    List out;
    for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) out.push_back(items[size_t(i)]);
    if (!obj.is_string()) return Value(std::move(out));
    Str r;
    for (const Value& c : out) r.append(c.as_str());
    return Value(r);
  }

  Value binary(const Expr& x, const Scope& s) {
    const std::string& op = x.name;
    if (op == "and" || op == "or") {
      Value a = eval(*x.args[0], s);
      if (a.truthy() == (op == "or")) return a;
      return eval(*x.args[1], s);
    }
    const Value a = eval(*x.args[0], s), b = eval(*x.args[1], s);
    if (op == "==") return Value(a == b);
    if (op == "!=") return Value(!(a == b));
    if (op == "<") return Value(compare(a, b) < 0);
    if (op == ">") return Value(compare(a, b) > 0);
    if (op == "<=") return Value(compare(a, b) <= 0);
    if (op == ">=") return Value(compare(a, b) >= 0);
    if (op == "in") return Value(value_in(a, b));
    if (op == "not in") return Value(!value_in(a, b));
    if (op == "~") {
      Str r = a.to_str();
      r.append(b.to_str());
      limit(r.text().size(), x.line);
      return Value(r);
    }
    if ((a.is_undefined() || b.is_undefined()))
      fail(TemplateErrorKind::kUndefined, x.line, describe(a.is_undefined() ? *x.args[0] : *x.args[1]));
    return arithmetic(op, a, b, x.line);
  }

  Value arithmetic(const std::string& op, const Value& a, const Value& b, int line) {
    const bool an = a.is_number() || a.kind() == Value::Kind::kBool;
    const bool bn = b.is_number() || b.kind() == Value::Kind::kBool;
    if (op == "+") {
      if ((a.is_string() && a.as_str().safe()) || (b.is_string() && b.as_str().safe())) return markup_add(a, b, line);
      if (a.is_string() && b.is_string()) {
        Str r = a.as_str();
        r.append(b.as_str());
        limit(r.text().size(), line);
        return Value(r);
      }
      if (a.is_list() && b.is_list()) {
        List l = a.list();
        l.insert(l.end(), b.list().begin(), b.list().end());
        return Value(std::move(l));
      }
    }
    if (op == "*" && (a.is_string() || a.is_list() || b.is_string() || b.is_list())) return repeat(a, b, line);
    if (op == "%" && a.is_string()) {
      Args fa;
      if (b.is_list()) fa.pos = b.list();
      else fa.pos.push_back(b);
      return filter("format", a, fa, line);
    }
    if (!an || !bn)
      type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    const bool ints = a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat;
    const double x = a.as_number(), y = b.as_number();
    if (ints) {
      // Bools count as 0 and 1.
      const int64_t ii = a.kind() == Value::Kind::kInt ? a.as_int() : int64_t(a.as_bool());
      const int64_t jj = b.kind() == Value::Kind::kInt ? b.as_int() : int64_t(b.as_bool());
      if (op == "+") return Value(int_add(ii, jj));
      if (op == "-") return Value(int_sub(ii, jj));
      if (op == "*") return Value(int_mul(ii, jj));
      if (op == "//" || op == "%") {
        if (jj == 0) type_error("integer division or modulo by zero");
        if (ii == INT64_MIN && jj == -1) type_error("integer overflow");
        int64_t q = ii / jj, m = ii % jj;
        if (m != 0 && ((m < 0) != (jj < 0))) --q, m += jj;
        return Value(op == "//" ? q : m);
      }
      if (op == "**" && jj >= 0) {
        int64_t p = 1;
        for (int64_t k = 0; k < jj; ++k)
          p = int_mul(p, ii);
        return Value(p);
      }
    }
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
    if (op == "/") {
      if (y == 0) type_error("division by zero");
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) type_error("float division by zero");
      const double q = std::floor(x / y);
      return op == "//" ? Value(q) : Value(x - q * y);
    }
    if (op == "**") return Value(std::pow(x, y));
    type_error("unsupported operator " + op);
  }

  // jinja2's Markup + str (or str + Markup): the plain side is HTML-escaped.
  Value markup_add(const Value& a, const Value& b, int line) {
    auto side = [&](const Value& v) {
      if (v.is_string() && v.as_str().safe()) return v.as_str();
      if (!v.is_string()) type_error("unsupported operand type(s) for +: 'Markup' and '" + v.type_name() + "'");
      return filter("escape", v, Args{}, line).as_str();
    };
    Str r = side(a);
    r.append(side(b));
    limit(r.text().size(), line);
    return Value(r.mark_safe());
  }

  Value repeat(const Value& a, const Value& b, int line) {
    const Value& seq = a.is_string() || a.is_list() ? a : b;
    const Value& n = &seq == &a ? b : a;
    if (n.kind() != Value::Kind::kInt && n.kind() != Value::Kind::kBool)
      type_error("can't multiply sequence by non-int of type '" + n.type_name() + "'");
    const int64_t k = std::max<int64_t>(0, n.kind() == Value::Kind::kInt ? n.as_int() : n.as_bool());
    const size_t unit = seq.is_string() ? seq.text().size() : seq.list().size();
    if (unit && uint64_t(k) > opts_.max_output / unit) fail(TemplateErrorKind::kLimit, line, "a repeated sequence is too long");
    if (seq.is_string()) {
      Str r;
      for (int64_t i = 0; i < k; ++i) r.append(seq.as_str());
      return Value(r);
    }
    List l;
    for (int64_t i = 0; i < k; ++i) l.insert(l.end(), seq.list().begin(), seq.list().end());
    return Value(std::move(l));
  }

  // ---- globals ----

  void add_globals() {
    globals_.set("range", Value(Callable{"range", [this](Args& a) { return range(a); }}));
    globals_.set("namespace", Value(Callable{"namespace", [](Args& a) {
                                             auto d = std::make_shared<Dict>();
                                             d->is_namespace = true;
                                             for (const Value& p : a.pos)
                                               if (p.is_dict())
                                                 for (const auto& [k, v] : p.dict().items) d->set(k, v);
                                             for (const auto& [k, v] : a.kw) d->set(k, v);
                                             return Value(d);
                                           }}));
    globals_.set("dict", Value(Callable{"dict", [](Args& a) {
                                        auto d = std::make_shared<Dict>();
                                        for (const auto& [k, v] : a.kw) d->set(k, v);
                                        return Value(d);
                                      }}));
    globals_.set("raise_exception", Value(Callable{"raise_exception", [](Args& a) -> Value {
                                                   throw TemplateError(TemplateErrorKind::kRaised, 0,
                                                                       (a.get(0, "message")).to_str().text());
                                                 }}));
    globals_.set("strftime_now", Value(Callable{"strftime_now", [this](Args& a) { return strftime_now(a); }}));
  }

  Value range(Args& a) {
    for (const Value& v : a.pos)
      if (v.kind() != Value::Kind::kInt) type_error("range() takes integers, not " + v.type_name());
    int64_t start = 0, stop = 0, step = 1;
    if (a.pos.size() == 1) stop = a.pos[0].as_int();
    else if (a.pos.size() >= 2) start = a.pos[0].as_int(), stop = a.pos[1].as_int();
    if (a.pos.size() >= 3) step = a.pos[2].as_int();
    if (step == 0) type_error("range() arg 3 must not be zero");
    List l;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (l.size() >= (1u << 20)) throw TemplateError(TemplateErrorKind::kLimit, 0, "range() is too long");
      l.push_back(Value(i));
    }
    return Value(std::move(l));
  }

  Value strftime_now(Args& a) {
    const std::string fmt = (a.get(0, "format")).to_str().text();
    const std::time_t t = opts_.now ? *opts_.now : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string buf(256 + fmt.size() * 8, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
    buf.resize(n);
    return Value(buf);
  }

  // ---- bookkeeping ----

  void step(int line) {
    if (++steps_ > opts_.max_steps)
      fail(TemplateErrorKind::kLimit, line, "the template ran more than " + std::to_string(opts_.max_steps) + " steps");
    if (opts_.deadline && (steps_ & 4095) == 0 && std::chrono::steady_clock::now() > *opts_.deadline)
      fail(TemplateErrorKind::kLimit, line,
           "the template ran past its time (" + std::to_string(steps_) + " steps so far)");
  }

  void limit(size_t bytes, int line) {
    if (bytes > opts_.max_output)
      fail(TemplateErrorKind::kLimit, line, "the output is longer than " + std::to_string(opts_.max_output) + " bytes");
  }

  void emit(const Str& s) {
    emitted_ += s.text().size();
    limit(emitted_, 0);
    out_.back().append(s);
  }

  const RenderOptions& opts_;
  Scope globals_, root_;
  Env env_;
  std::vector<Str> out_;
  uint64_t steps_ = 0;
  size_t emitted_ = 0;
  int depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : body_(std::make_shared<const Body>(parse(source))) {}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

Str Template::render(const Dict& vars, const RenderOptions& opts) const {
  Renderer r(vars, opts);
  struct Count {  // reports the steps whether the render returns or throws
    const Renderer& r;
    uint64_t* out;
    ~Count() {
      if (out) *out = r.steps();
    }
  } count{r, opts.steps_used};
  return r.run(*body_);
}

}  // namespace cs::jinja
