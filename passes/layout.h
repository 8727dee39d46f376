/* Layouts, boxes and the one conversion between layouts.
 *
 * At one level of the device tree a group of devices is split into k
 * children. A tensor's layout at that level says how the children hold the
 * group's box of it: each a slab along one dimension (shares in proportion
 * to a ratio, whole indices), all of it (replicated), or all of it as a
 * summand (partial). ap_layout_convert is the only place that computes what
 * a change of layout moves: the cost model charges its bytes and code
 * generation (issue 4) sends exactly its pairs, so predicted and measured
 * bytes agree by construction. A layout over the whole tree is a list of
 * these, one per level; a conversion over the tree is applied level by level,
 * top-down, each level inside the box the level above left (AccPar's
 * hierarchical model).
 */
#ifndef ACCPAR_PASSES_LAYOUT_H
#define ACCPAR_PASSES_LAYOUT_H

#include <stdint.h>

enum { AP_MAX_CHILDREN = 16 };

typedef enum ap_layout_kind {
  AP_LAYOUT_REPLICATED, /* every child holds the whole box */
  AP_LAYOUT_SPLIT,      /* child i holds share i of dimension dim */
  AP_LAYOUT_PARTIAL     /* every child holds a summand of the whole box */
} ap_layout_kind;

typedef struct ap_layout {
  ap_layout_kind kind;
  int dim;                        /* SPLIT: the tensor dimension */
  double ratio[AP_MAX_CHILDREN];  /* SPLIT: each child's fraction; sums to 1 */
  int64_t unit;                   /* SPLIT: shares are whole multiples of unit (0 or 1:
                                     any index), the last nonempty one possibly less */
} ap_layout;

/* Whole-index shares of n in proportion to ratio[0..k): floors, then the
 * remainder one index each to the largest fractional parts (ties to the
 * lower child). Shares may be 0 when n < k; they always sum to n. */
void ap_layout_shares(int64_t n, int k, const double *ratio, int64_t *share);
/* The same in whole units of `unit` indices (attention heads of a feature
 * dimension): ap_layout_shares of ceil(n / unit) units, each unit `unit`
 * indices, the last share cut to what n leaves. */
void ap_layout_unit_shares(int64_t n, int k, const double *ratio, int64_t unit,
                           int64_t *share);

/* Every child's box inside a group box [lo, hi) under layout l (k
 * children): child i's in child_lo[i], child_hi[i]. */
void ap_layout_child_boxes(int rank, const int64_t *lo, const int64_t *hi, int k,
                           const ap_layout *l, int64_t (*child_lo)[AP_MAX_RANK],
                           int64_t (*child_hi)[AP_MAX_RANK]);
/* Child i's box inside a group box [lo, hi) under layout l (k children). */
void ap_layout_child_box(int rank, const int64_t *lo, const int64_t *hi, int k,
                         const ap_layout *l, int i, int64_t *child_lo,
                         int64_t *child_hi);

typedef struct ap_exchange {
  int k; /* children: only the first k entries (rows, columns) below are set */
  double allreduce_bytes[AP_MAX_CHILDREN];          /* sent by child i resolving partial sums */
  double send_bytes[AP_MAX_CHILDREN];               /* sent by child i in the box exchange */
  int messages[AP_MAX_CHILDREN];                    /* messages child i sends, both phases */
  double pair_bytes[AP_MAX_CHILDREN][AP_MAX_CHILDREN]; /* box exchange, [from][to] */
} ap_exchange;

/* Converts a tensor whose group box has extents box[0..rank), elem_bytes per
 * element, from layout `from` to layout `to` among k children. Partial sums
 * are resolved first by the runtime's all-reduce (child i sends
 * aprt_allreduce_bytes: the box plus k-2 even shares of it, in 2(k-1)
 * messages) and then count as replicated; then child j sends
 * child i the intersection of the box j holds with the box i needs, when i
 * does not hold it already. `to` may not be PARTIAL. */
void ap_layout_convert(int rank, const int64_t *box, double elem_bytes, int k,
                       const ap_layout *from, const ap_layout *to, ap_exchange *x);

/* The adjoint of x's box exchange: every pair's bytes sent the other way
 * (the errors of the pieces going back to their senders). x's all-reduce
 * is not part of it. */
void ap_exchange_reverse(const ap_exchange *x, ap_exchange *back);

/* The sum over children of both phases, in bytes. */
double ap_exchange_total(const ap_exchange *x);

#endif
