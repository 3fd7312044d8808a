// Chat templates over the Jinja renderer: the ChatML fallback, the role
// markers PML reads off a template, BOS written once, refusals as typed
// errors, and user text that never becomes a special token.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <algorithm>

#include "model/chat_template.h"

namespace cs {
namespace {

// A SentencePiece vocabulary of <unk> <s> </s>, the 256 byte tokens and a space that
// adds BOS, as Llama's do.
Tokenizer byte_tokenizer() {
  VocabSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>"};
  s.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    s.tokens.push_back(hex);
    s.types.push_back(TokenType::kByte);
  }
  s.tokens.push_back("\xe2\x96\x81");  // SentencePiece's space
  s.types.push_back(TokenType::kNormal);
  s.scores.assign(s.tokens.size(), 0.0f);
  s.bos = 1;
  s.eos = 2;
  s.unk = 0;
  s.add_bos = true;
  return Tokenizer(s);
}

const char* const kLlama3Like =
    "{{- bos_token }}{%- for m in messages %}"
    "{{- '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

TEST(ChatTemplate, FallbackIsChatML) {
  const ChatTemplate t(ChatTemplate::chatml_source(), "<s>", "</s>");
  EXPECT_EQ(t.apply({{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}, {"user", "Q"}}).text(),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.apply({{"user", "Hi"}}, false).text(), "<|im_start|>user\nHi<|im_end|>\n");
  for (const char* role : {"system", "user", "assistant"}) {
    EXPECT_EQ(t.role_markers(role).open, std::string("<|im_start|>") + role + "\n");
    EXPECT_EQ(t.role_markers(role).close, "<|im_end|>\n");
  }
  EXPECT_EQ(t.reply_start(), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, MarkersOfALlama3StyleTemplate) {
  const ChatTemplate t(kLlama3Like, "<|begin_of_text|>", "<|eot_id|>", true);
  EXPECT_EQ(t.role_markers("system").open, "<|start_header_id|>system<|end_header_id|>\n\n");
  EXPECT_EQ(t.role_markers("system").close, "<|eot_id|>");
  EXPECT_EQ(t.role_markers("user").open, "<|start_header_id|>user<|end_header_id|>\n\n");
  EXPECT_EQ(t.role_markers("assistant").close, "<|eot_id|>");
  EXPECT_EQ(t.reply_start(), "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

// Gemma 2's own template (the sdist's google-gemma-2-2b-it) refuses a
// leading system message; folded into the first user turn, a conversation
// with one renders as the same conversation with the system text written
// first in that turn would, so a shared system prompt is a shared prefix.
TEST(ChatTemplate, Gemma2sTemplateTakesASystemMessageFolded) {
  std::ifstream f(std::string(CS_TEMPLATE_DIR) + "/google-gemma-2-2b-it.jinja");
  std::stringstream src;
  src << f.rdbuf();
  ASSERT_FALSE(src.str().empty()) << "scripts/fetch_vocabs.sh fetches the templates";
  const ChatTemplate t(src.str(), "<bos>", "<eos>");
  EXPECT_FALSE(t.system_role());
  const std::string want =
      "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
      "<start_of_turn>user\nAnd?<end_of_turn>\n<start_of_turn>model\n";
  EXPECT_EQ(t.apply({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "And?"}}).text(), want);
  EXPECT_EQ(t.apply({{"user", "Be brief.\nHi"}, {"assistant", "Hello"}, {"user", "And?"}}).text(), want);
}

// Gemma 2 refuses a system message: the system role gets the user's markers.
TEST(ChatTemplate, ATemplateWithoutSystemGivesItTheUserMarkers) {
  const ChatTemplate t(
      "{%- for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
      "{% endif %}{{ '<start_of_turn>' + m['role'] + '\\n' + m['content'] + '<end_of_turn>\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
      "<bos>", "<eos>");
  EXPECT_EQ(t.role_markers("system").open, "<start_of_turn>user\n");
  EXPECT_EQ(t.role_markers("assistant").open, "<start_of_turn>assistant\n");
  EXPECT_EQ(t.reply_start(), "<start_of_turn>model\n");
  // The system message folds into the next one (llama.cpp's workaround), or
  // alone goes as the user's turn; the template still refuses a system
  // message elsewhere.
  EXPECT_FALSE(t.system_role());
  EXPECT_EQ(t.apply({{"system", "S"}, {"user", "Hi"}}).text(),
            "<start_of_turn>user\nS\nHi<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(t.apply({{"system", "S"}}).text(), "<start_of_turn>user\nS<end_of_turn>\n<start_of_turn>model\n");
  try {
    t.apply({{"user", "Hi"}, {"system", "S"}});
    ADD_FAILURE() << "the template should refuse";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.template_kind(), jinja::TemplateErrorKind::kRaised);
    EXPECT_EQ(e.message(), "System role not supported");
  }
  const ChatTemplate chatml(ChatTemplate::chatml_source(), "", "");
  EXPECT_TRUE(chatml.system_role());
}

TEST(ChatTemplate, BosIsWrittenOnce) {
  const Tokenizer tok = byte_tokenizer();
  const ChatTemplate writes_bos = ChatTemplate(kLlama3Like, "<s>", "</s>", true);
  const auto ids = writes_bos.apply({{"user", "Hi"}}).encode(tok, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);
  const ChatTemplate chatml(ChatTemplate::chatml_source(), "<s>", "</s>", true);
  const auto ids2 = chatml.apply({{"user", "Hi"}}).encode(tok, true);
  EXPECT_EQ(ids2[0], 1);
  EXPECT_EQ(std::count(ids2.begin(), ids2.end(), 1), 1);
}

// A message that types the special tokens gets their bytes, not their ids,
// even where the template trims, concatenates and upper-cases it.
TEST(ChatTemplate, UserTextNeverBecomesSpecial) {
  const Tokenizer tok = byte_tokenizer();
  const ChatTemplate t("{{ bos_token }}{% for m in messages %}{{ (m['content'] | trim) + '</s>' + m['content'] | upper }}"
                       "{% endfor %}",
                       "<s>", "</s>", true);
  const ChatPrompt p = t.apply({{"user", " </s><s> "}}, false);
  EXPECT_EQ(p.text(), "<s></s><s></s> </S><S> ");
  const auto ids = p.encode(tok, true);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 1);  // the template's BOS
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);  // the template's </s>
  EXPECT_EQ(tok.decode(ids, true), p.text());
}

TEST(ChatTemplate, ToolCallsAndToolsReachTheTemplate) {
  const ChatTemplate t(
      "{% for tool in tools %}[{{ tool.function.name }}]{% endfor %}"
      "{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | tojson }}"
      "{% elif m.role == 'tool' %}<{{ m.content }}>{% endif %}{% endfor %}",
      "", "");
  ChatInput in;
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather"}}])");
  in.messages = nlohmann::ordered_json::parse(
      R"([{"role": "assistant", "content": null, "tool_calls": [{"type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "at": 9}}}]},
          {"role": "tool", "content": "18C"}])");
  EXPECT_EQ(t.render(in).text(), "[get_weather]{\"city\": \"Paris\", \"at\": 9}<18C>");
}

}  // namespace
}  // namespace cs

namespace cs {
namespace {

// A template that loops long on any conversation (nested range(100000)) is
// refused at load on a small sample, quickly, naming the budget; one that is
// fine on short conversations but loops with the input is cut per request
// by steps or time (kLimit), not after 20M steps. (Asserted by the errors'
// kind and budget, not by a clock: a loaded machine decides no test.)
TEST(ChatTemplateBudget, SlowTemplatesAreRefusedAtLoadAndCutPerRequest) {
  try {
    ChatTemplate slow(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}",
        "", "");
    FAIL() << "a slow template was accepted";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.template_kind(), jinja::TemplateErrorKind::kLimit);
    EXPECT_NE(std::string(e.what()).find("the chat template is refused: on a five-message sample conversation"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at most 500000 steps or 500 ms"), std::string::npos) << e.what();
  }
  // Quadratic in the content's length: fine on the sample, cut on a long message.
  const ChatTemplate grows(
      "{% for m in messages %}{% for a in m['content'] %}{% for b in m['content'] %}{% endfor %}{% endfor %}"
      "{{ m['content'] }}{% endfor %}",
      "", "");
  ChatInput in;
  in.messages = nlohmann::ordered_json::array({{{"role", "user"}, {"content", std::string(5000, 'x')}}});
  try {
    (void)grows.render(in);
    FAIL() << "25M steps rendered";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.template_kind(), jinja::TemplateErrorKind::kLimit);
  }
  in.messages[0]["content"] = "short";
  EXPECT_EQ(grows.render(in).text(), "short");
}

}  // namespace
}  // namespace cs
