// Calls read as a reply streams (server/call_stream.h): a constrained call
// goes out as it is written (its name, then its arguments piece by piece),
// free text that may be a call is held and read whole, and every chunking of
// a reply, cut short anywhere, reads the same as the whole reply at once.
#include "server/call_stream.h"

#include <gtest/gtest.h>

#include <random>

#include "base/json_depth.h"
#include "base/utf8.h"

namespace cs {
namespace {

using ojson = nlohmann::ordered_json;
using Kind = CallPiece::Kind;

// The pieces of a reply pushed in the given chunks, then finished.
const ParamTypes& xml_types();

std::vector<CallPiece> stream(ToolFormat f, bool constrained, const std::vector<std::string>& chunks) {
  CallStream s(f, constrained, &xml_types());
  std::vector<CallPiece> all;
  for (const std::string& c : chunks)
    for (CallPiece& p : s.push(c)) all.push_back(std::move(p));
  for (CallPiece& p : s.finish()) all.push_back(std::move(p));
  return all;
}

// Pieces folded into parts, as a client rebuilding the stream would.
// (The kinds of the Qwen XML format's parameters: xml_types, below.)
std::vector<ReplyPart> parts_of(const std::vector<CallPiece>& pieces) {
  std::vector<ReplyPart> parts;
  for (const CallPiece& p : pieces) {
    if (p.kind == Kind::kContent) {
      if (parts.empty() || parts.back().is_call) parts.push_back({});
      parts.back().text += p.text;
    } else if (p.kind == Kind::kCall) {
      parts.push_back({true, "", ToolCall{p.text, "", false}});
    } else if (p.kind == Kind::kArguments) {
      parts.back().call.arguments += p.text;
    } else {
      parts.back().call.complete = p.complete;
    }
  }
  return parts;
}

std::string show(const std::vector<ReplyPart>& parts) {
  std::string s;
  for (const ReplyPart& p : parts)
    s += p.is_call ? "[call " + p.call.name + " " + p.call.arguments + (p.call.complete ? "]" : " (cut)]")
                   : "[text " + p.text + "]";
  return s;
}

std::vector<std::string> bytes(std::string_view s) {
  std::vector<std::string> out;
  for (char c : s) out.push_back(std::string(1, c));
  return out;
}

TEST(CallStream, AConstrainedCallGoesOutAsItIsWritten) {
  CallStream s(ToolFormat::kHermes, true);
  std::vector<CallPiece> a = s.push("Let me look.\n<tool_call>\n{\"name\": \"get_");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].kind, Kind::kContent);
  EXPECT_EQ(a[0].text, "Let me look.");  // the run's trailing newline waits for more text
  std::vector<CallPiece> b = s.push("weather\", \"arguments\": {\"city\": \"Pa");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].kind, Kind::kCall);
  EXPECT_EQ(b[0].text, "get_weather");
  EXPECT_EQ(b[1].kind, Kind::kArguments);
  EXPECT_EQ(b[1].text, "{\"city\":\"Pa");
  std::vector<CallPiece> c = s.push("ris\", \"note\": \"a </tool_call> b\" }}\n</tool_call>");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].text, "ris\",\"note\":\"a </tool_call> b\"}");
  EXPECT_EQ(c[1].kind, Kind::kEnd);
  EXPECT_TRUE(c[1].complete);
  EXPECT_TRUE(s.finish().empty());
}

TEST(CallStream, AQwenXmlCallsStringValueStreamsAsItComes) {
  const ParamTypes types = {{"write", {{"path", "string"}, {"size", "integer"}}}};
  CallStream s(ToolFormat::kQwenXml, true, &types);
  std::vector<CallPiece> a = s.push("<tool_call>\n<function=write>\n<parameter=size>\n1");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].kind, Kind::kCall);
  EXPECT_EQ(a[0].text, "write");
  EXPECT_EQ(a[1].text, "{\"size\":");  // an integer's value waits for its end
  std::vector<CallPiece> b = s.push("2\n</parameter>\n<parameter=path>\nline one\n");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].text, "12,\"path\":\"line one");  // the newline may be the value's last: held
  std::vector<CallPiece> c = s.push("\"two\"\n</par");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].text, "\\n\\\"two\\\"");
  std::vector<CallPiece> d = s.push("ameter>\n</function>\n</tool_call>");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].text, "\"}");
  EXPECT_EQ(d[1].kind, Kind::kEnd);
  EXPECT_TRUE(d[1].complete);
  EXPECT_TRUE(s.finish().empty());
}

TEST(CallStream, EachFormatsCallsAreRead) {
  struct {
    ToolFormat f;
    const char* reply;
    const char* expect;
  } cases[] = {
      {ToolFormat::kHermes, "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\", "
                            "\"arguments\": {\"x\": [1, {\"y\": null}]}}</tool_call>",
       "[call a {}][call b {\"x\":[1,{\"y\":null}]}]"},
      {ToolFormat::kLlama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"a b\"}}",
       "[call f {\"q\":\"a b\"}]"},
      {ToolFormat::kLlama3, " {\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {\"n\": 2}}",
       "[call f {}][call g {\"n\":2}]"},
      {ToolFormat::kLlama3, "Hello {\"name\": \"f\"}", "[text Hello {\"name\": \"f\"}]"},
      {ToolFormat::kMistral, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"s\": \"]\"}}, {\"name\": \"b\", "
                             "\"arguments\": {}}]",
       "[call a {\"s\":\"]\"}][call b {}]"},
      {ToolFormat::kHarmony, "<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"Oslo\"}<|call|>",
       "[call get_weather {\"city\":\"Oslo\"}]"},
      // Text beside calls, each run trimmed.
      {ToolFormat::kHermes, "  Checking.  \n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\nDone. ",
       "[text Checking.][call a {}][text Done.]"},
      // One block, two calls, text after it.
      {ToolFormat::kMiniMaxXml, "On it.\n<minimax:tool_call>\n<invoke name=\"a\">\n<parameter name=\"x\">[1]"
                                "</parameter>\n</invoke>\n<invoke name=\"b\">\n</invoke>\n</minimax:tool_call> Done.",
       "[text On it.][call a {\"x\":[1]}][call b {}][text Done.]"},
      {ToolFormat::kKimi, "Sure.<|tool_calls_section_begin|>\n<|tool_call_begin|>functions.a:3<|tool_call_argument_begin|>"
                          "{\"x\": [1, 2]}<|tool_call_end|>\n<|tool_call_begin|>functions.b:4<|tool_call_argument_begin|>{}"
                          "<|tool_call_end|>\n<|tool_calls_section_end|>",
       "[text Sure.][call a {\"x\":[1,2]}][call b {}]"},
      {ToolFormat::kDsml, "<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name=\"a\">\n<\uff5cDSML\uff5cparameter "
                          "name=\"s\" string=\"true\">1 2</\uff5cDSML\uff5cparameter>\n<\uff5cDSML\uff5cparameter name=\"n\" "
                          "string=\"false\">3</\uff5cDSML\uff5cparameter>\n</\uff5cDSML\uff5cinvoke>\n"
                          "</\uff5cDSML\uff5cfunction_calls>",
       "[call a {\"s\":\"1 2\",\"n\":3}]"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(show(read_reply(c.reply, c.f, true)), c.expect) << tool_format_name(c.f) << ": " << c.reply;
    EXPECT_EQ(show(parts_of(stream(c.f, true, bytes(c.reply)))), c.expect) << "byte by byte: " << c.reply;
  }
}

TEST(CallStream, AReplyCutShortLeavesItsCallIncomplete) {
  EXPECT_EQ(show(read_reply("<tool_call>{\"name\": \"f\", \"arguments\": {\"city\": \"Pa", ToolFormat::kHermes, true)),
            "[call f {\"city\":\"Pa (cut)]");
  // The reasoning split closes a harmony message where the reply ends.
  EXPECT_EQ(show(read_reply("<|channel|>commentary to=functions.f<|message|>{\"a\": \"x<|call|>", ToolFormat::kHarmony,
                            true)),
            "[call f {\"a\":\"x (cut)]");
  // GLM's name ends at a tag or a newline: one the reply's end cut is no call.
  EXPECT_EQ(show(read_reply("<tool_call>wri", ToolFormat::kGlmXml, true)), "[text <tool_call>wri]");
  EXPECT_EQ(show(read_reply("<tool_call>write\n", ToolFormat::kGlmXml, true)), "[call write { (cut)]");
  // In the invoke family's block after a call: markup the end cut is no content.
  EXPECT_EQ(show(read_reply("<minimax:tool_call><invoke name=\"f\"></invoke>\n<inv", ToolFormat::kMiniMaxXml, true)),
            "[call f {}]");
  const ParamTypes types = {{"f", {{"a", "string"}}}};
  EXPECT_EQ(show(read_reply("<minimax:tool_call><invoke name=\"f\"><parameter name=\"a\">x y", ToolFormat::kMiniMaxXml,
                            true, &types)),
            "[call f {\"a\":\"x y (cut)]");
  // Cut before the arguments began: no call was sent, the text is content.
  EXPECT_EQ(show(read_reply("<tool_call>{\"name\": \"f\", \"argu", ToolFormat::kHermes, true)),
            "[text <tool_call>{\"name\": \"f\", \"argu]");
  const ParsedReply p = read_calls("<tool_call>{\"name\": \"f\", \"arguments\": {}", ToolFormat::kHermes, true);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_TRUE(p.calls[0].complete);  // the arguments closed; the block's end is markup
}

TEST(CallStream, UnconstrainedTextThatMayBeACallIsReadWholeAtTheEnd) {
  CallStream s(ToolFormat::kHermes, false);
  std::vector<CallPiece> a = s.push("Sure. <tool_call>{\"name\": \"f\", \"arguments\": {\"a\":  1.50}}</tool_call>");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].text, "Sure.");
  std::vector<CallPiece> b = s.finish();
  EXPECT_EQ(show(parts_of(b)), "[call f {\"a\":1.5}]");  // parse_tool_calls' reading
  // Free text that only looks like a call stays text.
  EXPECT_EQ(show(read_reply("<tool_call>{\"name\": 3}</tool_call>", ToolFormat::kHermes, false)),
            "[text <tool_call>{\"name\": 3}</tool_call>]");
}

TEST(CallStream, ACallNotInTheGrammarsShapeIsReadWhole) {
  // The name after the arguments: not what tool_call_grammar writes, so it
  // is held and parsed at the end.
  CallStream s(ToolFormat::kHermes, true);
  EXPECT_TRUE(s.push("<tool_call>{\"arguments\": {\"x\": 1}, ").empty());
  EXPECT_TRUE(s.push("\"name\": \"f\"}</tool_call>").empty());
  EXPECT_EQ(show(parts_of(s.finish())), "[call f {\"x\":1}]");
  // A Llama 3 reply that opens with JSON that is not a call (an answer in a
  // response_format beside the tools) is the answer.
  EXPECT_EQ(show(read_reply("{\"answer\": 42}", ToolFormat::kLlama3, true)), "[text {\"answer\": 42}]");
}

TEST(CallStream, ArgumentsNeverSplitACharacter) {
  const std::string reply = "<tool_call>{\"name\": \"f\", \"arguments\": {\"w\": \"caf\xc3\xa9 \xe2\x82\xac\"}}</tool_call>";
  CallStream s(ToolFormat::kHermes, true);
  std::string args;
  for (const std::string& b : bytes(reply))
    for (const CallPiece& p : s.push(b))
      if (p.kind == Kind::kArguments) {
        for (size_t i = 0; i < p.text.size(); i += utf8_len(p.text, i))
          EXPECT_TRUE(utf8_len(p.text, i) > 1 || static_cast<unsigned char>(p.text[i]) < 0x80)
              << "a piece splits a character: " << p.text;
        args += p.text;
      }
  EXPECT_EQ(args, "{\"w\":\"caf\xc3\xa9 \xe2\x82\xac\"}");
}

TEST(CallStream, ArgumentsDeeperThanARequestMayNestEndTheCall) {
  std::string deep = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ";
  for (int i = 0; i < 300; ++i) deep += "[";
  const std::vector<ReplyPart> parts = read_reply(deep, ToolFormat::kHermes, true);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_FALSE(parts[0].call.complete);
  EXPECT_EQ(parts[0].call.arguments.size(), 5u + kMaxJsonNesting - 1);  // {"a": and the brackets up to the limit
  EXPECT_FALSE(parts[1].is_call);
}

TEST(CallStream, PartialArgumentsKeepTheMembersWrittenWhole) {
  EXPECT_EQ(partial_arguments("{\"city\":\"Pa").dump(), "{}");
  EXPECT_EQ(partial_arguments("{\"city\":\"Paris\",\"n").dump(), "{\"city\":\"Paris\"}");
  EXPECT_EQ(partial_arguments("{\"a\":1,\"b\":[1,2").dump(), "{\"a\":1,\"b\":[1]}");
  EXPECT_EQ(partial_arguments("{\"a\":{\"b\":true,\"c\":").dump(), "{\"a\":{\"b\":true}}");
  EXPECT_EQ(partial_arguments("{\"a\":-1.5e").dump(), "{}");
  EXPECT_EQ(partial_arguments("{\"s\":\"x\\\"}\",\"t\":nul").dump(), "{\"s\":\"x\\\"}\"}");
  EXPECT_EQ(partial_arguments("").dump(), "{}");
}

// Replies of each format built at random: calls with random whitespace,
// strings holding markup and escapes, text around them, cut short anywhere.
// markup: strings may hold the formats' markup (the parser, which finds a
// Hermes block's end by its text, reads those apart).
std::string random_string(std::mt19937& rng, bool markup) {
  static const char* bits[] = {"a", " ", "\\\"", "}", "]", "{", ",", "\xc3\xa9", "\\n", "</tool_call>", "<|call|>x"};
  std::string s = "\"";
  const int n = int(rng() % 6);
  for (int i = 0; i < n; ++i) s += bits[rng() % (markup ? 11 : 9)];
  return s + "\"";
}

std::string random_value(std::mt19937& rng, int depth, bool markup) {
  const std::string ws[] = {"", " ", "\n  "};
  switch (depth > 2 ? rng() % 3 : rng() % 5) {
    case 0: return random_string(rng, markup);
    case 1: return std::to_string(int(rng() % 2000) - 1000);
    case 2: return rng() % 2 ? "true" : "null";
    case 3: {
      std::string s = "[" + ws[rng() % 3];
      for (int i = 0, n = int(rng() % 3); i < n; ++i) s += (i ? "," + ws[rng() % 3] : "") + random_value(rng, depth + 1, markup);
      return s + ws[rng() % 3] + "]";
    }
    default: {
      std::string s = "{" + ws[rng() % 3];
      for (int i = 0, n = int(rng() % 3); i < n; ++i)
        s += (i ? "," + ws[rng() % 3] : "") + "\"k" + std::to_string(i) + "\"" + ws[rng() % 3] + ":" + ws[rng() % 3] +
             random_value(rng, depth + 1, markup);
      return s + ws[rng() % 3] + "}";
    }
  }
}

std::string random_args(std::mt19937& rng, bool markup) {
  std::string s = "{";
  for (int i = 0, n = int(rng() % 3); i < n; ++i)
    s += (i ? ", " : "") + std::string("\"p") + std::to_string(i) + "\": " + random_value(rng, 1, markup);
  return s + "}";
}

// The Qwen XML format's parameters in random calls: p0 a plain string, p1 an
// integer, p2 of no type (any JSON).
const ParamTypes& xml_types() {
  static const ParamTypes t = {{"get_weather", {{"p0", "string"}, {"p1", "integer"}, {"p2", ""}}},
                               {"search", {{"p0", "string"}, {"p1", "integer"}, {"p2", ""}}}};
  return t;
}

std::string random_xml_call(std::mt19937& rng, const std::string& name, bool markup, bool glm = false,
                            bool seed = false) {
  static const char* bits[] = {"a", " ", "\n", "<", "</param", "\"", "\xc3\xa9", "x\n\n", "</arg_val",
                               "</tool_call>"};
  const std::string nl = glm && rng() % 2 ? "" : "\n";
  const std::string block = seed ? "seed:tool_call>" : "tool_call>";
  std::string s = glm ? "<tool_call>" + name + nl : "<" + block + "\n<function=" + name + ">\n";
  for (int i = 0, n = int(rng() % 4); i < n; ++i) {
    const int p = int(rng() % 3);
    s += glm ? "<arg_key>p" + std::to_string(p) + "</arg_key>" + nl + "<arg_value>"
             : "<parameter=p" + std::to_string(p) + ">\n";
    if (p == 0)
      for (int k = 0, m = int(rng() % 6); k < m; ++k) s += bits[rng() % (markup ? 10 : 9)];
    else if (p == 1)
      s += std::to_string(int(rng() % 200) - 100);
    else
      s += random_value(rng, 1, false);
    s += glm ? "</arg_value>" + nl : seed ? "</parameter>\n" : "\n</parameter>\n";
  }
  return s + (glm ? "</tool_call>" : "</function>\n</" + block);
}

// The invoke family's calls (MiniMax's tags, or DSML's with each value's
// string attribute), without their block.
std::string random_invoke(std::mt19937& rng, const std::string& name, bool markup, ToolFormat f) {
  static const char* bits[] = {"a", " ", "\n", "<", "</param", "\"", "\xc3\xa9", "x\n\n", "</invo",
                               "</minimax:tool_call>"};
  const std::string d = f == ToolFormat::kMiniMaxXml ? "" : "\uff5cDSML\uff5c";
  std::string s = "<" + d + "invoke name=\"" + name + "\">\n";
  for (int i = 0, n = int(rng() % 4); i < n; ++i) {
    const int p = int(rng() % 3);
    s += "<" + d + "parameter name=\"p" + std::to_string(p) + "\"";
    if (!d.empty()) s += p == 0 ? " string=\"true\"" : " string=\"false\"";
    s += ">";
    if (p == 0)
      for (int k = 0, m = int(rng() % 6); k < m; ++k) s += bits[rng() % (markup ? 10 : 8)];
    else if (p == 1)
      s += std::to_string(int(rng() % 200) - 100);
    else
      s += random_value(rng, 1, false);
    s += "</" + d + "parameter>\n";
  }
  return s + "</" + d + "invoke>";
}

std::string random_call(std::mt19937& rng, ToolFormat f, bool markup) {
  const std::string name = rng() % 2 ? "get_weather" : "search";
  if (f == ToolFormat::kQwenXml || f == ToolFormat::kGlmXml || f == ToolFormat::kSeedXml)
    return random_xml_call(rng, name, markup, f == ToolFormat::kGlmXml, f == ToolFormat::kSeedXml);
  if (xml_format(f)) return random_invoke(rng, name, markup, f);
  if (f == ToolFormat::kKimi)
    return "<|tool_call_begin|>functions." + name + ":" + std::to_string(rng() % 12) + "<|tool_call_argument_begin|>" +
           random_args(rng, markup) + "<|tool_call_end|>";
  const std::string args = random_args(rng, markup);
  const char* key = f == ToolFormat::kLlama3 ? "parameters" : "arguments";
  const std::string obj = std::string("{\"name\": \"") + name + "\", \"" + key + "\": " + args + "}";
  switch (f) {
    case ToolFormat::kHermes: return "<tool_call>\n" + obj + "\n</tool_call>";
    case ToolFormat::kHarmony: return "<|channel|>commentary to=functions." + name + "<|message|>" + args + "<|call|>";
    default: return obj;
  }
}

std::string random_reply(std::mt19937& rng, ToolFormat f, bool markup = true) {
  const int calls = int(rng() % 3);
  const std::string text = rng() % 2 ? "Let me check that." : "";
  switch (f) {
    case ToolFormat::kLlama3: {
      if (calls == 0) return text + " {x";
      std::string s = rng() % 2 ? "<|python_tag|>" : "";
      for (int i = 0; i < calls; ++i) s += (i ? "; " : "") + random_call(rng, f, markup);
      return s;
    }
    case ToolFormat::kMistral: {
      if (calls == 0) return text;
      std::string s = text + "[TOOL_CALLS][";
      for (int i = 0; i < calls; ++i) s += (i ? ", " : "") + random_call(rng, f, markup);
      return s + "]";
    }
    case ToolFormat::kMiniMaxXml:
    case ToolFormat::kDsml:
    case ToolFormat::kKimi: {
      if (calls == 0) return text;
      const bool kimi = f == ToolFormat::kKimi;
      const std::string_view open = kimi ? kKimiSection : xml_tags(f).block_open,
                             close = kimi ? kKimiSectionEnd : xml_tags(f).block_close;
      std::string s = text + "\n" + std::string(open) + "\n";
      for (int i = 0; i < calls; ++i) s += random_call(rng, f, markup) + "\n";
      return s + std::string(close) + (rng() % 2 ? " Done." : "");
    }
    default: {
      std::string s = text;
      for (int i = 0; i < calls; ++i) {
        s += '\n';
        s += random_call(rng, f, markup);
      }
      return s + (rng() % 3 == 0 ? "\n" : "");
    }
  }
}

std::vector<std::string> random_chunks(std::mt19937& rng, const std::string& s) {
  std::vector<std::string> out;
  for (size_t at = 0; at < s.size();) {
    const size_t n = std::min(s.size() - at, size_t(1 + rng() % 7));
    out.push_back(s.substr(at, n));
    at += n;
  }
  return out;
}

TEST(CallStream, EveryChunkingReadsAsTheWholeReplyDoes) {
  std::mt19937 rng(7);
  const ToolFormat formats[] = {ToolFormat::kHermes,     ToolFormat::kLlama3, ToolFormat::kMistral,
                                ToolFormat::kHarmony,    ToolFormat::kQwenXml, ToolFormat::kGlmXml,
                                ToolFormat::kMiniMaxXml, ToolFormat::kDsml,    ToolFormat::kSeedXml,
                                ToolFormat::kKimi};
  int calls_seen = 0, cut_seen = 0;
  for (int trial = 0; trial < 8000; ++trial) {
    const ToolFormat f = formats[trial % 10];
    const bool constrained = trial % 5 != 0;
    std::string reply = random_reply(rng, f);
    if (rng() % 3 == 0) reply = reply.substr(0, rng() % (reply.size() + 1));
    const std::string whole = show(read_reply(reply, f, constrained, &xml_types()));
    ASSERT_EQ(show(parts_of(stream(f, constrained, random_chunks(rng, reply)))), whole)
        << tool_format_name(f) << (constrained ? " constrained: " : ": ") << reply;
    for (const ReplyPart& p : read_reply(reply, f, constrained, &xml_types())) {
      calls_seen += p.is_call;
      cut_seen += p.is_call && !p.call.complete;
      if (p.is_call && p.call.complete) {
        const ojson args = ojson::parse(p.call.arguments, nullptr, false);
        ASSERT_TRUE(args.is_object()) << p.call.arguments;
      }
    }
  }
  EXPECT_GT(calls_seen, 2500);
  EXPECT_GT(cut_seen, 160);
}

// Whole replies in the grammar's shape read as parse_tool_calls reads them
// (the reference): the same calls, with the same arguments as values.
TEST(CallStream, WholeCallsReadAsTheParserReadsThem) {
  std::mt19937 rng(11);
  const ToolFormat formats[] = {ToolFormat::kHermes,     ToolFormat::kLlama3, ToolFormat::kMistral,
                                ToolFormat::kHarmony,    ToolFormat::kQwenXml, ToolFormat::kGlmXml,
                                ToolFormat::kMiniMaxXml, ToolFormat::kDsml,    ToolFormat::kSeedXml,
                                ToolFormat::kKimi};
  for (int trial = 0; trial < 5000; ++trial) {
    const ToolFormat f = formats[trial % 10];
    const std::string reply = random_reply(rng, f, false);
    const ParsedReply ours = read_calls(reply, f, true, &xml_types()), ref = parse_tool_calls(reply, f, &xml_types());
    ASSERT_EQ(ours.calls.size(), ref.calls.size()) << reply;
    EXPECT_EQ(ours.content, ref.content) << reply;
    for (size_t k = 0; k < ref.calls.size(); ++k) {
      EXPECT_EQ(ours.calls[k].name, ref.calls[k].name);
      EXPECT_EQ(ojson::parse(ours.calls[k].arguments), ojson::parse(ref.calls[k].arguments)) << reply;
    }
  }
}

}  // namespace
}  // namespace cs
