// Shared by the engine tests: run requests through an engine and compare
// completions across engines.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "engine/engine.h"

namespace cs::test {

inline EngineOptions engine_options(AttnMode mode, int max_batch, int threads, size_t kv_memory = 0) {
  EngineOptions o;
  o.mode = mode;
  o.max_batch = max_batch;
  o.threads = threads;
  o.kv_memory = kv_memory;
  return o;
}

// Submits every request at once, then waits for all; results in order.
inline std::vector<Result> run_all(Engine& e, std::vector<Request> reqs) {
  std::vector<RequestHandle> hs;
  for (auto& r : reqs) hs.push_back(e.submit(std::move(r)));
  std::vector<Result> out;
  for (auto& h : hs) out.push_back(h.wait());
  return out;
}

// Each request alone: the batch-1 reference.
inline std::vector<Result> run_each(Engine& e, std::vector<Request> reqs) {
  std::vector<Result> out;
  for (auto& r : reqs) out.push_back(e.submit(std::move(r)).wait());
  return out;
}

// Greedy tokens of every completion must be identical.
inline void expect_same_tokens(const std::vector<Result>& a, const std::vector<Result>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].completions.size(), b[i].completions.size()) << what;
    for (size_t c = 0; c < a[i].completions.size(); ++c) {
      EXPECT_EQ(a[i].completions[c].tokens, b[i].completions[c].tokens) << what << ": request " << i << " completion " << c;
      EXPECT_EQ(a[i].completions[c].reason, b[i].completions[c].reason) << what << ": request " << i;
    }
  }
}

}  // namespace cs::test
