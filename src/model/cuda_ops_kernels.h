// The kernels behind model/cuda_ops.h: the forward pass's steps between the
// matmuls on the device, each value by model/ops_math.h's float steps (the
// CPU's), in plain types so that nvcc (C++17) compiles them apart from the
// C++20 host code. Device pointers throughout; every launch on the default
// stream; a build without CUDA throws from each (cuda_ops_kernels_stub.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace cs::cuda::ops {

// out = x / rms * w over each group of `group` values of every row (the whole
// row, or each head); a warp per group, ops_math.h's 32 lanes. out may be x.
// With q8 (and group a multiple of 32): out's blocks of 32 also quantized
// into q8 (rows * cols / 32 cs::BlockQ8), as quantize_q8 makes them.
void rmsnorm(const float* x, int rows, int cols, const float* w, int group, float eps, float* out,
             void* q8 = nullptr);
// x += y, then rmsnorm's out (and q8) from the sums, in one kernel: each
// lane adds the values it then squares and writes. out may be y, not x.
void add_rmsnorm(float* x, const float* y, int rows, int cols, const float* w, int group, float eps, float* out,
                 void* q8 = nullptr);
// Rotates every head of row t of x (rows x cols), and of y (rows x cols_y)
// where given, by row t's angles (cos/sin: [row][half]); the partner of
// dimension i is i + 1 (adjacent pairs, stride 2) or i + half.
void rope(float* x, int cols, float* y, int cols_y, int rows, int head_dim, const float* cos, const float* sin, int half,
          bool adjacent);
void add_bias(float* x, int rows, int cols, const float* b);  // x.row(t) += b
void scale(float* x, size_t n, float s);                      // x *= s
void add(float* x, const float* y, size_t n);                 // x += y
// gate = act(gate, up): 0 SwiGLU, 1 GeGLU, 2 gpt-oss's SwiGLU (FfnAct's
// order); with q8 (n a multiple of 32), gate's blocks of 32 also quantized.
void gated(int act, float* gate, const float* up, size_t n, void* q8 = nullptr);

// out.row(t) = the sum over j < k, in j order from 0, of w[t * k + j] *
// src.row(slots[t * k + j]) (a mixture's weighed expert outputs): each term
// one product, then one sum, as the CPU's combine.
void combine(const float* src, int cols, const int32_t* slots, const float* w, int k, int rows, float* out);

// The output head's two levels of x's `blocks` blocks of 32 (model/matmul.cpp,
// quantize_two_levels), in one kernel: level1 = quantize_q8(x), level2 =
// quantize_q8(x - d q of level one, rounded once) with its s = (the block
// summed in order) - level1's s. cs::BlockQ8s.
void head_levels(const float* x, int64_t blocks, void* level1, void* level2);
// y[t][r] = y1[t][r], plus y2[t][r] where r's tile of 16 outputs holds one
// within `margin` of row t's largest y1 (matmul_refined's selection). floor:
// n_tok floats of scratch. y may be y1.
void head_refine(const float* y1, const float* y2, int n_tok, int64_t rows, float margin, float* floor, float* y);

}  // namespace cs::cuda::ops
