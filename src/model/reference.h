// The float reference (`chunkserve perplexity --reference`, and the truth
// `--kl-against-reference` measures against): the model's weights dequantized
// to fp32 once, then a forward pass that keeps activations in fp32 (no int8
// quantization of the matmul inputs), uses libm's expf and a plain causal
// attention over the window. Slow and simple; shares no kernel with the fast
// path (LlamaModel::forward).
#pragma once
#include <span>
#include <vector>

#include "model/llama.h"

namespace cs {

class ReferenceModel {
 public:
  explicit ReferenceModel(const LlamaModel& model);

  // Logits of every position of a sequence at positions 0..n-1: n x n_vocab.
  void forward(std::span<const int32_t> tokens, std::vector<float>& logits) const;

 private:
  struct Layer {
    std::vector<float> attn_norm, ffn_norm, wq, wk, wv, wo, w_gate, w_up, w_down;
    std::vector<float> bq, bk, bv, bo, q_norm, k_norm;  // empty where the model has none
    std::vector<float> attn_post_norm, ffn_post_norm;
    // Mixture of experts: the router as floats; the experts stay the model's
    // (a file's experts as floats would not fit), dequantized when a token runs them.
    std::vector<float> router;
    const std::vector<Weight>*exp_gate = nullptr, *exp_up = nullptr, *exp_down = nullptr;
    const LlamaLayer* src = nullptr;  // the model's layer: its biases and sinks, as loaded
  };
  void moe(const Layer& L, const float* x, float* out) const;
  const LlamaConfig& cfg_;
  std::vector<float> tok_embd_, output_, output_norm_;
  std::vector<Layer> layers_;
};

}  // namespace cs
