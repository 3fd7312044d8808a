#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "model/chat_template.h"

namespace cs {
namespace {

// GPT-2 byte-level symbols: space is "Ġ" (U+0120), newline "Ċ" (U+010A).
Tokenizer tiny_bpe() {
  VocabSpec s;
  s.model = "gpt2";
  s.pre = "smollm";
  // ids 0..2 special, then single symbols, then merged pieces.
  s.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "h", "e", "l", "o", "Ġ", "w",
              "r", "d", "1", "2", "he", "ll", "hell", "hello", "Ġw", "Ġwor", "or", "Ġworld", "ld"};
  s.types.assign(s.tokens.size(), TokenType::kNormal);
  for (int i = 0; i < 3; ++i) s.types[i] = TokenType::kControl;
  s.merges = {"h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld"};
  s.eos = 2;
  return Tokenizer(s);
}

TEST(BpeTokenizer, MergesByRank) {
  const Tokenizer t = tiny_bpe();
  EXPECT_EQ(t.encode("hello", false), (std::vector<int32_t>{16}));
  EXPECT_EQ(t.encode("hello world", false), (std::vector<int32_t>{16, 20}));
  EXPECT_EQ(t.encode("hell", false), (std::vector<int32_t>{15}));
  EXPECT_EQ(t.encode("lo", false), (std::vector<int32_t>{5, 6}));
}

TEST(BpeTokenizer, DigitsAreSplitOneByOne) {
  const Tokenizer t = tiny_bpe();
  // "smollm" isolates each digit before BPE, so "12" never merges.
  EXPECT_EQ(t.encode("12", false), (std::vector<int32_t>{11, 12}));
}

TEST(BpeTokenizer, SpecialTokensOnlyWhenAsked) {
  const Tokenizer t = tiny_bpe();
  EXPECT_EQ(t.encode("<|im_start|>hello<|im_end|>", true), (std::vector<int32_t>{1, 16, 2}));
  const auto plain = t.encode("<|im_end|>", false);
  EXPECT_NE(plain, (std::vector<int32_t>{2}));
  EXPECT_TRUE(t.is_end_of_generation(2));
  EXPECT_TRUE(t.is_end_of_generation(0));
  EXPECT_FALSE(t.is_end_of_generation(16));
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 16, 2}), "hello");
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 16, 2}, true), "<|im_start|>hello<|im_end|>");
}

Tokenizer tiny_spm() {
  VocabSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>", "▁", "h", "i", "▁h", "▁hi", "hi"};
  s.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl, TokenType::kNormal,
             TokenType::kNormal, TokenType::kNormal, TokenType::kNormal, TokenType::kNormal,
             TokenType::kNormal};
  s.scores = {0, 0, 0, -1, -2, -2, -3, -1, -5};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    s.tokens.push_back(name);
    s.types.push_back(TokenType::kByte);
    s.scores.push_back(0);
  }
  s.unk = 0, s.bos = 1, s.eos = 2;
  s.add_bos = true;
  return Tokenizer(s);
}

TEST(SpmTokenizer, MergesByScoreWithSpacePrefix) {
  const Tokenizer t = tiny_spm();
  // "hi" -> "▁hi": "▁h"+"i" (score -1) beats "h"+"i" (-5).
  EXPECT_EQ(t.encode("hi", false), (std::vector<int32_t>{7}));
  EXPECT_EQ(t.encode("hi hi", false, true), (std::vector<int32_t>{1, 7, 7}));
  EXPECT_EQ(t.decode(t.encode("hi hi", false)), "hi hi");
}

TEST(SpmTokenizer, ByteFallbackRoundTrips) {
  const Tokenizer t = tiny_spm();
  const std::string text = "hé\xff!";
  const auto ids = t.encode(text, false);
  // é is two bytes outside the vocabulary -> <0xC3><0xA9>.
  EXPECT_NE(std::find(ids.begin(), ids.end(), 9 + 0xC3), ids.end());
  EXPECT_EQ(t.decode(ids), text);
}

TEST(Tokenizer, EmptyVocabularyIsAnError) {
  VocabSpec s;
  s.model = "gpt2";
  EXPECT_THROW(Tokenizer{s}, Error);
}

}  // namespace
}  // namespace cs
