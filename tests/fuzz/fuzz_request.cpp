// libFuzzer: an HTTP request body through the OpenAI request parser and the
// engine's request checks (the path every /v1 request takes before it
// reaches the engine; a "pml" prompt's XML through the PML parser). The
// first byte picks the route and the template's tool-call format; the body
// is also read as a model's reply, parsed for tool calls and split into a
// thought and an answer (whole and streamed alike; fuzz_calls.cpp reads
// replies for calls as streams do). Anything may be
// refused (ApiError, RequestError); nothing may crash, hang or leak.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/validate.h"
#include "fuzz_api.h"
#include "pml/pml.h"
#include "server/api_request.h"
#include "server/reasoning.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const cs::ApiLimits lim = cs::fuzz::api_limits(data[0]);
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Parsed calls have arguments that are a JSON object.
  for (const cs::ToolCall& c : cs::parse_tool_calls(body, lim.tools.format).calls)
    if (!nlohmann::json::parse(c.arguments, nullptr, false).is_object()) std::abort();
  // Read as a thinking model's reply: streamed in pieces, split as whole.
  {
    const bool in_thought = (data[0] >> 4) & 1;
    cs::ReasoningStream rs(in_thought);
    std::string thought, answer;
    for (size_t i = 0, k = 1; i < body.size(); i += k, k = k % 5 + 1) {
      const cs::SplitReply p = rs.push(std::string_view(body).substr(i, k));
      thought += p.reasoning, answer += p.content;
    }
    const cs::SplitReply p = rs.flush(), whole = cs::split_reasoning(body, in_thought);
    if (thought + p.reasoning != whole.reasoning || answer + p.content != whole.content) std::abort();
  }
  try {
    const cs::ApiRequest r = data[0] & 1 ? cs::parse_chat_request(body, lim) : cs::parse_completion_request(body, lim);
    if (!r.pml.empty()) {
      // A Prompt Cache prompt: its tokens come from the schema it names,
      // once the server has looked it up; here its XML is parsed.
      if (!r.engine.prompt.empty()) std::abort();
      (void)cs::pml::parse_prompt(r.pml);
      return 0;
    }
    // What the parser accepts is well-formed for the engine's checks.
    if (r.engine.prompt.empty() || int(r.engine.prompt.size()) >= lim.n_ctx) std::abort();
    if (r.engine.n < 1 || r.engine.n > lim.max_n || r.engine.max_tokens < 0) std::abort();
    cs::validate_request(r.engine, {lim.tokenizer->vocab_size(), lim.n_ctx, 64, 16, 0, 1 << 24, lim.max_n});
  } catch (const cs::ApiError&) {
  } catch (const cs::RequestError&) {
  } catch (const cs::pml::PmlError&) {
  }
  return 0;
}
