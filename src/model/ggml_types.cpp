#include "model/ggml_types.h"

#include <cstring>

#include "base/f16.h"

namespace cs {

std::optional<TypeInfo> type_info(uint32_t id) {
  switch (GgmlType(id)) {
    case GgmlType::F32: return TypeInfo{"F32", 1, 4};
    case GgmlType::F16: return TypeInfo{"F16", 1, 2};
    case GgmlType::BF16: return TypeInfo{"BF16", 1, 2};
    case GgmlType::Q4_0: return TypeInfo{"Q4_0", kQBlock, sizeof(BlockQ4_0)};
    case GgmlType::Q4_1: return TypeInfo{"Q4_1", kQBlock, sizeof(BlockQ4_1)};
    case GgmlType::Q8_0: return TypeInfo{"Q8_0", kQBlock, sizeof(BlockQ8_0)};
  }
  return std::nullopt;
}

void dequantize_row(GgmlType type, const void* src, float* dst, size_t n) {
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case GgmlType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case GgmlType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case GgmlType::Q4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (size_t k = 0; k < n / kQBlock; ++k, dst += kQBlock) {
        const float d = f16_to_f32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * float((b[k].qs[j] & 0xf) - 8);
          dst[j + 16] = d * float((b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case GgmlType::Q4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (size_t k = 0; k < n / kQBlock; ++k, dst += kQBlock) {
        const float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
        for (int j = 0; j < 16; ++j) {
          dst[j] = d * float(b[k].qs[j] & 0xf) + m;
          dst[j + 16] = d * float(b[k].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case GgmlType::Q8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (size_t k = 0; k < n / kQBlock; ++k, dst += kQBlock) {
        const float d = f16_to_f32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[j] = d * float(b[k].qs[j]);
      }
      return;
    }
  }
}

}  // namespace cs
