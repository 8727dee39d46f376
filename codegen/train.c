/* Training: the schedule (which values are trainable, which carry a
 * gradient, the backward steps in order and where gradients accumulate),
 * which the lowering (lower.c) turns into the steps after the forward, and
 * the helpers the backward emitters share. */
#define _XOPEN_SOURCE 700
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/train.h"

/* ---- helpers shared by the backward emitters ----------------------------- */

const cg_grad_op *cg_grad_op_of(ap_op op) {
  static const cg_grad_op *const families[] = {cg_grad_ops_layer, cg_grad_ops_ewise,
                                               cg_grad_ops_pool, cg_grad_ops_norm,
                                               cg_grad_ops_reduce, cg_grad_ops_move};
  if (op >= AP_OP_COUNT)
    return NULL;
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    if (families[f][op].emit)
      return &families[f][op];
  return NULL;
}

uint64_t cg_grad_reads_in(const cg_grad_op *op, uint64_t want) {
  if (!op->bilinear)
    return op->reads_in;
  return (op->reads_in & ~(uint64_t)3) | (want & 1 ? 2 : 0) | (want & 2 ? 1 : 0);
}

void cg_grad_put(cg_grad_kernel *gk, int slot, cg_x *i, cg_x *x) {
  if (gk->acc >> slot & 1)
    cg_st_op(gk->k, cg_dx(gk->k, slot), i, CG_X_ADD, x);
  else
    cg_st(gk->k, cg_dx(gk->k, slot), i, x);
}

void cg_grad_zero(cg_grad_kernel *gk, int slot) {
  if (gk->acc >> slot & 1)
    return;
  cg_kernel *k = gk->k;
  int i = cg_for_n(k, "i", k->in[slot].numel);
  cg_st(k, cg_dx(k, slot), cg_v(k, i), cg_int(k, 0));
  cg_end(k);
}

void cg_grad_unbroadcast_begin(cg_grad_kernel *gk, int slot) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[slot], *y = &k->out[0];
  /* Broadcast along some dim: several output elements add into one. */
  gk->ub_reduces = x->numel != y->numel;
  if (gk->ub_reduces)
    cg_grad_zero(gk, slot);
  int64_t st[AP_MAX_RANK];
  cg_broadcast_strides(x, y->rank, st);
  gk->ub_o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
  cg_loops(k, y->rank, y->dims, "j", gk->ub_j);
  gk->ub_i = cg_let(k, "i", cg_idx(k, y->rank, st, gk->ub_j));
}

cg_x *cg_grad_o(cg_grad_kernel *gk) { return cg_v(gk->k, gk->ub_o); }

void cg_grad_unbroadcast_end(cg_grad_kernel *gk, int slot, cg_x *x) {
  cg_kernel *k = gk->k;
  if (gk->ub_reduces)
    cg_st_op(k, cg_dx(k, slot), cg_v(k, gk->ub_i), CG_X_ADD, x);
  else
    cg_grad_put(gk, slot, cg_v(k, gk->ub_i), x);
  cg_set_op(k, gk->ub_o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, k->out[0].rank);
}

void cg_grad_unbroadcast(cg_grad_kernel *gk, int slot, cg_x *scale, bool negate) {
  cg_grad_unbroadcast_begin(gk, slot);
  cg_x *d = cg_ld(gk->k, cg_dy(gk->k, 0), cg_grad_o(gk));
  if (negate)
    d = cg_neg(gk->k, d);
  cg_grad_unbroadcast_end(gk, slot, scale ? cg_mul(gk->k, scale, d) : d);
}

cg_x *cg_grad_bcast(cg_grad_kernel *gk, int slot) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[slot], *y = &k->out[0];
  int64_t st[AP_MAX_RANK];
  if (x->numel == y->numel)
    return cg_ld(k, cg_in(k, slot), cg_grad_o(gk));
  if (x->numel == 1)
    return cg_ldi(k, cg_in(k, slot), 0);
  cg_broadcast_strides(x, y->rank, st);
  return cg_ld(k, cg_in(k, slot), cg_idx(k, y->rank, st, gk->ub_j));
}

void cg_grad_gemm(cg_kernel *k, ap_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t kk,
                  double alpha, cg_x *a, cg_x *b, int beta, cg_x *c) {
  int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
  if (t == AP_DT_FLOAT) {
    cg_sgemm(k, ta, tb, m, n, kk, alpha, a, b, beta ? 1.0 : 0.0, c);
    return;
  }
  int A = cg_let(k, "A", a), B = cg_let(k, "B", b), Cm = cg_let(k, "C", c);
  int i = cg_for_n(k, "i", m), j = cg_for_n(k, "j", n);
  int s = cg_mut(k, "s", CG_T_F64, cg_int(k, 0));
  int l = cg_for_n(k, "l", kk);
  cg_x *ai = ta ? cg_add(k, cg_mul(k, cg_v(k, l), cg_i64(k, lda)), cg_v(k, i))
                : cg_add(k, cg_mul(k, cg_v(k, i), cg_i64(k, lda)), cg_v(k, l));
  cg_x *bi = tb ? cg_add(k, cg_mul(k, cg_v(k, j), cg_i64(k, ldb)), cg_v(k, l))
                : cg_add(k, cg_mul(k, cg_v(k, l), cg_i64(k, ldb)), cg_v(k, j));
  cg_set_op(k, s, CG_X_ADD,
            cg_mul(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, A), ai)), cg_ld(k, cg_v(k, B), bi)));
  cg_end(k);
  cg_x *ci = cg_add(k, cg_mul(k, cg_v(k, i), cg_i64(k, n)), cg_v(k, j));
  cg_x *val = cg_mul(k, cg_f64(k, alpha), cg_v(k, s));
  if (beta)
    cg_st_op(k, cg_v(k, Cm), ci, CG_X_ADD, val);
  else
    cg_st(k, cg_v(k, Cm), ci, val);
  cg_end(k);
  cg_end(k);
}

/* ---- the schedule --------------------------------------------------------- */

/* Input slots of n through which a gradient can flow: the operator's table,
 * or every slot for an operator without a backward (so that the schedule
 * notices it on the gradient path and says so). */
static uint64_t diff_slots(const ap_node *n) {
  const cg_grad_op *op = cg_grad_op_of(n->op);
  if (op)
    return op->diff_in;
  return n->n_in >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n->n_in) - 1;
}

static bool node_folded(const ap_graph *g, const ap_node *n) {
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && !g->values[n->out[i]].data)
      return false;
  return true;
}

ap_status cg_train_schedule_build(ap_graph *g, bool grad_inputs, cg_train_schedule *s,
                                  ap_diag *d) {
  memset(s, 0, sizeof *s);
  int nv = g->n_values;
  if (g->n_outputs < 1)
    return ap_error(d, AP_ERR_INVALID, g->path, NULL, NULL, "the graph has no output to train");
  s->logits = g->outputs[0];
  const ap_value *lv = &g->values[s->logits];
  if (lv->dtype != AP_DT_FLOAT && lv->dtype != AP_DT_DOUBLE)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                    "output '%s' is %s: the loss needs float32 or float64", lv->name,
                    ap_dtype_name(lv->dtype));
  bool *diff = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *diff);
  bool *reach = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *reach);
  bool *written = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *written);
  s->trainable = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *s->trainable);
  s->needs_grad = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *s->needs_grad);
  s->kept = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *s->kept);
  s->steps = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *s->steps);
  if (!diff || !reach || !written || !s->trainable || !s->needs_grad || !s->kept || !s->steps)
    return cg_oom(g, d);
  for (int v = 0; v < nv; v++) {
    const ap_value *val = &g->values[v];
    bool fl = val->dtype == AP_DT_FLOAT || val->dtype == AP_DT_DOUBLE;
    diff[v] = fl && (ap_value_is_parameter(val) ||
                     (grad_inputs && val->kind == AP_VAL_INPUT && !val->data));
  }
  /* Forward: a node's float outputs are differentiable when a
   * differentiable value enters one of its differentiable slots. */
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || node_folded(g, n))
      continue;
    uint64_t slots = diff_slots(n);
    bool any = false;
    for (int i = 0; i < n->n_in && i < 64; i++)
      any |= (slots >> i & 1) && n->in[i] >= 0 && diff[n->in[i]];
    for (int i = 0; i < n->n_out && any; i++) {
      const ap_value *o = n->out[i] >= 0 ? &g->values[n->out[i]] : NULL;
      if (o && (o->dtype == AP_DT_FLOAT || o->dtype == AP_DT_DOUBLE))
        diff[n->out[i]] = true;
    }
  }
  /* Backward: which values the loss depends on through differentiable
   * slots. */
  reach[s->logits] = true;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || node_folded(g, n))
      continue;
    bool any = false;
    for (int i = 0; i < n->n_out; i++)
      any |= n->out[i] >= 0 && reach[n->out[i]] && diff[n->out[i]];
    uint64_t slots = diff_slots(n);
    for (int i = 0; i < n->n_in && i < 64 && any; i++)
      if ((slots >> i & 1) && n->in[i] >= 0)
        reach[n->in[i]] = true;
  }
  for (int v = 0; v < nv; v++) {
    s->needs_grad[v] = diff[v] && reach[v];
    s->trainable[v] = s->needs_grad[v] && g->values[v].kind == AP_VAL_WEIGHT;
  }
  /* The loss writes the gradient of the logits first. */
  written[s->logits] = true;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || node_folded(g, n))
      continue;
    cg_grad_step st = {.node = ni};
    for (int i = 0; i < n->n_out && i < 64; i++)
      if (n->out[i] >= 0 && s->needs_grad[n->out[i]])
        st.has_dy |= (uint64_t)1 << i;
    if (!st.has_dy)
      continue;
    uint64_t slots = diff_slots(n);
    for (int i = 0; i < n->n_in && i < 64; i++)
      if ((slots >> i & 1) && n->in[i] >= 0 && s->needs_grad[n->in[i]]) {
        st.want |= (uint64_t)1 << i;
        if (written[n->in[i]])
          st.acc |= (uint64_t)1 << i;
        written[n->in[i]] = true;
      }
    if (!st.want)
      continue;
    const cg_grad_op *op = cg_grad_op_of(n->op);
    if (!op)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "training: the operator has no backward kernel, and the gradient of "
                      "a trainable weight flows through it");
    uint64_t reads = cg_grad_reads_in(op, st.want);
    for (int i = 0; i < n->n_in && i < 64; i++)
      if ((reads >> i & 1) && n->in[i] >= 0)
        s->kept[n->in[i]] = true;
    for (int i = 0; i < n->n_out && i < 64; i++)
      if ((op->reads_out >> i & 1) && n->out[i] >= 0)
        s->kept[n->out[i]] = true;
    s->steps[s->n_steps++] = st;
  }
  return AP_OK;
}
