/* What the lowering and the backends share: text buffers, writing the
 * output folder's files through a temporary and a rename, C literals and
 * comments, operands and constant views, first-fit arena planning, the
 * parts of main.c that do not depend on the kind of program, and the
 * helpers of the operator emitters. */
#define _XOPEN_SOURCE 700 /* open_memstream, realpath */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"
#include "passes/distribute.h"
#include "passes/passes.h"

/* ---- text buffers -------------------------------------------------------- */

bool cg_text_open(cg_text *t) {
  t->s = NULL;
  t->len = 0;
  t->f = open_memstream(&t->s, &t->len);
  return t->f != NULL;
}

bool cg_text_close(cg_text *t) {
  bool ok = t->f && fclose(t->f) == 0;
  t->f = NULL;
  return ok;
}

/* ---- files ----------------------------------------------------------------- */

ap_status cg_oom(ap_graph *g, ap_diag *d) {
  return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
}

ap_status cg_write_file(ap_graph *g, ap_diag *d, const char *outdir, const char *name,
                        const void *data, size_t size) {
  char *path = ap_arena_printf(g->arena, "%s/%s", outdir, name);
  char *tmp = ap_arena_printf(g->arena, "%s/.%s.tmp", outdir, name);
  if (!path || !tmp)
    return cg_oom(g, d);
  FILE *f = fopen(tmp, "wb");
  if (!f)
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot write: %s", strerror(errno));
  bool ok = fwrite(data, 1, size, f) == size;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return ap_error(d, AP_ERR_IO, path, NULL, NULL, "cannot write: %s", strerror(e));
  }
  return AP_OK;
}

ap_status cg_write_text(ap_graph *g, ap_diag *d, const char *outdir, const char *name,
                        cg_text *t) {
  if (!cg_text_close(t)) {
    free(t->s);
    return cg_oom(g, d);
  }
  ap_status s = cg_write_file(g, d, outdir, name, t->s, t->len);
  free(t->s);
  return s;
}

ap_status cg_make_dir(ap_diag *d, const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return ap_error(d, AP_ERR_IO, dir, NULL, NULL, "exists and is not a directory");
    return AP_OK;
  }
  if (mkdir(dir, 0777) != 0)
    return ap_error(d, AP_ERR_IO, dir, NULL, NULL, "cannot create: %s", strerror(errno));
  return AP_OK;
}

ap_status cg_prepare_outdir(ap_graph *g, ap_diag *d, const char *outdir, char **blob_path) {
  ap_status s = cg_make_dir(d, outdir);
  if (s != AP_OK)
    return s;
  /* A compile that fails from here on must not leave an older program
   * looking like its result. */
  char *model = ap_arena_printf(g->arena, "%s/model", outdir);
  if (!model)
    return cg_oom(g, d);
  if (unlink(model) != 0 && errno != ENOENT)
    return ap_error(d, AP_ERR_IO, model, NULL, NULL, "cannot remove: %s", strerror(errno));
  char *abs = realpath(outdir, NULL);
  if (!abs)
    return ap_error(d, AP_ERR_IO, outdir, NULL, NULL, "cannot resolve: %s", strerror(errno));
  *blob_path = ap_arena_printf(g->arena, "%s/weights.bin", abs);
  free(abs);
  return *blob_path ? AP_OK : cg_oom(g, d);
}

/* ---- C text ---------------------------------------------------------------- */

void cg_put_cstring(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 32 || ch >= 127)
      fprintf(f, "\\%03o", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

void cg_put_comment_name(FILE *f, const char *s) {
  for (; *s; s++)
    fputc((*s == '*' || (unsigned char)*s < 32) ? '_' : *s, f);
}

/* ---- operands ---------------------------------------------------------------- */

void cg_operand_of(const ap_value *v, const struct ap_dbox *b, cg_operand *o) {
  memset(o, 0, sizeof *o);
  if (!v)
    return;
  o->v = v;
  o->dtype = v->dtype;
  o->rank = v->rank;
  for (int i = 0; i < v->rank; i++)
    o->dims[i] = b->hi[i] - b->lo[i];
  o->numel = ap_numel(v->rank, o->dims);
  o->box.rank = v->rank;
  for (int i = 0; i < v->rank; i++) {
    o->box.start[i] = b->lo[i];
    o->box.size[i] = o->dims[i];
  }
}

/* Copies box b of a row-major tensor (dims, es bytes per element) into dst. */
static void slice_copy(unsigned char *dst, const unsigned char *src, int rank,
                       const int64_t *dims, const ap_dbox *b, size_t es) {
  int64_t strides[AP_MAX_RANK], idx[AP_MAX_RANK] = {0}, size[AP_MAX_RANK];
  cg_strides(rank, dims, strides);
  int64_t total = 1;
  for (int i = 0; i < rank; i++) {
    size[i] = b->hi[i] - b->lo[i];
    total *= size[i];
  }
  for (int64_t k = 0; k < total; k++) {
    int64_t off = 0;
    for (int i = 0; i < rank; i++)
      off += (b->lo[i] + idx[i]) * strides[i];
    memcpy(dst + (size_t)k * es, src + (size_t)off * es, es);
    for (int i = rank - 1; i >= 0 && ++idx[i] == size[i]; i--)
      idx[i] = 0;
  }
}

const ap_value *cg_const_view(ap_graph *g, int v, const ap_dbox *b) {
  const ap_value *val = &g->values[v];
  if (ap_dbox_whole(val, b))
    return val;
  ap_value *view = ap_arena_alloc(g->arena, sizeof *view);
  size_t es = ap_dtype_size(val->dtype);
  int64_t n = ap_dbox_volume(val->rank, b);
  unsigned char *data = ap_arena_alloc(g->arena, (size_t)n * es + 1);
  if (!view || !data)
    return NULL;
  *view = *val;
  for (int i = 0; i < val->rank; i++)
    view->dims[i] = b->hi[i] - b->lo[i];
  slice_copy(data, val->data, val->rank, val->dims, b, es);
  view->data = data;
  return view;
}

cg_rtbox cg_rt_box(int rank, const ap_dbox *b, const ap_dbox *within, int64_t shift) {
  cg_rtbox r;
  memset(&r, 0, sizeof r);
  int64_t dims[AP_MAX_RANK] = {0};
  r.rank = rank;
  r.offset = shift;
  for (int i = 0; i < rank; i++)
    dims[i] = within->hi[i] - within->lo[i];
  cg_strides(rank, dims, r.stride);
  for (int i = 0; i < rank; i++) {
    r.offset += (b->lo[i] - within->lo[i]) * r.stride[i];
    r.size[i] = b->hi[i] - b->lo[i];
  }
  return r;
}

void cg_put_box(FILE *f, int rank, const ap_dbox *b, const ap_dbox *within, int64_t shift) {
  cg_rtbox r = cg_rt_box(rank, b, within, shift);
  fprintf(f, "{%d, %lld, {", rank, (long long)r.offset);
  for (int i = 0; i < rank; i++)
    fprintf(f, "%s%lld", i ? ", " : "", (long long)r.size[i]);
  fprintf(f, "%s}, {", rank ? "" : "0");
  for (int i = 0; i < rank; i++)
    fprintf(f, "%s%lld", i ? ", " : "", (long long)r.stride[i]);
  fprintf(f, "%s}}", rank ? "" : "0");
}

void cg_emit_bias_add(cg_kernel *k) {
  const cg_operand *yo = &k->out[0], *bo = &k->in[0];
  int64_t ys[AP_MAX_RANK], bs[AP_MAX_RANK];
  cg_strides(yo->rank, yo->dims, ys);
  double scale = 1;
  if (k->n->op == AP_OP_GEMM) {
    cg_broadcast_strides(bo, yo->rank, bs);
    scale = ap_attr_float(k->n, "beta", 1.0f);
  } else {
    for (int i = 0; i < yo->rank; i++)
      bs[i] = i == 1;
  }
  int iv[AP_MAX_RANK];
  cg_loops(k, yo->rank, yo->dims, "i", iv);
  cg_st_op(k, cg_out(k, 0), cg_idx(k, yo->rank, ys, iv), CG_X_ADD,
           cg_mul(k, cg_lit(k, yo->dtype, scale), cg_ld(k, cg_in(k, 0), cg_idx(k, yo->rank, bs, iv))));
  cg_loops_end(k, yo->rank);
}

/* ---- the arena ------------------------------------------------------------- */

int64_t cg_align_up(int64_t x) { return (x + CG_ALIGN - 1) / CG_ALIGN * CG_ALIGN; }

int64_t cg_arena_alloc(cg_block *live, int *n_live, int64_t bytes, int id) {
  int64_t size = cg_align_up(bytes), at = 0;
  int pos = 0;
  for (; pos < *n_live; pos++) {
    if (live[pos].offset - at >= size)
      break;
    at = live[pos].offset + live[pos].bytes;
  }
  memmove(&live[pos + 1], &live[pos], (size_t)(*n_live - pos) * sizeof *live);
  live[pos] = (cg_block){at, size, id};
  (*n_live)++;
  return at;
}

void cg_arena_free(cg_block *live, int *n_live, int id) {
  for (int i = 0; i < *n_live; i++)
    if (live[i].id == id) {
      memmove(&live[i], &live[i + 1], (size_t)(*n_live - i - 1) * sizeof *live);
      (*n_live)--;
      return;
    }
}

/* ---- main.c ------------------------------------------------------------------ */

void cg_put_blob_asm(FILE *f, const char *blob_path) {
  fprintf(f, "__asm__(\".section .rodata\\n\"\n        \".balign %d\\n\"\n"
             "        \".globl ap_blob\\n\"\n        \".type ap_blob, @object\\n\"\n"
             "        \"ap_blob:\\n\"\n        \".incbin ",
          CG_ALIGN);
  /* The path inside an assembler string inside a C string. */
  fputs("\\\"", f);
  for (const char *q = blob_path; *q; q++) {
    if (*q == '"' || *q == '\\')
      fputs("\\\\\\", f);
    fputc(*q, f);
  }
  fputs("\\\"\\n\"\n        \".byte 0\\n\"\n        \".previous\\n\");\n"
        "extern const unsigned char ap_blob[];\n\n", f);
}

void cg_put_device_names(FILE *f, const void *plan, int n_dev, const char *device_kind) {
  const ap_plan *p = plan;
  fprintf(f, "static const char *const device_names[] = {");
  if (p && p->dev.n_devices == n_dev) {
    int dev = 0;
    for (int kd = 0; kd < p->dev.n_kinds; kd++)
      for (int i = 0; i < p->dev.kinds[kd].count; i++) {
        fprintf(f, "%s", dev++ ? ", " : "");
        cg_put_cstring(f, p->dev.kinds[kd].name);
      }
  } else {
    cg_put_cstring(f, device_kind ? device_kind : "cpu");
  }
  fprintf(f, "};\n\n");
}

void cg_put_spec(FILE *f, const char *name, ap_dtype dt, int rank, const int64_t *dims,
                 int64_t classes, int64_t ignore) {
  fprintf(f, "    {");
  cg_put_cstring(f, name);
  fprintf(f, ", (aprt_dtype)%d, %d, {", (int)dt, rank);
  for (int k = 0; k < rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)dims[k]);
  fprintf(f, "%s}, %lld, %lld},\n", rank ? "" : "0", (long long)classes, (long long)ignore);
}

void cg_put_run(FILE *f, int n_dev) {
  fprintf(f, "static int run(aprt_comm *c, void *arg) {\n  (void)arg;\n  switch (aprt_rank(c)) {\n");
  for (int dev = 0; dev < n_dev; dev++)
    fprintf(f, "  case %d:\n    return ap_device_%d(c);\n", dev, dev);
  fprintf(f, "  }\n  return aprt_fail(c, APRT_ERR_USAGE, \"this program has %d device%s, not %%d\", "
             "aprt_size(c));\n}\n\n",
          n_dev, n_dev > 1 ? "s" : "");
}

/* ---- helpers shared by the emitters -------------------------------------- */

ap_status cg_error(cg_kernel *k, ap_status s, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ap_error(k->d, s, k->g->path, k->n->name, k->n->op_type, "%s", msg);
}

const char *cg_ctype(ap_dtype t) {
  switch (t) {
  case AP_DT_FLOAT: return "float";
  case AP_DT_DOUBLE: return "double";
  case AP_DT_INT8: return "int8_t";
  case AP_DT_UINT8: return "uint8_t";
  case AP_DT_INT16: return "int16_t";
  case AP_DT_UINT16: return "uint16_t";
  case AP_DT_INT32: return "int32_t";
  case AP_DT_UINT32: return "uint32_t";
  case AP_DT_INT64: return "int64_t";
  case AP_DT_UINT64: return "uint64_t";
  case AP_DT_BOOL: return "uint8_t";
  default: return NULL;
  }
}

bool cg_dtype_is_unsigned(ap_dtype t) {
  return t == AP_DT_UINT8 || t == AP_DT_UINT16 || t == AP_DT_UINT32 || t == AP_DT_UINT64 ||
         t == AP_DT_BOOL;
}

const char *cg_literal(char *buf, ap_dtype t, double v) {
  if (t == AP_DT_FLOAT || t == AP_DT_DOUBLE) {
    const char *suffix = t == AP_DT_FLOAT ? "f" : "";
    if (isnan(v))
      snprintf(buf, 64, "%s", t == AP_DT_FLOAT ? "NAN" : "(double)NAN");
    else if (isinf(v))
      snprintf(buf, 64, "%s%s", v < 0 ? "-" : "", t == AP_DT_FLOAT ? "INFINITY" : "(double)INFINITY");
    else /* hexadecimal: exact, and always a floating constant */
      snprintf(buf, 64, "%a%s", t == AP_DT_FLOAT ? (double)(float)v : v, suffix);
  } else if (t == AP_DT_UINT64) {
    snprintf(buf, 64, "UINT64_C(%llu)", (unsigned long long)(v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX : (uint64_t)v));
  } else if (cg_dtype_is_unsigned(t)) {
    snprintf(buf, 64, "%lluu", (unsigned long long)(v <= 0 ? 0 : (uint64_t)v));
  } else {
    int64_t i = v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
    if (i == INT64_MIN)
      snprintf(buf, 64, "INT64_MIN");
    else
      snprintf(buf, 64, "INT64_C(%lld)", (long long)i);
  }
  return buf;
}

bool cg_const_i64(const cg_operand *o, int64_t i, int64_t *out) {
  if (!o->v || !o->v->data)
    return false;
  ap_tensor t = ap_value_tensor(o->v);
  *out = ap_tensor_get_i64(&t, i);
  return true;
}

bool cg_const_f64(const cg_operand *o, int64_t i, double *out) {
  if (!o->v || !o->v->data)
    return false;
  ap_tensor t = ap_value_tensor(o->v);
  *out = ap_tensor_get_f64(&t, i);
  return true;
}

bool cg_small_power(const cg_kernel *k, int slot, int *n) {
  double v;
  if (slot >= k->n_in || k->in[slot].numel != 1 || !cg_const_f64(&k->in[slot], 0, &v) ||
      !(v == 1 || v == 2 || v == 3 || v == 4))
    return false;
  *n = (int)v;
  return true;
}

cg_x *cg_power(cg_kernel *k, cg_x *x, int n) {
  if (n == 0)
    return cg_const(k, (cg_ty)x->ty, 1);
  cg_x *base = cg_v(k, cg_let(k, "base", x)), *p = base;
  for (int i = 1; i < n; i++)
    p = cg_mul(k, p, base);
  return p;
}

void cg_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

void cg_broadcast_strides(const cg_operand *o, int r, int64_t *strides) {
  int64_t own[AP_MAX_RANK];
  cg_strides(o->rank, o->dims, own);
  for (int i = 0; i < r; i++) {
    int j = i - (r - o->rank);
    strides[i] = j < 0 || o->dims[j] == 1 ? 0 : own[j];
  }
}

int64_t cg_opset(const cg_kernel *k) { return k->g->opset; }

int cg_norm_axis(int64_t axis, int rank) {
  if (axis < 0)
    axis += rank;
  return axis < 0 || axis >= rank ? -1 : (int)axis;
}
