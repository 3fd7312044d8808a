// Engine's inside (engine.h is its contract), one part per job, each with
// the lock that guards it. Files: engine.cpp (the public calls),
// request_handle.cpp, step_loop.cpp (the engine thread's loop and step),
// engine_schemas.cpp (Prompt Cache: registry calls and encoding jobs).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "base/threads.h"
#include "engine/engine.h"
#include "grammar/compile_later.h"
#include "engine/outcome.h"
#include "engine/request_state.h"
#include "engine/scheduler.h"
#include "engine/schema_registry.h"
#include "cache/prefix_holds.h"
#include "pml/encode.h"
#include "pml/store.h"

namespace cs {

// A schema being encoded inside the engine's steps (register_schema).
struct SchemaJob {
  std::unique_ptr<pml::SchemaEncoding> enc;
  std::function<void(int, int)> progress;
  std::promise<Outcome<SchemaInfo>> result;
};

struct Engine::Impl {
  Impl(Engine& e, const KvLayout& layout, size_t pool_bytes, KvPlace place);

  Engine& engine;
  const LlamaModel& model;

  // --- The step loop (step_loop.cpp). State below is the engine thread's
  // alone: no lock.
  void loop();
  bool take_inbox();  // false: stop
  void start(const std::shared_ptr<RequestState>& r);
  void handle_cancels();
  // Holds its own reference: retiring the last sequence may drop the others.
  void end_request(std::shared_ptr<RequestState> r, FinishReason reason, const std::string& message);
  void step();
  // The steps of step(), in order.
  void propose_drafts();         // speculative decoding: each decoding sequence's draft, if any
  void plan_batch(int reserve);  // `reserve` tokens left for a schema's slice
  void record_admissions();
  bool run_batch(SchemaJob* job, int request_rows);
  bool count_step();  // true when the step ran any prefill row
  void sample_rows();
  // Runs the batch, with the front schema job's slice after its first `rows` rows.
  void forward(SchemaJob* job, int rows);
  void sample_row(Sequence* s, std::span<const float> logits, std::vector<Sequence*>& done);
  // A row with a draft: samples its rows in order while the model draws the
  // draft's tokens, then cuts the rest of the draft from the cache.
  void verify_draft(const Scheduler::Row& row, const float* logits, std::vector<Sequence*>& done);
  void count_finished();
  // Hands the blocks stored and removed since the last call to kv_events.
  void publish_kv_events();
  // On a GPU: runs the largest step once, so its buffers are had at start
  // (device_reserve.cpp).
  void reserve_device_step();
  // KV events' work in progress: the prompts of the step's prefills held
  // (announced) in the ledger, and let go once done or stopped.
  void announce_prefills();
  void release_announced();
  PrefixKv kv;
  std::unique_ptr<PrefixHolds> holds;  // cache_control's held prefixes (after kv: let go first); null without caching
  std::unique_ptr<BlockLedger> ledger;  // when KV events are on
  std::unordered_set<SeqId> announced;  // sequences whose prefill's blocks the ledger holds (work in progress)
  Scheduler sched;
  Workspace ws;
  ThreadBudget threads;
  std::vector<float> logits;
  Batch batch;
  std::vector<Scheduler::Row> rows;
  std::vector<Sequence*> stuck;
  SeqId next_seq = 0;
  bool stepped = true;  // the last step ran something (else the loop may sleep)
  EngineStats counters;                              // published by publish_stats
  std::vector<std::shared_ptr<RequestState>> live;   // started, not yet counted as finished
  std::deque<std::function<void()>> todo;            // tasks taken from `tasks`
  std::deque<std::shared_ptr<SchemaJob>> encoding;   // taken from `jobs`; the front one runs

  // --- The inbox: what other threads hand the engine thread. State below is
  // protected by mu; cv wakes the engine thread (poked) and waiters on
  // queued/running.
  void wake();
  // Runs f on the engine thread between steps and waits for its result.
  template <class F>
  auto on_engine_thread(F f) -> decltype(f());
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<RequestState>> inbox;
  std::deque<std::function<void()>> tasks;        // run on the engine thread between steps
  std::deque<std::shared_ptr<SchemaJob>> jobs;    // schemas to encode, in order
  bool poked = false;
  bool accepting = true;
  bool stopping = false;
  int queued = 0;   // inbox + waiting, for max_waiting
  int running = 0;  // as last published
  uint64_t next_request = 0;

  // --- Stats (publish_stats, engine thread): a copy of `counters` and the
  // scheduler's and tree's numbers, protected by stats_mu.
  void publish_stats();
  mutable std::mutex stats_mu;
  EngineStats stats;

  // --- Tree snapshots (kv_tree): tree_mu serialises the callers; the view
  // is built on the engine thread.
  mutable std::mutex tree_mu;
  std::shared_ptr<const KvTreeSnapshot> tree;

  // --- Prompt Cache (engine_schemas.cpp). The registry locks itself; `text`
  // is immutable after construction; the identity is taken once.
  // After a step that ran the job's slice: pins a finished scaffold,
  // publishes a finished schema, reports progress.
  void advance(SchemaJob& job);
  void end_job(Outcome<SchemaInfo> o);  // answers the front job, drops it from `encoding`
  // Unpins what it pinned, frees its name, answers it with the error.
  void fail_job(SchemaJob& job, Status why);
  const pml::ModelIdentity& model_identity() const;
  SchemaRegistry registry;
  pml::TextModel text;
  mutable std::once_flag identity_once;  // the model file's hash, taken when first needed
  mutable pml::ModelIdentity identity;

  // --- Constrained decoding: the vocabulary's tables, built once when first
  // needed (compile_grammar, any thread).
  mutable std::once_flag grammar_once;
  mutable std::unique_ptr<GrammarVocab> grammar_vocab;
  mutable std::atomic<const GrammarVocab*> grammar_ready{nullptr};  // grammar_vocab once made (stats() reads it)
  // Compiles of optional constraints that go on after their request stopped
  // waiting (grammar/compile_later.h). After the vocabulary: destroyed
  // first, their threads joined while it still exists.
  mutable std::unique_ptr<LaterCompiles> later_compiles;

  std::thread thread;
  // The disk tier, when on. Last: destroyed first (it finishes its writes),
  // while the lock its callback takes still exists.
  std::unique_ptr<DiskTier> disk;
};

template <class F>
auto Engine::Impl::on_engine_thread(F f) -> decltype(f()) {
  using T = decltype(f());
  auto task = std::make_shared<std::packaged_task<Outcome<T>()>>(
      [f = std::move(f)]() mutable { return Outcome<T>::of(f); });
  auto result = task->get_future();
  {
    std::lock_guard lock(mu);
    if (stopping) throw Error("the engine has stopped", ErrorKind::kStopped);
    tasks.push_back([task] { (*task)(); });
    poked = true;
  }
  cv.notify_all();
  return result.get().get();
}

}  // namespace cs
