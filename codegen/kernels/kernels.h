/* accpar kernels: float32 GEMM and 2-D convolution for generated programs.
 *
 * Self-contained C11 (no dependency on the compiler's IR). Two ways to use it:
 *   - linked: the accpar_kernels library compiles gemm.c and conv.c once, with
 *     -O3 and (by default) -march=native; callers include this header.
 *   - in one translation unit: generated code defines APK_STATIC, then includes
 *     gemm.c and conv.c. Every kernel is then a static function of that unit, so
 *     GCC's interprocedural constant propagation clones it for the constant
 *     shapes of the calls (the loop bounds of a device's box).
 * docs/kernels.md explains the blocking and gives the measured speed.
 *
 * Layouts are row-major; tensors are NCHW; weights are ONNX's
 * [out_channels, in_channels / groups, kernel_h, kernel_w]. No kernel allocates:
 * the caller passes a workspace of the size the matching *_work_floats function
 * returns, and any float pointer is accepted as workspace (alignment is fixed up
 * inside; the size functions count the slack). Kernels are thread-safe as long
 * as threads use different workspaces.
 */
#ifndef ACCPAR_KERNELS_H
#define ACCPAR_KERNELS_H

#include <stddef.h>

#ifdef APK_STATIC
#define APK_API static __attribute__((unused))
#else
#define APK_API
#endif

/* ---- gemm.c ---- */

/* C = alpha * op(A) * op(B) + beta * C, with op(A) m x k, op(B) k x n, C m x n.
 * op(X) = X when trans_x is 0 and X^T otherwise; lda/ldb/ldc are row strides in
 * elements of the matrices as stored. As in BLAS, C is not read when beta is 0
 * (it may hold NaN), and A and B are not read when alpha is 0 or k is 0. */
APK_API void apk_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                       float beta, float *c, ptrdiff_t ldc, float *work);

/* Workspace (in floats) apk_sgemm needs for these sizes. */
APK_API size_t apk_sgemm_work_floats(int m, int n, int k);

/* The compiled register tile and cache blocks, for the docs and the bench. */
typedef struct apk_gemm_config {
  int mr, nr;            /* register tile: rows of A, columns of B */
  int mc, kc, nc;        /* cache blocks: A block mc x kc, B panel kc x nc */
  int vector_floats;     /* floats per vector register */
  const char *isa;       /* "avx512", "avx2", "sse" or "generic" */
} apk_gemm_config;

APK_API apk_gemm_config apk_gemm_get_config(void);

/* ---- conv.c ---- */

typedef struct apk_conv2d {
  int batch;                          /* N */
  int in_channels, in_h, in_w;        /* C, H, W of x */
  int out_channels;                   /* M */
  int kernel_h, kernel_w;
  int stride_h, stride_w;
  int pad_top, pad_left;              /* ONNX pads[0], pads[1] */
  int pad_bottom, pad_right;          /* ONNX pads[2], pads[3] */
  int dilation_h, dilation_w;
  int groups;                         /* divides in_channels and out_channels */
} apk_conv2d;

APK_API int apk_conv2d_out_h(const apk_conv2d *p);
APK_API int apk_conv2d_out_w(const apk_conv2d *p);

/* Workspace (in floats) the three convolution kernels need for p. */
APK_API size_t apk_conv2d_work_floats(const apk_conv2d *p);

/* y = conv(x, w) + bias. x: N x C x H x W, w: M x C/groups x KH x KW,
 * bias: M floats or NULL, y: N x M x OH x OW (overwritten). */
APK_API void apk_conv2d_forward(const apk_conv2d *p, const float *x, const float *w,
                                const float *bias, float *y, float *work);

/* dx = dL/dx given dy = dL/dy (overwritten, same shape as x). */
APK_API void apk_conv2d_backward_data(const apk_conv2d *p, const float *dy,
                                      const float *w, float *dx, float *work);

/* dw = dL/dw summed over the batch (overwritten, same shape as w);
 * dbias = dL/dbias (M floats, overwritten) unless NULL. */
APK_API void apk_conv2d_backward_weights(const apk_conv2d *p, const float *x,
                                         const float *dy, float *dw, float *dbias,
                                         float *work);

/* Lowering of `channels` consecutive channels of one image, x pointing at the
 * first, to the (channels * KH * KW) x (OH * OW) matrix col; and its adjoint,
 * which adds col back into x. Exposed for tests and for generated code. */
APK_API void apk_im2col(const apk_conv2d *p, const float *x, int channels, float *col);
APK_API void apk_col2im(const apk_conv2d *p, const float *col, int channels, float *x);

#endif
