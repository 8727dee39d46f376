/* The vectorisable float math of generated kernels (codegen/kernels/apk_math.h)
 * against libm in double, over every float. Compiled with the kernels'
 * -O3 -march (tests/CMakeLists.txt): the header's fmaf are then instructions
 * and the sweep of 2^32 floats takes seconds, not minutes. */
#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "codegen/kernels/apk_math.h"

/* The bound apk_math.h states; the sweep measured 1.371 ulp (at 0.63022083,
 * just above the switch from the polynomial to e^(2|x|) at 0.625). */
#define TANH_MAX_ULP 1.5

/* Beyond it tanh rounds to +-1: 1 - tanh(9.1) = 2 / (e^18.2 + 1) < 2^-25,
 * half an ulp below 1. Below TINY it rounds to x: tanh(x) = x (1 - x^2 / 3
 * + ...) and x^2 / 3 < 2^-25 is under half an ulp of x. */
#define SATURATED 9.1f
#define TINY 0x1p-12f

static float f32_of_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint32_t bits_of_f32(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* One ulp of float at |r| (subnormals: the smallest). */
static double ulp_at(double r) {
  int e = ilogb(r);
  return ldexp(1.0, (e < -126 ? -126 : e) - 23);
}

/* A float function of apk_math.h swept over every float of one sign:
 * against libm's double ref (in float ulps of the exact value) where
 * measured(x), and where not, exact(x, y) says whether y is right. run
 * evaluates a block in a loop of its own (vectorised, as the kernels'
 * loops are); the checks are cheap enough that 2^31 floats take seconds. */
typedef struct float_fn {
  const char *name;
  void (*run)(const float *x, float *y, int n);
  bool (*measured)(float x);
  double (*ref)(double x);
  bool (*exact)(float x, float y);
  double max_ulp;
} float_fn;

static void sweep(const float_fn *f, uint32_t sign) {
  enum { BLOCK = 1 << 16 };
  static float x[BLOCK], y[BLOCK];
  double worst = 0;
  float worst_x = 0;
  uint64_t wrong = 0;
  uint32_t first_wrong = 0;
  for (uint32_t hi = 0; hi < (1u << 15); hi++) {
    for (uint32_t lo = 0; lo < BLOCK; lo++)
      x[lo] = f32_of_bits(sign | hi << 16 | lo);
    f->run(x, y, BLOCK);
    for (int i = 0; i < BLOCK; i++) {
      if (f->measured(x[i])) {
        double ref = f->ref((double)x[i]);
        /* past float's range both are infinite: no error to measure */
        double err = isinf(y[i]) && fabs(ref) > FLT_MAX ? 0 : fabs((double)y[i] - ref) / ulp_at(fabs(ref));
        if (err > worst) {
          worst = err;
          worst_x = x[i];
        }
      } else if (!f->exact(x[i], y[i]) && !wrong++) {
        first_wrong = bits_of_f32(x[i]);
      }
    }
  }
  float bad = f32_of_bits(first_wrong);
  f->run(&bad, y, 1);
  cr_assert(wrong == 0, "%llu floats not exact, the first %s(%a) = %a", (unsigned long long)wrong,
            f->name, bad, y[0]);
  cr_log_info("%s, sign %u: at most %.4f ulp (at %a)", f->name, sign >> 31, worst, worst_x);
  cr_assert(worst <= f->max_ulp, "%s(%a): %.4f ulp", f->name, worst_x, worst);
}

/* tanh: measured where it is neither +-1 nor x; bit for bit elsewhere (NaN:
 * any NaN). */
static void tanh_run(const float *x, float *y, int n) {
  for (int i = 0; i < n; i++)
    y[i] = apk_tanhf(x[i]);
}

static bool tanh_measured(float x) { return fabsf(x) >= TINY && fabsf(x) < SATURATED; }

static bool tanh_exact(float x, float y) {
  uint32_t xb = bits_of_f32(x), yb = bits_of_f32(y);
  uint32_t want = fabsf(x) >= SATURATED ? (xb & 0x80000000u) | 0x3f800000u : xb;
  return isnan(x) ? (yb & 0x7fffffffu) > 0x7f800000u : yb == want;
}

static const float_fn tanh_fn = {"tanh", tanh_run, tanh_measured, tanh, tanh_exact, TANH_MAX_ULP};

/* That libm agrees: tanh rounds to +-1 and to x where the sweep says. */
Test(tanh, libm_saturates_where_assumed) {
  for (uint32_t b = 0; b < 0x7f800000u; b += 4099) {
    float x = f32_of_bits(b);
    if (x >= SATURATED)
      cr_assert((float)tanh(x) == 1.0f && (float)tanh(-x) == -1.0f, "libm: tanh(%a)", x);
    else if (x < TINY)
      cr_assert((float)tanh(x) == x && (float)tanh(-x) == -x, "libm: tanh(%a)", x);
  }
  cr_assert((float)tanh(SATURATED) == 1.0f && (float)tanh(nextafterf(TINY, 0)) == nextafterf(TINY, 0));
}

Test(tanh, every_positive_float) { sweep(&tanh_fn, 0); }

Test(tanh, every_negative_float) { sweep(&tanh_fn, 1u << 31); }

/* ONNX's Tanh is libm's tanhf: its special values, bit for bit. */
Test(tanh, special_values) {
  const float v[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e30f, -1e30f, 0x1p-149f, -0x1p-149f,
                     0x1p-126f, 9.0f, 9.02f, -9.02f, 0.625f, -0.625f};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    float got = apk_tanhf(v[i]), want = tanhf(v[i]);
    cr_assert(memcmp(&got, &want, sizeof got) == 0 || fabsf(got - want) <= 2 * ulp_at(want),
              "tanh(%a) = %a, libm %a", v[i], got, want);
    cr_assert(signbit(got) == signbit(v[i]), "tanh(%a) = %a: sign", v[i], got);
  }
  cr_assert(isnan(apk_tanhf(NAN)) && isnan(apk_tanhf(-NAN)));
}

/* ---- exp ---- */

/* The bound apk_math.h states for both. */
#define EXP_MAX_ULP 1.0

/* expf: measured over [-104, 89]; beyond, 0 below and +inf above, bit for
 * bit; NaN stays NaN. Subnormal results are measured in the smallest
 * subnormal's ulps. */
static void exp_run(const float *x, float *y, int n) {
  for (int i = 0; i < n; i++)
    y[i] = apk_expf(x[i]);
}

static bool exp_measured(float x) { return x >= -104.0f && x <= 89.0f; }

static bool exp_exact(float x, float y) {
  return isnan(x) ? isnan(y) : y == (x < 0 ? 0.0f : INFINITY);
}

static const float_fn exp_fn = {"expf", exp_run, exp_measured, exp, exp_exact, EXP_MAX_ULP};

Test(exp, every_positive_float) { sweep(&exp_fn, 0); }

Test(exp, every_negative_float) { sweep(&exp_fn, 1u << 31); }

/* apk_exp against expl (64-bit significand: 11 bits beyond double's) at 2^24
 * doubles spread over [-746, 710] by a fixed generator, and at the ends of
 * the range; in ulps of the exact value, subnormals in the smallest
 * subnormal's. */
Test(exp, doubles_against_long_double) {
  uint64_t s = 0x9e3779b97f4a7c15u;
  double worst = 0, worst_x = 0;
  for (int i = 0; i < (1 << 24); i++) {
    s = s * 6364136223846793005u + 1442695040888963407u;
    double x = -746.0 + 1456.0 * (double)(s >> 11) * 0x1p-53;
    if (i < 4096) /* near 0, where r is x itself */
      x = ldexp(x, -(i % 60));
    long double ref = expl((long double)x);
    double y = apk_exp(x);
    if (ref > (long double)DBL_MAX) {
      cr_assert(isinf(y) && y > 0, "exp(%a) = %a, beyond DBL_MAX", x, y);
      continue;
    }
    int e = ilogbl(ref);
    long double ulp = ldexpl(1.0L, (e < -1022 ? -1022 : e) - 52);
    double err = (double)(fabsl((long double)y - ref) / ulp);
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  cr_log_info("exp: at most %.4f ulp (at %a)", worst, worst_x);
  cr_assert(worst <= EXP_MAX_ULP, "exp(%a): %.4f ulp", worst_x, worst);
  const double v[] = {0.0, -0.0, 1.0, -1.0, 709.78, -745.0, -745.2, 710.5, -746.5};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    double got = apk_exp(v[i]), want = exp(v[i]);
    cr_assert(got == want || fabs(got - want) <= ldexp(1.0, ilogb(want) - 52),
              "exp(%a) = %a, libm %a", v[i], got, want);
  }
  cr_assert(apk_exp(INFINITY) == INFINITY && apk_exp(-INFINITY) == 0 && isnan(apk_exp(NAN)));
  cr_assert(apk_expf(INFINITY) == INFINITY && apk_expf(-INFINITY) == 0 && isnan(apk_expf(NAN)));
}
