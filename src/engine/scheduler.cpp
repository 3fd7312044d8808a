#include "engine/scheduler.h"

#include <algorithm>
#include <climits>

namespace cs {

void Scheduler::enqueue(std::unique_ptr<Sequence> s) { waiting_.push_back(std::move(s)); }

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
    (void)kv_.leave(s.id());
    return false;
  }
  s.set_cached(matched);
  s.admit_order = ++admitted_;
  return true;
}

void Scheduler::attach_spans(Sequence& s) {
  while (s.next_span < s.spans().size() && s.spans()[s.next_span].begin == s.cached()) {
    const CachedSpan& span = s.spans()[s.next_span++];
    // The engine checked the chunks hold the span's tokens when it took the
    // request; attaching them cannot fail for a live detached sequence.
    const std::span<const int32_t> pos(s.positions());
    (void)kv_.attach(s.id(), span.chunks, pos.subspan(size_t(span.begin), size_t(span.end - span.begin)));
    s.set_cached(span.end);
  }
}

void Scheduler::admit() {
  int reserved = reserved_chunks();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Sequence& s = **it;
    const int slots = s.index() == 0 && !s.request().forked && opt_.share ? s.request().req.n : 1;
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
  for (const auto& s : running_)
    if (s->pending() == 1) add(s.get(), 1);
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
  (void)kv_.leave(s->id());  // its full chunks stay cached for when it comes back
  s->set_cached(0);
  s->next_span = 0;
  ++s->preemptions;
  ++preemptions_;
  waiting_.push_front(std::move(s));
}

bool Scheduler::plan(Batch& batch, std::vector<Row>& rows, std::vector<Sequence*>& stuck, int reserve) {
  stuck.clear();
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
    (void)kv_.leave(s->id());
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
