// libFuzzer: an HTTP request body through the Messages API's parser (its
// mapping to the chat machinery, the token count) and the answer built from
// the body read as a model's reply, whole and streamed in pieces. The first
// byte picks the template's tool-call format and whether it takes tools.
// Anything may be refused (ApiError); nothing may crash, hang or leak, and
// what is accepted is well-formed for the engine.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/validate.h"
#include "fuzz_api.h"
#include "server/messages_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const cs::ApiLimits lim = cs::fuzz::api_limits(data[0]);
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (cs::count_messages_tokens(body, lim) <= 0) std::abort();
  } catch (const cs::ApiError&) {
  }
  try {
    const cs::MessagesRequest r = cs::parse_messages_request(body, lim);
    if (r.chat.engine.prompt.empty() || int(r.chat.engine.prompt.size()) >= lim.n_ctx) std::abort();
    if (r.chat.engine.n != 1 || r.chat.engine.max_tokens < 0 || r.breakpoints.size() > 4) std::abort();
    for (const cs::Breakpoint& b : r.breakpoints)
      if (b.tokens <= 0 || b.tokens > int(r.chat.engine.prompt.size())) std::abort();
    cs::validate_request(r.chat.engine, {lim.tokenizer->vocab_size(), lim.n_ctx, 64, 16, 0, 1 << 24, lim.max_n});
    // The body as the reply: whole, and streamed in pieces of 1-7 bytes.
    cs::Result res;
    res.completions.resize(1);
    res.completions[0].text = body;
    cs::MessagesResponder whole(r, "msg_x");
    if (!nlohmann::json::accept(whole.response(res))) std::abort();
    cs::MessagesResponder streamed(r, "msg_x");
    std::string out = streamed.start(int(r.chat.engine.prompt.size()));
    for (size_t i = 0, k = 1; i < body.size(); i += k, k = k % 7 + 1) {
      cs::StreamEvent ev;
      ev.text = body.substr(i, k);
      out += streamed.event(ev);
    }
    out += streamed.finish(res);
    if (out.find("event: message_stop\n") == std::string::npos) std::abort();
  } catch (const cs::ApiError&) {
  } catch (const cs::RequestError&) {
  }
  return 0;
}
