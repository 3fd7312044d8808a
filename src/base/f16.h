// Scalar conversions between fp32 and the 16-bit float formats stored in GGUF
// files and KV chunks. Bit-exact, round-to-nearest-even, portable (no F16C
// needed) so that the scalar paths and the tests do not depend on the CPU.
#pragma once
#include <cstdint>
#include <cstring>

namespace cs {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf/nan
  if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_to_f32(sign);
  // Subnormal half: value = mant * 2^-24, exactly representable in fp32.
  const float v = float(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to inf
  if (ax < 0x38800000u) {                                 // subnormal or zero half
    // Add 0.5 (as a float) so the FPU performs the round-to-nearest-even shift.
    const float v = bits_to_f32(ax) + 0.5f;
    return uint16_t(sign | (f32_to_bits(v) - 0x3f000000u));
  }
  const uint32_t odd = (ax >> 13) & 1;
  const uint32_t r = ax + 0xc8000fffu + odd;  // rebias exponent (-112<<23) and round
  return uint16_t(sign | (r >> 13));
}

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1);
  return uint16_t(x >> 16);
}

// One element of K/V storage by type code (0 fp32, 1 fp16, 2 bf16: KvType's
// values, BlockJob::kv_type), little-endian, through memcpy so any alignment
// works. The scalar paths of both KV caches read and write through these.
inline float load_kv_elem(const uint8_t* p, int type) {
  if (type == 0) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return type == 1 ? f16_to_f32(h) : bf16_to_f32(h);
}

inline void store_kv_elem(uint8_t* p, int type, float x) {
  if (type == 0) {
    std::memcpy(p, &x, 4);
    return;
  }
  const uint16_t h = type == 1 ? f32_to_f16(x) : f32_to_bf16(x);
  std::memcpy(p, &h, 2);
}

}  // namespace cs
