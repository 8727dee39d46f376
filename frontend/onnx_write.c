/* The ONNX writer: ap_graph -> ModelProto -> file. The protobuf messages are
 * built in a scratch arena (bulk tensor data is pointed to, not copied),
 * packed once, and written through a temporary file and a rename. */
#include <string.h>

#include "onnx.pb-c.h"
#include "onnx_multidevice.pb-c.h"

#include "frontend/frontend.h"

typedef struct writer {
  const ap_graph *g;
  ap_arena *a;       /* every message and copy; freed at once */
  ap_diag *d;
  const char *path;  /* the file being written, for diagnostics */
  bool *live_out;    /* per value: produced by a node that is not dead */
} writer;

static ap_status nomem(writer *w) {
  return ap_error(w->d, AP_ERR_NOMEM, w->path, NULL, NULL, "out of memory");
}

/* Allocates and initialises one message in the scratch arena. */
static void *new_msg(writer *w, size_t size, void (*init)(void *)) {
  void *m = ap_arena_alloc(w->a, size);
  if (m)
    init(m);
  return m;
}

static void init_node(void *m) { onnx__node_proto__init(m); }
static void init_attr(void *m) { onnx__attribute_proto__init(m); }
static void init_tensor(void *m) { onnx__tensor_proto__init(m); }
static void init_value_info(void *m) { onnx__value_info_proto__init(m); }
static void init_type(void *m) { onnx__type_proto__init(m); }
static void init_type_tensor(void *m) { onnx__type_proto__tensor__init(m); }
static void init_shape(void *m) { onnx__tensor_shape_proto__init(m); }
static void init_dim(void *m) { onnx__tensor_shape_proto__dimension__init(m); }
static void init_opset(void *m) { onnx__operator_set_id_proto__init(m); }

static char *copy_str(writer *w, const char *s) { return ap_arena_strdup(w->a, s ? s : ""); }

/* ---- values --------------------------------------------------------------- */

static ap_status value_info(writer *w, const ap_value *v, Onnx__ValueInfoProto **out) {
  if (v->non_tensor)
    return ap_error(w->d, AP_ERR_UNSUPPORTED, w->path, NULL, NULL,
                    "value '%s' is of %s type, which accpar does not keep and cannot write",
                    v->name, v->non_tensor);
  Onnx__ValueInfoProto *vi = new_msg(w, sizeof *vi, init_value_info);
  if (!vi || !(vi->name = copy_str(w, v->name)))
    return nomem(w);
  *out = vi;
  /* An element type of 0 is not a valid ONNX type: leave the type out. */
  if (v->dtype == AP_DT_UNDEFINED)
    return AP_OK;
  Onnx__TypeProto *tp = new_msg(w, sizeof *tp, init_type);
  Onnx__TypeProto__Tensor *tt = new_msg(w, sizeof *tt, init_type_tensor);
  if (!tp || !tt)
    return nomem(w);
  vi->type = tp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = (int32_t)v->dtype;
  if (v->rank < 0)
    return AP_OK;
  Onnx__TensorShapeProto *sh = new_msg(w, sizeof *sh, init_shape);
  if (!sh || !(sh->dim = ap_arena_array(w->a, (size_t)v->rank + 1, sizeof *sh->dim)))
    return nomem(w);
  tt->shape = sh;
  sh->n_dim = (size_t)v->rank;
  for (int i = 0; i < v->rank; i++) {
    Onnx__TensorShapeProto__Dimension *dim = new_msg(w, sizeof *dim, init_dim);
    if (!dim)
      return nomem(w);
    if (v->dims[i] >= 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = v->dims[i];
    } else if (v->sym[i]) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      if (!(dim->dim_param = copy_str(w, v->sym[i])))
        return nomem(w);
    }
    sh->dim[i] = dim;
  }
  return AP_OK;
}

/* Initializers: every constant that no live node produces: the model's
 * weights and whatever folding turned into a constant. */
static bool is_initializer(const writer *w, int v) {
  const ap_value *val = &w->g->values[v];
  return val->data && (val->kind == AP_VAL_WEIGHT || val->kind == AP_VAL_CONST) &&
         !w->live_out[v];
}

static ap_status tensor_msg(writer *w, const ap_tensor *t, const char *name,
                            Onnx__TensorProto **out) {
  Onnx__TensorProto *tp = new_msg(w, sizeof *tp, init_tensor);
  if (!tp || !ap_tensor_to_pb(t, name, w->a, tp))
    return nomem(w);
  *out = tp;
  return AP_OK;
}

/* ---- nodes ---------------------------------------------------------------- */

/* Appends attrs to np. A node's own attributes go through here; the
 * partition plan (ap_node.types) is meant to be written through this same
 * function as ap_attr records once `accparc export` fixes its encoding, so
 * plan attributes and model attributes are serialized by one code path. */
static ap_status append_attrs(writer *w, const ap_node *n, Onnx__NodeProto *np,
                              const ap_attr *attrs, int count) {
  if (count <= 0)
    return AP_OK;
  Onnx__AttributeProto **all =
      ap_arena_array(w->a, np->n_attribute + (size_t)count, sizeof *all);
  if (!all)
    return nomem(w);
  if (np->n_attribute)
    memcpy(all, np->attribute, np->n_attribute * sizeof *all);
  for (int i = 0; i < count; i++) {
    const ap_attr *at = &attrs[i];
    Onnx__AttributeProto *ap = new_msg(w, sizeof *ap, init_attr);
    if (!ap || !(ap->name = copy_str(w, at->name)))
      return nomem(w);
    ap->has_type = 1;
    ap->type = (Onnx__AttributeProto__AttributeType)at->type;
    size_t cnt = at->n > 0 ? (size_t)at->n : 0;
    switch (at->type) {
    case AP_ATTR_FLOAT:
      ap->has_f = 1;
      ap->f = at->f;
      break;
    case AP_ATTR_INT:
      ap->has_i = 1;
      ap->i = at->i;
      break;
    case AP_ATTR_STRING: {
      uint8_t *s = ap_arena_alloc(w->a, at->s_len + 1);
      if (!s)
        return nomem(w);
      if (at->s_len)
        memcpy(s, at->s, at->s_len);
      ap->has_s = 1;
      ap->s.len = at->s_len;
      ap->s.data = s;
      break;
    }
    case AP_ATTR_TENSOR: {
      ap_status s = tensor_msg(w, at->t, "", &ap->t);
      if (s != AP_OK)
        return s;
      break;
    }
    case AP_ATTR_FLOATS:
      ap->n_floats = cnt;
      ap->floats = at->floats;
      break;
    case AP_ATTR_INTS:
      ap->n_ints = cnt;
      ap->ints = at->ints;
      break;
    case AP_ATTR_STRINGS:
      if (!(ap->strings = ap_arena_array(w->a, cnt + 1, sizeof *ap->strings)))
        return nomem(w);
      ap->n_strings = cnt;
      for (size_t k = 0; k < cnt; k++) {
        char *s = copy_str(w, at->strings[k]);
        if (!s)
          return nomem(w);
        ap->strings[k].len = strlen(s);
        ap->strings[k].data = (uint8_t *)s;
      }
      break;
    case AP_ATTR_TENSORS:
      if (!(ap->tensors = ap_arena_array(w->a, cnt + 1, sizeof *ap->tensors)))
        return nomem(w);
      ap->n_tensors = cnt;
      for (size_t k = 0; k < cnt; k++) {
        ap_status s = tensor_msg(w, &at->t[k], "", &ap->tensors[k]);
        if (s != AP_OK)
          return s;
      }
      break;
    default:
      /* The reader keeps graphs, sparse tensors and type protos by type only. */
      return ap_error(w->d, AP_ERR_UNSUPPORTED, w->path, n->name, n->op_type,
                      "attribute '%s' of type %d (a graph, sparse tensor or type) is not kept "
                      "by accpar and cannot be written",
                      at->name, (int)at->type);
    }
    all[np->n_attribute + (size_t)i] = ap;
  }
  np->attribute = all;
  np->n_attribute += (size_t)count;
  return AP_OK;
}

static ap_status value_names(writer *w, const int *ids, int count, char ***out) {
  char **names = ap_arena_array(w->a, (size_t)count + 1, sizeof *names);
  if (!names)
    return nomem(w);
  for (int i = 0; i < count; i++)
    if (!(names[i] = copy_str(w, ids[i] >= 0 ? w->g->values[ids[i]].name : "")))
      return nomem(w);
  *out = names;
  return AP_OK;
}

static ap_status node_msg(writer *w, const ap_node *n, Onnx__NodeProto **out) {
  Onnx__NodeProto *np = new_msg(w, sizeof *np, init_node);
  if (!np || !(np->name = copy_str(w, n->name)) || !(np->op_type = copy_str(w, n->op_type)) ||
      !(np->domain = copy_str(w, n->domain)))
    return nomem(w);
  ap_status s;
  if ((s = value_names(w, n->in, n->n_in, &np->input)) != AP_OK ||
      (s = value_names(w, n->out, n->n_out, &np->output)) != AP_OK)
    return s;
  np->n_input = (size_t)n->n_in;
  np->n_output = (size_t)n->n_out;
  if ((s = append_attrs(w, n, np, n->attr, n->n_attr)) != AP_OK)
    return s;
  *out = np;
  return AP_OK;
}

/* ---- multi-device annotations (IR version 11) -------------------------------
 *
 * The system's onnx.proto predates them: each message is packed with the
 * project's schema (onnx_multidevice.proto) and attached to its parent as a
 * field the parent's schema does not know, which protobuf-c writes as is. */

enum { FIELD_NODE_DEVICE_CONFIGURATIONS = 10, FIELD_MODEL_CONFIGURATION = 26 };

/* Appends the packed message m to base's fields as field number tag.
 * protobuf-c writes an unknown field as its tag followed by its data, so a
 * length-delimited field's data starts with the length (a varint), as
 * protobuf-c's own parser keeps it. */
static ap_status attach(writer *w, ProtobufCMessage *base, uint32_t tag,
                        const ProtobufCMessage *m) {
  size_t body = protobuf_c_message_get_packed_size(m), prefix = 0;
  uint8_t varint[10];
  for (size_t v = body;; v >>= 7) {
    varint[prefix++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
    if (v < 0x80)
      break;
  }
  size_t len = prefix + body;
  uint8_t *data = ap_arena_alloc(w->a, len);
  ProtobufCMessageUnknownField *f =
      ap_arena_array(w->a, base->n_unknown_fields + 1, sizeof *f);
  if (!data || !f)
    return nomem(w);
  memcpy(data, varint, prefix);
  protobuf_c_message_pack(m, data + prefix);
  if (base->n_unknown_fields)
    memcpy(f, base->unknown_fields, base->n_unknown_fields * sizeof *f);
  f[base->n_unknown_fields] = (ProtobufCMessageUnknownField){
      .tag = tag, .wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED, .len = len, .data = data};
  base->unknown_fields = f;
  base->n_unknown_fields++;
  return AP_OK;
}

static ap_status sharding_msg(writer *w, const ap_shard_spec *sp,
                              Accpar__Onnx11__ShardingSpecProto **out) {
  Accpar__Onnx11__ShardingSpecProto *m = ap_arena_alloc(w->a, sizeof *m);
  if (!m)
    return nomem(w);
  accpar__onnx11__sharding_spec_proto__init(m);
  m->tensor_name = copy_str(w, sp->tensor);
  m->device = sp->device;
  m->n_device = (size_t)sp->n_device;
  m->index_to_device_group_map =
      ap_arena_array(w->a, (size_t)sp->n_groups + 1, sizeof *m->index_to_device_group_map);
  m->sharded_dim = ap_arena_array(w->a, (size_t)sp->n_dims + 1, sizeof *m->sharded_dim);
  if (!m->tensor_name || !m->index_to_device_group_map || !m->sharded_dim)
    return nomem(w);
  for (int i = 0; i < sp->n_groups; i++) {
    Accpar__Onnx11__IntIntListEntryProto *e = ap_arena_alloc(w->a, sizeof *e);
    if (!e)
      return nomem(w);
    accpar__onnx11__int_int_list_entry_proto__init(e);
    e->has_key = 1;
    e->key = sp->groups[i].key;
    e->value = sp->groups[i].devices;
    e->n_value = (size_t)sp->groups[i].n;
    m->index_to_device_group_map[m->n_index_to_device_group_map++] = e;
  }
  for (int i = 0; i < sp->n_dims; i++) {
    Accpar__Onnx11__ShardedDimProto *sd = ap_arena_alloc(w->a, sizeof *sd);
    Accpar__Onnx11__SimpleShardedDimProto *ss = ap_arena_alloc(w->a, sizeof *ss);
    Accpar__Onnx11__SimpleShardedDimProto **list = ap_arena_alloc(w->a, sizeof *list);
    if (!sd || !ss || !list)
      return nomem(w);
    accpar__onnx11__sharded_dim_proto__init(sd);
    accpar__onnx11__simple_sharded_dim_proto__init(ss);
    sd->has_axis = 1;
    sd->axis = sp->dims[i].axis;
    ss->dim_case = ACCPAR__ONNX11__SIMPLE_SHARDED_DIM_PROTO__DIM_DIM_VALUE;
    ss->dim_value = sp->dims[i].dim_value;
    ss->has_num_shards = 1;
    ss->num_shards = sp->dims[i].num_shards;
    list[0] = ss;
    sd->simple_sharding = list;
    sd->n_simple_sharding = 1;
    m->sharded_dim[m->n_sharded_dim++] = sd;
  }
  *out = m;
  return AP_OK;
}

/* NodeProto.device_configurations of node n under g's configuration. */
static ap_status node_devconf(writer *w, int n, Onnx__NodeProto *np) {
  const ap_devconf *dc = w->g->devconf;
  if (!dc || dc->n_specs[n] == 0)
    return AP_OK;
  Accpar__Onnx11__NodeDeviceConfigurationProto m;
  accpar__onnx11__node_device_configuration_proto__init(&m);
  m.configuration_id = copy_str(w, dc->name);
  m.sharding_spec = ap_arena_array(w->a, (size_t)dc->n_specs[n], sizeof *m.sharding_spec);
  if (!m.configuration_id || !m.sharding_spec)
    return nomem(w);
  for (int i = 0; i < dc->n_specs[n]; i++) {
    ap_status s = sharding_msg(w, &dc->specs[n][i], &m.sharding_spec[i]);
    if (s != AP_OK)
      return s;
  }
  m.n_sharding_spec = (size_t)dc->n_specs[n];
  return attach(w, &np->base, FIELD_NODE_DEVICE_CONFIGURATIONS, &m.base);
}

/* ModelProto.configuration: the array the annotations refer to. */
static ap_status model_devconf(writer *w, Onnx__ModelProto *mp) {
  const ap_devconf *dc = w->g->devconf;
  Accpar__Onnx11__DeviceConfigurationProto m;
  accpar__onnx11__device_configuration_proto__init(&m);
  m.name = copy_str(w, dc->name);
  m.has_num_devices = 1;
  m.num_devices = dc->n_devices;
  m.device = ap_arena_array(w->a, (size_t)dc->n_devices + 1, sizeof *m.device);
  if (!m.name || !m.device)
    return nomem(w);
  for (int i = 0; i < dc->n_devices; i++)
    if (!(m.device[i] = copy_str(w, dc->devices[i])))
      return nomem(w);
  m.n_device = (size_t)dc->n_devices;
  return attach(w, &mp->base, FIELD_MODEL_CONFIGURATION, &m.base);
}

/* ---- the model ------------------------------------------------------------ */

static ap_status build_graph(writer *w, Onnx__GraphProto *gp) {
  const ap_graph *g = w->g;
  ap_status s;
  int live = 0;
  for (int i = 0; i < g->n_nodes; i++)
    live += !g->nodes[i].dead;
  gp->node = ap_arena_array(w->a, (size_t)live + 1, sizeof *gp->node);
  gp->input = ap_arena_array(w->a, (size_t)g->n_inputs + 1, sizeof *gp->input);
  gp->output = ap_arena_array(w->a, (size_t)g->n_outputs + 1, sizeof *gp->output);
  gp->initializer = ap_arena_array(w->a, (size_t)g->n_values + 1, sizeof *gp->initializer);
  gp->value_info = ap_arena_array(w->a, (size_t)g->n_values + 1, sizeof *gp->value_info);
  if (!gp->node || !gp->input || !gp->output || !gp->initializer || !gp->value_info ||
      !(gp->name = copy_str(w, *g->name ? g->name : "accpar")))
    return nomem(w);
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].dead)
      continue;
    if ((s = node_msg(w, &g->nodes[i], &gp->node[gp->n_node])) != AP_OK ||
        (s = node_devconf(w, i, gp->node[gp->n_node])) != AP_OK)
      return s;
    gp->n_node++;
  }
  for (int v = 0; v < g->n_values; v++) {
    const ap_value *val = &g->values[v];
    if (is_initializer(w, v)) {
      ap_tensor t = ap_value_tensor(val);
      if ((s = tensor_msg(w, &t, val->name, &gp->initializer[gp->n_initializer])) != AP_OK)
        return s;
      gp->n_initializer++;
    } else if (w->live_out[v] && !val->is_graph_output && val->dtype != AP_DT_UNDEFINED &&
               !val->non_tensor) {
      if ((s = value_info(w, val, &gp->value_info[gp->n_value_info])) != AP_OK)
        return s;
      gp->n_value_info++;
    }
  }
  for (int i = 0; i < g->n_inputs; i++, gp->n_input++)
    if ((s = value_info(w, &g->values[g->inputs[i]], &gp->input[i])) != AP_OK)
      return s;
  for (int i = 0; i < g->n_outputs; i++, gp->n_output++)
    if ((s = value_info(w, &g->values[g->outputs[i]], &gp->output[i])) != AP_OK)
      return s;
  return AP_OK;
}

static ap_status build_model(writer *w, Onnx__ModelProto *m, Onnx__GraphProto *gp) {
  const ap_graph *g = w->g;
  if (!(w->live_out = ap_arena_array(w->a, (size_t)g->n_values + 1, sizeof *w->live_out)))
    return nomem(w);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_out; k++)
      if (g->nodes[i].out[k] >= 0)
        w->live_out[g->nodes[i].out[k]] = true;

  /* IR version 3 requires every initializer to be a graph input; constants
   * made by folding are not, so such a graph is written as version 4. */
  int64_t ir = g->ir_version < 3 ? 3 : g->ir_version;
  for (int v = 0; ir < 4 && v < g->n_values; v++)
    if (is_initializer(w, v) && !g->values[v].is_graph_input)
      ir = 4;
  /* The multi-device annotations came with IR version 11. */
  if (g->devconf && ir < 11)
    ir = 11;
  m->has_ir_version = 1;
  m->ir_version = ir;
  if (!(m->producer_name = copy_str(w, "accpar")) ||
      !(m->producer_version = copy_str(w, ap_version())))
    return nomem(w);
  m->opset_import = ap_arena_array(w->a, (size_t)g->n_opsets + 1, sizeof *m->opset_import);
  if (!m->opset_import)
    return nomem(w);
  for (int i = 0; i < g->n_opsets; i++) {
    Onnx__OperatorSetIdProto *os = new_msg(w, sizeof *os, init_opset);
    if (!os || !(os->domain = copy_str(w, g->opsets[i].domain)))
      return nomem(w);
    os->has_version = 1;
    os->version = g->opsets[i].version;
    m->opset_import[m->n_opset_import++] = os;
  }
  if (g->n_meta) {
    m->metadata_props = ap_arena_array(w->a, (size_t)g->n_meta, sizeof *m->metadata_props);
    if (!m->metadata_props)
      return nomem(w);
    for (int i = 0; i < g->n_meta; i++) {
      Onnx__StringStringEntryProto *e = ap_arena_alloc(w->a, sizeof *e);
      if (!e)
        return nomem(w);
      onnx__string_string_entry_proto__init(e);
      if (!(e->key = copy_str(w, g->meta_keys[i])) || !(e->value = copy_str(w, g->meta_values[i])))
        return nomem(w);
      m->metadata_props[m->n_metadata_props++] = e;
    }
  }
  m->graph = gp;
  ap_status s = build_graph(w, gp);
  if (s == AP_OK && g->devconf)
    s = model_devconf(w, m);
  return s;
}

ap_status ap_write_onnx(const ap_graph *g, const char *path, ap_diag *diag) {
  if (!g || !path)
    return ap_error(diag, AP_ERR_USAGE, path, NULL, NULL, "ap_write_onnx needs a graph and a path");
  writer w = {.g = g, .d = diag, .path = path, .a = ap_arena_new()};
  if (!w.a)
    return nomem(&w);
  Onnx__ModelProto m;
  Onnx__GraphProto gp;
  onnx__model_proto__init(&m);
  onnx__graph_proto__init(&gp);
  ap_status s = build_model(&w, &m, &gp);
  if (s == AP_OK) {
    size_t size = onnx__model_proto__get_packed_size(&m);
    /* protobuf parsers refuse messages of 2 GiB or more. */
    if (size >= (size_t)INT32_MAX) {
      s = ap_error(diag, AP_ERR_UNSUPPORTED, path, NULL, NULL,
                   "the model would take %zu bytes, beyond protobuf's 2 GiB limit", size);
    } else {
      uint8_t *buf = ap_xrealloc(NULL, size);
      if (!buf) {
        s = nomem(&w);
      } else {
        onnx__model_proto__pack(&m, buf);
        s = ap_pb_write_file(path, buf, size, diag);
        ap_xfree(buf);
      }
    }
  }
  ap_arena_free(w.a);
  return s;
}
