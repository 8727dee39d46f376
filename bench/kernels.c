/* bench-kernels: speed of the generated programs' GEMM and convolution kernels
 * beside OpenBLAS, measured in the same run on the same data.
 *
 *   bench-kernels [--samples N] [--min-ms T]
 *
 * Every figure is the median of N samples (default 7); a sample repeats the
 * operation until at least T milliseconds (default 30) have passed, so short
 * operations are not timed at clock resolution. Our kernel and OpenBLAS
 * alternate sample by sample, so drift in the machine's speed (other jobs,
 * frequency changes) affects both alike. The ratio is ours / OpenBLAS on one
 * thread, the fair per-core comparison: our kernels are single-threaded because
 * the runtime already runs one thread per device. OpenBLAS on two threads is
 * printed for context only.
 */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

/* OpenBLAS extensions; declared here because only OpenBLAS's cblas.h has them. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_config(void);
char *openblas_get_corename(void);

static int samples = 7;
static int skip_gemm = 0;
static const char *only = NULL; /* --only: layers whose name contains it */
static double min_sample_s = 0.030;

static double now_s(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef void (*op_fn)(void *ctx);

/* Repetitions per sample so that one sample lasts about min_sample_s. */
static int calibrate(op_fn op, void *ctx)
{
  op(ctx); /* warm caches, page in buffers */
  int reps = 1;
  for (;;) {
    double t0 = now_s();
    for (int r = 0; r < reps; r++) op(ctx);
    double t = now_s() - t0;
    if (t >= min_sample_s || reps >= (1 << 20)) return reps;
    reps = t <= 0 ? reps * 8 : (int)(reps * (min_sample_s / t) * 1.2) + 1;
  }
}

static double sample(op_fn op, void *ctx, int reps)
{
  double t0 = now_s();
  for (int r = 0; r < reps; r++) op(ctx);
  return (now_s() - t0) / reps;
}

/* Median seconds per call of each of count operations, sampled alternately. */
static void measure(int count, op_fn *ops, void **ctxs, double *median_s)
{
  int reps[5];
  double *t = malloc(sizeof(double) * (size_t)samples * (size_t)count);
  if (!t) {
    fprintf(stderr, "bench-kernels: out of memory\n");
    exit(1);
  }
  for (int i = 0; i < count; i++) reps[i] = calibrate(ops[i], ctxs[i]);
  for (int s = 0; s < samples; s++)
    for (int i = 0; i < count; i++) t[i * samples + s] = sample(ops[i], ctxs[i], reps[i]);
  for (int i = 0; i < count; i++) {
    qsort(t + i * samples, (size_t)samples, sizeof(double), cmp_double);
    median_s[i] = t[i * samples + samples / 2];
  }
  free(t);
}

static float *alloc_floats(size_t count)
{
  float *p = malloc(sizeof(float) * (count ? count : 1));
  if (!p) {
    fprintf(stderr, "bench-kernels: out of memory (%zu floats)\n", count);
    exit(1);
  }
  return p;
}

static float *random_floats(size_t count)
{
  float *p = alloc_floats(count);
  unsigned s = 12345u;
  for (size_t i = 0; i < count; i++) {
    s = s * 1103515245u + 12345u;
    p[i] = (float)((s >> 8) & 0xffff) / 65536.0f - 0.5f;
  }
  return p;
}

/* Largest |x - y| relative to the largest |y|: a sanity check that both sides
 * computed the same thing, printed beside the speed. */
static double max_rel_diff(const float *x, const float *y, size_t count)
{
  double diff = 0.0, mag = 0.0;
  for (size_t i = 0; i < count; i++) {
    double d = fabs((double)x[i] - y[i]);
    if (d > diff) diff = d;
    if (fabs(y[i]) > mag) mag = fabs(y[i]);
  }
  return mag > 0 ? diff / mag : diff;
}

/* ---- GEMM ---- */

typedef struct gemm_case {
  const char *name;
  int trans_a, trans_b, m, n, k;
} gemm_case;

typedef struct gemm_ctx {
  gemm_case c;
  const float *a, *b;
  float *out, *work;
} gemm_ctx;

static void run_ours_gemm(void *p)
{
  gemm_ctx *g = p;
  gemm_case c = g->c;
  apk_sgemm(c.trans_a, c.trans_b, c.m, c.n, c.k, 1.0f, g->a, c.trans_a ? c.m : c.k, g->b,
            c.trans_b ? c.k : c.n, 0.0f, g->out, c.n, g->work);
}

static void run_blas_gemm(void *p)
{
  gemm_ctx *g = p;
  gemm_case c = g->c;
  cblas_sgemm(CblasRowMajor, c.trans_a ? CblasTrans : CblasNoTrans,
              c.trans_b ? CblasTrans : CblasNoTrans, c.m, c.n, c.k, 1.0f, g->a,
              c.trans_a ? c.m : c.k, g->b, c.trans_b ? c.k : c.n, 0.0f, g->out, c.n);
}

static void bench_gemm(const gemm_case *c)
{
  float *a = random_floats((size_t)c->m * c->k), *b = random_floats((size_t)c->k * c->n);
  float *ours = alloc_floats((size_t)c->m * c->n), *blas = alloc_floats((size_t)c->m * c->n);
  float *work = alloc_floats(apk_sgemm_work_floats(c->m, c->n, c->k));
  gemm_ctx mine = {*c, a, b, ours, work}, theirs = {*c, a, b, blas, NULL};
  op_fn ops[2] = {run_ours_gemm, run_blas_gemm};
  void *ctxs[2] = {&mine, &theirs};
  double t[2], t2;
  measure(2, ops, ctxs, t);
  op_fn op2 = run_blas_gemm;
  void *ctx2 = &theirs;
  openblas_set_num_threads(2);
  measure(1, &op2, &ctx2, &t2);
  openblas_set_num_threads(1);
  run_ours_gemm(&mine);
  run_blas_gemm(&theirs);
  double gflop = 2.0 * c->m * c->n * c->k * 1e-9;
  printf("| %-22s | %c%c | %5d | %5d | %5d | %7.1f | %7.1f | %5.2f | %7.1f | %.0e |\n", c->name,
         c->trans_a ? 'T' : 'N', c->trans_b ? 'T' : 'N', c->m, c->n, c->k, gflop / t[0],
         gflop / t[1], t[1] / t[0], gflop / t2,
         max_rel_diff(ours, blas, (size_t)c->m * c->n));
  fflush(stdout);
  free(a), free(b), free(ours), free(blas), free(work);
}

/* ---- convolution ---- */

typedef struct conv_case {
  const char *name;
  apk_conv2d p;
} conv_case;

typedef struct conv_ctx {
  const apk_conv2d *p;
  apk_conv_algo algo;
  const float *x, *w, *dy;
  float *y, *dx, *dw, *col, *work;
  int ohw, kg;
  int pointwise;  /* 1x1, unit strides, no pads: x is its own im2col */
} conv_ctx;

static void run_ours_fwd(void *v)
{
  conv_ctx *c = v;
  apk_conv2d_forward_algo(c->p, c->algo, c->x, c->w, NULL, c->y, c->work);
}

/* The forward from weights packed once (col: the packed weights). */
static void run_ours_fwd_packed(void *v)
{
  conv_ctx *c = v;
  apk_conv2d_forward_packed_algo(c->p, c->algo, c->x, c->col, NULL, c->y, c->work);
}

/* OpenBLAS's side lowers with apk_im2col / apk_col2im (the whole column
 * matrix, as our APK_CONV_IM2COL does) and multiplies with cblas_sgemm, per
 * image. */
static void run_blas_fwd(void *v)
{
  conv_ctx *c = v;
  const apk_conv2d *p = c->p;
  size_t xs = (size_t)p->in_channels * p->in_h * p->in_w, ys = (size_t)p->out_channels * c->ohw;
  for (int n = 0; n < p->batch; n++) {
    const float *cols = c->x + n * xs;
    if (!c->pointwise) {
      apk_im2col(p, c->x + n * xs, p->in_channels, c->col);
      cols = c->col;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p->out_channels, c->ohw, c->kg, 1.0f,
                c->w, c->kg, cols, c->ohw, 0.0f, c->y + n * ys, c->ohw);
  }
}

static void run_ours_bwd_data(void *v)
{
  conv_ctx *c = v;
  apk_conv2d_backward_data_algo(c->p, c->algo, c->dy, c->w, c->dx, c->work);
}

static void run_blas_bwd_data(void *v)
{
  conv_ctx *c = v;
  const apk_conv2d *p = c->p;
  size_t xs = (size_t)p->in_channels * p->in_h * p->in_w, ys = (size_t)p->out_channels * c->ohw;
  for (int n = 0; n < p->batch; n++) {
    float *dx = c->dx + n * xs;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c->kg, c->ohw, p->out_channels, 1.0f,
                c->w, c->kg, c->dy + n * ys, c->ohw, 0.0f, c->pointwise ? dx : c->col, c->ohw);
    if (!c->pointwise) {
      memset(dx, 0, sizeof(float) * xs);
      apk_col2im(p, c->col, p->in_channels, dx);
    }
  }
}

static void run_ours_bwd_weights(void *v)
{
  conv_ctx *c = v;
  apk_conv2d_backward_weights_algo(c->p, c->algo, c->x, c->dy, c->dw, NULL, c->work);
}

static void run_blas_bwd_weights(void *v)
{
  conv_ctx *c = v;
  const apk_conv2d *p = c->p;
  size_t xs = (size_t)p->in_channels * p->in_h * p->in_w, ys = (size_t)p->out_channels * c->ohw;
  for (int n = 0; n < p->batch; n++) {
    const float *cols = c->x + n * xs;
    if (!c->pointwise) {
      apk_im2col(p, c->x + n * xs, p->in_channels, c->col);
      cols = c->col;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->out_channels, c->kg, c->ohw, 1.0f,
                c->dy + n * ys, c->ohw, cols, c->ohw, n ? 1.0f : 0.0f, c->dw, c->kg);
  }
}

static const char *const algo_names[4] = {"im2col", "implicit", "winograd", "winograd4"};

/* One layer: every kernel with every algorithm that supports it beside
 * OpenBLAS, all sampled alternately. GFLOP/s are effective: the direct
 * convolution's 2 * M * OHW * Kg per image over the time taken, also for
 * Winograd, which multiplies less. */
static void bench_conv(const conv_case *cc)
{
  const apk_conv2d *p = &cc->p;
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int kg = p->in_channels * p->kernel_h * p->kernel_w;
  size_t nx = (size_t)p->batch * p->in_channels * p->in_h * p->in_w;
  size_t nw = (size_t)p->out_channels * kg, ny = (size_t)p->batch * p->out_channels * ohw;
  float *x = random_floats(nx), *w = random_floats(nw), *dy = random_floats(ny);
  int pointwise = p->kernel_h == 1 && p->kernel_w == 1 && p->stride_h == 1 &&
                  p->stride_w == 1 && p->pad_top == 0 && p->pad_left == 0;
  static const char *phase[3] = {"forward", "backward data", "backward weights"};
  op_fn ours_ops[3] = {run_ours_fwd, run_ours_bwd_data, run_ours_bwd_weights};
  op_fn blas_ops[3] = {run_blas_fwd, run_blas_bwd_data, run_blas_bwd_weights};
  double gflop = 2.0 * p->batch * p->out_channels * (double)ohw * kg * 1e-9;
  conv_ctx theirs = {p, APK_CONV_IM2COL, x, w, dy, alloc_floats(ny), alloc_floats(nx),
                     alloc_floats(nw), alloc_floats((size_t)kg * ohw), NULL, ohw, kg, pointwise};
  for (int i = 0; i < 3; i++) {
    apk_conv_kernel which = (apk_conv_kernel)i;
    conv_ctx mine[4];
    op_fn ops[5];
    void *ctxs[5];
    int algo_of[5], count = 0;
    for (int a = 0; a < 4; a++) {
      if (!apk_conv2d_supports(p, (apk_conv_algo)a, which)) continue;
      /* Pointwise layers skip the lowering in both GEMM algorithms alike. */
      if (pointwise && a == APK_CONV_IMPLICIT) continue;
      mine[a] = (conv_ctx){p, (apk_conv_algo)a, x, w, dy, alloc_floats(ny), alloc_floats(nx),
                           alloc_floats(nw), NULL,
                           alloc_floats(apk_conv2d_algo_work_floats(p, (apk_conv_algo)a, which)),
                           ohw, kg, pointwise};
      ops[count] = ours_ops[i];
      ctxs[count] = &mine[a];
      algo_of[count++] = a;
    }
    ops[count] = blas_ops[i];
    ctxs[count] = &theirs;
    double t[5];
    measure(count + 1, ops, ctxs, t);
    double gf[4] = {0, 0, 0, 0};
    for (int o = 0; o < count; o++) gf[algo_of[o]] = gflop / t[o];
    double blas = gflop / t[count];
    apk_conv_algo chosen = apk_conv2d_choose(p, which);
    if (pointwise && chosen == APK_CONV_IMPLICIT) chosen = APK_CONV_IM2COL;
    conv_ctx *ch = &mine[chosen];
    ours_ops[i](ch);
    blas_ops[i](&theirs);
    /* F(4x4, 3x3) is the least accurate algorithm (its transforms'
     * constants reach 8 and 1/24): its error beside the chosen one's. */
    char diff4[16] = "-";
    if (gf[APK_CONV_WINOGRAD4] > 0) {
      ours_ops[i](&mine[APK_CONV_WINOGRAD4]);
      snprintf(diff4, sizeof diff4, "%.0e", max_rel_diff(mine[APK_CONV_WINOGRAD4].y, theirs.y, ny));
    }
    double diff = i == 0   ? max_rel_diff(ch->y, theirs.y, ny)
                  : i == 1 ? max_rel_diff(ch->dx, theirs.dx, nx)
                           : max_rel_diff(ch->dw, theirs.dw, nw);
    char cells[4][16];
    for (int a = 0; a < 4; a++) {
      if (gf[a] > 0)
        snprintf(cells[a], sizeof cells[a], "%7.1f", gf[a]);
      else
        snprintf(cells[a], sizeof cells[a], "%7s", "-");
    }
    printf("| %-26s | %-16s | %7s | %7s | %7s | %9s | %7.1f | %5.2f | %-8s | %.0e | %5s |\n",
           cc->name, phase[i], cells[0], cells[1], cells[2], cells[3], blas, gf[chosen] / blas,
           algo_names[chosen], diff, diff4);
    fflush(stdout);
    for (int o = 0; o < count; o++) {
      conv_ctx *m = ctxs[o];
      free(m->y), free(m->dx), free(m->dw), free(m->work);
    }
  }
  free(x), free(w), free(dy);
  free(theirs.y), free(theirs.dx), free(theirs.dw), free(theirs.col);
}

/* The forward kernel of a layer Winograd can take, from weights packed
 * once as an inference program holds them: the implicit GEMM on packed A
 * and both Winograd tiles, sampled alternately; the chosen one is
 * apk_conv2d_choose_packed's. Error: against the direct product in double. */
static void bench_conv_packed(const conv_case *cc)
{
  const apk_conv2d *p = &cc->p;
  if (!apk_conv2d_supports(p, APK_CONV_WINOGRAD, APK_CONV_FORWARD)) return;
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int kg = p->in_channels * p->kernel_h * p->kernel_w;
  size_t nx = (size_t)p->batch * p->in_channels * p->in_h * p->in_w;
  size_t nw = (size_t)p->out_channels * kg, ny = (size_t)p->batch * p->out_channels * ohw;
  float *x = random_floats(nx), *w = random_floats(nw);
  double gflop = 2.0 * p->batch * p->out_channels * (double)ohw * kg * 1e-9;
  static const apk_conv_algo algos[3] = {APK_CONV_IMPLICIT, APK_CONV_WINOGRAD, APK_CONV_WINOGRAD4};
  conv_ctx ctx[3];
  op_fn ops[3];
  void *ctxs[3];
  for (int a = 0; a < 3; a++) {
    float *pw = alloc_floats(apk_conv2d_packed_floats_algo(p, algos[a]) + 16);
    float *pwa = (float *)(((uintptr_t)pw + 63) & ~(uintptr_t)63);
    apk_conv2d_pack_weights_algo(p, algos[a], w, pwa);
    ctx[a] = (conv_ctx){p, algos[a], x, w, NULL, alloc_floats(ny), NULL, pw, pwa,
                        alloc_floats(apk_conv2d_algo_work_floats(p, algos[a], APK_CONV_FORWARD)),
                        ohw, kg, 0};
    ops[a] = run_ours_fwd_packed;
    ctxs[a] = &ctx[a];
  }
  double t[3];
  measure(3, ops, ctxs, t);
  /* The direct product in double, for each algorithm's largest error
   * relative to the largest output. */
  double diff[3] = {0, 0, 0}, big = 0;
  int oh = apk_conv2d_out_h(p), ow = apk_conv2d_out_w(p);
  for (int a = 0; a < 3; a++) run_ours_fwd_packed(&ctx[a]);
  for (int n = 0; n < p->batch; n++)
    for (int m = 0; m < p->out_channels; m++)
      for (int i = 0; i < oh; i++)
        for (int j = 0; j < ow; j++) {
          double s = 0;
          for (int c = 0; c < p->in_channels; c++)
            for (int u = 0; u < p->kernel_h; u++)
              for (int v = 0; v < p->kernel_w; v++) {
                int ih = i * p->stride_h - p->pad_top + u, iw = j * p->stride_w - p->pad_left + v;
                if (ih < 0 || ih >= p->in_h || iw < 0 || iw >= p->in_w) continue;
                s += (double)x[(((size_t)n * p->in_channels + c) * p->in_h + ih) * p->in_w + iw] *
                     w[(((size_t)m * p->in_channels + c) * p->kernel_h + u) * p->kernel_w + v];
              }
          size_t at = (((size_t)n * p->out_channels + m) * oh + i) * ow + j;
          big = fmax(big, fabs(s));
          for (int a = 0; a < 3; a++) diff[a] = fmax(diff[a], fabs(ctx[a].y[at] - s));
        }
  apk_conv_algo chosen = apk_conv2d_choose_packed(p);
  printf("| %-26s | %7.1f | %8.1f | %9.1f | %-9s | %.0e | %.0e |\n", cc->name, gflop / t[0],
         gflop / t[1], gflop / t[2], algo_names[chosen], diff[1] / big, diff[2] / big);
  fflush(stdout);
  for (int a = 0; a < 3; a++) free(ctx[a].y), free(ctx[a].dw), free(ctx[a].work);
  free(x), free(w);
}

/* C, H (= W), M, kernel, stride, pad at a batch */
#define CONV_AT(batch, c, h, m, k, s, pad)                                                     \
  { batch, c, h, h, m, k, k, s, s, pad, pad, pad, pad, 1, 1, 1 }
#define RESNET_CONV(c, h, m, k, s, pad) CONV_AT(1, c, h, m, k, s, pad)

/* Every distinct convolution shape of ResNet-50 v1.5 (torchvision: the
 * stride of a downsampling block is on its 3x3) and of VGG-11, batch 1;
 * then the convolutions of the zoo's lenet5 and resnet_block at the batch
 * of their training runs (32), whose lowering dominates their steps. */
static const conv_case model_convs[] = {
    {"r50 conv1 7x7/2 3->64 @224", RESNET_CONV(3, 224, 64, 7, 2, 3)},
    {"r50 1x1 64->64 @56", RESNET_CONV(64, 56, 64, 1, 1, 0)},
    {"r50 3x3 64->64 @56", RESNET_CONV(64, 56, 64, 3, 1, 1)},
    {"r50 1x1 64->256 @56", RESNET_CONV(64, 56, 256, 1, 1, 0)},
    {"r50 1x1 256->64 @56", RESNET_CONV(256, 56, 64, 1, 1, 0)},
    {"r50 1x1 256->128 @56", RESNET_CONV(256, 56, 128, 1, 1, 0)},
    {"r50 3x3/2 128->128 @56", RESNET_CONV(128, 56, 128, 3, 2, 1)},
    {"r50 1x1/2 256->512 @56", RESNET_CONV(256, 56, 512, 1, 2, 0)},
    {"r50 3x3 128->128 @28", RESNET_CONV(128, 28, 128, 3, 1, 1)},
    {"r50 1x1 128->512 @28", RESNET_CONV(128, 28, 512, 1, 1, 0)},
    {"r50 3x3/2 256->256 @28", RESNET_CONV(256, 28, 256, 3, 2, 1)},
    {"r50 3x3 256->256 @14", RESNET_CONV(256, 14, 256, 3, 1, 1)},
    {"r50 1x1 1024->256 @14", RESNET_CONV(1024, 14, 256, 1, 1, 0)},
    {"r50 3x3/2 512->512 @14", RESNET_CONV(512, 14, 512, 3, 2, 1)},
    {"r50 3x3 512->512 @7", RESNET_CONV(512, 7, 512, 3, 1, 1)},
    {"r50 1x1 2048->512 @7", RESNET_CONV(2048, 7, 512, 1, 1, 0)},
    {"vgg 3x3 3->64 @224", RESNET_CONV(3, 224, 64, 3, 1, 1)},
    {"vgg 3x3 64->128 @112", RESNET_CONV(64, 112, 128, 3, 1, 1)},
    {"vgg 3x3 128->256 @56", RESNET_CONV(128, 56, 256, 3, 1, 1)},
    {"vgg 3x3 256->256 @56", RESNET_CONV(256, 56, 256, 3, 1, 1)},
    {"vgg 3x3 256->512 @28", RESNET_CONV(256, 28, 512, 3, 1, 1)},
    {"vgg 3x3 512->512 @28", RESNET_CONV(512, 28, 512, 3, 1, 1)},
    {"vgg 3x3 512->512 @14", RESNET_CONV(512, 14, 512, 3, 1, 1)},
    {"r50 3x3 64->64 @56 batch 8", CONV_AT(8, 64, 56, 64, 3, 1, 1)},
    {"r50 3x3 512->512 @7 batch 8", CONV_AT(8, 512, 7, 512, 3, 1, 1)},
    {"lenet5 5x5 1->6 @32 b32", CONV_AT(32, 1, 32, 6, 5, 1, 0)},
    {"lenet5 5x5 6->16 @14 b32", CONV_AT(32, 6, 14, 16, 5, 1, 0)},
    {"rblock 3x3/2 8->16 @16 b32", CONV_AT(32, 8, 16, 16, 3, 2, 1)},
    {"rblock 3x3 16->16 @8 b32", CONV_AT(32, 16, 8, 16, 3, 1, 1)},
    {"rblock 1x1/2 8->16 @16 b32", CONV_AT(32, 8, 16, 16, 1, 2, 0)},
};

static void usage(void)
{
  fprintf(stderr, "usage: bench-kernels [--samples N] [--min-ms T] [--conv-only] [--only LAYER]\n");
  exit(2);
}

int main(int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--samples") == 0)
      samples = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--min-ms") == 0)
      min_sample_s = atof(argv[++i]) * 1e-3;
    else if (strcmp(argv[i], "--conv-only") == 0)
      skip_gemm = 1;
    else if (i + 1 < argc && strcmp(argv[i], "--only") == 0)
      only = argv[++i], skip_gemm = 1;
    else
      usage();
  }
  if (samples < 1 || min_sample_s <= 0) usage();

  openblas_set_num_threads(1);
  apk_gemm_config cfg = apk_gemm_get_config();
  printf("kernels: %s, %d floats per vector, register tile %dx%d, blocks mc=%d kc=%d nc=%d\n",
         cfg.isa, cfg.vector_floats, cfg.mr, cfg.nr, cfg.mc, cfg.kc, cfg.nc);
  printf("OpenBLAS: %s (core %s)\n", openblas_get_config(), openblas_get_corename());
  printf("median of %d samples of >= %.0f ms each; GFLOP/s; ratio = ours / OpenBLAS 1 thread\n\n",
         samples, min_sample_s * 1e3);

  /* Square sizes in the three orientations training uses: forward (NN),
   * error E * W^T (NT) and gradient F^T * E (TN); then the forward GEMMs of
   * ResNet-50's convolutions lowered by im2col (m = out channels,
   * n = output pixels, k = in channels * kernel area). */
  static const gemm_case gemms[] = {
      {"square 256", 0, 0, 256, 256, 256},
      {"square 512", 0, 0, 512, 512, 512},
      {"square 1024", 0, 0, 1024, 1024, 1024},
      {"square 1024", 0, 1, 1024, 1024, 1024},
      {"square 1024", 1, 0, 1024, 1024, 1024},
      {"conv1 7x7/2 3->64", 0, 0, 64, 12544, 147},
      {"res2 1x1 64->256", 0, 0, 256, 3136, 64},
      {"res2 3x3 64->64", 0, 0, 64, 3136, 576},
      {"res3 1x1/2 256->512", 0, 0, 512, 784, 256},
      {"res3 3x3 128->128", 0, 0, 128, 784, 1152},
      {"res4 3x3 256->256", 0, 0, 256, 196, 2304},
      {"res5 3x3 512->512", 0, 0, 512, 49, 4608},
      /* Fully connected layers (ONNX Gemm, transB = 1) at batch 1 and 8:
       * few rows of C, B read once. */
      {"vgg fc6 batch 1", 0, 1, 1, 4096, 25088},
      {"vgg fc6 batch 8", 0, 1, 8, 4096, 25088},
      {"vgg fc7 batch 1", 0, 1, 1, 4096, 4096},
      {"r50 fc batch 1", 0, 1, 1, 1000, 2048},
      {"r50 fc batch 8", 0, 1, 8, 1000, 2048},
      {"r50 fc batch 1, B as KxN", 0, 0, 1, 1000, 2048},
      {"fc batch 4 grad input", 0, 0, 4, 4096, 4096},
  };
  printf("GEMM\n\n");
  printf("| shape                  | op |     m |     n |     k |    ours | OpenBLAS | ratio | "
         "OpenBLAS 2 thr | max rel diff |\n");
  printf("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (size_t i = 0; !skip_gemm && i < sizeof gemms / sizeof gemms[0]; i++) bench_gemm(&gemms[i]);

  printf("\nConvolution: ResNet-50 and VGG-11 layers (batch 1 unless named), effective "
         "GFLOP/s (the direct convolution's FLOPs over the time) of each algorithm; OpenBLAS: "
         "the whole im2col/col2im with cblas_sgemm; ratio = chosen / OpenBLAS\n\n");
  printf("| layer                      | kernel           |  im2col | implicit | winograd | "
         "winograd4 | OpenBLAS | ratio | chosen | max rel diff | winograd4's |\n");
  printf("|---|---|--:|--:|--:|--:|--:|--:|---|--:|--:|\n");
  for (size_t i = 0; i < sizeof model_convs / sizeof model_convs[0]; i++)
    if (!only || strstr(model_convs[i].name, only)) bench_conv(&model_convs[i]);

  printf("\nForward from weights packed once (inference programs), layers Winograd can take: "
         "effective GFLOP/s; chosen: apk_conv2d_choose_packed; error: the largest difference "
         "from the direct product in double over the largest output\n\n");
  printf("| layer                      | implicit | winograd | winograd4 | chosen    | "
         "winograd error | winograd4 error |\n");
  printf("|---|--:|--:|--:|---|--:|--:|\n");
  for (size_t i = 0; i < sizeof model_convs / sizeof model_convs[0]; i++)
    if (!only || strstr(model_convs[i].name, only)) bench_conv_packed(&model_convs[i]);
  return 0;
}
