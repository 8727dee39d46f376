/* TensorProto in and out: the one conversion used for initializers,
 * attribute tensors and the .pb files of ONNX test data; plus the protobuf
 * allocator and the file helpers the frontend's readers and writers share. */
#define _XOPEN_SOURCE 700 /* realpath, pread, mkstemp, fchmod */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx.pb-c.h"

#include "frontend/frontend.h"

/* ---- the protobuf allocator ----------------------------------------------- */

/* Each block carries a header linking it into its allocator's list; the
 * union keeps the payload aligned for any type protobuf-c stores. */
typedef union block_hdr {
  struct {
    union block_hdr *prev, *next;
  } link;
  max_align_t align;
} block_hdr;

static void *pb_alloc(void *user, size_t size) {
  ap_pb_alloc *pa = user;
  block_hdr *h = size <= SIZE_MAX - sizeof *h ? ap_xrealloc(NULL, sizeof *h + size) : NULL;
  if (!h) {
    pa->failed = true;
    return NULL;
  }
  h->link.prev = NULL;
  h->link.next = pa->blocks;
  if (pa->blocks)
    ((block_hdr *)pa->blocks)->link.prev = h;
  pa->blocks = h;
  return h + 1;
}

static void pb_free(void *user, void *ptr) {
  ap_pb_alloc *pa = user;
  if (!ptr)
    return;
  block_hdr *h = (block_hdr *)ptr - 1;
  if (h->link.prev)
    h->link.prev->link.next = h->link.next;
  else
    pa->blocks = h->link.next;
  if (h->link.next)
    h->link.next->link.prev = h->link.prev;
  ap_xfree(h);
}

void ap_pb_alloc_init(ap_pb_alloc *pa) {
  pa->base.alloc = pb_alloc;
  pa->base.free = pb_free;
  pa->base.allocator_data = pa;
  pa->blocks = NULL;
  pa->failed = false;
}

void ap_pb_alloc_release(ap_pb_alloc *pa) {
  while (pa->blocks)
    pb_free(pa, (block_hdr *)pa->blocks + 1);
}

/* ---- nesting -------------------------------------------------------------- */

static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

/* Walks the wire format guided by the descriptors, descending only into
 * fields the schema says are messages. Malformed data ends the walk with
 * true: protobuf-c reports it; only excess depth is this function's call. */
static bool nesting_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                       const uint8_t *end, int depth_left) {
  while (p < end) {
    uint64_t key, len;
    if (!read_varint(&p, end, &key))
      return true;
    switch (key & 7) {
    case PROTOBUF_C_WIRE_TYPE_VARINT:
      if (!read_varint(&p, end, &len))
        return true;
      break;
    case PROTOBUF_C_WIRE_TYPE_64BIT:
      if (end - p < 8)
        return true;
      p += 8;
      break;
    case PROTOBUF_C_WIRE_TYPE_32BIT:
      if (end - p < 4)
        return true;
      p += 4;
      break;
    case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
      if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p))
        return true;
      const ProtobufCFieldDescriptor *f =
          (key >> 3) <= UINT_MAX
              ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
              : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          (depth_left == 0 || !nesting_ok(f->descriptor, p, p + len, depth_left - 1)))
        return false;
      p += len;
      break;
    }
    default:
      return true;
    }
  }
  return true;
}

bool ap_pb_nesting_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t size) {
  return nesting_ok(desc, data, data + size, AP_PB_MAX_DEPTH);
}

/* ---- files ---------------------------------------------------------------- */

ap_status ap_pb_read_file(const char *path, uint8_t **data, size_t *size, ap_diag *d) {
  *data = NULL;
  *size = 0;
  /* O_NONBLOCK: a FIFO must not hang the reader; fstat then refuses it. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "not a regular file");
  }
  if ((uintmax_t)st.st_size > SIZE_MAX / 2) {
    close(fd);
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "too large to read");
  }
  size_t n = (size_t)st.st_size;
  uint8_t *buf = ap_xrealloc(NULL, n);
  if (!buf) {
    close(fd);
    return ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  }
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      int err = r < 0 ? errno : 0;
      close(fd);
      ap_xfree(buf);
      return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot read: %s",
                      err ? strerror(err) : "the file shrank while being read");
    }
    got += (size_t)r;
  }
  close(fd);
  *data = buf;
  *size = n;
  return AP_OK;
}

ap_status ap_pb_write_file(const char *path, const uint8_t *data, size_t size, ap_diag *d) {
  static const char suffix[] = ".tmp-XXXXXX";
  size_t len = strlen(path);
  char *tmp = ap_xrealloc(NULL, len + sizeof suffix);
  if (!tmp)
    return ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  memcpy(tmp, path, len);
  memcpy(tmp + len, suffix, sizeof suffix);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    int err = errno;
    ap_xfree(tmp);
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot create a file beside it: %s",
                    strerror(err));
  }
  /* mkstemp makes the file private; a model is an ordinary document. */
  int err = fchmod(fd, 0644) != 0 ? errno : 0;
  for (size_t done = 0; !err && done < size;) {
    ssize_t w = write(fd, data + done, size - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      err = w < 0 ? errno : EIO;
    else
      done += (size_t)w;
  }
  if (!err && fsync(fd) != 0)
    err = errno;
  if (close(fd) != 0 && !err)
    err = errno;
  if (!err && rename(tmp, path) != 0)
    err = errno;
  if (err)
    unlink(tmp);
  ap_xfree(tmp);
  if (err)
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot write: %s", strerror(err));
  return AP_OK;
}

const char *ap_pb_dir_of(ap_arena *a, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return ap_arena_strdup(a, ".");
  if (slash == path)
    return ap_arena_strdup(a, "/");
  return ap_arena_strndup(a, path, (size_t)(slash - path));
}

/* ---- byte order ----------------------------------------------------------- */

static bool host_is_little_endian(void) {
  uint16_t one = 1;
  unsigned char first;
  memcpy(&first, &one, 1);
  return first == 1;
}

/* raw_data is little-endian by definition; complex numbers swap per part. */
static size_t swap_unit(ap_dtype t) {
  if (t == AP_DT_COMPLEX64)
    return 4;
  if (t == AP_DT_COMPLEX128)
    return 8;
  return ap_dtype_size(t);
}

static void swap_to_host(void *data, size_t bytes, ap_dtype t) {
  size_t unit = swap_unit(t);
  if (host_is_little_endian() || unit < 2)
    return;
  unsigned char *p = data;
  for (size_t off = 0; off + unit <= bytes; off += unit)
    for (size_t i = 0; i < unit / 2; i++) {
      unsigned char c = p[off + i];
      p[off + i] = p[off + unit - 1 - i];
      p[off + unit - 1 - i] = c;
    }
}

/* ---- TensorProto -> ap_tensor --------------------------------------------- */

static ap_status tensor_error(ap_diag *d, ap_status s, const ap_pb_where *w, const char *fmt,
                              ...) __attribute__((format(printf, 4, 5)));

/* One message shape for every tensor problem: the tensor, then the issue. */
static ap_status tensor_error(ap_diag *d, ap_status s, const ap_pb_where *w, const char *fmt,
                              ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return ap_error(d, s, w->file, w->node, w->op, "%s: %s", w->what, what);
}

#define TERR(s, ...) tensor_error(d, s, w, __VA_ARGS__)

static bool parse_u63(const char *s, int64_t *out) {
  int64_t v = 0;
  if (!s || !*s)
    return false;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - (*s - '0')) / 10)
      return false;
    v = v * 10 + (*s - '0');
  }
  *out = v;
  return true;
}

/* Whether location stays inside the model's folder by its spelling: not
 * absolute, no ".." component (either separator counts, so a file written
 * on Windows cannot escape either). */
static bool location_is_contained(const char *loc) {
  if (loc[0] == '/' || loc[0] == '\\' || (loc[0] && loc[1] == ':'))
    return false;
  for (const char *p = loc; *p;) {
    size_t n = strcspn(p, "/\\");
    if (n == 2 && p[0] == '.' && p[1] == '.')
      return false;
    p += n;
    if (*p)
      p++;
  }
  return true;
}

static ap_status read_external(const Onnx__TensorProto *tp, ap_arena *a, size_t bytes,
                               void **out, const ap_pb_where *w, ap_diag *d) {
  const char *loc = NULL, *off_s = NULL, *len_s = NULL;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = tp->external_data[i];
    if (!e->key)
      continue;
    if (strcmp(e->key, "location") == 0)
      loc = e->value;
    else if (strcmp(e->key, "offset") == 0)
      off_s = e->value;
    else if (strcmp(e->key, "length") == 0)
      len_s = e->value;
  }
  if (!w->dir)
    return TERR(AP_ERR_UNSUPPORTED,
                "uses external data, which is read from the model's folder; a model loaded "
                "from memory has none");
  if (!loc || !*loc)
    return TERR(AP_ERR_INVALID, "external data without a location");
  if (!location_is_contained(loc))
    return TERR(AP_ERR_INVALID,
                "external data location '%s' leaves the model's folder (absolute paths and "
                "'..' are refused)",
                loc);
  int64_t offset = 0, length = -1;
  if (off_s && !parse_u63(off_s, &offset))
    return TERR(AP_ERR_INVALID, "external data offset '%s' is not a non-negative integer",
                off_s);
  if (len_s && !parse_u63(len_s, &length))
    return TERR(AP_ERR_INVALID, "external data length '%s' is not a non-negative integer",
                len_s);

  size_t dlen = strlen(w->dir), llen = strlen(loc);
  char *full = ap_xrealloc(NULL, dlen + llen + 2);
  if (!full)
    return ap_error(d, AP_ERR_NOMEM, w->file, w->node, w->op, "out of memory");
  memcpy(full, w->dir, dlen);
  full[dlen] = '/';
  memcpy(full + dlen + 1, loc, llen + 1);

  /* The spelling check cannot see symbolic links: compare real paths too. */
  char real_dir[PATH_MAX], real_file[PATH_MAX];
  ap_status s = AP_OK;
  if (!realpath(w->dir, real_dir) || !realpath(full, real_file))
    s = TERR(AP_ERR_IO, "cannot open external data '%s': %s", loc, strerror(errno));
  ap_xfree(full);
  if (s != AP_OK)
    return s;
  size_t rd = strlen(real_dir);
  bool inside = strncmp(real_file, real_dir, rd) == 0 &&
                (real_file[rd] == '/' || (rd == 1 && real_dir[0] == '/'));
  if (!inside)
    return TERR(AP_ERR_INVALID, "external data location '%s' resolves outside the model's folder",
                loc);
  int fd = open(real_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0)
      close(fd);
    return TERR(AP_ERR_IO, "external data '%s' is not a readable regular file", loc);
  }
  int64_t fsize = (int64_t)st.st_size;
  if (offset > fsize) {
    close(fd);
    return TERR(AP_ERR_INVALID, "external data offset %lld is past the end of '%s' (%lld bytes)",
                (long long)offset, loc, (long long)fsize);
  }
  if (length >= 0 && length > fsize - offset) {
    close(fd);
    return TERR(AP_ERR_INVALID,
                "external data length %lld at offset %lld is past the end of '%s' (%lld bytes)",
                (long long)length, (long long)offset, loc, (long long)fsize);
  }
  if (length >= 0 && (uint64_t)length != (uint64_t)bytes) {
    close(fd);
    return TERR(AP_ERR_INVALID,
                "external data length %lld does not match the %zu bytes the tensor's "
                "shape and type need",
                (long long)length, bytes);
  }
  if ((uint64_t)(fsize - offset) < (uint64_t)bytes) {
    close(fd);
    return TERR(AP_ERR_INVALID,
                "external data '%s' holds %lld bytes after the offset; the tensor needs %zu", loc,
                (long long)(fsize - offset), bytes);
  }
  void *buf = ap_arena_alloc(a, bytes);
  if (!buf) {
    close(fd);
    return ap_error(d, AP_ERR_NOMEM, w->file, w->node, w->op, "out of memory");
  }
  size_t got = 0;
  while (got < bytes) {
    ssize_t r = pread(fd, (char *)buf + got, bytes - got, (off_t)(offset + (int64_t)got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      close(fd);
      return TERR(AP_ERR_IO, "cannot read external data '%s'", loc);
    }
    got += (size_t)r;
  }
  close(fd);
  swap_to_host(buf, bytes, (ap_dtype)tp->data_type);
  *out = buf;
  return AP_OK;
}

/* Which typed field holds a given data type, and how many values make one
 * element (complex numbers take two). */
enum field { F_NONE, F_FLOAT, F_INT32, F_STRING, F_INT64, F_DOUBLE, F_UINT64 };
static const char *const field_names[] = {"no field",    "float_data", "int32_data", "string_data",
                                          "int64_data",  "double_data", "uint64_data"};

static enum field typed_field(ap_dtype t, int *per_elem) {
  *per_elem = 1;
  switch (t) {
  case AP_DT_COMPLEX64: *per_elem = 2; return F_FLOAT;
  case AP_DT_FLOAT: return F_FLOAT;
  case AP_DT_INT32: case AP_DT_INT16: case AP_DT_INT8: case AP_DT_UINT16:
  case AP_DT_UINT8: case AP_DT_BOOL: case AP_DT_FLOAT16: case AP_DT_BFLOAT16:
    return F_INT32;
  case AP_DT_STRING: return F_STRING;
  case AP_DT_INT64: return F_INT64;
  case AP_DT_COMPLEX128: *per_elem = 2; return F_DOUBLE;
  case AP_DT_DOUBLE: return F_DOUBLE;
  case AP_DT_UINT32: case AP_DT_UINT64: return F_UINT64;
  default: return F_NONE;
  }
}

static ap_status convert_typed(const Onnx__TensorProto *tp, enum field f, ap_arena *a,
                               ap_tensor *t, size_t bytes, const ap_pb_where *w, ap_diag *d) {
  size_t n = (size_t)t->numel;
  if (f == F_STRING) {
    char **s = ap_arena_array(a, n + 1, sizeof *s);
    if (!s)
      return ap_error(d, AP_ERR_NOMEM, w->file, w->node, w->op, "out of memory");
    for (size_t i = 0; i < n; i++) {
      const ProtobufCBinaryData *b = &tp->string_data[i];
      if (!(s[i] = ap_arena_strndup(a, (const char *)b->data, b->len)))
        return ap_error(d, AP_ERR_NOMEM, w->file, w->node, w->op, "out of memory");
    }
    t->data = s;
    return AP_OK;
  }
  void *data = ap_arena_alloc(a, bytes);
  if (!data)
    return ap_error(d, AP_ERR_NOMEM, w->file, w->node, w->op, "out of memory");
  t->data = data;
  /* An empty tensor's fields are NULL, which memcpy may not be given. */
  if (n == 0)
    return AP_OK;
  switch (f) {
  case F_FLOAT: memcpy(data, tp->float_data, bytes); break;
  case F_INT64: memcpy(data, tp->int64_data, bytes); break;
  case F_DOUBLE: memcpy(data, tp->double_data, bytes); break;
  case F_UINT64:
    if (t->dtype == AP_DT_UINT64)
      memcpy(data, tp->uint64_data, bytes);
    else
      for (size_t i = 0; i < n; i++)
        ((uint32_t *)data)[i] = (uint32_t)tp->uint64_data[i];
    break;
  case F_INT32:
    /* int32_data carries narrower types one per value, 16-bit floats as their
     * bit patterns; the stored value is truncated to the element's width. */
    for (size_t i = 0; i < n; i++) {
      int32_t v = tp->int32_data[i];
      switch (ap_dtype_size(t->dtype)) {
      case 1: ((uint8_t *)data)[i] = t->dtype == AP_DT_BOOL ? v != 0 : (uint8_t)v; break;
      case 2: ((uint16_t *)data)[i] = (uint16_t)v; break;
      default: ((int32_t *)data)[i] = v; break;
      }
    }
    break;
  default: break;
  }
  return AP_OK;
}

ap_status ap_tensor_from_pb(const Onnx__TensorProto *tp, ap_arena *a, ap_tensor *t,
                            const ap_pb_where *w, ap_diag *d) {
  memset(t, 0, sizeof *t);
  if (tp->segment)
    return TERR(AP_ERR_UNSUPPORTED, "segmented tensors are not supported");
  if (!tp->has_data_type || tp->data_type == AP_DT_UNDEFINED)
    return TERR(AP_ERR_INVALID, "has no data type");
  if (tp->data_type < 0 || tp->data_type > AP_DT_LAST_KNOWN)
    return TERR(AP_ERR_INVALID, "unknown data type %d", (int)tp->data_type);
  ap_dtype dt = (ap_dtype)tp->data_type;
  size_t esize = ap_dtype_size(dt);
  if (dt != AP_DT_STRING && esize == 0)
    return TERR(AP_ERR_UNSUPPORTED, "%s tensors are not supported", ap_dtype_name(dt));
  if (tp->n_dims > AP_MAX_RANK)
    return TERR(AP_ERR_INVALID, "has rank %zu; at most %d is supported", tp->n_dims,
                (int)AP_MAX_RANK);
  t->dtype = dt;
  t->rank = (int)tp->n_dims;
  for (int i = 0; i < t->rank; i++) {
    if (tp->dims[i] < 0)
      return TERR(AP_ERR_INVALID, "dimension %d is negative (%lld)", i,
                  (long long)tp->dims[i]);
    t->dims[i] = tp->dims[i];
  }
  t->numel = ap_numel(t->rank, t->dims);
  size_t unit = dt == AP_DT_STRING ? sizeof(char *) : esize;
  if (t->numel < 0 || (uint64_t)t->numel > SIZE_MAX / unit)
    return TERR(AP_ERR_INVALID, "the element count of its shape overflows");
  size_t bytes = (size_t)t->numel * esize;

  bool external = tp->has_data_location &&
                  tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  /* The typed fields in use, in field order; more than one is an error. */
  const size_t counts[] = {0,
                           tp->n_float_data,
                           tp->n_int32_data,
                           tp->n_string_data,
                           tp->n_int64_data,
                           tp->n_double_data,
                           tp->n_uint64_data};
  enum field used = F_NONE;
  int n_present = 0;
  for (int f = F_FLOAT; f <= F_UINT64; f++)
    if (counts[f]) {
      n_present++;
      if (used == F_NONE)
        used = (enum field)f;
    }
  int sources = n_present + (tp->has_raw_data ? 1 : 0) + (external ? 1 : 0);
  if (sources > 1)
    return TERR(AP_ERR_INVALID, "holds its data in more than one field");

  if (external) {
    if (dt == AP_DT_STRING)
      return TERR(AP_ERR_UNSUPPORTED, "string tensors in external data are not supported");
    return read_external(tp, a, bytes, &t->data, w, d);
  }
  if (tp->has_raw_data) {
    if (dt == AP_DT_STRING)
      return TERR(AP_ERR_INVALID, "a string tensor cannot use raw_data");
    if (tp->raw_data.len != bytes)
      return TERR(AP_ERR_INVALID,
                  "its shape and type need %zu bytes but raw_data holds %zu", bytes,
                  tp->raw_data.len);
    if (!(t->data = ap_arena_alloc(a, bytes)))
      return ap_error(d, AP_ERR_NOMEM, w->file, w->node, w->op, "out of memory");
    if (bytes)
      memcpy(t->data, tp->raw_data.data, bytes);
    swap_to_host(t->data, bytes, dt);
    return AP_OK;
  }
  int per_elem;
  enum field want = typed_field(dt, &per_elem);
  if (n_present == 0) {
    if (t->numel != 0)
      return TERR(AP_ERR_INVALID, "its shape has %lld elements but it holds no data",
                  (long long)t->numel);
    return convert_typed(tp, want, a, t, 0, w, d);
  }
  if (used != want)
    return TERR(AP_ERR_INVALID, "a %s tensor cannot hold its data in %s", ap_dtype_name(dt),
                field_names[used]);
  if ((uint64_t)counts[used] != (uint64_t)t->numel * (uint64_t)per_elem)
    return TERR(AP_ERR_INVALID, "its shape has %lld elements but %s holds %zu values",
                (long long)t->numel, field_names[want], counts[used]);
  return convert_typed(tp, want, a, t, bytes, w, d);
}

#undef TERR

/* ---- ap_tensor -> TensorProto --------------------------------------------- */

bool ap_tensor_to_pb(const ap_tensor *t, const char *name, ap_arena *a, Onnx__TensorProto *tp) {
  tp->name = ap_arena_strdup(a, name ? name : "");
  tp->n_dims = (size_t)t->rank;
  tp->dims = ap_arena_array(a, (size_t)t->rank + 1, sizeof *tp->dims);
  if (!tp->name || !tp->dims)
    return false;
  for (int i = 0; i < t->rank; i++)
    tp->dims[i] = t->dims[i];
  tp->has_data_type = 1;
  tp->data_type = (int32_t)t->dtype;
  size_t n = t->numel > 0 ? (size_t)t->numel : 0;
  if (t->dtype == AP_DT_STRING) {
    char *const *s = t->data;
    tp->n_string_data = n;
    tp->string_data = ap_arena_array(a, n + 1, sizeof *tp->string_data);
    if (!tp->string_data)
      return false;
    for (size_t i = 0; i < n; i++) {
      const char *str = s && s[i] ? s[i] : "";
      size_t len = strlen(str);
      uint8_t *copy = ap_arena_alloc(a, len + 1);
      if (!copy)
        return false;
      memcpy(copy, str, len);
      tp->string_data[i].len = len;
      tp->string_data[i].data = copy;
    }
    return true;
  }
  size_t bytes = n * ap_dtype_size(t->dtype);
  tp->has_raw_data = 1;
  tp->raw_data.len = bytes;
  if (host_is_little_endian() || bytes == 0) {
    tp->raw_data.data = t->data;
    return true;
  }
  uint8_t *copy = ap_arena_alloc(a, bytes);
  if (!copy)
    return false;
  memcpy(copy, t->data, bytes);
  swap_to_host(copy, bytes, t->dtype); /* the swap is its own inverse */
  tp->raw_data.data = copy;
  return true;
}

/* ---- .pb files of ONNX test data ----------------------------------------- */

ap_status ap_read_tensor_pb(const char *path, ap_arena *a, ap_tensor *t, const char **name_out,
                            ap_diag *d) {
  memset(t, 0, sizeof *t);
  if (name_out)
    *name_out = NULL;
  uint8_t *buf;
  size_t size;
  ap_status s = ap_pb_read_file(path, &buf, &size, d);
  if (s != AP_OK)
    return s;
  if (!ap_pb_nesting_ok(&onnx__tensor_proto__descriptor, buf, size)) {
    ap_xfree(buf);
    return ap_error(d, AP_ERR_PARSE, path, NULL, NULL,
                    "protobuf messages nest deeper than %d levels", AP_PB_MAX_DEPTH);
  }
  ap_pb_alloc pa;
  ap_pb_alloc_init(&pa);
  Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&pa.base, size, buf);
  ap_xfree(buf);
  if (!tp) {
    bool oom = pa.failed;
    ap_pb_alloc_release(&pa);
    return oom ? ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory")
               : ap_error(d, AP_ERR_PARSE, path, NULL, NULL,
                          "not a TensorProto: the protobuf is truncated or malformed");
  }
  const char *dir = ap_pb_dir_of(a, path);
  const char *name = ap_arena_strdup(a, tp->name ? tp->name : "");
  if (!dir || !name) {
    s = ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  } else {
    char what[300];
    snprintf(what, sizeof what, "tensor '%.256s'", name);
    ap_pb_where w = {.file = path, .dir = dir, .what = what};
    s = ap_tensor_from_pb(tp, a, t, &w, d);
  }
  onnx__tensor_proto__free_unpacked(tp, &pa.base);
  ap_pb_alloc_release(&pa);
  if (s == AP_OK && name_out)
    *name_out = name;
  if (s != AP_OK)
    memset(t, 0, sizeof *t);
  return s;
}

ap_status ap_write_tensor_pb(const char *path, const ap_tensor *t, const char *name,
                             ap_diag *d) {
  ap_arena *a = ap_arena_new();
  if (!a)
    return ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  Onnx__TensorProto tp;
  onnx__tensor_proto__init(&tp);
  ap_status s = AP_OK;
  if (!ap_tensor_to_pb(t, name, a, &tp)) {
    s = ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  } else {
    size_t size = onnx__tensor_proto__get_packed_size(&tp);
    uint8_t *buf = ap_xrealloc(NULL, size);
    if (!buf) {
      s = ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
    } else {
      onnx__tensor_proto__pack(&tp, buf);
      s = ap_pb_write_file(path, buf, size, d);
      ap_xfree(buf);
    }
  }
  ap_arena_free(a);
  return s;
}
