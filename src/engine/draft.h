// Speculative decoding's drafts, from text the server already holds (no
// second model): a sequence's next tokens guessed by prompt lookup, the
// continuation of the latest earlier place where the text's last few tokens
// occur, in the client's prediction (OpenAI's Predicted Outputs) or in the
// sequence's own prompt and output. The engine runs a draft as extra rows of
// its sequence and keeps the longest run the model itself draws
// (engine/step_loop.cpp), so drafts change speed, never tokens.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace cs {

// Where a draft came from: the request's prediction, what the prefix tree
// holds after the same text (another request's output), or the sequence's
// own prompt and output.
enum class DraftSource { kNone, kPrediction, kTree, kContext };
inline constexpr int kDraftSources = 4;
inline constexpr DraftSource kDraftKinds[] = {DraftSource::kPrediction, DraftSource::kTree, DraftSource::kContext};
const char* draft_source_name(DraftSource s);

// Up to k tokens that followed, in `corpus`, the occurrences of the longest
// suffix of `text` of max_n down to min_n tokens (an occurrence that is the
// suffix itself, at the corpus's end, does not count): the continuation most
// of them agree on, token by token (a tie: the latest's), as text that
// repeats itself (a document's sections, a tool call's keys) goes on as it
// usually did; or with `near` >= 0 the one whose continuation starts nearest
// that index (a prediction: the place the output has reached in it). Empty
// if none.
std::vector<int32_t> lookup_draft(std::span<const int32_t> corpus, std::span<const int32_t> text, int k,
                                  int min_n, int max_n, int near = -1);

// A sequence's own text indexed by its 2-grams, so that prompt lookup in a
// long context reads the occurrences of the text's last two tokens, latest
// first, not the whole context (a 32K-token prompt: ~12 scans of 32K tokens
// a step). draft() gives what lookup_draft(tokens, tokens, k, 2, max_n)
// gives. Tokens only ever append; sync() indexes the new ones.
class ContextIndex {
 public:
  void sync(std::span<const int32_t> tokens);
  std::vector<int32_t> draft(std::span<const int32_t> tokens, int k, int max_n) const;
  // Occurrences of a 2-gram read per draft at most (the latest ones), so a
  // text of one repeated token costs no more than this.
  static constexpr int kMaxOccurrences = 4096;

 private:
  // Chains of 2-gram starts by hash bucket: head_[bucket] the latest start
  // (-1: none), prev_[p] the start before p in p's bucket.
  std::vector<int> head_, prev_;
  int indexed_ = 0;  // 2-grams [0, indexed_) are in the chains
  static size_t bucket(int32_t a, int32_t b, size_t mask);
  void insert(std::span<const int32_t> tokens, int p);
};

// How long a sequence's drafts are: the length that draws the most tokens
// per unit of step time, given how its recent drafts fared. A draft of k
// tokens, each taken with probability p while the ones before it were,
// yields (1 - p^(k+1)) / (1 - p) tokens (the taken ones and the model's
// own next) for a step that costs 1 + kRowCost * k steps of one row; p
// follows the acceptance of the sequence's drafts (taken / (taken + 1 miss),
// weighted kRecent to the latest). After kMissesToRest drafts in a row with
// nothing taken, drafting rests for a number of steps that doubles with
// every further miss (at most 64).
class DraftPacer {
 public:
  static constexpr int kMaxDraft = 16, kMissesToRest = 3;
  // A draft row's cost as a fraction of a one-row step: SmolLM2 at 2 threads
  // measures 0.14-0.19 (docs/benchmarks.md, speculative decoding).
  static constexpr double kRowCost = 0.15;
  static constexpr double kRecent = 0.7, kFirstP = 0.8;
  // The length of the next draft (0: rest this step).
  int next();
  void taken(int drafted, int accepted);
  // The best draft length for acceptance p (at least 1).
  static int best_length(double p);

 private:
  double p_ = kFirstP;
  int misses_ = 0, rest_ = 0;
};

}  // namespace cs
