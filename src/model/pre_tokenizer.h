// Byte-level BPE pre-tokenizers by `tokenizer.ggml.pre`: the regular
// expressions that split text into words before merges, applied one after
// another (a later one splits what the earlier ones produced, gaps included),
// as llama.cpp applies them to the same files.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace cs {

struct PreTokenizer {
  std::vector<std::string> patterns;
  // A word that is a whole vocabulary token is that token, without merges
  // (Llama 3's tokenizer).
  bool ignore_merges = false;
  // Whether encoding starts with BOS when the file has no
  // tokenizer.ggml.add_bos_token (llama.cpp's default for Llama 3's family).
  bool add_bos = false;
  // The vocabulary's BOS is never added, whatever the file says (ChatGLM's
  // and GLM-4's: their templates write [gMASK]<sop>; llama.cpp drops the id).
  bool no_bos = false;
};

// The pre-tokenizer of a `tokenizer.ggml.pre` value ("" and "default": the
// default one); nullopt for a name we do not know.
std::optional<PreTokenizer> pre_tokenizer(const std::string& pre);
// The names pre_tokenizer() knows, for errors.
std::string pre_tokenizer_names();

}  // namespace cs
