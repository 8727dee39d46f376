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
  const char *ct = cg_ctype(x->dtype);
  char idx[512];
  cg_index(idx, sizeof idx, x->rank, os, "i");
  if (kind != RED_MAX) {
    char scale[64];
    cg_literal(scale, AP_DT_DOUBLE, kind == RED_MEAN ? 1.0 / (double)(count ? count : 1) : 1.0);
    cg_printf(k, "int64_t i = 0;\n");
    cg_loops_open(k, x->rank, x->dims, "i");
    cg_printf(k, "dx0[i++] %s (%s)(dy0[%s] * %s);\n", cg_grad_assign(gk, 0), ct, idx, scale);
    cg_loops_close(k, x->rank);
    return AP_OK;
  }
  int64_t slots = y->numel ? y->numel : 1;
  snprintf(k->work_expr, sizeof k->work_expr, "(size_t)%lld", (long long)(4 * slots));
  cg_grad_zero(gk, 0);
  cg_printf(k, "double *best = (double *)(void *)work;\nint64_t *at = (int64_t *)(best + %lld);\n"
               "for (int64_t r = 0; r < %lld; r++)\n  at[r] = -1;\nint64_t i = 0;\n",
            (long long)slots, (long long)slots);
  cg_loops_open(k, x->rank, x->dims, "i");
  cg_printf(k, "const int64_t r = %s;\n"
               "if (at[r] < 0 || x0[i] > best[r] || x0[i] != x0[i]) {\n"
               "  best[r] = x0[i];\n  at[r] = i;\n}\ni++;\n", idx);
  cg_loops_close(k, x->rank);
  cg_printf(k, "for (int64_t r = 0; r < %lld; r++)\n  if (at[r] >= 0)\n    dx0[at[r]] += dy0[r];\n",
            (long long)y->numel);
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
