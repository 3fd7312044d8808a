// Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) on
// the chat machinery: a request is mapped to a Chat Completions body (system
// blocks to a system message, tool_use and tool_result blocks to tool calls
// and tool messages, input_schema to parameters, tool_choice "any" to
// "required", output_format to a JSON-schema constraint, a final assistant
// message to the start of the reply) and parsed by parse_chat_json; answers
// and stream events are written in the Messages API's shapes, errors as
// {"type": "error", "error": {"type", "message"}}. docs/agent_apis.md maps
// every field. Pure functions and a per-request encoder: the fuzz target
// for request bodies calls the parser directly.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/api_request.h"
#include "server/call_stream.h"
#include "server/reasoning.h"

namespace cs {

// A cache_control mark: the prompt's first `tokens` tokens are the prefix it
// closes (the longest the conversation cut after the marked block renders
// to alike), to be held in the cache for `ttl`.
struct Breakpoint {
  int tokens = 0;
  std::chrono::seconds ttl{300};
};

struct MessagesRequest {
  ApiRequest chat;  // what the engine runs; tools, constraint, stream as the chat route has them
  std::string model;
  std::vector<Breakpoint> breakpoints;  // at most 4, as the API allows
  // Prompt tokens up to the last breakpoint: those not found in the cache
  // count as cache_creation_input_tokens.
  int cached_prefix() const;
};

// Throws ApiError (its param named in the Messages body's terms).
MessagesRequest parse_messages_request(const std::string& body, const ApiLimits& limits);
// /v1/messages/count_tokens: the tokens of the prompt the same body makes
// (no max_tokens; a prompt longer than the context is counted too).
int count_messages_tokens(const std::string& body, const ApiLimits& limits);

// The Messages API's error type for an HTTP status, and the error body.
const char* messages_error_type(int status);
std::string messages_error_json(const ApiError& e);

// One request's answer: the whole message, or its stream of events.
class MessagesResponder {
 public:
  MessagesResponder(const MessagesRequest& req, std::string id);

  const std::string& id() const { return id_; }
  std::string response(const Result& r) const;
  // Stream: message_start (input_tokens: the whole prompt, the cache not yet
  // known; message_delta at the end carries the counts), then content
  // blocks as the text comes (with tools, each call a tool_use block as it
  // is written: server/call_stream.h), then message_delta and message_stop.
  std::string start(int prompt_tokens) const;
  std::string event(const StreamEvent& ev);
  std::string finish(const Result& r);
  static std::string ping();
  static std::string error_event(const ApiError& e);

 private:
  const MessagesRequest& req_;
  std::string id_;
  int next_block_ = 0, open_text_ = -1, open_thinking_ = -1, open_call_ = -1;
  ReasoningStream reasoning_;  // a thinking template's thought, split from the answer
  CallStream calls_;           // with tools: the calls in the answer
  bool calls_made_ = false;    // the answer ended with a whole call
  std::string call_pieces(std::vector<CallPiece> pieces);
  std::string text_delta(const std::string& s);
  std::string thinking_delta(const std::string& s);
  // A delta of the block `open` (opened with `start` first, when it is not yet).
  std::string block_delta(int& open, const nlohmann::ordered_json& start, const nlohmann::ordered_json& delta);
  std::string close_text();
  std::string answer(const std::string& s);  // the answer's text after the thought
};

}  // namespace cs
