// Tokenizers read from GGUF metadata:
//  - byte-level BPE (`tokenizer.ggml.model = gpt2`), with the pre-tokenizer
//    named by `tokenizer.ggml.pre` (SmolLM2's "smollm" splits digits, then the
//    GPT-2 pattern), merges applied by rank;
//  - SentencePiece-style BPE (`llama`): "▁" for spaces, merges by piece score,
//    byte fallback tokens <0xXX> for anything outside the vocabulary.
// Special tokens (control and user-defined, e.g. <|im_start|>) are recognised
// in text only when asked. encode() then decode() returns the input bytes
// exactly when the vocabulary has a symbol for every byte of it (has_byte);
// a byte it has none for comes back as U+FFFD (SmolLM2's lacks six ASCII
// control bytes and the bytes that never occur in UTF-8). Immutable after
// construction; thread-safe.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cs {

class GgufFile;
class Regex;

enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4,
                                 kUnused = 5, kByte = 6 };

struct VocabSpec {
  std::string model;  // "gpt2" or "llama"
  std::string pre;    // pre-tokenizer name (gpt2 only; model/pre_tokenizer.h)
  std::vector<std::string> tokens;
  std::vector<TokenType> types;   // empty = all normal
  std::vector<float> scores;      // llama only
  std::vector<std::string> merges;  // gpt2 only, "left right", by rank
  int32_t bos = -1, eos = -1, unk = -1;
  // End of turn and end of message (tokenizer.ggml.eot_token_id and
  // eom_token_id, where a converter set them): ends of generation too.
  int32_t eot = -1, eom = -1;
  bool add_bos = false;
  bool add_space_prefix = true;  // llama only
  std::string chat_template;
  // The file's template for conversations that offer tools
  // (tokenizer.chat_template.tool_use; "" none).
  std::string chat_template_tool_use;
};

// Part of a prompt to encode: `special` parts (a chat template's markup) may
// hold special-token texts that become their ids; the others (what a user
// wrote) are text, whatever they contain.
struct TextPart {
  std::string_view text;
  bool special = false;
};

class Tokenizer {
 public:
  // Throws cs::Error naming the file and key when the vocabulary is unusable.
  static Tokenizer from_gguf(const GgufFile& f);
  explicit Tokenizer(VocabSpec spec);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. With parse_special, special-token texts become their
  // ids; otherwise they are tokenized as ordinary text. Adds BOS when the
  // vocabulary asks for it and add_bos is true.
  std::vector<int32_t> encode(std::string_view text, bool parse_special,
                              bool add_bos = false) const;
  // The parts as one text: a special token is recognised only inside a
  // special part (never across a part boundary), and the text between special
  // tokens is tokenized as one run whatever parts it spans, so markup plus
  // plain content gives the tokens their concatenation gives.
  std::vector<int32_t> encode(std::span<const TextPart> parts, bool add_bos = false) const;

  // Bytes of the tokens. Control tokens are omitted unless render_special,
  // but for the markup a reply is written in (renders_markup).
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;
  // Bytes of one token (SentencePiece's "▁" as a space).
  std::string piece(int32_t id, bool render_special = false) const;
  // Control tokens that are text in a reply: harmony's (gpt-oss) message
  // markup, <|channel|>, <|message|>, <|start|>, <|constrain|> and <|end|>,
  // which the reply's channels and calls are parsed from (server/
  // reasoning.h), and constraints spell (llama.cpp renders the first four
  // likewise); and, where a vocabulary made them control tokens, the
  // thoughts' and calls' markers: <think>, </think>, <tool_call>,
  // </tool_call>, [TOOL_CALLS], <|python_tag|>, MiniMax's and Seed-OSS's
  // <minimax:tool_call>, <seed:tool_call> and their closes, Kimi's
  // <|tool_calls_section_begin|> and its call markers (llama.cpp keeps these in
  // replies too). They stay control tokens to encode: text a client sends
  // never becomes one.
  bool renders_markup(int32_t id) const;
  // The tokens whose piece() goes on writing `text` from its start: a piece
  // that is a prefix of it, or that it is a prefix of (empty pieces never).
  // Ascending. Looked up in the pieces sorted, built on the first call
  // (a whole-vocabulary scan costs milliseconds with 200k tokens, and a
  // reply that may open a thought asks at each of its first tokens).
  std::vector<int32_t> tokens_continuing(std::string_view text) const;

  int32_t vocab_size() const { return int32_t(spec_.tokens.size()); }
  int32_t bos() const { return spec_.bos; }
  int32_t eos() const { return spec_.eos; }
  bool wants_bos() const { return spec_.add_bos; }
  const std::string& model() const { return spec_.model; }
  const std::string& chat_template() const { return spec_.chat_template; }
  const std::string& chat_template_tool_use() const { return spec_.chat_template_tool_use; }
  // True for tokens that end generation (EOS, the eot/eom ids, <|endoftext|>,
  // <|im_end|>, <|eot_id|>, <|eom_id|>, Phi's <|end|>, ...).
  bool is_end_of_generation(int32_t id) const;
  // Those tokens' ids.
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  // A token's text as the vocabulary stores it (byte-level BPE's symbols,
  // SentencePiece's "▁" and <0xXX>), and its type.
  const std::string& token(int32_t id) const { return spec_.tokens[size_t(id)]; }
  TokenType type(int32_t id) const { return spec_.types[size_t(id)]; }
  // Whether the vocabulary can spell byte b on its own (byte-level BPE: its
  // symbol; SentencePiece: its <0xXX> token). Bytes it cannot come back as
  // U+FFFD.
  bool has_byte(uint8_t b) const;
  std::optional<int32_t> find(std::string_view token_text) const;

 private:
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void encode_bpe_piece(std::string_view bytes, std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, bool at_start, std::vector<int32_t>& out) const;

  VocabSpec spec_;
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::unordered_map<std::string, int32_t> merge_rank_;
  // Ids of special tokens by their text's first byte, longest text first.
  std::array<std::vector<int32_t>, 256> specials_by_byte_;
  std::vector<int32_t> end_ids_;
  std::vector<int32_t> markup_;    // renders_markup's, ascending
  int32_t byte_tokens_[256];       // SentencePiece <0xXX> ids, -1 if absent
  std::vector<std::unique_ptr<Regex>> pre_;  // applied in order
  bool ignore_merges_ = false;               // a word that is a token is that token
  struct SortedPieces;  // tokens_continuing's index, built once
  std::unique_ptr<SortedPieces> sorted_;
};

}  // namespace cs
