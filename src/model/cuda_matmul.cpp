#include "model/cuda_matmul.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "base/error.h"
#include "model/cuda_matmul_kernels.h"

namespace cs::cuda {

static_assert(int(PackLayout::kQ4) == kernels::kQ4 && int(PackLayout::kQ8) == kernels::kQ8 &&
              int(PackLayout::kQ8Min) == kernels::kQ8Min && int(PackLayout::kQ4K) == kernels::kQ4K &&
              int(PackLayout::kQ5K) == kernels::kQ5K && int(PackLayout::kQ6K) == kernels::kQ6K &&
              int(PackLayout::kQ8Half) == kernels::kQ8Half && int(PackLayout::kQ8HalfMin) == kernels::kQ8HalfMin &&
              int(PackLayout::kMx) == kernels::kMx && int(PackLayout::kIq4) == kernels::kIq4);
static_assert(k_super_words(PackLayout::kQ4K) == 608 && k_super_words(PackLayout::kQ5K) == 736 &&
              k_super_words(PackLayout::kQ6K) == 848);  // the kernels' KShape
static_assert(pack_block_words(PackLayout::kQ4) == 96 && pack_block_words(PackLayout::kQ8) == 144 &&
              pack_block_words(PackLayout::kQ8Min) == 160 && pack_block_words(PackLayout::kQ8Half) == 160 &&
              pack_block_words(PackLayout::kQ8HalfMin) == 192 && pack_block_words(PackLayout::kMx) == 68 &&
              pack_block_words(PackLayout::kIq4) == 80);  // the kernels' kBlockWords
static_assert(int(MatmulKernel::kAuto) == kernels::kAuto && int(MatmulKernel::kTile) == kernels::kTile &&
              int(MatmulKernel::kSplit) == kernels::kSplit && int(MatmulKernel::kStream) == kernels::kStream &&
              int(MatmulKernel::kStaged) == kernels::kStaged);
static_assert(sizeof(BlockQ8) == kernels::kBlockBytes && offsetof(BlockQ8, d) == 0 && offsetof(BlockQ8, s) == 4 &&
              offsetof(BlockQ8, sum) == 8 && offsetof(BlockQ8, sum_lo) == 12 && offsetof(BlockQ8, ds) == 16 &&
              offsetof(BlockQ8, qs) == 20);

bool matmul_supports(GgmlType type) {
  return !plain_float(type);  // every layout of pack_layout.h
}

bool float_matrix(GgmlType type) { return plain_float(type); }

DeviceMatrix::DeviceMatrix(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data)
    : float_kind_(type == GgmlType::F32 ? kernels::kF32 : type == GgmlType::F16 ? kernels::kF16 : kernels::kBF16),
      rows_(rows),
      cols_(cols) {
  if (!float_matrix(type)) throw Error("CUDA matmul: a float matrix's type must be F32, F16 or BF16");
  const size_t bytes = size_t(rows) * size_t(cols) * (type == GgmlType::F32 ? 4 : 2);
  words_ = Buffer(bytes);
  to_device(words_.get(), data, bytes);
}

DeviceMatrix::DeviceMatrix(const Weight& w) : layout_(pack_layout(w.type)), rows_(w.rows), cols_(w.cols) {
  if (!matmul_supports(w.type))
    throw Error(std::string("CUDA matmul: weights of type ") + type_info(uint32_t(w.type))->name +
                " are a float matrix, made from the file's values (DeviceMatrix's float constructor)");
  if (cols_ % (is_k_layout(layout_) ? 256 : 32))
    throw Error("CUDA matmul: a row's length must be a multiple of its type's block");
  // The CPU's layout: Weight::packed where the CPU made it, else made here
  // (a CPU without AVX2 keeps Q4_0/Q4_1/Q8_0 in the file's layout).
  const PackedWords made = w.packed.empty() ? pack_block32_rows(w.type, w.data, rows_, cols_) : PackedWords{};
  const PackedWords& words = w.packed.empty() ? made : w.packed;
  words_ = Buffer(words.size() * sizeof(uint32_t));
  to_device(words_.get(), words.data(), words.size() * sizeof(uint32_t));
}

void quantize_q8(const float* x, int n_tok, int64_t cols, BlockQ8* acts) {
  if (cols % 32) throw Error("CUDA quantize_q8: a row's length must be a multiple of 32");
  kernels::quantize_q8(x, int64_t(n_tok) * (cols / 32), acts);
}

void matmul(const DeviceMatrix& w, const BlockQ8* acts, int n_tok, float* y, MatmulKernel kernel) {
  if (w.floats()) throw Error("CUDA matmul: a float matrix multiplies float activations (float_matmul)");
  kernels::matmul(int(w.layout()), w.words(), w.rows(), w.cols() / 32, acts, n_tok, y, int(kernel));
}

void matmul_many(std::span<const DeviceMatrix* const> ws, const BlockQ8* acts, int n_tok, std::span<float* const> ys,
                 MatmulKernel kernel) {
  if (ws.size() != ys.size()) throw Error("CUDA matmul: one output for each matrix");
  for (const DeviceMatrix* w : ws) {
    if (w->floats()) throw Error("CUDA matmul: a float matrix multiplies float activations (float_matmul)");
    if (w->layout() != ws[0]->layout() || w->cols() != ws[0]->cols())
      throw Error("CUDA matmul: matrices multiplied together share their layout and row length");
  }
  // A launch's worth at a time, on the stack (a layer's step calls this a
  // few times a token).
  for (size_t first = 0; first < ws.size(); first += kernels::kMaxMats) {
    const size_t n = std::min(ws.size() - first, size_t(kernels::kMaxMats));
    const uint32_t* words[kernels::kMaxMats];
    int64_t rows[kernels::kMaxMats];
    for (size_t i = 0; i < n; ++i) words[i] = ws[first + i]->words(), rows[i] = ws[first + i]->rows();
    kernels::matmul_many(int(ws[0]->layout()), int(n), words, rows, ws[0]->cols() / 32, acts, n_tok,
                         ys.data() + first, int(kernel));
  }
}

void float_matmul(const DeviceMatrix& w, const float* x, int n_tok, float* y) {
  if (!w.floats()) throw Error("CUDA matmul: float_matmul takes a float matrix");
  kernels::float_matmul(w.float_kind(), w.words(), w.rows(), w.cols(), x, n_tok, y);
}

}  // namespace cs::cuda
