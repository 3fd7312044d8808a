#include "model/cuda_ops.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/cuda.h"
#include "base/error.h"
#include "model/cpu_ops.h"
#include "model/cuda_matmul.h"
#include "model/cuda_ops_kernels.h"

namespace cs {
namespace {

// A Weight the device matmul reads: on the GPU, the host's packed words freed.
bool on_gpu(const Weight& w) { return w.device != nullptr; }

// Made only by the backend cuda_backend() gives, which has checked the device.
class CudaOps final : public LayerOps {
 public:
  bool on_device() const override { return true; }
  Tensor shape(TensorBuf& buf, int rows, int cols) override {
    forget();  // a buffer made anew may take a freed one's address
    return buf.shape_on_device(rows, cols);
  }
  void to_host(Tensor src, float* dst) override { cuda::to_host(dst, src.data, src.size() * sizeof(float)); }
  void to_device(const float* src, Tensor dst) override {
    forget();
    cuda::to_device(dst.data, src, dst.size() * sizeof(float));
  }
  void finish() override { cuda::synchronize(); }

  // The file's rows dequantized on the host (the CPU's bits), then copied over.
  void embed(const Weight& table, std::span<const int32_t> tokens, float scale, Tensor x) override {
    forget();
    host_a_.resize(x.size());
    cpu_->embed(table, tokens, scale, Tensor{host_a_.data(), x.rows, x.cols});
    to_device(host_a_.data(), x);
  }

  void matmul(const Weight& w, Tensor x, Tensor y) override {
    const Weight* ws[] = {&w};
    const Tensor ys[] = {y};
    matmul(ws, x, ys);
  }

  // The input quantized once on the device for every quantized weight
  // there (or not at all where the step that wrote it quantized it too:
  // held_), and the weights of one layout multiplied in one launch (a
  // layer's q, k and v; its gate and up); float weights take the input as
  // it is; the rest on the host.
  void matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) override {
    bool quantized = held_.data == x.data && held_.rows == x.rows && held_.cols == x.cols;
    done_.assign(ws.size(), 0);
    for (size_t i = 0; i < ws.size(); ++i) {
      if (done_[i]) continue;
      if (!on_gpu(*ws[i])) {
        host_matmul(*ws[i], x, ys[i]);
        continue;
      }
      if (ws[i]->device->floats()) {
        cuda::float_matmul(*ws[i]->device, x.data, x.rows, ys[i].data);
        continue;
      }
      if (!quantized) forget(), quantize(x, acts_), quantized = true;
      same_.clear(), out_.clear();
      for (size_t j = i; j < ws.size(); ++j)
        if (!done_[j] && on_gpu(*ws[j]) && !ws[j]->device->floats() &&
            ws[j]->device->layout() == ws[i]->device->layout()) {
          same_.push_back(ws[j]->device.get()), out_.push_back(ys[j].data), done_[j] = 1;
        }
      cuda::matmul_many(same_, acts_.as<BlockQ8>(), x.rows, out_);
    }
    for (const Tensor& y : ys)  // an output written over the held tensor
      if (held_.data && y.data < held_.data + size_t(held_.rows) * size_t(held_.cols) &&
          held_.data < y.data + y.size())
        forget();
  }

  // matmul_refined's two levels: x = d1 q1 + d2 q2; both products in one
  // pass (2n token rows: the weights are read once), then level two added
  // on the tiles of 16 outputs near each row's top.
  void matmul_head(const Weight& w, Tensor x, float margin, Tensor y) override {
    forget();  // acts_ takes the head's two levels
    if (on_gpu(w) && w.device->floats()) {  // the CPU's head multiplies a float matrix plainly too
      cuda::float_matmul(*w.device, x.data, x.rows, y.data);
      return;
    }
    if (!on_gpu(w)) {
      host_a_.resize(x.size()), host_b_.resize(y.size());
      to_host(x, host_a_.data());
      cpu_->matmul_head(w, Tensor{host_a_.data(), x.rows, x.cols}, margin, Tensor{host_b_.data(), y.rows, y.cols});
      to_device(host_b_.data(), y);
      return;
    }
    const int64_t blocks = int64_t(x.rows) * (x.cols / 32);
    const size_t level = size_t(blocks) * sizeof(BlockQ8);
    acts_.reserve(2 * level);
    both_.reserve(2 * y.size() * sizeof(float));
    floor_.reserve(size_t(x.rows) * sizeof(float));
    auto* l1 = acts_.as<BlockQ8>();
    auto* l2 = l1 + blocks;
    cuda::ops::head_levels(x.data, blocks, l1, l2);
    float* y1 = both_.as<float>();
    cuda::matmul(*w.device, l1, 2 * x.rows, y1);  // level one's rows, then level two's
    cuda::ops::head_refine(y1, y1 + y.size(), y.rows, y.cols, margin, floor_.as<float>(), y.data);
  }

  // A norm over whole rows also quantizes what it writes (the next matmul's
  // input); a norm per head does not.
  void rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) override {
    void* q8 = size_t(out.cols) == w.size() ? quantize_as_written(out) : (forget(), nullptr);
    cuda::ops::rmsnorm(x.data, x.rows, x.cols, vec(w), int(w.size()), eps, out.data, q8);
  }

  void add_rmsnorm(Tensor x, Tensor y, std::span<const float> w, float eps, Tensor out) override {
    void* q8 = size_t(out.cols) == w.size() ? quantize_as_written(out) : (forget(), nullptr);
    cuda::ops::add_rmsnorm(x.data, y.data, x.rows, x.cols, vec(w), int(w.size()), eps, out.data, q8);
  }

  void rope(Tensor x, int head_dim, const RopeTable& table) override {
    forget();
    const Angles& a = angles(table);
    cuda::ops::rope(x.data, x.cols, nullptr, 0, x.rows, head_dim, a.cos.as<float>(), a.sin.as<float>(), table.half,
                    table.style == RopeStyle::kAdjacent);
  }
  void rope_qk(Tensor q, Tensor k, int head_dim, const RopeTable& table) override {
    forget();
    if (q.rows != k.rows) throw Error("rope_qk: queries and keys of different token counts");
    const Angles& a = angles(table);
    cuda::ops::rope(q.data, q.cols, k.data, k.cols, q.rows, head_dim, a.cos.as<float>(), a.sin.as<float>(),
                    table.half, table.style == RopeStyle::kAdjacent);
  }

  void stage(std::span<const RopeTable* const> tables, std::span<const int> head_rows) override {
    forget();
    for (const RopeTable* t : tables) angles(*t);
    staged_rows_ = head_rows.size();
    if (head_rows.empty()) return;
    head_rows_.reserve(head_rows.size() * sizeof(int32_t));
    cuda::to_device(head_rows_.get(), head_rows.data(), head_rows.size() * sizeof(int32_t));
  }

  void add_bias(Tensor x, std::span<const float> b) override {
    forget();
    cuda::ops::add_bias(x.data, x.rows, x.cols, vec(b));
  }
  void scale(Tensor x, float s) override {
    forget();
    cuda::ops::scale(x.data, x.size(), s);
  }
  void add(Tensor x, Tensor y) override {
    forget();
    cuda::ops::add(x.data, y.data, x.size());
  }
  // Quantizes what it writes too (the down matrix's input).
  void gated_ffn(FfnAct act, Tensor gate, Tensor up) override {
    static_assert(int(FfnAct::kSilu) == 0 && int(FfnAct::kGeluTanh) == 1 && int(FfnAct::kSwigluOai) == 2);
    cuda::ops::gated(int(act), gate.data, up.data, gate.size(), quantize_as_written(gate));
  }

  void copy_rows(Tensor x, std::span<const int> rows, Tensor out) override {
    forget();
    if (rows.empty()) return;
    static_assert(sizeof(int) == sizeof(int32_t));
    rows_.reserve(rows.size() * sizeof(int32_t));
    cuda::to_device(rows_.get(), rows.data(), rows.size() * sizeof(int32_t));
    cuda::gather_rows(x.data, x.cols, rows_.as<int32_t>(), int(rows.size()), out.data);
  }

  void copy_staged_rows(Tensor x, std::span<const int> head_rows, Tensor out) override {
    forget();
    if (head_rows.empty()) return;
    if (head_rows.size() != staged_rows_) throw Error("copy_staged_rows: not the rows this step staged");
    cuda::gather_rows(x.data, x.cols, head_rows_.as<int32_t>(), int(head_rows.size()), out.data);
  }

  // Each expert's rows quantized and multiplied on the device (a row's bits
  // are matmul()'s, as the CPU's grouped pass gives).
  void matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                      std::span<const Tensor> ys) override {
    for (size_t i = 0; i < ws.size(); ++i) matmul(*ws[i], xs[i], ys[i]);
  }

  // Routing on the host, by the CPU's steps (the router's logits, a row of
  // n_expert values per token, come over); the ids and weights go back for
  // the weighed sums on the device.
  void route(MoeGating gating, Tensor logits, int k, std::span<int32_t> ids, std::span<float> weights) override {
    host_a_.resize(logits.size());
    to_host(logits, host_a_.data());
    cpu_->route(gating, Tensor{host_a_.data(), logits.rows, logits.cols}, k, ids, weights);
  }
  void combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) override {
    forget();
    if (out.rows == 0) return;
    rows_.reserve(slots.size() * sizeof(int32_t));
    weights_.reserve(w.size() * sizeof(float));
    cuda::to_device(rows_.get(), slots.data(), slots.size() * sizeof(int32_t));
    cuda::to_device(weights_.get(), w.data(), w.size() * sizeof(float));
    cuda::ops::combine(src.data, src.cols, rows_.as<int32_t>(), weights_.as<float>(), k, out.rows, out.data);
  }

 private:
  struct Angles {
    uint64_t generation = 0;
    cuda::Buffer cos, sin;
  };

  // The table's angles on the device, copied over when they are new.
  const Angles& angles(const RopeTable& table) {
    Angles& a = angles_[&table];
    if (a.generation != table.generation) {
      a.cos.reserve(table.cos_.size() * sizeof(float)), a.sin.reserve(table.sin_.size() * sizeof(float));
      cuda::to_device(a.cos.get(), table.cos_.data(), table.cos_.size() * sizeof(float));
      cuda::to_device(a.sin.get(), table.sin_.data(), table.sin_.size() * sizeof(float));
      a.generation = table.generation;
    }
    return a;
  }

  void quantize(Tensor x, cuda::Buffer& acts) {
    acts.reserve(size_t(x.rows) * size_t(x.cols / 32) * sizeof(BlockQ8));
    cuda::quantize_q8(x.data, x.rows, x.cols, acts.as<BlockQ8>());
  }

  // acts_ as the blocks of `out`, which the step about to be launched
  // quantizes as it writes it (nullptr, and nothing held, where its rows do
  // not quantize). Held until any other step runs: each of this class's
  // steps but the matmuls forgets it first, and a matmul whose output
  // overlaps it forgets it after. (The forward pass writes tensors outside
  // this class only in the KV store's attention, which no matmul follows
  // before a step of this class.)
  void* quantize_as_written(Tensor out) {
    forget();
    if (out.cols % 32 || out.rows == 0) return nullptr;
    acts_.reserve(size_t(out.rows) * size_t(out.cols / 32) * sizeof(BlockQ8));
    held_ = {out.data, out.rows, out.cols};
    return acts_.get();
  }
  void forget() { held_ = {}; }

  // A matrix the device does not read: x's rows to the host, the CPU's
  // matmul, y's rows back.
  void host_matmul(const Weight& w, Tensor x, Tensor y) {
    host_a_.resize(x.size()), host_b_.resize(y.size());
    to_host(x, host_a_.data());
    cpu_->matmul(w, Tensor{host_a_.data(), x.rows, x.cols}, Tensor{host_b_.data(), y.rows, y.cols});
    to_device(host_b_.data(), y);
  }

  // A host vector's device copy, made on first use.
  const float* vec(std::span<const float> v) {
    cuda::Buffer& b = vecs_[{v.data(), v.size()}];
    if (b.bytes() == 0 && !v.empty()) {
      b = cuda::Buffer(v.size() * sizeof(float));
      cuda::to_device(b.get(), v.data(), v.size() * sizeof(float));
    }
    return b.as<float>();
  }

  std::unique_ptr<LayerOps> cpu_ = cpu_backend().ops();
  cuda::Buffer acts_, both_, floor_, rows_, weights_, head_rows_;
  // Whose blocks acts_ holds (quantize_as_written), or none.
  struct Held {
    const float* data = nullptr;
    int rows = 0, cols = 0;
  } held_;
  size_t staged_rows_ = 0;  // how many head_rows_ holds
  std::map<std::pair<const float*, size_t>, cuda::Buffer> vecs_;
  std::map<const RopeTable*, Angles> angles_;
  std::vector<float> host_a_, host_b_;
  // matmul()'s grouping of its weights by layout (kept: no allocation a call).
  std::vector<char> done_;
  std::vector<const cuda::DeviceMatrix*> same_;
  std::vector<float*> out_;
};

class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda"; }
  bool on_device() const override { return true; }

  // The CPU's weight, then its layout copied to the GPU where the device
  // matmul reads the type (and the host's packed words freed); a float
  // matrix as the file has it (and the host's copy never made).
  Weight matrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    if (cuda::float_matrix(type)) {
      Weight w = view_weight(type, rows, cols, data);
      w.device = std::make_shared<const cuda::DeviceMatrix>(type, rows, cols, data);
      // The file's type stays (the profile's bytes are the device's), and
      // no host pointer: only the device reads it, each of CudaOps' matmuls
      // asking device->floats() first.
      w.data = nullptr;
      return w;
    }
    Weight w = cpu_backend().matrix(type, rows, cols, data);
    if (!cuda::matmul_supports(type) || cols % (is_k_layout(pack_layout(type)) ? 256 : 32)) return w;
    w.device = std::make_shared<const cuda::DeviceMatrix>(w);
    PackedWords().swap(w.packed);
    return w;
  }
  Weight table(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    return cpu_backend().table(type, rows, cols, data);
  }
  std::unique_ptr<LayerOps> ops() const override { return std::make_unique<CudaOps>(); }
};

}  // namespace

const Backend& cuda_backend() {
  std::string why;
  if (!cuda::device_available(&why)) throw Error("--device cuda: " + why);
  static const CudaBackend backend;
  return backend;
}

}  // namespace cs
