// The seam between the forward pass (model/llama.cpp) and the hardware that
// runs it: the few operations a layer is made of, on tensors that carry their
// shape. A Backend packs the weights its way at load and makes LayerOps, an
// executor with its own scratch (one per Workspace, so engines sharing a model
// never share scratch). The CPU backend (model/cpu_ops.h) is the kernels of
// model/matmul.h and model/ops.h; attention goes through the KvStore.
//
// Every operation is per row: a row's result depends on that row alone (and
// the weights), never on the batch around it or on how the work is split.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

#include "model/arch.h"
#include "model/matmul.h"
#include "model/ops.h"
#include "model/tensor.h"

namespace cs {

class LayerOps {
 public:
  virtual ~LayerOps() = default;

  // x.row(t) = row tokens[t] of `table` (a Backend::table) times scale.
  virtual void embed(const Weight& table, std::span<const int32_t> tokens, float scale, Tensor x) = 0;
  // y.row(t) = W x.row(t), for a Backend::matrix W of y.cols rows and x.cols columns.
  virtual void matmul(const Weight& w, Tensor x, Tensor y) = 0;
  // Several weights reading one input (q/k/v, gate/up): ys[i] = ws[i] x.
  virtual void matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) = 0;
  // The output head: as matmul, with the logits within `margin` of a row's
  // top computed more precisely (model/matmul.h, matmul_refined).
  virtual void matmul_head(const Weight& w, Tensor x, float margin, Tensor y) = 0;
  // out = x / rms * w over each group of w.size() values of every row (the
  // whole row, or each head of it); out may be x.
  virtual void rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) = 0;
  // Rotates every head (head_dim values) of row t by the table's angles for token t.
  virtual void rope(Tensor x, int head_dim, const RopeTable& table) = 0;
  // rope(q), rope(k): a layer's queries and keys (one launch on a device).
  virtual void rope_qk(Tensor q, Tensor k, int head_dim, const RopeTable& table) {
    rope(q, head_dim, table);
    rope(k, head_dim, table);
  }
  virtual void add_bias(Tensor x, std::span<const float> b) = 0;  // x.row(t) += b
  virtual void scale(Tensor x, float s) = 0;                      // x *= s
  virtual void add(Tensor x, Tensor y) = 0;                       // x += y (the residual)
  // add(x, y), then rmsnorm(x, w, eps, out): the residual add and the next
  // block's norm in one pass over the rows (one kernel on a device, where a
  // token's step is hundreds of launches); the same bits as the two calls.
  // out may be y, not x.
  virtual void add_rmsnorm(Tensor x, Tensor y, std::span<const float> w, float eps, Tensor out) {
    add(x, y);
    rmsnorm(x, w, eps, out);
  }
  // gate = act(gate) * up: SwiGLU, GeGLU or gpt-oss's clamped SwiGLU.
  virtual void gated_ffn(FfnAct act, Tensor gate, Tensor up) = 0;
  // out.row(i) = x.row(rows[i]).
  virtual void copy_rows(Tensor x, std::span<const int> rows, Tensor out) = 0;
  // copy_rows with the head's rows that this step's stage() had: a device
  // reads its staged copy of them.
  virtual void copy_staged_rows(Tensor x, std::span<const int> head_rows, Tensor out) { copy_rows(x, head_rows, out); }
  // Several weights, each with an input of its own (a mixture's experts and
  // the rows routed to each): ys[i] = ws[i] xs[i], in one pass.
  virtual void matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                              std::span<const Tensor> ys) = 0;

  // Mixture of experts. route: for each row of router logits (one per
  // expert), the k experts of highest logit, highest first (ties: the lower
  // id), as ids[t * k + j], and their weights as weights[t * k + j]: their
  // softmax probabilities renormalized to sum 1 (kSoftmaxNorm, llama.cpp's
  // softmax gating with normalized weights) or a softmax over the k chosen
  // logits (kSoftmaxChosen, llama.cpp's softmax-weight gating). combine:
  // out.row(t) = the sum over j < k, in j order from 0, of
  // w[t * k + j] * src.row(slots[t * k + j]).
  virtual void route(MoeGating gating, Tensor logits, int k, std::span<int32_t> ids, std::span<float> weights) = 0;
  virtual void combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) = 0;

  // Where the tensors live: host memory here; a device backend's are the
  // GPU's, and these move a tensor's values between the two (the KV store
  // and the logits are the host's: model/llama.cpp).
  virtual bool on_device() const { return false; }
  // A view of rows x cols values in `buf`, in this backend's memory.
  virtual Tensor shape(TensorBuf& buf, int rows, int cols) { return buf.shape(rows, cols); }
  virtual void to_host(Tensor src, float* dst) {
    if (dst != src.data) std::memcpy(dst, src.data, src.size() * sizeof(float));
  }
  virtual void to_device(const float* src, Tensor dst) {
    if (src != dst.data) std::memcpy(dst.data, src, dst.size() * sizeof(float));
  }
  // Waits for the work queued so far (a device's queue; nothing on the CPU),
  // so that a profile times an operation, not its launch.
  virtual void finish() {}
  // A step's small inputs, known before its first operation: the RoPE
  // tables its layers use and the rows its head reads (copy_staged_rows'
  // later). A device copies them over now, so no upload cuts the step's
  // launches apart (one CUDA graph, not three: base/launch_queue.h).
  virtual void stage(std::span<const RopeTable* const> tables, std::span<const int> head_rows) {
    (void)tables, (void)head_rows;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Whether the LayerOps' tensors are device memory (LayerOps::on_device).
  virtual bool on_device() const { return false; }
  // A rows x cols matrix of the file (row-major, GGUF ne = {cols, rows}) as
  // this backend's matmul reads it: repacked or copied here, once.
  virtual Weight matrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const = 0;
  // A table looked up by row only (the token embedding).
  virtual Weight table(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const = 0;
  virtual std::unique_ptr<LayerOps> ops() const = 0;
};

}  // namespace cs
