// Tensor element types of GGUF files (the ggml type ids) and their block
// layouts. Legacy quantized types store blocks of 32 values, K-quants super-
// blocks of 256; the layouts below are the on-disk formats, read directly by
// the dequantizers and dot kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace cs {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,
};

struct TypeInfo {
  const char* name;
  int block_elems;  // values per block (1 for plain floats)
  int block_bytes;  // bytes per block
};

// Info for a supported type, nullopt for any other id.
std::optional<TypeInfo> type_info(uint32_t id);
// ggml's name of any type id ("IQ2_XS", ...; empty when unknown), for errors
// about the types we do not support.
std::string type_name(uint32_t id);
// The supported types' names, for those errors.
std::string supported_type_names();
// True for the plain floats (F32, F16, BF16): values, not blocks; their
// matmul reads them as they are and multiplies float activations (every
// quantized type has integer kernels).
bool plain_float(GgmlType type);

constexpr int kQBlock = 32;

// Q4_0: x = d * (q - 8); element j in the low nibble of qs[j], j+16 in the high.
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[16];
};
// Q4_1: x = d * q + m, same nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;  // fp16
  uint16_t m;  // fp16
  uint8_t qs[16];
};
// Q8_0: x = d * q.
struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[32];
};
// Q5_0: x = d * (q - 16), q = low nibble (as Q4_0) | bit j of qh << 4.
struct BlockQ5_0 {
  uint16_t d;  // fp16
  uint8_t qh[4];
  uint8_t qs[16];
};
// Q5_1: x = d * q + m, q as Q5_0's.
struct BlockQ5_1 {
  uint16_t d, m;  // fp16
  uint8_t qh[4];
  uint8_t qs[16];
};

// K-quants: 256 values in sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K,
// Q5_K), each with its own quantized scale (and minimum).
constexpr int kQK = 256;
// Q2_K: x = d * (sc & 15) * q - dmin * (sc >> 4), q 2 bits; sub-blocks of 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;  // fp16
};
// Q3_K: x = d * (s - 32) * (q - 4 * !hbit), q 2 bits, s 6 bits packed in 12
// bytes; sub-blocks of 16.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;  // fp16
};
// Q4_K: x = d * sc * q - dmin * m, q 4 bits, sc and m 6 bits packed in 12
// bytes; sub-blocks of 32.
struct BlockQ4_K {
  uint16_t d, dmin;  // fp16
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q5_K: Q4_K with a fifth bit per value in qh.
struct BlockQ5_K {
  uint16_t d, dmin;  // fp16
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// IQ4_NL: x = d * kIq4Values[q], q 4 bits in Q4_0's nibble order: a
// non-linear grid of 16 values.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
struct BlockIQ4_NL {
  uint16_t d;  // fp16
  uint8_t qs[16];
};
// IQ4_XS: IQ4_NL's grid in super-blocks of 256, sub-block j (32 values) scaled
// by d * (s - 32), s 6 bits (4 in scales_l, 2 in scales_h); values as IQ4_NL's
// per sub-block (qs[16 j ..]).
struct BlockIQ4_XS {
  uint16_t d;  // fp16
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// MXFP4 (OCP microscaling, gpt-oss's experts): x = 2^(e - 128) * kMxfp4Values[q],
// e an E8M0 exponent, q 4-bit E2M1 codes in Q4_0's nibble order; the grid is
// E2M1's values doubled (0, 0.5, ..., 6 times 2), so every value is an int8
// times a power of two, as in the Q8 layout, exactly.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
struct BlockMXFP4 {
  uint8_t e;  // E8M0
  uint8_t qs[16];
};
// The scale of an MXFP4 block, 2^(e - 128), as ggml computes it (a
// subnormal float for e < 2).
inline float mxfp4_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? uint32_t(0x00200000) << e : uint32_t(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// Q6_K: x = d * sc * (q - 32), q 6 bits (4 in ql, 2 in qh), sc int8; sub-blocks of 16.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;  // fp16
};

// An activation block: 32 int8 values, their scale d and s = d * sum(q)
// (both rounded through fp16, as the on-disk Q8 formats would be).
struct BlockQ8 {
  float d;
  float s;
  int32_t sum;     // sum(q), exact: the repacked Q8 kernels offset weights by 128
  int32_t sum_lo;  // the sum of q[0..15], for the layouts that scale each half
  float ds;        // d * sum in fp32: what most layouts weigh minimums by
  int8_t qs[32];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 && sizeof(BlockMXFP4) == 17);

// Dequantize n values (n a multiple of the type's block size) to fp32.
void dequantize_row(GgmlType type, const void* src, float* dst, size_t n);

// Block b (32 values) of a row of any quantized type, as the 16-row kernels
// read it after repacking at load: 32 integers and an affine map per half of
// 16, x_j = d[h] * q[j] + m[h] with h = j / 16: q 0..15 for Q4_0, Q4_1 and
// Q4_K, 0..31 for Q5_1 and Q5_K, otherwise signed (Q6_K -32..31; IQ4's q is
// its grid value). Types with one scale per 32 values have equal halves;
// Q6_K, Q3_K and Q2_K scale each 16 on its own. For every type but
// Q4_0 the map gives dequantize_row's x_j bit for bit; Q4_0's minimum is
// -8 d, as llama.cpp's kernels apply it.
struct Block32 {
  int8_t q[32];
  float d[2], m[2];
};
Block32 block32(GgmlType type, const uint8_t* row, int b);

// Block32's maps of a Q4_K, Q5_K or Q6_K block factored as the file stores
// them: d[h] = d * sc[h] and m[h] = dmin * mn[h] (dmin negated, so m comes out
// as the map's minimum), each product exact in fp32 (an fp16 times a 6- or
// 8-bit integer), so the repacked layouts can keep the small integers and one
// d per super-block of 256. Q4_K/Q5_K have one sc and mn per block (both
// halves equal), Q6_K one sc per half and no minimum.
struct BlockScales {
  float d, dmin;
  int8_t sc[2], mn[2];
};
BlockScales block_scales(GgmlType type, const uint8_t* row, int b);

}  // namespace cs
