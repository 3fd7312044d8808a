// The Messages API mapped to the chat machinery (server/messages_api.h).
#include "server/messages_api.h"

#include <algorithm>
#include <climits>
#include <optional>

#include "server/api_json.h"

namespace cs {

using json = nlohmann::ordered_json;
using api::dump;
using api::field;
using api::invalid;
using api::random_id;
using api::type_of;

namespace {

// cache_control: {"type": "ephemeral", "ttl": "5m" | "1h"}; counted.
void cache_mark(const json& block, const std::string& at, int& marks) {
  const json* cc = field(block, "cache_control");
  if (!cc) return;
  const std::string p = at.empty() ? "cache_control" : at + ".cache_control";  // "": the request's own
  if (!cc->is_object() || type_of(*cc) != "ephemeral")
    throw invalid(p, p + " must be {\"type\": \"ephemeral\", \"ttl\": \"5m\" | \"1h\"}");
  if (const json* ttl = field(*cc, "ttl"); ttl && !(*ttl == "5m" || *ttl == "1h"))
    throw invalid(p + ".ttl", p + ".ttl must be \"5m\" or \"1h\"");
  if (++marks > 4) throw invalid(p, "at most 4 cache_control marks are allowed in a request");
}

// Text given as a string or as a list of text blocks, the blocks' texts
// joined by newlines.
std::string text_of(const json& content, const std::string& at, int& marks) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw invalid(at, at + " must be a string or a list of text blocks", "invalid_type");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string bat = at + "[" + std::to_string(i) + "]";
    const json& b = content[i];
    const json* t = b.is_object() ? field(b, "text") : nullptr;
    if (type_of(b) != "text" || !t || !t->is_string())
      throw invalid(bat, bat + " must be a text block {\"type\": \"text\", \"text\": ...}" +
                             (type_of(b).empty() ? "" : " (" + type_of(b) + " blocks are not supported here)"));
    cache_mark(b, bat, marks);
    if (i) text += '\n';
    text += t->get<std::string>();
  }
  return text;
}


// A turn after the others; consecutive turns of one role are one turn, as
// the API combines them (texts joined by a newline), where neither carries
// more than text.
void push_turn(json& out, json msg) {
  if (!out.empty()) {
    json& prev = out.back();
    const bool plain = prev.size() == 2 && msg.size() == 2 && prev["content"].is_string() && msg["content"].is_string();
    if (plain && prev["role"] == msg["role"] && prev["role"] != "system") {
      prev["content"] = prev["content"].get<std::string>() + "\n" + msg["content"].get<std::string>();
      return;
    }
  }
  out.push_back(std::move(msg));
}

// One message of the Messages API as chat messages: a user turn's
// tool_result blocks become tool messages (in their order, before the turn's
// text), an assistant turn's tool_use blocks its tool_calls and its thinking
// its reasoning_content.
void map_message(const json& m, size_t i, json& out, int& marks) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) throw invalid(at, at + " must be an object", "invalid_type");
  const json* role = field(m, "role");
  if (!role || !(*role == "user" || *role == "assistant"))
    throw invalid(at + ".role", at + ".role must be \"user\" or \"assistant\"");
  const bool user = *role == "user";
  const json* content = field(m, "content");
  if (!content) throw invalid(at + ".content", at + ".content is required", "missing_required_parameter");
  if (content->is_string()) {
    push_turn(out, {{"role", *role}, {"content", *content}});
    return;
  }
  if (!content->is_array()) throw invalid(at + ".content", at + ".content must be a string or a list of blocks", "invalid_type");
  std::string text, thinking;
  bool has_text = false;
  json calls = json::array();
  for (size_t k = 0; k < content->size(); ++k) {
    const json& b = (*content)[k];
    const std::string bat = at + ".content[" + std::to_string(k) + "]";
    const std::string type = type_of(b);
    if (type == "text") {
      const json* t = field(b, "text");
      if (!t || !t->is_string()) throw invalid(bat + ".text", bat + ".text must be a string", "invalid_type");
      cache_mark(b, bat, marks);
      if (has_text) text += '\n';
      text += t->get<std::string>();
      has_text = true;
    } else if (type == "tool_result" && user) {
      const json* id = field(b, "tool_use_id");
      if (!id || !id->is_string())
        throw invalid(bat + ".tool_use_id", bat + ".tool_use_id is required", "missing_required_parameter");
      cache_mark(b, bat, marks);
      const json* c = field(b, "content");
      std::string result = c ? text_of(*c, bat + ".content", marks) : "";
      if (const json* e = field(b, "is_error"); e && e->is_boolean() && e->get<bool>()) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if (type == "tool_use" && !user) {
      const json* id = field(b, "id");
      const json* name = field(b, "name");
      const json* input = field(b, "input");
      if (!id || !id->is_string() || !name || !name->is_string())
        throw invalid(bat, bat + " must be {\"type\": \"tool_use\", \"id\", \"name\", \"input\": {...}}");
      if (input && !input->is_object()) throw invalid(bat + ".input", bat + ".input must be an object", "invalid_type");
      cache_mark(b, bat, marks);
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", input ? *input : json::object()}}}});
    } else if (type == "thinking" && !user) {
      const json* t = field(b, "thinking");
      if (!t || !t->is_string()) throw invalid(bat + ".thinking", bat + ".thinking must be a string", "invalid_type");
      thinking += t->get<std::string>();
    } else if (type == "redacted_thinking" && !user) {
      // Encrypted by another server: nothing here can read it.
    } else {
      throw invalid(bat + ".type", bat + ": " + (type.empty() ? std::string("a block without a type") : type + " blocks") +
                                       " are not supported in " + (user ? "user" : "assistant") + " messages",
                    "unsupported_parameter");
    }
  }
  if (!has_text && calls.empty() && thinking.empty() && !user) return;  // nothing the template could show
  if (user && !has_text && !out.empty() && out.back()["role"] == "tool") return;  // only tool results
  json msg = {{"role", *role}};
  msg["content"] = has_text || calls.empty() ? json(text) : json(nullptr);
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (!thinking.empty()) msg["reasoning_content"] = thinking;
  push_turn(out, std::move(msg));
}

// tools: [{"name", "description", "input_schema"}]: custom tools only.
json map_tools(const json& tools, int& marks) {
  if (!tools.is_array()) throw invalid("tools", "tools must be a list", "invalid_type");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) throw invalid(at, at + " must be an object", "invalid_type");
    if (const std::string type = type_of(t); !type.empty() && type != "custom")
      throw invalid(at + ".type", at + ": the tool type '" + type + "' (a server tool) is not supported; give custom tools",
                    "unsupported_parameter");
    const json* name = field(t, "name");
    const json* schema = field(t, "input_schema");
    if (!name || !name->is_string()) throw invalid(at + ".name", at + ".name is required", "missing_required_parameter");
    if (!schema || !schema->is_object())
      throw invalid(at + ".input_schema", at + ".input_schema must be a JSON schema (an object)", "invalid_type");
    cache_mark(t, at, marks);
    json fn = {{"name", *name}};
    if (const json* d = field(t, "description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    if (const json* st = field(t, "strict")) fn["strict"] = *st;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// The chat body a Messages body means, the reply's start (a final assistant
// message) apart.
json to_chat(const json& j, bool count_only, std::string& prefill, int& marks) {
  json chat = json::object();
  if (const json* m = field(j, "model")) chat["model"] = *m;
  if (!count_only) {
    const json* max = field(j, "max_tokens");
    if (!max) throw invalid("max_tokens", "max_tokens is required", "missing_required_parameter");
    // 0: the prompt only (it stays cached), no reply.
    if (!max->is_number_integer() || max->get<long long>() < 0)
      throw invalid("max_tokens", "max_tokens must be an integer, at least 0", "invalid_type");
    chat["max_tokens"] = *max;
    // seed, regex, grammar: chunkserve's extensions, as on the chat route
    // (reproducible sampled answers; a reply's form constrained).
    for (const char* k : {"stream", "top_p", "top_k", "seed", "regex", "grammar"})
      if (const json* v = field(j, k)) chat[k] = *v;
    if (const json* t = field(j, "temperature")) {
      if (!t->is_number() || t->get<double>() < 0 || t->get<double>() > 1)
        throw invalid("temperature", "temperature must be a number in [0, 1]");
      chat["temperature"] = *t;
    }
  }
  if (const json* md = field(j, "metadata"); md && !md->is_object())
    throw invalid("metadata", "metadata must be an object", "invalid_type");
  for (const char* k : {"container", "mcp_servers"})
    if (field(j, k)) throw invalid(k, std::string(k) + " is not supported", "unsupported_parameter");
  // thinking: "adaptive" leaves it to the model (a template that does not
  // think answers without); "enabled" asks for thinking blocks, which this
  // server does not separate from the answer yet.
  if (const json* th = field(j, "thinking")) {
    const std::string type = th->is_object() ? type_of(*th) : "";
    if (type != "disabled" && type != "adaptive" && type != "enabled")
      throw invalid("thinking", "thinking must be {\"type\": \"adaptive\" | \"enabled\" | \"disabled\"}");
    if (type == "enabled") {
      const json* budget = field(*th, "budget_tokens");
      const json* max = field(j, "max_tokens");
      if (!budget || !budget->is_number_integer() || budget->get<long long>() < 1024 ||
          (max && max->is_number_integer() && budget->get<long long>() >= max->get<long long>()))
        throw invalid("thinking.budget_tokens", "thinking.budget_tokens must be an integer, at least 1024 and below max_tokens");
    }
  }
  // Structured outputs: output_config.format, or output_format (its earlier name).
  const json* oc = field(j, "output_config");
  if (oc && !oc->is_object()) throw invalid("output_config", "output_config must be an object", "invalid_type");
  const json* format = oc ? field(*oc, "format") : nullptr;
  const char* format_param = "output_config.format";
  if (const json* of = field(j, "output_format")) {
    if (format) throw invalid("output_format", "give output_config.format or output_format, not both");
    format = of, format_param = "output_format";
  }
  if (format) {
    const json* schema = format->is_object() ? field(*format, "schema") : nullptr;
    if (type_of(*format) != "json_schema" || !schema || !schema->is_object())
      throw invalid(format_param, std::string(format_param) + " must be {\"type\": \"json_schema\", \"schema\": {...}}");
    chat["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
  }
  if (const json* cc = field(j, "cache_control")) cache_mark({{"cache_control", *cc}}, "", marks);

  json msgs = json::array();
  if (const json* sys = field(j, "system")) msgs.push_back({{"role", "system"}, {"content", text_of(*sys, "system", marks)}});
  const json* m = field(j, "messages");
  if (!m) throw invalid("messages", "messages is required", "missing_required_parameter");
  if (!m->is_array() || m->empty()) throw invalid("messages", "messages must be a non-empty list", "invalid_type");
  // A final assistant message is the start of the reply: the model goes on from it.
  size_t n = m->size();
  const json& last = m->back();
  if (last.is_object() && field(last, "role") && last["role"] == "assistant") {
    const std::string at = "messages[" + std::to_string(n - 1) + "]";
    const json* c = field(last, "content");
    if (!c) throw invalid(at + ".content", at + ".content is required", "missing_required_parameter");
    prefill = text_of(*c, at + ".content", marks);
    --n;
    if (n == 0) throw invalid("messages", "messages must hold a user message before the reply's start");
  }
  for (size_t i = 0; i < n; ++i) map_message((*m)[i], i, msgs, marks);
  chat["messages"] = std::move(msgs);

  if (const json* t = field(j, "tools")) chat["tools"] = map_tools(*t, marks);
  if (const json* tc = field(j, "tool_choice")) {
    const std::string type = tc->is_object() ? type_of(*tc) : "";
    if (type == "auto" || type == "none") {
      chat["tool_choice"] = type;
    } else if (type == "any") {
      chat["tool_choice"] = "required";
    } else if (type == "tool") {
      const json* name = field(*tc, "name");
      if (!name || !name->is_string())
        throw invalid("tool_choice.name", "tool_choice {\"type\": \"tool\"} needs the tool's name", "missing_required_parameter");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
      throw invalid("tool_choice", "tool_choice must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    }
    if (const json* d = field(*tc, "disable_parallel_tool_use")) {
      if (!d->is_boolean()) throw invalid("tool_choice.disable_parallel_tool_use", "disable_parallel_tool_use must be true or false", "invalid_type");
      chat["parallel_tool_calls"] = !d->get<bool>();
    }
  }
  return chat;
}


}  // namespace

namespace {

// thinking: on or off through the template (enable_thinking, as Qwen3's
// reads it); true when enabled.
bool apply_thinking(const json& j, json& chat) {
  const json* th = field(j, "thinking");
  if (!th || type_of(*th) == "adaptive") return false;
  const bool on = type_of(*th) == "enabled";
  chat["chat_template_kwargs"] = {{"enable_thinking", on}};
  return on;
}

// Thinking enabled of a template that does not think is a 400. The template
// is the one the request rendered with: the file's template for tools where
// the request offers tools and the file has one (it may think where the
// default does not, or the other way round).
void check_thinks(bool on, const ApiRequest& r) {
  if (on && !r.reasoning)
    throw invalid("thinking", "thinking is enabled, but this model's chat template does not think (no <think> in it)",
                  "unsupported_parameter");
}

std::chrono::seconds ttl_of(const json& block) {
  const json* cc = field(block, "cache_control");
  const json* ttl = cc ? field(*cc, "ttl") : nullptr;
  return std::chrono::seconds(ttl && *ttl == "1h" ? 3600 : 300);
}

// The cache_control marks of a (checked) body, each with the body cut right
// after its block: the tools up to a marked tool (the system kept: tools
// render inside it), the system blocks up to a marked one, the messages up
// to a marked block (an assistant turn then followed by a user turn, so it
// is not the reply's start); a cut body ends with a user turn. The request's
// own mark closes the whole prompt (no cut body).
std::vector<std::pair<std::optional<json>, std::chrono::seconds>> marked_cuts(const json& j) {
  std::vector<std::pair<std::optional<json>, std::chrono::seconds>> out;
  const json next_turn = {{"role", "user"}, {"content", "."}};
  json base = j;
  for (const char* k : {"tool_choice", "output_config", "output_format", "stop_sequences", "stream", "cache_control"})
    base.erase(k);
  if (const json* tools = field(j, "tools"))
    for (size_t i = 0; i < tools->size(); ++i)
      if (field((*tools)[i], "cache_control")) {
        json cut = base;
        cut["tools"] = json(tools->begin(), tools->begin() + long(i) + 1);
        cut["messages"] = json::array({next_turn});
        out.emplace_back(std::move(cut), ttl_of((*tools)[i]));
      }
  if (const json* sys = field(j, "system"); sys && sys->is_array())
    for (size_t i = 0; i < sys->size(); ++i)
      if (field((*sys)[i], "cache_control")) {
        json cut = base;
        cut["system"] = json(sys->begin(), sys->begin() + long(i) + 1);
        cut["messages"] = json::array({next_turn});
        out.emplace_back(std::move(cut), ttl_of((*sys)[i]));
      }
  const json& msgs = j["messages"];
  for (size_t m = 0; m < msgs.size(); ++m) {
    const json* content = field(msgs[m], "content");
    if (!content || !content->is_array()) continue;
    for (size_t k = 0; k < content->size(); ++k) {
      const json& block = (*content)[k];
      bool marked = field(block, "cache_control") != nullptr;
      const json* inner = type_of(block) == "tool_result" ? field(block, "content") : nullptr;
      if (inner && inner->is_array())
        for (const json& b : *inner) marked = marked || field(b, "cache_control");
      if (!marked) continue;
      json cut = base;
      json turns(msgs.begin(), msgs.begin() + long(m) + 1);
      json& last = turns.back();
      last["content"] = json(content->begin(), content->begin() + long(k) + 1);
      if (last["role"] == "assistant") turns.push_back(next_turn);
      cut["messages"] = std::move(turns);
      out.emplace_back(std::move(cut), ttl_of(block));
    }
  }
  if (field(j, "cache_control")) out.emplace_back(std::nullopt, ttl_of(j));
  return out;
}

}  // namespace

int MessagesRequest::cached_prefix() const {
  int n = 0;
  for (const Breakpoint& b : breakpoints) n = std::max(n, b.tokens);
  return n;
}

MessagesRequest parse_messages_request(const std::string& body, const ApiLimits& lim) {
  const json j = api::parse_object(body);
  MessagesRequest out;
  std::string prefill;
  int marks = 0;
  json chat = to_chat(j, false, prefill, marks);
  const bool thinking = apply_thinking(j, chat);
  try {
    out.chat = parse_chat_json(chat, lim, prefill);
  } catch (const ApiError& e) {  // a tool's fields in this API's names
    throw renamed(renamed(e, "].function.parameters", "].input_schema"), "].function.name", "].name");
  }
  check_thinks(thinking, out.chat);
  if (const json* th = field(j, "thinking"); th && type_of(*th) == "enabled")
    set_thought(out.chat, int((*th)["budget_tokens"].get<long long>()), lim);
  // Each mark's prefix: the tokens the prompt shares with its cut body's.
  const std::vector<int32_t>& prompt = out.chat.engine.prompt;
  ApiLimits any_length = lim;
  any_length.n_ctx = INT_MAX;
  for (auto& [cut, ttl] : marked_cuts(j)) {
    int n = int(prompt.size());
    if (cut) {
      try {
        std::string cut_prefill;
        int cut_marks = 0;
        const std::vector<int32_t> other =
            parse_chat_json(to_chat(*cut, true, cut_prefill, cut_marks), any_length, cut_prefill).engine.prompt;
        n = int(std::mismatch(prompt.begin(), prompt.end(), other.begin(), other.end()).first - prompt.begin());
      } catch (const ApiError&) {
        continue;  // a template that refuses the cut conversation: no prefix to hold
      }
    }
    if (n > 0) out.breakpoints.push_back({n, ttl});
  }
  out.model = out.chat.model;
  if (const json* stop = field(j, "stop_sequences")) {
    if (!stop->is_array() || stop->size() > 16)
      throw invalid("stop_sequences", "stop_sequences must be a list of at most 16 strings", "invalid_type");
    for (const json& s : *stop) {
      if (!s.is_string() || s.get<std::string>().empty())
        throw invalid("stop_sequences", "stop_sequences must hold non-empty strings", "invalid_type");
      out.chat.engine.stop.push_back(s.get<std::string>());
    }
  }
  return out;
}

int count_messages_tokens(const std::string& body, const ApiLimits& lim) {
  const json j = api::parse_object(body);
  std::string prefill;
  int marks = 0;
  json chat = to_chat(j, true, prefill, marks);
  const bool thinking = apply_thinking(j, chat);
  ApiLimits any_length = lim;
  any_length.n_ctx = INT_MAX;
  const ApiRequest r = parse_chat_json(chat, any_length, prefill);
  check_thinks(thinking, r);
  return int(r.engine.prompt.size());
}

const char* messages_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string messages_error_json(const ApiError& e) {
  return dump({{"type", "error"}, {"error", {{"type", messages_error_type(e.status)}, {"message", e.message}}}});
}

namespace {

const char* stop_reason(const Completion& c, bool calls) {
  if (calls) return "tool_use";
  if (c.reason != FinishReason::kStop) return "max_tokens";
  return c.stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

// The API's split of the prompt: read from the cache, written to it at the
// breakpoints (the prefix up to the last one, less what was read), the rest.
json usage_json(const Result& r, int cached_prefix) {
  const int read = r.usage.cached_tokens;
  const int written = std::max(0, std::min(cached_prefix, r.usage.prompt_tokens) - read);
  return {{"input_tokens", r.usage.prompt_tokens - read - written},
          {"cache_creation_input_tokens", written},
          {"cache_read_input_tokens", read},
          {"output_tokens", r.usage.completion_tokens}};
}

// A call's input: its arguments, or those written whole of a call the
// reply's end cut short (the object a client parsing the stream holds).
json tool_use_json(const ToolCall& c) {
  json input = json::parse(c.arguments, nullptr, false);
  if (!input.is_object()) input = partial_arguments(c.arguments);
  return {{"type", "tool_use"}, {"id", random_id("toolu_", false)}, {"name", c.name}, {"input", std::move(input)}};
}

std::string sse(const char* event, const json& data) { return std::string("event: ") + event + "\ndata: " + dump(data) + "\n\n"; }

}  // namespace

MessagesResponder::MessagesResponder(const MessagesRequest& req, std::string id)
    : req_(req), id_(std::move(id)), reasoning_(req.chat.splitter()),
      calls_(req.chat.tool_format, req.chat.calls_constrained, req.chat.param_types.get()) {}

std::string MessagesResponder::response(const Result& r) const {
  const Completion& c = r.completions.at(0);
  const SplitReply split = req_.chat.reasoning ? req_.chat.split(c.text) : SplitReply{"", c.text};
  // With tools: text blocks and tool_use blocks in the order written, as a
  // stream sends them.
  const std::vector<ReplyPart> parts = req_.chat.tools
                                           ? read_reply(split.content, req_.chat.tool_format, req_.chat.calls_constrained,
                                                        req_.chat.param_types.get())
                                           : std::vector<ReplyPart>{ReplyPart{false, split.content, {}}};
  json content = json::array();
  if (!split.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", split.reasoning}, {"signature", ""}});
  bool calls = false;
  for (const ReplyPart& part : parts) {
    if (part.is_call) content.push_back(tool_use_json(part.call));
    else if (!part.text.empty()) content.push_back({{"type", "text"}, {"text", part.text}});
    if (part.is_call) calls = part.call.complete;
  }
  return dump({{"id", id_},
               {"type", "message"},
               {"role", "assistant"},
               {"model", req_.model},
               {"content", std::move(content)},
               {"stop_reason", stop_reason(c, calls)},
               {"stop_sequence", c.stop_sequence.empty() ? json(nullptr) : json(c.stop_sequence)},
               {"usage", usage_json(r, req_.cached_prefix())}});
}

std::string MessagesResponder::start(int prompt_tokens) const {
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", req_.model},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage",
                         {{"input_tokens", prompt_tokens},
                          {"cache_creation_input_tokens", 0},
                          {"cache_read_input_tokens", 0},
                          {"output_tokens", 0}}}};
  return sse("message_start", {{"type", "message_start"}, {"message", message}});
}

std::string MessagesResponder::block_delta(int& open, const json& start, const json& delta) {
  std::string out;
  if (open < 0) {
    open = next_block_++;
    out += sse("content_block_start", {{"type", "content_block_start"}, {"index", open}, {"content_block", start}});
  }
  return out + sse("content_block_delta", {{"type", "content_block_delta"}, {"index", open}, {"delta", delta}});
}

std::string MessagesResponder::text_delta(const std::string& s) {
  if (s.empty()) return {};
  return block_delta(open_text_, {{"type", "text"}, {"text", ""}}, {{"type", "text_delta"}, {"text", s}});
}

// The thought as a thinking block, open until the answer begins.
std::string MessagesResponder::thinking_delta(const std::string& s) {
  if (s.empty()) return {};
  return block_delta(open_thinking_, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}},
                     {{"type", "thinking_delta"}, {"thinking", s}});
}

std::string MessagesResponder::close_text() {
  if (open_text_ < 0) return {};
  const int index = std::exchange(open_text_, -1);
  return sse("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
}

std::string MessagesResponder::event(const StreamEvent& ev) {
  if (ev.kind != StreamEvent::Kind::kToken || ev.text.empty()) return {};
  if (!req_.chat.reasoning) return answer(ev.text);
  const SplitReply piece = reasoning_.push(ev.text);
  return thinking_delta(piece.reasoning) + answer(piece.content);
}

std::string MessagesResponder::answer(const std::string& s) {
  if (s.empty()) return {};
  std::string out;
  if (open_thinking_ >= 0)  // the thought is over
    out += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", std::exchange(open_thinking_, -1)}});
  if (!req_.chat.tools) return out + text_delta(s);
  return out + call_pieces(calls_.push(s));
}

// With tools: text as text blocks, each call as a tool_use block opened
// when it begins, its input as input_json_delta pieces as it is written
// (call_stream.h: a call not written under its grammar comes whole at the end).
std::string MessagesResponder::call_pieces(std::vector<CallPiece> pieces) {
  std::string out;
  for (CallPiece& p : pieces) {
    switch (p.kind) {
      case CallPiece::Kind::kContent: out += text_delta(p.text); break;
      case CallPiece::Kind::kCall:
        out += close_text();
        open_call_ = next_block_++;
        out += sse("content_block_start",
                   {{"type", "content_block_start"},
                    {"index", open_call_},
                    {"content_block",
                     {{"type", "tool_use"}, {"id", random_id("toolu_", false)}, {"name", p.text}, {"input", json::object()}}}});
        calls_made_ = false;
        break;
      case CallPiece::Kind::kArguments:
        out += sse("content_block_delta", {{"type", "content_block_delta"},
                                           {"index", open_call_},
                                           {"delta", {{"type", "input_json_delta"}, {"partial_json", p.text}}}});
        break;
      case CallPiece::Kind::kEnd:
        out += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", std::exchange(open_call_, -1)}});
        calls_made_ = p.complete;
        break;
    }
  }
  return out;
}

std::string MessagesResponder::finish(const Result& r) {
  const Completion& c = r.completions.at(0);
  std::string out;
  if (req_.chat.reasoning) {
    const SplitReply piece = reasoning_.flush();
    out += thinking_delta(piece.reasoning);
    out += answer(piece.content);
    if (open_thinking_ >= 0)  // a thought never closed
      out += sse("content_block_stop", {{"type", "content_block_stop"}, {"index", std::exchange(open_thinking_, -1)}});
  }
  if (req_.chat.tools) out += call_pieces(calls_.finish());
  out += close_text();
  out += sse("message_delta", {{"type", "message_delta"},
                               {"delta",
                                {{"stop_reason", stop_reason(c, calls_made_)},
                                 {"stop_sequence", c.stop_sequence.empty() ? json(nullptr) : json(c.stop_sequence)}}},
                               {"usage", usage_json(r, req_.cached_prefix())}});
  return out + sse("message_stop", {{"type", "message_stop"}});
}

std::string MessagesResponder::ping() { return sse("ping", {{"type", "ping"}}); }

std::string MessagesResponder::error_event(const ApiError& e) {
  return "event: error\ndata: " + messages_error_json(e) + "\n\n";
}

}  // namespace cs
