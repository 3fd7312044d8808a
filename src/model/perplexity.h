// Perplexity and KL divergence over a text, windowed as llama.cpp's
// llama-perplexity does, so the numbers compare: the text's tokens (with BOS
// when the vocabulary wants one) cut into consecutive windows of n_ctx
// tokens, each window's first token replaced by BOS (when wanted), each window
// run from an empty cache, and only its second half scored: the logits at
// positions n_ctx/2 .. n_ctx-2 predict the tokens after them. PPL is
// exp(mean NLL); its error is PPL x the standard error of the mean NLL.
#pragma once
#include <functional>
#include <ostream>
#include <span>
#include <vector>

#include "kv/chunk_pool.h"
#include "model/llama.h"
#include "model/reference.h"

namespace cs {

struct PerplexityOptions {
  int n_ctx = 512;
  int max_windows = 0;                          // 0: every whole window of the text
  KvType kv_type = KvType::kF16;
  const ReferenceModel* score_with = nullptr;   // score the reference instead of the fast path
  const ReferenceModel* kl_against = nullptr;   // also: KL of the fast path from this reference
  std::function<void(int window, int windows, double ppl)> progress;
  // Writes the scored rows' log-probabilities (the reference's when
  // kl_against is set) in llama-perplexity's
  // --kl-divergence-base format (its header, the windows' tokens, per row
  // 16-bit log-probabilities over the top 16 nats), so llama.cpp can measure
  // its KL divergence from the same distributions.
  std::ostream* kl_base = nullptr;
};

struct PerplexityResult {
  int windows = 0;
  int64_t count = 0;             // tokens scored
  double nll = 0, nll2 = 0;      // sums of NLL and NLL^2
  std::vector<double> kl;        // kl_against: per scored token, KL(reference || fast)
  double ref_nll = 0;            // kl_against: the reference's NLL sum (its PPL: ref_ppl())
  int64_t top1_differ = 0;       // kl_against: tokens whose top-1 differs
  double ppl() const;
  double ppl_error() const;
  double ref_ppl() const;
};

// The windows (see above); throws Error when the text has fewer than 2 x n_ctx
// tokens (llama-perplexity's rule).
std::vector<std::vector<int32_t>> perplexity_windows(std::span<const int32_t> tokens, int n_ctx, int max_windows,
                                                     int32_t bos);

// NLL of `target` under `logits` (log-softmax in double).
double token_nll(std::span<const float> logits, int32_t target);
// KL(p || q) of the distributions of two logit rows, in nats.
double kl_divergence(std::span<const float> p_logits, std::span<const float> q_logits);

PerplexityResult perplexity(const LlamaModel& model, std::span<const int32_t> tokens, const PerplexityOptions& o);

}  // namespace cs
