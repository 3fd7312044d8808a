// Tool calling (OpenAI's `tools`): the model's own format for calls, found
// from its chat template; a documented generic format for a template that
// takes no tools; the grammar that makes a call valid by construction
// (tool_choice "required" or a named function); and the calls parsed back
// out of the generated text. Pure functions; docs/tool_calls.md describes
// the formats.
#pragma once
#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "grammar/grammar.h"

namespace cs {

// How a model writes calls.
//   kHermes:  <tool_call>{"name": ..., "arguments": {...}}</tool_call>, one
//             block per call (Hermes, Qwen 2/2.5/3, SmolLM3, and the generic
//             format).
//   kLlama3:  {"name": ..., "parameters": {...}} as the whole reply, after
//             an optional <|python_tag|> (Llama 3.1-3.3).
//   kMistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (Mistral).
//   kHarmony: a message to the function, its JSON arguments the body
//             (gpt-oss): <|channel|>commentary to=functions.NAME <|constrain|>json
//             <|message|>{...}<|call|>, or the recipient in the role header;
//             server/reasoning.h's split hands each such message on as
//             <|channel|>commentary to=functions.NAME<|message|>{...}<|call|>.
//   kQwenXml: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n
//             ...</function>\n</tool_call>, a string's value as it is and any
//             other type's as JSON (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano,
//             Step 3.5).
//   kGlmXml:  <tool_call>NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>
//             ...</tool_call> (newlines between the tags or not), values as
//             kQwenXml's (GLM-4.6/4.7, Ling 3.0, Laguna, Spark 2.5).
//   kMiniMaxXml: one <minimax:tool_call> block holding every call, each
//             <invoke name="NAME"><parameter name="KEY">VALUE</parameter>
//             ...</invoke>, values as kGlmXml's (MiniMax M2).
//   kDsml:    the same in DeepSeek's tags: <｜DSML｜function_calls> around
//             <｜DSML｜invoke name="NAME"> calls, each parameter
//             <｜DSML｜parameter name="KEY" string="true|false">, "true"
//             where the value is text (DeepSeek V3.2).
//   kDsmlV4:  kDsml with <｜DSML｜tool_calls> around the calls (DeepSeek V4).
//   kSeedXml: kQwenXml in a <seed:tool_call> block, values as kGlmXml's
//             (Seed-OSS).
//   kKimi:    <|tool_calls_section_begin|> holding every call, each
//             <|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>
//             {...}<|tool_call_end|>, then <|tool_calls_section_end|> (Kimi K2;
//             INDEX counts the conversation's calls, which the template
//             writes again itself).
enum class ToolFormat { kHermes, kLlama3, kMistral, kHarmony, kQwenXml, kGlmXml, kMiniMaxXml, kDsml, kDsmlV4, kSeedXml, kKimi };

// The formats whose calls are XML elements, a parameter per element.
inline bool xml_format(ToolFormat f) {
  return f == ToolFormat::kQwenXml || f == ToolFormat::kGlmXml || f == ToolFormat::kMiniMaxXml || f == ToolFormat::kDsml ||
         f == ToolFormat::kDsmlV4 || f == ToolFormat::kSeedXml;
}

struct ToolSyntax {
  ToolFormat format = ToolFormat::kHermes;
  // The template renders `tools` itself; else the generic format describes
  // them in a system message and writes calls and results as text.
  bool template_takes_tools = false;
};

// From the template's source: which format its markup uses.
ToolSyntax tool_syntax(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

struct ToolChoice {
  enum class Kind { kNone, kAuto, kRequired, kNamed } kind = Kind::kAuto;
  std::string name;  // kNamed
  // OpenAI's allowed_tools (kAuto, kRequired): the tools calls may name,
  // a subset of those the prompt shows (all of them stay in the prompt, so
  // it stays the same text, and shares its prefix, whatever the subset).
  // Empty: every tool.
  std::vector<std::string> allowed = {};
  bool allows(const std::string& tool) const {
    return allowed.empty() || std::find(allowed.begin(), allowed.end(), tool) != allowed.end();
  }
};

// The generic format's system text: the tools as JSON and how to call them.
std::string generic_tools_text(const nlohmann::ordered_json& tools);
// A past call as the generic format writes it into an assistant turn.
std::string generic_call_text(const std::string& name, const nlohmann::ordered_json& arguments);

// A function's parameters (tools[i].function); left out, an empty parameter
// list, as OpenAI defines it: what a template is shown where it needs them
// and what a demanded call's arguments must be ({}).
nlohmann::ordered_json tool_parameters(const nlohmann::ordered_json& function);

// A grammar for the calls the choice demands (kRequired: any of the tools;
// kNamed: that one; kAuto: any of them, once the reply begins a call, by
// tool_call_triggers): each call's name is one of them and its arguments
// follow that tool's parameter schema. parallel: one or more calls, else one
// (kHarmony: one, the model's turn ends at its <|call|>).
GrammarSpec tool_call_grammar(const nlohmann::ordered_json& tools, ToolFormat f, const ToolChoice& choice,
                              bool parallel);

// Where a call begins in a reply that may or may not make one (tool_choice
// "auto"): the texts from which tool_call_grammar constrains the rest of
// the reply (Request::grammar_triggers). Hermes: <tool_call>; Mistral:
// [TOOL_CALLS]; Llama 3: a reply that opens with {"name" or <|python_tag|>;
// harmony: a message to a recipient (<|channel|>commentary to=).
std::vector<Request::Trigger> tool_call_triggers(ToolFormat f);

// Each tool's parameters' kinds, from their schemas: the XML formats write
// a plain string's value as its text alone, a constrained string's (enum,
// const, pattern, format, length; a bounded length's without '<') as text
// between optional whitespace ("text"), and any other's as JSON between
// optional whitespace (its JSON type; "" where the schema names none), so
// reading a value back needs its kind.
using ParamTypes = std::map<std::string, std::map<std::string, std::string>>;
ParamTypes param_types(const nlohmann::ordered_json& tools);
// A Qwen XML parameter's value (the text between its tags) as JSON text: a
// "string" as it is, one newline at each end dropped (the template writes
// them); a "text" trimmed; any other trimmed and parsed as JSON (a string
// if it does not parse).
// newlines false (GLM's): a "string" as it is, newlines and all.
std::string xml_value_json(std::string_view raw, std::string_view type, bool newlines = true);
// DSML's kind of a value whose tag says it is text (string="true") or not:
// its schema's kind where the two agree; else "string" for text, "" (JSON,
// or a string where it does not parse) for the rest.
std::string dsml_kind(bool text, const std::string& schema_kind);

// The XML formats' tags: a block (block_open ... block_close) around each
// call, or around all of a reply's calls (one_block); in a call its name
// (between name_open and name_close; GLM's, with no name_open, up to a tag
// or a newline), then each parameter's key between key_open and key_close
// (DSML's: then string_true or string_false), value_open (GLM's), its
// value, value_close; the call's end (Qwen's </function>, then the
// block's close; GLM's the block's close; the invoke family's </invoke>).
struct XmlTags {
  std::string_view block_open, block_close, name_open, name_close;
  std::string_view key_open, key_close, value_open, value_close, call_end;
  bool newlines;   // one newline at each end of a string's value is markup (Qwen's)
  bool one_block;  // one block holds every call
  std::string_view string_true = {}, string_false = {};  // DSML's attribute after the key
};
const XmlTags& xml_tags(ToolFormat f);  // an xml_format
// A JSON string's text between its quotes, for text as it is.
std::string json_escape(std::string_view text);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as compact text, as OpenAI sends it
  // The arguments closed; a reply cut short inside them (server/call_stream.h)
  // leaves them as far as they got.
  bool complete = true;
};

struct ParsedReply {
  std::string content;  // the text outside the calls (trimmed)
  std::vector<ToolCall> calls;
};

// The calls in a reply. Text that only looks like a call (JSON that does not
// parse, no name) stays content: nothing the model wrote is dropped. types:
// the Qwen XML format's (null: every value read without one).
ParsedReply parse_tool_calls(std::string_view text, ToolFormat f, const ParamTypes* types = nullptr);

// The formats' markup, as the model writes it.
inline constexpr std::string_view kHermesOpen = "<tool_call>", kHermesClose = "</tool_call>";
inline constexpr std::string_view kMistralMarker = "[TOOL_CALLS]", kPythonTag = "<|python_tag|>";
inline constexpr std::string_view kXmlFunction = "<function=", kXmlFunctionEnd = "</function>",
                                  kXmlParameter = "<parameter=", kXmlParameterEnd = "</parameter>";
inline constexpr std::string_view kHarmonyChannel = "<|channel|>", kHarmonyMessage = "<|message|>",
                                  kHarmonyCall = "<|call|>";
inline constexpr std::string_view kKimiSection = "<|tool_calls_section_begin|>",
                                  kKimiSectionEnd = "<|tool_calls_section_end|>", kKimiCall = "<|tool_call_begin|>",
                                  kKimiArguments = "<|tool_call_argument_begin|>", kKimiCallEnd = "<|tool_call_end|>";
// A Kimi call's name from its id: functions.NAME:INDEX (either part may be
// missing); "" for none.
std::string kimi_name(std::string_view id);

// Where `marker` begins in text, or a beginning of it at the text's end (a
// marker still being streamed); npos for neither.
size_t marker_start(std::string_view text, std::string_view marker);

}  // namespace cs
