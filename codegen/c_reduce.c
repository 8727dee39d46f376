/* Reductions over axes: ReduceMean, ReduceSum, ReduceMax. The axes are an
 * attribute before opset 13 (ReduceSum) or 18 (ReduceMean, ReduceMax) and a
 * constant input from then on; no axes reduce every dim unless
 * noop_with_empty_axes is set. The output's shape comes from shape
 * inference; the kernel walks the input once and accumulates into the
 * output element whose reduced indices are zero. */
#include <math.h>
#include <string.h>

#include "codegen/codegen.h"

typedef enum reduce_kind { RED_SUM, RED_MEAN, RED_MAX } reduce_kind;

static ap_status reduce(cg_kernel *k, reduce_kind kind) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  bool attr_form = cg_opset(k) < (kind == RED_SUM ? 13 : 18);
  bool reduced[AP_MAX_RANK] = {false};
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
    k->skip_in |= (uint64_t)1 << 1;
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
  /* Strides of the output seen with every dim kept (reduced ones of size 1). */
  int64_t kept[AP_MAX_RANK], ks[AP_MAX_RANK], os[AP_MAX_RANK], count = 1;
  for (int i = 0; i < x->rank; i++) {
    kept[i] = reduced[i] ? 1 : x->dims[i];
    if (reduced[i])
      count *= x->dims[i];
  }
  cg_strides(x->rank, kept, ks);
  for (int i = 0; i < x->rank; i++)
    os[i] = reduced[i] ? 0 : ks[i];
  if (ap_numel(x->rank, kept) != y->numel)
    return cg_error(k, AP_ERR_INVALID, "the output has %lld elements, the reduction gives %lld",
                    (long long)y->numel, (long long)ap_numel(x->rank, kept));
  bool is_float = y->dtype == AP_DT_FLOAT || y->dtype == AP_DT_DOUBLE;
  if (!is_float && kind == RED_MEAN)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(y->dtype));
  cg_ty ct = cg_ty_of(y->dtype);
  /* Sums accumulate in double (integers in their own type, wrapping). */
  cg_ty acc_t = is_float && kind != RED_MAX ? CG_T_F64 : ct;
  /* The accumulators live in the workspace: kernels are shared by the
   * devices, which run as threads of one process. */
  int64_t slots = y->numel ? y->numel : 1;
  int64_t acc_bytes = acc_t == CG_T_F64 ? 8 : (int64_t)ap_dtype_size(y->dtype);
  int64_t bytes = slots * acc_bytes + slots;
  cg_work_const(k, (bytes + 7) / 4);
  int acc = cg_let(k, "acc", cg_view(k, cg_work(k), acc_t));
  cg_memset(k, cg_v(k, acc), 0, cg_i64(k, slots * acc_bytes));
  int seen = -1;
  if (kind == RED_MAX) {
    seen = cg_let(k, "seen", cg_view(k, cg_at(k, cg_v(k, acc), cg_i64(k, slots)), CG_T_U8));
    cg_memset(k, cg_v(k, seen), 0, cg_i64(k, slots));
  }
  int i = cg_mut(k, "i", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  int r = cg_let(k, "r", cg_idx(k, x->rank, os, iv));
  cg_x *xi = cg_ld(k, cg_in(k, 0), cg_v(k, i));
  cg_x *ar = cg_ld(k, cg_v(k, acc), cg_v(k, r));
  if (kind == RED_MAX) {
    cg_if(k, cg_or(k, cg_or(k, cg_not(k, cg_ld(k, cg_v(k, seen), cg_v(k, r))), cg_gt(k, xi, ar)),
                   cg_ne(k, xi, xi)));
    cg_st(k, cg_v(k, acc), cg_v(k, r), cg_ld(k, cg_in(k, 0), cg_v(k, i)));
    cg_st(k, cg_v(k, seen), cg_v(k, r), cg_int(k, 1));
    cg_end(k);
    cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  } else if (is_float) {
    cg_st_op(k, cg_v(k, acc), cg_v(k, r), CG_X_ADD, xi);
    cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  } else {
    cg_st(k, cg_v(k, acc), cg_v(k, r),
          cg_cast(k, ct, cg_add(k, cg_cast(k, CG_T_U64, ar), cg_cast(k, CG_T_U64, xi))));
    cg_set_op(k, i, CG_X_ADD, cg_i64(k, 1));
  }
  cg_loops_end(k, x->rank);
  int o = cg_for_n(k, "r", y->numel);
  cg_x *ao = cg_ld(k, cg_v(k, acc), cg_v(k, o));
  if (kind == RED_MAX)
    /* An empty reduction gives the lowest value, as numpy's identity. */
    cg_st(k, cg_out(k, 0), cg_v(k, o),
          cg_sel(k, cg_ld(k, cg_v(k, seen), cg_v(k, o)), ao,
                 is_float ? cg_f32(k, -INFINITY) : cg_int(k, 0)));
  else if (kind == RED_MEAN)
    cg_st(k, cg_out(k, 0), cg_v(k, o), cg_cast(k, ct, cg_div(k, ao, cg_i64(k, count ? count : 1))));
  else
    cg_st(k, cg_out(k, 0), cg_v(k, o), cg_cast(k, ct, ao));
  cg_end(k);
  return AP_OK;
}
ap_status cg_emit_REDUCE_MEAN(cg_kernel *k) { return reduce(k, RED_MEAN); }
ap_status cg_emit_REDUCE_SUM(cg_kernel *k) { return reduce(k, RED_SUM); }
ap_status cg_emit_REDUCE_MAX(cg_kernel *k) { return reduce(k, RED_MAX); }
