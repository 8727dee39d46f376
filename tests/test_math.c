/* The vectorisable float math of generated kernels (codegen/kernels/apk_math.h)
 * against libm in double, over every float. Compiled with the kernels'
 * -O3 -march (tests/CMakeLists.txt): the header's fmaf are then instructions
 * and the sweep of 2^32 floats takes seconds, not minutes. */
#include <criterion/criterion.h>

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

/* Every float of one sign: tanh against libm's double tanh where it is
 * neither +-1 nor x, bit for bit elsewhere (NaN: any NaN). The loop over the
 * exact ones stays cheap (no call, no branch on the value but the range's),
 * so that 2^31 floats take seconds. */
static void sweep(uint32_t sign) {
  enum { BLOCK = 1 << 16 };
  static float x[BLOCK], y[BLOCK];
  double worst = 0;
  float worst_x = 0;
  uint64_t wrong = 0;
  uint32_t first_wrong = 0;
  for (uint32_t hi = 0; hi < (1u << 15); hi++) {
    for (uint32_t lo = 0; lo < BLOCK; lo++)
      x[lo] = f32_of_bits(sign | hi << 16 | lo);
    for (int i = 0; i < BLOCK; i++)
      y[i] = apk_tanhf(x[i]);
    for (int i = 0; i < BLOCK; i++) {
      float a = fabsf(x[i]);
      if (a >= TINY && a < SATURATED) {
        double ref = tanh((double)x[i]);
        double err = fabs((double)y[i] - ref) / ulp_at(fabs(ref));
        if (err > worst) {
          worst = err;
          worst_x = x[i];
        }
        continue;
      }
      uint32_t xb = bits_of_f32(x[i]), yb = bits_of_f32(y[i]);
      uint32_t want = a >= SATURATED ? sign | 0x3f800000u : xb;
      bool bad = isnan(x[i]) ? (yb & 0x7fffffffu) <= 0x7f800000u : yb != want;
      if (bad && !wrong++)
        first_wrong = xb;
    }
  }
  cr_assert(wrong == 0, "%llu floats not exact, the first tanh(%a) = %a",
            (unsigned long long)wrong, f32_of_bits(first_wrong),
            apk_tanhf(f32_of_bits(first_wrong)));
  cr_log_info("tanh, sign %u: at most %.4f ulp (at %a)", sign >> 31, worst, worst_x);
  cr_assert(worst <= TANH_MAX_ULP, "tanh(%a): %.4f ulp", worst_x, worst);
}

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

Test(tanh, every_positive_float) { sweep(0); }

Test(tanh, every_negative_float) { sweep(1u << 31); }

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
