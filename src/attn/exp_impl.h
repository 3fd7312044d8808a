// Vector exp for the softmax, shared by the AVX2 and AVX-512 kernels and the
// forward pass's SwiGLU (and the soft-cap built on it) (see block_impl.h for why it lives in the including
// file's anonymous namespace).
namespace {
// exp(x) for finite x <= 0: 2^(x log2 e) as 2^n * p(f), |f| <= 1/2, p the
// degree-6 Taylor polynomial of 2^f. Relative error < 2e-7 + |x| * 6e-8: the
// second term is x log2 e rounded to fp32 (1.3e-6 at x = -27, where exp(x) is
// 2e-12; a softmax weight or SiLU that small does not matter). No clamp: a
// masked key's x is about -1e30 (block_impl.h, kMasked), for which f = 0 and
// Ops::scale_pow2 gives exactly +0, as it does for any x below about -104
// (AVX-512, after subnormals) or -88 (AVX2, which flushes them).
template <class V, class Ops>
V exp_nonpos(V x) {
  const V y = Ops::mul(x, Ops::set1(1.44269504088896341f));
  const V n = Ops::round(y);
  const V f = Ops::sub(y, n);
  V p = Ops::set1(1.5403530393381609e-4f);
  p = Ops::fma(p, f, Ops::set1(1.3333558146428443e-3f));
  p = Ops::fma(p, f, Ops::set1(9.6181291076284772e-3f));
  p = Ops::fma(p, f, Ops::set1(5.5504108664821580e-2f));
  p = Ops::fma(p, f, Ops::set1(2.4022650695910071e-1f));
  p = Ops::fma(p, f, Ops::set1(6.9314718055994531e-1f));
  p = Ops::fma(p, f, Ops::set1(1.0f));
  return Ops::scale_pow2(p, n);
}

// cap * tanh(s / cap), as (1 - e) / (1 + e) with e = exp(-2 |s / cap|) and
// the sign of s (model/ops_math.h's fp::softcap, a vector at a time; the
// block kernels' scores and the forward pass's logits):
// exp_nonpos's error (2e-7 relative) moves a capped score by
// about cap * 4e-7, less than fp32 rounds a score of that size.
template <class Ops>
inline typename Ops::V softcap_vec(typename Ops::V s, typename Ops::V cap, typename Ops::V inv_cap) {
  using V = typename Ops::V;
  const V y = Ops::mul(s, inv_cap);
  const V e = exp_nonpos<V, Ops>(Ops::max(Ops::mul(Ops::set1(-2.0f), Ops::abs(y)), Ops::set1(-100.0f)));
  const V one = Ops::set1(1.0f);
  const V t = Ops::div(Ops::sub(one, e), Ops::add(one, e));
  return Ops::mul(cap, Ops::copysign(t, y));
}

}  // namespace
