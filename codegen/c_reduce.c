/* Reductions over axes: ReduceMean, ReduceSum, ReduceMax. The axes are an
 * attribute before opset 13 (ReduceSum) or 18 (ReduceMean, ReduceMax) and a
 * constant input from then on; no axes reduce every dim unless
 * noop_with_empty_axes is set. The output's shape comes from shape
 * inference; the kernel walks the input once and accumulates into the
 * output element whose reduced indices are zero. */
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
  const char *ct = cg_ctype(y->dtype);
  /* Sums accumulate in double (integers in their own type, wrapping). */
  const char *acc_t = is_float && kind != RED_MAX ? "double" : ct;
  /* The accumulators live in the workspace: kernels are shared by the
   * devices, which run as threads of one process. */
  int64_t slots = y->numel ? y->numel : 1;
  size_t acc_bytes = strcmp(acc_t, "double") == 0 ? 8 : ap_dtype_size(y->dtype);
  int64_t bytes = slots * (int64_t)acc_bytes + slots;
  snprintf(k->work_expr, sizeof k->work_expr, "(size_t)%lld", (long long)((bytes + 7) / 4));
  cg_printf(k, "%s *acc = (%s *)(void *)work;\nmemset(acc, 0, %lld);\n", acc_t, acc_t,
            (long long)(slots * (int64_t)acc_bytes));
  if (kind == RED_MAX)
    cg_printf(k, "uint8_t *seen = (uint8_t *)(acc + %lld);\nmemset(seen, 0, %lld);\n",
              (long long)slots, (long long)slots);
  cg_printf(k, "int64_t i = 0;\n");
  char idx[512];
  cg_loops_open(k, x->rank, x->dims, "i");
  cg_printf(k, "const int64_t r = %s;\n", cg_index(idx, sizeof idx, x->rank, os, "i"));
  if (kind == RED_MAX)
    cg_printf(k, "if (!seen[r] || x0[i] > acc[r] || x0[i] != x0[i]) {\n  acc[r] = x0[i];\n"
                 "  seen[r] = 1;\n}\ni++;\n");
  else if (is_float)
    cg_printf(k, "acc[r] += x0[i++];\n");
  else
    cg_printf(k, "acc[r] = (%s)((uint64_t)acc[r] + (uint64_t)x0[i++]);\n", ct);
  cg_loops_close(k, x->rank);
  if (kind == RED_MAX)
    /* An empty reduction gives the lowest value, as numpy's identity. */
    cg_printf(k, "for (int64_t r = 0; r < %lld; r++)\n  y0[r] = seen[r] ? acc[r] : %s;\n",
              (long long)y->numel, is_float ? "-INFINITY" : "0");
  else if (kind == RED_MEAN)
    cg_printf(k, "for (int64_t r = 0; r < %lld; r++)\n  y0[r] = (%s)(acc[r] / %lld);\n",
              (long long)y->numel, ct, (long long)(count ? count : 1));
  else
    cg_printf(k, "for (int64_t r = 0; r < %lld; r++)\n  y0[r] = (%s)acc[r];\n",
              (long long)y->numel, ct);
  return AP_OK;
}

ap_status cg_emit_REDUCE_MEAN(cg_kernel *k) { return reduce(k, RED_MEAN); }
ap_status cg_emit_REDUCE_SUM(cg_kernel *k) { return reduce(k, RED_SUM); }
ap_status cg_emit_REDUCE_MAX(cg_kernel *k) { return reduce(k, RED_MAX); }
