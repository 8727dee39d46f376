/* Layers: Conv, ConvTranspose, Gemm, MatMul. Float32 2-D convolutions and
 * every float32 matrix product go through the project's kernels
 * (codegen/kernels: apk_conv2d_forward, apk_sgemm); other ranks and element
 * types use direct loops with the same ONNX semantics. */
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernels/kernels.h"

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

void cg_conv2d_params(int64_t *conv, const cg_operand *x, const cg_operand *wt, int64_t group,
                      const cg_win *w) {
  int64_t v[CG_CONV_FIELDS] = {x->dims[0],      x->dims[1],      x->dims[2],
                               x->dims[3],      wt->dims[0],     w->kernel[0],
                               w->kernel[1],    w->stride[0],    w->stride[1],
                               w->pad_begin[0], w->pad_begin[1], w->pad_end[0],
                               w->pad_end[1],   w->dilation[0],  w->dilation[1],
                               group};
  memcpy(conv, v, sizeof v);
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
    int64_t conv[CG_CONV_FIELDS];
    cg_conv2d_params(conv, x, wt, group, &w);
    cg_x *args[] = {cg_in(k, 0), cg_in(k, 1), b->v ? cg_in(k, 2) : NULL, cg_out(k, 0),
                    cg_work(k)};
    bool packed = cg_pack_operand(k, 1, CG_PACK_CONV, conv, CG_CONV_FIELDS);
    cg_conv_call(k, packed ? CG_CONV_FORWARD_PACKED : CG_CONV_FORWARD, conv, 5, args);
    cg_work_conv(k, conv);
    return AP_OK;
  }
  /* Direct loops: any rank, float64. */
  cg_ty ct = cg_ty_of(x->dtype);
  int nsp = w.nsp;
  int64_t cg = wt->dims[1], mg = wt->dims[0] / group;
  int64_t xs[AP_MAX_RANK], ws[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_strides(wt->rank, wt->dims, ws);
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
  int n = cg_for_n(k, "n", y->dims[0]);
  int m = cg_for_n(k, "m", y->dims[1]);
  int g = cg_let(k, "g", cg_div(k, cg_v(k, m), cg_i64(k, mg)));
  int ov[AP_MAX_RANK], kv[AP_MAX_RANK], p[AP_MAX_RANK];
  cg_loops(k, nsp, y->dims + 2, "o", ov);
  int acc = cg_mut(k, "acc", ct, b->v ? cg_ld(k, cg_in(k, 2), cg_v(k, m)) : cg_int(k, 0));
  int c = cg_for_n(k, "c", cg);
  cg_loops(k, nsp, w.kernel, "k", kv);
  int inside = cg_mut(k, "inside", CG_T_I32, cg_int(k, 1));
  for (int i = 0; i < nsp; i++) {
    p[i] = cg_let(k, ap_arena_printf(k->g->arena, "p%d", i), cg_add(k, cg_sub(k, cg_mul(k, cg_v(k, ov[i]), cg_i64(k, w.stride[i])),
                                           cg_i64(k, w.pad_begin[i])),
                                 cg_mul(k, cg_v(k, kv[i]), cg_i64(k, w.dilation[i]))));
    cg_set_op(k, inside, CG_X_AND,
              cg_and(k, cg_ge(k, cg_v(k, p[i]), cg_int(k, 0)),
                     cg_lt(k, cg_v(k, p[i]), cg_i64(k, x->dims[i + 2]))));
  }
  cg_if(k, cg_v(k, inside));
  cg_x *xi = cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, xs[0])),
                    cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, g), cg_i64(k, cg)), cg_v(k, c)),
                           cg_i64(k, xs[1])));
  for (int i = 0; i < nsp; i++)
    xi = cg_add(k, xi, cg_mul(k, cg_v(k, p[i]), cg_i64(k, xs[i + 2])));
  cg_x *wi = cg_add(k, cg_mul(k, cg_v(k, m), cg_i64(k, ws[0])),
                    cg_mul(k, cg_v(k, c), cg_i64(k, ws[1])));
  for (int i = 0; i < nsp; i++)
    wi = cg_add(k, wi, cg_mul(k, cg_v(k, kv[i]), cg_i64(k, ws[i + 2])));
  cg_set_op(k, acc, CG_X_ADD, cg_mul(k, cg_ld(k, cg_in(k, 0), xi), cg_ld(k, cg_in(k, 1), wi)));
  cg_end(k);
  cg_loops_end(k, nsp);
  cg_end(k);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_v(k, acc));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, nsp);
  cg_end(k);
  cg_end(k);
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
  int64_t cg = x->dims[1] / group, mg = wt->dims[1];
  int64_t xs[AP_MAX_RANK], ws[AP_MAX_RANK], ys[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_strides(wt->rank, wt->dims, ws);
  cg_strides(y->rank, y->dims, ys);
  /* Bias (or zero) first, then every input element scatters its window. */
  {
    int n = cg_for_n(k, "n", y->dims[0]);
    int m = cg_for_n(k, "m", y->dims[1]);
    int i = cg_for_n(k, "i", ys[1]);
    cg_x *at = cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, y->dims[1])),
                                          cg_v(k, m)),
                                cg_i64(k, ys[1])),
                      cg_v(k, i));
    cg_st(k, cg_out(k, 0), at, b->v ? cg_ld(k, cg_in(k, 2), cg_v(k, m)) : cg_int(k, 0));
    cg_end(k);
    cg_end(k);
    cg_end(k);
  }
  int n = cg_for_n(k, "n", x->dims[0]);
  int c = cg_for_n(k, "c", x->dims[1]);
  int g = cg_let(k, "g", cg_div(k, cg_v(k, c), cg_i64(k, cg)));
  int iv[AP_MAX_RANK], kv[AP_MAX_RANK], p[AP_MAX_RANK];
  cg_loops(k, nsp, x->dims + 2, "i", iv);
  cg_x *xi = cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, xs[0])), cg_mul(k, cg_v(k, c), cg_i64(k, xs[1])));
  for (int i = 0; i < nsp; i++)
    xi = cg_add(k, xi, cg_mul(k, cg_v(k, iv[i]), cg_i64(k, xs[i + 2])));
  int v = cg_let(k, "v", cg_ld(k, cg_in(k, 0), xi));
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
  cg_x *yi = cg_add(k, cg_mul(k, cg_v(k, n), cg_i64(k, ys[0])),
                    cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, g), cg_i64(k, mg)), cg_v(k, m)),
                           cg_i64(k, ys[1])));
  for (int i = 0; i < nsp; i++)
    yi = cg_add(k, yi, cg_mul(k, cg_v(k, p[i]), cg_i64(k, ys[i + 2])));
  cg_x *wi = cg_add(k, cg_mul(k, cg_v(k, c), cg_i64(k, ws[0])), cg_mul(k, cg_v(k, m), cg_i64(k, ws[1])));
  for (int i = 0; i < nsp; i++)
    wi = cg_add(k, wi, cg_mul(k, cg_v(k, kv[i]), cg_i64(k, ws[i + 2])));
  cg_st_op(k, cg_out(k, 0), yi, CG_X_ADD, cg_mul(k, cg_v(k, v), cg_ld(k, cg_in(k, 1), wi)));
  cg_end(k);
  cg_loops_end(k, nsp);
  cg_end(k);
  cg_loops_end(k, nsp);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

/* ---- Gemm and MatMul ----------------------------------------------------- */

ap_status cg_emit_GEMM(cg_kernel *k) {
  const cg_operand *c = &k->in[2], *y = &k->out[0];
  ap_dtype t = y->dtype;
  ap_status s = need_type(k, t);
  if (s != AP_OK)
    return s;
  /* An operand read in place through a Transpose (fuse.c) flips its flag. */
  int ta = (ap_attr_int(k->n, "transA", 0) != 0) ^ (k->trans_in & 1);
  int tb = (ap_attr_int(k->n, "transB", 0) != 0) ^ (k->trans_in >> 1 & 1);
  int64_t m = y->dims[0], n = y->dims[1];
  int64_t kk = ta ? k->in[0].dims[0] : k->in[0].dims[1];
  double alpha = ap_attr_float(k->n, "alpha", 1.0f);
  double beta = c->v ? ap_attr_float(k->n, "beta", 1.0f) : 0.0;
  if (c->v) { /* Y starts as C broadcast to m x n; the product adds beta * Y. */
    int slot = 2;
    cg_map_begin(k, 0, 1, &slot);
    cg_map_end(k, cg_map_arg(k, 0));
  }
  if (t == AP_DT_FLOAT) {
    cg_work_sgemm(k, m, n, kk);
    /* A constant B packed once, where apk_sgemm would pack it on every call. */
    int64_t pack[] = {tb, kk, n, tb ? kk : n, 0};
    if (m > APK_NARROW_M && cg_pack_operand(k, 1, CG_PACK_B, pack, 5))
      cg_sgemm_pb(k, ta, m, n, kk, alpha, cg_in(k, 0), ta ? m : kk, cg_in(k, 1), beta,
                  cg_out(k, 0));
    else
      cg_sgemm(k, ta, tb, m, n, kk, alpha, cg_in(k, 0), cg_in(k, 1), beta, cg_out(k, 0));
    return AP_OK;
  }
  /* float64: direct loops. */
  int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
  int i = cg_for_n(k, "i", m);
  int j = cg_for_n(k, "j", n);
  int acc = cg_mut(k, "acc", CG_T_F64, cg_int(k, 0));
  int l = cg_for_n(k, "l", kk);
  cg_x *ai = ta ? cg_add(k, cg_mul(k, cg_v(k, l), cg_i64(k, lda)), cg_v(k, i))
                : cg_add(k, cg_mul(k, cg_v(k, i), cg_i64(k, lda)), cg_v(k, l));
  cg_x *bi = tb ? cg_add(k, cg_mul(k, cg_v(k, j), cg_i64(k, ldb)), cg_v(k, l))
                : cg_add(k, cg_mul(k, cg_v(k, l), cg_i64(k, ldb)), cg_v(k, j));
  cg_set_op(k, acc, CG_X_ADD, cg_mul(k, cg_ld(k, cg_in(k, 0), ai), cg_ld(k, cg_in(k, 1), bi)));
  cg_end(k);
  cg_x *yi = cg_add(k, cg_mul(k, cg_v(k, i), cg_i64(k, n)), cg_v(k, j));
  cg_x *val = cg_mul(k, cg_lit(k, t, alpha), cg_v(k, acc));
  if (c->v)
    val = cg_add(k, val, cg_mul(k, cg_lit(k, t, beta), cg_ld(k, cg_out(k, 0), yi)));
  cg_st(k, cg_out(k, 0), yi, val);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

/* MatMul input slot as the matrices it holds: per axis its extent and its
 * stride in the operand's buffer (the operand itself, or the input of a
 * Transpose read in place (fuse.c): its strides permuted). */
static void matmul_operand(const cg_kernel *k, int slot, int64_t *dims, int64_t *st) {
  const cg_operand *x = &k->in[slot];
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  for (int i = 0; i < x->rank; i++) {
    int p = k->trans_in >> slot & 1 ? k->perm_in[slot][i] : i;
    dims[i] = x->dims[p];
    st[i] = xs[p];
  }
}

ap_status cg_emit_MATMUL(cg_kernel *k) {
  const cg_operand *a = &k->in[0], *b = &k->in[1], *y = &k->out[0];
  ap_dtype t = y->dtype;
  ap_status s = need_type(k, t);
  if (s != AP_OK)
    return s;
  int64_t ad[AP_MAX_RANK], as[AP_MAX_RANK], bd[AP_MAX_RANK], bs[AP_MAX_RANK];
  matmul_operand(k, 0, ad, as);
  matmul_operand(k, 1, bd, bs);
  /* 1-D operands: A is a row [1, K], B a column [K, 1]; the output drops the
   * added dim, which leaves its memory layout unchanged. */
  int64_t m = a->rank == 1 ? 1 : ad[a->rank - 2];
  int64_t kk = ad[a->rank - 1];
  int64_t n = b->rank == 1 ? 1 : bd[b->rank - 1];
  /* A matrix whose columns are not contiguous has contiguous rows (fuse.c
   * reads no other view in place): the GEMM reads its transpose. */
  int ta = as[a->rank - 1] != 1, tb = bs[b->rank - 1] != 1;
  int64_t lda = ta ? as[a->rank - 1] : a->rank == 1 ? kk : as[a->rank - 2];
  int64_t ldb = tb ? bs[b->rank - 1] : b->rank == 1 ? n : bs[b->rank - 2];
  int ra = a->rank >= 2 ? a->rank - 2 : 0, rb = b->rank >= 2 ? b->rank - 2 : 0;
  /* One B for every matrix of a dense A (a layer's weight): the batch folds
   * into A's rows, one GEMM where there was one per matrix, each packing B
   * again (GPT-2 tiny's LM head packed its weight 32 times in a training
   * step's backward; gemm_packing_s, partition.c, prices the fold). */
  if (rb == 0 && ra > 0 && !ta && lda == kk) {
    bool dense = true;
    for (int i = ra - 1; i >= 0 && dense; i--)
      dense = as[i] == (i == ra - 1 ? m * kk : ad[i + 1] * as[i + 1]);
    for (int i = 0; i < ra && dense; i++)
      m *= ad[i];
    if (dense)
      ra = 0;
  }
  int rbatch = ra > rb ? ra : rb;
  int64_t bdims[AP_MAX_RANK], sa[AP_MAX_RANK], sb[AP_MAX_RANK], sy[AP_MAX_RANK];
  for (int i = 0; i < rbatch; i++) {
    int ia = i - (rbatch - ra), ib = i - (rbatch - rb);
    int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
    bdims[i] = da > db ? da : db;
  }
  /* Batch strides in floats: 0 where an operand is broadcast. */
  int64_t acc_y = m * n;
  for (int i = rbatch - 1; i >= 0; i--) {
    int ia = i - (rbatch - ra), ib = i - (rbatch - rb);
    sa[i] = ia < 0 || ad[ia] == 1 ? 0 : as[ia];
    sb[i] = ib < 0 || bd[ib] == 1 ? 0 : bs[ib];
    sy[i] = acc_y;
    acc_y *= bdims[i];
  }
  if (t == AP_DT_FLOAT)
    cg_work_sgemm(k, m, n, kk);
  int bv[AP_MAX_RANK];
  cg_loops(k, rbatch, bdims, "b", bv);
  cg_x *pa = cg_at(k, cg_in(k, 0), cg_idx(k, rbatch, sa, bv));
  cg_x *pb = cg_at(k, cg_in(k, 1), cg_idx(k, rbatch, sb, bv));
  cg_x *py = cg_at(k, cg_out(k, 0), cg_idx(k, rbatch, sy, bv));
  /* A constant matrix B (every batch's; a transposed view of one too) packed
   * once, where apk_sgemm would pack it on every call. */
  int64_t pack[] = {tb, kk, n, ldb, 0};
  if (t == AP_DT_FLOAT && b->rank == 2 && m > APK_NARROW_M &&
      cg_pack_operand(k, 1, CG_PACK_B, pack, 5)) {
    cg_sgemm_pb(k, ta, m, n, kk, 1.0, pa, lda, pb, 0.0, py);
  } else if (t == AP_DT_FLOAT) {
    cg_sgemm_ld(k, ta, tb, m, n, kk, 1.0, pa, lda, pb, ldb, 0.0, py);
  } else {
    int A = cg_let(k, "A", pa), B = cg_let(k, "B", pb), Y = cg_let(k, "Y", py);
    int i = cg_for_n(k, "i", m);
    int j = cg_for_n(k, "j", n);
    int acc = cg_mut(k, "acc", cg_ty_of(t), cg_int(k, 0));
    int l = cg_for_n(k, "l", kk);
    cg_set_op(k, acc, CG_X_ADD,
              cg_mul(k, cg_ld(k, cg_v(k, A), cg_add(k, cg_mul(k, cg_v(k, i), cg_i64(k, kk)), cg_v(k, l))),
                     cg_ld(k, cg_v(k, B), cg_add(k, cg_mul(k, cg_v(k, l), cg_i64(k, n)), cg_v(k, j)))));
    cg_end(k);
    cg_st(k, cg_v(k, Y), cg_add(k, cg_mul(k, cg_v(k, i), cg_i64(k, n)), cg_v(k, j)), cg_v(k, acc));
    cg_end(k);
    cg_end(k);
  }
  cg_loops_end(k, rbatch);
  return AP_OK;
}
