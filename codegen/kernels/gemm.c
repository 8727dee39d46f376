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

#if defined(__AVX512F__) || (defined(__AVX__) && defined(__FMA__))
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define APK_VBYTES 64
#define APK_ISA "avx512"
#ifndef APK_MR
#define APK_MR 8 /* 8 x 3 accumulators of the 32 zmm registers */
#endif
#ifndef APK_NV
#define APK_NV 3
#endif
#elif defined(__AVX__)
#define APK_VBYTES 32
#if defined(__FMA__)
#define APK_ISA "avx2"
#else
#define APK_ISA "avx"
#endif
#ifndef APK_MR
#define APK_MR 6 /* 6 x 2 accumulators + 2 B + 1 broadcast of 16 ymm */
#endif
#ifndef APK_NV
#define APK_NV 2
#endif
#elif defined(__SSE2__) || defined(__ARM_NEON)
#define APK_VBYTES 16
#define APK_ISA "sse"
#ifndef APK_MR
#define APK_MR 6
#endif
#ifndef APK_NV
#define APK_NV 2
#endif
#else
#define APK_VBYTES 16 /* GCC lowers the vector type to scalars */
#define APK_ISA "generic"
#ifndef APK_MR
#define APK_MR 4
#endif
#ifndef APK_NV
#define APK_NV 2
#endif
#endif

#define APK_VL ((int)(APK_VBYTES / sizeof(float)))
#define APK_NR (APK_NV * APK_VL)

/* KC = 256 measured best on the tuning machine (docs/kernels.md). The B
 * micro-panel (kc x NR) is then 48 KiB with AVX-512, 16 KiB with AVX2, for
 * a 48 KiB L1; the A block (mc x kc) 192 or 144 KiB of a 1 MiB L2; the B panel
 * (kc x nc) 6 or 2 MiB of L3. */
#ifndef APK_KC
#define APK_KC 256
#endif
#ifndef APK_MC
#define APK_MC (APK_MR * 24)
#endif
#ifndef APK_NC
#define APK_NC (APK_NR * 128)
#endif

typedef float apk_vf __attribute__((vector_size(APK_VBYTES), __may_alias__));

static inline apk_vf apk_fma(apk_vf a, apk_vf b, apk_vf c)
{
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__AVX__) && defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

/* All lanes = s. Written as an intrinsic where there is one because the
 * portable spelling, zero + s, is not an identity for s = -0.0, so GCC keeps
 * a scalar add in the innermost loop; adding -0.0 is an identity, and folds. */
static inline apk_vf apk_broadcast(float s)
{
#if defined(__AVX512F__)
  return _mm512_set1_ps(s);
#elif defined(__AVX__) && defined(__FMA__)
  return _mm256_set1_ps(s);
#else
  const apk_vf zero = {0};
  return zero * -1.0f + s;
#endif
}

static inline int apk_min(int a, int b) { return a < b ? a : b; }
static inline int apk_round_up(int x, int to) { return (x + to - 1) / to * to; }

static float *apk_align(float *p)
{
  uintptr_t u = (uintptr_t)p;
  u = (u + APK_VBYTES - 1) & ~(uintptr_t)(APK_VBYTES - 1);
  return (float *)u;
}

APK_API size_t apk_sgemm_work_floats(int m, int n, int k)
{
  if (m <= 0 || n <= 0 || k <= 0) return 0;
  size_t kc = (size_t)apk_min(k, APK_KC);
  size_t a_floats = (size_t)apk_round_up(apk_min(m, APK_MC), APK_MR) * kc;
  size_t b_floats = (size_t)apk_round_up(apk_min(n, APK_NC), APK_NR) * kc;
  /* Both packed buffers are moved up to a vector boundary inside work. */
  return a_floats + b_floats + 2 * (size_t)APK_VL;
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
#pragma GCC unroll 16
  for (int i = 0; i < APK_MR; i++)
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) acc[i][v] = zero;

  for (int p = 0; p < kc; p++) {
    apk_vf bv[APK_NV];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) bv[v] = *(const apk_vf *)(bp + v * APK_VL);
#pragma GCC unroll 16
    for (int i = 0; i < APK_MR; i++) {
      apk_vf av = apk_broadcast(ap[i]);
#pragma GCC unroll 4
      for (int v = 0; v < nv; v++) acc[i][v] = apk_fma(av, bv[v], acc[i][v]);
    }
    ap += APK_MR;
    bp += APK_NR;
  }

  if (beta == 0.0f) {
#pragma GCC unroll 16
    for (int i = 0; i < APK_MR; i++)
#pragma GCC unroll 4
      for (int v = 0; v < nv; v++) {
        apk_vf r = acc[i][v] * alpha;
        memcpy(c + i * ldc + v * APK_VL, &r, sizeof r);
      }
  } else {
#pragma GCC unroll 16
    for (int i = 0; i < APK_MR; i++)
#pragma GCC unroll 4
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

APK_API void apk_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha,
                       const float *a, ptrdiff_t lda, const float *b, ptrdiff_t ldb,
                       float beta, float *c, ptrdiff_t ldc, float *work)
{
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || alpha == 0.0f) {
    apk_scale(m, n, beta, c, ldc);
    return;
  }
  int kc_max = apk_min(k, APK_KC);
  float *pa = apk_align(work);
  float *pb = apk_align(pa + (ptrdiff_t)apk_round_up(apk_min(m, APK_MC), APK_MR) * kc_max);

  for (int jc = 0; jc < n; jc += APK_NC) {
    int nc = apk_min(APK_NC, n - jc);
    for (int pc = 0; pc < k; pc += APK_KC) {
      int kc = apk_min(APK_KC, k - pc);
      /* The first k block applies the caller's beta; later ones accumulate. */
      float beta_block = pc == 0 ? beta : 1.0f;
      const float *b_panel = trans_b ? b + (ptrdiff_t)jc * ldb + pc : b + (ptrdiff_t)pc * ldb + jc;
      apk_pack_b(trans_b, b_panel, ldb, kc, nc, pb);
      for (int ic = 0; ic < m; ic += APK_MC) {
        int mc = apk_min(APK_MC, m - ic);
        const float *a_block = trans_a ? a + (ptrdiff_t)pc * lda + ic : a + (ptrdiff_t)ic * lda + pc;
        apk_pack_a(trans_a, a_block, lda, mc, kc, pa);
        for (int jr = 0; jr < nc; jr += APK_NR) {
          int cols = apk_min(APK_NR, nc - jr);
          int nv = (cols + APK_VL - 1) / APK_VL;
          const float *bp = pb + (ptrdiff_t)jr * kc;
          for (int ir = 0; ir < mc; ir += APK_MR) {
            int rows = apk_min(APK_MR, mc - ir);
            const float *ap = pa + (ptrdiff_t)ir * kc;
            float *ct = c + (ptrdiff_t)(ic + ir) * ldc + jc + jr;
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
