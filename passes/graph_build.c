/* From the IR to the partition problem: which nodes are layers, which
 * weightless nodes join several activations, and how a layout travels
 * through the weightless nodes in between. */
#include <string.h>

#include "passes/passes.h"

/* Layer roles, one entry per operator of ir/ops.def: where the activation
 * and the weight enter, and which dimensions are B, I and O. */
typedef enum layer_role { ROLE_NONE, ROLE_CONV, ROLE_CONV_T, ROLE_GEMM, ROLE_MATMUL } layer_role;

static const layer_role roles[] = {
#define OP(id, name, min_in, max_in, min_out, max_out, kind) \
  [AP_OP_##id] = AP_OP_##id == AP_OP_CONV             ? ROLE_CONV   \
                 : AP_OP_##id == AP_OP_CONV_TRANSPOSE ? ROLE_CONV_T \
                 : AP_OP_##id == AP_OP_GEMM           ? ROLE_GEMM   \
                 : AP_OP_##id == AP_OP_MATMUL         ? ROLE_MATMUL \
                                                      : ROLE_NONE,
#include "ir/ops.def"
#undef OP
};
static_assert(sizeof roles / sizeof roles[0] == AP_OP_COUNT, "one role per operator");

/* Whether input i of n carries data (as opposed to a weight, a shape or
 * another parameter). */
static bool data_position(const ap_node *n, int i) {
  switch (n->op) {
  case AP_OP_MATMUL:
  case AP_OP_CONCAT:
  case AP_OP_SUM:
  case AP_OP_MAX:
  case AP_OP_MIN:
    return true;
  case AP_OP_WHERE:
    return i >= 1;
  case AP_OP_CLIP:
  case AP_OP_DROPOUT:
  case AP_OP_CAST_LIKE:
    return i == 0;
  default:
    break;
  }
  switch (ap_op_table[n->op].kind) {
  case AP_OPK_EWISE:
    return true;
  case AP_OPK_CONST:
    return false;
  default:
    return i == 0;
  }
}

static int64_t dim_of(const ap_graph *g, int v, int d) { return g->values[v].dims[d]; }
static int rank_of(const ap_graph *g, int v) { return g->values[v].rank; }

/* Where dimension d of the activation input lands in output 0 of n; -1 when
 * the node needs that dimension whole. */
static int map_dim(const ap_graph *g, const ap_node *n, int in_value, int d) {
  if (d < 0)
    return -1;
  int out = n->out[0], r = rank_of(g, in_value), R = rank_of(g, out);
  int64_t cnt;
  switch (n->op) {
  case AP_OP_FLATTEN: {
    int64_t axis = ap_attr_int(n, "axis", 1);
    if (axis < 0)
      axis += r;
    if (axis == 0)
      return d == 0 ? 1 : -1;
    if (d == 0)
      return 0;
    return d == axis ? 1 : -1;
  }
  case AP_OP_RESHAPE: {
    int64_t pre = 1, post = 1, pre_out = 1;
    for (int i = 0; i < d; i++)
      pre *= dim_of(g, in_value, i);
    for (int i = d + 1; i < r; i++)
      post *= dim_of(g, in_value, i);
    for (int j = 0; j < R; j++) {
      int64_t post_out = 1;
      for (int i = j + 1; i < R; i++)
        post_out *= dim_of(g, out, i);
      /* A slab of input dim d is a contiguous run of elements; it stays a
       * slab of output dim j when both start at the same outer index and
       * the inner block of the input is a whole number of output rows. */
      if (pre_out == pre && dim_of(g, out, j) > 1 && post_out > 0 && post % post_out == 0)
        return j;
      pre_out *= dim_of(g, out, j);
      if (pre_out > pre)
        break;
    }
    return -1;
  }
  case AP_OP_TRANSPOSE: {
    int np;
    const int64_t *perm = ap_attr_ints(n, "perm", &np);
    for (int i = 0; i < R; i++)
      if ((perm && i < np ? perm[i] : R - 1 - i) == d)
        return i;
    return -1;
  }
  case AP_OP_SOFTMAX:
  case AP_OP_LOG_SOFTMAX: {
    int64_t axis = ap_attr_int(n, "axis", g->opset >= 13 ? -1 : 1);
    if (axis < 0)
      axis += r;
    if (g->opset >= 13)
      return d == axis ? -1 : d;
    return d >= axis ? -1 : d;
  }
  case AP_OP_LAYER_NORM: {
    int64_t axis = ap_attr_int(n, "axis", -1);
    if (axis < 0)
      axis += r;
    return d >= axis ? -1 : d;
  }
  case AP_OP_REDUCE_MEAN:
  case AP_OP_REDUCE_SUM:
  case AP_OP_REDUCE_MAX: {
    /* The reduced axes are the ones whose size changed or vanished; with
     * keepdims the rank stays. */
    if (R == r)
      return dim_of(g, out, d) == dim_of(g, in_value, d) ? d : -1;
    return -1;
  }
  case AP_OP_SQUEEZE:
  case AP_OP_UNSQUEEZE: {
    /* Non-unit dimensions keep their order. */
    if (dim_of(g, in_value, d) == 1)
      return -1;
    cnt = 0;
    for (int i = 0; i < d; i++)
      cnt += dim_of(g, in_value, i) != 1;
    for (int j = 0; j < R; j++)
      if (dim_of(g, out, j) != 1 && cnt-- == 0)
        return j;
    return -1;
  }
  case AP_OP_GATHER: {
    int64_t axis = ap_attr_int(n, "axis", 0);
    if (axis < 0)
      axis += r;
    if (d < axis)
      return d;
    if (d == axis)
      return -1;
    return d + R - r;
  }
  default:
    break;
  }
  /* Element-wise, pooling, normalisation over channels, Concat/Split/Slice
   * along another axis: dimensions align from the right, and a dimension
   * whose size changed (a sliced or concatenated axis) is needed whole. */
  int j = d + R - r;
  if (j < 0 || j >= R || dim_of(g, out, j) != dim_of(g, in_value, d))
    return n->op == AP_OP_MAX_POOL || n->op == AP_OP_AVERAGE_POOL ||
                   n->op == AP_OP_GLOBAL_AVERAGE_POOL || n->op == AP_OP_GLOBAL_MAX_POOL
               ? (d <= 1 ? d : -1)
               : -1;
  return j;
}

static bool shape_known(const ap_graph *g, int v) { return ap_value_shape_known(&g->values[v]); }

typedef struct src {
  int vertex;  /* -1: not reached from any vertex (graph inputs) */
  int map[2];  /* where the vertex's output dims are in this value */
} src;

static ap_status need_shape(ap_graph *g, const ap_node *n, int v, ap_diag *d) {
  if (!shape_known(g, v))
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "the shape of '%s' is not known; planning needs every shape (bind the batch with --batch N)",
                    g->values[v].name);
  return AP_OK;
}

ap_status ap_plan_build(ap_plan *p, ap_graph *g, ap_diag *d) {
  ap_arena *a = g->arena;
  int nv = g->n_values;
  bool *act = ap_arena_array(a, (size_t)nv + 1, sizeof *act);
  src *from = ap_arena_array(a, (size_t)nv + 1, sizeof *from);
  p->v = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof *p->v);
  if (!act || !from || !p->v)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < nv; v++)
    from[v].vertex = -1;
  /* Graph inputs fed at run time are activations when some node reads them
   * as data; weights that happen to be graph inputs (ONNX node tests) sit
   * at weight positions only. */
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    for (int k = 0; k < n->n_in; k++) {
      int x = n->in[k];
      if (x >= 0 && data_position(n, k) && g->values[x].kind == AP_VAL_INPUT &&
          !g->values[x].data)
        act[x] = true;
    }
  }
  /* A weight operand of a layer never makes it an activation. */
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (!n->dead && n->op != AP_OP_UNKNOWN && roles[n->op] != ROLE_NONE &&
        roles[n->op] != ROLE_MATMUL && n->n_in > 1 && n->in[1] >= 0 &&
        g->values[n->in[1]].producer < 0)
      act[n->in[1]] = false;
  }
  p->n_vertices = 0;
  p->n_edges = 0;
  int *chain_cap = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof(int)), edge_cap = 0;
  if (!chain_cap)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    if (n->op == AP_OP_UNKNOWN)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "operator not supported");
    n->types = NULL;
    n->n_types = 0;
    int n_act = 0, first_act = -1;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && data_position(n, k) && act[n->in[k]]) {
        n_act++;
        if (first_act < 0)
          first_act = k;
      }
    if (!n_act || ap_op_table[n->op].kind == AP_OPK_CONST)
      continue;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0)
        act[n->out[k]] = true;
    int out = n->out[0];
    ap_status st = need_shape(g, n, out, d);
    if (st != AP_OK)
      return st;
    layer_role role = roles[n->op];
    bool layer = role != ROLE_NONE && n->in[0] >= 0 && act[n->in[0]] && n->in[1] >= 0 &&
                 !act[n->in[1]];
    if (!layer && n_act == 1) { /* a chain op: carries its producer's layout */
      int x = n->in[first_act];
      if ((st = need_shape(g, n, x, d)) != AP_OK)
        return st;
      src s = from[x];
      if (s.vertex < 0)
        continue; /* preprocessing of a graph input: the input is loaded as needed */
      ap_chain_op op = {.node = i, .in_value = x, .out_value = out};
      for (int c = 0; c < 2; c++) {
        op.in_map[c] = s.map[c];
        op.out_map[c] = map_dim(g, n, x, s.map[c]);
        op.gathers[c] = s.map[c] >= 0 && op.out_map[c] < 0;
      }
      ap_vertex *pv = &p->v[s.vertex];
      if (!ap_arena_grow(a, (void **)&pv->chain, &chain_cap[s.vertex], pv->n_chain + 1,
                         sizeof op))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      pv->chain[pv->n_chain++] = op;
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0) {
          from[n->out[k]].vertex = s.vertex;
          for (int c = 0; c < 2; c++)
            from[n->out[k]].map[c] = op.out_map[c];
        }
      continue;
    }
    /* A vertex. */
    int id = p->n_vertices++;
    ap_vertex *vx = &p->v[id];
    memset(vx, 0, sizeof *vx);
    vx->node = i;
    vx->join = !layer;
    vx->weight = -1;
    int R = rank_of(g, out);
    vx->n_ports = layer ? 2 : 1 + n_act;
    vx->port = ap_arena_array(a, (size_t)vx->n_ports, sizeof *vx->port);
    if (!vx->port)
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    vx->port[0].value = out;
    if (layer) {
      int x = n->in[0], w = n->in[1];
      if ((st = need_shape(g, n, x, d)) != AP_OK || (st = need_shape(g, n, w, d)) != AP_OK)
        return st;
      int r = rank_of(g, x), rw = rank_of(g, w);
      vx->weight = w;
      vx->port[1].value = x;
      double macs = 0;
      int64_t out_numel = ap_numel(R, g->values[out].dims);
      switch (role) {
      case ROLE_CONV:
      case ROLE_CONV_T: {
        vx->port[1].dim[0] = 0, vx->port[1].dim[1] = 1;
        vx->port[0].dim[0] = 0, vx->port[0].dim[1] = 1;
        vx->w_dim[0] = role == ROLE_CONV ? 1 : 0;
        vx->w_dim[1] = role == ROLE_CONV ? 0 : 1;
        double kernel = 1;
        for (int k = 2; k < rw; k++)
          kernel *= (double)dim_of(g, w, k);
        if (role == ROLE_CONV)
          macs = (double)out_numel * (double)dim_of(g, w, 1) * kernel;
        else
          macs = (double)ap_numel(r, g->values[x].dims) * (double)dim_of(g, w, 1) * kernel;
        break;
      }
      case ROLE_GEMM: {
        bool ta = ap_attr_int(n, "transA", 0) != 0, tb = ap_attr_int(n, "transB", 0) != 0;
        vx->port[1].dim[0] = ta ? 1 : 0, vx->port[1].dim[1] = ta ? 0 : 1;
        vx->port[0].dim[0] = 0, vx->port[0].dim[1] = 1;
        vx->w_dim[0] = tb ? 1 : 0, vx->w_dim[1] = tb ? 0 : 1;
        macs = (double)out_numel * (double)dim_of(g, x, ta ? 0 : 1);
        break;
      }
      default: /* MatMul with a weight on the right */
        vx->port[1].dim[0] = r >= 2 ? 0 : -1, vx->port[1].dim[1] = r - 1;
        vx->port[0].dim[0] = R >= 2 ? 0 : -1, vx->port[0].dim[1] = R - 1;
        vx->w_dim[0] = rw >= 2 ? rw - 2 : 0, vx->w_dim[1] = rw - 1;
        macs = (double)out_numel * (double)dim_of(g, x, r - 1);
        break;
      }
      vx->first = from[x].vertex < 0;
      vx->flops = 2 * macs * (vx->first ? 2 : 3);
      int groups = (int)ap_attr_int(n, "group", 1);
      vx->allowed = 0;
      if (vx->port[1].dim[0] >= 0 && vx->port[0].dim[0] >= 0)
        vx->allowed |= 1;
      if (groups == 1) {
        if (vx->port[1].dim[1] >= 0)
          vx->allowed |= 2;
        if (vx->port[0].dim[1] >= 0)
          vx->allowed |= 4;
      }
    } else {
      vx->port[0].dim[0] = R >= 1 ? 0 : -1;
      vx->port[0].dim[1] = n->op == AP_OP_MATMUL ? (R >= 2 ? R - 1 : -1) : (R >= 2 ? 1 : -1);
      int pi = 1;
      for (int k = 0; k < n->n_in; k++) {
        int x = n->in[k];
        if (x < 0 || !data_position(n, k) || !act[x])
          continue;
        if ((st = need_shape(g, n, x, d)) != AP_OK)
          return st;
        ap_port *pt = &vx->port[pi++];
        pt->value = x;
        int r = rank_of(g, x);
        for (int c = 0; c < 2; c++) {
          int od = vx->port[0].dim[c], j = od - (R - r);
          pt->dim[c] = -1;
          if (od < 0)
            continue;
          if (n->op == AP_OP_MATMUL) {
            /* C = A.B: splitting C's rows splits A's (and B's batch when
             * B is batched); splitting C's columns splits B's columns. */
            if (c == 0)
              pt->dim[c] = (k == 0 && r >= 2) || (k == 1 && r >= 3 && r == R) ? 0 : -1;
            else
              pt->dim[c] = k == 1 ? r - 1 : -1;
          } else if (n->op == AP_OP_CONCAT) {
            pt->dim[c] = od; /* a concatenated axis is split input by input */
          } else if (j >= 0 && dim_of(g, x, j) == dim_of(g, out, od)) {
            pt->dim[c] = j;
          }
        }
        if (n->op == AP_OP_MATMUL && k == 0)
          vx->flops = 6.0 * (double)ap_numel(R, g->values[out].dims) *
                      (double)dim_of(g, x, r - 1);
      }
      vx->allowed = 4 | (vx->port[0].dim[0] >= 0 ? 1 : 0) | (vx->port[0].dim[1] >= 0 ? 2 : 0);
    }
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) {
        from[n->out[k]].vertex = id;
        from[n->out[k]].map[0] = vx->port[0].dim[0];
        from[n->out[k]].map[1] = vx->port[0].dim[1];
      }
    /* Edges from the producers of its activation ports. */
    for (int pi = 1; pi < vx->n_ports; pi++) {
      src s = from[vx->port[pi].value];
      if (s.vertex < 0)
        continue;
      ap_edge e = {.from = s.vertex, .to = id, .port = pi};
      e.map[0] = s.map[0];
      e.map[1] = s.map[1];
      if (!ap_arena_grow(a, (void **)&p->e, &edge_cap, p->n_edges + 1, sizeof e))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      p->e[p->n_edges++] = e;
    }
  }
  p->n_ports = 0;
  for (int v = 0; v < p->n_vertices; v++) {
    p->v[v].ext_base = p->n_ports;
    p->n_ports += p->v[v].n_ports;
  }
  return AP_OK;
}
