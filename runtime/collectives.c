/* Collectives over groups with uneven shares, and the box exchange. Every
 * algorithm is direct (each member sends straight to the member that needs
 * the data), so the bytes a member sends are the closed formulas of
 * accpar_rt.h: the planner predicts them without simulating a schedule.
 * Sends are eager (the transport copies), so "all sends, then all receives"
 * cannot deadlock. */
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

static aprt_status allgather_body(aprt_comm *c, const int *group, int n, int self,
                                  unsigned char *buf, const int64_t *counts, size_t es,
                                  int tag) {
  int64_t own = 0;
  for (int k = 0; k < self; k++)
    own += counts[k];
  aprt_status s = APRT_OK;
  for (int k = 0; k < n && !s; k++)
    if (k != self && counts[self] > 0)
      s = aprt_send(c, group[k], tag, buf + (size_t)own * es, (size_t)counts[self] * es);
  int64_t off = 0;
  for (int k = 0; k < n && !s; off += counts[k], k++)
    if (k != self && counts[k] > 0)
      s = aprt_recv(c, group[k], tag, buf + (size_t)off * es, (size_t)counts[k] * es);
  return s;
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
  int64_t off = 0, own = 0;
  for (int k = 0; k < n && !s; off += counts[k], k++) {
    if (k == self)
      own = off;
    else if (counts[k] > 0)
      s = aprt_send(c, group[k], tag, buf + off, (size_t)counts[k] * sizeof(float));
  }
  size_t m = (size_t)counts[self];
  if (s || m == 0 || n == 1)
    return s;
  float *acc = malloc(m * sizeof *acc), *tmp = malloc(m * sizeof *tmp);
  if (!acc || !tmp) {
    free(acc);
    free(tmp);
    return aprt_fail(c, APRT_ERR_NOMEM, "reduce-scatter: %zu floats: out of memory", m);
  }
  /* Summing in member order, whoever arrives first, makes the result the
   * same on every run and equal to a serial sum in that order. */
  for (int k = 0; k < n && !s; k++) {
    const float *part = buf + own;
    if (k != self) {
      s = aprt_recv(c, group[k], tag, tmp, m * sizeof(float));
      part = tmp;
    }
    if (k == 0)
      memcpy(acc, part, m * sizeof *acc);
    else
      for (size_t e = 0; e < m; e++)
        acc[e] += part[e];
  }
  if (!s)
    memcpy(buf + own, acc, m * sizeof *acc);
  free(acc);
  free(tmp);
  return s;
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

aprt_status aprt_allreduce_sum(aprt_comm *c, const int *group, int n, float *buf,
                               int64_t count, const int64_t *shares, int tag) {
  int self = group_index(c, "all-reduce", group, n, shares);
  if (self < 0)
    return c->status;
  if (count < 0)
    return aprt_fail(c, APRT_ERR_USAGE, "all-reduce: negative count %lld", (long long)count);
  int64_t *even = NULL;
  if (!shares) {
    even = malloc((size_t)n * sizeof *even);
    if (!even)
      return aprt_fail(c, APRT_ERR_NOMEM, "all-reduce: out of memory");
    for (int i = 0; i < n; i++)
      even[i] = aprt_even_share(count, n, i);
    shares = even;
  }
  int64_t total = 0;
  for (int i = 0; i < n; i++)
    total += shares[i];
  aprt_status s = APRT_OK;
  if (total != count)
    s = aprt_fail(c, APRT_ERR_USAGE, "all-reduce: shares add up to %lld, not %lld elements",
                  (long long)total, (long long)count);
  if (!s) {
    aprt_phase_begin(c, APRT_PHASE_COMM);
    s = reduce_scatter_body(c, group, n, self, buf, shares, tag);
    if (!s)
      s = allgather_body(c, group, n, self, (unsigned char *)buf, shares, sizeof(float), tag);
    aprt_phase_end(c);
  }
  free(even);
  return s;
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

void aprt_box_add_f32(float *dst, const aprt_box *b, const float *src) {
  if (aprt_box_volume(b) == 0)
    return;
  int64_t idx[APRT_MAX_RANK] = {0};
  for (;;) {
    int64_t at = b->offset;
    for (int d = 0; d < b->ndim; d++)
      at += idx[d] * b->stride[d];
    dst[at] += *src++;
    int d = b->ndim - 1;
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

static aprt_status exchange_body(aprt_comm *c, const void *src, int nsend,
                                 const aprt_xfer *sends, void *dst, int nrecv,
                                 const aprt_xfer *recvs, size_t es, int tag,
                                 unsigned char *tmp) {
  aprt_status s = APRT_OK;
  for (int k = 0; k < nsend && !s; k++) {
    int64_t v = aprt_box_volume(&sends[k].box);
    if (v == 0)
      continue;
    aprt_box_pack(tmp, src, &sends[k].box, es);
    s = aprt_send(c, sends[k].peer, tag, tmp, (size_t)v * es);
  }
  for (int k = 0; k < nrecv && !s; k++) {
    int64_t v = aprt_box_volume(&recvs[k].box);
    if (v == 0)
      continue;
    s = aprt_recv(c, recvs[k].peer, tag, tmp, (size_t)v * es);
    if (!s)
      aprt_box_unpack(dst, &recvs[k].box, tmp, es);
  }
  return s;
}

aprt_status aprt_exchange(aprt_comm *c, const void *src, int nsend, const aprt_xfer *sends,
                          void *dst, int nrecv, const aprt_xfer *recvs, size_t elem_size,
                          int tag) {
  if (c->status != APRT_OK)
    return c->status;
  aprt_status s = check_xfers(c, "send", nsend, sends);
  if (!s)
    s = check_xfers(c, "receive", nrecv, recvs);
  if (s)
    return s;
  int64_t biggest = 0;
  for (int k = 0; k < nsend; k++) {
    int64_t v = aprt_box_volume(&sends[k].box);
    biggest = v > biggest ? v : biggest;
  }
  for (int k = 0; k < nrecv; k++) {
    int64_t v = aprt_box_volume(&recvs[k].box);
    biggest = v > biggest ? v : biggest;
  }
  unsigned char *tmp = malloc(biggest ? (size_t)biggest * elem_size : 1);
  if (!tmp)
    return aprt_fail(c, APRT_ERR_NOMEM, "exchange: %lld elements: out of memory",
                     (long long)biggest);
  aprt_phase_begin(c, APRT_PHASE_COMM);
  s = exchange_body(c, src, nsend, sends, dst, nrecv, recvs, elem_size, tag, tmp);
  aprt_phase_end(c);
  free(tmp);
  return s;
}
