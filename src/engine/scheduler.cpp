#include "engine/scheduler.h"

#include <algorithm>
#include <climits>

namespace cs {

void Scheduler::enqueue(std::unique_ptr<Sequence> s) {
  s->queued_at = Clock::now();
  waiting_.push_back(std::move(s));
}

// Running sequences request r may hold: its share while another request's
// sequence waits (not paused), the whole batch otherwise.
int Scheduler::share(const RequestState& r) const {
  const bool others = std::any_of(waiting_.begin(), waiting_.end(),
                                  [&](const auto& s) { return &s->request() != &r && !s->paused; });
  if (!others) return opt_.max_batch;
  return opt_.request_share > 0 ? opt_.request_share : std::max(1, opt_.max_batch / 2);
}

// The queue's order: room lost first (they were running), then the least
// work left, less what waiting has earned, then first come.
double Scheduler::work_left(const Sequence& s, Clock::time_point now) const {
  if (s.lost_room) return -1e300;
  const double waited = std::chrono::duration<double>(now - s.queued_at).count();
  return double(s.remaining()) - opt_.aging_tokens_per_s * waited;
}

void Scheduler::order_queue() {
  const auto now = Clock::now();
  std::stable_sort(waiting_.begin(), waiting_.end(),
                   [&](const auto& a, const auto& b) { return work_left(*a, now) < work_left(*b, now); });
}

bool Scheduler::only_paused() const {
  return !waiting_.empty() && running_.empty() &&
         std::all_of(waiting_.begin(), waiting_.end(), [](const auto& s) { return s->paused; });
}

// Running sequence i leaves the batch for the queue (its chunks stay
// cached), to wait in order: it yielded its place, or (pause) its client
// has left too many events unread.
void Scheduler::yield(size_t i, bool pause) {
  std::unique_ptr<Sequence> s = std::move(running_[i]);
  running_.erase(running_.begin() + long(i));
  expect_ok(kv_.leave(s->id()), "a yielding sequence's leave");
  s->set_cached(0);
  s->next_span = 0;
  s->lost_room = false;
  s->paused = pause;
  s->pauses += pause;
  ++(pause ? pauses_ : yields_);
  if (pause) s->request().paused.store(true, std::memory_order_relaxed);
  enqueue(std::move(s));
}

// Fairness before admission (scheduler.h): pauses, shares, then places
// given to shorter work.
void Scheduler::rebalance() {
  for (size_t i = 0; i < running_.size();) {
    Sequence& s = *running_[i];
    // A prefill (nothing streamed yet) is never paused.
    if (!s.prefilling() && s.request().backlog() > kPauseBacklog) {
      yield(i, true);
      continue;
    }
    ++i;
  }
  // A request over its share gives back its latest sequences.
  for (size_t i = running_.size(); i-- > 0;) {
    const RequestState& r = running_[i]->request();
    int held = 0;
    for (const auto& s : running_) held += &s->request() == &r;
    if (held > share(r)) yield(i, false);
  }
  if (int(running_.size()) < opt_.max_batch || waiting_.empty()) return;
  order_queue();
  const auto now = Clock::now();
  int swaps = 0;
  for (size_t w = 0; w < waiting_.size() && swaps < std::max(1, opt_.max_batch / 8); ++w) {
    const Sequence& cand = *waiting_[w];
    if (cand.paused || cand.lost_room || deferred(cand)) continue;
    const double need = work_left(cand, now);
    size_t victim = running_.size();
    for (size_t i = 0; i < running_.size(); ++i) {
      const Sequence& r = *running_[i];
      if (r.prefilling() || r.sampled_since_admit < opt_.quantum || double(r.remaining()) <= need + opt_.quantum) continue;
      if (victim == running_.size() || r.remaining() > running_[victim]->remaining()) victim = i;
    }
    if (victim == running_.size()) break;  // nothing running has more work: later ones have no less
    yield(victim, false);
    ++swaps;
  }
}

void Scheduler::add_running(std::unique_ptr<Sequence> s) { running_.push_back(std::move(s)); }

// Chunks the running sequences still need for the tokens they know, plus one
// each to grow into: admission leaves them that much room.
int Scheduler::reserved_chunks() const {
  int r = 0;
  for (const auto& s : running_) r += kv_.chunks_to_append(s->id(), s->to_compute()) + 1;
  return r;
}

// A sequence waits while a running one is still prefilling chunks it could
// share: joining now would compute the same tokens a second time.
bool Scheduler::deferred(const Sequence& s) const {
  if (!opt_.share || s.detached()) return false;
  const int c = kv_.chunk_size();
  for (const auto& r : running_) {
    if (!r->prefilling()) continue;
    const auto& a = s.tokens();
    const auto& b = r->tokens();
    const size_t n = std::min(a.size() - 1, b.size());
    const size_t common = size_t(std::mismatch(a.begin(), a.begin() + long(n), b.begin()).first - a.begin());
    if (int(common / size_t(c)) * c > r->cached()) return true;
  }
  return false;
}

bool Scheduler::try_admit(Sequence& s, int reserved) {
  const auto& t = s.tokens();
  int matched = 0;
  if (s.detached()) {
    if (!kv_.join_detached(s.id()).ok()) return false;
    s.set_cached(0);
    s.next_span = 0;
    attach_spans(s);
    matched = s.cached();
  } else {
    // The last known token always runs: its logits sample the next one.
    const std::span<const int32_t> known = opt_.share ? std::span(t).first(t.size() - 1) : std::span<const int32_t>();
    if (!kv_.join(s.id(), known, &matched).ok()) return false;
  }
  const int need = kv_.chunks_to_append(s.id(), s.detached() ? s.to_compute() : int(t.size()) - matched) + 1;
  if (need > kv_.chunks_available() - reserved && !running_.empty()) {
    expect_ok(kv_.leave(s.id()), "leaving a sequence admission cannot hold");
    return false;
  }
  s.set_cached(matched);
  s.admit_order = ++admitted_;
  s.sampled_since_admit = 0;
  s.lost_room = false;
  return true;
}

void Scheduler::attach_spans(Sequence& s) {
  while (s.next_span < s.spans().size() && s.spans()[s.next_span].begin == s.cached()) {
    const CachedSpan& span = s.spans()[s.next_span++];
    // The engine checked the chunks hold the span's tokens when it took the
    // request; attaching them cannot fail for a live detached sequence.
    const std::span<const int32_t> pos(s.positions());
    expect_ok(kv_.attach(s.id(), span.chunks, pos.subspan(size_t(span.begin), size_t(span.end - span.begin))),
              "attaching a cached span");
    s.set_cached(span.end);
  }
}

void Scheduler::admit() {
  order_queue();
  int reserved = reserved_chunks();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Sequence& s = **it;
    // Paused until its client has read down to kResumeBacklog.
    if (s.paused) {
      if (s.request().backlog() > kResumeBacklog) {
        ++it;
        continue;
      }
      s.paused = false;
      s.request().paused.store(false, std::memory_order_relaxed);
    }
    // One prefill forks the request's completions, as many as its share
    // holds; a request at its share waits for one of them to end.
    const int cap = share(s.request());
    const int slots = s.index() == 0 && !s.request().forked && opt_.share ? std::min(s.request().req.n, cap) : 1;
    int held = 0;
    for (const auto& r : running_) held += &r->request() == &s.request();
    if (held > 0 && held + slots > cap) {
      ++it;
      continue;
    }
    if (!running_.empty() && int(running_.size()) + slots > opt_.max_batch) break;
    if (deferred(s)) {
      ++it;
      continue;
    }
    // A lower tier may hold more of its prompt than the tree: reading it
    // keeps only this sequence waiting; bringing it in takes room as prefill would.
    if (opt_.share && !s.detached()) {
      const auto& t = s.tokens();
      const int room = running_.empty() ? INT_MAX : kv_.chunks_available() - reserved - 1;
      int from_disk = 0;
      const auto prep = kv_.prepare(s.id(), std::span(t).first(t.size() - 1), room, &from_disk);
      if (prep == SequenceCache::Prep::kLoading) {
        ++it;
        continue;
      }
      if (prep == SequenceCache::Prep::kNoRoom) break;
      s.disk_tokens += from_disk;
    }
    if (!try_admit(s, reserved)) break;  // first come, first served: no overtaking for room
    reserved += kv_.chunks_to_append(s.id(), s.to_compute()) + 1;
    running_.push_back(std::move(*it));
    it = waiting_.erase(it);
  }
}

void Scheduler::build(Batch& batch, std::vector<Row>& rows, int reserve) const {
  batch = Batch{};
  rows.clear();
  auto add = [&](Sequence* s, int take) {
    const auto& t = s->tokens();
    const auto& pos = s->positions();
    for (int i = s->cached(); i < s->cached() + take; ++i)
      batch.add(t[size_t(i)], pos[size_t(i)], int32_t(s->id()), i + 1 == int(t.size()));
    rows.push_back({s, take, s->cached() + take == int(t.size())});
  };
  for (const auto& s : running_) {
    if (s->pending() != 1) continue;
    add(s.get(), 1);
    // Its draft: rows after its last known token, each wanting logits.
    const int32_t next = s->positions().back() + 1;
    for (size_t j = 0; j < s->draft.size(); ++j)
      batch.add(s->draft[j], next + int32_t(j), int32_t(s->id()), true);
    rows.back().drafts = int(s->draft.size());
  }
  int budget = std::max(0, opt_.step_tokens - reserve - batch.size());
  for (const auto& s : running_) {
    if (budget == 0) break;
    if (s->pending() <= 1) continue;
    const int take = std::min(s->computable(), budget);
    add(s.get(), take);
    budget -= take;
  }
}

void Scheduler::preempt_latest() {
  auto it = std::max_element(running_.begin(), running_.end(), [](const auto& a, const auto& b) {
    return a->admit_order < b->admit_order || (a->admit_order == b->admit_order && a->id() < b->id());
  });
  std::unique_ptr<Sequence> s = std::move(*it);
  running_.erase(it);
  s->draft.clear();
  expect_ok(kv_.leave(s->id()), "a preempted sequence's leave");  // its full chunks stay cached for when it comes back
  s->set_cached(0);
  s->next_span = 0;
  ++s->preemptions;
  ++preemptions_;
  s->lost_room = true;
  s->queued_at = Clock::now();
  waiting_.push_front(std::move(s));
}

bool Scheduler::plan(Batch& batch, std::vector<Row>& rows, std::vector<Sequence*>& stuck, int reserve) {
  stuck.clear();
  rebalance();
  admit();
  for (;;) {
    build(batch, rows, reserve);
    if (rows.empty()) return false;
    if (kv_.chunks_needed(batch) <= kv_.chunks_available()) return true;
    if (running_.size() > 1) {
      preempt_latest();
      continue;
    }
    // Alone and still no room: its own tokens fill the pool.
    stuck.push_back(running_.front().get());
    rows.clear();
    return false;
  }
}

void Scheduler::committed(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    r.seq->set_cached(r.seq->cached() + r.take);
    attach_spans(*r.seq);
  }
}

void Scheduler::retire(Sequence* s) {
  auto run = std::find_if(running_.begin(), running_.end(), [s](const auto& p) { return p.get() == s; });
  if (run != running_.end()) {
    expect_ok(kv_.leave(s->id()), "a retired sequence's leave");
    running_.erase(run);
    return;
  }
  auto wait = std::find_if(waiting_.begin(), waiting_.end(), [s](const auto& p) { return p.get() == s; });
  if (wait != waiting_.end()) {
    kv_.forget(s->id());
    waiting_.erase(wait);
  }
}

}  // namespace cs
