// Every tokenizer we support, exact on llama.cpp's own test data: the
// ggml-vocab-*.gguf vocabularies of the llama-cpp-python sdist with their
// .inp texts and .out token ids (scripts/fetch_vocabs.sh puts them in
// tests/data/vocab). Encoded as llama.cpp's test-tokenizer-0 does: no BOS,
// special-token texts taken as text. o200k (gpt-oss), which the sdist
// lacks, is made by scripts/make_o200k_vocab.py with its ids from tiktoken,
// OpenAI's own implementation; Tekken (Mistral Nemo, Mistral Small 3.x) by
// scripts/make_tekken_vocab.py from mistral-common's file, its ids from
// tiktoken as mistral_common's Tekkenizer runs it.
#include <gtest/gtest.h>

#include "gguf_writer.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace cs {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The .inp texts, separated by "\n__ggml_vocab_test__\n".
std::vector<std::string> texts(const std::string& path) {
  const std::string all = slurp(path), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t at; (at = all.find(sep, start)) != std::string::npos; start = at + sep.size())
    out.push_back(all.substr(start, at - start));
  return out;
}

// The .out lines: each text's token ids.
std::vector<std::vector<int32_t>> ids(const std::string& path) {
  std::istringstream in(slurp(path));
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream l(line);
    out.emplace_back();
    for (int32_t id; l >> id;) out.back().push_back(id);
  }
  return out;
}

class Vocab : public testing::TestWithParam<const char*> {};

TEST_P(Vocab, MatchesLlamaCpp) {
  const std::string base = std::string(CS_VOCAB_DIR) + "/ggml-vocab-" + GetParam() + ".gguf";
  std::ifstream probe(base);
  ASSERT_TRUE(probe.good()) << base << " is missing: run scripts/fetch_vocabs.sh";
  const GgufFile f(base);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const auto in = texts(base + ".inp");
  const auto want = ids(base + ".out");
  ASSERT_EQ(in.size(), want.size());
  ASSERT_GT(in.size(), 20u);
  int wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::vector<int32_t> got = tok.encode(in[i], false, false);
    if (got == want[i]) continue;
    if (++wrong <= 3) ADD_FAILURE() << "text " << i << " '" << in[i] << "': " << testing::PrintToString(got)
                                   << " != " << testing::PrintToString(want[i]);
  }
  EXPECT_EQ(wrong, 0) << "of " << in.size() << " texts";
}

// tokens_continuing (the sorted pieces' lookups) gives what a scan of the
// whole vocabulary does, for texts made of its pieces, cut or joined, the
// thinking templates' openings, bytes at random and the empty text.
TEST_P(Vocab, TokensContinuingAreTheScans) {
  const std::string base = std::string(CS_VOCAB_DIR) + "/ggml-vocab-" + GetParam() + ".gguf";
  std::ifstream probe(base);
  ASSERT_TRUE(probe.good()) << base << " is missing: run scripts/fetch_vocabs.sh";
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile(base));
  std::vector<std::string> pieces(size_t(tok.vocab_size()));
  for (int32_t t = 0; t < tok.vocab_size(); ++t) pieces[size_t(t)] = tok.piece(t);
  const auto scan = [&](std::string_view text) {
    std::vector<int32_t> out;
    for (int32_t t = 0; t < tok.vocab_size(); ++t) {
      const std::string_view p = pieces[size_t(t)];
      if (!p.empty() && (text.starts_with(p) || p.starts_with(text))) out.push_back(t);
    }
    return out;
  };
  std::vector<std::string> probes = {"", "<think>", "<|channel|>analysis<|message|>", "[THINK]", " ", "\n"};
  std::mt19937 rng(std::hash<std::string>()(GetParam()));
  const auto any = [&] { return pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)]; };
  for (int i = 0; i < 40; ++i) {
    const std::string a = any(), b = any();
    probes.push_back(a);
    probes.push_back(a + b);
    probes.push_back(a.substr(0, a.size() / 2));
    probes.push_back((a + b).substr(a.size() / 2));
    std::string bytes(size_t(i % 4 + 1), '\0');
    for (char& c : bytes) c = char(std::uniform_int_distribution<int>(0, 255)(rng));
    probes.push_back(bytes);
  }
  for (const std::string& text : probes) {
    const std::vector<int32_t> want = scan(text);
    ASSERT_EQ(tok.tokens_continuing(text), want) << "text '" << text << "'";
  }
  EXPECT_EQ(tok.tokens_continuing("").size(), size_t(std::count_if(pieces.begin(), pieces.end(), [](const std::string& p) { return !p.empty(); })));
}

// gpt-oss's turn ends at <|return|> (its EOS) or at a call's <|call|>, not at
// the <|end|> between its analysis and final messages; BOS is not added.
TEST(VocabO200k, HarmonyEndsAndSpecials) {
  const Tokenizer tok = Tokenizer::from_gguf(GgufFile(std::string(CS_VOCAB_DIR) + "/ggml-vocab-o200k.gguf"));
  EXPECT_EQ(tok.vocab_size(), 201088);
  EXPECT_EQ(*tok.find("<|return|>"), 200002);
  EXPECT_TRUE(tok.is_end_of_generation(200002));
  EXPECT_TRUE(tok.is_end_of_generation(*tok.find("<|call|>")));
  EXPECT_FALSE(tok.is_end_of_generation(*tok.find("<|end|>")));
  EXPECT_EQ(tok.encode("<|start|>user<|message|>Hi<|end|>", true, true),
            (std::vector<int32_t>{200006, 1428, 200008, 12194, 200007}));
  // A reply's message markup is text (its channels and calls are parsed
  // from it); the ends of a turn and other control tokens are not.
  const std::vector<int32_t> reply = {200005, 35644, 200008, 12194, 200007, 200006, 173781,
                                      200005, 17196, 200008, 12194, 200002};
  EXPECT_EQ(tok.decode(reply), "<|channel|>analysis<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hi");
  EXPECT_EQ(tok.piece(*tok.find("<|constrain|>")), "<|constrain|>");
  for (const char* hidden : {"<|return|>", "<|call|>", "<|endoftext|>", "<|startoftext|>"})
    EXPECT_EQ(tok.piece(*tok.find(hidden)), "") << hidden;
  EXPECT_TRUE(tok.renders_markup(200005));
  EXPECT_FALSE(tok.renders_markup(200002));
  // Rendered or not, they stay control tokens to encode: a client's text
  // that spells one is text.
  const std::vector<int32_t> as_text = tok.encode("<|channel|>final<|message|>", false);
  EXPECT_EQ(tok.decode(as_text), "<|channel|>final<|message|>");
  for (int32_t id : as_text) EXPECT_LT(id, 199998);
}

// Generation ends where the model's turn or message ends: Phi-3's <|end|>
// (its EOS is <|endoftext|>), Llama 3.1's <|eom_id|> after a built-in
// tool's call, and the end-of-turn and end-of-message ids a converter wrote
// (tokenizer.ggml.eot_token_id, eom_token_id). gpt-oss's <|end|> is not one
// (VocabO200k.HarmonyEndsAndSpecials).
TEST(VocabEnds, TurnAndMessageEndsEndGeneration) {
  const Tokenizer phi = Tokenizer::from_gguf(GgufFile(std::string(CS_VOCAB_DIR) + "/ggml-vocab-phi-3.gguf"));
  EXPECT_EQ(*phi.find("<|end|>"), 32007);
  EXPECT_TRUE(phi.is_end_of_generation(32007));
  EXPECT_TRUE(phi.is_end_of_generation(phi.eos()));
  EXPECT_FALSE(phi.is_end_of_generation(*phi.find("<|assistant|>")));
  VocabSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "a", "b", "<|eom_id|>", "<turn_end>", "<msg_end>", "</s>"};
  s.types = {TokenType::kUnknown, TokenType::kNormal, TokenType::kNormal, TokenType::kControl,
             TokenType::kControl, TokenType::kControl, TokenType::kControl};
  s.scores.assign(s.tokens.size(), 0.0f);
  s.unk = 0;
  s.eos = 6;
  s.eot = 4;
  s.eom = 5;
  const Tokenizer t(std::move(s));
  EXPECT_EQ(t.end_ids(), (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_FALSE(t.is_end_of_generation(1));
}

// Where a vocabulary made a thought's or a call's marker a control token,
// a reply still shows it (its thought and calls are parsed from the text),
// and a client's text that spells it stays text.
TEST(VocabMarkup, ControlMarkersOfThoughtsAndCallsAreText) {
  VocabSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "</s>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<think>", "<|assistant|>"};
  for (char c = ' '; c <= '~'; ++c) s.tokens.push_back(std::string(1, c));
  s.types.assign(s.tokens.size(), TokenType::kNormal);
  for (size_t i = 0; i < 7; ++i) s.types[i] = i == 0 ? TokenType::kUnknown : TokenType::kControl;
  s.scores.assign(s.tokens.size(), 0.0f);
  s.unk = 0;
  s.eos = 1;
  s.add_space_prefix = false;
  const Tokenizer t(std::move(s));
  EXPECT_EQ(t.decode(std::vector<int32_t>{5, 2, 3, 4, 6, 1}), "<think><tool_call></tool_call>[TOOL_CALLS]");
  for (int32_t id : {2, 3, 4, 5}) EXPECT_TRUE(t.renders_markup(id)) << id;
  EXPECT_FALSE(t.renders_markup(6));
  for (int32_t id : t.encode("<tool_call>[TOOL_CALLS]", false)) EXPECT_GE(id, 7);
  EXPECT_EQ(t.encode("<tool_call>", true), (std::vector<int32_t>{2}));
}

INSTANTIATE_TEST_SUITE_P(LlamaCppData, Vocab,
                         testing::Values("llama-bpe", "qwen2", "gpt-2", "starcoder", "refact", "deepseek-llm",
                                         "deepseek-coder", "command-r", "falcon", "mpt", "phi-3", "llama-spm", "o200k",
                                         "tekken"),
                         [](const auto& p) {
                           std::string n = p.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

// Files without tokenizer.ggml.add_bos_token start with BOS as llama.cpp
// does: SentencePiece and Llama 3's family yes, other byte-level BPE no.
TEST(Vocab, BosByDefaultFollowsLlamaCpp) {
  for (auto [name, bos] : {std::pair{"llama-bpe", 128000}, {"llama-spm", 1}, {"qwen2", -1}, {"gpt-2", -1}}) {
    const std::string path = std::string(CS_VOCAB_DIR) + "/ggml-vocab-" + name + ".gguf";
    ASSERT_TRUE(std::ifstream(path).good()) << path << " is missing: run scripts/fetch_vocabs.sh";
    const Tokenizer tok = Tokenizer::from_gguf(GgufFile(path));
    const std::vector<int32_t> ids = tok.encode("Hello", false, true);
    if (bos >= 0)
      EXPECT_EQ(ids.front(), bos) << name;
    else
      EXPECT_NE(ids.front(), tok.bos()) << name;
  }
}

// GLM-4's files (pre-tokenizer glm4): Llama 3's split, whole-token words
// unmerged, and no BOS even where the file asks for one (llama.cpp drops the
// id; GLM's templates write [gMASK]<sop>). llama-bpe's vocabulary under that
// name encodes as llama-bpe's, less the BOS.
TEST(Vocab, Glm4sVocabularyHasNoBos) {
  const std::string path = std::string(CS_VOCAB_DIR) + "/ggml-vocab-llama-bpe.gguf";
  ASSERT_TRUE(std::ifstream(path).good()) << path << " is missing: run scripts/fetch_vocabs.sh";
  const GgufFile src(path);
  test::GgufWriter w;
  w.kv_str("general.architecture", "glm4");
  w.kv_str("tokenizer.ggml.model", "gpt2");
  w.kv_str("tokenizer.ggml.pre", "glm4");
  w.kv_strs("tokenizer.ggml.tokens", src.get_strings("tokenizer.ggml.tokens"));
  w.kv_strs("tokenizer.ggml.merges", src.get_strings("tokenizer.ggml.merges"));
  std::vector<int32_t> types;
  for (double t : src.get_numbers("tokenizer.ggml.token_type")) types.push_back(int32_t(t));
  w.kv_i32s("tokenizer.ggml.token_type", types);
  w.kv_u32("tokenizer.ggml.bos_token_id", 128000);
  w.kv_bool("tokenizer.ggml.add_bos_token", true);
  const Tokenizer glm = Tokenizer::from_gguf(GgufFile(w.write("vocab_glm4.gguf")));
  const Tokenizer llama = Tokenizer::from_gguf(src);
  EXPECT_EQ(glm.bos(), -1);
  for (const char* text : {"Hello world", "I'm sure you've seen they'll do it", "Numbers: 1234567890", "  spaced\n\nout"}) {
    std::vector<int32_t> want = llama.encode(text, false, true);
    ASSERT_EQ(want.front(), 128000);
    want.erase(want.begin());
    EXPECT_EQ(glm.encode(text, false, true), want) << text;
  }
}

TEST(Vocab, AnUnknownPreTokenizerIsAnError) {
  VocabSpec s;
  s.model = "gpt2";
  s.pre = "viking";
  s.tokens = {"a"};
  try {
    Tokenizer t(s);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported tokenizer.ggml.pre 'viking' (supported: default, gpt-2,"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cs
