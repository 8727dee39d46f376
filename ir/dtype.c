/* Element types and element access for constant tensors. */
#include <math.h>
#include <string.h>

#include "ir/ir.h"

size_t ap_dtype_size(ap_dtype t) {
  switch (t) {
  case AP_DT_FLOAT: case AP_DT_INT32: case AP_DT_UINT32: return 4;
  case AP_DT_UINT8: case AP_DT_INT8: case AP_DT_BOOL: return 1;
  case AP_DT_UINT16: case AP_DT_INT16: case AP_DT_FLOAT16: case AP_DT_BFLOAT16: return 2;
  case AP_DT_INT64: case AP_DT_DOUBLE: case AP_DT_UINT64: case AP_DT_COMPLEX64: return 8;
  case AP_DT_COMPLEX128: return 16;
  default: return 0;
  }
}

const char *ap_dtype_name(ap_dtype t) {
  static const char *const names[] = {
      "undefined", "float32", "uint8",   "int8",      "uint16",     "int16",
      "int32",     "int64",   "string",  "bool",      "float16",    "float64",
      "uint32",    "uint64",  "complex64", "complex128", "bfloat16", "float8e4m3fn",
      "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4", "float4e2m1"};
  if ((unsigned)t < sizeof names / sizeof names[0])
    return names[t];
  return "unknown";
}

bool ap_dtype_is_float(ap_dtype t) {
  return t == AP_DT_FLOAT || t == AP_DT_DOUBLE || t == AP_DT_FLOAT16 || t == AP_DT_BFLOAT16;
}

bool ap_dtype_is_int(ap_dtype t) {
  switch (t) {
  case AP_DT_UINT8: case AP_DT_INT8: case AP_DT_UINT16: case AP_DT_INT16:
  case AP_DT_INT32: case AP_DT_INT64: case AP_DT_UINT32: case AP_DT_UINT64:
    return true;
  default:
    return false;
  }
}

int64_t ap_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0)
      return -1;
    if (dims[i] && n > INT64_MAX / dims[i])
      return -1;
    n *= dims[i];
  }
  return n;
}

static float half_to_float(uint16_t h) {
  int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  float v;
  if (exp == 0)
    v = ldexpf((float)man, -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = ldexpf((float)(man | 1024), exp - 25);
  return sign ? -v : v;
}

static uint16_t float_to_half(float f) {
  /* Round to nearest even through the double's exact arithmetic. */
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  float a = fabsf(f);
  if (isnan(f))
    return 0x7e00;
  if (a >= 65520.0f)
    return sign | 0x7c00;
  if (a < ldexpf(1, -14)) {
    long m = lrintf(ldexpf(a, 24));
    return (uint16_t)(sign | (uint16_t)m);
  }
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  long mant = lrintf(ldexpf(m, 11)); /* 11 significant bits */
  if (mant == 2048) {
    mant = 1024;
    e++;
  }
  return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | (uint16_t)(mant & 1023));
}

double ap_tensor_get_f64(const ap_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case AP_DT_FLOAT: return ((const float *)p)[i];
  case AP_DT_DOUBLE: return ((const double *)p)[i];
  case AP_DT_FLOAT16: return half_to_float(((const uint16_t *)p)[i]);
  case AP_DT_BFLOAT16: {
    uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  case AP_DT_UINT8: return ((const uint8_t *)p)[i];
  case AP_DT_INT8: return ((const int8_t *)p)[i];
  case AP_DT_UINT16: return ((const uint16_t *)p)[i];
  case AP_DT_INT16: return ((const int16_t *)p)[i];
  case AP_DT_INT32: return ((const int32_t *)p)[i];
  case AP_DT_INT64: return (double)((const int64_t *)p)[i];
  case AP_DT_UINT32: return ((const uint32_t *)p)[i];
  case AP_DT_UINT64: return (double)((const uint64_t *)p)[i];
  case AP_DT_BOOL: return ((const uint8_t *)p)[i] != 0;
  default: return 0;
  }
}

int64_t ap_tensor_get_i64(const ap_tensor *t, int64_t i) {
  switch (t->dtype) {
  case AP_DT_INT64: return ((const int64_t *)t->data)[i];
  case AP_DT_UINT64: return (int64_t)((const uint64_t *)t->data)[i];
  case AP_DT_INT32: return ((const int32_t *)t->data)[i];
  default: {
    double v = ap_tensor_get_f64(t, i);
    if (isnan(v))
      return 0;
    if (v >= 9.2e18)
      return INT64_MAX;
    if (v <= -9.2e18)
      return INT64_MIN;
    return (int64_t)v;
  }
  }
}

void ap_tensor_set_f64(ap_tensor *t, int64_t i, double v) {
  void *p = t->data;
  /* Float-to-integer conversion saturates instead of being undefined. */
  double c = isnan(v) ? 0 : v;
#define CLAMP(lo, hi) (c < (double)(lo) ? (lo) : c > (double)(hi) ? (hi) : c)
  switch (t->dtype) {
  case AP_DT_FLOAT: ((float *)p)[i] = (float)v; break;
  case AP_DT_DOUBLE: ((double *)p)[i] = v; break;
  case AP_DT_FLOAT16: ((uint16_t *)p)[i] = float_to_half((float)v); break;
  case AP_DT_BFLOAT16: {
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, 4);
    bits += 0x7fff + ((bits >> 16) & 1); /* round to nearest even */
    ((uint16_t *)p)[i] = (uint16_t)(bits >> 16);
    break;
  }
  case AP_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)CLAMP(0, UINT8_MAX); break;
  case AP_DT_INT8: ((int8_t *)p)[i] = (int8_t)CLAMP(INT8_MIN, INT8_MAX); break;
  case AP_DT_UINT16: ((uint16_t *)p)[i] = (uint16_t)CLAMP(0, UINT16_MAX); break;
  case AP_DT_INT16: ((int16_t *)p)[i] = (int16_t)CLAMP(INT16_MIN, INT16_MAX); break;
  case AP_DT_INT32: ((int32_t *)p)[i] = (int32_t)CLAMP(INT32_MIN, INT32_MAX); break;
  case AP_DT_INT64:
    ((int64_t *)p)[i] = c >= 9.2e18 ? INT64_MAX : c <= -9.2e18 ? INT64_MIN : (int64_t)c;
    break;
  case AP_DT_UINT32: ((uint32_t *)p)[i] = (uint32_t)CLAMP(0, UINT32_MAX); break;
  case AP_DT_UINT64: ((uint64_t *)p)[i] = c <= 0 ? 0 : c >= 1.8e19 ? UINT64_MAX : (uint64_t)c; break;
  case AP_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: break;
  }
#undef CLAMP
}
