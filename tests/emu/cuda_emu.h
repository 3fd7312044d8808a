// A CUDA emulator, enough to run model/cuda_ops_kernels.cu,
// model/cuda_matmul_kernels.cu, attn/cuda_attention.cu and
// kv/device_kv_memory.cu on the CPU (scripts/emulate_cu.py rewrites their
// launches, shared memory and inline PTX): every thread of a block is a fiber of its
// own (Boost.Context) on the calling thread, blocks one after another; a
// warp's shuffles and mma meet at a barrier of its 32 lanes, __syncthreads at
// one of the block, and __shared__ memory is a static (blocks never overlap).
// A lane that waits at a barrier hands the thread to the next lane, so a
// launch runs on one core whatever else the machine runs (a thread per lane
// made each barrier hundreds of wake-ups, and slowed many-fold whenever
// another process took a core), and in one order every time. ops_math.h's
// steps take their host branch (std::fma and friends round as the _rn
// intrinsics do). So the kernels' indexing, their lanes' sums and their
// branches are checked against the CPU's operations bit for bit on any
// machine, and the attention's against the CPU reference within its
// tolerance (the tensor cores' sums are taken in double here, their order
// being the hardware's own); what only a GPU shows (timing, races with
// asynchronous copies, memory faults, the device's own intrinsics) is the
// GPU tests' (tests/cuda_ops_test.cpp, cuda_attention_test.cpp).
#pragma once
#include <algorithm>
#include <array>
#include <boost/context/fiber.hpp>
#include <boost/context/stack_context.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

#include "base/f16.h"

namespace cs::emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

// A barrier of `expected` lanes. The last to arrive goes on at once; the
// others yield until it has come (lanes are fibers: see Lanes below).
struct Barrier {
  int expected = 0, arrived = 0;
  unsigned generation = 0;
};
void yield_lane();
inline thread_local uint64_t arrivals = 0;  // every arrival so far: progress, for Lanes' deadlock check
inline void arrive_and_wait(Barrier& b) {
  const unsigned g = b.generation;
  ++arrivals;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  while (b.generation == g) yield_lane();
}

struct Warp {
  Barrier meet{32};
  double lane[32];
  uint32_t frag[32][6];  // mma: each lane's A and B registers
};
inline thread_local Warp* this_warp;
inline thread_local Barrier* this_block;

// A launch runs its first block with a fiber per lane (Lanes below). Most
// kernels never synchronize: where block 0's lanes never met, the other
// blocks run a lane after another on the calling thread, much faster. A lane
// that meets another there (a shuffle, the mma, __syncthreads) throws
// NeedsLanes, and the launch fails: the lanes run before it, and its own
// steps so far, have written what running the block again would write twice
// (an in-place x += y gave x + 2y when launches started over). Kernels whose
// lanes meet in some blocks only are not emulated.
struct NeedsLanes {};
inline thread_local bool one_by_one = false;
inline void meet(Barrier& b) {
  if (one_by_one) throw NeedsLanes{};
  arrive_and_wait(b);
}

// A warp's collective step: every lane posts `mine`, all meet, each computes
// read(at) (at(i): lane i's posted value), and all meet again (the slots may
// be posted anew). Shuffles, votes and ldmatrix are this.
template <class T, class Read>
auto warp_meet(T mine, Read read) {
  static_assert(sizeof(T) <= sizeof(double));
  Warp& w = *this_warp;
  if (one_by_one) throw NeedsLanes{};
  std::memcpy(&w.lane[threadIdx.x & 31], &mine, sizeof(T));
  arrive_and_wait(w.meet);
  const auto out = read([&w](int i) {
    T v;
    std::memcpy(&v, &w.lane[i], sizeof(T));
    return v;
  });
  arrive_and_wait(w.meet);
  return out;
}

// Every lane puts its value, all meet, each reads lane `src_of(its lane)`.
template <class T, class Src>
T exchange(T v, Src src_of) {
  const int l = int(threadIdx.x & 31);
  return warp_meet(v, [&](auto at) { return at(src_of(l)); });
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int o) {
  return exchange(v, [o](int l) { return l ^ o; });
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned d) {
  return exchange(v, [d](int l) { return l + int(d) < 32 ? l + int(d) : l; });
}
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  return exchange(v, [src](int) { return src; });
}
inline void __syncthreads() { meet(*this_block); }

// An m16n8kK mma's operands, K = 8E for registers of E elements: every lane
// posts its A and B registers, all meet, each reads from PTX's fragment
// layout (lane = 4 g + t) the part of A (16 x K) and B (K x 8) its outputs
// need: rows g and g + 8 of A, columns 2t and 2t + 1 of B (the rest is left
// unwritten; decoding the whole of both in every lane made the K-quant
// matmuls' emulation several times slower). Lane 4g + t' holds in a0 row g,
// columns Et'..Et'+E-1, a1 row g + 8, a2 and a3 the same rows at columns
// K/2 + Et'..; in b0 column g, rows Et'.., b1 rows K/2 + Et'..; then all meet
// again (the registers may be posted anew).
template <int E, class T, class Elem>
void gather_fragments(const std::array<uint32_t, 6>& mine, T (&A)[16][8 * E], T (&B)[8 * E][8], Elem elem) {
  constexpr int H = 4 * E;
  Warp& w = *this_warp;
  if (one_by_one) throw NeedsLanes{};
  const int me = int(threadIdx.x & 31), g = me >> 2, t = me & 3;
  std::memcpy(w.frag[me], mine.data(), sizeof(w.frag[0]));
  arrive_and_wait(w.meet);
  for (int tt = 0; tt < 4; ++tt) {
    const uint32_t* f = w.frag[4 * g + tt];
    for (int i = 0; i < E; ++i) {
      A[g][E * tt + i] = elem(f[0], i), A[g + 8][E * tt + i] = elem(f[1], i);
      A[g][H + E * tt + i] = elem(f[2], i), A[g + 8][H + E * tt + i] = elem(f[3], i);
    }
    for (int c = 2 * t; c < 2 * t + 2; ++c) {
      const uint32_t* fb = w.frag[4 * c + tt];
      for (int i = 0; i < E; ++i) B[E * tt + i][c] = elem(fb[4], i), B[H + E * tt + i][c] = elem(fb[5], i);
    }
  }
  arrive_and_wait(w.meet);
}

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 with a zero accumulator:
// A and B a byte an element (gather_fragments); C's c0, c1 are row g,
// columns 2t and 2t + 1, c2, c3 row g + 8.
inline void mma_m16n8k32_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                            uint32_t b1) {
  const int lane = int(threadIdx.x & 31);
  int A[16][32], B[32][8];
  gather_fragments<4>({a0, a1, a2, a3, b0, b1}, A, B,
                      [](uint32_t v, int i) { return int(int8_t(uint8_t(v >> (8 * i)))); });
  const int g = lane >> 2, t = lane & 3;
  auto dot = [&](int r, int col) {
    int s = 0;
    for (int k = 0; k < 32; ++k) s += A[r][k] * B[k][col];
    return s;
  };
  c[0] = dot(g, 2 * t), c[1] = dot(g, 2 * t + 1), c[2] = dot(g + 8, 2 * t), c[3] = dot(g + 8, 2 * t + 1);
}

// A warp's vote: every lane's flag, all meet, each gets the same answer.
inline bool vote(bool mine, bool all) {
  return warp_meet(mine, [all](auto at) {
    bool r = all;
    for (int i = 0; i < 32; ++i) r = all ? r && at(i) : r || at(i);
    return r;
  });
}
inline bool __any_sync(unsigned, bool p) { return vote(p, false); }
inline bool __all_sync(unsigned, bool p) { return vote(p, true); }

// cp.async.cg.shared.global with src-size: `src_bytes` bytes (0 or 16) copied
// at once, the rest of the 16 zero-filled. The wait and commit are no-ops:
// the copy is done when issued, and a kernel overwrites a stage only after
// the barrier behind every read of it, as it must on a GPU too.
inline void cp_async16(void* dst, const void* src, int src_bytes) {
  std::memset(dst, 0, 16);
  if (src_bytes > 0) std::memcpy(dst, src, size_t(std::min(src_bytes, 16)));
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane 8j + i gives the
// address of row i of 8x8 matrix j (8 16-bit elements); lane 4g + t gets in
// r[j] matrix j's row g, columns 2t and 2t + 1 (the low half first), or
// with .trans its column g, rows 2t and 2t + 1.
inline void ldmatrix_x4(uint32_t* r, const void* p, bool trans) {
  const int l = int(threadIdx.x & 31), g = l >> 2, t = l & 3;
  warp_meet(static_cast<const uint8_t*>(p), [&](auto at) {
    auto elem = [&](int j, int row, int col) {
      uint16_t e;
      std::memcpy(&e, at(8 * j + row) + 2 * col, 2);
      return uint32_t(e);
    };
    for (int j = 0; j < 4; ++j)
      r[j] = trans ? elem(j, 2 * t, g) | elem(j, 2 * t + 1, g) << 16 : elem(j, g, 2 * t) | elem(j, g, 2 * t + 1) << 16;
    return 0;
  });
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32, D = A B + D:
// A and B two halves a register (gather_fragments); d[0], d[1] are row g,
// columns 2t and 2t + 1, d[2], d[3] row g + 8. The products are exact in
// float; their sum, whose order the hardware leaves open, is taken in double
// and rounded once.
template <bool kBf16>
void mma_m16n8k16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  const int lane = int(threadIdx.x & 31);
  float A[16][16], B[16][8];
  gather_fragments<2>({a[0], a[1], a[2], a[3], b0, b1}, A, B, [](uint32_t v, int i) {
    const uint16_t h = uint16_t(v >> (16 * i));
    return kBf16 ? cs::bf16_to_f32(h) : cs::f16_to_f32(h);
  });
  const int g = lane >> 2, t = lane & 3;
  auto dot = [&](int row, int col, float c) {
    double s = c;
    for (int k = 0; k < 16; ++k) s += double(A[row][k]) * double(B[k][col]);
    return float(s);
  };
  d[0] = dot(g, 2 * t, d[0]), d[1] = dot(g, 2 * t + 1, d[1]);
  d[2] = dot(g + 8, 2 * t, d[2]), d[3] = dot(g + 8, 2 * t + 1, d[3]);
}

// ex2.approx.ftz.f32: 2^x, results below 2^-126 flushed to zero (the
// device's approximation errs by a couple of ulps; this is exact).
inline float ex2_approx_ftz(float x) {
  const float y = std::exp2(x);
  return y < 0x1p-126f ? 0.0f : y;
}

// The device intrinsics the kernels use, in their rounding (nearest even).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int __float2int_rn(float a) { return int(std::nearbyint(a)); }
inline float __int2float_rn(int a) { return float(a); }
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
struct __half {
  uint16_t bits;
};
inline __half __float2half_rn(float f) { return {cs::f32_to_f16(f)}; }
inline float __half2float(__half h) { return cs::f16_to_f32(h.bits); }
struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {cs::f32_to_bf16(f)}; }
struct __half2 {
  __half x, y;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half_rn(lo), __float2half_rn(hi)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
template <class T>
T __ldcg(const T* p) {
  return *p;
}
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }
inline int max(int a, int b) { return std::max(a, b); }
inline uint32_t __vsub4(uint32_t a, uint32_t b) {  // per byte, mod 256
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t(uint8_t((a >> (8 * i)) - (b >> (8 * i)))) << (8 * i);
  return r;
}
// Byte i of the result: byte (s >> 4i) & 7 of the eight bytes y:x (x the
// low four), or, with bit 3 of that selector set, its sign bit repeated.
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t both = (uint64_t(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (s >> (4 * i)) & 0xf;
    uint32_t byte = uint32_t(both >> (8 * (sel & 7))) & 0xff;
    if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
    r |= byte << (8 * i);
  }
  return r;
}
inline int min(int a, int b) { return std::min(a, b); }

// The lanes of one block: a fiber each, on the calling thread, resumed in
// turn (first to last, then last to first) until every one has returned. A
// lane runs until it waits at a barrier (yield_lane) or ends. Their stacks
// are kept from block to block.
class Lanes {
 public:
  static constexpr size_t kStack = size_t(256) << 10;

  // Runs lane(t) for t < n until all return; an exception in a lane ends the
  // block and is rethrown here.
  void run(unsigned n, const std::function<void(unsigned)>& lane) {
    while (stacks_.size() < n) stacks_.push_back(std::make_unique<Stack>());
    std::vector<State> st(n);
    for (unsigned t = 0; t < n; ++t) {
      st[t].fiber = boost::context::fiber(std::allocator_arg, Alloc{stacks_[t].get()},
                                          [this, t, &lane, &st](boost::context::fiber&& back) {
                                            st[t].back = std::move(back);
                                            try {
                                              lane(t);
                                            } catch (const boost::context::detail::forced_unwind&) {
                                              throw;
                                            } catch (...) {
                                              st[t].error = std::current_exception();
                                            }
                                            st[t].done = true;
                                            return std::move(st[t].back);
                                          });
    }
    unsigned live = n;
    for (bool up = true; live > 0; up = !up) {
      const uint64_t before = arrivals;
      const unsigned live_before = live;
      // Every other round from the last lane to the first: a lane that reads
      // what another writes without a barrier between them reads it unwritten
      // in one of the two orders.
      for (unsigned i = 0; i < n; ++i) {
        const unsigned t = up ? i : n - 1 - i;
        if (st[t].done) continue;
        current_ = &st[t];
        on_resume(t);
        st[t].fiber = std::move(st[t].fiber).resume();
        current_ = nullptr;
        if (st[t].done) {
          --live;
          if (st[t].error) std::rethrow_exception(st[t].error);  // the other lanes' fibers unwind as st goes
        }
      }
      if (live > 0 && live == live_before && arrivals == before)
        throw std::logic_error("emulator: every lane of a block waits at a barrier no other lane reaches");
    }
  }
  // Set by the launch: what a lane's globals (threadIdx, its warp) are.
  std::function<void(unsigned)> on_resume;
  // Back to the scheduler, from inside a lane.
  void yield() { current_->back = std::move(current_->back).resume(); }

 private:
  struct Stack {
    void* base = std::malloc(kStack);
    ~Stack() { std::free(base); }
  };
  struct Alloc {  // Boost.Context's stack allocator: one of ours, never freed by it
    Stack* s;
    boost::context::stack_context allocate() {
      if (!s->base) throw std::bad_alloc();
      boost::context::stack_context c;
      c.size = kStack;
      c.sp = static_cast<char*>(s->base) + kStack;
      return c;
    }
    void deallocate(boost::context::stack_context&) noexcept {}
  };
  struct State {
    boost::context::fiber fiber, back;
    bool done = false;
    std::exception_ptr error;
  };
  std::vector<std::unique_ptr<Stack>> stacks_;
  State* current_ = nullptr;
};
inline thread_local Lanes lanes;
inline void yield_lane() { lanes.yield(); }

// Block 0 by fibers, then the others by fibers where its lanes met, else one
// lane after another (above).
inline void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  gridDim = grid, blockDim = block;
  const unsigned blocks = grid.x * grid.y;
  auto at = [&](unsigned b, unsigned t) { threadIdx = dim3(t), blockIdx = dim3(b % grid.x, b / grid.x); };
  std::vector<Warp> warps((block.x + 31) / 32);
  const auto by_fibers = [&](unsigned b) {
    for (Warp& w : warps) w.meet = Barrier{32};
    Barrier all{int(block.x)};
    lanes.on_resume = [&](unsigned t) {
      at(b, t);
      this_warp = &warps[t / 32], this_block = &all;
    };
    lanes.run(block.x, [&](unsigned) { kernel(); });
  };
  if (blocks == 0) return;
  const uint64_t before = arrivals;
  by_fibers(0);
  if (arrivals != before) {
    for (unsigned b = 1; b < blocks; ++b) by_fibers(b);
    return;
  }
  struct OneByOne {
    OneByOne() { one_by_one = true; }
    ~OneByOne() { one_by_one = false; }
  } mode;
  for (unsigned b = 1; b < blocks; ++b)
    for (unsigned t = 0; t < block.x; ++t) {
      try {
        at(b, t), kernel();
      } catch (const NeedsLanes&) {
        throw std::logic_error("emulator: lane " + std::to_string(t) + " of block " + std::to_string(b) +
                               " meets other lanes where block 0's never did; the emulator runs such blocks a "
                               "lane after another and cannot run one again without writing twice");
      }
    }
}
inline void check_launch(const char*) {}  // nothing is pending on a CPU

// A launch's dynamic shared memory (extern __shared__, rewritten by
// emulate_cu.py to this): `smem` bytes, 0xff-filled (NaN floats) at each
// launch, as a block's shared memory starts undefined.
inline thread_local std::vector<uint8_t> dyn_smem_bytes;
inline thread_local uint8_t* dyn_smem = nullptr;
inline uint8_t* dynamic_smem() { return dyn_smem; }

// The CUDA runtime calls the emulated files make themselves: attributes
// accepted. (Their memory is base/cuda.h's Buffer, the fake device's:
// tests/emu/fake_device.cpp, up to kEmulatedMemory or its set limit.)
inline constexpr size_t kEmulatedMemory = size_t(1) << 34;
enum cudaError_t { cudaSuccess = 0 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error"; }
template <class F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
// Two multiprocessors: a kernel sized by them (the matmul's stream kernel,
// two CTAs each) gives its CTAs several items at small sizes already.
inline constexpr int kEmulatedSms = 2;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
  *v = kEmulatedSms;
  return cudaSuccess;
}

// base/cuda.h's launch() and launch_ex(): the launch runs at once, or, where
// a fake device has set `submit` (tests/emu/fake_device.cpp), goes to its
// launch queue as a closure holding the arguments by value, with their bytes
// (the queue compares launches by them), its shared memory and whether it
// may start early.
using Submit = void (*)(const char* what, const void* func, dim3 grid, dim3 block, uint32_t smem,
                        bool after_previous, std::span<const void* const> values, std::span<const uint32_t> sizes,
                        std::span<const uint32_t> aligns, std::function<void()> run);
inline Submit submit = nullptr;

template <class G, class B, class... P, class... A>
void launch_ex(const char* what, void (*kernel)(P...), const G& grid, const B& block, size_t smem,
               bool after_previous, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel's arguments, one for each parameter");
  const std::tuple<std::remove_cvref_t<P>...> vals(static_cast<std::remove_cvref_t<P>>(std::forward<A>(args))...);
  const dim3 g(grid), b(block);
  std::function<void()> run = [vals, kernel, g, b, smem] {
    if (smem) {
      dyn_smem_bytes.assign(smem + 128, 0xff);
      dyn_smem = dyn_smem_bytes.data() + (128 - reinterpret_cast<uintptr_t>(dyn_smem_bytes.data()) % 128);
    }
    emu_launch(g, b, [&] { std::apply(kernel, vals); });
  };
  if (!submit) return run();
  std::apply(
      [&](const auto&... v) {
        const void* values[] = {static_cast<const void*>(&v)..., nullptr};
        const uint32_t sizes[] = {uint32_t(sizeof(v))..., 0};
        const uint32_t aligns[] = {uint32_t(alignof(std::remove_cvref_t<decltype(v)>))..., 1};
        submit(what, reinterpret_cast<const void*>(kernel), g, b, uint32_t(smem), after_previous,
               std::span<const void* const>(values, sizeof...(P)), std::span<const uint32_t>(sizes, sizeof...(P)),
               std::span<const uint32_t>(aligns, sizeof...(P)), std::move(run));
      },
      vals);
}
template <class G, class B, class... P, class... A>
void launch(const char* what, void (*kernel)(P...), const G& grid, const B& block, A&&... args) {
  launch_ex(what, kernel, grid, block, 0, false, std::forward<A>(args)...);
}

}  // namespace cs::emu
