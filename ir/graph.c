/* Graph construction and inspection: values and nodes as small ids, a name
 * index, attribute access, and the public inspection API. */
#include <stdlib.h>
#include <string.h>

#include "accpar/plan.h"
#include "ir/ir.h"

ap_graph *ap_graph_new(const char *path) {
  ap_arena *a = ap_arena_new();
  if (!a)
    return NULL;
  ap_graph *g = ap_arena_alloc(a, sizeof *g);
  if (!g || !(g->path = ap_arena_strdup(a, path ? path : "<input>"))) {
    ap_arena_free(a);
    return NULL;
  }
  g->arena = a;
  g->name = "";
  g->producer_name = "";
  g->producer_version = "";
  return g;
}

void ap_graph_free(ap_graph *g) {
  if (!g)
    return;
  ap_arena_free(g->scratch);
  ap_arena_free(g->arena); /* g itself lives there */
}

ap_graph *ap_graph_clone(const ap_graph *g) {
  ap_graph *c = ap_graph_new(g->path);
  if (!c)
    return NULL;
  c->name = g->name;
  c->ir_version = g->ir_version;
  c->producer_name = g->producer_name;
  c->producer_version = g->producer_version;
  c->opset = g->opset;
  c->opsets = g->opsets;
  c->n_opsets = g->n_opsets;
  for (int v = 0; v < g->n_values; v++) {
    if (ap_graph_add_value(c, g->values[v].name, g->values[v].kind) != v)
      goto fail;
    const char *name = c->values[v].name;
    c->values[v] = g->values[v];
    c->values[v].name = name;
    c->values[v].is_graph_input = c->values[v].is_graph_output = false;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (ap_graph_add_node(c, n->name, n->domain, n->op_type, n->n_in, n->n_out, n->n_attr) != i)
      goto fail;
    ap_node *m = &c->nodes[i];
    memcpy(m->in, n->in, (size_t)n->n_in * sizeof *m->in);
    memcpy(m->out, n->out, (size_t)n->n_out * sizeof *m->out);
    memcpy(m->attr, n->attr, (size_t)n->n_attr * sizeof *m->attr);
    m->op = n->op;
    m->dead = n->dead;
  }
  for (int i = 0; i < g->n_inputs; i++)
    if (!ap_graph_add_input(c, g->inputs[i]))
      goto fail;
  for (int i = 0; i < g->n_outputs; i++)
    if (!ap_graph_add_output(c, g->outputs[i]))
      goto fail;
  return c;
fail:
  ap_graph_free(c);
  return NULL;
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

int ap_graph_find(const ap_graph *g, const char *name) {
  if (!g->name_index_cap)
    return -1;
  unsigned mask = (unsigned)g->name_index_cap - 1;
  for (unsigned i = (unsigned)hash_name(name) & mask;; i = (i + 1) & mask) {
    int slot = g->name_index[i];
    if (!slot)
      return -1;
    if (strcmp(g->values[slot - 1].name, name) == 0)
      return slot - 1;
  }
}

static void index_insert(ap_graph *g, int v) {
  unsigned mask = (unsigned)g->name_index_cap - 1;
  unsigned i = (unsigned)hash_name(g->values[v].name) & mask;
  while (g->name_index[i])
    i = (i + 1) & mask;
  g->name_index[i] = v + 1;
}

static bool reindex(ap_graph *g, int need) {
  int cap = g->name_index_cap ? g->name_index_cap : 64;
  while (cap < 2 * need)
    cap *= 2;
  if (cap != g->name_index_cap || need == 0) {
    int *idx = ap_arena_array(g->arena, (size_t)cap, sizeof *idx);
    if (!idx)
      return false;
    g->name_index = idx;
    g->name_index_cap = cap;
  } else {
    memset(g->name_index, 0, (size_t)cap * sizeof *g->name_index);
  }
  for (int v = 0; v < g->n_values; v++)
    index_insert(g, v);
  return true;
}

int ap_graph_add_value(ap_graph *g, const char *name, ap_value_kind kind) {
  if (!ap_arena_grow(g->arena, (void **)&g->values, &g->cap_values, g->n_values + 1,
                     sizeof *g->values))
    return -1;
  if (2 * (g->n_values + 1) > g->name_index_cap && !reindex(g, g->n_values + 1))
    return -1;
  ap_value *v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  if (!(v->name = ap_arena_strdup(g->arena, name)))
    return -1;
  v->kind = kind;
  v->rank = -1;
  v->producer = -1;
  for (int i = 0; i < AP_MAX_RANK; i++)
    v->dims[i] = -1;
  index_insert(g, g->n_values);
  return g->n_values++;
}

int ap_graph_add_node(ap_graph *g, const char *name, const char *domain,
                      const char *op_type, int n_in, int n_out, int n_attr) {
  if (!ap_arena_grow(g->arena, (void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1,
                     sizeof *g->nodes))
    return -1;
  ap_node *n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->name = ap_arena_strdup(g->arena, name);
  n->domain = ap_arena_strdup(g->arena, domain ? domain : "");
  n->op_type = ap_arena_strdup(g->arena, op_type);
  n->in = ap_arena_array(g->arena, (size_t)n_in + 1, sizeof *n->in);
  n->out = ap_arena_array(g->arena, (size_t)n_out + 1, sizeof *n->out);
  n->attr = ap_arena_array(g->arena, (size_t)n_attr + 1, sizeof *n->attr);
  if (!n->name || !n->domain || !n->op_type || !n->in || !n->out || !n->attr)
    return -1;
  for (int i = 0; i < n_in; i++)
    n->in[i] = -1;
  for (int i = 0; i < n_out; i++)
    n->out[i] = -1;
  n->n_in = n_in;
  n->n_out = n_out;
  n->n_attr = n_attr;
  n->op = ap_op_lookup(n->domain, op_type);
  return g->n_nodes++;
}

bool ap_graph_add_input(ap_graph *g, int v) {
  if (!ap_arena_grow(g->arena, (void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1,
                     sizeof *g->inputs))
    return false;
  g->inputs[g->n_inputs++] = v;
  g->values[v].is_graph_input = true;
  return true;
}

bool ap_graph_set_meta(ap_graph *g, const char *key, const char *value) {
  char *v = ap_arena_strdup(g->arena, value);
  if (!v)
    return false;
  for (int i = 0; i < g->n_meta; i++)
    if (strcmp(g->meta_keys[i], key) == 0) {
      g->meta_values[i] = v;
      return true;
    }
  int cap = g->cap_meta;
  if (!ap_arena_grow(g->arena, (void **)&g->meta_keys, &cap, g->n_meta + 1, sizeof(char *)) ||
      !ap_arena_grow(g->arena, (void **)&g->meta_values, &g->cap_meta, g->n_meta + 1,
                     sizeof(char *)))
    return false;
  if (!(g->meta_keys[g->n_meta] = ap_arena_strdup(g->arena, key)))
    return false;
  g->meta_values[g->n_meta++] = v;
  return true;
}

bool ap_graph_add_output(ap_graph *g, int v) {
  if (!ap_arena_grow(g->arena, (void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1,
                     sizeof *g->outputs))
    return false;
  g->outputs[g->n_outputs++] = v;
  g->values[v].is_graph_output = true;
  return true;
}

void ap_graph_link(ap_graph *g) {
  for (int v = 0; v < g->n_values; v++)
    g->values[v].producer = -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0)
        g->values[g->nodes[i].out[k]].producer = i;
}

bool ap_graph_compact(ap_graph *g) {
  int *renum = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *renum);
  if (!renum)
    return false;
  int kept_nodes = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (!g->nodes[i].dead)
      g->nodes[kept_nodes++] = g->nodes[i];
  g->n_nodes = kept_nodes;
  /* A value survives if a live node, a graph input or an output uses it. */
  for (int v = 0; v < g->n_values; v++)
    renum[v] = g->values[v].is_graph_input || g->values[v].is_graph_output;
  for (int i = 0; i < g->n_nodes; i++) {
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0)
        renum[g->nodes[i].in[k]] = 1;
    for (int k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0)
        renum[g->nodes[i].out[k]] = 1;
  }
  int kept = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (renum[v]) {
      g->values[kept] = g->values[v];
      renum[v] = kept++;
    } else {
      renum[v] = -1;
    }
  }
  g->n_values = kept;
  for (int i = 0; i < g->n_nodes; i++) {
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0)
        g->nodes[i].in[k] = renum[g->nodes[i].in[k]];
    for (int k = 0; k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0)
        g->nodes[i].out[k] = renum[g->nodes[i].out[k]];
  }
  for (int i = 0; i < g->n_inputs; i++)
    g->inputs[i] = renum[g->inputs[i]];
  for (int i = 0; i < g->n_outputs; i++)
    g->outputs[i] = renum[g->outputs[i]];
  ap_graph_link(g);
  return reindex(g, g->n_values);
}

const ap_attr *ap_attr_find(const ap_node *n, const char *name) {
  for (int i = 0; i < n->n_attr; i++)
    if (strcmp(n->attr[i].name, name) == 0)
      return &n->attr[i];
  return NULL;
}

int64_t ap_attr_int(const ap_node *n, const char *name, int64_t dflt) {
  const ap_attr *a = ap_attr_find(n, name);
  return a && a->type == AP_ATTR_INT ? a->i : dflt;
}

float ap_attr_float(const ap_node *n, const char *name, float dflt) {
  const ap_attr *a = ap_attr_find(n, name);
  return a && a->type == AP_ATTR_FLOAT ? a->f : dflt;
}

const char *ap_attr_string(const ap_node *n, const char *name, const char *dflt) {
  const ap_attr *a = ap_attr_find(n, name);
  return a && a->type == AP_ATTR_STRING ? a->s : dflt;
}

const int64_t *ap_attr_ints(const ap_node *n, const char *name, int *count) {
  const ap_attr *a = ap_attr_find(n, name);
  if (!a || a->type != AP_ATTR_INTS) {
    *count = 0;
    return NULL;
  }
  *count = a->n;
  return a->ints;
}

ap_tensor ap_value_tensor(const ap_value *v) {
  ap_tensor t = {.dtype = v->dtype, .rank = v->rank < 0 ? 0 : v->rank, .data = v->data};
  for (int i = 0; i < t.rank; i++)
    t.dims[i] = v->dims[i];
  t.numel = ap_numel(t.rank, t.dims);
  return t;
}

bool ap_value_shape_known(const ap_value *v) {
  if (v->rank < 0)
    return false;
  for (int i = 0; i < v->rank; i++)
    if (v->dims[i] < 0)
      return false;
  return true;
}

bool ap_value_set_constant(ap_graph *g, int v, const ap_tensor *t) {
  ap_value *val = &g->values[v];
  size_t n = (size_t)(t->numel > 0 ? t->numel : 0);
  void *data;
  if (t->dtype == AP_DT_STRING) {
    const char **src = t->data, **dst = ap_arena_array(g->arena, n + 1, sizeof(char *));
    if (!dst)
      return false;
    for (size_t i = 0; i < n; i++)
      if (!(dst[i] = ap_arena_strdup(g->arena, src[i] ? src[i] : "")))
        return false;
    data = dst;
  } else {
    size_t bytes = n * ap_dtype_size(t->dtype);
    if (!(data = ap_arena_alloc(g->arena, bytes)))
      return false;
    if (bytes)
      memcpy(data, t->data, bytes);
  }
  val->dtype = t->dtype;
  val->rank = t->rank;
  for (int i = 0; i < AP_MAX_RANK; i++) {
    val->dims[i] = i < t->rank ? t->dims[i] : -1;
    val->sym[i] = NULL;
  }
  val->data = data;
  if (val->kind == AP_VAL_NODE || val->kind == AP_VAL_INPUT)
    val->kind = AP_VAL_CONST;
  return true;
}

ap_value *ap_node_in(ap_graph *g, const ap_node *n, int i) {
  return i < n->n_in && n->in[i] >= 0 ? &g->values[n->in[i]] : NULL;
}

ap_value *ap_node_out(ap_graph *g, const ap_node *n, int i) {
  return i < n->n_out && n->out[i] >= 0 ? &g->values[n->out[i]] : NULL;
}

/* ---- the public inspection API ---- */

const char *ap_graph_metadata(const ap_graph *g, const char *key) {
  for (int i = 0; i < g->n_meta; i++)
    if (strcmp(g->meta_keys[i], key) == 0)
      return g->meta_values[i];
  return NULL;
}

ap_status ap_graph_set_metadata(ap_graph *g, const char *key, const char *value) {
  return ap_graph_set_meta(g, key, value) ? AP_OK : AP_ERR_NOMEM;
}

int ap_graph_num_values(const ap_graph *g) { return g->n_values; }
int ap_graph_num_nodes(const ap_graph *g) { return g->n_nodes; }
int ap_graph_num_inputs(const ap_graph *g) { return g->n_inputs; }
int ap_graph_num_outputs(const ap_graph *g) { return g->n_outputs; }
int ap_graph_input(const ap_graph *g, int i) { return g->inputs[i]; }
int ap_graph_output(const ap_graph *g, int i) { return g->outputs[i]; }
const char *ap_value_name(const ap_graph *g, int v) { return g->values[v].name; }
int ap_value_rank(const ap_graph *g, int v) { return g->values[v].rank; }
int64_t ap_value_dim(const ap_graph *g, int v, int axis) {
  const ap_value *val = &g->values[v];
  return axis >= 0 && axis < val->rank ? val->dims[axis] : -1;
}
int ap_value_dtype(const ap_graph *g, int v) { return (int)g->values[v].dtype; }
int ap_value_is_constant(const ap_graph *g, int v) { return g->values[v].data != NULL; }
const char *ap_node_name(const ap_graph *g, int n) { return g->nodes[n].name; }
const char *ap_node_op(const ap_graph *g, int n) { return g->nodes[n].op_type; }
int ap_node_num_levels(const ap_graph *g, int n) { return g->nodes[n].n_types; }
int ap_node_type(const ap_graph *g, int n, int level) {
  const ap_node *node = &g->nodes[n];
  return level >= 0 && level < node->n_types ? node->types[level] : 0;
}
int ap_node_is_live(const ap_graph *g, int n) { return !g->nodes[n].dead; }
int ap_node_num_inputs(const ap_graph *g, int n) { return g->nodes[n].n_in; }
int ap_node_num_outputs(const ap_graph *g, int n) { return g->nodes[n].n_out; }
int ap_node_input(const ap_graph *g, int n, int i) { return g->nodes[n].in[i]; }
int ap_node_output(const ap_graph *g, int n, int i) { return g->nodes[n].out[i]; }

int64_t ap_value_index_rows(const ap_graph *g, int v) {
  int64_t rows = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    for (int k = 0; k < n->n_in; k++) {
      if (n->in[k] != v)
        continue;
      int64_t r = 0;
      if (n->op == AP_OP_GATHER && k == 1 && n->in[0] >= 0) {
        const ap_value *x = &g->values[n->in[0]];
        int64_t axis = ap_attr_int(n, "axis", 0);
        if (axis < 0)
          axis += x->rank;
        r = axis >= 0 && axis < x->rank ? x->dims[axis] : 0;
      } else if (k == 0 && n->n_out > 0 && n->out[0] >= 0 &&
                 ap_dtype_is_int(g->values[n->out[0]].dtype) &&
                 (n->op == AP_OP_CAST || n->op == AP_OP_RESHAPE || n->op == AP_OP_UNSQUEEZE ||
                  n->op == AP_OP_SQUEEZE || n->op == AP_OP_FLATTEN || n->op == AP_OP_IDENTITY ||
                  n->op == AP_OP_TRANSPOSE || n->op == AP_OP_SLICE || n->op == AP_OP_EXPAND)) {
        r = ap_value_index_rows(g, n->out[0]);
      }
      if (r > 0 && (rows == 0 || r < rows))
        rows = r;
    }
  }
  return rows;
}

bool ap_value_is_parameter(const ap_value *v) {
  return v->kind == AP_VAL_WEIGHT && v->data && ap_dtype_is_float(v->dtype) &&
         ap_numel(v->rank, v->dims) > 1;
}

/* Whether v is read at slot k of n as an activation is: concatenated, or
 * as a whole operand of an element-wise operator that it does not
 * broadcast into (a bias, a scale broadcasts; an activation has the
 * output's every dim). */
static bool read_as_activation(const ap_graph *g, const ap_node *n, int v) {
  if (n->op == AP_OP_CONCAT)
    return true;
  if (n->op >= AP_OP_COUNT || ap_op_table[n->op].axes != AP_AXES_EWISE || n->n_out < 1 ||
      n->out[0] < 0)
    return false;
  const ap_value *x = &g->values[v], *y = &g->values[n->out[0]];
  if (x->rank != y->rank || x->rank < 1)
    return false;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] != y->dims[i] || x->dims[i] < 0)
      return false;
  return true;
}

/* The live nodes reading each value, each once, in order: node[first[v]
 * .. first[v + 1]) (ap_fed_weights). */
typedef struct reader_index {
  int *first, *node;
} reader_index;

/* Whether every read of v is a weight's: at an operand slot after the
 * first (neither concatenated nor an element-wise operand as large as the
 * output), as a Gather's table, or through an op that reshapes or retypes
 * it (a tied table's Transpose, a Cast) into a value read so in turn. The
 * readers come from ix, or without one from a look at every node. */
static bool read_as_weight(const ap_graph *g, const reader_index *ix, int v, int depth) {
  if (depth > 8 || g->values[v].is_graph_output)
    return false;
  int n_look = ix ? ix->first[v + 1] - ix->first[v] : g->n_nodes;
  for (int j = 0; j < n_look; j++) {
    const ap_node *n = &g->nodes[ix ? ix->node[ix->first[v] + j] : j];
    for (int k = 1; !n->dead && k < n->n_in; k++)
      if (n->in[k] == v && read_as_activation(g, n, v))
        return false;
    if (n->dead || n->n_in == 0 || n->in[0] != v)
      continue;
    if (n->op == AP_OP_GATHER && n->n_in > 1 && n->in[1] >= 0 &&
        ap_dtype_is_int(g->values[n->in[1]].dtype))
      continue;
    bool reshaping = n->op == AP_OP_TRANSPOSE || n->op == AP_OP_RESHAPE ||
                     n->op == AP_OP_CAST || n->op == AP_OP_SLICE || n->op == AP_OP_UNSQUEEZE ||
                     n->op == AP_OP_SQUEEZE || n->op == AP_OP_IDENTITY ||
                     n->op == AP_OP_FLATTEN;
    if (!reshaping || n->n_out < 1 || n->out[0] < 0 ||
        !read_as_weight(g, ix, n->out[0], depth + 1))
      return false;
  }
  return true;
}

static bool fed_weight(const ap_graph *g, const reader_index *ix, int v) {
  const ap_value *val = &g->values[v];
  return val->kind == AP_VAL_INPUT && !val->data && ap_dtype_is_float(val->dtype) &&
         ap_numel(val->rank, val->dims) > 1 && read_as_weight(g, ix, v, 0);
}

bool ap_value_is_fed_weight(const ap_graph *g, int v) { return fed_weight(g, NULL, v); }

void ap_fed_weights(const ap_graph *g, bool *fed) {
  reader_index ix = {calloc((size_t)g->n_values + 2, sizeof(int)), NULL};
  int n_reads = 0;
  for (int pass = 0; pass < 2 && ix.first; pass++) {
    if (pass == 1) {
      for (int v = 0; v < g->n_values; v++)
        ix.first[v + 2] += ix.first[v + 1];
      if (!(ix.node = malloc(((size_t)n_reads + 1) * sizeof *ix.node)))
        break;
    }
    for (int ni = 0; ni < g->n_nodes; ni++)
      for (int i = 0; !g->nodes[ni].dead && i < g->nodes[ni].n_in; i++) {
        int v = g->nodes[ni].in[i];
        bool again = false; /* a node reads a value once, however many slots */
        for (int k = 0; k < i && !again; k++)
          again = g->nodes[ni].in[k] == v;
        if (v < 0 || again)
          continue;
        if (pass == 0) {
          ix.first[v + 2]++;
          n_reads++;
        } else { /* first[v + 1] runs to v's end */
          ix.node[ix.first[v + 1]++] = ni;
        }
      }
  }
  /* Out of memory: every node looked at, as ap_value_is_fed_weight does. */
  const reader_index *use = ix.node ? &ix : NULL;
  for (int v = 0; v < g->n_values; v++)
    fed[v] = fed_weight(g, use, v);
  free(ix.first);
  free(ix.node);
}

int ap_sole_reader(const ap_graph *g, bool once, int v) {
  if (g->values[v].is_graph_output)
    return -1;
  int reader = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] == v) {
        if (reader >= 0 && (reader != i || once))
          return -1;
        reader = i;
      }
  }
  return reader;
}

bool ap_dims_equal(int rank_a, const int64_t *a, int rank_b, const int64_t *b) {
  if (rank_a != rank_b)
    return false;
  for (int i = 0; i < rank_a; i++)
    if (a[i] != b[i])
      return false;
  return true;
}
