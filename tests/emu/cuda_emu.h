// A CUDA emulator for simple kernels, enough to run model/cuda_ops_kernels.cu
// on the CPU (scripts/emulate_cu.py rewrites its launches): every thread of a
// block is a std::thread, blocks run one after another; a warp's shuffles
// meet at a barrier of its 32 lanes, __syncthreads at one of the block, and
// __shared__ memory is a static (blocks never overlap). ops_math.h's steps
// take their host branch (std::fma and friends round as the _rn intrinsics
// do). So the kernels' indexing, their lanes' sums and their branches are
// checked against the CPU's operations bit for bit on any machine; what only
// a GPU shows (timing, memory faults, the device's own intrinsics) is the
// GPU tests' (tests/cuda_ops_test.cpp).
#pragma once
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static

namespace cs::emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct Warp {
  std::barrier<> meet{32};
  double lane[32];
};
inline thread_local Warp* this_warp;
inline thread_local std::barrier<>* this_block;

// Every lane puts its value, all meet, each reads lane `src_of(its lane)`.
template <class T, class Src>
T exchange(T v, Src src_of) {
  static_assert(sizeof(T) <= sizeof(double));
  Warp& w = *this_warp;
  const int l = int(threadIdx.x & 31);
  std::memcpy(&w.lane[l], &v, sizeof(T));
  w.meet.arrive_and_wait();
  T out;
  std::memcpy(&out, &w.lane[src_of(l)], sizeof(T));
  w.meet.arrive_and_wait();
  return out;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int o) {
  return exchange(v, [o](int l) { return l ^ o; });
}
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  return exchange(v, [src](int) { return src; });
}
inline void __syncthreads() { this_block->arrive_and_wait(); }

inline void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  gridDim = grid, blockDim = block;
  for (unsigned b = 0; b < grid.x; ++b) {
    std::vector<std::unique_ptr<Warp>> warps((block.x + 31) / 32);
    for (auto& w : warps) w = std::make_unique<Warp>();
    std::barrier<> all(block.x);
    std::vector<std::thread> lanes;
    for (unsigned t = 0; t < block.x; ++t)
      lanes.emplace_back([&, t] {
        threadIdx = dim3(t), blockIdx = dim3(b);
        this_warp = warps[t / 32].get(), this_block = &all;
        kernel();
      });
    for (auto& l : lanes) l.join();
  }
}
inline void check_launch(const char*) {}  // nothing is pending on a CPU

}  // namespace cs::emu
