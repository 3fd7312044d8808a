#include "model/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>


namespace cs {
namespace {

// The per-token steps (norms, rope, residuals) run between parallel matmuls:
// in a prefill they are split over the threads too, or one core idles. Each
// token is computed alone, so no bit depends on the split.
template <class Step>
void per_token(int n, Step&& step) {
#pragma omp parallel for schedule(static) if (n >= 32)
  for (int t = 0; t < n; ++t) step(t);
}

// The k of n experts of highest `score`, highest first (ties: the lower id), into ids.
void top_k(const float* score, int n, int k, int32_t* ids) {
  thread_local std::vector<int32_t> order;
  order.resize(size_t(n));
  for (int e = 0; e < n; ++e) order[size_t(e)] = e;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  });
  std::copy_n(order.begin(), k, ids);
}

// One token's routing (LayerOps::route), kSoftmaxNorm: softmax over the n
// experts' logits, the k most probable, their probabilities over their sum
// (at least 2^-14, as llama.cpp clamps it). kSoftmaxChosen: the k highest
// logits, a softmax over them.
void route_row(MoeGating gating, const float* logits, int n, int k, int32_t* ids, float* weights) {
  if (gating == MoeGating::kSoftmaxChosen) {
    top_k(logits, n, k, ids);
    const float top = logits[ids[0]];
    double sum = 0, e[64];  // k <= 64 (the loader checks)
    for (int j = 0; j < k; ++j) sum += e[j] = std::exp(double(logits[ids[j]] - top));
    for (int j = 0; j < k; ++j) weights[j] = float(e[j] / sum);
    return;
  }
  float mx = logits[0];
  for (int e = 1; e < n; ++e) mx = std::max(mx, logits[e]);
  thread_local std::vector<float> p;
  p.resize(size_t(n));
  double sum = 0;
  for (int e = 0; e < n; ++e) sum += p[size_t(e)] = std::exp(logits[e] - mx);
  for (int e = 0; e < n; ++e) p[size_t(e)] = float(p[size_t(e)] / sum);
  top_k(p.data(), n, k, ids);
  float chosen = 0;
  for (int j = 0; j < k; ++j) chosen += p[size_t(ids[j])];
  chosen = std::max(chosen, 6.103515625e-5f);
  for (int j = 0; j < k; ++j) weights[j] = p[size_t(ids[j])] / chosen;
}

// A row's norm over each group of w.size() values (the whole row, or each head).
void norm_row(const float* in, int cols, std::span<const float> w, float eps, float* out) {
  const int g = int(w.size());
  for (int j = 0; j < cols; j += g) rmsnorm(in + j, w.data(), g, eps, out + j);
}

void add_row(float* a, const float* b, int cols) {
  for (int i = 0; i < cols; ++i) a[i] += b[i];
}

class CpuOps final : public LayerOps {
 public:
  void embed(const Weight& table, std::span<const int32_t> tokens, float scale, Tensor x) override {
    per_token(x.rows, [&](int t) {
      float* out = x.row(t);
      dequantize_row(table.type, table.data + size_t(tokens[size_t(t)]) * table.row_bytes, out, size_t(x.cols));
      if (scale != 1.0f)
        for (int i = 0; i < x.cols; ++i) out[i] *= scale;
    });
  }

  void matmul(const Weight& w, Tensor x, Tensor y) override { cs::matmul(w, x.data, x.rows, y.data, qx_); }

  void matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) override {
    outs_.clear();
    for (const Tensor& y : ys) outs_.push_back(y.data);
    matmul_multi(ws, x.data, x.rows, outs_, qx_);
  }

  void matmul_head(const Weight& w, Tensor x, float margin, Tensor y) override {
    matmul_refined(w, x.data, x.rows, margin, y.data, head_);
  }

  void rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) override {
    per_token(x.rows, [&](int t) { norm_row(x.row(t), x.cols, w, eps, out.row(t)); });
  }

  void add_rmsnorm(Tensor x, Tensor y, std::span<const float> w, float eps, Tensor out) override {
    per_token(x.rows, [&](int t) {
      add_row(x.row(t), y.row(t), x.cols);
      norm_row(x.row(t), x.cols, w, eps, out.row(t));
    });
  }

  void rope(Tensor x, int head_dim, const RopeTable& table) override {
    per_token(x.rows, [&](int t) { cs::rope(x.row(t), x.cols / head_dim, head_dim, table, t); });
  }

  void add_bias(Tensor x, std::span<const float> b) override { cs::add_bias(x.data, b.data(), x.cols, x.rows); }

  void scale(Tensor x, float s) override {
    per_token(x.rows, [&](int t) {
      float* r = x.row(t);
      for (int i = 0; i < x.cols; ++i) r[i] *= s;
    });
  }

  void add(Tensor x, Tensor y) override {
    per_token(x.rows, [&](int t) { add_row(x.row(t), y.row(t), x.cols); });
  }

  void gated_ffn(FfnAct act, Tensor gate, Tensor up) override {
    switch (act) {
      case FfnAct::kSilu: swiglu(gate.data, up.data, gate.size(), gate.data); break;
      case FfnAct::kGeluTanh: geglu(gate.data, up.data, gate.size(), gate.data); break;
      case FfnAct::kSwigluOai: swiglu_oai(gate.data, up.data, gate.size(), gate.data); break;
    }
  }

  void matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                      std::span<const Tensor> ys) override {
    ins_.clear(), outs_.clear(), rows_.clear();
    for (const Tensor& x : xs) ins_.push_back(x.data), rows_.push_back(x.rows);
    for (const Tensor& y : ys) outs_.push_back(y.data);
    cs::matmul_grouped(ws, ins_, rows_, outs_, qx_);
  }

  void route(MoeGating gating, Tensor logits, int k, std::span<int32_t> ids, std::span<float> weights) override {
    per_token(logits.rows, [&](int t) {
      route_row(gating, logits.row(t), logits.cols, k, ids.data() + size_t(t) * size_t(k),
                weights.data() + size_t(t) * size_t(k));
    });
  }

  void combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) override {
    per_token(out.rows, [&](int t) {
      float* o = out.row(t);
      std::memset(o, 0, size_t(out.cols) * sizeof(float));
      for (int j = 0; j < k; ++j) {
        const size_t i = size_t(t) * size_t(k) + size_t(j);
        const float* a = src.row(slots[i]);
        const float s = w[i];
        for (int c = 0; c < out.cols; ++c) o[c] += s * a[c];
      }
    });
  }

  void copy_rows(Tensor x, std::span<const int> rows, Tensor out) override {
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(out.row(int(i)), x.row(rows[i]), size_t(x.cols) * sizeof(float));
  }

 private:
  std::vector<BlockQ8> qx_;  // the activations quantized for the matmuls
  std::vector<float*> outs_;
  std::vector<const float*> ins_;
  std::vector<int> rows_;
  HeadScratch head_;
};

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  Weight matrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    return make_weight(type, rows, cols, data);
  }
  Weight table(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    return view_weight(type, rows, cols, data);
  }
  std::unique_ptr<LayerOps> ops() const override { return std::make_unique<CpuOps>(); }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace cs
