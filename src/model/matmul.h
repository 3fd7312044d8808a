// Matrix products of model weights with activations: y[t] = W x[t] for a batch
// of token rows. The activations are quantized to 8-bit blocks of 32 and the
// products are integer dot products (AVX-512 VNNI or AVX2), the scheme of
// llama.cpp's legacy types, so that results agree with it to rounding.
// Quantized weights are repacked exactly at load into 16-row layouts (see
// model/pack_layout.h): Q4_0/Q4_1 into nibbles; Q4_K/Q5_K/Q6_K into nibbles
// and high-bit planes under the file's factored scales (a few percent more
// than the file's bytes: decode reads little more than the file); the others into
// bytes with one scale per block of 32 or per half of 16 (Q3_K, Q2_K). Q4_0,
// Q4_1 and Q8_0 also have a kernel on the file's layout, used without AVX2. Float
// weights (F32, F16, BF16) keep the file's values (16-bit ones widened in
// registers, exactly: half the bytes a decode step would read as fp32) and
// multiply float activations, each dot in one fixed order on every machine (32 fma lanes,
// then halves: the GPU's warps sum the same way). Multithreaded over output
// rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/huge_pages.h"
#include "model/ggml_types.h"
#include "model/pack_layout.h"

namespace cs {

namespace cuda {
class DeviceMatrix;  // model/cuda_matmul.h
}

// Repacked weights: on huge pages where large (base/huge_pages.h), as a
// decode step streams them all.
using PackedWords = std::vector<uint32_t, HugePageAllocator<uint32_t>>;

// A rows x cols weight matrix, row-major (GGUF ne[0] = cols).
struct Weight {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  // A plain float's values (F32, F16 or BF16: the file's bytes), copied
  // onto huge pages at load; `data` points here.
  std::vector<uint8_t, HugePageAllocator<uint8_t>> owned;
  // Repacked for the 16-row kernels (pack_layout; Q4_0/Q4_1/Q8_0 only on
  // AVX2 and AVX-512 CPUs): groups of 16 rows, laid out as
  // model/pack_layout.h describes. One vpdpbusd advances 16 rows by 4
  // values (AVX2: vpmaddubsw per 8 rows), and scales are vectors.
  PackedWords packed;
  // The GPU's copy (model/cuda_ops.h's backend; null on the CPU's).
  std::shared_ptr<const cuda::DeviceMatrix> device;
};


// Wraps tensor data for matmul. Plain-float types are copied as they are
// (Weight::owned); Q4_x and Q8_0 are also repacked for the 16-row kernels.
Weight make_weight(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data);

// Wraps tensor data as it is in the file, for row lookups (the token
// embedding): no copy, no repacking; not for matmul.
Weight view_weight(GgmlType type, int64_t rows, int64_t cols, const uint8_t* data);

// Quantizes n values (n % 32 == 0) into n/32 blocks.
void quantize_q8(const float* x, size_t n, BlockQ8* out);

// y[t * w.rows + r] = sum_c W[r][c] * x[t * w.cols + c] for t < n_tok.
// `scratch` is reused between calls to hold quantized activations.
void matmul(const Weight& w, const float* x, int n_tok, float* y, std::vector<BlockQ8>& scratch);

// Scratch of matmul_refined, reused between calls.
struct HeadScratch {
  std::vector<BlockQ8> level1, level2, stacked;
  std::vector<float> residual, tile_max, floor, out;
  std::vector<int> tile_rows, tile_count;  // the rows that select each tile
  std::vector<uint8_t> has_level2;         // few rows: (tile, row) whose level two the pass computed
  int64_t level2_pairs = 0;                // of the last call: (tile, row) pairs whose level two was computed
};

// Up to this many rows, matmul_refined reads the weights once: a row's level
// two on a tile is computed beside its level one where that comes near the
// row's running top. More rows: level one everywhere, then level two tile by tile.
constexpr int kStackedRows = 4;

// matmul(), then the outputs that matter refined: each activation row is
// quantized in two levels, x = d1 q1 + d2 q2 (q2 quantizes what q1 left, so
// the rounding error is about 1/127 of matmul()'s), and the second level is
// added to every tile of kPackRows outputs holding one within `margin` of the
// row's largest. For the output head, where an 8-bit input's error reaches
// the logits unnormalized: a logit `margin` below the top has a probability
// of e^-margin of the top's, and keeps matmul()'s precision. Each row's result
// depends on that row alone, as matmul()'s does.
void matmul_refined(const Weight& w, const float* x, int n_tok, float margin, float* y, HeadScratch& scratch);

// Several weights reading the same input (q/k/v, gate/up; at most 7, all of
// one width): the input is quantized once and all rows are computed in one
// parallel region. ys[i] receives weight i's output, laid out as in matmul().
void matmul_multi(std::span<const Weight* const> ws, const float* x, int n_tok,
                  std::span<float* const> ys, std::vector<BlockQ8>& scratch);

// Many weights, each with an input of its own (a mixture's experts, each
// with the tokens routed to it): ys[i] = ws[i] xs[i] for n_toks[i] rows, all
// in one parallel region (a step's experts are many small products; one
// region each would be mostly starts and joins). Entries that name the same
// input (gate and up) share its quantization. Every weight quantized and of
// one width, else each runs as matmul(). Each row's result is matmul()'s.
void matmul_grouped(std::span<const Weight* const> ws, std::span<const float* const> xs, std::span<const int> n_toks,
                    std::span<float* const> ys, std::vector<BlockQ8>& scratch);

// Row-block dot kernels, one per ISA, exposed for tests: computes the dot of
// n_rows rows (starting at `rows`, row_bytes apart) with n_tok activation rows of
// `nb` blocks each (acts[t*nb ...]), into y[t * ldy + r].
using QDotKernel = void (*)(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
                            const BlockQ8* acts, int nb, int n_tok, float* y, int ldy);
void qdot_scalar(GgmlType, const uint8_t*, size_t, int, const BlockQ8*, int, int, float*, int);
void qdot_avx2(GgmlType, const uint8_t*, size_t, int, const BlockQ8*, int, int, float*, int);
void qdot_avx512(GgmlType, const uint8_t*, size_t, int, const BlockQ8*, int, int, float*, int);
// The repacked kernels: one group of 16 rows (n_rows of them real); qdot16
// reads the Q4 layout, qdot16q8 every other layout (the Q8 and K layouts).
void qdot16_avx2(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy);
void qdot16q8_avx2(PackLayout layout, const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok,
                   float* y, int ldy);
void qdot16_avx512(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y,
                   int ldy);
void qdot16q8_avx512(PackLayout layout, const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok,
                     float* y, int ldy);
// Scalar kernels on the repacked layouts (the reference path of the types
// that exist only repacked, and of the tests).
void qdot16_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy);
void qdot16q8_scalar(PackLayout layout, const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok,
                     float* y, int ldy);
// Q4_0, Q4_1 and Q8_0 also have a kernel on the file's layout (any CPU).
inline bool file_layout_kernel(GgmlType type) {
  return type == GgmlType::Q4_0 || type == GgmlType::Q4_1 || type == GgmlType::Q8_0;
}
// The other quantized types exist only repacked, on every CPU.
inline bool only_repacked(GgmlType type) { return !plain_float(type) && !file_layout_kernel(type); }
// The layout a quantized type repacks into.
PackLayout pack_layout(GgmlType type);
// Weight::packed from rows of any quantized type, through block32().
PackedWords pack_block32_rows(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols);

}  // namespace cs
