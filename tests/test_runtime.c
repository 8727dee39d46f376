/* The runtime (runtime/): collectives on 1..5 threads with uneven shares
 * against serial references, exact byte counts against the formulas of
 * accpar_rt.h, the box exchange of random boxes, faults turning into errors
 * (never hangs), TensorProto files, and the executable skeleton (aprt_main)
 * under the threads transport and, when mpirun exists, under MPI. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "onnx.pb-c.h"
#include "runtime/accpar_rt.h"

#define SELFTEST ACCPAR_BINARY_DIR "/runtime/accpar_rt_selftest"
#define MNIST_INPUT ACCPAR_SHARED_DIR "/models/mnist-8/test_data_set_0/input_0.pb"

enum { MAXR = 5, MAXN = 64 };

/* ---- helpers --------------------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rng(void) { /* xorshift64*: reproducible test cases */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717u;
}
static int64_t rng_below(int64_t n) { return n > 0 ? (int64_t)(rng() % (uint64_t)n) : 0; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Runs fn on size threads with a short timeout; returns the status. */
static aprt_status run_threads(int size, aprt_rank_fn fn, void *arg, double timeout_s,
                               aprt_rank_stats *stats, aprt_error *err) {
  aprt_run_opts opts = {APRT_THREADS, timeout_s, NULL};
  return aprt_run(&opts, size, fn, arg, stats, err);
}

/* ---- collectives -------------------------------------------------------------------- */

/* One collective case shared by the ranks: the group (a random subset of the
 * world in random order), uneven counts, every member's input, and per rank
 * the result and the bytes it sent. */
typedef struct coll_case {
  int world, n, group[MAXR];
  int64_t counts[MAXR], total;
  int shares_null;
  float in[MAXR][MAXN];          /* by member */
  float out[MAXR][MAXN];         /* by member */
  int64_t bytes[MAXR];           /* by member */
} coll_case;

static void make_case(coll_case *k, int world) {
  memset(k, 0, sizeof *k);
  k->world = world;
  int perm[MAXR];
  for (int i = 0; i < world; i++)
    perm[i] = i;
  for (int i = world - 1; i > 0; i--) {
    int j = (int)rng_below(i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  k->n = 1 + (int)rng_below(world);
  for (int i = 0; i < k->n; i++) {
    k->group[i] = perm[i];
    k->counts[i] = rng_below(MAXN / MAXR + 1); /* 0..12, uneven, zeros included */
    k->total += k->counts[i];
  }
  for (int i = 0; i < k->n; i++)
    for (int e = 0; e < MAXN; e++)
      k->in[i][e] = (float)rng_below(2001) / 64.0f - 15.0f;
}

static int member_of(const coll_case *k, int rank) {
  for (int i = 0; i < k->n; i++)
    if (k->group[i] == rank)
      return i;
  return -1;
}

static int allreduce_rank(aprt_comm *c, void *arg) {
  coll_case *k = arg;
  int m = member_of(k, aprt_rank(c));
  if (m < 0)
    return APRT_OK; /* not in the group: idle, like a device of another group */
  memcpy(k->out[m], k->in[m], sizeof k->out[m]);
  uint64_t before = aprt_bytes_sent(c);
  aprt_status s = aprt_allreduce_sum(c, k->group, k->n, k->out[m], k->total,
                                     k->shares_null ? NULL : k->counts, 7);
  k->bytes[m] = (int64_t)(aprt_bytes_sent(c) - before);
  return s;
}

Test(collectives, allreduce_uneven_matches_serial_sum_and_formula) {
  rng_state = 0x1234567u;
  for (int world = 1; world <= MAXR; world++)
    for (int rep = 0; rep < 12; rep++) {
      coll_case k;
      make_case(&k, world);
      k.shares_null = rep % 3 == 0;
      aprt_error err = {{0}};
      aprt_status s = run_threads(world, allreduce_rank, &k, 5.0, NULL, &err);
      cr_assert_eq(s, APRT_OK, "world %d: %s", world, err.msg);
      for (int e = 0; e < k.total; e++) {
        float ref = k.in[0][e]; /* the documented member-order sum */
        for (int i = 1; i < k.n; i++)
          ref += k.in[i][e];
        for (int i = 0; i < k.n; i++)
          cr_assert_eq(k.out[i][e], ref, "world %d n %d member %d element %d: %g != %g",
                       world, k.n, i, e, k.out[i][e], ref);
      }
      for (int i = 0; i < k.n; i++) {
        /* Not beyond count: the rest of the buffer is the caller's. */
        for (int e = (int)k.total; e < MAXN; e++)
          cr_assert_eq(k.out[i][e], k.in[i][e]);
        uint64_t want = aprt_allreduce_bytes(k.n, k.total, k.shares_null ? NULL : k.counts, i);
        int64_t share = k.shares_null ? aprt_even_share(k.total, k.n, i) : k.counts[i];
        uint64_t by_hand = k.n < 2 ? 0 : 4u * (uint64_t)(k.total + (k.n - 2) * share);
        cr_assert_eq(want, by_hand);
        cr_assert_eq((uint64_t)k.bytes[i], want, "world %d n %d member %d: sent %lld, formula %llu",
                     world, k.n, i, (long long)k.bytes[i], (unsigned long long)want);
      }
    }
}

static int allgather_rank(aprt_comm *c, void *arg) {
  coll_case *k = arg;
  int m = member_of(k, aprt_rank(c));
  if (m < 0)
    return APRT_OK;
  /* Only the own segment is valid on entry: the rest is poisoned. */
  for (int e = 0; e < MAXN; e++)
    k->out[m][e] = -999.0f;
  int64_t off = 0;
  for (int i = 0; i < m; i++)
    off += k->counts[i];
  memcpy(k->out[m] + off, k->in[m] + off, (size_t)k->counts[m] * sizeof(float));
  uint64_t before = aprt_bytes_sent(c);
  aprt_status s = aprt_allgather(c, k->group, k->n, k->out[m], k->counts, sizeof(float), 3);
  k->bytes[m] = (int64_t)(aprt_bytes_sent(c) - before);
  return s;
}

Test(collectives, allgather_uneven_matches_serial_concat_and_formula) {
  rng_state = 0xabcdefu;
  for (int world = 1; world <= MAXR; world++)
    for (int rep = 0; rep < 12; rep++) {
      coll_case k;
      make_case(&k, world);
      aprt_error err = {{0}};
      cr_assert_eq(run_threads(world, allgather_rank, &k, 5.0, NULL, &err), APRT_OK, "%s",
                   err.msg);
      int64_t off = 0;
      for (int j = 0; j < k.n; off += k.counts[j], j++)
        for (int e = (int)off; e < off + k.counts[j]; e++)
          for (int i = 0; i < k.n; i++)
            cr_assert_eq(k.out[i][e], k.in[j][e], "member %d element %d", i, e);
      for (int i = 0; i < k.n; i++) {
        for (int e = (int)k.total; e < MAXN; e++)
          cr_assert_eq(k.out[i][e], -999.0f, "wrote past the segments");
        cr_assert_eq((uint64_t)k.bytes[i], aprt_allgather_bytes(k.n, k.counts, i, 4));
        cr_assert_eq((uint64_t)k.bytes[i], (uint64_t)(k.n - 1) * (uint64_t)k.counts[i] * 4);
      }
    }
}

static int reduce_scatter_rank(aprt_comm *c, void *arg) {
  coll_case *k = arg;
  int m = member_of(k, aprt_rank(c));
  if (m < 0)
    return APRT_OK;
  memcpy(k->out[m], k->in[m], sizeof k->out[m]);
  uint64_t before = aprt_bytes_sent(c);
  aprt_status s = aprt_reduce_scatter_sum(c, k->group, k->n, k->out[m], k->counts, 4);
  k->bytes[m] = (int64_t)(aprt_bytes_sent(c) - before);
  return s;
}

Test(collectives, reduce_scatter_uneven_matches_serial_sum_and_formula) {
  rng_state = 0x5eed5u;
  for (int world = 1; world <= MAXR; world++)
    for (int rep = 0; rep < 12; rep++) {
      coll_case k;
      make_case(&k, world);
      aprt_error err = {{0}};
      cr_assert_eq(run_threads(world, reduce_scatter_rank, &k, 5.0, NULL, &err), APRT_OK,
                   "%s", err.msg);
      int64_t off = 0;
      for (int i = 0; i < k.n; off += k.counts[i], i++) {
        for (int e = 0; e < MAXN; e++) {
          bool own = e >= off && e < off + k.counts[i];
          float ref = k.in[0][e];
          for (int j = 1; j < k.n; j++)
            ref += k.in[j][e];
          cr_assert_eq(k.out[i][e], own ? ref : k.in[i][e], "member %d element %d", i, e);
        }
        cr_assert_eq((uint64_t)k.bytes[i], aprt_reduce_scatter_bytes(k.n, k.counts, i));
        cr_assert_eq((uint64_t)k.bytes[i], 4u * (uint64_t)(k.total - k.counts[i]));
      }
    }
}

/* Two disjoint groups reduce at the same time, with the same tag: messages
 * of one group must never reach the other. */
typedef struct two_groups {
  float v[5][8];
} two_groups;

static int two_groups_rank(aprt_comm *c, void *arg) {
  two_groups *t = arg;
  static const int a[] = {3, 0}, b[] = {1, 4, 2};
  int r = aprt_rank(c);
  for (int e = 0; e < 8; e++)
    t->v[r][e] = (float)(r * 10 + e);
  bool in_a = r == 0 || r == 3;
  return aprt_allreduce_sum(c, in_a ? a : b, in_a ? 2 : 3, t->v[r], 8, NULL, 9);
}

Test(collectives, disjoint_groups_run_concurrently) {
  two_groups t;
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(5, two_groups_rank, &t, 5.0, NULL, &err), APRT_OK, "%s", err.msg);
  for (int e = 0; e < 8; e++) {
    cr_assert_eq(t.v[0][e], (float)(30 + 2 * e));
    cr_assert_eq(t.v[3][e], (float)(30 + 2 * e));
    for (int r = 1; r <= 4; r++)
      if (r != 3)
        cr_assert_eq(t.v[r][e], (float)(70 + 3 * e), "rank %d", r);
  }
}

/* Two members: up to 16 KB one message each way, above it reduce-scatter
 * and all-gather; the same bytes and bitwise the same sums either way, with
 * shares even or all on one member. */
enum { PAIR_MAX = 4097 };
typedef struct pair_case {
  int64_t count;
  bool lopsided;              /* shares {count, 0} instead of NULL */
  float v[2][PAIR_MAX];
} pair_case;

static int pair_rank(aprt_comm *c, void *arg) {
  pair_case *p = arg;
  static const int group[] = {1, 0};
  int r = aprt_rank(c);
  for (int64_t e = 0; e < p->count; e++)
    p->v[r][e] = 1.0f / (float)(e + 1 + 7 * r) + (float)r * 1e-3f;
  int64_t shares[2] = {p->count, 0};
  return aprt_allreduce_sum(c, group, 2, p->v[r], p->count, p->lopsided ? shares : NULL, 5);
}

Test(collectives, two_members_small_allreduce_is_one_message) {
  static pair_case p;
  for (int lopsided = 0; lopsided < 2; lopsided++)
    for (int64_t count = 4095; count <= PAIR_MAX; count++) {
      p.count = count;
      p.lopsided = lopsided;
      aprt_rank_stats stats[2];
      aprt_error err = {{0}};
      cr_assert_eq(run_threads(2, pair_rank, &p, 5.0, stats, &err), APRT_OK, "%s", err.msg);
      for (int64_t e = 0; e < count; e++) {
        float in0 = 1.0f / (float)(e + 1), in1 = 1.0f / (float)(e + 8) + 1e-3f;
        cr_assert_eq(p.v[0][e], in1 + in0, "count %lld element %lld", (long long)count,
                     (long long)e);
        cr_assert_eq(memcmp(&p.v[0][e], &p.v[1][e], sizeof(float)), 0);
      }
      for (int r = 0; r < 2; r++) {
        cr_assert_eq(stats[r].bytes_sent, 4u * (uint64_t)count);
        cr_assert_eq(stats[r].messages_sent,
                     count <= 4096 ? 1u : lopsided ? 1u : 2u, "count %lld rank %d",
                     (long long)count, r);
      }
    }
}

/* A run of all-reduces as generated programs print it (every start, then
 * every finish), of both forms, on 2 and 3 ranks: each sum bitwise as
 * aprt_allreduce_sum gives it, and the same bytes and messages. */
enum { RUN_N = 3, RUN_MAX = 5000 };
static const int64_t run_counts[RUN_N] = {10, 4096, RUN_MAX};
typedef struct run_case {
  bool split;
  float v[3][RUN_N][RUN_MAX];
} run_case;

static int run_rank(aprt_comm *c, void *arg) {
  run_case *p = arg;
  static const int group[] = {0, 1, 2};
  int r = aprt_rank(c), n = aprt_size(c);
  for (int k = 0; k < RUN_N; k++)
    for (int64_t e = 0; e < run_counts[k]; e++)
      p->v[r][k][e] = 1.0f / (float)(e + 1 + 7 * r + k) + (float)r * 1e-3f;
  aprt_status s = APRT_OK;
  for (int k = 0; k < RUN_N && !s; k++)
    s = p->split ? aprt_allreduce_start(c, group, n, p->v[r][k], run_counts[k], NULL, k)
                 : aprt_allreduce_sum(c, group, n, p->v[r][k], run_counts[k], NULL, k);
  for (int k = 0; k < RUN_N && !s && p->split; k++)
    s = aprt_allreduce_finish(c, group, n, p->v[r][k], run_counts[k], NULL, k);
  return s;
}

Test(collectives, a_run_of_started_allreduces_sums_as_one_at_a_time) {
  static run_case whole, split;
  split.split = true;
  for (int n = 2; n <= 3; n++) {
    aprt_rank_stats a[3], b[3];
    aprt_error err = {{0}};
    cr_assert_eq(run_threads(n, run_rank, &whole, 5.0, a, &err), APRT_OK, "%s", err.msg);
    cr_assert_eq(run_threads(n, run_rank, &split, 5.0, b, &err), APRT_OK, "%s", err.msg);
    for (int r = 0; r < n; r++) {
      cr_assert_eq(memcmp(whole.v[r], split.v[r], sizeof whole.v[r]), 0, "%d ranks", n);
      cr_assert_eq(memcmp(split.v[r], split.v[0], sizeof split.v[r]), 0, "%d ranks", n);
      uint64_t bytes = 0;
      for (int k = 0; k < RUN_N; k++)
        bytes += aprt_allreduce_bytes(n, run_counts[k], NULL, r);
      cr_assert_eq(b[r].bytes_sent, bytes);
      cr_assert_eq(a[r].bytes_sent, bytes);
      cr_assert_eq(b[r].messages_sent, a[r].messages_sent);
    }
  }
}

static int bad_group_rank(aprt_comm *c, void *arg) {
  static const int group[] = {0, 0};
  float v = 1.0f;
  return aprt_allreduce_sum(c, group, 2, &v, 1, NULL, 0);
}

Test(collectives, bad_group_is_a_usage_error) {
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(2, bad_group_rank, NULL, 2.0, NULL, &err), APRT_ERR_USAGE);
  cr_assert(strstr(err.msg, "appears twice"), "%s", err.msg);
}

/* ---- boxes --------------------------------------------------------------------------- */

Test(boxes, pack_unpack_arbitrary_strides) {
  rng_state = 77;
  for (int rep = 0; rep < 200; rep++) {
    aprt_box b = {0};
    b.ndim = (int)rng_below(APRT_MAX_RANK + 1);
    /* Random (possibly non-row-major, non-contiguous) strides that never
     * alias: each dimension's stride exceeds the span of the faster ones. */
    int order[APRT_MAX_RANK];
    for (int d = 0; d < b.ndim; d++)
      order[d] = d;
    for (int d = b.ndim - 1; d > 0; d--) {
      int j = (int)rng_below(d + 1), t = order[d];
      order[d] = order[j];
      order[j] = t;
    }
    int64_t span = 1;
    for (int k = 0; k < b.ndim; k++) {
      int d = order[k];
      b.size[d] = 1 + rng_below(b.ndim > 5 ? 2 : 3);
      b.stride[d] = span + rng_below(2);
      span = b.stride[d] * b.size[d] + rng_below(2);
    }
    b.offset = rng_below(3);
    int64_t buf_n = b.offset + span + 1, vol = aprt_box_volume(&b);
    double *buf = malloc((size_t)buf_n * sizeof *buf), *packed = malloc((size_t)vol * sizeof *packed);
    double *back = malloc((size_t)buf_n * sizeof *back);
    for (int64_t i = 0; i < buf_n; i++) {
      buf[i] = (double)i;
      back[i] = -1.0;
    }
    aprt_box_pack(packed, buf, &b, sizeof(double));
    aprt_box_unpack(back, &b, packed, sizeof(double));
    /* Reference: walk the box by decoding a linear row-major index. */
    for (int64_t lin = 0; lin < vol; lin++) {
      int64_t rest = lin, at = b.offset;
      for (int d = b.ndim - 1; d >= 0; d--) {
        at += (rest % b.size[d]) * b.stride[d];
        rest /= b.size[d];
      }
      cr_assert_eq(packed[lin], buf[at], "rep %d element %lld", rep, (long long)lin);
      cr_assert_eq(back[at], buf[at]);
      back[at] = -1.0;
    }
    for (int64_t i = 0; i < buf_n; i++)
      cr_assert_eq(back[i], -1.0, "rep %d: unpack wrote outside the box at %lld", rep,
                   (long long)i);
    free(buf);
    free(packed);
    free(back);
  }
}

/* The box exchange of a layout conversion: a global tensor G is split into
 * uneven pieces A_r along one dimension (each rank holds its piece in a
 * padded local buffer), and every rank needs an arbitrary box B_r (overlaps
 * allowed) in its own padded buffer. Each piece of A_s ∩ B_d travels as two
 * messages (split along dim 0 when possible) to test in-order matching. */
enum { XDIM = 4, XMAX = 4 * 64 };

typedef struct xrank {
  int64_t a_start[XDIM], a_size[XDIM], a_pad[XDIM], a_shape[XDIM];
  int64_t b_start[XDIM], b_size[XDIM], b_pad[XDIM], b_shape[XDIM];
  float src[XMAX * 4], dst[XMAX * 4];
  int nsend, nrecv;
  aprt_xfer sends[MAXR * 2], recvs[MAXR * 2];
  uint64_t bytes, expected_bytes;
} xrank;

typedef struct xcase {
  int world, ndim;
  int64_t shape[XDIM];
  xrank r[MAXR];
} xcase;

static int64_t lin_index(int ndim, const int64_t *shape, const int64_t *idx) {
  int64_t at = 0;
  for (int d = 0; d < ndim; d++)
    at = at * shape[d] + idx[d];
  return at;
}

static bool intersect(int ndim, const int64_t *s1, const int64_t *z1, const int64_t *s2,
                      const int64_t *z2, int64_t *start, int64_t *size) {
  bool any = true;
  for (int d = 0; d < ndim; d++) {
    int64_t lo = s1[d] > s2[d] ? s1[d] : s2[d];
    int64_t hi1 = s1[d] + z1[d], hi2 = s2[d] + z2[d], hi = hi1 < hi2 ? hi1 : hi2;
    start[d] = lo;
    size[d] = hi > lo ? hi - lo : 0;
    any = any && size[d] > 0;
  }
  return any;
}

static void add_xfer(xcase *x, int s, int d, const int64_t *start, const int64_t *size) {
  xrank *src = &x->r[s], *dst = &x->r[d];
  int64_t sl[XDIM], dl[XDIM];
  for (int k = 0; k < x->ndim; k++) {
    sl[k] = start[k] - src->a_start[k] + src->a_pad[k];
    dl[k] = start[k] - dst->b_start[k] + dst->b_pad[k];
  }
  src->sends[src->nsend++] = (aprt_xfer){d, aprt_box_dense(x->ndim, src->a_shape, sl, size)};
  dst->recvs[dst->nrecv++] = (aprt_xfer){s, aprt_box_dense(x->ndim, dst->b_shape, dl, size)};
  if (s != d) {
    int64_t v = 1;
    for (int k = 0; k < x->ndim; k++)
      v *= size[k];
    src->expected_bytes += (uint64_t)v * sizeof(float);
  }
}

static void make_xcase(xcase *x, int world) {
  memset(x, 0, sizeof *x);
  x->world = world;
  x->ndim = 1 + (int)rng_below(XDIM);
  for (int d = 0; d < x->ndim; d++)
    x->shape[d] = 1 + rng_below(x->ndim > 2 ? 4 : 8);
  int split = (int)rng_below(x->ndim);
  int64_t cut[MAXR + 1] = {0};
  for (int r = 1; r < world; r++)
    cut[r] = rng_below(x->shape[split] + 1);
  cut[world] = x->shape[split];
  for (int r = 1; r < world; r++) /* sort: pieces are uneven, some empty */
    for (int q = r; q > 1 && cut[q] < cut[q - 1]; q--) {
      int64_t t = cut[q];
      cut[q] = cut[q - 1];
      cut[q - 1] = t;
    }
  for (int r = 0; r < world; r++) {
    xrank *xr = &x->r[r];
    for (int d = 0; d < x->ndim; d++) {
      xr->a_start[d] = d == split ? cut[r] : 0;
      xr->a_size[d] = d == split ? cut[r + 1] - cut[r] : x->shape[d];
      xr->a_pad[d] = rng_below(2);
      xr->a_shape[d] = xr->a_size[d] + xr->a_pad[d] + rng_below(2);
      xr->b_start[d] = rng_below(x->shape[d]);
      xr->b_size[d] = 1 + rng_below(x->shape[d] - xr->b_start[d]);
      xr->b_pad[d] = rng_below(2);
      xr->b_shape[d] = xr->b_size[d] + xr->b_pad[d] + rng_below(2);
    }
  }
  for (int d = 0; d < world; d++)
    for (int s = 0; s < world; s++) {
      int64_t start[XDIM], size[XDIM];
      if (!intersect(x->ndim, x->r[s].a_start, x->r[s].a_size, x->r[d].b_start,
                     x->r[d].b_size, start, size))
        continue;
      if (size[0] >= 2) {
        int64_t first = size[0] / 2, st2[XDIM], sz2[XDIM];
        memcpy(st2, start, sizeof st2);
        memcpy(sz2, size, sizeof sz2);
        size[0] = first;
        st2[0] += first;
        sz2[0] -= first;
        add_xfer(x, s, d, start, size);
        add_xfer(x, s, d, st2, sz2);
      } else {
        add_xfer(x, s, d, start, size);
      }
    }
}

static int exchange_rank(aprt_comm *c, void *arg) {
  xcase *x = arg;
  xrank *me = &x->r[aprt_rank(c)];
  uint64_t before = aprt_bytes_sent(c);
  aprt_status s = aprt_exchange(c, me->src, me->nsend, me->sends, me->dst, me->nrecv,
                                me->recvs, sizeof(float), 11);
  me->bytes = aprt_bytes_sent(c) - before;
  return s;
}

/* Calls f on every index of a box of the given start and size. */
static void each_index(int ndim, const int64_t *size, int64_t *idx, int d,
                       void (*f)(void *, const int64_t *), void *ctx) {
  if (d == ndim) {
    f(ctx, idx);
    return;
  }
  for (idx[d] = 0; idx[d] < size[d]; idx[d]++)
    each_index(ndim, size, idx, d + 1, f, ctx);
}

typedef struct fill_ctx {
  xcase *x;
  xrank *xr;
  bool dst; /* fill the reference of dst (B) rather than src (A) */
  float *out;
} fill_ctx;

static void fill_one(void *p, const int64_t *idx) {
  fill_ctx *fc = p;
  int n = fc->x->ndim;
  int64_t g[XDIM], l[XDIM];
  for (int d = 0; d < n; d++) {
    g[d] = idx[d] + (fc->dst ? fc->xr->b_start[d] : fc->xr->a_start[d]);
    l[d] = idx[d] + (fc->dst ? fc->xr->b_pad[d] : fc->xr->a_pad[d]);
  }
  fc->out[lin_index(n, fc->dst ? fc->xr->b_shape : fc->xr->a_shape, l)] =
      (float)lin_index(n, fc->x->shape, g);
}

Test(boxes, exchange_random_boxes_matches_serial_reference) {
  rng_state = 4242;
  static xcase x;
  static float ref[XMAX * 4];
  for (int world = 1; world <= MAXR; world++)
    for (int rep = 0; rep < 25; rep++) {
      make_xcase(&x, world);
      for (int r = 0; r < world; r++) {
        xrank *xr = &x.r[r];
        for (size_t i = 0; i < sizeof xr->src / sizeof xr->src[0]; i++)
          xr->src[i] = xr->dst[i] = -1.0f; /* padding must stay untouched */
        int64_t idx[XDIM];
        fill_ctx fc = {&x, xr, false, xr->src};
        each_index(x.ndim, xr->a_size, idx, 0, fill_one, &fc);
      }
      aprt_error err = {{0}};
      cr_assert_eq(run_threads(world, exchange_rank, &x, 5.0, NULL, &err), APRT_OK, "%s",
                   err.msg);
      for (int r = 0; r < world; r++) {
        xrank *xr = &x.r[r];
        for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++)
          ref[i] = -1.0f;
        int64_t idx[XDIM];
        fill_ctx fc = {&x, xr, true, ref};
        each_index(x.ndim, xr->b_size, idx, 0, fill_one, &fc);
        cr_assert(memcmp(ref, xr->dst, sizeof ref) == 0, "world %d rep %d rank %d: box differs",
                  world, rep, r);
        cr_assert_eq(xr->bytes, xr->expected_bytes, "world %d rep %d rank %d", world, rep, r);
        cr_assert_eq(xr->bytes, aprt_exchange_bytes(r, xr->nsend, xr->sends, sizeof(float)));
      }
    }
}

/* A sender's exchange returns without waiting for its receiver, and may then
 * overwrite its source: under threads the box it lent is copied into an
 * ordinary message when it settles, so a receiver arriving later still gets
 * the data as it was. */
typedef struct slow_case {
  float src[64], dst[64];
  double send_s;     /* how long rank 0's exchange took */
} slow_case;

static int slow_receiver_rank(aprt_comm *c, void *arg) {
  slow_case *k = arg;
  int64_t shape[1] = {64}, start[1] = {3}, size[1] = {50};
  aprt_xfer x = {1 - aprt_rank(c), aprt_box_dense(1, shape, start, size)};
  aprt_status s;
  if (aprt_rank(c) == 0) {
    double t0 = now_s();
    s = aprt_exchange(c, k->src, 1, &x, NULL, 0, NULL, sizeof(float), 5);
    k->send_s = now_s() - t0;
    for (int i = 0; i < 64; i++)
      k->src[i] = -7.0f; /* the receiver must not see this */
  } else {
    sleep_s(0.3);
    s = aprt_exchange(c, NULL, 0, NULL, k->dst, 1, &x, sizeof(float), 5);
  }
  return s ? s : aprt_barrier(c);
}

Test(boxes, lent_boxes_are_copied_when_the_sender_settles_before_the_receiver_comes) {
  static slow_case k;
  for (int i = 0; i < 64; i++)
    k.src[i] = (float)i, k.dst[i] = -1.0f;
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(2, slow_receiver_rank, &k, 5.0, NULL, &err), APRT_OK, "%s", err.msg);
  for (int i = 0; i < 64; i++)
    cr_assert_eq(k.dst[i], i >= 3 && i < 53 ? (float)i : -1.0f, "element %d", i);
  cr_assert_lt(k.send_s, 0.2, "the sender waited %g s for its receiver", k.send_s);
}

/* Split-phase exchanges: two starts outstanding, an all-reduce between
 * them, finishes in the opposite order, and a message sent by one kind of
 * call received by another (aprt_exchange to aprt_recv, aprt_send to
 * aprt_exchange); data and bytes as the formulas say. */
enum { SPLIT_N = 4, SPLIT_LEN = 40 };
typedef struct split_case {
  float src[SPLIT_N][2][SPLIT_LEN], dst[SPLIT_N][2][SPLIT_N * SPLIT_LEN];
  float red[SPLIT_N][17];
  float flat[SPLIT_N][SPLIT_LEN];
  uint64_t bytes[SPLIT_N];
} split_case;

static int split_rank(aprt_comm *c, void *arg) {
  split_case *k = arg;
  int me = aprt_rank(c), n = aprt_size(c);
  aprt_xfer sends[2][SPLIT_N], recvs[2][SPLIT_N];
  for (int t = 0; t < 2; t++)
    for (int p = 0; p < n; p++) {
      int64_t shape[1] = {SPLIT_LEN}, start[1] = {p}, size[1] = {SPLIT_LEN - p - t};
      sends[t][p] = (aprt_xfer){p, aprt_box_dense(1, shape, start, size)};
      int64_t dshape[1] = {SPLIT_N * SPLIT_LEN}, dstart[1] = {p * SPLIT_LEN};
      int64_t dsize[1] = {SPLIT_LEN - me - t};
      recvs[t][p] = (aprt_xfer){p, aprt_box_dense(1, dshape, dstart, dsize)};
    }
  int group[SPLIT_N];
  for (int p = 0; p < n; p++)
    group[p] = p;
  uint64_t before = aprt_bytes_sent(c);
  aprt_status s = aprt_exchange_start(c, k->src[me][0], n, sends[0], sizeof(float), 21);
  if (!s)
    s = aprt_exchange_start(c, k->src[me][1], n, sends[1], sizeof(float), 22);
  if (!s)
    s = aprt_allreduce_sum(c, group, n, k->red[me], 17, NULL, 23);
  if (!s)
    s = aprt_exchange_finish(c, k->dst[me][1], n, recvs[1], sizeof(float), 22);
  if (!s)
    s = aprt_exchange_finish(c, k->dst[me][0], n, recvs[0], sizeof(float), 21);
  /* Ring: exchange to the next rank, received there by aprt_recv; aprt_send
   * to the previous rank, received there by aprt_exchange. */
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  int64_t shape[1] = {SPLIT_LEN}, start[1] = {1}, size[1] = {SPLIT_LEN - 2};
  aprt_xfer to_next = {next, aprt_box_dense(1, shape, start, size)};
  if (!s)
    s = aprt_exchange(c, k->src[me][0], 1, &to_next, NULL, 0, NULL, sizeof(float), 24);
  float got[SPLIT_LEN - 2];
  if (!s)
    s = aprt_recv(c, prev, 24, got, sizeof got);
  if (!s)
    s = aprt_send(c, prev, 25, got, sizeof got);
  if (!s)
    s = aprt_exchange(c, NULL, 0, NULL, k->flat[me], 1, &(aprt_xfer){next, to_next.box},
                      sizeof(float), 25);
  k->bytes[me] = aprt_bytes_sent(c) - before;
  return s;
}

Test(boxes, split_phase_exchanges_and_mixed_calls) {
  static split_case k;
  for (int world = 2; world <= SPLIT_N; world++) {
    memset(&k, 0, sizeof k);
    for (int r = 0; r < world; r++) {
      for (int t = 0; t < 2; t++)
        for (int i = 0; i < SPLIT_LEN; i++)
          k.src[r][t][i] = (float)(1000 * r + 100 * t + i);
      for (int i = 0; i < 17; i++)
        k.red[r][i] = (float)(r + i);
    }
    aprt_error err = {{0}};
    cr_assert_eq(run_threads(world, split_rank, &k, 5.0, NULL, &err), APRT_OK, "%s", err.msg);
    for (int r = 0; r < world; r++) {
      for (int t = 0; t < 2; t++)
        for (int p = 0; p < world; p++)
          for (int i = 0; i < SPLIT_LEN - r - t; i++)
            cr_assert_eq(k.dst[r][t][p * SPLIT_LEN + i], (float)(1000 * p + 100 * t + r + i),
                         "world %d rank %d tag %d from %d element %d", world, r, t, p, i);
      for (int i = 0; i < 17; i++) {
        float want = 0;
        for (int q = 0; q < world; q++)
          want += (float)(q + i);
        cr_assert_eq(k.red[r][i], want);
      }
      /* The ring brought back this rank's own elements 1..LEN-2. */
      for (int i = 1; i < SPLIT_LEN - 1; i++)
        cr_assert_eq(k.flat[r][i], k.src[r][0][i], "world %d rank %d element %d", world, r, i);
      uint64_t want = 0;
      for (int p = 0; p < world; p++)
        if (p != r)
          want += (uint64_t)(2 * SPLIT_LEN - 2 * p - 1) * sizeof(float);
      want += aprt_allreduce_bytes(world, 17, NULL, r) + 2 * (SPLIT_LEN - 2) * sizeof(float);
      cr_assert_eq(k.bytes[r], want, "world %d rank %d", world, r);
    }
  }
}

/* ---- faults: never a hang ------------------------------------------------------------- */

static int late_rank(aprt_comm *c, void *arg) {
  if (aprt_rank(c) == 2)
    sleep_s(6.0); /* arrives after the others gave up */
  return aprt_barrier(c);
}

Test(faults, barrier_timeout_names_the_missing_rank) {
  aprt_error err = {{0}};
  double t0 = now_s();
  aprt_status s = run_threads(3, late_rank, NULL, 3.0, NULL, &err);
  cr_assert_eq(s, APRT_ERR_TIMEOUT, "%s: %s", aprt_status_name(s), err.msg);
  cr_assert(strstr(err.msg, "barrier") && strstr(err.msg, "rank 2 is missing"), "%s", err.msg);
  cr_assert_lt(now_s() - t0, 15.0);
}

/* Ranks 0 and 1 wait at the barrier, rank 1 entering 0.5 s after rank 0;
 * rank 2 never comes. Rank 0 times out first and leaves. Rank 1 must still
 * count it as arrived and name rank 2: before 2026-11-28 it named rank 0
 * ("failed before arriving", or "missing" when it looked between rank 0
 * leaving and failing, which made the test above flaky). */
typedef struct staggered {
  aprt_status status[3];
  char msg[3][256];
} staggered;

static int staggered_rank(aprt_comm *c, void *arg) {
  staggered *k = arg;
  int r = aprt_rank(c);
  if (r == 2) {
    sleep_s(4.5);
    return APRT_OK; /* never arrives; returns after the others gave up */
  }
  if (r == 1)
    sleep_s(0.5);
  k->status[r] = aprt_barrier(c);
  snprintf(k->msg[r], sizeof k->msg[r], "%s", aprt_errmsg(c));
  return k->status[r];
}

Test(faults, a_rank_that_gave_up_waiting_is_not_named_missing) {
  static staggered k;
  aprt_error err = {{0}};
  aprt_status s = run_threads(3, staggered_rank, &k, 2.0, NULL, &err);
  cr_assert_neq(s, APRT_OK);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(k.status[r], APRT_ERR_TIMEOUT, "rank %d: %s: %s", r,
                 aprt_status_name(k.status[r]), k.msg[r]);
    cr_assert(strstr(k.msg[r], "rank 2 is missing"), "rank %d: %s", r, k.msg[r]);
  }
}

static int early_return_rank(aprt_comm *c, void *arg) {
  if (aprt_rank(c) == 1)
    return APRT_OK; /* never arrives */
  return aprt_barrier(c);
}

Test(faults, barrier_with_a_returned_rank_fails_at_once) {
  aprt_error err = {{0}};
  double t0 = now_s();
  aprt_status s = run_threads(3, early_return_rank, NULL, 30.0, NULL, &err);
  cr_assert_eq(s, APRT_ERR_PEER, "%s", err.msg);
  cr_assert(strstr(err.msg, "rank 1 returned"), "%s", err.msg);
  cr_assert_lt(now_s() - t0, 5.0, "waited for the timeout instead of noticing");
}

static int failing_rank(aprt_comm *c, void *arg) {
  float v[4] = {0};
  if (aprt_rank(c) == 0)
    return aprt_fail(c, APRT_ERR_MISMATCH, "bad input on purpose");
  return aprt_allreduce_sum(c, (const int[]){0, 1, 2}, 3, v, 4, NULL, 0);
}

Test(faults, a_failed_rank_releases_its_peers_and_its_error_wins) {
  aprt_error err = {{0}};
  double t0 = now_s();
  aprt_status s = run_threads(3, failing_rank, NULL, 30.0, NULL, &err);
  cr_assert_eq(s, APRT_ERR_MISMATCH, "%s", err.msg);
  cr_assert_str_eq(err.msg, "rank 0: bad input on purpose");
  cr_assert_lt(now_s() - t0, 5.0);
}

static int silent_rank(aprt_comm *c, void *arg) {
  char b[4];
  if (aprt_rank(c) == 0)
    return aprt_recv(c, 1, 5, b, sizeof b);
  sleep_s(1.0); /* alive, but never sends */
  return APRT_OK;
}

Test(faults, recv_timeout) {
  aprt_error err = {{0}};
  aprt_status s = run_threads(2, silent_rank, NULL, 0.1, NULL, &err);
  cr_assert_eq(s, APRT_ERR_TIMEOUT, "%s", err.msg);
  cr_assert(strstr(err.msg, "rank 0: recv from rank 1 tag 5"), "%s", err.msg);
}

static int size_mismatch_rank(aprt_comm *c, void *arg) {
  char b[8] = {0};
  if (aprt_rank(c) == 1)
    return aprt_send(c, 0, 3, b, 8);
  return aprt_recv(c, 1, 3, b, 4);
}

Test(faults, message_size_mismatch) {
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(2, size_mismatch_rank, NULL, 2.0, NULL, &err), APRT_ERR_MISMATCH);
  cr_assert(strstr(err.msg, "has 8 bytes, expected 4"), "%s", err.msg);
}

static int unreceived_rank(aprt_comm *c, void *arg) {
  int v = 1;
  return aprt_rank(c) == 0 ? aprt_send(c, 1, 6, &v, sizeof v) : APRT_OK;
}

Test(faults, a_message_nobody_received_fails_the_run) {
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(2, unreceived_rank, NULL, 2.0, NULL, &err), APRT_ERR_MISMATCH);
  cr_assert_str_eq(err.msg, "rank 1: 1 message was never received (the first from rank 0, "
                            "tag 6, 4 bytes)");
}

/* ---- point to point, counters, timers ------------------------------------------------- */

static int p2p_rank(aprt_comm *c, void *arg) {
  int r = aprt_rank(c), n = aprt_size(c);
  int got[3];
  /* Three messages to the next rank, same tag: order must be kept; one to
   * self, which is a copy and not counted. */
  for (int k = 0; k < 3; k++) {
    int v = r * 100 + k;
    aprt_status s = aprt_send(c, (r + 1) % n, 1, &v, sizeof v);
    if (s)
      return s;
  }
  int mine = 7, back = 0;
  aprt_send(c, r, 2, &mine, sizeof mine);
  aprt_recv(c, r, 2, &back, sizeof back);
  for (int k = 0; k < 3; k++)
    aprt_recv(c, (r + n - 1) % n, 1, &got[k], sizeof got[k]);
  int from = (r + n - 1) % n;
  for (int k = 0; k < 3; k++)
    if (got[k] != from * 100 + k)
      return aprt_fail(c, APRT_ERR_MISMATCH, "message %d out of order: %d", k, got[k]);
  if (back != 7)
    return aprt_fail(c, APRT_ERR_MISMATCH, "self message lost");
  aprt_phase_begin(c, APRT_PHASE_FORWARD);
  sleep_s(0.05);
  aprt_phase_begin(c, APRT_PHASE_COMM);
  sleep_s(0.3);
  aprt_phase_end(c);
  aprt_phase_end(c);
  return aprt_barrier(c);
}

Test(p2p, order_counters_and_exclusive_phase_times) {
  aprt_rank_stats stats[4];
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(4, p2p_rank, NULL, 5.0, stats, &err), APRT_OK, "%s", err.msg);
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(stats[r].bytes_sent, 3 * sizeof(int), "self sends are not counted");
    cr_assert_eq(stats[r].messages_sent, 3);
    /* Inclusive timing would give forward >= 0.35 s. */
    cr_assert(stats[r].phase_s[APRT_PHASE_FORWARD] >= 0.045 &&
                  stats[r].phase_s[APRT_PHASE_FORWARD] < 0.3,
              "forward %g excludes the nested comm", stats[r].phase_s[APRT_PHASE_FORWARD]);
    cr_assert_geq(stats[r].phase_s[APRT_PHASE_COMM], 0.3);
  }
  cr_assert_str_eq(aprt_phase_name(APRT_PHASE_GRADIENT), "gradient");
}

/* Rank 0 sends to rank 1 after its own part of step 0's loss, and rank 1
 * adds its part only once it has that message: were the loss a
 * synchronisation (rank 0 waiting there for rank 1's part), this would
 * deadlock. Rank 0 takes the parts one step late and the last when its
 * function returns, so no message is left unreceived. */
static int loss_after_peer(aprt_comm *c, void *unused) {
  (void)unused;
  int r = aprt_rank(c);
  for (int step = 0; step < 3; step++) {
    int token = step;
    aprt_status s = APRT_OK;
    if (r == 0) {
      s = aprt_step_loss(c, step, 1.0);
      if (!s)
        s = aprt_send(c, 1, 7, &token, sizeof token);
    } else {
      s = aprt_recv(c, 0, 7, &token, sizeof token);
      if (!s && token != step)
        return aprt_fail(c, APRT_ERR_MISMATCH, "token %d at step %d", token, step);
      if (!s)
        s = aprt_step_loss(c, step, 2.0);
    }
    if (s)
      return s;
  }
  return APRT_OK;
}

Test(p2p, the_loss_is_not_a_synchronisation_point) {
  aprt_error err = {{0}};
  cr_assert_eq(run_threads(2, loss_after_peer, NULL, 5.0, NULL, &err), APRT_OK, "%s", err.msg);
}

Test(p2p, mpi_transport_absent_from_accpar_rt_is_a_clear_error) {
  aprt_run_opts opts = {APRT_MPI, 1.0, NULL};
  aprt_error err = {{0}};
  aprt_status s = aprt_run(&opts, 2, p2p_rank, NULL, NULL, &err);
  if (aprt_have_mpi())
    cr_assert_eq(s, APRT_ERR_USAGE, "MPI is not initialised here: %s", err.msg);
  else
    cr_assert(s == APRT_ERR_USAGE && strstr(err.msg, "accpar_rt_mpi"), "%s", err.msg);
}

Test(p2p, rand_is_deterministic_and_in_range) {
  float lo = 1, hi = -1;
  double sum = 0;
  for (uint64_t i = 0; i < 10000; i++) {
    float v = aprt_rand_uniform(5, 1, i);
    cr_assert(v >= -1.0f && v < 1.0f);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    sum += v;
    cr_assert_eq(v, aprt_rand_uniform(5, 1, i));
  }
  cr_assert(lo < -0.99f && hi > 0.99f && fabs(sum / 10000) < 0.05, "%g %g %g", lo, hi, sum);
  cr_assert_neq(aprt_rand_u64(5, 1, 0), aprt_rand_u64(5, 2, 0));
  cr_assert_neq(aprt_rand_u64(5, 1, 0), aprt_rand_u64(6, 1, 0));
}

/* ---- TensorProto files ------------------------------------------------------------------ */

static char tmpdir[64];

static void make_tmpdir(void) {
  strcpy(tmpdir, "/tmp/accpar-rt-XXXXXX");
  cr_assert_not_null(mkdtemp(tmpdir));
}

static void remove_tmpdir(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (tmpdir[0] && system(cmd) != 0)
    cr_log_warn("could not remove %s", tmpdir);
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

static void write_proto(const char *path, const Onnx__TensorProto *tp) {
  size_t n = onnx__tensor_proto__get_packed_size(tp);
  uint8_t *buf = malloc(n + 1);
  onnx__tensor_proto__pack(tp, buf);
  write_bytes(path, buf, n);
  free(buf);
}

Test(tensor_io, round_trip_float_and_int64, .init = make_tmpdir, .fini = remove_tmpdir) {
  char path[128];
  snprintf(path, sizeof path, "%s/t.pb", tmpdir);
  float fv[2 * 3 * 4];
  for (int i = 0; i < 24; i++)
    fv[i] = (float)i * 0.25f - 3.0f;
  aprt_tensor t = {APRT_FLOAT, 3, {2, 3, 4}, fv}, back;
  aprt_error err = {{0}};
  cr_assert_eq(aprt_tensor_write(path, "x", &t, &err), APRT_OK, "%s", err.msg);
  cr_assert_eq(aprt_tensor_read_expect(path, APRT_FLOAT, 3, (int64_t[]){2, 3, 4}, &back, &err),
               APRT_OK, "%s", err.msg);
  cr_assert(memcmp(back.data, fv, sizeof fv) == 0);
  aprt_tensor_free(&back);
  int64_t iv[5] = {0, 9, -3, (int64_t)1 << 40, 2};
  aprt_tensor ti = {APRT_INT64, 1, {5}, iv};
  cr_assert_eq(aprt_tensor_write(path, "labels", &ti, &err), APRT_OK);
  cr_assert_eq(aprt_tensor_read(path, &back, &err), APRT_OK, "%s", err.msg);
  cr_assert_eq(back.dtype, APRT_INT64);
  cr_assert_eq(back.ndim, 1);
  cr_assert(memcmp(back.data, iv, sizeof iv) == 0);
  aprt_tensor_free(&back);
  /* A scalar. */
  float one = 1.5f;
  aprt_tensor ts = {APRT_FLOAT, 0, {0}, &one};
  cr_assert_eq(aprt_tensor_write(path, "s", &ts, &err), APRT_OK);
  cr_assert_eq(aprt_tensor_read_expect(path, APRT_FLOAT, 0, NULL, &back, &err), APRT_OK);
  cr_assert_eq(*(float *)back.data, 1.5f);
  aprt_tensor_free(&back);
  /* Nothing but the file itself is left behind. */
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  cr_assert_neq(access(tmp, F_OK), 0);
}

Test(tensor_io, typed_fields_float_data_and_int64_data, .init = make_tmpdir, .fini = remove_tmpdir) {
  char path[128];
  snprintf(path, sizeof path, "%s/typed.pb", tmpdir);
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[2] = {2, 2};
  float fd[4] = {1, 2, 3, 4};
  tp.n_dims = 2;
  tp.dims = dims;
  tp.has_data_type = 1;
  tp.data_type = 1;
  tp.n_float_data = 4;
  tp.float_data = fd;
  write_proto(path, &tp);
  aprt_tensor t;
  aprt_error err = {{0}};
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_OK, "%s", err.msg);
  cr_assert(memcmp(t.data, fd, sizeof fd) == 0);
  aprt_tensor_free(&t);
  int64_t id[4] = {5, 6, 7, 8};
  tp.data_type = 7;
  tp.n_float_data = 0;
  tp.float_data = NULL;
  tp.n_int64_data = 4;
  tp.int64_data = id;
  write_proto(path, &tp);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_OK, "%s", err.msg);
  cr_assert(memcmp(t.data, id, sizeof id) == 0);
  aprt_tensor_free(&t);
  /* Too few values for the shape. */
  tp.n_int64_data = 3;
  write_proto(path, &tp);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_ERR_FORMAT);
  cr_assert(strstr(err.msg, path) && strstr(err.msg, "int64_data has 3 values; shape [2,2] needs 4"),
            "%s", err.msg);
  /* Narrow integers travel in int32_data, one value per int32. */
  int32_t i32[4] = {0, 7, 200, 255};
  tp.data_type = 2; /* uint8 */
  tp.n_int64_data = 0;
  tp.int64_data = NULL;
  tp.n_int32_data = 4;
  tp.int32_data = i32;
  write_proto(path, &tp);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_OK, "%s", err.msg);
  cr_assert_eq(t.dtype, APRT_UINT8);
  cr_assert(memcmp(t.data, (uint8_t[]){0, 7, 200, 255}, 4) == 0);
  aprt_tensor_free(&t);
  /* uint64 travels in uint64_data, beyond int64's range. */
  uint64_t u64[4] = {1, 2, UINT64_MAX, 1ull << 63};
  tp.data_type = 13;
  tp.n_int32_data = 0;
  tp.int32_data = NULL;
  tp.n_uint64_data = 4;
  tp.uint64_data = u64;
  write_proto(path, &tp);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_OK, "%s", err.msg);
  cr_assert(memcmp(t.data, u64, sizeof u64) == 0);
  aprt_tensor_free(&t);
  /* An unsupported type names the file and the type. */
  tp.data_type = 8; /* string */
  tp.n_uint64_data = 0;
  tp.uint64_data = NULL;
  write_proto(path, &tp);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_ERR_MISMATCH);
  cr_assert(strstr(err.msg, path) && strstr(err.msg, "string"), "%s", err.msg);
}

Test(tensor_io, mnist_input_and_clear_errors, .init = make_tmpdir, .fini = remove_tmpdir) {
  aprt_tensor t;
  aprt_error err = {{0}};
  cr_assert_eq(aprt_tensor_read_expect(MNIST_INPUT, APRT_FLOAT, 4, (int64_t[]){1, 1, 28, 28},
                                       &t, &err),
               APRT_OK, "%s", err.msg);
  cr_assert_eq(aprt_tensor_volume(&t), 784);
  float lo = INFINITY, hi = -INFINITY;
  for (int i = 0; i < 784; i++) {
    float v = ((float *)t.data)[i];
    cr_assert(isfinite(v));
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  cr_assert(hi > lo, "an image, not a constant");
  aprt_tensor_free(&t);

  cr_assert_eq(aprt_tensor_read_expect(MNIST_INPUT, APRT_FLOAT, 2, (int64_t[]){1, 784}, &t, &err),
               APRT_ERR_MISMATCH);
  cr_assert(strstr(err.msg, MNIST_INPUT ": expected float32 [1,784], got float32 [1,1,28,28]"),
            "%s", err.msg);
  cr_assert_null(t.data);
  cr_assert_eq(aprt_tensor_read_expect(MNIST_INPUT, APRT_INT64, 4, (int64_t[]){1, 1, 28, 28},
                                       &t, &err),
               APRT_ERR_MISMATCH);
  cr_assert(strstr(err.msg, "expected int64 [1,1,28,28], got float32"), "%s", err.msg);

  char path[128];
  snprintf(path, sizeof path, "%s/missing.pb", tmpdir);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_ERR_IO);
  cr_assert(strstr(err.msg, path) && strstr(err.msg, "No such file"), "%s", err.msg);

  snprintf(path, sizeof path, "%s/garbage.pb", tmpdir);
  write_bytes(path, "\xff\xff\xff\xff\xff", 5);
  cr_assert_eq(aprt_tensor_read(path, &t, &err), APRT_ERR_FORMAT);
  cr_assert(strstr(err.msg, "not a TensorProto"), "%s", err.msg);
  cr_assert_null(strchr(err.msg, '\n'));
}

/* ---- the executable skeleton (runtime/selftest.c on aprt_main) --------------------------- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return strdup(buf);
}

/* Runs a shell command with stdout and stderr captured; returns the exit
 * status. */
static int run_cmd(const char *cmd, char **out, char **errtext) {
  char full[2048], outp[128], errp[128];
  snprintf(outp, sizeof outp, "%s/stdout", tmpdir);
  snprintf(errp, sizeof errp, "%s/stderr", tmpdir);
  snprintf(full, sizeof full, "%s >%s 2>%s", cmd, outp, errp);
  int st = system(full);
  *out = slurp(outp);
  *errtext = slurp(errp);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Writes the selftest's inputs: x [6,4] and labels [6] in [0,5). */
static void write_selftest_inputs(const char *dir, int64_t bad_label) {
  float x[24];
  for (int i = 0; i < 24; i++)
    x[i] = (float)i / 3.0f;
  int64_t labels[6] = {1, 2, 3, 4, 0, 1};
  if (bad_label >= 0)
    labels[5] = bad_label;
  aprt_tensor tx = {APRT_FLOAT, 2, {6, 4}, x}, tl = {APRT_INT64, 1, {6}, labels};
  char path[160];
  aprt_error err = {{0}};
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/input_0.pb", dir);
  cr_assert_eq(aprt_tensor_write(path, "x", &tx, &err), APRT_OK);
  snprintf(path, sizeof path, "%s/input_1.pb", dir);
  cr_assert_eq(aprt_tensor_write(path, "labels", &tl, &err), APRT_OK);
}

/* The integers of a one-line JSON array under key. */
static int json_ints(const char *json, const char *key, long long *v, int max) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": [", key);
  const char *p = strstr(json, pat);
  if (!p)
    return -1;
  p += strlen(pat);
  int n = 0;
  while (*p && *p != ']' && n < max) {
    char *end;
    v[n++] = strtoll(p, &end, 10);
    p = end;
    while (*p == ',' || *p == ' ')
      p++;
  }
  return n;
}

/* The numbers of a one-line JSON array under key. */
static int json_doubles(const char *json, const char *key, double *v, int max) {
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\": [", key);
  const char *p = strstr(json, pat);
  if (!p)
    return -1;
  p += strlen(pat);
  int n = 0;
  while (*p && *p != ']' && n < max) {
    char *end;
    v[n++] = strtod(p, &end);
    if (end == p)
      return -1;
    p = end;
    while (*p == ',' || *p == ' ')
      p++;
  }
  return n;
}

/* Checks a successful 3-step run: losses, output == input, report. */
static void check_selftest_run(const char *transport, const char *out) {
  /* Step s loss = sum of all labels (11) + 3 ranks * s. */
  cr_assert(strstr(out, "step 1 loss 11.000000\nstep 2 loss 14.000000\nstep 3 loss 17.000000\n"),
            "%s: stdout: %s", transport, out);
  char path[160];
  snprintf(path, sizeof path, "%s/out/output_0.pb", tmpdir);
  aprt_tensor y;
  aprt_error err = {{0}};
  cr_assert_eq(aprt_tensor_read_expect(path, APRT_FLOAT, 2, (int64_t[]){6, 4}, &y, &err), APRT_OK,
               "%s", err.msg);
  for (int i = 0; i < 24; i++)
    cr_assert_eq(((float *)y.data)[i], (float)i / 3.0f, "%s: element %d", transport, i);
  aprt_tensor_free(&y);
  snprintf(path, sizeof path, "%s/report.json", tmpdir);
  char *json = slurp(path);
  cr_assert_not_null(json);
  long long sent[8], predicted[8];
  cr_assert_eq(json_ints(json, "bytes_sent", sent, 8), 3, "%s", json);
  cr_assert_eq(json_ints(json, "predicted_bytes", predicted, 8), 3);
  /* Per step: all-gather of 4/8/12 floats to 2 peers + all-reduce of 10
   * floats with shares 4,3,3: measured equals predicted equals formulas. */
  const int64_t counts[3] = {4, 8, 12};
  for (int r = 0; r < 3; r++) {
    long long formula = 3 * (long long)(aprt_allgather_bytes(3, counts, r, 4) +
                                        aprt_allreduce_bytes(3, 10, NULL, r));
    cr_assert_eq(sent[r], formula, "%s rank %d", transport, r);
    cr_assert_eq(predicted[r], formula, "%s rank %d", transport, r);
  }
  char want[64];
  snprintf(want, sizeof want, "\"transport\": \"%s\"", transport);
  cr_assert(strstr(json, want), "%s", json);
  cr_assert(strstr(json, "\"devices\": 3"));
  cr_assert(strstr(json, "\"steps\": 3"));
  cr_assert(strstr(json, "\"losses\": [11, 14, 17]"), "%s", json);
  double steps[8];
  cr_assert_eq(json_doubles(json, "step_time_s", steps, 8), 2, "%s", json);
  cr_assert(steps[0] >= 0 && steps[1] >= 0 && steps[0] < 30 && steps[1] < 30, "%s", json);
  cr_assert(strstr(json, "\"phase_time_s\": {") && strstr(json, "\"comm\": ["), "%s", json);
  free(json);
}

Test(executable, threads_run_writes_outputs_losses_and_report, .init = make_tmpdir, .fini = remove_tmpdir) {
  char in[128], cmd[1024];
  snprintf(in, sizeof in, "%s/in", tmpdir);
  write_selftest_inputs(in, -1);
  snprintf(cmd, sizeof cmd, "%s --steps 3 --lr 0.5 --seed 3 --inputs %s --outputs %s/out --report %s/report.json",
           SELFTEST, in, tmpdir, tmpdir);
  char outd[160];
  snprintf(outd, sizeof outd, "%s/out", tmpdir);
  mkdir(outd, 0755);
  char *out, *errt;
  int st = run_cmd(cmd, &out, &errt);
  cr_assert_eq(st, 0, "stderr: %s", errt);
  check_selftest_run("threads", out);
  free(out);
  free(errt);
}

Test(executable, wrong_or_missing_inputs_are_one_line_errors, .init = make_tmpdir, .fini = remove_tmpdir) {
  char in[128], cmd[1024];
  char *out, *errt;
  snprintf(in, sizeof in, "%s/in", tmpdir);
  write_selftest_inputs(in, 9);
  snprintf(cmd, sizeof cmd, "%s --inputs %s --report %s/r.json", SELFTEST, in, tmpdir);
  cr_assert_neq(run_cmd(cmd, &out, &errt), 0);
  cr_assert(strstr(errt, "rt-selftest: ") && strstr(errt, "/in/input_1.pb: element 5 of 'labels' is 9; it must be in [0, 5) (a label, or an index into a table of that many rows)"),
            "%s", errt);
  cr_assert_eq(strchr(errt, '\n'), errt + strlen(errt) - 1, "one line: %s", errt);
  free(out);
  free(errt);
  char r[160];
  snprintf(r, sizeof r, "%s/r.json", tmpdir);
  cr_assert_neq(access(r, F_OK), 0, "no report after a failed run");

  snprintf(in, sizeof in, "%s/in/input_1.pb", tmpdir);
  remove(in);
  snprintf(cmd, sizeof cmd, "%s --inputs %s/in", SELFTEST, tmpdir);
  cr_assert_neq(run_cmd(cmd, &out, &errt), 0);
  cr_assert(strstr(errt, "/in/input_1.pb: cannot open: No such file or directory"), "%s", errt);
  free(out);
  free(errt);

  /* --outputs makes its folder, parents included... */
  snprintf(in, sizeof in, "%s/in", tmpdir);
  write_selftest_inputs(in, -1);
  snprintf(cmd, sizeof cmd, "%s --inputs %s --outputs %s/new/deeper", SELFTEST, in, tmpdir);
  cr_assert_eq(run_cmd(cmd, &out, &errt), 0, "%s", errt);
  free(out);
  free(errt);
  snprintf(r, sizeof r, "%s/new/deeper", tmpdir);
  struct stat st;
  cr_assert(stat(r, &st) == 0 && S_ISDIR(st.st_mode), "--outputs did not create %s", r);
  /* ...and refuses, in one line and before running, a path through a file. */
  snprintf(cmd, sizeof cmd, "%s --outputs %s/r.json.d/x", SELFTEST, tmpdir);
  snprintf(r, sizeof r, "%s/r.json.d", tmpdir);
  FILE *blocker = fopen(r, "w");
  cr_assert(blocker);
  fclose(blocker);
  cr_assert_eq(run_cmd(cmd, &out, &errt), 1);
  cr_assert(strstr(errt, "/r.json.d/x: ") && strstr(errt, "/r.json.d is not a directory"), "%s",
            errt);
  cr_assert_eq(strchr(errt, '\n'), errt + strlen(errt) - 1, "one line: %s", errt);
  cr_assert_str_eq(out, "", "failed before running");
  free(out);
  free(errt);

  snprintf(cmd, sizeof cmd, "%s --steps zero", SELFTEST);
  cr_assert_eq(run_cmd(cmd, &out, &errt), 2);
  cr_assert(strstr(errt, "--steps: 'zero' is not a positive integer"), "%s", errt);
  free(out);
  free(errt);
  snprintf(cmd, sizeof cmd, "%s --bogus", SELFTEST);
  cr_assert_eq(run_cmd(cmd, &out, &errt), 2);
  cr_assert(strstr(errt, "unknown option '--bogus'"), "%s", errt);
  free(out);
  free(errt);
}

Test(executable, training_without_inputs_uses_the_seed, .init = make_tmpdir, .fini = remove_tmpdir) {
  char cmd[512];
  char *a, *b, *c, *errt;
  snprintf(cmd, sizeof cmd, "%s --steps 2 --seed 11", SELFTEST);
  cr_assert_eq(run_cmd(cmd, &a, &errt), 0, "%s", errt);
  free(errt);
  cr_assert_eq(run_cmd(cmd, &b, &errt), 0, "%s", errt);
  free(errt);
  snprintf(cmd, sizeof cmd, "%s --steps 2 --seed 12", SELFTEST);
  cr_assert_eq(run_cmd(cmd, &c, &errt), 0, "%s", errt);
  free(errt);
  cr_assert(strstr(a, "step 2 loss"), "%s", a);
  cr_assert_str_eq(a, b, "same seed, same losses");
  cr_assert_str_neq(a, c, "another seed, other labels");
  free(a);
  free(b);
  free(c);
}

Test(executable, a_failing_rank_ends_the_run_with_its_message, .init = make_tmpdir, .fini = remove_tmpdir) {
  char cmd[512];
  char *out, *errt;
  snprintf(cmd, sizeof cmd, "APRT_SELFTEST_FAIL_RANK=2 ACCPAR_TIMEOUT_S=30 %s --steps 3", SELFTEST);
  double t0 = now_s();
  cr_assert_eq(run_cmd(cmd, &out, &errt), 1);
  cr_assert_lt(now_s() - t0, 10.0);
  cr_assert_str_eq(errt, "rt-selftest: rank 2: failing on purpose at step 2\n");
  free(out);
  free(errt);
}

/* The inference selftest run with `extra` options (under `launcher`):
 * output_0 = input_0, output_1 = the runs rank 0 did, and the report's runs,
 * times and bytes for `timed` timed runs. */
static void check_infer_run(const char *launcher, const char *transport, const char *extra,
                            long long runs_done, int timed) {
  char in[128], cmd[1024], outd[160];
  snprintf(in, sizeof in, "%s/in", tmpdir);
  write_selftest_inputs(in, -1);
  snprintf(outd, sizeof outd, "%s/out", tmpdir);
  mkdir(outd, 0755);
  snprintf(cmd, sizeof cmd,
           "APRT_SELFTEST_INFER=1 %s%s --transport %s %s --inputs %s --outputs %s "
           "--report %s/report.json",
           launcher, SELFTEST, transport, extra, in, outd, tmpdir);
  char *out, *errt;
  cr_assert_eq(run_cmd(cmd, &out, &errt), 0, "%s: %s", cmd, errt);
  cr_assert_str_eq(out, "", "inference prints no losses");
  free(out);
  free(errt);
  char path[200];
  aprt_tensor y, runs;
  aprt_error err = {{0}};
  snprintf(path, sizeof path, "%s/output_0.pb", outd);
  cr_assert_eq(aprt_tensor_read_expect(path, APRT_FLOAT, 2, (int64_t[]){6, 4}, &y, &err), APRT_OK,
               "%s", err.msg);
  for (int i = 0; i < 24; i++)
    cr_assert_eq(((float *)y.data)[i], (float)i / 3.0f, "%s: element %d", transport, i);
  snprintf(path, sizeof path, "%s/output_1.pb", outd);
  cr_assert_eq(aprt_tensor_read_expect(path, APRT_INT64, 1, (int64_t[]){1}, &runs, &err), APRT_OK,
               "%s", err.msg);
  cr_assert_eq(*(int64_t *)runs.data, runs_done, "%s %s: runs", transport, extra);
  aprt_tensor_free(&y);
  aprt_tensor_free(&runs);

  snprintf(path, sizeof path, "%s/report.json", tmpdir);
  char *json = slurp(path);
  cr_assert_not_null(json);
  char want[64];
  snprintf(want, sizeof want, "\"runs\": %d", timed);
  cr_assert(strstr(json, want), "%s", json);
  cr_assert(strstr(json, "\"mode\": \"infer\""), "%s", json);
  double t[16];
  cr_assert_eq(json_doubles(json, "run_time_s", t, 16), timed, "%s", json);
  for (int i = 0; i < timed; i++)
    cr_assert(t[i] > 0 && t[i] < 30, "run %d took %g s", i, t[i]);
  cr_assert(strstr(json, runs_done > timed ? "\"warmup_s\": 0" : "\"warmup_s\": null"), "%s",
            json);
  double cpu[8];
  cr_assert_eq(json_doubles(json, "cpu_time_s", cpu, 8), 3, "%s", json);
  for (int r = 0; r < 3; r++)
    cr_assert(cpu[r] >= 0 && cpu[r] < 30, "rank %d: %g s of CPU", r, cpu[r]);
  /* The warm-up's bytes are dropped: timed runs x one step's formula. */
  long long sent[8], predicted[8];
  cr_assert_eq(json_ints(json, "bytes_sent", sent, 8), 3, "%s", json);
  cr_assert_eq(json_ints(json, "predicted_bytes", predicted, 8), 3);
  const int64_t counts[3] = {4, 8, 12};
  for (int r = 0; r < 3; r++) {
    long long formula = timed * (long long)(aprt_allgather_bytes(3, counts, r, 4) +
                                            aprt_allreduce_bytes(3, 10, NULL, r));
    cr_assert_eq(sent[r], formula, "%s rank %d", transport, r);
    cr_assert_eq(predicted[r], formula, "%s rank %d", transport, r);
  }
  free(json);
}

Test(executable, repeat_warms_up_then_times_n_runs_on_kept_buffers, .init = make_tmpdir,
     .fini = remove_tmpdir) {
  check_infer_run("", "threads", "", 1, 1);
  check_infer_run("", "threads", "--repeat 5", 6, 5);
  /* --steps means nothing to an inference program. */
  check_infer_run("", "threads", "--repeat 2 --steps 3", 3, 2);
}

Test(executable, repeat_is_refused_for_training_and_must_be_positive, .init = make_tmpdir,
     .fini = remove_tmpdir) {
  char cmd[512], *out, *errt;
  snprintf(cmd, sizeof cmd, "%s --repeat 3", SELFTEST);
  cr_assert_eq(run_cmd(cmd, &out, &errt), 2);
  cr_assert_str_eq(errt, "rt-selftest: --repeat is for inference programs; a training program "
                         "runs --steps steps\n");
  free(out);
  free(errt);
  snprintf(cmd, sizeof cmd, "APRT_SELFTEST_INFER=1 %s --repeat 0", SELFTEST);
  cr_assert_eq(run_cmd(cmd, &out, &errt), 2);
  cr_assert(strstr(errt, "--repeat: '0' is not a positive integer"), "%s", errt);
  free(out);
  free(errt);
}

/* MPI: the same program under mpirun -np 3, when mpirun exists and the
 * selftest was linked with accpar_rt_mpi. */
static bool mpi_available(void) {
  if (system("command -v mpirun >/dev/null 2>&1") != 0)
    return false;
  char cmd[512], *out, *errt;
  snprintf(cmd, sizeof cmd, "%s --transport mpi", SELFTEST);
  run_cmd(cmd, &out, &errt);
  bool linked = errt && !strstr(errt, "no MPI transport");
  free(out);
  free(errt);
  return linked;
}

/* OpenMPI's own start-up allocations are never freed; under
 * ACCPAR_SANITIZE they would fail the ranks' exit, so leak checking (only)
 * is off for MPI runs. The threads runs of the same code keep it. */
#define MPIRUN "ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 3 "

Test(executable, mpi_run_matches_threads, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 60) {
  if (!mpi_available())
    cr_skip_test("mpirun or accpar_rt_mpi not available");
  char in[128], cmd[1024], outd[160];
  snprintf(in, sizeof in, "%s/in", tmpdir);
  write_selftest_inputs(in, -1);
  snprintf(outd, sizeof outd, "%s/out", tmpdir);
  mkdir(outd, 0755);
  snprintf(cmd, sizeof cmd,
           MPIRUN "%s --transport mpi --steps 3 --inputs %s --outputs %s --report %s/report.json",
           SELFTEST, in, outd, tmpdir);
  char *out, *errt;
  int st = run_cmd(cmd, &out, &errt);
  cr_assert_eq(st, 0, "stderr: %s", errt);
  check_selftest_run("mpi", out);
  free(out);
  free(errt);

  snprintf(cmd, sizeof cmd,
           "APRT_SELFTEST_FAIL_RANK=1 ACCPAR_TIMEOUT_S=30 " MPIRUN "%s --transport mpi --steps 3",
           SELFTEST);
  double t0 = now_s();
  cr_assert_neq(run_cmd(cmd, &out, &errt), 0);
  cr_assert_lt(now_s() - t0, 20.0, "a fault under MPI must not wait for the timeout");
  cr_assert(strstr(errt, "rt-selftest: rank 1: failing on purpose at step 2"), "%s", errt);
  free(out);
  free(errt);
  check_infer_run(MPIRUN, "mpi", "--repeat 3", 4, 3);
}
