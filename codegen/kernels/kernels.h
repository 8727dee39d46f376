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

/* At most this many rows of C, apk_sgemm reads B where it lies instead of
 * packing it (apk_sgemm_narrow): each element of B then serves so few
 * multiply-adds that copying it costs more than it saves, and the fully
 * connected layers of an inference at batch 1 are all m = 1 (docs/kernels.md).
 * Code generation packs a constant B beforehand only above it. */
#ifndef APK_NARROW_M
#define APK_NARROW_M 8
#endif

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

/* ---- building blocks of the implicit-GEMM and Winograd convolutions ----
 * The packed layouts are the micro-kernel's, with MR and NR of
 * apk_gemm_get_config(): op(A) as MR-row micro-panels, op(B) as NR-column
 * micro-panels, each stored k-major and zero-padded to its full width. */

/* Writes rows [pc, pc+kc) and columns [jc, jc+nc) of op(B) to dst as
 * ceil(nc / NR) micro-panels of kc x NR floats: element (pc+p, jc+q*NR+j) at
 * dst[q*kc*NR + p*NR + j], zeros for columns past nc. dst is vector-aligned. */
typedef void (*apk_pack_b_fn)(const void *ctx, int pc, int kc, int jc, int nc, float *dst);
/* Receives the rows x cols tile (row stride ldt) of a product whose top-left
 * element is (i0, j0), for one block of k: it must add the tile, since every
 * block of k hands over its partial product. */
typedef void (*apk_store_c_fn)(void *ctx, int i0, int j0, int rows, int cols, const float *tile,
                               ptrdiff_t ldt);

/* op(B) as a plain matrix, for apk_sgemm_ex: pass apk_pack_b_matrix and a
 * pointer to one of these. */
typedef struct apk_matrix_b {
  int trans_b;
  const float *b;
  ptrdiff_t ldb;
} apk_matrix_b;
APK_API void apk_pack_b_matrix(const void *ctx, int pc, int kc, int jc, int nc, float *dst);

/* apk_sgemm with alpha 1 and op(B) produced by pack_b (conv.c: im2col done
 * panel by panel). With store, C and beta are unused and every product tile
 * goes to store instead (conv.c: col2im done tile by tile). Workspace:
 * apk_sgemm_work_floats(m, n, k). */
APK_API void apk_sgemm_ex(int trans_a, int m, int n, int k, const float *a, ptrdiff_t lda,
                          apk_pack_b_fn pack_b, const void *b_ctx, float beta, float *c,
                          ptrdiff_t ldc, apk_store_c_fn store, void *store_ctx, float *work);

/* Floats of a packed m x k op(A) and of a packed k x n op(B) holding all of k
 * (micro-panel q of B at q * k * NR). */
APK_API size_t apk_packed_a_floats(int m, int k);
APK_API size_t apk_packed_b_floats(int k, int n);
/* Packs all of op(A) (m x k): micro-panel r (rows r*MR...) at dst + r*MR*k. */
APK_API void apk_pack_a_all(int trans_a, int m, int k, const float *a, ptrdiff_t lda, float *dst);
/* C = pa * pb + beta * C from operands packed whole (vector-aligned). */
APK_API void apk_sgemm_prepacked(int m, int n, int k, const float *pa, const float *pb,
                                 float beta, float *c, ptrdiff_t ldc);

/* ---- constant operands packed once (docs/kernels.md, "Packed weights") ----
 * Every build's register tile and vector width are at most these (gemm.c
 * checks), so the *_max sizes bound the packed layouts of every build: code
 * generation sizes the buffers of a program whose kernels are compiled
 * later, maybe for another ISA, and the program packs into them at run
 * time with its own kernels. */
enum { APK_MR_MAX = 16, APK_NR_MAX = 64, APK_VL_MAX = 16 };
APK_API size_t apk_packed_b_floats_max(int k, int n);
/* Packs all of op(B) (k x n): micro-panel q (columns q*NR...) at dst + q*NR*k. */
APK_API void apk_pack_b_all(int trans_b, int k, int n, const float *b, ptrdiff_t ldb, float *dst);
/* apk_sgemm with op(B) packed by apk_pack_b_all into pb (vector-aligned);
 * workspace apk_sgemm_work_floats(m, n, k). m may be any size (the narrow
 * path is not taken: B is no longer where it lay). */
APK_API void apk_sgemm_pb(int trans_a, int m, int n, int k, float alpha, const float *a,
                          ptrdiff_t lda, const float *pb, float beta, float *c, ptrdiff_t ldc,
                          float *work);
/* apk_sgemm_ex without store, with op(A) packed by apk_pack_a_all into pa
 * (vector-aligned): the convolutions' constant weights. */
APK_API void apk_sgemm_ex_pa(int m, int n, int k, const float *pa, apk_pack_b_fn pack_b,
                             const void *b_ctx, float beta, float *c, ptrdiff_t ldc, float *work);

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

/* The three kernels of a convolution layer. */
typedef enum apk_conv_kernel {
  APK_CONV_FORWARD,
  APK_CONV_BACKWARD_DATA,
  APK_CONV_BACKWARD_WEIGHTS
} apk_conv_kernel;

/* How a kernel is computed (docs/kernels.md, "Convolution"). A pointwise
 * convolution (1x1, unit strides, no pads) needs no lowering under
 * APK_CONV_IM2COL and APK_CONV_IMPLICIT alike: x is its own column matrix. */
typedef enum apk_conv_algo {
  APK_CONV_IM2COL,   /* the whole column matrix in the workspace, then one GEMM */
  APK_CONV_IMPLICIT, /* im2col inside the GEMM's packing of B, col2im on its tiles;
                        one input channel, unit strides, no pads: direct loops
                        (forward from unpacked weights, backward weights) */
  APK_CONV_WINOGRAD,  /* F(2x2, 3x3): 3x3, unit strides and dilations, one group,
                         pads <= 2; forward and backward data */
  APK_CONV_WINOGRAD4  /* F(4x4, 3x3): the same shapes, forward only */
} apk_conv_algo;

/* 1 if algo can compute that kernel of p. */
APK_API int apk_conv2d_supports(const apk_conv2d *p, apk_conv_algo algo, apk_conv_kernel which);
/* The algorithm apk_conv2d_forward, _backward_data and _backward_weights use
 * for p: a rule from measurements on the tuning machine (docs/kernels.md). */
APK_API apk_conv_algo apk_conv2d_choose(const apk_conv2d *p, apk_conv_kernel which);
/* The algorithm of the forward kernel with its weights packed once
 * (apk_conv2d_pack_weights, apk_conv2d_forward_packed): Winograd on fewer
 * tiles than apk_conv2d_choose, whose rule counts the weight transform. */
APK_API apk_conv_algo apk_conv2d_choose_packed(const apk_conv2d *p);
/* 1 if APK_CONV_IMPLICIT's forward and backward weights of p (weights not
 * packed) are the direct loops of one input channel, which lower nothing:
 * the cost model prices them apart (passes/partition.c). */
APK_API int apk_conv2d_is_direct(const apk_conv2d *p);

/* The blocks of tiles F(2x2, 3x3) Winograd's kernel `which` (forward or
 * backward data) computes an image of p in: each transforms its tiles, runs
 * 16 GEMMs of them by the whole transformed weight, transforms back. The
 * cost model prices Winograd per block (passes/partition.c). */
APK_API int apk_conv2d_wino_blocks(const apk_conv2d *p, apk_conv_kernel which);

/* Workspace (in floats) the three convolution kernels need for p, each with
 * the algorithm apk_conv2d_choose picks. */
APK_API size_t apk_conv2d_work_floats(const apk_conv2d *p);
/* Workspace one kernel needs with a given (supported) algorithm. */
APK_API size_t apk_conv2d_algo_work_floats(const apk_conv2d *p, apk_conv_algo algo,
                                           apk_conv_kernel which);

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

/* The same three with the algorithm given (it must be supported; the
 * workspace is apk_conv2d_algo_work_floats'): for tests and benchmarks. */
APK_API void apk_conv2d_forward_algo(const apk_conv2d *p, apk_conv_algo algo, const float *x,
                                     const float *w, const float *bias, float *y, float *work);
APK_API void apk_conv2d_backward_data_algo(const apk_conv2d *p, apk_conv_algo algo,
                                           const float *dy, const float *w, float *dx,
                                           float *work);
APK_API void apk_conv2d_backward_weights_algo(const apk_conv2d *p, apk_conv_algo algo,
                                              const float *x, const float *dy, float *dw,
                                              float *dbias, float *work);

/* Lowering of `channels` consecutive channels of one image, x pointing at the
 * first, to the (channels * KH * KW) x (OH * OW) matrix col; and its adjoint,
 * which adds col back into x. Exposed for tests and for generated code. */
APK_API void apk_im2col(const apk_conv2d *p, const float *x, int channels, float *col);
APK_API void apk_col2im(const apk_conv2d *p, const float *col, int channels, float *x);

/* The convolution's packing, replaceable: the functions the three kernels
 * use to lower x to the column matrix (whole, or the GEMM's packing of B:
 * forward, and transposed for backward weights) and to add a column matrix
 * back into dx (whole, or the GEMM's product tiles). A NULL ops, or a NULL
 * member, is the library's own. The LLVM backend passes functions
 * specialised for each convolution's constant description (print_llvm.c);
 * pack_col, pack_col_t and store_col get the library's context (its first
 * member is the description). */
typedef struct apk_conv_ops {
  apk_pack_b_fn pack_col, pack_col_t;
  apk_store_c_fn store_col;
  void (*im2col)(const apk_conv2d *p, const float *x, int channels, float *col);
  void (*col2im)(const apk_conv2d *p, const float *col, int channels, float *x);
} apk_conv_ops;
/* apk_conv2d_forward, _backward_data and _backward_weights with ops. */
APK_API void apk_conv2d_forward_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                    const float *x, const float *w, const float *bias, float *y,
                                    float *work);
APK_API void apk_conv2d_backward_data_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                          const float *dy, const float *w, float *dx,
                                          float *work);
APK_API void apk_conv2d_backward_weights_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                             const float *x, const float *dy, float *dw,
                                             float *dbias, float *work);

/* The forward kernel's weights packed once (constant weights of an
 * inference): per group as the GEMM's A, or Winograd's transformed U, as
 * the algorithm apk_conv2d_choose_packed picks wants them.
 * apk_conv2d_packed_floats is this build's size, _max a bound over every
 * build (for sizing a buffer at compile time); dst is vector-aligned. */
APK_API size_t apk_conv2d_packed_floats(const apk_conv2d *p);
APK_API size_t apk_conv2d_packed_floats_max(const apk_conv2d *p);
APK_API void apk_conv2d_pack_weights(const apk_conv2d *p, const float *w, float *dst);
/* apk_conv2d_forward(_ops) reading the weights apk_conv2d_pack_weights
 * packed into pw; the workspace is the same. */
APK_API void apk_conv2d_forward_packed(const apk_conv2d *p, const float *x, const float *pw,
                                       const float *bias, float *y, float *work);
APK_API void apk_conv2d_forward_packed_ops(const apk_conv2d *p, const apk_conv_ops *ops,
                                           const float *x, const float *pw, const float *bias,
                                           float *y, float *work);
/* The same three with the forward algorithm given (supported), for tests
 * and benchmarks; the workspace is apk_conv2d_algo_work_floats'. */
APK_API size_t apk_conv2d_packed_floats_algo(const apk_conv2d *p, apk_conv_algo algo);
APK_API void apk_conv2d_pack_weights_algo(const apk_conv2d *p, apk_conv_algo algo,
                                          const float *w, float *dst);
APK_API void apk_conv2d_forward_packed_algo(const apk_conv2d *p, apk_conv_algo algo,
                                            const float *x, const float *pw, const float *bias,
                                            float *y, float *work);

#endif
