// libFuzzer target: the reader of calls in a reply (server/call_stream.h).
// A reply is the model's text, and a client can make the model write almost
// anything ("repeat exactly: ..."), so any text in any format, constrained or
// not: no crash, every chunking reads as the whole reply does, and a call's
// arguments, whole, are a JSON object.
// Input: a byte choosing the format (its low 3 bits, mod 6) and whether
// calls are constrained (bit 3), a byte seeding the chunk sizes, then the
// reply.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/call_stream.h"

namespace {

std::string show(const std::vector<cs::ReplyPart>& parts) {
  std::string s;
  for (const cs::ReplyPart& p : parts)
    s += p.is_call ? "\x01" + p.call.name + "\x02" + p.call.arguments + (p.call.complete ? "\x03" : "\x04")
                   : "\x05" + p.text;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // Bits 0-2 and 4: the format (of 11); bit 3: constrained.
  const auto f = static_cast<cs::ToolFormat>(((data[0] & 7) | ((data[0] >> 1) & 8)) % 11);
  const bool constrained = data[0] & 8;
  uint32_t seed = data[1] | 1u;
  const std::string reply(reinterpret_cast<const char*>(data + 2), size - 2);
  // The Qwen XML format's values read by kind: a plain string, an integer, text, any.
  static const cs::ParamTypes types = {{"f", {{"s", "string"}, {"n", "integer"}, {"t", "text"}, {"a", ""}}}};
  const std::vector<cs::ReplyPart> whole = cs::read_reply(reply, f, constrained, &types);
  cs::CallStream s(f, constrained, &types);
  std::vector<cs::CallPiece> pieces;
  for (size_t at = 0; at < reply.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t n = std::min(reply.size() - at, size_t(1 + (seed >> 16) % 9));
    for (cs::CallPiece& p : s.push(std::string_view(reply).substr(at, n))) pieces.push_back(std::move(p));
    at += n;
  }
  for (cs::CallPiece& p : s.finish()) pieces.push_back(std::move(p));
  const std::vector<cs::ReplyPart> streamed = cs::reply_parts(std::move(pieces));
  if (show(streamed) != show(whole)) std::abort();
  for (const cs::ReplyPart& p : whole) {
    if (!p.is_call) continue;
    // Whole arguments of a constrained call are the model's JSON as written,
    // so they parse unless the model (unconstrained here) wrote bad JSON.
    const auto args = nlohmann::ordered_json::parse(p.call.arguments, nullptr, false);
    if (p.call.complete && !constrained && !args.is_object()) std::abort();
    (void)cs::partial_arguments(p.call.arguments);
  }
  return 0;
}
