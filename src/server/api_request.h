// OpenAI requests (/v1/completions, /v1/chat/completions) parsed and checked
// into what the engine runs plus how to answer. Every problem is an ApiError
// naming the field: bad JSON, wrong types, values out of range, an unknown
// model, empty or malformed messages, unknown roles, parameters we do not
// support, a prompt longer than the context. Pure functions of their input:
// the fuzz target for request bodies calls them directly.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "server/api_error.h"
#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace cs {

// What requests are checked against.
struct ApiLimits {
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;
  std::string model_id;  // the one model served
  int n_ctx = 0;         // context per sequence
  int max_n = 1;         // completions per request
  ToolSyntax tools;      // the chat template's call format
  // A conversation that offers tools renders with the file's template for
  // them where it has one (LlamaModel::chat_for_tools), and its calls are
  // in that template's format. Null: chat and tools.
  const ChatTemplate* chat_tools = nullptr;
  ToolSyntax tools_of_chat_tools;
};

// Sets chat_tools to the file's template for tools where its calls are in a
// format we read; Command R's are not (it would get no tools and fail, where
// the default template takes their generic description), so it is left out.
void add_tool_template(ApiLimits& lim, const ChatTemplate& chat_tools);

struct ApiRequest {
  bool chat = false;
  Request engine;              // prompt ids, sampling, max_tokens, stop, n, logprobs
  // Prompt Cache: a PML <prompt> document (the "pml" field, or a completions
  // prompt that is one) instead of the prompt or messages; the server builds
  // the prompt from its registered schema. max_tokens: -1 = up to the context.
  std::string pml;
  bool pml_cache = true;       // "prompt_cache": false computes it from scratch
  long long max_tokens = -1;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // answer with logprobs (engine.logprobs = how many alternatives)
  // Constrained decoding: response_format, regex or grammar (or the tool
  // call a tool_choice demands), compiled by the server into engine.grammar.
  // constraint_param names the field its errors are about.
  std::optional<GrammarSpec> constraint;
  std::string constraint_param;
  // The constraint is ours, not the client's: the calls a model may begin
  // under tool_choice "auto" with no tool "strict". One that does not
  // compile within its budget (its wall time: its CPU budget) is dropped and
  // the request served without it (its calls parsed from free text).
  bool constraint_optional = false;
  // Tools offered (tool_choice not "none"): the reply is parsed for calls in
  // tool_format.
  bool tools = false;
  ToolFormat tool_format = ToolFormat::kHermes;
  // The reply's calls are written under tool_call_grammar (demanded, or
  // begun under auto): a stream sends each as it is written
  // (server/call_stream.h). False where none is, or where it was dropped.
  bool calls_constrained = false;
  // The Qwen XML format's: each tool's parameters' types (reading values back).
  std::shared_ptr<const ParamTypes> param_types;
  // A template that thinks (server/reasoning.h): the reply's thought comes
  // back apart; in_thought: the prompt opened it.
  bool reasoning = false;
  bool in_thought = false;
  bool channels = false;  // the thought in harmony channels (gpt-oss's template)
  // The reply's split as this request reads it (reasoning.h), and a stream's splitter.
  SplitReply split(std::string_view reply) const {
    return channels ? split_channels(reply) : split_reasoning(reply, in_thought);
  }
  ReasoningStream splitter() const { return ReasoningStream(in_thought, channels); }
};

// Throws ApiError.
ApiRequest parse_completion_request(const std::string& body, const ApiLimits& limits);
// max_tokens against the context once the prompt is known (a PML prompt's
// last position); throws ApiError.
void check_context(ApiRequest& r, const ApiLimits& limits);
ApiRequest parse_chat_request(const std::string& body, const ApiLimits& limits);
// A thinking template's thought as the engine watches it: bounded to
// `budget` tokens (-1: none; at the budget the engine closes it in the
// templates' way, reasoning.h's kThoughtClose, as markup), and a JSON
// constraint (call it after the constraint is known) made the answer's
// (Request::grammar_after_thought). Nothing for a template that does not think.
void set_thought(ApiRequest& r, int budget, const ApiLimits& limits);
// The same from a parsed body (other APIs map theirs to it:
// server/messages_api.h); continue_text: the start of the reply, after the
// generation prompt, which the model continues (content, not markup).
ApiRequest parse_chat_json(const nlohmann::ordered_json& body, const ApiLimits& limits,
                           const std::string& continue_text = "");

}  // namespace cs
