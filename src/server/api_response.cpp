#include "server/api_response.h"

#include <nlohmann/json.hpp>
#include <random>

namespace cs {

using json = nlohmann::json;

namespace {

// Token pieces may be part of a UTF-8 character: invalid sequences become
// U+FFFD in JSON text (the exact bytes go in "bytes").
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json usage_of(const Result& r) {
  const Usage& u = r.usage;
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}, {"cached_tokens_disk", u.disk_tokens}}},
          {"completion_tokens_details",
           {{"accepted_prediction_tokens", u.accepted_prediction_tokens},
            {"rejected_prediction_tokens", u.rejected_prediction_tokens},
            {"drafted_tokens", u.drafted_tokens},
            {"accepted_draft_tokens", u.accepted_draft_tokens}}}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// Chat logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs"}]}.
json chat_entry(const Tokenizer& tok, int32_t id, float lp, const std::vector<TokenLogprob>& top) {
  const std::string piece = tok.piece(id);
  json alts = json::array();
  for (const auto& t : top) {
    const std::string p = tok.piece(t.token);
    alts.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}});
  }
  return {{"token", piece}, {"logprob", lp}, {"bytes", bytes_of(piece)}, {"top_logprobs", alts}};
}

// Completion logprobs: parallel lists.
json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps, size_t text_offset) {
  json tokens = json::array(), lp = json::array(), top = json::array(), off = json::array();
  for (const auto& t : lps) {
    const std::string piece = tok.piece(t.token);
    tokens.push_back(piece);
    lp.push_back(t.logprob);
    json alts = json::object();
    for (const auto& a : t.top) alts[tok.piece(a.token)] = a.logprob;
    top.push_back(alts);
    off.push_back(text_offset);
    text_offset += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

std::string call_id() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static const char* digits = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += digits[rng() % 62];
  return id;
}

json tool_call_json(const ToolCall& c) {
  return {{"id", call_id()}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

}  // namespace

const char* api_finish_reason(FinishReason r, bool calls) {
  if (r == FinishReason::kStop) return calls ? "tool_calls" : "stop";
  return "length";
}

ApiResponder::ApiResponder(const ApiRequest& req, const Tokenizer& tok, std::string id, long long created)
    : req_(req), tok_(tok), id_(std::move(id)), created_(created), started_(size_t(req.engine.n), false) {
  if (req.chat && req.reasoning) reasoning_.assign(size_t(req.engine.n), req.splitter());
  if (req.chat && req.tools)
    calls_.assign(size_t(req.engine.n), Calls{CallStream(req.tool_format, req.calls_constrained, req.param_types.get())});
}

std::string ApiResponder::response(const Result& r) const {
  json choices = json::array();
  for (size_t i = 0; i < r.completions.size(); ++i) {
    const Completion& c = r.completions[i];
    json ch = {{"index", i}, {"finish_reason", api_finish_reason(c.reason)}};
    // A thinking template's thought apart (vLLM's reasoning_content).
    const SplitReply split = req_.chat && req_.reasoning ? req_.split(c.text) : SplitReply{"", c.text};
    if (req_.chat && req_.tools) {
      const ParsedReply p = read_calls(split.content, req_.tool_format, req_.calls_constrained, req_.param_types.get());
      ch["message"] = {{"role", "assistant"}, {"content", p.content.empty() && !p.calls.empty() ? json(nullptr) : json(p.content)}};
      if (!p.calls.empty()) {
        json calls = json::array();
        for (const ToolCall& call : p.calls) calls.push_back(tool_call_json(call));
        ch["message"]["tool_calls"] = calls;
        ch["finish_reason"] = api_finish_reason(c.reason, p.calls.back().complete);
      }
    } else if (req_.chat) {
      ch["message"] = {{"role", "assistant"}, {"content", split.content}};
    }
    if (req_.chat && req_.reasoning)
      ch["message"]["reasoning_content"] = split.reasoning.empty() ? json(nullptr) : json(split.reasoning);
    if (req_.chat) {
      if (req_.logprobs) {
        json content = json::array();
        for (const auto& t : c.logprobs) content.push_back(chat_entry(tok_, t.token, t.logprob, t.top));
        ch["logprobs"] = {{"content", content}};
      } else {
        ch["logprobs"] = nullptr;
      }
    } else {
      ch["text"] = c.text;
      ch["logprobs"] = req_.logprobs ? completion_logprobs(tok_, c.logprobs, 0) : json(nullptr);
    }
    choices.push_back(ch);
  }
  return dump({{"id", id_},
               {"object", req_.chat ? "chat.completion" : "text_completion"},
               {"created", created_},
               {"model", req_.model},
               {"system_fingerprint", "chunkserve"},
               {"choices", choices},
               {"usage", usage_of(r)}});
}

// One chunk of a chat stream.
std::string ApiResponder::event(int index, const json& delta, const json& finish, const json& logprobs) {
  return choice_chunk({{"index", index}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", finish}});
}

// The SSE line of a chunk with one choice.
std::string ApiResponder::choice_chunk(const json& choice) const {
  json j = {{"id", id_},
            {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", req_.model},
            {"system_fingerprint", "chunkserve"},
            {"choices", json::array({choice})}};
  if (req_.include_usage) j["usage"] = nullptr;
  return "data: " + dump(j) + "\n\n";
}

// A thinking template's stream: the thought's text goes out as
// reasoning_content deltas, the answer's on the usual path (content, calls).
std::string ApiResponder::chunk(const StreamEvent& ev) {
  if (reasoning_.empty()) return answer_chunk(ev);
  const size_t i = size_t(ev.index);
  const bool fin = ev.kind == StreamEvent::Kind::kFinish;
  const SplitReply piece = fin ? reasoning_[i].flush() : reasoning_[i].push(ev.text);
  std::string out;
  if (!piece.reasoning.empty()) {
    json delta = json::object();
    if (!started_[i]) delta["role"] = "assistant", started_[i] = true;
    delta["reasoning_content"] = piece.reasoning;
    out += event(ev.index, delta, nullptr, nullptr);
  }
  if (fin && !piece.content.empty()) {
    StreamEvent rest;
    rest.index = ev.index;
    rest.text = piece.content;
    out += answer_chunk(rest);
  }
  if (fin) return out + answer_chunk(ev);
  StreamEvent answer = ev;
  answer.text = piece.content;
  return out + answer_chunk(answer);
}

std::string ApiResponder::answer_chunk(const StreamEvent& ev) {
  if (ev.kind == StreamEvent::Kind::kToken && ev.end_of_generation) return {};
  const bool fin = ev.kind == StreamEvent::Kind::kFinish;
  if (fin)
    if (auto e = failure(ev.reason, ev.message)) return error_chunk(*e);
  if (req_.chat && req_.tools) return tool_chunk(ev);
  const bool has_lp = req_.logprobs && !fin && ev.token >= 0;
  if (!fin && ev.text.empty() && !has_lp) return {};
  json choice = {{"index", ev.index}, {"finish_reason", fin ? json(api_finish_reason(ev.reason)) : json(nullptr)}};
  if (req_.chat) {
    json delta = json::object();
    if (!started_[size_t(ev.index)]) {
      delta["role"] = "assistant";
      started_[size_t(ev.index)] = true;
    }
    if (!fin) delta["content"] = ev.text;
    choice["delta"] = delta;
    choice["logprobs"] = has_lp ? json{{"content", json::array({chat_entry(tok_, ev.token, ev.logprob, ev.top)})}}
                                : json(nullptr);
  } else {
    choice["text"] = fin ? "" : ev.text;
    choice["logprobs"] =
        has_lp ? completion_logprobs(tok_, {{ev.token, ev.logprob, ev.top}}, 0) : json(nullptr);
  }
  return choice_chunk(choice);
}

// A chat stream with tools: content goes out as it comes until the text
// may be a call; a call written under its grammar goes out as it is
// written (its id and name, then its arguments in pieces), one that is not
// whole at the end (call_stream.h).
std::string ApiResponder::tool_chunk(const StreamEvent& ev) {
  const size_t i = size_t(ev.index);
  Calls& c = calls_[i];
  const bool fin = ev.kind == StreamEvent::Kind::kFinish;
  const bool has_lp = req_.logprobs && !fin && ev.token >= 0;
  json lp = has_lp ? json{{"content", json::array({chat_entry(tok_, ev.token, ev.logprob, ev.top)})}} : json(nullptr);
  std::string out;
  const auto send = [&](json delta) {
    if (!started_[i]) delta["role"] = "assistant", started_[i] = true;
    out += event(ev.index, delta, nullptr, lp);
    lp = nullptr;
  };
  json call;  // a call's first delta, its arguments so far added to it
  const auto send_call = [&] {
    if (!call.is_null()) send({{"tool_calls", json::array({std::move(call)})}});
    call = nullptr;
  };
  for (CallPiece& p : fin ? c.stream.finish() : c.stream.push(ev.text)) {
    switch (p.kind) {
      case CallPiece::Kind::kContent:
        send_call();
        c.content = true;
        // A run of content after a call: on a new line, as a whole answer joins them.
        send({{"content", std::exchange(c.call_after_content, false) ? "\n" + p.text : std::move(p.text)}});
        break;
      case CallPiece::Kind::kCall:
        send_call();
        call = {{"index", c.began++}, {"id", call_id()}, {"type", "function"}, {"function", {{"name", p.text}, {"arguments", ""}}}};
        c.call_after_content = c.content;
        c.complete = false;
        break;
      case CallPiece::Kind::kArguments:
        if (!call.is_null())
          call["function"]["arguments"].get_ref<std::string&>() += p.text;
        else
          send({{"tool_calls", json::array({{{"index", c.began - 1}, {"function", {{"arguments", std::move(p.text)}}}}})}});
        break;
      case CallPiece::Kind::kEnd:
        send_call();
        c.complete = p.complete;
        break;
    }
  }
  send_call();
  if (fin) {
    json delta = json::object();
    if (!started_[i]) delta["role"] = "assistant", started_[i] = true;
    return out + event(ev.index, delta, api_finish_reason(ev.reason, c.began > 0 && c.complete), nullptr);
  }
  if (out.empty() && has_lp) send({{"content", ""}});
  return out;
}

std::string ApiResponder::usage_chunk(const Result& r) const {
  json j = {{"id", id_},
            {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", req_.model},
            {"system_fingerprint", "chunkserve"},
            {"choices", json::array()},
            {"usage", usage_of(r)}};
  return "data: " + dump(j) + "\n\n";
}

std::optional<ApiError> failure(FinishReason r, const std::string& message) {
  if (r == FinishReason::kError) return ApiError{500, message, "server_error", "", ""};
  if (r == FinishReason::kNoRoom) return ApiError{400, message, "invalid_request_error", "prompt", "kv_memory_full"};
  return std::nullopt;
}

std::string ApiResponder::error_chunk(const ApiError& e) { return "data: " + error_json(e) + "\n\n"; }

}  // namespace cs
