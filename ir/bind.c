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
 * fixed, only that dim changes. */
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
  first->dims[0] = batch;
  first->sym[0] = NULL;
  return AP_OK;
}

ap_status ap_bind_dim(ap_graph *g, const char *name, int64_t value, ap_diag *d) {
  if (value <= 0)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                    "--dim %s: the value must be a positive integer, got %lld", name,
                    (long long)value);
  bool found = false;
  for (int i = 0; i < g->n_inputs; i++) {
    ap_value *v = &g->values[g->inputs[i]];
    for (int k = 0; v->kind == AP_VAL_INPUT && k < v->rank; k++)
      if (v->sym[k] && strcmp(v->sym[k], name) == 0) {
        v->dims[k] = value;
        v->sym[k] = NULL;
        found = true;
      }
  }
  if (!found)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                    "--dim %s: no graph input has a dimension named '%s'", name, name);
  return AP_OK;
}

/* Appends to msg (of cap bytes, at *len) without overflowing it. */
__attribute__((format(printf, 4, 5))) static void append(char *msg, size_t cap, size_t *len,
                                                         const char *fmt, ...) {
  if (*len >= cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(msg + *len, cap - *len, fmt, ap);
  va_end(ap);
  *len += w > 0 ? (size_t)w : 0;
}

/* Whether a run-time input's dim is unbound with symbol sym. */
static bool carries(const ap_value *v, int k, const char *sym) {
  return v->kind == AP_VAL_INPUT && v->dims[k] < 0 && v->sym[k] && strcmp(v->sym[k], sym) == 0;
}

static bool carries_any(const ap_value *v, const char *sym) {
  for (int k = 0; k < v->rank; k++)
    if (carries(v, k, sym))
      return true;
  return false;
}

ap_status ap_check_dims_bound(const ap_graph *g, ap_diag *d) {
  char msg[AP_DIAG_MAX];
  size_t len = 0;
  int unbound = 0;
  msg[0] = '\0';
  for (int i = 0; i < g->n_inputs; i++) {
    const ap_value *v = &g->values[g->inputs[i]];
    for (int k = 0; v->kind == AP_VAL_INPUT && k < v->rank; k++) {
      if (v->dims[k] >= 0)
        continue;
      const char *sym = v->sym[k];
      if (!sym) {
        append(msg, sizeof msg, &len, "%sdim %d of input '%s'", unbound++ ? ", " : "", k,
               v->name);
        continue;
      }
      /* Each symbol once, where it first appears, with every input carrying it. */
      bool seen = false;
      for (int j = 0; j < i && !seen; j++)
        seen = carries_any(&g->values[g->inputs[j]], sym);
      for (int q = 0; q < k && !seen; q++)
        seen = carries(v, q, sym);
      if (seen)
        continue;
      int n = 0;
      for (int j = i; j < g->n_inputs; j++)
        n += carries_any(&g->values[g->inputs[j]], sym);
      append(msg, sizeof msg, &len, "%s'%s' (input%s", unbound++ ? ", " : "", sym,
             n > 1 ? "s" : "");
      for (int j = i, c = 0; j < g->n_inputs; j++)
        if (carries_any(&g->values[g->inputs[j]], sym))
          append(msg, sizeof msg, &len, "%s '%s'", c++ ? "," : "", g->values[g->inputs[j]].name);
      append(msg, sizeof msg, &len, ")");
    }
  }
  if (!unbound)
    return AP_OK;
  return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL,
                  "unbound dimension%s: %s; bind %s with --dim NAME=VALUE or --batch N",
                  unbound > 1 ? "s" : "", msg, unbound > 1 ? "them" : "it");
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

/* DIR/input_N.pb binds the N-th graph input that has no initializer (the
 * convention of ONNX's test data), unless the tensor carries the name of an
 * input, which then wins. */
ap_status ap_bind_inputs_dir(ap_graph *g, const char *dir, ap_diag *d) {
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
    if ((s = check_bound_shape(g, path, &g->values[v], &t, d)) != AP_OK)
      return s;
    if (!ap_value_set_constant(g, v, &t))
      return ap_error(d, AP_ERR_NOMEM, path, NULL, NULL, "out of memory");
  }
}
