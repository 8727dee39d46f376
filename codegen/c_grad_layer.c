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
  cg_kernel *k = gk->k;
  int m = cg_for_n(k, "m", y->dims[1]);
  int s = cg_mut(k, "s", CG_T_F64, cg_int(k, 0));
  int n = cg_for_n(k, "n", y->dims[0]), i = cg_for_n(k, "i", plane);
  cg_set_op(k, s, CG_X_ADD,
            cg_ld(k, cg_dy(k, 0),
                  cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, y->dims[1])), cg_v(k, m)),
                                   cg_i64(k, plane)),
                         cg_v(k, i))));
  cg_end(k);
  cg_end(k);
  cg_grad_put(gk, 2, cg_v(k, m), cg_v(k, s));
  cg_end(k);
}

/* dx<slot> += t over n elements (the accumulate half of a kernel that
 * overwrites). */
static void add_from(cg_kernel *k, int slot, cg_x *t, int64_t n) {
  int i = cg_for_n(k, "i", n);
  cg_st_op(k, cg_dx(k, slot), cg_v(k, i), CG_X_ADD, cg_ld(k, t, cg_v(k, i)));
  cg_end(k);
}

static void conv2d_backward_f32(cg_grad_kernel *gk, const cg_win *w, int64_t group) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *wt = &k->in[1];
  int64_t M = wt->dims[0];
  int64_t conv[CG_CONV_FIELDS];
  cg_conv2d_params(conv, x, wt, group, w);
  /* Workspace: [temporaries for accumulating outputs][the kernels' own]. */
  int64_t tx = wants(gk, 0) && accs(gk, 0) ? round16(x->numel) : 0;
  int64_t tw = wants(gk, 1) && accs(gk, 1) ? round16(wt->numel) : 0;
  bool wgt = wants(gk, 1) || wants(gk, 2);
  if (wants(gk, 2) && !wants(gk, 1))
    tw = round16(wt->numel); /* the kernel computes dW with dbias: a scratch dW */
  int64_t tb = wants(gk, 2) && accs(gk, 2) ? round16(M) : 0;
  int64_t temps = tx > tw + tb ? tx : tw + tb;
  cg_x *scratch = cg_at(k, cg_work(k), cg_i64(k, temps));
  if (wants(gk, 0)) {
    cg_x *args[] = {cg_dy(k, 0), cg_in(k, 1), tx ? cg_work(k) : cg_dx(k, 0), scratch};
    cg_conv_call(k, CG_CONV_BACKWARD_DATA, conv, 4, args);
    if (tx)
      add_from(k, 0, cg_work(k), x->numel);
  }
  if (wgt) {
    cg_x *dw = tw ? cg_work(k) : cg_dx(k, 1);
    cg_x *db = !wants(gk, 2) ? NULL : tb ? cg_at(k, cg_work(k), cg_i64(k, tw)) : cg_dx(k, 2);
    cg_x *args[] = {cg_in(k, 0), cg_dy(k, 0), dw, db, scratch};
    cg_conv_call(k, CG_CONV_BACKWARD_WEIGHTS, conv, 5, args);
    if (wants(gk, 1) && tw)
      add_from(k, 1, cg_work(k), wt->numel);
    if (tb)
      add_from(k, 2, db, M);
  }
  cg_work_const(k, temps);
  cg_work_conv(k, conv);
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
    int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
    int n = cg_for_n(k, "n", y->dims[0]), m = cg_for_n(k, "m", y->dims[1]);
    int g = cg_let(k, "g", cg_div(k, cg_v(k, m), cg_i64(k, mg)));
    int ov[AP_MAX_RANK], kv[AP_MAX_RANK], p[AP_MAX_RANK];
    cg_loops(k, nsp, y->dims + 2, "o", ov);
    int d = cg_let(k, "d", cg_cast(k, CG_T_F64, cg_ld(k, cg_dy(k, 0), cg_v(k, o))));
    cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
    int c = cg_for_n(k, "c", cgrp);
    cg_loops(k, nsp, w->kernel, "k", kv);
    int inside = cg_mut(k, "inside", CG_T_I32, cg_int(k, 1));
    for (int i = 0; i < nsp; i++) {
      p[i] = cg_let(k, ap_arena_printf(k->g->arena, "p%d", i), cg_add(k, cg_sub(k, cg_mul(k, cg_v(k, ov[i]), cg_i64(k, w->stride[i])),
                                             cg_i64(k, w->pad_begin[i])),
                                   cg_mul(k, cg_v(k, kv[i]), cg_i64(k, w->dilation[i]))));
      cg_set_op(k, inside, CG_X_AND,
                cg_and(k, cg_ge(k, cg_v(k, p[i]), cg_int(k, 0)),
                       cg_lt(k, cg_v(k, p[i]), cg_i64(k, x->dims[i + 2]))));
    }
    cg_if(k, cg_v(k, inside));
    cg_x *xe = cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, xs[0])),
                      cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, g), cg_i64(k, cgrp)), cg_v(k, c)),
                             cg_i64(k, xs[1])));
    for (int i = 0; i < nsp; i++)
      xe = cg_add(k, xe, cg_mul(k, cg_v(k, p[i]), cg_i64(k, xs[i + 2])));
    int xi = cg_let(k, "xi", xe);
    cg_x *we = cg_add(k, cg_mul(k, cg_v(k, m), cg_i64(k, ws[0])), cg_mul(k, cg_v(k, c), cg_i64(k, ws[1])));
    for (int i = 0; i < nsp; i++)
      we = cg_add(k, we, cg_mul(k, cg_v(k, kv[i]), cg_i64(k, ws[i + 2])));
    int wi = cg_let(k, "wi", we);
    if (wants(gk, 0))
      cg_st_op(k, cg_dx(k, 0), cg_v(k, xi), CG_X_ADD,
               cg_mul(k, cg_v(k, d), cg_ld(k, cg_in(k, 1), cg_v(k, wi))));
    if (wants(gk, 1))
      cg_st_op(k, cg_dx(k, 1), cg_v(k, wi), CG_X_ADD,
               cg_mul(k, cg_v(k, d), cg_ld(k, cg_in(k, 0), cg_v(k, xi))));
    cg_end(k);
    cg_loops_end(k, nsp);
    cg_end(k);
    cg_loops_end(k, nsp);
    cg_end(k);
    cg_end(k);
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
    int n = cg_for_n(k, "n", x->dims[0]), c = cg_for_n(k, "c", x->dims[1]);
    int g = cg_let(k, "g", cg_div(k, cg_v(k, c), cg_i64(k, cg)));
    int iv[AP_MAX_RANK], kv[AP_MAX_RANK], p[AP_MAX_RANK];
    cg_loops(k, nsp, x->dims + 2, "i", iv);
    cg_x *xe = cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, xs[0])), cg_mul(k, cg_v(k, c), cg_i64(k, xs[1])));
    for (int i = 0; i < nsp; i++)
      xe = cg_add(k, xe, cg_mul(k, cg_v(k, iv[i]), cg_i64(k, xs[i + 2])));
    int xi = cg_let(k, "xi", xe);
    int m = cg_for_n(k, "m", mg);
    cg_loops(k, nsp, kernel, "k", kv);
    int inside = cg_mut(k, "inside", CG_T_I32, cg_int(k, 1));
    for (int i = 0; i < nsp; i++) {
      p[i] = cg_let(k, ap_arena_printf(k->g->arena, "p%d", i), cg_sub(k, cg_add(k, cg_mul(k, cg_v(k, iv[i]), cg_i64(k, stride[i])),
                                             cg_mul(k, cg_v(k, kv[i]), cg_i64(k, dil[i]))),
                                   cg_i64(k, pb[i])));
      cg_set_op(k, inside, CG_X_AND,
                cg_and(k, cg_ge(k, cg_v(k, p[i]), cg_int(k, 0)),
                       cg_lt(k, cg_v(k, p[i]), cg_i64(k, y->dims[i + 2]))));
    }
    cg_if(k, cg_v(k, inside));
    cg_x *ye = cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, ys[0])),
                      cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, g), cg_i64(k, mg)), cg_v(k, m)),
                             cg_i64(k, ys[1])));
    for (int i = 0; i < nsp; i++)
      ye = cg_add(k, ye, cg_mul(k, cg_v(k, p[i]), cg_i64(k, ys[i + 2])));
    int yi = cg_let(k, "yi", ye);
    cg_x *we = cg_add(k, cg_mul(k, cg_v(k, c), cg_i64(k, ws[0])), cg_mul(k, cg_v(k, m), cg_i64(k, ws[1])));
    for (int i = 0; i < nsp; i++)
      we = cg_add(k, we, cg_mul(k, cg_v(k, kv[i]), cg_i64(k, ws[i + 2])));
    int wi = cg_let(k, "wi", we);
    if (wants(gk, 0))
      cg_st_op(k, cg_dx(k, 0), cg_v(k, xi), CG_X_ADD,
               cg_mul(k, cg_ld(k, cg_dy(k, 0), cg_v(k, yi)), cg_ld(k, cg_in(k, 1), cg_v(k, wi))));
    if (wants(gk, 1))
      cg_st_op(k, cg_dx(k, 1), cg_v(k, wi), CG_X_ADD,
               cg_mul(k, cg_ld(k, cg_dy(k, 0), cg_v(k, yi)), cg_ld(k, cg_in(k, 0), cg_v(k, xi))));
    cg_end(k);
    cg_loops_end(k, nsp);
    cg_end(k);
    cg_loops_end(k, nsp);
    cg_end(k);
    cg_end(k);
  }
  if (wants(gk, 2))
    channel_bias_grad(gk, y, plane);
  return AP_OK;
}

/* ---- Gemm ----------------------------------------------------------------- */

static void sgemm_work(cg_kernel *k, int64_t m, int64_t n, int64_t kk) {
  if (k->in[0].dtype == AP_DT_FLOAT)
    cg_work_sgemm(k, m, n, kk);
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
      cg_grad_gemm(k, t, 0, tb ? 0 : 1, m, kk, n, alpha, cg_dy(k, 0), cg_in(k, 1), accs(gk, 0), cg_dx(k, 0));
    else
      cg_grad_gemm(k, t, tb ? 1 : 0, 1, kk, m, n, alpha, cg_in(k, 1), cg_dy(k, 0), accs(gk, 0), cg_dx(k, 0));
    sgemm_work(k, ta ? kk : m, ta ? m : kk, n);
  }
  if (wants(gk, 1)) {
    if (!tb)
      cg_grad_gemm(k, t, ta ? 0 : 1, 0, kk, n, m, alpha, cg_in(k, 0), cg_dy(k, 0), accs(gk, 1), cg_dx(k, 1));
    else
      cg_grad_gemm(k, t, 1, ta ? 1 : 0, n, kk, m, alpha, cg_dy(k, 0), cg_in(k, 0), accs(gk, 1), cg_dx(k, 1));
    sgemm_work(k, tb ? n : kk, tb ? kk : n, m);
  }
  if (wants(gk, 2))
    cg_grad_unbroadcast(gk, 2, cg_lit(k, t, beta), false);
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
  /* One B for every matrix of A (a layer's weight): the batch folds into
   * A's rows, as in the forward (cg_emit_MATMUL), and B's gradient is one
   * product over all of them. The operands here are dense. */
  if (rb == 0 && ra > 0) {
    for (int i = 0; i < ra; i++)
      m *= a->dims[i];
    ra = 0;
  }
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
  int bv[AP_MAX_RANK];
  cg_loops(k, rbatch, bdims, "b", bv);
  if (wants(gk, 0))
    cg_grad_gemm(k, t, 0, 1, m, kk, n, 1.0, cg_at(k, cg_dy(k, 0), cg_idx(k, rbatch, sy, bv)),
                 cg_at(k, cg_in(k, 1), cg_idx(k, rbatch, sb, bv)), sum_a || accs(gk, 0),
                 cg_at(k, cg_dx(k, 0), cg_idx(k, rbatch, sa, bv)));
  if (wants(gk, 1))
    cg_grad_gemm(k, t, 1, 0, kk, n, m, 1.0, cg_at(k, cg_in(k, 0), cg_idx(k, rbatch, sa, bv)),
                 cg_at(k, cg_dy(k, 0), cg_idx(k, rbatch, sy, bv)), sum_b || accs(gk, 1),
                 cg_at(k, cg_dx(k, 1), cg_idx(k, rbatch, sb, bv)));
  cg_loops_end(k, rbatch);
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
