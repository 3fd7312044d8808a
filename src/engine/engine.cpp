#include "engine/engine.h"

#include <algorithm>

#include "attn/block.h"
#include "engine/engine_impl.h"
#include "model/sequence_kv.h"

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

namespace {

AttnPath path_of(AttnMode m) {
  return m == AttnMode::kPerSequence ? AttnPath::kPerSequence
         : m == AttnMode::kRelay     ? AttnPath::kRelay
                                     : AttnPath::kTpp;
}

}  // namespace

Engine::Impl::Impl(Engine& e, const KvLayout& layout, size_t pool_bytes, KvPlace place)
    : engine(e),
      model(e.model_),
      kv(layout, pool_bytes, model.config().n_heads, path_of(e.opt_.mode), e.opt_.prefix_caching(), place),
      sched(kv, {e.opt_.mode != AttnMode::kNone, e.opt_.max_batch, e.opt_.step_tokens}),
      threads(e.opt_.threads) {}

Engine::Engine(const LlamaModel& model, EngineOptions opt) : model_(model), opt_(opt) {
  const LlamaConfig& c = model.config();
  n_ctx_ = opt_.n_ctx > 0 ? opt_.n_ctx : c.n_ctx_train;
  if (opt_.n_ctx > c.n_ctx_train)
    throw Error("--ctx " + std::to_string(opt_.n_ctx) + " is larger than the model's trained context of " +
                std::to_string(c.n_ctx_train) + " tokens");
  if (c.long_rope() && c.uses_long_factors() != c.long_factors_for(n_ctx_))
    throw Error("the model turns with its " + std::string(c.uses_long_factors() ? "long" : "short") +
                " RoPE factors, chosen for another context than " + std::to_string(n_ctx_) +
                " (LlamaModel::set_context)");
  if (opt_.chunk_size <= 0 || opt_.chunk_size % 64 || opt_.chunk_size > 256)
    throw Error("chunk size " + std::to_string(opt_.chunk_size) + " is not supported (64, 128, 192 or 256)");
  if (!block_head_dim(c.head_dim))
    throw Error("head dimension " + std::to_string(c.head_dim) + " is not supported by the chunk cache (" +
                kBlockHeadDims + ")");
  if (opt_.max_batch < 1) throw Error("max batch must be at least 1");
  if (opt_.step_tokens < 1) throw Error("step tokens must be at least 1");
  // Checks the block size before the pool is allocated.
  std::unique_ptr<BlockLedger> ledger;
  if (opt_.kv_event_block_size != 0 && opt_.kv_events)
    ledger = std::make_unique<BlockLedger>(opt_.kv_event_block_size, opt_.chunk_size);
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
  const KvPlace place = kv_place(model, layout.type, &kv_note_);
  if (place == KvPlace::kDevice) kv_device_ = "cuda";
  impl_ = std::make_unique<Impl>(*this, layout, bytes, place);
  impl_->reserve_device_step();  // before anything observes the tree
  if (ledger) {
    impl_->ledger = std::move(ledger);
    impl_->kv.observe(impl_->ledger.get());
  }
  if (!opt_.kv_disk.empty()) {
    if (!opt_.prefix_caching()) throw Error("--kv-disk needs prefix caching (retained prefixes, a mode other than none)");
    const std::string shape = std::string(kv_type_name(layout.type)) + " chunk " + std::to_string(layout.chunk_size) +
                              " layers " + std::to_string(layout.n_layers) + " kv_heads " +
                              std::to_string(layout.n_kv_heads) + " head_dim " + std::to_string(layout.head_dim) +
                              (c.uses_long_factors() ? " rope long factors" : "");
    DiskTierOptions d;
    d.dir = opt_.kv_disk;
    d.capacity_bytes = opt_.kv_disk_bytes;
    d.root = chunk_key_root(impl_->model_identity().sha256, shape);
    d.chunk_tokens = layout.chunk_size;
    d.chunk_bytes = layout.chunk_bytes();
    d.on_loaded = [m = impl_.get()] { m->wake(); };
    d.before_read = opt_.kv_disk_before_read;
    impl_->disk = std::make_unique<DiskTier>(std::move(d));
    impl_->kv.attach_disk(impl_->disk.get());
  }
  if (opt_.prefix_caching()) {
    const size_t hold = opt_.hold_memory > 0 ? opt_.hold_memory : bytes / 4;
    impl_->holds = std::make_unique<PrefixHolds>(impl_->kv, int(hold / layout.chunk_bytes()));
  }
  impl_->text = pml::text_model(model);
  impl_->publish_stats();
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  shutdown();
  if (impl_->thread.joinable()) impl_->thread.join();
}


void Engine::init_grammar() const {
  std::call_once(impl_->grammar_once, [&] {
    impl_->grammar_vocab = std::make_unique<GrammarVocab>(model_.tokenizer());
    // Half the places for compiles at most: the rest for the constraints
    // clients ask for.
    impl_->later_compiles = std::make_unique<LaterCompiles>(std::max(1, default_children(ProcessBudget{}.memory_bytes) / 2));
    impl_->grammar_ready.store(impl_->grammar_vocab.get(), std::memory_order_release);
  });
}

std::shared_ptr<const Grammar> Engine::compile_grammar(const GrammarSpec& spec) const {
  init_grammar();
  return Grammar::compile(*impl_->grammar_vocab, spec);
}

std::shared_ptr<const Grammar> Engine::compile_grammar(const GrammarSpec& spec, const ProcessBudget& budget) const {
  init_grammar();
  return Grammar::compile(*impl_->grammar_vocab, spec, budget);
}

std::shared_ptr<const Grammar> Engine::compile_grammar(const GrammarSpec& spec, const ProcessBudget& budget,
                                                       double patience) const {
  init_grammar();
  return impl_->later_compiles->compile(*impl_->grammar_vocab, spec, budget, patience);
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
  const PrefixKv& kv = impl_->kv;
  return {model_.config().n_vocab, n_ctx_,   kv.layout().chunk_size, kv.capacity(), stats().kv.pinned,
          size_t(kv.capacity()) * kv.layout().chunk_bytes(), opt_.max_batch, opt_.mode != AttnMode::kNone};
}

bool Engine::wait_idle(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  return m.cv.wait_for(lock, timeout, [&] { return m.queued == 0 && m.running == 0; });
}


int Engine::hold_prefix(std::vector<int32_t> tokens, std::chrono::seconds ttl) {
  Impl& m = *impl_;
  if (!m.holds) return 0;
  return m.on_engine_thread([&m, &tokens, ttl] {
    const int held = m.holds->hold(tokens, PrefixHolds::Clock::now() + ttl);
    m.publish_stats();
    return held;
  });
}

int Engine::flush_cache() {
  Impl& m = *impl_;
  return m.on_engine_thread([&m] {
    const int freed = m.kv.flush();
    m.publish_stats();
    return freed;
  });
}

std::vector<uint64_t> Engine::kv_block_hashes() const {
  Impl& m = *impl_;
  if (!m.ledger) return {};
  return m.on_engine_thread([&m] { return m.kv.block_hashes(m.ledger->block_size()); });
}

std::shared_ptr<const KvTreeSnapshot> Engine::kv_tree() const {
  Impl& m = *impl_;
  std::lock_guard lock(m.tree_mu);
  const auto now = std::chrono::steady_clock::now();
  if (m.tree && now - m.tree->at < std::chrono::milliseconds(250)) return m.tree;
  try {
    m.tree = m.on_engine_thread([&m] {
      auto t = std::make_shared<KvTreeSnapshot>();
      t->view = m.kv.view(kTreeNodes, kTreeHead);
      m.publish_stats();
      t->stats = m.engine.stats();
      t->chunk_size = m.kv.layout().chunk_size;
      t->at = std::chrono::steady_clock::now();
      return std::shared_ptr<const KvTreeSnapshot>(std::move(t));
    });
  } catch (const Error&) {
    // stopped: the last snapshot (or an empty one) stands
    if (!m.tree) m.tree = std::make_shared<KvTreeSnapshot>();
  }
  return m.tree;
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard lock(impl_->stats_mu);
    s = impl_->stats;
  }
  // The tier writes on its own thread, also while the engine is idle: read it now.
  s.disk_on = impl_->disk != nullptr;
  if (s.disk_on) s.disk = impl_->disk->stats();
  if (const GrammarVocab* v = impl_->grammar_ready.load(std::memory_order_acquire)) {
    const Grammar::CacheUse u = Grammar::cache_use(*v);
    s.grammar_cache_entries = u.entries;
    s.grammar_cache_bytes = u.bytes;
  }
  return s;
}

}  // namespace cs
