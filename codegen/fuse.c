/* Fusion (issue 8): a float32 2-D convolution
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
 * which no device sends (each reads its boxes from the blob).
 *
 * Training programs fuse what their backward allows: only the chain's last
 * value is stored, so an absorbed operator's backward may read none of its
 * inputs (Add) and its own output only if it ends the chain (Relu,
 * Sigmoid: their derivatives are functions of the output); the
 * convolution's backward reads its input and weight, never its output. So
 * Conv -> [Add] -> [Relu or Sigmoid], as ResNet's blocks end; no
 * BatchNormalization (training normalises by the batch's statistics, and
 * its backward reads its input), and none of the views and expressions
 * below.
 *
 * Then, below, the views MatMul and Gemm read in place (Slices of
 * constants, Transposes) and the element-wise expressions: the epilogues
 * of MatMul and Gemm and chains of element-wise operators as one loop,
 * under the same conditions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/train.h"
#include "passes/distribute.h"

static bool is_f32(const ap_graph *g, int v) {
  return v >= 0 && g->values[v].dtype == AP_DT_FLOAT;
}

static bool is_const_f32(const ap_graph *g, int v) {
  return is_f32(g, v) && g->values[v].data;
}

static bool same_dims(const ap_value *a, const ap_value *b) {
  return ap_dims_equal(a->rank, a->dims, b->rank, b->dims);
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
    ap_dbox held = ap_dist_held(g, dist, v, d), out = ap_dist_held(g, dist, y, d);
    if (!ap_dbox_equal(val->rank, &held, &out))
      return false;
    if (dn->in && !ap_dbox_equal(val->rank, &dn->in[slot][d], &out))
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
    ap_dbox xheld = ap_dist_held(g, dist, n->out[0], d);
    const ap_dbox *xb = &xheld;
    for (int i = 1; i <= 2; i++) {
      if (!dn->in)
        continue;
      const ap_dbox *cb = &dn->in[i][d];
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
  bool w_ok = is_const_f32(g, c->in[1]) && ap_sole_reader(g, true, c->in[1]) == conv;
  bool b_ok = bias < 0 || (is_const_f32(g, bias) && ap_sole_reader(g, true, bias) == conv);
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

static ap_status ew_plan(ap_graph *g, const ap_dist *dist, const int *order, int n_order,
                         const int *pos, cg_fusion *f, ap_diag *d);

/* ---- Views: Slices of constants, Transposes read in place -----------------
 *
 * A Slice (steps 1) of a constant is the constant box it selects, placed in
 * the blob as any box of a constant is: the column slices of a Q/K/V
 * projection's weight and bias (ir/unfuse.c) cost no copy per run, a
 * MatMul's B stays a constant and the bias joins the MatMul's epilogue.
 * Only when every reader of the source is a Slice, so the blob holds each
 * weight once. A Transpose read only by float32 MatMuls whose matrix axes
 * keep a stride-1 axis of its input, or by Gemms (its axes swapped), runs
 * no kernel: each reads its input through strides, transposed where the
 * stride-1 axis is the rows (trans_a/trans_b of the GEMM call; a Gemm's
 * flipped): a constant in the box its read box maps to (a tied LM head
 * reads the embedding table itself), a run-time value in the buffer the
 * Transpose would have read (attention's Q, K and V heads). Partitioned,
 * neither changes what is sent: no reader reads the view through a
 * transfer, and the Transpose of a run-time value reads, without transfer,
 * on every device exactly the box of its input each box its readers read
 * covers. */

/* Whether no node reads value v through a transfer. */
static bool read_without_transfer(const ap_graph *g, const ap_dist *dist, int v) {
  if (!dist || dist->n_dev <= 1)
    return true;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    for (int i = 0; !n->dead && dist->node[ni].xfer_in && i < n->n_in; i++)
      if (n->in[i] == v && dist->node[ni].xfer_in[i])
        return false;
  }
  return true;
}

/* The box of its input Slice node ni selects, when its parameters are
 * constants and its steps 1. */
static bool slice_box(ap_graph *g, int ni, ap_dbox *b) {
  ap_node *n = &g->nodes[ni];
  if (n->op != AP_OP_SLICE || n->dead || n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 ||
      n->out[0] < 0)
    return false;
  const ap_value *x = &g->values[n->in[0]], *y = &g->values[n->out[0]];
  int64_t st[AP_MAX_RANK], en[AP_MAX_RANK], sp[AP_MAX_RANK];
  bool sliced[AP_MAX_RANK], known;
  ap_diag quiet = {0};
  if (ap_slice_params(g, n, x, st, en, sp, sliced, &known, &quiet) != AP_OK || !known ||
      y->rank != x->rank)
    return false;
  memset(b, 0, sizeof *b);
  for (int i = 0; i < x->rank; i++) {
    int64_t first, count;
    if (sp[i] != 1)
      return false;
    ap_slice_axis(x->dims[i], st[i], en[i], sp[i], &first, &count);
    if (count != y->dims[i])
      return false;
    b->lo[i] = first;
    b->hi[i] = first + count;
  }
  return true;
}

static ap_status view_const_slices(ap_graph *g, const ap_dist *dist, ap_diag *d) {
  for (int ni = 0; ni < g->n_nodes; ni++) {
    ap_dbox b, other;
    if (!slice_box(g, ni, &b))
      continue;
    int src = g->nodes[ni].in[0], y = g->nodes[ni].out[0];
    const ap_value *yv = &g->values[y];
    if (!g->values[src].data || yv->data || yv->is_graph_output ||
        !read_without_transfer(g, dist, y))
      continue;
    bool only_slices = true;
    for (int r = 0; r < g->n_nodes && only_slices; r++)
      for (int i = 0; !g->nodes[r].dead && i < g->nodes[r].n_in; i++)
        if (g->nodes[r].in[i] == src)
          only_slices &= i == 0 && slice_box(g, r, &other);
    if (!only_slices)
      continue;
    const ap_value *view = cg_const_view(g, src, &b);
    if (!view)
      return cg_oom(g, d);
    g->values[y].data = view->data;
  }
  return AP_OK;
}

void cg_transpose_perm(const ap_node *t, int rank, int *perm) {
  int c = 0;
  const int64_t *p = ap_attr_ints(t, "perm", &c);
  for (int i = 0; i < rank; i++)
    perm[i] = p && c == rank ? (int)p[i] : rank - 1 - i;
}

ap_dbox cg_box_before_perm(int rank, const int *perm, const ap_dbox *b) {
  ap_dbox s;
  memset(&s, 0, sizeof s);
  for (int i = 0; i < rank; i++) {
    s.lo[perm[i]] = b->lo[i];
    s.hi[perm[i]] = b->hi[i];
  }
  return s;
}

/* Whether a reader of Transpose t (perm) at slot i can read it in place:
 * a MatMul whose matrix axes keep a stride-1 axis (a strided, maybe
 * transposed, GEMM operand), or a Gemm (rank 2) with its swapped axes. */
static bool reads_in_place(const ap_graph *g, const ap_node *r, int i, const int *perm,
                           int rank) {
  if (i > 1 || !is_f32(g, r->out[0]) || !is_f32(g, r->in[0]) || !is_f32(g, r->in[1]))
    return false;
  if (r->op == AP_OP_GEMM)
    return rank == 2 && perm[0] == 1;
  return r->op == AP_OP_MATMUL && r->n_in == 2 && g->values[r->in[0]].rank >= 2 &&
         g->values[r->in[1]].rank >= 2 && (perm[rank - 1] == rank - 1 || perm[rank - 2] == rank - 1);
}

/* Box slot of node ni reads of value v on device dev (whole without a
 * distribution's boxes). */
static ap_dbox box_read(const ap_graph *g, const ap_dist *dist, int ni, int slot, int dev) {
  const ap_value *v = &g->values[g->nodes[ni].in[slot]];
  ap_dbox b;
  memset(&b, 0, sizeof b);
  if (dist->node[ni].in)
    return dist->node[ni].in[slot][dev];
  for (int i = 0; i < v->rank; i++)
    b.hi[i] = v->dims[i];
  return b;
}

/* Whether Transpose ti's readers can all read it in place; with set, marks
 * their inputs. */
static bool transpose_in_place(const ap_graph *g, const ap_dist *dist, int ti, cg_fusion *f,
                               bool set) {
  const ap_node *t = &g->nodes[ti];
  int x = t->in[0], y = t->out[0], nd = dist ? dist->n_dev : 1;
  int rank = g->values[y].rank, perm[AP_MAX_RANK];
  cg_transpose_perm(t, rank, perm);
  int readers = 0;
  for (int ri = 0; ri < g->n_nodes; ri++) {
    const ap_node *r = &g->nodes[ri];
    for (int i = 0; !r->dead && i < r->n_in; i++) {
      if (r->in[i] != y)
        continue;
      if (!reads_in_place(g, r, i, perm, rank))
        return false;
      for (int dv = 0; nd > 1 && dv < nd; dv++) {
        const ap_dnode *dn = &dist->node[ri];
        if (dn->xfer_in && dn->xfer_in[i])
          return false;
        ap_dbox want = box_read(g, dist, ri, i, dv), have = box_read(g, dist, ti, 0, dv);
        want = cg_box_before_perm(rank, perm, &want);
        if (!g->values[x].data && !ap_dbox_equal(rank, &want, &have))
          return false;
      }
      if (set)
        f->trans_in[ri] |= (uint8_t)(1u << i);
      readers++;
    }
  }
  return readers > 0;
}

static void plan_transposes(const ap_graph *g, const ap_dist *dist, cg_fusion *f) {
  for (int ti = 0; ti < g->n_nodes; ti++) {
    const ap_node *t = &g->nodes[ti];
    if (t->dead || t->op != AP_OP_TRANSPOSE || t->n_in < 1 || t->n_out < 1 ||
        !is_f32(g, t->in[0]) || !is_f32(g, t->out[0]) || g->values[t->out[0]].data ||
        g->values[t->out[0]].is_graph_output || g->values[t->out[0]].rank < 2)
      continue;
    if (dist && dist->n_dev > 1 &&
        (dist->node[ti].reduce || (dist->node[ti].xfer_in && dist->node[ti].xfer_in[0])))
      continue;
    if (transpose_in_place(g, dist, ti, f, false)) {
      transpose_in_place(g, dist, ti, f, true);
      f->in_place[ti] = true;
    }
  }
}

static bool fusion_disabled(void) {
  const char *e = getenv("ACCPAR_NO_FUSION");
  return e && *e && strcmp(e, "0") != 0;
}

/* What a training program's chain may absorb of node n: 0 nothing, 1 an
 * operator whose backward reads nothing of the forward, 2 one that reads
 * its output only and so must end the chain. */
static int train_absorbs(const ap_node *n) {
  const cg_grad_op *op = cg_grad_op_of(n->op);
  if (!op || !op->emit || op->reads_in)
    return 0;
  return op->reads_out ? 2 : 1;
}

ap_status cg_fuse_plan(ap_graph *g, const ap_dist *dist, const int *order, int n_order,
                       bool train, cg_fusion *f, ap_diag *d) {
  memset(f, 0, sizeof *f);
  f->head = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->head);
  f->chain = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->chain);
  f->expr = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->expr);
  f->trans_in = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->trans_in);
  f->in_place = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *f->in_place);
  int *pos = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *pos);
  if (!f->head || !f->chain || !f->expr || !f->trans_in || !f->in_place || !pos)
    return cg_oom(g, d);
  for (int i = 0; i < g->n_nodes; i++) {
    f->head[i] = -1;
    pos[i] = g->n_nodes;
  }
  for (int i = 0; i < n_order; i++)
    pos[order[i]] = i;
  if (fusion_disabled())
    return AP_OK;
  if (!train) {
    ap_status vs = view_const_slices(g, dist, d);
    if (vs != AP_OK)
      return vs;
    plan_transposes(g, dist, f);
  }
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
      int ni = ap_sole_reader(g, true, v);
      if (ni < 0 || chain.n_ops == CG_EPI_MAX || pos[ni] <= oi)
        break;
      const ap_node *n = &g->nodes[ni];
      cg_epi_op op;
      int absorbs = train ? train_absorbs(n) : 1;
      if (!absorbs)
        break;
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
          ok = ap_sole_reader(g, true, n->in[i]) == ni;
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
      if (absorbs == 2)
        break;
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
  return train ? AP_OK : ew_plan(g, dist, order, n_order, pos, f, d);
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

/* ---- Element-wise expressions: MatMul/Gemm epilogues, element-wise chains --
 *
 * After a float32 MatMul or Gemm, or from a first element-wise node on, the
 * element-wise operators that follow (Add, Sub, Mul, Div, Pow, Relu,
 * Sigmoid, Tanh, Exp, Log, Sqrt, Erf, Neg, Reciprocal, LeakyRelu) are
 * computed by one kernel in one pass, when each value they produce but the
 * last is read only by them and is no graph output. Their operands are
 * values of the chain, constant scalars (literals), or values of the
 * output's shape, of its last axis (a bias) or of its shape with the last
 * dim 1 (LayerNormalization's row statistics) computed before the head
 * runs. GPT-2's Linear + GELU (MatMul, Add bias, Pow, Mul, Add, Mul, Tanh,
 * Add, Mul, Mul) becomes the library GEMM and one pass. The partition
 * conditions are the convolution epilogue's: no absorbed node reads through
 * a transfer or sums partials, every value of the chain has the output's
 * box on each device, and each operand is read in the box the unfused node
 * reads, which must be the part of it that box covers. */

static bool ew_supported(int op) {
  switch (op) {
  case AP_OP_ADD: case AP_OP_SUB: case AP_OP_MUL: case AP_OP_DIV: case AP_OP_POW:
  case AP_OP_RELU: case AP_OP_SIGMOID: case AP_OP_TANH: case AP_OP_EXP: case AP_OP_LOG:
  case AP_OP_SQRT: case AP_OP_ERF: case AP_OP_NEG: case AP_OP_RECIPROCAL:
  case AP_OP_LEAKY_RELU:
    return true;
  default: return false;
  }
}

/* How value v broadcasts to an output of dims od[orank], or -1. */
static int ew_bcast_of(const ap_value *v, int orank, const int64_t *od) {
  if (ap_numel(v->rank, v->dims) == 1)
    return CG_EWB_SCALAR;
  if (v->rank > orank || orank < 1)
    return -1;
  bool same = v->rank == orank, last = true, row = v->rank == orank;
  for (int i = 0; i < v->rank; i++) {
    int oi = orank - v->rank + i;
    same &= v->dims[i] == od[oi];
    if (i == v->rank - 1) {
      last &= v->dims[i] == od[oi];
      row &= v->dims[i] == 1;
    } else {
      last &= v->dims[i] == 1;
      row &= v->dims[i] == od[oi];
    }
  }
  return same ? CG_EWB_SAME : last ? CG_EWB_LAST : row ? CG_EWB_ROW : -1;
}

/* Whether node ni, on every device, reads input slot (broadcast as bcast)
 * in the box that covers what its output box ob needs, with no transfer. */
static bool ew_box_ok(const ap_graph *g, const ap_dist *dist, int ni, int slot, int bcast,
                      int y) {
  if (!dist || dist->n_dev <= 1)
    return true;
  const ap_node *n = &g->nodes[ni];
  const ap_dnode *dn = &dist->node[ni];
  if (dn->xfer_in && dn->xfer_in[slot])
    return false;
  if (bcast == CG_EWB_SCALAR)
    return true;
  if (!dn->in)
    return false;
  int nd = dist->n_dev, orank = g->values[y].rank, r = g->values[n->in[slot]].rank;
  for (int d = 0; d < nd; d++) {
    ap_dbox oheld = ap_dist_held(g, dist, y, d);
    const ap_dbox *ob = &oheld;
    const ap_dbox *ib = &dn->in[slot][d];
    if (ob->hi[orank - 1] <= ob->lo[orank - 1])
      continue; /* nothing to compute on this device */
    for (int i = 0; i < r; i++) {
      int oi = orank - r + i;
      bool whole = (bcast == CG_EWB_LAST && i < r - 1) || (bcast == CG_EWB_ROW && i == r - 1);
      int64_t lo = whole ? 0 : ob->lo[oi], hi = whole ? 1 : ob->hi[oi];
      if (ib->lo[i] != lo || ib->hi[i] != hi)
        return false;
    }
  }
  return true;
}

/* Fills op for node ni if it can join an expression whose output has value
 * y0's dims; in_expr[v] >= 0 gives the register of a value the expression
 * holds. next_slot: the kernel's next free input slot. */
static bool ew_op_of(const ap_graph *g, const ap_dist *dist, const int *pos, int head_pos,
                     const int *in_expr, int y0, int ni, bool first, int *next_slot,
                     cg_ew_op *op) {
  const ap_node *n = &g->nodes[ni];
  const ap_value *yv = &g->values[y0];
  if (!ew_supported(n->op) || n->n_out < 1 || !is_f32(g, n->out[0]) ||
      g->values[n->out[0]].data || !same_dims(&g->values[n->out[0]], yv))
    return false;
  for (int o = 1; o < n->n_out; o++)
    if (n->out[o] >= 0)
      return false;
  if (dist && dist->n_dev > 1) {
    if (dist->node[ni].reduce)
      return false;
    int nd = dist->n_dev;
    for (int d = 0; d < nd; d++) {
      ap_dbox a = ap_dist_held(g, dist, n->out[0], d), b = ap_dist_held(g, dist, y0, d);
      if (!ap_dbox_equal(yv->rank, &a, &b))
        return false;
    }
  }
  memset(op, 0, sizeof *op);
  op->node = ni;
  op->op = n->op;
  op->n_args = n->n_in;
  if (n->n_in < 1 || n->n_in > 2)
    return false;
  if (n->op == AP_OP_LEAKY_RELU)
    op->alpha = ap_attr_float(n, "alpha", 0.01f);
  bool reads_expr = false;
  for (int i = 0; i < n->n_in; i++) {
    int v = n->in[i];
    cg_ew_arg *a = &op->a[i];
    if (v < 0 || !is_f32(g, v))
      return false;
    const ap_value *val = &g->values[v];
    if (!first && in_expr[v] >= 0) {
      if (!same_boxes(g, dist, ni, i))
        return false;
      a->kind = CG_EWA_REG;
      a->reg = in_expr[v];
      reads_expr = true;
      continue;
    }
    int bc = ew_bcast_of(val, yv->rank, yv->dims);
    if (bc < 0)
      return false;
    if (!first && val->data && bc == CG_EWB_SCALAR) {
      a->kind = CG_EWA_CONST;
      a->c = ((const float *)val->data)[0];
      continue;
    }
    /* Read by the fused kernel, which runs where the head does. */
    if (!val->data && val->producer >= 0 && pos[val->producer] >= head_pos)
      return false;
    if (!ew_box_ok(g, dist, ni, i, bc, n->out[0]))
      return false;
    a->kind = CG_EWA_SLOT;
    a->bcast = (uint8_t)bc;
    a->in = i;
    a->slot = first ? i : (*next_slot)++;
    if (a->slot >= CG_MAX_OPERANDS)
      return false;
  }
  return first || reads_expr;
}

/* Grows the expression of head (at order position oi); true if it absorbs
 * at least one node. */
static bool ew_grow(const ap_graph *g, const ap_dist *dist, const int *order, int n_order,
                    const int *pos, const int *nread, int *in_expr, const cg_fusion *f, int oi,
                    cg_ew *e) {
  int hi = order[oi];
  const ap_node *h = &g->nodes[hi];
  int y0 = h->out[0];
  memset(e, 0, sizeof *e);
  e->layer = h->op == AP_OP_MATMUL || h->op == AP_OP_GEMM;
  int next_slot = h->n_in, produced[CG_EW_MAX + 1], n_prod = 0;
  if (e->layer) {
    in_expr[y0] = 0;
    produced[n_prod++] = y0;
  } else {
    if (!ew_op_of(g, dist, pos, oi, in_expr, y0, hi, true, &next_slot, &e->ops[0]))
      return false;
    e->n_ops = 1;
    in_expr[y0] = 1;
    produced[n_prod++] = y0;
  }
  int first_absorbed = e->n_ops;
  for (int p = oi + 1; p < n_order && e->n_ops < CG_EW_MAX; p++) {
    int ni = order[p];
    const ap_node *n = &g->nodes[ni];
    if (n->dead || f->head[ni] >= 0 || f->chain[ni] || f->expr[ni])
      continue;
    int save = next_slot;
    cg_ew_op op;
    if (!ew_op_of(g, dist, pos, oi, in_expr, y0, ni, false, &next_slot, &op)) {
      next_slot = save;
      continue;
    }
    e->ops[e->n_ops++] = op;
    in_expr[n->out[0]] = e->n_ops;
    produced[n_prod++] = n->out[0];
  }
  /* The longest prefix whose values, but its last, only it reads. */
  int best = 0;
  for (int L = e->n_ops; L > first_absorbed && !best; L--) {
    bool ok = true;
    for (int q = 0; ok && q < n_prod; q++) {
      int v = produced[q], reg = in_expr[v];
      if (reg >= L)
        continue; /* the last value, or produced after the prefix */
      int reads = 0;
      for (int j = 0; j < L; j++)
        for (int i = 0; i < e->ops[j].n_args; i++)
          reads += e->ops[j].a[i].kind == CG_EWA_REG && e->ops[j].a[i].reg == reg;
      ok = !g->values[v].is_graph_output && reads == nread[v];
    }
    if (ok)
      best = L;
  }
  for (int q = 0; q < n_prod; q++)
    in_expr[produced[q]] = -1;
  e->n_ops = best;
  return best > first_absorbed;
}

static ap_status ew_plan(ap_graph *g, const ap_dist *dist, const int *order, int n_order,
                         const int *pos, cg_fusion *f, ap_diag *d) {
  int *nread = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *nread);
  int *in_expr = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *in_expr);
  if (!nread || !in_expr)
    return cg_oom(g, d);
  for (int v = 0; v < g->n_values; v++)
    in_expr[v] = -1;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead)
      for (int j = 0; j < g->nodes[i].n_in; j++)
        if (g->nodes[i].in[j] >= 0)
          nread[g->nodes[i].in[j]]++;
  for (int oi = 0; oi < n_order; oi++) {
    int hi = order[oi];
    const ap_node *h = &g->nodes[hi];
    if (f->head[hi] >= 0 || f->chain[hi] || h->n_out < 1 || !is_f32(g, h->out[0]) ||
        g->values[h->out[0]].data || g->values[h->out[0]].rank < 1)
      continue;
    bool layer = h->op == AP_OP_MATMUL || h->op == AP_OP_GEMM;
    if (!layer && !ew_supported(h->op))
      continue;
    if (layer && (dist && dist->n_dev > 1 && dist->node[hi].reduce))
      continue;
    cg_ew e;
    if (!ew_grow(g, dist, order, n_order, pos, nread, in_expr, f, oi, &e))
      continue;
    cg_ew *keep = ap_arena_alloc(g->arena, sizeof *keep);
    if (!keep)
      return cg_oom(g, d);
    *keep = e;
    f->expr[hi] = keep;
    for (int j = e.layer ? 0 : 1; j < e.n_ops; j++) {
      f->head[e.ops[j].node] = hi;
      f->n_fused++;
    }
  }
  return AP_OK;
}

static cg_x *ew_arg(cg_kernel *k, const cg_ew_arg *a, const int *regs, int o, int j, int r) {
  switch (a->kind) {
  case CG_EWA_REG: return cg_v(k, regs[a->reg]);
  case CG_EWA_CONST: return cg_f32(k, a->c);
  default: break;
  }
  cg_x *p = cg_in(k, a->slot);
  switch (a->bcast) {
  case CG_EWB_SAME: return cg_ld(k, p, cg_v(k, o));
  case CG_EWB_LAST: return cg_ld(k, p, cg_v(k, j));
  case CG_EWB_ROW: return cg_ld(k, p, cg_v(k, r));
  default: return cg_ldi(k, p, 0);
  }
}

void cg_fuse_expr(cg_kernel *k, const cg_ew *e) {
  const cg_operand *y = &k->out[0];
  int64_t last = y->rank ? y->dims[y->rank - 1] : 1;
  int64_t rows = last ? ap_numel(y->rank, y->dims) / last : 0;
  cg_x *out = cg_out(k, 0);
  int r = cg_for_n(k, "r", rows);
  int j = cg_for_n(k, "j", last);
  int o = cg_let(k, "o", cg_add(k, cg_mul(k, cg_v(k, r), cg_i64(k, last)), cg_v(k, j)));
  int regs[CG_EW_MAX + 1];
  regs[0] = e->layer ? cg_let(k, "e", cg_ld(k, out, cg_v(k, o))) : -1;
  for (int q = 0; q < e->n_ops; q++) {
    const cg_ew_op *op = &e->ops[q];
    cg_x *a = ew_arg(k, &op->a[0], regs, o, j, r);
    cg_x *b = op->n_args > 1 ? ew_arg(k, &op->a[1], regs, o, j, r) : NULL;
    cg_x *x, *zero = cg_f32(k, 0), *one = cg_f32(k, 1);
    switch (op->op) {
    case AP_OP_ADD: x = cg_add(k, a, b); break;
    case AP_OP_SUB: x = cg_sub(k, a, b); break;
    case AP_OP_MUL: x = cg_mul(k, a, b); break;
    case AP_OP_DIV: x = cg_div(k, a, b); break;
    case AP_OP_POW: {
      /* As c_ewise.c's Pow: a small constant integer power is products. */
      const cg_ew_arg *eb = &op->a[1];
      if (eb->kind == CG_EWA_CONST && (eb->c == 1 || eb->c == 2 || eb->c == 3 || eb->c == 4))
        x = cg_power(k, a, (int)eb->c);
      else
        x = cg_fn2(k, CG_FN_POW, a, b);
      break;
    }
    case AP_OP_RELU: x = cg_sel(k, cg_gt(k, a, cg_int(k, 0)), a, cg_int(k, 0)); break;
    case AP_OP_SIGMOID:
      x = cg_div(k, one, cg_add(k, one, cg_fn1(k, CG_FN_EXP, cg_neg(k, a))));
      break;
    case AP_OP_TANH: x = cg_fn1(k, CG_FN_TANH, a); break;
    case AP_OP_EXP: x = cg_fn1(k, CG_FN_EXP, a); break;
    case AP_OP_LOG: x = cg_fn1(k, CG_FN_LOG, a); break;
    case AP_OP_SQRT: x = cg_fn1(k, CG_FN_SQRT, a); break;
    case AP_OP_ERF: x = cg_fn1(k, CG_FN_ERF, a); break;
    case AP_OP_NEG: x = cg_neg(k, a); break;
    case AP_OP_RECIPROCAL: x = cg_div(k, one, a); break;
    default: /* AP_OP_LEAKY_RELU */
      x = cg_sel(k, cg_lt(k, a, zero), cg_mul(k, a, cg_f32(k, op->alpha)), a);
      break;
    }
    regs[q + 1] = cg_let(k, "e", x);
  }
  cg_st(k, out, cg_v(k, o), cg_v(k, regs[e->n_ops]));
  cg_end(k);
  cg_end(k);
}

const char *cg_fuse_expr_describe(ap_graph *g, const cg_ew *e) {
  static const char bc[] = "svwk";
  char buf[1024];
  int len = snprintf(buf, sizeof buf, "fused");
  for (int q = 0; q < e->n_ops && len < (int)sizeof buf - 64; q++) {
    const cg_ew_op *op = &e->ops[q];
    char name[32];
    snprintf(name, sizeof name, "%s", ap_op_table[op->op].name);
    for (char *c = name; *c; c++)
      *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    len += snprintf(buf + len, sizeof buf - (size_t)len, " %s(", name);
    for (int i = 0; i < op->n_args; i++) {
      const cg_ew_arg *a = &op->a[i];
      const char *sep = i ? "," : "";
      if (a->kind == CG_EWA_REG)
        len += snprintf(buf + len, sizeof buf - (size_t)len, "%se%d", sep, a->reg);
      else if (a->kind == CG_EWA_CONST)
        len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%.9g", sep, a->c);
      else
        len += snprintf(buf + len, sizeof buf - (size_t)len, "%s%c%d", sep, bc[a->bcast], a->slot);
    }
    if (op->op == AP_OP_LEAKY_RELU)
      len += snprintf(buf + len, sizeof buf - (size_t)len, ";%.9g", op->alpha);
    len += snprintf(buf + len, sizeof buf - (size_t)len, ")");
  }
  return ap_arena_strdup(g->arena, buf);
}
