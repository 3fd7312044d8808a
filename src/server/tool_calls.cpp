#include "server/tool_calls.h"

#include <algorithm>
#include <optional>

#include "base/json_depth.h"
#include "grammar/xml_kind.h"
#include "server/reasoning.h"

namespace cs {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kChannel = kHarmonyChannel, kMessage = kHarmonyMessage, kCall = kHarmonyCall;
constexpr std::string_view kRoleTo = "<|start|>assistant to=functions.";  // a message's role naming its recipient

bool space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// A call from {"name": ..., "arguments"|"parameters": {...} or its JSON text}.
std::optional<ToolCall> call_of(const ojson& j) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ojson args = ojson::object();
  for (const char* k : {"arguments", "parameters"})
    if (j.contains(k)) args = j[k];
  if (args.is_string()) {
    if (json_nesting(args.get<std::string>()) > kMaxJsonNesting) return std::nullopt;
    args = ojson::parse(args.get<std::string>(), nullptr, false);
  }
  if (args.is_null()) args = ojson::object();
  if (!args.is_object()) return std::nullopt;
  return ToolCall{j["name"].get<std::string>(), args.dump(-1, ' ', false, ojson::error_handler_t::replace)};
}

// A JSON object's compact text (harmony's and Kimi's arguments, the body
// alone), or nullopt for anything else or deeper than a request may nest.
std::optional<std::string> object_text(std::string_view text) {
  if (json_nesting(text) > kMaxJsonNesting) return std::nullopt;
  const ojson j = ojson::parse(trim(text), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// The model's text is read as calls only where it nests no deeper than a
// request may (dumping the arguments recurses once per level).
std::optional<ToolCall> parse_call(std::string_view text) {
  if (json_nesting(text) > kMaxJsonNesting) return std::nullopt;
  const ojson j = ojson::parse(trim(text), nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return call_of(j);
}

// Calls from a JSON list of call objects; nullopt unless every item is one.
std::optional<std::vector<ToolCall>> parse_call_list(std::string_view text) {
  if (json_nesting(text) > kMaxJsonNesting) return std::nullopt;
  const ojson j = ojson::parse(trim(text), nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const ojson& x : j) {
    auto c = call_of(x);
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
  }
  return calls;
}

void append_content(std::string& content, std::string_view piece) {
  piece = trim(piece);
  if (piece.empty()) return;
  if (!content.empty()) content += '\n';
  content += piece;
}

ParsedReply parse_llama3(std::string_view text) {
  std::string_view t = trim(text);
  if (t.starts_with(kPythonTag)) t = trim(t.substr(kPythonTag.size()));
  if (auto c = parse_call(t)) return {"", {std::move(*c)}};
  // Several calls joined by ';'.
  std::vector<ToolCall> calls;
  size_t at = 0;
  while (at <= t.size()) {
    const size_t semi = t.find(';', at);
    const size_t end = semi == std::string_view::npos ? t.size() : semi;
    auto c = parse_call(t.substr(at, end - at));
    if (!c) return {std::string(trim(text)), {}};
    calls.push_back(std::move(*c));
    at = end + 1;
  }
  return {"", std::move(calls)};
}

ParsedReply parse_mistral(std::string_view text) {
  const size_t m = text.find(kMistralMarker);
  const std::string_view before = m == std::string_view::npos ? std::string_view() : text.substr(0, m);
  const std::string_view rest = m == std::string_view::npos ? text : text.substr(m + kMistralMarker.size());
  if (auto calls = parse_call_list(rest)) return {std::string(trim(before)), std::move(*calls)};
  return {std::string(trim(text)), {}};
}

// Harmony: each <|channel|>HEADER<|message|>ARGS<|call|> block whose header
// names a recipient (to=functions.NAME; "functions." is dropped) and whose
// body is a JSON object is a call; anything else stays content as written.
ParsedReply parse_harmony(std::string_view text) {
  ParsedReply r;
  std::string content;
  size_t at = 0;
  for (;;) {
    const size_t open = text.find(kChannel, at);
    if (open == std::string_view::npos) break;
    append_content(content, text.substr(at, open - at));
    const size_t msg = text.find(kMessage, open);
    if (msg == std::string_view::npos) {
      at = open;
      break;
    }
    const std::string_view header = text.substr(open + kChannel.size(), msg - open - kChannel.size());
    const size_t body = msg + kMessage.size();
    const size_t stop = std::min({text.find(kCall, body), text.find(kChannel, body), text.size()});
    const size_t end = text.substr(stop, kCall.size()) == kCall ? stop + kCall.size() : stop;
    std::string_view name = harmony_recipient(header);
    if (name.starts_with("functions.")) name.remove_prefix(10);
    std::optional<std::string> args;
    if (!name.empty()) args = object_text(text.substr(body, stop - body));
    if (args) r.calls.push_back({std::string(name), std::move(*args)});
    else append_content(content, text.substr(open, end - open));
    at = end;
  }
  append_content(content, text.substr(std::min(at, text.size())));
  r.content = std::move(content);
  return r;
}

// One XML call at the start of s (after whitespace): its name, its
// parameters, its end; s is left after it. nullopt for anything else. A
// call that ends with its block (GLM's) ends with s.
std::optional<ToolCall> read_xml_call(std::string_view& s, const ParamTypes* types, const XmlTags& t) {
  std::string_view body = trim(s);
  size_t name_at = 0, name_end = 0, after = 0;
  if (!t.name_open.empty()) {
    if (!body.starts_with(t.name_open)) return std::nullopt;
    name_at = t.name_open.size();
    name_end = body.find(t.name_close, name_at);
    if (name_end == std::string_view::npos) return std::nullopt;
    after = name_end + t.name_close.size();
  } else {
    name_end = after = std::min(body.find('<'), body.size());
  }
  ToolCall call{std::string(trim(body.substr(name_at, name_end - name_at))), "{"};
  if (call.name.empty() || call.name.find('\n') != std::string::npos) return std::nullopt;
  const std::map<std::string, std::string>* params = nullptr;
  if (types)
    if (auto it = types->find(call.name); it != types->end()) params = &it->second;
  std::string_view rest = trim(body.substr(after));
  bool first = true;
  while (rest.starts_with(t.key_open)) {
    const size_t key_end = rest.find(t.key_close, t.key_open.size());
    if (key_end == std::string_view::npos) return std::nullopt;
    const std::string key(rest.substr(t.key_open.size(), key_end - t.key_open.size()));
    std::string_view value = rest.substr(key_end + t.key_close.size());
    std::string type;
    if (params)
      if (auto it = params->find(key); it != params->end()) type = it->second;
    if (!t.string_true.empty()) {  // DSML: the tag says whether the value is text
      const bool text = value.starts_with(t.string_true);
      if (!text && !value.starts_with(t.string_false)) return std::nullopt;
      value.remove_prefix(text ? t.string_true.size() : t.string_false.size());
      type = dsml_kind(text, type);
    }
    if (!t.value_open.empty()) {
      value = trim(value);
      if (!value.starts_with(t.value_open)) return std::nullopt;
      value.remove_prefix(t.value_open.size());
    }
    const size_t end = value.find(t.value_close);
    if (end == std::string_view::npos) return std::nullopt;
    call.arguments += (first ? "\"" : ",\"") + json_escape(key) + "\":" + xml_value_json(value.substr(0, end), type, t.newlines);
    first = false;
    rest = trim(value.substr(end + t.value_close.size()));
  }
  if (t.call_end == t.block_close) {  // the call ends with its block
    if (!rest.empty()) return std::nullopt;
  } else if (!rest.starts_with(t.call_end)) {
    return std::nullopt;
  }
  s = rest.substr(std::min(rest.size(), t.call_end == t.block_close ? rest.size() : t.call_end.size()));
  call.arguments += "}";
  return call;
}

// An XML block's calls (one, or any number in one_block formats); nullopt
// unless the block holds calls and nothing else.
std::optional<std::vector<ToolCall>> read_xml_block(std::string_view body, const ParamTypes* types, const XmlTags& t) {
  std::vector<ToolCall> calls;
  do {
    auto c = read_xml_call(body, types, t);
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
    body = trim(body);
  } while (t.one_block && !body.empty());
  if (!body.empty()) return std::nullopt;
  return calls;
}

// OPEN BODY CLOSE blocks (a block that does not end, to the text's end),
// each calls where `calls` reads them from its body (and whether the block
// ended); the rest, and blocks that are none, content.
template <typename Read>
ParsedReply parse_blocks(std::string_view text, std::string_view open_tag, std::string_view close_tag, Read calls) {
  ParsedReply r;
  std::string content;
  size_t at = 0;
  for (;;) {
    const size_t open = text.find(open_tag, at);
    if (open == std::string_view::npos) break;
    append_content(content, text.substr(at, open - at));
    const size_t body = open + open_tag.size();
    const size_t close = text.find(close_tag, body);
    const size_t end = close == std::string_view::npos ? text.size() : close + close_tag.size();
    if (std::optional<std::vector<ToolCall>> c =
            calls(text.substr(body, (close == std::string_view::npos ? text.size() : close) - body),
                  close != std::string_view::npos))
      for (ToolCall& call : *c) r.calls.push_back(std::move(call));
    else
      append_content(content, text.substr(open, end - open));
    at = end;
  }
  append_content(content, text.substr(std::min(at, text.size())));
  r.content = std::move(content);
  return r;
}

// Kimi's section: calls only, each <|tool_call_begin|>ID<|tool_call_argument_begin|>
// {...}<|tool_call_end|>; nullopt for anything else.
std::optional<std::vector<ToolCall>> read_kimi_section(std::string_view body) {
  std::vector<ToolCall> calls;
  body = trim(body);
  while (!body.empty()) {
    if (!body.starts_with(kKimiCall)) return std::nullopt;
    const size_t args = body.find(kKimiArguments);
    if (args == std::string_view::npos) return std::nullopt;
    std::string name = kimi_name(body.substr(kKimiCall.size(), args - kKimiCall.size()));
    const size_t at = args + kKimiArguments.size(), end = body.find(kKimiCallEnd, at);
    if (name.empty() || end == std::string_view::npos) return std::nullopt;
    std::optional<std::string> object = object_text(body.substr(at, end - at));
    if (!object) return std::nullopt;
    calls.push_back({std::move(name), std::move(*object)});
    body = trim(body.substr(end + kKimiCallEnd.size()));
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

// The start of a suffix of text that begins `marker` (a marker still being
// streamed), or npos.
size_t partial_marker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (marker.starts_with(text.substr(text.size() - n))) return text.size() - n;
  return std::string_view::npos;
}

}  // namespace

size_t marker_start(std::string_view text, std::string_view marker) {
  const size_t full = text.find(marker);
  return full != std::string_view::npos ? full : partial_marker(text, marker);
}

std::string kimi_name(std::string_view id) {
  id = trim(id);
  if (id.starts_with("functions.")) id.remove_prefix(10);
  const size_t colon = id.rfind(':');
  if (colon != std::string_view::npos && colon + 1 < id.size() &&
      std::all_of(id.begin() + long(colon) + 1, id.end(), [](char c) { return c >= '0' && c <= '9'; }))
    id = id.substr(0, colon);
  return std::string(id);
}

std::string json_escape(std::string_view text) {
  // nlohmann's own escaping; bytes that are no UTF-8 character become U+FFFD,
  // as JSON text must hold characters.
  const std::string quoted = ojson(std::string(text)).dump(-1, ' ', false, ojson::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

const XmlTags& xml_tags(ToolFormat f) {
  static const XmlTags qwen{kHermesOpen, kHermesClose, kXmlFunction, ">", kXmlParameter, ">", "", kXmlParameterEnd,
                            kXmlFunctionEnd, true, false};
  static const XmlTags glm{kHermesOpen, kHermesClose, "", "", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                           kHermesClose, false, false};
  static const XmlTags minimax{"<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=\"", "\">",
                               "<parameter name=\"", "\">", "", "</parameter>", "</invoke>", false, true};
#define CS_DSML "<\uff5cDSML\uff5c"
#define CS_DSML_CLOSE "</\uff5cDSML\uff5c"
  static const XmlTags dsml{CS_DSML "function_calls>", CS_DSML_CLOSE "function_calls>", CS_DSML "invoke name=\"", "\">",
                            CS_DSML "parameter name=\"", "\"", "", CS_DSML_CLOSE "parameter>", CS_DSML_CLOSE "invoke>",
                            false, true, " string=\"true\">", " string=\"false\">"};
  static const XmlTags dsml_v4{CS_DSML "tool_calls>", CS_DSML_CLOSE "tool_calls>", CS_DSML "invoke name=\"", "\">",
                               CS_DSML "parameter name=\"", "\"", "", CS_DSML_CLOSE "parameter>", CS_DSML_CLOSE "invoke>",
                               false, true, " string=\"true\">", " string=\"false\">"};
#undef CS_DSML
#undef CS_DSML_CLOSE
  static const XmlTags seed{"<seed:tool_call>", "</seed:tool_call>", kXmlFunction, ">", kXmlParameter, ">", "",
                            kXmlParameterEnd, kXmlFunctionEnd, false, false};
  switch (f) {
    case ToolFormat::kSeedXml: return seed;
    case ToolFormat::kGlmXml: return glm;
    case ToolFormat::kMiniMaxXml: return minimax;
    case ToolFormat::kDsml: return dsml;
    case ToolFormat::kDsmlV4: return dsml_v4;
    default: return qwen;
  }
}

std::string dsml_kind(bool text, const std::string& schema_kind) {
  const bool schema_text = schema_kind == "string" || schema_kind == "text";
  if (text) return schema_text ? schema_kind : "string";
  return schema_text ? "" : schema_kind;
}

std::string xml_value_json(std::string_view raw, std::string_view type, bool newlines) {
  if (type == "string") {
    if (newlines && raw.starts_with('\n')) raw.remove_prefix(1);
    if (newlines && raw.ends_with('\n')) raw.remove_suffix(1);
    return "\"" + json_escape(raw) + "\"";
  }
  raw = trim(raw);
  if (type != "text" && json_nesting(raw) <= kMaxJsonNesting) {
    const ojson v = ojson::parse(raw, nullptr, false);
    if (!v.is_discarded()) return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
  return "\"" + json_escape(raw) + "\"";
}


ParamTypes param_types(const ojson& tools) {
  ParamTypes out;
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    auto& params = out[fn["name"].get<std::string>()];
    const ojson p = tool_parameters(fn);
    if (!p.contains("properties") || !p["properties"].is_object()) continue;
    for (const auto& [key, schema] : p["properties"].items()) params[key] = xml_value_kind(schema);
  }
  return out;
}

ToolSyntax tool_syntax(const std::string& source) {
  ToolSyntax s;
  s.template_takes_tools = source.find("tools") != std::string::npos;
  // Harmony writes a call as a message to "functions.NAME" (gpt-oss's
  // template: "<|start|>assistant to=" + "functions." + name).
  // DeepSeek's DSML tags (V3.2: <｜DSML｜function_calls>; V4:
  // <｜DSML｜tool_calls>), written by the template as "<" + dsml_token + ...
  if (source.find("\uff5cDSML\uff5c") != std::string::npos && source.find("invoke name=") != std::string::npos) {
    s.format = source.find("function_calls>") != std::string::npos ? ToolFormat::kDsml : ToolFormat::kDsmlV4;
    return s;
  }
  if (source.find(kKimiSection) != std::string::npos && source.find(kKimiCall) != std::string::npos) {
    s.format = ToolFormat::kKimi;
    return s;
  }
  if (source.find("<seed:tool_call>") != std::string::npos && source.find("<function=") != std::string::npos) {
    s.format = ToolFormat::kSeedXml;
    return s;
  }
  if (source.find("<minimax:tool_call>") != std::string::npos && source.find("<invoke name=") != std::string::npos) {
    s.format = ToolFormat::kMiniMaxXml;
    return s;
  }
  // MiniMax M3's <invoke name="f">, inside its own namespaced <tool_call>,
  // writes nested objects as nested elements, which we do not read:
  // described generically.
  if (source.find("<invoke name=") != std::string::npos) {
    s.template_takes_tools = false;
    return s;
  }
  if (source.find("<|channel|>") != std::string::npos && source.find(" to=") != std::string::npos &&
      source.find("functions.") != std::string::npos)
    s.format = ToolFormat::kHarmony;
  else if (source.find("[TOOL_CALLS]") != std::string::npos)
    s.format = ToolFormat::kMistral;
  else if (source.find("<tool_call>") != std::string::npos && source.find("<function=") != std::string::npos)
    s.format = ToolFormat::kQwenXml;
  else if (source.find("<tool_call>") != std::string::npos && source.find("<arg_key>") != std::string::npos)
    s.format = ToolFormat::kGlmXml;
  else if (source.find("<tool_call>") != std::string::npos)
    s.format = ToolFormat::kHermes;
  else if (source.find("<|python_tag|>") != std::string::npos || source.find("ipython") != std::string::npos)
    s.format = ToolFormat::kLlama3;
  else
    s.template_takes_tools = false;  // tools without a call format we know: described generically
  return s;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kLlama3: return "llama3";
    case ToolFormat::kMistral: return "mistral";
    case ToolFormat::kHarmony: return "harmony";
    case ToolFormat::kQwenXml: return "qwen_xml";
    case ToolFormat::kGlmXml: return "glm_xml";
    case ToolFormat::kMiniMaxXml: return "minimax_xml";
    case ToolFormat::kDsml: return "dsml";
    case ToolFormat::kDsmlV4: return "dsml_v4";
    case ToolFormat::kSeedXml: return "seed_xml";
    case ToolFormat::kKimi: return "kimi";
  }
  return "hermes";
}

std::string generic_tools_text(const ojson& tools) {
  std::string s =
      "You can call tools (functions). Their definitions, as JSON:\n<tools>\n";
  for (const ojson& t : tools) s += t.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n";
  s += "</tools>\n"
       "To call tools, reply with one block per call and nothing else:\n"
       "<tool_call>{\"name\": \"function name\", \"arguments\": {\"argument\": \"value\"}}</tool_call>\n"
       "Each call's result comes back in a <tool_response> block.";
  return s;
}

std::string generic_call_text(const std::string& name, const ojson& arguments) {
  const ojson call = {{"name", name}, {"arguments", arguments}};
  return std::string(kHermesOpen) + call.dump(-1, ' ', false, ojson::error_handler_t::replace) +
         std::string(kHermesClose);
}

ojson tool_parameters(const ojson& function) {
  if (function.contains("parameters") && function["parameters"].is_object()) return function["parameters"];
  return {{"type", "object"}, {"properties", ojson::object()}, {"additionalProperties", false}};
}

namespace {

// One case per allowed function (JsonFrame::case_before): each header
// `before` gives for its name, then that function's parameters, in `frame`.
template <typename Before>
GrammarSpec per_function(const ojson& tools, const ToolChoice& choice, JsonFrame frame, Before before) {
  ojson schemas = ojson::array();
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (choice.kind == ToolChoice::Kind::kNamed && name != choice.name) continue;
    for (std::string& header : before(name)) {
      schemas.push_back(tool_parameters(fn));
      frame.case_before.push_back(std::move(header));
    }
  }
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.text = schemas.dump();
  spec.frame = std::move(frame);
  return spec;
}

// Harmony: one message to any allowed function, its header naming it and
// its body that function's parameters (JsonFrame::case_before). Under auto
// the call may also name its recipient in the role's header, as the
// template writes past calls: from "to=" (the role, " to=", is written
// before the trigger), tool_call_triggers'.
GrammarSpec harmony_grammar(const ojson& tools, const ToolChoice& choice) {
  JsonFrame frame;
  frame.after = kCall;
  return per_function(tools, choice, std::move(frame), [&](const std::string& name) {
    std::vector<std::string> headers = {std::string(kChannel) + "commentary to=functions." + name + " <|constrain|>json" +
                                        std::string(kMessage)};
    if (choice.kind == ToolChoice::Kind::kAuto)
      headers.push_back("to=functions." + name + std::string(kChannel) + "commentary json" + std::string(kMessage));
    return headers;
  });
}

// Whether a schema has a "$ref" anywhere.
bool has_ref(const ojson& s) {
  if (s.is_object() && s.contains("$ref")) return true;
  if (s.is_structured())
    for (const ojson& v : s)
      if (has_ref(v)) return true;
  return false;
}

// A schema's references ("#/$defs/Item", "#") pointed at where the schema
// now sits inside another (`base`, a JSON pointer). Values (enum, const,
// default, examples) are data and keep their text.
ojson rebase_refs(const ojson& s, const std::string& base) {
  if (s.is_array()) {
    ojson out = ojson::array();
    for (const ojson& v : s) out.push_back(rebase_refs(v, base));
    return out;
  }
  if (!s.is_object()) return s;
  ojson out = ojson::object();
  for (const auto& [k, v] : s.items()) {
    if (k == "$ref" && v.is_string() && v.get<std::string>().starts_with("#"))
      out[k] = "#" + base + v.get<std::string>().substr(1);
    else if (k == "enum" || k == "const" || k == "default" || k == "examples")
      out[k] = v;
    else
      out[k] = rebase_refs(v, base);
  }
  return out;
}

}  // namespace

// The XML formats: one case per allowed function: its name (Qwen's
// <function=NAME> header, GLM's NAME, the invoke family's <invoke
// name="NAME">), then its parameters as XML elements (xgrammar's rendering
// of a schema in Qwen's style, the format's tags put in: a string's value
// as text up to its closing tag, any other type's as JSON), as the
// templates write past calls; a block around each call (Qwen, GLM) or
// around them all (the invoke family).
GrammarSpec xml_grammar(const ojson& tools, ToolFormat f, const ToolChoice& choice, bool parallel) {
  const XmlTags& t = xml_tags(f);
  JsonFrame frame;
  switch (f) {
    case ToolFormat::kGlmXml: frame.style = JsonFrame::Style::kArgKeys; break;
    case ToolFormat::kMiniMaxXml: frame.style = JsonFrame::Style::kInvoke; break;
    case ToolFormat::kDsml:
    case ToolFormat::kDsmlV4: frame.style = JsonFrame::Style::kDsml; break;
    default: frame.style = JsonFrame::Style::kParameters;
  }
  if (t.one_block) {
    frame.open = std::string(t.block_open) + "\n";
    frame.after = t.call_end;
    frame.close = "\n" + std::string(t.block_close);
  } else {
    frame.after = f == ToolFormat::kGlmXml ? std::string(t.block_close) : std::string(t.call_end) + "\n" + std::string(t.block_close);
  }
  frame.between = "\n";
  frame.max_items = parallel ? 0 : 1;
  return per_function(tools, choice, std::move(frame), [&](const std::string& name) {
    if (f == ToolFormat::kGlmXml) return std::vector<std::string>{std::string(t.block_open) + name};
    if (!t.one_block)  // Qwen's, Seed's
      return std::vector<std::string>{std::string(t.block_open) + "\n" + std::string(t.name_open) + name + ">\n"};
    return std::vector<std::string>{std::string(t.name_open) + name + std::string(t.name_close) + "\n"};
  });
}

// Kimi: a section of calls, each the id's header naming one allowed
// function (its index any number: the template numbers the conversation's
// calls again itself) and that function's parameters as the body.
GrammarSpec kimi_grammar(const ojson& tools, const ToolChoice& choice, bool parallel) {
  JsonFrame frame;
  frame.numbered = kKimiArguments;
  frame.after = kKimiCallEnd;
  frame.open = kKimiSection;
  frame.close = kKimiSectionEnd;
  frame.max_items = parallel ? 0 : 1;
  return per_function(tools, choice, std::move(frame), [](const std::string& name) {
    return std::vector<std::string>{std::string(kKimiCall) + "functions." + name + ":"};
  });
}

GrammarSpec tool_call_grammar(const ojson& tools, ToolFormat f, const ToolChoice& choice, bool parallel) {
  if (f == ToolFormat::kHarmony) return harmony_grammar(tools, choice);
  if (f == ToolFormat::kKimi) return kimi_grammar(tools, choice, parallel);
  if (xml_format(f)) return xml_grammar(tools, f, choice, parallel);
  const char* args_key = f == ToolFormat::kLlama3 ? "parameters" : "arguments";
  ojson cases = ojson::array(), defs = ojson::object();
  for (const ojson& t : tools) {
    const ojson& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (choice.kind == ToolChoice::Kind::kNamed && name != choice.name) continue;
    ojson params = tool_parameters(fn);
    // References inside the parameters ("#/$defs/Item", as pydantic writes
    // nested models) are resolved from the root of the call's schema, where
    // the parameters are no longer: the parameters go to the root's $defs,
    // their references rebased there, and the call refers to them.
    if (has_ref(params)) {
      const std::string key = "tool_" + std::to_string(cases.size());
      defs[key] = rebase_refs(params, "/$defs/" + key);
      params = {{"$ref", "#/$defs/" + key}};
    }
    cases.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                     {"required", {"name", args_key}},
                     {"additionalProperties", false}});
  }
  ojson root = cases.size() == 1 ? cases[0] : ojson{{"anyOf", cases}};
  if (!defs.empty()) root["$defs"] = defs;
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.text = root.dump();
  JsonFrame frame;
  frame.max_items = parallel && f != ToolFormat::kLlama3 ? 0 : 1;
  switch (f) {
    case ToolFormat::kHermes: frame.before = kHermesOpen, frame.after = kHermesClose; break;
    case ToolFormat::kMistral: frame.open = std::string(kMistralMarker) + "[", frame.between = ",", frame.close = "]"; break;
    default: break;
  }
  spec.frame = std::move(frame);
  return spec;
}

std::vector<Request::Trigger> tool_call_triggers(ToolFormat f) {
  switch (f) {
    case ToolFormat::kHermes:
    case ToolFormat::kQwenXml:
    case ToolFormat::kGlmXml:
    case ToolFormat::kMiniMaxXml:
    case ToolFormat::kDsml:
    case ToolFormat::kDsmlV4:
    case ToolFormat::kSeedXml: return {{std::string(xml_tags(f).block_open)}};
    case ToolFormat::kMistral: return {{std::string(kMistralMarker)}};
    case ToolFormat::kKimi: return {{std::string(kKimiSection)}};
    // The grammar is the call's JSON alone; after the tag, from its brace.
    case ToolFormat::kLlama3: return {{"{\"name\"", true}, {std::string(kPythonTag), true, kPythonTag.size()}};
    // In the channel's header; or in the role's, at the answer's start (the
    // prompt, or the thought's close, wrote "<|start|>assistant") or after
    // a message the reply wrote, from "to=".
    case ToolFormat::kHarmony:
      return {{std::string(kChannel) + "commentary to="},
              {"to=functions.", true},
              {std::string(kRoleTo), false, kRoleTo.find("to=")}};
  }
  return {};
}

ParsedReply parse_tool_calls(std::string_view text, ToolFormat f, const ParamTypes* types) {
  switch (f) {
    case ToolFormat::kQwenXml:
    case ToolFormat::kGlmXml:
    case ToolFormat::kMiniMaxXml:
    case ToolFormat::kDsml:
    case ToolFormat::kDsmlV4:
    case ToolFormat::kSeedXml: {
      // GLM's call ends with the block: one the text's end cut is none.
      const XmlTags& t = xml_tags(f);
      return parse_blocks(text, t.block_open, t.block_close,
                          [&](std::string_view body, bool ended) -> std::optional<std::vector<ToolCall>> {
                            if (!ended && f == ToolFormat::kGlmXml) return std::nullopt;
                            return read_xml_block(body, types, t);
                          });
    }
    case ToolFormat::kHermes:
      return parse_blocks(text, kHermesOpen, kHermesClose,
                          [](std::string_view body, bool) -> std::optional<std::vector<ToolCall>> {
                            auto c = parse_call(body);
                            if (!c) return std::nullopt;
                            return std::vector<ToolCall>{std::move(*c)};
                          });
    case ToolFormat::kLlama3: return parse_llama3(text);
    case ToolFormat::kMistral: return parse_mistral(text);
    case ToolFormat::kHarmony: return parse_harmony(text);
    case ToolFormat::kKimi:
      return parse_blocks(text, kKimiSection, kKimiSectionEnd,
                          [](std::string_view body, bool) { return read_kimi_section(body); });
  }
  return {std::string(text), {}};
}

}  // namespace cs
