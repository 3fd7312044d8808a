// The emulator itself (tests/emu/cuda_emu.h): a launch runs every lane of
// every block once, whether its lanes meet or not; an in-place write before
// the lanes first meet is made once; and a kernel whose lanes meet in some
// blocks only fails by name instead of giving wrong values.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "emu/cuda_emu.h"

namespace cs::emu {
namespace {

// Each lane adds y to its own x; the lanes then meet where `meet_in(block)`.
template <class MeetIn>
void add_then_maybe_meet(float* x, const float* y, MeetIn meet_in) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  x[i] += y[i];
  if (meet_in(blockIdx.x)) __syncthreads();
}

std::vector<float> run(dim3 grid, dim3 block, bool (*meet_in)(unsigned)) {
  const size_t n = size_t(grid.x) * block.x;
  std::vector<float> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(i), y[i] = 1000.0f + float(i);
  emu_launch(grid, block, [&] { add_then_maybe_meet(x.data(), y.data(), meet_in); });
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = float(i) + 1000.0f + float(i);
  EXPECT_EQ(x, want);
  return x;
}

TEST(CudaEmulator, EveryLaneRunsOnceWhetherItsLanesMeetOrNot) {
  run(dim3(3), dim3(64), [](unsigned) { return false; });
  // Lane 0 of block 0 adds before the first meeting: once, not twice (a
  // launch that started over when the lanes met made it x + 2y).
  run(dim3(3), dim3(64), [](unsigned) { return true; });
}

TEST(CudaEmulator, AKernelWhoseLanesMeetInSomeBlocksOnlyFailsByName) {
  const size_t n = 2 * 32;
  std::vector<float> x(n, 0.0f), y(n, 1.0f);
  try {
    emu_launch(dim3(2), dim3(32), [&] { add_then_maybe_meet(x.data(), y.data(), [](unsigned b) { return b == 1; }); });
    FAIL() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "emulator: lane 0 of block 1 meets other lanes where block 0's never did; the emulator runs such "
              "blocks a lane after another and cannot run one again without writing twice");
  }
  // The launch after it runs as any other.
  run(dim3(2), dim3(32), [](unsigned) { return true; });
}

TEST(CudaEmulator, LanesThatMeetInBlockZeroRunByFibersInEveryBlock) {
  // Block 0 meets, block 2 does not: both are run lane by lane as fibers.
  run(dim3(3), dim3(32), [](unsigned b) { return b != 2; });
}

}  // namespace
}  // namespace cs::emu
