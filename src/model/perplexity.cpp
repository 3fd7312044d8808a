#include "model/perplexity.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/log_sum_exp.h"
#include "model/sequence_kv.h"

namespace cs {

double PerplexityResult::ppl() const { return count ? std::exp(nll / double(count)) : 0; }

double PerplexityResult::ref_ppl() const { return count ? std::exp(ref_nll / double(count)) : 0; }

double PerplexityResult::ppl_error() const {
  if (count < 2) return 0;
  const double mean = nll / double(count), var = nll2 / double(count) - mean * mean;
  return var > 0 ? ppl() * std::sqrt(var / double(count - 1)) : 0;
}

std::vector<std::vector<int32_t>> perplexity_windows(std::span<const int32_t> tokens, int n_ctx, int max_windows,
                                                     int32_t bos) {
  if (n_ctx < 4) throw Error("--ctx " + std::to_string(n_ctx) + " is too small (at least 4)");
  if (int64_t(tokens.size()) < 2 * int64_t(n_ctx))
    throw Error("the text has " + std::to_string(tokens.size()) + " tokens; a context of " + std::to_string(n_ctx) +
                " needs at least " + std::to_string(2 * n_ctx));
  int n = int(tokens.size() / size_t(n_ctx));
  if (max_windows > 0) n = std::min(n, max_windows);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    out.emplace_back(tokens.begin() + int64_t(i) * n_ctx, tokens.begin() + int64_t(i + 1) * n_ctx);
    if (bos >= 0) out.back()[0] = bos;
  }
  return out;
}

namespace {

// One row of the --kl-divergence-base format: two floats (scale, the lowest
// log-probability kept), then n_vocab 16-bit steps above it (16 nats below
// the top at most), padded to an even count.
void write_kl_row(std::ostream& out, std::span<const float> l) {
  float mx = l[0], mn = l[0];
  for (float v : l) mx = std::max(mx, v), mn = std::min(mn, v);
  mn = std::max(mn, mx - 16);
  double sum = 0;
  for (float v : l) sum += expf(v - mx);
  const float lse = float(std::log(sum));
  const float head[2] = {(mx - mn) / 65535.f, mn - mx - lse};
  const size_t nv = 2 * ((l.size() + 1) / 2) + 4;
  std::vector<uint16_t> row(nv, 0);
  std::memcpy(row.data(), head, sizeof(head));
  if (head[0] != 0)
    for (size_t i = 0; i < l.size(); ++i)
      row[4 + i] = l[i] > mn ? uint16_t(std::lrintf((l[i] - mn) / head[0])) : 0;
  out.write(reinterpret_cast<const char*>(row.data()), std::streamsize(nv * sizeof(uint16_t)));
}

}  // namespace

double token_nll(std::span<const float> logits, int32_t target) { return log_sum_exp(logits) - logits[size_t(target)]; }

double kl_divergence(std::span<const float> p, std::span<const float> q) {
  const double lp = log_sum_exp(p), lq = log_sum_exp(q);
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double a = p[i] - lp;  // log p_i
    kl += std::exp(a) * (a - (q[i] - lq));
  }
  return std::max(0.0, kl);
}

PerplexityResult perplexity(const LlamaModel& model, std::span<const int32_t> tokens, const PerplexityOptions& o) {
  const Tokenizer& tok = model.tokenizer();
  const auto windows = perplexity_windows(tokens, o.n_ctx, o.max_windows, tok.wants_bos() ? tok.bos() : -1);
  const int V = model.config().n_vocab, first = o.n_ctx / 2;
  PerplexityResult r;
  if (o.kl_base) {
    // The header and every window's tokens as the text has them (llama.cpp
    // puts BOS in when it runs a window).
    const int32_t head[3] = {o.n_ctx, V, int32_t(windows.size())};
    o.kl_base->write("_logits_", 8);
    o.kl_base->write(reinterpret_cast<const char*>(head), sizeof(head));
    o.kl_base->write(reinterpret_cast<const char*>(tokens.data()),
                     std::streamsize(windows.size() * size_t(o.n_ctx) * sizeof(int32_t)));
  }
  Workspace ws;
  std::vector<float> fast, ref;
  for (const auto& w : windows) {
    // The scored rows' logits: positions first .. n_ctx-2.
    if (o.score_with) {
      o.score_with->forward(w, ref);
      fast.assign(ref.begin() + int64_t(first) * V, ref.begin() + int64_t(o.n_ctx - 1) * V);
    } else {
      const auto kv = sequence_kv(model, o.n_ctx, o.kv_type);
      Batch b;
      for (int i = 0; i < o.n_ctx; ++i) b.add(w[size_t(i)], i, 0, i >= first && i < o.n_ctx - 1);
      model.forward(b, *kv, ws, fast);
    }
    if (o.kl_against) o.kl_against->forward(w, ref);
    for (int i = first; i < o.n_ctx - 1; ++i) {
      const std::span<const float> row(fast.data() + int64_t(i - first) * V, size_t(V));
      const double nll = token_nll(row, w[size_t(i + 1)]);
      r.nll += nll;
      r.nll2 += nll * nll;
      ++r.count;
      if (o.kl_base && !o.kl_against) write_kl_row(*o.kl_base, row);
      if (o.kl_against) {
        const std::span<const float> base(ref.data() + int64_t(i) * V, size_t(V));
        if (o.kl_base) write_kl_row(*o.kl_base, base);
        r.ref_nll += token_nll(base, w[size_t(i + 1)]);
        r.kl.push_back(kl_divergence(base, row));
        r.top1_differ += std::max_element(base.begin(), base.end()) - base.begin() !=
                         std::max_element(row.begin(), row.end()) - row.begin();
      }
    }
    ++r.windows;
    if (o.kl_base && !*o.kl_base) throw Error("cannot write the KL base file");
    if (o.progress) o.progress(r.windows, int(windows.size()), r.ppl());
  }
  return r;
}

}  // namespace cs
