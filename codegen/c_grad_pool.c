/* Backward of the pools, over any number of spatial dims with the forward's
 * window (pads, strides, dilations, ceil_mode through the inferred output
 * size). MaxPool recomputes each window's argmax from x with the forward's
 * rule (the first maximum wins) and routes the gradient there; AveragePool
 * spreads it evenly over the taps its forward counted. Both scatter-add into
 * dx, zeroed first unless it accumulates. LRN, a window over channels,
 * recomputes its denominators. */
#include <string.h>

#include "codegen/train.h"

static ap_status need_float(cg_kernel *k, ap_dtype t) {
  if (t != AP_DT_FLOAT && t != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(t));
  return AP_OK;
}


static ap_status grad_max_pool(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  cg_win w;
  if ((s = cg_window(k, x, y, NULL, true, &w)) != AP_OK)
    return s;
  cg_grad_zero(gk, 0);
  cg_wloops l;
  cg_win_open(k, x, y, &w, &l);
  int best = cg_mut(k, "best", cg_ty_of(x->dtype), cg_int(k, 0));
  int at = cg_mut(k, "at", CG_T_I64, cg_int(k, -1));
  cg_win_taps(k, &w, &l);
  cg_if(k, cg_win_inside(k, x, &w, false, &l));
  int i = cg_let(k, "i", cg_win_x_index(k, x, w.nsp, &l));
  cg_if(k, cg_or(k, cg_gt(k, cg_ld(k, cg_in(k, 0), cg_v(k, i)), cg_v(k, best)),
                 cg_lt(k, cg_v(k, at), cg_int(k, 0))));
  cg_set(k, best, cg_ld(k, cg_in(k, 0), cg_v(k, i)));
  cg_set(k, at, cg_v(k, i));
  cg_end(k);
  cg_end(k);
  cg_loops_end(k, w.nsp);
  cg_if(k, cg_ge(k, cg_v(k, at), cg_int(k, 0)));
  cg_st_op(k, cg_dx(k, 0), cg_v(k, at), CG_X_ADD, cg_ld(k, cg_dy(k, 0), cg_v(k, l.o)));
  cg_end(k);
  cg_set_op(k, l.o, CG_X_ADD, cg_i64(k, 1));
  cg_win_close(k, &w);
  return AP_OK;
}

static ap_status grad_average_pool(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  cg_win w;
  if ((s = cg_window(k, x, y, NULL, cg_opset(k) >= 19, &w)) != AP_OK)
    return s;
  bool include_pad = ap_attr_int(k->n, "count_include_pad", 0) != 0;
  cg_grad_zero(gk, 0);
  cg_wloops l;
  cg_win_open(k, x, y, &w, &l);
  int count = cg_mut(k, "count", CG_T_I64, cg_int(k, 0));
  cg_win_taps(k, &w, &l);
  cg_if(k, cg_win_inside(k, x, &w, include_pad, &l));
  cg_set_op(k, count, CG_X_ADD, cg_int(k, 1));
  cg_end(k);
  cg_loops_end(k, w.nsp);
  cg_if(k, cg_v(k, count));
  int d = cg_let(k, "d", cg_div(k, cg_ld(k, cg_dy(k, 0), cg_v(k, l.o)), cg_cast(k, CG_T_F64, cg_v(k, count))));
  cg_win_taps(k, &w, &l);
  cg_if(k, cg_win_inside(k, x, &w, false, &l));
  cg_st_op(k, cg_dx(k, 0), cg_win_x_index(k, x, w.nsp, &l), CG_X_ADD, cg_v(k, d));
  cg_end(k);
  cg_loops_end(k, w.nsp);
  cg_end(k);
  cg_set_op(k, l.o, CG_X_ADD, cg_i64(k, 1));
  cg_win_close(k, &w);
  return AP_OK;
}

static ap_status grad_global_pool(cg_grad_kernel *gk, bool max) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int64_t plane = 1;
  for (int i = 2; i < x->rank; i++)
    plane *= x->dims[i];
  cg_ty ct = cg_ty_of(x->dtype);
  int nc = cg_for_n(k, "nc", x->dims[0] * x->dims[1]);
#define X(i) cg_ld(k, cg_in(k, 0), cg_add(k, cg_mul(k, cg_v(k, nc), cg_i64(k, plane)), (i)))
  cg_x *dyn = cg_ld(k, cg_dy(k, 0), cg_v(k, nc));
  if (max) {
    int at = cg_mut(k, "at", CG_T_I64, cg_int(k, 0));
    int i = cg_for(k, "i", cg_i64(k, 1), cg_i64(k, plane));
    cg_if(k, cg_gt(k, X(cg_v(k, i)), X(cg_v(k, at))));
    cg_set(k, at, cg_v(k, i));
    cg_end(k);
    cg_end(k);
    i = cg_for_n(k, "i", plane);
    cg_grad_put(gk, 0, cg_add(k, cg_mul(k, cg_v(k, nc), cg_i64(k, plane)), cg_v(k, i)),
                cg_cast(k, ct, cg_sel(k, cg_eq(k, cg_v(k, i), cg_v(k, at)), dyn, cg_int(k, 0))));
    cg_end(k);
  } else {
    int i = cg_for_n(k, "i", plane);
    cg_grad_put(gk, 0, cg_add(k, cg_mul(k, cg_v(k, nc), cg_i64(k, plane)), cg_v(k, i)),
                cg_cast(k, ct, cg_div(k, dyn, cg_f64(k, (double)(plane ? plane : 1)))));
    cg_end(k);
  }
#undef X
  cg_end(k);
  return AP_OK;
}

static ap_status grad_global_average_pool(cg_grad_kernel *gk) { return grad_global_pool(gk, false); }
static ap_status grad_global_max_pool(cg_grad_kernel *gk) { return grad_global_pool(gk, true); }

/* y_c = x_c / D_c^beta with D_c = bias + alpha / size * sum of x_j^2 over
 * the channels j of c's window, so
 * dx_j = dy_j / D_j^beta - 2 alpha / size beta x_j sum over the windows c
 * containing j of dy_c x_c / D_c^(beta + 1). D is kept per channel in the
 * workspace for one (n, position) at a time. */
static ap_status grad_lrn(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int64_t size = ap_attr_int(k->n, "size", 0);
  if (size < 1)
    return cg_error(k, AP_ERR_INVALID, "attribute 'size' must be positive");
  double alpha = ap_attr_float(k->n, "alpha", 1e-4f), beta = ap_attr_float(k->n, "beta", 0.75f),
         bias = ap_attr_float(k->n, "bias", 1.0f);
  int64_t C = x->dims[1], plane = 1, lo_off = (size - 1) / 2, hi_off = size / 2;
  for (int i = 2; i < x->rank; i++)
    plane *= x->dims[i];
  cg_x *la = cg_f64(k, alpha / (double)size);
  cg_work_const(k, 2 * C);
  int den = cg_let(k, "den", cg_view(k, cg_work(k), CG_T_F64));
  int n = cg_for_n(k, "n", x->dims[0]), i = cg_for_n(k, "i", plane);
  int base = cg_let(k, "base", cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, C * plane)), cg_v(k, i)));
  /* the window [max(0, c - lo_off), min(C - 1, c + hi_off)] of channel c */
#define WIN(c, lo, hi)                                                                     \
  cg_x *cm_##c = cg_sub(k, cg_v(k, c), cg_i64(k, lo)), *cp_##c = cg_add(k, cg_v(k, c), cg_i64(k, hi)); \
  int a_##c = cg_let(k, "a", cg_sel(k, cg_lt(k, cm_##c, cg_int(k, 0)), cg_int(k, 0), cm_##c));         \
  int b_##c = cg_let(k, "b", cg_sel(k, cg_gt(k, cp_##c, cg_i64(k, C - 1)), cg_i64(k, C - 1), cp_##c))
  int c = cg_for_n(k, "c", C);
  WIN(c, lo_off, hi_off);
  int sq = cg_mut(k, "sq", CG_T_F64, cg_int(k, 0));
  int j = cg_for(k, "j", cg_v(k, a_c), cg_add(k, cg_v(k, b_c), cg_i64(k, 1)));
  int v = cg_let(k, "v", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_add(k, cg_v(k, base), cg_mul(k, cg_v(k, j), cg_i64(k, plane))))));
  cg_set_op(k, sq, CG_X_ADD, cg_mul(k, cg_v(k, v), cg_v(k, v)));
  cg_end(k);
  cg_st(k, cg_v(k, den), cg_v(k, c), cg_add(k, cg_f64(k, bias), cg_mul(k, la, cg_v(k, sq))));
  cg_end(k);
  j = cg_for_n(k, "j", C);
  WIN(j, hi_off, lo_off);
#undef WIN
  int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0));
  c = cg_for(k, "c", cg_v(k, a_j), cg_add(k, cg_v(k, b_j), cg_i64(k, 1)));
  int at = cg_let(k, "at", cg_add(k, cg_v(k, base), cg_mul(k, cg_v(k, c), cg_i64(k, plane))));
  cg_set_op(k, sum, CG_X_ADD,
            cg_mul(k, cg_mul(k, cg_ld(k, cg_dy(k, 0), cg_v(k, at)), cg_ld(k, cg_in(k, 0), cg_v(k, at))),
                   cg_fn2(k, CG_FN_POW, cg_ld(k, cg_v(k, den), cg_v(k, c)),
                          cg_sub(k, cg_f64(k, -beta), cg_int(k, 1)))));
  cg_end(k);
  int at2 = cg_let(k, "at", cg_add(k, cg_v(k, base), cg_mul(k, cg_v(k, j), cg_i64(k, plane))));
  cg_x *t1 = cg_mul(k, cg_ld(k, cg_dy(k, 0), cg_v(k, at2)),
                    cg_fn2(k, CG_FN_POW, cg_ld(k, cg_v(k, den), cg_v(k, j)), cg_f64(k, -beta)));
  cg_x *t2 = cg_mul(k, cg_mul(k, cg_mul(k, cg_mul(k, cg_int(k, 2), cg_f64(k, alpha / (double)size)), cg_f64(k, beta)),
                              cg_ld(k, cg_in(k, 0), cg_v(k, at2))),
                    cg_v(k, sum));
  cg_grad_put(gk, 0, cg_v(k, at2), cg_cast(k, cg_ty_of(x->dtype), cg_sub(k, t1, t2)));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

const cg_grad_op cg_grad_ops_pool[AP_OP_COUNT] = {
    [AP_OP_MAX_POOL] = {grad_max_pool, 0x1, 0x1, 0},
    [AP_OP_AVERAGE_POOL] = {grad_average_pool, 0x1, 0, 0},
    [AP_OP_GLOBAL_AVERAGE_POOL] = {grad_global_average_pool, 0x1, 0, 0},
    [AP_OP_GLOBAL_MAX_POOL] = {grad_global_max_pool, 0x1, 0x1, 0},
    [AP_OP_LRN] = {grad_lrn, 0x1, 0x1, 0},
};
