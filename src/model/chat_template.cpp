#include "model/chat_template.h"

namespace cs {

namespace {

// ChatML, for files that carry no template (the format SmolLM2, Qwen and
// many fine-tunes use).
const char* const kChatML =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Gemma's turn format, for files that carry no template but whose
// vocabulary has its turn tokens (Gemma 3 270M's pretrained file): the
// assistant is "model", a system message opens the first user turn, each
// message's content is trimmed. BOS comes from the tokenizer.
const char* const kGemma =
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first = messages[0]['content'] | trim + '\n\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set first = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{%- for message in turns -%}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' -}}"
    "{{- (first if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}";

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// The texts between marker messages: pieces[i] before message i, the last
// after the last message; nullopt when a marker is missing or out of order.
std::optional<std::vector<std::string>> split_at(const std::string& text, const std::vector<std::string>& marks) {
  std::vector<std::string> out;
  size_t at = 0;
  for (const std::string& m : marks) {
    const size_t p = text.find(m, at);
    if (p == std::string::npos) return std::nullopt;
    out.push_back(text.substr(at, p - at));
    at = p + m.size();
  }
  out.push_back(text.substr(at));
  return out;
}

}  // namespace

const char* ChatTemplate::chatml_source() { return kChatML; }

ChatTemplate ChatTemplate::for_model(const Tokenizer& tok, const std::string& override_source) {
  const std::string bos = tok.bos() >= 0 ? tok.piece(tok.bos(), true) : "";
  const std::string eos = tok.eos() >= 0 ? tok.piece(tok.eos(), true) : "";
  const std::string& src = override_source.empty() ? tok.chat_template() : override_source;
  const bool gemma = src.empty() && tok.find("<start_of_turn>") && tok.find("<end_of_turn>");
  ChatTemplate t(!src.empty() ? src : gemma ? kGemma : kChatML, bos, eos, tok.wants_bos());
  t.fallback_ = src.empty();
  t.fallback_name_ = !src.empty() ? "" : gemma ? "Gemma's turn format (<start_of_turn>)" : "ChatML";
  return t;
}

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token, bool bos_added)
    : tmpl_(std::make_shared<const jinja::Template>(source)), source_(source), bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)), bos_added_(bos_added) {
  probe();
  derive_markers();
}

// A template that runs long on a short conversation would run long on every
// request (one looping over range(100000) twice takes seconds a chat under
// the per-request budget): it is refused here, at load, after a small budget. The sample is a system prompt, a tool, a user turn, an
// assistant turn with a tool call, the tool's result and a user turn (with
// and without the tool list); a
// template that refuses it (raise_exception, a role it does not take) is
// judged on the conversations derive_markers renders.
void ChatTemplate::probe() const {
  ChatInput in;
  in.messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "You are helpful."}},
       {{"role", "user"}, {"content", "What is the weather in Paris?"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls",
         {{{"id", "call_1"},
           {"type", "function"},
           {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C, sunny"}},
       {{"role", "user"}, {"content", "Thanks!"}}});
  in.tools = nlohmann::ordered_json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "get_weather"},
          {"description", "The weather in a city"},
          {"parameters",
           {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}}}}}}});
  in.now = 0;
  for (bool tools : {true, false}) {
    ChatInput sample = in;
    if (!tools) sample.tools = nullptr;
    try {
      (void)render(sample, kProbeSteps, std::chrono::milliseconds(kProbeMillis));
    } catch (const jinja::TemplateError& e) {
      if (e.template_kind() == jinja::TemplateErrorKind::kLimit)
        throw jinja::TemplateError(jinja::TemplateErrorKind::kLimit, 0,
                                   std::string("the chat template is refused: on a five-message sample conversation ") +
                                       e.what() + " (at most " + std::to_string(kProbeSteps) + " steps or " +
                                       std::to_string(kProbeMillis) + " ms are allowed there)");
    } catch (const Error&) {
    }
  }
}

ChatPrompt ChatTemplate::render(const ChatInput& in) const {
  const auto& msgs = in.messages;
  const bool leading_system = msgs.is_array() && !msgs.empty() && msgs[0].is_object() &&
                              msgs[0].value("role", "") == "system" && msgs[0].contains("content") &&
                              msgs[0]["content"].is_string();
  if (system_role_ || !leading_system) return render(in, kRenderSteps, std::chrono::milliseconds(kRenderMillis));
  ChatInput folded = in;
  auto& m = folded.messages;
  if (m.size() > 1 && m[1].is_object() && m[1].contains("content") && m[1]["content"].is_string()) {
    m[1]["content"] = m[0]["content"].get<std::string>() + "\n" + m[1]["content"].get<std::string>();
    m.erase(0);
  } else if (m.size() == 1) {
    m[0]["role"] = "user";
  }
  return render(folded, kRenderSteps, std::chrono::milliseconds(kRenderMillis));
}

ChatPrompt ChatTemplate::render(const ChatInput& in, uint64_t max_steps, std::chrono::milliseconds max_time) const {
  jinja::Dict vars;
  for (const auto& [k, v] : in.kwargs.items()) vars.set(k, jinja::Value::from_json(v, true));
  vars.set("messages", jinja::Value::from_json(in.messages, true));
  vars.set("tools", in.tools.is_null() ? jinja::Value::none() : jinja::Value::from_json(in.tools, true));
  vars.set("documents", jinja::Value::none());
  vars.set("add_generation_prompt", jinja::Value(in.add_generation_prompt));
  vars.set("bos_token", jinja::Value(bos_token_));
  vars.set("eos_token", jinja::Value(eos_token_));
  jinja::RenderOptions opts;
  opts.now = in.now;
  opts.max_steps = max_steps;
  opts.deadline = std::chrono::steady_clock::now() + max_time;
  const jinja::Str out = tmpl_->render(vars, opts);
  ChatPrompt p;
  for (const auto& [text, content] : out.pieces()) content ? p.content(text) : p.markup(text);
  return p;
}

ChatPrompt ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  ChatInput in;
  for (const ChatMessage& m : messages) in.messages.push_back({{"role", m.role}, {"content", m.content}});
  in.add_generation_prompt = add_generation_prompt;
  return render(in);
}

RoleText ChatTemplate::role_markers(const std::string& role) const {
  if (role == "system") return system_;
  if (role == "assistant") return assistant_;
  return user_;
}

// Renders system, user, assistant, user with marker texts as the messages and
// reads the markup around each. A template that refuses a system message
// (Gemma 2) or hides it gets the user's markers for it. When nothing can be
// read (a template that refuses these conversations), every role gets none.
void ChatTemplate::derive_markers() {
  const std::vector<std::string> marks = {"@@CSMARKA@@", "@@CSMARKB@@", "@@CSMARKC@@", "@@CSMARKD@@"};
  const std::vector<std::string> roles = {"system", "user", "assistant", "user"};
  auto conversation = [&](size_t first, size_t n, bool gen) -> std::optional<std::string> {
    ChatInput in;
    for (size_t i = first; i < first + n; ++i) in.messages.push_back({{"role", roles[i]}, {"content", marks[i]}});
    in.add_generation_prompt = gen;
    in.now = 0;
    try {
      return render(in).text();
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  auto strip_bos = [&](std::string s) {
    return bos_added_ && !bos_token_.empty() && starts_with(s, bos_token_) ? s.substr(bos_token_.size()) : s;
  };
  // Without the system message: user A, assistant B, user C.
  const auto conv = conversation(1, 3, false), conv_gen = conversation(1, 3, true), two = conversation(1, 2, false);
  const auto p = conv ? split_at(*conv, {marks[1], marks[2], marks[3]}) : std::nullopt;
  if (!p) return;
  user_.close = (*p)[3];
  assistant_.open = starts_with((*p)[1], user_.close) ? (*p)[1].substr(user_.close.size()) : (*p)[1];
  const auto q = two ? split_at(*two, {marks[1], marks[2]}) : std::nullopt;
  assistant_.close = q ? (*q)[2] : "";
  user_.open = starts_with((*p)[2], assistant_.close) ? (*p)[2].substr(assistant_.close.size()) : (*p)[2];
  if (conv_gen && starts_with(*conv_gen, *conv)) reply_start_ = conv_gen->substr(conv->size());
  // With the system message first.
  const auto sys = conversation(0, 2, false);
  const auto s = sys ? split_at(*sys, {marks[0], marks[1]}) : std::nullopt;
  if (!s) {
    system_ = user_;
    system_role_ = false;
    return;
  }
  system_.open = strip_bos((*s)[0]);
  system_.close = ends_with((*s)[1], user_.open) ? (*s)[1].substr(0, (*s)[1].size() - user_.open.size()) : (*s)[1];
}

std::vector<int32_t> ChatPrompt::encode(const Tokenizer& tok, bool add_bos) const {
  std::vector<int32_t> ids = tok.encode(parts(), false);
  if (add_bos && tok.wants_bos() && tok.bos() >= 0 && (ids.empty() || ids[0] != tok.bos()))
    ids.insert(ids.begin(), tok.bos());
  return ids;
}

void ChatPrompt::add(std::string_view s, bool special) {
  if (s.empty()) return;
  if (!parts_.empty() && parts_.back().second == special)
    parts_.back().first += s;
  else
    parts_.emplace_back(std::string(s), special);
}

std::string ChatPrompt::text() const {
  std::string out;
  for (const auto& [t, special] : parts_) out += t;
  return out;
}

std::vector<TextPart> ChatPrompt::parts() const {
  std::vector<TextPart> out;
  out.reserve(parts_.size());
  for (const auto& [t, special] : parts_) out.push_back({t, special});
  return out;
}

}  // namespace cs
