// base/cuda.h on the CUDA runtime.
#include <cuda_runtime.h>

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

}  // namespace

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

Buffer::Buffer(size_t bytes) : n_(bytes) {
  if (bytes) check(cudaMalloc(&p_, bytes), "cudaMalloc");
}

Buffer::~Buffer() {
  if (p_) cudaFree(p_);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
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
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
}
void to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
}
void device_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync on the device");
}
void memset_device(void* dst, int value, size_t bytes) {
  if (bytes) check(cudaMemsetAsync(dst, value, bytes, 0), "cudaMemsetAsync");
}
void synchronize() { check(cudaDeviceSynchronize(), "a kernel"); }

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
void Timer::start() { check(cudaEventRecord(static_cast<cudaEvent_t>(start_), 0), "cudaEventRecord"); }
void Timer::stop() { check(cudaEventRecord(static_cast<cudaEvent_t>(stop_), 0), "cudaEventRecord"); }
double Timer::microseconds() {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)),
        "cudaEventElapsedTime");
  return double(ms) * 1e3;
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

void gather_rows(const float* src, int64_t cols, const int32_t* rows, int n, float* dst) {
  const int64_t total = int64_t(n) * cols;
  if (total <= 0) return;
  gather_kernel<<<unsigned((total + 255) / 256), 256>>>(src, cols, rows, total, dst);
  check_launch("gather_rows");
}

void flush_l2(const Buffer& buf) {
  read_all<<<1024, 256>>>(buf.as<const uint4>(), buf.bytes() / 16, buf.as<unsigned>());
  check_launch("flush_l2");
}

void spin(double us) {
  static long long per_us = 0;  // cycles per microsecond of SM 0's clock
  if (!per_us) {
    int khz = 0, dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev), "cudaDeviceGetAttribute");
    per_us = khz / 1000;
  }
  spin_kernel<<<1, 1>>>((long long)(us * double(per_us)));
  check_launch("spin");
}

}  // namespace cs::cuda
