/* This machine as a device file (DESIGN.md: `accparc calibrate -o HOST.dev`).
 *
 * accparc builds a small program the way it builds generated programs (the
 * same C compiler and flags, the kernels of codegen/kernels, this runtime)
 * whose main calls aprt_calibrate_main, so every figure is what a generated
 * program gets on this machine:
 *   peak_flops       the median over a few layer shapes of apk_sgemm's rate
 *                    (2 m n k FLOP per product, the cost model's count), one
 *                    thread: one device
 *   mem_bw_bytes_s   memcpy of a buffer larger than the caches, bytes read
 *                    plus bytes written per second (the cost model's traffic
 *                    counts both)
 *   link_bw_bytes_s  the threads transport: one-way bytes per second of a
 *                    large message, ping-pong between two devices, its
 *                    per-message cost taken out
 *   link_latency_s   half the round trip of an 8-byte message
 *   exp_s            one element of the loss's softmax over a row: the
 *                    row's maximum, the vectorised exp in double (apk_exp)
 *                    kept as float, the sum; the cost model prices Softmax
 *                    with it too
 *   tanh_s           one element of the element-wise loops' vectorised tanh
 *                    (apk_tanhf, which GELU's tanh form and Tanh call; the
 *                    cost model prices Sigmoid's and Exp's apk_expf with it)
 *   lower_row_s      the convolutions' lowering (apk_im2col, one image's
 *   lower_float_s    column matrix, which stays in the caches): its time per
 *                    row (one output row of one tap) and per float, from
 *                    rows of 8 and of 64 contiguous floats
 *   lower_gather_s   per float of rows gathered at stride 2, their row cost
 *                    taken out
 *   direct_flops     the one-input-channel convolution's forward and
 *                    backward-weights kernels (direct loops), FLOP/s
 *   pack_float_s     a GEMM's packing of its B operand (apk_pack_b_all),
 *   pack_transposed_s per float, from contiguous rows and from a transposed
 *                    operand: a layer's weight, held in the caches
 *   wino_block_s     the F(2x2, 3x3) Winograd convolution's forward kernel
 *   wino_pair_s      beyond its products at peak_flops: per block of tiles
 *   wino_tile_s      (its 16 GEMMs), per block and pair of input and output
 *                    channels (each GEMM reads the whole transformed weight)
 *                    and per 4x4 tile and channel transformed, fitted to
 *                    three shapes where each weighs most
 *   mem_bytes        physical memory over the processors online (devices
 *                    that are threads of one host share it)
 * Every figure is the fastest of several samples (other processes on the
 * cores only ever slow a sample down), the GEMM rate the median over its
 * shapes of each shape's fastest. The compute, memory and transcendental
 * samples are timed by the thread's CPU time, the transport's by wall time.
 * The samples are taken in rounds, one of every figure per round, so that
 * a busy spell of another process slows one sample of many figures, not
 * every sample of one. The spread of the samples is written beside each
 * figure as a comment. The file is written to a temporary name and renamed
 * into place, so a failed run leaves nothing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accpar_rt.h"

enum { SAMPLES = 7 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The calling thread's CPU time: a device is one thread, and its compute is
 * what the cost model prices; other processes sharing the cores then do not
 * count (on a quiet machine the two clocks agree). The transport's figures
 * keep wall time, since waiting is what they measure. */
static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A figure: its value and the relative spread of its samples. */
typedef struct figure {
  double value, spread; /* the figure; (largest - smallest) / value */
} figure;

/* The median of the samples. */
static figure summarise(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  double m = v[n / 2];
  return (figure){m, m > 0 ? (v[n - 1] - v[0]) / m : 0};
}

/* The fastest sample: the largest rate, or the smallest time. */
static figure fastest(double *v, int n, int rate) {
  figure f = summarise(v, n);
  double best = rate ? v[n - 1] : v[0];
  return (figure){best, f.value > 0 ? f.spread * f.value / best : 0};
}

/* ---- compute and memory ---- */

/* Every operand the compute, memory and lowering figures run on, allocated
 * and warmed up once. The figures are sampled in rounds, one sample of each
 * per round (sample_round), so that a busy second of another process slows
 * one sample of many figures rather than every sample of one: calibrated
 * back to back on a shared host, figures sampled seven times in a row moved
 * by up to 1.6x between runs (docs/partition.md, "Calibrated in rounds"). */
enum { N_SHAPES = 3, N_LOWERINGS = 3, N_WINO = 3, TRANSCENDENTAL_N = 4096 };

typedef struct rig {
  const aprt_calibrate_kernels *k;
  double quantum_s;
  struct { int m, n, kk; float *a, *b, *c, *work; } gemm[N_SHAPES];
  unsigned char *src, *dst; /* memcpy's: COPY_BYTES each */
  struct { int channels, size, stride; size_t rows; float *x, *col; } lower[N_LOWERINGS];
  float *cx, *cw, *cy, *cdw, *cwork; /* the direct convolution's */
  float *pb, *pdst;                  /* the packing's */
  struct { float *x, *w, *y, *work; } wino[N_WINO];
  float tx[TRANSCENDENTAL_N], ty[TRANSCENDENTAL_N], ex[TRANSCENDENTAL_N];
} rig;

/* Layer shapes: a square product, a convolution's (output channels x
 * output pixels x C kh kw), a fully connected layer's at batch 64. */
static const int gemm_shapes[N_SHAPES][3] = {{512, 512, 512}, {128, 3136, 576}, {64, 1024, 1024}};
/* The lowering: rows of 8 floats (short) and of 64 (long) at stride 1, and
 * of 16 gathered at stride 2, each of one image under a 3x3 kernel at pad 1
 * (channels, size, stride). */
static const int lowerings[N_LOWERINGS][3] = {{16, 8, 1}, {4, 64, 1}, {16, 32, 2}};
#define COPY_BYTES ((size_t)64 << 20) /* larger than the caches */
/* The direct convolution: 8 MNIST-sized images, 5x5, 8 output channels. */
enum { DIRECT_BATCH = 8, DIRECT_SIZE = 28, DIRECT_K = 5, DIRECT_M = 8,
       DIRECT_OUT = DIRECT_SIZE - DIRECT_K + 1 };
/* The packing: a 576 x 240 operand (a 3x3 convolution's 64 channels by 240
 * outputs, whole register panels on every ISA) of 540 KiB, which stays in
 * the caches as a layer's weight does between its uses. Its row stride of
 * 576 floats spreads a transposed pack's read streams over the cache sets;
 * strides of a multiple of 256 floats make them collide (docs/partition.md,
 * "Approximations, on purpose"). */
enum { PACK_K = 576, PACK_N = 240 };
/* Winograd's three shapes (channels in, size, channels out; 8 images each):
 * 32 x 32 with 16 channels, 256 tiles an image whose 32 transformed
 * channels weigh most; 8 x 8 with 64, 16 tiles an image in one block that
 * reads 4096 pairs of channels of the weight; 8 x 8 with 16, where the cost
 * of a block (its 16 small GEMM calls) weighs most. */
static const int wino_shapes[N_WINO][3] = {{16, 32, 16}, {64, 8, 64}, {16, 8, 16}};
enum { WINO_BATCH = 8 };

static void rig_free(rig *r) {
  for (int s = 0; s < N_SHAPES; s++) {
    free(r->gemm[s].a);
    free(r->gemm[s].b);
    free(r->gemm[s].c);
    free(r->gemm[s].work);
  }
  free(r->src);
  free(r->dst);
  for (int i = 0; i < N_LOWERINGS; i++) {
    free(r->lower[i].x);
    free(r->lower[i].col);
  }
  free(r->cx);
  free(r->cw);
  free(r->cy);
  free(r->cdw);
  free(r->cwork);
  free(r->pb);
  free(r->pdst);
  for (int i = 0; i < N_WINO; i++) {
    free(r->wino[i].x);
    free(r->wino[i].w);
    free(r->wino[i].y);
    free(r->wino[i].work);
  }
}

/* Allocates and fills every operand and runs each kernel once; 0 when out
 * of memory (r freed). */
static int rig_init(rig *r, const aprt_calibrate_kernels *k, double quantum_s) {
  memset(r, 0, sizeof *r);
  r->k = k;
  r->quantum_s = quantum_s;
  int ok = 1;
  for (int s = 0; s < N_SHAPES && ok; s++) {
    int m = gemm_shapes[s][0], n = gemm_shapes[s][1], kk = gemm_shapes[s][2];
    r->gemm[s].m = m;
    r->gemm[s].n = n;
    r->gemm[s].kk = kk;
    float *a = r->gemm[s].a = malloc((size_t)m * kk * sizeof *a);
    float *b = r->gemm[s].b = malloc((size_t)kk * n * sizeof *b);
    float *c = r->gemm[s].c = malloc((size_t)m * n * sizeof *c);
    float *w = r->gemm[s].work = malloc(k->sgemm_work_floats(m, n, kk) * sizeof *w + 64);
    if (!(ok = a && b && c && w))
      break;
    for (size_t i = 0; i < (size_t)m * kk; i++)
      a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)kk * n; i++)
      b[i] = (float)(i % 7) * 0.02f;
    k->sgemm(0, 0, m, n, kk, 1.0f, a, kk, b, n, 0.0f, c, n, w);
  }
  if (ok && (ok = (r->src = malloc(COPY_BYTES)) && (r->dst = malloc(COPY_BYTES)))) {
    memset(r->src, 1, COPY_BYTES);
    memset(r->dst, 2, COPY_BYTES);
  }
  for (int i = 0; i < N_LOWERINGS && ok; i++) {
    int ch = lowerings[i][0], size = lowerings[i][1], stride = lowerings[i][2];
    int out = (size + 2 - 3) / stride + 1;
    r->lower[i].channels = ch;
    r->lower[i].size = size;
    r->lower[i].stride = stride;
    r->lower[i].rows = (size_t)ch * 9 * (size_t)out;
    r->lower[i].x = calloc((size_t)ch * size * size, sizeof(float));
    r->lower[i].col = malloc(r->lower[i].rows * (size_t)out * sizeof(float));
    if ((ok = r->lower[i].x && r->lower[i].col))
      k->im2col(ch, size, 3, stride, 1, r->lower[i].x, r->lower[i].col);
  }
  if (ok) {
    r->cx = malloc((size_t)DIRECT_BATCH * DIRECT_SIZE * DIRECT_SIZE * sizeof(float));
    r->cw = malloc((size_t)DIRECT_M * DIRECT_K * DIRECT_K * sizeof(float));
    r->cy = malloc((size_t)DIRECT_BATCH * DIRECT_M * DIRECT_OUT * DIRECT_OUT * sizeof(float));
    r->cdw = malloc((size_t)DIRECT_M * DIRECT_K * DIRECT_K * sizeof(float));
    r->cwork = malloc(k->conv1_work_floats(DIRECT_BATCH, DIRECT_SIZE, DIRECT_K, DIRECT_M) *
                          sizeof(float) + 64);
    ok = r->cx && r->cw && r->cy && r->cdw && r->cwork;
  }
  if (ok) {
    for (int i = 0; i < DIRECT_BATCH * DIRECT_SIZE * DIRECT_SIZE; i++)
      r->cx[i] = (float)(i % 11) * 0.01f;
    for (int i = 0; i < DIRECT_M * DIRECT_K * DIRECT_K; i++)
      r->cw[i] = (float)(i % 5) * 0.02f;
    k->conv1(DIRECT_BATCH, DIRECT_SIZE, DIRECT_K, DIRECT_M, r->cx, r->cw, r->cy, r->cdw,
             r->cwork);
    r->pb = malloc((size_t)PACK_K * PACK_N * sizeof(float));
    r->pdst = malloc(k->packed_b_floats(PACK_K, PACK_N) * sizeof(float));
    ok = r->pb && r->pdst;
  }
  if (ok) {
    for (size_t i = 0; i < (size_t)PACK_K * PACK_N; i++)
      r->pb[i] = (float)(i % 17) * 0.01f;
    k->pack_b(0, PACK_K, PACK_N, r->pb, PACK_N, r->pdst);
    k->pack_b(1, PACK_K, PACK_N, r->pb, PACK_K, r->pdst);
    for (int i = 0; i < TRANSCENDENTAL_N; i++) {
      r->ex[i] = -8.0f * (float)i / TRANSCENDENTAL_N;
      r->tx[i] = 8.0f * (float)i / TRANSCENDENTAL_N - 4.0f;
    }
  }
  for (int i = 0; i < N_WINO && ok; i++) {
    int c = wino_shapes[i][0], size = wino_shapes[i][1], m = wino_shapes[i][2];
    size_t nx = (size_t)WINO_BATCH * c * size * size, ny = (size_t)WINO_BATCH * m * size * size;
    r->wino[i].x = malloc(nx * sizeof(float));
    r->wino[i].w = malloc((size_t)m * c * 9 * sizeof(float));
    r->wino[i].y = malloc(ny * sizeof(float));
    r->wino[i].work = malloc(k->wino_work_floats(WINO_BATCH, c, size, m) * sizeof(float) + 64);
    if (!(ok = r->wino[i].x && r->wino[i].w && r->wino[i].y && r->wino[i].work))
      break;
    for (size_t j = 0; j < nx; j++)
      r->wino[i].x[j] = (float)(j % 13) * 0.01f;
    for (size_t j = 0; j < (size_t)m * c * 9; j++)
      r->wino[i].w[j] = (float)(j % 7) * 0.02f;
    k->wino(WINO_BATCH, c, size, m, r->wino[i].x, r->wino[i].w, r->wino[i].y, r->wino[i].work);
  }
  if (!ok) {
    rig_free(r);
  }
  return ok;
}

/* Runs `body` (a statement) until quantum_s of CPU time has passed; reps
 * and t are then the runs and the seconds they took. */
#define TIMED(r, reps, t, body)                                                                   \
  do {                                                                                            \
    double t0_ = cpu_s();                                                                         \
    (reps) = 0;                                                                                   \
    do {                                                                                          \
      body;                                                                                       \
      (reps)++;                                                                                   \
    } while (((t) = cpu_s() - t0_) < (r)->quantum_s);                                            \
  } while (0)

/* The rate of C = A B for gemm shape s, FLOP/s. */
static double gemm_sample(const rig *r, int s) {
  int m = r->gemm[s].m, n = r->gemm[s].n, kk = r->gemm[s].kk;
  long reps;
  double t;
  TIMED(r, reps, t,
        r->k->sgemm(0, 0, m, n, kk, 1.0f, r->gemm[s].a, kk, r->gemm[s].b, n, 0.0f,
                    r->gemm[s].c, n, r->gemm[s].work));
  return 2.0 * m * n * kk * (double)reps / t;
}

/* Copy bandwidth (read + write), bytes/s. */
static double copy_sample(const rig *r) {
  long reps;
  double t;
  TIMED(r, reps, t, {
    memcpy(r->dst, r->src, COPY_BYTES);
    __asm__ volatile("" : : "r"(r->dst) : "memory");
  });
  return 2.0 * (double)COPY_BYTES * (double)reps / t;
}

/* Seconds per element of the loss's softmax over a row of logits, as the
 * generated loss computes it (exp_n: their maximum, apk_exp in double of
 * each less it kept as float, then their sum; 4096 floats: in L1, so only
 * the arithmetic counts). */
static double exp_sample(rig *r) {
  long reps;
  double t, sum = 0;
  TIMED(r, reps, t, {
    sum += r->k->exp_n(r->ty, r->ex, TRANSCENDENTAL_N);
    __asm__ volatile("" : : "r"(&sum), "r"(r->ty) : "memory");
  });
  return t / ((double)reps * TRANSCENDENTAL_N);
}

/* The same for the kernels' tanh loop. */
static double tanh_sample(rig *r) {
  long reps;
  double t;
  TIMED(r, reps, t, {
    r->k->tanh_n(r->ty, r->tx, TRANSCENDENTAL_N);
    __asm__ volatile("" : : "r"(r->ty) : "memory");
  });
  return t / ((double)reps * TRANSCENDENTAL_N);
}

/* Seconds per row of apk_im2col's column matrix for lowering i. */
static double lowering_sample(const rig *r, int i) {
  long reps;
  double t;
  TIMED(r, reps, t, {
    r->k->im2col(r->lower[i].channels, r->lower[i].size, 3, r->lower[i].stride, 1,
                 r->lower[i].x, r->lower[i].col);
    __asm__ volatile("" : : "r"(r->lower[i].col) : "memory");
  });
  return t / ((double)reps * (double)r->lower[i].rows);
}

/* FLOP/s of the one-input-channel convolution's forward and backward
 * weights (2 x 2 m OH OW k k per image). */
static double direct_sample(const rig *r) {
  long reps;
  double t;
  TIMED(r, reps, t,
        r->k->conv1(DIRECT_BATCH, DIRECT_SIZE, DIRECT_K, DIRECT_M, r->cx, r->cw, r->cy,
                    r->cdw, r->cwork));
  return 2.0 * 2.0 * DIRECT_BATCH * DIRECT_M * DIRECT_OUT * DIRECT_OUT * DIRECT_K * DIRECT_K *
         (double)reps / t;
}

/* Seconds per float of packing op(B), from contiguous rows or transposed. */
static double pack_sample(const rig *r, int trans_b) {
  long reps;
  double t;
  TIMED(r, reps, t, {
    r->k->pack_b(trans_b, PACK_K, PACK_N, r->pb, trans_b ? PACK_K : PACK_N, r->pdst);
    __asm__ volatile("" : : "r"(r->pdst) : "memory");
  });
  return t / ((double)reps * PACK_K * PACK_N);
}

/* x solving a x = t (3 x 3, by Cramer's rule; the shapes keep it regular). */
static void solve3(double a[3][3], const double t[3], double x[3]) {
  double det = a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) -
               a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
               a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
  for (int j = 0; j < 3; j++) {
    double m[3][3];
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 3; c++)
        m[r][c] = c == j ? t[r] : a[r][c];
    x[j] = (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
            m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
            m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])) /
           det;
  }
}

/* Seconds per image of Winograd's forward kernel on shape i. */
static double wino_sample(const rig *r, int i) {
  int c = wino_shapes[i][0], size = wino_shapes[i][1], m = wino_shapes[i][2];
  long reps;
  double t;
  TIMED(r, reps, t,
        r->k->wino(WINO_BATCH, c, size, m, r->wino[i].x, r->wino[i].w, r->wino[i].y,
                   r->wino[i].work));
  return t / ((double)reps * WINO_BATCH);
}

/* Samples of one round, at index s of each figure's array. */
typedef struct samples {
  double gemm[N_SHAPES][SAMPLES], copy[SAMPLES], exp[SAMPLES], tanh[SAMPLES];
  double lower[N_LOWERINGS][SAMPLES], direct[SAMPLES], pack[2][SAMPLES];
  double wino[N_WINO][SAMPLES];
} samples;

static void sample_round(rig *r, int s, samples *out) {
  for (int i = 0; i < N_SHAPES; i++)
    out->gemm[i][s] = gemm_sample(r, i);
  out->copy[s] = copy_sample(r);
  out->exp[s] = exp_sample(r);
  out->tanh[s] = tanh_sample(r);
  for (int i = 0; i < N_LOWERINGS; i++)
    out->lower[i][s] = lowering_sample(r, i);
  out->direct[s] = direct_sample(r);
  for (int i = 0; i < 2; i++)
    out->pack[i][s] = pack_sample(r, i);
  for (int i = 0; i < N_WINO; i++)
    out->wino[i][s] = wino_sample(r, i);
}

/* ---- the threads transport ---- */

typedef struct pingpong {
  size_t bytes;
  int trips, n;
  unsigned char *buf[2];
  double *one_way_s; /* rank 0's, per sample */
} pingpong;

static int pingpong_rank(aprt_comm *c, void *arg) {
  pingpong *pp = arg;
  int me = aprt_rank(c), peer = 1 - me;
  aprt_status s = APRT_OK;
  for (int smp = -1; smp < pp->n && !s; smp++) { /* sample -1 warms up */
    s = aprt_barrier(c);
    double t0 = now_s();
    for (int r = 0; r < pp->trips && !s; r++) {
      if (me == 0) {
        s = aprt_send(c, peer, 1, pp->buf[me], pp->bytes);
        if (!s)
          s = aprt_recv(c, peer, 2, pp->buf[me], pp->bytes);
      } else {
        s = aprt_recv(c, peer, 1, pp->buf[me], pp->bytes);
        if (!s)
          s = aprt_send(c, peer, 2, pp->buf[me], pp->bytes);
      }
    }
    if (me == 0 && smp >= 0)
      pp->one_way_s[smp] = (now_s() - t0) / (2.0 * pp->trips);
  }
  return s;
}

/* One-way time of a message of `bytes`, n samples into t (after one that
 * warms up). */
static int one_way(size_t bytes, int trips, int n, double *t, char *err, size_t err_len) {
  pingpong pp = {.bytes = bytes, .trips = trips, .n = n, .one_way_s = t};
  pp.buf[0] = calloc(bytes, 1);
  pp.buf[1] = calloc(bytes, 1);
  int ok = pp.buf[0] && pp.buf[1];
  if (!ok)
    snprintf(err, err_len, "out of memory");
  if (ok) {
    aprt_run_opts opts = {APRT_THREADS, 60.0, NULL};
    aprt_error e = {{0}};
    if (aprt_run(&opts, 2, pingpong_rank, &pp, NULL, &e) != APRT_OK) {
      snprintf(err, err_len, "%.*s", (int)(err_len > 1 ? err_len - 1 : 0), e.msg);
      ok = 0;
    }
  }
  free(pp.buf[0]);
  free(pp.buf[1]);
  return ok;
}

/* ---- the device file ---- */

static int write_file(const char *path, const char *name, figure flops, figure bw,
                      double mem_bytes, figure link_bw, figure latency, figure exp_t,
                      figure tanh_t, figure row, figure flt, figure gather, figure direct,
                      figure pack, figure pack_t, figure wino_block, figure wino_pair,
                      figure wino_tile, char *err, size_t err_len) {
  size_t len = strlen(path) + 8;
  char *tmp = malloc(len);
  if (!tmp) {
    snprintf(err, err_len, "out of memory");
    return 0;
  }
  snprintf(tmp, len, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) {
    snprintf(err, err_len, "%s: cannot create: %s", path, strerror(errno));
    free(tmp);
    return 0;
  }
  fprintf(f,
          "# This machine, measured by accparc calibrate (the fastest of %d samples\n"
          "# taken in rounds, timed by CPU time, the transport's by wall time;\n"
          "# spread = (largest - smallest) / figure). One device is one thread.\n"
          "name = %s\n"
          "# apk_sgemm, 2 m n k FLOP per product; spread %.0f%%\n"
          "peak_flops = %.4g\n"
          "# memcpy of 64 MiB, bytes read + written; spread %.0f%%\n"
          "mem_bw_bytes_s = %.4g\n"
          "# physical memory over the processors online\n"
          "mem_bytes = %.4g\n"
          "# threads transport, one-way, 16 MiB messages; spread %.0f%%\n"
          "link_bw_bytes_s = %.4g\n"
          "# threads transport, half an 8-byte round trip; spread %.0f%%\n"
          "link_latency_s = %.4g\n"
          "# the loss's softmax per logit: vectorised exp in double, kept, summed; spread %.0f%%\n"
          "exp_s = %.4g\n"
          "# the kernels' vectorised tanh, per element (GELU, Tanh); spread %.0f%%\n"
          "tanh_s = %.4g\n"
          "# apk_im2col, per row of the column matrix (rows of 8 floats); spread %.0f%%\n"
          "lower_row_s = %.4g\n"
          "# apk_im2col, per float beyond the row's (rows of 64 floats); spread %.0f%%\n"
          "lower_float_s = %.4g\n"
          "# apk_im2col, per float of rows at stride 2; spread %.0f%%\n"
          "lower_gather_s = %.4g\n"
          "# one input channel's forward and backward weights, FLOP/s; spread %.0f%%\n"
          "direct_flops = %.4g\n"
          "# a GEMM's packing of B from contiguous rows, per float; spread %.0f%%\n"
          "pack_float_s = %.4g\n"
          "# a GEMM's packing of a transposed B, per float; spread %.0f%%\n"
          "pack_transposed_s = %.4g\n"
          "# Winograd F(2x2, 3x3), per block of tiles (16 GEMM calls); spread %.0f%%\n"
          "wino_block_s = %.4g\n"
          "# Winograd F(2x2, 3x3), per block and pair of channels; spread %.0f%%\n"
          "wino_pair_s = %.4g\n"
          "# Winograd F(2x2, 3x3), per 4x4 tile and channel transformed; spread %.0f%%\n"
          "wino_tile_s = %.4g\n",
          SAMPLES, name, 100 * flops.spread, flops.value, 100 * bw.spread, bw.value,
          mem_bytes, 100 * link_bw.spread, link_bw.value, 100 * latency.spread,
          latency.value, 100 * exp_t.spread, exp_t.value, 100 * tanh_t.spread,
          tanh_t.value, 100 * row.spread, row.value, 100 * flt.spread, flt.value,
          100 * gather.spread, gather.value, 100 * direct.spread, direct.value,
          100 * pack.spread, pack.value, 100 * pack_t.spread, pack_t.value,
          100 * wino_block.spread, wino_block.value, 100 * wino_pair.spread, wino_pair.value,
          100 * wino_tile.spread, wino_tile.value);
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad || rename(tmp, path) != 0) {
    snprintf(err, err_len, "%s: cannot write: %s", path, strerror(errno));
    remove(tmp);
    free(tmp);
    return 0;
  }
  free(tmp);
  return 1;
}

int aprt_calibrate_main(int argc, char **argv, const aprt_calibrate_kernels *k) {
  const char *out = NULL, *name = "host";
  double quantum_s = 0.1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--name") && i + 1 < argc)
      name = argv[++i];
    else if (!strcmp(argv[i], "--quick"))
      quantum_s = 0.01;
    else if (argv[i][0] != '-' && !out)
      out = argv[i];
    else {
      fprintf(stderr, "usage: %s OUT.dev [--name NAME] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (!out) {
    fprintf(stderr, "usage: %s OUT.dev [--name NAME] [--quick]\n", argv[0]);
    return 2;
  }
  char err[512] = "";
  static rig r;
  static samples sm;
  if (!rig_init(&r, k, quantum_s)) {
    fprintf(stderr, "calibrate: out of memory\n");
    return 1;
  }
  /* Each round also times the threads transport, a pair of threads started
   * anew: an 8-byte message's round trips, then a 16 MiB message's. Both
   * are wall times, what a waiting device spends, and the fastest sample is
   * taken as for the rest: a busy second elsewhere on the cores deschedules
   * one of the pair (the median of seven samples in a row measured up to 40
   * times the latency beside a process copying memory). */
  double small[SAMPLES], large[SAMPLES], link[SAMPLES];
  for (int s = 0; s < SAMPLES; s++) {
    sample_round(&r, s, &sm);
    if (!one_way(8, quantum_s >= 0.1 ? 2000 : 200, 1, &small[s], err, sizeof err) ||
        !one_way((size_t)16 << 20, quantum_s >= 0.1 ? 8 : 2, 1, &large[s], err, sizeof err)) {
      rig_free(&r);
      fprintf(stderr, "calibrate: %s\n", err);
      return 1;
    }
  }
  rig_free(&r);
  /* The median over the shapes of each one's fastest: no one shape decides. */
  double best[N_SHAPES];
  for (int s = 0; s < N_SHAPES; s++)
    best[s] = fastest(sm.gemm[s], SAMPLES, 1).value;
  figure flops = summarise(&sm.gemm[0][0], N_SHAPES * SAMPLES);
  flops.spread *= flops.value;
  flops.value = summarise(best, N_SHAPES).value;
  flops.spread /= flops.value;
  figure bw = fastest(sm.copy, SAMPLES, 1);
  figure exp_t = fastest(sm.exp, SAMPLES, 0);
  figure tanh_t = fastest(sm.tanh, SAMPLES, 0);
  figure direct = fastest(sm.direct, SAMPLES, 1);
  /* A lowered row's cost and a float's follow from the rows of 8 and of 64,
   * a gathered float's from the rows at stride 2 less a row's cost. */
  figure t8 = fastest(sm.lower[0], SAMPLES, 0), t64 = fastest(sm.lower[1], SAMPLES, 0);
  figure t16 = fastest(sm.lower[2], SAMPLES, 0);
  /* Noise could make a figure 0 or less, which a device file reads as absent. */
  figure flt = {fmax((t64.value - t8.value) / (64 - 8), 1e-13), t64.spread};
  figure row = {fmax(t8.value - 8 * flt.value, 1e-12), t8.spread};
  figure gather = {fmax((t16.value - row.value) / 16, flt.value), t16.spread};
  figure pack = fastest(sm.pack[0], SAMPLES, 0), pack_t = fastest(sm.pack[1], SAMPLES, 0);
  /* Winograd: an image of shape i takes, beyond its 32 tiles c m products
   * at peak_flops, blocks (block_s + c m pair_s) + tiles (c + m) tile_s;
   * the three shapes' fastest give the three. */
  figure wt[N_WINO];
  double a[N_WINO][N_WINO], tw[N_WINO], x[N_WINO];
  for (int i = 0; i < N_WINO; i++) {
    int c = wino_shapes[i][0], size = wino_shapes[i][1], m = wino_shapes[i][2];
    double tiles = (double)(size / 2) * (size / 2), blocks = r.k->wino_blocks(c, size, m);
    wt[i] = fastest(sm.wino[i], SAMPLES, 0);
    tw[i] = wt[i].value - 32 * tiles * c * m / flops.value;
    a[i][0] = blocks;
    a[i][1] = blocks * c * m;
    a[i][2] = tiles * (c + m);
  }
  solve3(a, tw, x);
  /* Noise could make a figure 0 or less, which a device file reads as absent. */
  figure wino_block = {fmax(x[0], 1e-12), wt[2].spread};
  figure wino_pair = {fmax(x[1], 1e-15), wt[1].spread};
  figure wino_tile = {fmax(x[2], 1e-13), wt[0].spread};
  figure latency = fastest(small, SAMPLES, 0);
  for (int s = 0; s < SAMPLES; s++) {
    double t = large[s] - latency.value;
    link[s] = (double)((size_t)16 << 20) / (t > 0 ? t : large[s]);
  }
  figure link_bw = fastest(link, SAMPLES, 1);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  long procs = sysconf(_SC_NPROCESSORS_ONLN);
  double mem_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 4294967296.0;
  mem_bytes /= procs > 0 ? (double)procs : 1.0;
  if (!write_file(out, name, flops, bw, mem_bytes, link_bw, latency, exp_t, tanh_t, row, flt,
                  gather, direct, pack, pack_t, wino_block, wino_pair, wino_tile, err,
                  sizeof err)) {
    fprintf(stderr, "calibrate: %s\n", err);
    return 1;
  }
  printf("peak_flops %.4g FLOP/s (spread %.0f%%), mem_bw %.4g B/s (%.0f%%), "
         "link_bw %.4g B/s (%.0f%%), latency %.3g s (%.0f%%), exp %.3g s (%.0f%%), "
         "tanh %.3g s (%.0f%%), lowering %.3g s/row (%.0f%%) %.3g s/float (%.0f%%) "
         "%.3g s/gathered float (%.0f%%), direct %.4g FLOP/s (%.0f%%), "
         "packing %.3g s/float (%.0f%%) %.3g s/transposed float (%.0f%%), "
         "winograd %.3g s/block (%.0f%%) %.3g s/block pair (%.0f%%) "
         "%.3g s/tile channel (%.0f%%)\n",
         flops.value, 100 * flops.spread, bw.value, 100 * bw.spread, link_bw.value,
         100 * link_bw.spread, latency.value, 100 * latency.spread, exp_t.value,
         100 * exp_t.spread, tanh_t.value, 100 * tanh_t.spread, row.value, 100 * row.spread,
         flt.value, 100 * flt.spread, gather.value, 100 * gather.spread, direct.value,
         100 * direct.spread, pack.value, 100 * pack.spread, pack_t.value, 100 * pack_t.spread,
         wino_block.value, 100 * wino_block.spread, wino_pair.value, 100 * wino_pair.spread,
         wino_tile.value, 100 * wino_tile.spread);
  return 0;
}
