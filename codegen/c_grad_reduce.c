/* Backward of the reductions: ReduceSum and ReduceMean broadcast the output
 * gradient back over the reduced dims (divided by the count for the mean);
 * ReduceMax routes it to the element its forward picks (the first maximum,
 * or the last NaN), found again from x in the workspace. The axes are read
 * as the forward reads them (attribute before opset 13 for Sum and 18 for
 * Mean/Max, constant input after; none: every dim unless
 * noop_with_empty_axes). */
#include <string.h>

#include "codegen/train.h"

typedef enum reduce_kind { RED_SUM, RED_MEAN, RED_MAX } reduce_kind;

/* The reduced dims of x and the number of elements each output sums. */
static ap_status reduced_dims(cg_kernel *k, reduce_kind kind, bool *reduced, int64_t *count) {
  const cg_operand *x = &k->in[0];
  bool attr_form = cg_opset(k) < (kind == RED_SUM ? 13 : 18);
  int n_axes = 0;
  memset(reduced, 0, AP_MAX_RANK * sizeof *reduced);
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
  *count = 1;
  for (int i = 0; i < x->rank; i++)
    if (reduced[i])
      *count *= x->dims[i];
  return AP_OK;
}

static ap_status grad_reduce(cg_grad_kernel *gk, reduce_kind kind) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  if (x->dtype != AP_DT_FLOAT && x->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(x->dtype));
  bool reduced[AP_MAX_RANK];
  int64_t count = 1;
  ap_status s = reduced_dims(k, kind, reduced, &count);
  if (s != AP_OK)
    return s;
  /* The output's strides seen from x's indices: 0 along reduced dims. */
  int64_t kept[AP_MAX_RANK], ks[AP_MAX_RANK], os[AP_MAX_RANK];
  for (int i = 0; i < x->rank; i++)
    kept[i] = reduced[i] ? 1 : x->dims[i];
  cg_strides(x->rank, kept, ks);
  for (int i = 0; i < x->rank; i++)
    os[i] = reduced[i] ? 0 : ks[i];
  if (ap_numel(x->rank, kept) != y->numel)
    return cg_error(k, AP_ERR_INVALID, "the output has %lld elements, the reduction gives %lld",
                    (long long)y->numel, (long long)ap_numel(x->rank, kept));
  cg_ty ct = cg_ty_of(x->dtype);
  if (kind != RED_MAX) {
    double scale = kind == RED_MEAN ? 1.0 / (double)(count ? count : 1) : 1.0;
    int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
    cg_loops(k, x->rank, x->dims, "i", iv);
    cg_grad_put(gk, 0, cg_v(k, i),
                cg_cast(k, ct, cg_mul(k, cg_ld(k, cg_dy(k, 0), cg_idx(k, x->rank, os, iv)), cg_f64(k, scale))));
    cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
    cg_loops_end(k, x->rank);
    return AP_OK;
  }
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
  cg_if(k, cg_or(k, cg_or(k, cg_lt(k, cg_ld(k, cg_v(k, at), cg_v(k, r)), cg_int(k, 0)),
                          cg_gt(k, xi, cg_ld(k, cg_v(k, best), cg_v(k, r)))),
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
  return AP_OK;
}

static ap_status grad_reduce_sum(cg_grad_kernel *gk) { return grad_reduce(gk, RED_SUM); }
static ap_status grad_reduce_mean(cg_grad_kernel *gk) { return grad_reduce(gk, RED_MEAN); }
static ap_status grad_reduce_max(cg_grad_kernel *gk) { return grad_reduce(gk, RED_MAX); }

const cg_grad_op cg_grad_ops_reduce[AP_OP_COUNT] = {
    [AP_OP_REDUCE_SUM] = {grad_reduce_sum, 0x1, 0, 0},
    [AP_OP_REDUCE_MEAN] = {grad_reduce_mean, 0x1, 0, 0},
    [AP_OP_REDUCE_MAX] = {grad_reduce_max, 0x1, 0x1, 0},
};
