// The float steps of the forward pass's elementwise operations, one value at
// a time, written once for the CPU and the GPU: model/ops.cpp's vector loops
// give these functions' bits (tests/ops_test.cpp compares them value by
// value), and the CUDA kernels (model/cuda_ops_kernels.cu) call them. So a
// norm, a rotation or an activation gives the same bits on both, and the CPU
// path is the GPU's reference bit for bit.
//
// Every step is written out: each product, sum and fused multiply-add is its
// own call, rounded to nearest even. On the GPU they are the _rn intrinsics,
// which nvcc never fuses; on the CPU the files that run them are compiled
// with -ffp-contract=off (CMakeLists.txt), so GCC does not fuse a product
// into a sum behind our back either. Comparisons are written as SSE's
// maxps/minps compute them (a > b ? a : b: a NaN gives the second operand),
// so the scalar and vector paths agree on NaN too.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CS_HD __host__ __device__ __forceinline__
#else
#define CS_HD inline
#endif

namespace cs::fp {

CS_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CS_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CS_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
CS_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
CS_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
CS_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
// To the nearest integer, ties to even (the default rounding mode on the CPU).
CS_HD float round_even(float a) {
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}
CS_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
CS_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
// SSE's maxps / minps: the second operand unless the first is strictly
// greater (less); so a NaN in either gives the second.
CS_HD float max_sse(float a, float b) { return a > b ? a : b; }
CS_HD float min_sse(float a, float b) { return a < b ? a : b; }
CS_HD uint32_t bits(float a) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(a);
#else
  uint32_t u;
  std::memcpy(&u, &a, 4);
  return u;
#endif
}
CS_HD bool sign_bit(float a) { return bits(a) >> 31; }
CS_HD float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// exp(x) for x <= 0 (x >= -150), attn/exp_impl.h's exp_nonpos one value at a
// time: 2^n p(f), p the degree-6 Taylor polynomial of 2^f, |f| <= 1/2; an n
// below -126 gives +0 (the exponent field 0 times p).
CS_HD float exp_nonpos(float x) {
  const float y = mul(x, 1.44269504088896341f);
  const float n = round_even(y);
  const float f = sub(y, n);
  float p = 1.5403530393381609e-4f;
  p = fma(p, f, 1.3333558146428443e-3f);
  p = fma(p, f, 9.6181291076284772e-3f);
  p = fma(p, f, 5.5504108664821580e-2f);
  p = fma(p, f, 2.4022650695910071e-1f);
  p = fma(p, f, 6.9314718055994531e-1f);
  p = fma(p, f, 1.0f);
  const int e = int(max_sse(n, -127.0f)) + 127;
  return mul(p, from_bits(uint32_t(e) << 23));
}

// x sigmoid(z) u, with e = exp(-|z|) in (0, 1] so nothing overflows:
// sigmoid(z) = 1 / (1 + e) for z >= 0 and e / (1 + e) for z < 0 (z's sign
// bit set, -0 included). The clamp at -100 keeps the exp's argument finite.
CS_HD float times_sigmoid(float x, float z, float u) {
  const float e = exp_nonpos(max_sse(from_bits(bits(z) | 0x80000000u), -100.0f));
  const float num = sign_bit(z) ? e : 1.0f;
  return mul(mul(x, div(num, add(1.0f, e))), u);
}

// silu(g) u: SwiGLU.
CS_HD float swiglu(float g, float u) { return times_sigmoid(g, g, u); }

// gelu(g) u, GELU's tanh form as a sigmoid: 0.5 (1 + tanh(y)) = sigmoid(2y),
// y = sqrt(2/pi) (g + 0.044715 g^3), so z = 2 sqrt(2/pi) g (1 + 0.044715 g^2).
constexpr float kGeluZ = 1.5957691216057308f;
constexpr float kGeluC = 0.044715f;
CS_HD float geglu(float g, float u) { return times_sigmoid(g, mul(mul(kGeluZ, g), fma(kGeluC, mul(g, g), 1.0f)), u); }

// gpt-oss's SwiGLU: the gate clamped above at 7, up to [-7, 7] and shifted
// by 1, sigmoid(1.702 g) in place of sigmoid(g).
constexpr float kOaiLimit = 7.0f, kOaiAlpha = 1.702f;
CS_HD float swiglu_oai(float g, float u) {
  const float x = min_sse(g, kOaiLimit);
  const float y = add(min_sse(max_sse(u, -kOaiLimit), kOaiLimit), 1.0f);
  return times_sigmoid(x, mul(kOaiAlpha, x), y);
}

// cap tanh(x / cap) (Gemma 2's soft-capping), tanh(|y|) as (1 - e) / (1 + e)
// with e = exp(-2 |y|), the clamp at -100 keeping the exp's argument finite,
// and y's sign put back.
CS_HD float softcap(float x, float cap) {
  const float y = mul(x, div(1.0f, cap));
  const float e = exp_nonpos(max_sse(mul(-2.0f, from_bits(bits(y) & 0x7fffffffu)), -100.0f));
  const float t = div(sub(1.0f, e), add(1.0f, e));
  return mul(cap, sign_bit(y) ? -t : t);
}

// RMS norm of a group of values. The sum of squares is kept in 32 double
// lanes: value i's square (rounded to float, then widened exactly) goes to
// lane i % 32 in order, and the lanes are added as a warp's shuffle tree adds
// them (lane l += lane l + o for o = 16, 8, 4, 2, 1). The scale is then
// 1 / sqrt(float(sum / n) + eps), and out = x * scale * w.
constexpr int kNormLanes = 32;
CS_HD double sum_lanes(double* lanes) {
  for (int o = kNormLanes / 2; o >= 1; o /= 2)
    for (int l = 0; l < o; ++l) lanes[l] = dadd(lanes[l], lanes[l + o]);
  return lanes[0];
}
CS_HD float rms_scale(double sum, int n, float eps) {
  return div(1.0f, sqrt(add(float(ddiv(sum, double(n))), eps)));
}
CS_HD float norm_value(float x, float scale, float w) { return mul(mul(x, scale), w); }

// RoPE's rotation of one pair (x0, x1) by the angle of cos c, sin s:
// x0 c - x1 s and x0 s + x1 c, each one product and one fused step.
CS_HD void rotate(float& x0, float& x1, float c, float s) {
  const float a = fma(x0, c, -mul(x1, s));
  const float b = fma(x0, s, mul(x1, c));
  x0 = a, x1 = b;
}

}  // namespace cs::fp
