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

/* tanh(x) in float, at most 1.371 ulp from the exact value (measured by
 * tests/test_math.c over every float; docs/kernels.md). a = |x|:
 * - a < 0.625: a + a^3 P(a^2), P of degree 5 a Chebyshev fit of
 *   (tanh(a) - a) / a^3 on [0, 0.625^2] (mpmath chebyfit, coefficients
 *   rounded to float). Tiny and subnormal a return a, +-0 keep their sign.
 * - else 1 - 2 / (e^(2a) + 1), a clamped to 9.1 (beyond 9.011 tanh rounds
 *   to 1, and 2 / (e^18.2 + 1) < 2^-25 still does): e^y = 2^n e^r with
 *   n = rint(y / ln 2) by the 1.5 * 2^23 trick (its bits hold n, no float to
 *   int conversion), r = y - n ln 2 in two fmaf (|r| <= ln 2 / 2) and
 *   e^r = 1 + r (1 + r Q(r)), Q of degree 5 a Chebyshev fit of
 *   (e^r - 1 - r) / r^2; 2^n (0 <= n <= 26) built from its bits.
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
  const float magic = 0x1.8p23f; /* kf's low bits are n */
  float kf = fmaf(y, 0x1.715476p+0f, magic);
  float n = kf - magic;
  float r = fmaf(-n, 0x1.62e430p-1f, y);
  r = fmaf(-n, -0x1.05c610p-29f, r);
  float q = fmaf(r, 0x1.a124e4p-13f, 0x1.6d4316p-10f);
  q = fmaf(r, q, 0x1.1110e0p-7f);
  q = fmaf(r, q, 0x1.5554eap-5f);
  q = fmaf(r, q, 0x1.555556p-3f);
  q = fmaf(r, q, 0x1.0p-1f);
  float er = fmaf(r, fmaf(r, q, 1.0f), 1.0f);
  uint32_t bits; /* memcpy, not a helper: the LLVM backend inlines this function alone */
  memcpy(&bits, &kf, sizeof bits);
  bits = (bits << 23) + (127u << 23);
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n);
  float large = 1.0f - 2.0f / fmaf(er, two_n, 1.0f);

  return copysignf(a < 0.625f ? small : large, x);
}

#endif
