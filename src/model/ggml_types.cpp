#include "model/ggml_types.h"

#include <cstring>
#include <iterator>

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
    case GgmlType::Q5_0: return TypeInfo{"Q5_0", kQBlock, sizeof(BlockQ5_0)};
    case GgmlType::Q5_1: return TypeInfo{"Q5_1", kQBlock, sizeof(BlockQ5_1)};
    case GgmlType::Q2_K: return TypeInfo{"Q2_K", kQK, sizeof(BlockQ2_K)};
    case GgmlType::Q3_K: return TypeInfo{"Q3_K", kQK, sizeof(BlockQ3_K)};
    case GgmlType::Q4_K: return TypeInfo{"Q4_K", kQK, sizeof(BlockQ4_K)};
    case GgmlType::Q5_K: return TypeInfo{"Q5_K", kQK, sizeof(BlockQ5_K)};
    case GgmlType::Q6_K: return TypeInfo{"Q6_K", kQK, sizeof(BlockQ6_K)};
    case GgmlType::IQ4_NL: return TypeInfo{"IQ4_NL", kQBlock, sizeof(BlockIQ4_NL)};
    case GgmlType::IQ4_XS: return TypeInfo{"IQ4_XS", kQK, sizeof(BlockIQ4_XS)};
    case GgmlType::MXFP4: return TypeInfo{"MXFP4", kQBlock, sizeof(BlockMXFP4)};
  }
  return std::nullopt;
}

std::string type_name(uint32_t id) {
  // ggml's type ids (ggml.h); 4, 5 and 31-33 are retired.
  static const char* const names[] = {"F32",    "F16",   "Q4_0",  "Q4_1",   "",      "",     "Q5_0",  "Q5_1",
                                      "Q8_0",   "Q8_1",  "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K", "Q6_K",  "Q8_K",
                                      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
                                      "I8",     "I16",   "I32",   "I64",    "F64",   "IQ1_M", "BF16",  "",
                                      "",       "",      "TQ1_0", "TQ2_0",  "",      "",     "",      "MXFP4"};
  return id < std::size(names) ? names[id] : "";
}

std::string supported_type_names() {
  std::string out;
  for (uint32_t id = 0; id < 64; ++id)
    if (const auto info = type_info(id)) out += (out.empty() ? "" : ", ") + std::string(info->name);
  return out;
}

bool plain_float(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

namespace {

// The 6-bit scale and minimum of Q4_K/Q5_K sub-block j (0..7), packed in 12
// bytes: j < 4 in the low 6 bits of bytes j and j + 4; j >= 4 in the nibbles
// of byte j + 4 with their top 2 bits in the top bits of bytes j - 4 and j.
void scale_min_k4(const uint8_t* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K's 16 six-bit scales: low 4 bits from the nibbles of bytes 0-7, high 2
// bits from the bit pairs of bytes 8-11.
int scale_k3(const uint8_t* s, int i) {
  const int low = (s[i % 8] >> (4 * (i / 8))) & 0xF;
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// Value i (0..255) of a K-quant's 2-bit array (Q2_K's values, Q3_K's low
// bits): 32 bytes per half of the block, four values per byte, the j-th
// group of 32 in bits 2j.
int two_bits(const uint8_t* qs, int i) { return (qs[(i / 128) * 32 + i % 32] >> (2 * ((i % 128) / 32))) & 3; }

// Value i (0..255) of Q6_K super-block k, offset by -32 (-32..31).
int q6k(const BlockQ6_K& k, int i) {
  const int h = i / 128, r = i % 128;
  const int low = (k.ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0xF;
  const int high = (k.qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
  return (low | (high << 4)) - 32;
}

// IQ4_NL / IQ4_XS: value i (0..31) of the 16 bytes of a block of 32, as a grid
// value.
int iq4(const uint8_t* qs, int i) { return kIq4Values[i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4]; }

// MXFP4: value i (0..31) of a block's 16 bytes, as the doubled E2M1 grid value.
int8_t mxfp4(const uint8_t* qs, int i) { return kMxfp4Values[i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4]; }

// The 4-bit grid types of 32 values a block (IQ4_NL, MXFP4): each value is
// its block's scale times its grid entry.
template <class Block, class Scale, class Value>
void dequantize_grid(const Block* b, size_t n, float* dst, Scale scale, Value value) {
  for (size_t k = 0; k < n / kQBlock; ++k, dst += kQBlock) {
    const float d = scale(b[k]);
    for (int j = 0; j < 32; ++j) dst[j] = d * float(value(b[k].qs, j));
  }
}

// IQ4_XS's 6-bit scale of sub-block j, offset by -32.
int iq4xs_scale(const BlockIQ4_XS& b, int j) {
  return (((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4)) - 32;
}

// Q4_K / Q5_K: value i of a block whose 4-bit array is qs (and fifth bits qh).
template <class Block>
void dequantize_q45(const Block& b, const uint8_t* qh, float* dst) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int i = 0; i < kQK; ++i) {
    int q = (b.qs[(i / 64) * 32 + i % 32] >> (4 * ((i % 64) / 32))) & 0xF;
    if (qh) q |= ((qh[i % 32] >> (i / 32)) & 1) << 4;
    int sc, m;
    scale_min_k4(b.scales, i / 32, sc, m);
    const float dd = d * float(sc), dm = dmin * float(m);
    dst[i] = dd * float(q) - dm;
  }
}

// Each value is computed as the reference (gguf's numpy dequantizers) does,
// operation for operation in fp32; this file is built without FMA contraction
// so that the results agree bit for bit.
void dequantize_k(GgmlType type, const void* src, float* dst, size_t n) {
  for (size_t k = 0; k < n / kQK; ++k, dst += kQK) {
    switch (type) {
      case GgmlType::Q2_K: {
        const BlockQ2_K& b = static_cast<const BlockQ2_K*>(src)[k];
        const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
        for (int i = 0; i < kQK; ++i) {
          const int q = two_bits(b.qs, i);
          const float dl = d * float(b.scales[i / 16] & 0xF), ml = dmin * float(b.scales[i / 16] >> 4);
          dst[i] = dl * float(q) - ml;
        }
        break;
      }
      case GgmlType::Q3_K: {
        const BlockQ3_K& b = static_cast<const BlockQ3_K*>(src)[k];
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK; ++i) {
          const int low = two_bits(b.qs, i);
          const int hbit = (b.hmask[i % 32] >> (i / 32)) & 1;
          const float dl = d * float(scale_k3(b.scales, i / 16));
          dst[i] = dl * float(low - (hbit ? 0 : 4));
        }
        break;
      }
      case GgmlType::Q4_K: dequantize_q45(static_cast<const BlockQ4_K*>(src)[k], nullptr, dst); break;
      case GgmlType::Q5_K: {
        const BlockQ5_K& b = static_cast<const BlockQ5_K*>(src)[k];
        dequantize_q45(b, b.qh, dst);
        break;
      }
      case GgmlType::IQ4_XS: {
        const BlockIQ4_XS& b = static_cast<const BlockIQ4_XS*>(src)[k];
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK; ++i) {
          const float dl = d * float(iq4xs_scale(b, i / 32));
          dst[i] = dl * float(iq4(b.qs + 16 * (i / 32), i % 32));
        }
        break;
      }
      case GgmlType::Q6_K: {
        const BlockQ6_K& b = static_cast<const BlockQ6_K*>(src)[k];
        const float d = f16_to_f32(b.d);
        for (int i = 0; i < kQK; ++i) {
          const float dd = d * float(b.scales[i / 16]);
          dst[i] = dd * float(q6k(b, i));
        }
        break;
      }
      default: return;
    }
  }
}

// Q5_0 / Q5_1: the fifth bit of value j is bit j of qh.
template <class Block>
int q5(const Block& b, int j) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  const int low = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
  return low | int((qh >> j) & 1) << 4;
}

}  // namespace

namespace {

// One map for both halves.
void same_halves(Block32& out, float d, float m) {
  out.d[0] = out.d[1] = d;
  out.m[0] = out.m[1] = m;
}

// The K-quants' blocks of 32: sub-block j = b % 8 of super-block b / 8, each
// map as dequantize_k computes it (minimums negated, exact).
void block32_k(GgmlType type, const uint8_t* row, int b, Block32& out) {
  const int j = b % 8, sb = b / 8;
  switch (type) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      // The maps from the file's factors (block_scales): d * sc, and the
      // minimum dmin * m negated, as dequantize_q45 computes them, exactly.
      const BlockScales bs = block_scales(type, row, b);
      same_halves(out, bs.d * float(bs.sc[0]), bs.dmin * float(bs.mn[0]));
      const bool q5 = type == GgmlType::Q5_K;
      const uint8_t* qs = q5 ? reinterpret_cast<const BlockQ5_K*>(row)[sb].qs : reinterpret_cast<const BlockQ4_K*>(row)[sb].qs;
      for (int i = 0; i < 32; ++i) {
        int q = (qs[(j / 2) * 32 + i] >> (4 * (j % 2))) & 0xF;
        if (q5) q |= ((reinterpret_cast<const BlockQ5_K*>(row)[sb].qh[i] >> j) & 1) << 4;
        out.q[i] = int8_t(q);
      }
      return;
    }
    case GgmlType::Q6_K: {
      const BlockScales bs = block_scales(type, row, b);
      for (int h = 0; h < 2; ++h) out.d[h] = bs.d * float(bs.sc[h]), out.m[h] = 0.0f;
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(q6k(reinterpret_cast<const BlockQ6_K*>(row)[sb], 32 * j + i));
      return;
    }
    case GgmlType::Q3_K: {
      const BlockQ3_K& k = reinterpret_cast<const BlockQ3_K*>(row)[sb];
      for (int h = 0; h < 2; ++h) out.d[h] = f16_to_f32(k.d) * float(scale_k3(k.scales, 2 * j + h)), out.m[h] = 0.0f;
      for (int i = 0; i < 32; ++i) {
        const int v = 32 * j + i;
        out.q[i] = int8_t(two_bits(k.qs, v) - (((k.hmask[v % 32] >> (v / 32)) & 1) ? 0 : 4));
      }
      return;
    }
    case GgmlType::IQ4_XS: {
      const BlockIQ4_XS& k = reinterpret_cast<const BlockIQ4_XS*>(row)[sb];
      same_halves(out, f16_to_f32(k.d) * float(iq4xs_scale(k, j)), 0.0f);
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(iq4(k.qs + 16 * j, i));
      return;
    }
    case GgmlType::Q2_K: {
      const BlockQ2_K& k = reinterpret_cast<const BlockQ2_K*>(row)[sb];
      for (int h = 0; h < 2; ++h) {
        const uint8_t sc = k.scales[2 * j + h];
        out.d[h] = f16_to_f32(k.d) * float(sc & 0xF);
        out.m[h] = -(f16_to_f32(k.dmin) * float(sc >> 4));
      }
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(two_bits(k.qs, 32 * j + i));
      return;
    }
    default: return;
  }
}

}  // namespace

Block32 block32(GgmlType type, const uint8_t* row, int b) {
  Block32 out{};
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      // Nibble j is value j (low) and j + 16 (high); Q4_0's offset -8 is its
      // minimum -8 d, as llama.cpp's kernels apply it.
      const bool q41 = type == GgmlType::Q4_1;
      const uint8_t* blk = row + size_t(b) * (q41 ? sizeof(BlockQ4_1) : sizeof(BlockQ4_0));
      uint16_t dh, mh = 0;
      std::memcpy(&dh, blk, 2);
      if (q41) std::memcpy(&mh, blk + 2, 2);
      const uint8_t* qs = blk + (q41 ? 4 : 2);
      const float d = f16_to_f32(dh);
      same_halves(out, d, q41 ? f16_to_f32(mh) : -8.0f * d);
      for (int i = 0; i < 16; ++i) out.q[i] = int8_t(qs[i] & 0xF), out.q[i + 16] = int8_t(qs[i] >> 4);
      return out;
    }
    case GgmlType::Q8_0: {
      const BlockQ8_0& k = reinterpret_cast<const BlockQ8_0*>(row)[b];
      same_halves(out, f16_to_f32(k.d), 0.0f);
      std::memcpy(out.q, k.qs, 32);
      return out;
    }
    case GgmlType::Q5_0: {
      const BlockQ5_0& k = reinterpret_cast<const BlockQ5_0*>(row)[b];
      same_halves(out, f16_to_f32(k.d), 0.0f);
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(q5(k, i) - 16);
      return out;
    }
    case GgmlType::Q5_1: {
      const BlockQ5_1& k = reinterpret_cast<const BlockQ5_1*>(row)[b];
      same_halves(out, f16_to_f32(k.d), f16_to_f32(k.m));
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(q5(k, i));
      return out;
    }
    case GgmlType::IQ4_NL: {
      const BlockIQ4_NL& k = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
      same_halves(out, f16_to_f32(k.d), 0.0f);
      for (int i = 0; i < 32; ++i) out.q[i] = int8_t(iq4(k.qs, i));
      return out;
    }
    case GgmlType::MXFP4: {
      const BlockMXFP4& k = reinterpret_cast<const BlockMXFP4*>(row)[b];
      same_halves(out, mxfp4_scale(k.e), 0.0f);
      for (int i = 0; i < 32; ++i) out.q[i] = mxfp4(k.qs, i);
      return out;
    }
    default: block32_k(type, row, b, out); return out;
  }
}

BlockScales block_scales(GgmlType type, const uint8_t* row, int b) {
  const int j = b % 8, sb = b / 8;
  BlockScales out{};
  if (type == GgmlType::Q6_K) {
    const BlockQ6_K& k = reinterpret_cast<const BlockQ6_K*>(row)[sb];
    out.d = f16_to_f32(k.d);
    out.sc[0] = k.scales[2 * j], out.sc[1] = k.scales[2 * j + 1];
    return out;
  }
  const bool q5 = type == GgmlType::Q5_K;
  const BlockQ4_K* k4 = reinterpret_cast<const BlockQ4_K*>(row) + sb;
  const BlockQ5_K* k5 = reinterpret_cast<const BlockQ5_K*>(row) + sb;
  int sc, m;
  scale_min_k4(q5 ? k5->scales : k4->scales, j, sc, m);
  out.d = f16_to_f32(q5 ? k5->d : k4->d);
  out.dmin = -f16_to_f32(q5 ? k5->dmin : k4->dmin);
  out.sc[0] = out.sc[1] = int8_t(sc);
  out.mn[0] = out.mn[1] = int8_t(m);
  return out;
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
    case GgmlType::Q5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(src);
      for (size_t k = 0; k < n / kQBlock; ++k, dst += kQBlock) {
        const float d = f16_to_f32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[j] = d * float(q5(b[k], j) - 16);
      }
      return;
    }
    case GgmlType::Q5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(src);
      for (size_t k = 0; k < n / kQBlock; ++k, dst += kQBlock) {
        const float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
        for (int j = 0; j < 32; ++j) dst[j] = d * float(q5(b[k], j)) + m;
      }
      return;
    }
    case GgmlType::IQ4_NL:
      return dequantize_grid(static_cast<const BlockIQ4_NL*>(src), n, dst,
                             [](const BlockIQ4_NL& b) { return f16_to_f32(b.d); }, iq4);
    case GgmlType::MXFP4:
      return dequantize_grid(static_cast<const BlockMXFP4*>(src), n, dst,
                             [](const BlockMXFP4& b) { return mxfp4_scale(b.e); }, mxfp4);
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS: return dequantize_k(type, src, dst, n);
  }
}

}  // namespace cs
