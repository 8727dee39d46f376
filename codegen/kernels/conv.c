/* 2-D convolution (NCHW, groups, strides, pads, dilations) lowered to GEMM.
 *
 * Per image and group, with Kg = C/groups * KH * KW and OHW = OH * OW:
 *   forward          y_g  (M/g x OHW) = w_g (M/g x Kg) * col_g (Kg x OHW)
 *   backward data    col_g (Kg x OHW) = w_g^T * dy_g, then col2im adds it into dx
 *   backward weights dw_g (M/g x Kg)  += dy_g * col_g^T
 * A 1x1 kernel with unit strides and no padding needs no lowering: col_g is x_g
 * itself (and dx_g receives the backward-data product directly), which covers
 * half of ResNet-50's convolutions.
 */
#include "kernels.h"

#include <string.h>

APK_API int apk_conv2d_out_h(const apk_conv2d *p)
{
  int span = p->dilation_h * (p->kernel_h - 1) + 1;
  return (p->in_h + p->pad_top + p->pad_bottom - span) / p->stride_h + 1;
}

APK_API int apk_conv2d_out_w(const apk_conv2d *p)
{
  int span = p->dilation_w * (p->kernel_w - 1) + 1;
  return (p->in_w + p->pad_left + p->pad_right - span) / p->stride_w + 1;
}

static int apk_conv2d_is_pointwise(const apk_conv2d *p)
{
  return p->kernel_h == 1 && p->kernel_w == 1 && p->stride_h == 1 && p->stride_w == 1 &&
         p->pad_top == 0 && p->pad_left == 0 && p->pad_bottom == 0 && p->pad_right == 0;
}

static size_t apk_size_max(size_t a, size_t b) { return a > b ? a : b; }

APK_API size_t apk_conv2d_work_floats(const apk_conv2d *p)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int mg = p->out_channels / p->groups;
  int kg = p->in_channels / p->groups * p->kernel_h * p->kernel_w;
  size_t col = apk_conv2d_is_pointwise(p) ? 0 : (size_t)kg * (size_t)ohw;
  size_t gemm = apk_sgemm_work_floats(mg, ohw, kg);
  gemm = apk_size_max(gemm, apk_sgemm_work_floats(kg, ohw, mg));
  gemm = apk_size_max(gemm, apk_sgemm_work_floats(mg, kg, ohw));
  return col + gemm;
}

/* The output columns ow whose input column ow * stride + offset lies in
 * [0, width): [*lo, *hi). Computing the range once keeps the copy loops free of
 * bounds tests. */
static void apk_valid_range(int offset, int stride, int width, int out, int *lo, int *hi)
{
  int l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int last = width - 1 - offset; /* ow * stride <= last */
  int h = last < 0 ? 0 : last / stride + 1;
  if (h > out) h = out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

APK_API void apk_im2col(const apk_conv2d *p, const float *x, int channels, float *col)
{
  int oh_n = apk_conv2d_out_h(p), ow_n = apk_conv2d_out_w(p);
  ptrdiff_t ohw = (ptrdiff_t)oh_n * ow_n;
  for (int c = 0; c < channels; c++) {
    const float *xc = x + (ptrdiff_t)c * p->in_h * p->in_w;
    for (int kh = 0; kh < p->kernel_h; kh++) {
      int ih0 = kh * p->dilation_h - p->pad_top;
      for (int kw = 0; kw < p->kernel_w; kw++) {
        int iw0 = kw * p->dilation_w - p->pad_left;
        int lo, hi;
        apk_valid_range(iw0, p->stride_w, p->in_w, ow_n, &lo, &hi);
        float *row = col + ((ptrdiff_t)(c * p->kernel_h + kh) * p->kernel_w + kw) * ohw;
        for (int oh = 0; oh < oh_n; oh++) {
          int ih = oh * p->stride_h + ih0;
          float *dst = row + (ptrdiff_t)oh * ow_n;
          if (ih < 0 || ih >= p->in_h) {
            memset(dst, 0, sizeof(float) * (size_t)ow_n);
            continue;
          }
          const float *src = xc + (ptrdiff_t)ih * p->in_w;
          for (int ow = 0; ow < lo; ow++) dst[ow] = 0.0f;
          if (p->stride_w == 1)
            memcpy(dst + lo, src + lo + iw0, sizeof(float) * (size_t)(hi - lo));
          else
            for (int ow = lo; ow < hi; ow++) dst[ow] = src[(ptrdiff_t)ow * p->stride_w + iw0];
          for (int ow = hi; ow < ow_n; ow++) dst[ow] = 0.0f;
        }
      }
    }
  }
}

APK_API void apk_col2im(const apk_conv2d *p, const float *col, int channels, float *x)
{
  int oh_n = apk_conv2d_out_h(p), ow_n = apk_conv2d_out_w(p);
  ptrdiff_t ohw = (ptrdiff_t)oh_n * ow_n;
  for (int c = 0; c < channels; c++) {
    float *xc = x + (ptrdiff_t)c * p->in_h * p->in_w;
    for (int kh = 0; kh < p->kernel_h; kh++) {
      int ih0 = kh * p->dilation_h - p->pad_top;
      for (int kw = 0; kw < p->kernel_w; kw++) {
        int iw0 = kw * p->dilation_w - p->pad_left;
        int lo, hi;
        apk_valid_range(iw0, p->stride_w, p->in_w, ow_n, &lo, &hi);
        const float *row = col + ((ptrdiff_t)(c * p->kernel_h + kh) * p->kernel_w + kw) * ohw;
        for (int oh = 0; oh < oh_n; oh++) {
          int ih = oh * p->stride_h + ih0;
          if (ih < 0 || ih >= p->in_h) continue;
          const float *src = row + (ptrdiff_t)oh * ow_n;
          float *dst = xc + (ptrdiff_t)ih * p->in_w;
          if (p->stride_w == 1)
            for (int ow = lo; ow < hi; ow++) dst[ow + iw0] += src[ow];
          else
            for (int ow = lo; ow < hi; ow++) dst[(ptrdiff_t)ow * p->stride_w + iw0] += src[ow];
        }
      }
    }
  }
}

APK_API void apk_conv2d_forward(const apk_conv2d *p, const float *x, const float *w,
                                const float *bias, float *y, float *work)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  int kg = cg * p->kernel_h * p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  int pointwise = apk_conv2d_is_pointwise(p);
  float *col = work;
  float *gemm_work = pointwise ? work : work + (ptrdiff_t)kg * ohw;
  for (int n = 0; n < p->batch; n++) {
    for (int g = 0; g < p->groups; g++) {
      const float *xg = x + ((ptrdiff_t)n * p->in_channels + (ptrdiff_t)g * cg) * hw;
      float *yg = y + ((ptrdiff_t)n * p->out_channels + (ptrdiff_t)g * mg) * ohw;
      const float *wg = w + (ptrdiff_t)g * mg * kg;
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
      const float *cols = xg;
      if (!pointwise) {
        apk_im2col(p, xg, cg, col);
        cols = col;
      }
      apk_sgemm(0, 0, mg, ohw, kg, 1.0f, wg, kg, cols, ohw, beta, yg, ohw, gemm_work);
    }
  }
}

APK_API void apk_conv2d_backward_data(const apk_conv2d *p, const float *dy,
                                      const float *w, float *dx, float *work)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  int kg = cg * p->kernel_h * p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  int pointwise = apk_conv2d_is_pointwise(p);
  float *col = work;
  float *gemm_work = pointwise ? work : work + (ptrdiff_t)kg * ohw;
  for (int n = 0; n < p->batch; n++) {
    for (int g = 0; g < p->groups; g++) {
      const float *dyg = dy + ((ptrdiff_t)n * p->out_channels + (ptrdiff_t)g * mg) * ohw;
      float *dxg = dx + ((ptrdiff_t)n * p->in_channels + (ptrdiff_t)g * cg) * hw;
      const float *wg = w + (ptrdiff_t)g * mg * kg;
      if (pointwise) {
        apk_sgemm(1, 0, kg, ohw, mg, 1.0f, wg, kg, dyg, ohw, 0.0f, dxg, ohw, gemm_work);
        continue;
      }
      apk_sgemm(1, 0, kg, ohw, mg, 1.0f, wg, kg, dyg, ohw, 0.0f, col, ohw, gemm_work);
      memset(dxg, 0, sizeof(float) * (size_t)cg * (size_t)hw);
      apk_col2im(p, col, cg, dxg);
    }
  }
}

APK_API void apk_conv2d_backward_weights(const apk_conv2d *p, const float *x,
                                         const float *dy, float *dw, float *dbias,
                                         float *work)
{
  int ohw = apk_conv2d_out_h(p) * apk_conv2d_out_w(p);
  int cg = p->in_channels / p->groups, mg = p->out_channels / p->groups;
  int kg = cg * p->kernel_h * p->kernel_w;
  ptrdiff_t hw = (ptrdiff_t)p->in_h * p->in_w;
  int pointwise = apk_conv2d_is_pointwise(p);
  float *col = work;
  float *gemm_work = pointwise ? work : work + (ptrdiff_t)kg * ohw;
  if (p->batch <= 0) {
    memset(dw, 0, sizeof(float) * (size_t)p->out_channels * (size_t)kg);
  }
  for (int n = 0; n < p->batch; n++) {
    for (int g = 0; g < p->groups; g++) {
      const float *xg = x + ((ptrdiff_t)n * p->in_channels + (ptrdiff_t)g * cg) * hw;
      const float *dyg = dy + ((ptrdiff_t)n * p->out_channels + (ptrdiff_t)g * mg) * ohw;
      float *dwg = dw + (ptrdiff_t)g * mg * kg;
      const float *cols = xg;
      if (!pointwise) {
        apk_im2col(p, xg, cg, col);
        cols = col;
      }
      /* The first image overwrites dw, later ones accumulate into it. */
      apk_sgemm(0, 1, mg, kg, ohw, 1.0f, dyg, ohw, cols, ohw, n == 0 ? 0.0f : 1.0f, dwg, kg,
                gemm_work);
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
