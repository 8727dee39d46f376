/* 2-D convolution (NCHW, groups, strides, pads, dilations) on the GEMM.
 *
 * Per image and group, with Kg = C/groups * KH * KW and OHW = OH * OW, every
 * kernel is one product with the column matrix col_g (Kg x OHW), whose row
 * (c, kh, kw) holds the input pixels that tap meets at each output pixel:
 *   forward          y_g  (M/g x OHW) = w_g (M/g x Kg) * col_g
 *   backward data    col_g           = w_g^T * dy_g, then col2im adds it into dx
 *   backward weights dw_g (M/g x Kg) += dy_g * col_g^T
 * APK_CONV_IM2COL writes the whole col_g to the workspace first.
 * APK_CONV_IMPLICIT never forms it: the GEMM's packing of B calls
 * apk_im2col_block for the kc x NR panel it is about to use (forward; for
 * backward weights a kc-pixel strip, transposed), and backward data hands
 * each MR x NR product tile to apk_col2im_block, which adds it into dx. A 1x1
 * kernel with unit strides and no padding needs neither: col_g is x_g. One
 * input channel with unit strides and no padding (LeNet-5's conv1) takes
 * neither GEMM either: APK_CONV_IMPLICIT's forward and backward weights are
 * then direct loops (apk_direct_forward, apk_direct_backward_weights).
 * APK_CONV_WINOGRAD is Lavin and Gray's F(2x2, 3x3) (arXiv:1509.09308),
 * fused tile block by tile block; backward data is the forward algorithm on
 * dy with the kernel flipped and its channels swapped.
 */
#include "kernels.h"

#include <stdint.h>
#include <string.h>

#include "apk_tile.h"

/* a / b (b >= 1), without the divide when b is 1. The column matrix's
 * block copies compute their tap rows' bounds on every call, with strides
 * that are mostly 1: a compiler that sees the convolution's constants (GCC
 * on a C program's kernels.c, LLVM on an LLVM program's specialised
 * packing, APK_CONV_SPEC below) folds the divide, the generic library
 * does not. */
static inline int apk_div(int a, int b) { return b == 1 ? a : a / b; }

/* The column matrix's copies, inlined into their callers where the
 * description is a constant: in the LLVM backend's bitcode of the packing
 * (conv_spec.c, APK_CONV_SPEC), whose apk_spec_* functions every program
 * calls with its convolutions' constant descriptions. Nothing otherwise. */
#ifdef APK_CONV_SPEC
#define APK_SPEC_INLINE __attribute__((always_inline)) inline
#else
#define APK_SPEC_INLINE
#endif

APK_API int apk_conv2d_out_h(const apk_conv2d *p)
{
  int span = p->dilation_h * (p->kernel_h - 1) + 1;
  return apk_div(p->in_h + p->pad_top + p->pad_bottom - span, p->stride_h) + 1;
}

APK_API int apk_conv2d_out_w(const apk_conv2d *p)
{
  int span = p->dilation_w * (p->kernel_w - 1) + 1;
  return apk_div(p->in_w + p->pad_left + p->pad_right - span, p->stride_w) + 1;
}

static int apk_conv2d_is_pointwise(const apk_conv2d *p)
{
  return p->kernel_h == 1 && p->kernel_w == 1 && p->stride_h == 1 && p->stride_w == 1 &&
         p->pad_top == 0 && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
}

static size_t apk_size_max(size_t a, size_t b) { return a > b ? a : b; }
static int apk_imin(int a, int b) { return a < b ? a : b; }
static int apk_imax(int a, int b) { return a > b ? a : b; }
static size_t apk_vround(size_t floats) { return (floats + APK_VL - 1) / APK_VL * APK_VL; }

static float *apk_valign(float *p)
{
  uintptr_t u = (uintptr_t)p;
  u = (u + APK_VBYTES - 1) & ~(uintptr_t)(APK_VBYTES - 1);
  return (float *)u;
}

/* The output columns ow whose input column ow * stride + offset lies in
 * [0, width): [*lo, *hi). Computing the range once keeps the copy loops free of
 * bounds tests. */
static APK_SPEC_INLINE void apk_valid_range(int offset, int stride, int width, int out, int *lo,
                                            int *hi)
{
  int l = offset >= 0 ? 0 : apk_div(-offset + stride - 1, stride);
  int last = width - 1 - offset; /* ow * stride <= last */
  int h = last < 0 ? 0 : apk_div(last, stride) + 1;
  if (h > out) h = out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* ---- the column matrix, block by block ---- */

/* dst[0, n) = src[0, n). The column matrix's runs are one output row, 8 to
 * 28 floats on LeNet-5 and the ResNet block, where a memcpy call (libc's,
 * which both compilers turn a copy loop into) cost more than the copy:
 * runs up to two vectors are moved by fixed-size copies, which compile to
 * vector moves (the second overlapping the first where n is not a
 * multiple of the vector). */
static APK_SPEC_INLINE void apk_copy_run(float *dst, const float *src, int n)
{
  if (n > 2 * APK_VL) {
    memcpy(dst, src, sizeof(float) * (size_t)n);
  } else if (n >= APK_VL) {
    apk_vf a, b;
    memcpy(&a, src, sizeof a);
    memcpy(&b, src + n - APK_VL, sizeof b);
    memcpy(dst, &a, sizeof a);
    memcpy(dst + n - APK_VL, &b, sizeof b);
  } else {
    if (APK_VL > 8 && (n & 8)) memcpy(dst, src, 8 * sizeof(float)), dst += 8, src += 8;
    if (APK_VL > 4 && (n & 4)) memcpy(dst, src, 4 * sizeof(float)), dst += 4, src += 4;
    if (n & 2) memcpy(dst, src, 2 * sizeof(float)), dst += 2, src += 2;
    if (n & 1) *dst = *src;
  }
}

/* Rows [t0, t0+nt) and columns [j0, j0+nj) of the column matrix of the
 * channels x points at: element (t0+t, j0+q) to dst[t * ld + q]. Each tap
 * row walks the pixel range one output row at a time, and inside a row
 * copies the valid input columns (apk_copy_run at stride 1) between runs of
 * zeros. */
static APK_SPEC_INLINE void apk_im2col_block(const apk_conv2d *p, const float *x, int t0, int nt,
                                             int j0, int nj, float *dst, ptrdiff_t ld)
{
  int ow_n = apk_conv2d_out_w(p), khw = p->kernel_h * p->kernel_w;
  int c = t0 / khw, kh = t0 % khw / p->kernel_w, kw = t0 % p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  for (int t = 0; t < nt; t++) {
    float *d = dst + (ptrdiff_t)t * ld;
    const float *xc = x + (ptrdiff_t)c * hw;
    int ih0 = kh * p->dilation_h - p->pad_top, iw0 = kw * p->dilation_w - p->pad_left;
    int lo, hi;
    apk_valid_range(iw0, p->stride_w, p->in_w, ow_n, &lo, &hi);
    int oh = j0 / ow_n, ow = j0 % ow_n;
    for (int q = 0; q < nj;) {
      int len = apk_imin(ow_n - ow, nj - q), end = ow + len;
      int ih = oh * p->stride_h + ih0;
      float *ds = d + q; /* ds[i] is column ow + i */
      if (ih < 0 || ih >= p->in_h) {
        memset(ds, 0, sizeof(float) * (size_t)len);
      } else {
        int a = apk_imin(apk_imax(lo, ow), end), b = apk_imax(apk_imin(hi, end), a);
        const float *row = xc + (ptrdiff_t)ih * p->in_w; /* column i reads row[i * sw + iw0] */
        for (int i = ow; i < a; i++) ds[i - ow] = 0.0f;
        if (p->stride_w == 1)
          apk_copy_run(ds + (a - ow), row + (a + iw0), b - a);
        else
          for (int i = a; i < b; i++) ds[i - ow] = row[(ptrdiff_t)i * p->stride_w + iw0];
        for (int i = b; i < end; i++) ds[i - ow] = 0.0f;
      }
      q += len;
      oh++;
      ow = 0;
    }
    if (++kw == p->kernel_w) {
      kw = 0;
      if (++kh == p->kernel_h) {
        kh = 0;
        c++;
      }
    }
  }
}

/* dst[0, n) += src[0, n), for col2im's runs (one output row of a tap, 10
 * floats on LeNet-5's conv2): whole vectors, then 8/4/2/1-float pieces,
 * where the compilers' vectorised loop ran its scalar remainder for all of
 * a run shorter than a vector. Each element still gets one addition per
 * tap, in the same order. */
typedef float apk_v8f __attribute__((vector_size(8 * sizeof(float)), __may_alias__));
typedef float apk_v4f __attribute__((vector_size(4 * sizeof(float)), __may_alias__));
typedef float apk_v2f __attribute__((vector_size(2 * sizeof(float)), __may_alias__));

#define APK_ADD_PIECE(type, floats)                                                             \
  do {                                                                                         \
    type a_, b_;                                                                               \
    memcpy(&a_, dst, sizeof a_);                                                               \
    memcpy(&b_, src, sizeof b_);                                                               \
    a_ += b_;                                                                                  \
    memcpy(dst, &a_, sizeof a_);                                                               \
    dst += (floats), src += (floats);                                                          \
  } while (0)

static APK_SPEC_INLINE void apk_add_run(float *dst, const float *src, int n)
{
  for (; n >= APK_VL; n -= APK_VL) APK_ADD_PIECE(apk_vf, APK_VL);
  if (APK_VL > 8 && (n & 8)) APK_ADD_PIECE(apk_v8f, 8);
  if (APK_VL > 4 && (n & 4)) APK_ADD_PIECE(apk_v4f, 4);
  if (n & 2) APK_ADD_PIECE(apk_v2f, 2);
  if (n & 1) *dst += *src;
}

#undef APK_ADD_PIECE

/* The adjoint of apk_im2col_block: adds src[t * ld + q], element
 * (t0+t, j0+q) of a column matrix, into the input pixel it came from. */
static APK_SPEC_INLINE void apk_col2im_block(const apk_conv2d *p, const float *src, int t0,
                                             int nt, int j0, int nj, ptrdiff_t ld, float *x)
{
  int ow_n = apk_conv2d_out_w(p), khw = p->kernel_h * p->kernel_w;
  int c = t0 / khw, kh = t0 % khw / p->kernel_w, kw = t0 % p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  for (int t = 0; t < nt; t++) {
    const float *s = src + (ptrdiff_t)t * ld;
    float *xc = x + (ptrdiff_t)c * hw;
    int ih0 = kh * p->dilation_h - p->pad_top, iw0 = kw * p->dilation_w - p->pad_left;
    int lo, hi;
    apk_valid_range(iw0, p->stride_w, p->in_w, ow_n, &lo, &hi);
    int oh = j0 / ow_n, ow = j0 % ow_n;
    for (int q = 0; q < nj;) {
      int len = apk_imin(ow_n - ow, nj - q), end = ow + len;
      int ih = oh * p->stride_h + ih0;
      if (ih >= 0 && ih < p->in_h) {
        int a = apk_imin(apk_imax(lo, ow), end), b = apk_imax(apk_imin(hi, end), a);
        const float *ss = s + q + (a - ow); /* column a */
        float *row = xc + (ptrdiff_t)ih * p->in_w;
        if (p->stride_w == 1)
          apk_add_run(row + a + iw0, ss, b - a);
        else
          for (int i = a; i < b; i++) row[(ptrdiff_t)i * p->stride_w + iw0] += *ss++;
      }
      q += len;
      oh++;
      ow = 0;
    }
    if (++kw == p->kernel_w) {
      kw = 0;
      if (++kh == p->kernel_h) {
        kh = 0;
        c++;
      }
    }
  }
}

APK_API void apk_im2col(const apk_conv2d *p, const float *x, int channels, float *col)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  apk_im2col_block(p, x, 0, channels * p->kernel_h * p->kernel_w, 0, ohw, col, ohw);
}

APK_API void apk_col2im(const apk_conv2d *p, const float *col, int channels, float *x)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  apk_col2im_block(p, col, 0, channels * p->kernel_h * p->kernel_w, 0, ohw, ohw, x);
}

/* The GEMM's packing of B from one group's input: forward (col_g, taps x
 * pixels, each NR-pixel micro-panel of kc tap rows written in place) and
 * backward weights (col_g^T, pixels x taps: a kc-pixel strip of NR tap rows
 * lowered to strip, then transposed into the micro-panel). */
typedef struct apk_col_src {
  const apk_conv2d *p;
  const float *x;  /* the group's first input channel */
  float *strip;    /* backward weights: NR x KC floats */
} apk_col_src;

static APK_SPEC_INLINE void apk_pack_col_of(const apk_conv2d *p, const void *ctx, int pc, int kc,
                                            int jc, int nc, float *dst)
{
  const apk_col_src *s = ctx;
  for (int q = 0; q < nc; q += APK_NR) {
    int cols = apk_imin(APK_NR, nc - q);
    float *panel = dst + (ptrdiff_t)q * kc;
    apk_im2col_block(p, s->x, pc, kc, jc + q, cols, panel, APK_NR);
    if (cols < APK_NR)
      for (int t = 0; t < kc; t++)
        for (int j = cols; j < APK_NR; j++) panel[(ptrdiff_t)t * APK_NR + j] = 0.0f;
  }
}

static void apk_pack_col(const void *ctx, int pc, int kc, int jc, int nc, float *dst)
{
  apk_pack_col_of(((const apk_col_src *)ctx)->p, ctx, pc, kc, jc, nc, dst);
}

static APK_SPEC_INLINE void apk_pack_col_t_of(const apk_conv2d *p, const void *ctx, int pc,
                                              int kc, int jc, int nc, float *dst)
{
  const apk_col_src *s = ctx;
  for (int q = 0; q < nc; q += APK_NR) {
    int taps = apk_imin(APK_NR, nc - q);
    float *panel = dst + (ptrdiff_t)q * kc;
    apk_im2col_block(p, s->x, jc + q, taps, pc, kc, s->strip, kc);
    if (taps == APK_NR) {
      for (int i = 0; i < kc; i++)
#pragma GCC unroll 8
        for (int j = 0; j < APK_NR; j++) panel[(ptrdiff_t)i * APK_NR + j] = s->strip[(ptrdiff_t)j * kc + i];
    } else {
      /* The last panel of a layer whose taps are not a multiple of NR (all
       * of a 1-channel 5x5's 25): a whole-row clear by fixed-size vector
       * stores, then the taps, with no test per element. */
      const apk_vf zero = {0};
      for (int i = 0; i < kc; i++) {
        float *d = panel + (ptrdiff_t)i * APK_NR;
        for (int v = 0; v < APK_NV; v++) memcpy(d + v * APK_VL, &zero, sizeof zero);
        for (int j = 0; j < taps; j++) d[j] = s->strip[(ptrdiff_t)j * kc + i];
      }
    }
  }
}

static void apk_pack_col_t(const void *ctx, int pc, int kc, int jc, int nc, float *dst)
{
  apk_pack_col_t_of(((const apk_col_src *)ctx)->p, ctx, pc, kc, jc, nc, dst);
}

/* Backward data's product tiles (taps x pixels) added into the group's dx. */
typedef struct apk_col_sink {
  const apk_conv2d *p;
  float *dx;
} apk_col_sink;

static APK_SPEC_INLINE void apk_store_col_of(const apk_conv2d *p, void *ctx, int i0, int j0,
                                             int rows, int cols, const float *tile, ptrdiff_t ldt)
{
  apk_col_sink *s = ctx;
  apk_col2im_block(p, tile, i0, rows, j0, cols, ldt, s->dx);
}

static void apk_store_col(void *ctx, int i0, int j0, int rows, int cols, const float *tile,
                          ptrdiff_t ldt)
{
  apk_store_col_of(((apk_col_sink *)ctx)->p, ctx, i0, j0, rows, cols, tile, ldt);
}

/* The library's own packing: for the description its context or argument
 * points to. */
static const apk_conv_ops apk_conv_generic = {apk_pack_col, apk_pack_col_t, apk_store_col,
                                              apk_im2col, apk_col2im};

/* ops' function for what, or the generic one where ops has none. */
#define APK_OP(ops, what) ((ops) && (ops)->what ? (ops)->what : apk_conv_generic.what)

#ifdef APK_CONV_SPEC
/* The packing with the description as its first parameter, for the LLVM
 * backend (conv_spec.c): a program defines, per convolution, functions of
 * apk_conv_ops' types that call these with its constant description, and
 * the optimiser inlines and folds them (print_llvm.c, conv_ops). */
__attribute__((always_inline)) void apk_spec_pack_col(const apk_conv2d *p, const void *ctx,
                                                      int pc, int kc, int jc, int nc, float *dst)
{
  apk_pack_col_of(p, ctx, pc, kc, jc, nc, dst);
}

__attribute__((always_inline)) void apk_spec_pack_col_t(const apk_conv2d *p, const void *ctx,
                                                        int pc, int kc, int jc, int nc,
                                                        float *dst)
{
  apk_pack_col_t_of(p, ctx, pc, kc, jc, nc, dst);
}

__attribute__((always_inline)) void apk_spec_store_col(const apk_conv2d *p, void *ctx, int i0,
                                                       int j0, int rows, int cols,
                                                       const float *tile, ptrdiff_t ldt)
{
  apk_store_col_of(p, ctx, i0, j0, rows, cols, tile, ldt);
}

__attribute__((always_inline)) void apk_spec_im2col(const apk_conv2d *p, const apk_conv2d *q,
                                                    const float *x, int channels, float *col)
{
  (void)q;
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  apk_im2col_block(p, x, 0, channels * p->kernel_h * p->kernel_w, 0, ohw, col, ohw);
}

__attribute__((always_inline)) void apk_spec_col2im(const apk_conv2d *p, const apk_conv2d *q,
                                                    const float *col, int channels, float *x)
{
  (void)q;
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  apk_col2im_block(p, col, 0, channels * p->kernel_h * p->kernel_w, 0, ohw, ohw, x);
}
#endif

/* ---- one input channel, direct ----
 * A layer with one input channel (LeNet-5's conv1: 25 taps, 6 outputs) is
 * a GEMM of K = 25 forward and N = 25 for backward weights, where packing
 * the column matrix costs more than the product (docs/kernels.md). With
 * unit strides and dilations and no padding, an output row is VL-wide
 * chunks of x's row shifted by kw, each loaded once for up to DIRECT_MB
 * output channels. A row of ow_n >= VL outputs ends with a chunk that
 * overlaps the one before it: forward recomputes those outputs (same sums),
 * backward weights masks them out. */
enum { APK_DIRECT_MB = 8, APK_DIRECT_TAPS_MAX = 49 };

APK_API int apk_conv2d_is_direct(const apk_conv2d *p)
{
  return p->groups == 1 && p->in_channels == 1 && p->kernel_h * p->kernel_w <= APK_DIRECT_TAPS_MAX &&
         p->stride_h == 1 && p->stride_w == 1 && p->dilation_h == 1 && p->dilation_w == 1 &&
         p->pad_top == 0 && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0 &&
         apk_conv2d_out_w(p) >= APK_VL;
}

static void apk_direct_forward(const apk_conv2d *p, const float *x, const float *w,
                               const float *bias, float *y)
{
  int oh_n = apk_conv2d_out_h(p), ow_n = apk_conv2d_out_w(p);
  int kh_n = p->kernel_h, kw_n = p->kernel_w, taps = kh_n * kw_n;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w, ohw = (ptrdiff_t)oh_n * ow_n;
  for (int m0 = 0; m0 < p->out_channels; m0 += APK_DIRECT_MB) {
    int mb = apk_imin(APK_DIRECT_MB, p->out_channels - m0);
    float wb[APK_DIRECT_TAPS_MAX][APK_DIRECT_MB] = {{0}}; /* [tap][m], zero past mb */
    for (int m = 0; m < mb; m++)
      for (int t = 0; t < taps; t++) wb[t][m] = w[(ptrdiff_t)(m0 + m) * taps + t];
    for (int n = 0; n < p->batch; n++) {
      const float *xn = x + (ptrdiff_t)n * hw;
      float *yn = y + ((ptrdiff_t)n * p->out_channels + m0) * ohw;
      for (int oh = 0; oh < oh_n; oh++)
        for (int ow0 = 0; ow0 < ow_n; ow0 += APK_VL) {
          int o = apk_imin(ow0, ow_n - APK_VL);
          apk_vf acc[APK_DIRECT_MB] = {{0}};
          for (int kh = 0; kh < kh_n; kh++) {
            const float *xr = xn + (ptrdiff_t)(oh + kh) * p->in_w + o;
            for (int kw = 0; kw < kw_n; kw++) {
              apk_vf xv;
              memcpy(&xv, xr + kw, sizeof xv);
              const float *wt = wb[kh * kw_n + kw];
#pragma GCC unroll 8
              for (int m = 0; m < APK_DIRECT_MB; m++)
                acc[m] = apk_fma(apk_broadcast(wt[m]), xv, acc[m]);
            }
          }
          for (int m = 0; m < mb; m++) {
            apk_vf out = acc[m];
            if (bias) out = apk_broadcast(bias[m0 + m]) + out;
            memcpy(yn + (ptrdiff_t)m * ohw + (ptrdiff_t)oh * ow_n + o, &out, sizeof out);
          }
        }
    }
  }
}

static void apk_direct_backward_weights(const apk_conv2d *p, const float *x, const float *dy,
                                        float *dw)
{
  int oh_n = apk_conv2d_out_h(p), ow_n = apk_conv2d_out_w(p);
  int kh_n = p->kernel_h, kw_n = p->kernel_w, taps = kh_n * kw_n;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w, ohw = (ptrdiff_t)oh_n * ow_n;
  /* The last chunk's lanes below skip were counted by the chunk before. */
  int last = (ow_n - 1) / APK_VL * APK_VL, skip = last - (ow_n - APK_VL);
  float lanes[APK_VL];
  for (int j = 0; j < APK_VL; j++) lanes[j] = j < skip ? 0.0f : 1.0f;
  apk_vf keep;
  memcpy(&keep, lanes, sizeof keep);
  memset(dw, 0, sizeof(float) * (size_t)p->out_channels * (size_t)taps);
  for (int m0 = 0; m0 < p->out_channels; m0 += APK_DIRECT_MB) {
    int mb = apk_imin(APK_DIRECT_MB, p->out_channels - m0);
    for (int n = 0; n < p->batch; n++) {
      const float *xn = x + (ptrdiff_t)n * hw;
      const float *dyn = dy + ((ptrdiff_t)n * p->out_channels + m0) * ohw;
      for (int t = 0; t < taps; t++) {
        int kh = t / kw_n, kw = t % kw_n;
        apk_vf acc[APK_DIRECT_MB] = {{0}};
        for (int oh = 0; oh < oh_n; oh++) {
          const float *xr = xn + (ptrdiff_t)(oh + kh) * p->in_w + kw;
          const float *dyr = dyn + (ptrdiff_t)oh * ow_n;
          for (int ow0 = 0; ow0 < ow_n; ow0 += APK_VL) {
            int o = apk_imin(ow0, ow_n - APK_VL);
            apk_vf xv;
            memcpy(&xv, xr + o, sizeof xv);
            if (o < ow0) xv *= keep;
#pragma GCC unroll 8
            for (int m = 0; m < APK_DIRECT_MB; m++)
              if (m < mb) {
                apk_vf dv;
                memcpy(&dv, dyr + (ptrdiff_t)m * ohw + o, sizeof dv);
                acc[m] = apk_fma(dv, xv, acc[m]);
              }
          }
        }
        for (int m = 0; m < mb; m++) {
          float sum = 0.0f;
          memcpy(lanes, &acc[m], sizeof lanes);
          for (int j = 0; j < APK_VL; j++) sum += lanes[j];
          dw[(ptrdiff_t)(m0 + m) * taps + t] += sum;
        }
      }
    }
  }
}

/* ---- Winograd F(2x2, 3x3) ----
 * Output tiles of 2x2 from input tiles of 4x4 (overlapping by 2):
 *   V = B^T d B,  U = G g G^T,  M[xi] = U[xi] * V[xi] (16 GEMMs over channels),
 *   y = A^T M A, with
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
 *   A^T = [1 1 1 0; 0 1 -1 -1].
 * Tiles are numbered row-major over the image's tile grid and processed nt at
 * a time: the block's V (16 packed C x nt panels) and M (16 of M x nt) stay
 * in cache between the transforms and the GEMMs. */

enum { APK_WINO_TILES_MAX = 4 * APK_NR, APK_WINO_BUDGET_FLOATS = 128 * 1024 };

typedef struct apk_wino {
  int r, a, nxi;        /* output tiles r x r from input tiles a x a (a = r + 2): a^2 products */
  int c, m;             /* input and output channels of the computed convolution */
  int h, w, oh, ow;     /* input and output sizes */
  int pt, pl;           /* pads top and left (bottom, right follow from oh, ow) */
  int th, tw, tiles;    /* the tile grid */
  int nt;               /* tiles per block: a multiple of the vector width */
} apk_wino;

static apk_wino apk_wino_geometry(int r, int c, int m, int h, int w, int oh, int ow, int pt,
                                  int pl)
{
  apk_wino g = {r, r + 2, (r + 2) * (r + 2), c, m, h, w, oh, ow, pt, pl,
                (oh + r - 1) / r, (ow + r - 1) / r, 0, APK_NR};
  g.tiles = g.th * g.tw;
  /* As many tiles as keep a block's V and M within the budget, in blocks of
   * equal size: 49 tiles are one block of 49, not 48 and 1. */
  int fit = APK_WINO_BUDGET_FLOATS / (g.nxi * (c + m) * APK_NR);
  int most = APK_NR * apk_imax(1, apk_imin(fit, APK_WINO_TILES_MAX / APK_NR));
  int blocks = (g.tiles + most - 1) / most;
  int each = (g.tiles + blocks - 1) / blocks;
  g.nt = (each + APK_VL - 1) / APK_VL * APK_VL;
  return g;
}

/* F(4x4, 3x3)'s strip: one phase (every 4th column) of one row, with a
 * vector of slack for the reads of entry j + 1 at the end of a run. */
static size_t apk_wino4_phase_floats(const apk_wino *g)
{
  return apk_vround((size_t)g->tw + 1) + APK_VL;
}

/* Workspace: U, V, M, then one strip: the input tile's rows and their transform. */
static size_t apk_wino_floats(const apk_wino *g)
{
  size_t u = (size_t)g->nxi * apk_vround(apk_packed_a_floats(g->m, g->c));
  size_t v = (size_t)g->nxi * apk_vround(apk_packed_b_floats(g->c, g->nt));
  size_t mo = (size_t)g->nxi * apk_vround((size_t)g->m * g->nt);
  size_t strip = g->r == 2 ? 8 * apk_vround((size_t)2 * g->tw + 2) : 48 * apk_wino4_phase_floats(g);
  return u + v + mo + strip + 4 * APK_VL;
}

/* Eight floats: a micro-panel's MR rows (MR <= 8 on every target). */
typedef float apk_v8 __attribute__((vector_size(32)));
_Static_assert(APK_MR <= 8, "the weight transform holds MR rows in 8 lanes");

/* U[xi] packed as A (m x c) for every xi. flip: the backward-data kernel,
 * U from g'[m][c] = g[c][m] rotated by 180 degrees (g is then c x m x 3 x 3).
 * The MR rows of a micro-panel are transformed together, one row per lane,
 * so the 16 results of one channel are 16 stores of MR contiguous floats,
 * one per xi. Lanes past the last row hold zeros. */
static void apk_wino_weights(const apk_wino *g, const float *wt, int flip, float *u,
                             size_t u_stride)
{
  const apk_v8 half = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  for (int m0 = 0; m0 < g->m; m0 += APK_MR) {
    int rows = apk_imin(APK_MR, g->m - m0);
    apk_v8 live;
    for (int r = 0; r < 8; r++) live[r] = r < rows ? 1.0f : 0.0f;
    float *panel = u + (ptrdiff_t)m0 * g->c;
    for (int c = 0; c < g->c; c++) {
      const float *src[8];
      for (int r = 0; r < 8; r++) {
        int m = m0 + apk_imin(r, rows - 1);
        src[r] = flip ? wt + ((ptrdiff_t)c * g->m + m) * 9 : wt + ((ptrdiff_t)m * g->c + c) * 9;
      }
      apk_v8 k[9];
      for (int i = 0; i < 9; i++) {
        int at = flip ? 8 - i : i;
        k[i] = (apk_v8){src[0][at], src[1][at], src[2][at], src[3][at],
                        src[4][at], src[5][at], src[6][at], src[7][at]} * live;
      }
      apk_v8 gk[4][3]; /* G k */
      for (int j = 0; j < 3; j++) {
        apk_v8 k0 = k[j], k1 = k[3 + j], k2 = k[6 + j];
        gk[0][j] = k0;
        gk[1][j] = half * (k0 + k1 + k2);
        gk[2][j] = half * (k0 - k1 + k2);
        gk[3][j] = k2;
      }
      float *dst = panel + (ptrdiff_t)c * APK_MR;
      for (int i = 0; i < 4; i++) {
        apk_v8 a0 = gk[i][0], a1 = gk[i][1], a2 = gk[i][2];
        apk_v8 r4[4] = {a0, half * (a0 + a1 + a2), half * (a0 - a1 + a2), a2};
        for (int j = 0; j < 4; j++)
          memcpy(dst + (ptrdiff_t)(i * 4 + j) * u_stride, &r4[j], sizeof(float) * APK_MR);
      }
    }
  }
}

/* The F(4x4, 3x3) weight transform, laid out as apk_wino_weights': the 36
 * U[xi] packed as A, the MR rows of a micro-panel one per lane. Forward
 * only (flip 0). G = diag(1/4, -1/6, -1/6, 1/24, 1/24, 1) Gi with
 * Gi = [1 0 0; 1 1 1; 1 -1 1; 1 2 4; 1 -2 4; 0 0 1] (points 0, 1, -1, 2,
 * -2): Gi k Gi^T takes only sums and exact doublings, then one product by
 * the two diagonal factors, so no rounded product feeds a sum that a
 * compiler could fuse into a multiply-add (GCC and clang would choose
 * differently, and the C and LLVM programs would differ in the last bit). */
static void apk_wino4_weights(const apk_wino *g, const float *wt, float *u, size_t u_stride)
{
  static const double diag[6] = {1.0 / 4, -1.0 / 6, -1.0 / 6, 1.0 / 24, 1.0 / 24, 1.0};
  apk_v8 scale[6][6];
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++)
      for (int l = 0; l < 8; l++) scale[i][j][l] = (float)(diag[i] * diag[j]);
  for (int m0 = 0; m0 < g->m; m0 += APK_MR) {
    int rows = apk_imin(APK_MR, g->m - m0);
    apk_v8 live;
    for (int r = 0; r < 8; r++) live[r] = r < rows ? 1.0f : 0.0f;
    float *panel = u + (ptrdiff_t)m0 * g->c;
    for (int c = 0; c < g->c; c++) {
      const float *src[8];
      for (int r = 0; r < 8; r++)
        src[r] = wt + ((ptrdiff_t)(m0 + apk_imin(r, rows - 1)) * g->c + c) * 9;
      apk_v8 k[9];
      for (int i = 0; i < 9; i++)
        k[i] = (apk_v8){src[0][i], src[1][i], src[2][i], src[3][i],
                        src[4][i], src[5][i], src[6][i], src[7][i]} * live;
      apk_v8 gk[6][3]; /* Gi k */
      for (int j = 0; j < 3; j++) {
        apk_v8 k0 = k[j], k1 = k[3 + j], k2 = k[6 + j];
        gk[0][j] = k0;
        gk[1][j] = k0 + k1 + k2;
        gk[2][j] = k0 - k1 + k2;
        gk[3][j] = k0 + 2.0f * k1 + 4.0f * k2;
        gk[4][j] = k0 - 2.0f * k1 + 4.0f * k2;
        gk[5][j] = k2;
      }
      float *dst = panel + (ptrdiff_t)c * APK_MR;
      for (int i = 0; i < 6; i++) {
        apk_v8 a0 = gk[i][0], a1 = gk[i][1], a2 = gk[i][2];
        apk_v8 r6[6] = {a0, a0 + a1 + a2, a0 - a1 + a2, a0 + 2.0f * a1 + 4.0f * a2,
                        a0 - 2.0f * a1 + 4.0f * a2, a2};
        for (int j = 0; j < 6; j++) {
          apk_v8 out = r6[j] * scale[i][j];
          memcpy(dst + (ptrdiff_t)(i * 6 + j) * u_stride, &out, sizeof(float) * APK_MR);
        }
      }
    }
  }
}

/* Channel c's columns past nt up to a whole vector (ntv), in each of the
 * transform's points: the micro-kernel reads them (and drops them), so they
 * are zeros, and no stale bits become denormals there. NR being a multiple
 * of VL, they are contiguous lanes of one micro-panel. */
static void apk_wino_zero_tail(const apk_wino *g, int c, int nt, int ntv, int points, float *v,
                               size_t v_stride)
{
  if (nt >= ntv)
    return;
  ptrdiff_t at = (ptrdiff_t)(nt / APK_NR) * APK_NR * g->c + (ptrdiff_t)c * APK_NR + nt % APK_NR;
  for (int xi = 0; xi < points; xi++)
    memset(v + (ptrdiff_t)xi * v_stride + at, 0, sizeof(float) * (size_t)(ntv - nt));
}

/* V for tiles [t0, t0+nt) of one image (x: its c channels), packed as B:
 * tile t0+i is column i, in micro-panel i / NR. Per channel and run of
 * tiles in one tile row, the 4 input rows are copied with their zero padding
 * into a strip, the vertical transform B^T d runs along it, then the
 * horizontal one reads its even and odd columns into the 16 destinations:
 * contiguous loops GCC vectorises. */
static void apk_wino_input(const apk_wino *g, const float *x, int t0, int nt, float *v,
                           size_t v_stride, float *strip)
{
  ptrdiff_t sw = (ptrdiff_t)apk_vround((size_t)2 * g->tw + 2);
  float *rows = strip, *u = strip + 4 * sw;
  int ntv = (nt + APK_VL - 1) / APK_VL * APK_VL;
  for (int c = 0; c < g->c; c++) {
    const float *xc = x + (ptrdiff_t)c * g->h * g->w;
    for (int i = 0; i < nt;) {
      int t = t0 + i, ty = t / g->tw, tx0 = t % g->tw;
      int run = apk_imin(g->tw - tx0, nt - i); /* tiles of this tile row */
      int col_lo = 2 * tx0, col_hi = 2 * (tx0 + run) + 2; /* padded columns */
      for (int r = 0; r < 4; r++) {
        int ih = 2 * ty + r - g->pt;
        float *d = rows + r * sw;
        if (ih < 0 || ih >= g->h) {
          for (int k = col_lo; k < col_hi; k++) d[k] = 0.0f;
          continue;
        }
        const float *src = xc + (ptrdiff_t)ih * g->w; /* padded column k is src[k - pl] */
        int a = apk_imin(apk_imax(col_lo, g->pl), col_hi);
        int b = apk_imax(apk_imin(col_hi, g->pl + g->w), a);
        for (int k = col_lo; k < a; k++) d[k] = 0.0f;
        memcpy(d + a, src + (a - g->pl), sizeof(float) * (size_t)(b - a));
        for (int k = b; k < col_hi; k++) d[k] = 0.0f;
      }
      for (int k = col_lo; k < col_hi; k++) {
        float d0 = rows[k], d1 = rows[sw + k], d2 = rows[2 * sw + k], d3 = rows[3 * sw + k];
        u[k] = d0 - d2;
        u[sw + k] = d1 + d2;
        u[2 * sw + k] = d2 - d1;
        u[3 * sw + k] = d1 - d3;
      }
      /* Split at micro-panel boundaries: inside one, columns are contiguous. */
      for (int j0 = 0; j0 < run;) {
        int col = i + j0, lane = col % APK_NR, len = apk_imin(run - j0, APK_NR - lane);
        float *base = v + (ptrdiff_t)(col - lane) * g->c + (ptrdiff_t)c * APK_NR + lane;
        for (int a = 0; a < 4; a++) {
          const float *restrict e = u + a * sw + 2 * (tx0 + j0);
          float *restrict v0 = base + (ptrdiff_t)(a * 4) * v_stride, *restrict v1 = v0 + v_stride;
          float *restrict v2 = v1 + v_stride, *restrict v3 = v2 + v_stride;
          for (int j = 0; j < len; j++) {
            float e0 = e[2 * j], o0 = e[2 * j + 1], e1 = e[2 * j + 2], o1 = e[2 * j + 3];
            v0[j] = e0 - e1;
            v1[j] = o0 + e1;
            v2[j] = e1 - o0;
            v3[j] = o0 - o1;
          }
        }
        j0 += len;
      }
      i += run;
    }
    apk_wino_zero_tail(g, c, nt, ntv, 16, v, v_stride);
  }
}

/* o = B^T d for F(4x4, 3x3), on vectors. The products by 5 round, so
 * their multiply-adds are explicit (both compilers of the kernels then
 * round alike); those by 2 and 4 are exact, fused or not. */
static inline void apk_wino4_bt(const apk_vf *d, apk_vf *o, apk_vf two, apk_vf four, apk_vf five)
{
  o[0] = apk_fma(-five, d[2], apk_fma(four, d[0], d[4]));
  o[1] = d[3] + d[4] - four * (d[1] + d[2]);
  o[2] = apk_fma(four, d[1] - d[2], d[4]) - d[3];
  o[3] = apk_fma(two, d[3] - d[1], d[4]) - d[2];
  o[4] = apk_fma(two, d[1] - d[3], d[4]) - d[2];
  o[5] = apk_fma(-five, d[3], apk_fma(four, d[1], d[5]));
}

/* F(4x4, 3x3)'s V for tiles [t0, t0+nt) of one image, packed as B like
 * apk_wino_input's, with B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0;
 * 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]. Tile j of a
 * tile row reads padded columns 4j to 4j+5, a stride GCC does not
 * vectorise: the 6 input rows are copied into the strip split by column
 * mod 4 (phase q, entry j: column 4j + q), so both transforms read
 * contiguous vectors of tiles, columns 4j+4 and 4j+5 being entry j+1 of
 * phases 0 and 1. */
static void apk_wino4_input(const apk_wino *g, const float *x, int t0, int nt, float *v,
                            size_t v_stride, float *strip)
{
  ptrdiff_t pw = apk_wino4_phase_floats(g); /* one phase of one row */
  float *rows = strip, *u = strip + 24 * pw; /* [6 rows][4 phases][pw] */
  int ntv = (nt + APK_VL - 1) / APK_VL * APK_VL;
  apk_vf two = apk_broadcast(2.0f), four = apk_broadcast(4.0f), five = apk_broadcast(5.0f);
  for (int c = 0; c < g->c; c++) {
    const float *xc = x + (ptrdiff_t)c * g->h * g->w;
    for (int i = 0; i < nt;) {
      int t = t0 + i, ty = t / g->tw, tx0 = t % g->tw;
      int run = apk_imin(g->tw - tx0, nt - i); /* tiles of this tile row */
      int col_lo = 4 * tx0, col_hi = 4 * (tx0 + run) + 2; /* padded columns */
      for (int r = 0; r < 6; r++) {
        int ih = 4 * ty + r - g->pt;
        float *d = rows + r * 4 * pw;
        if (ih < 0 || ih >= g->h) {
          for (int k = col_lo; k < col_hi; k++) d[(k & 3) * pw + (k >> 2)] = 0.0f;
          continue;
        }
        const float *src = xc + (ptrdiff_t)ih * g->w; /* padded column k is src[k - pl] */
        int a = apk_imin(apk_imax(col_lo, g->pl), col_hi);
        int b = apk_imax(apk_imin(col_hi, g->pl + g->w), a);
        int k = col_lo;
        for (; k < a; k++) d[(k & 3) * pw + (k >> 2)] = 0.0f;
        for (; k < b && (k & 3); k++) d[(k & 3) * pw + (k >> 2)] = src[k - g->pl];
        /* Whole groups of 4 columns, split into the 4 phases. */
        const float *s4 = src + (k - g->pl);
        float *restrict p0 = d + (k >> 2), *restrict p1 = p0 + pw, *restrict p2 = p1 + pw;
        float *restrict p3 = p2 + pw;
        int groups = (b - k) >> 2, j = 0;
#if defined(__AVX512F__)
        /* Tile rows are short (14 tiles at 56 x 56), below the trip count
         * GCC's vectorised loop needs: 16 groups at a time by permutes,
         * loads and stores masked to the groups there are. */
        for (; j < groups; j += 16) {
          int left = apk_imin(16, groups - j);
          __m512 rv[4];
          for (int h = 0; h < 4; h++) {
            int have = apk_imax(0, apk_imin(16, 4 * left - 16 * h));
            rv[h] = _mm512_maskz_loadu_ps((__mmask16)((1u << have) - 1), s4 + 4 * j + 16 * h);
          }
          float *restrict dst[4] = {p0, p1, p2, p3};
          for (int q = 0; q < 4; q++) {
            __m512i idx = _mm512_setr_epi32(q, q + 4, q + 8, q + 12, q + 16, q + 20, q + 24, q + 28,
                                            q, q, q, q, q, q, q, q);
            __m512 lo = _mm512_permutex2var_ps(rv[0], idx, rv[1]);
            __m512 hi = _mm512_permutex2var_ps(rv[2], idx, rv[3]);
            _mm512_mask_storeu_ps(dst[q] + j, (__mmask16)((1u << left) - 1),
                                  _mm512_shuffle_f32x4(lo, hi, 0x44));
          }
        }
#endif
        for (; j < groups; j++) {
          p0[j] = s4[4 * j];
          p1[j] = s4[4 * j + 1];
          p2[j] = s4[4 * j + 2];
          p3[j] = s4[4 * j + 3];
        }
        for (k += 4 * groups; k < b; k++) d[(k & 3) * pw + (k >> 2)] = src[k - g->pl];
        for (; k < col_hi; k++) d[(k & 3) * pw + (k >> 2)] = 0.0f;
      }
      /* B^T d down the columns, a vector of entries at a time from the one
       * holding tx0 (entries outside the run are garbage, never read). */
      for (int q = 0; q < 4; q++)
        for (int j = tx0 / APK_VL * APK_VL; j <= tx0 + run; j += APK_VL) {
          apk_vf d[6], o[6];
          for (int r = 0; r < 6; r++) memcpy(&d[r], rows + (r * 4 + q) * pw + j, sizeof d[r]);
          apk_wino4_bt(d, o, two, four, five);
          for (int r = 0; r < 6; r++) memcpy(u + (r * 4 + q) * pw + j, &o[r], sizeof o[r]);
        }
      /* Then along the rows, into micro-panels: inside one, columns are
       * contiguous. */
      for (int j0 = 0; j0 < run;) {
        int col = i + j0, lane = col % APK_NR, len = apk_imin(run - j0, APK_NR - lane);
        float *base = v + (ptrdiff_t)(col - lane) * g->c + (ptrdiff_t)c * APK_NR + lane;
        for (int a = 0; a < 6; a++) {
          const float *e = u + a * 4 * pw + tx0 + j0;
          float *va = base + (ptrdiff_t)(a * 6) * v_stride;
          for (int j = 0; j < len; j += APK_VL) {
            apk_vf d[6], o[6];
            for (int q = 0; q < 4; q++) memcpy(&d[q], e + q * pw + j, sizeof d[q]);
            memcpy(&d[4], e + j + 1, sizeof d[4]);
            memcpy(&d[5], e + pw + j + 1, sizeof d[5]);
            apk_wino4_bt(d, o, two, four, five);
            /* A whole vector where it stays inside the panel's row: lanes
             * past len belong to later runs of this channel, or past nt,
             * all written after this. */
            int n = apk_imin(APK_VL, len - j);
            for (int b = 0; b < 6; b++) {
              float *dst = va + (ptrdiff_t)b * v_stride + j;
              if (lane + j + APK_VL <= APK_NR)
                memcpy(dst, &o[b], sizeof o[b]);
              else
#if defined(__AVX512F__)
                _mm512_mask_storeu_ps(dst, (__mmask16)((1u << n) - 1), o[b]);
#else
                for (int l = 0; l < n; l++) dst[l] = o[b][l];
#endif
            }
          }
        }
        j0 += len;
      }
      i += run;
    }
    apk_wino_zero_tail(g, c, nt, ntv, 36, v, v_stride);
  }
}

/* Writes r x r output tiles [t0, t0+nt) of one channel (out[r * a + l][i]:
 * row a, column l of tile t0+i) into ym, tile row by tile row; r is a
 * constant at both calls, so the inner loops unroll. */
static inline void apk_wino_store(const apk_wino *g, int r, float (*out)[APK_WINO_TILES_MAX],
                                  int t0, int nt, float *ym)
{
  for (int i = 0; i < nt;) {
    int t = t0 + i, ty = t / g->tw, tx0 = t % g->tw;
    int run = apk_imin(g->tw - tx0, nt - i);
    int oy = r * ty, ox = r * tx0;
    int full = apk_imin(run, (g->ow - ox) / r); /* tiles with all r columns inside */
    int rest = g->ow - ox - full * r;           /* columns of the next tile inside */
    for (int a = 0; a < r && oy + a < g->oh; a++) {
      float *restrict row = ym + (ptrdiff_t)(oy + a) * g->ow + ox;
      for (int j = 0; j < full; j++)
        for (int l = 0; l < r; l++) row[r * j + l] = out[r * a + l][i + j];
      if (full < run)
        for (int l = 0; l < rest; l++) row[r * full + l] = out[r * a + l][i + full];
    }
    i += run;
  }
}

/* y (the image's m output channels) of tiles [t0, t0+nt) from M[xi]
 * (m x nt, row stride nt_ld), plus bias: A^T M A along the tiles into
 * r^2 rows (the r x r outputs), then written tile row by tile row.
 * F(2x2, 3x3): A^T = [1 1 1 0; 0 1 -1 -1]; F(4x4, 3x3):
 * A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]. */
static void apk_wino_output(const apk_wino *g, const float *mo, size_t m_stride, int nt_ld,
                            int t0, int nt, const float *bias, float *y)
{
  ptrdiff_t ohw = (ptrdiff_t)g->oh * g->ow;
  float out[16][APK_WINO_TILES_MAX];
  for (int m = 0; m < g->m; m++) {
    const float *restrict s = mo + (ptrdiff_t)m * nt_ld;
    float b = bias ? bias[m] : 0.0f;
    if (g->r == 2) {
      for (int i = 0; i < nt; i++) {
        float q[4][4];
        for (int xi = 0; xi < 16; xi++) q[xi / 4][xi % 4] = s[(ptrdiff_t)xi * m_stride + i];
        float r0[4], r1[4];
        for (int a = 0; a < 4; a++) {
          r0[a] = q[a][0] + q[a][1] + q[a][2];
          r1[a] = q[a][1] - q[a][2] - q[a][3];
        }
        out[0][i] = r0[0] + r0[1] + r0[2] + b;
        out[1][i] = r1[0] + r1[1] + r1[2] + b;
        out[2][i] = r0[1] - r0[2] - r0[3] + b;
        out[3][i] = r1[1] - r1[2] - r1[3] + b;
      }
    } else {
      /* A vector of tiles at a time (GCC leaves the scalar form of this
       * loop scalar): columns up to nt rounded to a vector lie inside M's
       * row (nt_ld is a multiple of the vector width) and inside out; the
       * ones past nt are computed and never stored. */
      apk_vf bv = apk_broadcast(b), two = apk_broadcast(2.0f), four = apk_broadcast(4.0f),
             eight = apk_broadcast(8.0f);
      for (int i = 0; i < nt; i += APK_VL) {
        apk_vf t[6][4]; /* t[a]: A^T applied along row a of M's 6 x 6 */
        for (int a = 0; a < 6; a++) {
          apk_vf q[6];
          for (int c = 0; c < 6; c++)
            memcpy(&q[c], s + (ptrdiff_t)(a * 6 + c) * m_stride + i, sizeof q[c]);
          apk_vf p12 = q[1] + q[2], m12 = q[1] - q[2], p34 = q[3] + q[4], m34 = q[3] - q[4];
          t[a][0] = q[0] + p12 + p34;
          t[a][1] = apk_fma(two, m34, m12);
          t[a][2] = apk_fma(four, p34, p12);
          t[a][3] = apk_fma(eight, m34, m12) + q[5];
        }
        for (int l = 0; l < 4; l++) {
          apk_vf p12 = t[1][l] + t[2][l], m12 = t[1][l] - t[2][l];
          apk_vf p34 = t[3][l] + t[4][l], m34 = t[3][l] - t[4][l];
          apk_vf o[4] = {t[0][l] + p12 + p34 + bv, apk_fma(two, m34, m12) + bv,
                         apk_fma(four, p34, p12) + bv, apk_fma(eight, m34, m12) + t[5][l] + bv};
          for (int k = 0; k < 4; k++) memcpy(&out[4 * k + l][i], &o[k], sizeof o[k]);
        }
      }
    }
    float *ym = y + (ptrdiff_t)m * ohw;
    if (g->r == 2)
      apk_wino_store(g, 2, out, t0, nt, ym);
    else
      apk_wino_store(g, 4, out, t0, nt, ym);
  }
}

/* One image: y (m x oh x ow) = the convolution of x (c x h x w) by U. */
static void apk_wino_image(const apk_wino *g, const float *x, const float *u, size_t u_stride,
                           const float *bias, float *y, float *v, size_t v_stride, float *mo,
                           size_t m_stride, float *strip)
{
  for (int t0 = 0; t0 < g->tiles; t0 += g->nt) {
    int nt = apk_imin(g->nt, g->tiles - t0);
    if (g->r == 2)
      apk_wino_input(g, x, t0, nt, v, v_stride, strip);
    else
      apk_wino4_input(g, x, t0, nt, v, v_stride, strip);
    for (int xi = 0; xi < g->nxi; xi++)
      apk_sgemm_prepacked(g->m, nt, g->c, u + (ptrdiff_t)xi * u_stride, v + (ptrdiff_t)xi * v_stride,
                          0.0f, mo + (ptrdiff_t)xi * m_stride, g->nt);
    apk_wino_output(g, mo, m_stride, g->nt, t0, nt, bias, y);
  }
}

/* The whole batch: flip 0 for the forward kernel, 1 for backward data
 * (F(2x2, 3x3) only). U is transformed from wt into the workspace, unless
 * packed_u (NULL or the a^2 U of apk_conv2d_pack_weights) holds it already. */
static void apk_wino_run(const apk_wino *g, int batch, const float *x, const float *wt, int flip,
                         const float *packed_u, const float *bias, float *y, float *work)
{
  size_t u_stride = apk_vround(apk_packed_a_floats(g->m, g->c));
  size_t v_stride = apk_vround(apk_packed_b_floats(g->c, g->nt));
  size_t m_stride = apk_vround((size_t)g->m * g->nt);
  float *u = apk_valign(work);
  float *v = u + g->nxi * u_stride, *mo = v + g->nxi * v_stride;
  float *strip = mo + g->nxi * m_stride;
  const float *uw = packed_u;
  if (!uw) {
    if (g->r == 2)
      apk_wino_weights(g, wt, flip, u, u_stride);
    else
      apk_wino4_weights(g, wt, u, u_stride);
    uw = u;
  }
  for (int n = 0; n < batch; n++)
    apk_wino_image(g, x + (ptrdiff_t)n * g->c * g->h * g->w, uw, u_stride, bias,
                   y + (ptrdiff_t)n * g->m * g->oh * g->ow, v, v_stride, mo, m_stride, strip);
}

/* Forward: the convolution itself. Backward data: dx = the convolution of dy
 * (M channels) by the flipped, transposed kernel with pads 2 - pad, which
 * gives back the input's size. algo: APK_CONV_WINOGRAD or _WINOGRAD4. */
static apk_wino apk_wino_of(const apk_conv2d *p, apk_conv_algo algo, apk_conv_kernel which)
{
  int oh = apk_conv2d_out_h(p), ow = apk_conv2d_out_w(p);
  int r = algo == APK_CONV_WINOGRAD4 ? 4 : 2;
  if (which == APK_CONV_FORWARD)
    return apk_wino_geometry(r, p->in_channels, p->out_channels, p->in_h, p->in_w, oh, ow,
                             p->pad_top, p->pad_left);
  return apk_wino_geometry(r, p->out_channels, p->in_channels, oh, ow, p->in_h, p->in_w,
                           2 - p->pad_top, 2 - p->pad_left);
}

APK_API int apk_conv2d_wino_blocks(const apk_conv2d *p, apk_conv_kernel which)
{
  apk_wino g = apk_wino_of(p, APK_CONV_WINOGRAD, which);
  return (g.tiles + g.nt - 1) / g.nt;
}

static int apk_is_winograd(apk_conv_algo algo)
{
  return algo == APK_CONV_WINOGRAD || algo == APK_CONV_WINOGRAD4;
}

/* ---- choosing ---- */

APK_API int apk_conv2d_supports(const apk_conv2d *p, apk_conv_algo algo, apk_conv_kernel which)
{
  switch (algo) {
  case APK_CONV_IM2COL:
  case APK_CONV_IMPLICIT:
    return 1;
  case APK_CONV_WINOGRAD:
  case APK_CONV_WINOGRAD4:
    if (which == APK_CONV_BACKWARD_WEIGHTS || (algo == APK_CONV_WINOGRAD4 && which != APK_CONV_FORWARD))
      return 0;
    return p->groups == 1 && p->kernel_h == 3 &&
           p->kernel_w == 3 && p->stride_h == 1 && p->stride_w == 1 && p->dilation_h == 1 &&
           p->dilation_w == 1 && p->pad_top <= 2 && p->pad_left <= 2 && p->pad_bottom <= 2 &&
           p->pad_right <= 2;
  }
  return 0;
}

APK_API apk_conv_algo apk_conv2d_choose(const apk_conv2d *p, apk_conv_kernel which)
{
  if (apk_conv2d_is_pointwise(p)) return APK_CONV_IM2COL;
  if (apk_conv2d_supports(p, APK_CONV_WINOGRAD, which)) {
    /* Measured (docs/kernels.md): Winograd wins where both sides have some
     * channels (the transforms are amortised over them; 3 input channels
     * lose) and the weight transform, redone on every call, meets enough
     * tiles (ResNet-50's 7x7 stage at batch 1, 16 tiles, loses; at batch 8
     * it wins). */
    apk_wino g = apk_wino_of(p, APK_CONV_WINOGRAD, which);
    if (apk_imin(g.c, g.m) >= 16 && (long)p->batch * g.tiles >= 40) return APK_CONV_WINOGRAD;
  }
  /* Backward data: the GEMM writing the column matrix and one col2im pass
   * measured faster than col2im on every product tile (whose per-tile walk
   * costs more than the pass it saves). */
  return which == APK_CONV_BACKWARD_DATA ? APK_CONV_IM2COL : APK_CONV_IMPLICIT;
}

APK_API apk_conv_algo apk_conv2d_choose_packed(const apk_conv2d *p)
{
  /* Measured on ResNet-50 at batch 1 (docs/kernels.md, "Packed weights"):
   * with the weights transformed once, Winograd also wins on the 7x7
   * stage's 16 tiles, which apk_conv2d_choose declines for the transform it
   * would redo on every call; F(4x4, 3x3) wins from 16 of its tiles per
   * image (the 14x14 stage) and loses on 4 (the 7x7 stage, at batch 1 and
   * 8: images are tiled one by one, so its GEMMs have 4 columns and read
   * 36 U instead of 16). */
  if (!apk_conv2d_is_pointwise(p) && apk_conv2d_supports(p, APK_CONV_WINOGRAD, APK_CONV_FORWARD)) {
    apk_wino g = apk_wino_of(p, APK_CONV_WINOGRAD, APK_CONV_FORWARD);
    apk_wino g4 = apk_wino_of(p, APK_CONV_WINOGRAD4, APK_CONV_FORWARD);
    if (apk_imin(g.c, g.m) >= 16 && g4.tiles >= 16) return APK_CONV_WINOGRAD4;
    if (apk_imin(g.c, g.m) >= 16 && (long)p->batch * g.tiles >= 16) return APK_CONV_WINOGRAD;
  }
  return apk_conv2d_choose(p, APK_CONV_FORWARD);
}

APK_API size_t apk_conv2d_algo_work_floats(const apk_conv2d *p, apk_conv_algo algo,
                                           apk_conv_kernel which)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int mg = p->out_channels / p->groups;
  int kg = p->in_channels / p->groups * p->kernel_h * p->kernel_w;
  if (apk_is_winograd(algo)) {
    apk_wino g = apk_wino_of(p, algo, which);
    return apk_wino_floats(&g);
  }
  size_t gemm;
  switch (which) {
  case APK_CONV_FORWARD: gemm = apk_sgemm_work_floats(mg, ohw, kg); break;
  case APK_CONV_BACKWARD_DATA: gemm = apk_sgemm_work_floats(kg, ohw, mg); break;
  default: gemm = apk_sgemm_work_floats(mg, kg, ohw); break;
  }
  if (apk_conv2d_is_pointwise(p)) return gemm;
  if (algo == APK_CONV_IM2COL) return (size_t)kg * (size_t)ohw + gemm;
  /* Backward weights' strip of NR taps x KC pixels. */
  return which == APK_CONV_BACKWARD_WEIGHTS ? gemm + (size_t)APK_NR * APK_KC + APK_VL : gemm;
}

APK_API size_t apk_conv2d_work_floats(const apk_conv2d *p)
{
  size_t most = 0;
  for (int k = APK_CONV_FORWARD; k <= APK_CONV_BACKWARD_WEIGHTS; k++) {
    apk_conv_kernel which = (apk_conv_kernel)k;
    most = apk_size_max(most, apk_conv2d_algo_work_floats(p, apk_conv2d_choose(p, which), which));
  }
  most = apk_size_max(most, apk_conv2d_algo_work_floats(p, apk_conv2d_choose_packed(p),
                                                        APK_CONV_FORWARD));
  return most;
}

/* ---- the three kernels ---- */

/* Copies of the weights packed: one per group, or one per Winograd product. */
static size_t apk_packed_copies(const apk_conv2d *p, apk_conv_algo algo)
{
  if (apk_is_winograd(algo)) return algo == APK_CONV_WINOGRAD4 ? 36 : 16;
  return (size_t)p->groups;
}

/* The packed weights of the forward kernel: per group, w_g (M/g x Kg)
 * packed as A, at a vector-rounded stride; Winograd's 16 U. mr and vl are
 * the register tile's rows and the vector width: this build's, or the
 * largest of any build (the bound code generation sizes buffers with). */
static size_t apk_conv2d_packed_size(const apk_conv2d *p, apk_conv_algo algo, size_t mr,
                                     size_t vl)
{
  size_t m = (size_t)p->out_channels, k = (size_t)p->in_channels;
  if (!apk_is_winograd(algo)) {
    m /= (size_t)p->groups;
    k = k / (size_t)p->groups * (size_t)p->kernel_h * (size_t)p->kernel_w;
  }
  size_t one = (m + mr - 1) / mr * mr * k;
  one = (one + vl - 1) / vl * vl;
  return apk_packed_copies(p, algo) * one;
}

APK_API size_t apk_conv2d_packed_floats_algo(const apk_conv2d *p, apk_conv_algo algo)
{
  return apk_conv2d_packed_size(p, algo, APK_MR, APK_VL);
}

APK_API size_t apk_conv2d_packed_floats(const apk_conv2d *p)
{
  return apk_conv2d_packed_floats_algo(p, apk_conv2d_choose_packed(p));
}

APK_API size_t apk_conv2d_packed_floats_max(const apk_conv2d *p)
{
  apk_conv_algo algo = apk_conv2d_choose_packed(p);
  /* (m + MR - 1) rounded to MR is at most m + MR_MAX - 1 rows. */
  size_t m = (size_t)p->out_channels / (apk_is_winograd(algo) ? 1 : (size_t)p->groups);
  size_t k = apk_is_winograd(algo)
                 ? (size_t)p->in_channels
                 : (size_t)p->in_channels / (size_t)p->groups * (size_t)p->kernel_h *
                       (size_t)p->kernel_w;
  size_t one = (m + APK_MR_MAX - 1) * k;
  one = (one + APK_VL_MAX - 1) / APK_VL_MAX * APK_VL_MAX;
  return apk_packed_copies(p, algo) * one;
}

APK_API void apk_conv2d_pack_weights_algo(const apk_conv2d *p, apk_conv_algo algo,
                                          const float *w, float *dst)
{
  size_t stride = apk_conv2d_packed_size(p, algo, APK_MR, APK_VL) / apk_packed_copies(p, algo);
  if (apk_is_winograd(algo)) {
    apk_wino g = apk_wino_of(p, algo, APK_CONV_FORWARD);
    if (g.r == 2)
      apk_wino_weights(&g, w, 0, dst, stride);
    else
      apk_wino4_weights(&g, w, dst, stride);
    return;
  }
  int mg = p->out_channels / p->groups;
  int kg = p->in_channels / p->groups * p->kernel_h * p->kernel_w;
  for (int g = 0; g < p->groups; g++)
    apk_pack_a_all(0, mg, kg, w + (ptrdiff_t)g * mg * kg, kg, dst + (ptrdiff_t)g * stride);
}

APK_API void apk_conv2d_pack_weights(const apk_conv2d *p, const float *w, float *dst)
{
  apk_conv2d_pack_weights_algo(p, apk_conv2d_choose_packed(p), w, dst);
}

/* The forward kernel, from w or (w NULL) from the packed weights pw. */
static void apk_conv2d_forward_run(const apk_conv2d *p, const apk_conv_ops *ops,
                                   apk_conv_algo algo, const float *x, const float *w,
                                   const float *pw, const float *bias, float *y, float *work)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  if (apk_is_winograd(algo)) {
    apk_wino g = apk_wino_of(p, algo, APK_CONV_FORWARD);
    apk_wino_run(&g, p->batch, x, w, 0, pw, bias, y, work);
    return;
  }
  if (algo == APK_CONV_IMPLICIT && !pw && apk_conv2d_is_direct(p)) {
    apk_direct_forward(p, x, w, bias, y);
    return;
  }
  size_t pw_stride = pw ? apk_conv2d_packed_size(p, algo, APK_MR, APK_VL) / (size_t)p->groups : 0;
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  int kg = cg * p->kernel_h * p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  int pointwise = apk_conv2d_is_pointwise(p);
  int im2col = !pointwise && algo == APK_CONV_IM2COL;
  float *col = work;
  float *gemm_work = im2col ? work + (ptrdiff_t)kg * ohw : work;
  for (int n = 0; n < p->batch; n++) {
    for (int g = 0; g < p->groups; g++) {
      const float *xg = x + ((ptrdiff_t)n * p->in_channels + (ptrdiff_t)g * cg) * hw;
      float *yg = y + ((ptrdiff_t)n * p->out_channels + (ptrdiff_t)g * mg) * ohw;
      const float *wg = pw ? NULL : w + (ptrdiff_t)g * mg * kg;
      const float *pwg = pw ? pw + (ptrdiff_t)g * (ptrdiff_t)pw_stride : NULL;
      /* The bias is written first and the product accumulated onto it: one
       * pass over y instead of a second one after the GEMM. */
      float beta = 0.0f;
      if (bias) {
        for (int i = 0; i < mg; i++) {
          float *yi = yg + (ptrdiff_t)i * ohw;
          float b = bias[g * mg + i];
          for (int j = 0; j < ohw; j++) yi[j] = b;
        }
        beta = 1.0f;
      }
      if (pointwise || im2col) {
        const float *cols = xg;
        if (im2col) {
          APK_OP(ops, im2col)(p, xg, cg, col);
          cols = col;
        }
        if (pwg) {
          apk_matrix_b b = {0, cols, ohw};
          apk_sgemm_ex_pa(mg, ohw, kg, pwg, apk_pack_b_matrix, &b, beta, yg, ohw, gemm_work);
        } else {
          apk_sgemm(0, 0, mg, ohw, kg, 1.0f, wg, kg, cols, ohw, beta, yg, ohw, gemm_work);
        }
        continue;
      }
      apk_col_src src = {p, xg, NULL};
      if (pwg)
        apk_sgemm_ex_pa(mg, ohw, kg, pwg, APK_OP(ops, pack_col), &src, beta, yg, ohw, gemm_work);
      else
        apk_sgemm_ex(0, mg, ohw, kg, wg, kg, APK_OP(ops, pack_col), &src, beta, yg, ohw, NULL,
                     NULL, gemm_work);
    }
  }
}

static void apk_conv2d_backward_data_run(const apk_conv2d *p, const apk_conv_ops *ops,
                                         apk_conv_algo algo, const float *dy, const float *w,
                                         float *dx, float *work)
{
  if (algo == APK_CONV_WINOGRAD) {
    apk_wino g = apk_wino_of(p, APK_CONV_WINOGRAD, APK_CONV_BACKWARD_DATA);
    apk_wino_run(&g, p->batch, dy, w, 1, NULL, NULL, dx, work);
    return;
  }
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  int kg = cg * p->kernel_h * p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  int pointwise = apk_conv2d_is_pointwise(p);
  int im2col = !pointwise && algo == APK_CONV_IM2COL;
  float *col = work;
  float *gemm_work = im2col ? work + (ptrdiff_t)kg * ohw : work;
  for (int n = 0; n < p->batch; n++) {
    for (int g = 0; g < p->groups; g++) {
      const float *dyg = dy + ((ptrdiff_t)n * p->out_channels + (ptrdiff_t)g * mg) * ohw;
      float *dxg = dx + ((ptrdiff_t)n * p->in_channels + (ptrdiff_t)g * cg) * hw;
      const float *wg = w + (ptrdiff_t)g * mg * kg;
      if (pointwise) {
        apk_sgemm(1, 0, kg, ohw, mg, 1.0f, wg, kg, dyg, ohw, 0.0f, dxg, ohw, gemm_work);
        continue;
      }
      memset(dxg, 0, sizeof(float) * (size_t)cg * (size_t)hw);
      if (im2col) {
        apk_sgemm(1, 0, kg, ohw, mg, 1.0f, wg, kg, dyg, ohw, 0.0f, col, ohw, gemm_work);
        APK_OP(ops, col2im)(p, col, cg, dxg);
        continue;
      }
      apk_matrix_b src = {0, dyg, ohw};
      apk_col_sink sink = {p, dxg};
      apk_sgemm_ex(1, kg, ohw, mg, wg, kg, apk_pack_b_matrix, &src, 0.0f, NULL, 0,
                   APK_OP(ops, store_col), &sink, gemm_work);
    }
  }
}

static void apk_conv2d_backward_weights_run(const apk_conv2d *p, const apk_conv_ops *ops,
                                            apk_conv_algo algo, const float *x, const float *dy,
                                            float *dw, float *dbias, float *work)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  int kg = cg * p->kernel_h * p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  int pointwise = apk_conv2d_is_pointwise(p);
  int im2col = !pointwise && algo == APK_CONV_IM2COL;
  float *col = work;
  float *gemm_work = im2col ? work + (ptrdiff_t)kg * ohw : work;
  float *strip = apk_valign(work + apk_sgemm_work_floats(mg, kg, ohw));
  int direct = algo == APK_CONV_IMPLICIT && apk_conv2d_is_direct(p);
  if (direct)
    apk_direct_backward_weights(p, x, dy, dw);
  else if (p->batch <= 0)
    memset(dw, 0, sizeof(float) * (size_t)p->out_channels * (size_t)kg);
  for (int n = 0; !direct && n < p->batch; n++) {
    for (int g = 0; g < p->groups; g++) {
      const float *xg = x + ((ptrdiff_t)n * p->in_channels + (ptrdiff_t)g * cg) * hw;
      const float *dyg = dy + ((ptrdiff_t)n * p->out_channels + (ptrdiff_t)g * mg) * ohw;
      float *dwg = dw + (ptrdiff_t)g * mg * kg;
      /* The first image overwrites dw, later ones accumulate into it. */
      float beta = n == 0 ? 0.0f : 1.0f;
      if (pointwise || im2col) {
        const float *cols = xg;
        if (im2col) {
          APK_OP(ops, im2col)(p, xg, cg, col);
          cols = col;
        }
        apk_sgemm(0, 1, mg, kg, ohw, 1.0f, dyg, ohw, cols, ohw, beta, dwg, kg, gemm_work);
        continue;
      }
      apk_col_src src = {p, xg, strip};
      apk_sgemm_ex(0, mg, kg, ohw, dyg, ohw, APK_OP(ops, pack_col_t), &src, beta, dwg, kg, NULL,
                   NULL, gemm_work);
    }
  }
  if (dbias) {
    for (int m = 0; m < p->out_channels; m++) {
      double sum = 0.0; /* batch * OHW terms: float would lose digits */
      for (int n = 0; n < p->batch; n++) {
        const float *dym = dy + ((ptrdiff_t)n * p->out_channels + m) * ohw;
        for (int j = 0; j < ohw; j++) sum += dym[j];
      }
      dbias[m] = (float)sum;
    }
  }
}

APK_API void apk_conv2d_forward_algo(const apk_conv2d *p, apk_conv_algo algo, const float *x,
                                     const float *w, const float *bias, float *y, float *work)
{
  apk_conv2d_forward_run(p, NULL, algo, x, w, NULL, bias, y, work);
}

APK_API void apk_conv2d_backward_data_algo(const apk_conv2d *p, apk_conv_algo algo,
                                           const float *dy, const float *w, float *dx,
                                           float *work)
{
  apk_conv2d_backward_data_run(p, NULL, algo, dy, w, dx, work);
}

APK_API void apk_conv2d_backward_weights_algo(const apk_conv2d *p, apk_conv_algo algo,
                                              const float *x, const float *dy, float *dw,
                                              float *dbias, float *work)
{
  apk_conv2d_backward_weights_run(p, NULL, algo, x, dy, dw, dbias, work);
}

APK_API void apk_conv2d_forward(const apk_conv2d *p, const float *x, const float *w,
                                const float *bias, float *y, float *work)
{
  apk_conv2d_forward_ops(p, NULL, x, w, bias, y, work);
}

APK_API void apk_conv2d_backward_data(const apk_conv2d *p, const float *dy, const float *w,
                                      float *dx, float *work)
{
  apk_conv2d_backward_data_ops(p, NULL, dy, w, dx, work);
}

APK_API void apk_conv2d_backward_weights(const apk_conv2d *p, const float *x, const float *dy,
                                         float *dw, float *dbias, float *work)
{
  apk_conv2d_backward_weights_ops(p, NULL, x, dy, dw, dbias, work);
}

APK_API void apk_conv2d_forward_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                    const float *x, const float *w, const float *bias, float *y,
                                    float *work)
{
  apk_conv2d_forward_run(p, ops, apk_conv2d_choose(p, APK_CONV_FORWARD), x, w, NULL, bias, y,
                         work);
}

APK_API void apk_conv2d_forward_packed_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                           const float *x, const float *pw, const float *bias,
                                           float *y, float *work)
{
  apk_conv2d_forward_run(p, ops, apk_conv2d_choose_packed(p), x, NULL, pw, bias, y, work);
}

APK_API void apk_conv2d_forward_packed_algo(const apk_conv2d *p, apk_conv_algo algo,
                                            const float *x, const float *pw, const float *bias,
                                            float *y, float *work)
{
  apk_conv2d_forward_run(p, NULL, algo, x, NULL, pw, bias, y, work);
}

APK_API void apk_conv2d_forward_packed(const apk_conv2d *p, const float *x, const float *pw,
                                       const float *bias, float *y, float *work)
{
  apk_conv2d_forward_packed_ops(p, NULL, x, pw, bias, y, work);
}

APK_API void apk_conv2d_backward_data_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                          const float *dy, const float *w, float *dx,
                                          float *work)
{
  apk_conv2d_backward_data_run(p, ops, apk_conv2d_choose(p, APK_CONV_BACKWARD_DATA), dy, w, dx,
                               work);
}

APK_API void apk_conv2d_backward_weights_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                             const float *x, const float *dy, float *dw,
                                             float *dbias, float *work)
{
  apk_conv2d_backward_weights_run(p, ops, apk_conv2d_choose(p, APK_CONV_BACKWARD_WEIGHTS), x,
                                  dy, dw, dbias, work);
}
