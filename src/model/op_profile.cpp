#include "model/op_profile.h"

namespace cs {

const char* prof_op_name(ProfOp op) {
  switch (op) {
    case ProfOp::kEmbed: return "embed";
    case ProfOp::kMatmul: return "matmul";
    case ProfOp::kHead: return "head";
    case ProfOp::kNorm: return "norm";
    case ProfOp::kRope: return "rope";
    case ProfOp::kElementwise: return "elementwise";
    case ProfOp::kPlan: return "plan";
    case ProfOp::kKvStore: return "kv_store";
    case ProfOp::kAttention: return "attention";
    case ProfOp::kCount: break;
  }
  return "?";
}

double OpProfile::total() const {
  double s = 0;
  for (double x : seconds) s += x;
  return s;
}

double OpProfile::matmul_bandwidth() const {
  const double s = seconds[int(ProfOp::kMatmul)] + seconds[int(ProfOp::kHead)];
  return s > 0 ? weight_bytes / s : 0.0;
}

OpProfile& OpProfile::operator+=(const OpProfile& o) {
  for (int i = 0; i < kProfOps; ++i) seconds[i] += o.seconds[i], calls[i] += o.calls[i];
  weight_bytes += o.weight_bytes;
  return *this;
}

namespace {
double bytes_of(const Weight& w) { return double(w.rows) * double(w.row_bytes); }
}  // namespace

// Each operation is timed done: finish() waits for what a device queued.
void ProfilingOps::embed(const Weight& table, std::span<const int32_t> tokens, float scale, Tensor x) {
  ProfScope s(&p_, ProfOp::kEmbed);
  in_.embed(table, tokens, scale, x);
  in_.finish();
}
void ProfilingOps::matmul(const Weight& w, Tensor x, Tensor y) {
  ProfScope s(&p_, ProfOp::kMatmul);
  p_.weight_bytes += bytes_of(w);
  in_.matmul(w, x, y);
  in_.finish();
}
void ProfilingOps::matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) {
  ProfScope s(&p_, ProfOp::kMatmul);
  for (const Weight* w : ws) p_.weight_bytes += bytes_of(*w);
  in_.matmul(ws, x, ys);
  in_.finish();
}
void ProfilingOps::matmul_head(const Weight& w, Tensor x, float margin, Tensor y) {
  ProfScope s(&p_, ProfOp::kHead);
  p_.weight_bytes += bytes_of(w);
  in_.matmul_head(w, x, margin, y);
  in_.finish();
}
void ProfilingOps::rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) {
  ProfScope s(&p_, ProfOp::kNorm);
  in_.rmsnorm(x, w, eps, out);
  in_.finish();
}
void ProfilingOps::add_rmsnorm(Tensor x, Tensor y, std::span<const float> w, float eps, Tensor out) {
  ProfScope s(&p_, ProfOp::kNorm);
  in_.add_rmsnorm(x, y, w, eps, out);
  in_.finish();
}
void ProfilingOps::rope(Tensor x, int head_dim, const RopeTable& table) {
  ProfScope s(&p_, ProfOp::kRope);
  in_.rope(x, head_dim, table);
  in_.finish();
}
void ProfilingOps::rope_qk(Tensor q, Tensor k, int head_dim, const RopeTable& table) {
  ProfScope s(&p_, ProfOp::kRope);
  in_.rope_qk(q, k, head_dim, table);
  in_.finish();
}
void ProfilingOps::add_bias(Tensor x, std::span<const float> b) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.add_bias(x, b);
  in_.finish();
}
void ProfilingOps::scale(Tensor x, float f) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.scale(x, f);
  in_.finish();
}
void ProfilingOps::add(Tensor x, Tensor y) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.add(x, y);
  in_.finish();
}
void ProfilingOps::gated_ffn(FfnAct act, Tensor gate, Tensor up) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.gated_ffn(act, gate, up);
  in_.finish();
}
void ProfilingOps::copy_rows(Tensor x, std::span<const int> rows, Tensor out) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.copy_rows(x, rows, out);
  in_.finish();
}
void ProfilingOps::copy_staged_rows(Tensor x, std::span<const int> head_rows, Tensor out) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.copy_staged_rows(x, head_rows, out);
  in_.finish();
}

void ProfilingOps::matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                                  std::span<const Tensor> ys) {
  ProfScope s(&p_, ProfOp::kMatmul);
  for (const Weight* w : ws) p_.weight_bytes += bytes_of(*w);
  in_.matmul_grouped(ws, xs, ys);
  in_.finish();
}
void ProfilingOps::route(MoeGating gating, Tensor logits, int k, std::span<int32_t> ids, std::span<float> weights) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.route(gating, logits, k, ids, weights);
  in_.finish();
}
void ProfilingOps::combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) {
  ProfScope s(&p_, ProfOp::kElementwise);
  in_.combine(src, slots, w, k, out);
  in_.finish();
}

}  // namespace cs
