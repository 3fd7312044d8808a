// libFuzzer: deep nesting in every field a client can nest in. The input is a
// recipe, not the text itself, so that depths of tens of thousands are a few
// bytes away: byte 0 picks where the nesting goes (a chat body's
// response_format schema, a completion's guided_json, a tool's parameters,
// a schema sent as JSON text, a call's arguments, a regex, an EBNF grammar, a
// schema checked alone); bytes 1-2 the repeat count (up to 65535); then an
// opener and a closer (up to 8 bytes each, split at the first 0xff) and the
// leaf, the rest. The text is prefix, opener x count, leaf, closer x count,
// suffix. Anything may be refused (ApiError, GrammarError); nothing may
// crash: a recursion per level overflows the stack, which ASan reports.
#include <cstdint>
#include <string>

#include "fuzz_model.h"
#include "grammar/grammar.h"
#include "grammar/limits.h"
#include "grammar/schema_check.h"
#include "server/api_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const cs::Tokenizer& tok = cs::fuzz::tokenizer();
  static const cs::ChatTemplate chat = cs::ChatTemplate::for_model(tok);
  if (size < 3) return 0;
  const int where = data[0] % 8;
  const size_t count = size_t(data[1]) << 8 | data[2];
  const std::string rest(reinterpret_cast<const char*>(data) + 3, size - 3);
  const size_t cut1 = std::min(rest.find('\xff'), std::min<size_t>(rest.size(), 8));
  const std::string opener = rest.substr(0, cut1);
  const std::string after = cut1 < rest.size() ? rest.substr(cut1 + 1) : "";
  const size_t cut2 = std::min(after.find('\xff'), std::min<size_t>(after.size(), 8));
  const std::string closer = after.substr(0, cut2), leaf = cut2 < after.size() ? after.substr(cut2 + 1) : "";
  std::string nested;
  for (size_t i = 0; i < count; ++i) nested += opener;
  nested += leaf;
  for (size_t i = 0; i < count; ++i) nested += closer;
  auto quoted = [](const std::string& s) { return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };

  cs::ApiLimits lim;
  lim.tokenizer = &tok;
  lim.chat = &chat;
  lim.model_id = "m";
  lim.n_ctx = 512;
  lim.max_n = 4;
  const std::string chat_head = R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}])";
  try {
    switch (where) {
      case 0:
        (void)cs::parse_chat_request(chat_head + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + nested + "}}}", lim);
        break;
      case 1:
        (void)cs::parse_completion_request(R"({"model":"m","prompt":"hi","max_tokens":4,"guided_json":)" + nested + "}", lim);
        break;
      case 2:
        (void)cs::parse_chat_request(chat_head + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)" + nested + "}}]}", lim);
        break;
      case 3:
        (void)cs::parse_chat_request(chat_head + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + quoted(nested) + "}}}", lim);
        break;
      case 4:
        (void)cs::parse_chat_request(R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":)" + quoted(nested) + R"(}}]},{"role":"tool","tool_call_id":"c","content":"ok"}]})", lim);
        break;
      case 5:
        cs::check_limits({cs::GrammarKind::kRegex, nested});
        break;
      case 6:
        cs::check_limits({cs::GrammarKind::kEbnf, "root ::= " + nested});
        break;
      default:
        cs::check_limits({cs::GrammarKind::kJsonSchema, nested});
        cs::check_schema(nested, cs::SchemaUse::kConstraint);
        break;
    }
  } catch (const cs::ApiError&) {
  } catch (const cs::GrammarError&) {
  }
  return 0;
}
