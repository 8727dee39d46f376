/* Normalizations: BatchNormalization (inference with the stored statistics,
 * or training_mode with batch statistics and updated running ones),
 * LayerNormalization, Softmax and LogSoftmax (opset < 13: softmax over the
 * input coerced to 2-D at axis; opset >= 13: over the one axis). Sums are
 * taken in double, each result rounded once. */
#include <string.h>

#include "codegen/codegen.h"

static ap_status need_float(cg_kernel *k, const cg_operand *o) {
  if (o->dtype != AP_DT_FLOAT && o->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(o->dtype));
  return AP_OK;
}

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= dims[i];
  return p;
}

ap_status cg_emit_BATCH_NORM(cg_kernel *k) {
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x);
  if (s != AP_OK)
    return s;
  char eps[64], mom[64];
  cg_literal(eps, AP_DT_DOUBLE, ap_attr_float(k->n, "epsilon", 1e-5f));
  cg_literal(mom, AP_DT_DOUBLE, ap_attr_float(k->n, "momentum", 0.9f));
  int64_t N = x->dims[0], C = x->rank > 1 ? x->dims[1] : 1, plane = prod(x->dims, 2, x->rank);
  int64_t per_channel = N * plane > 0 ? N * plane : 1;
  const char *ct = cg_ctype(x->dtype);
  bool training = cg_opset(k) >= 14 && ap_attr_int(k->n, "training_mode", 0) != 0;
  if (cg_opset(k) < 9 && ap_attr_int(k->n, "spatial", 1) == 0)
    return cg_error(k, AP_ERR_UNSUPPORTED, "spatial = 0 (per-element statistics) is not supported");
  for (int i = 3; i < k->n_out; i++)
    if (k->out[i].v)
      return cg_error(k, AP_ERR_UNSUPPORTED, "the saved mean and variance outputs are not supported");
  cg_printf(k, "for (int64_t c = 0; c < %lld; c++) {\n", (long long)C);
  if (training) {
    /* Batch statistics (population variance), as the ONNX reference. */
    cg_printf(k, "double sum = 0, sq = 0;\n"
                 "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t i = 0; i < %lld; i++)\n"
                 "  sum += x0[(n * %lld + c) * %lld + i];\n"
                 "const double mean = sum / %lld;\n"
                 "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t i = 0; i < %lld; i++) {\n"
                 "  const double d = x0[(n * %lld + c) * %lld + i] - mean;\n  sq += d * d;\n}\n"
                 "const double var = sq / %lld;\n",
              (long long)N, (long long)plane, (long long)C, (long long)plane,
              (long long)per_channel, (long long)N, (long long)plane,
              (long long)C, (long long)plane, (long long)per_channel);
    if (k->out[1].v)
      cg_printf(k, "y1[c] = (%s)(x3[c] * %s + mean * (1 - %s));\n", ct, mom, mom);
    if (k->out[2].v)
      cg_printf(k, "y2[c] = (%s)(x4[c] * %s + var * (1 - %s));\n", ct, mom, mom);
  } else {
    cg_printf(k, "const double mean = x3[c], var = x4[c];\n");
    /* Outputs only training defines: the statistics, unchanged. */
    for (int i = 1; i < k->n_out && i < 3; i++)
      if (k->out[i].v)
        cg_printf(k, "y%d[c] = x%d[c];\n", i, i + 2);
  }
  cg_printf(k, "const double scale = x1[c] / sqrt(var + %s), shift = x2[c];\n"
               "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t i = 0; i < %lld; i++) {\n"
               "  const int64_t at = (n * %lld + c) * %lld + i;\n"
               "  y0[at] = (%s)((x0[at] - mean) * scale + shift);\n}\n}\n",
            eps, (long long)N, (long long)plane, (long long)C, (long long)plane, ct);
  return AP_OK;
}

ap_status cg_emit_LAYER_NORM(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *scale = &k->in[1], *bias = &k->in[2];
  ap_status s = need_float(k, x);
  if (s != AP_OK)
    return s;
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", -1), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  char eps[64];
  cg_literal(eps, AP_DT_DOUBLE, ap_attr_float(k->n, "epsilon", 1e-5f));
  int64_t outer = prod(x->dims, 0, axis), inner = prod(x->dims, axis, x->rank);
  /* Scale and bias broadcast (numpy rules) over the normalized dims. */
  cg_operand norm = *x;
  norm.rank = x->rank - axis;
  memmove(norm.dims, x->dims + axis, (size_t)norm.rank * sizeof *norm.dims);
  int64_t ss[AP_MAX_RANK], bs[AP_MAX_RANK];
  cg_broadcast_strides(scale, norm.rank, ss);
  if (bias->v)
    cg_broadcast_strides(bias, norm.rank, bs);
  const char *ct = cg_ctype(x->dtype);
  cg_printf(k, "for (int64_t r = 0; r < %lld; r++) {\n"
               "const %s *xr = x0 + r * %lld;\n%s *yr = y0 + r * %lld;\n"
               "double sum = 0, sq = 0;\n"
               "for (int64_t i = 0; i < %lld; i++)\n  sum += xr[i];\n"
               "const double mean = sum / %lld;\n"
               "for (int64_t i = 0; i < %lld; i++) {\n  const double d = xr[i] - mean;\n  sq += d * d;\n}\n"
               "const double inv = 1.0 / sqrt(sq / %lld + %s);\n",
            (long long)outer, ct, (long long)inner, ct, (long long)inner, (long long)inner,
            (long long)(inner ? inner : 1), (long long)inner, (long long)(inner ? inner : 1), eps);
  if (k->out[1].v)
    cg_printf(k, "y1[r] = (%s)mean;\n", ct);
  if (k->out[2].v)
    cg_printf(k, "y2[r] = (%s)inv;\n", ct);
  char si[512], bi[512];
  cg_printf(k, "int64_t o = 0;\n");
  cg_loops_open(k, norm.rank, norm.dims, "i");
  cg_printf(k, "yr[o] = (%s)((xr[o] - mean) * inv * x1[%s]", ct,
            cg_index(si, sizeof si, norm.rank, ss, "i"));
  if (bias->v)
    cg_printf(k, " + x2[%s]", cg_index(bi, sizeof bi, norm.rank, bs, "i"));
  cg_printf(k, ");\no++;\n");
  cg_loops_close(k, norm.rank);
  cg_printf(k, "}\n");
  return AP_OK;
}

ap_status cg_softmax_geometry(cg_kernel *k, const cg_operand *x, int64_t *outer, int64_t *n,
                              int64_t *inner) {
  bool old = cg_opset(k) < 13;
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", old ? 1 : -1), x->rank);
  if (x->rank == 0)
    axis = 0;
  else if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  *outer = prod(x->dims, 0, axis);
  if (old) {
    *n = prod(x->dims, axis, x->rank);
    *inner = 1;
  } else {
    *n = x->rank ? x->dims[axis] : 1;
    *inner = prod(x->dims, axis + 1, x->rank);
  }
  return AP_OK;
}

/* Softmax over n elements spaced inner apart, for outer * inner rows. */
static ap_status softmax(cg_kernel *k, bool log_out) {
  const cg_operand *x = &k->in[0];
  ap_status s = need_float(k, x);
  if (s != AP_OK)
    return s;
  int64_t outer, n, inner;
  if ((s = cg_softmax_geometry(k, x, &outer, &n, &inner)) != AP_OK)
    return s;
  const char *ct = cg_ctype(x->dtype), *e = x->dtype == AP_DT_FLOAT ? "expf" : "exp";
  cg_printf(k, "for (int64_t r = 0; r < %lld; r++)\nfor (int64_t q = 0; q < %lld; q++) {\n"
               "const %s *xr = x0 + r * %lld + q;\n%s *yr = y0 + r * %lld + q;\n"
               "%s top = xr[0];\n"
               "for (int64_t i = 1; i < %lld; i++)\n  if (xr[i * %lld] > top)\n    top = xr[i * %lld];\n"
               "double sum = 0;\n",
            (long long)outer, (long long)inner, ct, (long long)(n * inner), ct,
            (long long)(n * inner), ct, (long long)n, (long long)inner, (long long)inner);
  if (log_out)
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  sum += %s(xr[i * %lld] - top);\n"
                 "const double lse = log(sum);\n"
                 "for (int64_t i = 0; i < %lld; i++)\n  yr[i * %lld] = (%s)((xr[i * %lld] - top) - lse);\n}\n",
              (long long)n, e, (long long)inner, (long long)n, (long long)inner, ct,
              (long long)inner);
  else
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++) {\n  yr[i * %lld] = %s(xr[i * %lld] - top);\n"
                 "  sum += yr[i * %lld];\n}\n"
                 "for (int64_t i = 0; i < %lld; i++)\n  yr[i * %lld] = (%s)(yr[i * %lld] / sum);\n}\n",
              (long long)n, (long long)inner, e, (long long)inner, (long long)inner,
              (long long)n, (long long)inner, ct, (long long)inner);
  return AP_OK;
}

ap_status cg_emit_SOFTMAX(cg_kernel *k) { return softmax(k, false); }
ap_status cg_emit_LOG_SOFTMAX(cg_kernel *k) { return softmax(k, true); }
