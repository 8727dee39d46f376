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
  cg_win_open(k, x, y, &w);
  cg_printf(k, "%s best = 0;\nint64_t at = -1;\n", cg_ctype(x->dtype));
  cg_win_taps(k, &w);
  cg_printf(k, "if (");
  cg_win_inside(k, x, &w, false);
  cg_printf(k, ") {\nconst int64_t i = ");
  cg_win_x_index(k, x, w.nsp);
  cg_printf(k, ";\nif (x0[i] > best || at < 0) {\nbest = x0[i];\nat = i;\n}\n}\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "if (at >= 0)\n  dx0[at] += dy0[o];\no++;\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "}\n");
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
  cg_win_open(k, x, y, &w);
  cg_printf(k, "int64_t count = 0;\n");
  cg_win_taps(k, &w);
  cg_printf(k, "if (");
  cg_win_inside(k, x, &w, include_pad);
  cg_printf(k, ")\n  count++;\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "if (count) {\nconst double d = dy0[o] / (double)count;\n");
  cg_win_taps(k, &w);
  cg_printf(k, "if (");
  cg_win_inside(k, x, &w, false);
  cg_printf(k, ")\n  dx0[");
  cg_win_x_index(k, x, w.nsp);
  cg_printf(k, "] += d;\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "}\no++;\n");
  cg_loops_close(k, w.nsp);
  cg_printf(k, "}\n");
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
  const char *ct = cg_ctype(x->dtype), *op = cg_grad_assign(gk, 0);
  cg_printf(k, "for (int64_t nc = 0; nc < %lld; nc++) {\n", (long long)(x->dims[0] * x->dims[1]));
  if (max)
    cg_printf(k, "int64_t at = 0;\nfor (int64_t i = 1; i < %lld; i++)\n"
                 "  if (x0[nc * %lld + i] > x0[nc * %lld + at])\n    at = i;\n"
                 "for (int64_t i = 0; i < %lld; i++)\n"
                 "  dx0[nc * %lld + i] %s (%s)(i == at ? dy0[nc] : 0);\n}\n",
              (long long)plane, (long long)plane, (long long)plane, (long long)plane,
              (long long)plane, op, ct);
  else
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  dx0[nc * %lld + i] %s (%s)(dy0[nc] / %lld.0);\n}\n",
              (long long)plane, (long long)plane, op, ct, (long long)(plane ? plane : 1));
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
  int64_t C = x->dims[1], plane = 1, lo = (size - 1) / 2, hi = size / 2;
  for (int i = 2; i < x->rank; i++)
    plane *= x->dims[i];
  char la[64], lb[64], lbias[64];
  cg_literal(la, AP_DT_DOUBLE, alpha / (double)size);
  cg_literal(lb, AP_DT_DOUBLE, beta);
  cg_literal(lbias, AP_DT_DOUBLE, bias);
  snprintf(k->work_expr, sizeof k->work_expr, "(size_t)%lld", (long long)(2 * C));
  cg_printf(k,
            "double *den = (double *)(void *)work;\n"
            "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t i = 0; i < %lld; i++) {\n"
            "const int64_t base = n * %lld + i;\n"
            "for (int64_t c = 0; c < %lld; c++) {\n"
            "const int64_t a = c - %lld < 0 ? 0 : c - %lld, b = c + %lld > %lld ? %lld : c + %lld;\n"
            "double sq = 0;\nfor (int64_t j = a; j <= b; j++) {\n"
            "  const double v = x0[base + j * %lld];\n  sq += v * v;\n}\n"
            "den[c] = %s + %s * sq;\n}\n",
            (long long)x->dims[0], (long long)plane, (long long)(C * plane), (long long)C,
            (long long)lo, (long long)lo, (long long)hi, (long long)(C - 1), (long long)(C - 1),
            (long long)hi, (long long)plane, lbias, la);
  cg_printf(k,
            "for (int64_t j = 0; j < %lld; j++) {\n"
            "const int64_t a = j - %lld < 0 ? 0 : j - %lld, b = j + %lld > %lld ? %lld : j + %lld;\n"
            "double sum = 0;\nfor (int64_t c = a; c <= b; c++) {\n"
            "  const int64_t at = base + c * %lld;\n"
            "  sum += dy0[at] * x0[at] * pow(den[c], -%s - 1);\n}\n"
            "const int64_t at = base + j * %lld;\n"
            "dx0[at] %s (%s)(dy0[at] * pow(den[j], -%s) - 2 * %s * %s * x0[at] * sum);\n}\n}\n",
            (long long)C, (long long)hi, (long long)hi, (long long)lo, (long long)(C - 1),
            (long long)(C - 1), (long long)lo, (long long)plane, lb, (long long)plane,
            cg_grad_assign(gk, 0), cg_ctype(x->dtype), lb, la, lb);
  return AP_OK;
}

const cg_grad_op cg_grad_ops_pool[AP_OP_COUNT] = {
    [AP_OP_MAX_POOL] = {grad_max_pool, 0x1, 0x1, 0},
    [AP_OP_AVERAGE_POOL] = {grad_average_pool, 0x1, 0, 0},
    [AP_OP_GLOBAL_AVERAGE_POOL] = {grad_global_average_pool, 0x1, 0, 0},
    [AP_OP_GLOBAL_MAX_POOL] = {grad_global_max_pool, 0x1, 0x1, 0},
    [AP_OP_LRN] = {grad_lrn, 0x1, 0x1, 0},
};
