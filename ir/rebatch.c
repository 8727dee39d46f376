/* Re-batching a model exported at a fixed batch B to batch N.
 *
 * Exporters write the batch they traced with into constants: a flatten is a
 * Reshape to [1, 9216], a channel shuffle a Reshape to [1, 4, 28, 56, 56],
 * a broadcast an Expand to [B, ...]. Binding the input's dim 0 to N leaves
 * those constants at B and the model no longer type-checks (or, with a -1
 * elsewhere in the shape, silently folds the batch into the features).
 *
 * The batch is followed through the graph, not matched by value: a copy of
 * the model is run through the pipeline at batch B, the batch axis is
 * carried from the input's dim 0 node by node through each operator's axis
 * rule (ir/axes.c), and where a Reshape or Expand reads a literal shape (an
 * initializer or a Constant node's value) the entry that carries the batch
 * is the one whose place in the row-major layout is the batch's: for a
 * Reshape of x (batch axis a) to s, the entry p with s[p] = B, the product
 * of s before p equal to the product of x's dims before a and the product
 * after p equal to that after a (a -1 elsewhere absorbs the rest). Those
 * entries become N in the model itself; shapes computed from Shape follow
 * the new batch by themselves. Two candidate entries (leading 1s) are
 * ambiguous and refused in one line naming the node.
 *
 * The batch also meets values that do not come from the input: a class
 * token expanded to [B, 1, D] and concatenated with the patches, a mask
 * made by ConstantOfShape([B, S]), a Tile to B copies. Where such a value
 * meets the batch at an operator that needs its dims equal (Concat off its
 * axis; an element-wise operator when B > 1, since a 1 broadcasts), and it
 * is made by Expand, ConstantOfShape or Tile of a literal, the entry that
 * wrote B there is rewritten too. A Slice whose literal ends keep the whole
 * batch (from 0 to B, step 1) gets N as its end. Every rewrite is listed in
 * g->rebatched, which the dumps print. */
#include <string.h>

#include "ir/ir.h"

/* The int64 data of literal v of g (an initializer, or a Constant node's
 * value attribute), or NULL for a value computed by nodes. */
static ap_tensor *literal(ap_graph *g, int v, ap_tensor *scratch) {
  if (v < 0)
    return NULL;
  ap_value *val = &g->values[v];
  if (val->kind == AP_VAL_WEIGHT || val->kind == AP_VAL_CONST) {
    *scratch = ap_value_tensor(val);
    return scratch;
  }
  ap_node *p = val->producer >= 0 ? &g->nodes[val->producer] : NULL;
  if (!p || p->op != AP_OP_CONSTANT)
    return NULL;
  for (int i = 0; i < p->n_attr; i++)
    if (strcmp(p->attr[i].name, "value") == 0 && p->attr[i].type == AP_ATTR_TENSOR)
      return p->attr[i].t;
  return NULL;
}

static int64_t prod(const int64_t *d, int from, int to) {
  int64_t x = 1;
  for (int i = from; i < to; i++)
    x *= d[i];
  return x;
}

/* Rewrites entry p of g's literal named name, read as a shape by node
 * (name and op), to batch; false when it is not a literal of g. The data
 * is copied first: it may be shared. */
static ap_status rewrite(ap_graph *g, const char *name, int p, int64_t from, int64_t batch,
                         const ap_node *n, bool *done, ap_diag *d) {
  ap_tensor scratch, *t = literal(g, ap_graph_find(g, name), &scratch);
  *done = false;
  if (!t)
    return AP_OK;
  if (t->dtype != AP_DT_INT64 || p >= t->numel)
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "cannot re-batch: the shape '%s' is not an int64 vector", name);
  if (((const int64_t *)t->data)[p] == batch)
    return AP_OK; /* a literal several nodes read, rewritten for an earlier one */
  int64_t *data = ap_arena_array(g->arena, (size_t)t->numel, sizeof *data);
  char *note = ap_arena_printf(g->arena, "%s[%d]: %lld -> %lld (node '%s', %s)", name, p,
                               (long long)from, (long long)batch, n->name, n->op_type);
  if (!data || !note ||
      !ap_arena_grow(g->arena, (void **)&g->rebatched, &g->cap_rebatched, g->n_rebatched + 1,
                     sizeof *g->rebatched))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  memcpy(data, t->data, (size_t)t->numel * sizeof *data);
  data[p] = batch;
  if (t == &scratch)
    g->values[ap_graph_find(g, name)].data = data;
  else
    t->data = data;
  g->rebatched[g->n_rebatched++] = note;
  *done = true;
  return AP_OK;
}

/* The entry of Reshape shape s (n entries) that carries the batch of x
 * (batch axis a), or -1 when none does; -2 when two could. */
static int reshape_batch_entry(const ap_value *x, int a, const int64_t *s, int n) {
  int64_t before = prod(x->dims, 0, a), after = prod(x->dims, a + 1, x->rank);
  int found = -1;
  for (int p = 0; p < n; p++) {
    if (s[p] != x->dims[a])
      continue;
    /* 0 copies x's dim at that place; -1 takes whatever is left. */
    int64_t pre = 1, post = 1;
    bool pre_free = false, post_free = false;
    for (int i = 0; i < n; i++) {
      int64_t e = s[i] == 0 && i < x->rank ? x->dims[i] : s[i];
      if (i == p)
        continue;
      if (e == -1)
        *(i < p ? &pre_free : &post_free) = true;
      else
        *(i < p ? &pre : &post) *= e;
    }
    bool ok = (pre_free ? before % pre == 0 : pre == before) &&
              (post_free ? after % post == 0 : post == after) && !(pre_free && post_free);
    if (ok)
      found = found == -1 ? p : -2;
  }
  return found;
}

/* Value name of g meets the batch at its axis `at` (of rank `rank`): when
 * its producer in g is an Expand, ConstantOfShape or Tile reading a literal
 * that wrote `from` there, that entry becomes `batch`. */
static ap_status meet(ap_graph *g, const ap_graph *c, const char *name, int at, int rank,
                      int64_t from, int64_t batch, ap_diag *d) {
  int v = ap_graph_find(g, name);
  int p = v >= 0 ? g->values[v].producer : -1;
  if (p < 0)
    return AP_OK;
  const ap_node *pn = &g->nodes[p];
  int slot = pn->op == AP_OP_CONSTANT_OF_SHAPE ? 0 : 1;
  if ((pn->op != AP_OP_EXPAND && pn->op != AP_OP_CONSTANT_OF_SHAPE && pn->op != AP_OP_TILE) ||
      pn->n_in <= slot || pn->in[slot] < 0)
    return AP_OK;
  ap_tensor scratch, *t = literal(g, pn->in[slot], &scratch);
  if (!t || t->dtype != AP_DT_INT64 || t->rank != 1)
    return AP_OK;
  const int64_t *s = t->data;
  int q = pn->op == AP_OP_EXPAND ? at - (rank - (int)t->numel) : at;
  if (q < 0 || q >= t->numel)
    return AP_OK;
  bool done;
  if (pn->op == AP_OP_TILE) {
    /* B copies of a dim of 1. */
    int x = pn->in[0] >= 0 ? ap_graph_find(c, g->values[pn->in[0]].name) : -1;
    if (x < 0 || c->values[x].rank != rank || c->values[x].dims[q] != 1 || s[q] != from)
      return AP_OK;
  } else if (s[q] != from) {
    return AP_OK;
  }
  return rewrite(g, g->values[pn->in[slot]].name, q, from, batch, pn, &done, d);
}

/* Slice node n of the clone reads x with the batch on axis a: the entry of
 * its literal ends that takes the whole batch (start 0, end B, step 1), or
 * -1. */
static int slice_batch_entry(ap_graph *g, const ap_graph *c, const ap_node *n, int a,
                             int64_t from) {
  if (n->n_in < 3)
    return -1; /* before opset 10: attributes, no literal to rewrite */
  ap_tensor ts, te, ta, tp;
  ap_tensor *st = literal(g, ap_graph_find(g, c->values[n->in[1]].name), &ts);
  ap_tensor *en = literal(g, ap_graph_find(g, c->values[n->in[2]].name), &te);
  ap_tensor *ax = n->n_in > 3 && n->in[3] >= 0
                      ? literal(g, ap_graph_find(g, c->values[n->in[3]].name), &ta)
                      : NULL;
  ap_tensor *sp = n->n_in > 4 && n->in[4] >= 0
                      ? literal(g, ap_graph_find(g, c->values[n->in[4]].name), &tp)
                      : NULL;
  if (!st || !en || st->dtype != AP_DT_INT64 || en->dtype != AP_DT_INT64 ||
      st->numel != en->numel || (n->n_in > 3 && n->in[3] >= 0 && !ax) ||
      (n->n_in > 4 && n->in[4] >= 0 && !sp))
    return -1;
  int rank = c->values[n->in[0]].rank;
  for (int q = 0; q < en->numel; q++) {
    int64_t axis = q;
    if (ax) {
      if (ax->dtype != AP_DT_INT64 || ax->numel != en->numel)
        return -1;
      axis = ((const int64_t *)ax->data)[q];
      axis += axis < 0 ? rank : 0;
    }
    if (axis != a)
      continue;
    int64_t step = 1;
    if (sp) {
      if (sp->dtype != AP_DT_INT64 || sp->numel != en->numel)
        return -1;
      step = ((const int64_t *)sp->data)[q];
    }
    return ((const int64_t *)st->data)[q] == 0 && ((const int64_t *)en->data)[q] == from &&
                   step == 1
               ? q
               : -1;
  }
  return -1;
}

ap_status ap_rebatch(ap_graph *g, int input, int64_t batch, ap_diag *d) {
  int64_t from = g->values[input].dims[0];
  ap_graph *c = ap_graph_clone(g);
  if (!c)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  int *axis = ap_arena_array(c->arena, (size_t)c->n_values + 1, sizeof *axis);
  ap_status st = axis ? ap_run_pipeline(c, NULL, d)
                      : ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  /* The pipeline adds values (folded constants, unfused parts): the map
   * covers them too. */
  if (st == AP_OK && !(axis = ap_arena_array(c->arena, (size_t)c->n_values + 1, sizeof *axis)))
    st = ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; st == AP_OK && v < c->n_values; v++)
    axis[v] = -1;
  if (st == AP_OK)
    axis[ap_graph_find(c, g->values[input].name)] = 0;

  for (int i = 0; st == AP_OK && i < c->n_nodes; i++) {
    const ap_node *n = &c->nodes[i];
    if (n->dead || n->n_out < 1 || n->out[0] < 0 || n->n_in < 1)
      continue;
    int x = n->in[0], y = n->out[0];
    const ap_value *xv = x >= 0 ? &c->values[x] : NULL;
    if ((n->op == AP_OP_RESHAPE || n->op == AP_OP_EXPAND) && xv && axis[x] >= 0) {
      int sv = n->n_in > 1 ? n->in[1] : -1;
      const ap_value *shape = sv >= 0 ? &c->values[sv] : NULL;
      if (!shape || !shape->data || shape->rank != 1 || shape->dtype != AP_DT_INT64)
        continue;
      const int64_t *s = shape->data;
      int ns = (int)shape->dims[0], p;
      if (n->op == AP_OP_RESHAPE) {
        p = reshape_batch_entry(xv, axis[x], s, ns);
        if (p == -2)
          st = ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                        "cannot re-batch: two entries of the shape could carry the batch "
                        "(%lld) of its input; export the model with a symbolic batch",
                        (long long)from);
      } else {
        /* Expand aligns the shape to the right of the output. */
        int out_axis = axis[x] + c->values[y].rank - xv->rank;
        p = out_axis - (c->values[y].rank - ns);
        p = p >= 0 && p < ns && s[p] == from && from != 1 ? p : -1;
      }
      if (st != AP_OK)
        break;
      bool done;
      if (p >= 0 && from != batch)
        st = rewrite(g, shape->name, p, from, batch, n, &done, d);
      if (n->op == AP_OP_RESHAPE)
        axis[y] = p >= 0 ? p : -1;
      else
        axis[y] = axis[x] + c->values[y].rank - xv->rank;
      continue;
    }
    if (n->op == AP_OP_SLICE && xv && axis[x] >= 0 && from != 1) {
      int q = slice_batch_entry(g, c, n, axis[x], from);
      if (q >= 0) {
        bool done;
        if (from != batch)
          st = rewrite(g, c->values[n->in[2]].name, q, from, batch, n, &done, d);
        axis[y] = axis[x];
        continue;
      }
    }
    for (int slot = 0; slot < n->n_in && axis[y] < 0; slot++) {
      int v = n->in[slot];
      if (v >= 0 && axis[v] >= 0 && ap_axes_data_slot(n, slot))
        axis[y] = ap_axes_in_to_out(c, n, slot, axis[v]);
    }
    /* The data inputs that meet the batch without carrying it. */
    bool equal_dims = n->op < AP_OP_COUNT &&
                      (n->op == AP_OP_CONCAT ||
                       (ap_op_table[n->op].axes == AP_AXES_EWISE && from > 1));
    for (int slot = 0; st == AP_OK && equal_dims && axis[y] >= 0 && slot < n->n_in; slot++) {
      int v = n->in[slot];
      if (v < 0 || axis[v] >= 0 || !ap_axes_data_slot(n, slot))
        continue;
      for (int b = 0; b < c->values[v].rank; b++)
        if (ap_axes_in_to_out(c, n, slot, b) == axis[y] && c->values[v].dims[b] == from) {
          if (from != batch)
            st = meet(g, c, c->values[v].name, b, c->values[v].rank, from, batch, d);
          break;
        }
    }
  }
  ap_graph_free(c);
  return st;
}
