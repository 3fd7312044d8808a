// base/cuda.h on the CUDA runtime.
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "base/cuda.h"
#include "base/error.h"

namespace cs::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky launch error so the next call can report its own
  throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e),
              e == cudaErrorMemoryAllocation ? ErrorKind::kNoRoom : ErrorKind::kInternal);
}

__global__ void read_all(const uint4* p, size_t n, unsigned* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // practically never: keeps the reads
}

__global__ void gather_kernel(const float* src, int64_t cols, const int32_t* rows, int64_t total, float* dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) dst[i] = src[int64_t(rows[i / cols]) * cols + i % cols];
}

__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// The launches' argument pointers, as cudaLaunchKernelExC takes them.
void args_of(const Launch& l, const uint8_t* arena, void** out) {
  for (int i = 0; i < l.n_args; ++i) out[i] = const_cast<uint8_t*>(arena + l.args_at + l.offset[i]);
}

cudaError_t launch_on(const Launch& l, const uint8_t* arena, cudaStream_t s) {
  void* argv[Launch::kMaxArgs];
  args_of(l, arena, argv);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(l.grid.x, l.grid.y, l.grid.z);
  cfg.blockDim = dim3(l.block.x, l.block.y, l.block.z);
  cfg.dynamicSmemBytes = l.smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = l.after_previous ? 1 : 0;
  return cudaLaunchKernelExC(&cfg, l.func, argv);
}

// Graphs by stream capture of the launches (so a programmatic launch keeps
// its kind of edge), replayed on the default stream. The capture stream is
// the thread's own, captured in thread-local mode: other threads' calls are
// not affected.
class RuntimeExecutor final : public LaunchExecutor {
 public:
  ~RuntimeExecutor() override {
    if (stream_) cudaStreamDestroy(stream_);
    for (auto [a, b] : timed_) cudaEventDestroy(a), cudaEventDestroy(b);
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  }
  void launch(const Launch* ls, size_t n, const uint8_t* arena) override {
    const Timed t(*this);
    for (size_t i = 0; i < n; ++i) check(launch_on(ls[i], arena, 0), ls[i].what);
  }
  void* build(const Launch* ls, size_t n, const uint8_t* arena) override {
    cudaGraph_t g = capture(ls, n, arena);
    if (!g) return nullptr;
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return exec;
  }
  bool update(void* graph, const Launch* ls, size_t n, const uint8_t* arena) override {
    cudaGraph_t g = capture(ls, n, arena);
    if (!g) return false;
    cudaGraphExecUpdateResultInfo info{};
    const cudaError_t e = cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(graph), g, &info);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess;
  }
  void replay(void* graph) override {
    const Timed t(*this);
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), 0), "cudaGraphLaunch");
  }
  void destroy(void* graph) override {
    if (graph) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph));
  }
  void set_timing(bool on) override { timing_ = on; }
  double busy_us() override {
    resolve(timed_.size());
    return busy_us_;
  }

 private:
  // A send between two events, when timing is on.
  struct Timed {
    RuntimeExecutor& x;
    cudaEvent_t end = nullptr;
    explicit Timed(RuntimeExecutor& e) : x(e) {
      if (!x.timing_) return;
      if (x.timed_.size() >= 4096) x.resolve(2048);  // long done: bounded when busy_us is never asked
      cudaEvent_t start = x.event();
      end = x.event();
      check(cudaEventRecord(start, 0), "cudaEventRecord");
      x.timed_.push_back({start, end});
    }
    ~Timed() {
      if (end) cudaEventRecord(end, 0);
    }
  };
  cudaEvent_t event() {
    if (!spare_.empty()) {
      cudaEvent_t e = spare_.back();
      spare_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }
  // Adds the first n timed sends' device time, waiting for them.
  void resolve(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      auto [a, b] = timed_[i];
      float ms = 0;
      check(cudaEventSynchronize(b), "cudaEventSynchronize");
      check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
      busy_us_ += double(ms) * 1e3;
      spare_.push_back(a), spare_.push_back(b);
    }
    timed_.erase(timed_.begin(), timed_.begin() + std::ptrdiff_t(n));
  }
  bool timing_ = false;
  double busy_us_ = 0;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> timed_;
  std::vector<cudaEvent_t> spare_;

  // nullptr where capture fails (the launches then go one by one, and any
  // error of theirs shows there).
  cudaGraph_t capture(const Launch* ls, size_t n, const uint8_t* arena) {
    if (!stream_ && cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
      cudaGetLastError();
      stream_ = nullptr;
      return nullptr;
    }
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok = ok && launch_on(ls[i], arena, stream_) == cudaSuccess;
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &g);
    if (!ok || e != cudaSuccess) {
      cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      return nullptr;
    }
    return g;
  }
  cudaStream_t stream_ = nullptr;
};

}  // namespace

LaunchExecutor& launch_executor() {
  thread_local RuntimeExecutor exec;
  return exec;
}


bool built_with_cuda() { return true; }

bool device_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  int dev = 0, major = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
  if (major < 9) {
    if (why) *why = "the CUDA device is older than compute capability 9.0 (Hopper), which this build targets";
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  DeviceInfo d;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.major = p.major;
  d.minor = p.minor;
  d.memory_bytes = p.totalGlobalMem;
  d.l2_bytes = size_t(p.l2CacheSize);
  d.smem_per_block_optin = p.sharedMemPerBlockOptin;
  return d;
}

MemoryInfo memory_info() {
  MemoryInfo m;
  check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
  return m;
}

Buffer::Buffer(size_t bytes) : n_(bytes) {
  if (!bytes) return;
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    p_ = nullptr, n_ = 0;
    throw Error(no_room_message("device memory", bytes), ErrorKind::kNoRoom);
  }
  check(e, "cudaMalloc");
}

Buffer::~Buffer() {
  if (!p_) return;
  try {
    flush();  // launches recorded before may read it
  } catch (...) {  // the error stays the device's, for the next synchronize
  }
  cudaFree(p_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (p_) {
      try {
        flush();
      } catch (...) {
      }
      cudaFree(p_);
    }
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}

void Buffer::reserve(size_t bytes) {
  if (bytes <= n_) return;
  *this = Buffer(bytes);
}

void to_device(void* dst, const void* src, size_t bytes) {
  flush();
  // cudaMemcpy would first wait for every launch before it (a stream sync
  // for pageable memory); the async copy may stage the bytes and return.
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, 0), "cudaMemcpyAsync to the device");
}
void to_host(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}
void device_copy(void* dst, const void* src, size_t bytes) {
  flush();
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync on the device");
}
void memset_device(void* dst, int value, size_t bytes) {
  flush();
  if (bytes) check(cudaMemsetAsync(dst, value, bytes, 0), "cudaMemsetAsync");
}
void synchronize() {
  flush();
  check(cudaDeviceSynchronize(), "a kernel");
}

Timer::Timer() {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  start_ = a;
  stop_ = b;
}
Timer::~Timer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void Timer::start() {
  flush();
  check(cudaEventRecord(static_cast<cudaEvent_t>(start_), 0), "cudaEventRecord");
}
void Timer::stop() {
  flush();
  check(cudaEventRecord(static_cast<cudaEvent_t>(stop_), 0), "cudaEventRecord");
}
double Timer::microseconds() {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
        "cudaEventElapsedTime");
  return double(ms) * 1e3;
}

// Launches are checked where they are sent (flush); this reports an error a
// launch outside the queue left.
void check_launch(const char* what) { check(cudaGetLastError(), what); }

void gather_rows(const float* src, int64_t cols, const int32_t* rows, int n, float* dst) {
  const int64_t total = int64_t(n) * cols;
  if (total <= 0) return;
  launch("gather_rows", gather_kernel, unsigned((total + 255) / 256), 256, src, cols, rows, total, dst);
}

void flush_l2(const Buffer& buf) {
  launch("flush_l2", read_all, 1024, 256, buf.as<const uint4>(), buf.bytes() / 16, buf.as<unsigned>());
}

void spin(double us) {
  static long long per_us = 0;  // cycles per microsecond of SM 0's clock
  if (!per_us) {
    int khz = 0, dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev), "cudaDeviceGetAttribute");
    per_us = khz / 1000;
  }
  launch("spin", spin_kernel, 1, 1, (long long)(us * double(per_us)));
}

}  // namespace cs::cuda
