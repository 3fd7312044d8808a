// libFuzzer: an HTTP request body through the Responses API's parser (its
// items mapped to the chat machinery, a previous_response_id looked up in a
// store holding one response) and the response built from the body read
// as a model's reply, whole and streamed in pieces. The first byte picks
// the template's tool-call format and whether it takes tools. Anything may
// be refused (ApiError); nothing may crash, hang or leak, and what is
// accepted is well-formed for the engine.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/validate.h"
#include "fuzz_api.h"
#include "server/responses_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static cs::ResponseStore store(4, 1 << 20);
  static const bool filled = [] {
    auto r = std::make_shared<cs::StoredResponse>();
    r->object = "{}";
    r->conversation = nlohmann::ordered_json::parse(
        R"([{"type": "message", "role": "user", "content": "Weather?"},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Oslo\"}"}])");
    return store.put("resp_1", r);
  }();
  if (!filled) std::abort();
  if (size == 0) return 0;
  const cs::ApiLimits lim = cs::fuzz::api_limits(data[0]);
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    const cs::ResponsesRequest r = cs::parse_responses_request(body, lim, store);
    if (r.chat.engine.prompt.empty() || int(r.chat.engine.prompt.size()) >= lim.n_ctx) std::abort();
    if (r.chat.engine.n != 1 || r.chat.engine.max_tokens < 0 || !r.conversation.is_array()) std::abort();
    cs::validate_request(r.chat.engine, {lim.tokenizer->vocab_size(), lim.n_ctx, 64, 16, 0, 1 << 24, lim.max_n});
    cs::Result res;
    res.completions.resize(1);
    res.completions[0].text = body;
    cs::ResponsesResponder whole(r, "resp_x", 0);
    if (!nlohmann::json::accept(whole.object(&res)) || !whole.conversation(res).is_array()) std::abort();
    cs::StoredResponse kept;
    kept.object = whole.object(&res);
    kept.conversation = whole.conversation(res);
    if (kept.bytes() < kept.object.size()) std::abort();
    cs::ResponsesResponder streamed(r, "resp_x", 0);
    std::string out = streamed.start();
    for (size_t i = 0, k = 1; i < body.size(); i += k, k = k % 7 + 1) {
      cs::StreamEvent ev;
      ev.text = body.substr(i, k);
      out += streamed.event(ev);
    }
    out += streamed.finish(res);
    if (out.find("event: response.completed\n") == std::string::npos &&
        out.find("event: response.incomplete\n") == std::string::npos)
      std::abort();
  } catch (const cs::ApiError&) {
  } catch (const cs::RequestError&) {
  }
  return 0;
}
