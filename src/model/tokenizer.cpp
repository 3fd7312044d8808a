#include "model/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <queue>
#include <tuple>

#include "base/error.h"
#include "model/gguf.h"
#include "model/pre_tokenizer.h"
#include "model/regex.h"
#include "base/utf8.h"

namespace cs {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// GPT-2 byte-level BPE maps every byte to a printable code point: printable
// Latin-1 bytes map to themselves, the rest to 256, 257, ... in byte order.
struct ByteMap {
  uint32_t cp[256];
  std::unordered_map<uint32_t, uint8_t> back;
  std::string enc[256];  // UTF-8 of cp[b]
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      cp[b] = printable ? uint32_t(b) : next++;
      back[cp[b]] = uint8_t(b);
      enc[b] = utf8_encode(cp[b]);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::string unknown_pre(const std::string& pre) {
  return "unsupported tokenizer.ggml.pre '" + pre + "' (supported: " + pre_tokenizer_names() + ")";
}

const std::string kSpmSpace = "\xe2\x96\x81";  // U+2581 "▁"

// A doubly linked list of symbols over a string, merged pairwise.
struct Symbol {
  int prev, next;
  size_t start, len;
};

// Merges adjacent symbols, the pair of smallest priority first (leftmost on
// ties), until no adjacent pair has one. priority(l, r) is nullopt for a pair
// that may not merge. A priority queue over the linked list keeps this
// O(n log n) even for long runs (e.g. thousands of spaces).
template <class P, class Priority>
void merge_pairs(std::vector<Symbol>& sym, Priority priority) {
  using Cand = std::tuple<P, int, size_t>;  // priority, left index, combined length
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push = [&](int l) {
    const int r = sym[size_t(l)].next;
    if (r < 0) return;
    if (auto p = priority(l, r)) q.emplace(*p, l, sym[size_t(l)].len + sym[size_t(r)].len);
  };
  for (int i = 0; i + 1 < int(sym.size()); ++i) push(i);
  while (!q.empty()) {
    const auto [prio, l, len] = q.top();
    q.pop();
    Symbol& a = sym[size_t(l)];
    const int r = a.next;
    // Stale entries: one side was merged away since this pair was queued
    // (lengths only grow, so a changed sum means a changed pair).
    if (a.len == 0 || r < 0 || a.len + sym[size_t(r)].len != len) continue;
    Symbol& b = sym[size_t(r)];
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) sym[size_t(b.next)].prev = l;
    if (a.prev >= 0) push(a.prev);
    push(l);
  }
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
    s.replace(p, from.size(), to);
  return s;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  VocabSpec s;
  s.model = f.get_string("tokenizer.ggml.model");
  if (s.model != "gpt2" && s.model != "llama")
    f.fail("unsupported tokenizer.ggml.model '" + s.model + "' (supported: gpt2, llama)");
  s.pre = f.get_string("tokenizer.ggml.pre", "");
  const std::optional<PreTokenizer> pre = pre_tokenizer(s.pre);
  if (s.model == "gpt2" && !pre) f.fail(unknown_pre(s.pre));
  s.tokens = f.get_strings("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.token_type")) {
    for (double t : f.get_numbers("tokenizer.ggml.token_type")) s.types.push_back(TokenType(int(t)));
    if (s.types.size() != s.tokens.size()) f.fail("tokenizer.ggml.token_type length mismatch");
  }
  if (s.model == "gpt2") {
    s.merges = f.get_strings("tokenizer.ggml.merges");
  } else {
    for (double v : f.get_numbers("tokenizer.ggml.scores")) s.scores.push_back(float(v));
    if (s.scores.size() != s.tokens.size()) f.fail("tokenizer.ggml.scores length mismatch");
    s.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix", true);
  }
  auto id = [&](const char* key) -> int32_t {
    if (!f.has(key)) return -1;
    const uint64_t v = f.get_uint(key);
    if (v >= s.tokens.size()) f.fail(std::string(key) + " is out of the vocabulary");
    return int32_t(v);
  };
  s.bos = id("tokenizer.ggml.bos_token_id");
  s.eos = id("tokenizer.ggml.eos_token_id");
  s.unk = id("tokenizer.ggml.unknown_token_id");
  s.eot = id("tokenizer.ggml.eot_token_id");
  s.eom = id("tokenizer.ggml.eom_token_id");
  // Without the key: SentencePiece vocabularies start with BOS, byte-level
  // BPE ones only where their pre-tokenizer's family does (Llama 3).
  const bool bos_by_default = s.model == "llama" || (s.model == "gpt2" && pre->add_bos);
  s.add_bos = f.get_bool("tokenizer.ggml.add_bos_token", bos_by_default);
  if (s.model == "gpt2" && pre->no_bos) s.bos = -1, s.add_bos = false;
  s.chat_template = f.get_string("tokenizer.chat_template", "");
  s.chat_template_tool_use = f.get_string("tokenizer.chat_template.tool_use", "");
  try {
    return Tokenizer(std::move(s));
  } catch (const Error& e) {
    f.fail(e.what());
  }
}

Tokenizer::Tokenizer(VocabSpec spec) : spec_(std::move(spec)), sorted_(std::make_unique<SortedPieces>()) {
  if (spec_.tokens.empty()) throw Error("empty vocabulary");
  if (spec_.types.empty()) spec_.types.assign(spec_.tokens.size(), TokenType::kNormal);
  token_to_id_.reserve(spec_.tokens.size());
  for (size_t i = 0; i < spec_.tokens.size(); ++i) token_to_id_.emplace(spec_.tokens[i], int32_t(i));
  for (size_t r = 0; r < spec_.merges.size(); ++r) merge_rank_.emplace(spec_.merges[r], int32_t(r));
  std::vector<int32_t> specials;
  for (size_t i = 0; i < spec_.tokens.size(); ++i) {
    const TokenType t = spec_.types[i];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined) && !spec_.tokens[i].empty())
      specials.push_back(int32_t(i));
  }
  std::stable_sort(specials.begin(), specials.end(), [&](int32_t a, int32_t b) {
    return spec_.tokens[a].size() > spec_.tokens[b].size();
  });
  // Gemma's vocabulary has 6414 of them: look up only those that begin with
  // the byte at hand.
  for (int32_t id : specials) specials_by_byte_[static_cast<unsigned char>(spec_.tokens[id][0])].push_back(id);
  // Llama 3.1 ends a message that calls a built-in tool at <|eom_id|>;
  // Phi-3 and Phi-4 end a turn at <|end|>. Harmony (gpt-oss) ends a turn at
  // <|return|> or, for a tool call, at <|call|>; its <|end|> closes a
  // message within the turn (analysis before final), so there it is not an
  // end.
  const bool harmony = find("<|channel|>").has_value();
  for (const char* name : {"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "</s>",
                           "<end_of_turn>", "<|return|>", "<|call|>", "<|end|>"})
    if (auto id = find(name); id && !(harmony && std::string_view(name) == "<|end|>")) end_ids_.push_back(*id);
  for (int32_t id : {spec_.eos, spec_.eot, spec_.eom})
    if (id >= 0 && id < vocab_size()) end_ids_.push_back(id);
  std::sort(end_ids_.begin(), end_ids_.end());
  end_ids_.erase(std::unique(end_ids_.begin(), end_ids_.end()), end_ids_.end());
  // The markup replies are written in, where the vocabulary made it control
  // tokens: harmony's messages; thoughts and calls (the reasoning split and
  // the call parsers read them: server/reasoning.h, server/tool_calls.h).
  const auto mark = [&](const char* name) {
    if (auto id = find(name); id && spec_.types[size_t(*id)] == TokenType::kControl && !is_end_of_generation(*id))
      markup_.push_back(*id);
  };
  if (harmony)
    for (const char* name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", "<|end|>"}) mark(name);
  for (const char* name : {"<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
                           "<minimax:tool_call>", "</minimax:tool_call>", "<seed:tool_call>", "</seed:tool_call>",
                           "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                           "<|tool_call_argument_begin|>", "<|tool_call_end|>"})
    mark(name);
  std::sort(markup_.begin(), markup_.end());
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto id = find(name);
    byte_tokens_[b] = id ? *id : -1;
  }
  if (spec_.model == "gpt2") {
    const auto pre = pre_tokenizer(spec_.pre);
    if (!pre) throw Error(unknown_pre(spec_.pre));
    for (const auto& p : pre->patterns) pre_.push_back(std::make_unique<Regex>(p));
    ignore_merges_ = pre->ignore_merges;
  }
}

// Every non-empty piece with its token, in byte order (ties by id).
struct Tokenizer::SortedPieces {
  std::once_flag built;
  std::vector<std::pair<std::string, int32_t>> pieces;
};

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::optional<int32_t> Tokenizer::find(std::string_view text) const {
  auto it = token_to_id_.find(std::string(text));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::has_byte(uint8_t b) const {
  if (spec_.model == "llama") {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    return token_to_id_.count(hex) != 0;
  }
  return token_to_id_.count(byte_map().enc[b]) != 0;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special,
                                       bool add_bos) const {
  const TextPart part{text, parse_special};
  return encode(std::span(&part, 1), add_bos);
}

std::vector<int32_t> Tokenizer::encode(std::span<const TextPart> parts, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && spec_.add_bos && spec_.bos >= 0) out.push_back(spec_.bos);
  // Split out special tokens (control ones only inside special parts;
  // user-defined tokens always), longest match first; tokenize the text
  // between them as one run (joined only when it spans parts).
  std::vector<std::string_view> run;
  bool at_start = true;
  auto flush = [&] {
    std::erase_if(run, [](std::string_view v) { return v.empty(); });
    if (run.size() == 1) encode_text(run[0], at_start, out);
    if (run.size() > 1) {
      std::string joined;
      for (std::string_view v : run) joined += v;
      encode_text(joined, at_start, out);
    }
    run.clear();
  };
  for (const TextPart& part : parts) {
    const std::string_view text = part.text;
    size_t start = 0, i = 0;
    while (i < text.size()) {
      int32_t hit = -1;
      for (int32_t id : specials_by_byte_[static_cast<unsigned char>(text[i])]) {
        const std::string& s = spec_.tokens[id];
        if (!part.special && spec_.types[id] == TokenType::kControl) continue;
        if (text.compare(i, s.size(), s) == 0) {
          hit = id;
          break;
        }
      }
      if (hit < 0) {
        ++i;
        continue;
      }
      run.push_back(text.substr(start, i - start));
      flush();
      out.push_back(hit);
      at_start = false;
      i += spec_.tokens[hit].size();
      start = i;
    }
    run.push_back(text.substr(start));
  }
  flush();
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  if (spec_.model == "llama") return encode_spm(text, at_start, out);
  std::vector<std::pair<size_t, size_t>> pieces{{0, text.size()}};
  for (const auto& re : pre_) {
    std::vector<std::pair<size_t, size_t>> next;
    for (auto [off, len] : pieces)
      for (auto [o, l] : re->split(text.substr(off, len))) next.emplace_back(off + o, l);
    pieces.swap(next);
  }
  for (auto [off, len] : pieces) encode_bpe_piece(text.substr(off, len), out);
}

// Byte-level BPE: repeatedly merge the adjacent pair of lowest merge rank
// (leftmost on ties), with a priority queue over a linked list of symbols.
void Tokenizer::encode_bpe_piece(std::string_view bytes, std::vector<int32_t>& out) const {
  const ByteMap& bm = byte_map();
  std::string word;
  std::vector<Symbol> sym;
  for (unsigned char b : bytes) {
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, word.size(), bm.enc[b].size()});
    word += bm.enc[b];
  }
  if (sym.empty()) return;
  if (ignore_merges_)
    if (auto it = token_to_id_.find(word); it != token_to_id_.end()) return out.push_back(it->second);
  sym.back().next = -1;
  std::string key;
  merge_pairs<int32_t>(sym, [&](int l, int r) -> std::optional<int32_t> {
    key.assign(word, sym[l].start, sym[l].len);
    key += ' ';
    key.append(word, sym[r].start, sym[r].len);
    auto it = merge_rank_.find(key);
    if (it == merge_rank_.end()) return std::nullopt;
    return it->second;
  });
  for (int i = 0; i >= 0; i = sym[i].next) {
    const std::string s = word.substr(sym[i].start, sym[i].len);
    if (auto it = token_to_id_.find(s); it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Not in the vocabulary: fall back to single byte symbols. A byte the
    // vocabulary has no symbol for (SmolLM2's lacks the bytes that never
    // occur in UTF-8, e.g. 0xFF) becomes U+FFFD, the replacement character,
    // as text decoders do; its unknown token would be a special one.
    for (size_t p = sym[i].start; p < sym[i].start + sym[i].len;) {
      const size_t n = utf8_len(word, p);
      auto it = token_to_id_.find(word.substr(p, n));
      if (it != token_to_id_.end()) out.push_back(it->second);
      else if (bytes != kReplacement) encode_bpe_piece(kReplacement, out);
      else if (spec_.unk >= 0) out.push_back(spec_.unk);
      p += n;
    }
  }
}

// SentencePiece BPE: merge the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece (leftmost on ties); bytes of pieces that
// stay outside the vocabulary become <0xXX> tokens.
void Tokenizer::encode_spm(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
  std::string s = replace_all(std::string(text), " ", kSpmSpace);
  if (at_start && spec_.add_space_prefix) s = kSpmSpace + s;
  std::vector<Symbol> sym;
  for (size_t p = 0; p < s.size();) {
    const size_t n = utf8_len(s, p);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, p, n});
    p += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  merge_pairs<float>(sym, [&](int l, int r) -> std::optional<float> {
    auto it = token_to_id_.find(s.substr(sym[l].start, sym[l].len + sym[r].len));
    if (it == token_to_id_.end()) return std::nullopt;
    return -spec_.scores[it->second];  // highest score first
  });
  for (int i = 0; i >= 0; i = sym[i].next) {
    auto it = token_to_id_.find(s.substr(sym[i].start, sym[i].len));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (size_t p = sym[i].start; p < sym[i].start + sym[i].len; ++p) {
      const int32_t b = byte_tokens_[static_cast<unsigned char>(s[p])];
      if (b >= 0) out.push_back(b);
      else if (spec_.unk >= 0) out.push_back(spec_.unk);
    }
  }
}

bool Tokenizer::renders_markup(int32_t id) const { return std::binary_search(markup_.begin(), markup_.end(), id); }

std::vector<int32_t> Tokenizer::tokens_continuing(std::string_view text) const {
  std::call_once(sorted_->built, [&] {
    auto& v = sorted_->pieces;
    v.reserve(size_t(vocab_size()));
    for (int32_t t = 0; t < vocab_size(); ++t)
      if (std::string p = piece(t); !p.empty()) v.emplace_back(std::move(p), t);
    std::sort(v.begin(), v.end());
  });
  const auto& v = sorted_->pieces;
  const auto below = [](const std::pair<std::string, int32_t>& e, std::string_view s) { return std::string_view(e.first) < s; };
  std::vector<int32_t> out;
  // Pieces that are a proper prefix of the text: one exact lookup per length.
  for (size_t n = 1; n < text.size(); ++n) {
    const std::string_view head = text.substr(0, n);
    for (auto it = std::lower_bound(v.begin(), v.end(), head, below); it != v.end() && it->first == head; ++it)
      out.push_back(it->second);
  }
  // Pieces that begin with the whole text (itself included) sort together.
  for (auto it = std::lower_bound(v.begin(), v.end(), text, below);
       it != v.end() && std::string_view(it->first).starts_with(text); ++it)
    out.push_back(it->second);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Tokenizer::piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size()) return {};
  const std::string& t = spec_.tokens[id];
  switch (spec_.types[id]) {
    case TokenType::kControl:
      return render_special || renders_markup(id) ? t : std::string();
    case TokenType::kUserDefined:
      return t;
    case TokenType::kByte:
      if (t.size() == 6 && t.rfind("<0x", 0) == 0)
        return std::string(1, char(std::stoi(t.substr(3, 2), nullptr, 16)));
      return t;
    default:
      break;
  }
  if (spec_.model == "llama") return replace_all(t, kSpmSpace, " ");
  const ByteMap& bm = byte_map();
  std::string out;
  for (size_t p = 0; p < t.size();) {
    const size_t n = utf8_len(t, p);
    const uint32_t cp = utf8_decode(t, p, n);
    auto it = bm.back.find(cp);
    if (it != bm.back.end()) out += char(it->second);
    else out.append(t, p, n);
    p += n;
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string p = piece(ids[i], render_special);
    // SentencePiece's added prefix space is not part of the text.
    if (i == 0 && spec_.model == "llama" && spec_.add_space_prefix && !p.empty() && p[0] == ' ' &&
        spec_.types[ids[i]] == TokenType::kNormal)
      p.erase(0, 1);
    out += p;
  }
  return out;
}

}  // namespace cs
