#include "engine/sequence.h"

#include <algorithm>
#include <limits>
#include <string_view>

namespace cs {
namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

SamplingParams seeded(SamplingParams p, int index) {
  p.seed += uint64_t(index);
  return p;
}

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNoRoom: return "no_room";
  }
  return "?";
}

Sequence::Sequence(SeqId id, std::shared_ptr<RequestState> req, int index, const Tokenizer& tok)
    : id_(id),
      req_(std::move(req)),
      tok_(&tok),
      index_(index),
      tokens_(req_->req.prompt),
      positions_(req_->req.positions),
      sampler_(seeded(req_->req.sampling, index)),
      text_(tok, req_->req.stop) {
  if (positions_.empty()) {
    positions_.resize(tokens_.size());
    for (size_t i = 0; i < positions_.size(); ++i) positions_[i] = int32_t(i);
  }
  const Request& q = req_->req;
  lazy_ = q.grammar && !q.grammar_triggers.empty();
  if (q.grammar && !lazy_) grammar_.emplace(q.grammar);
  for (const Request::Trigger& t : q.grammar_triggers) trigger_span_ = std::max(trigger_span_, t.text.size());
  answer_grammar_ = q.grammar && q.grammar_after_thought;
  if (q.think_budget >= 0 || answer_grammar_) thought_ = q.think_open ? Thought::kIn : Thought::kStart;
}

// The logits with every token the grammar does not allow next at -inf
// (sampling, temperature and logprobs all see the masked distribution).
// A grammar of the answer that waits behind a thought allows any token but
// an end of generation there (the answer must follow).
std::span<const float> Sequence::constrain(std::span<const float> logits) {
  use_masked_ = false;
  if (!grammar_) return logits;
  mask_.resize(size_t(grammar_->mask_words()));
  if (grammar_waits()) {
    std::fill(mask_.begin(), mask_.end(), ~0u);
    for (size_t t = logits.size(); t < mask_.size() * 32; ++t) forbid(int32_t(t));  // past the vocabulary
    for (int32_t e : tok_->end_ids()) forbid(e);
  } else if (grammar_alive_) {
    grammar_->fill_mask(mask_);
  } else {
    std::fill(mask_.begin(), mask_.end(), 0u);
  }
  if (may_open()) allow_opening(mask_);
  masked_.assign(logits.begin(), logits.end());
  apply_mask(masked_, mask_);
  use_masked_ = true;
  return masked_;
}

// The raw logits as masked_ with every token of the vocabulary allowed, so
// that a draw without a grammar can forbid one and draw again.
void Sequence::mask_none(std::span<const float> logits) {
  mask_.assign((logits.size() + 31) / 32, ~0u);
  for (size_t t = logits.size(); t < mask_.size() * 32; ++t) forbid(int32_t(t));
  masked_.assign(logits.begin(), logits.end());
  use_masked_ = true;
}

// Whether `token` writes a trigger of the waiting grammar into the answer's
// text (the earliest, where it writes several): kStarted where the grammar
// takes the text from there on (it constrains the rest of the reply),
// kRefused where it does not (the token is drawn again without it).
Sequence::Triggered Sequence::try_trigger(int32_t token) {
  const std::string text = answer_text_ + tok_->piece(token);
  const size_t first = text.find_first_not_of(" \t\r\n");
  size_t best = std::string::npos, from = 0;
  for (const Request::Trigger& t : req_->req.grammar_triggers) {
    size_t at = std::string::npos;
    if (!t.at_start)
      at = text.find(t.text, trigger_scan_);
    else if (first != std::string::npos && text.compare(first, t.text.size(), t.text) == 0)
      at = first;
    if (at < best) best = at, from = at + t.skip;
  }
  if (best == std::string::npos) return Triggered::kNo;
  GrammarMatcher m(req_->req.grammar);
  if (!m.accept_text(text.substr(from))) return Triggered::kRefused;
  grammar_.emplace(std::move(m));
  grammar_alive_ = true;
  return Triggered::kStarted;
}

std::unique_ptr<Sequence> Sequence::fork(SeqId id, int index, const Tokenizer& tok) const {
  auto s = std::make_unique<Sequence>(id, req_, index, tok);
  s->tokens_ = tokens_;
  s->positions_ = positions_;
  s->cached_ = cached_;
  s->next_span = next_span;
  s->admit_order = admit_order;
  return s;
}

void Sequence::draw(std::span<const float> raw) {
  if (!forced_.empty()) {  // the thought's close, its budget spent
    drawn_ = forced_.front();
    forced_.erase(forced_.begin());
    // track_thought forced it only where the grammar allows all of it (a
    // grammar of the answer begins after it).
    if (grammar_ && !answer_grammar_) (void)grammar_->accept(*drawn_);
    drawn_forced_ = true;
    use_masked_ = false;
    return;
  }
  drawn_forced_ = false;
  std::span<const float> logits = constrain(raw);
  int32_t id = -1;
  // A thought's token that writes the close and goes on past it with more
  // than newlines (text the waiting grammar would not see; the answer's
  // leading newlines are dropped) is drawn again without it, so the masked
  // logits stay what the draw saw (sample()'s logprobs). So is one that
  // writes a waiting grammar's trigger and goes on with text it refuses.
  for (;;) {
    if (id >= 0) {
      if (!use_masked_) mask_none(raw), logits = masked_;
      forbid(id);
      masked_[size_t(id)] = -std::numeric_limits<float>::infinity();
    }
    if (use_masked_ && !mask_any(mask_)) {
      // The grammar went where no token of the vocabulary continues it.
      drawn_ = -1;
      return;
    }
    id = sampler_.sample(logits, tokens_, req_->req.prompt.size());
    if (grammar_waits() && overruns_close(id)) continue;
    if (lazy_ && !grammar_ && thought_ != Thought::kIn) {
      const Triggered t = try_trigger(id);
      if (t == Triggered::kRefused) continue;
      if (t == Triggered::kStarted) {  // the grammar has taken the token's text
        drawn_ = id;
        return;
      }
    }
    break;
  }
  // The mask allowed it, so the grammar takes it (not while it waits); where
  // the reply may open a thought, a token only the opening allows leaves the
  // grammar behind (track_thought starts it afresh once the thought is open).
  if (grammar_ && grammar_alive_ && !grammar_waits()) grammar_alive_ = grammar_->accept(id) || !may_open();
  drawn_ = id;
}

// The tokens that go on writing the thought's opening (think_start) from
// the reply so far: the rest of it, or the whole of it and more.
void Sequence::allow_opening(std::span<uint32_t> bits) const {
  const std::string_view open = req_->req.think_start;
  if (!open.starts_with(reply_)) return;
  for (int32_t t : tok_->tokens_continuing(open.substr(reply_.size())))
    if (size_t(t) / 32 < bits.size()) bits[size_t(t) / 32] |= 1u << (uint32_t(t) % 32);
}

bool Sequence::overruns_close(int32_t token) const {
  const std::string_view close = req_->req.think_stop;
  if (close.empty()) return false;
  // The close cannot be in the thought yet: it may begin in its last
  // characters and end in the token, or lie in the token.
  const std::string_view thought = std::string_view(reply_).substr(thought_begin_);
  const size_t keep = std::min(thought.size(), close.size() - 1);
  const std::string text = std::string(thought.substr(thought.size() - keep)) + tok_->piece(token);
  const size_t at = text.find(close);
  return at != std::string::npos && text.find_first_not_of('\n', at + close.size()) != std::string::npos;
}

bool Sequence::sample(std::span<const float> raw, const Tokenizer& tok, int n_ctx) {
  RequestState& r = *req_;
  const Request& q = r.req;
  if (!drawn_) draw(raw);
  const int32_t id = *drawn_;
  drawn_.reset();
  if (id < 0) {
    finish(FinishReason::kError, "the constraint allows no token of this model's vocabulary after " +
                                     std::to_string(r.building.completions[size_t(index_)].tokens.size()) +
                                     " generated tokens (the text so far cannot be continued token by token)");
    return true;
  }
  // What the draw saw: the masked logits under a grammar (a forced token's
  // draw saw no mask: its logprob is the model's own).
  const std::span<const float> logits = use_masked_ ? std::span<const float>(masked_) : raw;
  if (!r.first_token) {
    r.first_token = true;
    r.building.timings.ttft_s = seconds(Clock::now() - r.submitted);
  }
  ++r.building.usage.completion_tokens;
  Completion& out = r.building.completions[size_t(index_)];
  if (!sampled_any_) {
    sampled_any_ = true;
    out.ttft_s = seconds(Clock::now() - r.submitted);
  }
  // Under a grammar, end of generation is only sampled where it may end.
  const bool eos = tok.is_end_of_generation(id) && (!q.ignore_eos || grammar_);
  StreamEvent ev;
  ev.index = index_;
  ev.token = id;
  if (q.logprobs >= 0) {
    ev.logprob = token_logprob(logits, id);
    for (auto [t, lp] : top_logprobs(logits, q.logprobs)) ev.top.push_back({t, lp});
  }
  if (eos) {
    // The end-of-generation token is not part of the text or the tokens.
    ev.end_of_generation = true;
    r.emit(std::move(ev));
    finish(FinishReason::kStop);
    return true;
  }
  tokens_.push_back(id);
  ++sampled_since_admit;
  positions_.push_back(positions_.back() + 1);
  out.tokens.push_back(id);
  if (q.logprobs >= 0) out.logprobs.push_back({id, ev.logprob, ev.top});
  bool stopped = false;
  ev.text = text_.push(id, &stopped);
  out.text += ev.text;
  if (lazy_ && !grammar_) {
    // The answer's text, where a waiting grammar's triggers are looked for:
    // not a thought's (nor the close the budget forced).
    if (thought_ == Thought::kIn) {
      answer_text_.clear();
    } else if (!drawn_forced_) {
      answer_text_ += tok.piece(id);
    }
    trigger_scan_ = answer_text_.size() >= trigger_span_ ? answer_text_.size() - trigger_span_ + 1 : 0;
  }
  if (thought_ == Thought::kStart || thought_ == Thought::kIn) {
    reply_ += tok.piece(id);
    track_thought(reply_);
  }
  r.emit(std::move(ev));
  if (stopped) {
    stopped_ = true;
    out.stop_sequence = text_.matched();
    finish(FinishReason::kStop);
    return true;
  }
  if (int(out.tokens.size()) >= q.max_tokens || int(tokens_.size()) >= n_ctx || positions_.back() + 1 >= n_ctx) {
    finish(FinishReason::kLength);
    return true;
  }
  return false;
}

// Counts a thought's tokens; at the budget, queues the close. The reply
// opens a thought with think_start first (blanks aside) and ends it with
// think_stop (the markup of templates that think: server/reasoning.h).
void Sequence::track_thought(const std::string& text) {
  const std::string_view kOpen = req_->req.think_start, kClose = req_->req.think_stop;
  if (thought_ == Thought::kStart) {
    const size_t b = text.find_first_not_of(" \t\r\n");
    const std::string_view rest = b == std::string::npos ? std::string_view() : std::string_view(text).substr(b);
    if (rest.starts_with(kOpen)) {
      thought_ = Thought::kIn;
      thought_begin_ = thought_scan_ = b + kOpen.size();
      if (answer_grammar_ && !lazy_) {  // the grammar waits for the answer, from its start
        grammar_.emplace(req_->req.grammar);
        grammar_alive_ = true;
      }
      return;  // the opening token is not the thought's
    }
    if (!rest.empty() && !kOpen.starts_with(rest)) thought_ = Thought::kPast;
    return;
  }
  if (thought_ != Thought::kIn) return;
  if (text.find(kClose, thought_scan_) != std::string::npos) {
    thought_ = Thought::kPast;
    if (answer_grammar_) forced_ = req_->req.think_resume;  // then the answer's grammar
    return;
  }
  thought_scan_ = std::max(thought_begin_, text.size() >= kClose.size() ? text.size() - kClose.size() + 1 : 0);
  ++thought_tokens_;
  if (req_->req.think_budget < 0 || thought_tokens_ < req_->req.think_budget) return;
  // The budget is spent. The close waits while the reply is writing one
  // itself (the thought ends with the close's first characters: a second
  // close would leave them in the thought) and while the constraint would
  // not take it (forced tokens it refuses would break what it promises); it
  // comes after the first token where neither holds.
  if (begun_length(std::string_view(text).substr(thought_begin_), kClose) > 0) return;
  if (grammar_ && !answer_grammar_ && !grammar_->allows(req_->req.think_end)) return;
  forced_ = req_->req.think_end;
  thought_ = Thought::kPast;
}

void Sequence::finish(FinishReason reason, const std::string& message) {
  RequestState& r = *req_;
  Completion& out = r.building.completions[size_t(index_)];
  if (!stopped_ && reason != FinishReason::kError && reason != FinishReason::kNoRoom) {
    std::string rest = text_.flush();
    if (!rest.empty()) {
      out.text += rest;
      StreamEvent ev;
      ev.index = index_;
      ev.text = std::move(rest);
      r.emit(std::move(ev));
    }
  }
  r.building.preemptions += preemptions;
  r.building.paused += pauses;
  r.end_completion(index_, reason, message);
}

}  // namespace cs
