/* The verifier: the structural checks every later pass relies on. It runs
 * before and after the shape passes, and sorts nodes topologically. */
#include <string.h>

#include "ir/ir.h"

/* One message listing every unsupported operator type and the nodes using
 * it, so a user sees the whole problem at once. */
static ap_status report_unsupported(ap_graph *g, ap_diag *d) {
  char msg[AP_DIAG_MAX];
  size_t len = 0;
  int types = 0;
  bool *listed = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *listed);
  if (!listed)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  msg[0] = '\0';
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (n->dead || n->op != AP_OP_UNKNOWN || listed[i])
      continue;
    int nodes = 0;
    for (int j = i; j < g->n_nodes; j++) {
      const ap_node *m = &g->nodes[j];
      if (m->dead || m->op != AP_OP_UNKNOWN || listed[j] ||
          strcmp(m->op_type, n->op_type) != 0 || strcmp(m->domain, n->domain) != 0)
        continue;
      listed[j] = true;
      if (len < sizeof msg) {
        int w = snprintf(msg + len, sizeof msg - len, "%s%s%s%s%s '%s'",
                         nodes ? "," : types ? "; " : "", nodes ? "" : *n->domain ? n->domain : "",
                         nodes ? "" : *n->domain ? "::" : "", nodes ? "" : n->op_type,
                         nodes ? "" : " (nodes", m->name);
        len += w > 0 ? (size_t)w : 0;
      }
      nodes++;
    }
    if (len < sizeof msg) {
      int w = snprintf(msg + len, sizeof msg - len, ")");
      len += w > 0 ? (size_t)w : 0;
    }
    types++;
  }
  if (!types)
    return AP_OK;
  return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                  "unsupported operator%s: %s", types > 1 ? "s" : "", msg);
}

/* The type of every attribute name the supported operators read, the same
 * for every operator that has it (ONNX's schemas); names whose type
 * depends on the operator (value) are not listed. */
static const struct {
  const char *name;
  ap_attr_type type;
} attr_types[] = {
    {"allowzero", AP_ATTR_INT}, {"axis", AP_ATTR_INT}, {"batch_dims", AP_ATTR_INT},
    {"blocksize", AP_ATTR_INT},
    {"ceil_mode", AP_ATTR_INT}, {"count_include_pad", AP_ATTR_INT},
    {"detect_negative", AP_ATTR_INT}, {"detect_positive", AP_ATTR_INT}, {"end", AP_ATTR_INT},
    {"exclusive", AP_ATTR_INT}, {"reverse", AP_ATTR_INT}, {"upper", AP_ATTR_INT},
    {"largest", AP_ATTR_INT}, {"sorted", AP_ATTR_INT}, {"k", AP_ATTR_INT},
    {"fmod", AP_ATTR_INT}, {"group", AP_ATTR_INT}, {"keepdims", AP_ATTR_INT},
    {"noop_with_empty_axes", AP_ATTR_INT}, {"num_groups", AP_ATTR_INT}, {"p", AP_ATTR_INT},
    {"select_last_index", AP_ATTR_INT}, {"size", AP_ATTR_INT}, {"stash_type", AP_ATTR_INT},
    {"start", AP_ATTR_INT},
    {"storage_order", AP_ATTR_INT}, {"to", AP_ATTR_INT}, {"training_mode", AP_ATTR_INT},
    {"transA", AP_ATTR_INT}, {"transB", AP_ATTR_INT},
    {"alpha", AP_ATTR_FLOAT}, {"beta", AP_ATTR_FLOAT}, {"bias", AP_ATTR_FLOAT},
    {"epsilon", AP_ATTR_FLOAT}, {"gamma", AP_ATTR_FLOAT}, {"max", AP_ATTR_FLOAT},
    {"min", AP_ATTR_FLOAT}, {"momentum", AP_ATTR_FLOAT},
    {"approximate", AP_ATTR_STRING}, {"auto_pad", AP_ATTR_STRING}, {"mode", AP_ATTR_STRING},
    {"reduction", AP_ATTR_STRING},
    {"axes", AP_ATTR_INTS}, {"dilations", AP_ATTR_INTS}, {"ends", AP_ATTR_INTS},
    {"kernel_shape", AP_ATTR_INTS}, {"output_padding", AP_ATTR_INTS},
    {"output_shape", AP_ATTR_INTS}, {"pads", AP_ATTR_INTS}, {"perm", AP_ATTR_INTS},
    {"split", AP_ATTR_INTS}, {"starts", AP_ATTR_INTS}, {"strides", AP_ATTR_INTS},
};

static const char *attr_type_name(ap_attr_type t) {
  switch (t) {
  case AP_ATTR_FLOAT: return "a float";
  case AP_ATTR_INT: return "an int";
  case AP_ATTR_STRING: return "a string";
  case AP_ATTR_TENSOR: return "a tensor";
  case AP_ATTR_FLOATS: return "a list of floats";
  case AP_ATTR_INTS: return "a list of ints";
  case AP_ATTR_STRINGS: return "a list of strings";
  default: return "another type";
  }
}

static ap_status check_node(ap_graph *g, const ap_node *n, ap_diag *d) {
  const ap_op_info *info = &ap_op_table[n->op];
  /* Later opsets may change an operator's meaning, not only add to it. */
  if (g->opset > AP_OPSET_MAX)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                    "opset %lld is newer than the ONNX semantics accpar implements (up to %d)",
                    (long long)g->opset, AP_OPSET_MAX);
  for (int i = 0; i < n->n_attr; i++)
    for (size_t j = 0; j < sizeof attr_types / sizeof *attr_types; j++)
      if (strcmp(n->attr[i].name, attr_types[j].name) == 0 &&
          n->attr[i].type != attr_types[j].type)
        return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                        "attribute '%s' must be %s, not %s", n->attr[i].name,
                        attr_type_name(attr_types[j].type), attr_type_name(n->attr[i].type));
  if (n->n_in < info->min_in || (info->max_in >= 0 && n->n_in > info->max_in))
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "has %d inputs, expected %d to %d", n->n_in, info->min_in, info->max_in);
  if (n->n_out < info->min_out || (info->max_out >= 0 && n->n_out > info->max_out))
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "has %d outputs, expected %d to %d", n->n_out, info->min_out,
                    info->max_out);
  /* Variadic operators take every input; the others require their first
   * min_in inputs. */
  int required = info->max_in < 0 ? n->n_in : info->min_in;
  for (int i = 0; i < required; i++)
    if (n->in[i] < 0)
      return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                      "required input %d is missing", i);
  if (n->n_out > 0 && n->out[0] < 0)
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "its first output has no name");
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0)
      continue;
    const ap_value *v = &g->values[n->in[i]];
    if (v->non_tensor)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "input '%s' is a %s; only tensors are supported", v->name, v->non_tensor);
  }
  return AP_OK;
}

static void heap_push(int *heap, int *len, int x) {
  int i = (*len)++;
  while (i > 0 && heap[(i - 1) / 2] > x) {
    heap[i] = heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  heap[i] = x;
}

static int heap_pop(int *heap, int *len) {
  int top = heap[0], x = heap[--*len], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *len)
      break;
    if (c + 1 < *len && heap[c + 1] < heap[c])
      c++;
    if (heap[c] >= x)
      break;
    heap[i] = heap[c];
    i = c;
  }
  heap[i] = x;
  return top;
}

/* Kahn's algorithm over live nodes; values without a producer (inputs,
 * weights, constants) are ready from the start. */
static ap_status sort_nodes(ap_graph *g, ap_diag *d) {
  int n = g->n_nodes;
  int *pending = ap_arena_array(g->arena, (size_t)n + 1, sizeof *pending);
  int *order = ap_arena_array(g->arena, (size_t)n + 1, sizeof *order);
  int *ready_count = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *ready_count);
  int *first_use = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *first_use);
  int *next_use = NULL;
  int n_uses = 0;
  if (!pending || !order || !ready_count || !first_use)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int i = 0; i < n; i++)
    n_uses += g->nodes[i].n_in;
  int *use_node = ap_arena_array(g->arena, (size_t)n_uses + 1, sizeof *use_node);
  next_use = ap_arena_array(g->arena, (size_t)n_uses + 1, sizeof *next_use);
  if (!use_node || !next_use)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < g->n_values; v++)
    first_use[v] = -1;
  /* Use lists: every (value, consuming node) edge whose value is produced. */
  int k = 0;
  for (int i = 0; i < n; i++) {
    const ap_node *node = &g->nodes[i];
    for (int j = 0; j < node->n_in; j++) {
      int v = node->in[j];
      if (v < 0 || g->values[v].producer < 0)
        continue;
      pending[i]++;
      use_node[k] = i;
      next_use[k] = first_use[v];
      first_use[v] = k++;
    }
  }
  /* The ready node with the smallest index goes first (a binary min-heap),
   * so a file already in topological order keeps its order. */
  int *heap = ap_arena_array(g->arena, (size_t)n + 1, sizeof *heap);
  if (!heap)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  int heap_len = 0, tail = 0;
  for (int i = 0; i < n; i++)
    if (pending[i] == 0)
      heap_push(heap, &heap_len, i);
  while (heap_len > 0) {
    int i = heap_pop(heap, &heap_len);
    order[tail++] = i;
    const ap_node *node = &g->nodes[i];
    for (int j = 0; j < node->n_out; j++) {
      int v = node->out[j];
      if (v < 0)
        continue;
      for (int u = first_use[v]; u >= 0; u = next_use[u])
        if (--pending[use_node[u]] == 0)
          heap_push(heap, &heap_len, use_node[u]);
    }
  }
  if (tail < n) {
    for (int i = 0; i < n; i++)
      if (pending[i] > 0)
        return ap_error(d, AP_ERR_INVALID, g->path, g->nodes[i].name, g->nodes[i].op_type,
                        "is part of a cycle");
  }
  ap_node *sorted = ap_arena_array(g->arena, (size_t)n + 1, sizeof *sorted);
  if (!sorted)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int i = 0; i < n; i++)
    sorted[i] = g->nodes[order[i]];
  if (n) /* a graph folded down to no node at all may have no node array */
    memcpy(g->nodes, sorted, (size_t)n * sizeof *sorted);
  ap_graph_link(g);
  return AP_OK;
}

ap_status ap_verify(ap_graph *g, ap_diag *d) {
  if (!ap_graph_compact(g))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  ap_status s = report_unsupported(g, d);
  if (s != AP_OK)
    return s;
  /* Each value has one definition: a node, or the graph (input/weight/const). */
  int *producer = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *producer);
  if (!producer)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < g->n_values; v++)
    producer[v] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if ((s = check_node(g, n, d)) != AP_OK)
      return s;
    for (int j = 0; j < n->n_out; j++) {
      int v = n->out[j];
      if (v < 0)
        continue;
      const ap_value *val = &g->values[v];
      if (producer[v] >= 0)
        return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                        "output '%s' is also produced by node '%s'", val->name,
                        g->nodes[producer[v]].name);
      if (val->kind != AP_VAL_NODE)
        return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                        "output '%s' is also a graph input or initializer", val->name);
      producer[v] = i;
    }
  }
  for (int v = 0; v < g->n_values; v++) {
    const ap_value *val = &g->values[v];
    if (val->kind == AP_VAL_NODE && producer[v] < 0)
      return ap_error(d, AP_ERR_INVALID, g->path, NULL, NULL,
                      "value '%s' is used but never produced", val->name);
    if (val->rank > AP_MAX_RANK)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                      "value '%s' has rank %d; at most %d is supported", val->name, val->rank,
                      AP_MAX_RANK);
    for (int i = 0; i < val->rank; i++)
      if (val->dims[i] < -1)
        return ap_error(d, AP_ERR_INVALID, g->path, NULL, NULL,
                        "value '%s' has a negative dimension %lld", val->name,
                        (long long)val->dims[i]);
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (g->values[g->outputs[i]].non_tensor)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                      "graph output '%s' is a %s; only tensors are supported",
                      g->values[g->outputs[i]].name, g->values[g->outputs[i]].non_tensor);
  ap_graph_link(g);
  return sort_nodes(g, d);
}
