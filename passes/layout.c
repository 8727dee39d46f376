/* Layouts and the one conversion between them; see layout.h. */
#include <math.h>
#include <string.h>

#include "ir/ir.h"
#include "passes/layout.h"
#include "runtime/accpar_rt.h"

void ap_layout_shares(int64_t n, int k, const double *ratio, int64_t *share) {
  double sum = 0, frac[AP_MAX_CHILDREN];
  for (int i = 0; i < k; i++)
    sum += ratio[i] > 0 ? ratio[i] : 0;
  int64_t given = 0;
  for (int i = 0; i < k; i++) {
    double exact = sum > 0 ? (double)n * (ratio[i] > 0 ? ratio[i] : 0) / sum : (double)n / k;
    share[i] = (int64_t)floor(exact);
    if (share[i] > n)
      share[i] = n;
    frac[i] = exact - (double)share[i];
    given += share[i];
  }
  /* Rounding may leave a few indices over (never more than k); each goes to
   * the child that lost most to the floor, so no share moves by more than
   * one index from its exact value. */
  while (given < n) {
    int best = 0;
    for (int i = 1; i < k; i++)
      if (frac[i] > frac[best])
        best = i;
    share[best]++;
    frac[best] -= 1;
    given++;
  }
  while (given > n) { /* only through floating-point excess; take from the largest */
    int best = 0;
    for (int i = 1; i < k; i++)
      if (share[i] > share[best])
        best = i;
    share[best]--;
    given--;
  }
}

void ap_layout_unit_shares(int64_t n, int k, const double *ratio, int64_t unit,
                           int64_t *share) {
  if (unit <= 1) {
    ap_layout_shares(n, k, ratio, share);
    return;
  }
  ap_layout_shares((n + unit - 1) / unit, k, ratio, share);
  int64_t left = n;
  for (int i = 0; i < k; i++) {
    share[i] = share[i] * unit < left ? share[i] * unit : left;
    left -= share[i];
  }
}

/* [start, end) of child i along a dimension of length n. */
/* Every child's range [start[i], end[i]) of n indices. */
static void child_ranges(int64_t n, int k, const double *ratio, int64_t unit, int64_t *start,
                         int64_t *end) {
  int64_t share[AP_MAX_CHILDREN], at = 0;
  ap_layout_unit_shares(n, k, ratio, unit, share);
  for (int i = 0; i < k; i++) {
    start[i] = at;
    at += share[i];
    end[i] = at;
  }
}

void ap_layout_child_boxes(int rank, const int64_t *lo, const int64_t *hi, int k,
                           const ap_layout *l, int64_t (*child_lo)[AP_MAX_RANK],
                           int64_t (*child_hi)[AP_MAX_RANK]) {
  bool split = l->kind == AP_LAYOUT_SPLIT && k > 1;
  int64_t s[AP_MAX_CHILDREN], e[AP_MAX_CHILDREN];
  if (split)
    child_ranges(hi[l->dim] - lo[l->dim], k, l->ratio, l->unit, s, e);
  for (int i = 0; i < k; i++) {
    for (int d = 0; d < rank; d++) {
      child_lo[i][d] = lo[d];
      child_hi[i][d] = hi[d];
    }
    if (split) {
      child_lo[i][l->dim] = lo[l->dim] + s[i];
      child_hi[i][l->dim] = lo[l->dim] + e[i];
    }
  }
}

void ap_layout_child_box(int rank, const int64_t *lo, const int64_t *hi, int k,
                         const ap_layout *l, int i, int64_t *child_lo,
                         int64_t *child_hi) {
  int64_t clo[AP_MAX_CHILDREN][AP_MAX_RANK], chi[AP_MAX_CHILDREN][AP_MAX_RANK];
  ap_layout_child_boxes(rank, lo, hi, k > 0 ? k : 1, l, clo, chi);
  for (int d = 0; d < rank; d++) {
    child_lo[d] = clo[i][d];
    child_hi[d] = chi[i][d];
  }
}

static double overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
  return hi > lo ? (double)(hi - lo) : 0;
}

void ap_layout_convert(int rank, const int64_t *box, double elem_bytes, int k,
                       const ap_layout *from, const ap_layout *to, ap_exchange *x) {
  if (to->kind == AP_LAYOUT_PARTIAL)
    ap_die("a conversion cannot produce partial sums");
  x->k = k;
  for (int i = 0; i < k; i++) {
    x->allreduce_bytes[i] = x->send_bytes[i] = 0;
    x->messages[i] = 0;
    for (int j = 0; j < k; j++)
      x->pair_bytes[i][j] = 0;
  }
  if (k <= 1)
    return;
  double whole = elem_bytes;
  for (int d = 0; d < rank; d++)
    whole *= (double)box[d];
  if (from->kind == AP_LAYOUT_PARTIAL) {
    /* The runtime's all-reduce (a direct reduce-scatter over even shares,
     * then an all-gather): its own byte formula, so a child's bytes are
     * what its member sends, uneven shares included. */
    int64_t count = 1;
    for (int d = 0; d < rank; d++)
      count *= box[d];
    for (int i = 0; i < k; i++) {
      x->allreduce_bytes[i] = elem_bytes / 4 * (double)aprt_allreduce_bytes(k, count, NULL, i);
      x->messages[i] = whole > 0 ? 2 * (k - 1) : 0;
    }
    return; /* now replicated: every child holds what it needs */
  }
  if (from->kind == AP_LAYOUT_REPLICATED)
    return;
  int a = from->dim;
  int64_t fs[AP_MAX_CHILDREN], fe[AP_MAX_CHILDREN], ts[AP_MAX_CHILDREN], te[AP_MAX_CHILDREN];
  child_ranges(box[a], k, from->ratio, from->unit, fs, fe);
  /* The box's size without the dimensions either layout splits. */
  double rest = elem_bytes;
  for (int d = 0; d < rank; d++)
    if (d != a && !(to->kind == AP_LAYOUT_SPLIT && d == to->dim))
      rest *= (double)box[d];
  if (to->kind == AP_LAYOUT_SPLIT) {
    int b = to->dim;
    child_ranges(box[b], k, to->ratio, to->unit, ts, te);
    for (int j = 0; j < k; j++)   /* sender j holds [fs, fe) of dim a */
      for (int i = 0; i < k; i++) { /* receiver i needs [ts, te) of dim b */
        if (i == j)
          continue;
        double have_and_need;
        if (a == b) /* what i needs of j's slab, minus what i holds itself */
          have_and_need = overlap(fs[j], fe[j], ts[i], te[i]) * rest;
        else /* j's slab of a, i's slab of b; i holds none of j's a-slab */
          have_and_need = (double)(fe[j] - fs[j]) * (double)(te[i] - ts[i]) * rest;
        x->pair_bytes[j][i] = have_and_need;
      }
  } else { /* to replicated: every slab goes to every other child */
    for (int j = 0; j < k; j++)
      for (int i = 0; i < k; i++)
        if (i != j)
          x->pair_bytes[j][i] = (double)(fe[j] - fs[j]) * rest;
  }
  for (int j = 0; j < k; j++)
    for (int i = 0; i < k; i++)
      if (x->pair_bytes[j][i] > 0) {
        x->send_bytes[j] += x->pair_bytes[j][i];
        x->messages[j]++;
      }
}

void ap_exchange_reverse(const ap_exchange *x, ap_exchange *back) {
  back->k = x->k; /* only the first k rows and columns are read */
  for (int i = 0; i < x->k; i++) {
    back->allreduce_bytes[i] = back->send_bytes[i] = 0;
    back->messages[i] = 0;
    for (int j = 0; j < x->k; j++)
      back->pair_bytes[i][j] = 0;
  }
  for (int j = 0; j < x->k; j++)
    for (int i = 0; i < x->k; i++)
      if (x->pair_bytes[j][i] > 0) {
        back->pair_bytes[i][j] = x->pair_bytes[j][i];
        back->send_bytes[i] += x->pair_bytes[j][i];
        back->messages[i]++;
      }
}

double ap_exchange_total(const ap_exchange *x) {
  double t = 0;
  for (int i = 0; i < x->k; i++)
    t += x->allreduce_bytes[i] + x->send_bytes[i];
  return t;
}
