// Two versions of one ISA's block kernel and of attention.cpp (A = a git
// revision, B = the working tree; see kernel_ab.sh) timed in one process:
// the block kernel on one cache-resident chunk and the Table 3 cell at
// n_p = n_s = 4096, A and B alternating within every round, best time of each
// over all rounds. Best-of over interleaved rounds is what resolves a few per
// cent on a host whose speed drifts by tens of per cent within seconds; the
// median of the per-round B/A ratios says whether a change also holds up
// while neighbours load the host (a gain that only shows when it is quiet).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
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
#include "attn_fixtures.h"
#include "base/error.h"
#include "cli/roofline.h"

namespace A {
#include "A/attn/block_kernel.cpp"
#include "A/attn/attention.cpp"
void cs::kernel(const ::cs::BlockJob& j) { block_entry<OPS>(j); }
void block(const ::cs::BlockJob& j) { block_entry<OPS>(j); }
}  // namespace A
namespace B {
#include "B/attn/block_kernel.cpp"
#include "B/attn/attention.cpp"
void cs::kernel(const ::cs::BlockJob& j) { block_entry<OPS>(j); }
void block(const ::cs::BlockJob& j) { block_entry<OPS>(j); }
}  // namespace B

namespace {
using namespace cs;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One measured case: run(0) is A, run(1) is B.
struct Case {
  std::string name;
  int threads;
  double flops;
  std::function<void(int)> run;
  double best[2] = {1e30, 1e30};
  std::vector<double> ratios;  // per round: A's best / B's best
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  std::vector<Case> cases;
  std::vector<std::unique_ptr<bench::BlockFixture>> blocks;
  for (KvType type : {KvType::kF16, KvType::kF32})
    for (int nq : {1, 2, 3, 8, 32}) {
      blocks.push_back(std::make_unique<bench::BlockFixture>(nq, type));
      bench::BlockFixture* b = blocks.back().get();
      cases.push_back({std::string(type == KvType::kF16 ? "block f16" : "block f32") + " rows " + std::to_string(nq), 1,
                       50 * b->flops(), [b](int v) {
                         for (int i = 0; i < 50; ++i) (v ? B::block : A::block)(b->job);
                       }});
    }
  // The same cache-resident chunk on both threads at once (each its own copy):
  // how the kernel scales when nothing is shared but the core pair.
  blocks.push_back(std::make_unique<bench::BlockFixture>(32, KvType::kF16));
  blocks.push_back(std::make_unique<bench::BlockFixture>(32, KvType::kF16));
  bench::BlockFixture* pair[2] = {blocks[blocks.size() - 2].get(), blocks.back().get()};
  cases.push_back({"block f16 rows 32", 2, 2 * 400 * pair[0]->flops(), [pair](int v) {
#pragma omp parallel num_threads(2)
                     for (int i = 0; i < 400; ++i) (v ? B::block : A::block)(pair[omp_get_thread_num()]->job);
                   }});
  // The Table 3 cell, and a 512-token one whose K/V (8 MB) stays in L3: the
  // gap between the two is time spent waiting on DRAM.
  // Figure 4's cell (2048 shared + 64 own tokens per sequence), where phase
  // two walks one private chunk per sequence and KV head; and 1024 own tokens
  // each with nothing shared (per-sequence attention, memory-bound: its
  // fraction of the FMA peak says little, its B/A does).
  // Last, two GQA shapes decoding without sharing, past L3: SmolLM2's (3 KV
  // heads, 3 query heads each, d = 64; 4096 own tokens; three-row jobs) and
  // 8 KV heads x 2 (d = 128; 2048 own tokens; two-row jobs). And one
  // SmolLM2 sequence decoding alone (3 walks for the threads; 2.4 MB, so
  // L3-resident here, unlike a real model's 30 layers).
  bench::SharedCell cell(32, 32, 4096), small(32, 32, 512), own(32, 32, 2048, 64), alone(32, 32, 0, 1024),
      smol(32, 3, 0, 4096, 3, 64), gqa2(32, 8, 0, 2048, 2, 128),
      lone(1, 3, 0, 3072, 3, 64);
  // One cell on one path, `calls` calls per timing (small cells); A and B
  // write their own outputs, compared at the end.
  struct CellRun {
    const char* name;
    const bench::SharedCell* cell;
    int calls;
    bool per_seq;  // attn_per_sequence instead of attn_tpp
    AttnProblem p;
    std::vector<float> out[2];
    AttnWorkspace ws[2];  // each variant keeps its own kernel types in it
    bool ran = false;  // CASES may leave it out
  };
  std::deque<CellRun> runs;  // stable addresses for the cases' lambdas
  auto add = [&runs](const char* name, bench::SharedCell& c, int calls, bool per_seq = false) -> CellRun& {
    return runs.emplace_back(CellRun{name, &c, calls, per_seq, c.problem(), {c.out, c.out}, {}});
  };
  const CellRun& tpp_cell = add("TPP cell 4096/4096", cell, 1);
  add("TPP cell 512/512", small, 8);
  add("TPP cell 2048+64 own", own, 2);
  // Per-sequence attention on the 4096 cell's shared chunks: TPP's
  // "PagedAttn*" baseline (its result is checked against TPP's bits below).
  const CellRun& per_seq_cell = add("per-seq cell 4096/4096", cell, 1, true);
  add("no sharing 0+1024 own", alone, 1);
  add("SmolLM2 shape 0+4096", smol, 2);
  add("GQA 2 d128 0+2048", gqa2, 1);
  add("SmolLM2 lone 0+3072", lone, 40);
  for (int threads : {1, 2})
    for (CellRun& r : runs)
      cases.push_back({r.name, threads, r.calls * r.cell->flops(), [&r](int v) {
                         r.p.out = r.out[v].data();
                         r.p.ws = &r.ws[v];
                         r.ran = true;
                         for (int i = 0; i < r.calls; ++i) {
                           if (r.per_seq) v ? B::cs::attn_per_sequence(r.p) : A::cs::attn_per_sequence(r.p);
                           else v ? B::cs::attn_tpp(r.p) : A::cs::attn_tpp(r.p);
                         }
                       }});
  // CASES="a|b" keeps only the cases whose name contains a or b (e.g.
  // CASES="TPP cell 4096|rows 32"), for more rounds of the few that matter.
  if (const char* only = std::getenv("CASES")) {
    std::vector<std::string> keep;
    for (std::string s = only; !s.empty();) {
      const size_t bar = s.find('|');
      keep.push_back(s.substr(0, bar));
      s = bar == std::string::npos ? "" : s.substr(bar + 1);
    }
    std::erase_if(cases, [&keep](const Case& c) {
      return std::none_of(keep.begin(), keep.end(), [&c](const std::string& k) { return c.name.find(k) != std::string::npos; });
    });
  }
  double peak[3] = {0, 0, 0};
  for (int r = 0; r < rounds; ++r)
    for (Case& c : cases) {
      omp_set_num_threads(c.threads);
      for (int i = 0; i < 3; ++i) peak[c.threads] = std::max(peak[c.threads], fma_probe_gflops(200000));
      double round_best[2] = {1e30, 1e30};
      for (int k = 0; k < 2; ++k) {
        const int v = (r + k) % 2;
        c.run(v);  // warm-up
        for (int t = 0; t < 2; ++t) {
          const double t0 = now();
          c.run(v);
          round_best[v] = std::min(round_best[v], now() - t0);
        }
        c.best[v] = std::min(c.best[v], round_best[v]);
      }
      c.ratios.push_back(round_best[0] / round_best[1]);
    }
  std::printf("FMA probe: %.1f GFLOP/s (1 thread), %.1f (2 threads)\n", peak[1], peak[2]);
  std::printf("%-22s %7s %6s %6s %6s %10s\n", "case", "threads", "A", "B", "B/A", "median B/A");
  for (Case& c : cases) {
    std::sort(c.ratios.begin(), c.ratios.end());
    std::printf("%-22s %7d %5.1f%% %5.1f%% %6.3f %10.3f\n", c.name.c_str(), c.threads,
                100 * c.flops / c.best[0] / 1e9 / peak[c.threads], 100 * c.flops / c.best[1] / 1e9 / peak[c.threads],
                c.best[0] / c.best[1], c.ratios[c.ratios.size() / 2]);
  }
  auto max_diff = [](const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
  };
  double diff = 0;
  for (const CellRun& r : runs) diff = std::max(diff, max_diff(r.out[0], r.out[1]));
  std::printf("cells: max |A - B| = %.3g\n", diff);
  if (tpp_cell.ran && per_seq_cell.ran)
    std::printf("4096 cell, B: max |TPP - per-seq| = %.3g\n", max_diff(tpp_cell.out[1], per_seq_cell.out[1]));
}
