// The GPU benchmarks' way to time one call (bench attention --device cuda,
// bench matmul --device cuda): before it, a read of 4x the L2's size (L2
// then holds clean lines of that buffer: a call finds there only what it
// brings itself, and writes back no one else's dirty lines), then the device
// kept busy while the host queues the timed call, so no launch gap falls
// inside its interval.
#pragma once
#include <algorithm>
#include <cstddef>

#include "base/cuda.h"

namespace cs {

struct Flusher {
  cuda::Buffer buf;
  explicit Flusher(size_t l2) : buf(std::max<size_t>(l2 * 4, size_t(64) << 20)) {
    cuda::memset_device(buf.get(), 0, buf.bytes());
  }
  void operator()() {
    cuda::flush_l2(buf);
    cuda::spin(200);
  }
};

}  // namespace cs
