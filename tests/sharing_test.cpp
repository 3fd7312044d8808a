// Sharing KV must not change results: the real model run through the
// prefix-aware cache and the attention kernels (prefixes shared, their
// prefill skipped) against the plain contiguous cache, sequence by sequence.
#include <gtest/gtest.h>

#include "cache/contiguous_kv.h"
#include "cache/prefix_kv.h"
#include "engine/sampler.h"
#include "model/llama.h"

namespace cs {
namespace {

const LlamaModel& model() {
  static std::unique_ptr<LlamaModel> m = LlamaModel::load(CS_MODEL);
  return *m;
}

std::vector<std::vector<int32_t>> prompts() {
  const Tokenizer& tok = model().tokenizer();
  const std::string system =
      "<|im_start|>system\nYou are a careful assistant for a bookstore. Answer in one short "
      "sentence. The store opens at nine, closes at six, sells new and used books, orders any "
      "title within three days, and offers a ten percent discount to students and teachers. "
      "Gift cards never expire. Returns are accepted within thirty days with a receipt.<|im_end|>\n";
  // Two questions with a long common start: below the prefix every
  // sequence shares, a deeper one only these two share (a conversation's
  // earlier turns, say), whole chunks of it in the same part of the walk:
  // nested runs, which two-phase partition chains (attn/plan.h).
  const std::string story =
      "I am planning a reading club for my neighbours. We meet every other Thursday evening, we are "
      "about twelve people, most of us retired, and we like long historical novels, travel writing and "
      "the occasional detective story. We would like to buy our books together from one shop, ideally "
      "one close to the library, since several of us do not drive any more and the buses stop there. "
      "Last year we read eleven books together and ordered them from three different shops. ";
  std::vector<std::vector<int32_t>> out;
  for (const std::string& q : std::vector<std::string>{"When do you open?", "Can teachers get a discount?", "Do gift cards expire?",
                        "Do gift cards expire?",  // the same prompt twice (n > 1 choices share it whole)
                        story + "Can you order twelve copies of one title?", story + "Is there a room we could use?"})
    out.push_back(tok.encode(system + "<|im_start|>user\n" + q + "<|im_end|>\n<|im_start|>assistant\n", true));
  out.push_back(tok.encode("Once upon a time", false));  // shares nothing
  return out;
}

struct GreedyRun {
  std::vector<std::vector<int32_t>> tokens;  // generated, per sequence
  std::vector<std::vector<float>> gaps;      // top-2 gap at each step
  int prefilled = 0;                         // prompt tokens actually computed
  std::vector<float> logits;                 // every step's logits, in order
};

constexpr int kSteps = 24;

void record(GreedyRun& run, size_t s, const float* l, int n_vocab) {
  std::vector<float> row(l, l + n_vocab);
  const int32_t best = argmax(row);
  float second = -INFINITY;
  for (int v = 0; v < n_vocab; ++v)
    if (v != best) second = std::max(second, row[size_t(v)]);
  run.tokens[s].push_back(best);
  run.gaps[s].push_back(row[size_t(best)] - second);
  run.logits.insert(run.logits.end(), row.begin(), row.end());
}

// Each prompt alone on the plain contiguous cache.
GreedyRun contiguous(KvType type) {
  const auto ps = prompts();
  const LlamaConfig& c = model().config();
  Workspace ws;
  std::vector<float> logits;
  GreedyRun run;
  run.tokens.resize(ps.size());
  run.gaps.resize(ps.size());
  for (size_t s = 0; s < ps.size(); ++s) {
    ContiguousKv kv(c.kv_shape(), 1024, type);
    Batch b;
    for (size_t i = 0; i < ps[s].size(); ++i) b.add(ps[s][i], int32_t(i), 0, i + 1 == ps[s].size());
    model().forward(b, kv, ws, logits);
    run.prefilled += b.size();
    record(run, s, logits.data(), c.n_vocab);
    for (int k = 1; k < kSteps; ++k) {
      Batch d;
      d.add(run.tokens[s].back(), int32_t(ps[s].size()) + k - 1, 0, true);
      model().forward(d, kv, ws, logits);
      record(run, s, logits.data(), c.n_vocab);
    }
  }
  return run;
}

// All prompts in one chunk cache (shared = true: one tree, prefixes shared and
// their prefill skipped, all sequences decoding in one batch) or each in a
// tree of its own (sharing off), with the given kernel.
GreedyRun chunked(bool shared, AttnPath path, KvType type) {
  const auto ps = prompts();
  const LlamaConfig& c = model().config();
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, 64, type};
  Workspace ws;
  std::vector<float> logits;
  GreedyRun run;
  run.tokens.resize(ps.size());
  run.gaps.resize(ps.size());
  std::vector<std::unique_ptr<PrefixKv>> kvs;
  for (size_t s = 0; s < (shared ? 1 : ps.size()); ++s)
    kvs.push_back(std::make_unique<PrefixKv>(layout, layout.chunk_bytes() * 32, c.n_heads, path));
  std::vector<std::vector<float>> last(ps.size());
  // Join with the prompt but its last token (whose logits we need); prefill
  // only what the tree did not already hold.
  for (size_t s = 0; s < ps.size(); ++s) {
    PrefixKv& kv = *kvs[shared ? 0 : s];
    int matched;
    if (!kv.join(SeqId(s), std::span(ps[s]).first(ps[s].size() - 1), &matched).ok()) std::abort();
    Batch b;
    for (size_t i = size_t(matched); i < ps[s].size(); ++i)
      b.add(ps[s][i], int32_t(i), int32_t(s), i + 1 == ps[s].size());
    model().forward(b, kv, ws, logits);
    run.prefilled += b.size();
    last[s] = logits;
  }
  for (size_t s = 0; s < ps.size(); ++s) record(run, s, last[s].data(), c.n_vocab);
  for (int k = 1; k < kSteps; ++k) {
    if (shared) {  // all sequences decode together
      Batch d;
      for (size_t s = 0; s < ps.size(); ++s)
        d.add(run.tokens[s].back(), int32_t(ps[s].size()) + k - 1, int32_t(s), true);
      model().forward(d, *kvs[0], ws, logits);
      for (size_t s = 0; s < ps.size(); ++s) last[s].assign(logits.begin() + long(s) * c.n_vocab, logits.begin() + long(s + 1) * c.n_vocab);
    } else {
      for (size_t s = 0; s < ps.size(); ++s) {
        Batch d;
        d.add(run.tokens[s].back(), int32_t(ps[s].size()) + k - 1, int32_t(s), true);
        model().forward(d, *kvs[s], ws, logits);
        last[s] = logits;
      }
    }
    for (size_t s = 0; s < ps.size(); ++s) record(run, s, last[s].data(), c.n_vocab);
  }
  return run;
}

// Where two runs' greedy tokens first differ, or -1.
void report(const GreedyRun& a, const GreedyRun& b, const char* what, float near_tie) {
  for (size_t s = 0; s < a.tokens.size(); ++s) {
    size_t i = 0;
    while (i < a.tokens[s].size() && a.tokens[s][i] == b.tokens[s][i]) ++i;
    if (i == a.tokens[s].size()) continue;
    const float gap = std::min(a.gaps[s][i], b.gaps[s][i]);
    std::printf("[sharing] %s: sequence %zu diverges at step %zu, top-2 gap %.5f\n", what, s, i, gap);
    EXPECT_LT(gap, near_tie) << what << " sequence " << s << " step " << i;
  }
}

// The guarantee: sharing KV changes nothing. With the prefix shared (and its
// prefill skipped) the per-sequence and two-phase kernels produce the very
// same logits, bit for bit, as the same cache with sharing off.
TEST(Sharing, SharingOnOrOffGivesIdenticalLogits) {
  for (KvType type : {KvType::kF32, KvType::kF16}) {
    const GreedyRun off = chunked(false, AttnPath::kPerSequence, type);
    for (auto [path, name] : {std::pair{AttnPath::kTpp, "two-phase"}, {AttnPath::kPerSequence, "per-sequence"}}) {
      const GreedyRun on = chunked(true, path, type);
      EXPECT_EQ(on.tokens, off.tokens) << name << " " << kv_type_name(type);
      EXPECT_TRUE(on.logits == off.logits) << name << " " << kv_type_name(type) << ": logits differ";
      // The shared system prompt was prefilled once, not three times.
      EXPECT_LT(on.prefilled, off.prefilled - 100) << name;
      std::printf("[sharing] %s %s: %d prompt tokens computed with sharing, %d without; logits identical\n", name,
                  kv_type_name(type), on.prefilled, off.prefilled);
    }
  }
}

// Paths that round differently from the contiguous cache (chunked online
// softmax, relay's log-sum-exp fusion) agree with it up to this model's noise
// floor (see conformance_test.cpp): greedy tokens may part only at a near-tie.
TEST(Sharing, OtherPathsAgreeWithTheContiguousCacheUpToNearTies) {
  const GreedyRun plain = contiguous(KvType::kF32), half = contiguous(KvType::kF16);
  const GreedyRun tpp = chunked(true, AttnPath::kTpp, KvType::kF32);
  const GreedyRun relay = chunked(true, AttnPath::kRelay, KvType::kF32);
  report(plain, tpp, "two-phase vs contiguous", 0.25f);
  report(plain, relay, "relay vs contiguous", 0.25f);
  // fp16 K/V (both caches' default) round the same values the same way.
  report(half, chunked(true, AttnPath::kTpp, KvType::kF16), "two-phase vs contiguous, f16", 0.25f);
  report(plain, half, "contiguous f16 vs f32", 0.25f);
  report(tpp, relay, "relay vs two-phase", 0.25f);
}

}  // namespace
}  // namespace cs
