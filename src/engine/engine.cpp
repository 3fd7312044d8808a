#include "engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>

#include "base/threads.h"
#include "engine/request_state.h"
#include "engine/scheduler.h"
#include "engine/validate.h"
#include "kv/split_kv.h"
#include "pml/encode.h"
#include "pml/store.h"

namespace cs {

const char* attn_mode_name(AttnMode m) {
  switch (m) {
    case AttnMode::kTpp: return "tpp";
    case AttnMode::kPerSequence: return "per-sequence";
    case AttnMode::kRelay: return "relay";
    case AttnMode::kNone: return "none";
  }
  return "?";
}

std::optional<AttnMode> attn_mode_from(const std::string& name) {
  for (AttnMode m : {AttnMode::kTpp, AttnMode::kPerSequence, AttnMode::kRelay, AttnMode::kNone})
    if (name == attn_mode_name(m)) return m;
  return std::nullopt;
}

// --- RequestHandle ---

RequestHandle::RequestHandle(std::shared_ptr<RequestState> s) : s_(std::move(s)) {}
RequestHandle::RequestHandle(RequestHandle&&) noexcept = default;
RequestHandle& RequestHandle::operator=(RequestHandle&& o) noexcept {
  if (this != &o) {
    if (s_) cancel();
    s_ = std::move(o.s_);
  }
  return *this;
}
RequestHandle::~RequestHandle() {
  if (s_) cancel();
}

uint64_t RequestHandle::id() const { return s_->id; }

std::optional<StreamEvent> RequestHandle::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(s_->mu);
  s_->cv.wait_for(lock, timeout, [&] { return !s_->events.empty() || s_->finished; });
  if (s_->events.empty()) return std::nullopt;
  StreamEvent ev = std::move(s_->events.front());
  s_->events.pop_front();
  return ev;
}

bool RequestHandle::done() const {
  std::lock_guard lock(s_->mu);
  return s_->finished && s_->events.empty();
}

bool RequestHandle::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(s_->mu);
  return s_->cv.wait_for(lock, timeout, [&] { return s_->finished; });
}

Result RequestHandle::wait() {
  std::unique_lock lock(s_->mu);
  s_->cv.wait(lock, [&] { return s_->finished; });
  return s_->result;
}

void RequestHandle::cancel() {
  {
    std::lock_guard lock(s_->mu);
    if (s_->finished) return;
  }
  s_->cancel_requested = true;
  if (s_->wake_engine) s_->wake_engine();
}

// --- Engine ---

namespace {

SchemaInfo info_of(const pml::EncodedSchema& e) {
  return {e.layout.schema, e.layout.length, e.tokens, int(e.layout.modules.size()),
          e.scaffolds,       e.bytes,         e.seconds, e.restored};
}

// The result of work done on the engine thread for a caller waiting on
// another. An error travels as its message (and PML location) and is thrown
// again on the caller's thread as a new exception: an exception object shared
// by two threads through an exception_ptr is freed by whichever drops it
// last, under a reference count in the C++ runtime that ThreadSanitizer
// cannot see.
template <class T>
struct Outcome {
  std::conditional_t<std::is_void_v<T>, bool, std::optional<T>> value{};
  std::string error;
  std::optional<pml::Location> pml_at;

  template <class F>
  static Outcome of(F&& f) {
    Outcome o;
    try {
      if constexpr (std::is_void_v<T>) f();
      else o.value = f();
    } catch (const pml::PmlError& e) {
      o.error = e.what();
      o.pml_at = e.where();
    } catch (const std::exception& e) {
      o.error = e.what();
      if (o.error.empty()) o.error = "an engine task failed";
    }
    return o;
  }
  T get() && {
    if (pml_at) throw pml::PmlError(*pml_at, error.substr(std::min(error.size(), pml_at->str().size() + 2)));
    if (!error.empty()) throw Error(error);
    if constexpr (!std::is_void_v<T>) return std::move(*value);
  }
};

// A schema being encoded inside the engine's steps (register_schema).
struct SchemaJob {
  std::unique_ptr<pml::SchemaEncoding> enc;
  std::function<void(int, int)> progress;
  std::promise<Outcome<SchemaInfo>> result;
};

}  // namespace

struct Engine::Impl {
  Impl(Engine& e, const KvLayout& layout, size_t pool_bytes)
      : engine(e),
        model(e.model_),
        kv(layout, pool_bytes, model.config().n_heads, path_of(e.opt_.mode),
           e.opt_.retain && e.opt_.mode != AttnMode::kNone),
        sched(kv, {e.opt_.mode != AttnMode::kNone, e.opt_.max_batch, e.opt_.step_tokens}),
        threads(e.opt_.threads) {}

  static AttnPath path_of(AttnMode m) {
    return m == AttnMode::kPerSequence ? AttnPath::kPerSequence
           : m == AttnMode::kRelay     ? AttnPath::kRelay
                                       : AttnPath::kTwoPhase;
  }

  void loop();
  bool take_inbox();
  void start(const std::shared_ptr<RequestState>& r);
  void handle_cancels();
  // Holds its own reference: retiring the last sequence may drop the others.
  void end_request(std::shared_ptr<RequestState> r, FinishReason reason, const std::string& message);
  void step();
  // Runs the batch, with the front schema job's slice after its first `rows` rows.
  void forward(SchemaJob* job, int rows);
  // After a step that ran the job's slice: pins a finished scaffold,
  // publishes a finished schema, reports progress.
  void advance(SchemaJob& job);
  void end_job(SchemaJob& job, Outcome<SchemaInfo> o);
  void fail_job(SchemaJob& job, const std::string& why);
  void sample_row(Sequence* s, std::span<const float> logits, std::vector<Sequence*>& done);
  void publish_stats();
  void count_finished();
  template <class F>
  auto on_engine_thread(F f) -> decltype(f());
  std::deque<std::function<void()>> todo;
  void wake() {
    {
      std::lock_guard lock(mu);
      poked = true;
    }
    cv.notify_one();
  }

  Engine& engine;
  const LlamaModel& model;
  // Engine thread only.
  PrefixKv kv;
  Scheduler sched;
  Workspace ws;
  ThreadBudget threads;
  std::vector<float> logits;
  Batch batch;
  std::vector<Scheduler::Row> rows;
  std::vector<Sequence*> stuck;
  SeqId next_seq = 0;
  EngineStats counters;
  std::vector<std::shared_ptr<RequestState>> live;  // started, not yet counted as finished
  // Shared with submitters (guarded by mu).
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<RequestState>> inbox;
  std::deque<std::function<void()>> tasks;  // run on the engine thread between steps
  std::deque<std::shared_ptr<SchemaJob>> jobs;  // schemas to encode, in order (taken into `encoding`)
  std::deque<std::shared_ptr<SchemaJob>> encoding;  // engine thread: the front one runs
  // Prompt Cache schemas (the map under schemas_mu; each schema immutable).
  mutable std::mutex schemas_mu;
  std::map<std::string, std::shared_ptr<pml::EncodedSchema>> schemas;
  std::set<std::string> pending;  // names of schemas being encoded
  pml::TextModel text;
  // The last tree snapshot (kv_tree); tree_mu serialises its callers.
  mutable std::mutex tree_mu;
  std::shared_ptr<const KvTreeSnapshot> tree;
  mutable std::once_flag identity_once;  // the model file's hash, taken when first needed
  mutable pml::ModelIdentity identity;
  // Publishes a schema pinned on the engine thread (released again when
  // another caller registered its name meanwhile).
  SchemaInfo add_schema(std::unique_ptr<pml::EncodedSchema> e) {
    const SchemaInfo info = info_of(*e);
    std::lock_guard lock(schemas_mu);
    if (schemas.count(info.name)) {
      pml::release_schema(kv.tree(), *e);
      throw Error("a schema named '" + info.name + "' is already registered");
    }
    schemas.emplace(info.name, std::move(e));
    publish_stats();  // before the caller sees the result
    return info;
  }
  const pml::ModelIdentity& model_identity() const {
    std::call_once(identity_once, [this] { identity = pml::identify(model); });
    return identity;
  }
  bool poked = false;
  bool accepting = true;
  bool stopping = false;
  int queued = 0;   // inbox + waiting, for max_waiting
  int running = 0;  // as last published
  uint64_t next_request = 0;
  mutable std::mutex stats_mu;
  EngineStats stats;
  std::thread thread;
};

Engine::Engine(const LlamaModel& model, EngineOptions opt) : model_(model), opt_(opt) {
  const LlamaConfig& c = model.config();
  n_ctx_ = opt_.n_ctx > 0 ? opt_.n_ctx : c.n_ctx_train;
  if (opt_.n_ctx > c.n_ctx_train)
    throw Error("--ctx " + std::to_string(opt_.n_ctx) + " is larger than the model's trained context of " +
                std::to_string(c.n_ctx_train) + " tokens");
  if (opt_.chunk_size <= 0 || opt_.chunk_size % 64 || opt_.chunk_size > 256)
    throw Error("chunk size " + std::to_string(opt_.chunk_size) + " is not supported (64, 128, 192 or 256)");
  if (c.head_dim != 64 && c.head_dim != 128)
    throw Error("head dimension " + std::to_string(c.head_dim) + " is not supported by the chunk cache (64 or 128)");
  if (opt_.max_batch < 1) throw Error("max batch must be at least 1");
  if (opt_.step_tokens < 1) throw Error("step tokens must be at least 1");
  const KvLayout layout{c.n_layers, c.n_kv_heads, c.head_dim, opt_.chunk_size, opt_.kv_type};
  size_t bytes = opt_.kv_memory;
  if (bytes == 0) {
    const size_t full = layout.chunk_bytes() * (size_t(opt_.max_batch) * size_t(n_ctx_ / opt_.chunk_size + 2) +
                                                 size_t(std::max(0, opt_.extra_chunks)));
    bytes = std::min(full, size_t(2) << 30);
  }
  if (bytes / layout.chunk_bytes() < 2)
    throw Error("KV memory of " + std::to_string(bytes) + " bytes holds fewer than 2 chunks of " +
                std::to_string(layout.chunk_bytes()) + " bytes");
  impl_ = std::make_unique<Impl>(*this, layout, bytes);
  impl_->text = pml::text_model(model);
  impl_->publish_stats();
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  shutdown();
  if (impl_->thread.joinable()) impl_->thread.join();
}


RequestHandle Engine::submit(Request r) {
  validate_request(r, limits());
  Impl& m = *impl_;
  std::shared_ptr<RequestState> s;
  {
    std::lock_guard lock(m.mu);
    if (!m.accepting) throw RequestError("the engine is shutting down", "", RequestError::Kind::kUnavailable);
    if (m.queued >= opt_.max_waiting)
      throw RequestError("too many requests are waiting (" + std::to_string(m.queued) + ")", "",
                         RequestError::Kind::kBusy);
    s = std::make_shared<RequestState>(++m.next_request, std::move(r));
    s->wake_engine = [&m] { m.wake(); };
    ++m.queued;
    m.inbox.push_back(s);
    m.poked = true;
  }
  m.cv.notify_one();
  return RequestHandle(s);
}

void Engine::shutdown(std::chrono::milliseconds grace) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  m.accepting = false;
  m.cv.notify_all();
  m.cv.wait_for(lock, grace, [&] { return m.queued == 0 && m.running == 0; });
  m.stopping = true;
  m.poked = true;
  m.cv.notify_all();
}

RequestLimits Engine::limits() const {
  // The layout and pool size never change; pinned chunks come from the
  // published stats (the tree itself belongs to the engine thread).
  const PrefixTree& t = impl_->kv.tree();
  return {model_.config().n_vocab, n_ctx_,         t.layout().chunk_size, t.pool().capacity(), stats().kv.pinned,
          t.pool().bytes(),        opt_.max_batch, opt_.mode != AttnMode::kNone};
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  return m.cv.wait_for(lock, timeout, [&] { return m.queued == 0 && m.running == 0; });
}


SchemaInfo Engine::register_schema(pml::Schema schema, const std::function<void(int, int)>& progress) {
  Impl& m = *impl_;
  auto job = std::make_shared<SchemaJob>();
  // Laid out here (a malformed schema throws before its name is taken).
  job->enc = std::make_unique<pml::SchemaEncoding>(std::move(schema), m.text, m.kv.tree().layout(),
                                                   model_.config().n_heads);
  job->progress = progress;
  const std::string name = job->enc->name();
  {
    std::lock_guard lock(m.schemas_mu);
    if (m.schemas.count(name) || m.pending.count(name))
      throw Error("a schema named '" + name + "' is already registered");
    m.pending.insert(name);
  }
  std::future<Outcome<SchemaInfo>> result = job->result.get_future();
  {
    std::lock_guard lock(m.mu);
    if (!m.stopping) {
      m.jobs.push_back(std::move(job));
      m.poked = true;
    }
  }
  if (job) {  // not queued
    std::lock_guard lock(m.schemas_mu);
    m.pending.erase(name);
    throw Error("the engine has stopped");
  }
  m.cv.notify_all();
  return result.get().get();
}

SchemaInfo Engine::save_schema(const std::string& name, const std::string& dir) const {
  const Impl& m = *impl_;
  std::shared_ptr<pml::EncodedSchema> e;
  {
    std::lock_guard lock(m.schemas_mu);
    auto it = m.schemas.find(name);
    if (it == m.schemas.end()) throw Error("no schema named '" + name + "' is registered");
    e = it->second;
  }
  // Pinned chunks are written once, before the schema is published, and
  // never again while it is registered (held here): readable off the engine
  // thread.
  pml::save_schema(*e, m.kv.tree().pool(), m.model_identity(), m.text.pad, dir);
  return info_of(*e);
}

SchemaInfo Engine::load_schema(const std::string& path) {
  Impl& m = *impl_;
  pml::SavedSchema saved = pml::read_saved_schema(path, m.model_identity(), m.kv.tree().layout(), m.text.pad);
  {
    std::lock_guard lock(m.schemas_mu);
    if (m.schemas.count(saved.schema.name))
      throw Error("a schema named '" + saved.schema.name + "' is already registered");
  }
  return m.on_engine_thread([&m, &saved] {
    return m.add_schema(pml::restore_schema(std::move(saved), m.kv.tree(), m.text));
  });
}

void Engine::unregister_schema(const std::string& name) {
  Impl& m = *impl_;
  m.on_engine_thread([&m, &name] {
    std::shared_ptr<pml::EncodedSchema> e;
    {
      std::lock_guard lock(m.schemas_mu);
      auto it = m.schemas.find(name);
      if (it == m.schemas.end()) throw Error("no schema named '" + name + "' is registered");
      // Requests built for it hold a reference until they end.
      if (it->second.use_count() > 1) throw Error("schema '" + name + "' is in use by a request");
      e = std::move(it->second);
      m.schemas.erase(it);
    }
    pml::release_schema(m.kv.tree(), *e);
    m.publish_stats();
  });
}

std::shared_ptr<const KvTreeSnapshot> Engine::kv_tree() const {
  Impl& m = *impl_;
  std::lock_guard lock(m.tree_mu);
  const auto now = std::chrono::steady_clock::now();
  if (m.tree && now - m.tree->at < std::chrono::milliseconds(250)) return m.tree;
  try {
    m.tree = m.on_engine_thread([&m] {
      auto t = std::make_shared<KvTreeSnapshot>();
      t->view = m.kv.tree().view(kTreeNodes, kTreeHead);
      m.publish_stats();
      t->stats = m.engine.stats();
      t->chunk_size = m.kv.tree().layout().chunk_size;
      t->at = std::chrono::steady_clock::now();
      return std::shared_ptr<const KvTreeSnapshot>(std::move(t));
    });
  } catch (const Error&) {
    // stopped: the last snapshot (or an empty one) stands
    if (!m.tree) m.tree = std::make_shared<KvTreeSnapshot>();
  }
  return m.tree;
}

std::vector<SchemaInfo> Engine::schemas() const {
  std::lock_guard lock(impl_->schemas_mu);
  std::vector<SchemaInfo> out;
  for (const auto& [name, e] : impl_->schemas) out.push_back(info_of(*e));
  return out;
}

Request Engine::pml_request(const std::string& prompt_xml, bool use_cache, const std::string& file) const {
  const pml::Prompt p = pml::parse_prompt(prompt_xml, file);
  std::shared_ptr<pml::EncodedSchema> e;
  {
    std::lock_guard lock(impl_->schemas_mu);
    auto it = impl_->schemas.find(p.schema);
    if (it == impl_->schemas.end())
      throw pml::PmlError(p.at, "the schema '" + p.schema + "' is not registered");
    e = it->second;
  }
  const pml::TextModel& tm = impl_->text;
  const pml::Assembly a = pml::assemble(e->layout, p, tm.encode, tm.roles, tm.reply_start);
  Request r = pml::prompt_request(*e, a, use_cache);
  if (use_cache) r.pins = e;
  return r;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(impl_->stats_mu);
  return impl_->stats;
}

void Engine::Impl::publish_stats() {
  EngineStats s = counters;
  s.running = int(sched.running().size());
  counters.peak_running = std::max(counters.peak_running, s.running);
  s.peak_running = counters.peak_running;
  s.waiting = int(sched.waiting().size());
  s.kv = kv.tree().stats();
  s.preemptions = sched.preemptions();
  s.encoding = int(encoding.size());
  s.threads = threads.threads();
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
    if (!stopping && !poked && sched.idle() && encoding.empty()) cv.wait(lock, [&] { return poked || stopping; });
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

// Runs f on the engine thread between steps and waits for its result.
template <class F>
auto Engine::Impl::on_engine_thread(F f) -> decltype(f()) {
  using T = decltype(f());
  auto task = std::make_shared<std::packaged_task<Outcome<T>()>>(
      [f = std::move(f)]() mutable { return Outcome<T>::of(f); });
  auto result = task->get_future();
  {
    std::lock_guard lock(mu);
    if (stopping) throw Error("the engine has stopped");
    tasks.push_back([task] { (*task)(); });
    poked = true;
  }
  cv.notify_all();
  return result.get().get();
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
      ok = ok && c >= 0 && c < kv.tree().pool().capacity() && kv.tree().pinned(c);
      if (ok) n += kv.tree().chunk_length(c);
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

void Engine::Impl::loop() {
  while (take_inbox()) {
    handle_cancels();
    step();
    count_finished();
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
  while (!encoding.empty()) fail_job(*encoding.front(), "the engine stopped");
  for (auto& r : rest) start(r);
  while (!sched.idle()) {
    Sequence* s = !sched.running().empty() ? sched.running().front().get() : sched.waiting().front().get();
    end_request(s->request_ptr(), FinishReason::kCancelled, "the engine stopped");
  }
  count_finished();
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

void Engine::Impl::step() {
  omp_set_num_threads(threads.update());
  // A schema being encoded takes half of the step's tokens beside requests
  // (their prefill the rest; their decode tokens always run), and all of them
  // alone.
  while (!encoding.empty() && encoding.front()->enc->finished()) advance(*encoding.front());
  SchemaJob* job = encoding.empty() ? nullptr : encoding.front().get();
  const int step_tokens = engine.opt_.step_tokens;
  const int reserve = job ? std::max(1, step_tokens / 2) : 0;
  if (!sched.plan(batch, rows, stuck, reserve)) {
    for (Sequence* s : stuck) {
      const KvStats k = kv.tree().stats();
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
  const int request_rows = batch.size();
  if (job) job->enc->add_slice(batch, request_rows ? reserve : step_tokens);
  if (batch.size() == 0) return;
  const auto now = Clock::now();
  for (const auto& row : rows) {
    RequestState& r = row.seq->request();
    if (r.admitted) continue;
    r.admitted = true;
    r.building.timings.queued_s = std::chrono::duration<double>(now - r.submitted).count();
    // Matched in the tree, or (Prompt Cache) every span's tokens.
    int cached = row.seq->cached();
    if (row.seq->detached()) {
      cached = 0;
      for (const CachedSpan& s : row.seq->spans()) cached += s.end - s.begin;
    }
    r.building.usage.cached_tokens = cached;
    counters.prompt_tokens_cached += uint64_t(cached);
  }
  try {
    forward(job, request_rows);
  } catch (const std::exception& e) {
    // Nothing the requests could have caused (they were validated), but the
    // engine goes on serving the others.
    std::vector<std::shared_ptr<RequestState>> failed;
    for (const auto& row : rows)
      if (std::find(failed.begin(), failed.end(), row.seq->request_ptr()) == failed.end())
        failed.push_back(row.seq->request_ptr());
    for (const auto& r : failed) end_request(r, FinishReason::kError, e.what());
    if (job) fail_job(*job, e.what());
    return;
  }
  ++counters.steps;
  if (job) advance(*job);
  counters.peak_kv_used = std::max(counters.peak_kv_used, kv.tree().stats().used);
  // Prefill: every token run but a sequence's latest sampled one.
  for (const auto& row : rows) {
    const Sequence& s = *row.seq;
    const bool decode = row.take == 1 && s.pending() == 1 && s.tokens().size() > s.request().req.prompt.size();
    if (!decode) counters.prefill_tokens += uint64_t(row.take);
  }
  sched.committed(rows);
  const size_t V = size_t(model.config().n_vocab);
  size_t li = 0;
  std::vector<Sequence*> done;
  for (const auto& row : rows) {
    if (!row.logits) continue;
    sample_row(row.seq, std::span<const float>(logits.data() + li * V, V), done);
    ++li;
  }
  for (Sequence* s : done) sched.retire(s);
}

void Engine::Impl::forward(SchemaJob* job, int rows) {
  if (!job) return model.forward(batch, kv, ws, logits);
  const LlamaConfig& c = model.config();
  SplitKv split(kv, job->enc->scratch(), c.n_kv_heads * c.head_dim, c.n_heads * c.head_dim);
  split.set_split(rows);
  model.forward(batch, split, ws, logits);
}

void Engine::Impl::advance(SchemaJob& job) {
  pml::SchemaEncoding& enc = *job.enc;
  const int before = enc.done();
  try {
    if (!enc.finished()) enc.ran(kv.tree());
  } catch (const std::exception& e) {
    fail_job(job, e.what());
    return;
  }
  counters.schema_tokens += uint64_t(enc.done() - before);
  if (job.progress && enc.done() > before) job.progress(enc.done(), enc.total());
  if (enc.finished()) end_job(job, Outcome<SchemaInfo>::of([&] { return add_schema(enc.take()); }));
}

void Engine::Impl::fail_job(SchemaJob& job, const std::string& why) {
  job.enc->abandon(kv.tree());
  end_job(job, Outcome<SchemaInfo>::of([&]() -> SchemaInfo { throw Error(why); }));
}

// Answers the job's caller and drops it (the front of `encoding`).
void Engine::Impl::end_job(SchemaJob& job, Outcome<SchemaInfo> o) {
  {
    std::lock_guard lock(schemas_mu);
    pending.erase(job.enc->name());
  }
  std::shared_ptr<SchemaJob> keep = encoding.front();
  encoding.pop_front();
  keep->result.set_value(std::move(o));
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
