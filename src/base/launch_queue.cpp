#include "base/launch_queue.h"

#include <atomic>
#include <cstring>
#include <iterator>
#include <utility>

#include "base/cuda.h"
#include "base/error.h"

namespace cs::cuda {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {  // FNV-1a over a word
  for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}

// What must match for a graph to be updated rather than rebuilt: the
// kernels in order, their blocks, shared memory and launch kind.
uint64_t shape_of(const std::vector<Launch>& ls) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Launch& l : ls) {
    h = mix(h, uint64_t(reinterpret_cast<uintptr_t>(l.func)));
    h = mix(h, (uint64_t(l.block.x) << 32) ^ (uint64_t(l.block.y) << 16) ^ l.block.z);
    h = mix(h, (uint64_t(l.smem) << 1) | (l.after_previous ? 1 : 0));
    h = mix(h, (uint64_t(l.n_args) << 32) | l.args_bytes);
  }
  return mix(h, ls.size());
}

// The launches exactly: their shape, grids and argument bytes.
uint64_t key_of(uint64_t shape, const std::vector<Launch>& ls, const std::vector<uint8_t>& arena) {
  uint64_t h = mix(shape, 0x9e3779b97f4a7c15ull);
  for (const Launch& l : ls) h = mix(h, (uint64_t(l.grid.x) << 32) ^ (uint64_t(l.grid.y) << 16) ^ l.grid.z);
  for (size_t i = 0; i + 8 <= arena.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, arena.data() + i, 8);
    h = mix(h, w);
  }
  for (size_t i = arena.size() & ~size_t(7); i < arena.size(); ++i) h = mix(h, arena[i]);
  return h;
}

bool same_launch(const Launch& a, const Launch& b) {
  return a.func == b.func && a.grid == b.grid && a.block == b.block && a.smem == b.smem &&
         a.after_previous == b.after_previous && a.n_args == b.n_args && a.args_at == b.args_at &&
         a.args_bytes == b.args_bytes && std::memcmp(a.offset, b.offset, sizeof a.offset) == 0;
}

bool same_kernels(const std::vector<Launch>& a, const std::vector<Launch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].func != b[i].func || !(a[i].block == b[i].block) || a[i].smem != b[i].smem ||
        a[i].after_previous != b[i].after_previous || a[i].n_args != b[i].n_args ||
        a[i].args_bytes != b[i].args_bytes)
      return false;
  return true;
}

}  // namespace

LaunchQueue::~LaunchQueue() {
  try {
    flush();
  } catch (...) {  // a thread's end: the error stays the device's, for the next synchronize
  }
  for (Cached& c : cache_) exec_.destroy(c.graph);
}

void LaunchQueue::add(Launch l, const void* const* values, const uint32_t* sizes, const uint32_t* aligns, size_t n) {
  if (n > size_t(Launch::kMaxArgs)) throw Error(std::string("CUDA: too many arguments for ") + l.what);
  // Zero-filled, so padding never makes two equal launches differ.
  size_t at = (arena_.size() + 15) & ~size_t(15);
  l.args_at = uint32_t(at);
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    off = (off + aligns[i] - 1) & ~size_t(aligns[i] - 1);
    l.offset[i] = uint16_t(off);
    off += sizes[i];
  }
  l.n_args = uint16_t(n);
  l.args_bytes = uint32_t(off);
  arena_.resize(at + off, 0);
  for (size_t i = 0; i < n; ++i) std::memcpy(arena_.data() + at + l.offset[i], values[i], sizes[i]);
  ++stats_.launches;
  pending_.push_back(std::move(l));
  if (!graphs_) flush();
}

void LaunchQueue::set_graphs(bool on) {
  flush();
  graphs_ = on;
}

bool LaunchQueue::same_launches(const Cached& c) const {
  if (c.launches.size() != pending_.size() || c.arena != arena_) return false;
  for (size_t i = 0; i < pending_.size(); ++i)
    if (!same_launch(c.launches[i], pending_[i])) return false;
  return true;
}

void LaunchQueue::keep(Entry e, uint64_t key) {
  if (auto it = by_key_.find(e->key); it != by_key_.end() && it->second == e) by_key_.erase(it);
  e->key = key;
  e->launches = pending_;
  e->arena = arena_;
  by_key_[key] = e;
  cache_.splice(cache_.begin(), cache_, e);  // most recent first
}

void LaunchQueue::drop(Entry e) {
  exec_.destroy(e->graph);
  if (auto it = by_key_.find(e->key); it != by_key_.end() && it->second == e) by_key_.erase(it);
  if (--of_shape_[e->shape] == 0) of_shape_.erase(e->shape);
  cache_.erase(e);
}

void LaunchQueue::count(std::unordered_map<uint64_t, uint32_t>& m, uint64_t k, uint32_t* before) {
  if (m.size() > 4096) m.clear();  // bounded: a long run of launches never repeated
  *before = m[k]++;
}

void LaunchQueue::flush() {
  if (pending_.empty()) return;
  // Cleared even when a launch throws: what failed is not sent again.
  struct Clear {
    LaunchQueue& q;
    ~Clear() { q.pending_.clear(), q.arena_.clear(); }
  } clear{*this};
  ++stats_.flushes;
  send();
}

void LaunchQueue::send() {
  const std::vector<Launch>& ls = pending_;
  auto direct = [&] {
    ++stats_.direct;
    exec_.launch(ls.data(), ls.size(), arena_.data());
  };
  if (!graphs_ || ls.size() < kMinGraph) return direct();
  const uint64_t shape = shape_of(ls), key = key_of(shape, ls, arena_);
  if (auto it = by_key_.find(key); it != by_key_.end() && same_launches(*it->second)) {
    cache_.splice(cache_.begin(), cache_, it->second);
    ++stats_.replays;
    return exec_.replay(it->second->graph);
  }
  uint32_t key_before = 0;
  count(keys_seen_, key, &key_before);
  const auto of = of_shape_.find(shape);
  const int graphs_of_shape = of == of_shape_.end() ? 0 : of->second;
  if (graphs_of_shape > 0 && !(key_before > 0 && graphs_of_shape < kPerShape)) {
    // New arguments for known kernels: the least recently replayed graph of
    // them, updated.
    Entry e = cache_.end();
    for (auto it = cache_.end(); it != cache_.begin();)
      if ((--it)->shape == shape) {
        e = it;
        break;
      }
    if (e != cache_.end()) {
      if (same_kernels(e->launches, ls) && exec_.update(e->graph, ls.data(), ls.size(), arena_.data())) {
        keep(e, key);
        ++stats_.updates;
        return exec_.replay(e->graph);
      }
      drop(e);
    }
  } else if (graphs_of_shape == 0) {
    uint32_t shape_before = 0;
    count(shapes_seen_, shape, &shape_before);
    if (shape_before == 0) return direct();
  }
  void* graph = exec_.build(ls.data(), ls.size(), arena_.data());
  if (!graph) return direct();
  cache_.push_front(Cached{shape, key, {}, {}, graph});
  ++of_shape_[shape];
  keep(cache_.begin(), key);
  if (cache_.size() > kMaxGraphs) drop(std::prev(cache_.end()));
  ++stats_.builds;
  exec_.replay(graph);
}

LaunchQueue& launch_queue() {
  thread_local LaunchQueue q(launch_executor());
  return q;
}

// base/cuda.h's front of the queue, the same for every runtime (each defines
// only launch_executor()). The switch is global; each thread's queue follows
// it at its next launch.
namespace {
std::atomic<bool> graphs_on{true};
}  // namespace

void detail::record(Launch l, const void* const* values, const uint32_t* sizes, const uint32_t* aligns, size_t n) {
  LaunchQueue& q = launch_queue();
  if (q.graphs() != graphs_on.load(std::memory_order_relaxed)) q.set_graphs(!q.graphs());
  q.add(std::move(l), values, sizes, aligns, n);
}
void flush() { launch_queue().flush(); }
void set_graphs(bool on) { graphs_on = on; }
bool graphs() { return graphs_on; }
LaunchStats launch_stats() { return launch_queue().stats(); }
void set_send_timing(bool on) { launch_executor().set_timing(on); }
double device_busy_us() { return launch_executor().busy_us(); }

}  // namespace cs::cuda
