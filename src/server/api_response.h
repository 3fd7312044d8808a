// Answers in OpenAI's shapes: the whole response of a non-streamed request,
// and the server-sent event chunks of a streamed one (chat.completion.chunk
// or text_completion), ending with an optional usage chunk and [DONE].
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "engine/request.h"
#include "model/tokenizer.h"

#include "server/api_request.h"
#include "server/call_stream.h"
#include "server/reasoning.h"

namespace cs {

class ApiResponder {
 public:
  ApiResponder(const ApiRequest& req, const Tokenizer& tok, std::string id, long long created);

  const std::string& id() const { return id_; }
  // The body of a non-streamed answer.
  std::string response(const Result& r) const;
  // The SSE lines ("data: ...\n\n") an event adds to a stream; may be empty.
  std::string chunk(const StreamEvent& ev);
  // The usage chunk (stream_options.include_usage) and the end of the stream.
  std::string usage_chunk(const Result& r) const;
  static std::string done() { return "data: [DONE]\n\n"; }
  // An error inside a stream (after the 200 status was sent).
  static std::string error_chunk(const ApiError& e);

 private:
  const ApiRequest& req_;
  const Tokenizer& tok_;
  std::string id_;
  long long created_;
  std::vector<bool> started_;  // per choice: the assistant role was sent (chat)
  // With tools: per choice, the calls read as the text comes, how many
  // began, whether the last one closed, and whether a call came after
  // content (the next content goes on a new line, as a whole answer's).
  struct Calls {
    CallStream stream;
    int began = 0;
    bool complete = true, content = false, call_after_content = false;
  };
  std::vector<Calls> calls_;
  // A template that thinks: per choice, the thought split from the answer.
  std::vector<ReasoningStream> reasoning_;
  std::string answer_chunk(const StreamEvent& ev);
  std::string tool_chunk(const StreamEvent& ev);
  std::string choice_chunk(const nlohmann::json& choice) const;
  std::string event(int index, const nlohmann::json& delta, const nlohmann::json& finish, const nlohmann::json& logprobs);
};

// The error a completion's end is, if it is one: kError a 500, kNoRoom (no
// text: the KV memory filled first) a 400 naming the numbers.
std::optional<ApiError> failure(FinishReason r, const std::string& message);

// OpenAI's finish_reason for ours ("stop", "length"; a cancelled completion
// was cut short: "length"); "tool_calls" when a stopped reply made calls
// (its last call whole: one a stop sequence cut is "stop").
const char* api_finish_reason(FinishReason r, bool calls = false);

}  // namespace cs
