/* Boxes per device and the transfers between devices; see distribute.h. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "passes/distribute.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"

enum { MAX_PIECES_PER_BOX = 2 * AP_MAX_RANK, MAX_FOLLOWED = 8 };

/* ---- boxes ---------------------------------------------------------------- */

int64_t ap_dbox_volume(int rank, const ap_dbox *b) {
  int64_t v = 1;
  for (int i = 0; i < rank; i++)
    v *= b->hi[i] > b->lo[i] ? b->hi[i] - b->lo[i] : 0;
  return v;
}

bool ap_dbox_equal(int rank, const ap_dbox *a, const ap_dbox *b) {
  for (int i = 0; i < rank; i++)
    if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i])
      return false;
  return true;
}

bool ap_dbox_whole(const ap_value *v, const ap_dbox *b) {
  for (int i = 0; i < v->rank; i++)
    if (b->lo[i] != 0 || b->hi[i] != v->dims[i])
      return false;
  return true;
}

static ap_dbox whole_box(const ap_value *v) {
  ap_dbox b;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < v->rank; i++)
    b.hi[i] = v->dims[i];
  return b;
}

static bool contains(int rank, const ap_dbox *outer, const ap_dbox *inner) {
  if (ap_dbox_volume(rank, inner) == 0)
    return true;
  for (int i = 0; i < rank; i++)
    if (inner->lo[i] < outer->lo[i] || inner->hi[i] > outer->hi[i])
      return false;
  return true;
}

static bool intersect(int rank, const ap_dbox *a, const ap_dbox *b, ap_dbox *out) {
  for (int i = 0; i < rank; i++) {
    out->lo[i] = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
    out->hi[i] = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];
    if (out->hi[i] <= out->lo[i])
      return false;
  }
  return true;
}

/* a minus b as disjoint boxes (at most 2 * rank); returns how many. */
static int subtract(int rank, const ap_dbox *a, const ap_dbox *b, ap_dbox *out) {
  ap_dbox x;
  if (ap_dbox_volume(rank, a) == 0)
    return 0;
  if (!intersect(rank, a, b, &x)) {
    out[0] = *a;
    return 1;
  }
  int n = 0;
  ap_dbox rest = *a;
  for (int i = 0; i < rank; i++) { /* peel the slabs of a outside b, one dim at a time */
    if (rest.lo[i] < x.lo[i]) {
      out[n] = rest;
      out[n].hi[i] = x.lo[i];
      n++;
    }
    if (rest.hi[i] > x.hi[i]) {
      out[n] = rest;
      out[n].lo[i] = x.hi[i];
      n++;
    }
    rest.lo[i] = x.lo[i];
    rest.hi[i] = x.hi[i];
  }
  return n;
}

/* first[i] = the lowest j whose key equals key i (width int64s each, n
 * keys in a row), by hashing: grouping a thousand devices' boxes by
 * comparing every pair took the square of the device count per value. */
static bool first_equal(const int64_t *key, int width, int n, int *first) {
  size_t cap = 1;
  while (cap < 2 * (size_t)n)
    cap <<= 1;
  int *slot = malloc(cap * sizeof *slot);
  if (!slot)
    return false;
  for (size_t s = 0; s < cap; s++)
    slot[s] = -1;
  for (int i = 0; i < n; i++) {
    const int64_t *k = key + (size_t)i * (size_t)width;
    uint64_t h = 1469598103934665603u;
    for (int w = 0; w < width; w++) {
      h = (h ^ (uint64_t)k[w]) * 1099511628211u;
      h ^= h >> 29;
    }
    for (size_t s = h & (cap - 1);; s = (s + 1) & (cap - 1)) {
      if (slot[s] < 0) {
        slot[s] = first[i] = i;
        break;
      }
      if (!memcmp(key + (size_t)slot[s] * (size_t)width, k, (size_t)width * sizeof *k)) {
        first[i] = slot[s];
        break;
      }
    }
  }
  free(slot);
  return true;
}

/* first[d] = the lowest device whose box equals box[d]. */
static bool box_classes(int rank, const ap_dbox *box, int n, int *first) {
  int width = 2 * (rank > 0 ? rank : 1);
  int64_t *key = malloc((size_t)n * (size_t)width * sizeof *key);
  if (!key)
    return false;
  for (int d = 0; d < n; d++)
    for (int i = 0; i < width / 2; i++) {
      key[(size_t)d * (size_t)width + 2 * (size_t)i] = rank > 0 ? box[d].lo[i] : 0;
      key[(size_t)d * (size_t)width + 2 * (size_t)i + 1] = rank > 0 ? box[d].hi[i] : 0;
    }
  bool ok = first_equal(key, width, n, first);
  free(key);
  return ok;
}

/* A growable array of boxes on the heap: an exchange's working lists,
 * reused from device to device (kept in the arena, a list per receiver
 * grew it by a gigabyte for ResNet-152 on 1024 devices). */
typedef struct box_vec {
  ap_dbox *b;
  int n, cap;
} box_vec;

/* Room for need elements of elem bytes in the heap array *arr of *cap:
 * doubled (64 at least) while short. False: out of memory, *arr intact. */
static bool heap_room(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap)
    return true;
  int c = *cap ? *cap : 64;
  while (c < need)
    c *= 2;
  void *p = ap_xrealloc(*arr, (size_t)c * elem);
  if (!p)
    return false;
  *arr = p;
  *cap = c;
  return true;
}

static bool vec_push(box_vec *l, const ap_dbox *b) {
  if (!heap_room((void **)&l->b, &l->cap, l->n + 1, sizeof *l->b))
    return false;
  l->b[l->n++] = *b;
  return true;
}

/* l minus b, in place, through tmp (its contents are lost). */
static bool vec_subtract(int rank, box_vec *l, const ap_dbox *b, box_vec *tmp) {
  bool meets = false;
  for (int i = 0; i < l->n && !meets; i++) {
    ap_dbox x;
    meets = intersect(rank, &l->b[i], b, &x);
  }
  if (!meets)
    return true;
  tmp->n = 0;
  for (int i = 0; i < l->n; i++) {
    ap_dbox parts[MAX_PIECES_PER_BOX];
    int k = subtract(rank, &l->b[i], b, parts);
    for (int j = 0; j < k; j++)
      if (!vec_push(tmp, &parts[j]))
        return false;
  }
  box_vec swap = *l;
  *l = *tmp;
  *tmp = swap;
  return true;
}

/* Disjoint boxes, sorted along the dimension on which their lower bounds
 * differ most, so the boxes meeting a query box are found among those
 * starting within `reach` (the longest extent) before its end: a transfer
 * over a thousand devices looked at every device's boxes for every
 * receiver. */
typedef struct box_index {
  int dim;
  int64_t reach;
  int n;
  struct keyed {
    int64_t lo;
    int id;
  } *by_lo;
} box_index;

static int cmp_keyed(const void *pa, const void *pb) {
  const struct keyed *a = pa, *b = pb;
  return a->lo < b->lo ? -1 : a->lo > b->lo ? 1 : (a->id > b->id) - (a->id < b->id);
}

static int cmp_int(const void *pa, const void *pb) {
  int a = *(const int *)pa, b = *(const int *)pb;
  return (a > b) - (a < b);
}

/* Indexes box[0 .. n). */
static bool index_boxes(int rank, const ap_dbox *box, int n, box_index *ix) {
  ix->n = n;
  ix->dim = 0;
  ix->reach = 0;
  ix->by_lo = ap_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof *ix->by_lo);
  if (!ix->by_lo)
    return false;
  /* The dimension with the most distinct lower bounds, counted by hashing
   * (most dimensions of most values are split by no device: one bound). */
  int64_t *key = ap_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof *key);
  int *first = ap_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof *first);
  bool ok = key && first;
  for (int k = 0, best = 1; k < rank && ok; k++) {
    int i = 1;
    while (i < n && box[i].lo[k] == box[0].lo[k])
      i++;
    if (i == n)
      continue;
    for (i = 0; i < n; i++)
      key[i] = box[i].lo[k];
    ok = first_equal(key, 1, n, first);
    int distinct = 0;
    for (i = 0; i < n && ok; i++)
      distinct += first[i] == i;
    if (distinct > best) {
      best = distinct;
      ix->dim = k;
    }
  }
  ap_xfree(key);
  ap_xfree(first);
  if (!ok)
    return false;
  for (int i = 0; i < n; i++) {
    int64_t lo = rank ? box[i].lo[ix->dim] : 0, ext = rank ? box[i].hi[ix->dim] - lo : 1;
    ix->by_lo[i] = (struct keyed){lo, i};
    ix->reach = ext > ix->reach ? ext : ix->reach;
  }
  qsort(ix->by_lo, (size_t)n, sizeof *ix->by_lo, cmp_keyed);
  return true;
}

/* The first entry of ix starting at or after lo. */
static int index_lower(const box_index *ix, int64_t lo) {
  int a = 0, b = ix->n;
  while (a < b) {
    int m = a + (b - a) / 2;
    if (ix->by_lo[m].lo < lo)
      a = m + 1;
    else
      b = m;
  }
  return a;
}

/* Appends to *out the ids of the boxes of ix (over box[]) meeting q. */
static bool index_query(const box_index *ix, int rank, const ap_dbox *box, const ap_dbox *q,
                        int **out, int *n_out, int *cap) {
  int k = ix->dim;
  int64_t qlo = rank ? q->lo[k] : 0, qhi = rank ? q->hi[k] : 1;
  for (int i = index_lower(ix, qlo - ix->reach + 1); i < ix->n && ix->by_lo[i].lo < qhi; i++) {
    ap_dbox x;
    int id = ix->by_lo[i].id;
    if (!intersect(rank, &box[id], q, &x))
      continue;
    if (!heap_room((void **)out, cap, *n_out + 1, sizeof **out))
      return false;
    (*out)[(*n_out)++] = id;
  }
  return true;
}

/* ---- the plan, device by device ------------------------------------------ */

/* Every device's whole box of values of one shape (whole_array). */
typedef struct whole_boxes {
  struct whole_boxes *next;
  int rank;
  int64_t dims[AP_MAX_RANK];
  ap_dbox *box; /* [n_dev] */
} whole_boxes;

/* What the distribution made once and shares: an array of boxes kept
 * however many ports hold those boxes (keep_array: box, rank), or a
 * transfer priced already over kept arrays, of elements of one type (kind
 * MEMO_EXCHANGE: box the held boxes, need the needed, memo_exchange;
 * MEMO_WEIGHT_SUM: box a weight's boxes, memo_weight_sum), t its bytes,
 * NULL where none moves. */
enum { MEMO_ARRAY, MEMO_EXCHANGE, MEMO_WEIGHT_SUM };
typedef struct memo_entry {
  uint64_t hash;
  ap_dbox *box; /* NULL: a free slot */
  const ap_dbox *need;
  int kind, rank, dtype;
  const ap_dxfer *t;
} memo_entry;

/* An input axis that follows an output axis: input slot's axis a takes
 * the output box's axis j (follow_map). */
typedef struct follow_pair {
  int slot;
  signed char a, j;
} follow_pair;

typedef struct dctx {
  ap_graph *g;
  ap_diag *d;
  const ap_plan *p;   /* NULL: one device */
  int n_dev;
  int *vertex_of;     /* [n_nodes]: the plan's vertex, or -1 */
  int *path;          /* [n_dev * n_levels]: child index at each level, -1 where the group is one device */
  ap_dist *dist;
  bool priced;        /* ap_distribute_priced: transfers keep their bytes, not their pieces */
  int follow_node;    /* the node whose axis map follow holds, or -1 */
  signed char follow[MAX_FOLLOWED][AP_MAX_RANK]; /* ap_axes_in_to_out of its inputs' axes */
  follow_pair *pairs; /* follow_map's list for the node at hand */
  int cap_pairs;
  ap_dbox *work;      /* the boxes of the node being distributed, port after port */
  size_t work_cap;    /* in boxes */
  ap_dbox *none;      /* [n_dev] empty boxes: the ports of nodes left undistributed */
  whole_boxes *wholes; /* the arrays of whole boxes made so far, one per shape */
  memo_entry *memo;    /* by hash, open addressing */
  size_t n_memo, memo_cap; /* entries, slots (a power of two) */
} dctx;

static ap_status oom(dctx *x) {
  return ap_error(x->d, AP_ERR_NOMEM, x->g->path, NULL, NULL, "out of memory");
}

static void device_paths(dctx *x) {
  const ap_plan *p = x->p;
  for (int dev = 0; dev < x->n_dev; dev++) {
    ap_group grp = ap_group_root(&p->dev);
    for (int l = 0; l < p->n_levels; l++) {
      ap_group ch[AP_MAX_CHILDREN];
      int k = ap_group_children(&p->dev, &grp, ch), i = 0;
      while (i < k - 1 && dev >= ch[i].first_dev + ch[i].count)
        i++;
      x->path[dev * p->n_levels + l] = k > 1 ? i : -1;
      grp = ch[i];
    }
  }
}

static int state_type_at(const dctx *x, int v, int l) {
  return x->p->state[(size_t)l * x->p->n_vertices + v] % 3;
}

/* Which summand of vertex v's partial sums device dev holds: its children at
 * the levels of type `type` (II: the output; III: the input's error), as one
 * number per distinct path, in the order of the devices first holding
 * them; *n_summands counts them over all devices. */
static bool summands(const dctx *x, int v, int type, int *summand, int *n_summands) {
  int L = x->p->n_levels, n = x->n_dev, w = L ? L : 1;
  int64_t *key = malloc((size_t)n * (size_t)w * sizeof *key);
  int *first = malloc((size_t)n * sizeof *first);
  bool ok = key && first;
  for (int dev = 0; dev < n && ok; dev++)
    for (int l = 0; l < w; l++)
      key[(size_t)dev * (size_t)w + (size_t)l] =
          l < L && state_type_at(x, v, l) == type ? x->path[dev * L + l] : 0;
  ok = ok && first_equal(key, w, n, first);
  *n_summands = 0;
  for (int dev = 0; dev < n && ok; dev++)
    summand[dev] = first[dev] == dev ? (*n_summands)++ : summand[first[dev]];
  free(key);
  free(first);
  return ok;
}

static bool has_type(const dctx *x, int v, int type) {
  for (int l = 0; l < x->p->n_levels; l++)
    if (state_type_at(x, v, l) == type)
      return true;
  return false;
}

/* ---- what an operator needs of its inputs -------------------------------- */

static int norm_axis(int64_t axis, int rank) {
  if (axis < 0)
    axis += rank;
  return axis < 0 || axis >= rank ? -1 : (int)axis;
}

/* Reshape-like nodes reinterpret a row-major buffer (ir/axes.c,
 * ap_axes_reshape): a slab of an input axis stays a slab of an output axis
 * when its bounds land on whole output indices; every other axis is read
 * whole. Sets the input box the node reads and the output box. */
static void reshape_boxes(const ap_value *x, const ap_value *y, const ap_dbox *held,
                          ap_dbox *in, ap_dbox *out) {
  *in = whole_box(x);
  *out = whole_box(y);
  int r = x->rank;
  if (ap_dbox_volume(r, held) == 0 && ap_numel(r, x->dims) > 0 && y->rank > 0) {
    *in = *held; /* a device with no share: none of the output either */
    out->hi[0] = 0;
    return;
  }
  for (int a = 0; a < r; a++) {
    if (held->lo[a] == 0 && held->hi[a] == x->dims[a])
      continue;
    int64_t in_step, out_step;
    int q = ap_axes_reshape(x, y, a, &in_step, &out_step);
    if (q < 0 || (held->lo[a] * in_step) % out_step || (held->hi[a] * in_step) % out_step)
      continue; /* needed whole: whole_box set it */
    in->lo[a] = held->lo[a];
    in->hi[a] = held->hi[a];
    out->lo[q] = held->lo[a] * in_step / out_step;
    out->hi[q] = held->hi[a] * in_step / out_step;
  }
}

/* ---- transfers ------------------------------------------------------------ */

static ap_dxfer *new_xfer(dctx *x, ap_dxfer_kind kind, int value) {
  ap_dxfer *t = ap_arena_alloc(x->g->arena, sizeof *t);
  if (t) {
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->value = value;
  }
  return t;
}

static double elem_size(const ap_value *v) {
  size_t s = ap_dtype_size(v->dtype);
  return s ? (double)s : 4;
}

static bool add_piece(dctx *x, ap_dxfer *t, int *cap, int from, int to, int summand,
                      const ap_dbox *b) {
  if (from != to) {
    if (!t->sent) {
      t->sent = ap_arena_array(x->g->arena, (size_t)x->n_dev, sizeof *t->sent);
      t->received = ap_arena_array(x->g->arena, (size_t)x->n_dev, sizeof *t->received);
      if (!t->sent || !t->received)
        return false;
    }
    const ap_value *v = &x->g->values[t->value];
    double bytes = (double)ap_dbox_volume(v->rank, b) * elem_size(v);
    t->sent[from] += bytes;
    t->received[to] += bytes;
  }
  if (x->priced)
    return true;
  if (!ap_arena_grow(x->g->arena, (void **)&t->pieces, cap, t->n_pieces + 1, sizeof *t->pieces))
    return false;
  t->pieces[t->n_pieces++] = (ap_dpiece){from, to, summand, *b};
  return true;
}

/* Charges the pieces of t to their senders, or (reversed: an adjoint
 * sending every piece's error back) to their receivers. */
static void charge_pieces(const ap_dxfer *t, bool reversed, int n_dev, double *bytes) {
  const double *by = reversed ? t->received : t->sent;
  for (int d = 0; d < n_dev && by; d++)
    bytes[d] += by[d];
}

/* vol(a n b), and vol(a n b n c). */
static int64_t meet_volume(int rank, const ap_dbox *a, const ap_dbox *b) {
  ap_dbox m;
  return intersect(rank, a, b, &m) ? ap_dbox_volume(rank, &m) : 0;
}
static int64_t meet3_volume(int rank, const ap_dbox *a, const ap_dbox *b, const ap_dbox *c) {
  ap_dbox m;
  return intersect(rank, a, b, &m) ? meet_volume(rank, &m, c) : 0;
}

/* Classes of devices with equal boxes (box, and with it box2 and tag where
 * given): each class's boxes into cls (and cls2), how many devices it
 * stands for into mult, and each device's class into class_of (when
 * given); returns how many classes, -1 out of memory. */
static int box_class_list(int rank, const ap_dbox *box, const ap_dbox *box2, const int *tag,
                          int n, ap_dbox *cls, ap_dbox *cls2, int64_t *mult, int *class_of) {
  int r = rank > 0 ? rank : 1, width = (box2 ? 4 : 2) * r + (tag != NULL);
  int64_t *key = ap_xrealloc(NULL, (size_t)n * (size_t)width * sizeof *key);
  int *first = ap_xrealloc(NULL, (size_t)n * sizeof *first);
  int *index = class_of ? class_of : ap_xrealloc(NULL, (size_t)n * sizeof *index);
  int k = -1;
  if (key && first && index) {
    for (int d = 0; d < n; d++) {
      int64_t *at = key + (size_t)d * (size_t)width;
      for (int i = 0; i < r; i++) {
        at[2 * i] = rank > 0 ? box[d].lo[i] : 0;
        at[2 * i + 1] = rank > 0 ? box[d].hi[i] : 0;
        if (box2) {
          at[2 * (r + i)] = rank > 0 ? box2[d].lo[i] : 0;
          at[2 * (r + i) + 1] = rank > 0 ? box2[d].hi[i] : 0;
        }
      }
      if (tag)
        at[width - 1] = tag[d];
    }
    if (first_equal(key, width, n, first)) {
      k = 0;
      for (int d = 0; d < n; d++) {
        if (first[d] == d) {
          index[d] = k;
          cls[k] = box[d];
          if (box2)
            cls2[k] = box2[d];
          mult[k++] = 0;
        }
        index[d] = index[first[d]];
        mult[index[d]]++;
      }
    }
  }
  ap_xfree(key);
  ap_xfree(first);
  if (!class_of)
    ap_xfree(index);
  return k;
}

/* Gives t the bytes each device sends and receives without its pieces:
 * sent[d] and received[d] elements (ap_distribute_priced). */
static bool priced_bytes(dctx *x, ap_dxfer *t, const int64_t *sent, const int64_t *received) {
  double es = elem_size(&x->g->values[t->value]);
  int n = x->n_dev;
  t->sent = ap_arena_array(x->g->arena, (size_t)n, sizeof *t->sent);
  t->received = ap_arena_array(x->g->arena, (size_t)n, sizeof *t->received);
  for (int d = 0; d < n && t->sent && t->received; d++) {
    t->sent[d] = (double)sent[d] * es;
    t->received[d] = (double)received[d] * es;
  }
  return t->sent && t->received;
}

/* Who sends an exchange's pieces (exchange): members[start[i] ..
 * start[i + 1]) hold distinct box i, in device order, and grp[d] = i for
 * its first holder d (the owner of box i's owned boxes); pos[e] is
 * receiver e's place when the devices are ordered by the class of their
 * need (classes in the order of their first device, box_class_list), then
 * by device. */
typedef struct holders {
  const int *start, *members, *grp, *pos;
} holders;

/* The holder that sends receiver e its piece of owned box k, whose owner
 * is the first holder of its box: the r holders of a box take the
 * receivers in turn by place, the k-th holder first. The first holder
 * sending to every receiver sent 8.4 MB on the edge into each of BERT-base's
 * attention output projections over 2048 devices, where about 21 devices
 * hold each box and 256 need it; in turn, 0.52 MB each (docs/codegen.md). */
static int sender(const holders *hd, int owner, int k, int e) {
  int i = hd->grp[owner], r = hd->start[i + 1] - hd->start[i];
  return r == 1 ? owner : hd->members[hd->start[i] + (hd->pos[e] + k) % r];
}

/* An exchange's bytes without its pieces (ap_distribute_priced). Owner o
 * (or the holder of its box that takes e, sender) sends receiver e
 * vol(own n need_e) - vol(own n need_e n held_e) of each box it owns (what
 * the receivers' loop in exchange sends, over e's missing boxes); summed
 * over the receivers by classes of equal needs and of equal (need, held)
 * pairs, each class found from an owned box through an index (the pairs'
 * devices one by one where several hold the box, as they are taken in
 * turn). Receiver e takes vol(need_e) - vol(need_e n held_e) where the
 * owned boxes cover every need. Where they do not, *done stays false and
 * the pieces are enumerated. A gather to every one of 4096 devices is 16
 * million pieces (GPT-2 small's chosen plan spent 44% of its planning
 * there); test_plan_bytes holds these bytes equal to the enumerated
 * pieces' (the program's), device by device. */
static bool exchange_bytes(dctx *x, ap_dxfer *t, int rank, const ap_dbox *has,
                           const ap_dbox *need, const box_vec *own, const int *owner,
                           const holders *hd, bool *done) {
  int n = x->n_dev;
  size_t nb = (size_t)n * sizeof(ap_dbox), nm = (size_t)n * sizeof(int64_t);
  ap_dbox *nbox = ap_xrealloc(NULL, nb), *pneed = ap_xrealloc(NULL, nb);
  ap_dbox *pheld = ap_xrealloc(NULL, nb);
  int64_t *nmult = ap_xrealloc(NULL, nm), *pmult = ap_xrealloc(NULL, nm);
  int64_t *covered = ap_xrealloc(NULL, nm), *sent = ap_xrealloc(NULL, nm);
  int64_t *self = ap_xrealloc(NULL, nm), *place = ap_xrealloc(NULL, nm);
  /* For the holders taking receivers in turn (sender): each pair class's
   * devices, class after class from pstart[c], and the first place of each
   * need class's devices. */
  int *pcls = ap_xrealloc(NULL, (size_t)n * sizeof *pcls);
  int *pstart = ap_xrealloc(NULL, (size_t)(n + 1) * sizeof *pstart);
  int *plist = ap_xrealloc(NULL, (size_t)n * sizeof *plist);
  int *hit = NULL, n_hit = 0, cap_hit = 0, n_need = -1, n_pair = -1;
  box_index nix = {0}, pix = {0};
  bool ok = nbox && pneed && pheld && nmult && pmult && covered && sent && self && place &&
            pcls && pstart && plist;
  if (ok) {
    n_need = box_class_list(rank, need, NULL, NULL, n, nbox, NULL, nmult, NULL);
    n_pair = box_class_list(rank, need, has, NULL, n, pneed, pheld, pmult, pcls);
    ok = n_need >= 0 && n_pair >= 0 && index_boxes(rank, nbox, n_need, &nix) &&
         index_boxes(rank, pheld, n_pair, &pix);
  }
  for (int c = 0; ok && c < n_need; c++)
    place[c] = c ? place[c - 1] + nmult[c - 1] : 0;
  for (int c = 0; ok && c <= n_pair; c++)
    pstart[c] = 0;
  for (int d = 0; ok && d < n; d++)
    pstart[pcls[d] + 1]++;
  for (int c = 0; ok && c < n_pair; c++)
    pstart[c + 1] += pstart[c];
  for (int i = 0; ok && i < n; i++)
    self[i] = 0;
  for (int d = 0; ok && d < n; d++) /* self counts each class's devices placed so far */
    plist[pstart[pcls[d]] + self[pcls[d]]++] = d;
  for (int i = 0; ok && i < n; i++)
    covered[i] = sent[i] = self[i] = 0;
  for (int k = 0; ok && k < own->n; k++) {
    const ap_dbox *o = &own->b[k];
    int d = owner[k], i = hd->grp[d], r = hd->start[i + 1] - hd->start[i];
    const int *by = hd->members + hd->start[i];
    int64_t elems = 0, each = 0;
    n_hit = 0;
    ok = index_query(&nix, rank, nbox, o, &hit, &n_hit, &cap_hit);
    for (int h = 0; h < n_hit && ok; h++) {
      int64_t v = meet_volume(rank, o, &nbox[hit[h]]), m = nmult[hit[h]];
      covered[hit[h]] += v;
      elems += m * v;
      /* Of several holders (sender), the one at (j + k) % r sends the
       * receiver at place j, the class's places p .. p + m: each sends to
       * m / r of them, the m % r from the (p + k)-th on to one more. */
      each += m / r * v;
      for (int64_t q = 0; q < m % r && r > 1; q++)
        sent[by[(place[hit[h]] + q + k) % r]] += v;
    }
    for (int q = 0; q < r && r > 1; q++)
      sent[by[q]] += each;
    n_hit = 0;
    ok = ok && index_query(&pix, rank, pheld, o, &hit, &n_hit, &cap_hit);
    for (int h = 0; h < n_hit && ok; h++) {
      int64_t w = meet3_volume(rank, o, &pneed[hit[h]], &pheld[hit[h]]);
      elems -= pmult[hit[h]] * w;
      for (int q = pstart[hit[h]]; q < pstart[hit[h] + 1] && r > 1 && w; q++)
        sent[by[(hd->pos[plist[q]] + k) % r]] -= w;
    }
    /* The owner sends itself nothing (none where it has what it owns, as
     * every holder of several has). */
    int64_t mine = meet_volume(rank, o, &need[d]) - meet3_volume(rank, o, &need[d], &has[d]);
    if (r == 1)
      sent[d] += elems - mine;
    self[d] += mine;
  }
  bool cover = ok;
  for (int c = 0; c < n_need && cover; c++)
    cover = covered[c] == ap_dbox_volume(rank, &nbox[c]);
  if (cover) {
    for (int d = 0; d < n; d++) /* what d receives: its need less what it has or owns */
      self[d] = ap_dbox_volume(rank, &need[d]) - meet_volume(rank, &need[d], &has[d]) - self[d];
    ok = priced_bytes(x, t, sent, self);
    *done = ok;
  }
  ap_xfree(nbox);
  ap_xfree(pneed);
  ap_xfree(pheld);
  ap_xfree(nmult);
  ap_xfree(pmult);
  ap_xfree(covered);
  ap_xfree(sent);
  ap_xfree(self);
  ap_xfree(place);
  ap_xfree(pcls);
  ap_xfree(pstart);
  ap_xfree(plist);
  ap_xfree(hit);
  ap_xfree(nix.by_lo);
  ap_xfree(pix.by_lo);
  return ok;
}

/* Appends box b, owned by device d, to own (owner[] beside it). */
static bool own_push(box_vec *own, int **owner, int *cap_owner, const ap_dbox *b, int d) {
  if (!vec_push(own, b))
    return false;
  if (own->n > *cap_owner) { /* owner[] grows with own->b, which doubles */
    int *no = ap_xrealloc(*owner, (size_t)own->cap * sizeof *no);
    if (!no)
      return false;
    *owner = no;
    *cap_owner = own->cap;
  }
  (*owner)[own->n - 1] = d;
  return true;
}

/* A reduction at the owners (AP_DX_OWNER_REDUCE): the transfer bringing
 * each owner the other summands of what it owns, as share_out cuts it. */
typedef struct owner_summands {
  dctx *x;
  ap_dxfer *t;
  int cap;    /* t->pieces */
  int *seen;  /* [n_summands]: the stamp of the slice that has summand s already */
  int stamp;
} owner_summands;

/* Slice b, owned by devs[own] of its nd holders (every one holding all of
 * it): the owner's own summand by a local piece, then each other summand
 * once, from its first holder after the owner in devs[] (wrapping), so that
 * the slices of one set of holders take each summand from different
 * replicas. */
static bool add_summands(owner_summands *os, const int *devs, int nd, int own,
                         const ap_dbox *b) {
  const int *summand = os->t->summand;
  int o = devs[own];
  os->stamp++;
  os->seen[summand[o]] = os->stamp;
  if (!add_piece(os->x, os->t, &os->cap, o, o, summand[o], b))
    return false;
  for (int j = 1; j < nd; j++) {
    int d = devs[(own + j) % nd];
    if (os->seen[summand[d]] == os->stamp)
      continue;
    os->seen[summand[d]] = os->stamp;
    if (!add_piece(os->x, os->t, &os->cap, d, o, summand[d], b))
      return false;
  }
  return true;
}

/* One part of the owning shared out (share_out): its holders devs[0..nd)
 * in device order, where each slice dealt goes, and what its owner then
 * sends and owns. */
typedef struct owning {
  int rank;
  const int *devs;
  int nd;
  box_vec *own; /* NULL: priced, the counts below are all that is kept */
  int **owner, *cap_owner;
  int64_t *sends, *owns;
  owner_summands *os;
} owning;

/* Deals box b to the holders devs[first .. first + count): halves of the
 * holders take parts of b cut across its longest dimension in proportion,
 * down to one holder or one element. Cutting the longest dimension once
 * into a slice per holder left holders without a slice where they
 * outnumbered its length, and gave the others a larger one (one of GPT-2
 * tiny's 256 devices moved 1.7 times twice its box of the tied table). */
static bool deal(const owning *w, const ap_dbox *b, int first, int count) {
  int rank = w->rank, dim = 0;
  int64_t vol = ap_dbox_volume(rank, b);
  if (vol == 0)
    return true;
  for (int r = 1; r < rank; r++)
    if ((int64_t)b->hi[r] - b->lo[r] > (int64_t)b->hi[dim] - b->lo[dim])
      dim = r;
  int64_t len = rank ? (int64_t)b->hi[dim] - b->lo[dim] : 1;
  if (count > 1 && len > 1) {
    int half = count / 2;
    int64_t at = (len * half + count / 2) / count;
    at = at < 1 ? 1 : at > len - 1 ? len - 1 : at;
    ap_dbox lo = *b, hi = *b;
    lo.hi[dim] = hi.lo[dim] = (ap_dcoord)(b->lo[dim] + at);
    return deal(w, &lo, first, half) && deal(w, &hi, first + half, count - half);
  }
  int d = w->devs[first];
  if ((w->own && !own_push(w->own, w->owner, w->cap_owner, b, d)) ||
      (w->os && !add_summands(w->os, w->devs, w->nd, first, b)))
    return false;
  w->sends[d] += vol * (w->nd - 1);
  w->owns[d] += vol;
  return true;
}

/* The pieces share_out cuts, as a stack: a piece is its box, the chain of
 * distinct boxes it is known to lie inside (from in: chain[in].box, then
 * the chain from chain[in].next; -1 ends it), and the boxes still to look
 * at, after[from ..], the later boxes meeting the part being shared out, in
 * order: of those, the piece lies inside some, misses some, and is cut by
 * the others. */
typedef struct cut_piece {
  ap_dbox box;
  int in, from;
} cut_piece;

typedef struct cutting {
  cut_piece *stack;
  int n, cap;
  struct inside {
    int box, next;
  } *chain;
  int n_chain, cap_chain;
} cutting;

/* A chain: distinct box hit, then the chain from next; -1: out of memory. */
static int inside_add(cutting *ct, int hit, int next) {
  if (!heap_room((void **)&ct->chain, &ct->cap_chain, ct->n_chain + 1, sizeof *ct->chain))
    return -1;
  ct->chain[ct->n_chain] = (struct inside){hit, next};
  return ct->n_chain++;
}

/* Pushes piece b, inside the chain from in, to look at the boxes from
 * from on. False: out of memory. */
static bool piece_push(cutting *ct, const ap_dbox *b, int in, int from) {
  if (!heap_room((void **)&ct->stack, &ct->cap, ct->n + 1, sizeof *ct->stack))
    return false;
  ct->stack[ct->n++] = (cut_piece){*b, in, from};
  return true;
}

static void cutting_free(cutting *ct) {
  ap_xfree(ct->stack);
  ap_xfree(ct->chain);
}

/* What share_out reads and fills: the distinct boxes dbox[] with their
 * holders (members[start[j]..start[j + 1]) hold box j, in device order; no
 * device holds two), room for the pieces (ct), for a piece's holders (devs
 * and spare, n_dev each; mark, a bit per device, all clear) and for the
 * boxes containing it and where their holders start (inside and run,
 * n_distinct + 1 each), and the owning as deal makes it. */
typedef struct sharing {
  int rank;
  const ap_dbox *dbox;
  const int *start, *members;
  cutting *ct;
  int *devs, *spare, *inside, *run;
  uint64_t *mark;
  box_vec *own;
  int **owner, *cap_owner;
  int64_t *sends, *owns;
  owner_summands *os;
} sharing;

/* The holders of the n_in boxes sh->inside[] (nd devices) in device order.
 * Each box's list is in order already: a few are merged two by two, a
 * pass per doubling; more are marked in a bit per device and read back in
 * order. They were sorted (qsort): on 65,536 devices GPT-2 small's tied
 * table is cut into 3.3 million pieces over the plans priced, each inside
 * 185 boxes held by 563 devices on average. */
static const int *merged_holders(const sharing *sh, int n_in, int nd) {
  if (n_in == 1)
    return sh->members + sh->start[sh->inside[0]];
  int *a = sh->devs, *b = sh->spare, *run = sh->run, at = 0;
  if (n_in > 8) {
    int lo = INT_MAX, hi = -1;
    for (int k = 0; k < n_in; k++)
      for (int m = sh->start[sh->inside[k]]; m < sh->start[sh->inside[k] + 1]; m++) {
        int d = sh->members[m];
        sh->mark[d / 64] |= (uint64_t)1 << (d % 64);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
      }
    for (int w = lo / 64; w <= hi / 64; w++)
      for (uint64_t bits = sh->mark[w]; bits; bits &= bits - 1)
        a[at++] = 64 * w + __builtin_ctzll(bits);
    for (int w = lo / 64; w <= hi / 64; w++)
      sh->mark[w] = 0;
    return a;
  }
  for (int k = 0; k < n_in; k++) {
    run[k] = at;
    for (int m = sh->start[sh->inside[k]]; m < sh->start[sh->inside[k] + 1]; m++)
      a[at++] = sh->members[m];
  }
  run[n_in] = nd;
  for (int k = n_in; k > 1; k = (k + 1) / 2) {
    for (int r = 0; r < k; r += 2) {
      int i = run[r], mid = run[r + 1], j = mid, end = r + 1 < k ? run[r + 2] : mid, o = i;
      while (i < mid && j < end)
        b[o++] = a[i] < a[j] ? a[i++] : a[j++];
      while (i < mid)
        b[o++] = a[i++];
      while (j < end)
        b[o++] = a[j++];
      run[r / 2] = run[r];
    }
    run[(k + 1) / 2] = nd;
    int *swap = a;
    a = b;
    b = swap;
  }
  return a;
}

/* Deals piece b, inside the distinct boxes of the chain from in, to its
 * holders (deal). */
static bool deal_piece(const sharing *sh, const ap_dbox *b, int in) {
  if (ap_dbox_volume(sh->rank, b) == 0)
    return true; /* deal gives it to no one */
  int n_in = 0, nd = 0;
  for (int c = in; c >= 0; c = sh->ct->chain[c].next) {
    int box = sh->ct->chain[c].box;
    sh->inside[n_in++] = box;
    nd += sh->start[box + 1] - sh->start[box];
  }
  owning w = {sh->rank, merged_holders(sh, n_in, nd), nd, sh->own, sh->owner,
              sh->cap_owner, sh->sends, sh->owns, sh->os};
  return deal(&w, b, 0, nd);
}

/* A sum at the owners shares the owning out: the part cur of distinct box
 * i that no lower one holds is cut where the higher boxes meeting it
 * (hit[], sorted) begin and end, one box after another, so that each piece
 * has one set of holders, and each piece is dealt to its holders in device
 * order (deal). Every holder of a slice holds all of it, so its owner
 * sends it back to the other holders whole: sends[d] and owns[d] gain the
 * elements device d sends back and owns. The lowest-ranked holder owning
 * everything made device 0 sum GPT-2 small's tied table for a thousand
 * devices and send it back to each.
 *
 * A piece is cut by the first later box that cuts it (meets it without
 * containing it): it is replaced by its part inside that box, then its
 * parts outside it, each looking at the boxes after that one. So the
 * pieces are cut depth first, a piece looks only at the boxes after the
 * one that cut its parent, and it gathers the boxes it lies in as it looks.
 * Cutting every piece by each box in turn, then looking for each piece's
 * holders among all the boxes, gave the same pieces in the same order;
 * with the holders sorted, GPT-2 small's plan on 65,536 devices took 143 s;
 * with each piece's parts given, at the cut, a list of the later boxes that
 * still met them, 87 s, and 69 s as now on the same host (docs/plan-time.md,
 * "Sums at the owners, cut depth first", "A piece looks at the later boxes
 * itself"). */
static bool share_out(const sharing *sh, int i, const box_vec *cur, const int *hit, int n_hit) {
  int rank = sh->rank;
  const ap_dbox *dbox = sh->dbox;
  cutting *ct = sh->ct;
  ct->n = ct->n_chain = 0;
  int in_i = inside_add(ct, i, -1);
  if (in_i < 0)
    return false;
  /* The boxes after i (hit[] is sorted), then cur's pieces, the first on top. */
  int first = 0;
  while (first < n_hit && hit[first] <= i)
    first++;
  const int *after = hit + first;
  int n_after = n_hit - first;
  for (int q = cur->n - 1; q >= 0; q--)
    if (!piece_push(ct, &cur->b[q], in_i, 0))
      return false;
  while (ct->n > 0) {
    cut_piece pc = ct->stack[--ct->n];
    int at = pc.from, in = pc.in;
    ap_dbox m;
    for (; at < n_after; at++) {
      const ap_dbox *h = &dbox[after[at]];
      if (!intersect(rank, &pc.box, h, &m))
        continue;
      if (!contains(rank, h, &pc.box))
        break;
      if ((in = inside_add(ct, after[at], in)) < 0)
        return false;
    }
    if (at == n_after) {
      if (!deal_piece(sh, &pc.box, in))
        return false;
      continue;
    }
    /* Cut by box after[at]: the part inside it (m) on top, then the parts
     * outside it, each with the boxes after that one. */
    ap_dbox parts[MAX_PIECES_PER_BOX];
    int k = subtract(rank, &pc.box, &dbox[after[at]], parts),
        in_m = inside_add(ct, after[at], in);
    if (in_m < 0)
      return false;
    for (int p = k - 1; p >= 0; p--)
      if (!piece_push(ct, &parts[p], in, at + 1))
        return false;
    if (!piece_push(ct, &m, in_m, at + 1))
      return false;
  }
  return true;
}

/* The transfer giving every device need[d] of value v from the boxes
 * held[d]: every element a device lacks comes from a device holding the
 * lowest-ranked box that holds it, the holders of that box taking the
 * receivers in turn (sender). A sum at the owners (sum: need is
 * held, none of which is whole until summed) lacks everything it does not
 * own, and shares the owning out among the holders (share_out); with os,
 * the owners' summands go to os->t as the owning is shared out. NULL (and
 * no error) when every device holds what it needs. */
static ap_status exchange(dctx *x, int v, const ap_dbox *held, const ap_dbox *need, bool sum,
                          owner_summands *os, ap_dxfer **out) {
  const ap_value *val = &x->g->values[v];
  int rank = val->rank, n = x->n_dev;
  *out = NULL;
  bool local = !sum;
  for (int d = 0; d < n && local; d++)
    local = contains(rank, &held[d], &need[d]);
  if (local)
    return AP_OK;
  ap_dxfer *t = new_xfer(x, AP_DX_EXCHANGE, v);
  int *first = ap_xrealloc(NULL, (size_t)n * sizeof *first);
  int *distinct = ap_xrealloc(NULL, (size_t)n * sizeof *distinct);
  int *owner = NULL, *hit = NULL, n_hit = 0, cap_hit = 0, cap = 0, n_distinct = 0;
  int cap_owner = 0, *start = NULL, *members = NULL, *devs = NULL, *pos = NULL;
  int *inside = NULL, *run = NULL, *spare = NULL;
  uint64_t *mark = NULL;
  int64_t *sends = NULL, *owns = NULL;
  ap_dbox *none = NULL;
  const ap_dbox *has = held; /* what a receiver has whole */
  box_vec own = {0}, cur = {0}, tmp = {0};
  cutting cuts = {0};
  box_index dix = {0}, oix = {0};
  bool ok = t && first && distinct && box_classes(rank, held, n, first);
  /* What each device owns: its box less what lower-ranked devices hold, the
   * devices holding an equal box owning nothing more than its first one. */
  for (int d = 0; d < n && ok; d++)
    if (first[d] == d && ap_dbox_volume(rank, &held[d]) > 0)
      distinct[n_distinct++] = d;
  ap_dbox *dbox = ap_xrealloc(NULL, (size_t)(n_distinct ? n_distinct : 1) * sizeof *dbox);
  ok = ok && dbox;
  for (int i = 0; i < n_distinct && ok; i++)
    dbox[i] = held[distinct[i]];
  ok = ok && index_boxes(rank, dbox, n_distinct, &dix);
  if (ok) {
    /* The devices holding each distinct box, in device order: first[d] is
     * d's box's first device, distinct[i] that of box i. */
    start = ap_xrealloc(NULL, (size_t)(n_distinct + 1) * sizeof *start);
    members = ap_xrealloc(NULL, (size_t)n * sizeof *members);
    devs = ap_xrealloc(NULL, (size_t)n * sizeof *devs);
    ok = start && members && devs;
    for (int d = 0; d < n && ok; d++)
      devs[d] = -1;
    for (int i = 0; i < n_distinct && ok; i++)
      devs[distinct[i]] = i;
    for (int i = 0; i <= n_distinct && ok; i++)
      start[i] = 0;
    for (int d = 0; d < n && ok; d++)
      if (devs[first[d]] >= 0)
        start[devs[first[d]] + 1]++;
    for (int i = 0; i < n_distinct && ok; i++)
      start[i + 1] += start[i];
    int *fill = ok ? ap_xrealloc(NULL, (size_t)(n_distinct + 1) * sizeof *fill) : NULL;
    ok = ok && fill;
    for (int i = 0; i < n_distinct && ok; i++)
      fill[i] = start[i];
    for (int d = 0; d < n && ok; d++)
      if (devs[first[d]] >= 0)
        members[fill[devs[first[d]]]++] = d;
    ap_xfree(fill);
  }
  if (!sum && ok) {
    /* Each receiver's place, the devices ordered by the class of their
     * need, then by device (holders). */
    ap_dbox *cls = ap_xrealloc(NULL, (size_t)n * sizeof *cls);
    int64_t *mult = ap_xrealloc(NULL, (size_t)n * sizeof *mult);
    int *of = ap_xrealloc(NULL, (size_t)n * sizeof *of);
    pos = ap_xrealloc(NULL, (size_t)n * sizeof *pos);
    int k = cls && mult && of && pos
                ? box_class_list(rank, need, NULL, NULL, n, cls, NULL, mult, of)
                : -1;
    ok = k >= 0;
    for (int c = 0, at = 0; c < k; c++) { /* mult[c]: the class's next place */
      int64_t m = mult[c];
      mult[c] = at;
      at += (int)m;
    }
    for (int e = 0; e < n && ok; e++)
      pos[e] = (int)mult[of[e]]++;
    ap_xfree(cls);
    ap_xfree(mult);
    ap_xfree(of);
  }
  holders hd = {start, members, devs, pos}; /* devs: grp, intact where not a sum */
  if (sum && ok) {
    none = ap_xrealloc(NULL, (size_t)n * sizeof *none);
    sends = ap_xrealloc(NULL, (size_t)n * sizeof *sends);
    owns = ap_xrealloc(NULL, (size_t)n * sizeof *owns);
    spare = ap_xrealloc(NULL, (size_t)n * sizeof *spare);
    inside = ap_xrealloc(NULL, (size_t)(n_distinct + 1) * sizeof *inside);
    run = ap_xrealloc(NULL, (size_t)(n_distinct + 1) * sizeof *run);
    mark = ap_xrealloc(NULL, ((size_t)n / 64 + 1) * sizeof *mark);
    ok = none && sends && owns && spare && inside && run && mark;
    if (mark)
      memset(mark, 0, ((size_t)n / 64 + 1) * sizeof *mark);
    for (int d = 0; d < n && ok; d++)
      sends[d] = owns[d] = 0;
    if (ok) {
      memset(none, 0, (size_t)n * sizeof *none);
      has = none;
    }
  }
  for (int i = 0; i < n_distinct && ok; i++) {
    cur.n = 0;
    n_hit = 0;
    ok = vec_push(&cur, &dbox[i]) &&
         index_query(&dix, rank, dbox, &dbox[i], &hit, &n_hit, &cap_hit);
    if (ok)
      qsort(hit, (size_t)n_hit, sizeof *hit, cmp_int);
    for (int h = 0; h < n_hit && ok && cur.n && hit[h] < i; h++)
      ok = vec_subtract(rank, &cur, &dbox[hit[h]], &tmp);
    if (sum) {
      sharing sh = {rank,  dbox, start, members, &cuts, devs, spare, inside, run, mark,
                    x->priced ? NULL : &own, &owner, &cap_owner, sends, owns, os};
      ok = ok && share_out(&sh, i, &cur, hit, n_hit);
    }
    for (int k = 0; k < cur.n && ok && !sum; k++)
      ok = own_push(&own, &owner, &cap_owner, &cur.b[k], distinct[i]);
  }
  bool done = false;
  if (ok && x->priced && sum) {
    /* A device sends back what it owns to the other holders and receives
     * the rest of its box (share_out's counts); the pieces of every owned
     * box to every holder took GPT-2 small's planning on 4096 devices from
     * 3.4 s to 5.9 s. */
    for (int d = 0; d < n; d++)
      owns[d] = ap_dbox_volume(rank, &need[d]) - owns[d];
    ok = priced_bytes(x, t, sends, owns);
    done = true;
  }
  if (ok && x->priced && !sum)
    ok = exchange_bytes(x, t, rank, has, need, &own, owner, &hd, &done);
  ok = ok && (done || index_boxes(rank, own.b, own.n, &oix));
  /* Every receiver's missing boxes, from the owners in device order (from
   * the holder of each owned box that takes the receiver, sender). */
  for (int e = 0; e < n && ok && !done; e++) {
    if (ap_dbox_volume(rank, &need[e]) == 0)
      continue;
    ap_dbox mine;
    if (intersect(rank, &need[e], &has[e], &mine))
      ok = add_piece(x, t, &cap, e, e, 0, &mine);
    cur.n = 0;
    ok = ok && vec_push(&cur, &need[e]) && vec_subtract(rank, &cur, &has[e], &tmp);
    n_hit = 0;
    for (int m = 0; m < cur.n && ok; m++)
      ok = index_query(&oix, rank, own.b, &cur.b[m], &hit, &n_hit, &cap_hit);
    if (ok)
      qsort(hit, (size_t)n_hit, sizeof *hit, cmp_int);
    for (int h = 0; h < n_hit && ok; h++) {
      int from = sum ? owner[hit[h]] : sender(&hd, owner[hit[h]], hit[h], e);
      if ((h > 0 && hit[h] == hit[h - 1]) || from == e)
        continue;
      for (int m = 0; m < cur.n && ok; m++) {
        ap_dbox piece;
        if (intersect(rank, &own.b[hit[h]], &cur.b[m], &piece))
          ok = add_piece(x, t, &cap, from, e, 0, &piece);
      }
    }
  }
  ap_xfree(first);
  ap_xfree(distinct);
  ap_xfree(dbox);
  ap_xfree(start);
  ap_xfree(members);
  ap_xfree(devs);
  ap_xfree(pos);
  ap_xfree(none);
  ap_xfree(sends);
  ap_xfree(owns);
  ap_xfree(spare);
  ap_xfree(inside);
  ap_xfree(run);
  ap_xfree(mark);
  cutting_free(&cuts);
  ap_xfree(owner);
  ap_xfree(hit);
  ap_xfree(own.b);
  ap_xfree(cur.b);
  ap_xfree(tmp.b);
  ap_xfree(dix.by_lo);
  ap_xfree(oix.by_lo);
  if (!ok)
    return oom(x);
  *out = t;
  return AP_OK;
}

/* A reduction's bytes without its pieces (ap_distribute_priced). Device d
 * sends every device e holding another summand vol(box_d n box_e) and takes
 * as much from it: both are the sum over every e of vol(box_d n box_e) less
 * the sum over the e holding d's summand (d among them), each summed by
 * classes of equal boxes (of equal boxes and summand) found through an
 * index. Every device holding the whole value and a summand of its own
 * made the square of the device count in pieces; test_plan_bytes holds
 * these bytes equal to the enumerated pieces' (the program's). */
static bool reduction_bytes(dctx *x, ap_dxfer *t, int rank, const ap_dbox *box,
                            const int *summand) {
  int n = x->n_dev;
  size_t nb = (size_t)n * sizeof(ap_dbox), nm = (size_t)n * sizeof(int64_t);
  size_t ni = (size_t)n * sizeof(int);
  ap_dbox *bcls = ap_xrealloc(NULL, nb), *pcls = ap_xrealloc(NULL, nb);
  ap_dbox *grp = ap_xrealloc(NULL, nb);
  int64_t *bmult = ap_xrealloc(NULL, nm), *pmult = ap_xrealloc(NULL, nm);
  int64_t *all = ap_xrealloc(NULL, nm), *same = ap_xrealloc(NULL, nm);
  int *bof = ap_xrealloc(NULL, ni), *pof = ap_xrealloc(NULL, ni);
  struct keyed *order = ap_xrealloc(NULL, (size_t)n * sizeof *order);
  int *hit = NULL, n_hit = 0, cap_hit = 0, n_b = -1, n_p = -1;
  box_index ix = {0};
  bool ok = bcls && pcls && grp && bmult && pmult && all && same && bof && pof && order;
  if (ok) {
    n_b = box_class_list(rank, box, NULL, NULL, n, bcls, NULL, bmult, bof);
    n_p = box_class_list(rank, box, NULL, summand, n, pcls, NULL, pmult, pof);
    ok = n_b >= 0 && n_p >= 0 && index_boxes(rank, bcls, n_b, &ix);
  }
  for (int c = 0; c < n_b && ok; c++) {
    all[c] = 0;
    n_hit = 0;
    ok = index_query(&ix, rank, bcls, &bcls[c], &hit, &n_hit, &cap_hit);
    for (int h = 0; h < n_hit && ok; h++)
      all[c] += bmult[hit[h]] * meet_volume(rank, &bcls[c], &bcls[hit[h]]);
  }
  /* The (box, summand) classes by summand, each summand's indexed apart. */
  for (int d = 0; d < n && ok; d++)
    order[pof[d]] = (struct keyed){summand[d], pof[d]};
  if (ok)
    qsort(order, (size_t)n_p, sizeof *order, cmp_keyed);
  for (int a = 0, b; a < n_p && ok; a = b) {
    for (b = a; b < n_p && order[b].lo == order[a].lo; b++)
      grp[b - a] = pcls[order[b].id];
    ap_xfree(ix.by_lo);
    ix.by_lo = NULL;
    ok = index_boxes(rank, grp, b - a, &ix);
    for (int i = a; i < b && ok; i++) {
      int q = order[i].id;
      same[q] = 0;
      n_hit = 0;
      ok = index_query(&ix, rank, grp, &pcls[q], &hit, &n_hit, &cap_hit);
      for (int h = 0; h < n_hit && ok; h++)
        same[q] += pmult[order[a + hit[h]].id] * meet_volume(rank, &pcls[q], &grp[hit[h]]);
    }
  }
  for (int d = 0; d < n && ok; d++) /* bmult (one per class) is done with: per device */
    bmult[d] = all[bof[d]] - same[pof[d]];
  ok = ok && priced_bytes(x, t, bmult, bmult);
  ap_xfree(bcls);
  ap_xfree(pcls);
  ap_xfree(grp);
  ap_xfree(bmult);
  ap_xfree(pmult);
  ap_xfree(all);
  ap_xfree(same);
  ap_xfree(bof);
  ap_xfree(pof);
  ap_xfree(order);
  ap_xfree(hit);
  ap_xfree(ix.by_lo);
  return ok;
}

/* Partial sums over boxes that meet, summed at the owners (t's kind
 * becomes AP_DX_OWNER_REDUCE): an element held by h devices with k summands
 * among them moves (k - 1) + (h - 1) times, where sending every device each
 * other summand of its box moved it h(k - 1) times. */
static ap_status owner_reduction(dctx *x, ap_dxfer *t, const ap_dbox *box, ap_dxfer **out) {
  int n = x->n_dev;
  owner_summands os = {.x = x, .t = t, .seen = calloc((size_t)t->n_summands, sizeof(int))};
  if (!os.seen)
    return oom(x);
  t->kind = AP_DX_OWNER_REDUCE;
  ap_status s = exchange(x, t->value, box, box, true, &os, &t->spread);
  free(os.seen);
  if (s != AP_OK)
    return s;
  const ap_dxfer *sp = t->spread;
  if (sp && sp->sent && !t->sent) {
    t->sent = ap_arena_array(x->g->arena, (size_t)n, sizeof *t->sent);
    t->received = ap_arena_array(x->g->arena, (size_t)n, sizeof *t->received);
    if (!t->sent || !t->received)
      return oom(x);
    for (int d = 0; d < n; d++)
      t->sent[d] = t->received[d] = 0;
  }
  for (int d = 0; d < n && sp && sp->sent; d++) {
    t->sent[d] += sp->sent[d];
    t->received[d] += sp->received[d];
  }
  *out = t;
  return AP_OK;
}

/* The most a device sends and receives in transfer t (over a forward and
 * its adjoint), 0 where nothing moves. */
static double busiest(const ap_dxfer *t, int n) {
  double most = 0;
  for (int d = 0; d < n && t->sent; d++)
    most = t->sent[d] + t->received[d] > most ? t->sent[d] + t->received[d] : most;
  return most;
}

/* *out = the all-to-all reduction t, or the same partial sums summed at
 * their owners (float32, three summands or more) where that moves less on
 * its busiest device: the owners move fewer bytes in all, but where an
 * element has two summands only they move as many, in two rounds, and an
 * owner can take more than the all-to-all gives its device. */
static ap_status busier_of(dctx *x, ap_dxfer *t, const ap_dbox *box, ap_dxfer **out) {
  *out = t;
  if (t->n_summands < 3 || x->g->values[t->value].dtype != AP_DT_FLOAT)
    return AP_OK;
  ap_dxfer *o = new_xfer(x, AP_DX_OWNER_REDUCE, t->value);
  if (!o)
    return oom(x);
  o->n_summands = t->n_summands;
  o->summand = t->summand;
  ap_dxfer *owned = NULL;
  ap_status s = owner_reduction(x, o, box, &owned);
  if (s == AP_OK && owned && busiest(owned, x->n_dev) < busiest(t, x->n_dev))
    *out = owned;
  return s;
}

/* Resolves partial sums of value v: device d holds summand summand[d] over
 * box[d]; afterwards every device holds the sum over box[d]. */
static ap_status reduction(dctx *x, int v, const ap_dbox *box, int *summand, int n_summands,
                           ap_dxfer **out) {
  ap_arena *a = x->g->arena;
  const ap_value *val = &x->g->values[v];
  int rank = val->rank, n = x->n_dev;
  /* An all-reduce when the devices fall into groups of equal boxes holding
   * one of each summand (float32 only: the runtime's all-reduce sums floats).
   * Equal boxes are an equivalence, so each group is listed once, by the
   * first device holding its box. */
  int *group = ap_arena_array(a, (size_t)n, sizeof *group);
  int *members = ap_arena_array(a, (size_t)n, sizeof *members);
  int *first = malloc((size_t)n * sizeof *first);
  if (!group || !members || !first || !box_classes(rank, box, n, first)) {
    free(first);
    return oom(x);
  }
  bool clean = val->dtype == AP_DT_FLOAT;
  int n_members = 0; /* groups of n_summands each, filling members exactly when clean */
  for (int d = 0; d < n && clean; d++) {
    if (first[d] == d) {
      if (n_members + n_summands > n) {
        clean = false;
        break;
      }
      group[d] = n_members;
      n_members += n_summands;
      for (int s = 0; s < n_summands; s++)
        members[group[d] + s] = -1;
    }
    group[d] = group[first[d]];
    int *slot = &members[group[d] + summand[d]];
    clean &= *slot < 0;
    *slot = d;
  }
  for (int m = 0; m < n_members && clean; m++)
    clean = members[m] >= 0;
  free(first);
  ap_dxfer *t = new_xfer(x, clean ? AP_DX_ALLREDUCE : AP_DX_REDUCE, v);
  if (!t)
    return oom(x);
  t->n_summands = n_summands;
  t->summand = summand;
  t->group = group;
  t->members = members;
  /* Otherwise every device sends each other device the part of its summand
   * that device's box meets, in device order: the index finds the boxes
   * meeting a box (testing every pair took a third of GPT-2 tiny's planning
   * over 16384 devices). */
  if (!clean && x->priced) {
    if (!reduction_bytes(x, t, rank, box, summand))
      return oom(x);
    return busier_of(x, t, box, out);
  }
  box_index ix = {0};
  int *hit = NULL, n_hit = 0, cap_hit = 0, cap = 0;
  bool ok = clean || index_boxes(rank, box, n, &ix);
  for (int e = 0; e < n && ok && !clean; e++) {
    if (ap_dbox_volume(rank, &box[e]) == 0)
      continue;
    n_hit = 0;
    ok = add_piece(x, t, &cap, e, e, summand[e], &box[e]) &&
         index_query(&ix, rank, box, &box[e], &hit, &n_hit, &cap_hit);
    if (ok)
      qsort(hit, (size_t)n_hit, sizeof *hit, cmp_int);
    for (int h = 0; h < n_hit && ok; h++) {
      int d = hit[h];
      ap_dbox piece;
      if (d != e && summand[d] != summand[e] && intersect(rank, &box[e], &box[d], &piece))
        ok = add_piece(x, t, &cap, d, e, summand[d], &piece);
    }
  }
  ap_xfree(hit);
  ap_xfree(ix.by_lo);
  if (!ok)
    return oom(x);
  if (!clean)
    return busier_of(x, t, box, out);
  *out = t;
  return AP_OK;
}

static void charge_reduction(dctx *x, const ap_dxfer *t, const ap_dbox *box, double *bytes) {
  ap_dxfer_charge(x->g, t, box, x->n_dev, bytes);
}

void ap_dxfer_charge(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box, int n_dev,
                     double *bytes) {
  const ap_value *val = &g->values[t->value];
  if (t->kind != AP_DX_ALLREDUCE) {
    charge_pieces(t, false, n_dev, bytes);
    return;
  }
  for (int d = 0; d < n_dev; d++)
    bytes[d] += (double)aprt_allreduce_bytes(t->n_summands, ap_dbox_volume(val->rank, &box[d]),
                                              NULL, t->summand[d]);
}

/* ---- one node ------------------------------------------------------------- */

static ap_dbox *IN(dctx *x, int ni, int slot, int dev) {
  return &x->dist->node[ni].in[slot][dev];
}
static ap_dbox *OUT(dctx *x, int ni, int o, int dev) {
  return &x->dist->node[ni].out[o][dev];
}
ap_dbox ap_dist_held(const ap_graph *g, const ap_dist *dist, int v, int d) {
  if (dist->held[v])
    return dist->held[v][d];
  ap_dbox b;
  memset(&b, 0, sizeof b);
  return ap_value_shape_known(&g->values[v]) ? whole_box(&g->values[v]) : b;
}

/* Every device's box of value v, as an array of its own where it was none
 * (NULL: out of memory). */
/* Every device's whole box of val: one array per shape, which the weights
 * every device reads whole share (over a thousand devices an array per
 * weight was half a plan's memory). NULL: out of memory. */
static ap_dbox *whole_array(dctx *x, const ap_value *val) {
  size_t dims = (size_t)val->rank * sizeof *val->dims;
  for (whole_boxes *w = x->wholes; w; w = w->next)
    if (w->rank == val->rank && !memcmp(w->dims, val->dims, dims))
      return w->box;
  whole_boxes *w = ap_arena_alloc(x->g->arena, sizeof *w);
  ap_dbox *box = ap_arena_array(x->g->arena, (size_t)x->n_dev, sizeof *box);
  if (!w || !box)
    return NULL;
  w->rank = val->rank;
  memcpy(w->dims, val->dims, dims);
  w->box = box;
  ap_dbox whole = whole_box(val);
  for (int d = 0; d < x->n_dev; d++)
    box[d] = whole;
  w->next = x->wholes;
  x->wholes = w;
  return box;
}

static ap_dbox *held_array(dctx *x, int v) {
  if (x->dist->held[v])
    return x->dist->held[v];
  if (ap_value_shape_known(&x->g->values[v]))
    return x->dist->held[v] = whole_array(x, &x->g->values[v]);
  ap_dbox *h = ap_arena_array(x->g->arena, (size_t)x->n_dev, sizeof *h);
  for (int d = 0; d < x->n_dev && h; d++) /* before the array is the value's */
    h[d] = ap_dist_held(x->g, x->dist, v, d);
  return x->dist->held[v] = h;
}

static bool is_data(const ap_value *v) { return v->data != NULL; }

/* Every device's box of vertex vx's port (or, port -1, of its weight) into
 * box[0 .. n_dev). */
static void boxes_of(dctx *x, int vx, int port, ap_dbox *box) {
  if (port < 0)
    ap_plan_weight_boxes(x->p, x->g, vx, box);
  else
    ap_plan_device_boxes(x->p, x->g, vx, port, box);
}

/* The output axis that axis a of node ni's input i follows, or -1
 * (ap_axes_in_to_out), from a map made once per node, not per device. */
static int out_axis(dctx *x, int ni, int i, int a) {
  const ap_node *n = &x->g->nodes[ni];
  if (i >= MAX_FOLLOWED)
    return ap_axes_in_to_out(x->g, n, i, a);
  if (x->follow_node != ni) {
    x->follow_node = ni;
    for (int s = 0; s < n->n_in && s < MAX_FOLLOWED; s++)
      for (int b = 0; b < AP_MAX_RANK; b++)
        x->follow[s][b] = (signed char)(n->in[s] >= 0 && b < x->g->values[n->in[s]].rank
                                            ? ap_axes_in_to_out(x->g, n, s, b)
                                            : -1);
  }
  return x->follow[i][a];
}

/* Every input box of node ni follows the output box along the axes the
 * operator's rule maps (ir/axes.c); the other axes stay as the node's
 * input boxes hold them. follow_map lists those axes (but input
 * skip_slot's) once per node in x->pairs and returns their count (-1: out
 * of memory); follow_output sets device dev's input boxes from its output
 * box ob. */
static int follow_map(dctx *x, int ni, int skip_slot) {
  const ap_node *n = &x->g->nodes[ni];
  int n_pairs = 0;
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0 || i == skip_slot)
      continue;
    const ap_value *xi = &x->g->values[n->in[i]];
    for (int a = 0; a < xi->rank; a++) {
      int j = out_axis(x, ni, i, a);
      if (j < 0)
        continue;
      if (!heap_room((void **)&x->pairs, &x->cap_pairs, n_pairs + 1, sizeof *x->pairs))
        return -1;
      x->pairs[n_pairs++] = (follow_pair){i, (signed char)a, (signed char)j};
    }
  }
  return n_pairs;
}

static void follow_output(dctx *x, int ni, int dev, const ap_dbox *ob, int n_pairs) {
  ap_dbox *const *in = x->dist->node[ni].in;
  for (int k = 0; k < n_pairs; k++) {
    const follow_pair *pr = &x->pairs[k];
    ap_dbox *b = &in[pr->slot][dev];
    b->lo[pr->a] = ob->lo[pr->j];
    b->hi[pr->a] = ob->hi[pr->j];
  }
}

/* A layer: the plan gives its output, activation and weight boxes; every
 * other input (a bias) and the weight's other axes (a batched weight's
 * batch) follow the output box; partial sums (type II) are reduced after
 * it, the bias added once they are. */
static ap_status layer_node(dctx *x, int ni, int vx) {
  ap_graph *g = x->g;
  const ap_node *n = &g->nodes[ni];
  const ap_vertex *V = &x->p->v[vx];
  ap_dnode *dn = &x->dist->node[ni];
  int n_dev = x->n_dev, act = -1;
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] == V->port[1].value && act < 0)
      act = i;
  boxes_of(x, vx, 0, OUT(x, ni, 0, 0));
  for (int o = 1; o < n->n_out; o++) /* a layer's further outputs: held by none */
    if (n->out[o] >= 0)
      memset(OUT(x, ni, o, 0), 0, (size_t)n_dev * sizeof(ap_dbox));
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0 && (i == act || n->in[i] == V->weight))
      boxes_of(x, vx, i == act ? 1 : -1, IN(x, ni, i, 0));
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0 && i != act && n->in[i] != V->weight) {
      ap_dbox w = whole_box(&g->values[n->in[i]]);
      for (int dev = 0; dev < n_dev; dev++)
        *IN(x, ni, i, dev) = w;
    }
  int n_pairs = follow_map(x, ni, act);
  if (n_pairs < 0)
    return oom(x);
  for (int dev = 0; dev < n_dev; dev++)
    follow_output(x, ni, dev, OUT(x, ni, 0, dev), n_pairs);
  dn->bias_slot = -1;
  if (has_type(x, vx, 1)) {
    int *summand = ap_arena_array(g->arena, (size_t)n_dev, sizeof *summand), S;
    if (!summand)
      return oom(x);
    if (!summands(x, vx, 1, summand, &S))
      return oom(x);
    if (S > 1) {
      ap_status s = reduction(x, n->out[0], dn->out[0], summand, S, &dn->reduce);
      if (s != AP_OK)
        return s;
      charge_reduction(x, dn->reduce, dn->out[0], x->dist->fwd_bytes);
      if (n->op != AP_OP_GATHER && n->n_in > 2 && n->in[2] >= 0)
        dn->bias_slot = 2;
    }
  }
  return AP_OK;
}

static void all_whole(dctx *x, int ni) {
  const ap_node *n = &x->g->nodes[ni];
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0) {
      ap_dbox w = whole_box(&x->g->values[n->in[i]]);
      for (int dev = 0; dev < x->n_dev; dev++)
        *IN(x, ni, i, dev) = w;
    }
  for (int o = 0; o < n->n_out; o++)
    if (n->out[o] >= 0) {
      ap_dbox w = whole_box(&x->g->values[n->out[o]]);
      for (int dev = 0; dev < x->n_dev; dev++)
        *OUT(x, ni, o, dev) = w;
    }
}

/* A weightless node whose output carries its one computed input's boxes
 * unchanged (an element-wise operator, a normalization: every axis maps to
 * itself, any may be split): the output and that input share the input's
 * held boxes, and only the other inputs (a normalization's parameters)
 * follow them device by device. What weightless_node computes, without
 * a box per device for the two. False where the rule does not apply. */
static bool carry_unchanged(dctx *x, int ni) {
  ap_graph *g = x->g;
  const ap_node *n = &g->nodes[ni];
  ap_dnode *dn = &x->dist->node[ni];
  int c = -1;
  if (n->n_out != 1 || !ap_axes_boxwise(g, n) || ap_op_table[n->op].axes == AP_AXES_RESHAPE ||
      ap_op_table[n->op].axes == AP_AXES_CONCAT)
    return false;
  for (int i = 0; i < n->n_in; i++) {
    int v = n->in[i];
    if (v < 0 || is_data(&g->values[v]) || !ap_axes_data_slot(n, i))
      continue;
    if (c >= 0)
      return false; /* the box carried may differ device by device */
    c = i;
  }
  if (c < 0 || !x->dist->held[n->in[c]])
    return false;
  const ap_value *xv = &g->values[n->in[c]], *y = &g->values[n->out[0]];
  if (xv->rank != y->rank)
    return false;
  for (int a = 0; a < y->rank; a++)
    if (xv->dims[a] != y->dims[a] || out_axis(x, ni, c, a) != a || !ap_axes_out_split(g, n, a))
      return false;
  int n_pairs = follow_map(x, ni, c); /* out of memory: not carried, and weightless_node says so */
  if (n_pairs < 0)
    return false;
  ap_dbox *held = x->dist->held[n->in[c]];
  dn->out[0] = dn->in[c] = held;
  for (int i = 0; i < n->n_in; i++)
    if (i != c && n->in[i] >= 0) {
      ap_dbox w = whole_box(&g->values[n->in[i]]);
      for (int dev = 0; dev < x->n_dev; dev++)
        *IN(x, ni, i, dev) = w;
    }
  for (int dev = 0; dev < x->n_dev; dev++)
    follow_output(x, ni, dev, &held[dev], n_pairs);
  return true;
}

/* A weightless node: its output box (from the plan for a join, carried
 * from its input otherwise), then what it reads of every input, both by
 * the operator's axis rule. The whole boxes of its first WHOLE_OUT outputs
 * are made once, not per device. */
enum { WHOLE_OUT = 8 };
static ap_status weightless_node(dctx *x, int ni, int vx) {
  ap_graph *g = x->g;
  const ap_node *n = &g->nodes[ni];
  const ap_value *y = &g->values[n->out[0]];
  if (vx < 0 && carry_unchanged(x, ni))
    return AP_OK;
  all_whole(x, ni);
  if (ap_op_table[n->op].axes == AP_AXES_RESHAPE) {
    if (n->in[0] < 0 || vx >= 0)
      return AP_OK;
    for (int dev = 0; dev < x->n_dev; dev++) {
      ap_dbox h = ap_dist_held(g, x->dist, n->in[0], dev);
      reshape_boxes(&g->values[n->in[0]], y, &h, IN(x, ni, 0, dev), OUT(x, ni, 0, dev));
    }
    return AP_OK;
  }
  if (!ap_axes_boxwise(g, n))
    return AP_OK;
  /* A join's output boxes, from the plan. */
  ap_dbox *planned = vx >= 0 ? ap_arena_array(g->arena, (size_t)x->n_dev, sizeof *planned) : NULL;
  if (vx >= 0 && !planned)
    return oom(x);
  ap_dbox whole_y = whole_box(y), whole_out[WHOLE_OUT];
  for (int o = 0; o < n->n_out && o < WHOLE_OUT; o++)
    if (n->out[o] >= 0)
      whole_out[o] = whole_box(&g->values[n->out[o]]);
  if (planned) {
    for (int dev = 0; dev < x->n_dev; dev++)
      planned[dev] = whole_y;
    boxes_of(x, vx, 0, planned);
  }
  int n_pairs = follow_map(x, ni, -1);
  if (n_pairs < 0)
    return oom(x);
  bool split[AP_MAX_RANK]; /* the output dims the rule lets a device hold in part */
  for (int j = 0; j < y->rank && j < AP_MAX_RANK; j++)
    split[j] = ap_axes_out_split(g, n, j);
  for (int dev = 0; dev < x->n_dev; dev++) {
    ap_dbox ob = whole_y;
    if (vx >= 0) {
      ob = planned[dev];
    } else { /* carried from the first data input held in part */
      for (int i = 0; i < n->n_in; i++) {
        int v = n->in[i];
        if (v < 0 || is_data(&g->values[v]) || !ap_axes_data_slot(n, i))
          continue;
        ap_dbox h = ap_dist_held(g, x->dist, v, dev);
        if (ap_dbox_whole(&g->values[v], &h))
          continue;
        for (int a = 0; a < g->values[v].rank; a++) {
          int j = out_axis(x, ni, i, a);
          if (j >= 0) {
            ob.lo[j] = h.lo[a];
            ob.hi[j] = h.hi[a];
          }
        }
        break;
      }
    }
    for (int j = 0; j < y->rank; j++)
      if (!split[j]) {
        ob.lo[j] = 0;
        ob.hi[j] = y->dims[j];
      }
    for (int o = 0; o < n->n_out; o++) {
      if (n->out[o] < 0)
        continue;
      const ap_value *yo = &g->values[n->out[o]];
      ap_dbox *b = OUT(x, ni, o, dev);
      *b = o < WHOLE_OUT ? whole_out[o] : whole_box(yo);
      for (int j = 0; j < yo->rank && j < y->rank; j++)
        if (yo->dims[j] == y->dims[j]) {
          b->lo[j] = ob.lo[j];
          b->hi[j] = ob.hi[j];
        }
    }
    follow_output(x, ni, dev, &ob, n_pairs);
    if (ap_op_table[n->op].axes != AP_AXES_CONCAT)
      continue;
    /* Along the axis, the part of the output's slab each input fills. */
    int64_t at = 0;
    int axis = norm_axis(ap_attr_int(n, "axis", 0), y->rank);
    for (int i = 0; i < n->n_in && axis >= 0; i++) {
      if (n->in[i] < 0)
        continue;
      const ap_value *xi = &g->values[n->in[i]];
      ap_dbox *b = IN(x, ni, i, dev);
      int64_t lo = ob.lo[axis] - at, hi = ob.hi[axis] - at, len = xi->dims[axis];
      lo = lo < 0 ? 0 : lo > len ? len : lo;
      hi = hi < lo ? lo : hi > len ? len : hi;
      b->lo[axis] = lo;
      b->hi[axis] = hi;
      at += len;
    }
  }
  return AP_OK;
}

static bool reserve_work(dctx *x, const ap_node *n);

/* Copies node ni's ports to x->work before they change (kept arrays are
 * shared by other ports): keep_ports keeps them once changed. */
static bool own_ports(dctx *x, int ni) {
  const ap_node *n = &x->g->nodes[ni];
  ap_dnode *dn = &x->dist->node[ni];
  size_t size = (size_t)x->n_dev * sizeof(ap_dbox);
  if (!reserve_work(x, n))
    return false;
  for (int p = 0; p < n->n_in + n->n_out; p++) {
    int v = p < n->n_in ? n->in[p] : n->out[p - n->n_in];
    ap_dbox **port = p < n->n_in ? &dn->in[p] : &dn->out[p - n->n_in];
    if (v >= 0)
      *port = memcpy(x->work + (size_t)p * (size_t)x->n_dev, *port, size);
  }
  return true;
}

/* Values computed from weights and constants alone (a tied embedding
 * table's transpose feeding the LM head, a slice of a fused weight; the
 * weights initializers or fed) are computed where they are read:
 * such a node computes, on each device, the smallest box holding what its
 * readers there read, and reads of its inputs what that box needs. In
 * reverse order, so a chain of them narrows from its last reader back to
 * the weight, whose box then covers only what the layers read of it. */
void ap_dist_weight_derived(const ap_graph *g, bool *derived) {
  ap_fed_weights(g, derived);
  for (int v = 0; v < g->n_values; v++)
    derived[v] |= g->values[v].data != NULL;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    bool all = !n->dead && n->n_in > 0;
    for (int i = 0; i < n->n_in && all; i++)
      all = n->in[i] < 0 || derived[n->in[i]];
    for (int o = 0; o < n->n_out && all; o++)
      if (n->out[o] >= 0)
        derived[n->out[o]] = true;
  }
}

static bool keep_ports(dctx *x, int ni);

/* False: out of memory with a node's ports in x->work. */
static bool narrow_weight_chains(dctx *x) {
  ap_graph *g = x->g;
  bool *derived = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *derived);
  /* The distributed readers of the value at hand, (node, slot) pairs: found
   * once, not for every device (GPT-2 small over 4096 devices spent a
   * fifth of its planning scanning the nodes after each chain op). */
  int (*reader)[2] = NULL, n_reader = 0, cap_reader = 0;
  if (!derived)
    return true; /* boxes stay whole: correct, only larger */
  ap_dist_weight_derived(g, derived);
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || n->n_out != 1 || n->out[0] < 0 || !x->dist->node[ni].in ||
        x->vertex_of[ni] >= 0 || !derived[n->out[0]] || g->values[n->out[0]].data ||
        g->values[n->out[0]].is_graph_output || !ap_axes_boxwise(g, n) ||
        ap_op_table[n->op].axes == AP_AXES_RESHAPE)
      continue;
    int y = n->out[0];
    const ap_value *yv = &g->values[y];
    n_reader = 0;
    for (int ci = ni + 1; ci < g->n_nodes; ci++) {
      const ap_node *c = &g->nodes[ci];
      for (int i = 0; i < c->n_in && !c->dead && x->dist->node[ci].in; i++)
        if (c->in[i] == y) {
          if (!ap_arena_grow(g->arena, (void **)&reader, &cap_reader, n_reader + 1,
                             sizeof *reader))
            return true; /* boxes stay as the node computes them: correct, only larger */
          reader[n_reader][0] = ci;
          reader[n_reader++][1] = i;
        }
    }
    if (!n_reader)
      continue;
    bool split[AP_MAX_RANK];
    for (int a = 0; a < yv->rank; a++)
      split[a] = ap_axes_out_split(g, n, a);
    int n_pairs = follow_map(x, ni, -1);
    if (n_pairs < 0)
      return false;
    bool own = false;
    for (int dev = 0; dev < x->n_dev; dev++) {
      ap_dbox need;
      for (int r = 0; r < n_reader; r++) {
        const ap_dbox *b = IN(x, reader[r][0], reader[r][1], dev);
        for (int a = 0; a < yv->rank; a++) {
          need.lo[a] = r && need.lo[a] < b->lo[a] ? need.lo[a] : b->lo[a];
          need.hi[a] = r && need.hi[a] > b->hi[a] ? need.hi[a] : b->hi[a];
        }
      }
      for (int a = 0; a < yv->rank; a++)
        if (!split[a]) {
          need.lo[a] = 0;
          need.hi[a] = (ap_dcoord)yv->dims[a];
        }
      if (!own && !(own = own_ports(x, ni)))
        return true; /* boxes stay as the node computes them: correct, only larger */
      *OUT(x, ni, 0, dev) = need;
      for (int i = 0; i < n->n_in; i++)
        if (n->in[i] >= 0)
          *IN(x, ni, i, dev) = whole_box(&g->values[n->in[i]]);
      follow_output(x, ni, dev, &need, n_pairs);
    }
    if (own && !keep_ports(x, ni))
      return false;
    if (own)
      x->dist->held[y] = x->dist->node[ni].out[0]; /* the value's held boxes too */
  }
  return true;
}

/* Room in x->work for node ni's ports: its boxes are computed there and
 * kept by keep_ports. */
static bool reserve_work(dctx *x, const ap_node *n) {
  size_t need = (size_t)(n->n_in + n->n_out) * (size_t)x->n_dev;
  if (need > x->work_cap) {
    ap_dbox *w = ap_xrealloc(x->work, need * sizeof *w);
    if (!w)
      return false;
    x->work = w;
    x->work_cap = need;
  }
  return true;
}

/* Points node ni's ports at x->work, not cleared: every rule writes each
 * device's box of each port it keeps (all_whole, boxes_of, layer_node's
 * further outputs), and boxes are read up to their value's rank only.
 * Clearing them was 7% of planning ResNet-152 over 1024 devices. */
static bool work_on(dctx *x, int ni) {
  const ap_node *n = &x->g->nodes[ni];
  ap_dnode *dn = &x->dist->node[ni];
  if (!reserve_work(x, n))
    return false;
  for (int i = 0; i < n->n_in; i++)
    dn->in[i] = x->work + (size_t)i * (size_t)x->n_dev;
  for (int o = 0; o < n->n_out; o++)
    dn->out[o] = x->work + (size_t)(n->n_in + o) * (size_t)x->n_dev;
  return true;
}

static bool same_boxes(int rank, const ap_dbox *a, const ap_dbox *b, int n) {
  for (int d = 0; d < n; d++)
    if (!ap_dbox_equal(rank, &a[d], &b[d]))
      return false;
  return true;
}

/* *port (in x->work, of value v) moves to cand when that holds the same
 * boxes of a value of v's rank (w). */
static bool share(dctx *x, ap_dbox **port, int v, ap_dbox *cand, int w) {
  const ap_graph *g = x->g;
  if (cand && cand == *port)
    return true;
  if (!cand || w < 0 || g->values[w].rank != g->values[v].rank ||
      !same_boxes(g->values[v].rank, *port, cand, x->n_dev))
    return false;
  *port = cand;
  return true;
}

static uint64_t boxes_hash(int rank, const ap_dbox *box, int n) {
  /* A dimension's bounds make one word, multiplied into one of four lanes
   * by device, so that the multiplications do not wait on one another (FNV
   * over every coordinate in one chain was a seventh of the distribution of
   * ResNet-152 over 1024 devices); each step is a bijection, so arrays
   * differing in one word always differ. splitmix64's finaliser mixes the
   * lanes' high bits into the low ones the table reads. */
  uint64_t lane[4] = {(uint64_t)rank, 1, 2, 3};
  for (int d = 0; d < n; d++) {
    uint64_t *h = &lane[d & 3];
    for (int i = 0; i < rank; i++)
      *h = (*h ^ ((uint64_t)(uint32_t)box[d].lo[i] | (uint64_t)(uint32_t)box[d].hi[i] << 32)) *
           0x9e3779b97f4a7c15u;
  }
  uint64_t h = lane[0] ^ (lane[1] << 16 | lane[1] >> 48) ^ (lane[2] << 32 | lane[2] >> 32) ^
               (lane[3] << 48 | lane[3] >> 16);
  h = (h ^ h >> 30) * 0xbf58476d1ce4e5b9u;
  h = (h ^ h >> 27) * 0x94d049bb133111ebu;
  return h ^ h >> 31;
}

/* Room in x->memo for one more entry (false: out of memory): at most
 * half its slots full. */
static bool memo_room(dctx *x) {
  if (2 * (x->n_memo + 1) <= x->memo_cap)
    return true;
  size_t cap = x->memo_cap ? 2 * x->memo_cap : 256, mask = cap - 1;
  memo_entry *m = ap_xrealloc(NULL, cap * sizeof *m);
  if (!m)
    return false;
  for (size_t j = 0; j < cap; j++)
    m[j].box = NULL;
  for (size_t j = 0; j < x->memo_cap; j++)
    if (x->memo[j].box) {
      size_t k = (size_t)x->memo[j].hash & mask;
      while (m[k].box)
        k = (k + 1) & mask;
      m[k] = x->memo[j];
    }
  ap_xfree(x->memo);
  x->memo = m;
  x->memo_cap = cap;
  return true;
}

/* The one array kept with the boxes of port (rank), made from a copy of
 * port where there is none yet: the ports of every node with equal boxes
 * share it (GPT-2 small's twelve blocks are one block's arrays; ResNet-152
 * over 1024 devices keeps 21 arrays). NULL: out of memory. */
static ap_dbox *keep_array(dctx *x, int rank, const ap_dbox *port) {
  if (!memo_room(x))
    return NULL;
  uint64_t h = boxes_hash(rank, port, x->n_dev);
  size_t mask = x->memo_cap - 1, j = (size_t)h & mask;
  for (memo_entry *m; (m = &x->memo[j])->box; j = (j + 1) & mask)
    if (m->hash == h && m->kind == MEMO_ARRAY && m->rank == rank &&
        same_boxes(rank, m->box, port, x->n_dev))
      return m->box;
  ap_dbox *b = ap_arena_copy(x->g->arena, port, (size_t)x->n_dev * sizeof(ap_dbox));
  if (!b)
    return NULL;
  x->memo[j] = (memo_entry){.hash = h, .box = b, .kind = MEMO_ARRAY, .rank = rank};
  x->n_memo++;
  return b;
}

/* Moves node ni's ports out of x->work: each to an equal array kept
 * already (an input's held boxes, a port of the node before it, the ports
 * of the last eight slots compared first, then any array keep_array
 * kept), else to a new one. */
static bool keep_ports(dctx *x, int ni) {
  const ap_node *n = &x->g->nodes[ni];
  ap_dnode *dn = &x->dist->node[ni];
  ap_dist *dist = x->dist;
  int n_ports = n->n_out + n->n_in;
  for (int p = 0; p < n_ports; p++) { /* outputs first: an input may share one */
    bool is_out = p < n->n_out;
    int slot = is_out ? p : p - n->n_out, v = is_out ? n->out[slot] : n->in[slot];
    ap_dbox **port = is_out ? &dn->out[slot] : &dn->in[slot];
    if (v < 0) {
      *port = x->none;
      continue;
    }
    uintptr_t at = (uintptr_t)*port, work = (uintptr_t)x->work;
    if (at < work || at >= work + x->work_cap * sizeof *x->work)
      continue; /* shared already (carry_unchanged) */
    bool shared = false;
    if (is_out) {
      for (int i = 0; i < n->n_in && !shared; i++)
        shared = n->in[i] >= 0 && share(x, port, v, dist->held[n->in[i]], n->in[i]);
    } else if (!dist->held[v]) { /* held whole by every device */
      bool whole = true;
      for (int d = 0; d < x->n_dev && whole; d++)
        whole = ap_dbox_whole(&x->g->values[v], &(*port)[d]);
      ap_dbox *h = whole ? held_array(x, v) : NULL;
      if (whole && !h)
        return false;
      shared = whole && share(x, port, v, h, v);
    } else {
      shared = share(x, port, v, dist->held[v], v);
    }
    for (int q = p - 1; q >= 0 && q >= p - 8 && !shared; q--) {
      bool q_out = q < n->n_out;
      int qs = q_out ? q : q - n->n_out, w = q_out ? n->out[qs] : n->in[qs];
      shared = share(x, port, v, q_out ? dn->out[qs] : dn->in[qs], w);
    }
    if (!shared && !(*port = keep_array(x, x->g->values[v].rank, *port)))
      return false;
  }
  return true;
}

/* The memo's entry for a transfer of kind over kept arrays a and b (b
 * NULL for a weight sum) of value v's element type, or the free slot where
 * it goes (box NULL); *hash its hash. NULL: out of memory. */
static memo_entry *xfer_slot(dctx *x, int kind, const ap_dbox *a, const ap_dbox *b, int v,
                             uint64_t *hash) {
  if (!memo_room(x))
    return NULL;
  int dtype = (int)x->g->values[v].dtype;
  uint64_t h = ((uint64_t)(uintptr_t)a * 0x9e3779b97f4a7c15u ^ (uint64_t)(uintptr_t)b) *
                   0xff51afd7ed558ccdu ^
               (uint64_t)(kind * 64 + dtype);
  h ^= h >> 31;
  size_t mask = x->memo_cap - 1, j = (size_t)h & mask;
  memo_entry *m;
  for (; (m = &x->memo[j])->box; j = (j + 1) & mask)
    if (m->kind == kind && m->box == a && m->need == b && m->dtype == dtype)
      break;
  *hash = h;
  return m;
}

/* *out: entry m's transfer for value v, its arrays shared (priced
 * transfers keep no pieces), or NULL where none moves. */
static ap_status memo_reuse(dctx *x, const memo_entry *m, int v, ap_dxfer **out) {
  *out = NULL;
  if (!m->t)
    return AP_OK;
  ap_dxfer *t = new_xfer(x, m->t->kind, v);
  if (!t)
    return oom(x);
  *t = *m->t;
  t->value = v;
  *out = t;
  return AP_OK;
}

static void memo_put(dctx *x, memo_entry *m, uint64_t h, int kind, const ap_dbox *a,
                     const ap_dbox *b, int v, const ap_dxfer *t) {
  *m = (memo_entry){.hash = h, .box = (ap_dbox *)a, .need = b, .kind = kind,
                    .dtype = (int)x->g->values[v].dtype, .t = t};
  x->n_memo++;
}

/* The exchange giving every device need[d] of value v from held (kept
 * arrays both: keep_ports runs first). Priced, an exchange between the
 * same arrays of elements of one type is the one priced before, its bytes
 * shared (a block repeated twelve times is priced once). */
static ap_status memo_exchange(dctx *x, int v, const ap_dbox *held, const ap_dbox *need,
                               ap_dxfer **out) {
  if (!x->priced)
    return exchange(x, v, held, need, false, NULL, out);
  uint64_t h;
  memo_entry *m = xfer_slot(x, MEMO_EXCHANGE, held, need, v, &h);
  if (!m)
    return oom(x);
  if (m->box)
    return memo_reuse(x, m, v, out);
  ap_status s = exchange(x, v, held, need, false, NULL, out);
  if (s == AP_OK)
    memo_put(x, m, h, MEMO_EXCHANGE, held, need, v, *out);
  return s;
}

/* Node ni's boxes, the transfers bringing what it reads, and its partial
 * sums' reduction. */
static ap_status distribute_node(dctx *x, int ni) {
  ap_graph *g = x->g;
  const ap_plan *p = x->p;
  ap_arena *a = g->arena;
  ap_dist *dist = x->dist;
  const ap_node *n = &g->nodes[ni];
  ap_dnode *dn = &dist->node[ni];
  int n_dev = x->n_dev;
  dn->bias_slot = -1;
  if (n->dead)
    return AP_OK;
  dn->in = ap_arena_array(a, (size_t)n->n_in + 1, sizeof *dn->in);
  dn->out = ap_arena_array(a, (size_t)n->n_out + 1, sizeof *dn->out);
  dn->xfer_in = ap_arena_array(a, (size_t)n->n_in + 1, sizeof *dn->xfer_in);
  if (!dn->in || !dn->out || !dn->xfer_in)
    return oom(x);
  for (int i = 0; i < n->n_in; i++)
    dn->in[i] = x->none;
  for (int o = 0; o < n->n_out; o++)
    dn->out[o] = x->none;
  bool known = true, folded = true;
  for (int i = 0; i < n->n_in; i++)
    known &= n->in[i] < 0 || ap_value_shape_known(&g->values[n->in[i]]);
  for (int o = 0; o < n->n_out; o++) {
    known &= n->out[o] < 0 || ap_value_shape_known(&g->values[n->out[o]]);
    folded &= n->out[o] < 0 || is_data(&g->values[n->out[o]]);
  }
  if (!known || folded || n->n_out == 0 || n->out[0] < 0)
    return AP_OK; /* code generation refuses unknown shapes; folded outputs are constants */
  int vx = x->vertex_of[ni];
  ap_status s = AP_OK;
  if (!work_on(x, ni))
    return oom(x);
  if (n_dev == 1)
    all_whole(x, ni);
  else if (vx >= 0 && !p->v[vx].join)
    s = layer_node(x, ni, vx);
  else
    s = weightless_node(x, ni, vx);
  if (s != AP_OK)
    return s;
  if (!keep_ports(x, ni))
    return oom(x);
  /* What the node reads that its devices do not hold. */
  for (int i = 0; i < n->n_in && n_dev > 1; i++) {
    int v = n->in[i];
    if (v < 0 || is_data(&g->values[v]) || g->values[v].producer < 0)
      continue; /* constants are sliced and inputs read whole by every device */
    ap_dbox *held = held_array(x, v);
    if (!held)
      return oom(x);
    if ((s = memo_exchange(x, v, held, dn->in[i], &dn->xfer_in[i])) != AP_OK)
      return s;
    if (dn->xfer_in[i])
      charge_pieces(dn->xfer_in[i], false, n_dev, dist->fwd_bytes);
  }
  for (int o = 0; o < n->n_out; o++) /* held as computed: the same boxes */
    if (n->out[o] >= 0)
      dist->held[n->out[o]] = dn->out[o];
  return AP_OK;
}

int ap_dist_oversized(const ap_graph *g) {
  for (int v = 0; v < g->n_values; v++)
    for (int i = 0; i < g->values[v].rank; i++)
      if (g->values[v].dims[i] > AP_DCOORD_MAX)
        return v;
  return -1;
}

/* dist->read_first, dist->read: every value's readers among the distributed
 * nodes, so that a weight's boxes are not looked for in every node
 * (weight_boxes scanned the graph once per weight: two fifths of planning
 * ResNet-152 over 8 devices, where every candidate is distributed). */
static bool index_reads(const ap_graph *g, ap_dist *dist) {
  int n_reads = 0;
  int *first = ap_arena_array(g->arena, (size_t)g->n_values + 2, sizeof *first);
  if (!first)
    return false;
  for (int ni = 0; ni < g->n_nodes; ni++)
    for (int i = 0; !g->nodes[ni].dead && dist->node[ni].in && i < g->nodes[ni].n_in; i++)
      if (g->nodes[ni].in[i] >= 0) {
        first[g->nodes[ni].in[i] + 2]++;
        n_reads++;
      }
  for (int v = 0; v < g->n_values; v++)
    first[v + 2] += first[v + 1];
  int(*read)[2] = ap_arena_array(g->arena, (size_t)n_reads + 1, sizeof *read);
  if (!read)
    return false;
  for (int ni = 0; ni < g->n_nodes; ni++) /* first[v + 1] runs to v's end */
    for (int i = 0; !g->nodes[ni].dead && dist->node[ni].in && i < g->nodes[ni].n_in; i++)
      if (g->nodes[ni].in[i] >= 0) {
        int at = first[g->nodes[ni].in[i] + 1]++;
        read[at][0] = ni;
        read[at][1] = i;
      }
  dist->read_first = first;
  dist->read = read;
  return true;
}

static ap_status distribute(ap_graph *g, bool priced, ap_dist **out, ap_diag *d) {
  ap_arena *a = g->arena;
  const ap_plan *p = g->plan;
  int big = ap_dist_oversized(g);
  if (big >= 0)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                    "value '%s' has a dimension past %d, the largest the partitioned "
                    "program's boxes hold",
                    g->values[big].name, AP_DCOORD_MAX);
  dctx x = {.g = g, .d = d, .p = p, .n_dev = p ? p->dev.n_devices : 1, .priced = priced,
            .follow_node = -1};
  ap_dist *dist = ap_arena_alloc(a, sizeof *dist);
  if (!dist)
    return oom(&x);
  memset(dist, 0, sizeof *dist);
  x.dist = dist;
  int n_dev = x.n_dev;
  dist->n_dev = n_dev;
  dist->node = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof *dist->node);
  dist->held = ap_arena_array(a, (size_t)g->n_values + 1, sizeof *dist->held);
  dist->fwd_bytes = ap_arena_array(a, (size_t)n_dev, sizeof *dist->fwd_bytes);
  dist->step_bytes = ap_arena_array(a, (size_t)n_dev, sizeof *dist->step_bytes);
  x.vertex_of = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof *x.vertex_of);
  x.path = ap_arena_array(a, (size_t)n_dev * (size_t)(p ? p->n_levels : 0) + 1, sizeof *x.path);
  x.none = ap_arena_array(a, (size_t)n_dev, sizeof *x.none);
  if (!dist->node || !dist->held || !dist->fwd_bytes || !dist->step_bytes || !x.vertex_of ||
      !x.path || !x.none)
    return oom(&x);
  for (int ni = 0; ni < g->n_nodes; ni++)
    x.vertex_of[ni] = -1;
  if (p) {
    for (int v = 0; v < p->n_vertices; v++)
      x.vertex_of[p->v[v].node] = v;
    device_paths(&x);
  }
  ap_status s = AP_OK;
  for (int ni = 0; ni < g->n_nodes && s == AP_OK; ni++)
    s = distribute_node(&x, ni);
  if (s == AP_OK && n_dev > 1 && !narrow_weight_chains(&x))
    s = oom(&x);
  ap_xfree(x.work);
  ap_xfree(x.memo);
  ap_xfree(x.pairs);
  if (s != AP_OK)
    return s;
  for (int dev = 0; dev < n_dev; dev++)
    dist->step_bytes[dev] = -1;
  if (!index_reads(g, dist))
    return oom(&x);
  *out = dist;
  return AP_OK;
}

/* ---- the training step ------------------------------------------------------ */

/* box[k] = the smallest box holding what device dev0 + k's nodes read of
 * weight v, for k < count: the first reader's box where no reader reads
 * any of it, whole where no node reads it at all. */
static void weight_boxes(const ap_graph *g, const ap_dist *dist, int v, int dev0, int count,
                         ap_dbox *box) {
  const ap_value *val = &g->values[v];
  bool read = false;
  for (int r = dist->read_first[v]; r < dist->read_first[v + 1]; r++) {
    const ap_dbox *b = dist->node[dist->read[r][0]].in[dist->read[r][1]] + dev0;
    if (!read) {
      memcpy(box, b, (size_t)count * sizeof *box);
      read = true;
      continue;
    }
    for (int k = 0; k < count; k++) {
      ap_dbox *u = &box[k];
      if (ap_dbox_volume(val->rank, &b[k]) == 0)
        continue;
      if (ap_dbox_volume(val->rank, u) == 0) {
        *u = b[k];
        continue;
      }
      for (int a = 0; a < val->rank; a++) {
        u->lo[a] = b[k].lo[a] < u->lo[a] ? b[k].lo[a] : u->lo[a];
        u->hi[a] = b[k].hi[a] > u->hi[a] ? b[k].hi[a] : u->hi[a];
      }
    }
  }
  for (int k = 0; k < count && !read; k++)
    box[k] = whole_box(val);
}

ap_dbox ap_dist_weight_box(const ap_graph *g, const ap_dist *dist, int v, int dev) {
  ap_dbox b;
  weight_boxes(g, dist, v, dev, 1, &b);
  return b;
}

const ap_dbox *ap_dist_weight_boxes(const ap_graph *g, const ap_dist *dist, int v,
                                    ap_dbox *room) {
  /* Every read of the weight from one kept array (a weight read by its
   * layer alone): those are its boxes. Copying them cost 4% of planning
   * ResNet-152 over 1024 devices. */
  int r0 = dist->read_first[v], r1 = dist->read_first[v + 1];
  const ap_dbox *one = r1 > r0 ? dist->node[dist->read[r0][0]].in[dist->read[r0][1]] : NULL;
  for (int r = r0 + 1; r < r1 && one; r++)
    if (dist->node[dist->read[r][0]].in[dist->read[r][1]] != one)
      one = NULL;
  if (one)
    return one;
  weight_boxes(g, dist, v, 0, dist->n_dev, room);
  return room;
}

/* Whether the devices' boxes of the final output partition its rows: each
 * holds whole rows, no row twice, every row somewhere. The rows held are
 * sorted (in rows, room for n), so that no pair of devices is compared:
 * that was three quarters of planning a 3-layer MLP over 65,536 devices. */
static bool rows_partitioned(const ap_value *y, const ap_dbox *held, int n,
                             struct keyed *rows) {
  int64_t covered = 0;
  int n_rows = 0;
  for (int d = 0; d < n; d++) {
    for (int i = 1; i < y->rank; i++)
      if (held[d].lo[i] != 0 || held[d].hi[i] != y->dims[i])
        return false;
    if (held[d].hi[0] > held[d].lo[0])
      rows[n_rows++] = (struct keyed){held[d].lo[0], d};
    covered += held[d].hi[0] - held[d].lo[0];
  }
  qsort(rows, (size_t)n_rows, sizeof *rows, cmp_keyed);
  int64_t reach = INT64_MIN; /* the furthest row end before rows[k] */
  for (int k = 0; k < n_rows; k++) {
    if (rows[k].lo < reach)
      return false;
    reach = held[rows[k].id].hi[0] > reach ? held[rows[k].id].hi[0] : reach;
  }
  return covered == y->dims[0];
}

/* The loss's rows per device and the transfer bringing them. */
static ap_status loss_boxes(dctx *x, int v) {
  ap_dist *dist = x->dist;
  const ap_value *y = &x->g->values[v];
  int n = x->n_dev;
  dist->loss_box = ap_arena_array(x->g->arena, (size_t)n, sizeof *dist->loss_box);
  if (!dist->loss_box)
    return oom(x);
  const ap_dbox *held = held_array(x, v);
  struct keyed *rows = ap_arena_array(x->g->arena, (size_t)n, sizeof *rows);
  if (!held || !rows)
    return oom(x);
  if (y->rank == 0 || rows_partitioned(y, held, n, rows)) {
    memcpy(dist->loss_box, held, (size_t)n * sizeof *held);
    return AP_OK;
  }
  int64_t at = 0;
  for (int d = 0; d < n; d++) {
    ap_dbox *b = &dist->loss_box[d];
    *b = whole_box(y);
    b->lo[0] = at;
    at += aprt_even_share(y->dims[0], n, d);
    b->hi[0] = at;
  }
  return exchange(x, v, held, dist->loss_box, false, NULL, &dist->loss_xfer);
}

static ap_status weight_sum(dctx *x, int v, const ap_dbox *box, ap_dxfer **out);

/* weight_sum; priced, over the array kept with box's boxes, the sum priced
 * before for a weight of one element type with those boxes (ResNet-152's
 * blocks, GPT-2 small's twelve blocks). */
static ap_status memo_weight_sum(dctx *x, int v, const ap_dbox *box, ap_dxfer **out) {
  if (!x->priced)
    return weight_sum(x, v, box, out);
  const ap_dbox *kept = keep_array(x, x->g->values[v].rank, box);
  uint64_t h;
  memo_entry *m = kept ? xfer_slot(x, MEMO_WEIGHT_SUM, kept, NULL, v, &h) : NULL;
  if (!m)
    return oom(x);
  if (m->box)
    return memo_reuse(x, m, v, out);
  ap_status s = weight_sum(x, v, kept, out);
  if (s == AP_OK)
    memo_put(x, m, h, MEMO_WEIGHT_SUM, kept, NULL, v, *out);
  return s;
}

/* The sum of trainable weight v's gradient over the devices that read
 * copies of its elements (box[d] per device). */
static ap_status weight_sum(dctx *x, int v, const ap_dbox *box, ap_dxfer **out) {
  ap_arena *a = x->g->arena;
  const ap_value *val = &x->g->values[v];
  int rank = val->rank, n = x->n_dev;
  *out = NULL;
  int *cls = ap_arena_array(a, (size_t)n, sizeof *cls);
  if (!cls || !box_classes(rank, box, n, cls))
    return oom(x);
  /* Groups of equal boxes; an all-reduce in each when the groups are
   * disjoint. Only the first device of each group is compared with the
   * others' firsts: a thousand devices of data parallelism hold one box. */
  bool disjoint = true, shared = false;
  for (int d = 0; d < n; d++) {
    shared |= cls[d] != d && ap_dbox_volume(rank, &box[d]) > 0;
    for (int e = 0; e < d && disjoint && cls[d] == d; e++) {
      ap_dbox meet;
      if (cls[e] == e && intersect(rank, &box[d], &box[e], &meet))
        disjoint = false;
    }
  }
  if (disjoint && !shared)
    return AP_OK; /* one copy of every element */
  /* Boxes that meet without being equal (a table tied to an LM head, read
   * by rows and by columns; uneven splits over a mixed array): every
   * element is summed at its owner, one of the devices holding it (the
   * elements held by the same devices shared out evenly among them), and
   * the sum sent back to the others holding it. The pieces are those of an
   * exchange from the owners to every other copy (none being whole until
   * summed): each element held by k devices moves 2(k - 1) times, where
   * sending every copy to every other moved it k(k - 1) times (GPT-2 tiny
   * on 4096 devices: 4.9 GB of its 8.0 GB a step was its tied table's
   * gradient), and every copy ends bitwise equal. */
  if (!disjoint && val->dtype == AP_DT_FLOAT) {
    ap_status s = exchange(x, v, box, box, true, NULL, out);
    if (s == AP_OK && *out)
      (*out)->kind = AP_DX_OWNER_SUM;
    return s;
  }
  if (val->dtype != AP_DT_FLOAT) {
    int *summand = ap_arena_array(a, (size_t)n, sizeof *summand);
    if (!summand)
      return oom(x);
    for (int d = 0; d < n; d++)
      summand[d] = d;
    return reduction(x, v, box, summand, n, out);
  }
  ap_dxfer *t = new_xfer(x, AP_DX_ALLREDUCE, v);
  int *group = ap_arena_array(a, (size_t)n, sizeof *group);
  int *members = ap_arena_array(a, (size_t)n, sizeof *members);
  int *n_group = ap_arena_array(a, (size_t)n, sizeof *n_group);
  int *summand = ap_arena_array(a, (size_t)n, sizeof *summand);
  if (!t || !group || !members || !n_group || !summand)
    return oom(x);
  t->n_summands = n;
  t->group = group;
  t->members = members;
  t->n_group = n_group;
  t->summand = summand;
  /* Each class's devices, in device order, once: cls[d] <= d is the first
   * device of d's class, which comes first; next[c] counts the devices of
   * class c placed so far. */
  for (int d = 0; d < n; d++)
    n_group[d] = 0;
  for (int d = 0; d < n; d++)
    n_group[cls[d]]++;
  int n_members = 0;
  for (int d = 0; d < n; d++) {
    if (cls[d] == d) {
      group[d] = n_members;
      n_members += n_group[d];
    } else {
      group[d] = group[cls[d]];
    }
  }
  int *next = malloc((size_t)n * sizeof *next);
  if (!next)
    return oom(x);
  for (int d = 0; d < n; d++) {
    int c = cls[d];
    next[d] = 0;
    summand[d] = next[c]++;
    members[group[d] + summand[d]] = d;
  }
  free(next);
  for (int d = 0; d < n; d++)
    n_group[d] = n_group[cls[d]];
  *out = t;
  return AP_OK;
}

void ap_dxfer_charge_adjoint(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box,
                             int n_dev, double *bytes) {
  if (t->kind == AP_DX_ALLREDUCE)
    ap_dxfer_charge(g, t, box, n_dev, bytes);
  else
    charge_pieces(t, true, n_dev, bytes);
}

void ap_dxfer_charge_sum(const ap_graph *g, const ap_dxfer *t, const ap_dbox *box, int n_dev,
                         double *bytes) {
  const ap_value *v = &g->values[t->value];
  if (t->kind == AP_DX_OWNER_SUM) /* to the owners (reversed), then back */
    charge_pieces(t, true, n_dev, bytes);
  if (t->kind != AP_DX_ALLREDUCE) {
    charge_pieces(t, false, n_dev, bytes);
    return;
  }
  for (int d = 0; d < n_dev; d++)
    bytes[d] += (double)aprt_allreduce_bytes(t->n_group[d], ap_dbox_volume(v->rank, &box[d]),
                                              NULL, t->summand[d]);
}

/* BatchNormalization's running mean and variance: frozen statistics, no
 * error flows into them (DESIGN.md, "Execution model"). */
static bool frozen_slot(const ap_node *n, int i) {
  return n->op == AP_OP_BATCH_NORM && (i == 3 || i == 4);
}

ap_status ap_train_roles(ap_graph *g, uint64_t **want, bool **trainable, ap_diag *d) {
  ap_arena *a = g->arena;
  bool *from_w = ap_arena_array(a, (size_t)g->n_values + 1, sizeof *from_w);
  bool *reach = ap_arena_array(a, (size_t)g->n_values + 1, sizeof *reach);
  *want = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof **want);
  *trainable = ap_arena_array(a, (size_t)g->n_values + 1, sizeof **trainable);
  if (!from_w || !reach || !*want || !*trainable)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  /* Weights: float initializers, and the weights a model feeds (accpar-zoo
   * --no-weights). */
  ap_fed_weights(g, from_w);
  for (int v = 0; v < g->n_values; v++) {
    const ap_value *val = &g->values[v];
    from_w[v] = val->dtype == AP_DT_FLOAT && val->producer < 0 &&
                (ap_value_is_parameter(val) || from_w[v]);
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    bool f = false;
    for (int i = 0; i < n->n_in && !n->dead; i++)
      f |= n->in[i] >= 0 && from_w[n->in[i]];
    for (int o = 0; o < n->n_out && !n->dead; o++)
      if (n->out[o] >= 0 && !g->values[n->out[o]].data)
        from_w[n->out[o]] = f && g->values[n->out[o]].dtype == AP_DT_FLOAT;
  }
  if (g->n_outputs > 0)
    reach[g->outputs[0]] = true;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    bool r = false;
    for (int o = 0; o < n->n_out && !n->dead; o++)
      r |= n->out[o] >= 0 && reach[n->out[o]];
    for (int i = 0; i < n->n_in && r; i++)
      if (n->in[i] >= 0 && !frozen_slot(n, i))
        reach[n->in[i]] = true;
  }
  for (int v = 0; v < g->n_values; v++)
    (*trainable)[v] = from_w[v] && reach[v] && g->values[v].producer < 0;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    for (int i = 0; i < n->n_in && !n->dead && i < 64; i++)
      if (n->in[i] >= 0 && !frozen_slot(n, i) && from_w[n->in[i]] && reach[n->in[i]])
        (*want)[ni] |= (uint64_t)1 << i;
  }
  return AP_OK;
}

ap_status ap_distribute(ap_graph *g, ap_dist **out, ap_diag *d) {
  return distribute(g, false, out, d);
}

static ap_status distribute_train(ap_graph *g, const uint64_t *want, const bool *trainable,
                                  bool priced, ap_dist **out, ap_diag *d) {
  ap_dist *dist;
  ap_status s = distribute(g, priced, &dist, d);
  if (s != AP_OK)
    return s;
  dctx x = {.g = g, .d = d, .p = g->plan, .n_dev = dist->n_dev, .dist = dist, .priced = priced,
            .follow_node = -1};
  int n = x.n_dev;
  uint64_t *own_want = NULL;
  bool *own_trainable = NULL;
  if ((!want || !trainable) && (s = ap_train_roles(g, &own_want, &own_trainable, d)) != AP_OK)
    return s;
  if (!want)
    want = own_want;
  if (!trainable)
    trainable = own_trainable;
  double *bytes = dist->step_bytes;
  for (int dev = 0; dev < n; dev++)
    bytes[dev] = dist->fwd_bytes[dev];
  dist->wgrad = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *dist->wgrad);
  ap_dbox *box = ap_arena_array(g->arena, (size_t)n, sizeof *box);
  if (!dist->wgrad || !box)
    return oom(&x);
  if (g->n_outputs > 0 && ap_value_shape_known(&g->values[g->outputs[0]])) {
    if ((s = loss_boxes(&x, g->outputs[0])) != AP_OK)
      return s;
    if (dist->loss_xfer) {
      ap_dxfer_charge(g, dist->loss_xfer, NULL, n, bytes);
      ap_dxfer_charge_adjoint(g, dist->loss_xfer, NULL, n, bytes);
    }
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n_ = &g->nodes[ni];
    const ap_dnode *dn = &dist->node[ni];
    if (n_->dead || !want[ni] || !dn->xfer_in)
      continue;
    for (int i = 0; i < n_->n_in && i < 64; i++)
      if ((want[ni] >> i & 1) && dn->xfer_in[i])
        ap_dxfer_charge_adjoint(g, dn->xfer_in[i], NULL, n, bytes);
    uint64_t bias = dn->bias_slot >= 0 ? (uint64_t)1 << dn->bias_slot : 0;
    if (!dn->reduce || !(want[ni] & ~bias))
      continue;
    ap_dxfer_charge_adjoint(g, dn->reduce, dn->out[0], n, bytes);
  }
  for (int v = 0; v < g->n_values && s == AP_OK; v++) {
    if (!trainable[v])
      continue;
    const ap_dbox *wb = ap_dist_weight_boxes(g, dist, v, box);
    if ((s = memo_weight_sum(&x, v, wb, &dist->wgrad[v])) == AP_OK && dist->wgrad[v])
      ap_dxfer_charge_sum(g, dist->wgrad[v], wb, n, bytes);
  }
  ap_xfree(x.memo);
  ap_xfree(x.pairs);
  *out = s == AP_OK ? dist : NULL;
  return s;
}

ap_status ap_distribute_train(ap_graph *g, const uint64_t *want, const bool *trainable,
                              ap_dist **out, ap_diag *d) {
  return distribute_train(g, want, trainable, false, out, d);
}

ap_status ap_distribute_priced(ap_graph *g, const uint64_t *want, const bool *trainable,
                               ap_dist **out, ap_diag *d) {
  return distribute_train(g, want, trainable, true, out, d);
}

double ap_plan_device_bytes(ap_graph *g, int dev, bool train) {
  ap_dist *dist;
  ap_diag d = {0};
  const ap_plan *p = g->plan;
  if (!p || dev < 0 || dev >= p->dev.n_devices ||
      (train ? ap_distribute_train(g, NULL, NULL, &dist, &d) : ap_distribute(g, &dist, &d)) != AP_OK)
    return -1;
  return train ? dist->step_bytes[dev] : dist->fwd_bytes[dev];
}
