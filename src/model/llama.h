// A Llama-family model loaded from GGUF: configuration, weights (used in place
// from the file mapping), tokenizer and the forward pass. The weights are
// immutable after load; forward() uses a caller-owned Workspace, so one model
// can serve several engines, each with its own workspace and KV store.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_store.h"
#include "model/gguf.h"
#include "model/matmul.h"
#include "model/ops.h"
#include "model/tokenizer.h"

namespace cs {

struct LlamaConfig {
  std::string arch;
  int n_layers = 0, n_embd = 0, n_ff = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int rot_dim = 0, n_vocab = 0, n_ctx_train = 0;
  float rms_eps = 1e-5f;
  double rope_base = 10000.0;
  KvShape kv_shape() const { return {n_layers, n_heads, n_kv_heads, head_dim}; }
};

struct LlamaLayer {
  std::vector<float> attn_norm, ffn_norm;
  Weight wq, wk, wv, wo, w_gate, w_up, w_down;
};

// Scratch of one forward call, reused between calls.
struct Workspace {
  std::vector<float> x, xb, q, k, v, att, hb, hb2, logits_in;
  HeadScratch head;
  std::vector<BlockQ8> qx;
  RopeTable rope;
};

// The output head refines the logits within this many nats of a row's top
// (matmul_refined): a token further below has under e^-8 of the top's
// probability and keeps the 8-bit input's precision.
constexpr float kHeadMargin = 8.0f;

class LlamaModel {
 public:
  // Throws cs::Error naming the file and the problem (missing tensor, wrong
  // shape, unsupported architecture, ...).
  static std::unique_ptr<LlamaModel> load(const std::string& path);

  const LlamaConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const GgufFile& file() const { return *file_; }
  // The weights as loaded (the float reference, model/reference.h, reads them).
  const Weight& tok_embd() const { return tok_embd_; }
  const Weight& output() const { return output_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }

  // Runs the batch: writes K/V into kv and returns, in `logits`, one row of
  // n_vocab values per token whose logits flag is set, in batch order.
  // Throws KvError (nothing changed) when kv has no room.
  void forward(const Batch& batch, KvStore& kv, Workspace& ws, std::vector<float>& logits) const;

 private:
  LlamaModel() = default;
  void embed(int32_t token, float* out) const;

  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  LlamaConfig cfg_;
  Weight tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LlamaLayer> layers_;
};

}  // namespace cs
