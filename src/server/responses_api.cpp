// The Responses API mapped to the chat machinery (server/responses_api.h).
#include "server/responses_api.h"


#include "server/api_json.h"
#include "server/tool_calls.h"

namespace cs {

using json = nlohmann::ordered_json;
using api::dump;
using api::field;
using api::invalid;
using api::random_id;
using api::type_of;

namespace {


std::string string_field(const json& item, const char* name, const std::string& at) {
  const json* v = field(item, name);
  if (!v || !v->is_string())
    throw invalid(at + "." + name, at + "." + name + " must be a string", v ? "invalid_type" : "missing_required_parameter");
  return v->get<std::string>();
}

// A message's text: a string, or its text parts joined (input_text,
// output_text, refusal).
std::string message_text(const json& content, const std::string& at) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw invalid(at, at + " must be a string or a list of content parts", "invalid_type");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pat = at + "[" + std::to_string(i) + "]";
    const std::string type = type_of(content[i]);
    if (type == "input_text" || type == "output_text") {
      text += string_field(content[i], "text", pat);
    } else if (type == "refusal") {
      text += string_field(content[i], "refusal", pat);
    } else {
      throw invalid(pat + ".type", pat + ": " + (type.empty() ? std::string("a part without a type") : type + " parts") +
                                       " are not supported (text only)",
                    "unsupported_parameter");
    }
  }
  return text;
}

// `input`: a string (one user message) or a list of items, checked and
// kept as given (a string as its one message).
json input_items(const json& input) {
  if (input.is_string()) return json::array({{{"type", "message"}, {"role", "user"}, {"content", input}}});
  if (!input.is_array()) throw invalid("input", "input must be a string or a list of items", "invalid_type");
  json out = json::array();
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string at = "input[" + std::to_string(i) + "]";
    const json& item = input[i];
    if (!item.is_object()) throw invalid(at, at + " must be an object", "invalid_type");
    std::string type = type_of(item);
    if (type.empty() && field(item, "role")) type = "message";
    json kept = item;
    kept["type"] = type;
    if (type == "message") {
      const std::string role = string_field(item, "role", at);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        throw invalid(at + ".role", at + ".role must be user, assistant, system or developer");
      const json* c = field(item, "content");
      if (!c) throw invalid(at + ".content", at + ".content is required", "missing_required_parameter");
      (void)message_text(*c, at + ".content");
    } else if (type == "function_call") {
      string_field(item, "call_id", at);
      string_field(item, "name", at);
      const std::string args = string_field(item, "arguments", at);
      const int depth = json_nesting(args);
      if (depth > kMaxJsonNesting)
        throw invalid(at + ".arguments", at + ".arguments nests " + std::to_string(depth) + " levels deep", "too_deeply_nested");
      const json parsed = json::parse(args, nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object())
        throw invalid(at + ".arguments", at + ".arguments must be a JSON object as text");
    } else if (type == "function_call_output") {
      string_field(item, "call_id", at);
      const json* o = field(item, "output");
      if (!o) throw invalid(at + ".output", at + ".output is required", "missing_required_parameter");
      (void)message_text(*o, at + ".output");
    } else if (type == "reasoning") {
      // Its summary and text go back to the template as the next assistant
      // turn's reasoning_content (checked when mapped).
    } else {
      throw invalid(at + ".type", at + ": " + (type.empty() ? std::string("an item without a type") : type + " items") +
                                      " are not supported (message, function_call, function_call_output, reasoning)",
                    "unsupported_parameter");
    }
    out.push_back(std::move(kept));
  }
  return out;
}

// The text of a reasoning item: its content's reasoning_text, else its summary.
std::string reasoning_text(const json& item) {
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const json* parts = field(item, key);
    if (!parts || !parts->is_array()) continue;
    for (const json& p : *parts)
      if (const json* t = p.is_object() ? field(p, "text") : nullptr; t && t->is_string()) text += t->get<std::string>();
    if (!text.empty()) break;
  }
  return text;
}

// Items (checked) as chat messages: a function_call joins the assistant
// turn before it (its text, or the calls before it) or opens one; a
// function_call_output is a tool message; a reasoning item is the next
// assistant turn's reasoning_content.
json chat_messages(const json& items) {
  json out = json::array();
  bool assistant_open = false;
  std::string reasoning;
  for (const json& item : items) {
    const std::string type = item["type"].get<std::string>();
    if (type == "message") {
      std::string role = item["role"].get<std::string>();
      if (role == "developer") role = "system";
      json m = {{"role", role}, {"content", message_text(item["content"], "input")}};
      if (role == "assistant" && !reasoning.empty()) m["reasoning_content"] = std::exchange(reasoning, "");
      out.push_back(std::move(m));
      assistant_open = role == "assistant";
    } else if (type == "function_call") {
      json call = {{"id", item["call_id"]},
                   {"type", "function"},
                   {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
      if (!assistant_open) {
        json m = {{"role", "assistant"}, {"content", nullptr}};
        if (!reasoning.empty()) m["reasoning_content"] = std::exchange(reasoning, "");
        out.push_back(std::move(m));
      }
      json& turn = out.back();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = json::array();
      turn["tool_calls"].push_back(std::move(call));
      assistant_open = true;
    } else if (type == "function_call_output") {
      out.push_back({{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", message_text(item["output"], "output")}});
      assistant_open = false;
    } else if (type == "reasoning") {
      reasoning += reasoning_text(item);
    }
  }
  return out;
}

// tools: [{"type": "function", "name", "description", "parameters", "strict"}].
json chat_tools(const json& tools) {
  if (!tools.is_array()) throw invalid("tools", "tools must be a list", "invalid_type");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (type_of(t) != "function")
      throw invalid(at + ".type", at + ": " + (type_of(t).empty() ? std::string("a tool without a type") : "'" + type_of(t) + "' tools") +
                                      " are not supported (function tools only)",
                    "unsupported_parameter");
    json fn = {{"name", string_field(t, "name", at)}};
    for (const char* k : {"description", "parameters", "strict"})
      if (const json* v = field(t, k)) fn[k] = *v;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}


}  // namespace

ResponsesRequest parse_responses_request(const std::string& body, const ApiLimits& lim, ResponseStore& store) {
  const json j = api::parse_object(body);
  ResponsesRequest out;
  for (const char* k : {"background", "conversation", "prompt"})
    if (field(j, k) && !(std::string(k) == "background" && j[k] == false))
      throw invalid(k, std::string(k) + " is not supported", "unsupported_parameter");
  if (const json* lp = field(j, "top_logprobs"); lp && *lp != 0)
    throw invalid("top_logprobs", "top_logprobs is not supported on /v1/responses (use /v1/chat/completions)",
                  "unsupported_parameter");
  if (const json* s = field(j, "store")) {
    if (!s->is_boolean()) throw invalid("store", "store must be true or false", "invalid_type");
    out.store = s->get<bool>();
  }
  // The conversation so far: a stored response's, then this input.
  json items = json::array();
  if (const json* prev = field(j, "previous_response_id")) {
    if (!prev->is_string()) throw invalid("previous_response_id", "previous_response_id must be a string", "invalid_type");
    out.previous_response_id = prev->get<std::string>();
    const auto stored = store.get(out.previous_response_id);
    if (!stored)
      throw invalid("previous_response_id",
                    "Previous response with id '" + out.previous_response_id +
                        "' not found (never stored, stored with store: false, deleted, or evicted from this server's store)",
                    "previous_response_not_found");
    items = stored->conversation;
  }
  const json* input = field(j, "input");
  if (!input) throw invalid("input", "input is required", "missing_required_parameter");
  for (json& item : input_items(*input)) items.push_back(std::move(item));
  out.conversation = items;

  json chat = {{"model", field(j, "model") ? j["model"] : json(nullptr)}};
  json msgs = json::array();
  if (const json* ins = field(j, "instructions")) {
    if (!ins->is_string()) throw invalid("instructions", "instructions must be a string", "invalid_type");
    msgs.push_back({{"role", "system"}, {"content", *ins}});
  }
  for (json& m : chat_messages(items)) msgs.push_back(std::move(m));
  chat["messages"] = std::move(msgs);
  if (const json* max = field(j, "max_output_tokens")) chat["max_tokens"] = *max;
  // seed, regex, grammar: chunkserve's extensions, as on the chat route.
  for (const char* k : {"stream", "temperature", "top_p", "parallel_tool_calls", "seed", "regex", "grammar"})
    if (const json* v = field(j, k)) chat[k] = *v;
  if (const json* t = field(j, "tools")) chat["tools"] = chat_tools(*t);
  if (const json* tc = field(j, "tool_choice")) {
    if (tc->is_string()) {
      chat["tool_choice"] = *tc;
    } else if (type_of(*tc) == "function" && field(*tc, "name")) {
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    } else if (type_of(*tc) == "allowed_tools") {
      // {"type": "allowed_tools", "mode", "tools": [{"type": "function", "name"}]}:
      // the chat route's shape, each tool's name under "function".
      json allowed = {{"mode", field(*tc, "mode") ? (*tc)["mode"] : json()}};
      if (const json* list = field(*tc, "tools"); list && list->is_array()) {
        allowed["tools"] = json::array();
        for (const json& t : *list)
          allowed["tools"].push_back(t.is_object() && field(t, "name")
                                         ? json{{"type", field(t, "type") ? t["type"] : json("function")},
                                                {"function", {{"name", t["name"]}}}}
                                         : t);
      } else if (list) {
        allowed["tools"] = *list;
      }
      chat["tool_choice"] = {{"type", "allowed_tools"}, {"allowed_tools", std::move(allowed)}};
    } else {
      throw invalid("tool_choice", "tool_choice must be none, auto, required, {\"type\": \"function\", \"name\"} "
                                   "or {\"type\": \"allowed_tools\", \"mode\", \"tools\"}");
    }
  }
  if (const json* text = field(j, "text")) {
    const json* format = text->is_object() ? field(*text, "format") : nullptr;
    if (format) {
      const std::string type = type_of(*format);
      if (type == "json_schema") {
        const json* schema = field(*format, "schema");
        if (!schema) throw invalid("text.format.schema", "text.format.schema is required", "missing_required_parameter");
        json js = {{"name", field(*format, "name") ? (*format)["name"] : json("output")}, {"schema", *schema}};
        if (const json* st = field(*format, "strict")) js["strict"] = *st;
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else if (type == "json_object" || type == "text") {
        chat["response_format"] = {{"type", type}};
      } else {
        throw invalid("text.format.type", "text.format.type must be text, json_object or json_schema");
      }
    }
  }
  // reasoning.effort: the chat route's reasoning_effort (the thought off,
  // bounded, or told to the template).
  if (const json* r = field(j, "reasoning"); r && r->is_object())
    if (const json* e = field(*r, "effort")) chat["reasoning_effort"] = *e;
  out.tokenizer = lim.tokenizer;
  try {
    out.chat = parse_chat_json(chat, lim);
  } catch (ApiError& e) {
    // The chat route's names for the Responses API's own.
    if (e.param == "max_tokens") e.param = "max_output_tokens", e.message.replace(e.message.find("max_tokens"), 10, "max_output_tokens");
    if (e.param == "reasoning_effort") e.param = "reasoning.effort", e.message.replace(0, 16, "reasoning.effort");
    if (e.param == "messages") {  // the conversation as a whole: empty, or longer than the context
      e.param = "input";
      if (e.message.starts_with("messages")) e.message.replace(0, 8, "input");
    }
    // tools[i].function.parameters: a Responses tool holds its fields itself;
    // so does an allowed_tools choice.
    e = renamed(renamed(e, "tool_choice.allowed_tools.", "tool_choice."), R"("function": {"name"})", R"("name")");
    throw renamed(e, "].function.", "].");
  }
  // A schema that does not compile is refused later, under this name.
  if (out.chat.constraint_param == "response_format") out.chat.constraint_param = "text.format";

  json& echo = out.echo;
  echo["instructions"] = field(j, "instructions") ? j["instructions"] : json(nullptr);
  echo["max_output_tokens"] = field(j, "max_output_tokens") ? j["max_output_tokens"] : json(nullptr);
  echo["parallel_tool_calls"] = field(j, "parallel_tool_calls") ? j["parallel_tool_calls"] : json(true);
  echo["previous_response_id"] = out.previous_response_id.empty() ? json(nullptr) : json(out.previous_response_id);
  echo["reasoning"] = field(j, "reasoning") ? j["reasoning"] : json{{"effort", nullptr}, {"summary", nullptr}};
  echo["store"] = out.store;
  echo["temperature"] = field(j, "temperature") ? j["temperature"] : json(1.0);
  echo["text"] = field(j, "text") ? j["text"] : json{{"format", {{"type", "text"}}}};
  echo["tool_choice"] = field(j, "tool_choice") ? j["tool_choice"] : json("auto");
  echo["tools"] = field(j, "tools") ? j["tools"] : json::array();
  echo["top_p"] = field(j, "top_p") ? j["top_p"] : json(1.0);
  echo["truncation"] = field(j, "truncation") ? j["truncation"] : json("disabled");
  echo["user"] = field(j, "user") ? j["user"] : json(nullptr);
  echo["metadata"] = field(j, "metadata") ? j["metadata"] : json::object();
  return out;
}

ResponsesResponder::ResponsesResponder(const ResponsesRequest& req, std::string id, long long created)
    : req_(req), id_(std::move(id)), message_id_(random_id("msg_", true)), created_(created),
      reasoning_(req.chat.splitter()), reasoning_id_(random_id("rs_", true)),
      calls_(req.chat.tool_format, req.chat.calls_constrained, req.chat.param_types.get()) {}

namespace {

bool cut_short(const Completion& c) { return c.reason != FinishReason::kStop; }

json message_item(const std::string& id, const std::string& text, const char* status) {
  return {{"id", id},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", json::array({{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}, {"logprobs", json::array()}}})}};
}

json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  return {{"id", id},
          {"type", "reasoning"},
          {"status", status},
          {"summary", json::array()},
          {"content", text.empty() ? json::array() : json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

json call_item(const std::string& id, const std::string& call_id, const std::string& name, const char* status,
               const std::string& arguments) {
  return {{"id", id}, {"type", "function_call"}, {"status", status}, {"call_id", call_id}, {"name", name}, {"arguments", arguments}};
}

// The response's status: cut short (max_output_tokens) unless it ended
// with a whole call.
const char* response_status(const Completion& c, bool calls) { return cut_short(c) && !calls ? "incomplete" : "completed"; }

}  // namespace

// The output items of a finished reply (once: a stream builds them as it
// sends them, and the object and the stored conversation reuse them): the
// thought, then each run of text as a message and each call as a
// function_call, in the order written, as a stream sends them (a reply
// without calls is one message, empty or not).
json ResponsesResponder::output(const Result& r) {
  const Completion& c = r.completions.at(0);
  const SplitReply split = req_.chat.reasoning ? req_.chat.split(c.text) : SplitReply{"", c.text};
  std::vector<ReplyPart> parts =
      req_.chat.tools ? read_reply(split.content, req_.chat.tool_format, req_.chat.calls_constrained,
                                                        req_.chat.param_types.get())
                      : std::vector<ReplyPart>{ReplyPart{false, split.content, {}}};
  bool calls = false, any_call = false;
  for (const ReplyPart& part : parts)
    if (part.is_call) calls = part.call.complete, any_call = true;
  if (!any_call && parts.empty()) parts.push_back({});
  json items = json::array();
  thought_ = split.reasoning;
  if (!thought_.empty()) items.push_back(reasoning_item(reasoning_id_, thought_, "completed"));
  bool first_message = true;
  for (size_t k = 0; k < parts.size(); ++k) {
    const ReplyPart& part = parts[k];
    if (part.is_call) {
      items.push_back(call_item(random_id("fc_", true), random_id("call_", false), part.call.name,
                                part.call.complete ? "completed" : "incomplete", part.call.arguments));
    } else {
      const std::string id = first_message ? message_id_ : random_id("msg_", true);
      first_message = false;
      items.push_back(message_item(id, part.text, k + 1 == parts.size() ? response_status(c, calls) : "completed"));
    }
  }
  return items;
}

std::string ResponsesResponder::object(const Result* r) {
  json o = {{"id", id_}, {"object", "response"}, {"created_at", created_}};
  const bool done = r != nullptr;
  json output = json::array();
  const char* status = "in_progress";
  json incomplete = nullptr;
  if (done) {
    output = final_output_.is_null() ? (final_output_ = this->output(*r)) : final_output_;
    bool calls = false;
    for (const json& item : output)
      if (item["type"] == "function_call") calls = item["status"] == "completed";
    status = response_status(r->completions.at(0), calls);
    if (std::string(status) == "incomplete") incomplete = {{"reason", "max_output_tokens"}};
  }
  o["status"] = status;
  o["background"] = false;
  o["error"] = nullptr;
  o["incomplete_details"] = incomplete;
  o["instructions"] = req_.echo["instructions"];
  o["max_output_tokens"] = req_.echo["max_output_tokens"];
  o["model"] = req_.chat.model;
  o["output"] = std::move(output);
  for (const char* k : {"parallel_tool_calls", "previous_response_id", "reasoning"}) o[k] = req_.echo[k];
  o["service_tier"] = "default";
  for (const char* k : {"store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation"}) o[k] = req_.echo[k];
  if (done) {
    const Usage& u = r->usage;
    const int reasoning_tokens =
        thought_.empty() || !req_.tokenizer ? 0 : std::min(u.completion_tokens, int(req_.tokenizer->encode(thought_, false).size()));
    o["usage"] = {{"input_tokens", u.prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", u.cached_tokens}, {"cache_write_tokens", 0}}},
                  {"output_tokens", u.completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
                  {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  } else {
    o["usage"] = nullptr;
  }
  o["user"] = req_.echo["user"];
  o["metadata"] = req_.echo["metadata"];
  return dump(o);
}

json ResponsesResponder::conversation(const Result& r) {
  json items = req_.conversation;
  if (final_output_.is_null()) final_output_ = output(r);
  for (const json& item : final_output_) {
    if (item["type"] == "message")
      items.push_back({{"type", "message"}, {"role", "assistant"}, {"content", item["content"][0]["text"]}});
    else if (item["type"] == "reasoning")
      items.push_back({{"type", "reasoning"}, {"summary", json::array()}, {"content", item["content"]}});
    else
      items.push_back({{"type", "function_call"}, {"call_id", item["call_id"]}, {"name", item["name"]}, {"arguments", item["arguments"]}});
  }
  return items;
}

std::string ResponsesResponder::sse(const char* type, json data) {
  json e = {{"type", type}, {"sequence_number", sequence_++}};
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  return std::string("event: ") + type + "\ndata: " + dump(e) + "\n\n";
}

std::string ResponsesResponder::start() {
  const json o = json::parse(object(nullptr));
  std::string out = sse("response.created", {{"response", o}});  // two statements: numbered in order
  return out + sse("response.in_progress", {{"response", o}});
}

std::string ResponsesResponder::text_delta(const std::string& s) {
  std::string out;
  if (message_index_ < 0) {
    message_index_ = next_index_++;
    if (!first_message_id_.empty()) message_id_ = random_id("msg_", true);  // a later run of text
    first_message_id_ = message_id_;
    shown_.clear();
    json item = message_item(message_id_, "", "in_progress");
    item["content"] = json::array();
    out += sse("response.output_item.added", {{"output_index", message_index_}, {"item", item}});
    out += sse("response.content_part.added",
               {{"item_id", message_id_},
                {"output_index", message_index_},
                {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}});
  }
  if (s.empty()) return out;
  shown_ += s;
  return out + sse("response.output_text.delta", {{"item_id", message_id_},
                                                  {"output_index", message_index_},
                                                  {"content_index", 0},
                                                  {"delta", s},
                                                  {"logprobs", json::array()}});
}

std::string ResponsesResponder::close_message(const char* status) {
  if (message_index_ < 0) return {};
  const int index = std::exchange(message_index_, -1);
  const json part = {{"type", "output_text"}, {"text", shown_}, {"annotations", json::array()}, {"logprobs", json::array()}};
  std::string out = sse("response.output_text.done", {{"item_id", message_id_},
                                                      {"output_index", index},
                                                      {"content_index", 0},
                                                      {"text", shown_},
                                                      {"logprobs", json::array()}});
  out += sse("response.content_part.done",
             {{"item_id", message_id_}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  items_.push_back(message_item(message_id_, shown_, status));
  return out + sse("response.output_item.done", {{"output_index", index}, {"item", items_.back()}});
}

// With tools: each call a function_call item added when it begins, its
// arguments as function_call_arguments.delta events as it is written
// (call_stream.h: a call not written under its grammar comes whole at the end).
std::string ResponsesResponder::call_pieces(std::vector<CallPiece> pieces) {
  std::string out;
  for (CallPiece& p : pieces) {
    switch (p.kind) {
      case CallPiece::Kind::kContent: out += text_delta(p.text); break;
      case CallPiece::Kind::kCall:
        out += close_message("completed");
        call_index_ = next_index_++;
        call_ = call_item(random_id("fc_", true), random_id("call_", false), p.text, "in_progress", "");
        out += sse("response.output_item.added", {{"output_index", call_index_}, {"item", call_}});
        calls_made_ = false;
        break;
      case CallPiece::Kind::kArguments:
        call_["arguments"].get_ref<std::string&>() += p.text;  // appended: a long call's arguments are not copied per piece
        out += sse("response.function_call_arguments.delta",
                   {{"item_id", call_["id"]}, {"output_index", call_index_}, {"delta", p.text}});
        break;
      case CallPiece::Kind::kEnd:
        out += sse("response.function_call_arguments.done", {{"item_id", call_["id"]},
                                                             {"output_index", call_index_},
                                                             {"name", call_["name"]},
                                                             {"arguments", call_["arguments"]}});
        call_["status"] = p.complete ? "completed" : "incomplete";
        items_.push_back(std::move(call_));
        out += sse("response.output_item.done", {{"output_index", call_index_}, {"item", items_.back()}});
        calls_made_ = p.complete;
        break;
    }
  }
  return out;
}

std::string ResponsesResponder::reasoning_delta(const std::string& s) {
  if (s.empty()) return {};
  std::string out;
  if (!reasoning_open_) {
    reasoning_open_ = true;
    next_index_ = 1;  // the thought comes first
    json item = reasoning_item(reasoning_id_, "", "in_progress");
    out += sse("response.output_item.added", {{"output_index", 0}, {"item", item}});
  }
  thought_ += s;
  return out + sse("response.reasoning_text.delta",
                   {{"item_id", reasoning_id_}, {"output_index", 0}, {"content_index", 0}, {"delta", s}});
}

std::string ResponsesResponder::close_reasoning() {
  if (!reasoning_open_ || reasoning_done_) return {};
  reasoning_done_ = true;
  std::string out = sse("response.reasoning_text.done",
                        {{"item_id", reasoning_id_}, {"output_index", 0}, {"content_index", 0}, {"text", thought_}});
  items_.push_back(reasoning_item(reasoning_id_, thought_, "completed"));
  return out + sse("response.output_item.done", {{"output_index", 0}, {"item", items_.back()}});
}

std::string ResponsesResponder::event(const StreamEvent& ev) {
  if (ev.kind != StreamEvent::Kind::kToken || ev.text.empty()) return {};
  if (!req_.chat.reasoning) return answer(ev.text);
  const SplitReply piece = reasoning_.push(ev.text);
  return reasoning_delta(piece.reasoning) + answer(piece.content);
}

std::string ResponsesResponder::answer(const std::string& s) {
  if (s.empty()) return {};
  std::string out = close_reasoning();
  if (!req_.chat.tools) return out + text_delta(s);
  return out + call_pieces(calls_.push(s));
}

std::string ResponsesResponder::finish(const Result& r) {
  const Completion& c = r.completions.at(0);
  std::string out;
  if (req_.chat.reasoning) {
    const SplitReply piece = reasoning_.flush();
    out += reasoning_delta(piece.reasoning);
    out += answer(piece.content);
    out += close_reasoning();  // a thought never closed
  }
  if (req_.chat.tools) out += call_pieces(calls_.finish());
  if (items_.empty() || items_.back()["type"] == "reasoning") out += text_delta("");  // no calls: a message, empty or not
  out += close_message(response_status(c, calls_made_));
  final_output_ = std::move(items_);
  json o = json::parse(object(&r));
  const bool incomplete = o["status"] == "incomplete";
  return out + sse(incomplete ? "response.incomplete" : "response.completed", {{"response", std::move(o)}});
}

std::string ResponsesResponder::error_event(const ApiError& e) {
  return sse("error", {{"code", e.code.empty() ? json(nullptr) : json(e.code)},
                       {"message", e.message},
                       {"param", e.param.empty() ? json(nullptr) : json(e.param)}});
}

}  // namespace cs
