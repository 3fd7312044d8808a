// The quantized matmul on an NVIDIA GPU, bit for bit the CPU's (model/matmul.h),
// the first of the CUDA backend's layer operations. The weights are the CPU's
// 16-row layouts (Weight::packed, model/pack_layout.h) copied to the device as
// they are; the activations are quantized into the same 8-bit blocks of 32 by
// the same float steps (quantize_q8); per block, the int32 dot of 16 rows by 8
// tokens is one mma.sync.m16n8k32 (exact), then scaled and added in block
// order with the CPU kernels' float steps (acc = fma(dot, d * dx, acc), then
// the minimum's fma(m, s, acc)). So a row's result depends on that row alone
// (whatever the batch around it: batch-invariant, as the CPU path is) and
// equals the CPU's, which makes the CPU path the GPU's reference bit for bit.
//
// Every quantized layout: kQ4 (Q4_0, Q4_1), kQ8 (Q8_0, Q5_0), kQ8Min (Q5_1),
// kQ8Half (Q3_K) and kQ8HalfMin (Q2_K: a scale, and a minimum, per half of
// 16 values: one mma per half), kMx (MXFP4) and kIq4 (IQ4_NL, IQ4_XS: codes
// looked up as int8 grid values, then the same exact dot) and the K layouts
// (Q4_K, Q5_K, Q6_K). Float matrices (F32, F16, BF16) go over as the file
// has them (two bytes a value for F16 and BF16, where the CPU widens them to
// four) and multiply unquantized activations in float, each dot in the CPU's
// order (float_matmul). In a build without CUDA every call throws.
#pragma once
#include <cstdint>
#include <span>

#include "base/cuda.h"
#include "model/ggml_types.h"
#include "model/matmul.h"

namespace cs::cuda {

// Whether the device matmul reads this type's layout.
bool matmul_supports(GgmlType type);

// Whether a type is a float matrix's (float_matmul's): plain_float's types.
bool float_matrix(GgmlType type);

// A weight matrix on the device, in its CPU layout.
class DeviceMatrix {
 public:
  explicit DeviceMatrix(const Weight& w);
  // A float matrix (float_matrix(type)) from the file's rows x cols values.
  DeviceMatrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data);
  bool floats() const { return float_kind_ >= 0; }
  int float_kind() const { return float_kind_; }
  PackLayout layout() const { return layout_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  const uint32_t* words() const { return words_.as<uint32_t>(); }

 private:
  PackLayout layout_ = PackLayout::kQ4;
  int float_kind_ = -1;  // kernels::FloatKind, or -1: a quantized layout
  int64_t rows_, cols_;
  Buffer words_;
};

// acts[t * cols / 32 + b] = block b of row t of x (n_tok rows of `cols`
// floats; cols % 32 == 0), as cs::quantize_q8 makes it. Device pointers.
void quantize_q8(const float* x, int n_tok, int64_t cols, BlockQ8* acts);

// Which kernel multiplies (model/cuda_matmul_kernels.cu): kAuto chooses by
// the token count and the matrix's shape, decode's few tokens on one kernel
// and the rest on another: split and tile unless CHUNKSERVE_CUDA_MATMUL
// names others ("stream,staged"; one name: every product on it); the others
// force theirs, for tests and benchmarks. Each gives the same bits.
enum class MatmulKernel { kAuto = 0, kTile = 1, kSplit = 2, kStream = 3, kStaged = 4 };

// y[t * w.rows() + r] = sum_c W[r][c] x[t][c] from x's blocks (quantize_q8),
// as cs::matmul computes it on an AVX2 or AVX-512 CPU. Device pointers.
void matmul(const DeviceMatrix& w, const BlockQ8* acts, int n_tok, float* y, MatmulKernel kernel = MatmulKernel::kAuto);

// matmul for several matrices of one layout and row length, times the same
// activations, in as few launches as the kernels take (ys[i] from *ws[i]);
// each ys[i] is what matmul gives for ws[i].
void matmul_many(std::span<const DeviceMatrix* const> ws, const BlockQ8* acts, int n_tok, std::span<float* const> ys,
                 MatmulKernel kernel = MatmulKernel::kAuto);

// y[t * w.rows() + r] = sum_c W[r][c] x[t][c] for a float matrix, as
// cs::matmul computes it for the file's F32, F16 or BF16 matrix (exactly:
// the same fma steps in the same order). Device pointers.
void float_matmul(const DeviceMatrix& w, const float* x, int n_tok, float* y);

}  // namespace cs::cuda
