// `chunkserve bench attention --device cuda` (cli/bench_attention_cuda.cpp).
#pragma once
#include <string>
#include <vector>

namespace cs {

struct CudaBenchOptions {
  int reps = 50, heads = 32, dim = 128, chunk = 64, batch = 32;
  int window_keys = 512;  // TileOptions::window_keys of every plan
  int decode_stages = 2;  // CudaAttention::Options::decode_stages
  bool quick = false, table3_only = false;
  std::vector<int> nps;
  std::string json;
};

// Throws cs::Error when no usable GPU is present.
int run_bench_attention_cuda(const CudaBenchOptions& o);

}  // namespace cs
