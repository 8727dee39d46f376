/* Layers: Conv, ConvTranspose, Gemm, MatMul. Float32 2-D convolutions and
 * every float32 matrix product go through the project's kernels
 * (codegen/kernels: apk_conv2d_forward, apk_sgemm); other ranks and element
 * types use direct loops with the same ONNX semantics. */
#include <string.h>

#include "codegen/codegen.h"

static void ints_or(const ap_node *n, const char *name, int count, int64_t dflt, int64_t *out) {
  int c;
  const int64_t *v = ap_attr_ints(n, name, &c);
  for (int i = 0; i < count; i++)
    out[i] = v && i < c ? v[i] : dflt;
}

ap_status cg_window(cg_kernel *k, const cg_operand *x, const cg_operand *y,
                    const cg_operand *kernel_from, bool has_dilations, cg_win *w) {
  int nsp = x->rank - 2;
  memset(w, 0, sizeof *w);
  w->nsp = nsp;
  if (ap_attr_find(k->n, "kernel_shape"))
    ints_or(k->n, "kernel_shape", nsp, 1, w->kernel);
  else if (kernel_from)
    for (int i = 0; i < nsp; i++)
      w->kernel[i] = kernel_from->dims[i + 2];
  else
    return cg_error(k, AP_ERR_INVALID, "attribute 'kernel_shape' is required");
  ints_or(k->n, "strides", nsp, 1, w->stride);
  if (has_dilations)
    ints_or(k->n, "dilations", nsp, 1, w->dilation);
  else
    for (int i = 0; i < nsp; i++)
      w->dilation[i] = 1;
  int64_t pads[2 * AP_MAX_RANK];
  ints_or(k->n, "pads", 2 * nsp, 0, pads);
  const char *auto_pad = ap_attr_string(k->n, "auto_pad", "NOTSET");
  for (int i = 0; i < nsp; i++) {
    int64_t effk = (w->kernel[i] - 1) * w->dilation[i] + 1;
    if (strncmp(auto_pad, "SAME", 4) == 0) {
      int64_t total = (y->dims[i + 2] - 1) * w->stride[i] + effk - x->dims[i + 2];
      if (total < 0)
        total = 0;
      w->pad_begin[i] = strcmp(auto_pad, "SAME_LOWER") == 0 ? total - total / 2 : total / 2;
      w->pad_end[i] = total - w->pad_begin[i];
    } else if (strcmp(auto_pad, "VALID") == 0) {
      w->pad_begin[i] = w->pad_end[i] = 0;
    } else {
      w->pad_begin[i] = pads[i];
      w->pad_end[i] = pads[i + nsp];
    }
  }
  return AP_OK;
}

static ap_status need_type(cg_kernel *k, ap_dtype t) {
  if (t != AP_DT_FLOAT && t != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(t));
  return AP_OK;
}

/* ---- Conv ---------------------------------------------------------------- */

void cg_conv2d_params(char *buf, size_t cap, const cg_operand *x, const cg_operand *wt,
                      int64_t group, const cg_win *w) {
  snprintf(buf, cap,
           "{.batch = %lld, .in_channels = %lld, .in_h = %lld, .in_w = %lld, "
           ".out_channels = %lld, .kernel_h = %lld, .kernel_w = %lld, .stride_h = %lld, "
           ".stride_w = %lld, .pad_top = %lld, .pad_left = %lld, .pad_bottom = %lld, "
           ".pad_right = %lld, .dilation_h = %lld, .dilation_w = %lld, .groups = %lld}",
           (long long)x->dims[0], (long long)x->dims[1], (long long)x->dims[2],
           (long long)x->dims[3], (long long)wt->dims[0], (long long)w->kernel[0],
           (long long)w->kernel[1], (long long)w->stride[0], (long long)w->stride[1],
           (long long)w->pad_begin[0], (long long)w->pad_begin[1], (long long)w->pad_end[0],
           (long long)w->pad_end[1], (long long)w->dilation[0], (long long)w->dilation[1],
           (long long)group);
}

ap_status cg_emit_CONV(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *wt = &k->in[1], *b = &k->in[2], *y = &k->out[0];
  ap_status s = need_type(k, x->dtype);
  if (s != AP_OK)
    return s;
  cg_win w;
  if ((s = cg_window(k, x, y, wt, true, &w)) != AP_OK)
    return s;
  int64_t group = ap_attr_int(k->n, "group", 1);
  if (x->dtype == AP_DT_FLOAT && w.nsp == 2) {
    char p[1024];
    cg_conv2d_params(p, sizeof p, x, wt, group, &w);
    cg_printf(k, "static const apk_conv2d p = %s;\n", p);
    cg_printf(k, "apk_conv2d_forward(&p, x0, x1, %s, y0, work);\n", b->v ? "x2" : "NULL");
    if (snprintf(k->work_expr, sizeof k->work_expr, "apk_conv2d_work_floats(&(apk_conv2d)%s)",
                 p) >= (int)sizeof k->work_expr)
      ap_die("workspace expression too long");
    k->needs_kernels_lib = true;
    return AP_OK;
  }
  /* Direct loops: any rank, float64. */
  const char *ct = cg_ctype(x->dtype);
  int nsp = w.nsp;
  int64_t cg = wt->dims[1], mg = wt->dims[0] / group;
  int64_t xs[AP_MAX_RANK], ws[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_strides(wt->rank, wt->dims, ws);
  cg_printf(k, "int64_t o = 0;\n");
  cg_printf(k, "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t m = 0; m < %lld; m++) {\n",
            (long long)y->dims[0], (long long)y->dims[1]);
  cg_printf(k, "const int64_t g = m / %lld;\n", (long long)mg);
  cg_loops_open(k, nsp, y->dims + 2, "o");
  cg_printf(k, "%s acc = %s;\n", ct, b->v ? "x2[m]" : "0");
  cg_printf(k, "for (int64_t c = 0; c < %lld; c++) {\n", (long long)cg);
  cg_loops_open(k, nsp, w.kernel, "k");
  cg_printf(k, "int inside = 1;\n");
  for (int i = 0; i < nsp; i++)
    cg_printf(k, "const int64_t p%d = o%d * %lld - %lld + k%d * %lld;\ninside &= p%d >= 0 && p%d < %lld;\n",
              i, i, (long long)w.stride[i], (long long)w.pad_begin[i], i,
              (long long)w.dilation[i], i, i, (long long)x->dims[i + 2]);
  cg_printf(k, "if (inside)\n  acc += x0[n * %lld + (g * %lld + c) * %lld", (long long)xs[0],
            (long long)cg, (long long)xs[1]);
  for (int i = 0; i < nsp; i++)
    cg_printf(k, " + p%d * %lld", i, (long long)xs[i + 2]);
  cg_printf(k, "] * x1[m * %lld + c * %lld", (long long)ws[0], (long long)ws[1]);
  for (int i = 0; i < nsp; i++)
    cg_printf(k, " + k%d * %lld", i, (long long)ws[i + 2]);
  cg_printf(k, "];\n");
  cg_loops_close(k, nsp);
  cg_printf(k, "}\ny0[o++] = acc;\n");
  cg_loops_close(k, nsp);
  cg_printf(k, "}\n");
  return AP_OK;
}

/* ---- ConvTranspose ------------------------------------------------------- */

/* Python's floor division, as the ONNX reference computes pads. */
static int64_t floor_div2(int64_t a) { return a >= 0 ? a / 2 : -((-a + 1) / 2); }

/* The geometry of ConvTranspose node k for input x, weight wt and output
 * y, for the forward and its gradient alike: kernel, strides, dilations and
 * the begin pad, which fixes where input index 0 lands (the output's extent
 * is the inferred shape). With output_shape or SAME, the begin pad comes from
 * the total padding as in the ONNX reference. */
void cg_conv_transpose_geometry(const cg_kernel *k, const cg_operand *x, const cg_operand *wt,
                                const cg_operand *y, int64_t *kernel, int64_t *stride,
                                int64_t *dil, int64_t *pad_begin) {
  int nsp = x->rank - 2;
  int64_t pads[2 * AP_MAX_RANK], outpad[AP_MAX_RANK];
  if (ap_attr_find(k->n, "kernel_shape"))
    ints_or(k->n, "kernel_shape", nsp, 1, kernel);
  else
    for (int i = 0; i < nsp; i++)
      kernel[i] = wt->dims[i + 2];
  ints_or(k->n, "strides", nsp, 1, stride);
  ints_or(k->n, "dilations", nsp, 1, dil);
  ints_or(k->n, "pads", 2 * nsp, 0, pads);
  ints_or(k->n, "output_padding", nsp, 0, outpad);
  const char *auto_pad = ap_attr_string(k->n, "auto_pad", "NOTSET");
  bool has_output_shape = ap_attr_find(k->n, "output_shape") != NULL;
  for (int i = 0; i < nsp; i++) {
    int64_t total = stride[i] * (x->dims[i + 2] - 1) + outpad[i] +
                    (kernel[i] - 1) * dil[i] + 1 - y->dims[i + 2];
    if (strcmp(auto_pad, "SAME_UPPER") == 0)
      pad_begin[i] = floor_div2(total);
    else if (strcmp(auto_pad, "SAME_LOWER") == 0 || has_output_shape)
      pad_begin[i] = total - floor_div2(total);
    else if (strcmp(auto_pad, "VALID") == 0)
      pad_begin[i] = 0;
    else
      pad_begin[i] = pads[i];
  }
}

ap_status cg_emit_CONV_TRANSPOSE(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *wt = &k->in[1], *b = &k->in[2], *y = &k->out[0];
  ap_status s = need_type(k, x->dtype);
  if (s != AP_OK)
    return s;
  int nsp = x->rank - 2;
  int64_t group = ap_attr_int(k->n, "group", 1);
  int64_t kernel[AP_MAX_RANK], stride[AP_MAX_RANK], dil[AP_MAX_RANK], pb[AP_MAX_RANK];
  cg_conv_transpose_geometry(k, x, wt, y, kernel, stride, dil, pb);
  const char *ct = cg_ctype(x->dtype);
  int64_t cg = x->dims[1] / group, mg = wt->dims[1];
  int64_t xs[AP_MAX_RANK], ws[AP_MAX_RANK], ys[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_strides(wt->rank, wt->dims, ws);
  cg_strides(y->rank, y->dims, ys);
  /* Bias (or zero) first, then every input element scatters its window. */
  cg_printf(k, "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t m = 0; m < %lld; m++)\n"
               "for (int64_t i = 0; i < %lld; i++)\n  y0[(n * %lld + m) * %lld + i] = %s;\n",
            (long long)y->dims[0], (long long)y->dims[1], (long long)ys[1],
            (long long)y->dims[1], (long long)ys[1], b->v ? "x2[m]" : "0");
  cg_printf(k, "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t c = 0; c < %lld; c++) {\n",
            (long long)x->dims[0], (long long)x->dims[1]);
  cg_printf(k, "const int64_t g = c / %lld;\n", (long long)cg);
  cg_loops_open(k, nsp, x->dims + 2, "i");
  cg_printf(k, "const %s v = x0[n * %lld + c * %lld", ct, (long long)xs[0], (long long)xs[1]);
  for (int i = 0; i < nsp; i++)
    cg_printf(k, " + i%d * %lld", i, (long long)xs[i + 2]);
  cg_printf(k, "];\nfor (int64_t m = 0; m < %lld; m++) {\n", (long long)mg);
  cg_loops_open(k, nsp, kernel, "k");
  cg_printf(k, "int inside = 1;\n");
  for (int i = 0; i < nsp; i++)
    cg_printf(k, "const int64_t p%d = i%d * %lld + k%d * %lld - %lld;\ninside &= p%d >= 0 && p%d < %lld;\n",
              i, i, (long long)stride[i], i, (long long)dil[i], (long long)pb[i], i, i,
              (long long)y->dims[i + 2]);
  cg_printf(k, "if (inside)\n  y0[n * %lld + (g * %lld + m) * %lld", (long long)ys[0],
            (long long)mg, (long long)ys[1]);
  for (int i = 0; i < nsp; i++)
    cg_printf(k, " + p%d * %lld", i, (long long)ys[i + 2]);
  cg_printf(k, "] += v * x1[c * %lld + m * %lld", (long long)ws[0], (long long)ws[1]);
  for (int i = 0; i < nsp; i++)
    cg_printf(k, " + k%d * %lld", i, (long long)ws[i + 2]);
  cg_printf(k, "];\n");
  cg_loops_close(k, nsp);
  cg_printf(k, "}\n");
  cg_loops_close(k, nsp);
  cg_printf(k, "}\n");
  return AP_OK;
}

/* ---- Gemm and MatMul ----------------------------------------------------- */

/* Y (m x n) = alpha * op(A) op(B) + beta * Y in float32 through apk_sgemm,
 * with A at a, B at b and Y at y (C expressions). */
static void sgemm(cg_kernel *k, int ta, int tb, int64_t m, int64_t n, int64_t kk,
                  const char *alpha, const char *a, const char *b, const char *beta,
                  const char *y) {
  int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
  cg_printf(k, "apk_sgemm(%d, %d, %lld, %lld, %lld, %s, %s, %lld, %s, %lld, %s, %s, %lld, work);\n",
            ta, tb, (long long)m, (long long)n, (long long)kk, alpha, a, (long long)lda, b,
            (long long)ldb, beta, y, (long long)n);
  k->needs_kernels_lib = true;
}

ap_status cg_emit_GEMM(cg_kernel *k) {
  const cg_operand *c = &k->in[2], *y = &k->out[0];
  ap_dtype t = y->dtype;
  ap_status s = need_type(k, t);
  if (s != AP_OK)
    return s;
  int ta = ap_attr_int(k->n, "transA", 0) != 0, tb = ap_attr_int(k->n, "transB", 0) != 0;
  int64_t m = y->dims[0], n = y->dims[1];
  int64_t kk = ta ? k->in[0].dims[0] : k->in[0].dims[1];
  char alpha[64], beta[64];
  cg_literal(alpha, t, ap_attr_float(k->n, "alpha", 1.0f));
  cg_literal(beta, t, c->v ? ap_attr_float(k->n, "beta", 1.0f) : 0.0);
  if (c->v) { /* Y starts as C broadcast to m x n; the product adds beta * Y. */
    int slot = 2;
    cg_map(k, 0, 1, &slot, "a0");
  }
  if (t == AP_DT_FLOAT) {
    snprintf(k->work_expr, sizeof k->work_expr, "apk_sgemm_work_floats(%lld, %lld, %lld)",
             (long long)m, (long long)n, (long long)kk);
    sgemm(k, ta, tb, m, n, kk, alpha, "x0", "x1", beta, "y0");
    return AP_OK;
  }
  /* float64: direct loops. */
  char ai[64], bi[64];
  snprintf(ai, sizeof ai, ta ? "l * %lld + i" : "i * %lld + l", (long long)(ta ? m : kk));
  snprintf(bi, sizeof bi, tb ? "j * %lld + l" : "l * %lld + j", (long long)(tb ? kk : n));
  cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\nfor (int64_t j = 0; j < %lld; j++) {\n"
               "double acc = 0;\nfor (int64_t l = 0; l < %lld; l++)\n  acc += x0[%s] * x1[%s];\n"
               "y0[i * %lld + j] = %s * acc",
            (long long)m, (long long)n, (long long)kk, ai, bi, (long long)n, alpha);
  if (c->v)
    cg_printf(k, " + %s * y0[i * %lld + j]", beta, (long long)n);
  cg_printf(k, ";\n}\n");
  return AP_OK;
}

ap_status cg_emit_MATMUL(cg_kernel *k) {
  const cg_operand *a = &k->in[0], *b = &k->in[1], *y = &k->out[0];
  ap_dtype t = y->dtype;
  ap_status s = need_type(k, t);
  if (s != AP_OK)
    return s;
  /* 1-D operands: A is a row [1, K], B a column [K, 1]; the output drops the
   * added dim, which leaves its memory layout unchanged. */
  int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - 2];
  int64_t kk = a->dims[a->rank - 1];
  int64_t n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
  int ra = a->rank >= 2 ? a->rank - 2 : 0, rb = b->rank >= 2 ? b->rank - 2 : 0;
  int rbatch = ra > rb ? ra : rb;
  int64_t bdims[AP_MAX_RANK], sa[AP_MAX_RANK], sb[AP_MAX_RANK], sy[AP_MAX_RANK];
  for (int i = 0; i < rbatch; i++) {
    int ia = i - (rbatch - ra), ib = i - (rbatch - rb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    bdims[i] = da > db ? da : db;
  }
  /* Batch strides in matrices: 0 where an operand is broadcast. */
  int64_t acc_a = m * kk, acc_b = kk * n, acc_y = m * n;
  for (int i = rbatch - 1; i >= 0; i--) {
    int ia = i - (rbatch - ra), ib = i - (rbatch - rb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    sa[i] = da == 1 ? 0 : acc_a;
    sb[i] = db == 1 ? 0 : acc_b;
    sy[i] = acc_y;
    acc_a *= da;
    acc_b *= db;
    acc_y *= bdims[i];
  }
  if (t == AP_DT_FLOAT)
    snprintf(k->work_expr, sizeof k->work_expr, "apk_sgemm_work_floats(%lld, %lld, %lld)",
             (long long)m, (long long)n, (long long)kk);
  char ia[512], ib[512], iy[512], pa[600], pb[600], py[600];
  cg_loops_open(k, rbatch, bdims, "b");
  snprintf(pa, sizeof pa, "x0 + %s", cg_index(ia, sizeof ia, rbatch, sa, "b"));
  snprintf(pb, sizeof pb, "x1 + %s", cg_index(ib, sizeof ib, rbatch, sb, "b"));
  snprintf(py, sizeof py, "y0 + %s", cg_index(iy, sizeof iy, rbatch, sy, "b"));
  if (t == AP_DT_FLOAT) {
    sgemm(k, 0, 0, m, n, kk, "1.0f", pa, pb, "0.0f", py);
  } else {
    const char *ct = cg_ctype(t);
    cg_printf(k, "{\nconst %s *A = %s, *B = %s;\n%s *Y = %s;\n", ct, pa, pb, ct, py);
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\nfor (int64_t j = 0; j < %lld; j++) {\n"
                 "%s acc = 0;\nfor (int64_t l = 0; l < %lld; l++)\n  acc += A[i * %lld + l] * B[l * %lld + j];\n"
                 "Y[i * %lld + j] = acc;\n}\n}\n",
              (long long)m, (long long)n, ct, (long long)kk, (long long)kk, (long long)n,
              (long long)n);
  }
  cg_loops_close(k, rbatch);
  return AP_OK;
}
