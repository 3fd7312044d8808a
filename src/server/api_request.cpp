#include "server/api_request.h"

#include "base/json_depth.h"
#include "grammar/schema_check.h"
#include "server/reasoning.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

namespace cs {

// Ordered: a template may print what the client sent (a tool call's
// arguments, with tojson) and must see its keys in the client's order.
using json = nlohmann::ordered_json;

std::string error_json(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError renamed(ApiError e, const std::string& from, const std::string& to) {
  for (std::string* s : {&e.param, &e.message})
    for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size()))
      s->replace(at, from.size(), to);
  return e;
}

ApiError api_error_of(const Status& s, const std::string& param, const std::string& thing, const std::string& invalid) {
  const std::string text = s.text();
  switch (s.code) {
    case ErrorKind::kNotFound: return {404, text, "invalid_request_error", param, thing + "_not_found"};
    case ErrorKind::kExists: return {409, text, "invalid_request_error", param, thing + "_exists"};
    case ErrorKind::kInUse: return {409, text, "invalid_request_error", param, thing + "_in_use"};
    case ErrorKind::kStopped: return {503, text, "server_error", param, "unavailable"};
    case ErrorKind::kNoRoom: return {400, text, "invalid_request_error", param, "kv_memory_full"};
    case ErrorKind::kInternal: return {500, text, "server_error", param, "internal_error"};
    case ErrorKind::kInvalid: break;
  }
  return {400, text, "invalid_request_error", param, invalid};
}

namespace {

ApiError invalid(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  return {400, message, "invalid_request_error", param, code};
}

// JSON text from the client, refused before it is parsed when it nests
// deeper than anything here walks safely (base/json_depth.h).
void check_nesting(const std::string& text, const std::string& param, const std::string& what) {
  const int depth = json_nesting(text);
  if (depth > kMaxJsonNesting)
    throw invalid(param, what + " nests " + std::to_string(depth) + " levels deep; at most " +
                             std::to_string(kMaxJsonNesting) + " are accepted", "too_deeply_nested");
}


std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Typed access to a request's optional fields (null counts as absent).
class Fields {
 public:
  explicit Fields(const json& j) : j_(j) {}

  const json* get(const char* name) const {
    auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<double> number(const char* name, double lo, double hi, bool lo_open = false) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw invalid(name, std::string(name) + " must be a number", "invalid_type");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
      throw invalid(name, std::string(name) + " must be in " + (lo_open ? "(" : "[") + num(lo) + ", " + num(hi) +
                              "], got " + num(x));
    return x;
  }
  std::optional<long long> integer(const char* name, long long lo, long long hi) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer())
      throw invalid(name, std::string(name) + " must be an integer", "invalid_type");
    // JSON integers above 2^63 arrive unsigned; every other one fits a long long.
    const bool in_range = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<long long>::max())
                              ? false
                              : v->get<long long>() >= lo && v->get<long long>() <= hi;
    if (!in_range)
      throw invalid(name, std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + v->dump());
    return v->get<long long>();
  }
  std::optional<bool> boolean(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw invalid(name, std::string(name) + " must be true or false", "invalid_type");
    return v->get<bool>();
  }
  std::optional<std::string> string(const char* name) const {
    const json* v = get(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) throw invalid(name, std::string(name) + " must be a string", "invalid_type");
    return v->get<std::string>();
  }

 private:
  const json& j_;
};

json parse_body(const std::string& body) {
  check_nesting(body, "", "the body");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    throw invalid("", std::string("the body is not valid JSON: ") + e.what(), "invalid_json");
  }
  if (!j.is_object()) throw invalid("", "the body must be a JSON object", "invalid_json");
  return j;
}

// Parameters OpenAI defines that we do not implement: a clear 400 rather
// than answers that silently ignore them.
void refuse_unsupported(const json& j, bool chat) {
  const Fields f(j);
  auto refuse = [](const char* name, const std::string& why) {
    throw invalid(name, std::string(name) + " is not supported" + why, "unsupported_parameter");
  };
  if (f.boolean("echo").value_or(false)) refuse("echo", "");
  if (f.get("suffix")) refuse("suffix", "");
  if (f.integer("best_of", 0, 1 << 20).value_or(1) > 1) refuse("best_of", " (use n)");
  if (const json* b = f.get("logit_bias"); b && !(b->is_object() && b->empty())) refuse("logit_bias", "");
  if (chat) {
    if (f.get("functions")) refuse("functions", " (use tools)");
    if (f.get("function_call")) refuse("function_call", " (use tool_choice)");
    if (const json* m = f.get("modalities"); m && *m != json::array({"text"})) refuse("modalities", " (text only)");
  }
}

// A schema given as an object or as its JSON text.
std::string schema_text(const json& v, const std::string& param) {
  if (v.is_object()) return v.dump();
  if (v.is_string()) {
    check_nesting(v.get<std::string>(), param, param);
    const json parsed = json::parse(v.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && parsed.is_object()) return parsed.dump();
  }
  throw invalid(param, param + " must be a JSON schema (an object)", "invalid_type");
}

// response_format (OpenAI) and the extras for other constraints: "regex",
// "grammar" (EBNF/GBNF with a root rule) and "json_schema" as llama-server
// names them, "guided_json"/"guided_regex"/"guided_grammar" as vLLM does.
void parse_constraint(const json& j, ApiRequest& out) {
  const Fields f(j);
  std::vector<std::pair<std::string, GrammarSpec>> given;
  if (const json* rf = f.get("response_format")) {
    const json* type = rf->is_object() ? Fields(*rf).get("type") : nullptr;
    if (!type || !type->is_string())
      throw invalid("response_format", "response_format must be {\"type\": \"text\" | \"json_object\" | \"json_schema\"}",
                    "invalid_type");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      given.emplace_back("response_format", GrammarSpec{GrammarKind::kAnyJson, "", std::nullopt});
    } else if (t == "json_schema") {
      const json* js = Fields(*rf).get("json_schema");
      if (!js || !js->is_object() || !Fields(*js).get("schema"))
        throw invalid("response_format.json_schema",
                      "response_format.json_schema must be {\"name\", \"schema\": {...}, \"strict\"}",
                      "missing_required_parameter");
      given.emplace_back("response_format",
                         GrammarSpec{GrammarKind::kJsonSchema,
                                     schema_text((*js)["schema"], "response_format.json_schema.schema"), std::nullopt});
    } else if (t != "text") {
      throw invalid("response_format.type", "response_format.type '" + t +
                                                "' is not one of text, json_object, json_schema");
    }
  }
  for (const char* name : {"json_schema", "guided_json"})
    if (const json* v = f.get(name)) given.emplace_back(name, GrammarSpec{GrammarKind::kJsonSchema, schema_text(*v, name), std::nullopt});
  for (const char* name : {"regex", "guided_regex"})
    if (auto v = f.string(name)) given.emplace_back(name, GrammarSpec{GrammarKind::kRegex, *v, std::nullopt});
  for (const char* name : {"grammar", "guided_grammar"})
    if (auto v = f.string(name)) given.emplace_back(name, GrammarSpec{GrammarKind::kEbnf, *v, std::nullopt});
  if (given.size() > 1)
    throw invalid(given[1].first, "give one constraint: " + given[0].first + " and " + given[1].first + " both constrain the output");
  if (!given.empty()) out.constraint_param = given[0].first, out.constraint = std::move(given[0].second);
}

// A function name as OpenAI allows it.
bool function_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// tools: [{"type": "function", "function": {"name", "description", "parameters"}}].
json parse_tools(const json& tools) {
  if (!tools.is_array()) throw invalid("tools", "tools must be a list", "invalid_type");
  json out = json::array();
  std::unordered_set<std::string> names;  // not each name against every earlier one: the client sizes the list
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    const json* fn = t.is_object() ? Fields(t).get("function") : nullptr;
    if (!t.is_object() || (t.contains("type") && t["type"] != "function") || !fn || !fn->is_object())
      throw invalid(at, at + " must be {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}");
    const json* name = Fields(*fn).get("name");
    if (!name || !name->is_string() || !function_name(name->get<std::string>()))
      throw invalid(at + ".function.name", at + ".function.name must be 1 to 64 letters, digits, _ or -");
    if (!names.insert(name->get<std::string>()).second)
      throw invalid(at + ".function.name", "two tools are named '" + name->get<std::string>() + "'");
    if (const json* p = Fields(*fn).get("parameters"); p && !p->is_object())
      throw invalid(at + ".function.parameters", at + ".function.parameters must be a JSON schema (an object)",
                    "invalid_type");
    if (const json* d = Fields(*fn).get("description"); d && !d->is_string())
      throw invalid(at + ".function.description", at + ".function.description must be a string", "invalid_type");
    if (const json* st = Fields(*fn).get("strict"); st && !st->is_boolean() && !st->is_null())
      throw invalid(at + ".function.strict", at + ".function.strict must be true or false", "invalid_type");
    json clean = {{"type", "function"}, {"function", json::object()}};
    for (const char* k : {"name", "description", "parameters", "strict"})
      if (const json* v = Fields(*fn).get(k)) clean["function"][k] = *v;
    out.push_back(std::move(clean));
  }
  return out;
}

// Each tool's parameters checked: as a constraint where the choice demands
// a call of it or the tool is "strict" (the call's arguments are sampled
// under that schema, which the grammar engine must enforce whole:
// grammar/schema_check.h), else as the description of a tool the model may
// call. Returns the tools as a call the model begins under "auto" is
// constrained: a tool that is not strict and whose parameters the engine
// cannot enforce whole takes any JSON object there.
json check_tool_schemas(const json& tools, const ToolChoice& choice) {
  json callable = tools;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& fn = tools[i]["function"];
    if (!fn.contains("parameters")) continue;
    const bool strict = fn.contains("strict") && fn["strict"] == true;
    const bool demanded = (choice.kind == ToolChoice::Kind::kRequired && choice.allows(fn["name"])) ||
                          (choice.kind == ToolChoice::Kind::kNamed && fn["name"] == choice.name) ||
                          (choice.kind == ToolChoice::Kind::kAuto && strict && choice.allows(fn["name"]));
    const std::string at = "tools[" + std::to_string(i) + "].function.parameters";
    const std::string schema = fn["parameters"].dump();
    try {
      check_schema(schema, demanded ? SchemaUse::kConstraint : SchemaUse::kDescription);
    } catch (const GrammarError& e) {
      throw invalid(at, at + ": " + e.what(), "invalid_schema");
    }
    if (demanded || choice.kind != ToolChoice::Kind::kAuto) continue;
    try {
      check_schema(schema, SchemaUse::kConstraint);
    } catch (const GrammarError&) {
      callable[i]["function"]["parameters"] = {{"type", "object"}, {"additionalProperties", true}};
    }
  }
  return callable;
}

bool has_tool(const json& tools, const std::string& name) {
  return std::any_of(tools.begin(), tools.end(), [&](const json& t) { return t["function"]["name"] == name; });
}

// OpenAI's {"type": "allowed_tools", "allowed_tools": {"mode": "auto" |
// "required", "tools": [{"type": "function", "function": {"name"}}, ...]}}.
ToolChoice parse_allowed_tools(const json& c, const json& tools) {
  const json* a = Fields(c).get("allowed_tools");
  if (!a || !a->is_object())
    throw invalid("tool_choice.allowed_tools", "tool_choice.allowed_tools must be an object with mode and tools",
                  "invalid_type");
  const Fields f(*a);
  ToolChoice choice;
  const json* mode = f.get("mode");
  if (mode && *mode == "auto") choice.kind = ToolChoice::Kind::kAuto;
  else if (mode && *mode == "required") choice.kind = ToolChoice::Kind::kRequired;
  else throw invalid("tool_choice.allowed_tools.mode", "tool_choice.allowed_tools.mode must be auto or required");
  const json* list = f.get("tools");
  if (!list || !list->is_array() || list->empty())
    throw invalid("tool_choice.allowed_tools.tools", "tool_choice.allowed_tools.tools must be a non-empty list of tools",
                  "invalid_type");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = "tool_choice.allowed_tools.tools[" + std::to_string(i) + "]";
    const json& t = (*list)[i];
    const json* fn = t.is_object() ? Fields(t).get("function") : nullptr;
    const json* name = fn && fn->is_object() ? Fields(*fn).get("name") : nullptr;
    const json* type = t.is_object() ? Fields(t).get("type") : nullptr;
    if ((type && *type != "function") || !name || !name->is_string())
      throw invalid(at, at + " must be {\"type\": \"function\", \"function\": {\"name\"}}", "invalid_type");
    if (!has_tool(tools, name->get<std::string>()))
      throw invalid(at, at + " names the function '" + name->get<std::string>() + "', which is not in tools");
    choice.allowed.push_back(name->get<std::string>());
  }
  return choice;
}

// The tools calls may name (ToolChoice::allowed), in the order of tools.
json allowed_only(const json& tools, const ToolChoice& choice) {
  json out = json::array();
  for (const json& t : tools)
    if (choice.allows(t["function"]["name"])) out.push_back(t);
  return out;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
// | {"type": "allowed_tools", ...}.
ToolChoice parse_tool_choice(const json* c, const json& tools) {
  ToolChoice choice;
  choice.kind = tools.empty() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
  if (!c) return choice;
  if (const json* type = c->is_object() ? Fields(*c).get("type") : nullptr; type && *type == "allowed_tools") {
    if (tools.empty()) throw invalid("tool_choice", "tool_choice allowed_tools needs tools");
    return parse_allowed_tools(*c, tools);
  }
  if (c->is_string()) {
    const std::string s = c->get<std::string>();
    if (s == "none") choice.kind = ToolChoice::Kind::kNone;
    else if (s == "auto") choice.kind = tools.empty() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
    else if (s == "required") choice.kind = ToolChoice::Kind::kRequired;
    else throw invalid("tool_choice", "tool_choice '" + s + "' is not one of none, auto, required or a function");
  } else {
    const json* fn = c->is_object() ? Fields(*c).get("function") : nullptr;
    const json* name = fn && fn->is_object() ? Fields(*fn).get("name") : nullptr;
    if (!name || !name->is_string())
      throw invalid("tool_choice", "tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\"}}",
                    "invalid_type");
    choice.kind = ToolChoice::Kind::kNamed;
    choice.name = name->get<std::string>();
    if (!has_tool(tools, choice.name))
      throw invalid("tool_choice", "tool_choice names the function '" + choice.name + "', which is not in tools");
  }
  if (tools.empty() && choice.kind == ToolChoice::Kind::kRequired)
    throw invalid("tool_choice", "tool_choice 'required' needs tools");
  return choice;
}

// Speculative decoding: OpenAI's Predicted Outputs ("prediction": {"type":
// "content", "content": text or text parts}), tokenized as plain text (no
// special token comes from it), and our "speculate": "auto" | "off".
void parse_speculation(const Fields& f, const ApiLimits& lim, Request& out) {
  if (const json* p = f.get("prediction")) {
    if (!p->is_object()) throw invalid("prediction", "prediction must be an object", "invalid_type");
    const Fields pf(*p);
    if (pf.string("type").value_or("") != "content")
      throw invalid("prediction.type", "prediction.type must be 'content'");
    const json* c = pf.get("content");
    std::string text;
    if (c && c->is_string()) {
      text = c->get<std::string>();
    } else if (c && c->is_array()) {
      for (const json& part : *c) {
        if (!part.is_object() || Fields(part).string("type").value_or("") != "text" || !Fields(part).string("text"))
          throw invalid("prediction.content", "prediction.content parts must be {\"type\": \"text\", \"text\": ...}");
        text += *Fields(part).string("text");
      }
    } else {
      throw invalid("prediction.content", "prediction.content must be a string or an array of text parts", "invalid_type");
    }
    if (lim.tokenizer) out.prediction = lim.tokenizer->encode(text, false);
  }
  if (auto s = f.string("speculate")) {
    if (*s != "auto" && *s != "off") throw invalid("speculate", "speculate must be 'auto' or 'off'");
    out.speculate = *s == "auto" ? 1 : 0;
  }
}

// The fields both routes share.
void parse_common(const json& j, const ApiLimits& lim, ApiRequest& out) {
  const Fields f(j);
  const std::optional<std::string> model = f.string("model");
  if (!model) throw invalid("model", "model is required (this server serves '" + lim.model_id + "')", "missing_required_parameter");
  if (*model != lim.model_id)
    throw ApiError{404, "the model '" + *model + "' does not exist (this server serves '" + lim.model_id + "')",
                   "invalid_request_error", "model", "model_not_found"};
  out.model = *model;
  out.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.get("stream_options")) {
    if (!so->is_object()) throw invalid("stream_options", "stream_options must be an object", "invalid_type");
    if (!out.stream) throw invalid("stream_options", "stream_options is only allowed with stream: true");
    out.include_usage = Fields(*so).boolean("include_usage").value_or(false);
  }
  SamplingParams& s = out.engine.sampling;
  s.temperature = float(f.number("temperature", 0, 2).value_or(1.0));
  out.engine.ignore_eos = f.boolean("ignore_eos").value_or(false);  // vLLM's extra: load generators ask for exact lengths
  s.top_p = float(f.number("top_p", 0, 1, true).value_or(1.0));
  s.top_k = int(f.integer("top_k", 0, 1 << 20).value_or(0));
  s.presence_penalty = float(f.number("presence_penalty", -2, 2).value_or(0));
  s.frequency_penalty = float(f.number("frequency_penalty", -2, 2).value_or(0));
  s.repeat_penalty = float(f.number("repetition_penalty", 0, 10, true).value_or(1.0));
  if (auto seed = f.integer("seed", std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max()))
    s.seed = uint64_t(*seed);
  else
    s.seed = std::random_device{}();
  out.engine.n = int(f.integer("n", 1, lim.max_n).value_or(1));
  parse_speculation(f, lim, out.engine);
  if (const json* stop = f.get("stop")) {
    if (stop->is_string()) {
      out.engine.stop = {stop->get<std::string>()};
    } else if (stop->is_array()) {
      if (stop->size() > 4) throw invalid("stop", "stop takes at most 4 strings");
      for (const json& x : *stop) {
        if (!x.is_string()) throw invalid("stop", "stop must be a string or a list of strings", "invalid_type");
        out.engine.stop.push_back(x.get<std::string>());
      }
    } else {
      throw invalid("stop", "stop must be a string or a list of strings", "invalid_type");
    }
    for (const auto& x : out.engine.stop)
      if (x.empty()) throw invalid("stop", "stop strings must not be empty");
  }
}

// max_tokens against the context: absent means up to the context's end. A
// prompt with positions (PML) reaches its last position, not its length.
void set_max_tokens(std::optional<long long> max, const char* param, const ApiLimits& lim, ApiRequest& out) {
  const int prompt = out.engine.positions.empty() ? int(out.engine.prompt.size()) : out.engine.positions.back() + 1;
  if (prompt >= lim.n_ctx)
    throw invalid("messages", "this model's context is " + std::to_string(lim.n_ctx) + " tokens; the prompt has " +
                                  std::to_string(prompt),
                  "context_length_exceeded");
  if (max && prompt + *max > lim.n_ctx)
    throw invalid(param, "this model's context is " + std::to_string(lim.n_ctx) + " tokens; " + std::to_string(prompt) +
                             " in the prompt plus " + param + " " + std::to_string(*max) + " do not fit",
                  "context_length_exceeded");
  out.engine.max_tokens = max ? int(*max) : lim.n_ctx - prompt;
}

std::vector<int32_t> token_list(const json& a, const ApiLimits& lim) {
  std::vector<int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer()) throw invalid("prompt", "a token prompt must be a list of integers", "invalid_type");
    const long long v = t.get<long long>();
    if (v < 0 || v >= lim.tokenizer->vocab_size())
      throw invalid("prompt", "token " + t.dump() + " is not in the vocabulary (0 to " +
                                  std::to_string(lim.tokenizer->vocab_size() - 1) + ")");
    ids.push_back(int32_t(v));
  }
  return ids;
}

// Prompt Cache extensions: "pml" (a <prompt> document) and "prompt_cache".
bool parse_pml(const json& j, ApiRequest& out, std::optional<long long> max_tokens) {
  const Fields f(j);
  out.pml_cache = f.boolean("prompt_cache").value_or(true);
  if (!f.get("pml")) return false;
  out.pml = *f.string("pml");
  if (out.pml.empty()) throw invalid("pml", "pml is empty");
  out.max_tokens = max_tokens.value_or(-1);
  return true;
}

}  // namespace

void check_context(ApiRequest& r, const ApiLimits& lim) {
  set_max_tokens(r.max_tokens >= 0 ? std::optional<long long>(r.max_tokens) : std::nullopt, "max_tokens", lim, r);
}

namespace {

bool is_pml_prompt(const json& p) {
  if (!p.is_string()) return false;
  const std::string& s = p.get_ref<const std::string&>();
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b != std::string::npos && s.compare(b, 8, "<prompt ") == 0;
}

}  // namespace

ApiRequest parse_completion_request(const std::string& body, const ApiLimits& lim) {
  const json j = parse_body(body);
  refuse_unsupported(j, false);
  ApiRequest out;
  parse_common(j, lim, out);
  parse_constraint(j, out);
  const Fields f(j);
  if (auto lp = f.integer("logprobs", 0, 20)) {
    out.logprobs = true;
    out.engine.logprobs = int(*lp);
  }
  const auto max = f.integer("max_tokens", 0, 1 << 24);
  if (parse_pml(j, out, max.value_or(16))) return out;
  if (const json* p = f.get("prompt"); p && is_pml_prompt(*p)) {
    out.pml = p->get<std::string>();
    out.max_tokens = max.value_or(16);
    return out;
  }
  const json* p = f.get("prompt");
  if (!p) throw invalid("prompt", "prompt is required", "missing_required_parameter");
  // One prompt: a string, a list of token ids, or a list holding one of those.
  const json* one = p;
  if (p->is_array() && !p->empty() && (p->at(0).is_string() || p->at(0).is_array())) {
    if (p->size() != 1) throw invalid("prompt", "only one prompt per request is supported (use n for more completions)");
    one = &p->at(0);
  }
  if (one->is_string()) {
    const std::string text = one->get<std::string>();
    if (text.empty()) throw invalid("prompt", "the prompt is empty");
    // Raw completions: special-token text stays text; BOS as the model wants.
    out.engine.prompt = lim.tokenizer->encode(text, false, true);
  } else if (one->is_array()) {
    out.engine.prompt = token_list(*one, lim);
  } else {
    throw invalid("prompt", "prompt must be a string or a list of token ids", "invalid_type");
  }
  if (out.engine.prompt.empty()) throw invalid("prompt", "the prompt is empty");
  set_max_tokens(max.value_or(16), "max_tokens", lim, out);
  return out;
}

namespace {

// One message as the chat template reads it: the role (developer is
// system), the content as one string (text parts joined; null only beside
// tool calls), and the fields a template may read besides (tool_calls with
// their arguments as an object, tool_call_id, name), in the client's order.
json chat_message(const json& m, size_t i) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) throw invalid(at, at + " must be an object", "invalid_type");
  const json* role = Fields(m).get("role");
  if (!role || !role->is_string()) throw invalid(at + ".role", at + " has no role");
  std::string r = role->get<std::string>();
  if (r == "developer") r = "system";  // OpenAI's newer name for the system role
  if (r != "system" && r != "user" && r != "assistant" && r != "tool")
    throw invalid(at + ".role", at + " has the unknown role '" + role->get<std::string>() +
                                    "' (system, developer, user, assistant or tool)");
  json out = {{"role", r}};
  const json* c = Fields(m).get("content");
  const json* calls = Fields(m).get("tool_calls");
  if (c && c->is_string()) {
    out["content"] = c->get<std::string>();
  } else if (c && c->is_array()) {
    std::string text;
    for (const json& part : *c) {
      const json* type = part.is_object() ? Fields(part).get("type") : nullptr;
      if (!type || *type != "text" || !part.contains("text") || !part["text"].is_string())
        throw invalid(at + ".content", at + ": only text content parts are supported");
      text += part["text"].get<std::string>();
    }
    out["content"] = text;
  } else if ((!c || c->is_null()) && r == "assistant" && calls) {
    out["content"] = nullptr;
  } else {
    throw invalid(at + ".content", at + " must have a string content", "invalid_type");
  }
  if (calls) {
    if (r != "assistant" || !calls->is_array())
      throw invalid(at + ".tool_calls", at + ": tool_calls must be a list, on an assistant message", "invalid_type");
    json list = json::array();
    for (size_t k = 0; k < calls->size(); ++k) {
      const json& call = (*calls)[k];
      const std::string cat = at + ".tool_calls[" + std::to_string(k) + "]";
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
          !call["function"].contains("name") || !call["function"]["name"].is_string())
        throw invalid(cat, cat + " must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
      json c2 = call;
      // Templates print arguments as an object (Hugging Face's convention);
      // OpenAI sends them as JSON text.
      auto& args = c2["function"]["arguments"];
      if (args.is_string()) {
        check_nesting(args.get<std::string>(), cat + ".function.arguments", cat + ".function.arguments");
        json parsed = json::parse(args.get<std::string>(), nullptr, false);
        if (parsed.is_discarded() || !parsed.is_object())
          throw invalid(cat + ".function.arguments", cat + ".function.arguments must be a JSON object");
        args = std::move(parsed);
      }
      list.push_back(std::move(c2));
    }
    out["tool_calls"] = std::move(list);
  }
  // reasoning_content: an assistant turn's thought, which templates that
  // think render (or drop) in their own way.
  for (const char* k : {"tool_call_id", "name", "reasoning_content"})
    if (const json* v = Fields(m).get(k); v && v->is_string()) out[k] = *v;
  return out;
}

// The generic tool format writes past calls and results as text: an
// assistant turn's calls as <tool_call> blocks, tool results as a user turn
// of <tool_response> blocks (consecutive results in one turn), so that any
// template renders them and roles still alternate.
json generic_history(const json& msgs) {
  json out = json::array();
  bool after_result = false;
  for (const json& m : msgs) {
    const bool result = m["role"] == "tool";
    if (m["role"] == "assistant" && m.contains("tool_calls")) {
      std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
      for (const json& c : m["tool_calls"]) {
        if (!text.empty()) text += '\n';
        const json& fn = c["function"];
        text += generic_call_text(fn["name"].get<std::string>(), fn.contains("arguments") ? fn["arguments"] : json::object());
      }
      out.push_back({{"role", "assistant"}, {"content", text}});
    } else if (result) {
      const std::string block = "<tool_response>" + m["content"].get<std::string>() + "</tool_response>";
      if (after_result)
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + block;
      else
        out.push_back({{"role", "user"}, {"content", block}});
    } else {
      out.push_back(m);
    }
    after_result = result;
  }
  return out;
}

// OpenAI makes a tool's description and parameters optional, but templates
// that add the description to a string or walk the parameters' properties
// (Hermes 2 Pro's and 3's, gpt-oss's, functionary 3.1's, Apertus', Seed-OSS',
// Command R's) fail on a tool without them, in jinja2 as here. Such a
// render is tried once more with "" and an empty parameter list in their
// place; where the template renders the tools as sent, its prompt is
// jinja2's. The error is the first render's.
ChatPrompt render_chat(const ChatTemplate& chat, ChatInput& in) {
  try {
    return chat.render(in);
  } catch (const jinja::TemplateError& e) {
    if (e.template_kind() != jinja::TemplateErrorKind::kUndefined && e.template_kind() != jinja::TemplateErrorKind::kType)
      throw;
    if (!in.tools.is_array()) throw;
    bool filled = false;
    for (json& t : in.tools) {
      const json fn = t["function"];
      if (fn.contains("description") && fn.contains("parameters")) continue;
      filled = true;
      json& out = t["function"] = json::object();
      out["name"] = fn["name"];
      out["description"] = fn.contains("description") ? fn["description"] : json("");
      out["parameters"] = tool_parameters(fn);
      if (fn.contains("strict")) out["strict"] = fn["strict"];
    }
    if (!filled) throw;
    try {
      return chat.render(in);
    } catch (const jinja::TemplateError&) {
      throw e;
    }
  }
}

// The tools a template takes no tools for: described in the system message.
void add_generic_tools(json& msgs, const json& tools) {
  const std::string text = generic_tools_text(tools);
  if (!msgs.empty() && msgs[0]["role"] == "system" && msgs[0]["content"].is_string())
    msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + text;
  else
    msgs.insert(msgs.begin(), json{{"role", "system"}, {"content", text}});
}

}  // namespace

void add_tool_template(ApiLimits& lim, const ChatTemplate& chat_tools) {
  const ToolSyntax s = tool_syntax(chat_tools.source());
  if (!s.template_takes_tools) return;
  lim.chat_tools = &chat_tools;
  lim.tools_of_chat_tools = s;
}

ApiRequest parse_chat_request(const std::string& body, const ApiLimits& lim) {
  return parse_chat_json(parse_body(body), lim);
}

void set_thought(ApiRequest& r, int budget, const ApiLimits& lim) {
  if (!r.reasoning) return;
  // A JSON constraint (a schema, any JSON, a demanded tool call) is the
  // answer's: after the thought, not inside it (a regex or a grammar may
  // spell out the thought's markup, so it sees the reply whole).
  const bool answer =
      r.constraint && (r.constraint->kind == GrammarKind::kJsonSchema || r.constraint->kind == GrammarKind::kAnyJson);
  r.engine.grammar_after_thought = answer;
  if (budget >= 0) r.engine.think_budget = budget;
  if (r.engine.think_budget < 0 && !answer) return;  // nothing watches the thought
  r.engine.think_open = r.in_thought;
  if (!r.channels) {
    r.engine.think_end = lim.tokenizer->encode(kThoughtClose, true);
    return;
  }
  // Harmony: the thought is an analysis message the reply may open; the
  // answer is a message of its own. Under a JSON constraint its channel is
  // the grammar's to spell (a call's header, or the final channel a JSON
  // answer gets here), so the thought's close stops at the next message's
  // start, and follows the <|end|> the reply writes itself.
  r.engine.think_start = kChannelsOpen;
  r.engine.think_stop = kChannelsStop;
  if (!answer) {
    r.engine.think_end = lim.tokenizer->encode(kChannelsClose, true);
    return;
  }
  if (!r.constraint->frame) {
    JsonFrame final_channel;
    final_channel.open = kChannelsFinal;
    r.constraint->frame = std::move(final_channel);
  }
  r.engine.think_end = lim.tokenizer->encode(std::string(kChannelsStop) + std::string(kChannelsNext), true);
  r.engine.think_resume = lim.tokenizer->encode(kChannelsNext, true);
}

ApiRequest parse_chat_json(const json& j, const ApiLimits& lim, const std::string& continue_text) {
  refuse_unsupported(j, true);
  ApiRequest out;
  out.chat = true;
  parse_common(j, lim, out);
  parse_constraint(j, out);
  const Fields f(j);
  if (f.boolean("logprobs").value_or(false)) {
    out.logprobs = true;
    out.engine.logprobs = int(f.integer("top_logprobs", 0, 20).value_or(0));
  } else if (f.get("top_logprobs")) {
    throw invalid("top_logprobs", "top_logprobs needs logprobs: true");
  }
  std::optional<long long> max = f.integer("max_completion_tokens", 0, 1 << 24);
  const char* param = "max_completion_tokens";
  if (!max) max = f.integer("max_tokens", 0, 1 << 24), param = "max_tokens";
  if (parse_pml(j, out, max)) {
    if (const json* m = f.get("messages"); m && !(m->is_array() && m->empty()))
      throw invalid("pml", "give either messages or pml, not both (messages may be [])");
    if (const json* t = f.get("tools"); t && !(t->is_array() && t->empty()))
      throw invalid("tools", "tools need messages (a PML prompt writes its own text)");
    return out;
  }
  const json* msgs = f.get("messages");
  if (!msgs) throw invalid("messages", "messages is required", "missing_required_parameter");
  if (!msgs->is_array()) throw invalid("messages", "messages must be a list", "invalid_type");
  if (msgs->empty()) throw invalid("messages", "messages must not be empty");
  ChatInput in;
  for (size_t i = 0; i < msgs->size(); ++i) in.messages.push_back(chat_message(msgs->at(i), i));
  if (const json* kw = f.get("chat_template_kwargs")) {
    if (!kw->is_object()) throw invalid("chat_template_kwargs", "chat_template_kwargs must be an object", "invalid_type");
    in.kwargs = *kw;
  }
  // reasoning_effort: "none" turns a thinking template's thought off (unless
  // chat_template_kwargs say otherwise); the others bound it (effort_budget);
  // low, medium and high also go to templates that read it (gpt-oss's).
  int budget = -1;
  if (const auto effort = f.string("reasoning_effort")) {
    if (*effort == "none") {
      if (!in.kwargs.contains("enable_thinking")) in.kwargs["enable_thinking"] = false;
    } else if ((budget = effort_budget(*effort)) < 0 && *effort != "max") {
      throw invalid("reasoning_effort", "reasoning_effort must be none, minimal, low, medium, high, xhigh or max");
    }
    if ((*effort == "low" || *effort == "medium" || *effort == "high") && !in.kwargs.contains("reasoning_effort"))
      in.kwargs["reasoning_effort"] = *effort;
  }
  // thinking_budget: chunkserve's extension, the budget in tokens.
  if (const auto b = f.integer("thinking_budget", 0, 1 << 24)) budget = int(*b);
  const json tools = f.get("tools") ? parse_tools(*f.get("tools")) : json::array();
  const ToolChoice choice = parse_tool_choice(f.get("tool_choice"), tools);
  const json callable = check_tool_schemas(tools, choice);
  const bool parallel = f.boolean("parallel_tool_calls").value_or(true);
  const bool offered = choice.kind != ToolChoice::Kind::kNone;
  const ChatTemplate& chat = offered && lim.chat_tools ? *lim.chat_tools : *lim.chat;
  const ToolSyntax& syntax = offered && lim.chat_tools ? lim.tools_of_chat_tools : lim.tools;
  if (!syntax.template_takes_tools) in.messages = generic_history(in.messages);
  if (offered) {
    out.tools = true;
    out.tool_format = syntax.format;
    if (xml_format(syntax.format))
      out.param_types = std::make_shared<const ParamTypes>(param_types(tools));
    if (syntax.template_takes_tools)
      in.tools = tools;
    else
      add_generic_tools(in.messages, tools);
  }
  if (choice.kind == ToolChoice::Kind::kRequired || choice.kind == ToolChoice::Kind::kNamed) {
    if (out.constraint)
      throw invalid(out.constraint_param, out.constraint_param + " cannot be combined with a tool_choice that demands a call");
    out.constraint = tool_call_grammar(allowed_only(tools, choice), syntax.format, choice, parallel);
    out.constraint_param = "tools";
    out.calls_constrained = true;
  } else if (choice.kind == ToolChoice::Kind::kAuto) {
    // The model may answer or call; a call it begins is constrained from
    // its marker on as a demanded one would be (each names a tool, its
    // arguments that tool's parameters), so every call it makes parses.
    // Beside a JSON response_format the reply is either the answer in that
    // format or calls, from its start (an agent's structured final answer
    // after its calls). A regex or grammar is the whole reply's.
    // (Harmony's calls with the recipient in the role's header are the
    // triggered grammar's: from the reply's start it is the channel's.)
    const ToolChoice any = out.constraint ? ToolChoice{ToolChoice::Kind::kRequired, ""} : choice;
    GrammarSpec calls = tool_call_grammar(allowed_only(callable, choice), syntax.format, any, parallel);
    if (!out.constraint) {
      out.constraint = std::move(calls);
      out.constraint_param = "tools";
      out.calls_constrained = true;
      out.engine.grammar_triggers = tool_call_triggers(syntax.format);
      // The client's where it named the tools calls may use (allowed_tools).
      out.constraint_optional = choice.allowed.empty() && std::none_of(tools.begin(), tools.end(), [](const json& t) {
        return t["function"].contains("strict") && t["function"]["strict"] == true;
      });
    } else if (out.constraint->kind == GrammarKind::kJsonSchema || out.constraint->kind == GrammarKind::kAnyJson) {
      out.constraint->or_else = std::make_shared<const GrammarSpec>(std::move(calls));
      out.calls_constrained = true;
    }
  }
  // Special tokens come from the template's markup only, never from a message.
  try {
    ChatPrompt prompt = render_chat(chat, in);
    prompt.content(continue_text);  // the reply's start: the model goes on from it
    out.engine.prompt = prompt.encode(*lim.tokenizer, true);
    if (template_thinks(chat.source())) {
      out.reasoning = true;
      out.in_thought = opens_thought(prompt.text());
      set_thought(out, budget, lim);
    } else if (template_has_channels(chat.source())) {
      out.reasoning = out.channels = true;
      set_thought(out, budget, lim);
    }
  } catch (const jinja::TemplateError& e) {
    throw invalid("messages", "the model's chat template refused the conversation: " + e.message() +
                                  (e.line() > 0 ? " (template line " + std::to_string(e.line()) + ")" : ""));
  }
  set_max_tokens(max, param, lim, out);
  return out;
}

}  // namespace cs
