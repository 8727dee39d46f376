/* Fusion in inference programs (issue 8): a float32 2-D convolution
 * computes, besides its own output, the chain of operators after it that
 * each read only the previous one's output (element by element, the same
 * box on every device):
 *
 *   Conv -> [BatchNormalization] -> any of Add (a residual), Relu, Clip,
 *   Sigmoid, LeakyRelu, in graph order, at most one Add
 *
 * BatchNormalization with stored statistics is folded into the
 * convolution at compile time: its scale s = gamma / sqrt(var + eps) is
 * multiplied into the convolution's weight and bias and its shift
 * t = beta - mean s into the bias (ONNX Runtime's Conv+BN fusion), when
 * they are constants only this convolution reads; otherwise the epilogue
 * computes y s + t, s and t written over the BatchNormalization's scale and
 * B (which only it reads). The rest is applied in the convolution kernel's
 * epilogue, one pass over the output right after the convolution, instead
 * of one pass per operator; the absorbed operators' outputs are aliases of
 * the convolution's.
 *
 * The plan is decided once, for every device, before lowering, and only
 * where it changes no communication: no absorbed operator reads through a
 * transfer, the convolution's partial sums (if any) are not fused, every
 * value of the chain has the same box on each device, and the residual is
 * held by each device in exactly that box. Folding changes constants only,
 * which no device sends (each reads its boxes from the blob). Training
 * programs are left alone: the backward of every absorbed operator reads
 * the values fusion would not materialise. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "passes/distribute.h"

/* The only reader of value v, or -1 (none, several, or a graph output). */
static int sole_reader(const ap_graph *g, int v) {
  if (g->values[v].is_graph_output)
    return -1;
  int reader = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] == v) {
        if (reader >= 0 && reader != i)
          return -1;
        if (reader == i)
          return -1; /* read twice by one node (Add(x, x)) */
        reader = i;
      }
  }
  return reader;
}

static bool is_f32(const ap_graph *g, int v) {
  return v >= 0 && g->values[v].dtype == AP_DT_FLOAT;
}

static bool is_const_f32(const ap_graph *g, int v) {
  return is_f32(g, v) && g->values[v].data;
}

static bool same_dims(const ap_value *a, const ap_value *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return true;
}

/* The single float of a constant scalar input, or dflt when absent. */
static bool const_scalar(const ap_graph *g, const ap_node *n, int slot, double dflt,
                         double *out) {
  if (slot >= n->n_in || n->in[slot] < 0) {
    *out = dflt;
    return true;
  }
  const ap_value *v = &g->values[n->in[slot]];
  if (!v->data || v->dtype != AP_DT_FLOAT || ap_numel(v->rank, v->dims) != 1)
    return false;
  *out = ((const float *)v->data)[0];
  return true;
}

/* Whether node ni reads input slot and writes output 0 in the same box on
 * every device, with no transfer, no partial sums; held boxes equal. */
static bool same_boxes(const ap_graph *g, const ap_dist *dist, int ni, int slot) {
  if (!dist || dist->n_dev <= 1)
    return true;
  const ap_node *n = &g->nodes[ni];
  const ap_dnode *dn = &dist->node[ni];
  if (dn->reduce)
    return false;
  for (int i = 0; dn->xfer_in && i < n->n_in; i++)
    if (dn->xfer_in[i])
      return false;
  int nd = dist->n_dev, v = n->in[slot], y = n->out[0];
  const ap_value *val = &g->values[v];
  for (int d = 0; d < nd; d++) {
    const ap_dbox *held = &dist->held[(size_t)v * (size_t)nd + (size_t)d];
    const ap_dbox *out = &dist->held[(size_t)y * (size_t)nd + (size_t)d];
    if (!ap_dbox_equal(val->rank, held, out))
      return false;
    if (dn->in && !ap_dbox_equal(val->rank, &dn->in[(size_t)slot * (size_t)nd + (size_t)d], out))
      return false;
  }
  return true;
}

/* Whether BatchNormalization node bn reads, on every device, the channels
 * of its per-channel inputs that its box of X covers. */
static bool bn_channels_match(const ap_graph *g, const ap_dist *dist, int bn) {
  if (!dist || dist->n_dev <= 1)
    return true;
  const ap_node *n = &g->nodes[bn];
  const ap_dnode *dn = &dist->node[bn];
  int nd = dist->n_dev;
  for (int d = 0; d < nd; d++) {
    const ap_dbox *xb = &dist->held[(size_t)n->out[0] * (size_t)nd + (size_t)d];
    for (int i = 1; i <= 2; i++) {
      if (!dn->in)
        continue;
      const ap_dbox *cb = &dn->in[(size_t)i * (size_t)nd + (size_t)d];
      if (xb->hi[1] > xb->lo[1] && (cb->lo[0] != xb->lo[1] || cb->hi[0] != xb->hi[1]))
        return false;
    }
  }
  return true;
}

/* A copy of constant v's floats in g's arena, as data to overwrite. */
static float *own_copy(ap_graph *g, int v) {
  const ap_value *val = &g->values[v];
  int64_t n = ap_numel(val->rank, val->dims);
  float *c = ap_arena_array(g->arena, (size_t)n + 1, sizeof *c);
  if (c)
    memcpy(c, val->data, (size_t)n * sizeof *c);
  return c;
}

/* Folds BatchNormalization bn into the Conv conv where its constants
 * allow, else rewrites bn's scale and B to s and t for the epilogue. */
static ap_status fold_bn(ap_graph *g, int conv, int bn, cg_epi_op *op, ap_diag *d) {
  const ap_node *c = &g->nodes[conv], *b = &g->nodes[bn];
  const ap_value *wv = &g->values[c->in[1]];
  int64_t m = wv->dims[0], per = ap_numel(wv->rank, wv->dims) / (m ? m : 1);
  double eps = ap_attr_float(b, "epsilon", 1e-5f);
  const float *gamma = g->values[b->in[1]].data, *beta = g->values[b->in[2]].data;
  const float *mean = g->values[b->in[3]].data, *var = g->values[b->in[4]].data;
  float *s = ap_arena_array(g->arena, (size_t)m + 1, sizeof *s);
  float *t = ap_arena_array(g->arena, (size_t)m + 1, sizeof *t);
  double *sd = ap_arena_array(g->arena, (size_t)m + 1, sizeof *sd);
  if (!s || !t || !sd)
    return cg_oom(g, d);
  for (int64_t i = 0; i < m; i++) {
    sd[i] = (double)gamma[i] / sqrt((double)var[i] + eps);
    s[i] = (float)sd[i];
    t[i] = (float)((double)beta[i] - (double)mean[i] * sd[i]);
  }
  int bias = c->n_in > 2 ? c->in[2] : -1;
  bool w_ok = is_const_f32(g, c->in[1]) && sole_reader(g, c->in[1]) == conv;
  bool b_ok = bias < 0 || (is_const_f32(g, bias) && sole_reader(g, bias) == conv);
  memset(op, 0, sizeof *op);
  op->kind = CG_EPI_AFFINE;
  op->node = bn;
  if (w_ok && b_ok) {
    float *w = own_copy(g, c->in[1]);
    if (!w)
      return cg_oom(g, d);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < per; j++)
        w[i * per + j] = (float)((double)w[i * per + j] * sd[i]);
    g->values[c->in[1]].data = w;
    if (bias >= 0) {
      float *bb = own_copy(g, bias);
      if (!bb)
        return cg_oom(g, d);
      for (int64_t i = 0; i < m; i++)
        bb[i] = (float)((double)bb[i] * sd[i] + (double)beta[i] - (double)mean[i] * sd[i]);
      g->values[bias].data = bb;
    } else {
      op->shift = true;
    }
  } else {
    op->scale = op->shift = true;
  }
  g->values[b->in[1]].data = s;
  g->values[b->in[2]].data = t;
  return AP_OK;
}

/* Whether node ni (reading the chain's value v) can join the chain as one
 * more epilogue operation; fills op. */
static bool epilogue_op(const ap_graph *g, const ap_dist *dist, const int *pos, int head,
                        int ni, int v, bool have_add, cg_epi_op *op) {
  const ap_node *n = &g->nodes[ni];
  memset(op, 0, sizeof *op);
  op->node = ni;
  if (n->n_out < 1 || !is_f32(g, n->out[0]) || !same_dims(&g->values[v], &g->values[n->out[0]]))
    return false;
  for (int o = 1; o < n->n_out; o++)
    if (n->out[o] >= 0)
      return false;
  switch (n->op) {
  case AP_OP_ADD: {
    if (have_add || n->n_in != 2)
      return false;
    int slot = n->in[0] == v ? 1 : 0, r = n->in[slot];
    const ap_value *rv = &g->values[r];
    if (!is_f32(g, r) || rv->data || !same_dims(rv, &g->values[v]))
      return false;
    /* The residual is computed before the convolution runs. */
    if (rv->producer >= 0 && pos[rv->producer] > pos[head])
      return false;
    if (dist && dist->n_dev > 1 && !same_boxes(g, dist, ni, slot))
      return false;
    op->kind = CG_EPI_ADD;
    op->slot = slot;
    op->value = r;
    return same_boxes(g, dist, ni, 1 - slot);
  }
  case AP_OP_RELU: op->kind = CG_EPI_RELU; break;
  case AP_OP_SIGMOID: op->kind = CG_EPI_SIGMOID; break;
  case AP_OP_LEAKY_RELU:
    op->kind = CG_EPI_LEAKY;
    op->lo = ap_attr_float(n, "alpha", 0.01f);
    break;
  case AP_OP_CLIP:
    op->kind = CG_EPI_CLIP;
    if (n->n_in > 1 || !ap_attr_find(n, "min")) {
      if (!const_scalar(g, n, 1, -INFINITY, &op->lo) ||
          !const_scalar(g, n, 2, INFINITY, &op->hi))
        return false;
    } else {
      op->lo = ap_attr_float(n, "min", -INFINITY);
      op->hi = ap_attr_float(n, "max", INFINITY);
    }
    break;
  default: return false;
  }
  return same_boxes(g, dist, ni, 0);
}

static bool fusion_disabled(void) {
  const char *e = getenv("ACCPAR_NO_FUSION");
  return e && *e && strcmp(e, "0") != 0;
}

ap_status cg_fuse_plan(ap_graph *g, const ap_dist *dist, const int *order, int n_order,
                       cg_fusion *f, ap_diag *d) {
  memset(f, 0, sizeof *f);
  f->head = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->head);
  f->chain = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->chain);
  int *pos = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *pos);
  if (!f->head || !f->chain || !pos)
    return cg_oom(g, d);
  for (int i = 0; i < g->n_nodes; i++) {
    f->head[i] = -1;
    pos[i] = g->n_nodes;
  }
  for (int i = 0; i < n_order; i++)
    pos[order[i]] = i;
  if (fusion_disabled())
    return AP_OK;
  for (int oi = 0; oi < n_order; oi++) {
    int ci = order[oi];
    const ap_node *c = &g->nodes[ci];
    if (c->op != AP_OP_CONV || c->n_in < 2 || !is_f32(g, c->in[0]) || !is_f32(g, c->out[0]) ||
        g->values[c->out[0]].rank != 4 || g->values[c->out[0]].data)
      continue;
    if (dist && dist->n_dev > 1 && dist->node[ci].reduce)
      continue;
    cg_epi chain = {0};
    int v = c->out[0];
    for (;;) {
      int ni = sole_reader(g, v);
      if (ni < 0 || chain.n_ops == CG_EPI_MAX || pos[ni] <= oi)
        break;
      const ap_node *n = &g->nodes[ni];
      cg_epi_op op;
      if (n->op == AP_OP_BATCH_NORM) {
        bool ok = chain.n_ops == 0 && n->n_in == 5 && n->in[0] == v &&
                  ap_attr_int(n, "training_mode", 0) == 0 && ap_attr_int(n, "spatial", 1) == 1 &&
                  is_f32(g, n->out[0]) && same_boxes(g, dist, ni, 0) &&
                  bn_channels_match(g, dist, ni);
        for (int o = 1; ok && o < n->n_out; o++)
          ok = n->out[o] < 0;
        for (int i = 1; ok && i < 5; i++)
          ok = is_const_f32(g, n->in[i]) &&
               ap_numel(g->values[n->in[i]].rank, g->values[n->in[i]].dims) ==
                   g->values[v].dims[1];
        for (int i = 1; ok && i <= 2; i++)
          ok = sole_reader(g, n->in[i]) == ni;
        if (!ok)
          break;
        ap_status s = fold_bn(g, ci, ni, &op, d);
        if (s != AP_OK)
          return s;
      } else {
        bool have_add = false;
        for (int j = 0; j < chain.n_ops; j++)
          have_add |= chain.ops[j].kind == CG_EPI_ADD;
        if (!epilogue_op(g, dist, pos, ci, ni, v, have_add, &op))
          break;
      }
      chain.ops[chain.n_ops++] = op;
      f->head[ni] = ci;
      v = n->out[0];
    }
    if (!chain.n_ops)
      continue;
    cg_epi *e = ap_arena_alloc(g->arena, sizeof *e);
    if (!e)
      return cg_oom(g, d);
    *e = chain;
    f->chain[ci] = e;
    f->n_fused += chain.n_ops;
  }
  return AP_OK;
}

/* The epilogue of a convolution kernel whose output box k->out[0] is
 * [N, C, H, W]: one pass applying e's operations in order. The scale,
 * shift and residual are the kernel's inputs CG_EPI_SLOT_*. */
void cg_fuse_epilogue(cg_kernel *k, const cg_epi *e) {
  bool work = false; /* a BatchNormalization folded whole leaves nothing to do */
  for (int j = 0; j < e->n_ops; j++)
    work |= e->ops[j].kind != CG_EPI_AFFINE || e->ops[j].scale || e->ops[j].shift;
  if (!work)
    return;
  const cg_operand *y = &k->out[0];
  int64_t nb = y->dims[0], ch = y->dims[1], sp = y->dims[2] * y->dims[3];
  cg_x *out = cg_out(k, 0);
  int n = cg_for_n(k, "n", nb);
  int c = cg_for_n(k, "c", ch);
  int sc = -1, sh = -1;
  for (int j = 0; j < e->n_ops; j++)
    if (e->ops[j].kind == CG_EPI_AFFINE) {
      if (e->ops[j].scale)
        sc = cg_let(k, "s", cg_ld(k, cg_in(k, CG_EPI_SLOT_SCALE), cg_v(k, c)));
      if (e->ops[j].shift)
        sh = cg_let(k, "t", cg_ld(k, cg_in(k, CG_EPI_SLOT_SHIFT), cg_v(k, c)));
    }
  int base = cg_let(k, "base",
                    cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, ch)), cg_v(k, c)),
                           cg_i64(k, sp)));
  int i = cg_for_n(k, "i", sp);
  int o = cg_let(k, "o", cg_add(k, cg_v(k, base), cg_v(k, i)));
  int a = cg_mut(k, "a", CG_T_F32, cg_ld(k, out, cg_v(k, o)));
  for (int j = 0; j < e->n_ops; j++) {
    const cg_epi_op *op = &e->ops[j];
    cg_x *x = cg_v(k, a), *zero = cg_f32(k, 0);
    switch (op->kind) {
    case CG_EPI_AFFINE:
      if (sc >= 0)
        cg_set(k, a, cg_mul(k, x, cg_v(k, sc)));
      if (sh >= 0)
        cg_set(k, a, cg_add(k, cg_v(k, a), cg_v(k, sh)));
      break;
    case CG_EPI_ADD:
      /* Add(x, r) or Add(r, x): float addition commutes exactly. */
      cg_set(k, a, cg_add(k, x, cg_ld(k, cg_in(k, CG_EPI_SLOT_RESIDUAL), cg_v(k, o))));
      break;
    case CG_EPI_RELU: cg_set(k, a, cg_sel(k, cg_gt(k, x, zero), x, zero)); break;
    case CG_EPI_LEAKY:
      cg_set(k, a, cg_sel(k, cg_lt(k, x, zero), cg_mul(k, x, cg_f32(k, op->lo)), x));
      break;
    case CG_EPI_SIGMOID:
      cg_set(k, a, cg_div(k, cg_f32(k, 1),
                          cg_add(k, cg_f32(k, 1), cg_fn1(k, CG_FN_EXP, cg_neg(k, x)))));
      break;
    case CG_EPI_CLIP:
      /* As c_ewise.c's Clip (numpy's minimum(maximum(x, lo), hi)). */
      if (op->lo > -INFINITY)
        cg_set(k, a, cg_sel(k, cg_lt(k, x, cg_f32(k, op->lo)), cg_f32(k, op->lo), x));
      if (op->hi < INFINITY)
        cg_set(k, a, cg_sel(k, cg_gt(k, cg_v(k, a), cg_f32(k, op->hi)), cg_f32(k, op->hi),
                            cg_v(k, a)));
      break;
    }
  }
  cg_st(k, out, cg_v(k, o), cg_v(k, a));
  cg_end(k);
  cg_end(k);
  cg_end(k);
}

/* What the step's comment and the kernel's key say of e. */
const char *cg_fuse_describe(ap_graph *g, const cg_epi *e) {
  static const char *names[] = {"bn", "add", "relu", "clip", "sigmoid", "leakyrelu"};
  char buf[256];
  int len = snprintf(buf, sizeof buf, "fused");
  for (int j = 0; j < e->n_ops && len < (int)sizeof buf; j++) {
    const cg_epi_op *op = &e->ops[j];
    len += snprintf(buf + len, sizeof buf - (size_t)len, " %s", names[op->kind]);
    if (op->kind == CG_EPI_AFFINE && len < (int)sizeof buf)
      len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%s", op->scale ? "+s" : "",
                      op->shift ? "+t" : "");
    if (op->kind == CG_EPI_CLIP && len < (int)sizeof buf)
      len += snprintf(buf + len, sizeof buf - (size_t)len, "(%.9g,%.9g)", op->lo, op->hi);
    if (op->kind == CG_EPI_LEAKY && len < (int)sizeof buf)
      len += snprintf(buf + len, sizeof buf - (size_t)len, "(%.9g)", op->lo);
  }
  return ap_arena_strdup(g->arena, buf);
}
