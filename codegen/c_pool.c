/* Pooling over any number of spatial dims (MaxPool with Indices and
 * storage_order, AveragePool with count_include_pad, ceil_mode and
 * dilations), the global pools, and LRN. Output sizes come from shape
 * inference (which applies ceil_mode); a window is clipped to the input, and
 * for AveragePool with count_include_pad to the padded input, so a window
 * that ceil_mode adds past the end pad averages only what it covers. */
#include <math.h>
#include <string.h>

#include "codegen/codegen.h"

/* The lowest value of an element type. */
static cg_x *lowest(cg_kernel *k, ap_dtype t) {
  switch (t) {
  case AP_DT_FLOAT: return cg_f32(k, -INFINITY);
  case AP_DT_DOUBLE: return cg_f64(k, -INFINITY);
  case AP_DT_INT8: return cg_int(k, INT8_MIN);
  case AP_DT_INT16: return cg_int(k, INT16_MIN);
  case AP_DT_INT32: return cg_int(k, INT32_MIN);
  case AP_DT_INT64: return cg_i64(k, INT64_MIN);
  default: return cg_int(k, 0);
  }
}

void cg_win_open(cg_kernel *k, const cg_operand *x, const cg_operand *y, const cg_win *w,
                 cg_wloops *l) {
  l->o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
  l->nc = cg_for_n(k, "nc", x->dims[0] * x->dims[1]);
  cg_loops(k, w->nsp, y->dims + 2, "o", l->ov);
}

void cg_win_close(cg_kernel *k, const cg_win *w) {
  cg_loops_end(k, w->nsp);
  cg_end(k);
}

void cg_win_taps(cg_kernel *k, const cg_win *w, cg_wloops *l) {
  cg_loops(k, w->nsp, w->kernel, "k", l->kv);
  for (int i = 0; i < w->nsp; i++)
    l->p[i] = cg_let(k, ap_arena_printf(k->g->arena, "p%d", i), cg_add(k, cg_sub(k, cg_mul(k, cg_v(k, l->ov[i]), cg_i64(k, w->stride[i])),
                                              cg_i64(k, w->pad_begin[i])),
                                    cg_mul(k, cg_v(k, l->kv[i]), cg_i64(k, w->dilation[i]))));
}

cg_x *cg_win_inside(cg_kernel *k, const cg_operand *x, const cg_win *w, bool padded,
                    const cg_wloops *l) {
  cg_x *c = NULL;
  for (int i = 0; i < w->nsp; i++) {
    cg_x *t = cg_and(k, cg_ge(k, cg_v(k, l->p[i]), cg_i64(k, padded ? -w->pad_begin[i] : 0)),
                     cg_lt(k, cg_v(k, l->p[i]),
                           cg_i64(k, x->dims[i + 2] + (padded ? w->pad_end[i] : 0))));
    c = c ? cg_and(k, c, t) : t;
  }
  return c ? c : cg_int(k, 1);
}

cg_x *cg_win_x_index(cg_kernel *k, const cg_operand *x, int nsp, const cg_wloops *l) {
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_x *i = cg_mul(k, cg_v(k, l->nc), cg_i64(k, xs[1]));
  for (int d = 0; d < nsp; d++)
    i = cg_add(k, i, cg_mul(k, cg_v(k, l->p[d]), cg_i64(k, xs[d + 2])));
  return i;
}

/* The outputs [lo, hi) of each spatial dim whose windows lie inside the
 * input; false when some dim has none. */
static bool max_pool_interior(const cg_operand *x, const cg_operand *y, const cg_win *w,
                              int64_t *lo, int64_t *hi) {
  for (int d = 0; d < w->nsp; d++) {
    int64_t last = x->dims[d + 2] - 1 + w->pad_begin[d] - (w->kernel[d] - 1) * w->dilation[d];
    lo[d] = (w->pad_begin[d] + w->stride[d] - 1) / w->stride[d];
    hi[d] = last < 0 ? 0 : last / w->stride[d] + 1;
    if (hi[d] > y->dims[d + 2])
      hi[d] = y->dims[d + 2];
    if (hi[d] <= lo[d])
      return false;
  }
  return true;
}

/* y at the output position l->ov: the largest x over the window, the first
 * one on ties and the first NaN met, as cg_emit_MAX_POOL's loop with
 * Indices picks it.
 * inside: the window lies in the input, so no tap is tested, and starting
 * from the first tap's x, "x > best ? x : best" over every tap gives the
 * same value (a select GCC and LLVM make one vector max). */
static void max_pool_window(cg_kernel *k, const cg_operand *x, const cg_operand *y,
                            const cg_win *w, cg_wloops *l, bool inside) {
  int64_t ys[AP_MAX_RANK];
  cg_strides(y->rank, y->dims, ys);
  cg_x *yi = cg_mul(k, cg_v(k, l->nc), cg_i64(k, ys[1]));
  for (int d = 0; d < w->nsp; d++)
    yi = cg_add(k, yi, cg_mul(k, cg_v(k, l->ov[d]), cg_i64(k, ys[d + 2])));
  int best;
  if (inside) {
    for (int d = 0; d < w->nsp; d++)
      l->p[d] = cg_let(k, ap_arena_printf(k->g->arena, "s%d", d),
                       cg_sub(k, cg_mul(k, cg_v(k, l->ov[d]), cg_i64(k, w->stride[d])),
                              cg_i64(k, w->pad_begin[d])));
    best = cg_mut(k, "best", cg_ty_of(x->dtype), cg_ld(k, cg_in(k, 0), cg_win_x_index(k, x, w->nsp, l)));
    cg_win_taps(k, w, l);
    int v = cg_let(k, "v", cg_ld(k, cg_in(k, 0), cg_win_x_index(k, x, w->nsp, l)));
    cg_set(k, best, cg_sel(k, cg_gt(k, cg_v(k, v), cg_v(k, best)), cg_v(k, v), cg_v(k, best)));
    cg_loops_end(k, w->nsp);
  } else {
    best = cg_mut(k, "best", cg_ty_of(x->dtype), lowest(k, x->dtype));
    int first = cg_mut(k, "first", CG_T_I64, cg_int(k, 1));
    cg_win_taps(k, w, l);
    cg_if(k, cg_win_inside(k, x, w, false, l));
    int v = cg_let(k, "v", cg_ld(k, cg_in(k, 0), cg_win_x_index(k, x, w->nsp, l)));
    cg_if(k, cg_or(k, cg_gt(k, cg_v(k, v), cg_v(k, best)), cg_ne(k, cg_v(k, first), cg_int(k, 0))));
    cg_set(k, best, cg_v(k, v));
    cg_set(k, first, cg_int(k, 0));
    cg_end(k);
    cg_end(k);
    cg_loops_end(k, w->nsp);
  }
  cg_st(k, cg_out(k, 0), yi, cg_v(k, best));
}

/* Outputs [from, to) along the last spatial dim of one row. */
static void max_pool_run(cg_kernel *k, const cg_operand *x, const cg_operand *y, const cg_win *w,
                         cg_wloops *l, int64_t from, int64_t to, bool inside) {
  int last = w->nsp - 1;
  if (from == to)
    return;
  l->ov[last] = cg_for(k, ap_arena_printf(k->g->arena, "o%d", last), cg_i64(k, from), cg_i64(k, to));
  max_pool_window(k, x, y, w, l, inside);
  cg_end(k);
}

/* MaxPool without Indices: per row of outputs along the last spatial dim,
 * the outputs whose windows lie inside the input (every one of ResNet-50's
 * but the first row and column) run without a test per tap, the edges
 * with them. */
static void max_pool_values(cg_kernel *k, const cg_operand *x, const cg_operand *y,
                            const cg_win *w) {
  int64_t lo[AP_MAX_RANK], hi[AP_MAX_RANK];
  bool any = max_pool_interior(x, y, w, lo, hi);
  int last = w->nsp - 1;
  int64_t width = y->dims[last + 2];
  cg_wloops l;
  l.nc = cg_for_n(k, "nc", x->dims[0] * x->dims[1]);
  cg_loops(k, last, y->dims + 2, "o", l.ov);
  if (!any) {
    max_pool_run(k, x, y, w, &l, 0, width, false);
  } else {
    cg_x *c = NULL; /* the row's windows are inside along the outer dims */
    for (int d = 0; d < last; d++) {
      if (lo[d] == 0 && hi[d] == y->dims[d + 2])
        continue;
      cg_x *t = cg_and(k, cg_ge(k, cg_v(k, l.ov[d]), cg_i64(k, lo[d])),
                       cg_lt(k, cg_v(k, l.ov[d]), cg_i64(k, hi[d])));
      c = c ? cg_and(k, c, t) : t;
    }
    if (c)
      cg_if(k, c);
    max_pool_run(k, x, y, w, &l, 0, lo[last], false);
    max_pool_run(k, x, y, w, &l, lo[last], hi[last], true);
    max_pool_run(k, x, y, w, &l, hi[last], width, false);
    if (c) {
      cg_else(k);
      max_pool_run(k, x, y, w, &l, 0, width, false);
      cg_end(k);
    }
  }
  cg_loops_end(k, last);
  cg_end(k);
}

ap_status cg_emit_MAX_POOL(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  cg_win w;
  ap_status s = cg_window(k, x, y, NULL, true, &w);
  if (s != AP_OK)
    return s;
  bool indices = k->out[1].v != NULL;
  if (!indices) {
    max_pool_values(k, x, y, &w);
    return AP_OK;
  }
  int64_t order = ap_attr_int(k->n, "storage_order", 0);
  cg_wloops l;
  cg_win_open(k, x, y, &w, &l);
  int best = cg_mut(k, "best", cg_ty_of(x->dtype), lowest(k, x->dtype));
  int at = cg_mut(k, "at", CG_T_I64, cg_int(k, -1));
  cg_win_taps(k, &w, &l);
  cg_if(k, cg_win_inside(k, x, &w, false, &l));
  int i = cg_let(k, "i", cg_win_x_index(k, x, w.nsp, &l));
  cg_x *xi = cg_ld(k, cg_in(k, 0), cg_v(k, i));
  cg_if(k, cg_or(k, cg_gt(k, xi, cg_v(k, best)), cg_lt(k, cg_v(k, at), cg_int(k, 0))));
  cg_set(k, best, cg_ld(k, cg_in(k, 0), cg_v(k, i)));
  if (order == 1) { /* column-major over the spatial dims */
    int64_t plane = 1, st = 1;
    for (int d = 0; d < w.nsp; d++)
      plane *= x->dims[d + 2];
    cg_x *e = cg_mul(k, cg_v(k, l.nc), cg_i64(k, plane));
    for (int d = 0; d < w.nsp; d++) {
      e = cg_add(k, e, cg_mul(k, cg_v(k, l.p[d]), cg_i64(k, st)));
      st *= x->dims[d + 2];
    }
    cg_set(k, at, e);
  } else {
    cg_set(k, at, cg_v(k, i));
  }
  cg_end(k);
  cg_end(k);
  cg_loops_end(k, w.nsp);
  if (indices)
    cg_st(k, cg_out(k, 1), cg_v(k, l.o), cg_v(k, at));
  cg_st(k, cg_out(k, 0), cg_v(k, l.o), cg_v(k, best));
  cg_set_op(k, l.o, CG_X_ADD, cg_i64(k, 1));
  cg_win_close(k, &w);
  return AP_OK;
}

ap_status cg_emit_AVERAGE_POOL(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  if (x->dtype != AP_DT_FLOAT && x->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(x->dtype));
  cg_win w;
  ap_status s = cg_window(k, x, y, NULL, cg_opset(k) >= 19, &w);
  if (s != AP_OK)
    return s;
  bool include_pad = ap_attr_int(k->n, "count_include_pad", 0) != 0;
  cg_wloops l;
  cg_win_open(k, x, y, &w, &l);
  int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0));
  int count = cg_mut(k, "count", CG_T_I64, cg_int(k, 0));
  cg_win_taps(k, &w, &l);
  if (include_pad) {
    cg_if(k, cg_win_inside(k, x, &w, true, &l));
    cg_set_op(k, count, CG_X_ADD, cg_int(k, 1));
    cg_end(k);
  }
  cg_if(k, cg_win_inside(k, x, &w, false, &l));
  cg_set_op(k, sum, CG_X_ADD, cg_ld(k, cg_in(k, 0), cg_win_x_index(k, x, w.nsp, &l)));
  if (!include_pad)
    cg_set_op(k, count, CG_X_ADD, cg_int(k, 1));
  cg_end(k);
  cg_loops_end(k, w.nsp);
  cg_st(k, cg_out(k, 0), cg_v(k, l.o),
        cg_cast(k, cg_ty_of(y->dtype),
                cg_sel(k, cg_v(k, count), cg_div(k, cg_v(k, sum), cg_cast(k, CG_T_F64, cg_v(k, count))),
                       cg_int(k, 0))));
  cg_set_op(k, l.o, CG_X_ADD, cg_i64(k, 1));
  cg_win_close(k, &w);
  return AP_OK;
}

static ap_status global_pool(cg_kernel *k, bool max) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  if (!max && x->dtype != AP_DT_FLOAT && x->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(x->dtype));
  int64_t plane = 1;
  for (int i = 2; i < x->rank; i++)
    plane *= x->dims[i];
  cg_ty ct = cg_ty_of(y->dtype);
  int nc = cg_for_n(k, "nc", x->dims[0] * x->dims[1]);
#define X(i) cg_ld(k, cg_in(k, 0), cg_add(k, cg_mul(k, cg_v(k, nc), cg_i64(k, plane)), cg_v(k, i)))
  if (max) {
    int best = cg_mut(k, "best", ct, lowest(k, x->dtype));
    int i = cg_for_n(k, "i", plane);
    cg_if(k, cg_or(k, cg_gt(k, X(i), cg_v(k, best)), cg_eq(k, cg_v(k, i), cg_int(k, 0))));
    cg_set(k, best, X(i));
    cg_end(k);
    cg_end(k);
    cg_st(k, cg_out(k, 0), cg_v(k, nc), cg_v(k, best));
  } else {
    int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0));
    int i = cg_for_n(k, "i", plane);
    cg_set_op(k, sum, CG_X_ADD, X(i));
    cg_end(k);
    cg_st(k, cg_out(k, 0), cg_v(k, nc),
          cg_cast(k, ct, cg_div(k, cg_v(k, sum), cg_i64(k, plane ? plane : 1))));
  }
#undef X
  cg_end(k);
  return AP_OK;
}

ap_status cg_emit_GLOBAL_AVERAGE_POOL(cg_kernel *k) { return global_pool(k, false); }
ap_status cg_emit_GLOBAL_MAX_POOL(cg_kernel *k) { return global_pool(k, true); }

/* y = x / (bias + alpha / size * sum of x^2 over the channels
 * [c - floor((size-1)/2), c + ceil((size-1)/2)])^beta. */
ap_status cg_emit_LRN(cg_kernel *k) {
  const cg_operand *x = &k->in[0];
  if (x->dtype != AP_DT_FLOAT && x->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(x->dtype));
  int64_t size = ap_attr_int(k->n, "size", 0);
  if (size < 1)
    return cg_error(k, AP_ERR_INVALID, "attribute 'size' must be positive");
  double alpha = ap_attr_float(k->n, "alpha", 1e-4f), beta = ap_attr_float(k->n, "beta", 0.75f),
         bias = ap_attr_float(k->n, "bias", 1.0f);
  int64_t C = x->dims[1], plane = 1;
  for (int i = 2; i < x->rank; i++)
    plane *= x->dims[i];
  int64_t lo_off = (size - 1) / 2, hi_off = size / 2;
  int n = cg_for_n(k, "n", x->dims[0]), c = cg_for_n(k, "c", C), i = cg_for_n(k, "i", plane);
  cg_x *cm = cg_sub(k, cg_v(k, c), cg_i64(k, lo_off)), *cp = cg_add(k, cg_v(k, c), cg_i64(k, hi_off));
  int lo = cg_let(k, "lo", cg_sel(k, cg_lt(k, cm, cg_int(k, 0)), cg_int(k, 0), cm));
  int hi = cg_let(k, "hi", cg_sel(k, cg_gt(k, cp, cg_i64(k, C - 1)), cg_i64(k, C - 1), cp));
  int sq = cg_mut(k, "sq", CG_T_F64, cg_int(k, 0));
  int j = cg_for(k, "j", cg_v(k, lo), cg_add(k, cg_v(k, hi), cg_i64(k, 1)));
  int v = cg_let(k, "v", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, C)), cg_v(k, j)), cg_i64(k, plane)), cg_v(k, i)))));
  cg_set_op(k, sq, CG_X_ADD, cg_mul(k, cg_v(k, v), cg_v(k, v)));
  cg_end(k);
  int at = cg_let(k, "at", cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, C)), cg_v(k, c)), cg_i64(k, plane)), cg_v(k, i)));
  cg_x *den = cg_fn2(k, CG_FN_POW, cg_add(k, cg_f64(k, bias), cg_mul(k, cg_f64(k, alpha / (double)size), cg_v(k, sq))),
                     cg_f64(k, beta));
  cg_st(k, cg_out(k, 0), cg_v(k, at),
        cg_cast(k, cg_ty_of(x->dtype), cg_div(k, cg_ld(k, cg_in(k, 0), cg_v(k, at)), den)));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}
