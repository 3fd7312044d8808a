// Structured outputs and tool calls at the API: the call format found from
// real chat templates (the llama-cpp-python sdist's), calls parsed back out
// of each format's text, what a stream may send before a call is whole, the
// request fields (response_format, regex, grammar, tools, tool_choice) and
// their errors, tools in the prompt (the template's own text, or the generic
// format's), and schema mistakes named by their place.
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <tuple>

#include "grammar/schema_check.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "server/api_request.h"
#include "server/call_stream.h"
#include "api_fixture.h"

namespace cs {
namespace {

using ojson = nlohmann::ordered_json;

std::string template_source(const std::string& name) {
  std::ifstream f(std::string(CS_TEMPLATE_DIR) + "/" + name + ".jinja");
  std::stringstream s;
  s << f.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(ToolCalls, TheFormatComesFromTheTemplate) {
  struct {
    const char* name;
    ToolFormat format;
    bool takes;
  } cases[] = {
      {"Qwen-Qwen2.5-7B-Instruct", ToolFormat::kHermes, true},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolFormat::kHermes, true},
      {"Qwen-Qwen3-0.6B", ToolFormat::kHermes, true},
      {"HuggingFaceTB-SmolLM3-3B", ToolFormat::kHermes, false},  // its xml_tools are not `tools`
      {"meta-llama-Llama-3.1-8B-Instruct", ToolFormat::kLlama3, true},
      {"meta-llama-Llama-3.3-70B-Instruct", ToolFormat::kLlama3, true},
      {"mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::kMistral, true},
      {"google-gemma-2-2b-it", ToolFormat::kHermes, false},
      {"microsoft-Phi-3.5-mini-instruct", ToolFormat::kHermes, false},
      {"openai-gpt-oss-120b", ToolFormat::kHarmony, true},
      {"Qwen3-Coder", ToolFormat::kQwenXml, true},
      {"Qwen3.5-4B", ToolFormat::kQwenXml, true},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", ToolFormat::kQwenXml, true},
      {"StepFun3.5-Flash", ToolFormat::kQwenXml, true},
      {"GLM-4.6", ToolFormat::kGlmXml, true},
      {"GLM-4.7-Flash", ToolFormat::kGlmXml, true},
      {"inclusionai-ling-3.0-flash", ToolFormat::kGlmXml, true},
      {"poolside-Laguna-XS-2.1", ToolFormat::kGlmXml, true},
      {"Spark2.5", ToolFormat::kGlmXml, true},
      {"MiniMax-M2", ToolFormat::kMiniMaxXml, true},
      {"deepseek-ai-DeepSeek-V3.2", ToolFormat::kDsml, true},
      {"deepseek-ai-DeepSeek-V4", ToolFormat::kDsmlV4, true},
      {"deepseek-ai-DeepSeek-V4-Flash-0731", ToolFormat::kDsmlV4, true},
      {"ByteDance-Seed-OSS", ToolFormat::kSeedXml, true},
      {"moonshotai-Kimi-K2", ToolFormat::kKimi, true},
      {"Kimi-K2-Instruct", ToolFormat::kKimi, true},
      {"Kimi-K2-Thinking", ToolFormat::kKimi, true},
      // Nested objects as nested elements: not read, so described generically.
      {"MiniMax-M3", ToolFormat::kHermes, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const ToolSyntax s = tool_syntax(template_source(c.name));
    EXPECT_EQ(tool_format_name(s.format), std::string(tool_format_name(c.format)));
    EXPECT_EQ(s.template_takes_tools, c.takes);
  }
  EXPECT_FALSE(tool_syntax(ChatTemplate::chatml_source()).template_takes_tools);
}

void expect_calls(const ParsedReply& r, const std::string& content, const std::vector<ToolCall>& calls) {
  EXPECT_EQ(r.content, content);
  ASSERT_EQ(r.calls.size(), calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(r.calls[i].name, calls[i].name);
    EXPECT_EQ(r.calls[i].arguments, calls[i].arguments);
  }
}

TEST(ToolCalls, EachFormatParses) {
  expect_calls(parse_tool_calls("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                                "\"Paris\"}}\n</tool_call>\n<tool_call>{\"name\":\"add\",\"arguments\":\"{\\\"a\\\": 1}\"}"
                                "</tool_call>",
                                ToolFormat::kHermes),
               "Let me check.", {{"get_weather", R"({"city":"Paris"})"}, {"add", R"({"a":1})"}});
  // A call cut short by max_tokens after its JSON still parses; one without
  // arguments has empty ones.
  expect_calls(parse_tool_calls("<tool_call>{\"name\": \"now\"}", ToolFormat::kHermes), "", {{"now", "{}"}});
  expect_calls(parse_tool_calls("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                                ToolFormat::kLlama3),
               "", {{"get_weather", R"({"city":"Oslo"})"}});
  expect_calls(parse_tool_calls(R"( {"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1, 2]}})",
                                ToolFormat::kLlama3),
               "", {{"a", "{}"}, {"b", R"({"x":[1,2]})"}});
  expect_calls(parse_tool_calls(R"([TOOL_CALLS][{"name": "a", "arguments": {"k": "v"}}, {"name": "b", "arguments": {}}])",
                                ToolFormat::kMistral),
               "", {{"a", R"({"k":"v"})"}, {"b", "{}"}});
  // Harmony, as server/reasoning.h's split hands its calls on: the recipient
  // in the header ("functions." dropped), the arguments the body.
  expect_calls(parse_tool_calls("Checking.<|channel|>commentary to=functions.get_weather<|message|>{\"city\": "
                                "\"Paris\"}<|call|><|channel|>commentary to=functions.now <|constrain|>json<|message|>{}",
                                ToolFormat::kHarmony),
               "Checking.", {{"get_weather", R"({"city":"Paris"})"}, {"now", "{}"}});
  // Mistral's [TOOL_CALLS] is a control token the text leaves out.
  expect_calls(parse_tool_calls(R"([{"name": "a", "arguments": {"k": 1.5}}])", ToolFormat::kMistral), "",
               {{"a", R"({"k":1.5})"}});
}

TEST(ToolCalls, WhatIsNotACallStaysContent) {
  expect_calls(parse_tool_calls("Paris is sunny.", ToolFormat::kHermes), "Paris is sunny.", {});
  expect_calls(parse_tool_calls("a <tool_call>{not json}</tool_call> b", ToolFormat::kHermes),
               "a\n<tool_call>{not json}</tool_call>\nb", {});
  expect_calls(parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>", ToolFormat::kHermes),
               "<tool_call>{\"arguments\": {}}</tool_call>", {});
  expect_calls(parse_tool_calls("{\"answer\": 42}", ToolFormat::kLlama3), "{\"answer\": 42}", {});
  expect_calls(parse_tool_calls("[1, 2]", ToolFormat::kMistral), "[1, 2]", {});
  expect_calls(parse_tool_calls("<|channel|>commentary to=functions.f<|message|>[1]<|call|> after", ToolFormat::kHarmony),
               "<|channel|>commentary to=functions.f<|message|>[1]<|call|>\nafter", {});
  expect_calls(parse_tool_calls("<|channel|>commentary<|message|>{}<|call|>", ToolFormat::kHarmony),
               "<|channel|>commentary<|message|>{}<|call|>", {});
}

// What a stream sends at once of text whose calls are not constrained: all
// but what may still be a call (and a run's trailing whitespace).
std::string sent_now(std::string_view text, ToolFormat f) {
  CallStream s(f, false);
  std::string out;
  for (const CallPiece& p : s.push(text)) out += p.text;
  return out;
}

// Qwen XML: a plain string's value as it is (one newline at each end
// dropped: the template writes them), a constrained string's trimmed, any
// other type's as JSON, by the tool's schema.
TEST(ToolCalls, QwenXmlValuesAreReadByTheirKinds) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "edit", "parameters": {
      "type": "object", "properties": {"path": {"type": "string", "description": "where"}, "line": {"type": "integer"},
      "ok": {"type": "boolean"}, "tags": {"type": "array"}, "note": {"type": "string"}, "any": {},
      "color": {"enum": ["red", "green"]}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
      "short": {"type": "string", "maxLength": 8}}}}}])");
  const ParamTypes types = param_types(tools);
  EXPECT_EQ(types.at("edit").at("path"), "string");
  EXPECT_EQ(types.at("edit").at("line"), "integer");
  EXPECT_EQ(types.at("edit").at("any"), "");
  EXPECT_EQ(types.at("edit").at("color"), "text");
  EXPECT_EQ(types.at("edit").at("zip"), "text");
  EXPECT_EQ(types.at("edit").at("short"), "text");
  const std::string reply =
      "I will edit it.\n<tool_call>\n<function=edit>\n<parameter=path>\nsrc/a \"b\".py\n</parameter>\n"
      "<parameter=line>\n42\n</parameter>\n<parameter=ok> true </parameter>\n<parameter=tags>\n[\"x\", 2]\n"
      "</parameter>\n<parameter=note>\n7\n\n  indented\n</parameter>\n<parameter=any>\n{\"k\": 1}\n</parameter>\n"
      "<parameter=color>  red \n</parameter><parameter=zip>\n01234\n</parameter>"
      "<parameter=extra>\nplain\n</parameter>\n</function>\n</tool_call>";
  expect_calls(parse_tool_calls(reply, ToolFormat::kQwenXml, &types), "I will edit it.",
               {{"edit", R"({"path":"src/a \"b\".py","line":42,"ok":true,"tags":["x",2],"note":"7\n\n  indented",)"
                         R"("any":{"k":1},"color":"red","zip":"01234","extra":"plain"})"}});
  // Without the kinds a value that parses as JSON is that, any other a string (trimmed).
  expect_calls(parse_tool_calls(reply, ToolFormat::kQwenXml), "I will edit it.",
               {{"edit", R"({"path":"src/a \"b\".py","line":42,"ok":true,"tags":["x",2],"note":"7\n\n  indented",)"
                         R"("any":{"k":1},"color":"red","zip":"01234","extra":"plain"})"}});  // not JSON: a leading 0
  // A block that is not a call stays content; so does a call of the JSON format.
  expect_calls(parse_tool_calls("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", ToolFormat::kQwenXml),
               "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", {});
  expect_calls(parse_tool_calls("<tool_call><function=f><parameter=a>1</function></tool_call>", ToolFormat::kQwenXml),
               "<tool_call><function=f><parameter=a>1</function></tool_call>", {});
  expect_calls(parse_tool_calls("<tool_call><function=now></function></tool_call>", ToolFormat::kQwenXml), "",
               {{"now", "{}"}});
}

// GLM: the name after the block's tag, then <arg_key>/<arg_value> pairs,
// newlines between the tags or not; a string's value as it is.
TEST(ToolCalls, GlmCallsAreReadByTheirKinds) {
  const ParamTypes types = {{"edit", {{"path", "string"}, {"line", "integer"}}}};
  expect_calls(parse_tool_calls("Sure.\n<tool_call>edit\n<arg_key>path</arg_key>\n<arg_value>a b.py\n</arg_value>\n"
                                "<arg_key>line</arg_key>\n<arg_value>42</arg_value>\n</tool_call>",
                                ToolFormat::kGlmXml, &types),
               "Sure.", {{"edit", R"({"path":"a b.py\n","line":42})"}});
  expect_calls(parse_tool_calls("<tool_call>edit<arg_key>line</arg_key><arg_value> 7 </arg_value></tool_call>"
                                "<tool_call>now</tool_call>",
                                ToolFormat::kGlmXml, &types),
               "", {{"edit", R"({"line":7})"}, {"now", "{}"}});
  expect_calls(parse_tool_calls("<tool_call>edit<arg_key>line</arg_key>7</tool_call>", ToolFormat::kGlmXml, &types),
               "<tool_call>edit<arg_key>line</arg_key>7</tool_call>", {});
}

// The invoke family: one block holds every call, <invoke name="NAME">
// with a <parameter name="KEY"> element per argument; a string's value as
// it is, newlines and all.
TEST(ToolCalls, MiniMaxCallsShareOneBlock) {
  const ParamTypes types = {{"edit", {{"path", "string"}, {"line", "integer"}, {"mode", "text"}}}};
  expect_calls(parse_tool_calls("Sure.\n<minimax:tool_call>\n<invoke name=\"edit\">\n<parameter name=\"path\">a \"b\".py\n"
                                "</parameter>\n<parameter name=\"line\">42</parameter>\n<parameter name=\"mode\"> w "
                                "</parameter>\n</invoke>\n<invoke name=\"now\">\n</invoke>\n</minimax:tool_call>",
                                ToolFormat::kMiniMaxXml, &types),
               "Sure.", {{"edit", R"({"path":"a \"b\".py\n","line":42,"mode":"w"})"}, {"now", "{}"}});
  // Anything else in the block: the block is content.
  const std::string odd = "<minimax:tool_call>\n<invoke name=\"now\"></invoke>\nand more\n</minimax:tool_call>";
  expect_calls(parse_tool_calls(odd, ToolFormat::kMiniMaxXml, &types), odd, {});
  // A block the reply's end cut, its calls whole: calls.
  expect_calls(parse_tool_calls("<minimax:tool_call>\n<invoke name=\"now\"></invoke>\n", ToolFormat::kMiniMaxXml), "",
               {{"now", "{}"}});
}

// Kimi: a section of calls, each named by its id (functions.NAME:INDEX)
// with JSON arguments.
TEST(ToolCalls, KimiCallsAreNamedByTheirIds) {
  expect_calls(parse_tool_calls("Let me look.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                                "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
                                "functions.now:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
                                ToolFormat::kKimi),
               "Let me look.", {{"get_weather", R"({"city":"Paris"})"}, {"now", "{}"}});
  EXPECT_EQ(kimi_name("functions.a.b:12"), "a.b");
  EXPECT_EQ(kimi_name("search"), "search");
  EXPECT_EQ(kimi_name(" functions.x:y "), "x:y");  // an index is digits
  EXPECT_EQ(kimi_name("functions.:3"), "");
  // Arguments that are no object: the section is content.
  const std::string odd = "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>[1]"
                          "<|tool_call_end|><|tool_calls_section_end|>";
  expect_calls(parse_tool_calls(odd, ToolFormat::kKimi), odd, {});
}

// Seed-OSS: Qwen's elements in its own block; a string's value as it is.
TEST(ToolCalls, SeedCallsAreQwensInTheirOwnBlock) {
  const ParamTypes types = {{"edit", {{"path", "string"}, {"line", "integer"}}}};
  expect_calls(parse_tool_calls("Sure.\n<seed:tool_call>\n<function=edit>\n<parameter=path>a\nb\n</parameter>\n"
                                "<parameter=line>42</parameter>\n</function>\n</seed:tool_call>\n<seed:tool_call>\n"
                                "<function=now>\n</function>\n</seed:tool_call>",
                                ToolFormat::kSeedXml, &types),
               "Sure.", {{"edit", R"({"path":"a\nb\n","line":42})"}, {"now", "{}"}});
  // Qwen's block is none to it.
  expect_calls(parse_tool_calls("<tool_call>\n<function=now>\n</function>\n</tool_call>", ToolFormat::kSeedXml),
               "<tool_call>\n<function=now>\n</function>\n</tool_call>", {});
}

// DSML: the tag's string attribute says whether the value is text; where
// it says not, the value is JSON even if the schema says text (and a
// string where it does not parse).
TEST(ToolCalls, DsmlTagsSayWhetherAValueIsText) {
  const ParamTypes types = {{"edit", {{"path", "string"}, {"line", "integer"}, {"note", "string"}}}};
  const std::string reply =
      "\n\n<\uff5cDSML\uff5cfunction_calls>\n<\uff5cDSML\uff5cinvoke name=\"edit\">\n"
      "<\uff5cDSML\uff5cparameter name=\"path\" string=\"true\">12</\uff5cDSML\uff5cparameter>\n"
      "<\uff5cDSML\uff5cparameter name=\"line\" string=\"false\">42</\uff5cDSML\uff5cparameter>\n"
      "<\uff5cDSML\uff5cparameter name=\"note\" string=\"false\">[1]</\uff5cDSML\uff5cparameter>\n"
      "<\uff5cDSML\uff5cparameter name=\"extra\" string=\"true\">true</\uff5cDSML\uff5cparameter>\n"
      "</\uff5cDSML\uff5cinvoke>\n</\uff5cDSML\uff5cfunction_calls>";
  expect_calls(parse_tool_calls(reply, ToolFormat::kDsml, &types), "",
               {{"edit", R"({"path":"12","line":42,"note":[1],"extra":"true"})"}});
  // V4's block is <｜DSML｜tool_calls>: V3.2's is none to it.
  expect_calls(parse_tool_calls(reply, ToolFormat::kDsmlV4, &types), reply.substr(2), {});
  // A tag without the attribute is no parameter.
  const std::string bare = "<\uff5cDSML\uff5cfunction_calls><\uff5cDSML\uff5cinvoke name=\"f\">"
                           "<\uff5cDSML\uff5cparameter name=\"a\">1</\uff5cDSML\uff5cparameter></\uff5cDSML\uff5cinvoke>"
                           "</\uff5cDSML\uff5cfunction_calls>";
  expect_calls(parse_tool_calls(bare, ToolFormat::kDsml), bare, {});
}

TEST(ToolCalls, AStreamHoldsOnlyWhatMayBeACall) {
  EXPECT_EQ(sent_now("Hello there", ToolFormat::kHermes), "Hello there");
  EXPECT_EQ(sent_now("Hello <tool", ToolFormat::kHermes), "Hello");
  EXPECT_EQ(sent_now("Hello <tool_call>{\"na", ToolFormat::kHermes), "Hello");
  EXPECT_EQ(sent_now("a < b", ToolFormat::kHermes), "a < b");
  EXPECT_EQ(sent_now("  ", ToolFormat::kLlama3), "");
  EXPECT_EQ(sent_now(" {\"name\"", ToolFormat::kLlama3), "");
  EXPECT_EQ(sent_now("The answer {", ToolFormat::kLlama3), "The answer {");
  // Llama 3.1 may open a call with <|python_tag|> (text in a reply).
  EXPECT_EQ(sent_now("<|python", ToolFormat::kLlama3), "");
  EXPECT_EQ(sent_now("<|python_tag|>{\"name\"", ToolFormat::kLlama3), "");
  EXPECT_EQ(sent_now("<b>", ToolFormat::kLlama3), "<b>");
  EXPECT_EQ(sent_now("[{\"name\"", ToolFormat::kMistral), "");
  EXPECT_EQ(sent_now("ok [TOOL_C", ToolFormat::kMistral), "ok");
  EXPECT_EQ(sent_now("Sure <|chan", ToolFormat::kHarmony), "Sure");
  EXPECT_EQ(sent_now("Sure.", ToolFormat::kHarmony), "Sure.");
}

// A function without parameters has an empty parameter list (OpenAI's
// words): its demanded call's arguments are {}.
TEST(ToolCalls, TheGrammarFramesEachFormat) {
  const std::string kNoParameters = R"({"type":"object","properties":{},"additionalProperties":false})";
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "g"}}])");
  const GrammarSpec hermes = tool_call_grammar(tools, ToolFormat::kHermes, {ToolChoice::Kind::kRequired, ""}, true);
  EXPECT_EQ(hermes.kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(hermes.text,
            R"({"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object","properties":{"x":{"type":"integer"}}}},"required":["name","arguments"],"additionalProperties":false},)"
            R"({"type":"object","properties":{"name":{"const":"g"},"arguments":)" + kNoParameters + R"(},"required":["name","arguments"],"additionalProperties":false}]})");
  ASSERT_TRUE(hermes.frame);
  EXPECT_EQ(hermes.frame->before, "<tool_call>");
  EXPECT_EQ(hermes.frame->after, "</tool_call>");
  EXPECT_EQ(hermes.frame->max_items, 0);
  const GrammarSpec named = tool_call_grammar(tools, ToolFormat::kLlama3, {ToolChoice::Kind::kNamed, "g"}, true);
  EXPECT_EQ(named.text,
            R"({"type":"object","properties":{"name":{"const":"g"},"parameters":)" + kNoParameters + R"(},"required":["name","parameters"],"additionalProperties":false})");
  EXPECT_EQ(named.frame->max_items, 1);  // Llama 3's format has one call per reply
  const GrammarSpec mistral = tool_call_grammar(tools, ToolFormat::kMistral, {ToolChoice::Kind::kRequired, ""}, false);
  EXPECT_EQ(mistral.frame->open, "[TOOL_CALLS][");
  EXPECT_EQ(mistral.frame->close, "]");
  EXPECT_EQ(mistral.frame->max_items, 1);
  // Harmony: the header names the function, the body is its parameters
  // alone; one call (the turn ends at <|call|>).
  const GrammarSpec harmony = tool_call_grammar(tools, ToolFormat::kHarmony, {ToolChoice::Kind::kRequired, ""}, true);
  EXPECT_EQ(harmony.text, R"([{"type":"object","properties":{"x":{"type":"integer"}}},)" + kNoParameters + "]");
  EXPECT_EQ(harmony.frame->case_before,
            (std::vector<std::string>{"<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
                                      "<|channel|>commentary to=functions.g <|constrain|>json<|message|>"}));
  EXPECT_EQ(harmony.frame->after, "<|call|>");
  const GrammarSpec one = tool_call_grammar(tools, ToolFormat::kHarmony, {ToolChoice::Kind::kNamed, "g"}, true);
  EXPECT_EQ(one.text, "[" + kNoParameters + "]");
  EXPECT_EQ(one.frame->case_before.size(), 1u);
}

std::string schema_error(const std::string& schema, SchemaUse use = SchemaUse::kConstraint) {
  try {
    check_schema(schema, use);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

// Where a call begins when the model may or may not make one: the marker
// of its format (from its first character), or for Llama 3 a reply that
// opens like a call (after <|python_tag|>, from the JSON's brace).
TEST(ToolCalls, EachFormatsCallsBeginAtItsTriggers) {
  auto texts = [](ToolFormat f) {
    std::vector<std::string> out;
    for (const Request::Trigger& t : tool_call_triggers(f))
      out.push_back(t.text + (t.at_start ? " (start)" : "") + (t.skip ? " (from " + std::to_string(t.skip) + ")" : ""));
    return out;
  };
  EXPECT_EQ(texts(ToolFormat::kHermes), std::vector<std::string>{"<tool_call>"});
  EXPECT_EQ(texts(ToolFormat::kMistral), std::vector<std::string>{"[TOOL_CALLS]"});
  EXPECT_EQ(texts(ToolFormat::kLlama3), (std::vector<std::string>{"{\"name\" (start)", "<|python_tag|> (start) (from 14)"}));
  EXPECT_EQ(texts(ToolFormat::kHarmony),
            (std::vector<std::string>{"<|channel|>commentary to=", "to=functions. (start)",
                                      "<|start|>assistant to=functions. (from 19)"}));
  // Each grammar begins with its trigger's text from where it skips to.
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  ToolChoice any;
  for (ToolFormat f : {ToolFormat::kHermes, ToolFormat::kMistral}) {
    const GrammarSpec g = tool_call_grammar(tools, f, any, true);
    EXPECT_TRUE((g.frame->open + g.frame->before).starts_with(tool_call_triggers(f)[0].text));
  }
  // Harmony's under auto: a case per tool and header (the channel's, the role's).
  const GrammarSpec h = tool_call_grammar(tools, ToolFormat::kHarmony, any, true);
  EXPECT_EQ(h.frame->case_before, (std::vector<std::string>{"<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
                                                            "to=functions.f<|channel|>commentary json<|message|>"}));
  EXPECT_EQ(tool_call_grammar(tools, ToolFormat::kHarmony, {ToolChoice::Kind::kRequired, ""}, true).frame->case_before.size(), 1u);
  for (const Request::Trigger& t : tool_call_triggers(ToolFormat::kHarmony)) {
    const std::string from = t.text.substr(t.skip);
    EXPECT_TRUE(h.frame->case_before[0].starts_with(from) || h.frame->case_before[1].starts_with(from)) << t.text;
  }
}

TEST(ToolCalls, SchemaMistakesNameTheirPlace) {
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})"), "");
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"address": {"properties": {"zip": {"type": "strng"}}}}})"),
            "at /properties/address/properties/zip/type: type \"strng\" is not a JSON type (string, number, integer, "
            "boolean, object, array, null)");
  EXPECT_EQ(schema_error(R"({"properties": {"a/b": {"pattern": "(["}}})"),
            "at /properties/a~1b/pattern: pattern \"([\" is not a regular expression: Regex parsing error at position "
            "3: Unclosed '['");
  EXPECT_EQ(schema_error(R"({"$defs": {"p": {}}, "anyOf": [{"$ref": "#/$defs/p"}, {"$ref": "#/$defs/q"}]})"),
            "at /anyOf/1/$ref: $ref \"#/$defs/q\" leads nowhere in this schema");
  EXPECT_EQ(schema_error(R"({"$ref": "http://example.com/s.json"})"),
            "at /$ref: $ref \"http://example.com/s.json\" is not inside this schema (only #/... references are read)");
  EXPECT_EQ(schema_error(R"({"type": "array", "items": {"type": "string", "minLength": -1}})"),
            "at /items/minLength: minLength must be a non-negative integer, not -1");
  EXPECT_EQ(schema_error(R"({"type": "array", "minItems": 3, "maxItems": 2})"), "at /: minItems 3 is above maxItems 2");
  EXPECT_EQ(schema_error(R"({"type": "number", "minimum": 5, "maximum": 1})"), "at /: minimum 5 is above maximum 1");
  EXPECT_EQ(schema_error(R"({"anyOf": []})"), "at /anyOf: anyOf must be a non-empty list of schemas");
  EXPECT_EQ(schema_error(R"({"properties": {"a": 3}})"), "at /properties/a: a schema must be an object or a boolean, not number");
  EXPECT_EQ(schema_error(R"({"required": "a"})"), "at /required: required must be a list of property names");
  EXPECT_EQ(schema_error("{"), "the schema is not valid JSON");
}

// What the grammar engine (xgrammar 0.2.8) would drop from a schema that
// constrains output, each seen to let invalid output through before it was
// refused: the keyword, where it is, why, and what to do.
TEST(ToolCalls, KeywordsTheEngineWouldDropAreRefused) {
  const std::string tail =
      " (the grammar engine cannot enforce it, so output could break the schema; docs/serving.md lists what it "
      "enforces)";
  const std::pair<const char*, std::string> refused[] = {
      {R"({"type": "integer", "not": {"const": 0}})", "at /not: not is not supported"},
      {R"({"type": "object", "properties": {"n": {"type": "integer"}}, "if": {"required": ["n"]}, "then": {}})",
       "at /if: if is not supported"},
      {R"({"type": "object", "dependentRequired": {"a": ["b"]}})", "at /dependentRequired: dependentRequired is not supported"},
      {R"({"type": "array", "contains": {"type": "integer"}})", "at /contains: contains is not supported"},
      {R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})",
       "at /properties/tags/uniqueItems: uniqueItems (items that all differ) is not supported"},
      {R"({"allOf": [{"type": "object", "required": ["a"]}, {"type": "object", "required": ["b"]}]})",
       "at /allOf: an allOf of 2 schemas is compiled as any JSON; merge them into one schema"},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}}, "anyOf": [{"type": "object"}]})",
       "at /type: type beside anyOf is ignored (only anyOf is compiled here); move it into each of anyOf's schemas"},
      {R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2})",
       "at /maxLength: maxLength beside $ref is ignored (only $ref is compiled here); move it into the schema referred to"},
      {R"({"enum": ["a", "bb"], "minLength": 2})",
       "at /minLength: minLength beside enum is ignored (only enum is compiled here); keep only the values it allows"},
      {R"({"type": "string", "enum": ["x", 1]})",
       "at /type: enum's value 1 is not of type \"string\", yet the engine compiles enum alone and would allow it; drop "
       "the value or the type"},
      {R"({"type": "number", "multipleOf": 0.5})",
       "at /multipleOf: multipleOf of a number is not supported (of an integer it is)"},
      {R"({"type": "integer", "multipleOf": 0.5})",
       "at /multipleOf: multipleOf 0.5 of an integer is not supported (a whole multiple is)"},
      {R"({"type": "string", "pattern": "[a-z]+", "maxLength": 2})",
       "at /maxLength: maxLength beside pattern is ignored (only the pattern is compiled); write the length into a pattern"},
      {R"({"type": ["string", "null"], "format": "email", "minLength": 5})",
       "at /minLength: minLength beside format \"email\" is ignored (only the pattern is compiled); write the length "
       "into a pattern"},
      {R"({"minLength": 5})",
       "at /minLength: minLength in a schema without \"type\" is ignored (any JSON is compiled); add the type it is for"},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]})",
       "at /required: required names \"b\", which properties does not define; define it there"},
      {R"({"properties": {}, "required": ["b"], "additionalProperties": false})",
       "at /required: required names \"b\", which properties does not define; define it there"},
      {R"({"$dynamicRef": "#node"})", "at /$dynamicRef: $dynamicRef is not supported"},
      {R"({"type": "object", "propertyNames": {"pattern": "^[a-c]$", "maxLength": 1}})",
       "at /propertyNames/maxLength: maxLength beside pattern is ignored (only the pattern is compiled); write the "
       "length into a pattern"},
      {R"({"anyOf": [{"required": ["a"]}, {"type": "null"}]})",
       "at /anyOf/0/required: required in a schema without \"type\" is ignored (any JSON is compiled); add the type it "
       "is for"},
  };
  for (const auto& [schema, message] : refused) {
    SCOPED_TRACE(schema);
    EXPECT_EQ(schema_error(schema), message + tail);
    EXPECT_EQ(schema_error(schema, SchemaUse::kDescription), "") << "a schema that only describes is not refused";
  }
  // What the engine does enforce, as clients write it.
  for (const char* ok : {
           R"({"type": "string", "enum": ["a", "b"]})",
           R"({"type": ["integer", "null"], "enum": [1, 2.0, null]})",
           R"({"type": "string", "const": "x", "description": "fixed"})",
           R"({"allOf": [{"$ref": "#/$defs/a"}], "description": "one schema", "$defs": {"a": {"type": "integer"}}})",
           R"({"$ref": "#/$defs/a", "title": "A", "default": 1, "$defs": {"a": {"type": "integer"}}})",
           R"({"anyOf": [{"type": "string"}, {"type": "null"}], "default": null})",
           R"({"type": "integer", "multipleOf": 3, "minimum": 0})",
           R"({"type": "string", "format": "password", "minLength": 8})",
           R"({"type": "string", "pattern": "^[a-z]{1,2}$", "minimum": 3})",
           R"({"type": "array", "items": {"type": "integer"}, "uniqueItems": false, "minItems": 1})",
           R"({"properties": {"a": {"type": "integer"}}, "required": ["a"]})",
           R"({"items": {"type": "string"}, "maxItems": 2})",
           R"({"description": "any JSON", "format": "anything"})",
           R"({"type": "object", "propertyNames": {"pattern": "^[a-c]$"}, "minProperties": 1})",
           R"({"type": "object", "properties": {"a": {}}, "required": ["a"], "additionalProperties": {"type": "integer"}})",
       }) {
    SCOPED_TRACE(ok);
    EXPECT_EQ(schema_error(ok), "");
  }
}

// A tool's parameters that refer into their own $defs (pydantic's nested
// models) keep resolving inside the call's schema: they move to its $defs,
// their references rebased; data values keep their text.
TEST(ToolCalls, ReferencesInsideParametersStillResolve) {
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"a": {"$ref": "#/$defs/A"}, "b": {"const": {"$ref": "#/x"}}}, "$defs": {"A": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "g", "parameters": {"$ref": "#/$defs/G", "$defs": {"G": {"type": "object",
      "properties": {"self": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}}}}}])");
  const GrammarSpec spec = tool_call_grammar(tools, ToolFormat::kHermes, {ToolChoice::Kind::kRequired, ""}, true);
  EXPECT_EQ(spec.text,
            R"({"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"$ref":"#/$defs/tool_0"}},"required":["name","arguments"],"additionalProperties":false},)"
            R"({"type":"object","properties":{"name":{"const":"g"},"arguments":{"$ref":"#/$defs/tool_1"}},"required":["name","arguments"],"additionalProperties":false}],)"
            R"("$defs":{"tool_0":{"type":"object","properties":{"a":{"$ref":"#/$defs/tool_0/$defs/A"},"b":{"const":{"$ref":"#/x"}}},"$defs":{"A":{"type":"integer"}}},)"
            R"("tool_1":{"$ref":"#/$defs/tool_1/$defs/G","$defs":{"G":{"type":"object","properties":{"self":{"anyOf":[{"$ref":"#/$defs/tool_1"},{"type":"null"}]}}}}}}})");
  EXPECT_EQ(schema_error(spec.text), "");
  // Without references the parameters stay in place (TheGrammarFramesEachFormat).
  const GrammarSpec named = tool_call_grammar(tools, ToolFormat::kHermes, {ToolChoice::Kind::kNamed, "f"}, true);
  EXPECT_EQ(schema_error(named.text), "");
  EXPECT_NE(named.text.find(R"("arguments":{"$ref":"#/$defs/tool_0"})"), std::string::npos) << named.text;
}

// Requests through the API parser, over the GPT-2 test vocabulary (its
// text round-trips byte for byte) and a real template.
class ChatRequests : public ::testing::Test {
 protected:
  static const Tokenizer& tok() { return test::gpt2_tokenizer(); }
  ApiRequest parse(const std::string& body, const std::string& template_name = "") {
    const ChatTemplate chat(template_name.empty() ? ChatTemplate::chatml_source() : template_source(template_name),
                            "", "<|endoftext|>");
    return parse_chat_request(body, test::api_limits(&chat));
  }
  std::string prompt(const std::string& body, const std::string& template_name = "") {
    return tok().decode(parse(body, template_name).engine.prompt);
  }
  ApiError error(const std::string& body) {
    try {
      parse(body);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << body;
    return {};
  }
  static std::string body(const std::string& extra) {
    return R"({"model": "m", "messages": [{"role": "user", "content": "Weather in Paris?"}])" + extra + "}";
  }
  static constexpr const char* kTools =
      R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
};

TEST_F(ChatRequests, ResponseFormatAndTheExtrasBecomeConstraints) {
  EXPECT_FALSE(parse(body(R"(, "response_format": {"type": "text"})")).constraint);
  const ApiRequest any = parse(body(R"(, "response_format": {"type": "json_object"})"));
  ASSERT_TRUE(any.constraint);
  EXPECT_EQ(any.constraint->kind, GrammarKind::kAnyJson);
  const ApiRequest schema = parse(
      body(R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}, "strict": true}})"));
  ASSERT_TRUE(schema.constraint);
  EXPECT_EQ(schema.constraint->kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(schema.constraint->text, R"({"type":"object"})");
  EXPECT_EQ(schema.constraint_param, "response_format");
  for (const char* name : {"regex", "guided_regex"}) {
    const ApiRequest r = parse(body(std::string(R"(, ")") + name + R"x(": "(yes|no)")x"));
    EXPECT_EQ(r.constraint->kind, GrammarKind::kRegex);
    EXPECT_EQ(r.constraint->text, "(yes|no)");
    EXPECT_EQ(r.constraint_param, name);
  }
  EXPECT_EQ(parse(body(R"(, "grammar": "root ::= \"a\"")")).constraint->kind, GrammarKind::kEbnf);
  EXPECT_EQ(parse(body(R"(, "guided_json": "{\"type\": \"string\"}")")).constraint->text, R"({"type":"string"})");
}

TEST_F(ChatRequests, BadConstraintsAre400sNamingTheField) {
  struct {
    const char* extra;
    const char* param;
    const char* message;
  } cases[] = {
      {R"(, "response_format": {"type": "yaml"})", "response_format.type",
       "response_format.type 'yaml' is not one of text, json_object, json_schema"},
      {R"(, "response_format": {"type": "json_schema"})", "response_format.json_schema",
       R"(response_format.json_schema must be {"name", "schema": {...}, "strict"})"},
      {R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": 3}})", "response_format.json_schema.schema",
       "response_format.json_schema.schema must be a JSON schema (an object)"},
      {R"(, "regex": "a", "grammar": "root ::= \"a\"")", "grammar",
       "give one constraint: regex and grammar both constrain the output"},
      {R"(, "tools": [{"type": "function", "function": {"name": "a b"}}])", "tools[0].function.name",
       "tools[0].function.name must be 1 to 64 letters, digits, _ or -"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "obj"}}}])",
       "tools[0].function.parameters",
       "tools[0].function.parameters: at /type: type \"obj\" is not a JSON type (string, number, integer, boolean, "
       "object, array, null)"},
      {R"(, "tools": [{"function": {"name": "f"}}, {"function": {"name": "f"}}])", "tools[1].function.name",
       "two tools are named 'f'"},
      {R"(, "tool_choice": "required")", "tool_choice", "tool_choice 'required' needs tools"},
      {R"(, "tools": [{"function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})",
       "tool_choice", "tool_choice names the function 'g', which is not in tools"},
      {R"(, "tools": [{"function": {"name": "f"}}], "tool_choice": "sometimes")", "tool_choice",
       "tool_choice 'sometimes' is not one of none, auto, required or a function"},
      {R"(, "tools": [{"function": {"name": "f"}}], "tool_choice": "required", "regex": "x")", "regex",
       "regex cannot be combined with a tool_choice that demands a call"},
      {R"(, "functions": [])", "functions", "functions is not supported (use tools)"},
      {R"(, "tools": [{"function": {"name": "f", "strict": "yes"}}])", "tools[0].function.strict",
       "tools[0].function.strict must be true or false"},
      // A demanded call's arguments are sampled under its schema: one the
      // engine would not enforce whole is refused, naming the tool.
      {R"(, "tools": [{"function": {"name": "f", "parameters": {"type": "object", "properties": {"s": {"type": "array",
           "uniqueItems": true}}}}}], "tool_choice": "required")",
       "tools[0].function.parameters",
       "tools[0].function.parameters: at /properties/s/uniqueItems: uniqueItems (items that all differ) is not "
       "supported (the grammar engine cannot enforce it, so output could break the schema; docs/serving.md lists what "
       "it enforces)"},
      // So is a strict tool's under auto: a call of it follows its schema.
      {R"(, "tools": [{"function": {"name": "f", "strict": true, "parameters": {"type": "object", "properties": {"s":
           {"type": "array", "uniqueItems": true}}}}}])",
       "tools[0].function.parameters",
       "tools[0].function.parameters: at /properties/s/uniqueItems: uniqueItems (items that all differ) is not "
       "supported (the grammar engine cannot enforce it, so output could break the schema; docs/serving.md lists what "
       "it enforces)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.extra);
    const ApiError e = error(body(c.extra));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_EQ(e.message, c.message);
  }
}

// The XML formats: the template's own XML instructions in the prompt, calls
// constrained to its elements, the parameters' kinds kept to read values back.
TEST_F(ChatRequests, XmlTemplatesGetXmlCalls) {
  for (const auto& [name, format, style, before, shown, trigger] :
       {std::tuple{"Qwen3-Coder", ToolFormat::kQwenXml, JsonFrame::Style::kParameters,
                   "<tool_call>\n<function=get_weather>\n", "<function=example_function_name>", "<tool_call>"},
        std::tuple{"GLM-4.6", ToolFormat::kGlmXml, JsonFrame::Style::kArgKeys, "<tool_call>get_weather", "<arg_key>",
                   "<tool_call>"},
        std::tuple{"MiniMax-M2", ToolFormat::kMiniMaxXml, JsonFrame::Style::kInvoke, "<invoke name=\"get_weather\">\n",
                   "<invoke name=\"tool-name-1\">", "<minimax:tool_call>"},
        std::tuple{"deepseek-ai-DeepSeek-V3.2", ToolFormat::kDsml, JsonFrame::Style::kDsml,
                   "<\uff5cDSML\uff5cinvoke name=\"get_weather\">\n", "<\uff5cDSML\uff5cinvoke name=\"$FUNCTION_NAME\">",
                   "<\uff5cDSML\uff5cfunction_calls>"},
        std::tuple{"ByteDance-Seed-OSS", ToolFormat::kSeedXml, JsonFrame::Style::kParameters,
                   "<seed:tool_call>\n<function=get_weather>\n", "<function=example_function_name>", "<seed:tool_call>"},
        std::tuple{"deepseek-ai-DeepSeek-V4", ToolFormat::kDsmlV4, JsonFrame::Style::kDsml,
                   "<\uff5cDSML\uff5cinvoke name=\"get_weather\">\n", "<\uff5cDSML\uff5cinvoke name=\"$TOOL_NAME\">",
                   "<\uff5cDSML\uff5ctool_calls>"}}) {
    SCOPED_TRACE(name);
    const std::string p = prompt(body(kTools), name);
    EXPECT_NE(p.find(shown), std::string::npos) << p;
    EXPECT_NE(p.find("get_weather"), std::string::npos) << p;
    const ApiRequest r = parse(body(std::string(kTools) + R"(, "tool_choice": "required")"), name);
    EXPECT_EQ(r.tool_format, format);
    ASSERT_TRUE(r.constraint && r.constraint->frame);
    EXPECT_EQ(r.constraint->frame->style, style);
    ASSERT_EQ(r.constraint->frame->case_before.size(), 1u);
    EXPECT_EQ(r.constraint->frame->case_before[0], before);
    ASSERT_TRUE(r.param_types);
    EXPECT_EQ(r.param_types->at("get_weather").at("city"), "string");
    const ApiRequest a = parse(body(kTools), name);
    ASSERT_EQ(a.engine.grammar_triggers.size(), 1u);
    EXPECT_EQ(a.engine.grammar_triggers[0].text, trigger);
  }
}

TEST_F(ChatRequests, KimisTemplateGetsKimisCalls) {
  const std::string p = prompt(body(kTools), "Kimi-K2-Instruct");
  EXPECT_NE(p.find("tool_declare"), std::string::npos) << p;
  EXPECT_NE(p.find("get_weather"), std::string::npos) << p;
  const ApiRequest r = parse(body(std::string(kTools) + R"(, "tool_choice": "required")"), "Kimi-K2-Instruct");
  EXPECT_EQ(r.tool_format, ToolFormat::kKimi);
  ASSERT_TRUE(r.constraint && r.constraint->frame);
  EXPECT_EQ(r.constraint->frame->open, "<|tool_calls_section_begin|>");
  ASSERT_EQ(r.constraint->frame->case_before.size(), 1u);
  EXPECT_EQ(r.constraint->frame->case_before[0], "<|tool_call_begin|>functions.get_weather:");
  EXPECT_EQ(r.constraint->frame->numbered, "<|tool_call_argument_begin|>");
  const ApiRequest a = parse(body(kTools), "Kimi-K2-Instruct");
  ASSERT_EQ(a.engine.grammar_triggers.size(), 1u);
  EXPECT_EQ(a.engine.grammar_triggers[0].text, "<|tool_calls_section_begin|>");
}

TEST_F(ChatRequests, ATemplateWithToolsRendersThemItself) {
  const std::string p = prompt(body(kTools), "Qwen-Qwen2.5-7B-Instruct");
  EXPECT_NE(p.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\""), std::string::npos) << p;
  EXPECT_EQ(p.find("You can call tools"), std::string::npos);
  const ApiRequest r = parse(body(std::string(kTools) + R"(, "tool_choice": "required")"), "Qwen-Qwen2.5-7B-Instruct");
  EXPECT_TRUE(r.tools);
  ASSERT_TRUE(r.constraint);
  EXPECT_EQ(r.constraint->frame->before, "<tool_call>");
  EXPECT_EQ(r.constraint_param, "tools");
  // Under tool_choice auto the model may answer or call, and a call it
  // begins is constrained from its marker on (Request::grammar_triggers).
  // A schema the engine could not enforce whole is no reason to refuse a
  // tool that is not strict: calls of it take any JSON object.
  const std::string loose =
      R"(, "tools": [{"function": {"name": "f", "parameters": {"type": "array", "uniqueItems": true}}},
                     {"function": {"name": "g"}}])";
  const ApiRequest a = parse(body(loose), "Qwen-Qwen2.5-7B-Instruct");
  ASSERT_TRUE(a.constraint);
  EXPECT_EQ(a.constraint_param, "tools");
  EXPECT_EQ(a.constraint->text,
            R"({"anyOf":[{"type":"object","properties":{"name":{"const":"f"},"arguments":{"type":"object",)"
            R"("additionalProperties":true}},"required":["name","arguments"],"additionalProperties":false},)"
            R"({"type":"object","properties":{"name":{"const":"g"},"arguments":{"type":"object","properties":{},)"
            R"("additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false}]})");
  EXPECT_EQ(a.constraint->frame->before, "<tool_call>");
  EXPECT_EQ(a.constraint->frame->max_items, 0);
  ASSERT_EQ(a.engine.grammar_triggers.size(), 1u);
  EXPECT_EQ(a.engine.grammar_triggers[0].text, "<tool_call>");
  EXPECT_FALSE(a.engine.grammar_triggers[0].at_start);
  // Ours, not the client's: dropped where it does not compile in time;
  // unless a tool is strict.
  EXPECT_TRUE(a.constraint_optional);
  EXPECT_FALSE(parse(body(R"(, "tools": [{"function": {"name": "g", "strict": true}}])"), "Qwen-Qwen2.5-7B-Instruct")
                   .constraint_optional);
  // A demanded call has no triggers: the grammar is the reply's from its start.
  const ApiRequest named =
      parse(body(loose + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})"), "Qwen-Qwen2.5-7B-Instruct");
  EXPECT_TRUE(named.constraint);
  EXPECT_TRUE(named.engine.grammar_triggers.empty());
  EXPECT_FALSE(named.constraint_optional);
  // Beside a JSON response_format the reply is the answer in that format
  // or calls, from its start; beside a regex, the regex's.
  const ApiRequest formatted = parse(body(std::string(kTools) + R"(, "response_format": {"type": "json_object"})"),
                                     "Qwen-Qwen2.5-7B-Instruct");
  EXPECT_EQ(formatted.constraint->kind, GrammarKind::kAnyJson);
  EXPECT_EQ(formatted.constraint_param, "response_format");
  ASSERT_TRUE(formatted.constraint->or_else);
  EXPECT_EQ(formatted.constraint->or_else->frame->before, "<tool_call>");
  EXPECT_TRUE(formatted.engine.grammar_triggers.empty());
  EXPECT_FALSE(formatted.constraint_optional);
  const ApiRequest regex = parse(body(std::string(kTools) + R"(, "regex": "[a-z]+")"), "Qwen-Qwen2.5-7B-Instruct");
  EXPECT_EQ(regex.constraint->kind, GrammarKind::kRegex);
  EXPECT_FALSE(regex.constraint->or_else);
  EXPECT_TRUE(regex.engine.grammar_triggers.empty());
  // Nothing is constrained without tools or with tool_choice none.
  EXPECT_FALSE(parse(body(std::string(kTools) + R"(, "tool_choice": "none")"), "Qwen-Qwen2.5-7B-Instruct").constraint);
  EXPECT_FALSE(parse(body(""), "Qwen-Qwen2.5-7B-Instruct").constraint);
}

// Under auto, a thinking model's thought is watched so that a marker it
// writes there is no call: the grammar waits for the answer (Qwen 3's
// <think>, harmony's analysis message, after which the next message's start
// is written as the template writes it).
// tool_choice allowed_tools: every tool stays in the prompt (the same text
// whatever the subset, so requests that vary it share its prefix), and the
// calls may name only the allowed ones: under mode auto from the call's
// marker (the client's restriction: never dropped), under required from the
// reply's start.
TEST_F(ChatRequests, AllowedToolsNarrowTheCallsNotThePrompt) {
  const std::string two =
      R"(, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
           "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
                     {"type": "function", "function": {"name": "get_time"}}])";
  const std::string qwen = "Qwen-Qwen2.5-7B-Instruct";
  const auto allowed = [&](const std::string& mode, const std::string& names) {
    return two + R"(, "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": ")" + mode +
           R"(", "tools": [)" + names + "]}}";
  };
  const std::string time = R"({"type": "function", "function": {"name": "get_time"}})";
  const std::string get_time_only =
      R"({"type":"object","properties":{"name":{"const":"get_time"},"arguments":{"type":"object",)"
      R"("properties":{},"additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false})";
  const ApiRequest all = parse(body(two), qwen);
  const ApiRequest a = parse(body(allowed("auto", time)), qwen);
  EXPECT_EQ(a.engine.prompt, all.engine.prompt);
  ASSERT_TRUE(a.constraint);
  EXPECT_EQ(a.constraint->text, get_time_only);
  ASSERT_EQ(a.engine.grammar_triggers.size(), 1u);
  EXPECT_EQ(a.engine.grammar_triggers[0].text, "<tool_call>");
  EXPECT_FALSE(a.constraint_optional);
  EXPECT_TRUE(all.constraint_optional);
  const ApiRequest r = parse(body(allowed("required", time)), qwen);
  EXPECT_EQ(r.engine.prompt, all.engine.prompt);
  ASSERT_TRUE(r.constraint);
  EXPECT_EQ(r.constraint->text, get_time_only);
  EXPECT_TRUE(r.engine.grammar_triggers.empty());
  // Both allowed: the same grammar as tool_choice required.
  const ApiRequest both = parse(body(allowed("required", time + R"(, {"type": "function", "function": {"name": "get_weather"}})")), qwen);
  EXPECT_EQ(both.constraint->text, parse(body(two + R"(, "tool_choice": "required")"), qwen).constraint->text);
  // A tool left out is only described: its schema need not be enforceable.
  const std::string loose = R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array",
      "uniqueItems": true}}}, {"type": "function", "function": {"name": "g"}}], "tool_choice": {"type": "allowed_tools",
      "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "g"}}]}})";
  EXPECT_NO_THROW(parse(body(loose), qwen));
  // So is a strict tool's left out (a call of it cannot be made); a strict
  // one allowed is enforced whole, as under auto.
  const std::string strict = R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters":
      {"type": "array", "uniqueItems": true}}}, {"type": "function", "function": {"name": "g"}}], "tool_choice":
      {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": ")";
  EXPECT_NO_THROW(parse(body(strict + R"(g"}}]}})"), qwen));
  EXPECT_EQ(error(body(strict + R"(f"}}]}})")).param, "tools[0].function.parameters");
  struct Case {
    std::string choice, param, message;
  } cases[] = {
      {R"({"type": "allowed_tools"})", "tool_choice.allowed_tools",
       "tool_choice.allowed_tools must be an object with mode and tools"},
      {R"({"type": "allowed_tools", "allowed_tools": {"mode": "any", "tools": [{"type": "function", "function": {"name": "get_time"}}]}})",
       "tool_choice.allowed_tools.mode", "tool_choice.allowed_tools.mode must be auto or required"},
      {R"({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}})", "tool_choice.allowed_tools.tools",
       "tool_choice.allowed_tools.tools must be a non-empty list of tools"},
      {R"({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]}})",
       "tool_choice.allowed_tools.tools[0]",
       "tool_choice.allowed_tools.tools[0] names the function 'nope', which is not in tools"},
      {R"({"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [{"type": "mcp", "server_label": "x"}]}})",
       "tool_choice.allowed_tools.tools[0]",
       R"(tool_choice.allowed_tools.tools[0] must be {"type": "function", "function": {"name"}})"},
  };
  for (const Case& c : cases) {
    const ApiError e = error(body(two + R"(, "tool_choice": )" + c.choice));
    EXPECT_EQ(e.status, 400) << c.choice;
    EXPECT_EQ(e.param, c.param) << c.choice;
    EXPECT_EQ(e.message, c.message) << c.choice;
  }
  EXPECT_EQ(error(body(R"(, "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}})")).message,
            "tool_choice allowed_tools needs tools");
}

TEST_F(ChatRequests, UnderAutoACallIsLookedForAfterTheThought) {
  const ApiRequest q = parse(body(kTools), "Qwen-Qwen3-0.6B");
  ASSERT_TRUE(q.reasoning);
  ASSERT_TRUE(q.constraint);
  EXPECT_TRUE(q.engine.grammar_after_thought);
  ASSERT_EQ(q.engine.grammar_triggers.size(), 1u);
  EXPECT_EQ(q.engine.grammar_triggers[0].text, "<tool_call>");
  const ApiRequest h = parse(body(kTools), "openai-gpt-oss-120b");
  ASSERT_TRUE(h.channels);
  EXPECT_TRUE(h.engine.grammar_after_thought);
  EXPECT_EQ(h.engine.think_start, "<|channel|>analysis<|message|>");
  EXPECT_EQ(tok().decode(h.engine.think_resume), "<|start|>assistant");
  ASSERT_EQ(h.engine.grammar_triggers.size(), 3u);
  EXPECT_EQ(h.engine.grammar_triggers[0].text, "<|channel|>commentary to=");
  EXPECT_EQ(h.constraint->frame->case_before[0], "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
  // Beside a response_format: the final channel's answer, or a call in the
  // channel's header (the role's is written with the triggers only).
  const ApiRequest hf = parse(body(std::string(kTools) + R"(, "response_format": {"type": "json_object"})"),
                              "openai-gpt-oss-120b");
  EXPECT_EQ(hf.constraint->frame->open, "<|channel|>final<|message|>");
  ASSERT_TRUE(hf.constraint->or_else);
  EXPECT_EQ(hf.constraint->or_else->frame->case_before,
            std::vector<std::string>{"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"});
  EXPECT_TRUE(hf.engine.grammar_triggers.empty());
  const ApiRequest l = parse(body(kTools), "meta-llama-Llama-3.1-8B-Instruct");
  EXPECT_FALSE(l.engine.grammar_after_thought);
  ASSERT_EQ(l.engine.grammar_triggers.size(), 2u);
  EXPECT_TRUE(l.engine.grammar_triggers[0].at_start);
}

// A file may name a template for conversations that offer tools
// (tokenizer.chat_template.tool_use, as Hermes 3's does): those render with
// it and their calls are in its format; the others keep the file's default.
TEST_F(ChatRequests, AToolTemplateServesTheConversationsThatOfferTools) {
  const ChatTemplate chat(ChatTemplate::chatml_source(), "", "<|endoftext|>");
  const ChatTemplate for_tools(template_source("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"), "", "<|endoftext|>");
  ApiLimits lim = test::api_limits(&chat);
  add_tool_template(lim, for_tools);
  ASSERT_EQ(lim.chat_tools, &for_tools);
  const auto text = [&](const ApiRequest& r) { return tok().decode(r.engine.prompt); };
  const ApiRequest offered = parse_chat_request(body(std::string(kTools) + R"(, "tool_choice": "required")"), lim);
  EXPECT_EQ(text(offered).rfind("<|im_start|>system\nYou are a function calling AI model.", 0), 0u) << text(offered);
  EXPECT_NE(text(offered).find(R"({"name": "get_weather", "description": "get_weather(city: str))"), std::string::npos);
  EXPECT_TRUE(offered.tools);
  EXPECT_EQ(offered.tool_format, ToolFormat::kHermes);
  ASSERT_TRUE(offered.constraint);
  EXPECT_EQ(offered.constraint->frame->before, "<tool_call>");
  // Without tools, or with tool_choice none, the default template: ChatML
  // and nothing of the tools.
  for (const std::string& extra : {std::string(), std::string(kTools) + R"(, "tool_choice": "none")"}) {
    const ApiRequest plain = parse_chat_request(body(extra), lim);
    EXPECT_EQ(text(plain), "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n") << extra;
    EXPECT_FALSE(plain.tools);
  }
  // Command R's calls are in a format we do not read: its tools keep the
  // default template's generic description.
  const ChatTemplate command_r(template_source("CohereForAI-c4ai-command-r-plus-tool_use"), "", "<|endoftext|>");
  ApiLimits cr = test::api_limits(&chat);
  add_tool_template(cr, command_r);
  EXPECT_EQ(cr.chat_tools, nullptr);
  EXPECT_NE(text(parse_chat_request(body(kTools), cr)).find("You can call tools"), std::string::npos);
}

// A tool without description or parameters (OpenAI makes both optional):
// a template that fails on it in jinja2 (Hermes 3's adds the description to
// a string) renders it with "" and an empty parameter list; one that takes
// it as sent renders it as sent (jinja2's prompt).
TEST_F(ChatRequests, AToolWithoutDescriptionOrParametersRendersEverywhere) {
  const std::string bare = R"(, "tools": [{"type": "function", "function": {"name": "now"}}])";
  const std::string hermes = prompt(body(bare), "NousResearch-Hermes-3-Llama-3.1-8B-tool_use");
  EXPECT_NE(hermes.find(R"(<tools> {"type": "function", "function": {"name": "now", "description": "now() - )"),
            std::string::npos)
      << hermes;
  EXPECT_TRUE(parse(body(bare + R"(, "tool_choice": "required")"), "NousResearch-Hermes-3-Llama-3.1-8B-tool_use").tools);
  const std::string qwen = prompt(body(bare), "Qwen-Qwen2.5-7B-Instruct");
  EXPECT_NE(qwen.find("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"now\"}}\n</tools>"), std::string::npos)
      << qwen;
  for (const char* name : {"openai-gpt-oss-120b", "meetkai-functionary-medium-v3.1", "Apertus-8B-Instruct",
                           "ByteDance-Seed-OSS", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "muse-glimmer",
                           "Cohere2MoE", "CohereForAI-c4ai-command-r7b-12-2024-tool_use"}) {
    SCOPED_TRACE(name);
    EXPECT_NE(prompt(body(bare), name).find("now"), std::string::npos);
  }
  // A template that refuses for another reason answers its own error (Command
  // R+'s takes no `tools`, so it finds none to loop over).
  const ApiError e = [&] {
    try {
      parse(body(bare), "CohereForAI-c4ai-command-r-plus-tool_use");
    } catch (const ApiError& e) {
      return e;
    }
    return ApiError{};
  }();
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "the model's chat template refused the conversation: 'NoneType' object is not iterable (template line 142)")
      << e.message;
}

TEST_F(ChatRequests, OtherwiseTheGenericFormatDescribesThem) {
  const std::string p = prompt(body(kTools));
  EXPECT_EQ(p.rfind("<|im_start|>system\nYou can call tools (functions). Their definitions, as JSON:\n<tools>\n"
                    R"({"type":"function","function":{"name":"get_weather","description":"Weather now",)",
                    0),
            0u)
      << p;
  // tool_choice none: no tools in the prompt, no calls parsed.
  const ApiRequest none = parse(body(std::string(kTools) + R"(, "tool_choice": "none")"));
  EXPECT_FALSE(none.tools);
  EXPECT_EQ(tok().decode(none.engine.prompt).find("<tools>"), std::string::npos);
  // A system message gets the description after its own text.
  const std::string with_system = prompt(
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])" +
      std::string(kTools) + "}");
  EXPECT_EQ(with_system.rfind("<|im_start|>system\nBe brief.\n\nYou can call tools", 0), 0u) << with_system;
}

TEST_F(ChatRequests, TheGenericFormatWritesPastCallsAsText) {
  const std::string p = prompt(R"({"model": "m", "messages": [
      {"role": "user", "content": "Weather in Paris and Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
      {"role": "tool", "tool_call_id": "c2", "content": "9 C"}]})");
  EXPECT_NE(p.find("<|im_start|>assistant\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}"
                   "</tool_call>\n<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>"
                   "<|im_end|>\n<|im_start|>user\n<tool_response>18 C</tool_response>\n<tool_response>9 C"
                   "</tool_response><|im_end|>\n<|im_start|>assistant\n"),
            std::string::npos)
      << p;
}

}  // namespace
}  // namespace cs
