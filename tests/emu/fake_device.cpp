// base/cuda.h on the CPU, for the emulated backend's test
// (tests/emu/cuda_backend_emu_test.cpp): a "device" whose memory is host
// memory, filled with 0xff bytes (NaN floats) when allocated, as device
// memory starts undefined, so a value read before it is written shows.
// Copies are memcpy, every queue is already done. It replaces the
// library's base/cuda.cu in that test binary (every function of the
// header is here, so the linker never takes the real one).
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/cuda.h"
#include "base/error.h"

namespace cs::cuda {

bool built_with_cuda() { return true; }
bool device_available(std::string*) { return true; }
DeviceInfo device_info() { return {"emulated on the CPU", 1, 9, 0, size_t(1) << 34, size_t(1) << 20, 1 << 17}; }

Buffer::Buffer(size_t bytes) : p_(std::malloc(bytes ? bytes : 1)), n_(bytes) {
  if (!p_) throw std::bad_alloc();
  std::memset(p_, 0xff, bytes);
}
Buffer::~Buffer() { std::free(p_); }
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(p_);
    p_ = std::exchange(o.p_, nullptr);
    n_ = std::exchange(o.n_, 0);
  }
  return *this;
}
void Buffer::reserve(size_t bytes) {
  if (bytes > n_) *this = Buffer(bytes);
}

void to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void device_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}
void memset_device(void* dst, int value, size_t bytes) { std::memset(dst, value, bytes); }
void synchronize() {}
void gather_rows(const float* src, int64_t cols, const int32_t* rows, int n, float* dst) {
  for (int i = 0; i < n; ++i) std::memcpy(dst + i * cols, src + int64_t(rows[i]) * cols, size_t(cols) * sizeof(float));
}

Timer::Timer() {}
Timer::~Timer() {}
void Timer::start() {}
void Timer::stop() {}
double Timer::microseconds() { return 0; }

void flush_l2(const Buffer&) {}
void spin(double) {}
void check_launch(const char*) {}

}  // namespace cs::cuda
