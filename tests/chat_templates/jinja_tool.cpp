// Renders chat templates for check_templates.py: reads
//   {"templates": {name: source}, "cases": [{"template": name, "vars": {...}}], "now": epoch}
// on stdin and writes one JSON result per case, in order:
//   {"ok": true, "text": ...} or {"ok": false, "error": ..., "kind": ...}.
#include <iostream>
#include <iterator>
#include <map>

#include "jinja/template.h"

using nlohmann::ordered_json;
using namespace cs::jinja;

int main() {
  const std::string in{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  const ordered_json req = ordered_json::parse(in);
  std::map<std::string, std::optional<Template>> compiled;
  std::map<std::string, std::string> compile_error;
  for (const auto& [name, src] : req.at("templates").items()) {
    try {
      compiled[name].emplace(src.get<std::string>());
    } catch (const TemplateError& e) {
      compile_error[name] = e.what();
    }
  }
  RenderOptions opts;
  opts.now = req.value("now", int64_t(0));
  ordered_json out = ordered_json::array();
  for (const auto& c : req.at("cases")) {
    const std::string name = c.at("template").get<std::string>();
    if (compile_error.count(name)) {
      out.push_back({{"ok", false}, {"error", compile_error[name]}, {"kind", "syntax"}});
      continue;
    }
    const Value vars = Value::from_json(c.at("vars"), true);
    try {
      const Str s = compiled[name]->render(vars.dict(), opts);
      out.push_back({{"ok", true}, {"text", s.text()}});
    } catch (const TemplateError& e) {
      out.push_back({{"ok", false}, {"error", e.what()}, {"kind", int(e.template_kind())}});
    }
  }
  std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
}
