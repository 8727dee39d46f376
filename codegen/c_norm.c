/* Normalizations: BatchNormalization (inference with the stored statistics,
 * or training_mode with batch statistics and updated running ones),
 * LayerNormalization, Softmax and LogSoftmax (opset < 13: softmax over the
 * input coerced to 2-D at axis; opset >= 13: over the one axis). Sums are
 * taken in double, each result rounded once. */
#include <string.h>

#include "codegen/codegen.h"

static ap_status need_float(cg_kernel *k, const cg_operand *o) {
  if (o->dtype != AP_DT_FLOAT && o->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(o->dtype));
  return AP_OK;
}

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= dims[i];
  return p;
}

ap_status cg_emit_BATCH_NORM(cg_kernel *k) {
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x);
  if (s != AP_OK)
    return s;
  double eps = ap_attr_float(k->n, "epsilon", 1e-5f), mom = ap_attr_float(k->n, "momentum", 0.9f);
  int64_t N = x->dims[0], C = x->rank > 1 ? x->dims[1] : 1, plane = prod(x->dims, 2, x->rank);
  int64_t per_channel = N * plane > 0 ? N * plane : 1;
  cg_ty ct = cg_ty_of(x->dtype);
  bool training = cg_opset(k) >= 14 && ap_attr_int(k->n, "training_mode", 0) != 0;
  if (cg_opset(k) < 9 && ap_attr_int(k->n, "spatial", 1) == 0)
    return cg_error(k, AP_ERR_UNSUPPORTED, "spatial = 0 (per-element statistics) is not supported");
  for (int i = 3; i < k->n_out; i++)
    if (k->out[i].v)
      return cg_error(k, AP_ERR_UNSUPPORTED, "the saved mean and variance outputs are not supported");
  int c = cg_for_n(k, "c", C);
  int mean, var;
  /* x0[(n * C + c) * plane + i] */
#define AT(n, i) cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, C)), cg_v(k, c)), \
                                  cg_i64(k, plane)),                                           \
                        cg_v(k, i))
  if (training) {
    /* Batch statistics (population variance), as the ONNX reference. */
    int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0)), sq = cg_mut(k, "sq", CG_T_F64, cg_int(k, 0));
    int n = cg_for_n(k, "n", N), i = cg_for_n(k, "i", plane);
    cg_set_op(k, sum, CG_X_ADD, cg_ld(k, cg_in(k, 0), AT(n, i)));
    cg_end(k);
    cg_end(k);
    mean = cg_let(k, "mean", cg_div(k, cg_v(k, sum), cg_i64(k, per_channel)));
    n = cg_for_n(k, "n", N);
    i = cg_for_n(k, "i", plane);
    int dv = cg_let(k, "d", cg_sub(k, cg_ld(k, cg_in(k, 0), AT(n, i)), cg_v(k, mean)));
    cg_set_op(k, sq, CG_X_ADD, cg_mul(k, cg_v(k, dv), cg_v(k, dv)));
    cg_end(k);
    cg_end(k);
    var = cg_let(k, "var", cg_div(k, cg_v(k, sq), cg_i64(k, per_channel)));
    for (int o = 1; o < 3; o++)
      if (k->out[o].v)
        cg_st(k, cg_out(k, o), cg_v(k, c),
              cg_cast(k, ct, cg_add(k, cg_mul(k, cg_ld(k, cg_in(k, o + 2), cg_v(k, c)), cg_f64(k, mom)),
                                    cg_mul(k, cg_v(k, o == 1 ? mean : var),
                                           cg_sub(k, cg_int(k, 1), cg_f64(k, mom))))));
  } else {
    mean = cg_let(k, "mean", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 3), cg_v(k, c))));
    var = cg_let(k, "var", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 4), cg_v(k, c))));
    /* Outputs only training defines: the statistics, unchanged. */
    for (int i = 1; i < k->n_out && i < 3; i++)
      if (k->out[i].v)
        cg_st(k, cg_out(k, i), cg_v(k, c), cg_ld(k, cg_in(k, i + 2), cg_v(k, c)));
  }
  int scale = cg_let(k, "scale", cg_div(k, cg_ld(k, cg_in(k, 1), cg_v(k, c)),
                                        cg_fnd(k, CG_FN_SQRT, cg_add(k, cg_v(k, var), cg_f64(k, eps)))));
  int shift = cg_let(k, "shift", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 2), cg_v(k, c))));
  int n = cg_for_n(k, "n", N), i = cg_for_n(k, "i", plane);
  int at = cg_let(k, "at", AT(n, i));
#undef AT
  cg_st(k, cg_out(k, 0), cg_v(k, at),
        cg_cast(k, ct, cg_add(k, cg_mul(k, cg_sub(k, cg_ld(k, cg_in(k, 0), cg_v(k, at)), cg_v(k, mean)),
                                        cg_v(k, scale)),
                              cg_v(k, shift))));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

ap_status cg_emit_LAYER_NORM(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *scale = &k->in[1], *bias = &k->in[2];
  ap_status s = need_float(k, x);
  if (s != AP_OK)
    return s;
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", -1), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  double eps = ap_attr_float(k->n, "epsilon", 1e-5f);
  int64_t outer = prod(x->dims, 0, axis), inner = prod(x->dims, axis, x->rank);
  int64_t in1 = inner ? inner : 1;
  /* Scale and bias broadcast (numpy rules) over the normalized dims. */
  cg_operand norm = *x;
  norm.rank = x->rank - axis;
  memmove(norm.dims, x->dims + axis, (size_t)norm.rank * sizeof *norm.dims);
  int64_t ss[AP_MAX_RANK], bs[AP_MAX_RANK];
  cg_broadcast_strides(scale, norm.rank, ss);
  if (bias->v)
    cg_broadcast_strides(bias, norm.rank, bs);
  cg_ty ct = cg_ty_of(x->dtype);
  int r = cg_for_n(k, "r", outer);
  int xr = cg_let(k, "xr", cg_at(k, cg_in(k, 0), cg_mul(k, cg_v(k, r), cg_i64(k, inner))));
  int yr = cg_let(k, "yr", cg_at(k, cg_out(k, 0), cg_mul(k, cg_v(k, r), cg_i64(k, inner))));
  int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0)), sq = cg_mut(k, "sq", CG_T_F64, cg_int(k, 0));
  int i = cg_for_n(k, "i", inner);
  cg_set_op(k, sum, CG_X_ADD, cg_ld(k, cg_v(k, xr), cg_v(k, i)));
  cg_end(k);
  int mean = cg_let(k, "mean", cg_div(k, cg_v(k, sum), cg_i64(k, in1)));
  i = cg_for_n(k, "i", inner);
  int dv = cg_let(k, "d", cg_sub(k, cg_ld(k, cg_v(k, xr), cg_v(k, i)), cg_v(k, mean)));
  cg_set_op(k, sq, CG_X_ADD, cg_mul(k, cg_v(k, dv), cg_v(k, dv)));
  cg_end(k);
  int inv = cg_let(k, "inv", cg_div(k, cg_f64(k, 1.0),
                                    cg_fnd(k, CG_FN_SQRT, cg_add(k, cg_div(k, cg_v(k, sq), cg_i64(k, in1)),
                                                                 cg_f64(k, eps)))));
  if (k->out[1].v)
    cg_st(k, cg_out(k, 1), cg_v(k, r), cg_cast(k, ct, cg_v(k, mean)));
  if (k->out[2].v)
    cg_st(k, cg_out(k, 2), cg_v(k, r), cg_cast(k, ct, cg_v(k, inv)));
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, norm.rank, norm.dims, "i", iv);
  cg_x *val = cg_mul(k, cg_mul(k, cg_sub(k, cg_ld(k, cg_v(k, xr), cg_v(k, o)), cg_v(k, mean)),
                               cg_v(k, inv)),
                     cg_ld(k, cg_in(k, 1), cg_idx(k, norm.rank, ss, iv)));
  if (bias->v)
    val = cg_add(k, val, cg_ld(k, cg_in(k, 2), cg_idx(k, norm.rank, bs, iv)));
  cg_st(k, cg_v(k, yr), cg_v(k, o), cg_cast(k, ct, val));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, norm.rank);
  cg_end(k);
  return AP_OK;
}

ap_status cg_softmax_geometry(cg_kernel *k, const cg_operand *x, int64_t *outer, int64_t *n,
                              int64_t *inner) {
  bool old = cg_opset(k) < 13;
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", old ? 1 : -1), x->rank);
  if (x->rank == 0)
    axis = 0;
  else if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  *outer = prod(x->dims, 0, axis);
  if (old) {
    *n = prod(x->dims, axis, x->rank);
    *inner = 1;
  } else {
    *n = x->rank ? x->dims[axis] : 1;
    *inner = prod(x->dims, axis + 1, x->rank);
  }
  return AP_OK;
}

/* Softmax over n elements spaced inner apart, for outer * inner rows. */
static ap_status softmax(cg_kernel *k, bool log_out) {
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x);
  if (s != AP_OK)
    return s;
  int64_t outer, n, inner;
  if ((s = cg_softmax_geometry(k, x, &outer, &n, &inner)) != AP_OK)
    return s;
  cg_ty ct = cg_ty_of(x->dtype);
  int r = cg_for_n(k, "r", outer), q = cg_for_n(k, "q", inner);
  cg_x *base = cg_add(k, cg_mul(k, cg_v(k, r), cg_i64(k, n * inner)), cg_v(k, q));
  int xr = cg_let(k, "xr", cg_at(k, cg_in(k, 0), base));
  int yr = cg_let(k, "yr", cg_at(k, cg_out(k, 0), base));
  int top = cg_mut(k, "top", ct, cg_ldi(k, cg_v(k, xr), 0));
#define AT(v) cg_mul(k, cg_v(k, v), cg_i64(k, inner))
  int i = cg_for(k, "i", cg_i64(k, 1), cg_i64(k, n));
  cg_if(k, cg_gt(k, cg_ld(k, cg_v(k, xr), AT(i)), cg_v(k, top)));
  cg_set(k, top, cg_ld(k, cg_v(k, xr), AT(i)));
  cg_end(k);
  cg_end(k);
  /* exp(x - top) into the output, in a loop of its own: without a sum
   * beside it the loop vectorises (apk_math.h's exp); the sum of the
   * stored values follows in the row's order. */
  i = cg_for_n(k, "i", n);
  cg_st(k, cg_v(k, yr), AT(i), cg_fn1(k, CG_FN_EXP, cg_sub(k, cg_ld(k, cg_v(k, xr), AT(i)), cg_v(k, top))));
  cg_end(k);
  int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0));
  i = cg_for_n(k, "i", n);
  cg_set_op(k, sum, CG_X_ADD, cg_ld(k, cg_v(k, yr), AT(i)));
  cg_end(k);
  if (log_out) {
    int lse = cg_let(k, "lse", cg_fnd(k, CG_FN_LOG, cg_v(k, sum)));
    i = cg_for_n(k, "i", n);
    cg_st(k, cg_v(k, yr), AT(i),
          cg_cast(k, ct, cg_sub(k, cg_sub(k, cg_ld(k, cg_v(k, xr), AT(i)), cg_v(k, top)), cg_v(k, lse))));
    cg_end(k);
  } else {
    i = cg_for_n(k, "i", n);
    cg_st(k, cg_v(k, yr), AT(i), cg_cast(k, ct, cg_div(k, cg_ld(k, cg_v(k, yr), AT(i)), cg_v(k, sum))));
    cg_end(k);
  }
#undef AT
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

ap_status cg_emit_SOFTMAX(cg_kernel *k) { return softmax(k, false); }
ap_status cg_emit_LOG_SOFTMAX(cg_kernel *k) { return softmax(k, true); }

/* ---- InstanceNormalization, GroupNormalization, LpNormalization,
 * MeanVarianceNormalization ---------------------------------------------- */

ap_status cg_norm_groups_of(cg_kernel *k, cg_norm_groups *ng) {
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x);
  bool over[AP_MAX_RANK];
  if (s != AP_OK || (s = ap_norm_axes(k->g, (ap_node *)k->n, x->rank, over, k->d)) != AP_OK)
    return s;
  memset(ng, 0, sizeof *ng);
  ng->scale_k = -1;
  ng->eps = ap_attr_float(k->n, "epsilon", 1e-5f);
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  if (k->n->op == AP_OP_GROUP_NORM) {
    /* [N, C, D...] seen as [N, G, C/G, D...]: a group is the last ones. */
    int64_t G = ap_attr_int(k->n, "num_groups", 1), per = x->dims[1] / G;
    ng->nk = 2;
    ng->kd[0] = x->dims[0], ng->ks[0] = xs[0];
    ng->kd[1] = G, ng->ks[1] = per * xs[1];
    ng->nr = x->rank - 1;
    ng->rd[0] = per, ng->rs[0] = xs[1];
    for (int a = 2; a < x->rank; a++)
      ng->rd[a - 1] = x->dims[a], ng->rs[a - 1] = xs[a];
    ng->scale_k = 1;
    ng->scale_r = cg_opset(k) >= 21; /* per channel; per group before */
    ng->scale_mul = ng->scale_r ? per : 1;
  } else {
    for (int a = 0; a < x->rank; a++) {
      if (over[a]) {
        ng->rd[ng->nr] = x->dims[a], ng->rs[ng->nr++] = xs[a];
      } else {
        if (a == 1 && k->n->op == AP_OP_INSTANCE_NORM)
          ng->scale_k = ng->nk, ng->scale_mul = 1;
        ng->kd[ng->nk] = x->dims[a], ng->ks[ng->nk++] = xs[a];
      }
    }
  }
  ng->lp = k->n->op == AP_OP_LP_NORM ? (int)ap_attr_int(k->n, "p", 2) : 0;
  ng->m = prod(ng->rd, 0, ng->nr);
  return AP_OK;
}

int cg_norm_open(cg_kernel *k, const cg_norm_groups *ng, int *kv) {
  cg_loops(k, ng->nk, ng->kd, "k", kv);
  return cg_let(k, "base", cg_idx(k, ng->nk, ng->ks, kv));
}

int cg_norm_inner(cg_kernel *k, const cg_norm_groups *ng, int base, int *rv) {
  cg_loops(k, ng->nr, ng->rd, "r", rv);
  return cg_let(k, "at", cg_add(k, cg_v(k, base), cg_idx(k, ng->nr, ng->rs, rv)));
}

cg_x *cg_norm_scale_index(cg_kernel *k, const cg_norm_groups *ng, const int *kv, const int *rv) {
  cg_x *i = cg_mul(k, cg_v(k, kv[ng->scale_k]), cg_i64(k, ng->scale_mul));
  return ng->scale_r ? cg_add(k, i, cg_v(k, rv[0])) : i;
}

void cg_norm_stats(cg_kernel *k, const cg_norm_groups *ng, int base, cg_norm_vars *v) {
  int rv[AP_MAX_RANK];
  int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0));
  int at = cg_norm_inner(k, ng, base, rv);
  int xv = cg_let(k, "xv", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_v(k, at))));
  cg_set_op(k, sum, CG_X_ADD,
            ng->lp == 1   ? cg_fn1(k, CG_FN_FABS, cg_v(k, xv))
            : ng->lp == 2 ? cg_mul(k, cg_v(k, xv), cg_v(k, xv))
                          : cg_v(k, xv));
  cg_loops_end(k, ng->nr);
  v->sigma = -1;
  if (ng->lp) {
    /* x / ||x||_p: no mean, no epsilon (a zero vector gives NaN, as ONNX's
     * reference does). */
    v->mean = cg_let(k, "mean", cg_f64(k, 0));
    v->inv = cg_let(k, "inv", cg_div(k, cg_f64(k, 1.0),
                                     ng->lp == 2 ? cg_fnd(k, CG_FN_SQRT, cg_v(k, sum))
                                                 : cg_v(k, sum)));
    return;
  }
  int64_t m = ng->m ? ng->m : 1;
  v->mean = cg_let(k, "mean", cg_div(k, cg_v(k, sum), cg_i64(k, m)));
  int sq = cg_mut(k, "sq", CG_T_F64, cg_int(k, 0));
  at = cg_norm_inner(k, ng, base, rv);
  int d = cg_let(k, "d", cg_sub(k, cg_ld(k, cg_in(k, 0), cg_v(k, at)), cg_v(k, v->mean)));
  cg_set_op(k, sq, CG_X_ADD, cg_mul(k, cg_v(k, d), cg_v(k, d)));
  cg_loops_end(k, ng->nr);
  int var = cg_let(k, "var", cg_div(k, cg_v(k, sq), cg_i64(k, m)));
  if (k->n->op == AP_OP_MVN) {
    /* ONNX's function: (x - mean) / (sqrt(var) + 1e-9f). */
    v->sigma = cg_let(k, "sigma", cg_fnd(k, CG_FN_SQRT, cg_v(k, var)));
    v->inv = cg_let(k, "inv", cg_div(k, cg_f64(k, 1.0),
                                     cg_add(k, cg_v(k, v->sigma), cg_f64(k, (double)1e-9f))));
  } else {
    v->inv = cg_let(k, "inv", cg_div(k, cg_f64(k, 1.0),
                                     cg_fnd(k, CG_FN_SQRT, cg_add(k, cg_v(k, var),
                                                                  cg_f64(k, ng->eps)))));
  }
}

/* y = (x - mean) inv, then scale and bias where the operator has them. */
static ap_status normalized(cg_kernel *k) {
  cg_norm_groups ng;
  ap_status s = cg_norm_groups_of(k, &ng);
  if (s != AP_OK)
    return s;
  if (!k->out[0].numel)
    return AP_OK;
  cg_ty ct = cg_ty_of(k->in[0].dtype);
  int kv[AP_MAX_RANK + 1], rv[AP_MAX_RANK + 1];
  int base = cg_norm_open(k, &ng, kv);
  cg_norm_vars v;
  cg_norm_stats(k, &ng, base, &v);
  int at = cg_norm_inner(k, &ng, base, rv);
  cg_x *val = cg_mul(k, cg_sub(k, cg_ld(k, cg_in(k, 0), cg_v(k, at)), cg_v(k, v.mean)),
                     cg_v(k, v.inv));
  if (ng.scale_k >= 0) {
    int si = cg_let(k, "si", cg_norm_scale_index(k, &ng, kv, rv));
    val = cg_add(k, cg_mul(k, val, cg_ld(k, cg_in(k, 1), cg_v(k, si))),
                 cg_ld(k, cg_in(k, 2), cg_v(k, si)));
  }
  cg_st(k, cg_out(k, 0), cg_v(k, at), cg_cast(k, ct, val));
  cg_loops_end(k, ng.nr);
  cg_loops_end(k, ng.nk);
  return AP_OK;
}

ap_status cg_emit_INSTANCE_NORM(cg_kernel *k) { return normalized(k); }
ap_status cg_emit_GROUP_NORM(cg_kernel *k) { return normalized(k); }
ap_status cg_emit_LP_NORM(cg_kernel *k) { return normalized(k); }
ap_status cg_emit_MVN(cg_kernel *k) { return normalized(k); }
