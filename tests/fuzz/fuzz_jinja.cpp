// libFuzzer: Jinja chat templates. The input is a template's source; it is
// compiled and, when it compiles, rendered over a conversation with tools and
// a tool call, under small limits. Anything malformed or runaway must end in
// a TemplateError (a syntax error naming the line, a type error, a limit),
// never a crash, a hang or a leak.
#include <cstdint>
#include <string>

#include "jinja/template.h"

namespace {

const cs::jinja::Dict& vars() {
  static const cs::jinja::Value v = cs::jinja::Value::from_json(nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi <|im_start|>"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call12345", "type": "function", "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"ok\": 1}"},
      {"role": "user", "content": "  and now?  "}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})"), true);
  return v.dict();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string src(reinterpret_cast<const char*>(data), size);
  cs::jinja::RenderOptions opts;
  opts.now = 0;
  opts.max_steps = 200000;
  opts.max_output = 1 << 20;
  opts.max_depth = 32;
  try {
    const cs::jinja::Template t(src);
    (void)t.render(vars(), opts);
  } catch (const cs::jinja::TemplateError&) {
  }
  return 0;
}
