/* Pooling over any number of spatial dims (MaxPool with Indices and
 * storage_order, AveragePool with count_include_pad, ceil_mode and
 * dilations), the global pools, and LRN. Output sizes come from shape
 * inference (which applies ceil_mode); a window is clipped to the input, and
 * for AveragePool with count_include_pad to the padded input, so a window
 * that ceil_mode adds past the end pad averages only what it covers. */
#include <string.h>

#include "codegen/codegen.h"

/* The lowest value of an element type, as a C expression. */
static const char *lowest(ap_dtype t) {
  switch (t) {
  case AP_DT_FLOAT: return "-INFINITY";
  case AP_DT_DOUBLE: return "-(double)INFINITY";
  case AP_DT_INT8: return "INT8_MIN";
  case AP_DT_INT16: return "INT16_MIN";
  case AP_DT_INT32: return "INT32_MIN";
  case AP_DT_INT64: return "INT64_MIN";
  default: return "0";
  }
}

/* Opens the loops over (N*C, output positions, kernel taps) and defines
 * p<i>, the input position of tap k<i> at output o<i>. */
void cg_win_open(cg_kernel *k, const cg_operand *x, const cg_operand *y,
                        const cg_win *w) {
  cg_printf(k, "int64_t o = 0;\nfor (int64_t nc = 0; nc < %lld; nc++) {\n",
            (long long)(x->dims[0] * x->dims[1]));
  cg_loops_open(k, w->nsp, y->dims + 2, "o");
}

void cg_win_taps(cg_kernel *k, const cg_win *w) {
  cg_loops_open(k, w->nsp, w->kernel, "k");
  for (int i = 0; i < w->nsp; i++)
    cg_printf(k, "const int64_t p%d = o%d * %lld - %lld + k%d * %lld;\n", i, i,
              (long long)w->stride[i], (long long)w->pad_begin[i], i, (long long)w->dilation[i]);
}

/* "p0 >= lo0 && p0 < hi0 && ...": the tap lies in [-pad_lo, in + pad_hi). */
void cg_win_inside(cg_kernel *k, const cg_operand *x, const cg_win *w, bool padded) {
  for (int i = 0; i < w->nsp; i++)
    cg_printf(k, "%sp%d >= %lld && p%d < %lld", i ? " && " : "", i,
              (long long)(padded ? -w->pad_begin[i] : 0), i,
              (long long)(x->dims[i + 2] + (padded ? w->pad_end[i] : 0)));
}

/* x0's element at input position p within image/channel nc. */
void cg_win_x_index(cg_kernel *k, const cg_operand *x, int nsp) {
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_printf(k, "nc * %lld", (long long)xs[1]);
  for (int i = 0; i < nsp; i++)
    cg_printf(k, " + p%d * %lld", i, (long long)xs[i + 2]);
}

ap_status cg_emit_MAX_POOL(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  cg_win w;
  ap_status s = cg_window(k, x, y, NULL, true, &w);
  if (s != AP_OK)
    return s;
  bool indices = k->out[1].v != NULL;
  int64_t order = ap_attr_int(k->n, "storage_order", 0);
  cg_win_open(k, x, y, &w);
  cg_printf(k, "%s best = %s;\nint64_t at = -1;\n", cg_ctype(x->dtype), lowest(x->dtype));
  cg_win_taps(k, &w);
  cg_printf(k, "if (");
  cg_win_inside(k, x, &w, false);
  cg_printf(k, ") {\nconst int64_t i = ");
  cg_win_x_index(k, x, w.nsp);
  cg_printf(k, ";\nif (x0[i] > best || at < 0) {\nbest = x0[i];\nat = ");
  if (order == 1) { /* column-major over the spatial dims */
    int64_t plane = 1, st = 1;
    for (int i = 0; i < w.nsp; i++)
      plane *= x->dims[i + 2];
    cg_printf(k, "nc * %lld", (long long)plane);
    for (int i = 0; i < w.nsp; i++) {
      cg_printf(k, " + p%d * %lld", i, (long long)st);
      st *= x->dims[i + 2];
    }
    cg_printf(k, ";\n");
  } else {
    cg_printf(k, "i;\n");
  }
  cg_printf(k, "}\n}\n");
  cg_loops_close(k, w.nsp);
  if (indices)
    cg_printf(k, "y1[o] = at;\n");
  cg_printf(k, "y0[o++] = best;\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "}\n");
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
  cg_win_open(k, x, y, &w);
  cg_printf(k, "double sum = 0;\nint64_t count = 0;\n");
  cg_win_taps(k, &w);
  if (include_pad) {
    cg_printf(k, "if (");
    cg_win_inside(k, x, &w, true);
    cg_printf(k, ")\n  count++;\n");
  }
  cg_printf(k, "if (");
  cg_win_inside(k, x, &w, false);
  cg_printf(k, ") {\nsum += x0[");
  cg_win_x_index(k, x, w.nsp);
  cg_printf(k, "];\n%s}\n", include_pad ? "" : "count++;\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "y0[o++] = (%s)(count ? sum / (double)count : 0);\n", cg_ctype(y->dtype));
  cg_loops_close(k, w.nsp);
  cg_printf(k, "}\n");
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
  const char *ct = cg_ctype(y->dtype);
  cg_printf(k, "for (int64_t nc = 0; nc < %lld; nc++) {\n", (long long)(x->dims[0] * x->dims[1]));
  if (max)
    cg_printf(k, "%s best = %s;\nfor (int64_t i = 0; i < %lld; i++)\n"
                 "  if (x0[nc * %lld + i] > best || i == 0)\n    best = x0[nc * %lld + i];\n"
                 "y0[nc] = best;\n}\n",
              ct, lowest(x->dtype), (long long)plane, (long long)plane, (long long)plane);
  else
    cg_printf(k, "double sum = 0;\nfor (int64_t i = 0; i < %lld; i++)\n  sum += x0[nc * %lld + i];\n"
                 "y0[nc] = (%s)(sum / %lld);\n}\n",
              (long long)plane, (long long)plane, ct, (long long)(plane ? plane : 1));
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
  char la[64], lb[64], lbias[64];
  cg_literal(la, AP_DT_DOUBLE, alpha / (double)size);
  cg_literal(lb, AP_DT_DOUBLE, beta);
  cg_literal(lbias, AP_DT_DOUBLE, bias);
  cg_printf(k,
            "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t c = 0; c < %lld; c++)\n"
            "for (int64_t i = 0; i < %lld; i++) {\n"
            "const int64_t lo = c - %lld < 0 ? 0 : c - %lld, hi = c + %lld > %lld ? %lld : c + %lld;\n"
            "double sq = 0;\nfor (int64_t j = lo; j <= hi; j++) {\n"
            "  const double v = x0[(n * %lld + j) * %lld + i];\n  sq += v * v;\n}\n"
            "const int64_t at = (n * %lld + c) * %lld + i;\n"
            "y0[at] = (%s)(x0[at] / pow(%s + %s * sq, %s));\n}\n",
            (long long)x->dims[0], (long long)C, (long long)plane, (long long)((size - 1) / 2),
            (long long)((size - 1) / 2), (long long)(size / 2), (long long)(C - 1),
            (long long)(C - 1), (long long)(size / 2), (long long)C, (long long)plane,
            (long long)C, (long long)plane, cg_ctype(x->dtype), lbias, la, lb);
  return AP_OK;
}
