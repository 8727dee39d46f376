/* The register tile, cache blocks and vector type of the kernels, chosen by
 * the target's vector ISA; shared by gemm.c and conv.c (whose packing
 * routines write the micro-kernel's layout). Internal: not part of the API. */
#ifndef ACCPAR_APK_TILE_H
#define ACCPAR_APK_TILE_H

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

#endif
