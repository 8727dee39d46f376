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
 *   exp_s            one libm exp in double, as the loss's softmax calls it
 *                    per logit (twice) and Softmax's float loop per element
 *   tanh_s           one element of the element-wise loops' vectorised tanh
 *                    (apk_tanhf, which GELU's tanh form and Tanh call)
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
 *   mem_bytes        physical memory over the processors online (devices
 *                    that are threads of one host share it)
 * The compute, memory and transcendental figures are each the fastest of
 * several samples timed by the thread's CPU time (other processes on the
 * cores only ever slow a sample down, through the caches and memory they
 * share), the GEMM rate the median over its shapes of each shape's fastest;
 * the transport's figures are medians of wall times. The spread of the
 * samples is written beside each figure as a comment. The file is written to a temporary
 * name and renamed into place, so a failed run leaves nothing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accpar_rt.h"

enum { SAMPLES = 7, MAX_SAMPLES = 16 };

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

/* Rate of C = A B for one shape, FLOP/s per sample. */
static int gemm_rate(const aprt_calibrate_kernels *k, int m, int n, int kk, double quantum_s,
                     double *rate) {
  float *a = malloc((size_t)m * kk * sizeof *a), *b = malloc((size_t)kk * n * sizeof *b);
  float *c = malloc((size_t)m * n * sizeof *c);
  float *work = malloc(k->sgemm_work_floats(m, n, kk) * sizeof *work + 64);
  int ok = a && b && c && work;
  if (ok) {
    for (size_t i = 0; i < (size_t)m * kk; i++)
      a[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)kk * n; i++)
      b[i] = (float)(i % 7) * 0.02f;
    k->sgemm(0, 0, m, n, kk, 1.0f, a, kk, b, n, 0.0f, c, n, work); /* warm-up */
    double flop = 2.0 * m * n * kk;
    for (int s = 0; s < SAMPLES; s++) {
      int reps = 0;
      double t0 = cpu_s(), t;
      do {
        k->sgemm(0, 0, m, n, kk, 1.0f, a, kk, b, n, 0.0f, c, n, work);
        reps++;
      } while ((t = cpu_s() - t0) < quantum_s);
      rate[s] = flop * reps / t;
    }
  }
  free(a);
  free(b);
  free(c);
  free(work);
  return ok;
}

/* Copy bandwidth (read + write) of a 64 MiB buffer, bytes/s per sample. */
static int copy_rate(double quantum_s, double *rate) {
  size_t bytes = (size_t)64 << 20;
  unsigned char *src = malloc(bytes), *dst = malloc(bytes);
  int ok = src && dst;
  if (ok) {
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    for (int s = 0; s < SAMPLES; s++) {
      int reps = 0;
      double t0 = cpu_s(), t;
      do {
        memcpy(dst, src, bytes);
        __asm__ volatile("" : : "r"(dst) : "memory");
        reps++;
      } while ((t = cpu_s() - t0) < quantum_s);
      rate[s] = 2.0 * (double)bytes * reps / t;
    }
  }
  free(src);
  free(dst);
  return ok;
}

/* ---- transcendental functions ---- */

enum { TRANSCENDENTAL_N = 4096 }; /* floats: in L1, so only the function counts */

/* Seconds per element of libm's exp in double over logits minus their
 * maximum, as the generated loss computes it, per sample. */
static void exp_time(double quantum_s, double *per) {
  static float x[TRANSCENDENTAL_N];
  for (int i = 0; i < TRANSCENDENTAL_N; i++)
    x[i] = -8.0f * (float)i / TRANSCENDENTAL_N;
  for (int s = 0; s < SAMPLES; s++) {
    long reps = 0;
    double sum = 0, t0 = cpu_s(), t;
    do {
      for (int i = 0; i < TRANSCENDENTAL_N; i++)
        sum += exp((double)x[i]);
      __asm__ volatile("" : : "r"(&sum) : "memory");
      reps++;
    } while ((t = cpu_s() - t0) < quantum_s);
    per[s] = t / ((double)reps * TRANSCENDENTAL_N);
  }
}

/* The same for the kernels' tanh loop. */
static void tanh_time(const aprt_calibrate_kernels *k, double quantum_s, double *per) {
  static float x[TRANSCENDENTAL_N], y[TRANSCENDENTAL_N];
  for (int i = 0; i < TRANSCENDENTAL_N; i++)
    x[i] = 8.0f * (float)i / TRANSCENDENTAL_N - 4.0f;
  for (int s = 0; s < SAMPLES; s++) {
    long reps = 0;
    double t0 = cpu_s(), t;
    do {
      k->tanh_n(y, x, TRANSCENDENTAL_N);
      __asm__ volatile("" : : "r"(y) : "memory");
      reps++;
    } while ((t = cpu_s() - t0) < quantum_s);
    per[s] = t / ((double)reps * TRANSCENDENTAL_N);
  }
}

/* ---- the convolutions' lowering ---- */

/* Seconds per row of apk_im2col's column matrix of one image, channels x
 * size x size under a 3x3 kernel at stride and pad 1, per sample. */
static int lowering_time(const aprt_calibrate_kernels *k, int channels, int size, int stride,
                         double quantum_s, double *per) {
  int out = (size + 2 - 3) / stride + 1;
  size_t rows = (size_t)channels * 9 * (size_t)out;
  float *x = calloc((size_t)channels * size * size, sizeof *x);
  float *col = malloc(rows * (size_t)out * sizeof *col);
  int ok = x && col;
  if (ok) {
    k->im2col(channels, size, 3, stride, 1, x, col); /* warm-up */
    for (int s = 0; s < SAMPLES; s++) {
      long reps = 0;
      double t0 = cpu_s(), t;
      do {
        k->im2col(channels, size, 3, stride, 1, x, col);
        __asm__ volatile("" : : "r"(col) : "memory");
        reps++;
      } while ((t = cpu_s() - t0) < quantum_s);
      per[s] = t / ((double)reps * (double)rows);
    }
  }
  free(x);
  free(col);
  return ok;
}

/* FLOP/s of the one-input-channel convolution's forward and backward
 * weights (2 x 2 m OH OW k k per image), per sample: 8 MNIST-sized images,
 * 5x5, 8 output channels. */
static int direct_rate(const aprt_calibrate_kernels *k, double quantum_s, double *rate) {
  enum { BATCH = 8, SIZE = 28, KERNEL = 5, M = 8, OUT = SIZE - KERNEL + 1 };
  float *x = malloc((size_t)BATCH * SIZE * SIZE * sizeof *x);
  float *w = malloc((size_t)M * KERNEL * KERNEL * sizeof *w);
  float *y = malloc((size_t)BATCH * M * OUT * OUT * sizeof *y);
  float *dw = malloc((size_t)M * KERNEL * KERNEL * sizeof *dw);
  float *work = malloc(k->conv1_work_floats(BATCH, SIZE, KERNEL, M) * sizeof *work + 64);
  int ok = x && w && y && dw && work;
  if (ok) {
    for (int i = 0; i < BATCH * SIZE * SIZE; i++)
      x[i] = (float)(i % 11) * 0.01f;
    for (int i = 0; i < M * KERNEL * KERNEL; i++)
      w[i] = (float)(i % 5) * 0.02f;
    k->conv1(BATCH, SIZE, KERNEL, M, x, w, y, dw, work); /* warm-up */
    double flop = 2.0 * 2.0 * BATCH * M * OUT * OUT * KERNEL * KERNEL;
    for (int s = 0; s < SAMPLES; s++) {
      long reps = 0;
      double t0 = cpu_s(), t;
      do {
        k->conv1(BATCH, SIZE, KERNEL, M, x, w, y, dw, work);
        reps++;
      } while ((t = cpu_s() - t0) < quantum_s);
      rate[s] = flop * (double)reps / t;
    }
  }
  free(x);
  free(w);
  free(y);
  free(dw);
  free(work);
  return ok;
}

/* ---- a GEMM's packing ---- */

/* Seconds per float of packing op(B), k x n, per sample: a 576 x 240
 * operand (a 3x3 convolution's 64 channels by 240 outputs, whole register
 * panels on every ISA) of 540 KiB, which stays in the caches as a layer's
 * weight does between its uses. Its row stride of 576 floats spreads a
 * transposed pack's read streams over the cache sets; strides of a multiple
 * of 256 floats make them collide (docs/partition.md, "Approximations, on
 * purpose"). */
static int pack_time(const aprt_calibrate_kernels *k, int trans_b, double quantum_s,
                     double *per) {
  enum { K = 576, N = 240 };
  float *b = malloc((size_t)K * N * sizeof *b);
  float *dst = malloc(k->packed_b_floats(K, N) * sizeof *dst);
  int ok = b && dst;
  if (ok) {
    for (size_t i = 0; i < (size_t)K * N; i++)
      b[i] = (float)(i % 17) * 0.01f;
    int ldb = trans_b ? K : N;
    k->pack_b(trans_b, K, N, b, ldb, dst); /* warm-up */
    for (int s = 0; s < SAMPLES; s++) {
      long reps = 0;
      double t0 = cpu_s(), t;
      do {
        k->pack_b(trans_b, K, N, b, ldb, dst);
        __asm__ volatile("" : : "r"(dst) : "memory");
        reps++;
      } while ((t = cpu_s() - t0) < quantum_s);
      per[s] = t / ((double)reps * K * N);
    }
  }
  free(b);
  free(dst);
  return ok;
}

/* ---- the threads transport ---- */

typedef struct pingpong {
  size_t bytes;
  int trips;
  unsigned char *buf[2];
  double one_way_s[MAX_SAMPLES]; /* rank 0's, per sample */
} pingpong;

static int pingpong_rank(aprt_comm *c, void *arg) {
  pingpong *pp = arg;
  int me = aprt_rank(c), peer = 1 - me;
  aprt_status s = APRT_OK;
  for (int smp = -1; smp < SAMPLES && !s; smp++) { /* sample -1 warms up */
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

/* One-way time of a message of `bytes`, per sample. */
static int one_way(size_t bytes, int trips, double *t, char *err, size_t err_len) {
  pingpong pp = {.bytes = bytes, .trips = trips};
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
  if (ok)
    memcpy(t, pp.one_way_s, SAMPLES * sizeof *t);
  free(pp.buf[0]);
  free(pp.buf[1]);
  return ok;
}

/* ---- the device file ---- */

static int write_file(const char *path, const char *name, figure flops, figure bw,
                      double mem_bytes, figure link_bw, figure latency, figure exp_t,
                      figure tanh_t, figure row, figure flt, figure gather, figure direct,
                      figure pack, figure pack_t, char *err, size_t err_len) {
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
          "# timed by CPU time; the transport's, their median; spread = (largest -\n"
          "# smallest) / figure). One device is one thread.\n"
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
          "# libm exp in double, per call (the loss, Softmax); spread %.0f%%\n"
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
          "pack_transposed_s = %.4g\n",
          SAMPLES, name, 100 * flops.spread, flops.value, 100 * bw.spread, bw.value,
          mem_bytes, 100 * link_bw.spread, link_bw.value, 100 * latency.spread,
          latency.value, 100 * exp_t.spread, exp_t.value, 100 * tanh_t.spread,
          tanh_t.value, 100 * row.spread, row.value, 100 * flt.spread, flt.value,
          100 * gather.spread, gather.value, 100 * direct.spread, direct.value,
          100 * pack.spread, pack.value, 100 * pack_t.spread, pack_t.value);
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
  /* Layer shapes: a square product, a convolution's (output channels x
   * output pixels x C kh kw), a fully connected layer's at batch 64. */
  static const int shapes[][3] = {{512, 512, 512}, {128, 3136, 576}, {64, 1024, 1024}};
  enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };
  double rates[N_SHAPES * SAMPLES], samples[SAMPLES];
  for (int s = 0; s < N_SHAPES; s++)
    if (!gemm_rate(k, shapes[s][0], shapes[s][1], shapes[s][2], quantum_s,
                   rates + s * SAMPLES)) {
      fprintf(stderr, "calibrate: out of memory\n");
      return 1;
    }
  /* The median over the shapes of each one's fastest: no one shape decides. */
  double best[N_SHAPES];
  for (int s = 0; s < N_SHAPES; s++)
    best[s] = fastest(rates + s * SAMPLES, SAMPLES, 1).value;
  figure flops = summarise(rates, N_SHAPES * SAMPLES);
  flops.spread *= flops.value;
  flops.value = summarise(best, N_SHAPES).value;
  flops.spread /= flops.value;
  if (!copy_rate(quantum_s, samples)) {
    fprintf(stderr, "calibrate: out of memory\n");
    return 1;
  }
  figure bw = fastest(samples, SAMPLES, 1);
  exp_time(quantum_s, samples);
  figure exp_t = fastest(samples, SAMPLES, 0);
  tanh_time(k, quantum_s, samples);
  figure tanh_t = fastest(samples, SAMPLES, 0);
  /* The lowering: per row of 8 floats (short) and of 64 (long) at stride 1,
   * and of 16 gathered at stride 2; a row's cost and a float's follow from
   * the first two, a gathered float's from the third less a row's cost. */
  double short_rows[SAMPLES], long_rows[SAMPLES], gather_rows[SAMPLES];
  if (!lowering_time(k, 16, 8, 1, quantum_s, short_rows) ||
      !lowering_time(k, 4, 64, 1, quantum_s, long_rows) ||
      !lowering_time(k, 16, 32, 2, quantum_s, gather_rows) || !direct_rate(k, quantum_s, samples)) {
    fprintf(stderr, "calibrate: out of memory\n");
    return 1;
  }
  figure direct = fastest(samples, SAMPLES, 1);
  figure t8 = fastest(short_rows, SAMPLES, 0), t64 = fastest(long_rows, SAMPLES, 0);
  figure t16 = fastest(gather_rows, SAMPLES, 0);
  /* Noise could make a figure 0 or less, which a device file reads as absent. */
  figure flt = {fmax((t64.value - t8.value) / (64 - 8), 1e-13), t64.spread};
  figure row = {fmax(t8.value - 8 * flt.value, 1e-12), t8.spread};
  figure gather = {fmax((t16.value - row.value) / 16, flt.value), t16.spread};
  double packs[SAMPLES], packs_t[SAMPLES];
  if (!pack_time(k, 0, quantum_s, packs) || !pack_time(k, 1, quantum_s, packs_t)) {
    fprintf(stderr, "calibrate: out of memory\n");
    return 1;
  }
  figure pack = fastest(packs, SAMPLES, 0), pack_t = fastest(packs_t, SAMPLES, 0);
  double small[SAMPLES], large[SAMPLES];
  if (!one_way(8, quantum_s >= 0.1 ? 2000 : 200, small, err, sizeof err) ||
      !one_way((size_t)16 << 20, quantum_s >= 0.1 ? 8 : 2, large, err, sizeof err)) {
    fprintf(stderr, "calibrate: %s\n", err);
    return 1;
  }
  figure latency = summarise(small, SAMPLES);
  double link[SAMPLES];
  for (int s = 0; s < SAMPLES; s++) {
    double t = large[s] - latency.value;
    link[s] = (double)((size_t)16 << 20) / (t > 0 ? t : large[s]);
  }
  figure link_bw = summarise(link, SAMPLES);
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  long procs = sysconf(_SC_NPROCESSORS_ONLN);
  double mem_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : 4294967296.0;
  mem_bytes /= procs > 0 ? (double)procs : 1.0;
  if (!write_file(out, name, flops, bw, mem_bytes, link_bw, latency, exp_t, tanh_t, row, flt,
                  gather, direct, pack, pack_t, err, sizeof err)) {
    fprintf(stderr, "calibrate: %s\n", err);
    return 1;
  }
  printf("peak_flops %.4g FLOP/s (spread %.0f%%), mem_bw %.4g B/s (%.0f%%), "
         "link_bw %.4g B/s (%.0f%%), latency %.3g s (%.0f%%), exp %.3g s (%.0f%%), "
         "tanh %.3g s (%.0f%%), lowering %.3g s/row (%.0f%%) %.3g s/float (%.0f%%) "
         "%.3g s/gathered float (%.0f%%), direct %.4g FLOP/s (%.0f%%), "
         "packing %.3g s/float (%.0f%%) %.3g s/transposed float (%.0f%%)\n",
         flops.value, 100 * flops.spread, bw.value, 100 * bw.spread, link_bw.value,
         100 * link_bw.spread, latency.value, 100 * latency.spread, exp_t.value,
         100 * exp_t.spread, tanh_t.value, 100 * tanh_t.spread, row.value, 100 * row.spread,
         flt.value, 100 * flt.spread, gather.value, 100 * gather.spread, direct.value,
         100 * direct.spread, pack.value, 100 * pack.spread, pack_t.value, 100 * pack_t.spread);
  return 0;
}
