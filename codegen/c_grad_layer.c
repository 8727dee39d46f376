/* Backward of the layers: Conv, ConvTranspose, Gemm, MatMul. Float32 2-D convolutions use
 * the project's kernels (apk_conv2d_backward_data, _backward_weights) and
 * every float32 matrix product apk_sgemm; float64 and other spatial ranks
 * use direct loops with the forward's window. The kernels overwrite their
 * outputs, so a gradient that accumulates is computed into the workspace
 * first and added. */
#include <string.h>

#include "codegen/train.h"

static ap_status need_float(cg_kernel *k, ap_dtype t) {
  if (t != AP_DT_FLOAT && t != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(t));
  return AP_OK;
}

static bool wants(const cg_grad_kernel *gk, int slot) { return gk->want >> slot & 1; }
static bool accs(const cg_grad_kernel *gk, int slot) { return gk->acc >> slot & 1; }

/* Floats rounded up to a 64-byte multiple, so workspace regions stay aligned. */
static int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

/* ---- Conv ----------------------------------------------------------------- */

/* dx2 (the per-channel bias of Conv and ConvTranspose) from dy0 [N, C,
 * plane]: the sum over the batch and the plane of each channel. */
static void channel_bias_grad(cg_grad_kernel *gk, const cg_operand *y, int64_t plane) {
  cg_printf(gk->k, "for (int64_t m = 0; m < %lld; m++) {\ndouble s = 0;\n"
                   "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t i = 0; i < %lld; i++)\n"
                   "  s += dy0[(n * %lld + m) * %lld + i];\ndx2[m] %s s;\n}\n",
            (long long)y->dims[1], (long long)y->dims[0], (long long)plane,
            (long long)y->dims[1], (long long)plane, cg_grad_assign(gk, 2));
}

/* dx<slot> += t over n elements (the accumulate half of a kernel that
 * overwrites). */
static void add_from(cg_kernel *k, int slot, const char *t, int64_t n) {
  cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  dx%d[i] += %s[i];\n", (long long)n, slot, t);
}

static void conv2d_backward_f32(cg_grad_kernel *gk, const cg_win *w, int64_t group) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *wt = &k->in[1];
  int64_t M = wt->dims[0];
  char p[1024];
  cg_conv2d_params(p, sizeof p, x, wt, group, w);
  cg_printf(k, "static const apk_conv2d p = %s;\n", p);
  /* Workspace: [temporaries for accumulating outputs][the kernels' own]. */
  int64_t tx = wants(gk, 0) && accs(gk, 0) ? round16(x->numel) : 0;
  int64_t tw = wants(gk, 1) && accs(gk, 1) ? round16(wt->numel) : 0;
  bool wgt = wants(gk, 1) || wants(gk, 2);
  if (wants(gk, 2) && !wants(gk, 1))
    tw = round16(wt->numel); /* the kernel computes dW with dbias: a scratch dW */
  int64_t tb = wants(gk, 2) && accs(gk, 2) ? round16(M) : 0;
  int64_t temps = tx > tw + tb ? tx : tw + tb;
  if (wants(gk, 0)) {
    if (tx) {
      cg_printf(k, "apk_conv2d_backward_data(&p, dy0, x1, work, work + %lld);\n", (long long)temps);
      add_from(k, 0, "work", x->numel);
    } else {
      cg_printf(k, "apk_conv2d_backward_data(&p, dy0, x1, dx0, work + %lld);\n", (long long)temps);
    }
  }
  if (wgt) {
    char dw[64], db[64];
    snprintf(dw, sizeof dw, "%s", tw ? "work" : "dx1");
    if (!wants(gk, 2))
      snprintf(db, sizeof db, "NULL");
    else if (tb)
      snprintf(db, sizeof db, "work + %lld", (long long)tw);
    else
      snprintf(db, sizeof db, "dx2");
    cg_printf(k, "apk_conv2d_backward_weights(&p, x0, dy0, %s, %s, work + %lld);\n", dw, db,
              (long long)temps);
    if (wants(gk, 1) && tw)
      add_from(k, 1, "work", wt->numel);
    if (tb)
      add_from(k, 2, db, M);
  }
  if (snprintf(k->work_expr, sizeof k->work_expr,
               "%lld + apk_conv2d_work_floats(&(apk_conv2d)%s)", (long long)temps,
               p) >= (int)sizeof k->work_expr)
    ap_die("workspace expression too long");
  k->needs_kernels_lib = true;
}

/* Direct loops over every (n, m, output position, c, tap): any spatial
 * rank, float64. dx and dW are scatter-adds, zeroed first unless they
 * accumulate. */
static void conv_backward_loops(cg_grad_kernel *gk, const cg_win *w, int64_t group) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *wt = &k->in[1], *y = &k->out[0];
  int nsp = w->nsp;
  int64_t cgrp = wt->dims[1], mg = wt->dims[0] / group;
  int64_t xs[AP_MAX_RANK], ws[AP_MAX_RANK], plane = 1;
  cg_strides(x->rank, x->dims, xs);
  cg_strides(wt->rank, wt->dims, ws);
  for (int i = 0; i < nsp; i++)
    plane *= y->dims[i + 2];
  if (wants(gk, 0))
    cg_grad_zero(gk, 0);
  if (wants(gk, 1))
    cg_grad_zero(gk, 1);
  if (wants(gk, 0) || wants(gk, 1)) {
    cg_printf(k, "{\nint64_t o = 0;\n");
    cg_printf(k, "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t m = 0; m < %lld; m++) {\n",
              (long long)y->dims[0], (long long)y->dims[1]);
    cg_printf(k, "const int64_t g = m / %lld;\n", (long long)mg);
    cg_loops_open(k, nsp, y->dims + 2, "o");
    cg_printf(k, "const double d = dy0[o++];\n");
    cg_printf(k, "for (int64_t c = 0; c < %lld; c++) {\n", (long long)cgrp);
    cg_loops_open(k, nsp, w->kernel, "k");
    cg_printf(k, "int inside = 1;\n");
    for (int i = 0; i < nsp; i++)
      cg_printf(k, "const int64_t p%d = o%d * %lld - %lld + k%d * %lld;\n"
                   "inside &= p%d >= 0 && p%d < %lld;\n",
                i, i, (long long)w->stride[i], (long long)w->pad_begin[i], i,
                (long long)w->dilation[i], i, i, (long long)x->dims[i + 2]);
    cg_printf(k, "if (inside) {\nconst int64_t xi = n * %lld + (g * %lld + c) * %lld",
              (long long)xs[0], (long long)cgrp, (long long)xs[1]);
    for (int i = 0; i < nsp; i++)
      cg_printf(k, " + p%d * %lld", i, (long long)xs[i + 2]);
    cg_printf(k, ";\nconst int64_t wi = m * %lld + c * %lld", (long long)ws[0], (long long)ws[1]);
    for (int i = 0; i < nsp; i++)
      cg_printf(k, " + k%d * %lld", i, (long long)ws[i + 2]);
    cg_printf(k, ";\n");
    if (wants(gk, 0))
      cg_printf(k, "dx0[xi] += d * x1[wi];\n");
    if (wants(gk, 1))
      cg_printf(k, "dx1[wi] += d * x0[xi];\n");
    cg_printf(k, "}\n");
    cg_loops_close(k, nsp);
    cg_printf(k, "}\n");
    cg_loops_close(k, nsp);
    cg_printf(k, "}\n}\n");
  }
  if (wants(gk, 2))
    channel_bias_grad(gk, y, plane);
}

static ap_status grad_conv(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *wt = &k->in[1], *y = &k->out[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  cg_win w;
  if ((s = cg_window(k, x, y, wt, true, &w)) != AP_OK)
    return s;
  int64_t group = ap_attr_int(k->n, "group", 1);
  if (x->dtype == AP_DT_FLOAT && w.nsp == 2)
    conv2d_backward_f32(gk, &w, group);
  else
    conv_backward_loops(gk, &w, group);
  return AP_OK;
}

/* ---- ConvTranspose ------------------------------------------------------- */

/* The forward scatters x[n, c, i] * w[c, m, k] into y[n, g mg + m,
 * i stride + k dilation - pad]; the backward walks the same loops and
 * gathers: dx from dy and w, dW from dy and x, with the forward's geometry
 * (cg_conv_transpose_geometry). */
static ap_status grad_conv_transpose(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *wt = &k->in[1], *y = &k->out[0];
  ap_status s = need_float(k, x->dtype);
  if (s != AP_OK)
    return s;
  int nsp = x->rank - 2;
  int64_t group = ap_attr_int(k->n, "group", 1);
  int64_t kernel[AP_MAX_RANK], stride[AP_MAX_RANK], dil[AP_MAX_RANK], pb[AP_MAX_RANK];
  cg_conv_transpose_geometry(k, x, wt, y, kernel, stride, dil, pb);
  int64_t cg = x->dims[1] / group, mg = wt->dims[1], plane = 1;
  int64_t xs[AP_MAX_RANK], ws[AP_MAX_RANK], ys[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_strides(wt->rank, wt->dims, ws);
  cg_strides(y->rank, y->dims, ys);
  for (int i = 0; i < nsp; i++)
    plane *= y->dims[i + 2];
  if (wants(gk, 0))
    cg_grad_zero(gk, 0);
  if (wants(gk, 1))
    cg_grad_zero(gk, 1);
  if (wants(gk, 0) || wants(gk, 1)) {
    cg_printf(k, "for (int64_t n = 0; n < %lld; n++)\nfor (int64_t c = 0; c < %lld; c++) {\n",
              (long long)x->dims[0], (long long)x->dims[1]);
    cg_printf(k, "const int64_t g = c / %lld;\n", (long long)cg);
    cg_loops_open(k, nsp, x->dims + 2, "i");
    cg_printf(k, "const int64_t xi = n * %lld + c * %lld", (long long)xs[0], (long long)xs[1]);
    for (int i = 0; i < nsp; i++)
      cg_printf(k, " + i%d * %lld", i, (long long)xs[i + 2]);
    cg_printf(k, ";\nfor (int64_t m = 0; m < %lld; m++) {\n", (long long)mg);
    cg_loops_open(k, nsp, kernel, "k");
    cg_printf(k, "int inside = 1;\n");
    for (int i = 0; i < nsp; i++)
      cg_printf(k, "const int64_t p%d = i%d * %lld + k%d * %lld - %lld;\n"
                   "inside &= p%d >= 0 && p%d < %lld;\n",
                i, i, (long long)stride[i], i, (long long)dil[i], (long long)pb[i], i, i,
                (long long)y->dims[i + 2]);
    cg_printf(k, "if (inside) {\nconst int64_t yi = n * %lld + (g * %lld + m) * %lld",
              (long long)ys[0], (long long)mg, (long long)ys[1]);
    for (int i = 0; i < nsp; i++)
      cg_printf(k, " + p%d * %lld", i, (long long)ys[i + 2]);
    cg_printf(k, ";\nconst int64_t wi = c * %lld + m * %lld", (long long)ws[0], (long long)ws[1]);
    for (int i = 0; i < nsp; i++)
      cg_printf(k, " + k%d * %lld", i, (long long)ws[i + 2]);
    cg_printf(k, ";\n");
    if (wants(gk, 0))
      cg_printf(k, "dx0[xi] += dy0[yi] * x1[wi];\n");
    if (wants(gk, 1))
      cg_printf(k, "dx1[wi] += dy0[yi] * x0[xi];\n");
    cg_printf(k, "}\n");
    cg_loops_close(k, nsp);
    cg_printf(k, "}\n");
    cg_loops_close(k, nsp);
    cg_printf(k, "}\n");
  }
  if (wants(gk, 2))
    channel_bias_grad(gk, y, plane);
  return AP_OK;
}

/* ---- Gemm ----------------------------------------------------------------- */

static void sgemm_work(cg_kernel *k, int64_t m, int64_t n, int64_t kk) {
  if (k->in[0].dtype != AP_DT_FLOAT)
    return;
  size_t len = strlen(k->work_expr);
  snprintf(k->work_expr + len, sizeof k->work_expr - len, "%sapk_sgemm_work_floats(%lld, %lld, %lld)",
           len ? " + " : "", (long long)m, (long long)n, (long long)kk);
}

/* Y = alpha op(A) op(B) + beta C, with op(A) m x kk and op(B) kk x n. */
static ap_status grad_gemm(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *y = &k->out[0];
  ap_dtype t = y->dtype;
  ap_status s = need_float(k, t);
  if (s != AP_OK)
    return s;
  int ta = ap_attr_int(k->n, "transA", 0) != 0, tb = ap_attr_int(k->n, "transB", 0) != 0;
  double alpha = ap_attr_float(k->n, "alpha", 1.0f), beta = ap_attr_float(k->n, "beta", 1.0f);
  int64_t m = y->dims[0], n = y->dims[1];
  int64_t kk = ta ? k->in[0].dims[0] : k->in[0].dims[1];
  if (wants(gk, 0)) {
    if (!ta)
      cg_grad_gemm(k, t, 0, tb ? 0 : 1, m, kk, n, alpha, "dy0", "x1", accs(gk, 0), "dx0");
    else
      cg_grad_gemm(k, t, tb ? 1 : 0, 1, kk, m, n, alpha, "x1", "dy0", accs(gk, 0), "dx0");
    sgemm_work(k, ta ? kk : m, ta ? m : kk, n);
  }
  if (wants(gk, 1)) {
    if (!tb)
      cg_grad_gemm(k, t, ta ? 0 : 1, 0, kk, n, m, alpha, "x0", "dy0", accs(gk, 1), "dx1");
    else
      cg_grad_gemm(k, t, 1, ta ? 1 : 0, n, kk, m, alpha, "dy0", "x0", accs(gk, 1), "dx1");
    sgemm_work(k, tb ? n : kk, tb ? kk : n, m);
  }
  if (wants(gk, 2)) {
    char expr[96], lit[64];
    snprintf(expr, sizeof expr, "%s * dy0[o]", cg_literal(lit, t, beta));
    cg_grad_unbroadcast(gk, 2, expr);
  }
  return AP_OK;
}

/* ---- MatMul --------------------------------------------------------------- */

static ap_status grad_matmul(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *a = &k->in[0], *b = &k->in[1], *y = &k->out[0];
  ap_dtype t = y->dtype;
  ap_status s = need_float(k, t);
  if (s != AP_OK)
    return s;
  /* 1-D operands are a row [1, K] and a column [K, 1], as in the forward. */
  int64_t m = a->rank == 1 ? 1 : a->dims[a->rank - 2];
  int64_t kk = a->dims[a->rank - 1];
  int64_t n = b->rank == 1 ? 1 : b->dims[b->rank - 1];
  int ra = a->rank >= 2 ? a->rank - 2 : 0, rb = b->rank >= 2 ? b->rank - 2 : 0;
  int rbatch = ra > rb ? ra : rb;
  int64_t bdims[AP_MAX_RANK], sa[AP_MAX_RANK], sb[AP_MAX_RANK], sy[AP_MAX_RANK];
  int64_t batches = 1, batches_a = 1, batches_b = 1;
  for (int i = 0; i < rbatch; i++) {
    int ia = i - (rbatch - ra), ib = i - (rbatch - rb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    bdims[i] = da > db ? da : db;
    batches *= bdims[i];
    batches_a *= da;
    batches_b *= db;
  }
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
  /* An operand repeated over batch dims sums its gradient over them: zeroed
   * once, then every product adds. */
  bool sum_a = batches_a < batches, sum_b = batches_b < batches;
  if (wants(gk, 0) && sum_a)
    cg_grad_zero(gk, 0);
  if (wants(gk, 1) && sum_b)
    cg_grad_zero(gk, 1);
  char ia[512], ib[512], iy[512], pa[600], pb[600], py[600], pda[600], pdb[600];
  cg_index(ia, sizeof ia, rbatch, sa, "b");
  cg_index(ib, sizeof ib, rbatch, sb, "b");
  cg_index(iy, sizeof iy, rbatch, sy, "b");
  snprintf(pa, sizeof pa, "x0 + %s", ia);
  snprintf(pb, sizeof pb, "x1 + %s", ib);
  snprintf(py, sizeof py, "dy0 + %s", iy);
  snprintf(pda, sizeof pda, "dx0 + %s", ia);
  snprintf(pdb, sizeof pdb, "dx1 + %s", ib);
  cg_loops_open(k, rbatch, bdims, "b");
  if (wants(gk, 0))
    cg_grad_gemm(k, t, 0, 1, m, kk, n, 1.0, py, pb, sum_a || accs(gk, 0), pda);
  if (wants(gk, 1))
    cg_grad_gemm(k, t, 1, 0, kk, n, m, 1.0, pa, py, sum_b || accs(gk, 1), pdb);
  cg_loops_close(k, rbatch);
  if (wants(gk, 0))
    sgemm_work(k, m, kk, n);
  if (wants(gk, 1))
    sgemm_work(k, kk, n, m);
  return AP_OK;
}

const cg_grad_op cg_grad_ops_layer[AP_OP_COUNT] = {
    [AP_OP_CONV] = {grad_conv, 0x7, 0x3, 0, true},
    [AP_OP_CONV_TRANSPOSE] = {grad_conv_transpose, 0x7, 0x3, 0, true},
    [AP_OP_GEMM] = {grad_gemm, 0x7, 0x3, 0, true},
    [AP_OP_MATMUL] = {grad_matmul, 0x3, 0x3, 0, true},
};
