// base/cuda.h in a build without CUDA: no device, and every device call is an
// error that says so (callers ask device_available() first).
#include "base/cuda.h"
#include "base/error.h"

namespace cs::cuda {
namespace {
[[noreturn]] void none() { throw Error("this chunkserve was built without CUDA (no nvcc was found at configure time)"); }

class NoExecutor final : public LaunchExecutor {
 public:
  void launch(const Launch*, size_t, const uint8_t*) override { none(); }
  void* build(const Launch*, size_t, const uint8_t*) override { none(); }
  bool update(void*, const Launch*, size_t, const uint8_t*) override { none(); }
  void replay(void*) override { none(); }
  void destroy(void*) override {}
};
}  // namespace

LaunchExecutor& launch_executor() {
  static NoExecutor exec;
  return exec;
}

bool built_with_cuda() { return false; }
bool device_available(std::string* why) {
  if (why) *why = "this chunkserve was built without CUDA";
  return false;
}
DeviceInfo device_info() { none(); }
MemoryInfo memory_info() { none(); }
Buffer::Buffer(size_t bytes) : n_(bytes) {
  if (bytes) none();
}
Buffer::~Buffer() = default;
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  p_ = std::exchange(o.p_, nullptr);
  n_ = std::exchange(o.n_, 0);
  return *this;
}
void Buffer::reserve(size_t bytes) {
  if (bytes > n_) none();
}
void to_device(void*, const void*, size_t) { none(); }
void to_host(void*, const void*, size_t) { none(); }
void device_copy(void*, const void*, size_t) { none(); }
void memset_device(void*, int, size_t) { none(); }
void synchronize() { none(); }
Timer::Timer() { none(); }
Timer::~Timer() = default;
void Timer::start() { none(); }
void Timer::stop() { none(); }
double Timer::microseconds() { none(); }
void check_launch(const char*) { none(); }
void gather_rows(const float*, int64_t, const int32_t*, int, float*) { none(); }
void flush_l2(const Buffer&) { none(); }
void spin(double) { none(); }

}  // namespace cs::cuda
