/* The C backend's program structure: which values live where (run-time
 * inputs, the constant blob, the activation arena planned from last use),
 * one kernel per distinct (operator, attributes, dtypes, box sizes), the
 * device function calling them in node order, and the program description
 * the runtime's main runs. Per-operator kernels come from the c_*.c files. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/codegen.h"

static const cg_emit_fn emitters[AP_OP_COUNT] = {
#define OP(id, name, min_in, max_in, min_out, max_out, kind) [AP_OP_##id] = cg_emit_##id,
#include "ir/ops.def"
#undef OP
};

enum { ARENA_ALIGN = 64 };

/* ---- helpers shared by the emitters -------------------------------------- */

ap_status cg_error(cg_kernel *k, ap_status s, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ap_error(k->d, s, k->g->path, k->n->name, k->n->op_type, "%s", msg);
}

void cg_printf(cg_kernel *k, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(k->body, fmt, ap);
  va_end(ap);
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

void cg_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

void cg_loops_open(cg_kernel *k, int rank, const int64_t *dims, const char *var) {
  for (int i = 0; i < rank; i++)
    cg_printf(k, "for (int64_t %s%d = 0; %s%d < %lld; %s%d++) {\n", var, i, var, i,
              (long long)dims[i], var, i);
}

void cg_loops_close(cg_kernel *k, int rank) {
  for (int i = 0; i < rank; i++)
    cg_printf(k, "}\n");
}

const char *cg_index(char *buf, size_t cap, int rank, const int64_t *strides,
                     const char *var) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < rank; i++) {
    if (!strides[i])
      continue;
    int w = strides[i] == 1
                ? snprintf(buf + len, cap - len, "%s%s%d", len ? " + " : "", var, i)
                : snprintf(buf + len, cap - len, "%s%s%d * %lld", len ? " + " : "", var, i,
                           (long long)strides[i]);
    if (w < 0 || (size_t)w >= cap - len)
      ap_die("index expression longer than %zu bytes", cap);
    len += (size_t)w;
  }
  if (!len)
    snprintf(buf, cap, "0");
  return buf;
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

/* ---- a growable text buffer ---------------------------------------------- */

typedef struct text {
  char *s;
  size_t len;
  FILE *f;
} text;

static bool text_open(text *t) {
  t->s = NULL;
  t->len = 0;
  t->f = open_memstream(&t->s, &t->len);
  return t->f != NULL;
}

static bool text_close(text *t) {
  bool ok = t->f && fclose(t->f) == 0;
  t->f = NULL;
  return ok;
}

/* ---- values and storage -------------------------------------------------- */

typedef enum storage {
  ST_NONE,   /* not used by the program */
  ST_INPUT,  /* a run-time input: the runtime's copy of input_N.pb */
  ST_CONST,  /* in the constant blob (weights.bin) */
  ST_ARENA,  /* in the activation arena */
  ST_ALIAS   /* the storage of another value (Reshape, Identity...) */
} storage;

typedef struct value_info {
  storage st;
  int64_t bytes;
  int64_t offset;    /* into the blob or the arena */
  int input_index;   /* ST_INPUT: program input; also for bound constants, else -1 */
  int alias_of;      /* ST_ALIAS: the value whose storage this is */
  int last_use;      /* position in G->order of the last reader (of any alias); INT32_MAX
                        for graph outputs */
} value_info;

typedef struct call {
  int node;
  int kernel;                  /* index into kernels */
  int n_args;
  int args[2 * CG_MAX_OPERANDS]; /* value ids: passed inputs, then present outputs */
  bool work;
} call;

typedef struct kernel_text {
  char *sig;       /* parameter list */
  char *body;
  char *work;      /* its scratch floats as a C expression, or "" */
} kernel_text;

typedef struct gen {
  ap_graph *g;
  ap_diag *d;
  value_info *vals;
  call *calls;
  int n_calls;
  kernel_text *kernels;
  int n_kernels, cap_kernels;
  int64_t blob_bytes;
  int64_t arena_bytes;
  bool needs_kernels_lib;
  cg_kernel *kernel;  /* the node being emitted */
  int *order;         /* node ids in the order the device runs them */
  int n_order;
  int *prog_inputs;   /* value ids of the program's inputs */
  int n_prog_inputs;
} gen;

static int64_t align_up(int64_t x) { return (x + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

static int root_of(const gen *G, int v) {
  while (G->vals[v].st == ST_ALIAS)
    v = G->vals[v].alias_of;
  return v;
}

static ap_status value_error(gen *G, const ap_node *n, const ap_value *v, const char *what) {
  return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, n ? n->name : NULL,
                  n ? n->op_type : NULL, "value '%s': %s", v->name, what);
}

/* Shape and element type known and supported by the C backend. */
static ap_status check_value(gen *G, const ap_node *n, const ap_value *v) {
  if (v->non_tensor)
    return value_error(G, n, v, "non-tensor values are not supported by the C backend");
  if (!ap_value_shape_known(v))
    return value_error(G, n, v,
                       "shape not known at compile time (bind it with --batch or --inputs)");
  if (!cg_ctype(v->dtype))
    return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, n ? n->name : NULL,
                    n ? n->op_type : NULL, "value '%s': element type %s is not supported by the C backend",
                    v->name, ap_dtype_name(v->dtype));
  if (ap_numel(v->rank, v->dims) < 0)
    return value_error(G, n, v, "too many elements");
  return AP_OK;
}

static int64_t value_bytes(const ap_value *v) {
  return ap_numel(v->rank, v->dims) * (int64_t)ap_dtype_size(v->dtype);
}

static void operand_of(const ap_value *v, cg_operand *o) {
  memset(o, 0, sizeof *o);
  if (!v)
    return;
  o->v = v;
  o->dtype = v->dtype;
  o->rank = v->rank;
  for (int i = 0; i < v->rank; i++)
    o->dims[i] = v->dims[i];
  o->numel = ap_numel(v->rank, v->dims);
  /* One device holds every tensor whole. */
  o->box.rank = v->rank;
  for (int i = 0; i < v->rank; i++)
    o->box.size[i] = v->dims[i];
}

/* Program inputs: graph inputs that are not initializers, in graph order. */
static ap_status plan_inputs(gen *G) {
  ap_graph *g = G->g;
  G->prog_inputs = ap_arena_array(g->arena, (size_t)g->n_inputs + 1, sizeof *G->prog_inputs);
  if (!G->prog_inputs)
    return ap_error(G->d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    ap_value *val = &g->values[v];
    if (val->kind == AP_VAL_WEIGHT)
      continue;
    ap_status s = check_value(G, NULL, val);
    if (s != AP_OK)
      return s;
    G->vals[v].input_index = G->n_prog_inputs;
    G->prog_inputs[G->n_prog_inputs++] = v;
    if (!val->data)
      G->vals[v].st = ST_INPUT;
  }
  return AP_OK;
}

/* Every constant the program reads goes into the blob, 64-byte aligned. */
static void place_constant(gen *G, int v) {
  value_info *vi = &G->vals[v];
  if (vi->st == ST_CONST)
    return;
  vi->st = ST_CONST;
  vi->bytes = value_bytes(&G->g->values[v]);
  vi->offset = G->blob_bytes;
  G->blob_bytes = align_up(G->blob_bytes + vi->bytes);
}

/* ---- emitting one node --------------------------------------------------- */

static int find_kernel(gen *G, const char *sig, const char *body) {
  for (int i = 0; i < G->n_kernels; i++)
    if (strcmp(G->kernels[i].sig, sig) == 0 && strcmp(G->kernels[i].body, body) == 0)
      return i;
  return -1;
}

static ap_status oom(gen *G) {
  return ap_error(G->d, AP_ERR_NOMEM, G->g->path, NULL, NULL, "out of memory");
}

static ap_status emit_node(gen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  bool all_const = true;
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && !g->values[n->out[i]].data)
      all_const = false;
  if (all_const)
    return AP_OK; /* folded: its outputs are constants in the blob */
  if (n->n_in > CG_MAX_OPERANDS || n->n_out > CG_MAX_OPERANDS)
    return ap_error(G->d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                    "more than %d inputs or outputs", CG_MAX_OPERANDS);
  cg_kernel *k = G->kernel; /* one per compilation: it is large */
  memset(k, 0, sizeof *k);
  k->g = g;
  k->n = n;
  k->d = G->d;
  k->n_in = n->n_in;
  k->n_out = n->n_out;
  k->alias_in = -1;
  for (int i = 0; i < n->n_in; i++) {
    const ap_value *v = ap_node_in(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
    operand_of(v, &k->in[i]);
  }
  for (int i = 0; i < n->n_out; i++) {
    const ap_value *v = ap_node_out(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
    operand_of(v, &k->out[i]);
  }
  text body;
  if (!text_open(&body))
    return oom(G);
  k->body = body.f;
  ap_status s = emitters[n->op](k);
  bool ok = text_close(&body);
  if (s != AP_OK || !ok) {
    free(body.s);
    return s != AP_OK ? s : oom(G);
  }
  if (k->alias_in >= 0) {
    free(body.s);
    int out = n->out[0], src = n->in[k->alias_in];
    G->vals[out].st = ST_ALIAS;
    G->vals[out].alias_of = src;
    if (G->vals[src].st == ST_NONE && g->values[src].data)
      place_constant(G, src);
    return AP_OK;
  }

  /* The signature: passed inputs, present outputs, the workspace. */
  text sig;
  if (!text_open(&sig)) {
    free(body.s);
    return oom(G);
  }
  call c = {.node = ni, .work = k->work_expr[0] != 0};
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0 || (k->skip_in >> i & 1))
      continue;
    fprintf(sig.f, "%sconst %s *restrict x%d", c.n_args ? ", " : "", cg_ctype(k->in[i].dtype), i);
    c.args[c.n_args++] = n->in[i];
    if (G->vals[n->in[i]].st == ST_NONE && g->values[n->in[i]].data)
      place_constant(G, n->in[i]);
  }
  for (int i = 0; i < n->n_out; i++) {
    if (n->out[i] < 0)
      continue;
    fprintf(sig.f, "%s%s *restrict y%d", c.n_args ? ", " : "", cg_ctype(k->out[i].dtype), i);
    c.args[c.n_args++] = n->out[i];
    G->vals[n->out[i]].st = ST_ARENA;
    G->vals[n->out[i]].bytes = value_bytes(&g->values[n->out[i]]);
  }
  if (c.work)
    fprintf(sig.f, "%sfloat *restrict work", c.n_args ? ", " : "");
  else if (!c.n_args)
    fprintf(sig.f, "void");
  if (!text_close(&sig)) {
    free(body.s);
    free(sig.s);
    return oom(G);
  }
  G->needs_kernels_lib |= k->needs_kernels_lib;
  int ki = find_kernel(G, sig.s, body.s);
  if (ki >= 0) {
    free(sig.s);
    free(body.s);
  } else {
    char *work = ap_arena_strdup(g->arena, k->work_expr);
    if (!work || !ap_arena_grow(g->arena, (void **)&G->kernels, &G->cap_kernels,
                                G->n_kernels + 1, sizeof *G->kernels)) {
      free(sig.s);
      free(body.s);
      return oom(G);
    }
    ki = G->n_kernels++;
    G->kernels[ki] = (kernel_text){sig.s, body.s, work};
  }
  c.kernel = ki;
  G->calls[G->n_calls++] = c;
  return AP_OK;
}

/* ---- the arena, planned from last use ------------------------------------ */

typedef struct block {
  int64_t offset, bytes;
  int value;
} block;

/* First fit among the gaps between live blocks (kept sorted by offset). */
static int64_t arena_alloc(block *live, int *n_live, int64_t bytes, int value) {
  int64_t size = align_up(bytes), at = 0;
  int pos = 0;
  for (; pos < *n_live; pos++) {
    if (live[pos].offset - at >= size)
      break;
    at = live[pos].offset + live[pos].bytes;
  }
  memmove(&live[pos + 1], &live[pos], (size_t)(*n_live - pos) * sizeof *live);
  live[pos] = (block){at, size, value};
  (*n_live)++;
  return at;
}

static void arena_free(block *live, int *n_live, int value) {
  for (int i = 0; i < *n_live; i++)
    if (live[i].value == value) {
      memmove(&live[i], &live[i + 1], (size_t)(*n_live - i - 1) * sizeof *live);
      (*n_live)--;
      return;
    }
}

static ap_status plan_arena(gen *G) {
  ap_graph *g = G->g;
  for (int v = 0; v < g->n_values; v++)
    G->vals[v].last_use = -1;
  for (int pos = 0; pos < G->n_order; pos++) {
    const ap_node *n = &g->nodes[G->order[pos]];
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] >= 0) {
        int r = root_of(G, n->in[i]);
        if (G->vals[r].last_use < pos)
          G->vals[r].last_use = pos;
      }
    for (int i = 0; i < n->n_out; i++)
      if (n->out[i] >= 0) {
        int r = root_of(G, n->out[i]);
        if (G->vals[r].last_use < pos)
          G->vals[r].last_use = pos;
      }
  }
  for (int i = 0; i < g->n_outputs; i++)
    G->vals[root_of(G, g->outputs[i])].last_use = INT32_MAX;
  block *live = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *live);
  if (!live)
    return oom(G);
  int n_live = 0;
  for (int pos = 0; pos < G->n_order; pos++) {
    const ap_node *n = &g->nodes[G->order[pos]];
    /* Outputs first, so no output shares memory with an input of its node. */
    for (int i = 0; i < n->n_out; i++) {
      int v = n->out[i];
      if (v >= 0 && G->vals[v].st == ST_ARENA && G->vals[v].bytes > 0) {
        G->vals[v].offset = arena_alloc(live, &n_live, G->vals[v].bytes, v);
        int64_t end = G->vals[v].offset + align_up(G->vals[v].bytes);
        if (end > G->arena_bytes)
          G->arena_bytes = end;
      }
    }
    for (int i = 0; i < n_live; i++)
      if (G->vals[live[i].value].last_use <= pos)
        arena_free(live, &n_live, live[i--].value);
  }
  return AP_OK;
}

/* ---- the order of the nodes ---------------------------------------------- */

/* A node that reads no run-time value (the ConstantOfShape weights of the
 * light models, above the folder's size limit) runs just before its first
 * reader, rather than where the file lists it, so its output is not live
 * from the start of the program. Everything else keeps the topological order
 * of the graph. */
static void place(gen *G, const bool *source, bool *placed, int ni) {
  const ap_node *n = &G->g->nodes[ni];
  placed[ni] = true;
  for (int i = 0; i < n->n_in; i++) {
    int p = n->in[i] >= 0 ? G->g->values[n->in[i]].producer : -1;
    if (p >= 0 && source[p] && !placed[p])
      place(G, source, placed, p);
  }
  G->order[G->n_order++] = ni;
}

static ap_status schedule(gen *G) {
  ap_graph *g = G->g;
  bool *source = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *source);
  bool *placed = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *placed);
  G->order = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *G->order);
  if (!source || !placed || !G->order)
    return oom(G);
  ap_graph_link(g);
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    source[ni] = !n->dead;
    for (int i = 0; i < n->n_in && source[ni]; i++) {
      const ap_value *v = ap_node_in(g, n, i);
      source[ni] = !v || v->data || (v->producer >= 0 && source[v->producer]);
    }
  }
  for (int ni = 0; ni < g->n_nodes; ni++)
    if (!g->nodes[ni].dead && !source[ni] && !placed[ni])
      place(G, source, placed, ni);
  for (int ni = 0; ni < g->n_nodes; ni++) /* sources only graph outputs read */
    if (source[ni] && !placed[ni])
      place(G, source, placed, ni);
  return AP_OK;
}

/* ---- writing the files --------------------------------------------------- */

/* Writes the whole of data to OUTDIR/name through a temporary file. */
static ap_status write_file(gen *G, const char *outdir, const char *name, const void *data,
                            size_t size) {
  char *path = ap_arena_printf(G->g->arena, "%s/%s", outdir, name);
  char *tmp = ap_arena_printf(G->g->arena, "%s/.%s.tmp", outdir, name);
  if (!path || !tmp)
    return oom(G);
  FILE *f = fopen(tmp, "wb");
  if (!f)
    return ap_error(G->d, AP_ERR_IO, path, NULL, NULL, "cannot write: %s", strerror(errno));
  bool ok = fwrite(data, 1, size, f) == size;
  ok &= fclose(f) == 0;
  if (!ok || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return ap_error(G->d, AP_ERR_IO, path, NULL, NULL, "cannot write: %s", strerror(e));
  }
  return AP_OK;
}

static ap_status write_text(gen *G, const char *outdir, const char *name, text *t) {
  if (!text_close(t)) {
    free(t->s);
    return oom(G);
  }
  ap_status s = write_file(G, outdir, name, t->s, t->len);
  free(t->s);
  return s;
}

/* A C string literal of s. */
static void put_cstring(FILE *f, const char *s) {
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

/* A comment-safe rendering of a name (no "*" "/" pairs). */
static void put_comment_name(FILE *f, const char *s) {
  for (; *s; s++)
    fputc((*s == '*' || (unsigned char)*s < 32) ? '_' : *s, f);
}

static const char kernels_prelude[] =
    "/* Generated by accparc: the kernels of this program, each emitted once. */\n"
    "#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n#include \"kernels.h\"\n\n"
    "/* Max and Min as numpy's maximum and minimum: a NaN operand wins. */\n"
    "#define AP_MINMAX(T) \\\n"
    "  static inline T ap_max_##T(T p, T q) { return (p != p || p > q) ? p : q; } \\\n"
    "  static inline T ap_min_##T(T p, T q) { return (p != p || p < q) ? p : q; }\n"
    "AP_MINMAX(float)\nAP_MINMAX(double)\nAP_MINMAX(int8_t)\nAP_MINMAX(uint8_t)\n"
    "AP_MINMAX(int16_t)\nAP_MINMAX(uint16_t)\nAP_MINMAX(int32_t)\nAP_MINMAX(uint32_t)\n"
    "AP_MINMAX(int64_t)\nAP_MINMAX(uint64_t)\n";

static ap_status write_kernels(gen *G, const char *outdir) {
  text h, c;
  if (!text_open(&h))
    return oom(G);
  if (!text_open(&c)) {
    text_close(&h);
    free(h.s);
    return oom(G);
  }
  fprintf(h.f, "/* Generated by accparc: kernel prototypes. */\n#ifndef ACCPAR_GEN_KERNELS_H\n"
               "#define ACCPAR_GEN_KERNELS_H\n#include <stddef.h>\n#include <stdint.h>\n\n"
               "/* Floats of scratch the largest kernel needs. */\nsize_t cgk_work_floats(void);\n");
  fputs(kernels_prelude, c.f);
  if (G->needs_kernels_lib)
    fprintf(c.f, "\n/* The project's GEMM and convolution, static in this unit so the\n"
                 " * compiler specialises them for the constant shapes of the calls. */\n"
                 "#define APK_STATIC\n#include \"gemm.c\"\n#include \"conv.c\"\n");
  for (int i = 0; i < G->n_kernels; i++) {
    fprintf(h.f, "void cgk_%d(%s);\n", i, G->kernels[i].sig);
    fprintf(c.f, "\nvoid cgk_%d(%s) {\n%s}\n", i, G->kernels[i].sig, G->kernels[i].body);
  }
  fprintf(c.f, "\nsize_t cgk_work_floats(void) {\n  size_t most = 0, need;\n  (void)need;\n");
  for (int i = 0; i < G->n_kernels; i++)
    if (G->kernels[i].work[0])
      fprintf(c.f, "  need = %s;\n  if (need > most)\n    most = need;\n", G->kernels[i].work);
  fprintf(c.f, "  return most;\n}\n");
  fprintf(h.f, "\n#endif\n");
  ap_status s = write_text(G, outdir, "kernels.h", &h);
  if (s != AP_OK) {
    text_close(&c);
    free(c.s);
    return s;
  }
  return write_text(G, outdir, "kernels.c", &c);
}

/* The expression for value v's storage, as a pointer of its element type. */
static void put_value_ptr(gen *G, FILE *f, int v) {
  int r = root_of(G, v);
  const ap_value *val = &G->g->values[v];
  const char *ct = cg_ctype(val->dtype);
  const value_info *vi = &G->vals[r];
  switch (vi->st) {
  case ST_INPUT:
    fprintf(f, "((%s *)in%d)", ct, vi->input_index);
    break;
  case ST_CONST:
    fprintf(f, "((%s *)(ap_blob + %lld))", ct, (long long)vi->offset);
    break;
  case ST_ARENA:
    fprintf(f, "((%s *)(arena + %lld))", ct, (long long)vi->offset);
    break;
  default:
    ap_die("value '%s' has no storage", val->name);
  }
}

static ap_status write_device(gen *G, const char *outdir) {
  ap_graph *g = G->g;
  text t;
  if (!text_open(&t))
    return oom(G);
  FILE *f = t.f;
  int64_t unshared = 0; /* the arena without reuse, for the comment (and the tests) */
  for (int v = 0; v < g->n_values; v++)
    if (G->vals[v].st == ST_ARENA)
      unshared += align_up(G->vals[v].bytes);
  fprintf(f, "/* Generated by accparc: the program of device 0 (the whole graph).\n"
             " * Activations live in one arena of %lld bytes planned from last use\n"
             " * (%lld bytes without reuse); constants in the blob of weights.bin. */\n"
             "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
             "#include \"accpar_rt.h\"\n#include \"kernels.h\"\n\n"
             "extern const unsigned char ap_blob[];\n"
             "int ap_device_0(aprt_comm *c);\n\n",
          (long long)G->arena_bytes, (long long)unshared);
  fprintf(f, "int ap_device_0(aprt_comm *c) {\n");
  /* Heap rather than static: under the threads transport every device is a
   * thread of one process and needs memory of its own. */
  fprintf(f, "  unsigned char *arena = aligned_alloc(%d, %lld);\n", ARENA_ALIGN,
          (long long)(G->arena_bytes ? G->arena_bytes : ARENA_ALIGN));
  fprintf(f, "  float *work = aligned_alloc(%d, (cgk_work_floats() * 4 + %d) / %d * %d);\n",
          ARENA_ALIGN, 2 * ARENA_ALIGN - 1, ARENA_ALIGN, ARENA_ALIGN);
  fprintf(f, "  if (!arena || !work) {\n    free(arena);\n    free(work);\n"
             "    return aprt_fail(c, APRT_ERR_NOMEM, \"device 0: out of memory (%lld bytes)\");\n  }\n",
          (long long)G->arena_bytes);
  fprintf(f, "  (void)work;\n");
  for (int i = 0; i < G->n_prog_inputs; i++) {
    int v = G->prog_inputs[i];
    fprintf(f, "  const void *in%d = aprt_input(c, %d)->data; /* '", i, i);
    put_comment_name(f, g->values[v].name);
    fprintf(f, "' */\n  (void)in%d;\n", i);
    if (G->vals[v].st == ST_CONST) {
      /* Bound at compile time (it fixed shapes): the run must feed the same. */
      fprintf(f, "  if (%lld && memcmp(in%d, ap_blob + %lld, %lld) != 0) {\n"
                 "    free(arena);\n    free(work);\n"
                 "    return aprt_fail(c, APRT_ERR_MISMATCH, \"input %d (",
              (long long)G->vals[v].bytes, i, (long long)G->vals[v].offset,
              (long long)G->vals[v].bytes, i);
      put_comment_name(f, g->values[v].name);
      fprintf(f, ") differs from the tensor bound when the program was compiled\");\n  }\n");
    }
  }
  fprintf(f, "  aprt_phase_begin(c, APRT_PHASE_FORWARD);\n");
  for (int ci = 0; ci < G->n_calls; ci++) {
    const call *cl = &G->calls[ci];
    const ap_node *n = &g->nodes[cl->node];
    fprintf(f, "  /* %s '", n->op_type);
    put_comment_name(f, n->name);
    fprintf(f, "' */\n  cgk_%d(", cl->kernel);
    for (int a = 0; a < cl->n_args; a++) {
      if (a)
        fprintf(f, ", ");
      put_value_ptr(G, f, cl->args[a]);
    }
    if (cl->work)
      fprintf(f, "%swork", cl->n_args ? ", " : "");
    fprintf(f, ");\n");
  }
  fprintf(f, "  aprt_phase_end(c);\n  aprt_status s = APRT_OK;\n");
  for (int i = 0; i < g->n_outputs; i++) {
    const ap_value *v = &g->values[g->outputs[i]];
    fprintf(f, "  {\n    static const int64_t shape[] = {");
    for (int k = 0; k < v->rank; k++)
      fprintf(f, "%s%lld", k ? ", " : "", (long long)v->dims[k]);
    fprintf(f, "%s}, start[%d] = {0};\n", v->rank ? "" : "0", v->rank ? v->rank : 1);
    fprintf(f, "    aprt_box box = aprt_box_dense(%d, shape, start, shape);\n", v->rank);
    fprintf(f, "    if (!s)\n      s = aprt_output_box(c, %d, &box, ", i);
    put_value_ptr(G, f, g->outputs[i]);
    fprintf(f, ");\n  }\n");
  }
  fprintf(f, "  free(arena);\n  free(work);\n  return s;\n}\n");
  return write_text(G, outdir, "dev0.c", &t);
}

static void put_spec(FILE *f, const ap_value *v) {
  fprintf(f, "    {");
  put_cstring(f, v->name);
  fprintf(f, ", (aprt_dtype)%d, %d, {", (int)v->dtype, v->rank);
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)v->dims[k]);
  fprintf(f, "%s}, 0},\n", v->rank ? "" : "0");
}

static ap_status write_main(gen *G, const ap_codegen_opts *o, const char *blob_path) {
  ap_graph *g = G->g;
  text t;
  if (!text_open(&t))
    return oom(G);
  FILE *f = t.f;
  fprintf(f, "/* Generated by accparc: the program's description and main. */\n"
             "#include <stdint.h>\n\n#include \"accpar_rt.h\"\n\n"
             "int ap_device_0(aprt_comm *c);\n\n");
  /* The constants are assembled into the executable as they are, which keeps
   * large models out of the C compiler's parser. */
  fprintf(f, "__asm__(\".section .rodata\\n\"\n        \".balign %d\\n\"\n"
             "        \".globl ap_blob\\n\"\n        \".type ap_blob, @object\\n\"\n"
             "        \"ap_blob:\\n\"\n        \".incbin ",
          ARENA_ALIGN);
  /* The path inside an assembler string inside a C string. */
  fputs("\\\"", f);
  for (const char *p = blob_path; *p; p++) {
    if (*p == '"' || *p == '\\')
      fputs("\\\\\\", f);
    fputc(*p, f);
  }
  fputs("\\\"\\n\"\n        \".byte 0\\n\"\n        \".previous\\n\");\n\n", f);
  fprintf(f, "static const char *const device_names[] = {");
  put_cstring(f, o->device_kind ? o->device_kind : "cpu");
  fprintf(f, "};\n\n");
  if (G->n_prog_inputs) {
    fprintf(f, "static const aprt_tensor_spec inputs[] = {\n");
    for (int i = 0; i < G->n_prog_inputs; i++)
      put_spec(f, &g->values[G->prog_inputs[i]]);
    fprintf(f, "};\n\n");
  }
  if (g->n_outputs) {
    fprintf(f, "static const aprt_tensor_spec outputs[] = {\n");
    for (int i = 0; i < g->n_outputs; i++)
      put_spec(f, &g->values[g->outputs[i]]);
    fprintf(f, "};\n\n");
  }
  fprintf(f, "static int run(aprt_comm *c, void *arg) {\n  (void)arg;\n"
             "  if (aprt_rank(c) == 0)\n    return ap_device_0(c);\n"
             "  return aprt_fail(c, APRT_ERR_USAGE, \"this program has 1 device, not %%d\", aprt_size(c));\n}\n\n");
  fprintf(f, "static const aprt_program program = {\n  .name = ");
  put_cstring(f, o->model_name ? o->model_name : "model");
  fprintf(f, ",\n  .ndev = 1,\n  .device_names = device_names,\n  .train = 0,\n"
             "  .n_inputs = %d,\n  .inputs = %s,\n  .n_outputs = %d,\n  .outputs = %s,\n"
             "  .run = run,\n};\n\n",
          G->n_prog_inputs, G->n_prog_inputs ? "inputs" : "0", g->n_outputs,
          g->n_outputs ? "outputs" : "0");
  fprintf(f, "int main(int argc, char **argv) { return aprt_main(argc, argv, &program); }\n");
  return write_text(G, o->outdir, "main.c", &t);
}

static ap_status write_blob(gen *G, const char *outdir) {
  ap_graph *g = G->g;
  unsigned char *blob = ap_arena_alloc(g->arena, (size_t)G->blob_bytes + 1);
  if (!blob)
    return oom(G);
  for (int v = 0; v < g->n_values; v++)
    if (G->vals[v].st == ST_CONST && G->vals[v].bytes)
      memcpy(blob + G->vals[v].offset, g->values[v].data, (size_t)G->vals[v].bytes);
  return write_file(G, outdir, "weights.bin", blob, (size_t)G->blob_bytes);
}

static ap_status make_dir(gen *G, const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      return ap_error(G->d, AP_ERR_IO, dir, NULL, NULL, "exists and is not a directory");
    return AP_OK;
  }
  if (mkdir(dir, 0777) != 0)
    return ap_error(G->d, AP_ERR_IO, dir, NULL, NULL, "cannot create: %s", strerror(errno));
  return AP_OK;
}

ap_status ap_codegen_c(ap_graph *g, const ap_codegen_opts *o, ap_diag *d) {
  gen G = {.g = g, .d = d};
  if (o->train)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                    "the C backend generates inference programs only so far (--mode infer)");
  G.vals = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *G.vals);
  G.calls = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *G.calls);
  G.kernel = ap_arena_alloc(g->arena, sizeof *G.kernel);
  if (!G.vals || !G.calls || !G.kernel)
    return oom(&G);
  for (int v = 0; v < g->n_values; v++) {
    G.vals[v].input_index = -1;
    G.vals[v].alias_of = -1;
  }
  ap_status s = plan_inputs(&G);
  if (s == AP_OK)
    s = schedule(&G);
  for (int pos = 0; s == AP_OK && pos < G.n_order; pos++)
    s = emit_node(&G, G.order[pos]);
  for (int i = 0; s == AP_OK && i < g->n_outputs; i++) {
    int v = g->outputs[i];
    if ((s = check_value(&G, NULL, &g->values[v])) == AP_OK && G.vals[v].st == ST_NONE &&
        g->values[v].data)
      place_constant(&G, v);
  }
  /* Bound inputs are compared against their constants at run time. */
  for (int i = 0; s == AP_OK && i < G.n_prog_inputs; i++)
    if (g->values[G.prog_inputs[i]].data)
      place_constant(&G, G.prog_inputs[i]);
  for (int i = 0; s == AP_OK && i < g->n_outputs; i++)
    if (G.vals[root_of(&G, g->outputs[i])].st == ST_NONE)
      s = ap_error(d, AP_ERR_INVALID, g->path, NULL, NULL,
                   "graph output '%s' is computed by no node", g->values[g->outputs[i]].name);
  if (s == AP_OK)
    s = plan_arena(&G);
  if (s == AP_OK)
    s = make_dir(&G, o->outdir);
  if (s == AP_OK) {
    /* A compile that fails from here on must not leave an older program
     * looking like its result. */
    char *model = ap_arena_printf(g->arena, "%s/model", o->outdir);
    if (!model)
      s = oom(&G);
    else if (unlink(model) != 0 && errno != ENOENT)
      s = ap_error(d, AP_ERR_IO, model, NULL, NULL, "cannot remove: %s", strerror(errno));
  }
  char *blob_path = NULL;
  if (s == AP_OK) {
    char *abs = realpath(o->outdir, NULL);
    if (!abs)
      s = ap_error(d, AP_ERR_IO, o->outdir, NULL, NULL, "cannot resolve: %s", strerror(errno));
    else if (!(blob_path = ap_arena_printf(g->arena, "%s/weights.bin", abs)))
      s = oom(&G);
    free(abs);
  }
  if (s == AP_OK)
    s = write_blob(&G, o->outdir);
  if (s == AP_OK)
    s = write_kernels(&G, o->outdir);
  if (s == AP_OK)
    s = write_device(&G, o->outdir);
  if (s == AP_OK)
    s = write_main(&G, o, blob_path);
  for (int i = 0; i < G.n_kernels; i++) {
    free(G.kernels[i].sig);
    free(G.kernels[i].body);
  }
  return s;
}
