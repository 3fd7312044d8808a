// The CUDA runtime behind plain C++ types, so that code on any floor can ask
// for a GPU, hold device memory and time work on it without including CUDA's
// headers. Built from base/cuda.cu where CMake found nvcc (CHUNKSERVE_CUDA);
// elsewhere base/cuda_stub.cpp answers that no device is present, so every
// caller works the same way in a CPU-only build.
//
// Errors: every call that fails throws cs::Error naming the CUDA call and the
// runtime's message (out of device memory is ErrorKind::kNoRoom).
// Launches: kernels go through launch() below, which records them in the
// thread's LaunchQueue (base/launch_queue.h: CUDA graphs); every call here
// that meets the device from the host (copies, memset, synchronize, timers,
// memory freed) first sends what is recorded, so the order the caller wrote
// is the order the device sees. A failed launch throws there.
// Threads: the calls act on the calling thread's current device and the
// default stream unless a stream is given.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "base/launch_queue.h"

namespace cs::cuda {

// Whether this build has CUDA code at all.
bool built_with_cuda();

// Whether a usable device is present: false with the reason (no CUDA in the
// build, no driver, no device, a device older than the code's sm_90) in *why.
bool device_available(std::string* why = nullptr);

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int major = 0, minor = 0;
  size_t memory_bytes = 0, l2_bytes = 0;
  size_t smem_per_block_optin = 0;
};
DeviceInfo device_info();

// The device's memory now: what may still be allocated, of its total.
struct MemoryInfo {
  size_t free = 0, total = 0;
};
MemoryInfo memory_info();
// The error an allocation of `bytes` the device could not make throws
// (ErrorKind::kNoRoom): "CUDA: <what>: cannot allocate 512 MiB on the device
// (300 MiB free of 80 GiB)".
std::string no_room_message(const char* what, size_t bytes);

// Device memory, owned. Moves, does not copy. Contents start undefined.
// Out of device memory, the constructor throws no_room_message's error.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return n_; }
  // Grows (contents lost) to hold at least `bytes`.
  void reserve(size_t bytes);

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Host to device, after the launches before it and before those after it;
// returns once `src` may be reused. Unlike cudaMemcpy, which first waits
// for every launch before it, the driver may stage the bytes and return at
// once, so a step's uploads need not stall the host while the GPU works.
void to_device(void* dst, const void* src, size_t bytes);
void to_host(void* dst, const void* src, size_t bytes);  // synchronous
void device_copy(void* dst, const void* src, size_t bytes);  // on the default stream
void memset_device(void* dst, int value, size_t bytes);
void synchronize();  // waits for the device; throws a kernel's pending error
// dst row i = src row rows[i], rows of `cols` floats (device pointers; on
// the default stream).
void gather_rows(const float* src, int64_t cols, const int32_t* rows, int n, float* dst);

// Elapsed device time between two points of the default stream.
class Timer {
 public:
  Timer();
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start();
  void stop();
  double microseconds();  // waits for stop()

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// Benchmarks' helpers. flush_l2 reads `buf` (make it several times the L2's
// size), leaving L2 full of clean lines of it: what a kernel timed next finds
// there is not its own data, and no dirty line of an earlier write is written
// back on its time. spin keeps the device busy for about `us` microseconds,
// so that the work queued after it starts only once the host has queued it
// all (no host launch gap inside a timed interval).
void flush_l2(const Buffer& buf);
void spin(double us);

// Throws cs::Error for the last launch's error, if any (after a launch).
void check_launch(const char* what);

// Sends the launches recorded so far (base/launch_queue.h).
void flush();
// CUDA graphs on (the default) or off for launches from now on, every
// thread's (off: each launch goes at once, as CUDA's <<<>>> does).
void set_graphs(bool on);
bool graphs();
// The calling thread's launch counts.
LaunchStats launch_stats();
// The device's time in the calling thread's sends (graphs replayed, kernels
// launched; copies not included), timed from set_send_timing(true) on, in
// microseconds; 0 where nothing is timed. A step's wall time less this is
// what it spends outside kernels (the host's work, copies, launch gaps
// between sends).
void set_send_timing(bool on);
double device_busy_us();

namespace detail {
void record(Launch l, const void* const* values, const uint32_t* sizes, const uint32_t* aligns, size_t n);
template <class D>
Dim3 dim(const D& d) {
  if constexpr (std::is_integral_v<D>) return {unsigned(d), 1, 1};
  else return {unsigned(d.x), unsigned(d.y), unsigned(d.z)};
}
template <class T>
using Value = std::remove_cv_t<std::remove_reference_t<T>>;
template <class... P, class... A>
void record(Launch l, void (*kernel)(P...), A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel's arguments, one for each parameter");
  l.func = reinterpret_cast<const void*>(kernel);
  // Each argument converted to its parameter's type, as a launch does.
  auto go = [&](const Value<P>&... v) {
    const void* values[] = {static_cast<const void*>(&v)..., nullptr};
    const uint32_t sizes[] = {uint32_t(sizeof(v))..., 0};
    const uint32_t aligns[] = {uint32_t(alignof(Value<P>))..., 1};
    record(std::move(l), values, sizes, aligns, sizeof...(P));
  };
  go(static_cast<Value<P>>(std::forward<A>(args))...);
}
}  // namespace detail

// kernel<<<grid, block>>>(args...), recorded: `what` names it in errors.
template <class G, class B, class... P, class... A>
void launch(const char* what, void (*kernel)(P...), const G& grid, const B& block, A&&... args) {
  Launch l;
  l.what = what, l.grid = detail::dim(grid), l.block = detail::dim(block);
  detail::record(std::move(l), kernel, std::forward<A>(args)...);
}
// With dynamic shared memory, and `after_previous`: may start while the
// previous launch runs (programmatic dependent launch; the kernel waits for
// its inputs with griddepcontrol.wait, and before it ends, since the next
// launch waits only for this one's end, not its predecessor's).
template <class G, class B, class... P, class... A>
void launch_ex(const char* what, void (*kernel)(P...), const G& grid, const B& block, size_t smem,
               bool after_previous, A&&... args) {
  Launch l;
  l.what = what, l.grid = detail::dim(grid), l.block = detail::dim(block);
  l.smem = uint32_t(smem), l.after_previous = after_previous;
  detail::record(std::move(l), kernel, std::forward<A>(args)...);
}

}  // namespace cs::cuda
