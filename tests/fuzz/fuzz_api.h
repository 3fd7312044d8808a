// What the request-body fuzz targets check against: the default model's
// tokenizer and chat template, one model "m", a 512-token context, up to 4
// completions; the input's first byte picks the template's tool-call format
// (bits 1-2), whether it takes tools (bit 3), and whether requests that offer
// tools render with a template of their own (bit 4: one that adds each
// tool's description to a string and walks its parameters, as Hermes 3's
// tool_use template does, so a tool without them takes the second render).
#pragma once
#include <cstdint>

#include "fuzz_model.h"
#include "server/api_request.h"

namespace cs::fuzz {

inline ApiLimits api_limits(uint8_t first) {
  static const Tokenizer& tok = tokenizer();
  static const ChatTemplate chat = ChatTemplate::for_model(tok);
  ApiLimits lim;
  lim.tokenizer = &tok;
  lim.chat = &chat;
  lim.model_id = "m";
  lim.n_ctx = 512;
  lim.max_n = 4;
  lim.tools.format = static_cast<ToolFormat>((first >> 1) % 3);
  lim.tools.template_takes_tools = (first >> 3) & 1;
  static const ChatTemplate for_tools(
      "{# calls: <tool_call>{...}</tool_call> #}"
      "{%- for t in tools %}{{ t.function.name + ': ' + t.function.description + '\\n' }}"
      "{%- for k, v in t.function.parameters.properties|items %}{{ k }} {% endfor %}{% endfor %}"
      "{%- for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}",
      "", "");
  if ((first >> 4) & 1) add_tool_template(lim, for_tools);
  return lim;
}

}  // namespace cs::fuzz
