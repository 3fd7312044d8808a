// What the request-body fuzz targets check against: the default model's
// tokenizer and chat template, one model "m", a 512-token context, up to 4
// completions; the input's first byte picks the template's tool-call format
// (bits 1-2) and whether it takes tools (bit 3).
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
  return lim;
}

}  // namespace cs::fuzz
