/* Fused projections, unfused: exporters write a transformer's Q, K and V
 * projections as one MatMul with a [K, 3D] weight (plus one bias Add)
 * followed by a Split of its last axis. As one layer, a split of its
 * output features hands a device all of Q and part of K, never the same
 * heads of the three; as three layers on column slices of the weight each
 * splits by heads (Megatron-LM's partition). The rewrite is exact: each
 * output element is the same dot product. The weight stays one parameter,
 * read through Slice nodes, so training updates and exports it whole. */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* The only reader of value v, or -1 (none, several, or a graph output). */
static int sole_reader(const ap_graph *g, int v) {
  if (g->values[v].is_graph_output)
    return -1;
  int reader = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in && !n->dead; k++)
      if (n->in[k] == v) {
        if (reader >= 0 && reader != i)
          return -1;
        reader = i;
      }
  }
  return reader;
}

static int const_i64(ap_graph *g, const char *name, int64_t value) {
  int v = ap_graph_add_value(g, name, AP_VAL_CONST);
  ap_tensor t = {.dtype = AP_DT_INT64, .rank = 1, .dims = {1}, .numel = 1, .data = &value};
  return v >= 0 && ap_value_set_constant(g, v, &t) ? v : -1;
}

/* A node op(ins...) -> out, appended and shape-inferred. */
static int add_node(ap_graph *g, const char *name, const char *op, const int *ins, int n_in,
                    int out, ap_diag *d) {
  int ni = ap_graph_add_node(g, name, "", op, n_in, 1, 0);
  if (ni < 0)
    return -1;
  ap_node *n = &g->nodes[ni];
  for (int i = 0; i < n_in; i++)
    n->in[i] = ins[i];
  n->out[0] = out;
  g->values[out].producer = ni;
  return ap_infer_node(g, ni, d) == AP_OK ? ni : -1;
}

/* Columns [lo, hi) of the last axis of weight w, as a Slice node's output. */
static int column_slice(ap_graph *g, const char *base, int w, int64_t lo, int64_t hi,
                        ap_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s[%lld:%lld]", g->values[w].name, (long long)lo,
           (long long)hi);
  int out = ap_graph_add_value(g, name, AP_VAL_NODE);
  snprintf(name, sizeof name, "%s/%s.starts", base, g->values[w].name);
  int starts = const_i64(g, name, lo);
  snprintf(name, sizeof name, "%s/%s.ends", base, g->values[w].name);
  int ends = const_i64(g, name, hi);
  snprintf(name, sizeof name, "%s/%s.axes", base, g->values[w].name);
  int axes = const_i64(g, name, -1);
  if (out < 0 || starts < 0 || ends < 0 || axes < 0)
    return -1;
  snprintf(name, sizeof name, "%s/slice_%s", base, g->values[w].name);
  return add_node(g, name, "Slice", (int[]){w, starts, ends, axes}, 4, out, d) >= 0 ? out : -1;
}

/* Split node si's sizes along its axis, or false when they are not known. */
static bool split_sizes(ap_graph *g, const ap_node *n, int64_t dim, int64_t *size) {
  int k = n->n_out, count = 0;
  const int64_t *attr = ap_attr_ints(n, "split", &count);
  const ap_value *sv = n->n_in > 1 && n->in[1] >= 0 ? &g->values[n->in[1]] : NULL;
  if (sv && sv->data) {
    ap_tensor t = ap_value_tensor(sv);
    if (t.numel != k)
      return false;
    for (int i = 0; i < k; i++)
      size[i] = ap_tensor_get_i64(&t, i);
  } else if (attr) {
    if (count != k)
      return false;
    memcpy(size, attr, (size_t)k * sizeof *size);
  } else if (!sv) {
    int64_t each = (dim + k - 1) / k; /* equal parts, the last the rest (opset 18) */
    for (int i = 0; i < k; i++)
      size[i] = i < k - 1 ? each : dim - each * (k - 1);
  } else {
    return false;
  }
  return true;
}

/* The error of a failed add_node: shape inference's, else out of memory. */
static ap_status failed(ap_graph *g, ap_diag *d) {
  return d->status ? d->status : ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
}

static ap_status unfuse_one(ap_graph *g, int si, ap_diag *d, bool *done) {
  *done = false;
  const ap_node *sp = &g->nodes[si];
  int q = sp->in[0];
  if (q < 0 || sp->n_out > AP_MAX_RANK * 8)
    return AP_OK;
  const ap_value *qv = &g->values[q];
  int64_t axis = ap_attr_int(sp, "axis", 0);
  if (qv->rank < 2 || (axis != -1 && axis != qv->rank - 1))
    return AP_OK;
  /* Split <- [Add(., bias) <-] MatMul(x, W) with W a [K, N] weight. */
  int add = qv->producer, mm = add, bias = -1;
  if (add < 0)
    return AP_OK;
  if (g->nodes[add].op == AP_OP_ADD) {
    const ap_node *an = &g->nodes[add];
    for (int k = 0; k < 2 && mm == add; k++) {
      int other = an->in[1 - k];
      if (an->in[k] >= 0 && g->values[an->in[k]].producer >= 0 &&
          g->nodes[g->values[an->in[k]].producer].op == AP_OP_MATMUL && other >= 0 &&
          (g->values[other].data || ap_value_is_fed_weight(g, other)) &&
          g->values[other].rank == 1) {
        mm = g->values[an->in[k]].producer;
        bias = other;
      }
    }
    if (mm == add || sole_reader(g, g->nodes[mm].out[0]) != add)
      return AP_OK;
  }
  const ap_node *mn = &g->nodes[mm];
  if (mn->op != AP_OP_MATMUL || mn->in[0] < 0 || mn->in[1] < 0 || sole_reader(g, q) != si)
    return AP_OK;
  int x = mn->in[0], w = mn->in[1];
  const ap_value *wv = &g->values[w];
  if ((!wv->data && !ap_value_is_fed_weight(g, w)) || wv->rank != 2)
    return AP_OK;
  int64_t size[AP_MAX_RANK * 8], n_cols = wv->dims[1];
  int k = sp->n_out;
  if (!split_sizes(g, sp, n_cols, size))
    return AP_OK;
  int64_t total = 0;
  for (int i = 0; i < k; i++)
    total += size[i];
  if (total != n_cols || (bias >= 0 && g->values[bias].dims[0] != n_cols))
    return AP_OK;
  /* The rewrite: every output of the Split computed by its own layer. */
  int outs[AP_MAX_RANK * 8];
  memcpy(outs, sp->out, (size_t)k * sizeof *outs);
  char base[400];
  snprintf(base, sizeof base, "%s", sp->name);
  g->nodes[si].dead = g->nodes[mm].dead = true;
  g->nodes[add].dead = true;
  int64_t at = 0;
  for (int i = 0; i < k; i++, at += size[i - 1]) {
    if (outs[i] < 0)
      continue;
    char name[512];
    snprintf(name, sizeof name, "%s/part%d", base, i);
    int wi = column_slice(g, name, w, at, at + size[i], d);
    if (wi < 0)
      return failed(g, d);
    int prod = outs[i];
    if (bias >= 0) {
      snprintf(name, sizeof name, "%s/part%d/matmul_out", base, i);
      if ((prod = ap_graph_add_value(g, name, AP_VAL_NODE)) < 0)
        return failed(g, d);
    }
    snprintf(name, sizeof name, "%s/part%d/matmul", base, i);
    if (add_node(g, name, "MatMul", (int[]){x, wi}, 2, prod, d) < 0)
      return failed(g, d);
    if (bias >= 0) {
      snprintf(name, sizeof name, "%s/part%d", base, i);
      int bi = column_slice(g, name, bias, at, at + size[i], d);
      snprintf(name, sizeof name, "%s/part%d/bias", base, i);
      if (bi < 0 || add_node(g, name, "Add", (int[]){prod, bi}, 2, outs[i], d) < 0)
        return failed(g, d);
    }
  }
  *done = true;
  return AP_OK;
}

ap_status ap_unfuse_projections(ap_graph *g, ap_diag *d) {
  int n = g->n_nodes, rewrites = 0;
  for (int i = 0; i < n; i++) {
    if (g->nodes[i].dead || g->nodes[i].op != AP_OP_SPLIT)
      continue;
    bool done;
    ap_status s = unfuse_one(g, i, d, &done);
    if (s != AP_OK)
      return s;
    rewrites += done;
  }
  if (rewrites && !ap_graph_compact(g))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  return rewrites ? ap_verify(g, d) : AP_OK;
}
