/* Blocked single-precision GEMM.
 *
 * The loop structure is the usual five-loop one of GotoBLAS/BLIS: a kc x nc
 * panel of op(B) is packed once per (jc, pc) and lives in L3/L2; an mc x kc block
 * of op(A) is packed per (ic) and lives in L2; the micro-kernel multiplies an
 * MR-row micro-panel of A by an NR-column micro-panel of B (the latter stays in
 * L1 while the A micro-panels stream past it), keeping the MR x NR tile of C in
 * vector registers for the whole kc loop. Packing makes every transposition the
 * same for the micro-kernel, and zero-pads partial micro-panels so it never
 * needs a remainder loop over k or over the tile.
 *
 * The vector width follows the target: GCC vector extensions of 64, 32 or 16
 * bytes, with an explicit fused multiply-add where the ISA has one (ISO C mode
 * turns off GCC's contraction of a * b + c).
 */
#include "kernels.h"

#include <stdint.h>
#include <string.h>

#include "apk_tile.h"

static inline int apk_min(int a, int b) { return a < b ? a : b; }
static inline int apk_round_up(int x, int to) { return (x + to - 1) / to * to; }

static float *apk_align(float *p)
{
  uintptr_t u = (uintptr_t)p;
  u = (u + APK_VBYTES - 1) & ~(uintptr_t)(APK_VBYTES - 1);
  return (float *)u;
}

_Static_assert(APK_MR <= APK_MR_MAX && APK_NR <= APK_NR_MAX && APK_VL <= APK_VL_MAX &&
                   APK_VL_MAX % APK_VL == 0,
               "the *_max sizes of kernels.h bound this build's packed layouts");

APK_API size_t apk_sgemm_work_floats(int m, int n, int k)
{
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  size_t kc = (size_t)apk_min(k, APK_KC);
  size_t a_floats = (size_t)apk_round_up(apk_min(m, APK_MC), APK_MR) * kc;
  size_t b_floats = (size_t)apk_round_up(apk_min(n, APK_NC), APK_NR) * kc;
  /* Both packed buffers are moved up to a vector boundary inside work. */
  size_t packed = a_floats + b_floats + 2 * (size_t)APK_VL;
  /* The narrow path copies a transposed op(A) into m contiguous rows. */
  size_t narrow = m <= APK_NARROW_M ? (size_t)m * (size_t)k + (size_t)APK_VL : 0;
  return packed > narrow ? packed : narrow;
}

APK_API apk_gemm_config apk_gemm_get_config(void)
{
  apk_gemm_config cfg = {APK_MR, APK_NR, APK_MC, APK_KC, APK_NC, APK_VL, APK_ISA};
  return cfg;
}

/* Packs rows [0, mc) and columns [0, kc) of op(A) (a already offset to the
 * block's corner) as MR-row micro-panels, each stored k-major: dst[p*MR + i]. */
static void apk_pack_a(int trans_a, const float *a, ptrdiff_t lda, int mc, int kc,
                       float *restrict dst)
{
  if (trans_a) {
    /* op(A) rows are contiguous in A: walk each row of A once, handing MR
     * floats to every micro-panel, rather than one micro-panel at a time,
     * which would read each cache line of A several times from L2. */
    for (int p = 0; p < kc; p++) {
      const float *src = a + (ptrdiff_t)p * lda;
      for (int ir = 0; ir < mc; ir += APK_MR) {
        int rows = apk_min(APK_MR, mc - ir);
        float *d = dst + (ptrdiff_t)ir * kc + p * APK_MR;
        if (rows == APK_MR) {
          memcpy(d, src + ir, sizeof(float) * APK_MR);
        } else {
          int i = 0;
          for (; i < rows; i++) d[i] = src[ir + i];
          for (; i < APK_MR; i++) d[i] = 0.0f;
        }
      }
    }
    return;
  }
  for (int ir = 0; ir < mc; ir += APK_MR) {
    int rows = apk_min(APK_MR, mc - ir);
    /* k outer, the MR rows inner: MR sequential read streams and contiguous
     * writes, which GCC turns into in-register transposes; row-by-row would
     * scatter every write MR floats apart. */
    const float *src[APK_MR];
    for (int i = 0; i < APK_MR; i++) src[i] = a + (ptrdiff_t)(i < rows ? ir + i : ir) * lda;
    if (rows == APK_MR) {
      for (int p = 0; p < kc; p++)
#pragma GCC unroll 16
        for (int i = 0; i < APK_MR; i++) dst[p * APK_MR + i] = src[i][p];
    } else {
      for (int p = 0; p < kc; p++)
        for (int i = 0; i < APK_MR; i++) dst[p * APK_MR + i] = i < rows ? src[i][p] : 0.0f;
    }
    dst += (ptrdiff_t)kc * APK_MR;
  }
}

/* Packs rows [0, kc) and columns [0, nc) of op(B) (b offset to the panel's
 * corner) as NR-column micro-panels, each stored k-major: dst[p*NR + j]. */
static void apk_pack_b(int trans_b, const float *b, ptrdiff_t ldb, int kc, int nc,
                       float *restrict dst)
{
  for (int jr = 0; jr < nc; jr += APK_NR) {
    int cols = apk_min(APK_NR, nc - jr);
    if (!trans_b) {
      for (int p = 0; p < kc; p++) {
        const float *src = b + (ptrdiff_t)p * ldb + jr;
        float *d = dst + p * APK_NR;
        if (cols == APK_NR) {
          memcpy(d, src, sizeof(float) * APK_NR);
        } else {
          int j = 0;
          for (; j < cols; j++) d[j] = src[j];
          for (; j < APK_NR; j++) d[j] = 0.0f;
        }
      }
    } else {
      /* Same access pattern as the untransposed A: NR read streams. */
      const float *src[APK_NR];
      for (int j = 0; j < APK_NR; j++) src[j] = b + (ptrdiff_t)(j < cols ? jr + j : jr) * ldb;
      if (cols == APK_NR) {
        for (int p = 0; p < kc; p++)
#pragma GCC unroll 64
          for (int j = 0; j < APK_NR; j++) dst[p * APK_NR + j] = src[j][p];
      } else {
        for (int p = 0; p < kc; p++)
          for (int j = 0; j < APK_NR; j++) dst[p * APK_NR + j] = j < cols ? src[j][p] : 0.0f;
      }
    }
    dst += (ptrdiff_t)kc * APK_NR;
  }
}

/* The micro-kernel's loops over the tile unrolled completely, so that the
 * accumulators are registers: GCC does it when asked for N iterations, clang
 * (which compiles this file for the LLVM backend's programs) only when
 * asked for full unrolling; with `GCC unroll N` it kept the accumulator tile
 * on the stack (a load and a store around every multiply-add). N bounds the
 * trip counts, which are constants at every call. */
#define APK_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define APK_UNROLL_FULL(n) APK_PRAGMA(clang loop unroll(full))
#else
#define APK_UNROLL_FULL(n) APK_PRAGMA(GCC unroll n)
#endif

/* The MR x (nv * VL) tile: c = alpha * (ap * bp) + beta * c, c read only when
 * beta is nonzero. ap and bp are packed micro-panels (vector-aligned, bp with
 * row stride NR); c is any row-major tile with row stride ldc. nv is a constant
 * at every call, so each caller gets its own fully unrolled copy: the narrow
 * copies serve the last column panel, where a full NR-wide tile would waste
 * most of its multiply-adds on padding (n = 49 at the end of ResNet-50). */
static inline __attribute__((always_inline)) void
apk_micro_body(int nv, int kc, const float *restrict ap, const float *restrict bp,
               float alpha, float beta, float *restrict c, ptrdiff_t ldc)
{
  apk_vf acc[APK_MR][APK_NV];
  const apk_vf zero = {0};
APK_UNROLL_FULL(16)
  for (int i = 0; i < APK_MR; i++)
APK_UNROLL_FULL(4)
    for (int v = 0; v < nv; v++) acc[i][v] = zero;

  for (int p = 0; p < kc; p++) {
    apk_vf bv[APK_NV];
APK_UNROLL_FULL(4)
    for (int v = 0; v < nv; v++) bv[v] = *(const apk_vf *)(bp + v * APK_VL);
APK_UNROLL_FULL(16)
    for (int i = 0; i < APK_MR; i++) {
      apk_vf av = apk_broadcast(ap[i]);
APK_UNROLL_FULL(4)
      for (int v = 0; v < nv; v++) acc[i][v] = apk_fma(av, bv[v], acc[i][v]);
    }
    ap += APK_MR;
    bp += APK_NR;
  }

  if (beta == 0.0f) {
APK_UNROLL_FULL(16)
    for (int i = 0; i < APK_MR; i++)
APK_UNROLL_FULL(4)
      for (int v = 0; v < nv; v++) {
        apk_vf r = acc[i][v] * alpha;
        memcpy(c + i * ldc + v * APK_VL, &r, sizeof r);
      }
  } else {
APK_UNROLL_FULL(16)
    for (int i = 0; i < APK_MR; i++)
APK_UNROLL_FULL(4)
      for (int v = 0; v < nv; v++) {
        apk_vf old;
        memcpy(&old, c + i * ldc + v * APK_VL, sizeof old);
        apk_vf r = apk_fma(acc[i][v], apk_broadcast(alpha), old * beta);
        memcpy(c + i * ldc + v * APK_VL, &r, sizeof r);
      }
  }
}

/* One out-of-line copy per width; the switch is over a compile-time range. */
static void apk_micro_kernel(int nv, int kc, const float *ap, const float *bp, float alpha,
                             float beta, float *c, ptrdiff_t ldc)
{
  switch (nv) {
  case 1: apk_micro_body(1, kc, ap, bp, alpha, beta, c, ldc); break;
#if APK_NV >= 2
  case 2: apk_micro_body(2, kc, ap, bp, alpha, beta, c, ldc); break;
#endif
#if APK_NV >= 3
  case 3: apk_micro_body(3, kc, ap, bp, alpha, beta, c, ldc); break;
#endif
#if APK_NV >= 4
  case 4: apk_micro_body(4, kc, ap, bp, alpha, beta, c, ldc); break;
#endif
  default: apk_micro_body(APK_NV, kc, ap, bp, alpha, beta, c, ldc); break;
  }
}

/* A partial tile (rows < MR or cols not a whole number of vectors): the
 * micro-kernel writes the covering tile to a local buffer, and only the valid
 * part is merged into C. */
static void apk_edge_tile(int nv, int kc, const float *ap, const float *bp, float alpha,
                          float beta, float *c, ptrdiff_t ldc, int rows, int cols)
{
  _Alignas(64) float tile[APK_MR * APK_NR];
  apk_micro_kernel(nv, kc, ap, bp, alpha, 0.0f, tile, APK_NR);
  for (int i = 0; i < rows; i++) {
    float *ci = c + i * ldc;
    const float *ti = tile + i * APK_NR;
    if (beta == 0.0f)
      for (int j = 0; j < cols; j++) ci[j] = ti[j];
    else
      for (int j = 0; j < cols; j++) ci[j] = ti[j] + beta * ci[j];
  }
}

#if defined(__AVX512F__)
/* The last column panel when it holds at most APK_THIN columns (n = 49 at
 * ResNet-50's 7x7 stage, 196 = 4 x 48 + 4 at its 14x14 stage): a whole
 * tile, even the narrowest of one vector, would broadcast each of the MR
 * rows of A to multiply it by 15 padding columns, at a third of a full
 * tile's time for 1/48 of its work. Here the MR rows of A are one 8-lane
 * vector (a micro-panel's step of k is contiguous) and each column of B
 * is broadcast: one load and `cols` multiply-adds per step. */
enum { APK_THIN = 4 };
_Static_assert(APK_MR == 8, "a micro-panel's step of k is one 8-float vector");

static inline __attribute__((always_inline)) void
apk_thin_body(int cols, int kc, const float *restrict ap, const float *restrict bp, float *out)
{
  __m256 acc[APK_THIN];
  for (int j = 0; j < cols; j++) acc[j] = _mm256_setzero_ps();
  for (int p = 0; p < kc; p++) {
    __m256 av = _mm256_loadu_ps(ap + (ptrdiff_t)p * APK_MR);
    const float *bk = bp + (ptrdiff_t)p * APK_NR;
    for (int j = 0; j < cols; j++) acc[j] = _mm256_fmadd_ps(av, _mm256_set1_ps(bk[j]), acc[j]);
  }
  for (int j = 0; j < cols; j++) _mm256_storeu_ps(out + j * APK_MR, acc[j]);
}

static void apk_thin_tile(int cols, int kc, const float *ap, const float *bp, float alpha,
                          float beta, float *c, ptrdiff_t ldc, int rows)
{
  float out[APK_THIN * APK_MR]; /* column j's MR rows at out[j * MR] */
  switch (cols) {
  case 1: apk_thin_body(1, kc, ap, bp, out); break;
  case 2: apk_thin_body(2, kc, ap, bp, out); break;
  case 3: apk_thin_body(3, kc, ap, bp, out); break;
  default: apk_thin_body(4, kc, ap, bp, out); break;
  }
  /* Merged as apk_edge_tile merges: alpha on the product, then beta. */
  for (int i = 0; i < rows; i++) {
    float *ci = c + i * ldc;
    for (int j = 0; j < cols; j++) {
      float r = out[j * APK_MR + i] * alpha;
      ci[j] = beta == 0.0f ? r : r + beta * ci[j];
    }
  }
}
#endif

static void apk_scale(int m, int n, float beta, float *c, ptrdiff_t ldc)
{
  for (int i = 0; i < m; i++) {
    float *ci = c + i * ldc;
    if (beta == 0.0f)
      for (int j = 0; j < n; j++) ci[j] = 0.0f;
    else if (beta != 1.0f)
      for (int j = 0; j < n; j++) ci[j] *= beta;
  }
}

APK_API void apk_pack_b_matrix(const void *ctx, int pc, int kc, int jc, int nc, float *dst)
{
  const apk_matrix_b *m = ctx;
  const float *panel = m->trans_b ? m->b + (ptrdiff_t)jc * m->ldb + pc
                                  : m->b + (ptrdiff_t)pc * m->ldb + jc;
  apk_pack_b(m->trans_b, panel, m->ldb, kc, nc, dst);
}

/* Where the block of k starting at pc begins in an operand packed whole
 * with all of k (apk_pack_a_all, apk_pack_b_all): micro-panels of width
 * `width` stored k-major, so the block whose first row (A) or column (B) is
 * `first` starts pc rows into its micro-panel, and panels stride k * width. */
static const float *apk_packed_block(const float *packed, int first, int pc, int k, int width)
{
  return packed + (ptrdiff_t)first * k + (ptrdiff_t)pc * width;
}

/* The five loops, with op(B) packed by the caller's routine. Without store,
 * C = A * op(B) + beta * C (alpha applied too); with store, every k block's
 * MR x NR product tile is handed to store, which adds it wherever it
 * belongs (C is not used). An operand packed whole beforehand (packed_a as
 * apk_pack_a_all writes it, packed_b as apk_pack_b_all does; NULL: packed
 * here) is read in place: its blocks are already the micro-panels, k-major,
 * so a block of k starts pc rows into each micro-panel. */
static void apk_gemm_driver(int trans_a, int m, int n, int k, float alpha, const float *a,
                            ptrdiff_t lda, const float *packed_a, apk_pack_b_fn pack_b,
                            const void *b_ctx, const float *packed_b, float beta, float *c,
                            ptrdiff_t ldc, apk_store_c_fn store, void *store_ctx, float *work)
{
  int kc_max = apk_min(k, APK_KC);
  float *pa = apk_align(work);
  float *pb = apk_align(pa + (ptrdiff_t)apk_round_up(apk_min(m, APK_MC), APK_MR) * kc_max);

  for (int jc = 0; jc < n; jc += APK_NC) {
    int nc = apk_min(APK_NC, n - jc);
    for (int pc = 0; pc < k; pc += APK_KC) {
      int kc = apk_min(APK_KC, k - pc);
      /* The first k block applies the caller's beta; later ones accumulate. */
      float beta_block = pc == 0 ? beta : 1.0f;
      /* Micro-panel strides and the block's start in them. */
      const float *b_at = packed_b ? apk_packed_block(packed_b, jc, pc, k, APK_NR) : pb;
      ptrdiff_t b_panel = packed_b ? k : kc;
      if (!packed_b)
        pack_b(b_ctx, pc, kc, jc, nc, pb);
      for (int ic = 0; ic < m; ic += APK_MC) {
        int mc = apk_min(APK_MC, m - ic);
        const float *a_at = packed_a ? apk_packed_block(packed_a, ic, pc, k, APK_MR) : pa;
        ptrdiff_t a_panel = packed_a ? k : kc;
        if (!packed_a)
          apk_pack_a(trans_a, trans_a ? a + (ptrdiff_t)pc * lda + ic : a + (ptrdiff_t)ic * lda + pc,
                     lda, mc, kc, pa);
        for (int jr = 0; jr < nc; jr += APK_NR) {
          int cols = apk_min(APK_NR, nc - jr);
          int nv = (cols + APK_VL - 1) / APK_VL;
          const float *bp = b_at + (ptrdiff_t)jr * b_panel;
          for (int ir = 0; ir < mc; ir += APK_MR) {
            int rows = apk_min(APK_MR, mc - ir);
            const float *ap = a_at + (ptrdiff_t)ir * a_panel;
            if (store) {
              _Alignas(64) float tile[APK_MR * APK_NR];
              apk_micro_kernel(nv, kc, ap, bp, alpha, 0.0f, tile, APK_NR);
              store(store_ctx, ic + ir, jc + jr, rows, cols, tile, APK_NR);
              continue;
            }
            float *ct = c + (ptrdiff_t)(ic + ir) * ldc + jc + jr;
#if defined(__AVX512F__)
            if (cols <= APK_THIN) {
              apk_thin_tile(cols, kc, ap, bp, alpha, beta_block, ct, ldc, rows);
              continue;
            }
#endif
            if (rows == APK_MR && cols == nv * APK_VL)
              apk_micro_kernel(nv, kc, ap, bp, alpha, beta_block, ct, ldc);
            else
              apk_edge_tile(nv, kc, ap, bp, alpha, beta_block, ct, ldc, rows, cols);
          }
        }
      }
    }
  }
}

/* ---- few rows: B read where it lies ---- */

static inline apk_vf apk_loadu(const float *p)
{
  apk_vf v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline float apk_hsum(apk_vf v)
{
  float s = 0.0f;
  for (int l = 0; l < APK_VL; l++) s += v[l];
  return s;
}

static inline void apk_put(float *c, float alpha, float sum, float beta)
{
  *c = beta == 0.0f ? alpha * sum : alpha * sum + beta * *c;
}

/* op(B) = B^T (each column of op(B) a contiguous row of B): every element
 * of C is a dot product. 4 rows of A by 4 rows of B at a time, 16 vector
 * accumulators, each row of B streamed once per 4 rows of A. */
static void apk_narrow_dots(int m, int n, int k, float alpha, const float *a, ptrdiff_t lda,
                            const float *b, ptrdiff_t ldb, float beta, float *c, ptrdiff_t ldc)
{
  int kv = k / APK_VL * APK_VL;
  for (int j0 = 0; j0 < n; j0 += 4) {
    int nj = apk_min(4, n - j0);
    const float *bj[4];
    for (int jj = 0; jj < 4; jj++) bj[jj] = b + (ptrdiff_t)(j0 + apk_min(jj, nj - 1)) * ldb;
    for (int i0 = 0; i0 < m; i0 += 4) {
      int ni = apk_min(4, m - i0);
      const float *ai[4];
      for (int ii = 0; ii < 4; ii++) ai[ii] = a + (ptrdiff_t)(i0 + apk_min(ii, ni - 1)) * lda;
      apk_vf acc[4][4];
      const apk_vf zero = {0};
      for (int ii = 0; ii < 4; ii++)
        for (int jj = 0; jj < 4; jj++) acc[ii][jj] = zero;
      for (int p = 0; p < kv; p += APK_VL) {
        apk_vf bv[4], av[4];
        for (int jj = 0; jj < 4; jj++) bv[jj] = apk_loadu(bj[jj] + p);
        for (int ii = 0; ii < 4; ii++) av[ii] = apk_loadu(ai[ii] + p);
        for (int ii = 0; ii < 4; ii++)
          for (int jj = 0; jj < 4; jj++) acc[ii][jj] = apk_fma(av[ii], bv[jj], acc[ii][jj]);
      }
      for (int ii = 0; ii < ni; ii++)
        for (int jj = 0; jj < nj; jj++) {
          float sum = apk_hsum(acc[ii][jj]);
          for (int p = kv; p < k; p++) sum += ai[ii][p] * bj[jj][p];
          apk_put(c + (ptrdiff_t)(i0 + ii) * ldc + j0 + jj, alpha, sum, beta);
        }
    }
  }
}

/* op(B) = B (rows of B contiguous along n): each row of C accumulates
 * A[i][p] * row p of B, over 4 vectors of columns and 4 rows of A at a time. */
static void apk_narrow_rows(int m, int n, int k, float alpha, const float *a, ptrdiff_t lda,
                            const float *b, ptrdiff_t ldb, float beta, float *c, ptrdiff_t ldc)
{
  enum { W = 4 * APK_VL };
  for (int j0 = 0; j0 < n; j0 += W) {
    int nj = apk_min(W, n - j0);
    for (int i0 = 0; i0 < m; i0 += 4) {
      int ni = apk_min(4, m - i0);
      const float *ai[4];
      for (int ii = 0; ii < 4; ii++) ai[ii] = a + (ptrdiff_t)(i0 + apk_min(ii, ni - 1)) * lda;
      apk_vf acc[4][4];
      const apk_vf zero = {0};
      for (int ii = 0; ii < 4; ii++)
        for (int v = 0; v < 4; v++) acc[ii][v] = zero;
      for (int p = 0; p < k; p++) {
        const float *bp = b + (ptrdiff_t)p * ldb + j0;
        apk_vf bv[4];
        if (nj == W) {
          for (int v = 0; v < 4; v++) bv[v] = apk_loadu(bp + v * APK_VL);
        } else {
          _Alignas(64) float row[W];
          for (int j = 0; j < W; j++) row[j] = j < nj ? bp[j] : 0.0f;
          for (int v = 0; v < 4; v++) memcpy(&bv[v], row + v * APK_VL, sizeof bv[v]);
        }
        for (int ii = 0; ii < 4; ii++) {
          apk_vf av = apk_broadcast(ai[ii][p]);
          for (int v = 0; v < 4; v++) acc[ii][v] = apk_fma(av, bv[v], acc[ii][v]);
        }
      }
      for (int ii = 0; ii < ni; ii++) {
        float *ci = c + (ptrdiff_t)(i0 + ii) * ldc + j0;
        for (int j = 0; j < nj; j++) apk_put(ci + j, alpha, acc[ii][j / APK_VL][j % APK_VL], beta);
      }
    }
  }
}

/* m <= APK_NARROW_M rows: op(A) as m contiguous rows (copied to work when
 * transposed), B never packed. */
static void apk_sgemm_narrow(int trans_a, int trans_b, int m, int n, int k, float alpha,
                             const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                             float beta, float *c, ptrdiff_t ldc, float *work)
{
  if (trans_a) {
    float *rows = apk_align(work);
    for (int p = 0; p < k; p++)
      for (int i = 0; i < m; i++) rows[(ptrdiff_t)i * k + p] = a[(ptrdiff_t)p * lda + i];
    a = rows;
    lda = k;
  }
  if (trans_b)
    apk_narrow_dots(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  else
    apk_narrow_rows(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

APK_API void apk_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                       float beta, float *c, ptrdiff_t ldc, float *work)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    apk_scale(m, n, beta, c, ldc);
    return;
  }
  if (m <= APK_NARROW_M) {
    apk_sgemm_narrow(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, work);
    return;
  }
  apk_matrix_b src = {trans_b, b, ldb};
  apk_gemm_driver(trans_a, m, n, k, alpha, a, lda, NULL, apk_pack_b_matrix, &src, NULL, beta, c,
                  ldc, NULL, NULL, work);
}

APK_API void apk_sgemm_ex(int trans_a, int m, int n, int k, const float *a, ptrdiff_t lda,
                          apk_pack_b_fn pack_b, const void *b_ctx, float beta, float *c,
                          ptrdiff_t ldc, apk_store_c_fn store, void *store_ctx, float *work)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!store) apk_scale(m, n, beta, c, ldc);
    return;
  }
  apk_gemm_driver(trans_a, m, n, k, 1.0f, a, lda, NULL, pack_b, b_ctx, NULL, beta, c, ldc, store,
                  store_ctx, work);
}

APK_API void apk_sgemm_ex_pa(int m, int n, int k, const float *pa, apk_pack_b_fn pack_b,
                            const void *b_ctx, float beta, float *c, ptrdiff_t ldc, float *work)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    apk_scale(m, n, beta, c, ldc);
    return;
  }
  apk_gemm_driver(0, m, n, k, 1.0f, NULL, 0, pa, pack_b, b_ctx, NULL, beta, c, ldc, NULL, NULL,
                  work);
}

/* ---- prepacked operands ---- */

APK_API size_t apk_packed_a_floats(int m, int k)
{
  return m <= 0 || k <= 0 ? 0 : (size_t)apk_round_up(m, APK_MR) * (size_t)k;
}

APK_API size_t apk_packed_b_floats(int k, int n)
{
  return n <= 0 || k <= 0 ? 0 : (size_t)apk_round_up(n, APK_NR) * (size_t)k;
}

APK_API size_t apk_packed_b_floats_max(int k, int n)
{
  return n <= 0 || k <= 0 ? 0 : (size_t)(n + APK_NR_MAX - 1) * (size_t)k;
}

APK_API void apk_pack_a_all(int trans_a, int m, int k, const float *a, ptrdiff_t lda, float *dst)
{
  if (m > 0 && k > 0) apk_pack_a(trans_a, a, lda, m, k, dst);
}

APK_API void apk_pack_b_all(int trans_b, int k, int n, const float *b, ptrdiff_t ldb, float *dst)
{
  if (n > 0 && k > 0) apk_pack_b(trans_b, b, ldb, k, n, dst);
}

APK_API void apk_sgemm_pb(int trans_a, int m, int n, int k, float alpha, const float *a,
                          ptrdiff_t lda, const float *pb, float beta, float *c, ptrdiff_t ldc,
                          float *work)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    apk_scale(m, n, beta, c, ldc);
    return;
  }
  apk_gemm_driver(trans_a, m, n, k, alpha, a, lda, NULL, NULL, NULL, pb, beta, c, ldc, NULL, NULL,
                  work);
}

APK_API void apk_sgemm_prepacked(int m, int n, int k, const float *pa, const float *pb,
                                 float beta, float *c, ptrdiff_t ldc)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    apk_scale(m, n, beta, c, ldc);
    return;
  }
  for (int jr = 0; jr < n; jr += APK_NR) {
    int cols = apk_min(APK_NR, n - jr);
    int nv = (cols + APK_VL - 1) / APK_VL;
    const float *bq = pb + (ptrdiff_t)jr * k;
    for (int ir = 0; ir < m; ir += APK_MR) {
      int rows = apk_min(APK_MR, m - ir);
      const float *aq = pa + (ptrdiff_t)ir * k;
      float *ct = c + (ptrdiff_t)ir * ldc + jr;
      /* k in blocks of KC, as the five loops do, so the B micro-panel's
       * part in use stays in L1. */
      for (int pc = 0; pc < k; pc += APK_KC) {
        int kc = apk_min(APK_KC, k - pc);
        float beta_block = pc == 0 ? beta : 1.0f;
        const float *ap = aq + (ptrdiff_t)pc * APK_MR, *bp = bq + (ptrdiff_t)pc * APK_NR;
        if (rows == APK_MR && cols == nv * APK_VL)
          apk_micro_kernel(nv, kc, ap, bp, 1.0f, beta_block, ct, ldc);
        else
          apk_edge_tile(nv, kc, ap, bp, 1.0f, beta_block, ct, ldc, rows, cols);
      }
    }
  }
}
