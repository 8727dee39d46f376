/* Float math the generated element-wise loops call in place of libm's, so
 * that GCC -O3 and LLVM's O3 vectorise them: branch-free (selects, no
 * calls), every multiply-add an explicit fmaf, so the C backend's GCC
 * (-std=gnu11 contracts a * b + c) and the LLVM backend's module compute the
 * same bits. With -march=native on an FMA machine fmaf is one instruction;
 * without FMA it is a correctly rounded library call (same results, slow).
 *
 * The generated kernels.c includes this header; the LLVM backend links it as
 * bitcode (kernels/conv_spec.c defines apk_tanhf external there), so both
 * backends compile this one definition. tests/test_math.c sweeps every
 * float against libm's double tanh (docs/kernels.md: measured error). */
#ifndef ACCPAR_APK_MATH_H
#define ACCPAR_APK_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef APK_MATH_API
#define APK_MATH_API static inline __attribute__((unused))
#endif

/* e^a in float for the a apk_expf and apk_tanhf pass (|a| below 104):
 * e^a = 2^n e^r with n = rint(a / ln 2) by the 1.5 * 2^23 trick (kf's low
 * bits hold n, no float to int conversion), r = a - n ln 2 in two fmaf
 * (|r| <= ln 2 / 2) and e^r by its Taylor polynomial to r^7 (the first
 * term left out, r^8 / 8!, is under 0.1 ulp there). Returns e^r, n in *n;
 * each caller applies 2^n as its range needs. */
APK_MATH_API float apk_expf_reduced(float a, int32_t *n) {
  const float magic = 0x1.8p23f;
  float kf = fmaf(a, 0x1.715476p+0f, magic);
  float nf = kf - magic;
  float r = fmaf(-nf, 0x1.62e430p-1f, a);
  r = fmaf(-nf, -0x1.05c610p-29f, r);
  float p = fmaf(r, 0x1.a01a02p-13f, 0x1.6c16c2p-10f); /* 1/7!, 1/6! */
  p = fmaf(r, p, 0x1.111112p-7f);
  p = fmaf(r, p, 0x1.555556p-5f);
  p = fmaf(r, p, 0x1.555556p-3f);
  p = fmaf(r, p, 0x1.0p-1f);
  uint32_t bits; /* memcpy, not a bit-cast helper: print_llvm.c names the functions it inlines */
  memcpy(&bits, &kf, sizeof bits);
  *n = (int32_t)(bits - 0x4b400000u);
  return fmaf(r, fmaf(r, p, 1.0f), 1.0f);
}

/* e^x in float, at most 1 ulp from the exact value (tests/test_math.c
 * sweeps every float; docs/kernels.md): apk_expf_reduced, with 2^n built
 * from its bits as two factors 2^(n/2), so that the subnormal results (x
 * down to -104, below which e^x rounds to 0) and the overflow to infinity
 * (x above 88.7) come out of the same two multiplications; x is clamped to
 * [-104, 89] first, by selects that NaN passes: NaN stays NaN, -inf gives
 * 0, +inf gives +inf. */
APK_MATH_API float apk_expf(float x) {
  float a = x < -104.0f ? -104.0f : x;
  a = a > 89.0f ? 89.0f : a;
  int32_t n;
  float p = apk_expf_reduced(a, &n);
  int32_t n1 = n >> 1, n2 = n - n1;
  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}

/* tanh(x) in float, at most 1.371 ulp from the exact value (measured by
 * tests/test_math.c over every float; docs/kernels.md). a = |x|:
 * - a < 0.625: a + a^3 P(a^2), P of degree 5 a Chebyshev fit of
 *   (tanh(a) - a) / a^3 on [0, 0.625^2] (mpmath chebyfit, coefficients
 *   rounded to float). Tiny and subnormal a return a, +-0 keep their sign.
 * - else 1 - 2 / (e^(2a) + 1), a clamped to 9.1 (beyond 9.011 tanh rounds
 *   to 1, and 2 / (e^18.2 + 1) < 2^-25 still does): e^(2a) = 2^n e^r by
 *   apk_expf_reduced, 2^n (2 <= n <= 26) built from its bits and applied
 *   in the fmaf that adds 1.
 * The sign is copied back last; a NaN stays NaN through both arms (the
 * clamp is written so NaN passes it). */
APK_MATH_API float apk_tanhf(float x) {
  float a = fabsf(x);
  float s = a * a;
  float p = fmaf(s, 0x1.2c83cp-9f, -0x1.116a16p-7f);
  p = fmaf(s, p, 0x1.64a976p-6f);
  p = fmaf(s, p, -0x1.ba08c4p-5f);
  p = fmaf(s, p, 0x1.1110eap-3f);
  p = fmaf(s, p, -0x1.555556p-2f);
  float small = fmaf(a * s, p, a);

  float y = 2.0f * (a > 9.1f ? 9.1f : a);
  int32_t n;
  float er = apk_expf_reduced(y, &n);
  uint32_t bits = ((uint32_t)n + 127u) << 23; /* unsigned: NaN leaves n any int */
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n);
  float large = 1.0f - 2.0f / fmaf(er, two_n, 1.0f);

  return copysignf(a < 0.625f ? small : large, x);
}

/* e^x in double, at most 1 ulp from the exact value (tests/test_math.c
 * samples it against expl): apk_expf's method with the Taylor polynomial to
 * r^13 (r^14 / 14! is under 0.05 ulp), ln 2 in two parts, n from the
 * 1.5 * 2^52 trick and x clamped to just beyond [-746, 710]. Every double
 * exp of the kernels calls it. The bounds are not floats on purpose: with
 * -746 and 710, GCC narrowed the clamp's comparisons of exp((double) z),
 * z a float, to float ones, moved the conversion into a branch, and did
 * not vectorise the loop (a conversion that may trap is not if-converted). */
APK_MATH_API double apk_exp(double x) {
  const double lo = -0x1.7500000000001p+9, hi = 0x1.6300000000001p+9; /* -746, 710 +- 2^-43 */
  double a = x < lo ? lo : x;
  a = a > hi ? hi : a;
  const double magic = 0x1.8p52;
  double kf = fma(a, 0x1.71547652b82fep+0, magic);
  double n = kf - magic;
  double r = fma(-n, 0x1.62e42fefa39efp-1, a);
  r = fma(-n, 0x1.abc9e3b39803fp-56, r);
  double p = fma(r, 1.0 / 6227020800.0, 1.0 / 479001600.0); /* 1/13!, 1/12! */
  p = fma(r, p, 1.0 / 39916800.0);
  p = fma(r, p, 1.0 / 3628800.0);
  p = fma(r, p, 1.0 / 362880.0);
  p = fma(r, p, 1.0 / 40320.0);
  p = fma(r, p, 1.0 / 5040.0);
  p = fma(r, p, 1.0 / 720.0);
  p = fma(r, p, 1.0 / 120.0);
  p = fma(r, p, 1.0 / 24.0);
  p = fma(r, p, 1.0 / 6.0);
  p = fma(r, p, 0.5);
  p = fma(r, fma(r, p, 1.0), 1.0);
  uint64_t bits;
  memcpy(&bits, &kf, sizeof bits);
  int64_t ni = (int64_t)(bits - 0x4338000000000000u), n1 = ni >> 1, n2 = ni - n1;
  uint64_t b1 = (uint64_t)(n1 + 1023) << 52, b2 = (uint64_t)(n2 + 1023) << 52;
  double s1, s2;
  memcpy(&s1, &b1, sizeof s1);
  memcpy(&s2, &b2, sizeof s2);
  return p * s1 * s2;
}

#endif
