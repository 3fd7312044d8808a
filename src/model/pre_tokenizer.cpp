#include "model/pre_tokenizer.h"

#include <utility>

namespace cs {
namespace {

// GPT-2's split: contractions, letters, digits, other symbols, each with one
// leading space; whitespace not before a word.
const char* kGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
// Llama 3 and Qwen 2: case-insensitive contractions, a letter run with one
// leading non-letter, digits in threes (Llama 3) or one by one (Qwen 2),
// symbols with trailing newlines, newline runs.
const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// o200k (gpt-oss, GPT-4o): a word is an optional leading symbol, a run of
// upper-case letters (or other letters and marks) then lower-case ones,
// with a contraction of either case; digits in threes; symbols with trailing
// newlines and slashes. tiktoken's own pattern: PCRE2 runs it as written,
// where llama.cpp rewrites the letter classes for std::regex (the same on
// every test text, tests/vocab_test.cpp).
const char* kO200k =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Tekken (Mistral Nemo, Mistral Small 3.x, Devstral, Magistral): o200k's
// words without the contractions, digits one by one. The tokenizer file's
// own pattern, as PCRE2 runs it (llama.cpp rewrites it for std::regex).
const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// DeepSeek LLM's letters of the scripts its vocabulary covers, its
// symbols, and CJK runs (code points as llama.cpp lists them).
const char* kDeepseekLetters =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-"
    "\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}"
    "\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}"
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}"
    "\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}"
    "\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-"
    "\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}"
    "\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}"
    "\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-"
    "\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";
const char* kDeepseekSymbols =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
const char* kCjk =
    "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

struct Entry {
  std::vector<const char*> names;
  PreTokenizer pre;
};

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = {
      {{"", "default"},
       {{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}, false}},
      {{"gpt-2", "gpt2", "phi-2", "mpt", "olmo"}, {{kGpt2}, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, {{"\\p{N}", kGpt2}, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {{kLlama3}, true, true}},
      {{"dbrx", "smaug-bpe"}, {{kLlama3}, false}},
      // GLM-4 (llama.cpp's CHATGLM4: Llama 3's pattern with its contractions
      // spelled case by case), with no BOS; glm4's files skip merges for
      // whole-token words, chatglm-bpe's do not.
      {{"glm4", "glm5"}, {{kLlama3}, true, false, true}},
      {{"chatglm-bpe"}, {{kLlama3}, false, false, true}},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {{kQwen2}, false}},
      {{"gpt-4o"}, {{kO200k}, false}},
      {{"tekken"}, {{kTekken}, true, true}},
      {{"falcon"},
       {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}, false}},
      {{"deepseek-llm"},
       {{"[\\r\\n]", kDeepseekLetters, kDeepseekSymbols, "\\s+$", kCjk, "\\p{N}+"}, false}},
      {{"deepseek-coder"}, {{"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"}, false}},
  };
  return t;
}

}  // namespace

std::optional<PreTokenizer> pre_tokenizer(const std::string& pre) {
  for (const Entry& e : table())
    for (const char* n : e.names)
      if (pre == n) return e.pre;
  return std::nullopt;
}

std::string pre_tokenizer_names() {
  std::string out;
  for (const Entry& e : table())
    for (const char* n : e.names)
      if (*n) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace cs
