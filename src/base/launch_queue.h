// Kernel launches gathered into CUDA graphs. A decode step of a small model
// is hundreds of short kernels; launched one by one, the host's launch cost
// (microseconds each) is the step's time, not the kernels'. So base/cuda.h's
// launch() records a launch here instead of making it, and the launches
// gathered since the last point where the host meets the device (a copy, a
// synchronize, memory freed: base/cuda.h calls flush() there) go at once:
// - as one graph replayed, when a graph was made for the same launches
//   (kernels, grids, every argument's bytes): a decode step that repeats its
//   predecessor's shapes and buffers is one launch, and so is each layer's
//   run of launches where the layers' runs are cut apart (a host KV store);
// - as a graph of the same kernels updated in place and replayed, when the
//   arguments or grids are new (a batch of another size, a longer context);
//   arguments seen before get a graph of their own instead (up to
//   kPerShape graphs of one sequence of kernels);
// - as a new graph when this sequence of kernels is seen for the second
//   time, and one by one the first time (a prefill of a length never seen
//   again costs no graph).
// Replaying a graph does what launching its launches one by one does, since
// a launch's effect depends only on its kernel, grid and arguments (values,
// copied at record time) and on device memory, which nothing between two
// flush points touches from the host.
//
// The queue is per thread (each thread's launches keep their order on the
// default stream); the executor (base/cuda.cu on the CUDA runtime,
// tests/emu's fake device on the CPU) launches and makes the graphs.
//
// C++17: base/cuda.h includes it, and the .cu files are compiled as C++17.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <vector>

namespace cs::cuda {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  bool operator==(const Dim3& o) const { return x == o.x && y == o.y && z == o.z; }
};

// One recorded launch; its arguments' bytes live in the queue's arena, at
// offsets args_at (argument i at args_at + offset[i]).
struct Launch {
  static constexpr int kMaxArgs = 16;
  const void* func = nullptr;  // the kernel (its host stub's address)
  const char* what = "";       // named in errors
  Dim3 grid, block;
  uint32_t smem = 0;
  // May start while the previous launch still runs (programmatic dependent
  // launch: the kernel waits in its code for what it needs).
  bool after_previous = false;
  uint16_t n_args = 0;
  uint16_t offset[kMaxArgs] = {};
  uint32_t args_at = 0, args_bytes = 0;
  // Emulation only (tests/emu): runs the launch on the CPU, its arguments
  // held by value.
  std::function<void()> emulated;
};

// How launches and graphs are made (base/cuda.cu: the CUDA runtime).
class LaunchExecutor {
 public:
  virtual ~LaunchExecutor() = default;
  // Launches ls[0..n) now, in order, on the default stream.
  virtual void launch(const Launch* ls, size_t n, const uint8_t* arena) = 0;
  // A graph of them, ready to replay; nullptr where none could be made (then
  // the queue launches them one by one).
  virtual void* build(const Launch* ls, size_t n, const uint8_t* arena) = 0;
  // The graph made for other launches of the same kernels (same count,
  // kernels, blocks, shared memory, order) changed to do these; false where
  // it cannot be (the graph is then destroyed by the queue and rebuilt).
  virtual bool update(void* graph, const Launch* ls, size_t n, const uint8_t* arena) = 0;
  virtual void replay(void* graph) = 0;
  virtual void destroy(void* graph) = 0;
  // With timing on, what launch() and replay() send is timed on the device
  // (events around it); busy_us: the device's time in them so far, waiting
  // for the last. Executors that cannot time keep 0.
  virtual void set_timing(bool) {}
  virtual double busy_us() { return 0; }
};

struct LaunchStats {
  uint64_t launches = 0;  // kernel launches recorded
  uint64_t flushes = 0;   // flush points with launches pending
  uint64_t direct = 0;    // ... launched one by one
  uint64_t replays = 0;   // ... replayed as recorded
  uint64_t updates = 0;   // ... replayed after an update
  uint64_t builds = 0;    // ... made into a new graph and replayed

  // The counts of an interval: after - before.
  LaunchStats operator-(const LaunchStats& o) const {
    return {launches - o.launches, flushes - o.flushes, direct - o.direct,
            replays - o.replays,   updates - o.updates, builds - o.builds};
  }
  LaunchStats& operator+=(const LaunchStats& o) {
    launches += o.launches, flushes += o.flushes, direct += o.direct;
    replays += o.replays, updates += o.updates, builds += o.builds;
    return *this;
  }
};

class LaunchQueue {
 public:
  explicit LaunchQueue(LaunchExecutor& exec) : exec_(exec) {}
  ~LaunchQueue();
  LaunchQueue(const LaunchQueue&) = delete;
  LaunchQueue& operator=(const LaunchQueue&) = delete;

  // Arguments: n values of the given sizes and alignments at `values[i]`.
  // With graphs off, launches at once.
  void add(Launch l, const void* const* values, const uint32_t* sizes, const uint32_t* aligns, size_t n);
  // Sends what is pending (see above). Throws cs::Error for a launch that fails.
  void flush();
  // Graphs on (the default) or off: off, every launch goes at once.
  void set_graphs(bool on);
  bool graphs() const { return graphs_; }
  size_t pending() const { return pending_.size(); }
  const LaunchStats& stats() const { return stats_; }

  // At most this many graphs are kept (least recently replayed dropped),
  // and at most kPerShape of one sequence of kernels.
  static constexpr size_t kMaxGraphs = 128;
  static constexpr int kPerShape = 32;
  // Fewer launches than this go one by one (a graph saves nothing).
  static constexpr size_t kMinGraph = 3;

 private:
  struct Cached {
    uint64_t shape = 0, key = 0;
    std::vector<Launch> launches;  // what the graph does now
    std::vector<uint8_t> arena;
    void* graph = nullptr;
  };
  using Entry = std::list<Cached>::iterator;
  void send();
  bool same_launches(const Cached& c) const;
  void keep(Entry e, uint64_t key);
  void drop(Entry e);
  static void count(std::unordered_map<uint64_t, uint32_t>& m, uint64_t k, uint32_t* before);

  LaunchExecutor& exec_;
  bool graphs_ = true;
  std::vector<Launch> pending_;
  std::vector<uint8_t> arena_;
  std::list<Cached> cache_;  // most recently replayed first
  std::unordered_map<uint64_t, Entry> by_key_;       // the launches' hash -> their graph
  std::unordered_map<uint64_t, int> of_shape_;       // graphs per sequence of kernels
  std::unordered_map<uint64_t, uint32_t> shapes_seen_, keys_seen_;  // sightings (bounded)
  LaunchStats stats_;
};

// This thread's queue on the build's executor (base/cuda.cu, base/cuda_stub.cpp,
// or tests/emu's fake device: launch_executor()).
LaunchQueue& launch_queue();
LaunchExecutor& launch_executor();

}  // namespace cs::cuda
