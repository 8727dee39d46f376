/* Collectives over groups with uneven shares, and the box exchange. Every
 * algorithm is direct (each member sends straight to the member that needs
 * the data), so the bytes a member sends are the closed formulas of
 * accpar_rt.h: the planner predicts them without simulating a schedule.
 * Sends are eager, so "all sends, then all receives" cannot deadlock. Where
 * the transport can lend (threads), a send queues the box of the caller's
 * memory itself and the receiver unpacks, adds or copies straight out of it;
 * the caller settles its loans before it writes what it lent, and before it
 * returns. Otherwise (MPI) boxes are packed and sent, and received messages
 * are read where the transport delivered them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

/* Checks the group and returns the caller's member index, or -1 after
 * recording the error. */
static int group_index(aprt_comm *c, const char *what, const int *group, int n,
                       const int64_t *counts) {
  if (c->status != APRT_OK)
    return -1;
  if (n < 1 || !group) {
    aprt_fail(c, APRT_ERR_USAGE, "%s: empty group", what);
    return -1;
  }
  int self = -1;
  for (int i = 0; i < n; i++) {
    if (group[i] < 0 || group[i] >= c->size) {
      aprt_fail(c, APRT_ERR_USAGE, "%s: group member %d is rank %d, not a rank of %d", what,
                i, group[i], c->size);
      return -1;
    }
    for (int j = 0; j < i; j++)
      if (group[j] == group[i]) {
        aprt_fail(c, APRT_ERR_USAGE, "%s: rank %d appears twice in the group", what,
                  group[i]);
        return -1;
      }
    if (counts && counts[i] < 0) {
      aprt_fail(c, APRT_ERR_USAGE, "%s: member %d has a negative count %lld", what, i,
                (long long)counts[i]);
      return -1;
    }
    if (group[i] == c->rank)
      self = i;
  }
  if (self < 0)
    aprt_fail(c, APRT_ERR_USAGE, "%s: rank %d is not in its group", what, c->rank);
  return self;
}

/* ---- moving boxes --------------------------------------------------------- */

/* Contiguous runs of a box of base, in the box's row-major order. */
typedef struct run_walk {
  const aprt_box *b;
  unsigned char *base;
  size_t es;
  int64_t idx[APRT_MAX_RANK];
  int64_t left;   /* elements of the box not yet walked */
} run_walk;

static void walk_init(run_walk *w, const aprt_box *b, const void *base, size_t es) {
  memset(w, 0, sizeof *w);
  w->b = b;
  w->base = (unsigned char *)(uintptr_t)base;
  w->es = es;
  w->left = aprt_box_volume(b);
}

/* The next run: its start, and its length in bytes (0 at the end). */
static size_t walk_next(run_walk *w, unsigned char **at) {
  const aprt_box *b = w->b;
  if (w->left <= 0)
    return 0;
  int64_t off = b->offset;
  for (int d = 0; d < b->ndim; d++)
    off += w->idx[d] * b->stride[d];
  *at = w->base + (size_t)off * w->es;
  int last = b->ndim - 1;
  int64_t n = 1;
  if (last >= 0 && b->stride[last] == 1) {
    n = b->size[last] - w->idx[last];
    w->idx[last] = b->size[last] - 1;
  }
  w->left -= n;
  int d = last;
  while (d >= 0 && ++w->idx[d] == b->size[d])
    w->idx[d--] = 0;
  return (size_t)n * w->es;
}

/* Copies the box sbox of src (row-major order) into the box dbox of dst:
 * one copy between two strided layouts of the same bytes. */
static void box_copy(void *dst, const aprt_box *dbox, size_t des, const void *src,
                     const aprt_box *sbox, size_t ses) {
  run_walk d, r;
  walk_init(&d, dbox, dst, des);
  walk_init(&r, sbox, src, ses);
  unsigned char *dp = NULL, *sp = NULL;
  size_t dn = 0, sn = 0;
  for (;;) {
    if (dn == 0 && (dn = walk_next(&d, &dp)) == 0)
      return;
    if (sn == 0 && (sn = walk_next(&r, &sp)) == 0)
      return;
    size_t n = dn < sn ? dn : sn;
    memcpy(dp, sp, n);
    dp += n, sp += n, dn -= n, sn -= n;
  }
}

/* Adds a received float32 message to acc[0..count). */
static void view_add(const aprt_view *v, float *acc, size_t count) {
  if (v->flat) {
    const float *p = (const float *)(const void *)v->flat;
    for (size_t e = 0; e < count; e++)
      acc[e] += p[e];
    return;
  }
  run_walk r;
  walk_init(&r, &v->box, v->base, v->elem_size);
  unsigned char *sp;
  size_t n;
  while ((n = walk_next(&r, &sp)) > 0) {
    const float *p = (const float *)(const void *)sp;
    for (size_t e = 0; e < n / sizeof(float); e++)
      acc[e] += p[e];
    acc += n / sizeof(float);
  }
}

/* Copies a received message into the box dbox of dst. */
static void view_unpack(const aprt_view *v, void *dst, const aprt_box *dbox, size_t es) {
  if (v->flat)
    aprt_box_unpack(dst, dbox, v->flat, es);
  else
    box_copy(dst, dbox, es, v->base, &v->box, v->elem_size);
}

static aprt_box flat_box(int64_t offset, int64_t count) {
  aprt_box b;
  memset(&b, 0, sizeof b);
  b.ndim = 1;
  b.offset = offset;
  b.size[0] = count;
  b.stride[0] = 1;
  return b;
}

/* Below this many bytes a send is copied even where the transport could
 * lend: the copy is cheaper than waiting, when settling, for the receiver
 * to finish copying it out. */
enum { LEND_MIN_BYTES = 16384 };

/* Sends box of src to peer, counted as aprt_send counts: lent where the
 * transport can and the box is large, else packed into scratch (volume * es
 * bytes) and sent. */
static aprt_status post_box(aprt_comm *c, int peer, int tag, const void *src, const aprt_box *box,
                           size_t es, unsigned char *scratch) {
  size_t bytes = (size_t)aprt_box_volume(box) * es;
  if (!c->tp->lend || bytes < LEND_MIN_BYTES) {
    aprt_box_pack(scratch, src, box, es);
    return aprt_send(c, peer, tag, scratch, bytes);
  }
  if (c->status != APRT_OK)
    return c->status;
  if (tag < 0 || tag > APRT_TAG_MAX)
    return aprt_fail(c, APRT_ERR_USAGE, "send: tag %d outside 0..%d", tag, APRT_TAG_MAX);
  aprt_status s = c->tp->lend(c, peer, tag, src, box, es);
  if (s == APRT_OK && peer != c->rank) {
    c->bytes_sent += bytes;
    c->messages_sent++;
  }
  return s;
}

static aprt_status take(aprt_comm *c, int peer, int tag, size_t bytes, aprt_view *v) {
  if (c->status != APRT_OK)
    return c->status;
  if (tag < 0 || tag > APRT_TAG_MAX)
    return aprt_fail(c, APRT_ERR_USAGE, "recv: tag %d outside 0..%d", tag, APRT_TAG_MAX);
  return c->tp->recv_view(c, peer, tag, bytes, v);
}

static void settle(aprt_comm *c) {
  if (c->tp->settle)
    c->tp->settle(c);
}

/* Packing space for boxes of up to bytes that are sent as copies: the
 * rank's scratch (see post_box). */
static unsigned char *pack_scratch(aprt_comm *c, size_t bytes) {
  if (c->tp->lend && bytes > LEND_MIN_BYTES)
    bytes = LEND_MIN_BYTES; /* larger ones are lent */
  return aprt_comm_scratch(c, bytes);
}

static aprt_status allgather_body(aprt_comm *c, const int *group, int n, int self,
                                  unsigned char *buf, const int64_t *counts, size_t es,
                                  int tag) {
  int64_t own = 0;
  for (int k = 0; k < self; k++)
    own += counts[k];
  aprt_box mine = flat_box(own, counts[self]);
  aprt_status s = APRT_OK;
  unsigned char *scratch = counts[self] > 0 && n > 1 ? pack_scratch(c, (size_t)counts[self] * es) : NULL;
  if (counts[self] > 0 && n > 1 && !scratch)
    return c->status;
  for (int k = 0; k < n && !s; k++)
    if (k != self && counts[self] > 0)
      s = post_box(c, group[k], tag, buf, &mine, es, scratch);
  int64_t off = 0;
  for (int k = 0; k < n && !s; off += counts[k], k++)
    if (k != self && counts[k] > 0) {
      aprt_view v;
      s = take(c, group[k], tag, (size_t)counts[k] * es, &v);
      if (s)
        break;
      aprt_box theirs = flat_box(off, counts[k]);
      view_unpack(&v, buf, &theirs, es);
      c->tp->release(c, &v);
    }
  settle(c);
  return s ? s : c->status;
}

aprt_status aprt_allgather(aprt_comm *c, const int *group, int n, void *buf,
                           const int64_t *counts, size_t elem_size, int tag) {
  int self = group_index(c, "all-gather", group, n, counts);
  if (self < 0)
    return c->status;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  aprt_status s = allgather_body(c, group, n, self, buf, counts, elem_size, tag);
  aprt_phase_end(c);
  return s;
}

static aprt_status reduce_scatter_body(aprt_comm *c, const int *group, int n, int self,
                                       float *buf, const int64_t *counts, int tag) {
  aprt_status s = APRT_OK;
  int64_t off = 0, own = 0, most = 0;
  for (int k = 0; k < n; k++)
    most = k != self && counts[k] > most ? counts[k] : most;
  for (int k = 0; k < self; k++)
    own += counts[k];
  size_t m = (size_t)counts[self];
  /* Members 0 and 1 sum in place: (x0 + x1) is (x1 + x0), so starting from
   * their own summand keeps the member order; later members need the sum of
   * the earlier ones first, in scratch after the packing space. */
  size_t pack = most > 0 ? (size_t)most * sizeof(float) : 0;
  if (c->tp->lend)
    pack = pack < LEND_MIN_BYTES ? pack : LEND_MIN_BYTES;
  pack = (pack + 63) / 64 * 64;
  size_t need = pack + (self >= 2 ? m * sizeof(float) : 0);
  unsigned char *scratch = need ? aprt_comm_scratch(c, need) : NULL;
  if (need && !scratch)
    return c->status;
  for (int k = 0; k < n && !s; off += counts[k], k++)
    if (k != self && counts[k] > 0) {
      aprt_box seg = flat_box(off, counts[k]);
      s = post_box(c, group[k], tag, buf, &seg, sizeof(float), scratch);
    }
  if (s || m == 0 || n == 1) {
    settle(c);
    return s ? s : c->status;
  }
  /* Summing in member order, whoever arrives first, makes the result the
   * same on every run and equal to a serial sum in that order. The own
   * segment is not lent, so it can be written before settling. */
  float *acc = self >= 2 ? (float *)(void *)(scratch + pack) : buf + own;
  for (int k = 0; k < n && !s; k++) {
    if (k == self) {
      if (self >= 2)
        for (size_t e = 0; e < m; e++)
          acc[e] += buf[own + (int64_t)e];
      continue;
    }
    aprt_view v;
    s = take(c, group[k], tag, m * sizeof(float), &v);
    if (s)
      break;
    if (k == 0 && self >= 2) {
      aprt_box whole = flat_box(0, (int64_t)m);
      view_unpack(&v, acc, &whole, sizeof(float));
    } else {
      view_add(&v, acc, m);
    }
    c->tp->release(c, &v);
  }
  if (!s && self >= 2)
    memcpy(buf + own, acc, m * sizeof *acc);
  settle(c);
  return s ? s : c->status;
}

aprt_status aprt_reduce_scatter_sum(aprt_comm *c, const int *group, int n, float *buf,
                                    const int64_t *counts, int tag) {
  int self = group_index(c, "reduce-scatter", group, n, counts);
  if (self < 0)
    return c->status;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  aprt_status s = reduce_scatter_body(c, group, n, self, buf, counts, tag);
  aprt_phase_end(c);
  return s;
}

/* Up to LEND_MIN_BYTES, an all-reduce of two members is one hand-over:
 * each sends the other its whole buffer and adds what it receives. That is
 * what the two-phase algorithm sends in bytes (4 · count each, whatever the
 * shares), and x0 + x1 is x1 + x0 bitwise, so the sum is the same; a member
 * waits for one message instead of two in a row, and copies and adds every
 * element rather than its share. bench-comm, polling waits: 0.8 against
 * 1.3 us at 1 KB, 3.9 against 4.4 us at 16 KB, 6.9 against 6.2 us at 32 KB;
 * blocking waits: 15-19 against 26-31 us up to 16 KB. */
enum { PAIR_ALLREDUCE_MAX_BYTES = LEND_MIN_BYTES };

/* Checks an all-reduce's arguments; its member index, or -1 after failing. */
static int allreduce_check(aprt_comm *c, const int *group, int n, int64_t count,
                           const int64_t *shares) {
  int self = group_index(c, "all-reduce", group, n, shares);
  if (self < 0)
    return -1;
  if (count < 0) {
    aprt_fail(c, APRT_ERR_USAGE, "all-reduce: negative count %lld", (long long)count);
    return -1;
  }
  if (shares) {
    int64_t total = 0;
    for (int i = 0; i < n; i++)
      total += shares[i];
    if (total != count) {
      aprt_fail(c, APRT_ERR_USAGE, "all-reduce: shares add up to %lld, not %lld elements",
                (long long)total, (long long)count);
      return -1;
    }
  }
  return self;
}

static bool allreduce_is_pair(int n, int64_t count) {
  return n == 2 && count > 0 && (size_t)count * sizeof(float) <= PAIR_ALLREDUCE_MAX_BYTES;
}

aprt_status aprt_allreduce_start(aprt_comm *c, const int *group, int n, float *buf,
                                 int64_t count, const int64_t *shares, int tag) {
  int self = allreduce_check(c, group, n, count, shares);
  if (self < 0)
    return c->status;
  if (!allreduce_is_pair(n, count))
    return APRT_OK;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  aprt_status s = aprt_send(c, group[1 - self], tag, buf, (size_t)count * sizeof(float));
  aprt_phase_end(c);
  return s;
}

aprt_status aprt_allreduce_finish(aprt_comm *c, const int *group, int n, float *buf,
                                  int64_t count, const int64_t *shares, int tag) {
  int self = allreduce_check(c, group, n, count, shares);
  if (self < 0)
    return c->status;
  aprt_status s = APRT_OK;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  if (allreduce_is_pair(n, count)) {
    aprt_view v;
    s = take(c, group[1 - self], tag, (size_t)count * sizeof(float), &v);
    if (!s) {
      view_add(&v, buf, (size_t)count);
      c->tp->release(c, &v);
      s = c->status;
    }
  } else {
    int64_t *even = NULL;
    if (!shares) {
      even = malloc((size_t)n * sizeof *even);
      if (!even)
        s = aprt_fail(c, APRT_ERR_NOMEM, "all-reduce: out of memory");
      for (int i = 0; even && i < n; i++)
        even[i] = aprt_even_share(count, n, i);
      shares = even;
    }
    if (!s)
      s = reduce_scatter_body(c, group, n, self, buf, shares, tag);
    if (!s)
      s = allgather_body(c, group, n, self, (unsigned char *)buf, shares, sizeof(float), tag);
    free(even);
  }
  aprt_phase_end(c);
  return s;
}

aprt_status aprt_allreduce_sum(aprt_comm *c, const int *group, int n, float *buf,
                               int64_t count, const int64_t *shares, int tag) {
  aprt_status s = aprt_allreduce_start(c, group, n, buf, count, shares, tag);
  return s ? s : aprt_allreduce_finish(c, group, n, buf, count, shares, tag);
}

/* ---- boxes ------------------------------------------------------------------ */

aprt_box aprt_box_dense(int ndim, const int64_t *shape, const int64_t *start,
                        const int64_t *size) {
  aprt_box b;
  memset(&b, 0, sizeof b);
  b.ndim = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    b.size[d] = size[d];
    b.stride[d] = stride;
    b.offset += start[d] * stride;
    stride *= shape[d];
  }
  return b;
}

int64_t aprt_box_volume(const aprt_box *b) {
  int64_t v = 1;
  for (int d = 0; d < b->ndim; d++)
    v *= b->size[d];
  return v;
}

/* Walks the box row by row (the last dimension innermost), calling copy on
 * each row: a contiguous run of the packed side and a strided run of the
 * box side. */
static void box_walk(unsigned char *packed, unsigned char *boxed, const aprt_box *b,
                     size_t es, int pack) {
  if (aprt_box_volume(b) == 0)
    return;
  if (b->ndim == 0) {
    unsigned char *e = boxed + (size_t)b->offset * es;
    memcpy(pack ? packed : e, pack ? e : packed, es);
    return;
  }
  int last = b->ndim - 1;
  int64_t idx[APRT_MAX_RANK] = {0};
  int64_t row = b->size[last], step = b->stride[last];
  for (;;) {
    int64_t base = b->offset;
    for (int d = 0; d < last; d++)
      base += idx[d] * b->stride[d];
    unsigned char *e = boxed + (size_t)base * es;
    if (step == 1)
      memcpy(pack ? packed : e, pack ? e : packed, (size_t)row * es);
    else
      for (int64_t i = 0; i < row; i++) {
        unsigned char *ei = e + (size_t)(i * step) * es;
        memcpy(pack ? packed + (size_t)i * es : ei, pack ? ei : packed + (size_t)i * es, es);
      }
    packed += (size_t)row * es;
    int d = last - 1;
    while (d >= 0 && ++idx[d] == b->size[d])
      idx[d--] = 0;
    if (d < 0)
      return;
  }
}

void aprt_box_pack(void *dst, const void *src, const aprt_box *b, size_t elem_size) {
  box_walk(dst, (unsigned char *)(uintptr_t)src, b, elem_size, 1);
}

void aprt_box_unpack(void *dst, const aprt_box *b, const void *src, size_t elem_size) {
  box_walk((unsigned char *)(uintptr_t)src, dst, b, elem_size, 0);
}

/* Row by row, as box_walk: the backward pass adds whole partial errors this
 * way, and a contiguous row is a loop the compiler vectorises, where
 * recomputing the index of every element cost a two-device BERT step 4% of
 * its samples. Each element is still dst + src, once, so sums are unchanged. */
void aprt_box_add_f32(float *dst, const aprt_box *b, const float *src) {
  if (aprt_box_volume(b) == 0)
    return;
  if (b->ndim == 0) {
    dst[b->offset] += *src;
    return;
  }
  int last = b->ndim - 1;
  int64_t idx[APRT_MAX_RANK] = {0};
  int64_t row = b->size[last], step = b->stride[last];
  for (;;) {
    int64_t base = b->offset;
    for (int d = 0; d < last; d++)
      base += idx[d] * b->stride[d];
    float *restrict e = dst + base; /* src is a received piece, never dst */
    const float *restrict from = src;
    if (step == 1)
      for (int64_t i = 0; i < row; i++)
        e[i] += from[i];
    else
      for (int64_t i = 0; i < row; i++)
        e[i * step] += src[i];
    src += row;
    int d = last - 1;
    while (d >= 0 && ++idx[d] == b->size[d])
      idx[d--] = 0;
    if (d < 0)
      return;
  }
}

static aprt_status check_xfers(aprt_comm *c, const char *what, int nx, const aprt_xfer *x) {
  for (int k = 0; k < nx; k++) {
    if (x[k].peer < 0 || x[k].peer >= c->size)
      return aprt_fail(c, APRT_ERR_USAGE, "exchange: %s %d: peer %d is not a rank of %d",
                       what, k, x[k].peer, c->size);
    if (x[k].box.ndim < 0 || x[k].box.ndim > APRT_MAX_RANK)
      return aprt_fail(c, APRT_ERR_USAGE, "exchange: %s %d: box rank %d outside 0..%d", what,
                       k, x[k].box.ndim, APRT_MAX_RANK);
    for (int d = 0; d < x[k].box.ndim; d++)
      if (x[k].box.size[d] < 0)
        return aprt_fail(c, APRT_ERR_USAGE, "exchange: %s %d: negative size along dim %d",
                         what, k, d);
  }
  return APRT_OK;
}

/* Posts every non-empty send box; the receives come in exchange_recv. */
static aprt_status exchange_send(aprt_comm *c, const void *src, int nsend, const aprt_xfer *sends,
                                 size_t es, int tag) {
  int64_t biggest = 0;
  for (int k = 0; k < nsend; k++) {
    int64_t v = aprt_box_volume(&sends[k].box);
    biggest = v > biggest ? v : biggest;
  }
  unsigned char *scratch = biggest > 0 ? pack_scratch(c, (size_t)biggest * es) : NULL;
  if (biggest > 0 && !scratch)
    return c->status;
  aprt_status s = APRT_OK;
  for (int k = 0; k < nsend && !s; k++)
    if (aprt_box_volume(&sends[k].box) > 0)
      s = post_box(c, sends[k].peer, tag, src, &sends[k].box, es, scratch);
  return s;
}

static aprt_status exchange_recv(aprt_comm *c, void *dst, int nrecv, const aprt_xfer *recvs,
                                 size_t es, int tag) {
  aprt_status s = APRT_OK;
  for (int k = 0; k < nrecv && !s; k++) {
    int64_t v = aprt_box_volume(&recvs[k].box);
    if (v == 0)
      continue;
    aprt_view view;
    s = take(c, recvs[k].peer, tag, (size_t)v * es, &view);
    if (s)
      break;
    view_unpack(&view, dst, &recvs[k].box, es);
    c->tp->release(c, &view);
  }
  return s;
}

static aprt_status check_exchange(aprt_comm *c, int nsend, const aprt_xfer *sends, int nrecv,
                                  const aprt_xfer *recvs) {
  if (c->status != APRT_OK)
    return c->status;
  aprt_status s = check_xfers(c, "send", nsend, sends);
  return s ? s : check_xfers(c, "receive", nrecv, recvs);
}

aprt_status aprt_exchange_start(aprt_comm *c, const void *src, int nsend, const aprt_xfer *sends,
                                size_t elem_size, int tag) {
  aprt_status s = check_exchange(c, nsend, sends, 0, NULL);
  if (s)
    return s;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  s = exchange_send(c, src, nsend, sends, elem_size, tag);
  aprt_phase_end(c);
  if (s)
    settle(c);
  return s;
}

aprt_status aprt_exchange_finish(aprt_comm *c, void *dst, int nrecv, const aprt_xfer *recvs,
                                 size_t elem_size, int tag) {
  aprt_status s = check_exchange(c, 0, NULL, nrecv, recvs);
  if (!s) {
    aprt_phase_begin(c, APRT_PHASE_COMM);
    s = exchange_recv(c, dst, nrecv, recvs, elem_size, tag);
    aprt_phase_end(c);
  }
  settle(c);
  return s ? s : c->status;
}

aprt_status aprt_exchange(aprt_comm *c, const void *src, int nsend, const aprt_xfer *sends,
                          void *dst, int nrecv, const aprt_xfer *recvs, size_t elem_size,
                          int tag) {
  aprt_status s = check_exchange(c, nsend, sends, nrecv, recvs);
  if (s)
    return s;
  aprt_phase_begin(c, APRT_PHASE_COMM);
  s = exchange_send(c, src, nsend, sends, elem_size, tag);
  if (!s)
    s = exchange_recv(c, dst, nrecv, recvs, elem_size, tag);
  aprt_phase_end(c);
  settle(c);
  return s ? s : c->status;
}
