/* The C backend's program structure: for every device, which boxes of which
 * values it holds where (run-time inputs, the constant blob, its activation
 * arena planned from last use), the steps it runs in node order (kernel
 * calls, local slices, the transfers and partial-sum reductions of the
 * distribution, passes/distribute.h), one kernel per distinct (operator,
 * attributes, dtypes, box sizes) shared by all devices, and the program
 * description the runtime's main runs. Per-operator kernels come from the
 * c_*.c files. */
#define _XOPEN_SOURCE 700
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/train.h"
#include "passes/distribute.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"

static const cg_emit_fn emitters[AP_OP_COUNT] = {
#define OP(id, ...) [AP_OP_##id] = cg_emit_##id,
#include "ir/ops.def"
#undef OP
};


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

/* ---- what a device holds ------------------------------------------------- */

/* Every device computes its box of every value (passes/distribute.h): on
 * one device the whole tensor. A slot is one box of one value a device
 * holds, with its storage; a value can have several (its computed box, the
 * boxes transfers or local slices make of it for its readers). */
typedef enum storage {
  ST_INPUT,  /* a run-time input, whole: the runtime's copy of input_N.pb */
  ST_CONST,  /* in the constant blob (weights.bin) */
  ST_ARENA,  /* in the device's activation arena */
  ST_ALIAS   /* the storage of another slot (Reshape, Identity...) */
} storage;

typedef struct slot {
  int value;
  ap_dbox box;       /* of the value's index space; the slot holds it dense, row-major */
  storage st;
  int64_t bytes;
  int64_t offset;    /* into the blob or the arena; -1 while not placed */
  int input_index;   /* ST_INPUT: program input */
  int alias_of;      /* ST_ALIAS: the slot whose storage this is */
  int last_use;      /* the last step reading or writing it (or an alias of it) */
} slot;

/* A constant as some device reads it: a box of an initializer or folded
 * value, sliced at compile time; the blob holds each (value, box) once. */
typedef struct const_box {
  int value;
  ap_dbox box;
  ap_value *view;    /* the box as a value of its own (dims = box sizes, data) */
  int64_t offset;    /* into the blob; -1 while no kernel reads it */
} const_box;

typedef enum step_kind {
  SK_CALL,      /* a kernel: args are the slots passed, the last n_write written */
  SK_PACK,      /* a local slice: args[0]'s box into args[1] */
  SK_XFER,      /* box exchange: args[0] (held) into args[1] (needed) */
  SK_ALLREDUCE, /* partial sums of args[0], in place */
  SK_REDUCE,    /* partial sums of args[0] through the staging slot args[1] */
  SK_ZERO       /* args[0] = 0: a partial sum over an empty share of the contraction */
} step_kind;

typedef struct step {
  step_kind kind;
  int node;
  int kernel;                        /* SK_CALL */
  int n_args, n_write;
  int args[2 * CG_MAX_OPERANDS + 1]; /* slots */
  bool work;
  const ap_dxfer *xfer;              /* SK_XFER, SK_ALLREDUCE, SK_REDUCE */
  int tag;
} step;

typedef struct device {
  int dev;
  slot *slots;
  int n_slots, cap_slots;
  step *steps;
  int n_steps, cap_steps;
  int *held;          /* per value: the slot of the box it computes; -1 */
  int *input_slot;    /* per program input: its whole slot; -1 */
  int64_t arena_bytes, unshared_bytes;
} device;

typedef struct gen {
  ap_graph *g;
  ap_diag *d;
  const ap_dist *dist;
  int n_dev;
  cg_kernel_set kernels;
  const_box *consts;
  int n_consts, cap_consts;
  int64_t blob_bytes;
  bool needs_kernels_lib;
  cg_kernel *kernel;  /* the node being emitted */
  int *order;         /* node ids in the order every device runs them */
  int n_order;
  int *prog_inputs;   /* value ids of the program's inputs */
  int n_prog_inputs;
  int *input_index;   /* per value: its program input, or -1 */
  device *dv;         /* the device being generated */
  int n_tags;         /* transfers so far: the next one's tag */
} gen;

static ap_status oom(gen *G) { return cg_oom(G->g, G->d); }

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

static int64_t box_bytes(const ap_value *v, const ap_dbox *b) {
  return ap_dbox_volume(v->rank, b) * (int64_t)ap_dtype_size(v->dtype);
}

static ap_dbox whole(const ap_value *v) {
  ap_dbox b;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < v->rank; i++)
    b.hi[i] = v->dims[i];
  return b;
}

static const ap_dbox *dist_in(const gen *G, int node, int i) {
  return &G->dist->node[node].in[i * G->n_dev + G->dv->dev];
}

static const ap_dbox *dist_out(const gen *G, int node, int o) {
  return &G->dist->node[node].out[o * G->n_dev + G->dv->dev];
}

/* Program inputs: graph inputs that are not initializers, in graph order. */
static ap_status plan_inputs(gen *G) {
  ap_graph *g = G->g;
  G->prog_inputs = ap_arena_array(g->arena, (size_t)g->n_inputs + 1, sizeof *G->prog_inputs);
  G->input_index = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *G->input_index);
  if (!G->prog_inputs || !G->input_index)
    return oom(G);
  for (int v = 0; v < g->n_values; v++)
    G->input_index[v] = -1;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    ap_value *val = &g->values[v];
    if (val->kind == AP_VAL_WEIGHT)
      continue;
    ap_status s = check_value(G, NULL, val);
    if (s != AP_OK)
      return s;
    G->input_index[v] = G->n_prog_inputs;
    G->prog_inputs[G->n_prog_inputs++] = v;
  }
  return AP_OK;
}

/* ---- constants, sliced ----------------------------------------------------- */

/* The constant box b of value v (registered once). */
static int const_box_of(gen *G, int v, const ap_dbox *b) {
  ap_graph *g = G->g;
  const ap_value *val = &g->values[v];
  for (int i = 0; i < G->n_consts; i++)
    if (G->consts[i].value == v && ap_dbox_equal(val->rank, &G->consts[i].box, b))
      return i;
  if (!ap_arena_grow(g->arena, (void **)&G->consts, &G->cap_consts, G->n_consts + 1,
                     sizeof *G->consts))
    return -1;
  const_box *c = &G->consts[G->n_consts];
  c->value = v;
  c->box = *b;
  c->offset = -1;
  c->view = (ap_value *)cg_const_view(g, v, b);
  if (!c->view)
    return -1;
  return G->n_consts++;
}

static void place_const(gen *G, int ci) {
  const_box *c = &G->consts[ci];
  if (c->offset >= 0)
    return;
  c->offset = G->blob_bytes;
  G->blob_bytes = cg_align_up(G->blob_bytes + box_bytes(&G->g->values[c->value], &c->box));
}

/* ---- slots and steps of the device being generated ------------------------- */

static int new_slot(gen *G, int v, const ap_dbox *b, storage st) {
  device *D = G->dv;
  if (!ap_arena_grow(G->g->arena, (void **)&D->slots, &D->cap_slots, D->n_slots + 1,
                     sizeof *D->slots))
    return -1;
  slot *s = &D->slots[D->n_slots];
  memset(s, 0, sizeof *s);
  s->value = v;
  s->box = *b;
  s->st = st;
  s->bytes = v >= 0 ? box_bytes(&G->g->values[v], b) : 0;
  s->offset = -1;
  s->input_index = -1;
  s->alias_of = -1;
  s->last_use = -1;
  return D->n_slots++;
}

static step *new_step(gen *G, step_kind kind, int node) {
  device *D = G->dv;
  if (!ap_arena_grow(G->g->arena, (void **)&D->steps, &D->cap_steps, D->n_steps + 1,
                     sizeof *D->steps))
    return NULL;
  step *s = &D->steps[D->n_steps++];
  memset(s, 0, sizeof *s);
  s->kind = kind;
  s->node = node;
  return s;
}

static int root_slot(const device *D, int s) {
  while (D->slots[s].st == ST_ALIAS)
    s = D->slots[s].alias_of;
  return s;
}

/* The slot of the run-time input v, whole. */
static int input_slot(gen *G, int v) {
  device *D = G->dv;
  int i = G->input_index[v];
  if (D->input_slot[i] < 0) {
    ap_dbox w = whole(&G->g->values[v]);
    int s = new_slot(G, v, &w, ST_INPUT);
    if (s < 0)
      return -1;
    D->slots[s].input_index = i;
    D->input_slot[i] = s;
  }
  return D->input_slot[i];
}

/* A new slot holding box b of what slot src holds, copied locally. */
static int pack_slot(gen *G, int node, int src, const ap_dbox *b) {
  int s = new_slot(G, G->dv->slots[src].value, b, ST_ARENA);
  step *st = s >= 0 ? new_step(G, SK_PACK, node) : NULL;
  if (!st)
    return -1;
  st->n_args = 2;
  st->n_write = 1;
  st->args[0] = src;
  st->args[1] = s;
  return s;
}

/* The slot input i of node ni reads on this device, after its transfer (if
 * any) ran. Constants are sliced at compile time, run-time inputs sliced
 * from the whole tensor every device reads. */
static int operand_slot(gen *G, int ni, int i, int transferred) {
  ap_graph *g = G->g;
  int v = g->nodes[ni].in[i];
  const ap_value *val = &g->values[v];
  const ap_dbox *b = dist_in(G, ni, i);
  if (transferred >= 0)
    return transferred;
  if (val->data) {
    int ci = const_box_of(G, v, b);
    if (ci < 0)
      return -1;
    place_const(G, ci);
    int s = new_slot(G, v, b, ST_CONST);
    if (s >= 0)
      G->dv->slots[s].offset = G->consts[ci].offset;
    return s;
  }
  int src = G->input_index[v] >= 0 && val->producer < 0 ? input_slot(G, v) : G->dv->held[v];
  if (src < 0)
    return -1;
  if (ap_dbox_equal(val->rank, &G->dv->slots[src].box, b))
    return src;
  return pack_slot(G, ni, src, b);
}

/* ---- emitting one node on one device --------------------------------------- */

/* Adds the bias a partial layer left out, once its partial sums are
 * resolved: per channel (Conv, ConvTranspose) or Gemm's beta * C
 * broadcast. Adding it after the sum rather than in one summand keeps it
 * right whichever devices hold an empty share of the contraction. */
static ap_status emit_bias(gen *G, int ni, int bias_slot, int out_slot, int transferred) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  device *D = G->dv;
  const ap_value *y = &g->values[n->out[0]], *bv = &g->values[n->in[bias_slot]];
  const ap_dbox *bb = dist_in(G, ni, bias_slot);
  if (bv->data) {
    int ci = const_box_of(G, n->in[bias_slot], bb);
    if (ci < 0)
      return oom(G);
    bv = G->consts[ci].view;
  }
  int ki = cg_bias_kernel(g, G->d, &G->kernels, G->kernel, n, y, &D->slots[out_slot].box, bv, bb);
  int src = ki >= 0 ? operand_slot(G, ni, bias_slot, transferred) : -1;
  step *st = src >= 0 ? new_step(G, SK_CALL, ni) : NULL;
  if (!st)
    return oom(G);
  st->kernel = ki;
  st->n_args = 2;
  st->n_write = 1;
  st->args[0] = src;
  st->args[1] = out_slot;
  return AP_OK;
}

static ap_status emit_node(gen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  const ap_dnode *dn = &G->dist->node[ni];
  device *D = G->dv;
  bool all_const = true;
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && !g->values[n->out[i]].data)
      all_const = false;
  if (all_const)
    return AP_OK; /* folded: its outputs are constants in the blob */
  if (n->n_in > CG_MAX_OPERANDS || n->n_out > CG_MAX_OPERANDS)
    return ap_error(G->d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                    "more than %d inputs or outputs", CG_MAX_OPERANDS);
  for (int i = 0; i < n->n_in; i++) {
    const ap_value *v = ap_node_in(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
  }
  for (int i = 0; i < n->n_out; i++) {
    const ap_value *v = ap_node_out(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
  }
  /* Transfers first: every device takes part in every one, in node order. */
  int transferred[CG_MAX_OPERANDS];
  for (int i = 0; i < n->n_in; i++) {
    transferred[i] = -1;
    const ap_dxfer *t = dn->xfer_in ? dn->xfer_in[i] : NULL;
    if (!t)
      continue;
    int v = n->in[i];
    int dst = new_slot(G, v, dist_in(G, ni, i), ST_ARENA);
    step *st = dst >= 0 ? new_step(G, SK_XFER, ni) : NULL;
    if (!st)
      return oom(G);
    st->n_args = 2;
    st->n_write = 1;
    st->args[0] = D->held[v];
    st->args[1] = dst;
    st->xfer = t;
    st->tag = G->n_tags++ % (APRT_TAG_MAX + 1);
    transferred[i] = dst;
  }
  bool partial = dn->reduce != NULL;
  /* A device whose boxes of every output are empty (a share of 0) has
   * nothing to compute; a partial sum over an empty share of the
   * contraction is zero. */
  bool empty_out = true, empty_in = false;
  for (int o = 0; o < n->n_out; o++)
    if (n->out[o] >= 0 && ap_dbox_volume(g->values[n->out[o]].rank, dist_out(G, ni, o)) > 0)
      empty_out = false;
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0 && i != dn->bias_slot &&
        ap_dbox_volume(g->values[n->in[i]].rank, dist_in(G, ni, i)) == 0 &&
        ap_numel(g->values[n->in[i]].rank, g->values[n->in[i]].dims) > 0)
      empty_in = true;
  if (G->n_dev > 1 && (empty_out || (partial && empty_in))) {
    for (int o = 0; o < n->n_out; o++)
      if (n->out[o] >= 0) {
        int s = new_slot(G, n->out[o], dist_out(G, ni, o), ST_ARENA);
        if (s < 0)
          return oom(G);
        D->held[n->out[o]] = s;
        if (!empty_out) {
          step *st = new_step(G, SK_ZERO, ni);
          if (!st)
            return oom(G);
          st->n_args = st->n_write = 1;
          st->args[0] = s;
        }
      }
  } else {
    cg_kernel *k = G->kernel; /* one per compilation: it is large */
    memset(k, 0, sizeof *k);
    k->g = g;
    k->n = n;
    k->d = G->d;
    k->n_in = n->n_in;
    k->n_out = n->n_out;
    k->alias_in = -1;
    for (int i = 0; i < n->n_in; i++) {
      if (n->in[i] < 0 || (partial && i == dn->bias_slot))
        continue;
      const ap_value *v = &g->values[n->in[i]];
      const ap_dbox *b = dist_in(G, ni, i);
      if (v->data) {
        int ci = const_box_of(G, n->in[i], b);
        if (ci < 0)
          return oom(G);
        v = G->consts[ci].view;
      }
      cg_operand_of(v, b, &k->in[i]);
    }
    for (int i = 0; i < n->n_out; i++)
      if (n->out[i] >= 0)
        cg_operand_of(&g->values[n->out[i]], dist_out(G, ni, i), &k->out[i]);
    cg_text body;
    if (!cg_text_open(&body))
      return oom(G);
    k->body = body.f;
    ap_status s = emitters[n->op](k);
    bool ok = cg_text_close(&body);
    if (s != AP_OK || !ok) {
      free(body.s);
      return s != AP_OK ? s : oom(G);
    }
    if (k->alias_in >= 0) {
      free(body.s);
      int src = operand_slot(G, ni, k->alias_in, transferred[k->alias_in]);
      int out = src >= 0 ? new_slot(G, n->out[0], dist_out(G, ni, 0), ST_ALIAS) : -1;
      if (out < 0)
        return oom(G);
      D->slots[out].alias_of = src;
      D->held[n->out[0]] = out;
      return AP_OK;
    }
    /* The signature: passed inputs, present outputs, the workspace. */
    cg_text sig;
    if (!cg_text_open(&sig)) {
      free(body.s);
      return oom(G);
    }
    step call = {.kind = SK_CALL, .node = ni, .work = k->work_expr[0] != 0};
    for (int i = 0; i < n->n_in; i++) {
      if (!k->in[i].v || (k->skip_in >> i & 1))
        continue;
      fprintf(sig.f, "%sconst %s *restrict x%d", call.n_args ? ", " : "",
              cg_ctype(k->in[i].dtype), i);
      call.args[call.n_args++] = operand_slot(G, ni, i, transferred[i]);
    }
    for (int i = 0; i < n->n_out; i++) {
      if (n->out[i] < 0)
        continue;
      fprintf(sig.f, "%s%s *restrict y%d", call.n_args ? ", " : "", cg_ctype(k->out[i].dtype), i);
      int s2 = new_slot(G, n->out[i], dist_out(G, ni, i), ST_ARENA);
      call.args[call.n_args++] = s2;
      call.n_write++;
      D->held[n->out[i]] = s2;
    }
    if (call.work)
      fprintf(sig.f, "%sfloat *restrict work", call.n_args ? ", " : "");
    else if (!call.n_args)
      fprintf(sig.f, "void");
    if (!cg_text_close(&sig)) {
      free(body.s);
      free(sig.s);
      return oom(G);
    }
    for (int a = 0; a < call.n_args; a++)
      if (call.args[a] < 0) {
        free(body.s);
        free(sig.s);
        return oom(G);
      }
    G->needs_kernels_lib |= k->needs_kernels_lib;
    call.kernel = cg_add_kernel(G->g, &G->kernels, sig.s, body.s, k->work_expr);
    step *st = call.kernel >= 0 ? new_step(G, SK_CALL, ni) : NULL;
    if (!st)
      return oom(G);
    *st = call;
  }
  if (partial) {
    int out = D->held[n->out[0]];
    const ap_dxfer *t = dn->reduce;
    step *st = new_step(G, t->kind == AP_DX_ALLREDUCE ? SK_ALLREDUCE : SK_REDUCE, ni);
    if (!st)
      return oom(G);
    st->xfer = t;
    st->tag = G->n_tags++ % (APRT_TAG_MAX + 1);
    st->n_args = 1;
    st->args[0] = out;
    if (t->kind == AP_DX_REDUCE) {
      /* One copy of the box per summand, summed in summand order. */
      int staging = new_slot(G, -1, &D->slots[out].box, ST_ARENA);
      if (staging < 0)
        return oom(G);
      D->slots[staging].bytes = D->slots[out].bytes * t->n_summands;
      st = &D->steps[D->n_steps - 1];
      st->args[st->n_args++] = staging;
      st->n_write = 1;
    }
    if (dn->bias_slot >= 0) {
      ap_status s = emit_bias(G, ni, dn->bias_slot, out, transferred[dn->bias_slot]);
      if (s != AP_OK)
        return s;
    }
  }
  return AP_OK;
}

/* ---- the arena, planned from last use ------------------------------------ */

static ap_status plan_arena(gen *G) {
  ap_graph *g = G->g;
  device *D = G->dv;
  for (int si = 0; si < D->n_slots; si++)
    D->slots[si].last_use = -1;
  for (int pos = 0; pos < D->n_steps; pos++)
    for (int a = 0; a < D->steps[pos].n_args; a++) {
      int r = root_slot(D, D->steps[pos].args[a]);
      if (D->slots[r].last_use < pos)
        D->slots[r].last_use = pos;
    }
  for (int i = 0; i < g->n_outputs; i++) {
    int s = D->held[g->outputs[i]];
    if (s >= 0)
      D->slots[root_slot(D, s)].last_use = INT32_MAX;
  }
  cg_block *live = ap_arena_array(g->arena, (size_t)D->n_slots + 1, sizeof *live);
  if (!live)
    return oom(G);
  int n_live = 0;
  D->arena_bytes = D->unshared_bytes = 0;
  for (int pos = 0; pos < D->n_steps; pos++) {
    const step *st = &D->steps[pos];
    /* Written slots first, so none shares memory with what the step reads. */
    for (int a = st->n_args - st->n_write; a < st->n_args; a++) {
      slot *s = &D->slots[st->args[a]];
      if (s->st != ST_ARENA || s->offset >= 0 || s->bytes <= 0)
        continue;
      s->offset = cg_arena_alloc(live, &n_live, s->bytes, st->args[a]);
      D->unshared_bytes += cg_align_up(s->bytes);
      if (s->offset + cg_align_up(s->bytes) > D->arena_bytes)
        D->arena_bytes = s->offset + cg_align_up(s->bytes);
    }
    for (int i = 0; i < n_live; i++)
      if (D->slots[live[i].id].last_use <= pos)
        cg_arena_free(live, &n_live, live[i--].id);
  }
  for (int si = 0; si < D->n_slots; si++)
    if (D->slots[si].st == ST_ARENA && D->slots[si].offset < 0)
      D->slots[si].offset = 0; /* empty: never read or written */
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

/* The expression for slot s's storage, as a pointer of its element type
 * (unsigned char for a staging slot). */
static void put_slot_ptr(gen *G, FILE *f, int s) {
  const device *D = G->dv;
  int r = root_slot(D, s);
  const slot *sl = &D->slots[s];
  const char *ct = sl->value >= 0 ? cg_ctype(G->g->values[sl->value].dtype) : "unsigned char";
  const slot *rs = &D->slots[r];
  switch (rs->st) {
  case ST_INPUT:
    fprintf(f, "((%s *)in%d)", ct, rs->input_index);
    break;
  case ST_CONST:
    fprintf(f, "((%s *)(ap_blob + %lld))", ct, (long long)rs->offset);
    break;
  case ST_ARENA:
    fprintf(f, "((%s *)(arena + %lld))", ct, (long long)rs->offset);
    break;
  default:
    ap_die("slot %d has no storage", s);
  }
}

static void put_comm_check(FILE *f) { fprintf(f, "    if (s != APRT_OK)\n      goto done;\n"); }

/* The exchange of a transfer or a partial-sum reduction: this device's
 * sends (boxes of src_box) and receives (boxes of dst_box, shifted by a
 * staging copy per summand when stage_volume is set). */
static void put_exchange(gen *G, FILE *f, const step *st, const ap_value *v, int src,
                         int dst, const ap_dbox *src_box, const ap_dbox *dst_box,
                         int64_t stage_volume) {
  const ap_dxfer *t = st->xfer;
  int dev = G->dv->dev, ns = 0, nr = 0;
  for (int k = 0; k < t->n_pieces; k++) {
    ns += t->pieces[k].from == dev;
    nr += t->pieces[k].to == dev;
  }
  fprintf(f, "  {\n");
  if (ns) {
    fprintf(f, "    static const aprt_xfer sends[] = {\n");
    for (int k = 0; k < t->n_pieces; k++)
      if (t->pieces[k].from == dev) {
        fprintf(f, "      {%d, ", t->pieces[k].to);
        cg_put_box(f, v->rank, &t->pieces[k].box, src_box, 0);
        fprintf(f, "},\n");
      }
    fprintf(f, "    };\n");
  }
  if (nr) {
    fprintf(f, "    static const aprt_xfer recvs[] = {\n");
    for (int k = 0; k < t->n_pieces; k++)
      if (t->pieces[k].to == dev) {
        fprintf(f, "      {%d, ", t->pieces[k].from);
        cg_put_box(f, v->rank, &t->pieces[k].box, dst_box,
                stage_volume * t->pieces[k].summand);
        fprintf(f, "},\n");
      }
    fprintf(f, "    };\n");
  }
  fprintf(f, "    s = aprt_exchange(c, ");
  put_slot_ptr(G, f, src);
  fprintf(f, ", %d, %s, ", ns, ns ? "sends" : "NULL");
  put_slot_ptr(G, f, dst);
  fprintf(f, ", %d, %s, %zu, %d);\n", nr, nr ? "recvs" : "NULL", ap_dtype_size(v->dtype), st->tag);
  put_comm_check(f);
  fprintf(f, "  }\n");
}

static void put_step(gen *G, FILE *f, const step *st) {
  ap_graph *g = G->g;
  const device *D = G->dv;
  const ap_node *n = &g->nodes[st->node];
  fprintf(f, "  /* %s '", n->op_type);
  cg_put_comment_name(f, n->name);
  fprintf(f, "'%s */\n", st->kind == SK_CALL       ? ""
                         : st->kind == SK_PACK     ? ": slice of an input"
                         : st->kind == SK_XFER     ? ": an input's missing pieces"
                         : st->kind == SK_ZERO     ? ": no share of the contraction"
                                                   : ": partial sums");
  const slot *a0 = &D->slots[st->args[0]];
  const ap_value *v = a0->value >= 0 ? &g->values[a0->value] : NULL;
  switch (st->kind) {
  case SK_CALL:
    fprintf(f, "  cgk_%d(", st->kernel);
    for (int a = 0; a < st->n_args; a++) {
      if (a)
        fprintf(f, ", ");
      put_slot_ptr(G, f, st->args[a]);
    }
    if (st->work)
      fprintf(f, "%swork", st->n_args ? ", " : "");
    fprintf(f, ");\n");
    break;
  case SK_PACK: {
    const slot *dst = &D->slots[st->args[1]];
    if (ap_dbox_volume(v->rank, &dst->box) == 0)
      break;
    fprintf(f, "  {\n    static const aprt_box b = ");
    cg_put_box(f, v->rank, &dst->box, &a0->box, 0);
    fprintf(f, ";\n    aprt_box_pack(");
    put_slot_ptr(G, f, st->args[1]);
    fprintf(f, ", ");
    put_slot_ptr(G, f, st->args[0]);
    fprintf(f, ", &b, %zu);\n  }\n", ap_dtype_size(v->dtype));
    break;
  }
  case SK_XFER:
    put_exchange(G, f, st, v, st->args[0], st->args[1], &a0->box, &D->slots[st->args[1]].box, 0);
    break;
  case SK_ZERO:
    if (a0->bytes > 0) {
      fprintf(f, "  memset(");
      put_slot_ptr(G, f, st->args[0]);
      fprintf(f, ", 0, %lld);\n", (long long)a0->bytes);
    }
    break;
  case SK_ALLREDUCE: {
    const ap_dxfer *t = st->xfer;
    int64_t count = ap_dbox_volume(v->rank, &a0->box);
    if (count == 0)
      break; /* so is every member's: they hold equal boxes */
    fprintf(f, "  {\n    static const int group[] = {");
    for (int s = 0; s < t->n_summands; s++)
      fprintf(f, "%s%d", s ? ", " : "", t->group[D->dev * t->n_summands + s]);
    fprintf(f, "};\n    s = aprt_allreduce_sum(c, group, %d, ", t->n_summands);
    put_slot_ptr(G, f, st->args[0]);
    fprintf(f, ", %lld, NULL, %d);\n", (long long)count, st->tag);
    put_comm_check(f);
    fprintf(f, "  }\n");
    break;
  }
  case SK_REDUCE: {
    const ap_dxfer *t = st->xfer;
    int64_t count = ap_dbox_volume(v->rank, &a0->box);
    /* A summand whose devices hold none of this box (their share of a
     * split above is empty) sends nothing for it: it adds zero. */
    if (count > 0) {
      fprintf(f, "  memset(");
      put_slot_ptr(G, f, st->args[1]);
      fprintf(f, ", 0, %lld);\n", (long long)D->slots[st->args[1]].bytes);
    }
    put_exchange(G, f, st, v, st->args[0], st->args[1], &a0->box, &a0->box, count);
    if (count == 0)
      break;
    const char *ct = cg_ctype(v->dtype);
    fprintf(f, "  {\n    %s *y = ", ct);
    put_slot_ptr(G, f, st->args[0]);
    fprintf(f, ";\n    const %s *part = (const %s *)", ct, ct);
    put_slot_ptr(G, f, st->args[1]);
    fprintf(f, ";\n    for (int64_t i = 0; i < %lld; i++) {\n      %s acc = part[i];\n"
               "      for (int64_t k = 1; k < %d; k++)\n        acc += part[k * %lld + i];\n"
               "      y[i] = acc;\n    }\n  }\n",
            (long long)count, ct, t->n_summands, (long long)count);
    break;
  }
  }
}

static ap_status write_device(gen *G, const char *outdir) {
  ap_graph *g = G->g;
  const device *D = G->dv;
  int dev = D->dev;
  cg_text t;
  if (!cg_text_open(&t))
    return oom(G);
  FILE *f = t.f;
  fprintf(f, "/* Generated by accparc: the program of device %d (%s).\n"
             " * Activations live in one arena of %lld bytes planned from last use\n"
             " * (%lld bytes without reuse); constants in the blob of weights.bin. */\n"
             "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
             "#include \"accpar_rt.h\"\n#include \"kernels.h\"\n\n"
             "extern const unsigned char ap_blob[];\n"
             "int ap_device_%d(aprt_comm *c);\n\n",
          dev, G->n_dev > 1 ? "its box of every value" : "the whole graph",
          (long long)D->arena_bytes, (long long)D->unshared_bytes, dev);
  fprintf(f, "int ap_device_%d(aprt_comm *c) {\n", dev);
  /* The rank's memory rather than static: under the threads transport every
   * device is a thread of one process and needs memory of its own. The
   * runtime keeps it across repeated runs (--repeat), populated. */
  fprintf(f, "  unsigned char *arena = aprt_buffer(c, 0, %lld);\n",
          (long long)(D->arena_bytes ? D->arena_bytes : CG_ALIGN));
  fprintf(f, "  float *work = aprt_buffer(c, 1, cgk_work_floats() * 4 + %d);\n", CG_ALIGN);
  fprintf(f, "  if (!arena || !work)\n    return aprt_fail(c, APRT_ERR_NOMEM, "
             "\"device %d: out of memory (%lld bytes)\");\n",
          dev, (long long)D->arena_bytes);
  fprintf(f, "  (void)work;\n  aprt_status s = APRT_OK;\n");
  for (int i = 0; i < G->n_prog_inputs; i++) {
    int v = G->prog_inputs[i];
    fprintf(f, "  const void *in%d = aprt_input(c, %d)->data; /* '", i, i);
    cg_put_comment_name(f, g->values[v].name);
    fprintf(f, "' */\n  (void)in%d;\n", i);
    if (g->values[v].data) {
      /* Bound at compile time (it fixed shapes): the run must feed the same. */
      ap_dbox w = whole(&g->values[v]);
      const const_box *cb = &G->consts[const_box_of(G, v, &w)];
      int64_t bytes = box_bytes(&g->values[v], &w);
      fprintf(f, "  if (%lld && memcmp(in%d, ap_blob + %lld, %lld) != 0) {\n"
                 "    return aprt_fail(c, APRT_ERR_MISMATCH, \"input %d (",
              (long long)bytes, i, (long long)cb->offset, (long long)bytes, i);
      cg_put_comment_name(f, g->values[v].name);
      fprintf(f, ") differs from the tensor bound when the program was compiled\");\n  }\n");
    }
  }
  fprintf(f, "  aprt_phase_begin(c, APRT_PHASE_FORWARD);\n");
  for (int si = 0; si < D->n_steps; si++)
    put_step(G, f, &D->steps[si]);
  fprintf(f, "  aprt_phase_end(c);\n");
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i];
    const ap_value *val = &g->values[v];
    ap_dbox b = D->slots[D->held[v]].box; /* every output has a slot (ap_codegen_c) */
    if (G->n_dev > 1 && ap_dbox_volume(val->rank, &b) == 0 && ap_numel(val->rank, val->dims) > 0)
      continue; /* other devices hold all of it */
    fprintf(f, "  {\n    static const int64_t shape[] = {");
    for (int k = 0; k < val->rank; k++)
      fprintf(f, "%s%lld", k ? ", " : "", (long long)val->dims[k]);
    fprintf(f, "%s}, start[] = {", val->rank ? "" : "0");
    for (int k = 0; k < val->rank; k++)
      fprintf(f, "%s%lld", k ? ", " : "", (long long)b.lo[k]);
    fprintf(f, "%s}, size[] = {", val->rank ? "" : "0");
    for (int k = 0; k < val->rank; k++)
      fprintf(f, "%s%lld", k ? ", " : "", (long long)(b.hi[k] - b.lo[k]));
    fprintf(f, "%s};\n", val->rank ? "" : "0");
    fprintf(f, "    aprt_box box = aprt_box_dense(%d, shape, start, size);\n", val->rank);
    fprintf(f, "    s = aprt_output_box(c, %d, &box, ", i);
    put_slot_ptr(G, f, D->held[v]);
    fprintf(f, ");\n");
    put_comm_check(f);
    fprintf(f, "  }\n");
  }
  fprintf(f, "done:\n  return s;\n}\n");
  char name[32];
  snprintf(name, sizeof name, "dev%d.c", dev);
  return cg_write_text(G->g, G->d, outdir, name, &t);
}

static ap_status write_main(gen *G, const ap_codegen_opts *o, const char *blob_path) {
  ap_graph *g = G->g;
  const ap_plan *p = g->plan;
  cg_text t;
  if (!cg_text_open(&t))
    return oom(G);
  FILE *f = t.f;
  fprintf(f, "/* Generated by accparc: the program's description and main. */\n"
             "#include <stdint.h>\n\n#include \"accpar_rt.h\"\n\n");
  for (int dev = 0; dev < G->n_dev; dev++)
    fprintf(f, "int ap_device_%d(aprt_comm *c);\n", dev);
  /* The constants are assembled into the executable as they are, which keeps
   * large models out of the C compiler's parser. */
  fprintf(f, "\n");
  cg_put_blob_asm(f, blob_path);
  cg_put_device_names(f, p, G->n_dev, o->device_kind);
  /* Bytes each device sends: the plan's prediction for the forward pass
   * (passes/distribute.c), which the transfers above move exactly. */
  fprintf(f, "static const uint64_t predicted_bytes[] = {");
  for (int dev = 0; dev < G->n_dev; dev++)
    fprintf(f, "%s%.0f", dev ? ", " : "", G->dist->fwd_bytes[dev]);
  fprintf(f, "};\n\n");
  if (G->n_prog_inputs) {
    fprintf(f, "static const aprt_tensor_spec inputs[] = {\n");
    for (int i = 0; i < G->n_prog_inputs; i++) {
      const ap_value *v = &g->values[G->prog_inputs[i]];
      cg_put_spec(f, v->name, v->dtype, v->rank, v->dims,
                  ap_value_index_rows(g, G->prog_inputs[i]), 0);
    }
    fprintf(f, "};\n\n");
  }
  if (g->n_outputs) {
    fprintf(f, "static const aprt_tensor_spec outputs[] = {\n");
    for (int i = 0; i < g->n_outputs; i++) {
      const ap_value *v = &g->values[g->outputs[i]];
      cg_put_spec(f, v->name, v->dtype, v->rank, v->dims, 0, 0);
    }
    fprintf(f, "};\n\n");
  }
  cg_put_run(f, G->n_dev);
  fprintf(f, "static const aprt_program program = {\n  .name = ");
  cg_put_cstring(f, o->model_name ? o->model_name : "model");
  fprintf(f, ",\n  .ndev = %d,\n  .device_names = device_names,\n  .train = 0,\n"
             "  .n_inputs = %d,\n  .inputs = %s,\n  .n_outputs = %d,\n  .outputs = %s,\n"
             "  .predicted_fixed_bytes = predicted_bytes,\n  .run = run,\n"
             "  .constants = ap_blob,\n  .constants_bytes = %lld,\n};\n\n",
          G->n_dev, G->n_prog_inputs, G->n_prog_inputs ? "inputs" : "0", g->n_outputs,
          g->n_outputs ? "outputs" : "0", (long long)G->blob_bytes);
  fprintf(f, "int main(int argc, char **argv) { return aprt_main(argc, argv, &program); }\n");
  return cg_write_text(G->g, G->d, o->outdir, "main.c", &t);
}

static ap_status write_blob(gen *G, const char *outdir) {
  ap_graph *g = G->g;
  unsigned char *blob = ap_arena_alloc(g->arena, (size_t)G->blob_bytes + 1);
  if (!blob)
    return oom(G);
  memset(blob, 0, (size_t)G->blob_bytes + 1);
  for (int i = 0; i < G->n_consts; i++) {
    const const_box *c = &G->consts[i];
    int64_t bytes = box_bytes(&g->values[c->value], &c->box);
    if (c->offset >= 0 && bytes)
      memcpy(blob + c->offset, c->view->data, (size_t)bytes);
  }
  return cg_write_file(G->g, G->d, outdir, "weights.bin", blob, (size_t)G->blob_bytes);
}


ap_status ap_codegen_c(ap_graph *g, const ap_codegen_opts *o, ap_diag *d) {
  gen G = {.g = g, .d = d};
  if (o->train) {
    /* Training programs come from the training schedule (train.c), which
     * generates plans of type-I layers on several devices and refuses the
     * others in one line. The updated weights are outputs, so runs on
     * different arrays can be compared. */
    cg_train_opts t = {.outdir = o->outdir,
                       .model_name = o->model_name,
                       .device_kind = o->device_kind,
                       .loss = CG_LOSS_SOFTMAX_CE,
                       .momentum = o->momentum,
                       .export_weights = true};
    return cg_emit_train_program(g, &t, d);
  }
  G.kernel = ap_arena_alloc(g->arena, sizeof *G.kernel);
  if (!G.kernel)
    return oom(&G);
  ap_dist *dist = NULL;
  ap_status s = plan_inputs(&G);
  if (s == AP_OK)
    s = schedule(&G);
  if (s == AP_OK)
    s = ap_distribute(g, &dist, d);
  if (s != AP_OK)
    return s;
  G.dist = dist;
  G.n_dev = dist->n_dev;
  /* Bound inputs are compared whole against their constants at run time. */
  for (int i = 0; i < G.n_prog_inputs; i++) {
    int v = G.prog_inputs[i];
    if (!g->values[v].data)
      continue;
    ap_dbox w = whole(&g->values[v]);
    int ci = const_box_of(&G, v, &w);
    if (ci < 0)
      return oom(&G);
    place_const(&G, ci);
  }
  device *devs = ap_arena_array(g->arena, (size_t)G.n_dev, sizeof *devs);
  if (!devs)
    return oom(&G);
  for (int dev = 0; s == AP_OK && dev < G.n_dev; dev++) {
    device *D = &devs[dev];
    D->dev = dev;
    D->held = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *D->held);
    D->input_slot = ap_arena_array(g->arena, (size_t)G.n_prog_inputs + 1, sizeof *D->input_slot);
    if (!D->held || !D->input_slot) {
      s = oom(&G);
      break;
    }
    for (int v = 0; v < g->n_values; v++)
      D->held[v] = -1;
    for (int i = 0; i < G.n_prog_inputs; i++)
      D->input_slot[i] = -1;
    G.dv = D;
    G.n_tags = 0;
    for (int i = 0; s == AP_OK && i < G.n_prog_inputs; i++) {
      int v = G.prog_inputs[i];
      if (!g->values[v].data && (D->held[v] = input_slot(&G, v)) < 0)
        s = oom(&G);
    }
    for (int pos = 0; s == AP_OK && pos < G.n_order; pos++)
      s = emit_node(&G, G.order[pos]);
    for (int i = 0; s == AP_OK && i < g->n_outputs; i++) {
      int v = g->outputs[i];
      if ((s = check_value(&G, NULL, &g->values[v])) != AP_OK || D->held[v] >= 0)
        continue;
      if (!g->values[v].data) {
        s = ap_error(d, AP_ERR_INVALID, g->path, NULL, NULL, "graph output '%s' is computed by no node",
                     g->values[v].name);
        break;
      }
      ap_dbox w = whole(&g->values[v]);
      int ci = const_box_of(&G, v, &w), sl = ci >= 0 ? new_slot(&G, v, &w, ST_CONST) : -1;
      if (sl < 0) {
        s = oom(&G);
        break;
      }
      place_const(&G, ci);
      D->slots[sl].offset = G.consts[ci].offset;
      D->held[v] = sl;
    }
    if (s == AP_OK)
      s = plan_arena(&G);
  }
  char *blob_path = NULL;
  if (s == AP_OK)
    s = cg_prepare_outdir(g, d, o->outdir, &blob_path);
  if (s == AP_OK)
    s = write_blob(&G, o->outdir);
  if (s == AP_OK)
    s = cg_write_kernels(g, d, o->outdir, &G.kernels, G.needs_kernels_lib, false);
  for (int dev = 0; s == AP_OK && dev < G.n_dev; dev++) {
    G.dv = &devs[dev];
    s = write_device(&G, o->outdir);
  }
  if (s == AP_OK)
    s = write_main(&G, o, blob_path);
  cg_kernel_set_free(&G.kernels);
  return s;
}
