// The serving engine: many concurrent requests on one shared prefix-aware KV
// cache, with continuous batching (ChunkAttention §4.2, RelayAttention §4).
//
// Threading: submit(), cancel and the handles' calls are thread-safe. One
// engine thread owns the model's workspace, the PrefixKv and its tree (the
// tree's single writer) and runs the loop: take new requests and
// cancellations, admit first-come-first-served while the pool has room, run
// one batched forward pass for the step (decode tokens of running sequences
// and chunks of new prompts under a token budget), sample, stream, retire.
// When the pool cannot hold a step, the most recently admitted sequence is
// preempted (it leaves the tree and is recomputed later, its stream going on
// where it was); nothing aborts.
//
// Exactness: a sequence's tokens do not depend on what else is in the batch,
// on the attention mode (tpp, per-sequence, none), on the prefill chunking or
// on preemption: the forward pass and the kernels compute each row alone.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/prefix_kv.h"
#include "kv/block_ledger.h"
#include "engine/draft.h"
#include "engine/histogram.h"
#include "engine/request.h"
#include "engine/schema_registry.h"
#include "engine/validate.h"
#include "model/llama.h"
#include "pml/pml.h"

namespace cs {

// How sequences share KV: tpp (two-phase partition, the default),
// per-sequence (PagedAttention-like, on shared chunks), relay (the chunks the
// whole batch shares are the system part), none (each sequence stores all of
// its own chunks; nothing is shared or retained).
enum class AttnMode { kTpp, kPerSequence, kRelay, kNone };
const char* attn_mode_name(AttnMode m);
std::optional<AttnMode> attn_mode_from(const std::string& name);

struct EngineOptions {
  AttnMode mode = AttnMode::kTpp;
  int chunk_size = 64;          // tokens per KV chunk (64, 128, 192 or 256)
  size_t kv_memory = 0;         // bytes for the chunk pool; 0 = enough for max_batch full contexts, at most 2 GiB
  KvType kv_type = KvType::kF16;
  int max_batch = 32;           // running sequences at most
  int step_tokens = 512;        // tokens per forward pass (decode + prefill chunks)
  int n_ctx = 0;                // per-sequence context; 0 = the model's training context
  int threads = 0;              // compute threads at most; 0 = the cores available
  bool profile = false;         // time each step's parts (EngineStats::*_profile; bench engine --profile)
  bool retain = true;           // keep finished sequences' chunks for later requests (prefix caching)
  // Speculative decoding from drafts the server holds (engine/draft.h): on
  // for a request that does not say otherwise, in steps of at most
  // speculate_max_batch decoding sequences (beyond, a step is no longer
  // bound by reading the weights, and extra rows cost their full price).
  bool speculate = true;
  int speculate_max_batch = 4;
  int max_waiting = 4096;       // submit() refuses (busy) beyond this many queued requests
  int extra_chunks = 0;         // kv_memory 0: room for this many chunks more (generate: its schemas' pinned chunks)
  // Scale-out (kv/block_ledger.h): the tree's blocks of this many tokens (a
  // divisor of chunk_size; 0: none), handed to kv_events on the engine thread
  // after each step that stored or removed any. Keep it quick: queue them.
  int kv_event_block_size = 0;
  std::function<void(std::vector<BlockEvent>)> kv_events = nullptr;
  // The disk tier (kv/disk_tier.h): a directory keeping full chunks the pool
  // lets go of (and shared prefixes), across restarts; empty: none. Needs
  // prefix caching. Its files are named for the model file's SHA-256 (hashed
  // at start-up) and the KV layout.
  std::string kv_disk{};
  uint64_t kv_disk_bytes = 8ull << 30;
  // Held prefixes (hold_prefix: cache_control breakpoints) keep at most this
  // many bytes of chunks; 0: a quarter of the pool.
  size_t hold_memory = 0;
  std::function<void()> kv_disk_before_read = nullptr;  // DiskTierOptions::before_read (tests)

  // Finished sequences' chunks stay for later requests (mode none shares nothing).
  bool prefix_caching() const { return retain && mode != AttnMode::kNone; }
};

// Where the engine's steps spend their time (EngineOptions::profile): the
// forward pass by operation (model/op_profile.h) and what the engine does
// around it, in steps that ran any prefill row and steps of decode rows only.
struct StepProfile {
  OpProfile ops;           // inside the forward pass
  double step_s = 0;       // whole steps: drafts, scheduling, forward pass, sampling
  double schedule_s = 0;   // drafts proposed, the batch planned
  double draft_s = 0;      // of schedule_s: drafts proposed (speculative decoding's lookups)
  double sample_s = 0;     // logits drawn, drafts verified, tokens streamed
  uint64_t steps = 0, rows = 0;
  // What the steps spent outside all of the above (bookkeeping around the pass).
  double other_s() const { return step_s - schedule_s - sample_s - ops.total(); }
};

// A snapshot of the engine (for metrics); counters only grow.
struct EngineStats {
  int running = 0, waiting = 0;
  int peak_running = 0;               // most sequences ever running at once
  int peak_kv_used = 0;               // most KV chunks live sequences ever held (kv.peak also counts retained ones)
  KvStats kv;
  uint64_t requests = 0, finished = 0, cancelled = 0, errors = 0;
  uint64_t prompt_tokens = 0;         // prompt tokens of submitted requests
  uint64_t prompt_tokens_cached = 0;  // of which found in the cache at admission
  uint64_t prompt_tokens_disk = 0;    // of those, brought in from the disk tier
  uint64_t prefill_tokens = 0;        // tokens run as prefill (recomputation included)
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t yields = 0;                // places given to shorter work or over a request's share (scheduler.h)
  uint64_t pauses = 0;                // sequences paused for their client's unread events
  int encoding = 0;                   // Prompt Cache schemas being encoded (or queued to be)
  uint64_t schema_tokens = 0;         // tokens run to encode schemas
  uint64_t steps = 0;
  int threads = 0;                    // threads the last step used
  Histogram ttft = ttft_histogram();  // submit -> first token, per request
  Histogram itl = itl_histogram();    // between a sequence's consecutive tokens
  bool disk_on = false;               // a disk tier is attached
  DiskTierStats disk;
  int held_prefixes = 0, held_chunks = 0;  // hold_prefix's holds, and the distinct chunks they keep
  size_t grammar_cache_entries = 0, grammar_cache_bytes = 0;  // compiled constraints kept (Grammar::cache_use)
  // Speculative decoding, per DraftSource: draft tokens run, and taken.
  uint64_t drafted[kDraftSources] = {}, draft_accepted[kDraftSources] = {};
  StepProfile prefill_profile, decode_profile;  // zero unless EngineOptions::profile
};

class Engine;
struct RequestState;

// The client's end of a request. Destroying it before the request finished
// cancels the request.
class RequestHandle {
 public:
  RequestHandle() = default;
  explicit RequestHandle(std::shared_ptr<RequestState> s);
  RequestHandle(RequestHandle&&) noexcept;
  RequestHandle& operator=(RequestHandle&&) noexcept;
  ~RequestHandle();

  uint64_t id() const;
  // The next event, waiting at most `timeout`; nullopt on timeout or when the
  // request finished and every event was read (then done() is true).
  std::optional<StreamEvent> next(std::chrono::milliseconds timeout = std::chrono::hours(24));
  bool done() const;
  // Waits until the request finished (its events stay readable) and returns its result.
  Result wait();
  // Waits at most `timeout` for the request to finish; true when it has.
  bool wait_for(std::chrono::milliseconds timeout);
  // Asks the engine to stop the request; it finishes with kCancelled.
  void cancel();

 private:
  std::shared_ptr<RequestState> s_;
};

struct KvTreeSnapshot {
  TreeView view;
  EngineStats stats;
  int chunk_size = 0;
  std::chrono::steady_clock::time_point at;
};

class Engine {
 public:
  // Throws cs::Error for options the model or the kernels cannot take.
  Engine(const LlamaModel& model, EngineOptions opt = {});
  ~Engine();  // cancels what is left and stops the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws RequestError naming the problem for a request
  // that is invalid or could never run (a prompt longer than the context or
  // than the whole KV pool), or when too many requests are waiting.
  RequestHandle submit(Request r);

  // Stops taking requests and waits up to `grace` for the running and
  // waiting ones to finish; what is left is cancelled. Idempotent.
  void shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(0));

  // Waits until no request is queued or running (and the stats say so).
  // False on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);

  EngineStats stats() const;

  // Drops every retained prefix no running sequence reads from the pool
  // (POST /flush_cache; with a disk tier, they stay there); pinned Prompt
  // Cache chunks and held prefixes (hold_prefix) stay. Returns the chunks freed.
  int flush_cache();
  // Keeps the leading full chunks of `tokens` that the cache holds now out
  // of eviction for `ttl` (a cache_control breakpoint; cache/prefix_holds.h:
  // held once however often asked, within EngineOptions::hold_memory, the
  // oldest holds giving way). Returns the tokens held (0: none; prefix
  // caching off holds nothing).
  int hold_prefix(std::vector<int32_t> tokens, std::chrono::seconds ttl);
  // The hashes of the blocks the tree holds now, computed from its chunks
  // (PrefixTree::block_hashes) at the KV event block size; empty without
  // events. Routers' subscribers check their view against it.
  std::vector<uint64_t> kv_block_hashes() const;

  // The KV cache as a tree (kv/tree_view.h) with the stats of the same
  // moment, for the web console and routers. Built on the engine thread
  // between steps when the last one is older than 250 ms (the caller waits
  // for the step in progress; the engine never waits for a caller); at most
  // kTreeNodes nodes with their first kTreeHead tokens.
  static constexpr int kTreeNodes = 512, kTreeHead = 48;
  std::shared_ptr<const KvTreeSnapshot> kv_tree() const;

  // Prompt Cache (src/pml). Registers a schema: its modules' K/V are encoded
  // once into pinned chunks that every prompt importing them reads. The
  // encoding runs inside the engine's steps, at least half of each step's
  // tokens, so running requests keep decoding and new ones prefilling (this
  // call waits; schemas are encoded one after another). progress(done,
  // total), called on the engine thread, counts tokens run through the model.
  // Throws cs::Error: invalid for a malformed schema (its status's location
  // says where), exists when one of that name is registered or being
  // encoded, no room when the pool cannot hold it.
  SchemaInfo register_schema(pml::Schema schema, const std::function<void(int, int)>& progress = {});
  // Releases a schema's chunks. Throws cs::Error naming the problem when it
  // is unknown or a request still uses it.
  void unregister_schema(const std::string& name);
  std::vector<SchemaInfo> schemas() const;
  // Saves a registered schema to dir/<name>/ (pml/store.h); the first call
  // hashes the model file. Throws cs::Error naming the problem.
  SchemaInfo save_schema(const std::string& name, const std::string& dir) const;
  // Registers the schema saved at `path` (dir/<name>) without running the
  // model. Throws pml::StaleSchema when it was saved for another model, KV
  // layout or encoder (its PML can be registered instead), cs::Error when
  // the files are damaged, one of its name is registered or the pool cannot
  // hold it.
  SchemaInfo load_schema(const std::string& path);
  // The request for a PML prompt: imported modules read from their pinned
  // chunks at the schema's positions (use_cache), or all of it computed from
  // scratch at contiguous positions (the quality baseline). The caller sets
  // sampling and limits, then submits it. Throws pml::PmlError (malformed
  // prompt, unknown schema, module or parameter, ...).
  Request pml_request(const std::string& prompt_xml, bool use_cache, const std::string& file = "<prompt>") const;

  // Constrained decoding: the spec compiled for this model's vocabulary (the
  // vocabulary's tables are built on the first call), to set as a request's
  // grammar. Any thread. Throws GrammarError naming what does not compile.
  std::shared_ptr<const Grammar> compile_grammar(const GrammarSpec& spec) const;
  // The same for a client's constraint: checked against grammar/limits.h,
  // then compiled in a child process under `budget` and cached
  // (Grammar::compile with a budget).
  std::shared_ptr<const Grammar> compile_grammar(const GrammarSpec& spec, const ProcessBudget& budget) const;
  // The same for an optional constraint, waited for `patience` seconds at
  // most: null when it is still compiling then (it goes on in the
  // background and joins the cache: grammar/compile_later.h).
  std::shared_ptr<const Grammar> compile_grammar(const GrammarSpec& spec, const ProcessBudget& budget,
                                                 double patience) const;

  // What submit() checks requests against (engine/validate.h).
  RequestLimits limits() const;
  const EngineOptions& options() const { return opt_; }
  const LlamaModel& model() const { return model_; }
  int n_ctx() const { return n_ctx_; }
  // Where the KV pool is: "cpu" (host memory) or "cuda" (a device model's
  // KV on its GPU); and, when a device model's KV stays on the host, why
  // (one line for the log; "" otherwise).
  const char* kv_device() const { return kv_device_; }
  const std::string& kv_note() const { return kv_note_; }

 private:
  struct Impl;
  void init_grammar() const;  // the vocabulary's tables and the later compiles, once
  const LlamaModel& model_;
  EngineOptions opt_;
  int n_ctx_ = 0;
  const char* kv_device_ = "cpu";
  std::string kv_note_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cs
