/* Axis rules: how boxes of an operator's inputs and outputs correspond (see
 * ir.h, "axes.c"). Each operator names its rule in ops.def; the planner
 * (passes/graph_build.c) and the distribution of boxes (passes/distribute.c)
 * read operators' axes through these functions only, so what the search
 * prices and what the program computes follow the same rule. */
#include "ir/ir.h"

static int norm(int64_t axis, int rank) {
  if (axis < 0)
    axis += rank;
  return axis < 0 || axis >= rank ? -1 : (int)axis;
}

static const ap_value *in_val(const ap_graph *g, const ap_node *n, int slot) {
  return slot < n->n_in && n->in[slot] >= 0 ? &g->values[n->in[slot]] : NULL;
}

static const ap_value *out0(const ap_graph *g, const ap_node *n) {
  return n->n_out > 0 && n->out[0] >= 0 ? &g->values[n->out[0]] : NULL;
}

static int present_outputs(const ap_node *n) {
  int k = 0;
  for (int i = 0; i < n->n_out; i++)
    k += n->out[i] >= 0;
  return k;
}

static ap_axes_rule rule_of(const ap_node *n) {
  return n->op < AP_OP_COUNT ? ap_op_table[n->op].axes : AP_AXES_WHOLE;
}

/* Softmax's axis, and whether the opset < 13 coercion to 2-d applies. */
static int softmax_axis(const ap_graph *g, const ap_node *n, int rank, bool *coerced) {
  *coerced = g->opset < 13;
  return norm(ap_attr_int(n, "axis", *coerced ? 1 : -1), rank);
}

/* Reduce*: reduced[i] per input axis; false when they cannot be known. */
static bool reduced_axes(const ap_graph *g, const ap_node *n, bool *reduced) {
  ap_diag d = {0};
  return ap_reduce_axes((ap_graph *)g, (ap_node *)n, reduced, &d) == AP_OK;
}

/* Slice: sliced[i] per input axis; false when the parameters are not known. */
static bool sliced_axes(const ap_graph *g, const ap_node *n, bool *sliced) {
  const ap_value *x = in_val(g, n, 0);
  int64_t starts[AP_MAX_RANK], ends[AP_MAX_RANK], steps[AP_MAX_RANK];
  bool known = false;
  ap_diag d = {0};
  if (!x || ap_slice_params((ap_graph *)g, (ap_node *)n, x, starts, ends, steps, sliced, &known,
                            &d) != AP_OK ||
      !known)
    return false;
  /* A "sliced" axis that keeps every index in order is not sliced. */
  for (int i = 0; i < x->rank; i++) {
    int64_t first, count;
    ap_slice_axis(x->dims[i], starts[i], ends[i], steps[i], &first, &count);
    if (sliced[i] && first == 0 && count == x->dims[i] && steps[i] == 1)
      sliced[i] = false;
  }
  return true;
}

/* Pad: padded[i] per input axis (pads before or after it); false when the
 * pads are not known. */
static bool padded_axes(const ap_graph *g, const ap_node *n, int rank, bool *padded) {
  int64_t begin[AP_MAX_RANK], end[AP_MAX_RANK];
  ap_pad_mode mode;
  bool known = false;
  ap_diag d = {0};
  if (ap_pad_params((ap_graph *)g, (ap_node *)n, rank, begin, end, &mode, &known, &d) != AP_OK ||
      !known)
    return false;
  for (int i = 0; i < rank; i++)
    padded[i] = begin[i] != 0 || end[i] != 0;
  return true;
}

/* Tile: repeated[i] per input axis; false when the repeats are not known. */
static bool repeated_axes(const ap_graph *g, const ap_node *n, int rank, bool *repeated) {
  int64_t repeats[AP_MAX_RANK];
  bool known = false;
  ap_diag d = {0};
  if (ap_tile_repeats((ap_graph *)g, (ap_node *)n, rank, repeats, &known, &d) != AP_OK || !known)
    return false;
  for (int i = 0; i < rank; i++)
    repeated[i] = repeats[i] != 1;
  return true;
}

/* Resize: kept[i] when axis i maps every index to itself. */
static bool resize_kept(const ap_graph *g, const ap_node *n, const ap_value *x, bool *kept) {
  ap_resize r;
  bool known = false;
  ap_diag d = {0};
  if (ap_resize_params((ap_graph *)g, (ap_node *)n, x, &r, &known, &d) != AP_OK || !known)
    return false;
  for (int i = 0; i < x->rank; i++)
    kept[i] = ap_resize_identity(&r, i);
  return true;
}

/* GatherElements, ScatterElements: the axis, or -1. */
static int elements_axis(const ap_graph *g, const ap_node *n) {
  const ap_value *x = in_val(g, n, 0);
  return x ? norm(ap_attr_int(n, "axis", 0), x->rank) : -1;
}

/* GatherND: batch_dims, or 0 when they are not valid. */
static int nd_batch(const ap_graph *g, const ap_node *n) {
  int b = 0;
  ap_diag d = {0};
  return ap_gather_nd_batch((ap_graph *)g, (ap_node *)n, &b, &d) == AP_OK ? b : 0;
}

/* The normalizations: over[i] per input axis; false when not known. */
static bool norm_over(const ap_graph *g, const ap_node *n, int rank, bool *over) {
  ap_diag d = {0};
  return ap_norm_axes((ap_graph *)g, (ap_node *)n, rank, over, &d) == AP_OK;
}

bool ap_axes_data_slot(const ap_node *n, int slot) {
  switch (rule_of(n)) {
  case AP_AXES_WHOLE:
    return false;
  case AP_AXES_EWISE:
  case AP_AXES_CONCAT:
  case AP_AXES_MATMUL:
  case AP_AXES_GATHER:
  case AP_AXES_ELEMENTS:
  case AP_AXES_ND:
    return true;
  default:
    return slot == 0;
  }
}

bool ap_axes_boxwise(const ap_graph *g, const ap_node *n) {
  int outs = present_outputs(n);
  switch (rule_of(n)) {
  case AP_AXES_WHOLE:
    return false;
  case AP_AXES_SPLIT:
    return true;
  case AP_AXES_BATCH_NORM:
    /* Training-mode outputs are statistics of the whole batch. */
    return outs == 1 && !(g->opset >= 14 && ap_attr_int(n, "training_mode", 0));
  case AP_AXES_POOL: /* MaxPool's Indices are flat indices of the whole input */
  case AP_AXES_LAYER_NORM:
    return outs == 1;
  default:
    /* Dropout's mask has its output's shape and box. */
    return outs == 1 || n->op == AP_OP_DROPOUT;
  }
}

bool ap_axes_out_split(const ap_graph *g, const ap_node *n, int j) {
  const ap_value *y = out0(g, n), *x = in_val(g, n, 0);
  if (!y || j < 0 || j >= y->rank)
    return false;
  bool coerced, marks[AP_MAX_RANK];
  switch (rule_of(n)) {
  case AP_AXES_WHOLE:
  case AP_AXES_RESHAPE: /* boxes travel by blocks: ap_axes_reshape */
    return false;
  case AP_AXES_CONV:
    /* Output channels split only without groups: a group's channels are
     * counted inside the weight. */
    return j == 0 || (j == 1 && ap_attr_int(n, "group", 1) == 1);
  case AP_AXES_POOL:
    return j < 2;
  case AP_AXES_LRN:
    return j != 1;
  case AP_AXES_LAYER_NORM: {
    int axis = norm(ap_attr_int(n, "axis", -1), y->rank);
    return axis >= 0 && j < axis;
  }
  case AP_AXES_SOFTMAX: {
    int axis = softmax_axis(g, n, y->rank, &coerced);
    return axis >= 0 && (coerced ? j < axis : j != axis);
  }
  case AP_AXES_REDUCE:
    if (!x || !reduced_axes(g, n, marks))
      return false;
    /* Without keepdims every output axis is a kept one. */
    return y->rank != x->rank || !marks[j];
  case AP_AXES_SPLIT:
    return x && j != norm(ap_attr_int(n, "axis", 0), x->rank);
  case AP_AXES_SLICE:
    return x && sliced_axes(g, n, marks) && !marks[j];
  case AP_AXES_PAD: /* a padded axis is computed whole from the whole input axis */
    return x && padded_axes(g, n, x->rank, marks) && !marks[j];
  case AP_AXES_TILE: /* so is a repeated one */
    return x && repeated_axes(g, n, x->rank, marks) && !marks[j];
  case AP_AXES_BATCH: /* channels and space trade elements across the whole map */
    return j == 0;
  case AP_AXES_RESIZE: /* a resized axis reads its input axis whole */
    return x && resize_kept(g, n, x, marks) && marks[j];
  case AP_AXES_SCAN: { /* a prefix sum reads its axis whole */
    int axis;
    bool known = false;
    ap_diag d = {0};
    return x && ap_cumsum_axis((ap_graph *)g, (ap_node *)n, x->rank, &axis, &known, &d) == AP_OK &&
           known && j != axis;
  }
  case AP_AXES_TRILU: /* the mask reads a matrix's row and column indices */
    return j < y->rank - 2;
  case AP_AXES_TOP_K: { /* the selection reads its axis whole */
    int axis;
    int64_t k;
    bool known = false;
    ap_diag d = {0};
    return x && ap_top_k_params((ap_graph *)g, (ap_node *)n, x->rank, &axis, &k, &known, &d) ==
                    AP_OK && j != axis;
  }
  case AP_AXES_ONE_HOT: { /* each index fills its whole depth */
    int axis;
    int64_t depth;
    bool known = false;
    ap_diag d = {0};
    return x && ap_one_hot_params((ap_graph *)g, (ap_node *)n, x->rank, &axis, &depth, &known,
                                  &d) == AP_OK && j != axis;
  }
  case AP_AXES_ELEMENTS: {
    /* Indices address the whole axis; off it, an output slab reads (or a
     * scatter writes) the same slab of data, and ScatterElements' indices
     * and updates must span the output for their slab to be the output's. */
    const ap_value *ix = in_val(g, n, 1);
    if (!ix || j >= ix->rank || j == elements_axis(g, n))
      return false;
    return n->op == AP_OP_GATHER_ELEMENTS || ix->dims[j] == y->dims[j];
  }
  case AP_AXES_ND: /* tuples of indices address whole axes */
    return j < nd_batch(g, n);
  case AP_AXES_NORMALIZED: /* a statistic reads its axes whole */
    return x && norm_over(g, n, x->rank, marks) && !marks[j];
  default:
    return true;
  }
}

/* Numpy broadcasting: dims align from the right; an axis runs along the
 * output's when their extents are equal (else it is broadcast from 1). */
static int broadcast_axis(const ap_value *x, const ap_value *y, int a) {
  int j = a + y->rank - x->rank;
  return j >= 0 && j < y->rank && x->dims[a] == y->dims[j] ? j : -1;
}

/* MatMul: C[..., M, N] = A[..., M, K] . B[..., K, N]; a 1-D A has no M, a
 * 1-D B no N (numpy's matmul). */
static int matmul_axis(const ap_value *x, const ap_value *y, int slot, int a, int rank_a,
                       int rank_b) {
  int r = x->rank, R = y->rank;
  if (slot == 0) {
    if (rank_a == 1 || a == r - 1)
      return -1; /* K */
    if (a == r - 2)
      return rank_b == 1 ? R - 1 : R - 2; /* M */
    int j = a + (R - (rank_b == 1 ? 1 : 2)) - (r - 2);
    return j >= 0 && x->dims[a] == y->dims[j] ? j : -1;
  }
  if (rank_b == 1 || a == r - 2)
    return -1; /* K */
  if (a == r - 1)
    return R - 1; /* N */
  int j = a + (R - (rank_a == 1 ? 1 : 2)) - (r - 2);
  return j >= 0 && x->dims[a] == y->dims[j] ? j : -1;
}

int ap_axes_in_to_out(const ap_graph *g, const ap_node *n, int slot, int a) {
  const ap_value *x = in_val(g, n, slot), *y = out0(g, n);
  if (!x || !y || a < 0 || a >= x->rank || x->rank < 0 || y->rank < 0)
    return -1;
  int r = x->rank, j = -1;
  bool marks[AP_MAX_RANK];
  switch (rule_of(n)) {
  case AP_AXES_WHOLE:
  case AP_AXES_RESHAPE:
    return -1;
  case AP_AXES_EWISE:
    j = broadcast_axis(x, y, a);
    break;
  case AP_AXES_EWISE_FIRST:
  case AP_AXES_EXPAND:
    j = slot == 0 ? broadcast_axis(x, y, a) : -1;
    break;
  case AP_AXES_CONV:
    if (slot == 0)
      j = a == 0 ? 0 : -1;
    else if (slot == 1) /* Conv's weight is [Cout, Cin/g, ...], ConvTranspose's [Cin, Cout/g, ...] */
      j = a == (n->op == AP_OP_CONV ? 0 : 1) ? 1 : -1;
    else
      j = a == 0 ? 1 : -1;
    break;
  case AP_AXES_GEMM:
    if (slot == 0)
      j = a == (ap_attr_int(n, "transA", 0) ? 1 : 0) ? 0 : -1;
    else if (slot == 1)
      j = a == (ap_attr_int(n, "transB", 0) ? 0 : 1) ? 1 : -1;
    else
      j = broadcast_axis(x, y, a);
    break;
  case AP_AXES_MATMUL: {
    const ap_value *A = in_val(g, n, 0), *B = in_val(g, n, 1);
    if (!A || !B || slot > 1)
      return -1;
    j = matmul_axis(x, y, slot, a, A->rank, B->rank);
    break;
  }
  case AP_AXES_POOL:
    j = slot == 0 && a < 2 ? a : -1;
    break;
  case AP_AXES_LRN:
    j = a != 1 ? a : -1;
    break;
  case AP_AXES_BATCH_NORM:
    j = slot == 0 ? a : (a == 0 && y->rank >= 2 ? 1 : -1);
    break;
  case AP_AXES_LAYER_NORM:
  case AP_AXES_SOFTMAX:
  case AP_AXES_SPLIT:
  case AP_AXES_SLICE:
  case AP_AXES_PAD:
  case AP_AXES_TILE:
  case AP_AXES_BATCH:
  case AP_AXES_RESIZE:
  case AP_AXES_SCAN:
  case AP_AXES_TRILU:
  case AP_AXES_TOP_K:
    j = slot == 0 && ap_axes_out_split(g, n, a) ? a : -1;
    break;
  case AP_AXES_ONE_HOT: {
    int axis;
    int64_t depth;
    bool known = false;
    ap_diag d = {0};
    if (slot != 0 || ap_one_hot_params((ap_graph *)g, (ap_node *)n, r, &axis, &depth, &known,
                                       &d) != AP_OK)
      return -1;
    j = a < axis ? a : a + 1;
    break;
  }
  case AP_AXES_REDUCE:
    if (slot != 0 || !reduced_axes(g, n, marks) || marks[a])
      return -1;
    j = a;
    if (y->rank != r) /* keepdims=0: the reduced axes before a are gone */
      for (int i = 0; i < a; i++)
        j -= marks[i];
    break;
  case AP_AXES_TRANSPOSE: {
    int np;
    const int64_t *perm = ap_attr_ints(n, "perm", &np);
    for (int i = 0; i < y->rank && j < 0; i++)
      if ((perm && i < np ? norm(perm[i], r) : y->rank - 1 - i) == a)
        j = i;
    break;
  }
  case AP_AXES_CONCAT:
    /* Along the axis each input fills its own part (passes/distribute.c). */
    j = a != norm(ap_attr_int(n, "axis", 0), r) ? a : -1;
    break;
  case AP_AXES_ELEMENTS:
    j = a != elements_axis(g, n) ? a : -1;
    break;
  case AP_AXES_ND:
    j = slot < 2 && a < nd_batch(g, n) ? a : -1;
    break;
  case AP_AXES_NORMALIZED:
    if (slot == 0)
      j = ap_axes_out_split(g, n, a) ? a : -1;
    else /* InstanceNormalization's per-channel scale and bias */
      j = n->op == AP_OP_INSTANCE_NORM && a == 0 && ap_axes_out_split(g, n, 1) ? 1 : -1;
    break;
  case AP_AXES_GATHER: {
    int axis = norm(ap_attr_int(n, "axis", 0), in_val(g, n, 0) ? in_val(g, n, 0)->rank : 0);
    const ap_value *ix = in_val(g, n, 1);
    if (axis < 0 || !ix)
      return -1;
    if (slot == 0)
      j = a < axis ? a : a == axis ? -1 : a + ix->rank - 1;
    else
      j = axis + a;
    break;
  }
  }
  return j >= 0 && j < y->rank && x->dims[a] == y->dims[j] ? j : -1;
}

int64_t ap_gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return a < 0 ? -a : a;
}

int ap_axes_reshape(const ap_value *x, const ap_value *y, int a, int64_t *in_step,
                    int64_t *out_step) {
  int r = x->rank, R = y->rank;
  *in_step = *out_step = 1;
  if (a < 0 || a >= r)
    return -1;
  for (int i = 0; i < r; i++)
    if (x->dims[i] <= 0)
      return -1;
  for (int i = 0; i < R; i++)
    if (y->dims[i] <= 0)
      return -1;
  int i = 0, j = 0;
  while (i < r && j < R) {
    int i0 = i, j0 = j;
    int64_t pi = x->dims[i++], pj = y->dims[j++];
    while (pi != pj) {
      if (pi < pj && i < r)
        pi *= x->dims[i++];
      else if (pj < pi && j < R)
        pj *= y->dims[j++];
      else
        return -1; /* the products never meet */
    }
    /* Unit dims right after a block belong to it (they change nothing). */
    while (i < r && x->dims[i] == 1 && (j >= R || y->dims[j] != 1))
      i++;
    while (j < R && y->dims[j] == 1 && (i >= r || x->dims[i] != 1))
      j++;
    if (a >= i)
      continue;
    int first = -1, q = -1;
    for (int b = i0; b < i && first < 0; b++)
      if (x->dims[b] > 1)
        first = b;
    for (int b = j0; b < j && q < 0; b++)
      if (y->dims[b] > 1)
        q = b;
    if (a != first || q < 0)
      return -1;
    for (int b = a + 1; b < i; b++)
      *in_step *= x->dims[b];
    for (int b = q + 1; b < j; b++)
      *out_step *= y->dims[b];
    return q;
  }
  return -1;
}
