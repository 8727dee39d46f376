/* What the inference (emit_c.c) and training (train.c) program emitters
 * share: text buffers, writing the output folder's files through a
 * temporary and a rename, C literals and comments, the deduplicated kernel
 * table and kernels.h / kernels.c, first-fit arena planning, and the parts
 * of main.c that do not depend on the kind of program. */
#define _XOPEN_SOURCE 700 /* open_memstream, realpath */
#include <errno.h>
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

void cg_put_box(FILE *f, int rank, const ap_dbox *b, const ap_dbox *within, int64_t shift) {
  int64_t st[AP_MAX_RANK], dims[AP_MAX_RANK] = {0}, off = shift;
  for (int i = 0; i < rank; i++)
    dims[i] = within->hi[i] - within->lo[i];
  cg_strides(rank, dims, st);
  for (int i = 0; i < rank; i++)
    off += (b->lo[i] - within->lo[i]) * st[i];
  fprintf(f, "{%d, %lld, {", rank, (long long)off);
  for (int i = 0; i < rank; i++)
    fprintf(f, "%s%lld", i ? ", " : "", (long long)(b->hi[i] - b->lo[i]));
  fprintf(f, "%s}, {", rank ? "" : "0");
  for (int i = 0; i < rank; i++)
    fprintf(f, "%s%lld", i ? ", " : "", (long long)st[i]);
  fprintf(f, "%s}}", rank ? "" : "0");
}

void cg_emit_bias_add(cg_kernel *k, FILE *sig) {
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
  char lit[64], yi[512], bi[512];
  cg_literal(lit, yo->dtype, scale);
  cg_loops_open(k, yo->rank, yo->dims, "i");
  cg_printf(k, "y0[%s] += %s * x0[%s];\n", cg_index(yi, sizeof yi, yo->rank, ys, "i"), lit,
            cg_index(bi, sizeof bi, yo->rank, bs, "i"));
  cg_loops_close(k, yo->rank);
  fprintf(sig, "const %s *restrict x0, %s *restrict y0", cg_ctype(yo->dtype), cg_ctype(yo->dtype));
}

int cg_bias_kernel(ap_graph *g, ap_diag *d, cg_kernel_set *ks, cg_kernel *k, const ap_node *n,
                   const ap_value *y, const ap_dbox *ybox, const ap_value *b,
                   const ap_dbox *bbox) {
  memset(k, 0, sizeof *k);
  k->g = g;
  k->n = n;
  k->d = d;
  cg_operand_of(y, ybox, &k->out[0]);
  cg_operand_of(b, bbox, &k->in[0]);
  cg_text body, sig;
  if (!cg_text_open(&body))
    return -1;
  if (!cg_text_open(&sig)) {
    cg_text_close(&body);
    free(body.s);
    return -1;
  }
  k->body = body.f;
  cg_emit_bias_add(k, sig.f);
  bool ok = cg_text_close(&body);
  ok &= cg_text_close(&sig);
  if (!ok) {
    free(body.s);
    free(sig.s);
    return -1;
  }
  return cg_add_kernel(g, ks, sig.s, body.s, "");
}

/* ---- kernels ----------------------------------------------------------------- */

static int find_kernel(const cg_kernel_set *ks, const char *sig, const char *body) {
  for (int i = 0; i < ks->n; i++)
    if (strcmp(ks->k[i].sig, sig) == 0 && strcmp(ks->k[i].body, body) == 0)
      return i;
  return -1;
}

int cg_add_kernel(ap_graph *g, cg_kernel_set *ks, char *sig, char *body, const char *work) {
  int ki = find_kernel(ks, sig, body);
  if (ki >= 0) {
    free(sig);
    free(body);
    return ki;
  }
  char *w = ap_arena_strdup(g->arena, work ? work : "");
  if (!w || !ap_arena_grow(g->arena, (void **)&ks->k, &ks->cap, ks->n + 1, sizeof *ks->k)) {
    free(sig);
    free(body);
    return -1;
  }
  ks->k[ks->n] = (cg_kernel_text){sig, body, w};
  return ks->n++;
}

void cg_kernel_set_free(cg_kernel_set *ks) {
  for (int i = 0; i < ks->n; i++) {
    free(ks->k[i].sig);
    free(ks->k[i].body);
  }
}

static const char kernels_minmax[] =
    "#define AP_MINMAX(T) \\\n"
    "  static inline T ap_max_##T(T p, T q) { return (p != p || p > q) ? p : q; } \\\n"
    "  static inline T ap_min_##T(T p, T q) { return (p != p || p < q) ? p : q; }\n"
    "AP_MINMAX(float)\nAP_MINMAX(double)\nAP_MINMAX(int8_t)\nAP_MINMAX(uint8_t)\n"
    "AP_MINMAX(int16_t)\nAP_MINMAX(uint16_t)\nAP_MINMAX(int32_t)\nAP_MINMAX(uint32_t)\n"
    "AP_MINMAX(int64_t)\nAP_MINMAX(uint64_t)\n";

ap_status cg_write_kernels(ap_graph *g, ap_diag *d, const char *outdir, const cg_kernel_set *ks,
                           bool needs_kernels_lib, bool training) {
  cg_text h, c;
  if (!cg_text_open(&h))
    return cg_oom(g, d);
  if (!cg_text_open(&c)) {
    cg_text_close(&h);
    free(h.s);
    return cg_oom(g, d);
  }
  fprintf(h.f, "/* Generated by accparc: kernel prototypes. */\n#ifndef ACCPAR_GEN_KERNELS_H\n"
               "#define ACCPAR_GEN_KERNELS_H\n#include <stddef.h>\n#include <stdint.h>\n\n"
               "/* Floats of scratch the largest kernel needs. */\nsize_t cgk_work_floats(void);\n");
  fprintf(c.f, "/* Generated by accparc: the kernels of this %s, each emitted once. */\n"
               "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n"
               "#include \"kernels.h\"\n\n%s%s",
          training ? "training program" : "program",
          training ? "" : "/* Max and Min as numpy's maximum and minimum: a NaN operand wins. */\n",
          kernels_minmax);
  if (needs_kernels_lib)
    fprintf(c.f, "\n/* The project's GEMM and convolution, static in this unit so the\n"
                 " * compiler specialises them for the constant shapes of the calls. */\n"
                 "#define APK_STATIC\n#include \"gemm.c\"\n#include \"conv.c\"\n");
  for (int i = 0; i < ks->n; i++) {
    fprintf(h.f, "void cgk_%d(%s);\n", i, ks->k[i].sig);
    fprintf(c.f, "\nvoid cgk_%d(%s) {\n%s}\n", i, ks->k[i].sig, ks->k[i].body);
  }
  fprintf(c.f, "\nsize_t cgk_work_floats(void) {\n  size_t most = 0, need;\n  (void)need;\n");
  for (int i = 0; i < ks->n; i++)
    if (ks->k[i].work[0])
      fprintf(c.f, "  need = %s;\n  if (need > most)\n    most = need;\n", ks->k[i].work);
  fprintf(c.f, "  return most;\n}\n");
  fprintf(h.f, "\n#endif\n");
  ap_status s = cg_write_text(g, d, outdir, "kernels.h", &h);
  if (s != AP_OK) {
    cg_text_close(&c);
    free(c.s);
    return s;
  }
  return cg_write_text(g, d, outdir, "kernels.c", &c);
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
