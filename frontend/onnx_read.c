/* The ONNX reader: ModelProto -> ap_graph. Everything is copied into the
 * graph's arena and the protobuf is freed before returning, so no protobuf
 * type outlives the call. Every problem is one diagnostic naming the file,
 * and the node and operator when there is one. */
#include <limits.h>
#include <string.h>

#include "onnx.pb-c.h"

#include "frontend/frontend.h"

typedef struct reader {
  ap_graph *g;
  ap_diag *d;
  const char *file; /* for diagnostics */
  const char *dir;  /* where external data lives; NULL for a buffer */
  int depth;        /* 0 for the model's graph, 1 + the enclosing one's in a subgraph */
} reader;

/* Counts in a protobuf are size_t; the IR counts in int. A file small enough
 * to read cannot reach this, but a crafted one must not wrap. */
enum { MAX_COUNT = INT_MAX / 4 };

static ap_status nomem(reader *r) {
  return ap_error(r->d, AP_ERR_NOMEM, r->file, NULL, NULL, "out of memory");
}

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* ---- types of graph inputs, outputs and value_info ------------------------ */

/* Records the ONNX type of a value: element type and shape for tensors, the
 * kind of any other type so the verifier can refuse it by name. */
static ap_status apply_type(reader *r, ap_value *v, const Onnx__TypeProto *tp,
                            const char *what) {
  if (!tp)
    return AP_OK;
  switch (tp->value_case) {
  case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE: break;
  case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE: v->non_tensor = "sequence"; return AP_OK;
  case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE: v->non_tensor = "optional"; return AP_OK;
  case ONNX__TYPE_PROTO__VALUE_MAP_TYPE: v->non_tensor = "map"; return AP_OK;
  case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE: v->non_tensor = "sparse tensor"; return AP_OK;
  default: return AP_OK;
  }
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  if (tt->has_elem_type) {
    if (tt->elem_type < 0 || tt->elem_type > AP_DT_LAST_KNOWN)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                      "%s '%s' has unknown element type %d", what, v->name, (int)tt->elem_type);
    v->dtype = (ap_dtype)tt->elem_type;
  }
  if (!tt->shape)
    return AP_OK;
  if (tt->shape->n_dim > AP_MAX_RANK)
    return ap_error(r->d, AP_ERR_UNSUPPORTED, r->file, NULL, NULL,
                    "%s '%s' has rank %zu; at most %d is supported", what, v->name,
                    tt->shape->n_dim, (int)AP_MAX_RANK);
  v->rank = (int)tt->shape->n_dim;
  for (int i = 0; i < v->rank; i++) {
    const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[i];
    v->dims[i] = -1;
    v->sym[i] = NULL;
    if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (dim->dim_value < 0)
        return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                        "%s '%s': dimension %d is negative (%lld)", what, v->name, i,
                        (long long)dim->dim_value);
      v->dims[i] = dim->dim_value;
    } else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               dim->dim_param && *dim->dim_param) {
      if (!(v->sym[i] = ap_arena_strdup(r->g->arena, dim->dim_param)))
        return nomem(r);
    }
  }
  return AP_OK;
}

/* ---- model header --------------------------------------------------------- */

static ap_status read_header(reader *r, const Onnx__ModelProto *m) {
  ap_graph *g = r->g;
  g->ir_version = m->has_ir_version ? m->ir_version : 0;
  if (!(g->producer_name = ap_arena_strdup(g->arena, str_or_empty(m->producer_name))) ||
      !(g->producer_version = ap_arena_strdup(g->arena, str_or_empty(m->producer_version))))
    return nomem(r);
  if (m->n_metadata_props > MAX_COUNT)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "too many metadata entries");
  for (size_t i = 0; i < m->n_metadata_props; i++)
    if (!ap_graph_set_meta(g, str_or_empty(m->metadata_props[i]->key),
                           str_or_empty(m->metadata_props[i]->value)))
      return nomem(r);
  if (m->n_opset_import > MAX_COUNT)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "too many opset imports");
  g->n_opsets = (int)m->n_opset_import;
  g->opsets = ap_arena_array(g->arena, m->n_opset_import + 1, sizeof *g->opsets);
  if (!g->opsets)
    return nomem(r);
  bool have_default = false;
  for (int i = 0; i < g->n_opsets; i++) {
    const Onnx__OperatorSetIdProto *os = m->opset_import[i];
    const char *domain = str_or_empty(os->domain);
    bool is_default = !*domain || strcmp(domain, "ai.onnx") == 0;
    for (int k = 0; k < i; k++) {
      const char *other = g->opsets[k].domain;
      bool other_default = !*other || strcmp(other, "ai.onnx") == 0;
      if (strcmp(other, domain) == 0 || (is_default && other_default))
        return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                        "opset_import lists domain '%s' twice", domain);
    }
    if (!(g->opsets[i].domain = ap_arena_strdup(g->arena, domain)))
      return nomem(r);
    g->opsets[i].version = os->has_version ? os->version : 0;
    if (is_default) {
      have_default = true;
      g->opset = g->opsets[i].version;
    }
  }
  if (!have_default)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                    "the model imports no opset for the default ONNX domain");
  if (g->opset <= 0)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                    "the default ONNX domain's opset version %lld is not positive",
                    (long long)g->opset);
  return AP_OK;
}

/* ---- graph inputs and initializers ---------------------------------------- */

static ap_status read_inputs(reader *r, const Onnx__GraphProto *gp) {
  ap_graph *g = r->g;
  for (size_t i = 0; i < gp->n_input; i++) {
    const Onnx__ValueInfoProto *vi = gp->input[i];
    if (!vi->name || !*vi->name)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "graph input %zu has no name", i);
    if (ap_graph_find(g, vi->name) >= 0)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                      "graph input '%s' is listed twice", vi->name);
    int v = ap_graph_add_value(g, vi->name, AP_VAL_INPUT);
    if (v < 0 || !ap_graph_add_input(g, v))
      return nomem(r);
    ap_status s = apply_type(r, &g->values[v], vi->type, "graph input");
    if (s != AP_OK)
      return s;
  }
  return AP_OK;
}

/* An initializer that is also a graph input must agree with what the input
 * declares; the initializer's data then decides the value's shape. */
static ap_status check_against_input(reader *r, const ap_value *v, const ap_tensor *t) {
  if (v->dtype != AP_DT_UNDEFINED && v->dtype != t->dtype)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                    "initializer '%s' is %s but the graph input of that name is %s", v->name,
                    ap_dtype_name(t->dtype), ap_dtype_name(v->dtype));
  if (v->rank >= 0 && v->rank != t->rank)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                    "initializer '%s' has rank %d but the graph input of that name has rank %d",
                    v->name, t->rank, v->rank);
  for (int i = 0; v->rank >= 0 && i < v->rank; i++)
    if (v->dims[i] >= 0 && v->dims[i] != t->dims[i])
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                      "initializer '%s' has dimension %d of size %lld but the graph input of "
                      "that name says %lld",
                      v->name, i, (long long)t->dims[i], (long long)v->dims[i]);
  return AP_OK;
}

static ap_status read_initializers(reader *r, const Onnx__GraphProto *gp) {
  ap_graph *g = r->g;
  if (gp->n_sparse_initializer) {
    const Onnx__SparseTensorProto *sp = gp->sparse_initializer[0];
    const char *name = sp->values && sp->values->name ? sp->values->name : "";
    return ap_error(r->d, AP_ERR_UNSUPPORTED, r->file, NULL, NULL,
                    "sparse initializer '%s': sparse tensors are not supported", name);
  }
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *tp = gp->initializer[i];
    if (!tp->name || !*tp->name)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "initializer %zu has no name", i);
    int v = ap_graph_find(g, tp->name);
    if (v >= 0 && g->values[v].kind == AP_VAL_WEIGHT)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                      "initializer '%s' is defined twice", tp->name);
    char what[300];
    snprintf(what, sizeof what, "initializer '%.256s'", tp->name);
    ap_pb_where w = {.file = r->file, .dir = r->dir, .what = what};
    ap_tensor t;
    ap_status s = ap_tensor_from_pb(tp, g->arena, &t, &w, r->d);
    if (s != AP_OK)
      return s;
    if (v >= 0 && (s = check_against_input(r, &g->values[v], &t)) != AP_OK)
      return s;
    if (v < 0 && (v = ap_graph_add_value(g, tp->name, AP_VAL_WEIGHT)) < 0)
      return nomem(r);
    ap_value *val = &g->values[v];
    val->kind = AP_VAL_WEIGHT;
    val->dtype = t.dtype;
    val->rank = t.rank;
    for (int k = 0; k < AP_MAX_RANK; k++) {
      val->dims[k] = k < t.rank ? t.dims[k] : -1;
      val->sym[k] = NULL;
    }
    val->data = t.data;
  }
  return AP_OK;
}

/* ---- node names ----------------------------------------------------------- */

/* A set of node names, so generated names never collide with given ones. */
typedef struct name_set {
  const char **slot;
  unsigned mask;
} name_set;

static unsigned name_hash(const char *s) {
  unsigned h = 2166136261u; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static bool name_set_has(const name_set *ns, const char *s) {
  for (unsigned i = name_hash(s) & ns->mask; ns->slot[i]; i = (i + 1) & ns->mask)
    if (strcmp(ns->slot[i], s) == 0)
      return true;
  return false;
}

static void name_set_add(name_set *ns, const char *s) {
  unsigned i = name_hash(s) & ns->mask;
  while (ns->slot[i]) {
    if (strcmp(ns->slot[i], s) == 0)
      return;
    i = (i + 1) & ns->mask;
  }
  ns->slot[i] = s;
}

static ap_status node_names(reader *r, const Onnx__GraphProto *gp, const char **names) {
  unsigned cap = 16;
  while (cap < 2 * (unsigned)gp->n_node + 2)
    cap *= 2;
  name_set ns = {ap_arena_array(r->g->arena, cap, sizeof(char *)), cap - 1};
  if (!ns.slot)
    return nomem(r);
  for (size_t i = 0; i < gp->n_node; i++)
    if (gp->node[i]->name && *gp->node[i]->name)
      name_set_add(&ns, names[i] = gp->node[i]->name);
  for (size_t i = 0; i < gp->n_node; i++) {
    if (names[i])
      continue;
    const char *op = gp->node[i]->op_type;
    char *name = ap_arena_printf(r->g->arena, "%s_%zu", op, i);
    for (int k = 2; name && name_set_has(&ns, name); k++)
      name = ap_arena_printf(r->g->arena, "%s_%zu_%d", op, i, k);
    if (!name)
      return nomem(r);
    name_set_add(&ns, names[i] = name);
  }
  return AP_OK;
}

/* ---- attributes ----------------------------------------------------------- */

/* Files from before IR version 2 carry no attribute type; the field that is
 * set tells it. */
static int attr_type_of(const Onnx__AttributeProto *ap) {
  if (ap->has_type && ap->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
    return (int)ap->type;
  if (ap->has_f) return AP_ATTR_FLOAT;
  if (ap->has_i) return AP_ATTR_INT;
  if (ap->has_s) return AP_ATTR_STRING;
  if (ap->t) return AP_ATTR_TENSOR;
  if (ap->g) return AP_ATTR_GRAPH;
  if (ap->n_floats) return AP_ATTR_FLOATS;
  if (ap->n_ints) return AP_ATTR_INTS;
  if (ap->n_strings) return AP_ATTR_STRINGS;
  if (ap->n_tensors) return AP_ATTR_TENSORS;
  return AP_ATTR_UNDEFINED;
}

static ap_status attr_error(reader *r, const ap_node *n, const char *attr, const char *what) {
  return ap_error(r->d, AP_ERR_INVALID, r->file, n->name, n->op_type, "attribute '%s' %s", attr,
                  what);
}

static ap_status read_tensor_attr(reader *r, const ap_node *n, const char *attr,
                                  const Onnx__TensorProto *tp, ap_tensor *t) {
  char what[300];
  snprintf(what, sizeof what, "attribute '%.256s'", attr);
  ap_pb_where w = {.file = r->file, .dir = r->dir, .node = n->name, .op = n->op_type,
                   .what = what};
  return ap_tensor_from_pb(tp, r->g->arena, t, &w, r->d);
}

static ap_status read_subgraph(reader *r, const ap_node *n, const Onnx__AttributeProto *ap,
                               ap_attr *out);

static ap_status read_attr(reader *r, const ap_node *n, const Onnx__AttributeProto *ap,
                           ap_attr *out) {
  ap_arena *a = r->g->arena;
  if (!ap->name || !*ap->name)
    return ap_error(r->d, AP_ERR_INVALID, r->file, n->name, n->op_type,
                    "an attribute has no name");
  for (int k = 0; k < n->n_attr && n->attr[k].name; k++)
    if (strcmp(n->attr[k].name, ap->name) == 0)
      return attr_error(r, n, ap->name, "is given twice");
  if (!(out->name = ap_arena_strdup(a, ap->name)))
    return nomem(r);
  int type = attr_type_of(ap);
  out->type = (ap_attr_type)type;
  size_t count = 0;
  switch (type) {
  case AP_ATTR_FLOAT:
    out->f = ap->f;
    return AP_OK;
  case AP_ATTR_INT:
    out->i = ap->i;
    return AP_OK;
  case AP_ATTR_STRING:
    out->s_len = ap->s.len;
    if (!(out->s = ap_arena_strndup(a, (const char *)ap->s.data, ap->s.len)))
      return nomem(r);
    return AP_OK;
  case AP_ATTR_TENSOR:
    if (!ap->t)
      return attr_error(r, n, ap->name, "is of type TENSOR but holds no tensor");
    if (!(out->t = ap_arena_alloc(a, sizeof *out->t)))
      return nomem(r);
    out->n = 1;
    return read_tensor_attr(r, n, ap->name, ap->t, out->t);
  case AP_ATTR_FLOATS: count = ap->n_floats; break;
  case AP_ATTR_INTS: count = ap->n_ints; break;
  case AP_ATTR_STRINGS: count = ap->n_strings; break;
  case AP_ATTR_TENSORS: count = ap->n_tensors; break;
  case AP_ATTR_GRAPH:
    return read_subgraph(r, n, ap, out);
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO:
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS:
    /* Only Scan-like and training operators take these, and accpar does
     * not support them: the verifier names them, so the type is enough. */
    return AP_OK;
  default:
    return ap_error(r->d, AP_ERR_INVALID, r->file, n->name, n->op_type,
                    "attribute '%s' has unknown type %d", ap->name, type);
  }
  if (count > MAX_COUNT)
    return attr_error(r, n, ap->name, "has too many values");
  out->n = (int)count;
  switch (type) {
  case AP_ATTR_FLOATS:
    if (!(out->floats = ap_arena_array(a, count + 1, sizeof *out->floats)))
      return nomem(r);
    if (count)
      memcpy(out->floats, ap->floats, count * sizeof *out->floats);
    return AP_OK;
  case AP_ATTR_INTS:
    if (!(out->ints = ap_arena_array(a, count + 1, sizeof *out->ints)))
      return nomem(r);
    if (count)
      memcpy(out->ints, ap->ints, count * sizeof *out->ints);
    return AP_OK;
  case AP_ATTR_STRINGS:
    if (!(out->strings = ap_arena_array(a, count + 1, sizeof *out->strings)))
      return nomem(r);
    for (size_t k = 0; k < count; k++)
      if (!(out->strings[k] = ap_arena_strndup(a, (const char *)ap->strings[k].data,
                                               ap->strings[k].len)))
        return nomem(r);
    return AP_OK;
  default: /* TENSORS */
    if (!(out->t = ap_arena_array(a, count + 1, sizeof *out->t)))
      return nomem(r);
    for (size_t k = 0; k < count; k++) {
      ap_status s = read_tensor_attr(r, n, ap->name, ap->tensors[k], &out->t[k]);
      if (s != AP_OK)
        return s;
    }
    return AP_OK;
  }
}

/* ---- nodes ---------------------------------------------------------------- */

/* Adds every node with its attributes and creates its outputs; inputs are
 * resolved afterwards, because nodes may appear in any order. */
static ap_status read_nodes(reader *r, const Onnx__GraphProto *gp) {
  ap_graph *g = r->g;
  if (gp->n_node > MAX_COUNT)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "too many nodes");
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    if (!np->op_type || !*np->op_type)
      return ap_error(r->d, AP_ERR_INVALID, r->file, np->name && *np->name ? np->name : NULL,
                      NULL, "node %zu has no op_type", i);
    if (np->n_input > MAX_COUNT || np->n_output > MAX_COUNT || np->n_attribute > MAX_COUNT)
      return ap_error(r->d, AP_ERR_INVALID, r->file, np->name, np->op_type,
                      "too many inputs, outputs or attributes");
  }
  const char **names = ap_arena_array(g->arena, gp->n_node + 1, sizeof *names);
  if (!names)
    return nomem(r);
  ap_status s = node_names(r, gp, names);
  if (s != AP_OK)
    return s;
  for (size_t i = 0; i < gp->n_node; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    int id = ap_graph_add_node(g, names[i], str_or_empty(np->domain), np->op_type,
                               (int)np->n_input, (int)np->n_output, (int)np->n_attribute);
    if (id < 0)
      return nomem(r);
    ap_node *n = &g->nodes[id];
    for (size_t k = 0; k < np->n_output; k++) {
      const char *name = np->output[k];
      if (!name || !*name)
        continue;
      int v = ap_graph_find(g, name);
      if (v >= 0) {
        const ap_value *val = &g->values[v];
        if (val->producer >= 0)
          return ap_error(r->d, AP_ERR_INVALID, r->file, n->name, n->op_type,
                          "output '%s' is already produced by node '%s'", name,
                          g->nodes[val->producer].name);
        return ap_error(r->d, AP_ERR_INVALID, r->file, n->name, n->op_type,
                        "output '%s' is already defined as %s", name,
                        val->kind == AP_VAL_WEIGHT ? "an initializer" : "a graph input");
      }
      if ((v = ap_graph_add_value(g, name, AP_VAL_NODE)) < 0)
        return nomem(r);
      g->values[v].producer = id;
      n->out[k] = v;
    }
    for (size_t k = 0; k < np->n_attribute; k++)
      if ((s = read_attr(r, n, np->attribute[k], &n->attr[k])) != AP_OK)
        return s;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const Onnx__NodeProto *np = gp->node[i];
    ap_node *n = &g->nodes[i];
    for (size_t k = 0; k < np->n_input; k++) {
      const char *name = np->input[k];
      if (!name || !*name)
        continue;
      if ((n->in[k] = ap_graph_find(g, name)) >= 0)
        continue;
      if (r->depth > 0) { /* a name of an enclosing graph, resolved when inlined */
        if ((n->in[k] = ap_graph_add_value(g, name, AP_VAL_INPUT)) < 0)
          return nomem(r);
        g->values[n->in[k]].outer = true;
      } else {
        return ap_error(r->d, AP_ERR_INVALID, r->file, n->name, n->op_type,
                        "input '%s' is not produced by any node, initializer or graph input",
                        name);
      }
    }
  }
  return AP_OK;
}

/* ---- outputs and value_info ----------------------------------------------- */

static ap_status read_outputs(reader *r, const Onnx__GraphProto *gp) {
  ap_graph *g = r->g;
  for (size_t i = 0; i < gp->n_output; i++) {
    const Onnx__ValueInfoProto *vi = gp->output[i];
    if (!vi->name || !*vi->name)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "graph output %zu has no name",
                      i);
    int v = ap_graph_find(g, vi->name);
    if (v < 0 && r->depth > 0) { /* a subgraph returning a name of an enclosing graph */
      if ((v = ap_graph_add_value(g, vi->name, AP_VAL_INPUT)) < 0)
        return nomem(r);
      g->values[v].outer = true;
    }
    if (v < 0)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                      "graph output '%s' is not produced by any node, initializer or graph input",
                      vi->name);
    if (g->values[v].is_graph_output)
      return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL,
                      "graph output '%s' is listed twice", vi->name);
    if (!ap_graph_add_output(g, v))
      return nomem(r);
    if (g->values[v].kind == AP_VAL_NODE) {
      ap_status s = apply_type(r, &g->values[v], vi->type, "graph output");
      if (s != AP_OK)
        return s;
    }
  }
  /* value_info only describes intermediate values; an entry naming nothing
   * in the graph is harmless and ignored, as ONNX tools do. */
  for (size_t i = 0; i < gp->n_value_info; i++) {
    const Onnx__ValueInfoProto *vi = gp->value_info[i];
    int v = vi->name ? ap_graph_find(g, vi->name) : -1;
    if (v < 0 || g->values[v].kind != AP_VAL_NODE || g->values[v].is_graph_output)
      continue;
    ap_status s = apply_type(r, &g->values[v], vi->type, "value_info");
    if (s != AP_OK)
      return s;
  }
  return AP_OK;
}

/* ---- subgraphs ------------------------------------------------------------ */

enum { MAX_SUBGRAPH_DEPTH = 8 };

/* A GRAPH attribute's graph, read like the model's (inputs, initializers,
 * nodes, outputs) into a graph in the same arena. Names it reads that it
 * does not define belong to an enclosing graph (ir/control.c resolves
 * them when it inlines the subgraph). */
static ap_status read_subgraph(reader *r, const ap_node *n, const Onnx__AttributeProto *ap,
                               ap_attr *out) {
  const Onnx__GraphProto *gp = ap->g;
  if (!gp)
    return attr_error(r, n, ap->name, "is of type GRAPH but holds no graph");
  if (r->depth >= MAX_SUBGRAPH_DEPTH)
    return attr_error(r, n, ap->name, "nests subgraphs too deeply");
  if (gp->n_input > MAX_COUNT || gp->n_output > MAX_COUNT || gp->n_initializer > MAX_COUNT)
    return attr_error(r, n, ap->name, "has too many graph entries");
  const ap_graph *outer = r->g;
  ap_graph *sub = ap_arena_alloc(outer->arena, sizeof *sub);
  if (!sub)
    return nomem(r);
  sub->arena = outer->arena;
  sub->path = outer->path;
  sub->name = ap_arena_strdup(outer->arena, str_or_empty(gp->name));
  sub->producer_name = outer->producer_name;
  sub->producer_version = outer->producer_version;
  sub->ir_version = outer->ir_version;
  sub->opset = outer->opset;
  sub->opsets = outer->opsets;
  sub->n_opsets = outer->n_opsets;
  if (!sub->name)
    return nomem(r);
  reader sr = *r;
  sr.g = sub;
  sr.depth = r->depth + 1;
  ap_status s;
  if ((s = read_inputs(&sr, gp)) != AP_OK || (s = read_initializers(&sr, gp)) != AP_OK ||
      (s = read_nodes(&sr, gp)) != AP_OK || (s = read_outputs(&sr, gp)) != AP_OK)
    return s;
  out->g = sub;
  return AP_OK;
}

/* ---- entry points --------------------------------------------------------- */

static ap_status convert(reader *r, const Onnx__ModelProto *m) {
  ap_status s = read_header(r, m);
  if (s != AP_OK)
    return s;
  const Onnx__GraphProto *gp = m->graph;
  if (!gp)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "the model has no graph");
  if (!(r->g->name = ap_arena_strdup(r->g->arena, str_or_empty(gp->name))))
    return nomem(r);
  if (gp->n_input > MAX_COUNT || gp->n_output > MAX_COUNT || gp->n_initializer > MAX_COUNT)
    return ap_error(r->d, AP_ERR_INVALID, r->file, NULL, NULL, "too many graph entries");
  if ((s = read_inputs(r, gp)) != AP_OK || (s = read_initializers(r, gp)) != AP_OK ||
      (s = read_nodes(r, gp)) != AP_OK || (s = read_outputs(r, gp)) != AP_OK)
    return s;
  return AP_OK;
}

/* path is the model's file (external data is resolved beside it), or NULL
 * for a buffer; file is the name used in diagnostics. */
static ap_status load(const uint8_t *data, size_t size, const char *path, const char *file,
                      ap_graph **out, ap_diag *d) {
  if (!ap_pb_nesting_ok(&onnx__model_proto__descriptor, data, size))
    return ap_error(d, AP_ERR_PARSE, file, NULL, NULL,
                    "protobuf messages nest deeper than %d levels", AP_PB_MAX_DEPTH);
  ap_pb_alloc pa;
  ap_pb_alloc_init(&pa);
  Onnx__ModelProto *m = onnx__model_proto__unpack(&pa.base, size, data);
  if (!m) {
    bool oom = pa.failed;
    ap_pb_alloc_release(&pa);
    return oom ? ap_error(d, AP_ERR_NOMEM, file, NULL, NULL, "out of memory")
               : ap_error(d, AP_ERR_PARSE, file, NULL, NULL,
                          "not an ONNX model: the protobuf is truncated or malformed");
  }
  ap_graph *g = ap_graph_new(file);
  ap_status s;
  if (!g) {
    s = ap_error(d, AP_ERR_NOMEM, file, NULL, NULL, "out of memory");
  } else {
    reader r = {.g = g, .d = d, .file = g->path};
    if (path && !(r.dir = ap_pb_dir_of(g->arena, path)))
      s = nomem(&r);
    else
      s = convert(&r, m);
  }
  onnx__model_proto__free_unpacked(m, &pa.base);
  ap_pb_alloc_release(&pa);
  if (s != AP_OK) {
    ap_graph_free(g);
    return s;
  }
  *out = g;
  return AP_OK;
}

ap_status ap_load_onnx(const char *path, ap_graph **out, ap_diag *diag) {
  if (!out || !path)
    return ap_error(diag, AP_ERR_USAGE, path, NULL, NULL,
                    "ap_load_onnx needs a path and a result");
  *out = NULL;
  uint8_t *data;
  size_t size;
  ap_status s = ap_pb_read_file(path, &data, &size, diag);
  if (s != AP_OK)
    return s;
  s = load(data, size, path, path, out, diag);
  ap_xfree(data);
  return s;
}

ap_status ap_load_onnx_buffer(const void *data, size_t size, const char *name, ap_graph **out,
                              ap_diag *diag) {
  if (!out || (!data && size))
    return ap_error(diag, AP_ERR_USAGE, name, NULL, NULL,
                    "ap_load_onnx_buffer needs the data and a result");
  *out = NULL;
  return load(data, size, NULL, name ? name : "<buffer>", out, diag);
}
