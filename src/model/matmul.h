// Matrix products of model weights with activations: y[t] = W x[t] for a batch
// of token rows. Quantized weights (Q4_0, Q4_1, Q8_0) are used in place, read
// from the GGUF mapping: the activations are quantized to 8-bit blocks and the
// products are integer dot products (AVX-512 VNNI or AVX2), the same scheme as
// llama.cpp so that results agree with it to rounding. Float weights (F32, F16,
// BF16) are widened to fp32 once at load. Q4_K and Q5_0 are repacked exactly
// into the Q4 and Q8 16-row layouts (1.3x and 1.6x the file's bytes); Q5_1,
// Q2_K, Q3_K, Q5_K and Q6_K, until they have integer kernels of their own,
// are widened too (widened_at_load: exact, but 5-8x the memory and
// bandwidth). Multithreaded over output rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/ggml_types.h"

namespace cs {

// A rows x cols weight matrix, row-major (GGUF ne[0] = cols).
struct Weight {
  GgmlType type = GgmlType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  std::vector<float> owned;  // fp32 copy when the file's type is a plain float
  // Q4_0/Q4_1 (and, alike, Q8_0) repacked for the 16-row kernels (built at
  // load on AVX2 and AVX-512 CPUs):
  // groups of 16 rows; per block, 16 fp32 scales d, 16 fp32 minimums m, then
  // 4 x 64 bytes of nibbles where 32-bit lane r of vector k holds row r's
  // elements 8k..8k+3 (low nibbles) and 8k+4..8k+7 (high nibbles). One
  // vpdpbusd then advances 16 rows by 4 elements (AVX2: two vpmaddubsw per
  // 8 rows by 8), and scales are vectors.
  std::vector<uint32_t> packed;
};


// Wraps tensor data for matmul. Plain-float types are converted to an owned
// fp32 copy; Q4_x and Q8_0 are also repacked for the 16-row kernels.
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
};

// matmul_refined runs both levels in one pass up to this many rows.
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

// Row-block dot kernels, one per ISA, exposed for tests: computes the dot of
// n_rows rows (starting at `rows`, row_bytes apart) with n_tok activation rows of
// `nb` blocks each (acts[t*nb ...]), into y[t * ldy + r].
using QDotKernel = void (*)(GgmlType type, const uint8_t* rows, size_t row_bytes, int n_rows,
                            const BlockQ8* acts, int nb, int n_tok, float* y, int ldy);
void qdot_scalar(GgmlType, const uint8_t*, size_t, int, const BlockQ8*, int, int, float*, int);
void qdot_avx2(GgmlType, const uint8_t*, size_t, int, const BlockQ8*, int, int, float*, int);
void qdot_avx512(GgmlType, const uint8_t*, size_t, int, const BlockQ8*, int, int, float*, int);
// The repacked kernels: one group of 16 rows (n_rows of them real).
void qdot16_avx2(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy);
void qdot16q8_avx2(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy);
void qdot16_avx512(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y,
                   int ldy);
void qdot16q8_avx512(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y,
                     int ldy);
// Scalar kernels on the repacked layouts (the reference path of the types
// that exist only repacked, and of the tests).
void qdot16_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy);
void qdot16q8_scalar(const uint32_t* group, int nb, int n_rows, const BlockQ8* acts, int n_tok, float* y, int ldy);
// Types with no kernel on the file's layout: repacked at load on every CPU
// (Q4_K into the Q4 layout, Q5_0 into the Q8 one; both exactly, Block32).
inline bool only_repacked(GgmlType type) { return type == GgmlType::Q4_K || type == GgmlType::Q5_0; }
// Q8_0 and Q5_0 repack into the Q8 layout; Q4_0, Q4_1 and Q4_K into the Q4 one.
bool packs_to_q8_layout(GgmlType type);
// Weight::packed from rows of any of those types, through block32().
std::vector<uint32_t> pack_block32_rows(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols);

}  // namespace cs
