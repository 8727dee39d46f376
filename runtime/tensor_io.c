/* TensorProto .pb files, the format of ONNX's test data, through the
 * protobuf-c bindings the build generates (accpar_onnxpb). Every
 * fixed-size numeric type an executable's inputs and outputs can have,
 * dense, stored in the file itself (strings and external data are not). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "transport.h"

size_t aprt_dtype_size(aprt_dtype t) {
  switch (t) {
  case APRT_UINT8: case APRT_INT8: case APRT_BOOL: return 1;
  case APRT_UINT16: case APRT_INT16: case APRT_FLOAT16: case APRT_BFLOAT16: return 2;
  case APRT_FLOAT: case APRT_INT32: case APRT_UINT32: return 4;
  case APRT_INT64: case APRT_DOUBLE: case APRT_UINT64: return 8;
  }
  return 0;
}

/* ONNX names of the types a file may hold, for the error message. */
static const char *onnx_type_name(int32_t t) {
  static const char *const names[] = {
      "undefined", "float32", "uint8",  "int8",      "uint16",    "int16",
      "int32",     "int64",   "string", "bool",      "float16",   "float64",
      "uint32",    "uint64",  "complex64", "complex128", "bfloat16"};
  return t >= 0 && t < (int32_t)(sizeof names / sizeof names[0]) ? names[t] : "unknown";
}

const char *aprt_dtype_name(aprt_dtype t) {
  return aprt_dtype_size(t) ? onnx_type_name((int32_t)t) : "unsupported";
}

/* Where ONNX stores a dtype's values when raw_data is not used, and how many
 * there are: narrow integers, bool and 16-bit floats live in int32_data (one
 * value, or one 16-bit pattern, per int32). */
static size_t typed_count(const Onnx__TensorProto *tp) {
  switch ((aprt_dtype)tp->data_type) {
  case APRT_FLOAT: return tp->n_float_data;
  case APRT_INT64: return tp->n_int64_data;
  case APRT_DOUBLE: return tp->n_double_data;
  case APRT_UINT32: case APRT_UINT64: return tp->n_uint64_data;
  default: return tp->n_int32_data;
  }
}

static const char *typed_field(const Onnx__TensorProto *tp) {
  switch ((aprt_dtype)tp->data_type) {
  case APRT_FLOAT: return "float_data";
  case APRT_INT64: return "int64_data";
  case APRT_DOUBLE: return "double_data";
  case APRT_UINT32: case APRT_UINT64: return "uint64_data";
  default: return "int32_data";
  }
}

static void copy_typed(const Onnx__TensorProto *tp, void *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch ((aprt_dtype)tp->data_type) {
    case APRT_FLOAT: ((float *)dst)[i] = tp->float_data[i]; break;
    case APRT_INT64: ((int64_t *)dst)[i] = tp->int64_data[i]; break;
    case APRT_DOUBLE: ((double *)dst)[i] = tp->double_data[i]; break;
    case APRT_UINT32: ((uint32_t *)dst)[i] = (uint32_t)tp->uint64_data[i]; break;
    case APRT_UINT64: ((uint64_t *)dst)[i] = tp->uint64_data[i]; break;
    case APRT_INT32: ((int32_t *)dst)[i] = tp->int32_data[i]; break;
    case APRT_UINT8: case APRT_INT8: case APRT_BOOL:
      ((uint8_t *)dst)[i] = (uint8_t)tp->int32_data[i];
      break;
    case APRT_UINT16: case APRT_INT16: case APRT_FLOAT16: case APRT_BFLOAT16:
      ((uint16_t *)dst)[i] = (uint16_t)tp->int32_data[i];
      break;
    }
  }
}

int64_t aprt_tensor_volume(const aprt_tensor *t) {
  int64_t v = 1;
  for (int d = 0; d < t->ndim; d++)
    v *= t->dims[d];
  return v;
}

void aprt_tensor_free(aprt_tensor *t) {
  free(t->data);
  t->data = NULL;
}

static void shape_str(char *out, size_t cap, int ndim, const int64_t *dims) {
  size_t len = 0;
  int n = snprintf(out, cap, "[");
  len = n > 0 ? (size_t)n : 0;
  for (int d = 0; d < ndim && len < cap; d++) {
    n = snprintf(out + len, cap - len, "%s%lld", d ? "," : "", (long long)dims[d]);
    len += n > 0 ? (size_t)n : 0;
  }
  if (len < cap)
    snprintf(out + len, cap - len, "]");
}

static int host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* raw_data is little-endian whatever the host. */
static void copy_le(unsigned char *dst, const unsigned char *src, size_t n, size_t es) {
  if (n == 0) /* an empty tensor may have no buffer at all */
    return;
  if (host_is_little_endian()) {
    memcpy(dst, src, n * es);
    return;
  }
  for (size_t i = 0; i < n; i++)
    for (size_t b = 0; b < es; b++)
      dst[i * es + b] = src[i * es + es - 1 - b];
}

static aprt_status read_file(const char *path, unsigned char **data, size_t *size,
                             aprt_error *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    aprt_errorf(err, "%s: cannot open: %s", path, strerror(errno));
    return APRT_ERR_IO;
  }
  size_t cap = 1 << 16, len = 0;
  unsigned char *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fclose(f);
      aprt_errorf(err, "%s: out of memory", path);
      return APRT_ERR_NOMEM;
    }
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap)
      break;
    unsigned char *bigger = realloc(buf, cap * 2);
    if (!bigger)
      free(buf);
    buf = bigger;
    cap *= 2;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(buf);
    aprt_errorf(err, "%s: read error", path);
    return APRT_ERR_IO;
  }
  *data = buf;
  *size = len;
  return APRT_OK;
}

static aprt_status convert(const char *path, const Onnx__TensorProto *tp, aprt_tensor *out,
                           aprt_error *err) {
  if (!aprt_dtype_size((aprt_dtype)tp->data_type)) {
    aprt_errorf(err, "%s: tensor '%s' is %s; only fixed-size numeric types are supported", path,
                tp->name ? tp->name : "", onnx_type_name(tp->data_type));
    return APRT_ERR_MISMATCH;
  }
  if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
    aprt_errorf(err, "%s: tensor data is stored in an external file, which is not supported",
                path);
    return APRT_ERR_FORMAT;
  }
  if (tp->segment) {
    aprt_errorf(err, "%s: segmented tensors are not supported", path);
    return APRT_ERR_FORMAT;
  }
  if (tp->n_dims > APRT_MAX_RANK) {
    aprt_errorf(err, "%s: tensor has %zu dimensions; at most %d are supported", path,
                tp->n_dims, APRT_MAX_RANK);
    return APRT_ERR_FORMAT;
  }
  memset(out, 0, sizeof *out);
  out->dtype = (aprt_dtype)tp->data_type;
  out->ndim = (int)tp->n_dims;
  int64_t volume = 1;
  for (size_t d = 0; d < tp->n_dims; d++) {
    if (tp->dims[d] < 0 || (tp->dims[d] > 0 && volume > INT64_MAX / 8 / tp->dims[d])) {
      aprt_errorf(err, "%s: dimension %zu is %lld", path, d, (long long)tp->dims[d]);
      return APRT_ERR_FORMAT;
    }
    out->dims[d] = tp->dims[d];
    volume *= tp->dims[d];
  }
  size_t es = aprt_dtype_size(out->dtype), n = (size_t)volume;
  size_t typed = typed_count(tp);
  char shape[160];
  shape_str(shape, sizeof shape, out->ndim, out->dims);
  if (tp->has_raw_data && tp->raw_data.len != n * es) {
    aprt_errorf(err, "%s: raw_data has %zu bytes; %s %s needs %zu", path, tp->raw_data.len,
                aprt_dtype_name(out->dtype), shape, n * es);
    return APRT_ERR_FORMAT;
  }
  if (!tp->has_raw_data && typed != n) {
    aprt_errorf(err, "%s: %s has %zu values; shape %s needs %zu", path, typed_field(tp), typed,
                shape, n);
    return APRT_ERR_FORMAT;
  }
  out->data = malloc(n ? n * es : 1);
  if (!out->data) {
    aprt_errorf(err, "%s: out of memory for %zu elements", path, n);
    return APRT_ERR_NOMEM;
  }
  if (tp->has_raw_data)
    copy_le(out->data, tp->raw_data.data, n, es);
  else
    copy_typed(tp, out->data, n);
  return APRT_OK;
}

aprt_status aprt_tensor_read(const char *path, aprt_tensor *out, aprt_error *err) {
  memset(out, 0, sizeof *out);
  unsigned char *bytes;
  size_t size;
  aprt_status s = read_file(path, &bytes, &size, err);
  if (s)
    return s;
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, size, bytes);
  free(bytes);
  if (!tp) {
    aprt_errorf(err, "%s: not a TensorProto (protobuf parse failed)", path);
    return APRT_ERR_FORMAT;
  }
  s = convert(path, tp, out, err);
  onnx__tensor_proto__free_unpacked(tp, NULL);
  return s;
}

aprt_status aprt_tensor_read_expect(const char *path, aprt_dtype dtype, int ndim,
                                    const int64_t *dims, aprt_tensor *out, aprt_error *err) {
  aprt_status s = aprt_tensor_read(path, out, err);
  if (s)
    return s;
  bool same = out->dtype == dtype && out->ndim == ndim;
  for (int d = 0; same && d < ndim; d++)
    same = out->dims[d] == dims[d];
  if (same)
    return APRT_OK;
  char want[160], got[160];
  shape_str(want, sizeof want, ndim, dims);
  shape_str(got, sizeof got, out->ndim, out->dims);
  aprt_errorf(err, "%s: expected %s %s, got %s %s", path, aprt_dtype_name(dtype), want,
              aprt_dtype_name(out->dtype), got);
  aprt_tensor_free(out);
  return APRT_ERR_MISMATCH;
}

aprt_status aprt_tensor_write(const char *path, const char *name, const aprt_tensor *t,
                              aprt_error *err) {
  size_t es = aprt_dtype_size(t->dtype);
  if (!es || t->ndim < 0 || t->ndim > APRT_MAX_RANK) {
    aprt_errorf(err, "%s: cannot write a tensor of type %d and rank %d", path, (int)t->dtype,
                t->ndim);
    return APRT_ERR_USAGE;
  }
  size_t n = (size_t)aprt_tensor_volume(t);
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[APRT_MAX_RANK];
  memcpy(dims, t->dims, sizeof dims);
  tp.n_dims = (size_t)t->ndim;
  tp.dims = dims;
  tp.has_data_type = 1;
  tp.data_type = (int32_t)t->dtype;
  tp.name = (char *)(uintptr_t)(name ? name : "");
  tp.has_raw_data = 1;
  tp.raw_data.len = n * es;
  tp.raw_data.data = malloc(n ? n * es : 1);
  size_t tmp_len = strlen(path) + 8;
  char *tmp = malloc(tmp_len);
  uint8_t *packed = NULL;
  aprt_status s = APRT_OK;
  if (!tp.raw_data.data || !tmp) {
    aprt_errorf(err, "%s: out of memory", path);
    s = APRT_ERR_NOMEM;
    goto done;
  }
  copy_le(tp.raw_data.data, t->data, n, es);
  size_t size = onnx__tensor_proto__get_packed_size(&tp);
  packed = malloc(size ? size : 1);
  if (!packed) {
    aprt_errorf(err, "%s: out of memory", path);
    s = APRT_ERR_NOMEM;
    goto done;
  }
  onnx__tensor_proto__pack(&tp, packed);
  snprintf(tmp, tmp_len, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    aprt_errorf(err, "%s: cannot create: %s", path, strerror(errno));
    s = APRT_ERR_IO;
    goto done;
  }
  bool ok = fwrite(packed, 1, size, f) == size;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) {
    aprt_errorf(err, "%s: cannot write: %s", path, strerror(errno));
    remove(tmp);
    s = APRT_ERR_IO;
  }
done:
  free(tp.raw_data.data);
  free(tmp);
  free(packed);
  return s;
}
