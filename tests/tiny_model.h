// A small random Llama model written as a GGUF file (F32 weights, a
// SentencePiece vocabulary of byte tokens and a few words), for engine tests
// that must run fast under the sanitizers. Its outputs are meaningless but
// deterministic, which is all exactness tests need.
#pragma once
#include <string>

namespace cs::test {

struct TinyModelShape {
  int n_layers = 2, n_embd = 128, n_heads = 2, n_kv_heads = 1, n_ff = 256, n_ctx = 1024;
  unsigned seed = 1;
  float output_scale = 0.2f;  // 0: every logit is 0 (a uniform next-token distribution)
};

// Writes the model under the test temp dir (once per name); returns its path.
std::string tiny_model(const std::string& name = "tiny", TinyModelShape shape = {});

}  // namespace cs::test
