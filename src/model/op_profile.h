// Where a forward pass spends its time, by kind of operation: `bench model
// --profile` and `bench engine --profile` (EngineOptions::profile) print it,
// and bench/peers/scaling.sh sets it beside the same figures at 1 to 16
// threads. Each operation is timed on the calling thread from its call to
// its return, so a parallel operation's time includes the start of its
// region, its barrier and any thread that finished early and waited there:
// an operation whose time does not fall as threads are added is where
// threads idle. The matmuls also count the weight bytes they read, which
// divided by their time is the bandwidth to set against the read roofline.
#pragma once
#include <chrono>
#include <cstdint>

#include "model/layer_ops.h"

namespace cs {

enum class ProfOp : uint8_t {
  kEmbed,
  kMatmul,       // every weight matmul but the head
  kHead,         // the output head (matmul_head)
  kNorm,         // rmsnorm, whole rows or per head (with the residual add before it, where fused)
  kRope,
  kElementwise,  // bias, scale, residual add, the FFN's activation, row copies; experts' routing and sums
  kPlan,         // the KV store's begin_batch: room for the batch and the attention plan
  kKvStore,      // K/V rows written to the cache
  kAttention,
  kCount
};
inline constexpr int kProfOps = int(ProfOp::kCount);
const char* prof_op_name(ProfOp op);

struct OpProfile {
  double seconds[kProfOps] = {};
  uint64_t calls[kProfOps] = {};
  double weight_bytes = 0;  // weights the matmuls and the head read

  double total() const;
  // The weights' read bandwidth of the matmuls and the head, bytes/s (0 when none ran).
  double matmul_bandwidth() const;
  OpProfile& operator+=(const OpProfile& o);
};

// Adds the time from construction to destruction to p's `op` (nothing when
// p is null).
class ProfScope {
 public:
  ProfScope(OpProfile* p, ProfOp op) : p_(p), op_(op) {
    if (p_) t0_ = std::chrono::steady_clock::now();
  }
  ~ProfScope() {
    if (!p_) return;
    p_->seconds[int(op_)] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    ++p_->calls[int(op_)];
  }
  ProfScope(const ProfScope&) = delete;
  ProfScope& operator=(const ProfScope&) = delete;

 private:
  OpProfile* p_;
  ProfOp op_;
  std::chrono::steady_clock::time_point t0_;
};

// LayerOps that runs `inner`'s and times every call into `p`; the results
// are inner's, bit for bit.
class ProfilingOps final : public LayerOps {
 public:
  ProfilingOps(LayerOps& inner, OpProfile& p) : in_(inner), p_(p) {}

  void embed(const Weight& table, std::span<const int32_t> tokens, float scale, Tensor x) override;
  void matmul(const Weight& w, Tensor x, Tensor y) override;
  void matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) override;
  void matmul_head(const Weight& w, Tensor x, float margin, Tensor y) override;
  void rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) override;
  void rope(Tensor x, int head_dim, const RopeTable& table) override;
  void rope_qk(Tensor q, Tensor k, int head_dim, const RopeTable& table) override;
  void add_bias(Tensor x, std::span<const float> b) override;
  void scale(Tensor x, float s) override;
  void add(Tensor x, Tensor y) override;
  void add_rmsnorm(Tensor x, Tensor y, std::span<const float> w, float eps, Tensor out) override;
  void gated_ffn(FfnAct act, Tensor gate, Tensor up) override;
  void copy_rows(Tensor x, std::span<const int> rows, Tensor out) override;
  void copy_staged_rows(Tensor x, std::span<const int> head_rows, Tensor out) override;
  void matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                      std::span<const Tensor> ys) override;
  void route(MoeGating gating, Tensor logits, int k, std::span<int32_t> ids, std::span<float> weights) override;
  void combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) override;
  bool on_device() const override { return in_.on_device(); }
  Tensor shape(TensorBuf& buf, int rows, int cols) override { return in_.shape(buf, rows, cols); }
  void to_host(Tensor src, float* dst) override { in_.to_host(src, dst); }
  void to_device(const float* src, Tensor dst) override { in_.to_device(src, dst); }
  void finish() override { in_.finish(); }
  void stage(std::span<const RopeTable* const> tables, std::span<const int> head_rows) override {
    in_.stage(tables, head_rows);
  }

 private:
  LayerOps& in_;
  OpProfile& p_;
};

}  // namespace cs
