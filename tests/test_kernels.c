/* The GEMM and convolution kernels of generated programs, against naive loops in
 * double precision and against finite differences of the forward kernel.
 * Sizes are odd and straddle the compiled block sizes, so every edge path of
 * the packing and of the micro-kernel runs. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/kernels/kernels.h"

/* ---- helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static float uniform(void) /* in [-1, 1) */
{
  rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
  return (float)((rng_state >> 40) / (double)(1u << 24)) * 2.0f - 1.0f;
}

static float *random_floats(size_t count)
{
  float *v = malloc(sizeof(float) * (count ? count : 1));
  cr_assert(v);
  for (size_t i = 0; i < count; i++) v[i] = uniform();
  return v;
}

/* Vector-aligned, as the packed operands must be. */
static float *aligned_floats(size_t count)
{
  float *v = aligned_alloc(64, (sizeof(float) * (count ? count : 1) + 63) / 64 * 64);
  cr_assert(v);
  return v;
}

static float *work_floats(size_t count)
{
  float *w = malloc(sizeof(float) * (count ? count : 1));
  cr_assert(w);
  return w;
}

/* got vs want, where scale[i] bounds the magnitude of the terms summed into
 * want[i]: the error of a float sum is relative to that, not to the (possibly
 * cancelled) result. */
static void expect_close(const char *what, const float *got, const double *want,
                         const double *scale, size_t count, double rel)
{
  for (size_t i = 0; i < count; i++) {
    double tol = rel * (scale[i] + 1e-30);
    if (!(fabs(got[i] - want[i]) <= tol))
      cr_assert_fail("%s: element %zu is %.9g, expected %.9g (tolerance %.3g)", what, i,
                     (double)got[i], want[i], tol);
  }
}

/* ---- GEMM ---- */

static double op_at(const float *x, ptrdiff_t ld, int trans, int row, int col)
{
  return trans ? x[(ptrdiff_t)col * ld + row] : x[(ptrdiff_t)row * ld + col];
}

/* One GEMM with padded leading dimensions, checked element by element. */
static void check_gemm(int ta, int tb, int m, int n, int k, float alpha, float beta)
{
  int a_rows = ta ? k : m, a_cols = ta ? m : k;
  int b_rows = tb ? n : k, b_cols = tb ? k : n;
  ptrdiff_t lda = a_cols + 3, ldb = b_cols + 5, ldc = n + 2;
  float *a = random_floats((size_t)a_rows * lda);
  float *b = random_floats((size_t)b_rows * ldb);
  float *c = random_floats((size_t)m * ldc);
  if (beta == 0.0f)
    for (size_t i = 0; i < (size_t)m * ldc; i++) c[i] = NAN; /* must not be read */
  double *want = calloc((size_t)m * n, sizeof(double));
  double *scale = calloc((size_t)m * n, sizeof(double));
  float *got = calloc((size_t)m * n, sizeof(float));
  cr_assert(want && scale && got);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double sum = 0.0, mag = 0.0;
      for (int p = 0; p < k; p++) {
        double t = op_at(a, lda, ta, i, p) * op_at(b, ldb, tb, p, j);
        sum += t;
        mag += fabs(t);
      }
      double old = beta == 0.0f ? 0.0 : c[(ptrdiff_t)i * ldc + j];
      want[(ptrdiff_t)i * n + j] = alpha * sum + beta * old;
      scale[(ptrdiff_t)i * n + j] = fabs(alpha) * mag + fabs(beta * old);
    }
  float *work = work_floats(apk_sgemm_work_floats(m, n, k));
  float *c0 = work_floats((size_t)m * ldc);
  memcpy(c0, c, sizeof(float) * (size_t)m * ldc);
  apk_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, work);
  for (int i = 0; i < m; i++) memcpy(got + (ptrdiff_t)i * n, c + (ptrdiff_t)i * ldc, sizeof(float) * n);
  char what[128];
  snprintf(what, sizeof what, "gemm ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g", ta, tb, m, n,
           k, alpha, beta);
  expect_close(what, got, want, scale, (size_t)m * n, 1e-4);
  /* op(B) packed once (a constant weight), then the same product from it;
   * its padding starts as NaN, which zero-padding must overwrite. */
  size_t npb = apk_packed_b_floats(k, n);
  cr_assert_leq(npb, apk_packed_b_floats_max(k, n));
  float *pb = aligned_floats(npb);
  for (size_t i = 0; i < npb; i++) pb[i] = NAN;
  apk_pack_b_all(tb, k, n, b, ldb, pb);
  float *cp = work_floats((size_t)m * ldc);
  memcpy(cp, c0, sizeof(float) * (size_t)m * ldc);
  apk_sgemm_pb(ta, m, n, k, alpha, a, lda, pb, beta, cp, ldc, work);
  for (int i = 0; i < m; i++) memcpy(got + (ptrdiff_t)i * n, cp + (ptrdiff_t)i * ldc, sizeof(float) * n);
  snprintf(what, sizeof what, "gemm_pb ta=%d tb=%d m=%d n=%d k=%d alpha=%g beta=%g", ta, tb, m,
           n, k, alpha, beta);
  expect_close(what, got, want, scale, (size_t)m * n, 1e-4);
  free(pb), free(cp), free(c0);
  /* The padding between rows of C belongs to the caller. */
  if (beta != 0.0f)
    for (int i = 0; i < m; i++)
      for (ptrdiff_t j = n; j < ldc; j++)
        cr_assert(!isnan(c[i * ldc + j]), "%s: padding of C changed", what);
  free(a), free(b), free(c), free(want), free(scale), free(work), free(got);
}

Test(kernels_gemm, odd_sizes_all_transpositions_and_scalars)
{
  static const int sizes[] = {1, 7, 33, 129};
  static const float scalars[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.5f, 2.0f}, {2.0f, -1.0f}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (int s = 0; s < 4; s++)
        for (int mi = 0; mi < 4; mi++)
          for (int ni = 0; ni < 4; ni++)
            for (int ki = 0; ki < 4; ki++)
              check_gemm(ta, tb, sizes[mi], sizes[ni], sizes[ki], scalars[s][0], scalars[s][1]);
}

Test(kernels_gemm, sizes_across_cache_blocks)
{
  /* One more than each block in each dimension, so that the second block of
   * every loop is a partial one and beta is applied only by the first k block. */
  apk_gemm_config cfg = apk_gemm_get_config();
  cr_assert(cfg.mr > 0 && cfg.nr % cfg.vector_floats == 0 && cfg.mc % cfg.mr == 0);
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      check_gemm(ta, tb, cfg.mc + cfg.mr + 1, 2 * cfg.nr + 3, cfg.kc + 1, 1.0f, 0.5f);
      check_gemm(ta, tb, 3, cfg.nc + cfg.nr + 1, 5, 1.0f, 1.0f);
      check_gemm(ta, tb, cfg.mr, cfg.nr, 2 * cfg.kc + 7, -1.0f, 0.0f);
    }
}

Test(kernels_gemm, alpha_zero_and_k_zero_only_scale_c)
{
  /* As in BLAS, A and B are not read: NaN there must not reach C. */
  float a[4], b[4], c[4] = {1, 2, 3, 4};
  for (int i = 0; i < 4; i++) a[i] = b[i] = NAN;
  float work[1];
  apk_sgemm(0, 0, 2, 2, 2, 0.0f, a, 2, b, 2, 3.0f, c, 2, work);
  for (int i = 0; i < 4; i++) cr_expect_float_eq(c[i], 3.0f * (float)(i + 1), 0.0f);
  apk_sgemm(1, 1, 2, 2, 0, 1.0f, a, 2, b, 2, 0.0f, c, 2, work);
  for (int i = 0; i < 4; i++) cr_expect_float_eq(c[i], 0.0f, 0.0f);
  cr_expect_eq(apk_sgemm_work_floats(0, 5, 5), 0);
}

/* ---- convolution ---- */

static size_t x_count(const apk_conv2d *p)
{
  return (size_t)p->batch * p->in_channels * p->in_h * p->in_w;
}
static size_t w_count(const apk_conv2d *p)
{
  return (size_t)p->out_channels * (p->in_channels / p->groups) * p->kernel_h * p->kernel_w;
}
static size_t y_count(const apk_conv2d *p)
{
  return (size_t)p->batch * p->out_channels * apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
}

/* Visits every (output, input, weight) index triple of the convolution: the
 * definition the three naive references share. */
typedef void (*visit_fn)(void *ctx, size_t yi, size_t xi, size_t wi);

static void for_each_term(const apk_conv2d *p, visit_fn visit, void *ctx)
{
  int oh_n = apk_conv2d_out_h(p), ow_n = apk_conv2d_out_w(p);
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  for (int n = 0; n < p->batch; n++)
    for (int m = 0; m < p->out_channels; m++)
      for (int oh = 0; oh < oh_n; oh++)
        for (int ow = 0; ow < ow_n; ow++) {
          size_t yi = (((size_t)n * p->out_channels + m) * oh_n + oh) * ow_n + ow;
          for (int c = 0; c < cg; c++)
            for (int kh = 0; kh < p->kernel_h; kh++)
              for (int kw = 0; kw < p->kernel_w; kw++) {
                int ih = oh * p->stride_h - p->pad_top + kh * p->dilation_h;
                int iw = ow * p->stride_w - p->pad_left + kw * p->dilation_w;
                if (ih < 0 || ih >= p->in_h || iw < 0 || iw >= p->in_w) continue;
                int ci = m / mg * cg + c;
                size_t xi = (((size_t)n * p->in_channels + ci) * p->in_h + ih) * p->in_w + iw;
                size_t wi = (((size_t)m * cg + c) * p->kernel_h + kh) * p->kernel_w + kw;
                visit(ctx, yi, xi, wi);
              }
        }
}

typedef struct naive {
  const float *in1, *in2;  /* the two factors of each term */
  double *out, *mag;       /* sum and sum of magnitudes per output element */
  int which;               /* 0: forward, 1: backward data, 2: backward weights */
} naive;

static void naive_visit(void *ctx, size_t yi, size_t xi, size_t wi)
{
  naive *v = ctx;
  double t;
  size_t o;
  switch (v->which) {
  case 0: t = (double)v->in1[xi] * v->in2[wi], o = yi; break;  /* x, w */
  case 1: t = (double)v->in1[yi] * v->in2[wi], o = xi; break;  /* dy, w */
  default: t = (double)v->in1[yi] * v->in2[xi], o = wi; break; /* dy, x */
  }
  v->out[o] += t;
  v->mag[o] += fabs(t);
}

static void naive_run(const apk_conv2d *p, int which, const float *in1, const float *in2,
                      double *out, double *mag, size_t out_count)
{
  memset(out, 0, sizeof(double) * out_count);
  memset(mag, 0, sizeof(double) * out_count);
  naive v = {in1, in2, out, mag, which};
  for_each_term(p, naive_visit, &v);
}

static double dot(const float *a, const float *b, size_t count)
{
  double s = 0.0;
  for (size_t i = 0; i < count; i++) s += (double)a[i] * b[i];
  return s;
}

static const char *const algo_names[] = {"im2col", "implicit", "winograd", "winograd4"};

/* Checks the three kernels of one convolution against the naive loops with
 * every algorithm that supports them, and the two backward kernels against
 * central differences of the forward kernel of the same algorithm for
 * L = <dy, conv(x, w)>. L is linear in x and in w, so a large step is exact
 * up to rounding and the difference quotient is a tight check. Returns how
 * many (kernel, algorithm) pairs ran. */
static int check_conv(const char *name, apk_conv2d p)
{
  size_t nx = x_count(&p), nw = w_count(&p), ny = y_count(&p);
  cr_assert(ny > 0, "%s: empty output", name);
  float *x = random_floats(nx), *w = random_floats(nw), *dy = random_floats(ny);
  float *bias = random_floats((size_t)p.out_channels);
  float *y = work_floats(ny), *dx = work_floats(nx), *dw = work_floats(nw);
  float *dbias = work_floats((size_t)p.out_channels);
  size_t nmax = nx > nw ? nx : nw;
  nmax = nmax > ny ? nmax : ny;
  double *want = calloc(nmax, sizeof(double)), *mag = calloc(nmax, sizeof(double));
  cr_assert(want && mag);
  char what[200];
  int ohw = apk_conv2d_out_h(&p) * apk_conv2d_out_w(&p);
  int ran = 0;
  /* The default workspace must fit the chosen algorithms. */
  for (int k = APK_CONV_FORWARD; k <= APK_CONV_BACKWARD_WEIGHTS; k++) {
    apk_conv_algo chosen = apk_conv2d_choose(&p, (apk_conv_kernel)k);
    cr_assert(apk_conv2d_supports(&p, chosen, (apk_conv_kernel)k), "%s: chose unsupported", name);
    cr_assert_geq(apk_conv2d_work_floats(&p),
                  apk_conv2d_algo_work_floats(&p, chosen, (apk_conv_kernel)k), "%s", name);
  }

  for (int a = APK_CONV_IM2COL; a <= APK_CONV_WINOGRAD4; a++) {
    apk_conv_algo algo = (apk_conv_algo)a;
    if (!apk_conv2d_supports(&p, algo, APK_CONV_FORWARD)) continue;
    size_t nwork = 0;
    for (int k = APK_CONV_FORWARD; k <= APK_CONV_BACKWARD_WEIGHTS; k++)
      if (apk_conv2d_supports(&p, algo, (apk_conv_kernel)k)) {
        size_t need = apk_conv2d_algo_work_floats(&p, algo, (apk_conv_kernel)k);
        nwork = need > nwork ? need : nwork;
      }
    float *work = work_floats(nwork);
    for (size_t i = 0; i < nwork; i++) work[i] = NAN; /* scratch is written before it is read */

    /* Forward, with and without bias (y starts as NaN: it is write-only). */
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      for (size_t i = 0; i < ny; i++) y[i] = NAN;
      apk_conv2d_forward_algo(&p, algo, x, w, with_bias ? bias : NULL, y, work);
      naive_run(&p, 0, x, w, want, mag, ny);
      if (with_bias)
        for (size_t i = 0; i < ny; i++) {
          double b = bias[(i / ohw) % p.out_channels];
          want[i] += b;
          mag[i] += fabs(b);
        }
      snprintf(what, sizeof what, "%s forward%s (%s)", name, with_bias ? " with bias" : "",
               algo_names[a]);
      expect_close(what, y, want, mag, ny, 1e-4);
    }
    ran++;

    int has_data = apk_conv2d_supports(&p, algo, APK_CONV_BACKWARD_DATA);
    int has_weights = apk_conv2d_supports(&p, algo, APK_CONV_BACKWARD_WEIGHTS);
    if (has_data) {
      for (size_t i = 0; i < nx; i++) dx[i] = NAN;
      apk_conv2d_backward_data_algo(&p, algo, dy, w, dx, work);
      naive_run(&p, 1, dy, w, want, mag, nx);
      snprintf(what, sizeof what, "%s backward data (%s)", name, algo_names[a]);
      expect_close(what, dx, want, mag, nx, 1e-4);
      ran++;
    }

    if (has_weights) {
      for (size_t i = 0; i < nw; i++) dw[i] = NAN;
      apk_conv2d_backward_weights_algo(&p, algo, x, dy, dw, dbias, work);
      naive_run(&p, 2, dy, x, want, mag, nw);
      snprintf(what, sizeof what, "%s backward weights (%s)", name, algo_names[a]);
      expect_close(what, dw, want, mag, nw, 1e-4);
      for (int m = 0; m < p.out_channels; m++) {
        double s = 0.0, sa = 0.0;
        for (int n = 0; n < p.batch; n++)
          for (int j = 0; j < ohw; j++) {
            float t = dy[((size_t)n * p.out_channels + m) * ohw + j];
            s += t, sa += fabs(t);
          }
        cr_assert(fabs(dbias[m] - s) <= 1e-5 * sa + 1e-30, "%s dbias[%d] = %g, expected %g", name,
                  m, (double)dbias[m], s);
      }
      ran++;
    }

    /* Finite differences of this algorithm's forward on a few elements of x
     * (against its backward data) and of w (against its backward weights). */
    const float step = 0.5f;
    for (int t = 0; t < 6; t++) {
      int of_w = t % 2;
      if (of_w ? !has_weights : !has_data) continue;
      float *v = of_w ? w : x;
      size_t count = of_w ? nw : nx;
      size_t i = (size_t)(t * 7919u) % count;
      float saved = v[i];
      v[i] = saved + step;
      apk_conv2d_forward_algo(&p, algo, x, w, NULL, y, work);
      double plus = dot(dy, y, ny);
      v[i] = saved - step;
      apk_conv2d_forward_algo(&p, algo, x, w, NULL, y, work);
      double minus = dot(dy, y, ny);
      v[i] = saved;
      double fd = (plus - minus) / (2.0 * step);
      double analytic = of_w ? dw[i] : dx[i];
      /* Outputs the step does not reach are bit-identical in both runs and
       * cancel, so only the rounding of a few outputs remains. */
      cr_assert(fabs(fd - analytic) <= 1e-4 * (fabs(analytic) + 1.0),
                "%s (%s): d/d%s[%zu] is %.9g, finite difference %.9g", name, algo_names[a],
                of_w ? "w" : "x", i, analytic, fd);
    }
    free(work);
  }

  /* The forward kernel from weights packed once: the chosen algorithm's
   * layout, then every algorithm's (NaN in the buffer: everything read is
   * written by the packing). */
  size_t npw = apk_conv2d_packed_floats(&p), nwork = apk_conv2d_work_floats(&p);
  cr_assert_leq(npw, apk_conv2d_packed_floats_max(&p), "%s", name);
  naive_run(&p, 0, x, w, want, mag, ny);
  for (size_t i = 0; i < ny; i++) {
    double b = bias[(i / ohw) % p.out_channels];
    want[i] += b;
    mag[i] += fabs(b);
  }
  for (int a = -1; a <= APK_CONV_WINOGRAD4; a++) {
    apk_conv_algo algo = a < 0 ? apk_conv2d_choose_packed(&p) : (apk_conv_algo)a;
    if (!apk_conv2d_supports(&p, algo, APK_CONV_FORWARD)) continue;
    size_t n_pw = a < 0 ? npw : apk_conv2d_packed_floats_algo(&p, algo);
    size_t n_work = a < 0 ? nwork : apk_conv2d_algo_work_floats(&p, algo, APK_CONV_FORWARD);
    float *pw = aligned_floats(n_pw), *work = work_floats(n_work);
    for (size_t i = 0; i < n_pw; i++) pw[i] = NAN;
    for (size_t i = 0; i < n_work; i++) work[i] = NAN;
    for (size_t i = 0; i < ny; i++) y[i] = NAN;
    if (a < 0) {
      apk_conv2d_pack_weights(&p, w, pw);
      apk_conv2d_forward_packed(&p, x, pw, bias, y, work);
    } else {
      apk_conv2d_pack_weights_algo(&p, algo, w, pw);
      apk_conv2d_forward_packed_algo(&p, algo, x, pw, bias, y, work);
    }
    snprintf(what, sizeof what, "%s forward from packed weights (%s%s)", name, algo_names[algo],
             a < 0 ? ", chosen" : "");
    expect_close(what, y, want, mag, ny, 1e-4);
    free(pw), free(work);
  }

  free(x), free(w), free(dy), free(bias), free(y), free(dx), free(dw), free(dbias);
  free(want), free(mag);
  return ran;
}

/* batch, C, H, W, M, KH, KW, strides (h, w), pads (t, l, b, r), dilations, groups */
#define CONV(n, c, h, w_, m, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw_, g)                       \
  (apk_conv2d) { n, c, h, w_, m, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw_, g }

Test(kernels_conv, against_naive_loops_and_finite_differences)
{
  check_conv("3x3 pad 1", CONV(1, 3, 9, 11, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1));
  check_conv("3x3 stride 2", CONV(2, 4, 13, 12, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1));
  check_conv("asymmetric pads", CONV(1, 2, 8, 7, 3, 3, 2, 1, 1, 0, 2, 2, 1, 1, 1, 1));
  check_conv("dilation 2", CONV(1, 3, 12, 10, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1));
  check_conv("dilation and stride", CONV(2, 2, 15, 14, 3, 3, 3, 2, 3, 1, 2, 1, 0, 2, 1, 1));
  check_conv("groups 2", CONV(2, 6, 7, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2));
  check_conv("depthwise", CONV(1, 5, 10, 10, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5));
  check_conv("pointwise", CONV(2, 17, 6, 5, 33, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1));
  check_conv("pointwise grouped", CONV(1, 8, 5, 5, 12, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4));
  check_conv("1x1 stride 2", CONV(1, 16, 9, 9, 8, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1));
  check_conv("7x7 stride 2 pad 3", CONV(1, 3, 23, 23, 8, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1));
  check_conv("3x1 kernel", CONV(1, 4, 8, 6, 5, 3, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1));
  check_conv("kernel wider than input", CONV(1, 2, 3, 3, 3, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1));
  check_conv("pads larger than stride", CONV(1, 2, 5, 5, 2, 3, 3, 3, 3, 4, 4, 4, 4, 1, 1, 1));
  /* Large enough that the GEMMs cross cache blocks. */
  check_conv("wide", CONV(1, 40, 14, 14, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1));
}

/* One input channel, unit strides, no padding: the implicit algorithm's
 * forward and backward weights are direct loops (conv.c). Rows of outputs
 * that are whole vectors and rows that end in an overlapping chunk, output
 * channels off and over the 8 of a block, LeNet-5's conv1. */
Test(kernels_conv, one_input_channel_direct)
{
  check_conv("direct odd row", CONV(2, 1, 20, 21, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1));
  check_conv("direct 9 outputs", CONV(1, 1, 12, 36, 9, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1));
  check_conv("direct 3x3", CONV(2, 1, 9, 19, 3, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1));
  check_conv("lenet5 conv1", CONV(3, 1, 32, 32, 6, 5, 5, 1, 1, 0, 0, 0, 0, 1, 1, 1));
}

/* The shapes Winograd F(2x2, 3x3) and F(4x4, 3x3) take, with everything its tiling can get
 * wrong: odd output sizes (partial tiles), pads 0 and 2 and asymmetric ones,
 * a batch, channel counts off the register tile, several tile blocks per
 * image, more channels than a k block. Each runs the other algorithms too. */
Test(kernels_conv, winograd_shapes_against_naive_loops)
{
  int ran = 0;
  ran += check_conv("wino pad 1 odd", CONV(2, 5, 9, 7, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1));
  ran += check_conv("wino no pad", CONV(1, 3, 8, 10, 4, 3, 3, 1, 1, 0, 0, 0, 0, 1, 1, 1));
  ran += check_conv("wino pad 2", CONV(1, 4, 5, 6, 3, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1, 1));
  ran += check_conv("wino asymmetric", CONV(1, 3, 7, 8, 5, 3, 3, 1, 1, 0, 2, 2, 1, 1, 1, 1));
  ran += check_conv("wino tiny", CONV(1, 2, 1, 1, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1));
  ran += check_conv("wino many tiles", CONV(1, 9, 33, 31, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1));
  ran += check_conv("wino deep", CONV(1, 300, 6, 5, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1));
  /* Enough channels and tiles that weights packed once take F(4x4, 3x3),
   * with partial tiles on both edges and a row count off the register tile. */
  apk_conv2d four = CONV(2, 16, 15, 13, 17, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1);
  cr_assert_eq(apk_conv2d_choose_packed(&four), APK_CONV_WINOGRAD4);
  ran += check_conv("wino4 packed", four);
  /* 8 shapes x (4 forward + 3 backward data + 2 backward weights). */
  cr_assert_eq(ran, 8 * 9, "every algorithm ran on every shape");
}

Test(kernels_conv, output_size_follows_onnx)
{
  apk_conv2d p = CONV(1, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1, 1);
  cr_expect_eq(apk_conv2d_out_h(&p), 112);
  cr_expect_eq(apk_conv2d_out_w(&p), 112);
  p = CONV(1, 1, 10, 9, 1, 3, 3, 2, 3, 0, 1, 1, 0, 2, 2, 1);
  cr_expect_eq(apk_conv2d_out_h(&p), (10 + 0 + 1 - 5) / 2 + 1);
  cr_expect_eq(apk_conv2d_out_w(&p), (9 + 1 + 0 - 5) / 3 + 1);
}

Test(kernels_conv, col2im_is_the_adjoint_of_im2col)
{
  /* <im2col(x), c> = <x, col2im(c)> for all x and c: what backward data relies on. */
  apk_conv2d p = CONV(1, 3, 11, 9, 1, 3, 4, 2, 1, 1, 2, 0, 1, 2, 1, 1);
  size_t nx = (size_t)p.in_channels * p.in_h * p.in_w;
  size_t ncol = (size_t)p.in_channels * p.kernel_h * p.kernel_w * apk_conv2d_out_h(&p) *
                apk_conv2d_out_w(&p);
  float *x = random_floats(nx), *c = random_floats(ncol);
  float *col = work_floats(ncol), *back = work_floats(nx);
  apk_im2col(&p, x, p.in_channels, col);
  memset(back, 0, sizeof(float) * nx);
  apk_col2im(&p, c, p.in_channels, back);
  double lhs = dot(col, c, ncol), rhs = dot(x, back, nx);
  cr_assert(fabs(lhs - rhs) <= 1e-5 * (fabs(lhs) + 1.0), "%.9g != %.9g", lhs, rhs);
  free(x), free(c), free(col), free(back);
}
