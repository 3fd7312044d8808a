// The kernels behind model/cuda_matmul.h, in plain types so that nvcc (C++17)
// compiles them apart from the C++20 host code. Device pointers throughout.
#pragma once
#include <cstdint>

namespace cs::cuda::kernels {

// The layouts the kernels read (PackLayout's values: model/cuda_matmul.cpp
// checks they agree).
enum Layout : int {
  kQ4 = 0, kQ8 = 1, kQ8Min = 2, kQ8Half = 3, kQ8HalfMin = 4, kQ4K = 5, kQ5K = 6, kQ6K = 7, kMx = 8, kIq4 = 9
};

// cs::BlockQ8's bytes: d, s, sum, sum_lo, ds, qs[32] (checked by cuda_matmul.cpp).
constexpr int kBlockBytes = 52;

void quantize_q8(const float* x, int64_t blocks, void* acts);

// Which kernel runs a quantized product (model/cuda_matmul_kernels.cu):
// kAuto chooses by the token count and the matrix's shape, or as
// CHUNKSERVE_CUDA_MATMUL says (model/cuda_matmul.h); the others force one,
// whatever the shape (tests, A/B).
enum MatmulKernel : int { kAuto = 0, kTile = 1, kSplit = 2, kStream = 3, kStaged = 4 };
void matmul(int layout, const uint32_t* words, int64_t rows, int64_t nb, const void* acts, int n_tok, float* y,
            int kernel = kAuto);
// Several matrices of one layout and row length times the same activations
// (y[i] from words[i], rows[i] rows), each product the one matmul gives, up
// to kMaxMats of them a launch.
constexpr int kMaxMats = 4;
void matmul_many(int layout, int n, const uint32_t* const* words, const int64_t* rows, int64_t nb, const void* acts,
                 int n_tok, float* const* y, int kernel = kAuto);

// Float matrices as the file has them: kind 0 F32, 1 F16, 2 BF16.
enum FloatKind : int { kF32 = 0, kF16 = 1, kBF16 = 2 };
// y[t * rows + r] = the dot of W's row r (rows x cols) and x's row t, each in
// the CPU's order (model/matmul.cpp, finish_lanes) over the exact fp32
// values of W's elements.
void float_matmul(int kind, const void* w, int64_t rows, int64_t cols, const float* x, int n_tok, float* y);

}  // namespace cs::cuda::kernels
