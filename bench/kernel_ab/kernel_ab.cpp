// Two versions of the AVX-512 block kernel and of attention.cpp (A = a git
// revision, B = the working tree; see kernel_ab.sh) timed in one process:
// the block kernel on one cache-resident chunk and the Table 3 cell at
// n_p = n_s = 4096, A and B alternating within every round, best time of each
// over all rounds. Best-of over interleaved rounds is what resolves a few per
// cent on a host whose speed drifts by tens of per cent within seconds.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attn/attention.h"
#include "attn/block.h"
#include "attn/state.h"
#include "base/error.h"
#include "base/f16.h"
#include "kv/prefix_tree.h"

namespace A {
#include "A/attn/block_avx512.cpp"
#include "A/attn/attention.cpp"
void cs::kernel(const ::cs::BlockJob& j) { block_entry<Ops512>(j); }
void block(const ::cs::BlockJob& j) { block_entry<Ops512>(j); }
}  // namespace A
namespace B {
#include "B/attn/block_avx512.cpp"
#include "B/attn/attention.cpp"
void cs::kernel(const ::cs::BlockJob& j) { block_entry<Ops512>(j); }
void block(const ::cs::BlockJob& j) { block_entry<Ops512>(j); }
}  // namespace B

namespace {
using namespace cs;

__attribute__((noinline)) float fma_loop(long iters) {
  __m512 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < iters; ++k)
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_fmadd_ps(a[i], x, y);
  __m512 s = a[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
volatile float sink;

double probe(long iters, int threads) {
  const double t0 = now();
#pragma omp parallel num_threads(threads)
  { sink = sink + fma_loop(iters); }
  return double(threads) * double(iters) * 12 * 32 / (now() - t0) / 1e9;
}

// One measured case: run(0) is A, run(1) is B.
struct Case {
  std::string name;
  int threads;
  double flops;
  std::function<void(int)> run;
  double best[2] = {1e30, 1e30};
};

// The block kernel on one fp16 or fp32 chunk (c = 64, d = 128), nq rows.
struct BlockData {
  std::vector<uint16_t> kt16, v16;
  std::vector<float> kt32, v32, q, o, m, l;
  std::vector<int> limit;
  BlockJob job;
  BlockData(int nq, int type) {
    const int c = 64, d = 128;
    kt16.resize(size_t(c) * d);
    v16.resize(kt16.size());
    for (size_t i = 0; i < kt16.size(); ++i) {
      kt16[i] = f32_to_f16(float(int(i * 2654435761u % 2001) - 1000) / 500);
      v16[i] = f32_to_f16(float(int(i * 40503u % 2001) - 1000) / 1000);
      kt32.push_back(f16_to_f32(kt16[i]));
      v32.push_back(f16_to_f32(v16[i]));
    }
    q.assign(size_t(nq) * d, 0.01f);
    o.assign(q.size(), 0.0f);
    m.assign(size_t(nq), -INFINITY);
    l.assign(size_t(nq), 0.0f);
    limit.assign(size_t(nq), c);
    job.q = q.data();
    job.q_stride = d;
    job.nq = nq;
    job.kt = type ? reinterpret_cast<const uint8_t*>(kt16.data()) : reinterpret_cast<const uint8_t*>(kt32.data());
    job.v = type ? reinterpret_cast<const uint8_t*>(v16.data()) : reinterpret_cast<const uint8_t*>(v32.data());
    job.kv_type = type;
    job.c = c;
    job.d = d;
    job.limit = limit.data();
    job.o = o.data();
    job.o_stride = d;
    job.m = m.data();
    job.l = l.data();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  std::vector<Case> cases;
  std::vector<std::unique_ptr<BlockData>> blocks;
  for (int type : {1, 0})
    for (int nq : {8, 32, 64}) {
      blocks.push_back(std::make_unique<BlockData>(nq, type));
      BlockData* b = blocks.back().get();
      cases.push_back({std::string(type ? "block f16" : "block f32") + " rows " + std::to_string(nq), 1,
                       50 * 4.0 * nq * 64 * 128, [b](int v) {
                         for (int i = 0; i < 50; ++i) (v ? B::block : A::block)(b->job);
                       }});
    }
  // Table 3 cell: b = 32, h = 32, d = 128, c = 64, fp16, all 4096 tokens shared.
  const int nb = 32, h = 32, d = 128, n = 4096;
  const KvLayout L{1, h, d, 64, KvType::kF16};
  auto tree = std::make_unique<PrefixTree>(L, L.chunk_bytes() * size_t(n / 64 + 40));
  std::vector<int32_t> prompt(n);
  for (int i = 0; i < n; ++i) prompt[size_t(i)] = i;
  for (int s = 0; s < nb; ++s) {
    int matched = 0;
    if (!tree->join(s, prompt, &matched).ok() ||
        !tree->append(s, std::span<const int32_t>(prompt).subspan(size_t(matched))).ok())
      return 1;
  }
  auto ctx = tree->context();
  std::vector<uint16_t> noise(L.chunk_bytes() / 2);
  int ci = 0;
  for (ChunkId c : tree->chunks_of(0)) {
    for (size_t i = 0; i < noise.size(); ++i)
      noise[i] = f32_to_f16(float(int((i + 7919u * unsigned(ci)) * 2654435761u % 2001) - 1000) / 500);
    std::memcpy(tree->pool().data(c), noise.data(), L.chunk_bytes());
    ++ci;
  }
  std::vector<float> q(size_t(nb) * h * d), out[2];
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 40503u % 2001) - 1000) / 1000;
  out[0].resize(q.size());
  out[1].resize(q.size());
  AttnProblem p;
  p.tree = tree.get();
  p.ctx = ctx.get();
  p.n_heads = h;
  p.q = q.data();
  for (int threads : {1, 2})
    cases.push_back({"TPP cell 4096/4096", threads, 4.0 * nb * h * n * d, [&p, &out](int v) {
                       p.out = out[v].data();
                       if (v) B::cs::attn_tpp(p, {});
                       else A::cs::attn_tpp(p, {});
                     }});
  double peak[3] = {0, 0, 0};
  for (int r = 0; r < rounds; ++r)
    for (Case& c : cases) {
      omp_set_num_threads(c.threads);
      for (int i = 0; i < 3; ++i) peak[c.threads] = std::max(peak[c.threads], probe(200000, c.threads));
      for (int k = 0; k < 2; ++k) {
        const int v = (r + k) % 2;
        c.run(v);  // warm-up
        for (int t = 0; t < 2; ++t) {
          const double t0 = now();
          c.run(v);
          c.best[v] = std::min(c.best[v], now() - t0);
        }
      }
    }
  std::printf("FMA probe: %.1f GFLOP/s (1 thread), %.1f (2 threads)\n", peak[1], peak[2]);
  std::printf("%-22s %7s %6s %6s %6s\n", "case", "threads", "A", "B", "B/A");
  for (const Case& c : cases)
    std::printf("%-22s %7d %5.1f%% %5.1f%% %6.3f\n", c.name.c_str(), c.threads,
                100 * c.flops / c.best[0] / 1e9 / peak[c.threads], 100 * c.flops / c.best[1] / 1e9 / peak[c.threads],
                c.best[0] / c.best[1]);
  double diff = 0;
  for (size_t i = 0; i < out[0].size(); ++i) diff = std::max(diff, double(std::fabs(out[0][i] - out[1][i])));
  std::printf("TPP cell: max |A - B| = %.3g\n", diff);
}
