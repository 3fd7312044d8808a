// The engine thread: take what other threads handed in, cancel, plan a step,
// run it, sample, stream, retire, publish stats (engine.h has the contract).
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "engine/engine_impl.h"
#include "kv/split_kv.h"

namespace cs {

void Engine::Impl::wake() {
  {
    std::lock_guard lock(mu);
    poked = true;
  }
  cv.notify_one();
}

void Engine::Impl::publish_stats() {
  EngineStats s = counters;
  s.running = int(sched.running().size());
  counters.peak_running = std::max(counters.peak_running, s.running);
  s.peak_running = counters.peak_running;
  s.waiting = int(sched.waiting().size());
  s.kv = kv.stats();
  s.preemptions = sched.preemptions();
  s.yields = sched.yields();
  s.pauses = sched.pauses();
  s.encoding = int(encoding.size());
  s.threads = threads.threads();
  if (holds) s.held_prefixes = holds->holds(), s.held_chunks = holds->chunks();
  {
    std::lock_guard lock(stats_mu);
    stats = s;
  }
  std::lock_guard lock(mu);
  queued = int(inbox.size()) + s.waiting;
  running = s.running;
  cv.notify_all();
}

// Moves new requests in. False when the engine should stop.
bool Engine::Impl::take_inbox() {
  std::deque<std::shared_ptr<RequestState>> fresh;
  {
    std::unique_lock lock(mu);
    // Nothing to step (idle, or only sequences waiting for the disk tier,
    // whose reads poke): sleep until poked.
    if (!stopping && !poked && (sched.idle() || !stepped) && encoding.empty())
      cv.wait(lock, [&] { return poked || stopping; });
    poked = false;
    if (stopping) return false;
    fresh.swap(inbox);
    todo.swap(tasks);
    for (auto& j : jobs) encoding.push_back(std::move(j));
    jobs.clear();
  }
  for (auto& t : todo) t();
  todo.clear();
  for (auto& r : fresh) start(r);
  return true;
}

void Engine::Impl::start(const std::shared_ptr<RequestState>& r) {
  const Request& q = r->req;
  r->building.completions.resize(size_t(q.n));
  r->ended.assign(size_t(q.n), false);
  r->building.usage.prompt_tokens = int(q.prompt.size());
  r->live = q.n;
  live.push_back(r);
  ++counters.requests;
  counters.prompt_tokens += q.prompt.size();
  if (q.max_tokens == 0) {
    end_request(r, FinishReason::kLength, "");
    return;
  }
  // Cached spans name pinned chunks holding exactly their tokens.
  for (const CachedSpan& s : q.cached) {
    int n = 0;
    bool ok = true;
    for (ChunkId c : s.chunks) {
      ok = ok && kv.pinned(c);
      if (ok) n += kv.chunk_length(c);
    }
    if (!ok || n != s.end - s.begin) {
      end_request(r, FinishReason::kError, "a cached span's chunks are not pinned or do not hold its tokens");
      return;
    }
  }
  // Sharing modes fork the other completions from the first after its
  // prefill; mode none prefills each on its own.
  const int seqs = engine.opt_.mode == AttnMode::kNone ? q.n : 1;
  if (seqs == q.n) r->forked = true;
  for (int i = 0; i < seqs; ++i) sched.enqueue(std::make_unique<Sequence>(next_seq++, r, i, model.tokenizer()));
}

// Finishes every completion of r that has no sequence (not yet forked, or
// never started) and every sequence of r.
void Engine::Impl::end_request(std::shared_ptr<RequestState> rp, FinishReason reason, const std::string& message) {
  RequestState& r = *rp;
  std::vector<Sequence*> mine;
  for (const auto& s : sched.running())
    if (&s->request() == &r) mine.push_back(s.get());
  for (const auto& s : sched.waiting())
    if (&s->request() == &r) mine.push_back(s.get());
  for (Sequence* s : mine) {
    s->finish(reason, message);
    sched.retire(s);
  }
  // Completions that have no sequence (not forked yet) end as well.
  for (int i = 0; i < r.req.n; ++i) r.end_completion(i, reason, message);
}

void Engine::Impl::publish_kv_events() {
  if (!ledger) return;
  std::vector<BlockEvent> events = ledger->take();
  if (!events.empty()) engine.opt_.kv_events(std::move(events));
}

void Engine::Impl::announce_prefills() {
  if (!ledger) return;
  bool any = false;
  for (const auto& row : rows) {
    const Sequence& s = *row.seq;
    if (s.detached() || !s.prefilling() || announced.count(s.id())) continue;
    ledger->reserve(uint64_t(s.id()), s.tokens());
    announced.insert(s.id());
    any = true;
  }
  // Out before the forward pass: a router hears of the prompt as its
  // computing starts.
  if (any) publish_kv_events();
}

void Engine::Impl::release_announced() {
  if (announced.empty()) return;
  std::unordered_set<SeqId> prefilling;
  for (const auto& s : sched.running())
    if (s->prefilling()) prefilling.insert(s->id());
  for (auto it = announced.begin(); it != announced.end();) {
    if (prefilling.count(*it)) {
      ++it;
      continue;
    }
    ledger->release(uint64_t(*it));
    it = announced.erase(it);
  }
}

void Engine::Impl::loop() {
  while (take_inbox()) {
    handle_cancels();
    kv.take_loads();
    if (holds) holds->expire(PrefixHolds::Clock::now());
    step();
    count_finished();
    release_announced();
    publish_kv_events();
    publish_stats();
  }
  // Stopping: whatever is left ends as cancelled; tasks still run (their
  // callers wait for them).
  std::deque<std::shared_ptr<RequestState>> rest;
  {
    std::lock_guard lock(mu);
    rest.swap(inbox);
    todo.swap(tasks);
    for (auto& j : jobs) encoding.push_back(std::move(j));
    jobs.clear();
  }
  for (auto& t : todo) t();
  while (!encoding.empty()) fail_job(*encoding.front(), {ErrorKind::kStopped, "the engine stopped", {}});
  for (auto& r : rest) start(r);
  while (!sched.idle()) {
    Sequence* s = !sched.running().empty() ? sched.running().front().get() : sched.waiting().front().get();
    end_request(s->request_ptr(), FinishReason::kCancelled, "the engine stopped");
  }
  // Held prefixes let go here, on this thread, while the disk tier their
  // chunks' leaving reaches still exists (the engine's members go after
  // it: a hold let go then read freed memory); their chunks stay in the
  // tree, so what follows stores them.
  holds.reset();
  // A clean stop keeps what the pool holds for the next start.
  if (disk) {
    kv.persist_all();
    disk->drain();
  }
  count_finished();
  publish_kv_events();
  publish_stats();
}

void Engine::Impl::count_finished() {
  std::erase_if(live, [&](const std::shared_ptr<RequestState>& r) {
    if (r->live > 0) return false;
    ++counters.finished;
    bool cancelled = false, error = false;
    for (const Completion& c : r->building.completions) {
      cancelled = cancelled || c.reason == FinishReason::kCancelled;
      error = error || c.reason == FinishReason::kError;
    }
    counters.cancelled += cancelled;
    counters.errors += error && !cancelled;
    return true;
  });
}

void Engine::Impl::handle_cancels() {
  std::vector<std::shared_ptr<RequestState>> cancel;
  auto look = [&](const auto& seqs) {
    for (const auto& s : seqs)
      if (s->request().cancel_requested && std::find(cancel.begin(), cancel.end(), s->request_ptr()) == cancel.end())
        cancel.push_back(s->request_ptr());
  };
  look(sched.running());
  look(sched.waiting());
  for (const auto& r : cancel) end_request(r, FinishReason::kCancelled, "");
}

// One step: plan the batch (requests' rows, then a slice of the schema being
// encoded), run it, then sample what it computed.
void Engine::Impl::step() {
  const auto t0 = std::chrono::steady_clock::now();
  omp_set_num_threads(threads.update());
  // A schema being encoded takes half of the step's tokens beside requests
  // (their prefill the rest; their decode tokens always run), and all of them
  // alone.
  while (!encoding.empty() && encoding.front()->enc->finished()) advance(*encoding.front());
  SchemaJob* job = encoding.empty() ? nullptr : encoding.front().get();
  const int step_tokens = engine.opt_.step_tokens;
  const int reserve = job ? std::max(1, step_tokens / 2) : 0;
  const auto t_drafting = std::chrono::steady_clock::now();
  propose_drafts();
  const auto t_drafted = std::chrono::steady_clock::now();
  plan_batch(reserve);
  announce_prefills();
  const int request_rows = batch.size();
  if (job) job->enc->add_slice(batch, request_rows ? reserve : step_tokens);
  stepped = batch.size() > 0 || !stuck.empty();
  if (batch.size() == 0) return;
  record_admissions();
  const auto t_planned = std::chrono::steady_clock::now();
  OpProfile ops;
  if (engine.opt_.profile) ws.profile = &ops;
  const bool ran = run_batch(job, request_rows);
  ws.profile = nullptr;
  if (!ran) return;
  ++counters.steps;
  if (job) advance(*job);
  const bool prefill = count_step();
  sched.committed(rows);
  const auto t_sampling = std::chrono::steady_clock::now();
  sample_rows();
  if (engine.opt_.profile) {
    using S = std::chrono::duration<double>;
    StepProfile& p = prefill ? counters.prefill_profile : counters.decode_profile;
    p.ops += ops;
    p.step_s += S(std::chrono::steady_clock::now() - t0).count();
    p.schedule_s += S(t_planned - t0).count();
    p.draft_s += S(t_drafted - t_drafting).count();
    p.sample_s += S(std::chrono::steady_clock::now() - t_sampling).count();
    ++p.steps;
    p.rows += uint64_t(batch.size());
  }
}

// Speculative decoding's drafts: only in steps of few decoding sequences (a
// step of one sequence reads every weight for one row, so a few rows more
// cost little; a large batch is no longer bound by that read), never beyond
// a sequence's max_tokens or context, never into a pool that would have to
// preempt for them; from the client's prediction, the tree or its own text.
void Engine::Impl::propose_drafts() {
  const EngineOptions& o = engine.opt_;
  int decoding = 0;
  for (const auto& s : sched.running()) {
    s->draft.clear();
    decoding += s->pending() == 1;
  }
  if (decoding == 0 || decoding > o.speculate_max_batch || !sched.waiting().empty()) return;
  // Room: every decoding sequence may need a chunk anyway, and a draft may
  // cross into the next one.
  if (kv.chunks_available() < 4 * decoding + 4) return;
  for (const auto& sp : sched.running()) {
    Sequence& s = *sp;
    const Request& q = s.request().req;
    const bool on = q.speculate < 0 ? o.speculate : q.speculate > 0;
    if (!on || s.pending() != 1 || s.generated().empty() || s.detached()) continue;
    int k = std::min({s.pacer.next(), s.remaining() - 1, engine.n_ctx_ - 2 - s.positions().back()});
    if (k <= 0) continue;
    // A match of two tokens or more in the prediction, else what the tree
    // holds after the same text, else a match in its own text, else one
    // token's in the prediction.
    const int at = int(s.generated().size());
    if (!q.prediction.empty()) {
      s.draft = lookup_draft(q.prediction, s.generated(), k, 2, 8, at);
      s.draft_source = DraftSource::kPrediction;
    }
    if (s.draft.empty() && o.prefix_caching()) {
      s.draft = kv.continuation(s.tokens(), k);
      s.draft_source = DraftSource::kTree;
    }
    if (s.draft.empty()) {
      s.context_index.sync(s.tokens());
      s.draft = s.context_index.draft(s.tokens(), k, 12);
      s.draft_source = DraftSource::kContext;
    }
    if (s.draft.empty() && !q.prediction.empty()) {
      s.draft = lookup_draft(q.prediction, s.generated(), k, 1, 1, at);
      s.draft_source = DraftSource::kPrediction;
    }
  }
}

// The scheduler's batch; a sequence that alone cannot fit the pool ends
// (with what it sampled: kLength, else kNoRoom) and the batch is empty.
// Held prefixes are a cache: such a sequence gets their room first, the
// oldest hold first.
void Engine::Impl::plan_batch(int reserve) {
  for (;;) {
    if (sched.plan(batch, rows, stuck, reserve)) return;
    if (stuck.empty() || !holds || !holds->release_oldest()) break;
  }
  for (Sequence* s : stuck) {
    const KvStats k = kv.stats();
    const std::string why = "the KV memory is full: the sequence alone fills the pool of " +
                            std::to_string(k.chunks) + " chunks (" + std::to_string(k.pinned) +
                            " pinned by Prompt Cache schemas)";
    const bool any = s->tokens().size() > s->request().req.prompt.size();
    s->finish(any ? FinishReason::kLength : FinishReason::kNoRoom, why);
    sched.retire(s);
  }
  batch = Batch{};
  rows.clear();
}

// A request's first step: how long it queued and how much of its prompt was
// cached (matched in the tree, or, Prompt Cache, every span's tokens).
void Engine::Impl::record_admissions() {
  const auto now = Clock::now();
  for (const auto& row : rows) {
    RequestState& r = row.seq->request();
    if (r.admitted) continue;
    r.admitted = true;
    r.building.timings.queued_s = std::chrono::duration<double>(now - r.submitted).count();
    int cached = row.seq->cached();
    if (row.seq->detached()) {
      cached = 0;
      for (const CachedSpan& s : row.seq->spans()) cached += s.end - s.begin;
    }
    r.building.usage.cached_tokens = cached;
    r.building.usage.disk_tokens = std::min(row.seq->disk_tokens, cached);
    counters.prompt_tokens_cached += uint64_t(cached);
    counters.prompt_tokens_disk += uint64_t(r.building.usage.disk_tokens);
  }
}

// False when the forward pass threw: nothing the requests could have caused
// (they were validated), so their requests end with the error and the
// engine goes on serving the others.
bool Engine::Impl::run_batch(SchemaJob* job, int request_rows) {
  try {
    forward(job, request_rows);
    return true;
  } catch (const std::exception& e) {
    std::vector<std::shared_ptr<RequestState>> failed;
    for (const auto& row : rows)
      if (std::find(failed.begin(), failed.end(), row.seq->request_ptr()) == failed.end())
        failed.push_back(row.seq->request_ptr());
    for (const auto& r : failed) end_request(r, FinishReason::kError, e.what());
    if (job) fail_job(*job, {ErrorKind::kInternal, e.what(), {}});
    return false;
  }
}

bool Engine::Impl::count_step() {
  counters.peak_kv_used = std::max(counters.peak_kv_used, kv.stats().used);
  // Prefill: every token run but a sequence's latest sampled one.
  bool prefill = false;
  for (const auto& row : rows) {
    const Sequence& s = *row.seq;
    const bool decode = row.take == 1 && s.pending() == 1 && s.tokens().size() > s.request().req.prompt.size();
    if (!decode) counters.prefill_tokens += uint64_t(row.take), prefill = true;
  }
  return prefill;
}

void Engine::Impl::sample_rows() {
  const size_t V = size_t(model.config().n_vocab);
  // Draws in parallel: each row's grammar mask, sampler and grammar advance
  // are its own (a visible share of a batch-32 step at temperature > 0 or
  // under a grammar: docs/kernels.md); the bookkeeping stays serial.
  // The logits hold a row per row that wants them, in order, then one per
  // draft token; a row with a draft draws in order as it verifies.
  std::vector<std::pair<Sequence*, size_t>> draws;
  size_t li = 0;
  for (const auto& row : rows) {
    if (!row.logits) continue;
    if (row.drafts == 0) draws.push_back({row.seq, li});
    li += size_t(1 + row.drafts);
  }
  if (draws.size() > 1) {
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t k = 0; k < draws.size(); ++k)
      draws[k].first->draw(std::span<const float>(logits.data() + draws[k].second * V, V));
  }
  li = 0;
  std::vector<Sequence*> done;
  for (const auto& row : rows) {
    if (!row.logits) continue;
    if (row.drafts > 0) verify_draft(row, logits.data() + li * V, done);
    else sample_row(row.seq, std::span<const float>(logits.data() + li * V, V), done);
    li += size_t(1 + row.drafts);
  }
  for (Sequence* s : done) sched.retire(s);
}

// Row j of the draft's logits follows draft tokens [0, j): its draw is the
// token the sequence would have drawn next without a draft (the same logits,
// bit for bit, the same sampler), so it is kept, and the next row is valid
// while the draw equals draft token j. For a sampled draw that is
// speculative sampling with a draft of one token's certainty: the draft
// token is taken with the model's probability of it, and otherwise the draw
// comes from the model's distribution without it.
void Engine::Impl::verify_draft(const Scheduler::Row& row, const float* lg, std::vector<Sequence*>& done) {
  Sequence& s = *row.seq;
  const size_t V = size_t(model.config().n_vocab);
  const std::vector<int32_t> draft = std::move(s.draft);
  s.draft.clear();
  const int k = int(draft.size()), base = s.cached();  // the cache holds base + k tokens now
  const int src = int(s.draft_source);
  // Counted before each sample: the one that ends the request publishes its usage.
  Usage& u = s.request().building.usage;
  counters.drafted[src] += uint64_t(k);
  u.drafted_tokens += k;
  int taken = 0;
  bool ended = false;
  for (int j = 0; j <= k; ++j) {
    const std::span<const float> row_logits(lg + size_t(j) * V, V);
    s.draw(row_logits);
    const bool match = j < k && s.drawn() == draft[size_t(j)];
    if (match) {
      ++taken;
      ++counters.draft_accepted[src];
      ++u.accepted_draft_tokens;
      if (s.draft_source == DraftSource::kPrediction) ++u.accepted_prediction_tokens;
    }
    const size_t before = done.size();
    sample_row(&s, row_logits, done);
    ended = done.size() > before;
    if (ended || !match) break;
  }
  s.pacer.taken(k, taken);
  if (ended) return;  // it leaves the cache whole
  expect_ok(kv.truncate(s.id(), base + taken), "cutting a draft's rejected tokens");
  s.set_cached(base + taken);
}

void Engine::Impl::forward(SchemaJob* job, int rows) {
  if (!job) return model.forward(batch, kv, ws, logits);
  const LlamaConfig& c = model.config();
  SplitKv split(kv, job->enc->scratch(), c.n_kv_heads * c.head_dim, c.n_heads * c.head_dim);
  split.set_split(rows);
  model.forward(batch, split, ws, logits);
}

void Engine::Impl::sample_row(Sequence* s, std::span<const float> lg, std::vector<Sequence*>& done) {
  RequestState& r = s->request();
  const Tokenizer& tok = model.tokenizer();
  std::vector<Sequence*> children;
  if (s->index() == 0 && !r.forked) {
    // n > 1: the other completions fork from this prefill (sharing every chunk).
    r.forked = true;
    for (int i = 1; i < r.req.n; ++i) {
      auto child = s->fork(next_seq++, i, tok);
      const KvStatus st = kv.fork(s->id(), child->id());
      if (!st.ok()) {
        r.end_completion(i, FinishReason::kError, st.message);
        continue;
      }
      children.push_back(child.get());
      sched.add_running(std::move(child));
    }
  }
  const bool first = !r.first_token;
  const auto now = Clock::now();
  for (Sequence* q : children) q->last_token = s->last_token;
  children.insert(children.begin(), s);
  for (Sequence* q : children) {
    ++counters.generated_tokens;
    if (q->last_token) counters.itl.observe(std::chrono::duration<double>(now - *q->last_token).count());
    q->last_token = now;
    if (q->sample(lg, tok, engine.n_ctx_)) done.push_back(q);
  }
  if (first) counters.ttft.observe(r.building.timings.ttft_s);
}

}  // namespace cs
