#include "model/cpu_ops.h"

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
    const int g = int(w.size());
    per_token(x.rows, [&](int t) {
      const float* in = x.row(t);
      float* o = out.row(t);
      for (int j = 0; j < x.cols; j += g) cs::rmsnorm(in + j, w.data(), g, eps, o + j);
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
    per_token(x.rows, [&](int t) {
      float* a = x.row(t);
      const float* b = y.row(t);
      for (int i = 0; i < x.cols; ++i) a[i] += b[i];
    });
  }

  void gated_ffn(FfnAct act, Tensor gate, Tensor up) override {
    if (act == FfnAct::kGeluTanh) geglu(gate.data, up.data, gate.size(), gate.data);
    else swiglu(gate.data, up.data, gate.size(), gate.data);
  }

  void copy_rows(Tensor x, std::span<const int> rows, Tensor out) override {
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(out.row(int(i)), x.row(rows[i]), size_t(x.cols) * sizeof(float));
  }

 private:
  std::vector<BlockQ8> qx_;  // the activations quantized for the matmuls
  std::vector<float*> outs_;
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
