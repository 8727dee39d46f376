/* Binding graph inputs before the passes run: a batch size for the batch
 * dimension, or concrete tensors (ONNX test data) turned into constants. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/frontend.h"
#include "ir/ir.h"

/* The batch dimension is dim 0 of the first graph input that is fed at run
 * time. If that dim is symbolic, every input dim with the same symbol is the
 * batch too (a model whose inputs share "N" keeps them consistent); if it is
 * fixed, only that dim changes, and the constants the exporter wrote that
 * batch into are rewritten (rebatch.c). */
ap_status ap_bind_batch(ap_graph *g, int64_t batch, ap_diag *d) {
  if (batch <= 0)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                    "--batch must be a positive integer, got %lld", (long long)batch);
  ap_value *first = NULL;
  for (int i = 0; i < g->n_inputs && !first; i++) {
    ap_value *v = &g->values[g->inputs[i]];
    if (v->kind == AP_VAL_INPUT && v->rank >= 1)
      first = v;
  }
  if (!first)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                    "--batch: the model has no graph input with a batch dimension");
  const char *sym = first->sym[0];
  if (sym) {
    for (int i = 0; i < g->n_inputs; i++) {
      ap_value *v = &g->values[g->inputs[i]];
      for (int k = 0; v->kind == AP_VAL_INPUT && k < v->rank; k++)
        if (v->sym[k] && strcmp(v->sym[k], sym) == 0) {
          v->dims[k] = batch;
          v->sym[k] = NULL;
        }
    }
  }
  /* A batch fixed at export: the constants carrying it follow. */
  if (!sym && first->dims[0] > 0 && first->dims[0] != batch) {
    ap_status s = ap_rebatch(g, (int)(first - g->values), batch, d);
    if (s != AP_OK)
      return s;
  }
  first->dims[0] = batch;
  first->sym[0] = NULL;
  return AP_OK;
}

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static ap_status check_bound_shape(ap_graph *g, const char *file, const ap_value *v,
                                   const ap_tensor *t, ap_diag *d) {
  if (v->dtype != AP_DT_UNDEFINED && v->dtype != t->dtype)
    return ap_error(d, AP_ERR_INVALID, file, NULL, NULL,
                    "input '%s' is declared %s but the file holds %s", v->name,
                    ap_dtype_name(v->dtype), ap_dtype_name(t->dtype));
  if (v->rank < 0)
    return AP_OK;
  bool same = v->rank == t->rank;
  for (int k = 0; same && k < v->rank; k++)
    same = v->dims[k] < 0 || v->dims[k] == t->dims[k];
  if (!same)
    return ap_error(d, AP_ERR_INVALID, file, NULL, NULL,
                    "input '%s': the file's shape does not match the declared shape", v->name);
  return AP_OK;
}

/* Sets dim k of fed input v to size, and every input dim sharing its
 * symbol. */
static void bind_input_dim(ap_graph *g, ap_value *v, int k, int64_t size) {
  const char *sym = v->sym[k];
  for (int i = 0; sym && i < g->n_inputs; i++) {
    ap_value *u = &g->values[g->inputs[i]];
    for (int j = 0; u->kind == AP_VAL_INPUT && j < u->rank; j++)
      if (u->sym[j] && strcmp(u->sym[j], sym) == 0) {
        u->dims[j] = size;
        u->sym[j] = NULL;
      }
  }
  v->dims[k] = size;
  v->sym[k] = NULL;
}

ap_status ap_bind_dim(ap_graph *g, const char *name, int64_t size, ap_diag *d) {
  if (size < 1)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                    "--dim %s: the size must be a positive integer, got %lld", name,
                    (long long)size);
  for (int i = 0; i < g->n_inputs; i++) {
    ap_value *v = &g->values[g->inputs[i]];
    for (int k = 0; v->kind == AP_VAL_INPUT && k < v->rank; k++)
      if (v->sym[k] && strcmp(v->sym[k], name) == 0) {
        bind_input_dim(g, v, k, size);
        return AP_OK;
      }
  }
  return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                  "--dim %s: no input of the model has a dimension named '%s'", name, name);
}

/* Appends to buf at *len, as much as fits. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  *len += w < 0 ? 0 : (size_t)w < cap - *len ? (size_t)w : cap - 1 - *len;
}

ap_status ap_check_input_dims(const ap_graph *g, ap_diag *d) {
  enum { MAX_LISTED = 64 };
  struct unbound {
    const char *sym, *input;
    int k;
    bool done;
  } dims[MAX_LISTED];
  int n = 0;
  for (int i = 0; i < g->n_inputs; i++) {
    const ap_value *v = &g->values[g->inputs[i]];
    for (int k = 0; v->kind == AP_VAL_INPUT && k < v->rank && n < MAX_LISTED; k++)
      if (v->dims[k] < 0)
        dims[n++] = (struct unbound){v->sym[k], v->name, k, false};
  }
  if (n == 0)
    return AP_OK;
  /* One entry per symbol (each unnamed dim its own), with the dims carrying it. */
  char list[AP_DIAG_MAX / 2];
  size_t len = 0;
  int entries = 0;
  list[0] = 0;
  for (int i = 0; i < n; i++) {
    if (dims[i].done)
      continue;
    if (dims[i].sym)
      put(list, sizeof list, &len, "%s'%s' (", entries++ ? ", " : "", dims[i].sym);
    else
      put(list, sizeof list, &len, "%sunnamed (", entries++ ? ", " : "");
    for (int j = i, c = 0; j < n; j++)
      if (j == i || (dims[i].sym && dims[j].sym && strcmp(dims[i].sym, dims[j].sym) == 0)) {
        put(list, sizeof list, &len, "%s%s[%d]", c++ ? ", " : "", dims[j].input, dims[j].k);
        dims[j].done = true;
      }
    put(list, sizeof list, &len, ")");
  }
  return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                  "input dimensions not bound: %s; bind them with --dim NAME=VALUE, --batch N "
                  "or --inputs DIR",
                  list);
}

typedef ap_status (*bind_fn)(ap_graph *g, const char *path, ap_value *v, const ap_tensor *t,
                             ap_diag *d);

/* DIR/input_N.pb binds the N-th graph input that has no initializer (the
 * convention of ONNX's test data), unless the tensor carries the name of an
 * input, which then wins: fn(v, the file's tensor) for each. */
static ap_status each_input_file(ap_graph *g, const char *dir, bind_fn fn, ap_diag *d) {
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return ap_error(d, AP_ERR_IO, dir, NULL, NULL, "not a readable directory");
  /* Positions are fixed before binding, since binding changes kinds. */
  int fed = 0;
  int *fed_ids = ap_arena_array(g->arena, (size_t)g->n_inputs + 1, sizeof *fed_ids);
  if (!fed_ids)
    return ap_error(d, AP_ERR_NOMEM, dir, NULL, NULL, "out of memory");
  for (int i = 0; i < g->n_inputs; i++)
    if (g->values[g->inputs[i]].kind == AP_VAL_INPUT)
      fed_ids[fed++] = g->inputs[i];
  for (int n = 0;; n++) {
    char *path = ap_arena_printf(g->arena, "%s/input_%d.pb", dir, n);
    if (!path)
      return ap_error(d, AP_ERR_NOMEM, dir, NULL, NULL, "out of memory");
    if (!file_exists(path)) {
      if (n == 0)
        return ap_error(d, AP_ERR_IO, dir, NULL, NULL, "holds no input_0.pb");
      return AP_OK;
    }
    ap_tensor t;
    const char *name = NULL;
    ap_status s = ap_read_tensor_pb(path, g->arena, &t, &name, d);
    if (s != AP_OK)
      return s;
    int v = name && *name ? ap_graph_find(g, name) : -1;
    if (v < 0 || !g->values[v].is_graph_input) {
      if (n >= fed)
        return ap_error(d, AP_ERR_INVALID, path, NULL, NULL,
                        "the model has only %d graph inputs without initializers", fed);
      v = fed_ids[n];
    }
    if ((s = check_bound_shape(g, path, &g->values[v], &t, d)) != AP_OK ||
        (s = fn(g, path, &g->values[v], &t, d)) != AP_OK)
      return s;
  }
}

static ap_status bind_constant(ap_graph *g, const char *path, ap_value *v, const ap_tensor *t,
                               ap_diag *d) {
  if (!ap_value_set_constant(g, (int)(v - g->values), t))
    return ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  return AP_OK;
}

ap_status ap_bind_inputs_dir(ap_graph *g, const char *dir, ap_diag *d) {
  return each_input_file(g, dir, bind_constant, d);
}

static ap_status bind_dims(ap_graph *g, const char *path, ap_value *v, const ap_tensor *t,
                           ap_diag *d) {
  if (v->rank < 0) {
    v->rank = t->rank;
    for (int k = 0; k < t->rank; k++)
      v->dims[k] = -1;
  }
  for (int k = 0; k < v->rank; k++)
    if (v->dims[k] < 0)
      bind_input_dim(g, v, k, t->dims[k]);
  return AP_OK;
}

ap_status ap_bind_input_dims_dir(ap_graph *g, const char *dir, ap_diag *d) {
  return each_input_file(g, dir, bind_dims, d);
}
