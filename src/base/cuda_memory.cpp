// base/cuda.h's out-of-memory error, the same for every runtime (base/cuda.cu,
// and the emulated device of tests/emu, which has a memory limit of its own).
#include <cstdio>
#include <string>

#include "base/cuda.h"

namespace cs::cuda {
namespace {

std::string size_text(size_t b) {
  char s[32];
  if (b >= (size_t(1) << 30)) std::snprintf(s, sizeof s, "%.1f GiB", double(b) / double(size_t(1) << 30));
  else std::snprintf(s, sizeof s, "%zu MiB", (b + (size_t(1) << 20) - 1) >> 20);
  return s;
}

}  // namespace

std::string no_room_message(const char* what, size_t bytes) {
  std::string m = std::string("CUDA: ") + what + ": cannot allocate " + size_text(bytes) + " on the device";
  try {
    const MemoryInfo info = memory_info();
    m += " (" + size_text(info.free) + " free of " + size_text(info.total) + ")";
  } catch (...) {  // the sizes are a courtesy; the error is the allocation's
  }
  return m;
}

}  // namespace cs::cuda
