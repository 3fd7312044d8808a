// Renders chat templates for check_templates.py and prefix_reuse.py: reads
//   {"templates": {name: source}, "cases": [{"template": name, "vars": {...}}], "now": epoch,
//    "tokenizer": optional GGUF path}
// on stdin and writes one JSON result per case, in order:
//   {"ok": true, "text": ..., "ids": [...] with a tokenizer} or {"ok": false, "error": ..., "kind": ...}.
// With "repeat": N, each render runs N times and its result has "us", the
// mean microseconds of one render (compiled once, as the server does).
// The ids tokenize the markup's special tokens and the content as text.
#include <chrono>
#include <iostream>
#include <iterator>
#include <map>

#include "jinja/template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

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
  std::optional<cs::Tokenizer> tok;
  if (req.contains("tokenizer")) tok.emplace(cs::Tokenizer::from_gguf(cs::GgufFile(req["tokenizer"].get<std::string>())));
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
      const int repeat = req.value("repeat", 1);
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 1; k < repeat; ++k) (void)compiled[name]->render(vars.dict(), opts);
      const Str s = compiled[name]->render(vars.dict(), opts);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / repeat;
      ordered_json r = {{"ok", true}, {"text", s.text()}};
      if (repeat > 1) r["us"] = us;
      if (tok) {
        std::vector<cs::TextPart> parts;
        for (const auto& [text, content] : s.pieces()) parts.push_back({text, !content});
        r["ids"] = tok->encode(parts, false);
      }
      out.push_back(std::move(r));
    } catch (const TemplateError& e) {
      out.push_back({{"ok", false}, {"error", e.what()}, {"kind", int(e.template_kind())}});
    }
  }
  std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
}
