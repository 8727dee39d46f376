/* bench-comm: what the runtime's collectives and box exchange cost on the
 * threads transport (devices that are threads of one process), against the
 * floor measured in the same run: one memcpy of the same payload on one
 * thread. A piece handed over with one copy costs about one memcpy's worth;
 * pack, send, receive and unpack cost four. The first row, a ping-pong of
 * one float between ranks 0 and 1 (half a round trip), is what one hand-over
 * costs when no data is worth copying: a rank's wake-up.
 *
 *   bench-comm [--samples N] [--ranks R]
 *
 * Every figure is the median of N samples (default 9); a sample runs the
 * operation 20 times between barriers on every rank and takes rank 0's wall
 * time per operation. Run by hand, never by ctest. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accpar_rt.h"

enum { REPS = 20, MAX_RANKS = 8 };

static int samples = 9;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef enum op { OP_ALLREDUCE, OP_ALLGATHER, OP_EXCHANGE_ROWS, OP_EXCHANGE_COLUMNS, OP_PINGPONG } op;
static const char *const op_names[] = {"all-reduce", "all-gather", "exchange, row blocks",
                                       "exchange, column blocks", "ping-pong, one way"};

typedef struct job {
  op what;
  int64_t floats;          /* per rank: the buffer's size */
  float *buf[MAX_RANKS], *out[MAX_RANKS];
  double time_s[64];       /* rank 0, per sample */
} job;

/* An exchange where every rank sends every other rank one block of its
 * rows x cols buffer: whole rows (contiguous) or whole columns (strided),
 * and receives the same blocks into the same places of its output. */
static aprt_status exchange(aprt_comm *c, job *j, int columns) {
  int n = aprt_size(c), me = aprt_rank(c);
  int64_t rows = j->floats >= 512 * 16 ? 512 : 16, cols = j->floats / rows, shape[2] = {rows, cols};
  aprt_xfer sends[MAX_RANKS], recvs[MAX_RANKS];
  int k = 0;
  for (int p = 0; p < n; p++) {
    if (p == me)
      continue;
    int64_t start[2] = {0, 0}, size[2] = {rows, cols};
    int d = columns ? 1 : 0;
    size[d] = shape[d] / n;
    start[d] = p * size[d];
    sends[k] = (aprt_xfer){p, aprt_box_dense(2, shape, start, size)};
    start[d] = me * size[d];
    recvs[k] = (aprt_xfer){p, aprt_box_dense(2, shape, start, size)};
    k++;
  }
  return aprt_exchange(c, j->buf[me], k, sends, j->out[me], k, recvs, sizeof(float), 7);
}

static int rank_fn(aprt_comm *c, void *arg) {
  job *j = arg;
  int n = aprt_size(c), me = aprt_rank(c);
  int group[MAX_RANKS];
  int64_t counts[MAX_RANKS];
  for (int p = 0; p < n; p++)
    group[p] = p, counts[p] = aprt_even_share(j->floats, n, p);
  aprt_status s = APRT_OK;
  for (int smp = -1; smp < samples && !s; smp++) { /* sample -1 warms up */
    s = aprt_barrier(c);
    double t0 = now_s();
    for (int r = 0; r < REPS && !s; r++) {
      switch (j->what) {
      case OP_ALLREDUCE:
        s = aprt_allreduce_sum(c, group, n, j->buf[me], j->floats, NULL, 1);
        break;
      case OP_ALLGATHER:
        s = aprt_allgather(c, group, n, j->buf[me], counts, sizeof(float), 2);
        break;
      case OP_EXCHANGE_ROWS:
      case OP_EXCHANGE_COLUMNS:
        s = exchange(c, j, j->what == OP_EXCHANGE_COLUMNS);
        break;
      case OP_PINGPONG:
        if (me == 0) {
          s = aprt_send(c, 1, 3, j->buf[me], sizeof(float));
          if (!s)
            s = aprt_recv(c, 1, 3, j->out[me], sizeof(float));
        } else if (me == 1) {
          s = aprt_recv(c, 0, 3, j->out[me], sizeof(float));
          if (!s)
            s = aprt_send(c, 0, 3, j->buf[me], sizeof(float));
        }
        break;
      }
    }
    if (!s)
      s = aprt_barrier(c);
    if (me == 0 && smp >= 0)
      j->time_s[smp] = (now_s() - t0) / REPS / (j->what == OP_PINGPONG ? 2 : 1);
  }
  return s;
}

/* Bytes each rank sends in one operation. */
static double sent_bytes(const job *j, int n) {
  switch (j->what) {
  case OP_ALLREDUCE: return (double)aprt_allreduce_bytes(n, j->floats, NULL, 0);
  case OP_ALLGATHER: return 4.0 * (double)(n - 1) * (double)aprt_even_share(j->floats, n, 0);
  case OP_PINGPONG: return 4.0;
  default: return 4.0 * (double)(j->floats / n) * (n - 1);
  }
}

static double median(double *v, int count) {
  qsort(v, (size_t)count, sizeof *v, cmp_double);
  return v[count / 2];
}

/* One thread's memcpy of bytes: the floor of a hand-over. */
static double memcpy_s(size_t bytes) {
  unsigned char *a = malloc(bytes), *b = malloc(bytes);
  if (!a || !b) {
    fprintf(stderr, "bench-comm: out of memory\n");
    exit(1);
  }
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double t[64];
  for (int smp = 0; smp < samples; smp++) {
    double t0 = now_s();
    for (int r = 0; r < REPS; r++) {
      memcpy(b, a, bytes);
      __asm__ volatile("" : : "r"(b) : "memory");
    }
    t[smp] = (now_s() - t0) / REPS;
  }
  free(a);
  free(b);
  return median(t, samples);
}

int main(int argc, char **argv) {
  int ranks = 2;
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && !strcmp(argv[i], "--samples"))
      samples = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--ranks"))
      ranks = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench-comm [--samples N] [--ranks R]\n");
      return 2;
    }
  }
  if (samples < 1 || samples > 64 || ranks < 2 || ranks > MAX_RANKS) {
    fprintf(stderr, "bench-comm: samples 1..64, ranks 2..%d\n", MAX_RANKS);
    return 2;
  }
  printf("threads transport, %d ranks; median of %d samples of %d operations; "
         "memcpy: one thread copying the bytes one rank sends, in the same run\n\n",
         ranks, samples, REPS);
  printf("| operation | floats per rank | bytes sent per rank | time us | memcpy us | memcpys' worth |\n");
  printf("|---|--:|--:|--:|--:|--:|\n");
  static const int64_t sizes[] = {1 << 8, 1 << 14, 1 << 18, 1 << 22};
  for (int o = -1; o < 4; o++)
    for (size_t z = 0; z < (o < 0 ? 1 : sizeof sizes / sizeof sizes[0]); z++) {
      job *j = calloc(1, sizeof *j);
      if (!j)
        return 1;
      j->what = o < 0 ? OP_PINGPONG : (op)o;
      j->floats = o < 0 ? 1 : sizes[z];
      for (int r = 0; r < ranks; r++) {
        j->buf[r] = malloc((size_t)j->floats * sizeof(float));
        j->out[r] = malloc((size_t)j->floats * sizeof(float));
        if (!j->buf[r] || !j->out[r])
          return 1;
        for (int64_t i = 0; i < j->floats; i++)
          j->buf[r][i] = (float)(i % 7), j->out[r][i] = 0.0f;
      }
      aprt_run_opts opts = {APRT_THREADS, 30.0, NULL};
      aprt_error err = {{0}};
      if (aprt_run(&opts, ranks, rank_fn, j, NULL, &err) != APRT_OK) {
        fprintf(stderr, "bench-comm: %s\n", err.msg);
        return 1;
      }
      double t = median(j->time_s, samples), bytes = sent_bytes(j, ranks);
      double floor = memcpy_s((size_t)bytes);
      printf("| %s | %lld | %.0f | %.1f | %.1f | %.2f |\n", op_names[j->what], (long long)j->floats,
             bytes, t * 1e6, floor * 1e6, t / floor);
      fflush(stdout);
      for (int r = 0; r < ranks; r++)
        free(j->buf[r]), free(j->out[r]);
      free(j);
    }
  return 0;
}
