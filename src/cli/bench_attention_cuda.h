// `chunkserve bench attention --device cuda` (cli/bench_attention_cuda.cpp).
#pragma once
#include <string>
#include <vector>

namespace cs {

struct CudaBenchOptions {
  int reps = 50, heads = 32, dim = 128, chunk = 64, batch = 32;
  int window_keys = 512;  // TileOptions::window_keys of every plan
  int decode_stages = 0;  // CudaAttention::Options::decode_stages (0: by the plan)
  bool quick = false, table3_only = false;
  std::vector<int> nps;
  std::vector<int> shared_fractions;  // Table 3's n_s in quarters of n_p (empty: 0, 2, 3, 4)
  std::string json;
};

// Table 3's shared lengths for a prompt of n_p: n_p * q / 4 for each q of
// `quarters` (empty: 0, n_p/2, 3n_p/4, n_p, the paper's).
inline std::vector<int> table3_shared(int n_p, const std::vector<int>& quarters) {
  std::vector<int> out;
  for (int q : quarters.empty() ? std::vector<int>{0, 2, 3, 4} : quarters) out.push_back(n_p * q / 4);
  return out;
}

// Throws cs::Error when no usable GPU is present.
int run_bench_attention_cuda(const CudaBenchOptions& o);

}  // namespace cs
