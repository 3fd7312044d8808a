// A thinking model's thought apart from its answer (server/reasoning.h):
// the split of whole replies, the same split streamed in random pieces,
// chat_template_kwargs reaching Qwen3's real template, and the thought in
// each API's shape (reasoning_content, thinking blocks, reasoning items).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "model/gguf.h"
#include "server/api_response.h"
#include "server/messages_api.h"
#include "server/reasoning.h"
#include "server/responses_api.h"
#include "api_fixture.h"

namespace cs {
namespace {

using json = nlohmann::json;

TEST(Reasoning, WholeRepliesSplitAtTheTags) {
  struct Case {
    std::string reply;
    bool in_thought;
    std::string reasoning, content;
  } cases[] = {
      {"<think>\nLet me see.\n</think>\n\nParis.", false, "\nLet me see.\n", "Paris."},
      {"  <think>a</think>b", false, "a", "b"},
      {"Let me see.\n</think>\n\nParis.", true, "Let me see.\n", "Paris."},
      {"Paris.", false, "", "Paris."},
      {"Paris <think>not a thought</think>", false, "", "Paris <think>not a thought</think>"},
      {"<think>cut off before the end", false, "cut off before the end", ""},
      {"<thi", false, "", "<thi"},
      {"", true, "", ""},
      {"<think></think>\n\n", false, "", ""},
  };
  for (const Case& c : cases) {
    const SplitReply s = split_reasoning(c.reply, c.in_thought);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.reply;
    EXPECT_EQ(s.content, c.content) << c.reply;
  }
  EXPECT_TRUE(opens_thought("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(opens_thought("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_TRUE(template_thinks("{{ '<think>' }}"));
  EXPECT_FALSE(template_thinks("{{ 'plain' }}"));
}

TEST(Reasoning, HarmonyChannelsSplitByName) {
  struct Case {
    std::string reply, reasoning, content;
  } cases[] = {
      {"<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Paris.", "Think.", "Paris."},
      {"<|channel|>final<|message|>Paris.", "", "Paris."},
      {"<|channel|>analysis<|message|>cut off", "cut off", ""},
      {"<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
       "<|start|>assistant<|channel|>commentary<|message|>c<|end|><|start|>assistant<|channel|>final<|message|>d",
       "ab", "cd"},
      {"plain text", "", "plain text"},
      {"<|channel|>analy", "", ""},
      // Calls (a recipient in the channel's header, or in the role's, which
      // a reply may open with) go to the content as server/tool_calls.h's blocks.
      {"<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
       "<|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
       "Need it.", "<|channel|>commentary to=functions.get_weather<|message|>{\"city\":\"Paris\"}<|call|>"},
      {" to=functions.now<|channel|>commentary json<|message|>{}",
       "", "<|channel|>commentary to=functions.now<|message|>{}<|call|>"},
      {"<|channel|>analysis<|message|>a<|end|><|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}",
       "a", "<|channel|>commentary to=functions.f<|message|>{}<|call|>"},
      {"to be sure", "", "to be sure"},
  };
  for (const Case& c : cases) {
    const SplitReply s = split_channels(c.reply);
    EXPECT_EQ(s.reasoning, c.reasoning) << c.reply;
    EXPECT_EQ(s.content, c.content) << c.reply;
  }
  EXPECT_TRUE(template_has_channels("{{ '<|channel|>' }}"));
}

TEST(Reasoning, AHarmonyStreamSplitsAsTheWholeReply) {
  std::mt19937 rng(11);
  const std::string parts[] = {"<|channel|>", "analysis", "final", "<|message|>", "<|end|>", "<|start|>", "assistant",
                               "<|", "end|>", "x", "yz", "<", "|", " to=functions.f", "commentary to=functions.g ",
                               "<|call|>", "{}", "t", "o=", " "};
  for (int round = 0; round < 4000; ++round) {
    std::string reply;
    for (int k = int(rng() % 14); k > 0; --k) reply += parts[rng() % std::size(parts)];
    ReasoningStream s(false, true);
    std::string reasoning, content;
    for (size_t i = 0; i < reply.size();) {
      const size_t n = 1 + rng() % 6;
      const SplitReply p = s.push(std::string_view(reply).substr(i, n));
      reasoning += p.reasoning, content += p.content;
      i += n;
    }
    const SplitReply p = s.flush();
    reasoning += p.reasoning, content += p.content;
    const SplitReply whole = split_channels(reply);
    ASSERT_EQ(reasoning, whole.reasoning) << reply;
    ASSERT_EQ(content, whole.content) << reply;
  }
}

TEST(Reasoning, AStreamSplitsAsTheWholeReply) {
  std::mt19937 rng(7);
  const std::string parts[] = {"<think>", "</think>", "<th", "ink>", "</", "think", ">", "\n", " ", "a", "bc", "<", "x"};
  for (int round = 0; round < 2000; ++round) {
    std::string reply;
    for (int k = int(rng() % 12); k > 0; --k) reply += parts[rng() % std::size(parts)];
    const bool in_thought = rng() % 2;
    ReasoningStream s(in_thought);
    std::string reasoning, content;
    for (size_t i = 0; i < reply.size();) {
      const size_t n = 1 + rng() % 5;
      const SplitReply p = s.push(std::string_view(reply).substr(i, n));
      reasoning += p.reasoning, content += p.content;
      i += n;
    }
    const SplitReply p = s.flush();
    reasoning += p.reasoning, content += p.content;
    const SplitReply whole = split_reasoning(reply, in_thought);
    ASSERT_EQ(reasoning, whole.reasoning) << reply;
    ASSERT_EQ(content, whole.content) << reply;
  }
}

class Thinking : public ::testing::Test {
 protected:
  static const Tokenizer& tok() { return test::gpt2_tokenizer(); }
  static std::string qwen3() {
    std::ifstream f(std::string(CS_TEMPLATE_DIR) + "/Qwen-Qwen3-0.6B.jinja");
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  void SetUp() override {
    if (source_.empty()) GTEST_SKIP() << "no Qwen3 template (scripts/fetch_vocabs.sh fetches it)";
    lim_ = test::api_limits(&chat_);
  }
  std::string source_ = qwen3();
  ChatTemplate chat_{source_.empty() ? ChatTemplate::chatml_source() : source_, "", "<|im_end|>"};
  ApiLimits lim_;
  const std::string reply_ = "<think>\nThe capital is Paris.\n</think>\n\nParis.";
};

TEST_F(Thinking, GptOssTemplateSpeaksChannelsAndReadsTheEffort) {
  std::ifstream f(std::string(CS_TEMPLATE_DIR) + "/openai-gpt-oss-120b.jinja");
  std::stringstream src;
  src << f.rdbuf();
  if (src.str().empty()) GTEST_SKIP() << "no gpt-oss template";
  const ChatTemplate oss(src.str(), "", "<|return|>");
  ApiLimits lim = lim_;
  lim.chat = &oss;
  const ApiRequest r = parse_chat_request(
      R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "high"})", lim);
  EXPECT_TRUE(r.reasoning && r.channels);
  EXPECT_EQ(r.engine.think_budget, 16384);  // the analysis channel ended by a final message
  EXPECT_EQ(r.engine.think_start, "<|channel|>analysis<|message|>");
  EXPECT_EQ(r.engine.think_stop, "<|end|>");
  EXPECT_EQ(r.engine.think_end, tok().encode("<|end|><|start|>assistant<|channel|>final<|message|>", true));
  EXPECT_NE(tok().decode(r.engine.prompt).find("Reasoning: high"), std::string::npos);
  EXPECT_EQ(r.split("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>Hi.").reasoning,
            "Hm.");
}

Result result(const std::string& text) {
  Result r;
  r.completions.resize(1);
  r.completions[0].text = text;
  r.usage.prompt_tokens = 20;
  r.usage.completion_tokens = 12;
  return r;
}

TEST_F(Thinking, KwargsReachTheTemplate) {
  const ApiRequest on = parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})", lim_);
  EXPECT_TRUE(on.reasoning);
  EXPECT_FALSE(on.in_thought);  // Qwen3's model opens the thought itself
  const ApiRequest off = parse_chat_request(
      R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"enable_thinking": false}})",
      lim_);
  EXPECT_TRUE(tok().decode(off.engine.prompt).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(tok().decode(on.engine.prompt).ends_with("</think>\n\n"));
}

TEST_F(Thinking, BudgetsReachTheEngine) {
  const std::vector<int32_t> close = tok().encode(kThoughtClose, true);
  auto chat = [&](const std::string& extra) {
    return parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}])" + extra + "}", lim_).engine;
  };
  EXPECT_EQ(chat("").think_budget, -1);
  EXPECT_EQ(chat(R"(, "reasoning_effort": "high")").think_budget, 16384);
  EXPECT_EQ(chat(R"(, "thinking_budget": 7)").think_budget, 7);
  EXPECT_EQ(chat(R"(, "thinking_budget": 7)").think_end, close);
  EXPECT_FALSE(chat(R"(, "thinking_budget": 7)").think_open);
  EXPECT_TRUE(tok().decode(chat(R"(, "reasoning_effort": "none")").prompt).ends_with("<think>\n\n</think>\n\n"));
  const MessagesRequest m = parse_messages_request(
      R"({"model": "m", "max_tokens": 3000, "thinking": {"type": "enabled", "budget_tokens": 2000},
          "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>\n"}]})",
      lim_);
  EXPECT_EQ(m.chat.engine.think_budget, 2000);
  EXPECT_TRUE(m.chat.engine.think_open);  // the reply's start opened it
  ResponseStore store(4, 1 << 20);
  EXPECT_EQ(parse_responses_request(R"({"model": "m", "input": "Hi", "reasoning": {"effort": "low"}})", lim_, store)
                .chat.engine.think_budget,
            1024);
  try {
    parse_responses_request(R"({"model": "m", "input": "Hi", "reasoning": {"effort": "huge"}})", lim_, store);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "reasoning.effort");
  }
}

TEST_F(Thinking, ChatCompletionsAnswerWithReasoningContent) {
  const ApiRequest req = parse_chat_request(R"({"model": "m", "messages": [{"role": "user", "content": "Capital?"}]})", lim_);
  const json whole = json::parse(ApiResponder(req, tok(), "c", 0).response(result(reply_)));
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "Paris.");
  EXPECT_EQ(whole["choices"][0]["message"]["reasoning_content"], "\nThe capital is Paris.\n");
  ApiResponder s(req, tok(), "c", 0);
  std::string reasoning, content;
  auto take = [&](const std::string& sse) {
    for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos; at += 6) {
      const json j = json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
      const json& d = j["choices"][0]["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
  };
  for (size_t i = 0; i < reply_.size(); i += 3) {
    StreamEvent ev;
    ev.text = reply_.substr(i, 3);
    take(s.chunk(ev));
  }
  StreamEvent fin;
  fin.kind = StreamEvent::Kind::kFinish;
  take(s.chunk(fin));
  EXPECT_EQ(reasoning, "\nThe capital is Paris.\n");
  EXPECT_EQ(content, "Paris.");
}

TEST_F(Thinking, MessagesAnswerWithAThinkingBlock) {
  const MessagesRequest req = parse_messages_request(
      R"({"model": "m", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
          "messages": [{"role": "user", "content": "Capital?"}]})",
      lim_);
  const json whole = json::parse(MessagesResponder(req, "msg").response(result(reply_)));
  EXPECT_EQ(whole["content"], json::parse(R"([{"type": "thinking", "thinking": "\nThe capital is Paris.\n", "signature": ""},
                                             {"type": "text", "text": "Paris."}])"));
  MessagesResponder s(req, "msg");
  std::string sse;
  for (size_t i = 0; i < reply_.size(); i += 4) {
    StreamEvent ev;
    ev.text = reply_.substr(i, 4);
    sse += s.event(ev);
  }
  sse += s.finish(result(reply_));
  std::string thinking, text;
  json kinds = json::array();
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos; at += 6) {
    const json e = json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
    if (e["type"] == "content_block_delta") {
      if (e["delta"]["type"] == "thinking_delta") thinking += e["delta"]["thinking"].get<std::string>();
      if (e["delta"]["type"] == "text_delta") text += e["delta"]["text"].get<std::string>();
    } else {
      std::string kind = e["type"].get<std::string>();
      if (e.contains("index")) kind += ' ' + e["index"].dump();
      kinds.push_back(kind);
    }
  }
  EXPECT_EQ(thinking, "\nThe capital is Paris.\n");
  EXPECT_EQ(text, "Paris.");
  EXPECT_EQ(kinds, json({"content_block_start 0", "content_block_stop 0", "content_block_start 1", "content_block_stop 1",
                         "message_delta", "message_stop"}));
  // disabled: the template closes the thought in the prompt.
  const MessagesRequest off = parse_messages_request(
      R"({"model": "m", "max_tokens": 64, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "Capital?"}]})",
      lim_);
  EXPECT_TRUE(tok().decode(off.chat.engine.prompt).ends_with("<think>\n\n</think>\n\n"));
}

TEST_F(Thinking, ResponsesAnswerWithAReasoningItem) {
  ResponseStore store(4, 1 << 20);
  const ResponsesRequest req = parse_responses_request(R"({"model": "m", "input": "Capital?"})", lim_, store);
  ResponsesResponder whole(req, "resp", 0);
  const Result r = result(reply_);
  const json o = json::parse(whole.object(&r));
  ASSERT_EQ(o["output"].size(), 2u);
  EXPECT_EQ(o["output"][0]["type"], "reasoning");
  EXPECT_EQ(o["output"][0]["content"], json::parse(R"([{"type": "reasoning_text", "text": "\nThe capital is Paris.\n"}])"));
  EXPECT_EQ(o["output"][1]["content"][0]["text"], "Paris.");
  EXPECT_GT(o["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
  ResponsesResponder s(req, "resp", 0);
  std::string sse = s.start();
  for (size_t i = 0; i < reply_.size(); i += 5) {
    StreamEvent ev;
    ev.text = reply_.substr(i, 5);
    sse += s.event(ev);
  }
  sse += s.finish(r);
  std::string thought;
  json last;
  for (size_t at = 0; (at = sse.find("data: ", at)) != std::string::npos; at += 6) {
    last = json::parse(sse.substr(at + 6, sse.find("\n\n", at) - at - 6));
    if (last["type"] == "response.reasoning_text.delta") thought += last["delta"].get<std::string>();
  }
  EXPECT_EQ(thought, "\nThe capital is Paris.\n");
  EXPECT_EQ(last["type"], "response.completed");
  EXPECT_EQ(last["response"]["output"][0]["type"], "reasoning");
  EXPECT_EQ(last["response"]["output"][1]["content"][0]["text"], "Paris.");
}

}  // namespace
}  // namespace cs
