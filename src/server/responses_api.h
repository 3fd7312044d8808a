// OpenAI's Responses API (POST /v1/responses; GET and DELETE
// /v1/responses/{id}) on the chat machinery: `input` items (messages with
// input_text parts, function_call, function_call_output) after the
// conversation a previous_response_id stored, with `instructions` as the
// system message, are mapped to a Chat Completions body (function tools,
// tool_choice, text.format as a JSON-schema constraint) and parsed by
// parse_chat_json; the answer is a response object with output items
// (message / output_text, function_call), whole or as the API's stream of
// events. The conversation a response ends is kept in a ResponseStore
// (server/response_store.h) for the next turn, whose prompt then starts with
// the same tokens: the prefix tree already holds their K/V.
// docs/agent_apis.md maps every field. Errors are OpenAI's (api_error.h).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "model/tokenizer.h"
#include "server/api_request.h"
#include "server/call_stream.h"
#include "server/reasoning.h"
#include "server/response_store.h"

namespace cs {

struct ResponsesRequest {
  ApiRequest chat;                      // what the engine runs; tools, constraint, stream as the chat route's
  nlohmann::ordered_json conversation;  // the earlier turns' items, then this input's
  nlohmann::ordered_json echo;          // the request's settings the response object repeats
  bool store = true;
  std::string previous_response_id;
  const Tokenizer* tokenizer = nullptr;  // counts a thought's tokens (reasoning_tokens)
};

// Throws ApiError (unknown previous_response_id: 400 previous_response_not_found).
ResponsesRequest parse_responses_request(const std::string& body, const ApiLimits& limits, ResponseStore& store);

// One request's answer. Item ids are drawn once, so a stream's items and the
// final object (and what is stored) name them alike.
class ResponsesResponder {
 public:
  ResponsesResponder(const ResponsesRequest& req, std::string id, long long created);

  const std::string& id() const { return id_; }
  // The response object: in progress (no output yet), or finished with r.
  std::string object(const Result* r);
  // The conversation after this response (the input's, then the output's items).
  nlohmann::ordered_json conversation(const Result& r);

  // Stream: response.created and response.in_progress, then output items as
  // the text comes (with tools, each call a function_call item as it is
  // written: server/call_stream.h), then response.completed (or
  // response.incomplete when max_output_tokens cut it).
  std::string start();
  std::string event(const StreamEvent& ev);
  std::string finish(const Result& r);
  std::string error_event(const ApiError& e);

 private:
  const ResponsesRequest& req_;
  std::string id_, message_id_;
  long long created_;
  std::string shown_;  // the open message's text as streamed
  std::string first_message_id_;
  int next_index_ = 0, message_index_ = -1, call_index_ = -1;  // output indices: the next, the open message's and call's
  nlohmann::ordered_json items_ = nlohmann::ordered_json::array();  // the items done, in order
  nlohmann::ordered_json call_;  // the call being written
  bool calls_made_ = false;      // the answer ended with a whole call
  nlohmann::ordered_json final_output_;  // the output items, once built
  // A thinking template's thought: a reasoning item before the message.
  ReasoningStream reasoning_;
  std::string reasoning_id_, thought_;
  bool reasoning_open_ = false, reasoning_done_ = false;
  CallStream calls_;  // with tools: the calls in the answer
  std::string reasoning_delta(const std::string& s);
  std::string close_reasoning();
  std::string answer(const std::string& s);
  int sequence_ = 0;
  nlohmann::ordered_json output(const Result& r);
  std::string sse(const char* type, nlohmann::ordered_json data);
  std::string text_delta(const std::string& s);
  std::string close_message(const char* status);
  std::string call_pieces(std::vector<CallPiece> pieces);
};

}  // namespace cs
