// The Responses API's mapping and store (server/responses_api.h,
// server/response_store.h): items against the chat route's rendering of the
// conversation they mean (the reference: the OpenAI chat route, tested on
// its own), a previous response's conversation carried on, errors with
// their fields and codes, the response object and its stream as exact JSON,
// the store's bounds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "server/responses_api.h"
#include "api_fixture.h"

namespace cs {
namespace {

using json = nlohmann::json;

TEST(ResponseStore, KeepsTheMostRecentlyUsedWithinItsBounds) {
  auto make = [](size_t n) {
    auto r = std::make_shared<StoredResponse>();
    r->object = std::string(n, 'x');
    r->conversation = nlohmann::ordered_json::array();
    return r;
  };
  const size_t unit = make(100)->bytes();  // 100 + "[]"
  EXPECT_EQ(unit, 102u);
  ResponseStore s(3, 4 * unit);
  EXPECT_TRUE(s.put("a", make(100)));
  EXPECT_TRUE(s.put("b", make(100)));
  EXPECT_TRUE(s.put("c", make(100)));
  ASSERT_TRUE(s.get("a"));       // a is now the most recent
  EXPECT_TRUE(s.put("d", make(100)));  // over the count: b goes
  EXPECT_FALSE(s.get("b"));
  EXPECT_TRUE(s.get("a") && s.get("c") && s.get("d"));
  EXPECT_EQ(s.stats().count, 3u);
  EXPECT_EQ(s.stats().evicted, 1u);
  EXPECT_TRUE(s.put("e", make(302)));  // 304 bytes, over the bound: the two least recent go (a, c)
  EXPECT_EQ(s.stats().count, 2u);
  EXPECT_EQ(s.stats().bytes, unit + 304);
  EXPECT_TRUE(s.get("d") && s.get("e"));
  EXPECT_FALSE(s.put("big", make(5 * unit)));  // larger than the whole store: not kept
  EXPECT_FALSE(s.get("big"));
  EXPECT_TRUE(s.remove("d"));
  EXPECT_FALSE(s.remove("d"));
  EXPECT_EQ(s.stats().count, 1u);
  EXPECT_EQ(s.stats().bytes, 304u);
  EXPECT_EQ(s.stats().evicted, 3u);
}

class Responses : public ::testing::Test {
 protected:
  static const Tokenizer& tok() { return test::gpt2_tokenizer(); }
  ResponsesRequest parse(const std::string& body) { return parse_responses_request(body, lim_, store_); }
  std::string prompt(const std::string& body) { return tok().decode(parse(body).chat.engine.prompt); }
  std::string chat_prompt(const std::string& body) { return tok().decode(parse_chat_request(body, lim_).engine.prompt); }
  ApiError error(const std::string& body) {
    try {
      parse(body);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << body;
    return {};
  }
  ChatTemplate chat_{ChatTemplate::chatml_source(), "", "<|endoftext|>"};
  ApiLimits lim_ = test::api_limits(&chat_);
  ResponseStore store_{16, 1 << 20};
};

TEST_F(Responses, ItemsRenderAsTheChatRouteRendersTheirConversation) {
  const std::string items = R"({"model": "m", "instructions": "Be brief.", "input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in "}, {"type": "input_text", "text": "Paris?"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "ask the tool"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
      {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "weather", "arguments": "{\"city\": \"Lyon\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
      {"role": "user", "content": "Thanks"}]})";
  const std::string chat = R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "system", "content": "Use tools."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "ask the tool", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
      {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
      {"role": "user", "content": "Thanks"}]})";
  EXPECT_EQ(prompt(items), chat_prompt(chat));
  EXPECT_EQ(prompt(R"({"model": "m", "input": "Hi"})"), chat_prompt(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})"));
}

// A reply cut inside a UTF-8 character (max_output_tokens) is stored and
// answered all the same (its stray bytes as U+FFFD in JSON text).
TEST_F(Responses, AReplyCutInsideACharacterIsStored) {
  const ResponsesRequest req = parse(R"({"model": "m", "input": "Hi"})");
  ResponsesResponder out(req, "resp_c", 0);
  Result r;
  r.completions.resize(1);
  r.completions[0].text = "caf\xc3";
  auto kept = std::make_shared<StoredResponse>();
  kept->object = out.object(&r);
  kept->conversation = out.conversation(r);
  EXPECT_GT(kept->bytes(), kept->object.size());
  EXPECT_TRUE(store_.put("resp_c", kept));
  EXPECT_EQ(json::parse(kept->object)["output"][0]["content"][0]["text"], "caf\xef\xbf\xbd");
  // And it carries on.
  EXPECT_TRUE(tok().decode(parse(R"({"model": "m", "previous_response_id": "resp_c", "input": "More"})").chat.engine.prompt)
                  .find("caf") != std::string::npos);
}

TEST_F(Responses, AStoredConversationGoesOnWithoutItsInstructions) {
  const ResponsesRequest first = parse(R"({"model": "m", "instructions": "Be brief.", "input": "Hi", "max_output_tokens": 4})");
  EXPECT_EQ(first.chat.engine.max_tokens, 4);
  ResponsesResponder out(first, "resp_a", 0);
  Result r;
  r.completions.resize(1);
  r.completions[0].text = "Hello!";
  auto kept = std::make_shared<StoredResponse>();
  kept->object = out.object(&r);
  kept->conversation = out.conversation(r);
  EXPECT_EQ(json(kept->conversation), json::parse(R"([{"type": "message", "role": "user", "content": "Hi"},
                                                      {"type": "message", "role": "assistant", "content": "Hello!"}])"));
  store_.put("resp_a", kept);
  EXPECT_EQ(prompt(R"({"model": "m", "previous_response_id": "resp_a", "input": "Bye", "instructions": "Be kind."})"),
            chat_prompt(R"({"model": "m", "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]})"));
  const ApiError e = error(R"({"model": "m", "previous_response_id": "resp_gone", "input": "x"})");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "previous_response_id");
  EXPECT_EQ(e.code, "previous_response_not_found");
}

TEST_F(Responses, MistakesAre400sNamingTheField) {
  struct Case {
    std::string body, param, code;
  } cases[] = {
      {R"({"model": "m"})", "input", "missing_required_parameter"},
      {R"({"model": "m", "input": [{"type": "input_image", "image_url": "x"}]})", "input[0].type", "unsupported_parameter"},
      {R"({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file"}]}]})", "input[0].content[0].type",
       "unsupported_parameter"},
      {R"({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]})",
       "input[0].arguments", "invalid_value"},
      {R"({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type", "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "background": true})", "background", "unsupported_parameter"},
      {R"({"model": "m", "input": "x", "max_output_tokens": 100000})", "max_output_tokens", "context_length_exceeded"},
      {R"({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}})", "text.format.type", "invalid_value"},
      {R"({"model": "m", "input": "x", "store": "yes"})", "store", "invalid_type"},
      // The chat route's names become this API's: the conversation is input,
      // a tool's schema its own field.
      {R"({"model": "m", "input": []})", "input", "invalid_value"},
      {R"({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"type": "obj"}}]})",
       "tools[0].parameters", "invalid_schema"},
  };
  for (const Case& c : cases) {
    const ApiError e = error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body;
  }
  // allowed_tools in this API's shape: the chat route's request, its
  // mistakes under this API's names.
  const std::string tools = R"("tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}])";
  const ResponsesRequest allowed = parse(R"({"model": "m", "input": "x", )" + tools +
                                         R"(, "tool_choice": {"type": "allowed_tools", "mode": "required",
                                             "tools": [{"type": "function", "name": "g"}]}})");
  const ApiRequest chat = parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}],
      "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "required",
                      "tools": [{"type": "function", "function": {"name": "g"}}]}}})",
                                             lim_);
  EXPECT_EQ(allowed.chat.engine.prompt, chat.engine.prompt);
  ASSERT_TRUE(allowed.chat.constraint && chat.constraint);
  EXPECT_EQ(allowed.chat.constraint->text, chat.constraint->text);
  EXPECT_NE(chat.constraint->text.find(R"("const":"g")"), std::string::npos);
  EXPECT_EQ(chat.constraint->text.find(R"("const":"f")"), std::string::npos);
  const ApiError unknown = error(R"({"model": "m", "input": "x", )" + tools +
                                 R"(, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "h"}]}})");
  EXPECT_EQ(unknown.param, "tool_choice.tools[0]");
  EXPECT_EQ(unknown.message, "tool_choice.tools[0] names the function 'h', which is not in tools");
  const ApiError shape = error(R"({"model": "m", "input": "x", )" + tools +
                               R"(, "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function"}]}})");
  EXPECT_EQ(shape.param, "tool_choice.tools[0]");
  EXPECT_EQ(shape.message, R"(tool_choice.tools[0] must be {"type": "function", "name"})");
  EXPECT_EQ(error(R"({"model": "m", "input": "x", )" + tools + R"(, "tool_choice": {"type": "allowed_tools", "tools": []}})").param,
            "tool_choice.mode");
  EXPECT_EQ(error(R"({"model": "other", "input": "x"})").status, 404);
  EXPECT_EQ(error(R"({"model": "m", "input": []})").message, "input must not be empty");
  EXPECT_EQ(error(R"({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "parameters": {"type": "obj"}}]})")
                .message.substr(0, 31),
            "tools[0].parameters: at /type: ");
  // A schema is compiled (and refused) after parsing, under text.format.
  EXPECT_EQ(parse(R"({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "s",
                      "schema": {"type": "object"}}}})").chat.constraint_param,
            "text.format");
}

Result result(const std::string& text, FinishReason reason) {
  Result r;
  r.completions.resize(1);
  r.completions[0].text = text;
  r.completions[0].reason = reason;
  r.usage.prompt_tokens = 30;
  r.usage.cached_tokens = 12;
  r.usage.completion_tokens = 7;
  return r;
}

TEST_F(Responses, AnAnswerIsAResponseObject) {
  const ResponsesRequest req = parse(R"({"model": "m", "input": "hi", "max_output_tokens": 7, "metadata": {"k": "v"}})");
  ResponsesResponder out(req, "resp_1", 1700000000);
  json o = json::parse(out.object(nullptr));
  EXPECT_EQ(o["status"], "in_progress");
  EXPECT_EQ(o["output"], json::array());
  EXPECT_TRUE(o["usage"].is_null());
  const Result cut = result("Hello.", FinishReason::kLength);
  o = json::parse(out.object(&cut));
  ASSERT_EQ(o["output"].size(), 1u);
  EXPECT_EQ(o["output"][0]["id"].get<std::string>().rfind("msg_", 0), 0u);
  o["output"][0].erase("id");
  EXPECT_EQ(o, json::parse(R"({"id": "resp_1", "object": "response", "created_at": 1700000000, "status": "incomplete",
      "background": false, "error": null, "incomplete_details": {"reason": "max_output_tokens"}, "instructions": null,
      "max_output_tokens": 7, "model": "m",
      "output": [{"type": "message", "status": "incomplete", "role": "assistant",
                  "content": [{"type": "output_text", "text": "Hello.", "annotations": [], "logprobs": []}]}],
      "parallel_tool_calls": true, "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
      "service_tier": "default", "store": true, "temperature": 1.0, "text": {"format": {"type": "text"}},
      "tool_choice": "auto", "tools": [], "top_p": 1.0, "truncation": "disabled",
      "usage": {"input_tokens": 30, "input_tokens_details": {"cached_tokens": 12, "cache_write_tokens": 0},
                "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 37},
      "user": null, "metadata": {"k": "v"}})"));
}

// SSE text as [{"event", "data"}], every event's type its name and its
// sequence numbers 0, 1, 2, ...
json events(const std::string& sse) {
  json out = json::array();
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    const std::string block = sse.substr(at, end - at);
    at = end + 2;
    const size_t nl = block.find('\n');
    const json data = json::parse(block.substr(nl + 7));
    EXPECT_EQ(data["type"], block.substr(7, nl - 7));
    EXPECT_EQ(data["sequence_number"], out.size());
    out.push_back(data);
  }
  return out;
}

TEST_F(Responses, AStreamNamesItsItemsAsTheFinalObjectDoes) {
  const ResponsesRequest req = parse(R"({"model": "m", "input": "hi", "stream": true,
      "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]})");
  ResponsesResponder out(req, "resp_2", 0);
  const std::string reply = "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>";
  std::string sse = out.start();
  for (size_t i = 0; i < reply.size(); i += 4) {
    StreamEvent ev;
    ev.text = reply.substr(i, 4);
    sse += out.event(ev);
  }
  sse += out.finish(result(reply, FinishReason::kStop));
  const json got = events(sse);
  json types = json::array();
  std::string text, arguments, call_id;
  int argument_deltas = 0;
  for (const json& e : got) {
    if (e["type"] == "response.output_text.delta") {
      text += e["delta"].get<std::string>();
    } else if (e["type"] == "response.function_call_arguments.delta") {
      arguments += e["delta"].get<std::string>();
      ++argument_deltas;
    } else {
      types.push_back(e["type"]);
    }
    if (e["type"] == "response.output_item.added" && e["item"]["type"] == "function_call") call_id = e["item"]["id"];
  }
  EXPECT_EQ(text, "Let me look.");  // the whole answer's text
  EXPECT_EQ(types, json({"response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added", "response.output_text.done", "response.content_part.done",
                         "response.output_item.done", "response.output_item.added",
                         "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  EXPECT_EQ(arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(argument_deltas, 5);  // the 4-byte pieces after the arguments' brace: as written
  const json& final = got.back()["response"];
  EXPECT_EQ(final["status"], "completed");
  ASSERT_EQ(final["output"].size(), 2u);
  EXPECT_EQ(final["output"][0]["id"], got[2]["item"]["id"]);
  EXPECT_EQ(final["output"][0]["content"][0]["text"], "Let me look.");
  const json& call = final["output"][1];
  EXPECT_EQ(call["id"], call_id);
  EXPECT_EQ(call["name"], "weather");
  EXPECT_EQ(call["arguments"], R"({"city":"Oslo"})");
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  // The stored conversation names the call as the object does.
  const json conv = out.conversation(result(reply, FinishReason::kStop));
  EXPECT_EQ(conv.back(), json({{"type", "function_call"}, {"call_id", call["call_id"]}, {"name", "weather"},
                               {"arguments", R"({"city":"Oslo"})"}}));
}

}  // namespace
}  // namespace cs
