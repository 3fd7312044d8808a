// The Messages API's mapping (server/messages_api.h): requests against the
// chat route's own rendering of the conversation they mean (the reference:
// the OpenAI route, tested on its own), errors with their fields, answers
// and streams as exact JSON.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "server/messages_api.h"
#include "api_fixture.h"

namespace cs {
namespace {

using json = nlohmann::json;

class Messages : public ::testing::Test {
 protected:
  static const Tokenizer& tok() { return test::gpt2_tokenizer(); }
  const ApiLimits& limits() { return lim_; }
  ApiLimits limits(int n_ctx) {
    ApiLimits lim = lim_;
    lim.n_ctx = n_ctx;
    return lim;
  }
  std::string prompt(const std::string& body) {
    return tok().decode(parse_messages_request(body, limits()).chat.engine.prompt);
  }
  std::string chat_prompt(const std::string& body) { return tok().decode(parse_chat_request(body, limits()).engine.prompt); }
  ApiError error(const std::string& body) {
    try {
      parse_messages_request(body, limits());
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << body;
    return {};
  }
  ChatTemplate chat_{ChatTemplate::chatml_source(), "", "<|endoftext|>"};
  ApiLimits lim_ = test::api_limits(&chat_);
};

// SSE text as [{"event": name, "data": {...}}].
json events(const std::string& sse) {
  json out = json::array();
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    const std::string block = sse.substr(at, end - at);
    at = end + 2;
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    out.push_back({{"event", block.substr(7, nl - 7)}, {"data", json::parse(block.substr(nl + 7))}});
  }
  return out;
}

TEST_F(Messages, AConversationRendersAsTheChatRouteRendersItsEquivalent) {
  const std::string msgs = R"({"model": "m", "max_tokens": 16,
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}],
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "ask the tool", "signature": "s"},
                                        {"type": "text", "text": "Checking."},
                                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                                   {"type": "text", "text": "And tomorrow?"}]},
      {"role": "user", "content": "In Celsius."}]})";
  const std::string chat = R"({"model": "m", "max_tokens": 16, "messages": [
      {"role": "system", "content": "Be brief.\nUse tools."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "ask the tool",
       "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
      {"role": "user", "content": "And tomorrow?\nIn Celsius."}]})";
  EXPECT_EQ(prompt(msgs), chat_prompt(chat));
  const MessagesRequest r = parse_messages_request(msgs, limits());
  // The system's mark closes the prefix up to the system text (and the
  // next turn's opening, which the cut conversation shares).
  ASSERT_EQ(r.breakpoints.size(), 1u);
  EXPECT_EQ(r.breakpoints[0].ttl, std::chrono::seconds(300));
  const std::vector<int32_t>& p = r.chat.engine.prompt;
  EXPECT_EQ(tok().decode({p.begin(), p.begin() + r.breakpoints[0].tokens}),
            "<|im_start|>system\nBe brief.\nUse tools.<|im_end|>\n<|im_start|>user\n");
  EXPECT_EQ(r.chat.engine.max_tokens, 16);
  EXPECT_EQ(r.chat.engine.n, 1);
  EXPECT_EQ(r.model, "m");
}

TEST_F(Messages, EachMarkClosesThePrefixBeforeWhatFollowsIt) {
  const MessagesRequest r = parse_messages_request(R"({"model": "m", "max_tokens": 8, "cache_control": {"type": "ephemeral"},
      "tools": [{"name": "a", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
      "messages": [{"role": "user", "content": [{"type": "text", "text": "First", "cache_control": {"type": "ephemeral"}}]},
                   {"role": "assistant", "content": [{"type": "text", "text": "Reply", "cache_control": {"type": "ephemeral"}}]},
                   {"role": "user", "content": "Second"}]})",
                                                   limits());
  const std::vector<int32_t>& p = r.chat.engine.prompt;
  auto text = [&](int n) { return tok().decode({p.begin(), p.begin() + n}); };
  ASSERT_EQ(r.breakpoints.size(), 4u);
  EXPECT_EQ(r.breakpoints[0].ttl, std::chrono::seconds(3600));  // the tool's: the tools, rendered in the system turn
  EXPECT_TRUE(text(r.breakpoints[0].tokens).ends_with(
      "</tools>\nTo call tools, reply with one block per call and nothing else:\n<tool_call>{\"name\": \"function name\", "
      "\"arguments\": {\"argument\": \"value\"}}</tool_call>\nEach call's result comes back in a <tool_response> "
      "block.<|im_end|>\n<|im_start|>user\n"))
      << text(r.breakpoints[0].tokens);
  EXPECT_TRUE(text(r.breakpoints[1].tokens).ends_with("<|im_start|>user\nFirst<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_TRUE(text(r.breakpoints[2].tokens).ends_with("<|im_start|>assistant\nReply<|im_end|>\n<|im_start|>user\n"));
  EXPECT_EQ(r.breakpoints[3].tokens, int(p.size()));  // the request's own mark: the whole prompt
  EXPECT_EQ(r.cached_prefix(), int(p.size()));
}

TEST_F(Messages, AFinalAssistantMessageIsTheStartOfTheReply) {
  EXPECT_EQ(prompt(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Count"},
                                                                   {"role": "assistant", "content": "1, 2,"}]})"),
            "<|im_start|>user\nCount<|im_end|>\n<|im_start|>assistant\n1, 2,");
}

TEST_F(Messages, ToolsToolChoiceAndTheRestMapToTheEngine) {
  const std::string tools = R"("tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}])";
  auto req = [&](const std::string& extra) {
    return parse_messages_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], )" +
                                      tools + extra + "}",
                                  limits());
  };
  EXPECT_TRUE(req("").chat.tools);
  // auto: a call the model begins is constrained from its marker on.
  ASSERT_TRUE(req("").chat.constraint);
  EXPECT_FALSE(req("").chat.engine.grammar_triggers.empty());
  EXPECT_TRUE(req(R"(, "tool_choice": {"type": "any"})").chat.engine.grammar_triggers.empty());
  EXPECT_TRUE(req(R"(, "tool_choice": {"type": "any"})").chat.constraint);
  EXPECT_TRUE(req(R"(, "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": true})").chat.constraint);
  EXPECT_FALSE(req(R"(, "tool_choice": {"type": "none"})").chat.tools);
  const MessagesRequest r = req(R"(, "stop_sequences": ["a", "b", "c", "d", "e"], "temperature": 0.25, "top_k": 5,
                                    "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}})");
  EXPECT_EQ(r.chat.engine.stop, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(r.chat.engine.sampling.temperature, 0.25f);
  EXPECT_EQ(r.chat.engine.sampling.top_k, 5);
  ASSERT_TRUE(r.chat.constraint);
  EXPECT_EQ(r.chat.constraint->kind, GrammarKind::kJsonSchema);
  EXPECT_EQ(r.chat.constraint->text, R"({"type":"object"})");
}

TEST_F(Messages, MistakesAre400sNamingTheField) {
  const auto e = error(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.message, "max_tokens is required");
  EXPECT_EQ(messages_error_json(e), R"({"type":"error","error":{"type":"invalid_request_error","message":"max_tokens is required"}})");
  const std::string head = R"({"model": "m", "max_tokens": 8, )";
  struct Case {
    std::string body, param, message;
  } cases[] = {
      {R"("messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})", "messages[0].content[0].type",
       "messages[0].content[0]: image blocks are not supported in user messages"},
      {R"("messages": [{"role": "system", "content": "x"}]})", "messages[0].role",
       R"(messages[0].role must be "user" or "assistant")"},
      {R"("messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 2048}})",
       "thinking.budget_tokens", "thinking.budget_tokens must be an integer, at least 1024 and below max_tokens"},
      {R"("messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "s"}]})",
       "tools[0].type", ""},
      {R"("messages": [{"role": "user", "content": "x"}], "temperature": 1.5})", "temperature",
       "temperature must be a number in [0, 1]"},
      {R"("messages": [{"role": "user", "content": "x"}], "system": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]})",
       "system[0].cache_control.ttl", R"(system[0].cache_control.ttl must be "5m" or "1h")"},
      {R"("messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
          {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}},
          {"type": "text", "text": "d", "cache_control": {"type": "ephemeral"}}]}], "cache_control": {"type": "ephemeral"}})",
       "messages[0].content[3].cache_control", "at most 4 cache_control marks are allowed in a request"},
      {R"("messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "tool"}})", "tool_choice.name", ""},
      {R"("messages": [{"role": "assistant", "content": "x"}]})", "messages", ""},
      // A tool's schema in this API's names (the chat request's tools[0].function.parameters).
      {R"("messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {"type": "obj"}}]})",
       "tools[0].input_schema",
       R"(tools[0].input_schema: at /type: type "obj" is not a JSON type (string, number, integer, boolean, object, array, null))"},
      {R"("messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "any"},
          "tools": [{"name": "f", "input_schema": {"type": "object", "not": {}}}]})",
       "tools[0].input_schema",
       "tools[0].input_schema: at /not: not is not supported (the grammar engine cannot enforce it, so output could "
       "break the schema; docs/serving.md lists what it enforces)"},
  };
  for (const Case& c : cases) {
    const ApiError got = error(head + c.body);
    EXPECT_EQ(got.status, 400) << c.body;
    EXPECT_EQ(got.param, c.param) << c.body;
    if (!c.message.empty()) {
      EXPECT_EQ(got.message, c.message) << c.body;
    }
  }
  EXPECT_EQ(error(R"({"model": "other", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]})").status, 404);
  const ApiError no_thought = error(R"({"model": "m", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
                                        "messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(no_thought.param, "thinking");
  EXPECT_EQ(no_thought.message, "thinking is enabled, but this model's chat template does not think (no <think> in it)");
  EXPECT_STREQ(messages_error_type(404), "not_found_error");
  EXPECT_STREQ(messages_error_type(401), "authentication_error");
  EXPECT_STREQ(messages_error_type(429), "rate_limit_error");
  EXPECT_STREQ(messages_error_type(500), "api_error");
}

// Thinking is asked of the template the request renders with: where the
// file has a template for tools and the request offers tools, that one.
TEST_F(Messages, ThinkingIsCheckedAgainstTheTemplateTheRequestUses) {
  const auto source = [](const std::string& name) {
    std::ifstream f(std::string(CS_TEMPLATE_DIR) + "/" + name + ".jinja");
    std::stringstream s;
    s << f.rdbuf();
    EXPECT_FALSE(s.str().empty()) << name;
    return s.str();
  };
  const ChatTemplate qwen3(source("Qwen-Qwen3-0.6B"), "", "<|im_end|>");
  const ChatTemplate hermes(source("NousResearch-Hermes-3-Llama-3.1-8B-tool_use"), "", "<|im_end|>");
  const std::string think = R"({"model": "m", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
                                "messages": [{"role": "user", "content": "x"}])";
  const std::string tools = R"(, "tools": [{"name": "f", "input_schema": {"type": "object"}}]})";
  const auto refused = [](const std::string& body, const ApiLimits& lim) {
    try {
      parse_messages_request(body, lim);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "thinking") << body;
      EXPECT_EQ(e.message, "thinking is enabled, but this model's chat template does not think (no <think> in it)");
      try {
        count_messages_tokens(body, lim);
      } catch (const ApiError& c) {
        EXPECT_EQ(c.message, e.message);
        return true;
      }
      ADD_FAILURE() << "count_tokens took " << body;
      return true;
    }
    return false;
  };
  // ChatML by default, Qwen3's (which thinks) for tools.
  ApiLimits plain_then_thinks = test::api_limits(&chat_);
  add_tool_template(plain_then_thinks, qwen3);
  ASSERT_EQ(plain_then_thinks.chat_tools, &qwen3);
  EXPECT_TRUE(refused(think + "}", plain_then_thinks));
  EXPECT_FALSE(refused(think + tools, plain_then_thinks));
  EXPECT_TRUE(parse_messages_request(think + tools, plain_then_thinks).chat.reasoning);
  EXPECT_EQ(count_messages_tokens(think + tools, plain_then_thinks),
            int(parse_messages_request(think + tools, plain_then_thinks).chat.engine.prompt.size()));
  // Qwen3's by default, Hermes 3's (which does not think) for tools.
  ApiLimits thinks_then_plain = test::api_limits(&qwen3);
  add_tool_template(thinks_then_plain, hermes);
  ASSERT_EQ(thinks_then_plain.chat_tools, &hermes);
  EXPECT_FALSE(refused(think + "}", thinks_then_plain));
  EXPECT_TRUE(refused(think + tools, thinks_then_plain));
  // tool_choice none renders with the default template.
  EXPECT_FALSE(refused(think + R"(, "tool_choice": {"type": "none"})" + tools, thinks_then_plain));
}

TEST_F(Messages, TokensAreCountedBeyondTheContext) {
  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": ")" + std::string(3000, 'a') + R"("}]})";
  ApiLimits lim = limits(64);
  const int n = count_messages_tokens(body, lim);
  EXPECT_GT(n, 64);
  EXPECT_EQ(n, int(parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": ")" + std::string(3000, 'a') +
                                          R"("}]})",
                                      limits())
                       .engine.prompt.size()));
}

Result result(const std::string& text, FinishReason reason, const std::string& stop = "") {
  Result r;
  r.completions.resize(1);
  r.completions[0].text = text;
  r.completions[0].reason = reason;
  r.completions[0].stop_sequence = stop;
  r.usage.prompt_tokens = 30;
  r.usage.cached_tokens = 12;
  r.usage.completion_tokens = 7;
  return r;
}

TEST_F(Messages, AnAnswerIsAMessage) {
  const MessagesRequest req =
      parse_messages_request(R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})", limits());
  const json usage = {{"input_tokens", 18}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 12}, {"output_tokens", 7}};
  EXPECT_EQ(json::parse(MessagesResponder(req, "msg_1").response(result("Hello.", FinishReason::kStop))),
            json({{"id", "msg_1"},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", "m"},
                  {"content", {{{"type", "text"}, {"text", "Hello."}}}},
                  {"stop_reason", "end_turn"},
                  {"stop_sequence", nullptr},
                  {"usage", usage}}));
  const json stopped = json::parse(MessagesResponder(req, "msg_1").response(result("Hel", FinishReason::kStop, "lo")));
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence");
  EXPECT_EQ(stopped["stop_sequence"], "lo");
  EXPECT_EQ(json::parse(MessagesResponder(req, "msg_1").response(result("Hel", FinishReason::kLength)))["stop_reason"],
            "max_tokens");
}

TEST_F(Messages, ACallIsAToolUseBlock) {
  const MessagesRequest req = parse_messages_request(
      R"({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}],
          "tools": [{"name": "weather", "input_schema": {"type": "object"}}]})",
      limits());
  const std::string reply = "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  json whole = json::parse(MessagesResponder(req, "msg_1").response(result(reply, FinishReason::kStop)));
  ASSERT_EQ(whole["content"].size(), 2u);
  EXPECT_EQ(whole["content"][0], json({{"type", "text"}, {"text", "Let me look."}}));
  EXPECT_EQ(whole["content"][1]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  whole["content"][1].erase("id");
  EXPECT_EQ(whole["content"][1], json({{"type", "tool_use"}, {"name", "weather"}, {"input", {{"city", "Paris"}}}}));
  EXPECT_EQ(whole["stop_reason"], "tool_use");

  // Streamed in pieces: the text goes out until the call may begin, the call
  // (written under its grammar: tool_choice auto) as a tool_use block opened
  // when its name is written, its input in pieces as they are.
  MessagesResponder s(req, "msg_1");
  std::string sse = s.start(30);
  for (size_t i = 0; i < reply.size(); i += 5) {
    StreamEvent ev;
    ev.text = reply.substr(i, 5);
    sse += s.event(ev);
  }
  sse += s.finish(result(reply, FinishReason::kStop));
  json got = events(sse);
  std::string text, input;
  int input_deltas = 0;
  json kinds = json::array(), call_start;
  for (json& e : got) {
    if (e["event"] == "content_block_delta" && e["data"]["delta"]["type"] == "text_delta") {
      text += e["data"]["delta"]["text"].get<std::string>();
    } else if (e["event"] == "content_block_delta" && e["data"]["delta"]["type"] == "input_json_delta") {
      input += e["data"]["delta"]["partial_json"].get<std::string>();
      ++input_deltas;
    } else {
      kinds.push_back(e["event"]);
    }
    if (e["event"] == "content_block_start" && e["data"]["content_block"]["type"] == "tool_use") {
      e["data"]["content_block"].erase("id");
      call_start = e["data"];
    }
  }
  EXPECT_EQ(text, "Let me look.");  // the whole answer's text
  EXPECT_EQ(kinds, json({"message_start", "content_block_start", "content_block_stop", "content_block_start",
                         "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(got[0]["data"]["message"]["usage"],
            json({{"input_tokens", 30}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 0}, {"output_tokens", 0}}));
  const size_t n = got.size();
  EXPECT_EQ(call_start, json({{"type", "content_block_start"},
                              {"index", 1},
                              {"content_block", {{"type", "tool_use"}, {"name", "weather"}, {"input", json::object()}}}}));
  EXPECT_EQ(input, R"({"city":"Paris"})");
  EXPECT_EQ(input_deltas, 4);  // the 5-byte pieces after the arguments' brace: as written, not at the end
  EXPECT_EQ(got[n - 2]["data"],
            json({{"type", "message_delta"},
                  {"delta", {{"stop_reason", "tool_use"}, {"stop_sequence", nullptr}}},
                  {"usage",
                   {{"input_tokens", 18}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 12}, {"output_tokens", 7}}}}));
}

TEST_F(Messages, APlainStreamIsOneTextBlock) {
  const MessagesRequest req = parse_messages_request(
      R"({"model": "m", "max_tokens": 8, "stream": true, "messages": [{"role": "user", "content": "hi"}]})", limits());
  MessagesResponder s(req, "msg_2");
  std::string sse;
  for (const char* piece : {"Hel", "", "lo."}) {
    StreamEvent ev;
    ev.text = piece;
    sse += s.event(ev);
  }
  sse += s.finish(result("Hello.", FinishReason::kLength));
  const json got = events(sse);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0]["data"], json({{"type", "content_block_start"}, {"index", 0}, {"content_block", {{"type", "text"}, {"text", ""}}}}));
  EXPECT_EQ(got[1]["data"], json({{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", "Hel"}}}}));
  EXPECT_EQ(got[2]["data"]["delta"]["text"], "lo.");
  EXPECT_EQ(got[3]["data"], json({{"type", "content_block_stop"}, {"index", 0}}));
  EXPECT_EQ(got[4]["data"]["delta"]["stop_reason"], "max_tokens");
  EXPECT_EQ(got[5]["data"], json({{"type", "message_stop"}}));
  EXPECT_EQ(MessagesResponder::ping(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
  EXPECT_EQ(MessagesResponder::error_event({500, "boom", "server_error", "", ""}),
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"boom\"}}\n\n");
}

}  // namespace
}  // namespace cs
