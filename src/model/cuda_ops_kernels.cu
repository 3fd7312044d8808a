// The device steps of model/cuda_ops_kernels.h, each value by
// model/ops_math.h's functions: the CPU's float steps, so the same bits.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "base/cuda.h"
#include "model/cuda_ops_kernels.h"
#include "model/ops_math.h"

namespace cs::cuda::ops {
namespace {

#include "model/q8_block.inc"

constexpr unsigned kAll = 0xffffffffu;
constexpr int kThreads = 256;

unsigned blocks_for(size_t n, int per = kThreads) { return unsigned((n + size_t(per) - 1) / size_t(per)); }

// The norm's scale from lane l's sum of the squares of values l, l + 32, ...
// (doubles, in order): the butterfly adds the lanes as fp::sum_lanes does
// (every lane ends with lane 0's sum).
__device__ float norm_scale(double s, int group, float eps) {
  for (int k = 16; k >= 1; k >>= 1) s = fp::dadd(s, __shfl_xor_sync(kAll, s, k));
  s = __shfl_sync(kAll, s, 0);
  return fp::rms_scale(s, group, eps);
}

// A warp per group of `group` values: lane l sums the squares of values l,
// l + 32, ..., then writes those values normed, and where q is given (group
// a multiple of 32) their blocks of 32 quantized as quantize_q8 does, into
// q's blocks of the group (the next matmul's input, without a launch of its
// own).
__global__ void rmsnorm_kernel(const float* x, int64_t groups, int group, const float* w, float eps, float* out,
                               Q8* q) {
  const int lane = threadIdx.x & 31;
  const int64_t g = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (g >= groups) return;  // the whole warp
  const float* in = x + g * group;
  double s = 0.0;
  for (int i = lane; i < group; i += 32) s = fp::dadd(s, double(fp::mul(in[i], in[i])));
  const float sc = norm_scale(s, group, eps);
  float* o = out + g * group;
  for (int i = lane; i < group; i += 32) {
    const float v = fp::norm_value(in[i], sc, w[i]);
    o[i] = v;
    if (q) quantize_block(v, lane, q + (g * group + i) / 32);
  }
}

// rmsnorm_kernel on x + y (q too), writing the sums to x as well. Nothing is written
// before the lanes meet (the sums are formed twice, the second time to
// write them): each index's reads come before its writes, by the same lane,
// so out may be y.
__global__ void add_rmsnorm_kernel(float* x, const float* y, int64_t groups, int group, const float* w, float eps,
                                   float* out, Q8* q) {
  const int lane = threadIdx.x & 31;
  const int64_t g = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (g >= groups) return;  // the whole warp
  float* in = x + g * group;
  const float* add = y + g * group;
  double s = 0.0;
  for (int i = lane; i < group; i += 32) {
    const float v = fp::add(in[i], add[i]);
    s = fp::dadd(s, double(fp::mul(v, v)));
  }
  const float sc = norm_scale(s, group, eps);
  float* o = out + g * group;
  for (int i = lane; i < group; i += 32) {
    const float v = fp::add(in[i], add[i]);
    in[i] = v;
    const float n = fp::norm_value(v, sc, w[i]);
    o[i] = n;
    if (q) quantize_block(n, lane, q + (g * group + i) / 32);
  }
}

// A thread per (row, head, pair) of x, then of y (cols_y 0: x alone; a
// layer's q and k go in one launch).
__global__ void rope_kernel(float* x, int cols, float* y, int cols_y, int rows, int head_dim, const float* cos,
                            const float* sin, int half, bool adjacent) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t in_x = int64_t(rows) * (cols / head_dim) * half;
  if (i >= in_x) {
    i -= in_x, x = y, cols = cols_y;
    if (i >= int64_t(rows) * (cols / head_dim) * half) return;
  }
  const int heads = cols / head_dim;
  const int pair = int(i % half);
  const int64_t rh = i / half;
  const int row = int(rh / heads), h = int(rh % heads);
  float* a = x + int64_t(row) * cols + int64_t(h) * head_dim + (adjacent ? 2 * pair : pair);
  const int partner = adjacent ? 1 : half;
  float x0 = a[0], x1 = a[partner];
  fp::rotate(x0, x1, cos[int64_t(row) * half + pair], sin[int64_t(row) * half + pair]);
  a[0] = x0, a[partner] = x1;
}

__global__ void add_bias_kernel(float* x, int64_t n, int cols, const float* b) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = fp::add(x[i], b[i % cols]);
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = fp::mul(x[i], s);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = fp::add(x[i], y[i]);
}

// Where q is given (n a multiple of 32), each warp's 32 values, a block, also
// quantized into q as quantize_q8 does.
template <int Act>
__global__ void gated_kernel(float* gate, const float* up, int64_t n, Q8* q) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;  // with q, whole warps
  const float g = gate[i], u = up[i];
  const float v = Act == 0 ? fp::swiglu(g, u) : Act == 1 ? fp::geglu(g, u) : fp::swiglu_oai(g, u);
  gate[i] = v;
  if (q) quantize_block(v, int(threadIdx.x & 31), q + (i >> 5));
}

__global__ void combine_kernel(const float* src, int cols, const int32_t* slots, const float* w, int k, int64_t n,
                               float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t t = i / cols, c = i % cols;
  float o = 0.0f;
  for (int j = 0; j < k; ++j) o = fp::add(o, fp::mul(w[t * k + j], src[int64_t(slots[t * k + j]) * cols + c]));
  out[i] = o;
}

// The head's two levels of x's blocks (model/matmul.cpp,
// quantize_two_levels), a warp per block: level one quantize_q8's; level two
// quantize_q8's of the residual x - d q (rounded once, fma), its s then the
// block's sum in order less level one's s.
__global__ void head_levels_kernel(const float* x, int64_t blocks, Q8* l1, Q8* l2) {
  const int lane = threadIdx.x & 31;
  const int64_t b = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (b >= blocks) return;  // the whole warp
  const float v = x[b * 32 + lane];
  const Quantized one = quantize_block(v, lane, l1 + b);
  quantize_block(fp::fma(-one.d, float(one.q), v), lane, l2 + b);
  if (lane == 0) {  // after its own writes of both blocks' s
    float sum = 0.0f;
    for (int i = 0; i < 32; ++i) sum = fp::add(sum, x[b * 32 + i]);
    l2[b].s = fp::sub(sum, l1[b].s);
  }
}

// floor[t] = max over row t of y1, minus margin; a block per row.
__global__ void row_floor_kernel(const float* y1, int64_t rows, float margin, float* floor) {
  __shared__ float part[kThreads / 32];
  const float* y = y1 + int64_t(blockIdx.x) * rows;
  float m = y[0];
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) m = fp::max_sse(y[r], m);
  for (int o = 16; o >= 1; o >>= 1) m = fp::max_sse(__shfl_xor_sync(kAll, m, o), m);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float top = part[0];
    for (int w = 1; w < int(blockDim.x >> 5); ++w) top = fp::max_sse(part[w], top);
    floor[blockIdx.x] = fp::sub(top, margin);
  }
}

// A thread per (row t, tile of 16 outputs).
__global__ void refine_kernel(const float* y1, const float* y2, int n_tok, int64_t rows, const float* floor,
                              float* y) {
  const int64_t tiles = (rows + 15) / 16;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tiles * n_tok) return;
  const int t = int(i / tiles);
  const int64_t r0 = (i % tiles) * 16, r1 = r0 + 16 < rows ? r0 + 16 : rows;
  const int64_t at = int64_t(t) * rows;
  float m = y1[at + r0];
  for (int64_t r = r0; r < r1; ++r) m = fp::max_sse(y1[at + r], m);
  const bool pick = m >= floor[t];
  for (int64_t r = r0; r < r1; ++r) y[at + r] = pick ? fp::add(y1[at + r], y2[at + r]) : y1[at + r];
}

}  // namespace

void rmsnorm(const float* x, int rows, int cols, const float* w, int group, float eps, float* out, void* q8) {
  const int64_t groups = int64_t(rows) * (cols / group);
  if (groups <= 0) return;
  if (group % 32) q8 = nullptr;
  launch("rmsnorm", rmsnorm_kernel, blocks_for(size_t(groups) * 32), kThreads, x, groups, group, w, eps, out,
         static_cast<Q8*>(q8));
}

void add_rmsnorm(float* x, const float* y, int rows, int cols, const float* w, int group, float eps, float* out,
                 void* q8) {
  const int64_t groups = int64_t(rows) * (cols / group);
  if (groups <= 0) return;
  if (group % 32) q8 = nullptr;
  launch("add_rmsnorm", add_rmsnorm_kernel, blocks_for(size_t(groups) * 32), kThreads, x, y, groups, group, w, eps,
         out, static_cast<Q8*>(q8));
}

void rope(float* x, int cols, float* y, int cols_y, int rows, int head_dim, const float* cos, const float* sin, int half,
          bool adjacent) {
  const size_t n = size_t(rows) * size_t(cols / head_dim + (y ? cols_y / head_dim : 0)) * size_t(half);
  if (n == 0) return;
  launch("rope", rope_kernel, blocks_for(n), kThreads, x, cols, y, y ? cols_y : 0, rows, head_dim, cos, sin, half,
         adjacent);
}

void add_bias(float* x, int rows, int cols, const float* b) {
  const size_t n = size_t(rows) * size_t(cols);
  if (n == 0) return;
  launch("add_bias", add_bias_kernel, blocks_for(n), kThreads, x, int64_t(n), cols, b);
}

void scale(float* x, size_t n, float s) {
  if (n == 0) return;
  launch("scale", scale_kernel, blocks_for(n), kThreads, x, int64_t(n), s);
}

void add(float* x, const float* y, size_t n) {
  if (n == 0) return;
  launch("add", add_kernel, blocks_for(n), kThreads, x, y, int64_t(n));
}

void gated(int act, float* gate, const float* up, size_t n, void* q8) {
  if (n == 0) return;
  if (n % 32) q8 = nullptr;
  auto* kernel = act == 0 ? gated_kernel<0> : act == 1 ? gated_kernel<1> : gated_kernel<2>;
  launch("the gated FFN's activation", kernel, blocks_for(n), kThreads, gate, up, int64_t(n), static_cast<Q8*>(q8));

}

void combine(const float* src, int cols, const int32_t* slots, const float* w, int k, int rows, float* out) {
  const size_t n = size_t(rows) * size_t(cols);
  if (n == 0) return;
  launch("combine", combine_kernel, blocks_for(n), kThreads, src, cols, slots, w, k, int64_t(n), out);
}

void head_levels(const float* x, int64_t blocks, void* level1, void* level2) {
  if (blocks <= 0) return;
  launch("the head's two levels", head_levels_kernel, blocks_for(size_t(blocks) * 32), kThreads, x, blocks,
         static_cast<Q8*>(level1), static_cast<Q8*>(level2));
}

void head_refine(const float* y1, const float* y2, int n_tok, int64_t rows, float margin, float* floor, float* y) {
  if (n_tok <= 0 || rows <= 0) return;
  launch("the head's row maxima", row_floor_kernel, unsigned(n_tok), kThreads, y1, rows, margin, floor);
  const size_t n = size_t(n_tok) * size_t((rows + 15) / 16);
  launch("the head's refinement", refine_kernel, blocks_for(n), kThreads, y1, y2, n_tok, rows, floor, y);
}

}  // namespace cs::cuda::ops
