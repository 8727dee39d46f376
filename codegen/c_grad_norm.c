/* Backward of the normalizations. BatchNormalization trains its scale and
 * bias with the stored statistics frozen (DESIGN.md, "Execution model"), so
 * its backward is the affine map's: dx = dy scale / sqrt(var + eps).
 * LayerNormalization recomputes each row's mean and 1/std from x as its
 * forward does. Softmax and LogSoftmax read their output. Sums in double. */
#include <string.h>

#include "codegen/train.h"

static ap_status need_float(cg_kernel *k, ap_dtype t) {
  if (t != AP_DT_FLOAT && t != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(t));
  return AP_OK;
}

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= dims[i];
  return p;
}

static ap_status grad_batch_norm(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  if (cg_opset(k) >= 14 && ap_attr_int(k->n, "training_mode", 0) != 0)
    return cg_error(k, AP_ERR_UNSUPPORTED,
                    "training: BatchNormalization trains with its stored statistics; "
                    "training_mode = 1 (batch statistics) is not supported");
  char eps[64];
  cg_literal(eps, AP_DT_DOUBLE, ap_attr_float(k->n, "epsilon", 1e-5f));
  int64_t N = x->dims[0], C = x->rank > 1 ? x->dims[1] : 1, plane = prod(x->dims, 2, x->rank);
  const char *ct = cg_ctype(x->dtype);
  cg_printf(k, "for (int64_t c = 0; c < %lld; c++) {\n"
               "const double inv = 1.0 / sqrt((double)x4[c] + %s), mean = x3[c];\n"
               "double ds = 0, db = 0;\n"
               "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t i = 0; i < %lld; i++) {\n"
               "const int64_t at = (n * %lld + c) * %lld + i;\nconst double d = dy0[at];\n"
               "ds += d * (x0[at] - mean) * inv;\ndb += d;\n",
            (long long)C, eps, (long long)N, (long long)plane, (long long)C, (long long)plane);
  if (gk->want & 1)
    cg_printf(k, "dx0[at] %s (%s)(d * x1[c] * inv);\n", cg_grad_assign(gk, 0), ct);
  cg_printf(k, "}\n");
  if (gk->want & 2)
    cg_printf(k, "dx1[c] %s (%s)ds;\n", cg_grad_assign(gk, 1), ct);
  if (gk->want & 4)
    cg_printf(k, "dx2[c] %s (%s)db;\n", cg_grad_assign(gk, 2), ct);
  cg_printf(k, "(void)ds;\n(void)db;\n}\n");
  return AP_OK;
}

/* xhat = (x - mean) inv, y = xhat scale + bias over the dims from axis;
 * with g = dy scale: dx = inv (g - mean(g) - xhat mean(g xhat)). */
static ap_status grad_layer_norm(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *scale = &k->in[1], *bias = &k->in[2];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", -1), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  char eps[64];
  cg_literal(eps, AP_DT_DOUBLE, ap_attr_float(k->n, "epsilon", 1e-5f));
  int64_t outer = prod(x->dims, 0, axis), inner = prod(x->dims, axis, x->rank);
  int nr = x->rank - axis;
  const int64_t *ndims = x->dims + axis;
  int64_t ss[AP_MAX_RANK], bs[AP_MAX_RANK];
  cg_broadcast_strides(scale, nr, ss);
  if (bias->v)
    cg_broadcast_strides(bias, nr, bs);
  const char *ct = cg_ctype(x->dtype);
  char si[512], bi[512];
  cg_index(si, sizeof si, nr, ss, "i");
  if (gk->want & 2)
    cg_grad_zero(gk, 1);
  if (gk->want & 4) {
    cg_grad_zero(gk, 2);
    cg_index(bi, sizeof bi, nr, bs, "i");
  }
  int64_t in1 = inner ? inner : 1;
  cg_printf(k, "for (int64_t r = 0; r < %lld; r++) {\n"
               "const %s *xr = x0 + r * %lld, *dyr = dy0 + r * %lld;\n"
               "double sum = 0, sq = 0;\n"
               "for (int64_t i = 0; i < %lld; i++)\n  sum += xr[i];\n"
               "const double mean = sum / %lld;\n"
               "for (int64_t i = 0; i < %lld; i++) {\n  const double d = xr[i] - mean;\n  sq += d * d;\n}\n"
               "const double inv = 1.0 / sqrt(sq / %lld + %s);\n"
               "double s1 = 0, s2 = 0;\n{\nint64_t o = 0;\n",
            (long long)outer, ct, (long long)inner, (long long)inner, (long long)inner,
            (long long)in1, (long long)inner, (long long)in1, eps);
  cg_loops_open(k, nr, ndims, "i");
  cg_printf(k, "const double xh = (xr[o] - mean) * inv, g = (double)dyr[o] * x1[%s];\n"
               "s1 += g;\ns2 += g * xh;\n", si);
  if (gk->want & 2)
    cg_printf(k, "dx1[%s] += (%s)(dyr[o] * xh);\n", si, ct);
  if (gk->want & 4)
    cg_printf(k, "dx2[%s] += dyr[o];\n", bi);
  cg_printf(k, "o++;\n");
  cg_loops_close(k, nr);
  cg_printf(k, "}\n");
  if (gk->want & 1) {
    cg_printf(k, "%s *dxr = dx0 + r * %lld;\nint64_t o = 0;\n", ct, (long long)inner);
    cg_loops_open(k, nr, ndims, "i");
    cg_printf(k, "const double xh = (xr[o] - mean) * inv, g = (double)dyr[o] * x1[%s];\n"
                 "dxr[o] %s (%s)(inv * (g - s1 / %lld - xh * s2 / %lld));\no++;\n",
              si, cg_grad_assign(gk, 0), ct, (long long)in1, (long long)in1);
    cg_loops_close(k, nr);
  }
  cg_printf(k, "(void)s1;\n(void)s2;\n}\n");
  return AP_OK;
}

/* Along the softmax axis (n elements spaced inner apart):
 * softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy). */
static ap_status softmax(cg_grad_kernel *gk, bool log_out) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int64_t outer, n, inner;
  if ((s = cg_softmax_geometry(k, x, &outer, &n, &inner)) != AP_OK)
    return s;
  const char *ct = cg_ctype(x->dtype);
  char term[160];
  if (log_out)
    snprintf(term, sizeof term, "dy0[base + i * %lld]", (long long)inner);
  else
    snprintf(term, sizeof term, "(double)dy0[base + i * %lld] * y0[base + i * %lld]",
             (long long)inner, (long long)inner);
  cg_printf(k, "for (int64_t r = 0; r < %lld; r++)\nfor (int64_t q = 0; q < %lld; q++) {\n"
               "const int64_t base = r * %lld + q;\ndouble s = 0;\n"
               "for (int64_t i = 0; i < %lld; i++)\n  s += %s;\n"
               "for (int64_t i = 0; i < %lld; i++) {\n  const int64_t at = base + i * %lld;\n"
               "  dx0[at] %s (%s)(%s);\n}\n}\n",
            (long long)outer, (long long)inner, (long long)(n * inner), (long long)n, term,
            (long long)n, (long long)inner, cg_grad_assign(gk, 0), ct,
            log_out ? "dy0[at] - exp((double)y0[at]) * s" : "y0[at] * (dy0[at] - s)");
  return AP_OK;
}

static ap_status grad_softmax(cg_grad_kernel *gk) { return softmax(gk, false); }
static ap_status grad_log_softmax(cg_grad_kernel *gk) { return softmax(gk, true); }

const cg_grad_op cg_grad_ops_norm[AP_OP_COUNT] = {
    [AP_OP_BATCH_NORM] = {grad_batch_norm, 0x7, 0x1B, 0},
    [AP_OP_LAYER_NORM] = {grad_layer_norm, 0x7, 0x3, 0},
    [AP_OP_SOFTMAX] = {grad_softmax, 0x1, 0, 0x1},
    [AP_OP_LOG_SOFTMAX] = {grad_log_softmax, 0x1, 0, 0x1},
};
