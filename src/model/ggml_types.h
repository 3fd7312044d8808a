// Tensor element types of GGUF files (the ggml type ids) and their block
// layouts. Quantized types store blocks of 32 values; the layouts below are
// the on-disk formats, read directly by the dequantizers and dot kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

namespace cs {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
  BF16 = 30,
};

struct TypeInfo {
  const char* name;
  int block_elems;  // values per block (1 for plain floats)
  int block_bytes;  // bytes per block
};

// Info for a supported type, nullopt for any other id.
std::optional<TypeInfo> type_info(uint32_t id);

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
// An activation block: 32 int8 values, their scale d and s = d * sum(q)
// (both rounded through fp16, as the on-disk Q8 formats would be).
struct BlockQ8 {
  float d;
  float s;
  int32_t sum;  // sum(q), exact: the repacked Q8_0 kernel offsets weights by 128
  int8_t qs[32];
};

// Repacked layouts of the 16-row kernels (see Weight::packed): 16 rows a
// group. Q4: per block 16 scales, 16 minimums and 64 words of nibbles. Q8_0:
// per block 16 scales and 128 words of weights + 128 (unsigned bytes).
constexpr int kPackRows = 16;
constexpr int kPackBlockWords = 96;
constexpr int kPackQ8BlockWords = 144;

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ8_0) == 34);

// Dequantize n values (n a multiple of the type's block size) to fp32.
void dequantize_row(GgmlType type, const void* src, float* dst, size_t n);

}  // namespace cs
