/* Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin,
 * ReduceProd, ReduceL1, ReduceL2, ReduceLogSumExp, ReduceSumSquare, and the
 * index reductions ArgMax and ArgMin. The axes are an attribute before opset
 * 13 (ReduceSum) or 18 (the others) and a constant input from then on; no
 * axes reduce every dim unless noop_with_empty_axes is set. ArgMax and
 * ArgMin reduce their one `axis`. The output's shape comes from shape
 * inference; the kernels walk the input once (ReduceLogSumExp twice: its
 * maximum first, for exp not to overflow) and accumulate into the output
 * element whose reduced indices are zero. */
#include <math.h>
#include <string.h>

#include "codegen/codegen.h"

typedef enum reduce_kind {
  RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_L1, RED_L2, RED_LOG_SUM_EXP,
  RED_SUM_SQUARE
} reduce_kind;

ap_status cg_reduced_dims(cg_kernel *k, bool *reduced, int64_t *count) {
  const cg_operand *x = &k->in[0];
  memset(reduced, 0, AP_MAX_RANK * sizeof *reduced);
  *count = 1;
  if (k->n->op == AP_OP_ARG_MAX || k->n->op == AP_OP_ARG_MIN) {
    int64_t axis = ap_attr_int(k->n, "axis", 0);
    int a = cg_norm_axis(axis, x->rank);
    if (a < 0)
      return cg_error(k, AP_ERR_INVALID, "axis %lld is out of range", (long long)axis);
    reduced[a] = true;
    *count = x->dims[a];
    return AP_OK;
  }
  bool attr_form = cg_opset(k) < (k->n->op == AP_OP_REDUCE_SUM ? 13 : 18);
  int n_axes = 0;
  if (attr_form) {
    const int64_t *axes = ap_attr_ints(k->n, "axes", &n_axes);
    for (int i = 0; i < n_axes; i++) {
      int a = cg_norm_axis(axes[i], x->rank);
      if (a < 0)
        return cg_error(k, AP_ERR_INVALID, "axis %lld is out of range", (long long)axes[i]);
      reduced[a] = true;
    }
  } else if (k->in[1].v) {
    n_axes = (int)k->in[1].numel;
    for (int i = 0; i < n_axes; i++) {
      int64_t v;
      if (!cg_const_i64(&k->in[1], i, &v))
        return cg_error(k, AP_ERR_UNSUPPORTED, "axes must be a constant (bind it with --inputs)");
      int a = cg_norm_axis(v, x->rank);
      if (a < 0)
        return cg_error(k, AP_ERR_INVALID, "axis %lld is out of range", (long long)v);
      reduced[a] = true;
    }
  }
  if (!n_axes) {
    bool noop = !attr_form && ap_attr_int(k->n, "noop_with_empty_axes", 0) != 0;
    for (int i = 0; i < x->rank; i++)
      reduced[i] = !noop;
  }
  for (int i = 0; i < x->rank; i++)
    if (reduced[i])
      *count *= x->dims[i];
  return AP_OK;
}

ap_status cg_reduce_strides(cg_kernel *k, const bool *reduced, int64_t *os) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t kept[AP_MAX_RANK], ks[AP_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    kept[i] = reduced[i] ? 1 : x->dims[i];
  cg_strides(x->rank, kept, ks);
  for (int i = 0; i < x->rank; i++)
    os[i] = reduced[i] ? 0 : ks[i];
  if (ap_numel(x->rank, kept) != y->numel)
    return cg_error(k, AP_ERR_INVALID, "the output has %lld elements, the reduction gives %lld",
                    (long long)y->numel, (long long)ap_numel(x->rank, kept));
  return AP_OK;
}

/* The extremum of every output's elements into ext[] (element type t),
 * seen[] marking the outputs that have one: numpy's maximum or minimum, a
 * NaN winning. */
static void extremum(cg_kernel *k, bool max, const int64_t *os, int ext, int seen) {
  const cg_operand *x = &k->in[0];
  int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  int r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  cg_x *xi = cg_ld(k, cg_in(k, 0), cg_v(k, i));
  cg_x *er = cg_ld(k, cg_v(k, ext), cg_v(k, r));
  cg_if(k, cg_or(k, cg_or(k, cg_not(k, cg_ld(k, cg_v(k, seen), cg_v(k, r))),
                          max ? cg_gt(k, xi, er) : cg_lt(k, xi, er)),
                 cg_ne(k, xi, xi)));
  cg_st(k, cg_v(k, ext), cg_v(k, r), cg_ld(k, cg_in(k, 0), cg_v(k, i)));
  cg_st(k, cg_v(k, seen), cg_v(k, r), cg_int(k, 1));
  cg_end(k);
  cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
}

static ap_status reduce(cg_kernel *k, reduce_kind kind) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  bool reduced[AP_MAX_RANK];
  int64_t count, os[AP_MAX_RANK];
  ap_status s = cg_reduced_dims(k, reduced, &count);
  if (s != AP_OK || (s = cg_reduce_strides(k, reduced, os)) != AP_OK)
    return s;
  if (k->in[1].v)
    k->skip_in |= (uint64_t)1 << 1;
  bool is_float = y->dtype == AP_DT_FLOAT || y->dtype == AP_DT_DOUBLE;
  if (!is_float && (kind == RED_MEAN || kind == RED_L2 || kind == RED_LOG_SUM_EXP))
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(y->dtype));
  if (!is_float && kind == RED_MIN && !count)
    return cg_error(k, AP_ERR_UNSUPPORTED,
                    "an empty reduction of integers (its identity, the type's maximum)");
  cg_ty ct = cg_ty_of(y->dtype);
  bool ext_kind = kind == RED_MAX || kind == RED_MIN || kind == RED_LOG_SUM_EXP;
  bool sums = kind != RED_MAX && kind != RED_MIN;
  /* Sums accumulate in double (integers in their own type, wrapping). */
  cg_ty acc_t = is_float ? CG_T_F64 : ct;
  /* The accumulators live in the workspace: kernels are shared by the
   * devices, which run as threads of one process. Sums first (8-byte
   * aligned), then the extrema in the element type, then their flags. */
  int64_t slots = y->numel ? y->numel : 1, es = (int64_t)ap_dtype_size(y->dtype);
  int64_t acc_bytes = sums ? slots * (acc_t == CG_T_F64 ? 8 : es) : 0;
  int64_t ext_bytes = ext_kind ? slots * es : 0;
  int64_t bytes = acc_bytes + ext_bytes + (ext_kind ? slots : 0);
  cg_work_const(k, (bytes + 7) / 4);
  int acc = -1, ext = -1, seen = -1;
  if (sums) {
    acc = cg_let(k, "acc", cg_view(k, cg_work(k), acc_t));
    if (kind == RED_PROD) {
      int r = cg_for_n(k, "r", slots);
      cg_st(k, cg_v(k, acc), cg_v(k, r), cg_const(k, acc_t, 1));
      cg_end(k);
    } else {
      cg_memset(k, cg_v(k, acc), 0, cg_i64(k, acc_bytes));
    }
  }
  if (ext_kind) {
    cg_x *base = cg_work(k);
    if (acc_bytes)
      base = cg_at(k, cg_view(k, base, CG_T_U8), cg_i64(k, acc_bytes));
    ext = cg_let(k, "ext", cg_view(k, base, ct));
    seen = cg_let(k, "seen", cg_view(k, cg_at(k, cg_v(k, ext), cg_i64(k, slots)), CG_T_U8));
    cg_memset(k, cg_v(k, seen), 0, cg_i64(k, slots));
    extremum(k, kind != RED_MIN, os, ext, seen);
  }
  if (sums) {
    int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
    cg_loops(k, x->rank, x->dims, "i", iv);
    int r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
    int xv = cg_let(k, "x", cg_ld(k, cg_in(k, 0), cg_v(k, i)));
    cg_xop op = kind == RED_PROD ? CG_X_MUL : CG_X_ADD;
    if (is_float) {
      cg_x *term = cg_cast(k, CG_T_F64, cg_v(k, xv));
      if (kind == RED_L1)
        term = cg_fnd(k, CG_FN_FABS, term);
      else if (kind == RED_L2 || kind == RED_SUM_SQUARE)
        term = cg_mul(k, term, cg_cast(k, CG_T_F64, cg_v(k, xv)));
      else if (kind == RED_LOG_SUM_EXP)
        term = cg_fnd(k, CG_FN_EXP,
                      cg_sub(k, term, cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, ext), cg_v(k, r)))));
      cg_st_op(k, cg_v(k, acc), cg_v(k, r), op, term);
    } else {
      /* Integers wrap in their own width, through uint64 (no signed overflow). */
      cg_x *term = cg_cast(k, CG_T_U64, cg_v(k, xv));
      if (kind == RED_L1)
        term = cg_sel(k, cg_lt(k, cg_v(k, xv), cg_int(k, 0)), cg_sub(k, cg_u64(k, 0), term),
                      cg_cast(k, CG_T_U64, cg_v(k, xv)));
      else if (kind == RED_SUM_SQUARE)
        term = cg_mul(k, term, cg_cast(k, CG_T_U64, cg_v(k, xv)));
      cg_x *ar = cg_cast(k, CG_T_U64, cg_ld(k, cg_v(k, acc), cg_v(k, r)));
      cg_st(k, cg_v(k, acc), cg_v(k, r),
            cg_cast(k, ct, op == CG_X_MUL ? cg_mul(k, ar, term) : cg_add(k, ar, term)));
    }
    cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
    cg_loops_end(k, x->rank);
  }
  int o = cg_for_n(k, "r", y->numel);
  cg_x *res;
  if (kind == RED_MAX || kind == RED_MIN) {
    /* An empty reduction gives the identity: -inf for the maximum (0 for
     * integers, as before), +inf for the minimum. */
    cg_x *empty = !is_float ? cg_int(k, 0) : cg_f32(k, kind == RED_MAX ? -INFINITY : INFINITY);
    res = cg_sel(k, cg_ld(k, cg_v(k, seen), cg_v(k, o)), cg_ld(k, cg_v(k, ext), cg_v(k, o)), empty);
  } else if (kind == RED_LOG_SUM_EXP) {
    /* An infinite or NaN maximum (or none: -inf) is the result itself. */
    int m = cg_let(k, "m", cg_sel(k, cg_ld(k, cg_v(k, seen), cg_v(k, o)),
                                  cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, ext), cg_v(k, o))),
                                  cg_f64(k, -INFINITY)));
    res = cg_cast(k, ct, cg_sel(k, cg_eq(k, cg_sub(k, cg_v(k, m), cg_v(k, m)), cg_f64(k, 0)),
                                cg_add(k, cg_v(k, m),
                                       cg_fnd(k, CG_FN_LOG, cg_ld(k, cg_v(k, acc), cg_v(k, o)))),
                                cg_v(k, m)));
  } else {
    cg_x *ao = cg_ld(k, cg_v(k, acc), cg_v(k, o));
    if (kind == RED_MEAN)
      ao = cg_div(k, ao, cg_i64(k, count ? count : 1));
    else if (kind == RED_L2)
      ao = cg_fnd(k, CG_FN_SQRT, ao);
    res = cg_cast(k, ct, ao);
  }
  cg_st(k, cg_out(k, 0), cg_v(k, o), res);
  cg_end(k);
  return AP_OK;
}
ap_status cg_emit_REDUCE_MEAN(cg_kernel *k) { return reduce(k, RED_MEAN); }
ap_status cg_emit_REDUCE_SUM(cg_kernel *k) { return reduce(k, RED_SUM); }
ap_status cg_emit_REDUCE_MAX(cg_kernel *k) { return reduce(k, RED_MAX); }
ap_status cg_emit_REDUCE_MIN(cg_kernel *k) { return reduce(k, RED_MIN); }
ap_status cg_emit_REDUCE_PROD(cg_kernel *k) { return reduce(k, RED_PROD); }
ap_status cg_emit_REDUCE_L1(cg_kernel *k) { return reduce(k, RED_L1); }
ap_status cg_emit_REDUCE_L2(cg_kernel *k) { return reduce(k, RED_L2); }
ap_status cg_emit_REDUCE_LOG_SUM_EXP(cg_kernel *k) { return reduce(k, RED_LOG_SUM_EXP); }
ap_status cg_emit_REDUCE_SUM_SQUARE(cg_kernel *k) { return reduce(k, RED_SUM_SQUARE); }

/* ArgMax, ArgMin: the index along the axis of numpy's argmax (argmin): the
 * first extremum, or the last with select_last_index; a NaN wins (the first,
 * or the last). */
static ap_status arg_reduce(cg_kernel *k, bool max) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  bool reduced[AP_MAX_RANK];
  int64_t count, os[AP_MAX_RANK];
  ap_status s = cg_reduced_dims(k, reduced, &count);
  if (s != AP_OK || (s = cg_reduce_strides(k, reduced, os)) != AP_OK)
    return s;
  if (!count && y->numel)
    return cg_error(k, AP_ERR_INVALID, "the axis is empty: there is no index to return");
  int axis = 0;
  while (!reduced[axis])
    axis++;
  bool last = ap_attr_int(k->n, "select_last_index", 0) != 0;
  cg_ty ct = cg_ty_of(x->dtype);
  int64_t slots = y->numel ? y->numel : 1;
  cg_work_const(k, (slots * (8 + (int64_t)ap_dtype_size(x->dtype)) + 3) / 4);
  int at = cg_let(k, "at", cg_view(k, cg_work(k), CG_T_I64));
  int best = cg_let(k, "best", cg_view(k, cg_at(k, cg_v(k, at), cg_i64(k, slots)), ct));
  int r = cg_for_n(k, "r", slots);
  cg_st(k, cg_v(k, at), cg_v(k, r), cg_int(k, -1));
  cg_end(k);
  int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  int xi = cg_let(k, "xi", cg_ld(k, cg_in(k, 0), cg_v(k, i)));
  int b = cg_let(k, "b", cg_ld(k, cg_v(k, best), cg_v(k, r)));
  cg_x *none = cg_lt(k, cg_ld(k, cg_v(k, at), cg_v(k, r)), cg_int(k, 0));
  cg_x *beyond = max ? (last ? cg_ge(k, cg_v(k, xi), cg_v(k, b)) : cg_gt(k, cg_v(k, xi), cg_v(k, b)))
                     : (last ? cg_le(k, cg_v(k, xi), cg_v(k, b)) : cg_lt(k, cg_v(k, xi), cg_v(k, b)));
  cg_x *b_num = cg_eq(k, cg_v(k, b), cg_v(k, b)), *x_nan = cg_ne(k, cg_v(k, xi), cg_v(k, xi));
  /* First index: a NaN replaces numbers only; last: every NaN replaces. */
  cg_x *better = last ? cg_or(k, x_nan, cg_and(k, b_num, beyond))
                      : cg_and(k, b_num, cg_or(k, x_nan, beyond));
  cg_if(k, cg_or(k, none, better));
  cg_st(k, cg_v(k, best), cg_v(k, r), cg_v(k, xi));
  cg_st(k, cg_v(k, at), cg_v(k, r), cg_v(k, iv[axis]));
  cg_end(k);
  cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
  int o = cg_for_n(k, "r", y->numel);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_ld(k, cg_v(k, at), cg_v(k, o)));
  cg_end(k);
  return AP_OK;
}
ap_status cg_emit_ARG_MAX(cg_kernel *k) { return arg_reduce(k, true); }
ap_status cg_emit_ARG_MIN(cg_kernel *k) { return arg_reduce(k, false); }

static void put(cg_kernel *k, cg_x *p, cg_x *i, cg_x *x, bool add) {
  if (add)
    cg_st_op(k, p, i, CG_X_ADD, x);
  else
    cg_st(k, p, i, x);
}

ap_status cg_cumsum_params(cg_kernel *k, int *axis, bool *exclusive, bool *reverse) {
  bool known;
  ap_status s = ap_cumsum_axis(k->g, (ap_node *)k->n, k->in[0].rank, axis, &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED, "axis must be a constant (bind it with --inputs)");
  *exclusive = ap_attr_int(k->n, "exclusive", 0) != 0;
  *reverse = ap_attr_int(k->n, "reverse", 0) != 0;
  return AP_OK;
}

void cg_scan(cg_kernel *k, int axis, bool exclusive, bool reverse, cg_x *src, cg_x *dst,
             cg_ty ct, bool add) {
  const int64_t *dims = k->in[0].dims;
  int rank = k->in[0].rank;
  int64_t outer = 1, len = dims[axis], inner = 1;
  for (int a = 0; a < axis; a++)
    outer *= dims[a];
  for (int a = axis + 1; a < rank; a++)
    inner *= dims[a];
  bool is_float = cg_ty_float(ct);
  /* Floats add in double; integers wrap in their own width (through uint64). */
  cg_ty acc_t = is_float ? CG_T_F64 : CG_T_U64;
  int o = cg_for_n(k, "o", outer), in = cg_for_n(k, "j", inner);
  int acc = cg_mut(k, "acc", acc_t, cg_const(k, acc_t, 0));
  int t = cg_for_n(k, "t", len);
  cg_x *along = reverse ? cg_sub(k, cg_i64(k, len - 1), cg_v(k, t)) : cg_v(k, t);
  int at = cg_let(k, "at", cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, len)), along),
                                            cg_i64(k, inner)),
                                  cg_v(k, in)));
  if (exclusive)
    put(k, dst, cg_v(k, at), cg_cast(k, ct, cg_v(k, acc)), add);
  cg_set_op(k, acc, CG_X_ADD, cg_cast(k, acc_t, cg_ld(k, src, cg_v(k, at))));
  if (!exclusive)
    put(k, dst, cg_v(k, at), cg_cast(k, ct, cg_v(k, acc)), add);
  cg_end(k);
  cg_end(k);
  cg_end(k);
}

/* CumSum: along its axis (whole: ir/axes.c, rule SCAN), forward or reversed,
 * each element included (or, exclusive, only those before it). */
ap_status cg_emit_CUM_SUM(cg_kernel *k) {
  int axis;
  bool exclusive, reverse;
  ap_status s = cg_cumsum_params(k, &axis, &exclusive, &reverse);
  if (s != AP_OK)
    return s;
  k->skip_in |= (uint64_t)1 << 1;
  if (!k->out[0].numel)
    return AP_OK;
  cg_ty ct = cg_ty_of(k->out[0].dtype);
  cg_scan(k, axis, exclusive, reverse, cg_in(k, 0), cg_out(k, 0), ct, false);
  return AP_OK;
}

ap_status cg_top_k_params(cg_kernel *k, int *axis, int64_t *kk, int64_t *outer, int64_t *inner) {
  const cg_operand *x = &k->in[0];
  bool known;
  ap_status s = ap_top_k_params(k->g, (ap_node *)k->n, x->rank, axis, kk, &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED, "K must be a constant (bind it with --inputs)");
  *outer = *inner = 1;
  for (int a = 0; a < *axis; a++)
    *outer *= x->dims[a];
  for (int a = *axis + 1; a < x->rank; a++)
    *inner *= x->dims[a];
  return AP_OK;
}

/* x[base + i * inner]: element i (a variable) of a slice along the axis. */
static cg_x *slice_at(cg_kernel *k, int base, int i, int64_t inner) {
  return cg_ld(k, cg_in(k, 0), cg_add(k, cg_v(k, base), cg_mul(k, cg_v(k, i), cg_i64(k, inner))));
}

/* TopK: per slice along the axis (whole: ir/axes.c, rule TOP_K), K rounds
 * each picking the best element not yet taken: the largest (or smallest),
 * the lower index first among equals, a NaN above every number (numpy's
 * sort order, reversed for the largest). Values and indices come out in
 * that order, which sorted=0 leaves free. */
ap_status cg_emit_TOP_K(cg_kernel *k) {
  const cg_operand *x = &k->in[0];
  int axis;
  int64_t kk, outer, inner;
  ap_status s = cg_top_k_params(k, &axis, &kk, &outer, &inner);
  if (s != AP_OK)
    return s;
  k->skip_in |= (uint64_t)1 << 1;
  if (!kk || !k->out[0].numel)
    return AP_OK;
  bool largest = ap_attr_int(k->n, "largest", 1) != 0;
  int64_t len = x->dims[axis];
  cg_work_const(k, (len + 3) / 4);
  int taken = cg_let(k, "taken", cg_view(k, cg_work(k), CG_T_U8));
  int o = cg_for_n(k, "o", outer), j = cg_for_n(k, "j", inner);
  cg_memset(k, cg_v(k, taken), 0, cg_i64(k, len));
  int base = cg_let(k, "base", cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, len * inner)), cg_v(k, j)));
  int r = cg_for_n(k, "r", kk);
  int best = cg_mut(k, "best", CG_T_I64, cg_i64(k, -1));
  int t = cg_for_n(k, "t", len);
  cg_if(k, cg_not(k, cg_ld(k, cg_v(k, taken), cg_v(k, t))));
  int xt = cg_let(k, "xt", slice_at(k, base, t, inner));
  /* x[best] is read only when best >= 0 (|| evaluates its right operand
   * when needed). */
  cg_x *beyond;
  if (largest)
    beyond = cg_or(k, cg_gt(k, cg_v(k, xt), slice_at(k, base, best, inner)),
                   cg_and(k, cg_ne(k, cg_v(k, xt), cg_v(k, xt)),
                          cg_eq(k, slice_at(k, base, best, inner), slice_at(k, base, best, inner))));
  else
    beyond = cg_or(k, cg_lt(k, cg_v(k, xt), slice_at(k, base, best, inner)),
                   cg_and(k, cg_eq(k, cg_v(k, xt), cg_v(k, xt)),
                          cg_ne(k, slice_at(k, base, best, inner), slice_at(k, base, best, inner))));
  cg_if(k, cg_or(k, cg_lt(k, cg_v(k, best), cg_i64(k, 0)), beyond));
  cg_set(k, best, cg_v(k, t));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  cg_st(k, cg_v(k, taken), cg_v(k, best), cg_int(k, 1));
  int out_at = cg_let(k, "at", cg_add(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, kk * inner)),
                                                cg_mul(k, cg_v(k, r), cg_i64(k, inner))),
                                      cg_v(k, j)));
  cg_st(k, cg_out(k, 0), cg_v(k, out_at), slice_at(k, base, best, inner));
  if (k->out[1].v)
    cg_st(k, cg_out(k, 1), cg_v(k, out_at), cg_v(k, best));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}
