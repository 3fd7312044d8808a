// base/cuda.h on the CPU, for the emulated backend's test
// (tests/emu/cuda_backend_emu_test.cpp): a "device" whose memory is host
// memory, filled with 0xff bytes (NaN floats) when allocated, as device
// memory starts undefined, so a value read before it is written shows.
// Copies are memcpy. Launches go through base/launch_queue.h's queue, as
// on a device, and its "graphs" are the recorded closures replayed, so the
// backend's flush points (every copy, free and synchronize sends what is
// recorded first) are exercised: a launch left pending across one would run
// on changed memory and show in the results. It replaces the library's
// base/cuda.cu in that test binary (every function of the header is here, so
// the linker never takes the real one).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "base/cuda.h"
#include "base/error.h"
#include "emu/cuda_emu.h"
#include "emu/fake_device.h"

namespace cs::cuda {
namespace {

class FakeExecutor final : public LaunchExecutor {
 public:
  using Graph = std::vector<Launch>;
  void launch(const Launch* ls, size_t n, const uint8_t*) override {
    for (size_t i = 0; i < n; ++i) ls[i].emulated();
  }
  void* build(const Launch* ls, size_t n, const uint8_t*) override { return new Graph(ls, ls + n); }
  bool update(void* graph, const Launch* ls, size_t n, const uint8_t*) override {
    Graph& g = *static_cast<Graph*>(graph);
    if (g.size() != n) throw Error("fake device: a graph updated with another number of launches");
    for (size_t i = 0; i < n; ++i)
      if (g[i].func != ls[i].func) throw Error("fake device: a graph updated with other kernels");
    g.assign(ls, ls + n);
    return true;
  }
  void replay(void* graph) override {
    for (const Launch& l : *static_cast<Graph*>(graph)) l.emulated();
  }
  void destroy(void* graph) override { delete static_cast<Graph*>(graph); }
};

void submit(const char* what, const void* func, emu::dim3 grid, emu::dim3 block, uint32_t smem, bool after_previous,
            std::span<const void* const> values, std::span<const uint32_t> sizes, std::span<const uint32_t> aligns,
            std::function<void()> run) {
  Launch l;
  l.what = what, l.func = func, l.smem = smem, l.after_previous = after_previous;
  l.grid = {grid.x, grid.y, grid.z}, l.block = {block.x, block.y, block.z};
  l.emulated = std::move(run);
  detail::record(std::move(l), values.data(), sizes.data(), aligns.data(), values.size());
}
const bool submitting = (emu::submit = submit, true);

}  // namespace

LaunchExecutor& launch_executor() {
  thread_local FakeExecutor exec;
  return exec;
}

bool built_with_cuda() { return true; }
bool device_available(std::string*) { return true; }
constexpr size_t kMemory = emu::kEmulatedMemory;
DeviceInfo device_info() { return {"emulated on the CPU", 1, 9, 0, kMemory, size_t(1) << 20, 1 << 17}; }

namespace {
// Buffers are made and freed on several threads (a test's and an engine's).
std::atomic<size_t> in_use{0}, limit{0};
std::atomic<uint64_t> made{0};
size_t total() { return limit ? limit.load() : kMemory; }
}  // namespace
void fake::set_memory_limit(size_t bytes) { limit = bytes; }
size_t fake::memory_in_use() { return in_use; }
uint64_t fake::allocations() { return made; }
MemoryInfo memory_info() { return {total() - std::min(total(), in_use.load()), total()}; }

Buffer::Buffer(size_t bytes) : n_(bytes) {
  if (in_use + bytes > total()) {
    n_ = 0;
    throw Error(no_room_message("device memory", bytes), ErrorKind::kNoRoom);
  }
  p_ = std::malloc(bytes ? bytes : 1);
  if (!p_) throw std::bad_alloc();
  std::memset(p_, 0xff, bytes);
  in_use += bytes, ++made;
}
Buffer::~Buffer() {
  if (p_) flush();
  std::free(p_);
  in_use -= n_;
}
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (p_) flush();
    std::free(p_);
    in_use -= n_;
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
void Buffer::reserve(size_t bytes) {
  if (bytes > n_) *this = Buffer(bytes);
}

void to_device(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes) std::memcpy(dst, src, bytes);
}
void to_host(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes) std::memcpy(dst, src, bytes);
}
void device_copy(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes) std::memmove(dst, src, bytes);
}
void memset_device(void* dst, int value, size_t bytes) {
  flush();
  std::memset(dst, value, bytes);
}
void synchronize() { flush(); }
namespace {
void gather(const float* src, int64_t cols, const int32_t* rows, int n, float* dst) {
  for (int i = 0; i < n; ++i) std::memcpy(dst + i * cols, src + int64_t(rows[i]) * cols, size_t(cols) * sizeof(float));
}
}  // namespace
// A launch like the others (it reads what earlier launches wrote).
void gather_rows(const float* src, int64_t cols, const int32_t* rows, int n, float* dst) {
  if (n <= 0 || cols <= 0) return;
  Launch l;
  l.what = "gather_rows", l.func = reinterpret_cast<const void*>(&gather);
  l.emulated = [=] { gather(src, cols, rows, n, dst); };
  const void* values[] = {&src, &cols, &rows, &n, &dst};
  const uint32_t sizes[] = {8, 8, 8, 4, 8}, aligns[] = {8, 8, 8, 4, 8};
  detail::record(std::move(l), values, sizes, aligns, 5);
}

Timer::Timer() {}
Timer::~Timer() {}
void Timer::start() { flush(); }
void Timer::stop() { flush(); }
double Timer::microseconds() { return 0; }

void flush_l2(const Buffer&) {}
void spin(double) {}
void check_launch(const char*) {}

}  // namespace cs::cuda
