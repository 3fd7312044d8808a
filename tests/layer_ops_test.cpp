// The layer-ops seam (model/layer_ops.h): the CPU backend's operations on
// shaped tensors against plain loops, and the forward pass driven through a
// backend it was handed (a recording wrapper of the CPU one): the same bits,
// and every step of every layer goes through the seam.
#include "model/layer_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "cache/contiguous_kv.h"
#include "model/cpu_ops.h"
#include "model/llama.h"
#include "model/op_profile.h"
#include "tiny_model.h"

namespace cs {
namespace {

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

TEST(Tensor, CarriesItsShapeAndKeepsItsMemory) {
  TensorBuf buf;
  const Tensor a = buf.shape(3, 4);
  EXPECT_EQ(a.rows, 3);
  EXPECT_EQ(a.cols, 4);
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a.row(2), a.data + 8);
  const Tensor b = buf.shape(2, 4);  // smaller: the same memory
  EXPECT_EQ(b.data, a.data);
  EXPECT_EQ(buf.tensor().rows, 2);
}

// Mixture-of-experts routing: the k most probable experts, most probable
// first (a tie to the lower id), weighed by their probabilities over their
// sum; and the weighed sums of expert outputs into their tokens' rows.
TEST(CpuOps, RoutingPicksTheMostProbableExpertsAndRenormalizes) {
  const auto ops = cpu_backend().ops();
  std::vector<float> logits = {0, 1, 2, 3,   // token 0: experts 3 and 2
                               5, 5, 0, 5,   // token 1: a three-way tie, the lower ids win
                               -1, 7, 7, -1};
  std::vector<int32_t> ids(6);
  std::vector<float> w(6);
  ops->route(MoeGating::kSoftmaxNorm, Tensor{logits.data(), 3, 4}, 2, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 2, 0, 1, 1, 2}));
  EXPECT_NEAR(w[0], 1 / (1 + std::exp(-1.0)), 1e-6);  // e^3 / (e^3 + e^2)
  EXPECT_NEAR(w[1], 1 / (1 + std::exp(1.0)), 1e-6);
  for (int i = 2; i < 6; ++i) EXPECT_FLOAT_EQ(w[size_t(i)], 0.5f);
  // 40 tokens over 64 experts, 8 each: against a sort of the softmax.
  const int n = 40, E = 64, k = 8;
  std::vector<float> many = random_values(size_t(n) * E, 5);
  ids.resize(size_t(n) * k), w.resize(ids.size());
  ops->route(MoeGating::kSoftmaxNorm, Tensor{many.data(), n, E}, k, ids, w);
  for (int t = 0; t < n; ++t) {
    std::vector<int> order(E);
    for (int e = 0; e < E; ++e) order[size_t(e)] = e;
    const float* l = many.data() + size_t(t) * E;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
    double z = 0, chosen = 0;
    for (int e = 0; e < E; ++e) z += std::exp(double(l[e]));
    for (int j = 0; j < k; ++j) chosen += std::exp(double(l[order[size_t(j)]])) / z;
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(ids[size_t(t * k + j)], order[size_t(j)]);
      EXPECT_NEAR(w[size_t(t * k + j)], std::exp(double(l[order[size_t(j)]])) / z / chosen, 1e-6);
    }
  }
  // gpt-oss's gating: the k highest logits, a softmax over them alone (the
  // same weights in exact arithmetic; its own rounding).
  ops->route(MoeGating::kSoftmaxChosen, Tensor{logits.data(), 3, 4}, 2, ids, w);
  EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + 6), (std::vector<int32_t>{3, 2, 0, 1, 1, 2}));
  EXPECT_NEAR(w[0], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_FLOAT_EQ(w[4], 0.5f);
  ops->route(MoeGating::kSoftmaxChosen, Tensor{many.data(), n, E}, k, ids, w);
  for (int t = 0; t < n; ++t) {
    const float* l = many.data() + size_t(t) * E;
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += std::exp(double(l[ids[size_t(t * k + j)]]));
    for (int j = 0; j < k; ++j) {
      if (j > 0) {
        EXPECT_GE(l[ids[size_t(t * k + j - 1)]], l[ids[size_t(t * k + j)]]);
      }
      EXPECT_NEAR(w[size_t(t * k + j)], std::exp(double(l[ids[size_t(t * k + j)]])) / chosen, 1e-6);
    }
    // No expert left out has a higher logit than the lowest chosen.
    for (int e = 0; e < E; ++e)
      if (std::find(ids.begin() + t * k, ids.begin() + (t + 1) * k, e) == ids.begin() + (t + 1) * k) {
        EXPECT_LE(l[e], l[ids[size_t(t * k + k - 1)]]);
      }
  }
  // combine: each of 2 tokens the weighed sum of 2 of 3 rows, in slot order.
  std::vector<float> src = {1, 2, 3, 4, 5, 6}, dst(4, 9.0f);
  const int slots[] = {2, 0, 1, 1};
  const float weights[] = {0.5f, 2.0f, 1.0f, -1.0f};
  ops->combine(Tensor{src.data(), 3, 2}, slots, weights, 2, Tensor{dst.data(), 2, 2});
  EXPECT_EQ(dst, (std::vector<float>{0.5f * 5 + 2 * 1, 0.5f * 6 + 2 * 2, 0, 0}));
}

TEST(CpuOps, EachOperationIsItsPlainLoop) {
  const auto ops = cpu_backend().ops();
  const int n = 40, cols = 64, head = 16;  // 40 rows: the threaded split too
  std::vector<float> xs = random_values(size_t(n) * cols, 1), ys = random_values(size_t(n) * cols, 2);
  std::vector<float> w = random_values(cols, 3), b = random_values(cols, 4);
  const Tensor x{xs.data(), n, cols}, y{ys.data(), n, cols};

  // rmsnorm over whole rows, and over each head when the weights are one head's.
  std::vector<float> out(xs.size()), expect(xs.size());
  ops->rmsnorm(x, w, 1e-5f, Tensor{out.data(), n, cols});
  for (int t = 0; t < n; ++t) rmsnorm(x.row(t), w.data(), cols, 1e-5f, expect.data() + size_t(t) * cols);
  EXPECT_EQ(out, expect);
  ops->rmsnorm(x, std::span(w).first(head), 1e-5f, Tensor{out.data(), n, cols});
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < cols / head; ++h)
      rmsnorm(x.row(t) + h * head, w.data(), head, 1e-5f, expect.data() + size_t(t) * cols + h * head);
  EXPECT_EQ(out, expect);
  // In place: the same bits.
  std::vector<float> in_place = xs;
  ops->rmsnorm(Tensor{in_place.data(), n, cols}, std::span(w).first(head), 1e-5f, Tensor{in_place.data(), n, cols});
  EXPECT_EQ(in_place, expect);

  std::vector<float> sum = xs, biased = xs, scaled = xs;
  ops->add(Tensor{sum.data(), n, cols}, y);
  ops->add_bias(Tensor{biased.data(), n, cols}, b);
  ops->scale(Tensor{scaled.data(), n, cols}, 0.125f);
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(sum[i], xs[i] + ys[i]);
    ASSERT_EQ(biased[i], xs[i] + b[i % cols]);
    ASSERT_EQ(scaled[i], xs[i] * 0.125f);
  }
  // add_rmsnorm: the residual's sums, then their norm (whole rows and per
  // head), with out the addend as the forward pass has it.
  for (const int g : {cols, head}) {
    std::vector<float> res = xs, addend = ys;
    ops->add_rmsnorm(Tensor{res.data(), n, cols}, Tensor{addend.data(), n, cols}, std::span(w).first(size_t(g)), 1e-5f,
                     Tensor{addend.data(), n, cols});
    EXPECT_EQ(res, sum);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < cols / g; ++h)
        rmsnorm(sum.data() + size_t(t) * cols + h * g, w.data(), g, 1e-5f, expect.data() + size_t(t) * cols + h * g);
    EXPECT_EQ(addend, expect) << "groups of " << g;
  }

  std::vector<float> gate = xs;
  ops->gated_ffn(FfnAct::kSilu, Tensor{gate.data(), n, cols}, y);
  swiglu(xs.data(), ys.data(), xs.size(), expect.data());
  EXPECT_EQ(gate, expect);
  gate = xs;
  ops->gated_ffn(FfnAct::kGeluTanh, Tensor{gate.data(), n, cols}, y);
  geglu(xs.data(), ys.data(), xs.size(), expect.data());
  EXPECT_EQ(gate, expect);

  const std::vector<int> rows = {7, 0, 39};
  std::vector<float> picked(rows.size() * cols);
  ops->copy_rows(x, rows, Tensor{picked.data(), 3, cols});
  for (size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(std::memcmp(picked.data() + i * cols, x.row(rows[i]), cols * sizeof(float)), 0) << i;

  // RoPE: row t turns by token t's angles.
  const std::vector<int32_t> pos = {5, 900};
  RopeParams rp;
  rp.rot_dim = head;
  RopeTable table;
  table.build(pos.data(), 2, rp);
  std::vector<float> turned(xs.begin(), xs.begin() + 2 * cols);
  ops->rope(Tensor{turned.data(), 2, cols}, head, table);
  expect.assign(xs.begin(), xs.begin() + 2 * cols);
  for (int t = 0; t < 2; ++t) rope(expect.data() + t * cols, cols / head, head, table, t);
  EXPECT_EQ(turned, std::vector<float>(expect.begin(), expect.begin() + 2 * cols));
}

// The CPU backend, with every call counted by name.
class Recording final : public Backend {
 public:
  mutable std::map<std::string, int> calls;

  const char* name() const override { return "recording"; }
  Weight matrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    ++calls["matrix"];
    return cpu_backend().matrix(type, rows, cols, data);
  }
  Weight table(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    ++calls["table"];
    return cpu_backend().table(type, rows, cols, data);
  }
  std::unique_ptr<LayerOps> ops() const override { return std::make_unique<Ops>(cpu_backend().ops(), calls); }

 private:
  class Ops final : public LayerOps {
   public:
    Ops(std::unique_ptr<LayerOps> cpu, std::map<std::string, int>& calls) : cpu_(std::move(cpu)), calls_(calls) {}
    void embed(const Weight& t, std::span<const int32_t> tok, float s, Tensor x) override {
      ++calls_["embed"];
      cpu_->embed(t, tok, s, x);
    }
    void matmul(const Weight& w, Tensor x, Tensor y) override {
      ++calls_["matmul"];
      cpu_->matmul(w, x, y);
    }
    void matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) override {
      calls_["matmul"] += int(ws.size());
      cpu_->matmul(ws, x, ys);
    }
    void matmul_head(const Weight& w, Tensor x, float margin, Tensor y) override {
      ++calls_["matmul_head"];
      cpu_->matmul_head(w, x, margin, y);
    }
    void rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) override {
      ++calls_["rmsnorm"];
      cpu_->rmsnorm(x, w, eps, out);
    }
    void rope(Tensor x, int head_dim, const RopeTable& t) override {
      ++calls_["rope"];
      cpu_->rope(x, head_dim, t);
    }
    void add_bias(Tensor x, std::span<const float> b) override {
      ++calls_["add_bias"];
      cpu_->add_bias(x, b);
    }
    void scale(Tensor x, float s) override {
      ++calls_["scale"];
      cpu_->scale(x, s);
    }
    void add(Tensor x, Tensor y) override {
      ++calls_["add"];
      cpu_->add(x, y);
    }
    void gated_ffn(FfnAct act, Tensor g, Tensor u) override {
      ++calls_["gated_ffn"];
      cpu_->gated_ffn(act, g, u);
    }
    void copy_rows(Tensor x, std::span<const int> rows, Tensor out) override {
      ++calls_["copy_rows"];
      cpu_->copy_rows(x, rows, out);
    }
    void matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                        std::span<const Tensor> ys) override {
      ++calls_["matmul_grouped"];
      cpu_->matmul_grouped(ws, xs, ys);
    }
    void route(MoeGating gating, Tensor logits, int k, std::span<int32_t> ids, std::span<float> weights) override {
      ++calls_["route"];
      cpu_->route(gating, logits, k, ids, weights);
    }
    void combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) override {
      ++calls_["combine"];
      cpu_->combine(src, slots, w, k, out);
    }

   private:
    std::unique_ptr<LayerOps> cpu_;
    std::map<std::string, int>& calls_;
  };
};

// LayerOps that hands every operation to the CPU backend's: what a test
// backend changes, it overrides.
class Forwarding : public LayerOps {
 public:
  void embed(const Weight& t, std::span<const int32_t> tok, float s, Tensor x) override { cpu_->embed(t, tok, s, x); }
  void matmul(const Weight& w, Tensor x, Tensor y) override { cpu_->matmul(w, x, y); }
  void matmul(std::span<const Weight* const> ws, Tensor x, std::span<const Tensor> ys) override {
    cpu_->matmul(ws, x, ys);
  }
  void matmul_head(const Weight& w, Tensor x, float margin, Tensor y) override { cpu_->matmul_head(w, x, margin, y); }
  void rmsnorm(Tensor x, std::span<const float> w, float eps, Tensor out) override { cpu_->rmsnorm(x, w, eps, out); }
  void rope(Tensor x, int head_dim, const RopeTable& t) override { cpu_->rope(x, head_dim, t); }
  void add_bias(Tensor x, std::span<const float> b) override { cpu_->add_bias(x, b); }
  void scale(Tensor x, float s) override { cpu_->scale(x, s); }
  void add(Tensor x, Tensor y) override { cpu_->add(x, y); }
  void gated_ffn(FfnAct act, Tensor g, Tensor u) override { cpu_->gated_ffn(act, g, u); }
  void copy_rows(Tensor x, std::span<const int> rows, Tensor out) override { cpu_->copy_rows(x, rows, out); }
  void matmul_grouped(std::span<const Weight* const> ws, std::span<const Tensor> xs,
                      std::span<const Tensor> ys) override {
    cpu_->matmul_grouped(ws, xs, ys);
  }
  void route(MoeGating g, Tensor logits, int k, std::span<int32_t> ids, std::span<float> w) override {
    cpu_->route(g, logits, k, ids, w);
  }
  void combine(Tensor src, std::span<const int> slots, std::span<const float> w, int k, Tensor out) override {
    cpu_->combine(src, slots, w, k, out);
  }

 private:
  std::unique_ptr<LayerOps> cpu_ = cpu_backend().ops();
};

// A backend whose tensors are "elsewhere": the CPU's operations on buffers
// of its own that start as NaN and keep nothing as they grow (as device
// memory), crossing to and from the host only through to_host / to_device.
// It runs the forward pass's device path (the logits, and a host KV store's
// rows, copied across) on the CPU.
class Remote final : public Backend {
 public:
  mutable int to_host = 0, to_device = 0;

  const char* name() const override { return "remote"; }
  bool on_device() const override { return true; }
  Weight matrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    return cpu_backend().matrix(type, rows, cols, data);
  }
  Weight table(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data) const override {
    return cpu_backend().table(type, rows, cols, data);
  }
  std::unique_ptr<LayerOps> ops() const override { return std::make_unique<Ops>(*this); }

 private:
  class Ops final : public Forwarding {
   public:
    explicit Ops(const Remote& r) : r_(r) {}
    bool on_device() const override { return true; }
    Tensor shape(TensorBuf& buf, int rows, int cols) override {
      std::vector<float>& m = mem_[&buf];
      const size_t n = size_t(rows) * size_t(cols);
      if (m.size() < n) m.assign(n, std::numeric_limits<float>::quiet_NaN());
      return {m.data(), rows, cols};
    }
    void to_host(Tensor src, float* dst) override {
      ++r_.to_host;
      std::memcpy(dst, src.data, src.size() * sizeof(float));
    }
    void to_device(const float* src, Tensor dst) override {
      ++r_.to_device;
      std::memcpy(dst.data, src, dst.size() * sizeof(float));
    }

   private:
    const Remote& r_;
    std::map<const TensorBuf*, std::vector<float>> mem_;
  };
};

std::vector<float> run(const LlamaModel& m, Workspace& ws) {
  ContiguousKv kv(m.config().kv_shape(), 64);
  Batch b;
  for (int t = 0; t < 9; ++t) b.add(3 + 5 * t, t, 0, t % 4 == 0);
  std::vector<float> logits;
  m.forward(b, kv, ws, logits);
  return logits;
}

TEST(LayerOps, TheForwardPassRunsOnTheBackendItWasGiven) {
  for (const char* arch : {"llama3", "qwen2", "qwen3", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string path = test::tiny_model(std::string("ops_") + arch, test::tiny_arch_shape(arch));
    Recording rec;
    const auto on_rec = LlamaModel::load(path, rec);
    const auto on_cpu = LlamaModel::load(path);
    EXPECT_STREQ(on_rec->backend().name(), "recording");
    EXPECT_STREQ(on_cpu->backend().name(), "cpu");
    Workspace ws1, ws2;
    const std::vector<float> a = run(*on_rec, ws1), b = run(*on_cpu, ws2);
    ASSERT_EQ(a.size(), 3u * size_t(on_cpu->config().n_vocab));  // rows 0, 4 and 8
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    const LlamaConfig& c = on_cpu->config();
    const int L = c.n_layers;
    const bool biases = !on_cpu->layers()[0].bq.empty(), qk_norm = !on_cpu->layers()[0].q_norm.empty();
    const bool post = !on_cpu->layers()[0].attn_post_norm.empty();
    // Packed by the backend: 7 matrices per layer and the head; looked up: the embedding.
    EXPECT_EQ(rec.calls["matrix"], 7 * L + 1);
    EXPECT_EQ(rec.calls["table"], 1);
    EXPECT_EQ(rec.calls["embed"], 1);
    EXPECT_EQ(rec.calls["matmul"], 7 * L);
    EXPECT_EQ(rec.calls["matmul_head"], 1);
    EXPECT_EQ(rec.calls["rmsnorm"], L * (2 + (qk_norm ? 2 : 0) + (post ? 2 : 0)) + 1);
    EXPECT_EQ(rec.calls["rope"], 2 * L);
    EXPECT_EQ(rec.calls["add_bias"], biases ? 3 * L : 0);
    EXPECT_EQ(rec.calls["scale"], c.q_scale != 1.0f ? L : 0);
    EXPECT_EQ(rec.calls["add"], 2 * L);
    EXPECT_EQ(rec.calls["gated_ffn"], L);
    EXPECT_EQ(rec.calls["copy_rows"], 1);
  }
}

// The device path of the forward pass, on the CPU: a backend whose tensors
// are elsewhere, with the KV store in host memory, gives the CPU's logits
// bit for bit, its rows crossing as they must: per layer q, k and v to the
// host and the attention's output back, and the logits at the end.
TEST(LayerOps, ADeviceBackendsRowsCrossToAHostKvStore) {
  for (const char* arch : {"llama3", "gemma3", "qwen3moe", "gpt-oss"}) {
    SCOPED_TRACE(arch);
    const std::string path = test::tiny_model(std::string("ops_") + arch, test::tiny_arch_shape(arch));
    Remote remote;
    const auto on_remote = LlamaModel::load(path, remote);
    const auto on_cpu = LlamaModel::load(path);
    Workspace ws1, ws2;
    const std::vector<float> a = run(*on_remote, ws1), b = run(*on_cpu, ws2);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
    const int L = on_cpu->config().n_layers;
    EXPECT_EQ(remote.to_host, 3 * L + 1);
    EXPECT_EQ(remote.to_device, L);
    // A profiled pass takes the same path.
    OpProfile p;
    ws1.profile = &p;
    const std::vector<float> c = run(*on_remote, ws1);
    EXPECT_EQ(std::memcmp(a.data(), c.data(), a.size() * sizeof(float)), 0);
  }
}

// A profiled pass (Workspace::profile) computes the same bits and counts
// each kind of call as the recording backend does; the matmuls' weight bytes
// are every matrix's and the head's, once.
TEST(OpProfile, AProfiledPassIsTheSamePassTimed) {
  const std::string path = test::tiny_model("ops_llama3", test::tiny_arch_shape("llama3"));
  const auto m = LlamaModel::load(path);
  Workspace plain, timed;
  OpProfile p;
  timed.profile = &p;
  const std::vector<float> a = run(*m, plain), b = run(*m, timed);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  const int L = m->config().n_layers;
  auto calls = [&](ProfOp op) { return p.calls[int(op)]; };
  EXPECT_EQ(calls(ProfOp::kEmbed), 1u);
  EXPECT_EQ(calls(ProfOp::kMatmul), uint64_t(4 * L));  // q/k/v together, o, gate/up together, down
  EXPECT_EQ(calls(ProfOp::kHead), 1u);
  EXPECT_EQ(calls(ProfOp::kNorm), uint64_t(2 * L + 1));
  EXPECT_EQ(calls(ProfOp::kRope), uint64_t(L + 1));  // q and k per layer in one call, and the angle tables
  // The FFN per layer, the last layer's residual and the row copy (the other
  // residuals are fused with the norms after them: add_rmsnorm).
  EXPECT_EQ(calls(ProfOp::kElementwise), uint64_t(L + 2));
  EXPECT_EQ(calls(ProfOp::kPlan), 1u);
  EXPECT_EQ(calls(ProfOp::kKvStore), uint64_t(L));
  EXPECT_EQ(calls(ProfOp::kAttention), uint64_t(L));
  double bytes = double(m->output().rows) * double(m->output().row_bytes);
  for (const LlamaLayer& l : m->layers())
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      bytes += double(w->rows) * double(w->row_bytes);
  EXPECT_DOUBLE_EQ(p.weight_bytes, bytes);
  for (int i = 0; i < kProfOps; ++i) EXPECT_GE(p.seconds[i], 0.0) << prof_op_name(ProfOp(i));
  EXPECT_GT(p.total(), 0.0);
  OpProfile twice = p;
  twice += p;
  EXPECT_EQ(twice.calls[int(ProfOp::kMatmul)], 2 * calls(ProfOp::kMatmul));
  EXPECT_DOUBLE_EQ(twice.total(), 2 * p.total());
  EXPECT_STREQ(prof_op_name(ProfOp::kKvStore), "kv_store");
}

}  // namespace
}  // namespace cs
