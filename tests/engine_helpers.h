// Shared by the engine tests: run requests through an engine and compare
// completions across engines.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
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

// A system prompt of `sys` tokens shared by every request, then a private
// tail; ids from the tiny vocabulary (tiny_model.h).
inline std::vector<Request> shared_prompts(int n, int sys, int max_tokens, int tail = 7) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    for (int t = 0; t < sys; ++t) r.prompt.push_back(3 + (t * 31) % 256);
    for (int t = 0; t < tail + i % 5; ++t) r.prompt.push_back(3 + (i * 17 + t * 7) % 268);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    out.push_back(r);
  }
  return out;
}

// Text of n words from the tiny vocabulary.
inline std::string words(int n, int salt) {
  static const char* w[] = {"the", "a", "cat", "dog", "sat", "on", "mat", "is"};
  std::string out;
  for (int i = 0; i < n; ++i) out += std::string(i ? " " : "") + w[(i * 7 + salt) % 8];
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

// Serves `reqs` batched on a fresh engine per mode, waits until it is idle,
// and checks every request's greedy tokens against `ref`; prints and returns
// how many prompt tokens each mode computed, of how many.
inline void expect_modes_agree(const LlamaModel& m, const std::vector<Request>& reqs, const std::vector<Result>& ref,
                               std::initializer_list<AttnMode> modes, EngineOptions (*opts)(AttnMode, int),
                               const std::string& what) {
  for (AttnMode mode : modes) {
    Engine e(m, opts(mode, 32));
    expect_same_tokens(run_all(e, reqs), ref, what + ", " + attn_mode_name(mode) + ", batch " + std::to_string(reqs.size()));
    ASSERT_TRUE(e.wait_idle(std::chrono::seconds(120)));
    const EngineStats s = e.stats();
    // Sharing modes compute the shared text once; `none` all of it.
    if (mode != AttnMode::kNone) {
      EXPECT_LT(s.prefill_tokens, s.prompt_tokens / 4) << attn_mode_name(mode);
    } else {
      EXPECT_EQ(s.prefill_tokens, s.prompt_tokens);
    }
    std::printf("[%s] %s: %llu of %llu prompt tokens computed, peak %d chunks\n", what.c_str(), attn_mode_name(mode),
                (unsigned long long)s.prefill_tokens, (unsigned long long)s.prompt_tokens, s.kv.peak);
  }
}

}  // namespace cs::test
