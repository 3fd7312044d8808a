// One completion the engine is generating: its tokens (prompt, then what it
// sampled), how many of them have K/V in the cache, its own sampler and its
// text stream. A request with n completions has n sequences (forked from the
// first after its prefill). Engine thread only.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/draft.h"
#include "engine/request_state.h"
#include "engine/sampler.h"
#include "engine/text_stream.h"
#include "kv/kernel_context.h"

namespace cs {

class Sequence {
 public:
  Sequence(SeqId id, std::shared_ptr<RequestState> req, int index, const Tokenizer& tok);

  SeqId id() const { return id_; }
  RequestState& request() const { return *req_; }
  const std::shared_ptr<RequestState>& request_ptr() const { return req_; }
  int index() const { return index_; }

  // Tokens known (prompt + sampled), their positions, and how many of them
  // the cache holds.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& positions() const { return positions_; }
  int cached() const { return cached_; }
  void set_cached(int n) { cached_ = n; }
  int pending() const { return int(tokens_.size()) - cached_; }  // to run through the model
  bool prefilling() const { return pending() > 1; }

  // Prompt Cache: the spans of its prompt served by pinned chunks. A
  // sequence with any lives outside the prefix tree (detached). next_span()
  // is the first one not attached yet (spans().size() when none is left).
  const std::vector<CachedSpan>& spans() const { return request().req.cached; }
  bool detached() const { return !spans().empty(); }
  size_t next_span = 0;
  // Tokens it may compute before the next span must be attached.
  int computable() const {
    return next_span < spans().size() ? spans()[next_span].begin - cached_ : pending();
  }
  // Tokens still to compute (pending, less those spans will serve).
  int to_compute() const {
    int n = pending();
    for (size_t k = next_span; k < spans().size(); ++k) n -= spans()[k].end - spans()[k].begin;
    return n;
  }

  // A copy sampling completion `index` after this one's prefill (n > 1).
  std::unique_ptr<Sequence> fork(SeqId id, int index, const Tokenizer& tok) const;

  // Samples the next token from its logits and streams it. Returns true when
  // the completion ended (end of generation, stop string, max tokens or the
  // context `n_ctx`); finish() has then been called.
  bool sample(std::span<const float> logits, const Tokenizer& tok, int n_ctx);
  // The part of sample() that touches only this sequence (the grammar's
  // mask, the draw, the grammar's advance), done ahead so that the engine
  // can draw every row of a step in parallel; sample() with the same logits
  // then does the rest. The token is the one sample() alone would draw.
  void draw(std::span<const float> logits);
  // The token draw() chose for the coming sample() (-1: none allowed), if it ran.
  std::optional<int32_t> drawn() const { return drawn_; }
  // Whether a grammar constrains it now (request().req.grammar; one with
  // triggers once a trigger is written).
  bool constrained() const { return grammar_.has_value(); }
  // Ends the completion (flushing held-back text unless it stopped on a stop
  // string) and, when it was the request's last, publishes the result.
  void finish(FinishReason reason, const std::string& message = {});

  // Speculative decoding (engine/draft.h): the tokens guessed to follow its
  // last known one, run as extra rows of its next step and then dropped
  // (those the model drew too are sampled as usual); where they came from;
  // how long its drafts are.
  std::vector<int32_t> draft;
  DraftSource draft_source = DraftSource::kNone;
  DraftPacer pacer;
  ContextIndex context_index;  // its tokens by 2-gram, for drafts from its own text
  // The tokens it generated so far (its prompt's excluded).
  std::span<const int32_t> generated() const {
    return std::span(tokens_).subspan(request().req.prompt.size());
  }

  uint64_t admit_order = 0;  // larger = admitted later (preempted first)
  // Fairness (scheduler.h): when it last joined the queue, tokens sampled
  // since it was last admitted, whether it waits for room it lost (front of
  // the queue), whether it waits for its client to read.
  Clock::time_point queued_at = Clock::now();
  int sampled_since_admit = 0;
  bool lost_room = false;
  bool paused = false;
  int pauses = 0;  // times it was paused
  // Tokens it may still sample: max_tokens less what it has sampled.
  int remaining() const {
    return request().req.max_tokens - (int(tokens_.size()) - int(request().req.prompt.size()));
  }
  std::optional<Clock::time_point> last_token;  // when it last sampled
  int preemptions = 0;
  int disk_tokens = 0;  // prompt tokens the disk tier brought into the tree for it

 private:
  std::span<const float> constrain(std::span<const float> logits);
  void mask_none(std::span<const float> logits);
  enum class Triggered { kNo, kStarted, kRefused };
  Triggered try_trigger(int32_t token);
  // A grammar of the answer (Request::grammar_after_thought) waits while a
  // thought goes on. Where the reply may open the thought, its first tokens
  // may be the grammar's or the opening's.
  bool grammar_waits() const { return answer_grammar_ && thought_ == Thought::kIn; }
  bool may_open() const { return answer_grammar_ && thought_ == Thought::kStart; }
  bool overruns_close(int32_t token) const;
  void allow_opening(std::span<uint32_t> bits) const;
  void forbid(int32_t token) {
    if (token >= 0 && size_t(token) / 32 < mask_.size()) mask_[size_t(token) / 32] &= ~(1u << (uint32_t(token) % 32));
  }

  SeqId id_;
  std::shared_ptr<RequestState> req_;
  const Tokenizer* tok_;
  int index_;
  std::vector<int32_t> tokens_;
  std::vector<int32_t> positions_;
  int cached_ = 0;
  Sampler sampler_;
  std::optional<GrammarMatcher> grammar_;  // the request's constraint, where it has one
  std::vector<uint32_t> mask_;
  std::vector<float> masked_;
  bool use_masked_ = false;  // the draw saw masked_, not the raw logits
  // Request::grammar_triggers: the grammar waits (grammar_ empty) until the
  // answer's text (the reply's outside a thought) writes one; the longest
  // trigger's length, and where the next look for one starts.
  bool lazy_ = false;
  std::string answer_text_;
  size_t trigger_span_ = 0;
  size_t trigger_scan_ = 0;
  std::optional<int32_t> drawn_;  // draw() ran for the coming sample()
  bool drawn_forced_ = false;     // and gave a token of the thought's close
  TextStream text_;
  bool stopped_ = false;
  bool sampled_any_ = false;
  // The thought's budget (Request::think_budget) and a grammar that waits
  // for the answer: where the reply is (not tracked, may open a thought, in
  // one, past it), the reply's text as its tokens wrote it (the stream's may
  // hold some back), the thought's tokens so far, where "</think>" is looked
  // for next, and the close still to give instead of samples.
  enum class Thought { kOff, kStart, kIn, kPast } thought_ = Thought::kOff;
  bool answer_grammar_ = false;
  bool grammar_alive_ = true;  // may_open(): the reply so far is the grammar's too
  std::string reply_;
  int thought_tokens_ = 0;
  size_t thought_begin_ = 0;  // where the thought's text starts in the reply's
  size_t thought_scan_ = 0;
  std::vector<int32_t> forced_;
  void track_thought(const std::string& text);
};

}  // namespace cs
