/* Control flow, resolved at compile time: an If whose condition is a
 * constant once the inputs are bound (exporters write If(Equal(Shape(x)[0],
 * 1)) and the like, which folding decides) is replaced by its taken
 * branch; a Loop with a constant trip count whose condition stays true is
 * unrolled, one copy of its body per iteration. Subgraphs come from the
 * reader (frontend/onnx_read.c) with their reads of enclosing names marked
 * outer; inlining resolves those by name in the enclosing graph. Anything
 * else is refused in one line naming the node and why: the generated
 * programs have no branches. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

enum { MAX_TRIPS = 4096 }; /* iterations a Loop may unroll into */

static bool default_domain(const ap_node *n) {
  return !*n->domain || strcmp(n->domain, "ai.onnx") == 0;
}

static bool is_op(const ap_node *n, const char *type) {
  return !n->dead && n->op == AP_OP_UNKNOWN && default_domain(n) && strcmp(n->op_type, type) == 0;
}

bool ap_control_input_constant(const ap_node *n, int slot) {
  return (is_op(n, "If") && slot == 0) || (is_op(n, "Loop") && (slot == 0 || slot == 1));
}

static ap_status nomem(ap_graph *g, ap_diag *d) {
  return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
}

bool ap_infer_prefix(const ap_graph *g, int v, ap_prefix *out) {
  ap_graph *c = ap_graph_clone(g);
  if (!c)
    return false;
  bool *tainted = ap_arena_array(c->arena, (size_t)c->n_values + 1, sizeof *tainted);
  bool ok = tainted != NULL;
  /* Until nothing changes: nodes a rewrite appended may feed earlier ones. */
  for (bool changed = ok; changed;) {
    changed = false;
    for (int i = 0; i < c->n_nodes; i++) {
      ap_node *n = &c->nodes[i];
      if (n->dead) /* left out, or rewritten: its outputs are other nodes' now */
        continue;
      bool bad = n->op == AP_OP_UNKNOWN;
      for (int k = 0; k < n->n_in && !bad; k++)
        bad = n->in[k] >= 0 && tainted[n->in[k]];
      if (bad) {
        n->dead = changed = true;
        for (int k = 0; k < n->n_out; k++)
          if (n->out[k] >= 0)
            tainted[n->out[k]] = true;
      }
    }
  }
  for (int i = 0; i < c->n_outputs; i++)
    c->values[c->outputs[i]].is_graph_output = false;
  c->n_outputs = 0;
  ok = ok && !tainted[v] && ap_graph_add_output(c, v);
  ap_diag d = {0};
  ok = ok && ap_graph_compact(c) && ap_verify(c, &d) == AP_OK &&
       ap_fold_constants(c, &d) == AP_OK && ap_infer_shapes(c, &d) == AP_OK;
  int cv = ok ? ap_graph_find(c, g->values[v].name) : -1;
  ok = cv >= 0 && ap_value_shape_known(&c->values[cv]);
  if (ok) {
    const ap_value *val = &c->values[cv];
    out->rank = val->rank;
    memcpy(out->dims, val->dims, sizeof out->dims);
    out->constant = val->data != NULL;
    ap_tensor t = ap_value_tensor(val);
    out->first = out->constant && t.numel > 0 ? ap_tensor_get_f64(&t, 0) : 0;
  }
  ap_graph_free(c);
  return ok;
}

/* ---- inlining a subgraph --------------------------------------------------- */

typedef struct inliner {
  ap_graph *g;
  ap_diag *d;
  int ni;             /* the If or Loop node */
  const char *suffix; /* appended to the subgraph's names ("" for If, "@k" per iteration) */
} inliner;

/* A value of g for subgraph value sv of sub: map[sv] once made. */
static ap_status map_value(inliner *in, const ap_graph *sub, int sv, int *map) {
  ap_graph *g = in->g;
  const ap_value *v = &sub->values[sv];
  if (map[sv] >= 0)
    return AP_OK;
  if (v->outer) {
    if ((map[sv] = ap_graph_find(g, v->name)) < 0)
      return ap_refuse(g, in->d, in->ni, "the subgraph reads '%s', which no enclosing graph defines",
                    v->name);
    return AP_OK;
  }
  char name[512];
  snprintf(name, sizeof name, "%s%s", v->name, in->suffix);
  if (ap_graph_find(g, name) >= 0)
    return ap_refuse(g, in->d, in->ni, "the subgraph's name '%s' is already used in the graph",
                  name);
  int nv = ap_graph_add_value(g, name, v->data ? AP_VAL_CONST : AP_VAL_NODE);
  if (nv < 0)
    return nomem(g, in->d);
  if (v->data) { /* a subgraph initializer */
    ap_tensor t = ap_value_tensor(v);
    if (!ap_value_set_constant(g, nv, &t))
      return nomem(g, in->d);
  }
  map[sv] = nv;
  return AP_OK;
}

/* Copies sub's nodes into g; map gives sub's inputs (set by the caller)
 * and receives every other value's counterpart. */
static ap_status inline_graph(inliner *in, const ap_graph *sub, int *map) {
  ap_graph *g = in->g;
  ap_status s;
  for (int v = 0; v < sub->n_values; v++)
    if ((sub->values[v].outer || sub->values[v].data) && (s = map_value(in, sub, v, map)) != AP_OK)
      return s;
  for (int i = 0; i < sub->n_nodes; i++)
    for (int k = 0; k < sub->nodes[i].n_out; k++)
      if (sub->nodes[i].out[k] >= 0 && (s = map_value(in, sub, sub->nodes[i].out[k], map)))
        return s;
  for (int i = 0; i < sub->n_nodes; i++) {
    const ap_node *sn = &sub->nodes[i];
    for (int k = 0; k < sn->n_in; k++)
      if (sn->in[k] >= 0 && map[sn->in[k]] < 0)
        return ap_refuse(g, in->d, in->ni, "the subgraph's input '%s' is not fed",
                      sub->values[sn->in[k]].name);
    char name[512];
    snprintf(name, sizeof name, "%s%s", sn->name, in->suffix);
    for (int k = 2; ap_graph_find(g, name) >= 0 && k < 100; k++)
      snprintf(name, sizeof name, "%s%s_%d", sn->name, in->suffix, k);
    int id = ap_graph_add_node(g, name, sn->domain, sn->op_type, sn->n_in, sn->n_out, sn->n_attr);
    if (id < 0)
      return nomem(g, in->d);
    sn = &sub->nodes[i];
    ap_node *n = &g->nodes[id];
    for (int k = 0; k < sn->n_in; k++)
      n->in[k] = sn->in[k] >= 0 ? map[sn->in[k]] : -1;
    for (int k = 0; k < sn->n_out; k++)
      if ((n->out[k] = sn->out[k] >= 0 ? map[sn->out[k]] : -1) >= 0)
        g->values[n->out[k]].producer = id;
    memcpy(n->attr, sn->attr, (size_t)sn->n_attr * sizeof *n->attr);
  }
  return AP_OK;
}

/* dst = op(src) as a new node (Identity, or Unsqueeze on axis 0). */
static int add_unary(ap_graph *g, const char *name, const char *op, int src, int dst) {
  int extra = 0;
  int axes = -1;
  if (strcmp(op, "Unsqueeze") == 0 && g->opset >= 13) {
    char vname[512];
    snprintf(vname, sizeof vname, "%s.axes", name);
    int64_t zero = 0;
    ap_tensor t = {.dtype = AP_DT_INT64, .rank = 1, .dims = {1}, .numel = 1, .data = &zero};
    if ((axes = ap_graph_add_value(g, vname, AP_VAL_CONST)) < 0 ||
        !ap_value_set_constant(g, axes, &t))
      return -1;
    extra = 1;
  }
  bool attr_axes = strcmp(op, "Unsqueeze") == 0 && g->opset < 13;
  int id = ap_graph_add_node(g, name, "", op, 1 + extra, 1, attr_axes ? 1 : 0);
  if (id < 0)
    return -1;
  ap_node *n = &g->nodes[id];
  n->in[0] = src;
  if (extra)
    n->in[1] = axes;
  if (attr_axes) {
    int64_t *zero = ap_arena_array(g->arena, 1, sizeof *zero);
    if (!zero)
      return -1;
    n->attr[0] = (ap_attr){.name = "axes", .type = AP_ATTR_INTS, .n = 1, .ints = zero};
  }
  n->out[0] = dst;
  g->values[dst].producer = id;
  return id;
}

static const ap_graph *graph_attr(const ap_node *n, const char *name) {
  const ap_attr *a = ap_attr_find(n, name);
  return a && a->type == AP_ATTR_GRAPH ? a->g : NULL;
}

/* The constant value of input slot of node ni, decided on the graph so far. */
static bool constant_input(ap_graph *g, int ni, int slot, double *value) {
  const ap_node *n = &g->nodes[ni];
  int v = slot < n->n_in ? n->in[slot] : -1;
  if (v < 0)
    return false;
  const ap_value *val = &g->values[v];
  if (val->data) {
    ap_tensor t = ap_value_tensor(val);
    if (t.numel != 1)
      return false;
    *value = ap_tensor_get_f64(&t, 0);
    return true;
  }
  ap_prefix p;
  if (!ap_infer_prefix(g, v, &p) || !p.constant || ap_numel(p.rank, p.dims) != 1)
    return false;
  *value = p.first;
  return true;
}

/* Whether node ni's If condition, or Loop trip count and condition, are
 * known now. */
static bool decided(ap_graph *g, int ni) {
  const ap_node *n = &g->nodes[ni];
  double x;
  if (is_op(n, "If"))
    return constant_input(g, ni, 0, &x);
  return n->n_in > 0 && n->in[0] >= 0 && constant_input(g, ni, 0, &x) &&
         (n->n_in < 2 || n->in[1] < 0 || constant_input(g, ni, 1, &x));
}

static ap_status lower_if(ap_graph *g, int ni, ap_diag *d) {
  double cond;
  if (!constant_input(g, ni, 0, &cond))
    return ap_refuse(g, d, ni, "the condition is not a constant once the inputs are bound (only an "
                  "If decided at compile time is supported)");
  const ap_graph *branch = graph_attr(&g->nodes[ni], cond != 0 ? "then_branch" : "else_branch");
  if (!branch)
    return ap_refuse(g, d, ni, "attribute '%s' (a graph) is missing",
                  cond != 0 ? "then_branch" : "else_branch");
  if (branch->n_outputs != g->nodes[ni].n_out)
    return ap_refuse(g, d, ni, "the taken branch has %d outputs, the node %d", branch->n_outputs,
                  g->nodes[ni].n_out);
  int *map = ap_arena_array(g->arena, (size_t)branch->n_values + 1, sizeof *map);
  if (!map)
    return nomem(g, d);
  for (int v = 0; v < branch->n_values; v++)
    map[v] = -1;
  g->nodes[ni].dead = true;
  inliner in = {.g = g, .d = d, .ni = ni, .suffix = ""};
  ap_status s = inline_graph(&in, branch, map);
  if (s != AP_OK)
    return s;
  char base[400];
  snprintf(base, sizeof base, "%s", g->nodes[ni].name);
  for (int k = 0; k < branch->n_outputs; k++) {
    int out = g->nodes[ni].out[k];
    if (out < 0)
      continue;
    char name[512];
    snprintf(name, sizeof name, "%s/out%d", base, k);
    if (add_unary(g, name, "Identity", map[branch->outputs[k]], out) < 0)
      return nomem(g, d);
  }
  return AP_OK;
}

/* Whether the body's condition output is its condition input (through
 * Identity nodes) or a constant true. */
static bool condition_stays_true(const ap_graph *body) {
  int v = body->outputs[0];
  for (int hops = 0; hops < 16; hops++) {
    const ap_value *val = &body->values[v];
    if (v == body->inputs[1])
      return true;
    if (val->data) {
      ap_tensor t = ap_value_tensor(val);
      return t.numel == 1 && ap_tensor_get_f64(&t, 0) != 0;
    }
    int p = -1;
    for (int i = 0; i < body->n_nodes && p < 0; i++)
      for (int k = 0; k < body->nodes[i].n_out; k++)
        if (body->nodes[i].out[k] == v)
          p = i;
    if (p < 0)
      return false;
    const ap_node *n = &body->nodes[p];
    if (strcmp(n->op_type, "Identity") == 0 && n->n_in == 1 && n->in[0] >= 0) {
      v = n->in[0];
    } else if (strcmp(n->op_type, "Constant") == 0 && n->n_attr == 1 &&
               strcmp(n->attr[0].name, "value") == 0 && n->attr[0].type == AP_ATTR_TENSOR) {
      return n->attr[0].t->numel == 1 && ap_tensor_get_f64(n->attr[0].t, 0) != 0;
    } else {
      return false;
    }
  }
  return false;
}

static ap_status lower_loop(ap_graph *g, int ni, ap_diag *d) {
  const ap_node *n = &g->nodes[ni];
  const ap_graph *body = graph_attr(n, "body");
  if (!body)
    return ap_refuse(g, d, ni, "attribute 'body' (a graph) is missing");
  int n_carried = n->n_in - 2;
  if (n_carried < 0 || body->n_inputs != n_carried + 2 || body->n_outputs < n_carried + 1 ||
      n->n_out != body->n_outputs - 1)
    return ap_refuse(g, d, ni, "the body's inputs and outputs do not match the node's (%d loop-"
                  "carried values)", n_carried < 0 ? 0 : n_carried);
  double trips = 0, cond = 1;
  if (n->in[0] < 0 || !constant_input(g, ni, 0, &trips))
    return ap_refuse(g, d, ni, "the trip count is not a constant once the inputs are bound (only "
                  "a Loop unrolled at compile time is supported)");
  if (n->n_in > 1 && n->in[1] >= 0 && !constant_input(g, ni, 1, &cond))
    return ap_refuse(g, d, ni, "the condition is not a constant once the inputs are bound");
  if (cond == 0)
    trips = 0;
  if (trips > MAX_TRIPS)
    return ap_refuse(g, d, ni, "a trip count of %.0f is more than the %d iterations unrolled", trips,
                  (int)MAX_TRIPS);
  if (!condition_stays_true(body))
    return ap_refuse(g, d, ni, "the body computes its condition (a loop that may exit early is "
                  "not supported)");
  int n_scan = body->n_outputs - 1 - n_carried, n_trips = (int)(trips < 0 ? 0 : trips);
  if (n_scan > 0 && n_trips == 0)
    return ap_refuse(g, d, ni, "scan outputs of a loop that runs no iteration are empty tensors, "
                  "which are not supported");
  for (int i = 0; i < body->n_nodes; i++)
    for (int k = 0; k < body->nodes[i].n_attr; k++)
      if (body->nodes[i].attr[k].type == AP_ATTR_GRAPH)
        return ap_refuse(g, d, ni, "the body's node '%s' has a subgraph (nested control flow in a "
                      "Loop is not supported)", body->nodes[i].name);
  char base[400];
  snprintf(base, sizeof base, "%s", n->name);
  int *carried = ap_arena_array(g->arena, (size_t)n_carried + 1, sizeof *carried);
  int *scans = ap_arena_array(g->arena, (size_t)n_scan * (size_t)n_trips + 1, sizeof *scans);
  int *map = ap_arena_array(g->arena, (size_t)body->n_values + 1, sizeof *map);
  if (!carried || !scans || !map)
    return nomem(g, d);
  for (int k = 0; k < n_carried; k++)
    carried[k] = n->in[2 + k];
  g->nodes[ni].dead = true;
  for (int it = 0; it < n_trips; it++) {
    char suffix[32], name[512];
    snprintf(suffix, sizeof suffix, "@%d", it);
    for (int v = 0; v < body->n_values; v++)
      map[v] = -1;
    /* The iteration number and a true condition, as constants. */
    int64_t iter = it;
    bool truth = true;
    ap_tensor ti = {.dtype = AP_DT_INT64, .rank = 0, .numel = 1, .data = &iter};
    ap_tensor tc = {.dtype = AP_DT_BOOL, .rank = 0, .numel = 1, .data = &truth};
    snprintf(name, sizeof name, "%s%s", body->values[body->inputs[0]].name, suffix);
    int iv = ap_graph_find(g, name) < 0 ? ap_graph_add_value(g, name, AP_VAL_CONST) : -1;
    snprintf(name, sizeof name, "%s%s", body->values[body->inputs[1]].name, suffix);
    int cv = ap_graph_find(g, name) < 0 ? ap_graph_add_value(g, name, AP_VAL_CONST) : -1;
    if (iv < 0 || cv < 0)
      return ap_refuse(g, d, ni, "the body's input names collide with the graph's");
    if (!ap_value_set_constant(g, iv, &ti) || !ap_value_set_constant(g, cv, &tc))
      return nomem(g, d);
    map[body->inputs[0]] = iv;
    map[body->inputs[1]] = cv;
    for (int k = 0; k < n_carried; k++)
      map[body->inputs[2 + k]] = carried[k];
    inliner in = {.g = g, .d = d, .ni = ni, .suffix = suffix};
    ap_status s = inline_graph(&in, body, map);
    if (s != AP_OK)
      return s;
    for (int k = 0; k < n_carried; k++)
      carried[k] = map[body->outputs[1 + k]];
    for (int j = 0; j < n_scan; j++)
      scans[j * n_trips + it] = map[body->outputs[1 + n_carried + j]];
  }
  for (int k = 0; k < n_carried; k++) {
    int out = g->nodes[ni].out[k];
    char name[512];
    snprintf(name, sizeof name, "%s/out%d", base, k);
    if (out >= 0 && add_unary(g, name, "Identity", carried[k], out) < 0)
      return nomem(g, d);
  }
  /* Scan outputs: the iterations' values stacked on a new axis 0. */
  for (int j = 0; j < n_scan; j++) {
    int out = g->nodes[ni].out[n_carried + j];
    if (out < 0)
      continue;
    char name[512];
    snprintf(name, sizeof name, "%s/scan%d", base, j);
    int cat = ap_graph_add_node(g, name, "", "Concat", n_trips, 1, 1);
    if (cat < 0)
      return nomem(g, d);
    g->nodes[cat].attr[0] = (ap_attr){.name = "axis", .type = AP_ATTR_INT, .i = 0};
    g->nodes[cat].out[0] = out;
    g->values[out].producer = cat;
    for (int it = 0; it < n_trips; it++) {
      snprintf(name, sizeof name, "%s/scan%d@%d", base, j, it);
      int u = ap_graph_add_value(g, name, AP_VAL_NODE);
      if (u < 0 || add_unary(g, name, "Unsqueeze", scans[j * n_trips + it], u) < 0)
        return nomem(g, d);
      g->nodes[cat].in[it] = u;
    }
  }
  return AP_OK;
}

/* One sweep over the nodes; with defer, an If or Loop not decided yet is
 * left for a later sweep (counted in *pending) instead of refused. */
static ap_status sweep(ap_graph *g, bool defer, int *rewrites, int *pending, ap_diag *d) {
  /* Inlined branches may hold If and Loop nodes in turn: the list grows. */
  for (int i = 0; i < g->n_nodes; i++) {
    bool is_if = is_op(&g->nodes[i], "If");
    if (!is_if && !is_op(&g->nodes[i], "Loop"))
      continue;
    if (defer && !decided(g, i)) {
      ++*pending;
      continue;
    }
    ap_status s = is_if ? lower_if(g, i, d) : lower_loop(g, i, d);
    if (s != AP_OK)
      return s;
    ++*rewrites;
  }
  return AP_OK;
}

ap_status ap_lower_control_flow(ap_graph *g, ap_diag *d) {
  int rewrites = 0;
  /* A condition may be the shape of what a recurrent layer computes (an If
   * on the length of an LSTM's output, inside another If's branch): while
   * some If or Loop waits, unroll the recurrent layers whose input shapes
   * are known, and sweep again, until neither makes progress. */
  for (;;) {
    int done = 0, pending = 0, unrolled = 0;
    ap_status s = sweep(g, true, &done, &pending, d);
    if (s == AP_OK && pending && !done)
      s = ap_unroll_recurrent_known(g, &unrolled, d);
    if (s != AP_OK)
      return s;
    rewrites += done + unrolled;
    if (!pending || (!done && !unrolled))
      break;
  }
  /* What still waits is refused, each in its own words. */
  int pending = 0;
  ap_status s = sweep(g, false, &rewrites, &pending, d);
  if (s != AP_OK)
    return s;
  if (rewrites && !ap_graph_compact(g))
    return nomem(g, d);
  return AP_OK;
}
