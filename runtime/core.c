/* The transport-independent part of a rank: counting, phase timers, errors,
 * and the dispatch from aprt_run to a transport. */
#define _GNU_SOURCE /* MADV_HUGEPAGE, MAP_ANONYMOUS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "transport.h"

const char *aprt_status_name(aprt_status s) {
  switch (s) {
  case APRT_OK: return "ok";
  case APRT_ERR_IO: return "io";
  case APRT_ERR_FORMAT: return "format";
  case APRT_ERR_MISMATCH: return "mismatch";
  case APRT_ERR_TIMEOUT: return "timeout";
  case APRT_ERR_PEER: return "peer failed";
  case APRT_ERR_USAGE: return "usage";
  case APRT_ERR_NOMEM: return "out of memory";
  case APRT_ERR_TRANSPORT: return "transport";
  }
  return "?";
}

static const char *const phase_names[] = {
#define APRT_PHASE_NAME(id, name) name,
    APRT_PHASES(APRT_PHASE_NAME)
#undef APRT_PHASE_NAME
};
_Static_assert(sizeof phase_names / sizeof phase_names[0] == APRT_PHASE_COUNT,
               "one name per phase");

const char *aprt_phase_name(aprt_phase p) {
  return (unsigned)p < APRT_PHASE_COUNT ? phase_names[p] : "?";
}

double aprt_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double aprt_timeout_default(double requested) {
  if (requested > 0)
    return requested;
  const char *env = getenv("ACCPAR_TIMEOUT_S");
  if (env && *env) {
    char *end;
    double v = strtod(env, &end);
    if (*end == '\0' && v > 0)
      return v;
  }
  return 60.0;
}

void aprt_comm_init(aprt_comm *c, int rank, int size, const aprt_transport *tp,
                    void *tp_state, double timeout_s) {
  memset(c, 0, sizeof *c);
  c->rank = rank;
  c->size = size;
  c->tp = tp;
  c->tp_state = tp_state;
  c->timeout_s = timeout_s;
  c->phase_t0 = aprt_now_s();
  c->row = -1;
}

int aprt_rank(const aprt_comm *c) { return c->tp->rank(c); }
int aprt_size(const aprt_comm *c) { return c->tp->size(c); }
const char *aprt_transport_name(const aprt_comm *c) { return c->tp->name; }
void *aprt_user(const aprt_comm *c) { return c->user; }
uint64_t aprt_bytes_sent(const aprt_comm *c) { return c->bytes_sent; }
uint64_t aprt_messages_sent(const aprt_comm *c) { return c->messages_sent; }
const char *aprt_errmsg(const aprt_comm *c) { return c->errmsg; }

static int current_phase(const aprt_comm *c) {
  return c->phase_depth ? c->phase_stack[c->phase_depth - 1] : APRT_PHASE_OTHER;
}

static void phase_switch(aprt_comm *c) {
  double now = aprt_now_s();
  c->phase_s[current_phase(c)] += now - c->phase_t0;
  c->phase_t0 = now;
}

void aprt_phase_begin(aprt_comm *c, aprt_phase p) {
  phase_switch(c);
  /* Deeper nesting than generated code uses keeps timing the innermost
   * recorded phase rather than failing the run over a timer. */
  if (c->phase_depth < APRT_PHASE_DEPTH)
    c->phase_stack[c->phase_depth] = (unsigned)p < APRT_PHASE_COUNT ? (int)p : APRT_PHASE_OTHER;
  c->phase_depth++;
}

void aprt_phase_end(aprt_comm *c) {
  if (c->phase_depth == 0)
    return;
  if (c->phase_depth <= APRT_PHASE_DEPTH)
    phase_switch(c);
  c->phase_depth--;
}

/* This rank's seconds per row, or NULL when the program has no rows. */
static double *rank_rows(const aprt_comm *c) {
  const aprt_run_ctx *ctx = c->ctx;
  return ctx && ctx->row_s ? ctx->row_s + (size_t)c->rank * (size_t)ctx->prog->n_rows : NULL;
}

void aprt_row(aprt_comm *c, int row) {
  double now = aprt_now_s(), *rows = rank_rows(c);
  if (rows && c->row >= 0)
    rows[c->row] += now - c->row_t0;
  c->row = rows && row >= 0 && row < c->ctx->prog->n_rows ? row : -1;
  c->row_t0 = now;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void aprt_comm_start(aprt_comm *c) { c->cpu_t0 = thread_cpu_s(); }

void aprt_comm_reset_stats(aprt_comm *c) {
  c->cpu_t0 = thread_cpu_s();
  phase_switch(c);
  c->bytes_sent = 0;
  c->messages_sent = 0;
  memset(c->phase_s, 0, sizeof c->phase_s);
  double *rows = rank_rows(c);
  if (rows)
    memset(rows, 0, sizeof *rows * (size_t)c->ctx->prog->n_rows);
  c->row_t0 = aprt_now_s();
}

aprt_status aprt_barrier_untimed(aprt_comm *c) {
  return c->status != APRT_OK ? c->status : c->tp->barrier(c);
}

/* ---- rank memory ------------------------------------------------------------ */

/* Linux >= 5.14 (Debian 12 has 6.1); older kernels say EINVAL and the pages
 * are touched instead. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

enum {
  HUGE_BYTES = 2 << 20,      /* x86-64's and arm64's transparent huge page */
  MAP_MIN_BYTES = 256 << 10  /* smaller buffers come from the heap */
};

static void buffer_free(aprt_rank_buffer *b) {
  if (b->map)
    munmap(b->map, b->map_bytes);
  else
    free(b->p);
  memset(b, 0, sizeof *b);
}

/* Anonymous memory aligned to a huge page, so that the kernel can back it
 * with 2 MiB pages (fewer TLB misses over an arena of tens of MB), and
 * populated in one call rather than one fault per page during the run. */
static bool buffer_map(aprt_rank_buffer *b, size_t bytes) {
  size_t usable = (bytes + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
  size_t map_bytes = usable + HUGE_BYTES;
  unsigned char *m = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                          -1, 0);
  if (m == MAP_FAILED)
    return false;
  uintptr_t at = ((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
  b->map = m;
  b->map_bytes = map_bytes;
  b->p = (void *)at;
  b->bytes = bytes;
#ifdef MADV_HUGEPAGE
  madvise(b->p, usable, MADV_HUGEPAGE); /* advice: without THP, small pages */
#endif
  if (madvise(b->p, usable, MADV_POPULATE_WRITE) != 0) {
    for (size_t off = 0; off < usable; off += 4096)
      ((volatile unsigned char *)b->p)[off] = 0;
  }
  return true;
}

void *aprt_buffer(aprt_comm *c, int id, size_t bytes) {
  if (id < 0 || id >= APRT_MAX_BUFFERS) {
    aprt_fail(c, APRT_ERR_USAGE, "buffer %d: ids are 0..%d", id, APRT_MAX_BUFFERS - 1);
    return NULL;
  }
  aprt_rank_buffer *b = &c->bufs[id];
  if (b->p && bytes <= b->bytes)
    return b->p;
  buffer_free(b);
  bool ok;
  if (bytes >= MAP_MIN_BYTES) {
    ok = buffer_map(b, bytes);
  } else {
    size_t rounded = (bytes + 63) / 64 * 64;
    b->p = aligned_alloc(64, rounded ? rounded : 64);
    b->bytes = bytes;
    ok = b->p != NULL;
    if (ok)
      memset(b->p, 0, rounded); /* populated now, like the mapped ones */
  }
  if (!ok) {
    memset(b, 0, sizeof *b);
    aprt_fail(c, APRT_ERR_NOMEM, "buffer %d: %zu bytes: out of memory", id, bytes);
    return NULL;
  }
  return b->p;
}

void *aprt_buffer_new(aprt_comm *c, int id, size_t bytes, int *is_new) {
  *is_new = !(id >= 0 && id < APRT_MAX_BUFFERS && c->bufs[id].p && bytes <= c->bufs[id].bytes);
  return aprt_buffer(c, id, bytes);
}

void aprt_comm_release(aprt_comm *c) {
  for (int i = 0; i < APRT_MAX_BUFFERS; i++)
    buffer_free(&c->bufs[i]);
  free(c->scratch);
  c->scratch = NULL;
  c->scratch_bytes = 0;
}

void *aprt_comm_scratch(aprt_comm *c, size_t bytes) {
  if (bytes <= c->scratch_bytes && c->scratch)
    return c->scratch;
  free(c->scratch);
  c->scratch = malloc(bytes ? bytes : 1);
  c->scratch_bytes = c->scratch ? bytes : 0;
  if (!c->scratch)
    aprt_fail(c, APRT_ERR_NOMEM, "%zu bytes of scratch: out of memory", bytes);
  return c->scratch;
}

void aprt_comm_stats(aprt_comm *c, aprt_rank_stats *out) {
  phase_switch(c);
  aprt_row(c, -1);
  memset(out, 0, sizeof *out);
  out->bytes_sent = c->bytes_sent;
  out->messages_sent = c->messages_sent;
  out->cpu_s = thread_cpu_s() - c->cpu_t0;
  memcpy(out->phase_s, c->phase_s, sizeof out->phase_s);
}

aprt_status aprt_fail(aprt_comm *c, aprt_status s, const char *fmt, ...) {
  if (c->status == APRT_OK) {
    c->status = s;
    int n = snprintf(c->errmsg, sizeof c->errmsg, "rank %d: ", c->rank);
    if (n < 0)
      n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg + n, sizeof c->errmsg - (size_t)n, fmt, ap);
    va_end(ap);
    for (char *p = c->errmsg; *p; p++)
      if (*p == '\n' || *p == '\r')
        *p = ' ';
  }
  c->tp->fail(c);
  return s;
}

void aprt_errorf(aprt_error *err, const char *fmt, ...) {
  if (!err)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  for (char *p = err->msg; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
}

static aprt_status check_peer(aprt_comm *c, int peer, int tag, const char *what) {
  if (c->status != APRT_OK)
    return c->status;
  if (peer < 0 || peer >= c->size)
    return aprt_fail(c, APRT_ERR_USAGE, "%s: peer %d is not a rank of %d", what, peer,
                     c->size);
  if (tag < 0 || tag > APRT_TAG_STATS)
    return aprt_fail(c, APRT_ERR_USAGE, "%s: tag %d outside 0..%d", what, tag, APRT_TAG_MAX);
  return APRT_OK;
}

aprt_status aprt_send_ctl(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes) {
  aprt_status s = check_peer(c, peer, tag, "send");
  return s ? s : c->tp->send(c, peer, tag, buf, bytes);
}

aprt_status aprt_recv_ctl(aprt_comm *c, int peer, int tag, void *buf, size_t bytes) {
  aprt_status s = check_peer(c, peer, tag, "recv");
  return s ? s : c->tp->recv(c, peer, tag, buf, bytes);
}

aprt_status aprt_send(aprt_comm *c, int peer, int tag, const void *buf, size_t bytes) {
  if (tag > APRT_TAG_MAX)
    return aprt_fail(c, APRT_ERR_USAGE, "send: tag %d outside 0..%d", tag, APRT_TAG_MAX);
  aprt_phase_begin(c, APRT_PHASE_COMM);
  aprt_status s = aprt_send_ctl(c, peer, tag, buf, bytes);
  aprt_phase_end(c);
  if (s == APRT_OK && peer != c->rank) {
    c->bytes_sent += bytes;
    c->messages_sent++;
  }
  return s;
}

aprt_status aprt_recv(aprt_comm *c, int peer, int tag, void *buf, size_t bytes) {
  if (tag > APRT_TAG_MAX)
    return aprt_fail(c, APRT_ERR_USAGE, "recv: tag %d outside 0..%d", tag, APRT_TAG_MAX);
  aprt_phase_begin(c, APRT_PHASE_COMM);
  aprt_status s = aprt_recv_ctl(c, peer, tag, buf, bytes);
  aprt_phase_end(c);
  return s;
}

aprt_status aprt_barrier(aprt_comm *c) {
  if (c->status != APRT_OK)
    return c->status;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  aprt_status s = c->tp->barrier(c);
  aprt_phase_end(c);
  return s;
}

aprt_status aprt_first_error(aprt_comm *const *comms, int n, aprt_error *err) {
  /* A rank that failed on its own explains the run better than the peers
   * that merely saw it fail or timed out waiting for it. */
  static const aprt_status secondary[] = {APRT_ERR_PEER, APRT_ERR_TIMEOUT};
  for (int pass = 0; pass < 3; pass++)
    for (int r = 0; r < n; r++) {
      aprt_status s = comms[r]->status;
      if (s == APRT_OK)
        continue;
      bool is_secondary = s == secondary[0] || s == secondary[1];
      if ((pass == 0 && is_secondary) || (pass == 1 && s != APRT_ERR_TIMEOUT))
        continue;
      aprt_errorf(err, "%s", comms[r]->errmsg);
      return s;
    }
  return APRT_OK;
}

int aprt_have_mpi(void) {
#ifdef APRT_HAVE_MPI
  return 1;
#else
  return 0;
#endif
}

typedef struct flushed_fn {
  aprt_rank_fn fn;
  void *arg;
} flushed_fn;

/* The rank's function, then the loss rank 0 still holds (aprt_step_loss). */
static int run_and_flush(aprt_comm *c, void *p) {
  const flushed_fn *f = p;
  int s = f->fn(c, f->arg);
  if (s == APRT_OK && c->status == APRT_OK)
    s = aprt_loss_flush(c);
  return s;
}

aprt_status aprt_run_ctx_run(const aprt_run_opts *opts, int size, aprt_rank_fn user_fn,
                             void *user_arg, aprt_run_ctx *ctx, aprt_rank_stats *stats,
                             aprt_error *err) {
  flushed_fn f = {user_fn, user_arg};
  aprt_rank_fn fn = run_and_flush;
  void *arg = &f;
  if (size < 1) {
    aprt_errorf(err, "run: %d ranks; need at least 1", size);
    return APRT_ERR_USAGE;
  }
  if (opts->transport == APRT_MPI) {
#ifdef APRT_HAVE_MPI
    return aprt_run_mpi(opts, size, fn, arg, ctx, stats, err);
#else
    aprt_errorf(err, "transport mpi: this program was linked with accpar_rt, which has no "
                     "MPI transport (link accpar_rt_mpi)");
    return APRT_ERR_USAGE;
#endif
  }
  return aprt_run_threads(opts, size, fn, arg, ctx, stats, err);
}

aprt_status aprt_run(const aprt_run_opts *opts, int size, aprt_rank_fn fn, void *arg,
                     aprt_rank_stats *stats, aprt_error *err) {
  aprt_run_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  pthread_mutex_init(&ctx.output_mu, NULL);
  ctx.args.steps = 1;
  ctx.quiet = 1;
  aprt_status s = aprt_run_ctx_run(opts, size, fn, arg, &ctx, stats, err);
  pthread_mutex_destroy(&ctx.output_mu);
  return s;
}

/* SplitMix64's finaliser over a mix of the three coordinates: cheap, and
 * every bit of each input reaches every output bit. */
uint64_t aprt_rand_u64(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = seed * 0x9E3779B97F4A7C15u ^ (stream + 0x632BE59BD9B4E019u) * 0xBF58476D1CE4E5B9u;
  z += index * 0x94D049BB133111EBu + 0x9E3779B97F4A7C15u;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

float aprt_rand_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  /* 24 random bits: exactly representable, so the value is in [-1, 1). */
  uint64_t bits = aprt_rand_u64(seed, stream, index) >> 40;
  return (float)bits * (2.0f / 16777216.0f) - 1.0f;
}
