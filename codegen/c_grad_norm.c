/* Backward of the normalizations. BatchNormalization trains its scale and
 * bias with the stored statistics frozen (DESIGN.md, "Execution model"), so
 * its backward is the affine map's: dx = dy scale / sqrt(var + eps).
 * LayerNormalization recomputes each row's mean and 1/std from x as its
 * forward does. Softmax and LogSoftmax read their output. Sums in double. */
#include <string.h>

#include "codegen/train.h"

static ap_status need_float(cg_kernel *k, ap_dtype t) {
  if (t != AP_DT_FLOAT && t != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(t));
  return AP_OK;
}

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= dims[i];
  return p;
}

static ap_status grad_batch_norm(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  if (cg_opset(k) >= 14 && ap_attr_int(k->n, "training_mode", 0) != 0)
    return cg_error(k, AP_ERR_UNSUPPORTED,
                    "training: BatchNormalization trains with its stored statistics; "
                    "training_mode = 1 (batch statistics) is not supported");
  double eps = ap_attr_float(k->n, "epsilon", 1e-5f);
  int64_t N = x->dims[0], C = x->rank > 1 ? x->dims[1] : 1, plane = prod(x->dims, 2, x->rank);
  cg_ty ct = cg_ty_of(x->dtype);
  int c = cg_for_n(k, "c", C);
  int inv = cg_let(k, "inv", cg_div(k, cg_f64(k, 1.0),
                                    cg_fnd(k, CG_FN_SQRT, cg_add(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 4), cg_v(k, c))),
                                                                 cg_f64(k, eps)))));
  int mean = cg_let(k, "mean", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 3), cg_v(k, c))));
  int ds = cg_mut(k, "ds", CG_T_F64, cg_int(k, 0)), db = cg_mut(k, "db", CG_T_F64, cg_int(k, 0));
  int n = cg_for_n(k, "n", N), i = cg_for_n(k, "i", plane);
  int at = cg_let(k, "at", cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, C)), cg_v(k, c)),
                                            cg_i64(k, plane)),
                                  cg_v(k, i)));
  int d = cg_let(k, "d", cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), cg_v(k, at))));
  cg_set_op(k, ds, CG_X_ADD,
            cg_mul(k, cg_mul(k, cg_v(k, d), cg_sub(k, cg_ld(k, cg_in(k, 0), cg_v(k, at)), cg_v(k, mean))),
                   cg_v(k, inv)));
  cg_set_op(k, db, CG_X_ADD, cg_v(k, d));
  if (gk->want & 1)
    cg_grad_put(gk, 0, cg_v(k, at),
                cg_cast(k, ct, cg_mul(k, cg_mul(k, cg_v(k, d), cg_ld(k, cg_in(k, 1), cg_v(k, c))),
                                      cg_v(k, inv))));
  cg_end(k);
  cg_end(k);
  if (gk->want & 2)
    cg_grad_put(gk, 1, cg_v(k, c), cg_cast(k, ct, cg_v(k, ds)));
  if (gk->want & 4)
    cg_grad_put(gk, 2, cg_v(k, c), cg_cast(k, ct, cg_v(k, db)));
  cg_end(k);
  return AP_OK;
}

/* xhat = (x - mean) inv, y = xhat scale + bias over the dims from axis;
 * with g = dy scale: dx = inv (g - mean(g) - xhat mean(g xhat)). */
static ap_status grad_layer_norm(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *scale = &k->in[1], *bias = &k->in[2];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", -1), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  double eps = ap_attr_float(k->n, "epsilon", 1e-5f);
  int64_t outer = prod(x->dims, 0, axis), inner = prod(x->dims, axis, x->rank);
  int nr = x->rank - axis;
  const int64_t *ndims = x->dims + axis;
  int64_t ss[AP_MAX_RANK], bs[AP_MAX_RANK];
  cg_broadcast_strides(scale, nr, ss);
  if (bias->v)
    cg_broadcast_strides(bias, nr, bs);
  cg_ty ct = cg_ty_of(x->dtype);
  if (gk->want & 2)
    cg_grad_zero(gk, 1);
  if (gk->want & 4)
    cg_grad_zero(gk, 2);
  int64_t in1 = inner ? inner : 1;
  int r = cg_for_n(k, "r", outer);
  int xr = cg_let(k, "xr", cg_at(k, cg_in(k, 0), cg_mul(k, cg_v(k, r), cg_i64(k, inner))));
  int dyr = cg_let(k, "dyr", cg_at(k, cg_dy(k, 0), cg_mul(k, cg_v(k, r), cg_i64(k, inner))));
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
  int s1 = cg_mut(k, "s1", CG_T_F64, cg_int(k, 0)), s2 = cg_mut(k, "s2", CG_T_F64, cg_int(k, 0));
  int iv[AP_MAX_RANK];
  {
    int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
    cg_loops(k, nr, ndims, "i", iv);
    int xh = cg_let(k, "xh", cg_mul(k, cg_sub(k, cg_ld(k, cg_v(k, xr), cg_v(k, o)), cg_v(k, mean)),
                                    cg_v(k, inv)));
    int g = cg_let(k, "g", cg_mul(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, dyr), cg_v(k, o))),
                                  cg_ld(k, cg_in(k, 1), cg_idx(k, nr, ss, iv))));
    cg_set_op(k, s1, CG_X_ADD, cg_v(k, g));
    cg_set_op(k, s2, CG_X_ADD, cg_mul(k, cg_v(k, g), cg_v(k, xh)));
    if (gk->want & 2)
      cg_st_op(k, cg_dx(k, 1), cg_idx(k, nr, ss, iv), CG_X_ADD,
               cg_cast(k, ct, cg_mul(k, cg_ld(k, cg_v(k, dyr), cg_v(k, o)), cg_v(k, xh))));
    if (gk->want & 4)
      cg_st_op(k, cg_dx(k, 2), cg_idx(k, nr, bs, iv), CG_X_ADD, cg_ld(k, cg_v(k, dyr), cg_v(k, o)));
    cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
    cg_loops_end(k, nr);
  }
  if (gk->want & 1) {
    int dxr = cg_let(k, "dxr", cg_at(k, cg_dx(k, 0), cg_mul(k, cg_v(k, r), cg_i64(k, inner))));
    int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
    cg_loops(k, nr, ndims, "i", iv);
    int xh = cg_let(k, "xh", cg_mul(k, cg_sub(k, cg_ld(k, cg_v(k, xr), cg_v(k, o)), cg_v(k, mean)),
                                    cg_v(k, inv)));
    int g = cg_let(k, "g", cg_mul(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, dyr), cg_v(k, o))),
                                  cg_ld(k, cg_in(k, 1), cg_idx(k, nr, ss, iv))));
    cg_x *val = cg_cast(k, ct, cg_mul(k, cg_v(k, inv),
                                      cg_sub(k, cg_sub(k, cg_v(k, g), cg_div(k, cg_v(k, s1), cg_i64(k, in1))),
                                             cg_div(k, cg_mul(k, cg_v(k, xh), cg_v(k, s2)), cg_i64(k, in1)))));
    if (gk->acc & 1)
      cg_st_op(k, cg_v(k, dxr), cg_v(k, o), CG_X_ADD, val);
    else
      cg_st(k, cg_v(k, dxr), cg_v(k, o), val);
    cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
    cg_loops_end(k, nr);
  }
  cg_end(k);
  return AP_OK;
}

/* Along the softmax axis (n elements spaced inner apart):
 * softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy). */
static ap_status softmax(cg_grad_kernel *gk, bool log_out) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int64_t outer, n, inner;
  if ((s = cg_softmax_geometry(k, x, &outer, &n, &inner)) != AP_OK)
    return s;
  cg_ty ct = cg_ty_of(x->dtype);
  int r = cg_for_n(k, "r", outer), q = cg_for_n(k, "q", inner);
  int base = cg_let(k, "base", cg_add(k, cg_mul(k, cg_v(k, r), cg_i64(k, n * inner)), cg_v(k, q)));
  int sum = cg_mut(k, "s", CG_T_F64, cg_int(k, 0));
  int i = cg_for_n(k, "i", n);
  cg_x *at = cg_add(k, cg_v(k, base), cg_mul(k, cg_v(k, i), cg_i64(k, inner)));
  cg_set_op(k, sum, CG_X_ADD,
            log_out ? cg_ld(k, cg_dy(k, 0), at)
                    : cg_mul(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), at)), cg_ld(k, cg_out(k, 0), at)));
  cg_end(k);
  i = cg_for_n(k, "i", n);
  int a = cg_let(k, "at", cg_add(k, cg_v(k, base), cg_mul(k, cg_v(k, i), cg_i64(k, inner))));
  cg_x *dy = cg_ld(k, cg_dy(k, 0), cg_v(k, a)), *y = cg_ld(k, cg_out(k, 0), cg_v(k, a));
  cg_x *val = log_out ? cg_sub(k, dy, cg_mul(k, cg_fnd(k, CG_FN_EXP, cg_cast(k, CG_T_F64, y)), cg_v(k, sum)))
                      : cg_mul(k, y, cg_sub(k, dy, cg_v(k, sum)));
  cg_grad_put(gk, 0, cg_v(k, a), cg_cast(k, ct, val));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

static ap_status grad_softmax(cg_grad_kernel *gk) { return softmax(gk, false); }
static ap_status grad_log_softmax(cg_grad_kernel *gk) { return softmax(gk, true); }

/* InstanceNormalization, GroupNormalization, MeanVarianceNormalization,
 * LpNormalization, each group recomputing its statistics as the forward
 * does. With d = x - mean and g = dy scale:
 *   sqrt(var + eps):       dx = inv (g - mean(g)) - d mean(g d) inv^3
 *   sqrt(var) + 1e-9 (MVN): dx = inv (g - mean(g)) - d mean(g d) inv^2 / sqrt(var)
 *   ||x||_2:               dx = inv g - x sum(g x) inv^3
 *   ||x||_1:               dx = inv g - sign(x) sum(g x) inv^2
 * and the scale's gradient sums dy (x - mean) inv, the bias's dy. */
static ap_status grad_normalized(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  cg_norm_groups ng;
  ap_status s = cg_norm_groups_of(k, &ng);
  if (s != AP_OK)
    return s;
  cg_ty ct = cg_ty_of(k->in[0].dtype);
  bool affine = ng.scale_k >= 0;
  if (affine && (gk->want & 2))
    cg_grad_zero(gk, 1);
  if (affine && (gk->want & 4))
    cg_grad_zero(gk, 2);
  if (!k->out[0].numel)
    return AP_OK;
  int kv[AP_MAX_RANK + 1], rv[AP_MAX_RANK + 1];
  int base = cg_norm_open(k, &ng, kv);
  cg_norm_vars v;
  cg_norm_stats(k, &ng, base, &v);
  int s1 = cg_mut(k, "s1", CG_T_F64, cg_int(k, 0)), s2 = cg_mut(k, "s2", CG_T_F64, cg_int(k, 0));
  int at = cg_norm_inner(k, &ng, base, rv);
  int si = affine ? cg_let(k, "si", cg_norm_scale_index(k, &ng, kv, rv)) : -1;
  int dy = cg_let(k, "dyv", cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), cg_v(k, at))));
  int d = cg_let(k, "d", cg_sub(k, cg_ld(k, cg_in(k, 0), cg_v(k, at)), cg_v(k, v.mean)));
  cg_x *g = affine ? cg_mul(k, cg_v(k, dy), cg_ld(k, cg_in(k, 1), cg_v(k, si))) : cg_v(k, dy);
  int gv = cg_let(k, "g", g);
  cg_set_op(k, s1, CG_X_ADD, cg_v(k, gv));
  cg_set_op(k, s2, CG_X_ADD, cg_mul(k, cg_v(k, gv), cg_v(k, d)));
  if (affine && (gk->want & 2))
    cg_st_op(k, cg_dx(k, 1), cg_v(k, si), CG_X_ADD,
             cg_cast(k, ct, cg_mul(k, cg_mul(k, cg_v(k, dy), cg_v(k, d)), cg_v(k, v.inv))));
  if (affine && (gk->want & 4))
    cg_st_op(k, cg_dx(k, 2), cg_v(k, si), CG_X_ADD, cg_cast(k, ct, cg_v(k, dy)));
  cg_loops_end(k, ng.nr);
  if (gk->want & 1) {
    int64_t m = ng.m ? ng.m : 1;
    cg_x *inv = cg_v(k, v.inv), *c3;
    cg_x *inv2 = cg_mul(k, inv, inv);
    if (ng.lp == 1)
      c3 = cg_mul(k, cg_v(k, s2), inv2);
    else if (ng.lp == 2)
      c3 = cg_mul(k, cg_v(k, s2), cg_mul(k, inv2, inv));
    else if (v.sigma >= 0) /* a constant group (sigma 0) has d = 0 */
      c3 = cg_sel(k, cg_gt(k, cg_v(k, v.sigma), cg_f64(k, 0)),
                  cg_div(k, cg_mul(k, cg_div(k, cg_v(k, s2), cg_i64(k, m)), inv2),
                         cg_v(k, v.sigma)),
                  cg_f64(k, 0));
    else
      c3 = cg_mul(k, cg_div(k, cg_v(k, s2), cg_i64(k, m)), cg_mul(k, inv2, inv));
    int c3v = cg_let(k, "c3", c3);
    int mg = cg_let(k, "mg", ng.lp ? cg_f64(k, 0) : cg_div(k, cg_v(k, s1), cg_i64(k, m)));
    at = cg_norm_inner(k, &ng, base, rv);
    int xv = cg_let(k, "xv", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_v(k, at))));
    cg_x *gi = cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), cg_v(k, at)));
    if (affine)
      gi = cg_mul(k, gi, cg_ld(k, cg_in(k, 1), cg_norm_scale_index(k, &ng, kv, rv)));
    cg_x *t = ng.lp == 1 ? cg_sel(k, cg_gt(k, cg_v(k, xv), cg_f64(k, 0)), cg_f64(k, 1),
                                  cg_sel(k, cg_lt(k, cg_v(k, xv), cg_f64(k, 0)), cg_f64(k, -1),
                                         cg_f64(k, 0)))
                                : cg_sub(k, cg_v(k, xv), cg_v(k, v.mean));
    cg_grad_put(gk, 0, cg_v(k, at),
                cg_cast(k, ct, cg_sub(k, cg_mul(k, cg_sub(k, gi, cg_v(k, mg)), inv),
                                      cg_mul(k, t, cg_v(k, c3v)))));
    cg_loops_end(k, ng.nr);
  }
  cg_loops_end(k, ng.nk);
  return AP_OK;
}

const cg_grad_op cg_grad_ops_norm[AP_OP_COUNT] = {
    [AP_OP_BATCH_NORM] = {grad_batch_norm, 0x7, 0x1B, 0},
    [AP_OP_LAYER_NORM] = {grad_layer_norm, 0x7, 0x3, 0},
    [AP_OP_SOFTMAX] = {grad_softmax, 0x1, 0, 0x1},
    [AP_OP_LOG_SOFTMAX] = {grad_log_softmax, 0x1, 0, 0x1},
    [AP_OP_INSTANCE_NORM] = {grad_normalized, 0x7, 0x3, 0},
    [AP_OP_GROUP_NORM] = {grad_normalized, 0x7, 0x3, 0},
    [AP_OP_LP_NORM] = {grad_normalized, 0x1, 0x1, 0},
    [AP_OP_MVN] = {grad_normalized, 0x1, 0x1, 0},
};
