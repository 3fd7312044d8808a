// The emulated device's memory (tests/emu/fake_device.cpp), for tests of
// what runs out of it: a limit on the bytes allocated at once, and counts.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cs::cuda::fake {

void set_memory_limit(size_t bytes);  // 0: the device's whole 16 GiB
size_t memory_in_use();
uint64_t allocations();  // buffers made so far

}  // namespace cs::cuda::fake
