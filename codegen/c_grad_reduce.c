/* Backward of the reductions: ReduceSum and ReduceMean broadcast the output
 * gradient back over the reduced dims (divided by the count for the mean);
 * ReduceSumSquare, ReduceL1, ReduceL2 and ReduceLogSumExp broadcast it times
 * their derivative (2x, sign(x), x / y, exp(x - y); ReduceL2 at y = 0, where
 * every x is 0, passes 0); ReduceProd multiplies it by the product of the
 * other elements (counted apart from the zeros, so a zero element divides
 * nothing); ReduceMax and ReduceMin route it to the element their forward
 * picks (the first extremum, or the last NaN), found again from x in the
 * workspace. The axes are read as the forward reads them
 * (cg_reduced_dims). ArgMax and ArgMin return indices: no gradient.
 * CumSum's is the reversed scan of dy; TopK's values pass theirs to the
 * elements their indices name. */
#include <string.h>

#include "codegen/train.h"

typedef enum reduce_kind {
  RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_L1, RED_L2, RED_LOG_SUM_EXP,
  RED_SUM_SQUARE
} reduce_kind;

/* The extremum's gradient: dx[at[r]] += dy[r] for the element each output
 * picked. */
static void route_extremum(cg_grad_kernel *gk, bool max, const int64_t *os) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t slots = y->numel ? y->numel : 1;
  cg_work_const(k, 4 * slots);
  cg_grad_zero(gk, 0);
  int best = cg_let(k, "best", cg_view(k, cg_work(k), CG_T_F64));
  int at = cg_let(k, "at", cg_view(k, cg_at(k, cg_v(k, best), cg_i64(k, slots)), CG_T_I64));
  int r = cg_for_n(k, "r", slots);
  cg_st(k, cg_v(k, at), cg_v(k, r), cg_int(k, -1));
  cg_end(k);
  int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  cg_x *xi = cg_ld(k, cg_in(k, 0), cg_v(k, i));
  cg_x *br = cg_ld(k, cg_v(k, best), cg_v(k, r));
  cg_if(k, cg_or(k, cg_or(k, cg_lt(k, cg_ld(k, cg_v(k, at), cg_v(k, r)), cg_int(k, 0)),
                          max ? cg_gt(k, xi, br) : cg_lt(k, xi, br)),
                 cg_ne(k, xi, xi)));
  cg_st(k, cg_v(k, best), cg_v(k, r), cg_ld(k, cg_in(k, 0), cg_v(k, i)));
  cg_st(k, cg_v(k, at), cg_v(k, r), cg_v(k, i));
  cg_end(k);
  cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
  r = cg_for_n(k, "r", y->numel);
  cg_if(k, cg_ge(k, cg_ld(k, cg_v(k, at), cg_v(k, r)), cg_int(k, 0)));
  cg_st_op(k, cg_dx(k, 0), cg_ld(k, cg_v(k, at), cg_v(k, r)), CG_X_ADD,
           cg_ld(k, cg_dy(k, 0), cg_v(k, r)));
  cg_end(k);
  cg_end(k);
}

/* ReduceProd: per output, the product of its nonzero elements and how many
 * are zero; dx = dy * (no zero: P / x; one zero: P at the zero, 0
 * elsewhere; more: 0). */
static void grad_prod(cg_grad_kernel *gk, const int64_t *os) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t slots = y->numel ? y->numel : 1;
  cg_work_const(k, 4 * slots);
  int prod = cg_let(k, "prod", cg_view(k, cg_work(k), CG_T_F64));
  int zeros = cg_let(k, "zeros", cg_view(k, cg_at(k, cg_v(k, prod), cg_i64(k, slots)), CG_T_I64));
  int r = cg_for_n(k, "r", slots);
  cg_st(k, cg_v(k, prod), cg_v(k, r), cg_f64(k, 1));
  cg_st(k, cg_v(k, zeros), cg_v(k, r), cg_int(k, 0));
  cg_end(k);
  int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  int xv = cg_let(k, "x", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_v(k, i))));
  cg_if(k, cg_eq(k, cg_v(k, xv), cg_f64(k, 0)));
  cg_st_op(k, cg_v(k, zeros), cg_v(k, r), CG_X_ADD, cg_int(k, 1));
  cg_else(k);
  cg_st_op(k, cg_v(k, prod), cg_v(k, r), CG_X_MUL, cg_v(k, xv));
  cg_end(k);
  cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
  i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0));
  cg_loops(k, x->rank, x->dims, "i", iv);
  r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  xv = cg_let(k, "x", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_v(k, i))));
  int z = cg_let(k, "z", cg_ld(k, cg_v(k, zeros), cg_v(k, r)));
  int p = cg_let(k, "p", cg_ld(k, cg_v(k, prod), cg_v(k, r)));
  cg_x *others = cg_sel(
      k, cg_eq(k, cg_v(k, z), cg_int(k, 0)), cg_div(k, cg_v(k, p), cg_v(k, xv)),
      cg_sel(k, cg_and(k, cg_eq(k, cg_v(k, z), cg_int(k, 1)), cg_eq(k, cg_v(k, xv), cg_f64(k, 0))),
             cg_v(k, p), cg_f64(k, 0)));
  cg_grad_put(gk, 0, cg_v(k, i),
              cg_cast(k, cg_ty_of(x->dtype),
                      cg_mul(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), cg_v(k, r))), others)));
  cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
}

static ap_status grad_reduce(cg_grad_kernel *gk, reduce_kind kind) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  if (x->dtype != AP_DT_FLOAT && x->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(x->dtype));
  bool reduced[AP_MAX_RANK];
  int64_t count, os[AP_MAX_RANK];
  ap_status s = cg_reduced_dims(k, reduced, &count);
  if (s != AP_OK || (s = cg_reduce_strides(k, reduced, os)) != AP_OK)
    return s;
  if (kind == RED_MAX || kind == RED_MIN) {
    route_extremum(gk, kind == RED_MAX, os);
    return AP_OK;
  }
  if (kind == RED_PROD) {
    grad_prod(gk, os);
    return AP_OK;
  }
  int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  int r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  cg_x *g = cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), cg_v(k, r)));
  if (kind != RED_SUM && kind != RED_MEAN) {
    int xv = cg_let(k, "x", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_v(k, i))));
    cg_x *yr = kind == RED_L2 || kind == RED_LOG_SUM_EXP
                   ? cg_cast(k, CG_T_F64, cg_ld(k, cg_out(k, 0), cg_v(k, r)))
                   : NULL;
    cg_x *d;
    if (kind == RED_SUM_SQUARE)
      d = cg_mul(k, cg_f64(k, 2), cg_v(k, xv));
    else if (kind == RED_L1)
      d = cg_sel(k, cg_gt(k, cg_v(k, xv), cg_f64(k, 0)), cg_f64(k, 1),
                 cg_sel(k, cg_lt(k, cg_v(k, xv), cg_f64(k, 0)), cg_f64(k, -1), cg_f64(k, 0)));
    else if (kind == RED_L2) {
      int yv = cg_let(k, "y", yr);
      d = cg_sel(k, cg_eq(k, cg_v(k, yv), cg_f64(k, 0)), cg_f64(k, 0),
                 cg_div(k, cg_v(k, xv), cg_v(k, yv)));
    } else
      d = cg_fnd(k, CG_FN_EXP, cg_sub(k, cg_v(k, xv), yr));
    g = cg_mul(k, g, d);
  } else if (kind == RED_MEAN) {
    g = cg_mul(k, g, cg_f64(k, 1.0 / (double)(count ? count : 1)));
  }
  cg_grad_put(gk, 0, cg_v(k, i), cg_cast(k, cg_ty_of(x->dtype), g));
  cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
  return AP_OK;
}

static ap_status grad_reduce_sum(cg_grad_kernel *gk) { return grad_reduce(gk, RED_SUM); }
static ap_status grad_reduce_mean(cg_grad_kernel *gk) { return grad_reduce(gk, RED_MEAN); }
static ap_status grad_reduce_max(cg_grad_kernel *gk) { return grad_reduce(gk, RED_MAX); }
static ap_status grad_reduce_min(cg_grad_kernel *gk) { return grad_reduce(gk, RED_MIN); }
static ap_status grad_reduce_prod(cg_grad_kernel *gk) { return grad_reduce(gk, RED_PROD); }
static ap_status grad_reduce_l1(cg_grad_kernel *gk) { return grad_reduce(gk, RED_L1); }
static ap_status grad_reduce_l2(cg_grad_kernel *gk) { return grad_reduce(gk, RED_L2); }
static ap_status grad_reduce_lse(cg_grad_kernel *gk) { return grad_reduce(gk, RED_LOG_SUM_EXP); }
static ap_status grad_reduce_ssq(cg_grad_kernel *gk) { return grad_reduce(gk, RED_SUM_SQUARE); }

/* CumSum: every output sums the inputs at and before it (exclusive: before
 * it), so an input's gradient sums the output gradients at and after it:
 * the same scan of dy, the other way. */
static ap_status grad_cumsum(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  if (k->in[0].dtype != AP_DT_FLOAT && k->in[0].dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(k->in[0].dtype));
  int axis;
  bool exclusive, reverse;
  ap_status s = cg_cumsum_params(k, &axis, &exclusive, &reverse);
  if (s != AP_OK || !k->in[0].numel)
    return s;
  cg_scan(k, axis, exclusive, !reverse, cg_dy(k, 0), cg_dx(k, 0), cg_ty_of(k->in[0].dtype),
          gk->acc & 1);
  return AP_OK;
}

/* TopK: each value's gradient goes to the element its index names. */
static ap_status grad_top_k(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  if (x->dtype != AP_DT_FLOAT && x->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(x->dtype));
  int axis;
  int64_t kk, outer, inner;
  ap_status s = cg_top_k_params(k, &axis, &kk, &outer, &inner);
  if (s != AP_OK)
    return s;
  cg_grad_zero(gk, 0);
  if (!kk || !k->out[0].numel)
    return AP_OK;
  int64_t len = x->dims[axis];
  int o = cg_for_n(k, "o", outer), r = cg_for_n(k, "r", kk), j = cg_for_n(k, "j", inner);
  int at = cg_let(k, "at", cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, kk)), cg_v(k, r)),
                                            cg_i64(k, inner)),
                                  cg_v(k, j)));
  cg_x *src = cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, len)),
                                         cg_ld(k, cg_out(k, 1), cg_v(k, at))),
                               cg_i64(k, inner)),
                     cg_v(k, j));
  cg_st_op(k, cg_dx(k, 0), src, CG_X_ADD, cg_ld(k, cg_dy(k, 0), cg_v(k, at)));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

const cg_grad_op cg_grad_ops_reduce[AP_OP_COUNT] = {
    [AP_OP_REDUCE_SUM] = {grad_reduce_sum, 0x1, 0, 0},
    [AP_OP_REDUCE_MEAN] = {grad_reduce_mean, 0x1, 0, 0},
    [AP_OP_REDUCE_MAX] = {grad_reduce_max, 0x1, 0x1, 0},
    [AP_OP_REDUCE_MIN] = {grad_reduce_min, 0x1, 0x1, 0},
    [AP_OP_REDUCE_PROD] = {grad_reduce_prod, 0x1, 0x1, 0},
    [AP_OP_REDUCE_L1] = {grad_reduce_l1, 0x1, 0x1, 0},
    [AP_OP_REDUCE_L2] = {grad_reduce_l2, 0x1, 0x1, 0x1},
    [AP_OP_REDUCE_LOG_SUM_EXP] = {grad_reduce_lse, 0x1, 0x1, 0x1},
    [AP_OP_REDUCE_SUM_SQUARE] = {grad_reduce_ssq, 0x1, 0x1, 0},
    [AP_OP_CUM_SUM] = {grad_cumsum, 0x1, 0, 0},
    [AP_OP_TOP_K] = {grad_top_k, 0x1, 0, 0x2},
};
