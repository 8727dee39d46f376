/* The lowering of an annotated graph to per-device programs of steps
 * (codegen.h, "lower.c"), for inference and training alike.
 *
 * Every device computes its box of every value (passes/distribute.h; on one
 * device the whole tensor): a node's kernel runs on the boxes of its
 * operands; what a node reads that its device does not hold comes through
 * the distribution's transfer or a local slice; partial sums of a layer
 * split along its contraction are resolved after it, and a bias it left out
 * is added then. Nodes run in topological order, a node that reads no
 * run-time value just before its first reader.
 *
 * A training step continues with the loss on the device's rows of the
 * logits, the backward steps of the schedule (codegen/train.h) in reverse,
 * where every forward transfer's adjoint sends the error of a box back to
 * the devices that sent it and adds it there, the sum of every trainable
 * weight's gradient over the devices holding copies of it, and the SGD
 * update. The activation arena is planned from last use over the whole
 * step, so a forward value a backward kernel reads stays live until it ran.
 *
 * Kernels are emitted by the operator emitters (c_*.c, c_grad_*.c) and kept
 * once per distinct definition. */
#define _XOPEN_SOURCE 700
#include <stdlib.h>
#include <string.h>

#include "codegen/codegen.h"
#include "codegen/kernels/kernels.h"
#include "codegen/train.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"

static const cg_emit_fn forward_emitters[AP_OP_COUNT] = {
#define OP(id, ...) [AP_OP_##id] = cg_emit_##id,
#include "ir/ops.def"
#undef OP
};

enum { MAX_ARGS = 2 * CG_MAX_OPERANDS + 4 };

/* A step being built: its arguments in a fixed array, copied into the
 * arena when pushed. */
typedef struct step_args {
  cg_step s;
  int args[MAX_ARGS];
} step_args;

typedef struct lgen {
  ap_graph *g;
  ap_diag *d;
  const cg_lower_opts *o;
  cg_program *p;
  cg_train_schedule sch;   /* training; for inference every field is empty */
  int nv, n_dev, dev;
  bool multi;              /* several devices: boxes from the distribution */
  const ap_dist *dist;
  cg_device *D;            /* the device being lowered */
  cg_kernel *kernel;       /* the node being emitted (one per compilation: it is large) */
  cg_kernel *pack_kernel;  /* a packing kernel, built while the node's is open */
  bool prepack;            /* inference: constant weights packed once (CG_PACKED) */
  bool overlap;            /* exchanges' halves moved apart (cg_overlap) */
  int *order;              /* node ids in the order every device runs them */
  int n_order;
  int *in_off;             /* [n_nodes]: where node n's inputs start in rmap */
  int *rmap;               /* per node input: the buffer this device reads it from; -1 */
  bool *inited;            /* per value: its gradient buffer is written in this step */
  int n_tags;              /* communication steps so far: the next one's tag */
  int *exports;            /* values whose gradient is an output */
  int n_exports;
  cg_fusion fuse;          /* which nodes a convolution's epilogue computes */
} lgen;

static ap_status oom(lgen *G) { return cg_oom(G->g, G->d); }

static int grad_buf(const lgen *G, int v) { return G->nv + v; }
static int mom_buf(const lgen *G, int v) { return 2 * G->nv + v; }
static int fed_buf(const lgen *G) { return 3 * G->nv; }

static int root_of(const lgen *G, int b) { return cg_buf_root(G->D, b); }

static int64_t value_bytes(const ap_value *v) {
  return ap_numel(v->rank, v->dims) * (int64_t)ap_dtype_size(v->dtype);
}

static ap_dbox whole_box(const ap_value *v) {
  ap_dbox b;
  memset(&b, 0, sizeof b);
  for (int i = 0; i < v->rank; i++)
    b.hi[i] = v->dims[i];
  return b;
}

static bool is_run_input(const ap_value *v) { return v->kind == AP_VAL_INPUT && !v->data; }

static bool node_folded(const ap_graph *g, const ap_node *n) {
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && !g->values[n->out[i]].data)
      return false;
  return true;
}

/* The box of value v this device computes, or holds of a trainable
 * weight; constants and run-time inputs are whole on every device (a
 * reader of a part of one reads a slice, read_buf). */
static ap_dbox vbox(const lgen *G, int v) {
  const ap_value *val = &G->g->values[v];
  if (!G->multi)
    return whole_box(val);
  if (G->sch.trainable && G->sch.trainable[v])
    return ap_dist_weight_box(G->g, G->dist, v, G->dev);
  if (val->data || is_run_input(val))
    return whole_box(val);
  return ap_dist_held(G->g, G->dist, v, G->dev);
}

/* The box buffer b holds (the fixed buffers record theirs at the end). */
static ap_dbox buf_box(const lgen *G, int b) {
  return b < 3 * G->nv ? vbox(G, b % G->nv) : G->D->bufs[b].box;
}

/* The box of input i of node ni this device reads. */
static ap_dbox read_box(const lgen *G, int ni, int i) {
  int v = G->g->nodes[ni].in[i];
  if (!G->multi || !G->dist->node[ni].in)
    return whole_box(&G->g->values[v]);
  return G->dist->node[ni].in[i][G->dev];
}

/* A new buffer holding box b of value v (-1: staging; then b is NULL and
 * the caller sets bytes). -1: out of memory. */
static int extra_buf(lgen *G, int v, const ap_dbox *b, cg_storage st) {
  cg_device *D = G->D;
  if (!ap_arena_grow(G->g->arena, (void **)&D->bufs, &D->cap_bufs, D->n_bufs + 1,
                     sizeof *D->bufs))
    return -1;
  cg_buf *bi = &D->bufs[D->n_bufs];
  memset(bi, 0, sizeof *bi);
  bi->st = st;
  bi->input_index = -1;
  bi->alias_of = -1;
  bi->value = v;
  bi->dtype = AP_DT_FLOAT;
  if (v >= 0) {
    const ap_value *val = &G->g->values[v];
    bi->dtype = val->dtype;
    bi->box = *b;
    bi->bytes = ap_dbox_volume(val->rank, b) * (int64_t)ap_dtype_size(val->dtype);
  }
  return D->n_bufs++;
}

static int64_t vbox_bytes(const lgen *G, int v) {
  const ap_value *val = &G->g->values[v];
  ap_dbox b = vbox(G, v);
  return ap_dbox_volume(val->rank, &b) * (int64_t)ap_dtype_size(val->dtype);
}

/* Shape and element type known and supported. */
static ap_status check_value(lgen *G, const ap_node *n, const ap_value *v) {
  const char *what = NULL;
  if (v->non_tensor)
    what = "non-tensor values are not supported by the C backend";
  else if (!ap_value_shape_known(v))
    what = "shape not known at compile time (bind it with --batch or --inputs)";
  else if (ap_numel(v->rank, v->dims) < 0)
    what = "too many elements";
  if (what)
    return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, n ? n->name : NULL,
                    n ? n->op_type : NULL, "value '%s': %s", v->name, what);
  if (!cg_ctype(v->dtype))
    return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, n ? n->name : NULL,
                    n ? n->op_type : NULL,
                    "value '%s': element type %s is not supported by the C backend", v->name,
                    ap_dtype_name(v->dtype));
  return AP_OK;
}

/* The blob is shared by the devices: box b of value v keeps the offset the
 * first device gave it. -1: out of memory. */
static int64_t blob_place(lgen *G, int v, const ap_dbox *b) {
  cg_program *p = G->p;
  const ap_value *val = &G->g->values[v];
  for (int i = 0; i < p->n_blob; i++)
    if (p->blob[i].value == v && ap_dbox_equal(val->rank, &p->blob[i].box, b))
      return p->blob[i].offset;
  const ap_value *view = cg_const_view(G->g, v, b);
  if (!view || !ap_arena_grow(G->g->arena, (void **)&p->blob, &p->cap_blob, p->n_blob + 1,
                              sizeof *p->blob))
    return -1;
  p->blob[p->n_blob++] = (cg_blob_entry){v, *b, view, p->blob_bytes};
  p->blob_bytes = cg_align_up(p->blob_bytes + value_bytes(view));
  return p->blob[p->n_blob - 1].offset;
}

static ap_status place_constant(lgen *G, int v) {
  cg_buf *b = &G->D->bufs[v];
  if (b->st != CG_NONE)
    return AP_OK;
  ap_dbox w = whole_box(&G->g->values[v]);
  b->st = CG_CONST;
  b->dtype = G->g->values[v].dtype;
  b->bytes = value_bytes(&G->g->values[v]);
  b->offset = blob_place(G, v, &w);
  return b->offset < 0 ? oom(G) : AP_OK;
}

/* Buffer b (value v's activation or gradient) in the arena, at the size of
 * this device's box of v. */
static void arena_buf(lgen *G, int b, int v) {
  if (G->D->bufs[b].st != CG_NONE)
    return;
  G->D->bufs[b].st = CG_ARENA;
  G->D->bufs[b].dtype = G->g->values[v].dtype;
  G->D->bufs[b].bytes = vbox_bytes(G, v);
}

/* ---- the loss's operand --------------------------------------------------- */

static const ap_value *logits(const lgen *G) { return &G->g->values[G->sch.logits]; }

/* The fed loss input: labels shaped like the logits without their last
 * (class) axis, or loss weights shaped like the logits. */
static int fed_rank(const lgen *G) {
  int r = logits(G)->rank;
  return G->o->loss == CG_LOSS_SOFTMAX_CE ? r - 1 : r;
}

static int64_t fed_numel(const lgen *G) { return ap_numel(fed_rank(G), logits(G)->dims); }

/* The box of the logits this device's loss reads (passes/distribute.h). */
static ap_dbox loss_box(const lgen *G) {
  if (!G->multi)
    return whole_box(logits(G));
  return G->dist->loss_box[G->dev];
}

/* ---- program inputs, outputs and storage ------------------------------------ */

static void spec_of(cg_spec *s, const ap_value *v, int value, int64_t classes, int64_t ignore) {
  memset(s, 0, sizeof *s);
  s->name = v->name;
  s->dtype = v->dtype;
  s->rank = v->rank;
  memcpy(s->dims, v->dims, sizeof s->dims);
  s->classes = classes;
  s->ignore = ignore;
  s->value = value;
}

/* The program's inputs (graph inputs that are not initializers, in graph
 * order, then the loss's operand) and outputs (the graph's, then the
 * exported loss, gradients and weights): the same for every device. */
static ap_status plan_specs(lgen *G) {
  ap_graph *g = G->g;
  cg_program *p = G->p;
  p->inputs = ap_arena_array(g->arena, (size_t)g->n_inputs + 2, sizeof *p->inputs);
  p->bound_inputs = ap_arena_array(g->arena, (size_t)g->n_inputs + 2, sizeof *p->bound_inputs);
  p->outputs = ap_arena_array(g->arena, (size_t)g->n_outputs + 2 * (size_t)G->nv + 2,
                              sizeof *p->outputs);
  G->exports = ap_arena_array(g->arena, (size_t)g->n_inputs + (size_t)G->nv + 1,
                              sizeof *G->exports);
  if (!p->inputs || !p->bound_inputs || !p->outputs || !G->exports)
    return oom(G);
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    const ap_value *val = &g->values[v];
    if (val->kind == AP_VAL_WEIGHT)
      continue;
    ap_status s = check_value(G, NULL, val);
    if (s != AP_OK)
      return s;
    p->bound_inputs[p->n_inputs] = -1;
    spec_of(&p->inputs[p->n_inputs++], val, v, ap_value_index_rows(g, v), 0);
  }
  if (G->o->train) {
    const ap_value *lv = logits(G);
    cg_spec *s = &p->inputs[p->n_inputs];
    p->bound_inputs[p->n_inputs++] = -1;
    spec_of(s, lv, -1, 0, 0);
    if (G->o->loss == CG_LOSS_SOFTMAX_CE) {
      s->name = "labels";
      s->dtype = AP_DT_INT64;
      s->rank = lv->rank - 1;
      s->classes = lv->dims[lv->rank - 1];
      s->ignore = CG_IGNORE_INDEX;
    } else {
      s->name = "loss_weights";
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    int v = g->outputs[i];
    ap_status s = check_value(G, NULL, &g->values[v]);
    if (s != AP_OK)
      return s;
    spec_of(&p->outputs[p->n_outputs++], &g->values[v], v, 0, 0);
  }
  /* Exported gradients: the differentiable graph inputs in graph order,
   * then the trainable weights in value order. */
  for (int i = 0; G->o->export_grads && i < g->n_inputs; i++)
    if (G->sch.needs_grad[g->inputs[i]] && g->values[g->inputs[i]].kind != AP_VAL_WEIGHT)
      G->exports[G->n_exports++] = g->inputs[i];
  for (int v = 0; G->o->export_grads && v < G->nv; v++)
    if (G->sch.trainable[v])
      G->exports[G->n_exports++] = v;
  if (G->o->export_grads) {
    cg_spec *s = &p->outputs[p->n_outputs++];
    memset(s, 0, sizeof *s);
    s->name = "loss";
    s->dtype = AP_DT_DOUBLE;
    s->value = -1;
    for (int i = 0; i < G->n_exports; i++) {
      const ap_value *val = &g->values[G->exports[i]];
      s = &p->outputs[p->n_outputs++];
      spec_of(s, val, G->exports[i], 0, 0);
      if (!(s->name = ap_arena_printf(g->arena, "grad:%s", val->name)))
        return oom(G);
    }
  }
  for (int v = 0; G->o->export_weights && v < G->nv; v++)
    if (G->sch.trainable && G->sch.trainable[v])
      spec_of(&p->outputs[p->n_outputs++], &g->values[v], v, 0, 0);
  return AP_OK;
}

/* Storage of the device's program inputs and trainable weights, which come
 * first in the blob so one copy fills the writable region. */
static ap_status plan_storage(lgen *G) {
  ap_graph *g = G->g;
  cg_program *p = G->p;
  cg_device *D = G->D;
  for (int v = 0; G->o->train && v < G->nv; v++)
    if (G->sch.trainable[v]) {
      ap_dbox box = vbox(G, v);
      cg_buf *b = &D->bufs[v];
      b->st = CG_PARAM;
      b->dtype = g->values[v].dtype;
      b->bytes = ap_dbox_volume(g->values[v].rank, &box) * (int64_t)ap_dtype_size(b->dtype);
      b->offset = D->params_bytes;
      D->params_bytes = cg_align_up(D->params_bytes + b->bytes);
      if ((b->src = blob_place(G, v, &box)) < 0)
        return oom(G);
      D->bufs[mom_buf(G, v)] = (cg_buf){.st = CG_MOM, .dtype = b->dtype, .bytes = b->bytes,
                                        .offset = b->offset, .input_index = -1,
                                        .alias_of = -1, .value = v};
    }
  for (int i = 0; i < p->n_inputs; i++) {
    int v = p->inputs[i].value;
    if (v < 0)
      continue;
    const ap_value *val = &g->values[v];
    D->bufs[v].input_index = i;
    if (!val->data) {
      D->bufs[v].st = CG_INPUT;
      D->bufs[v].dtype = val->dtype;
    } else {
      /* Bound at compile time (it fixed shapes): compared whole with the
       * fed tensor at run time. */
      ap_dbox w = whole_box(val);
      int64_t off = blob_place(G, v, &w);
      if (off < 0)
        return oom(G);
      p->bound_inputs[i] = off;
    }
  }
  if (G->o->train) {
    cg_buf *fb = &D->bufs[fed_buf(G)];
    fb->st = CG_INPUT;
    fb->input_index = p->n_inputs - 1;
    fb->dtype = p->inputs[p->n_inputs - 1].dtype;
    ap_dbox lb = loss_box(G);
    int64_t lvol = ap_dbox_volume(fed_rank(G), &lb);
    if (G->multi && lvol != fed_numel(G)) {
      fb->st = CG_INBOX;
      fb->bytes = lvol * (int64_t)ap_dtype_size(fb->dtype);
      fb->offset = D->inbox_bytes;
      D->inbox_bytes = cg_align_up(D->inbox_bytes + fb->bytes);
    }
  }
  return AP_OK;
}

/* ---- kernels and steps -------------------------------------------------------- */

/* Starts a kernel for node n (NULL: the loss or an update) in G->kernel,
 * with no operands. */
static cg_kir *begin_kernel(lgen *G, const ap_node *n, bool backward) {
  cg_kernel *k = G->kernel;
  memset(k, 0, sizeof *k);
  k->g = G->g;
  k->n = n;
  k->d = G->d;
  k->alias_in = -1;
  k->backward = backward;
  cg_kir *ir = ap_arena_alloc(G->g->arena, sizeof *ir);
  if (ir)
    cg_kernel_begin(k, ir);
  return ir;
}

/* Starts a kernel whose operands setup_kernel filled. */
static cg_kir *begin_node_kernel(lgen *G, bool backward) {
  cg_kernel *k = G->kernel;
  cg_kir *ir = ap_arena_alloc(G->g->arena, sizeof *ir);
  k->backward = backward;
  if (ir)
    cg_kernel_begin(k, ir);
  return ir;
}

static void put_dims(FILE *f, cg_ty t, int rank, const int64_t *dims) {
  fprintf(f, "%s[", cg_ty_c(t));
  for (int i = 0; i < rank; i++)
    fprintf(f, "%s%lld", i ? "," : "", (long long)dims[i]);
  fprintf(f, "]");
}

/* The key of node n's kernel: operator, direction, the operands' element
 * types and box sizes, the attributes. Kernels with equal keys are one
 * kernel when their programs are equal too (cg_kir_equal), which covers
 * what the key leaves out (the values of constant operands an emitter
 * reads, a box's start). */
static const char *node_key(lgen *G, const cg_kernel *k, const char *dir) {
  cg_text t;
  if (!cg_text_open(&t))
    return NULL;
  FILE *f = t.f;
  fprintf(f, "%s %s", k->n->op_type, dir);
  for (int i = 0; i < k->n_in; i++)
    if (k->in[i].v) {
      fprintf(f, " x%d:", i);
      put_dims(f, cg_ty_of(k->in[i].dtype), k->in[i].rank, k->in[i].dims);
    }
  for (int i = 0; i < k->n_out; i++)
    if (k->out[i].v) {
      fprintf(f, " y%d:", i);
      put_dims(f, cg_ty_of(k->out[i].dtype), k->out[i].rank, k->out[i].dims);
    }
  for (int i = 0; i < k->n->n_attr; i++) {
    const ap_attr *a = &k->n->attr[i];
    fprintf(f, " %s=", a->name);
    switch (a->type) {
    case AP_ATTR_INT: fprintf(f, "%lld", (long long)a->i); break;
    case AP_ATTR_FLOAT: fprintf(f, "%.9g", (double)a->f); break;
    case AP_ATTR_STRING: fprintf(f, "%s", a->s); break;
    case AP_ATTR_INTS:
      for (int j = 0; j < a->n; j++)
        fprintf(f, "%s%lld", j ? "," : "", (long long)a->ints[j]);
      break;
    default: fprintf(f, "..."); break;
    }
  }
  if (!cg_text_close(&t)) {
    free(t.s);
    return NULL;
  }
  const char *key = ap_arena_strdup(G->g->arena, t.s);
  free(t.s);
  return key;
}

/* Finishes the kernel G->kernel built (its parameters, its key) and gives
 * its index: an equal kernel's when there is one. */
static ap_status finish_kernel(lgen *G, const cg_param *params, int n_params, const char *key,
                               int *out) {
  cg_kernel *k = G->kernel;
  cg_program *p = G->p;
  cg_kir *ir = k->ir;
  if (k->oom || !key)
    return oom(G);
  if (k->depth)
    ap_die("kernel '%s' leaves %d loops or ifs open", key, k->depth);
  ir->key = key;
  ir->params = ap_arena_array(G->g->arena, (size_t)n_params + 1, sizeof *ir->params);
  if (!ir->params)
    return oom(G);
  memcpy(ir->params, params, (size_t)n_params * sizeof *params);
  ir->n_params = n_params;
  for (int i = 0; i < p->n_kernels; i++)
    if (strcmp(p->kernels[i]->key, key) == 0 && cg_kir_equal(p->kernels[i], ir)) {
      *out = i;
      return AP_OK;
    }
  if (!ap_arena_grow(G->g->arena, (void **)&p->kernels, &p->cap_kernels, p->n_kernels + 1,
                     sizeof *p->kernels))
    return oom(G);
  p->needs_kernels_lib |= ir->uses_lib;
  p->kernels[p->n_kernels] = ir;
  *out = p->n_kernels++;
  return AP_OK;
}

static cg_param ptr_param(cg_role role, int slot, ap_dtype t, bool is_const, bool is_restrict) {
  return (cg_param){(uint8_t)role, (uint8_t)slot, (uint8_t)cg_ty_of(t), is_const, is_restrict,
                    false};
}

static cg_param work_param(void) {
  return (cg_param){CG_R_WORK, 0, CG_T_F32, false, true, false};
}

static ap_status push_step(lgen *G, const step_args *sa) {
  cg_device *D = G->D;
  if (!ap_arena_grow(G->g->arena, (void **)&D->steps, &D->cap_steps, D->n_steps + 1,
                     sizeof *D->steps))
    return oom(G);
  cg_step *s = &D->steps[D->n_steps];
  *s = sa->s;
  s->args = ap_arena_array(G->g->arena, (size_t)sa->s.n_args + 1, sizeof *s->args);
  if (!s->args)
    return oom(G);
  memcpy(s->args, sa->args, (size_t)sa->s.n_args * sizeof *s->args);
  D->n_steps++;
  return AP_OK;
}

static void add_arg(step_args *sa, int buf, bool written) {
  if (sa->s.n_args >= MAX_ARGS)
    ap_die("more than %d kernel arguments", MAX_ARGS);
  if (written)
    sa->s.writes |= (uint64_t)1 << sa->s.n_args;
  sa->args[sa->s.n_args++] = buf;
}

static step_args new_step(cg_step_kind kind, cg_phase ph, int node, int value,
                          const char *what) {
  step_args sa;
  memset(&sa, 0, sizeof sa);
  sa.s = (cg_step){
      .kind = kind, .phase = ph, .node = node, .value = value, .what = what, .row = -1};
  return sa;
}

/* The CG_PACKED buffer holding constant buffer src packed as the node
 * kernel being built reads it (G->kernel's pack), made with its prep step
 * on the first request and shared by every kernel reading src the same
 * way. Sized with the kernels' bound over every build (kernels.h): the
 * program packs with the micro-kernel it is compiled with. -1: out of
 * memory. */
static int packed_buf(lgen *G, int src) {
  cg_kernel *node = G->kernel;
  cg_kernel *k = G->pack_kernel;
  memset(k, 0, sizeof *k);
  k->g = G->g;
  k->n = node->n;
  k->d = G->d;
  k->alias_in = -1;
  k->n_in = k->n_out = 1;
  k->in[0] = k->out[0] = node->in[node->pack_slot];
  cg_kir *ir = ap_arena_alloc(G->g->arena, sizeof *ir);
  if (!ir)
    return -1;
  cg_kernel_begin(k, ir);
  const int64_t *v = node->pack_iarg;
  cg_x *from = cg_in(k, 0);
  if (node->pack_kind == CG_PACK_B && v[4])
    from = cg_at(k, from, cg_i64(k, v[4]));
  cg_pack_call(k, (cg_pack_kind)node->pack_kind, v, from, cg_out(k, 0));
  int64_t floats;
  const char *key;
  if (node->pack_kind == CG_PACK_B) {
    floats = (int64_t)apk_packed_b_floats_max((int)v[1], (int)v[2]);
    key = ap_arena_printf(G->g->arena, "pack B tb=%lld k=%lld n=%lld ldb=%lld at=%lld",
                          (long long)v[0], (long long)v[1], (long long)v[2], (long long)v[3],
                          (long long)v[4]);
  } else {
    int f32[CG_CONV_FIELDS];
    for (int i = 0; i < CG_CONV_FIELDS; i++)
      f32[i] = (int)v[i];
    apk_conv2d c;
    memcpy(&c, f32, sizeof c);
    floats = (int64_t)apk_conv2d_packed_floats_max(&c);
    key = ap_arena_printf(G->g->arena, "pack conv M=%d C=%d %dx%d groups=%d", c.out_channels,
                          c.in_channels, c.kernel_h, c.kernel_w, c.groups);
  }
  cg_param params[] = {ptr_param(CG_R_X, 0, AP_DT_FLOAT, true, true),
                       ptr_param(CG_R_Y, 0, AP_DT_FLOAT, false, true)};
  G->kernel = k;
  int kernel;
  ap_status s = finish_kernel(G, params, 2, key, &kernel);
  G->kernel = node;
  if (s != AP_OK)
    return -1;
  cg_device *D = G->D;
  for (int b = 3 * G->nv + 1; b < D->n_bufs; b++)
    if (D->bufs[b].st == CG_PACKED && D->bufs[b].pack_of == src &&
        D->bufs[b].pack_kernel == kernel)
      return b;
  int b = extra_buf(G, -1, NULL, CG_PACKED);
  if (b < 0)
    return -1;
  cg_buf *bi = &D->bufs[b];
  bi->bytes = floats * (int64_t)sizeof(float);
  bi->offset = D->packed_bytes;
  bi->pack_of = src;
  bi->pack_kernel = kernel;
  D->packed_bytes = cg_align_up(D->packed_bytes + bi->bytes);
  step_args sa = new_step(CG_S_KERNEL, CG_PH_FORWARD, (int)(node->n - G->g->nodes), -1, "pack");
  sa.s.kernel = kernel;
  add_arg(&sa, src, false);
  add_arg(&sa, b, true);
  if (!ap_arena_grow(G->g->arena, (void **)&D->prep, &D->cap_prep, D->n_prep + 1,
                     sizeof *D->prep))
    return -1;
  cg_step *st = &D->prep[D->n_prep];
  *st = sa.s;
  st->args = ap_arena_array(G->g->arena, 2, sizeof *st->args);
  if (!st->args)
    return -1;
  memcpy(st->args, sa.args, 2 * sizeof *st->args);
  D->n_prep++;
  return b;
}

/* ---- transfers ------------------------------------------------------------------ */

/* The bytes this device sends in communication step s (the runtime's
 * formulas). */
static uint64_t comm_bytes(const lgen *G, const step_args *sa) {
  const ap_dxfer *t = sa->s.xfer;
  const ap_value *v = &G->g->values[t->value];
  int dev = G->dev;
  if (sa->s.kind == CG_S_ALLREDUCE) {
    ap_dbox b = buf_box(G, sa->args[0]);
    int n = t->n_group ? t->n_group[dev] : t->n_summands;
    return aprt_allreduce_bytes(n, ap_dbox_volume(v->rank, &b), NULL, t->summand[dev]);
  }
  uint64_t total = 0;
  for (int k = 0; k < t->n_pieces; k++) {
    const ap_dpiece *pc = &t->pieces[k];
    int sender = sa->s.reverse ? pc->to : pc->from, receiver = sa->s.reverse ? pc->from : pc->to;
    if (sender == dev && receiver != dev)
      total += (uint64_t)ap_dbox_volume(v->rank, &pc->box) * ap_dtype_size(v->dtype);
  }
  return total;
}

/* Pushes a communication step: its tag (the same sequence on every
 * device) and its bytes. */
static ap_status push_comm(lgen *G, step_args *sa) {
  sa->s.tag = G->n_tags++ % (APRT_TAG_MAX + 1);
  G->D->step_bytes += comm_bytes(G, sa);
  return push_step(G, sa);
}

/* The elements this device receives in an exchange-and-add: the staging's
 * size. */
static int64_t staged_volume(const lgen *G, const ap_dxfer *t, bool reverse, bool skip_local) {
  int64_t total = 0;
  for (int k = 0; k < t->n_pieces; k++) {
    const ap_dpiece *pc = &t->pieces[k];
    int receiver = reverse ? pc->from : pc->to;
    if (receiver == G->dev && !(skip_local && pc->from == pc->to))
      total += ap_dbox_volume(G->g->values[t->value].rank, &pc->box);
  }
  return total;
}

/* Adds transfer t's pieces of src into dst (both holding boxes of t's
 * value) through a staging buffer: forward (each piece from its sender), or
 * reversed (each piece's error from its receiver back to its sender). */
static ap_status push_xchg_add(lgen *G, cg_phase ph, int node, const char *what,
                               const ap_dxfer *t, int src, int dst, bool reverse,
                               bool skip_local) {
  int stg = extra_buf(G, -1, NULL, CG_ARENA);
  if (stg < 0)
    return oom(G);
  G->D->bufs[stg].bytes = staged_volume(G, t, reverse, skip_local) * 4;
  step_args sa = new_step(CG_S_XCHG, ph, node, t->value, what);
  sa.s.xfer = t;
  sa.s.mode = CG_XM_ADD;
  sa.s.reverse = reverse;
  sa.s.skip_local = skip_local;
  add_arg(&sa, src, false);
  add_arg(&sa, dst, true);
  add_arg(&sa, stg, true);
  return push_comm(G, &sa);
}

/* Zeroes value v's gradient buffer unless this step wrote it already. */
static ap_status ensure_grad(lgen *G, int v, cg_phase ph) {
  if (G->inited[v])
    return AP_OK;
  G->inited[v] = true;
  arena_buf(G, grad_buf(G, v), v);
  step_args sa = new_step(CG_S_ZERO, ph, -1, v, "zero error");
  add_arg(&sa, grad_buf(G, v), true);
  return push_step(G, &sa);
}

/* A box of a constant: the value itself when whole, else a buffer on the
 * blob's copy of the box (shared by this device's readers). */
static int const_buf(lgen *G, int v, const ap_dbox *b) {
  const ap_value *val = &G->g->values[v];
  if (ap_dbox_whole(val, b))
    return place_constant(G, v) == AP_OK ? v : -1;
  cg_device *D = G->D;
  for (int k = 3 * G->nv + 1; k < D->n_bufs; k++)
    if (D->bufs[k].st == CG_CONST && D->bufs[k].value == v &&
        ap_dbox_equal(val->rank, &D->bufs[k].box, b))
      return k;
  int64_t off = blob_place(G, v, b);
  int k = off >= 0 ? extra_buf(G, v, b, CG_CONST) : -1;
  if (k >= 0)
    D->bufs[k].offset = off;
  return k;
}

/* The buffer node ni reads input i from, made on the first request (the
 * forward) and the same for the backward: a constant's box; the value's
 * own buffer; the box the plan's transfer brings; or a slice of what the
 * device holds (a layer after an operator every device computed whole). A
 * slice of a run-time input is packed once before the steps, a slice of an
 * activation where it is first read. -1: out of memory. */
static int read_buf(lgen *G, int ni, int i, cg_phase ph) {
  int *m = &G->rmap[G->in_off[ni] + i];
  if (*m >= 0)
    return *m;
  cg_device *D = G->D;
  int v = G->g->nodes[ni].in[i];
  const ap_value *val = &G->g->values[v];
  bool trainable = G->sch.trainable && G->sch.trainable[v];
  ap_dbox b = read_box(G, ni, i), h = vbox(G, v);
  const ap_dxfer *t =
      G->multi && G->dist->node[ni].xfer_in ? G->dist->node[ni].xfer_in[i] : NULL;
  if (trainable && ap_dbox_equal(val->rank, &b, &h)) {
    *m = v;
  } else if (val->data && !trainable) {
    *m = const_buf(G, v, &b);
  } else if (t) {
    *m = extra_buf(G, v, &b, CG_ARENA);
    step_args sa = new_step(CG_S_XCHG, ph, ni, v, "transfer");
    sa.s.xfer = t;
    add_arg(&sa, v, false);
    add_arg(&sa, *m, true);
    if (*m >= 0 && push_comm(G, &sa) != AP_OK)
      *m = -1;
  } else if (!G->multi || ap_dbox_equal(val->rank, &b, &h)) {
    *m = v;
  } else {
    for (int k = 3 * G->nv + 1; k < D->n_bufs && *m < 0; k++)
      if (D->bufs[k].slice && D->bufs[k].value == v &&
          ap_dbox_equal(val->rank, &D->bufs[k].box, &b))
        *m = k;
    if (*m >= 0)
      return *m;
    int sb = extra_buf(G, v, &b, is_run_input(val) ? CG_INBOX : CG_ARENA);
    if (sb < 0)
      return -1;
    cg_buf *bi = &D->bufs[sb];
    bi->slice = true;
    if (is_run_input(val)) {
      bi->input_index = D->bufs[v].input_index;
      bi->offset = D->inbox_bytes;
      D->inbox_bytes = cg_align_up(D->inbox_bytes + bi->bytes);
    } else {
      step_args sa = new_step(CG_S_SLICE, ph, ni, v, "slice");
      add_arg(&sa, v, false);
      add_arg(&sa, sb, true);
      if (push_step(G, &sa) != AP_OK)
        return -1;
    }
    *m = sb;
  }
  return *m;
}

/* Sends the error err of the box node ni read of value v (through a buffer
 * other than the value's own) where it belongs: back along the transfer t
 * that brought it, added on the devices that sent it, or (t NULL: a local
 * slice) added into this device's own error of the value. */
static ap_status route_error(lgen *G, int ni, int v, int err, const ap_dxfer *t) {
  ap_status s = ensure_grad(G, v, CG_PH_BACKWARD);
  if (s != AP_OK)
    return s;
  if (t)
    return push_xchg_add(G, CG_PH_BACKWARD, ni, "error back", t, err, grad_buf(G, v), true,
                         false);
  step_args sa = new_step(CG_S_ADDBOX, CG_PH_BACKWARD, ni, v, "error of a slice");
  add_arg(&sa, err, false);
  add_arg(&sa, grad_buf(G, v), true);
  return push_step(G, &sa);
}

/* ---- one node ------------------------------------------------------------------ */

/* Whether input i of node ni is a Transpose's output it reads in place. */
static bool trans_in(const lgen *G, int ni, int i) {
  return G->fuse.trans_in && (G->fuse.trans_in[ni] >> i & 1);
}

/* The buffer MatMul or Gemm ni reads input i from when that input is a
 * Transpose read in place (fuse.c): the box of a constant its read box
 * maps to, else what the Transpose would have read; op (unless NULL) gets
 * its operand. -1: out of memory. */
static int view_buf(lgen *G, int ni, int i, cg_operand *op) {
  ap_graph *g = G->g;
  int t = g->values[g->nodes[ni].in[i]].producer, x = g->nodes[t].in[0];
  const ap_value *xv = &g->values[x];
  ap_dbox b;
  int buf;
  if (xv->data) {
    int perm[AP_MAX_RANK];
    ap_dbox rb = read_box(G, ni, i);
    cg_transpose_perm(&g->nodes[t], xv->rank, perm);
    b = cg_box_before_perm(xv->rank, perm, &rb);
    buf = const_buf(G, x, &b);
    if (op && !(xv = cg_const_view(g, x, &b)))
      return -1;
  } else {
    b = read_box(G, t, 0);
    buf = read_buf(G, t, 0, CG_PH_FORWARD);
  }
  if (op)
    cg_operand_of(xv, &b, op);
  return buf;
}

/* Fills G->kernel with node ni's operands: the boxes this device reads and
 * computes, a box of a constant with its own data. */
static ap_status setup_kernel(lgen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  if (n->n_in > CG_MAX_OPERANDS || n->n_out > CG_MAX_OPERANDS)
    return ap_error(G->d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                    "more than %d inputs or outputs", CG_MAX_OPERANDS);
  cg_kernel *k = G->kernel;
  memset(k, 0, sizeof *k);
  k->g = g;
  k->n = n;
  k->d = G->d;
  k->n_in = n->n_in;
  k->n_out = n->n_out;
  k->alias_in = -1;
  k->prepack = G->prepack;
  for (int i = 0; i < n->n_in; i++) {
    const ap_value *v = ap_node_in(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
    if (v && trans_in(G, ni, i)) {
      if (view_buf(G, ni, i, &k->in[i]) < 0)
        return oom(G);
      k->trans_in |= (uint8_t)(1u << i);
      cg_transpose_perm(&g->nodes[v->producer], v->rank, k->perm_in[i]);
      continue;
    }
    ap_dbox b = v ? read_box(G, ni, i) : (ap_dbox){{0}, {0}};
    if (v && v->data && !(v = cg_const_view(g, n->in[i], &b)))
      return oom(G);
    cg_operand_of(v, &b, &k->in[i]);
  }
  for (int i = 0; i < n->n_out; i++) {
    const ap_value *v = ap_node_out(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
    ap_dbox b = v ? vbox(G, n->out[i]) : (ap_dbox){{0}, {0}};
    cg_operand_of(v, &b, &k->out[i]);
  }
  return AP_OK;
}

/* Whether a partial layer's share of the contraction is empty on this
 * device: its partial sum is zero and its backward has nothing to do. */
static bool empty_contraction(const lgen *G, int ni) {
  const ap_node *n = &G->g->nodes[ni];
  const ap_dnode *dn = &G->dist->node[ni];
  for (int i = 0; i < n->n_in; i++) {
    const ap_value *v = ap_node_in(G->g, n, i);
    ap_dbox b = v ? read_box(G, ni, i) : (ap_dbox){{0}, {0}};
    if (v && i != dn->bias_slot && ap_numel(v->rank, v->dims) > 0 &&
        ap_dbox_volume(v->rank, &b) == 0)
      return true;
  }
  return false;
}

/* Whether every output box of node ni on this device is empty (a share of
 * 0 of a split dim): nothing to compute, and zero errors to send back. */
static bool empty_outputs(const lgen *G, int ni) {
  const ap_node *n = &G->g->nodes[ni];
  if (!G->multi)
    return false;
  for (int o = 0; o < n->n_out; o++) {
    const ap_value *v = ap_node_out(G->g, n, o);
    ap_dbox b = v ? vbox(G, n->out[o]) : (ap_dbox){{0}, {0}};
    if (v && ap_dbox_volume(v->rank, &b) > 0)
      return false;
  }
  return true;
}

/* The adjoint of partial sums summed at their owners (AP_DX_OWNER_REDUCE):
 * every copy's error added into its owner's, which is then the error of
 * each summand there; the owner keeps it for its own summand and sends it
 * to the device that sent it each other one. The errors are gathered in a
 * buffer of their own, zero elsewhere, and copied over the value's: a
 * device's error of what it does not own went to the owner, and of the
 * devices holding one summand only the one that sent it gets its error,
 * so that the error of each summand is counted once over the devices. */
static ap_status owner_reduce_adjoint(lgen *G, int ni) {
  const ap_dxfer *t = G->dist->node[ni].reduce;
  int y = G->g->nodes[ni].out[0], gy = grad_buf(G, y);
  ap_dbox yb = vbox(G, y);
  ap_status s = push_xchg_add(G, CG_PH_BACKWARD, ni, "partial sums' error to their owners",
                              t->spread, gy, gy, true, true);
  int err = s == AP_OK ? extra_buf(G, y, &yb, CG_ARENA) : -1;
  if (s != AP_OK || err < 0)
    return s != AP_OK ? s : oom(G);
  step_args z = new_step(CG_S_ZERO, CG_PH_BACKWARD, ni, y, "summands' error");
  add_arg(&z, err, true);
  if ((s = push_step(G, &z)) != AP_OK ||
      (s = push_xchg_add(G, CG_PH_BACKWARD, ni, "partial sums' error to their summands", t,
                         gy, err, true, false)) != AP_OK)
    return s;
  step_args cp = new_step(CG_S_SLICE, CG_PH_BACKWARD, ni, y, "summands' error");
  add_arg(&cp, err, false);
  add_arg(&cp, gy, true);
  return push_step(G, &cp);
}

/* Partial sums of node ni's output resolved over the devices, then its
 * left-out bias added: adding it after the sum rather than in one summand
 * keeps it right whichever devices hold an empty share of the contraction. */
static ap_status lower_reduce(lgen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  const ap_dnode *dn = &G->dist->node[ni];
  int y = n->out[0];
  ap_status s;
  if (dn->reduce->kind == AP_DX_ALLREDUCE) {
    step_args sa = new_step(CG_S_ALLREDUCE, CG_PH_FORWARD, ni, y, "partial sums");
    sa.s.xfer = dn->reduce;
    add_arg(&sa, y, true);
    s = push_comm(G, &sa);
  } else {
    /* One copy of the box per summand, summed in summand order, so every
     * device holding the box gets bitwise the same sum. A summand whose
     * devices hold none of the box (their share of a split above is
     * empty) sends nothing for it: it adds zero. */
    const ap_value *yv = &g->values[y];
    ap_dbox yb = vbox(G, y);
    int64_t count = ap_dbox_volume(yv->rank, &yb);
    int n_sum = dn->reduce->n_summands;
    int stg = extra_buf(G, -1, NULL, CG_ARENA);
    if (stg < 0)
      return oom(G);
    G->D->bufs[stg].bytes = G->D->bufs[y].bytes * n_sum;
    G->D->bufs[stg].dtype = yv->dtype;
    step_args z = new_step(CG_S_ZERO, CG_PH_FORWARD, ni, y, "summands");
    add_arg(&z, stg, true);
    step_args sa = new_step(CG_S_XCHG, CG_PH_FORWARD, ni, y, "partial sums");
    sa.s.xfer = dn->reduce;
    sa.s.mode = CG_XM_SUMMANDS;
    add_arg(&sa, y, false);
    add_arg(&sa, stg, true);
    if ((s = push_step(G, &z)) != AP_OK || (s = push_comm(G, &sa)) != AP_OK)
      return s;
    if (count > 0) {
      if (!begin_kernel(G, NULL, false))
        return oom(G);
      cg_kernel *k = G->kernel;
      cg_ty ct = cg_ty_of(yv->dtype);
      cg_x *part = cg_param_ptr(k, CG_R_X, ct, true), *out = cg_param_ptr(k, CG_R_Y, ct, false);
      int i = cg_for_n(k, "i", count);
      int acc = cg_mut(k, "acc", ct, cg_ld(k, part, cg_v(k, i)));
      int kv = cg_for(k, "k", cg_i64(k, 1), cg_i64(k, n_sum));
      cg_set_op(k, acc, CG_X_ADD,
                cg_ld(k, part, cg_add(k, cg_mul(k, cg_v(k, kv), cg_i64(k, count)), cg_v(k, i))));
      cg_end(k);
      cg_st(k, out, cg_v(k, i), cg_v(k, acc));
      cg_end(k);
      cg_param params[] = {ptr_param(CG_R_X, 0, yv->dtype, true, true),
                           ptr_param(CG_R_Y, 0, yv->dtype, false, true)};
      char key[96];
      snprintf(key, sizeof key, "sum %d summands %s[%lld]", n_sum, cg_ty_c(ct), (long long)count);
      step_args ks = new_step(CG_S_KERNEL, CG_PH_FORWARD, ni, y, "sum of the partial sums");
      if ((s = finish_kernel(G, params, 2, ap_arena_strdup(g->arena, key), &ks.s.kernel)) !=
          AP_OK)
        return s;
      add_arg(&ks, stg, false);
      add_arg(&ks, y, true);
      s = push_step(G, &ks);
    }
    /* Summed at the owners: each owner's sum on to the other devices
     * holding its elements. What a device sends (what it owns) and what it
     * receives never meet, so the exchange works in place. */
    if (s == AP_OK && dn->reduce->kind == AP_DX_OWNER_REDUCE) {
      step_args sp = new_step(CG_S_XCHG, CG_PH_FORWARD, ni, y, "partial sums from their owners");
      sp.s.xfer = dn->reduce->spread;
      add_arg(&sp, y, false);
      add_arg(&sp, y, true);
      s = push_comm(G, &sp);
    }
  }
  if (s != AP_OK || dn->bias_slot < 0)
    return s;
  const ap_value *bv = &g->values[n->in[dn->bias_slot]];
  ap_dbox bb = read_box(G, ni, dn->bias_slot), yb = vbox(G, y);
  if (bv->data && !(bv = cg_const_view(g, n->in[dn->bias_slot], &bb)))
    return oom(G);
  step_args sa = new_step(CG_S_KERNEL, CG_PH_FORWARD, ni, -1, "bias");
  if (!begin_kernel(G, n, false))
    return oom(G);
  cg_kernel *k = G->kernel;
  cg_operand_of(&g->values[y], &yb, &k->out[0]);
  cg_operand_of(bv, &bb, &k->in[0]);
  k->n_in = k->n_out = 1;
  cg_emit_bias_add(k);
  cg_param params[] = {ptr_param(CG_R_X, 0, bv->dtype, true, true),
                       ptr_param(CG_R_Y, 0, g->values[y].dtype, false, true)};
  if ((s = finish_kernel(G, params, 2, node_key(G, k, "bias"), &sa.s.kernel)) != AP_OK)
    return s;
  int rb = read_buf(G, ni, dn->bias_slot, CG_PH_FORWARD);
  if (rb < 0)
    return oom(G);
  add_arg(&sa, rb, false);
  add_arg(&sa, y, true);
  return push_step(G, &sa);
}

/* A node a convolution's epilogue computes (fuse.c): its output is the
 * storage of the chain's value it reads, which the convolution's kernel
 * has already written. */
static ap_status lower_absorbed(lgen *G, int ni) {
  const ap_node *n = &G->g->nodes[ni];
  int head = G->fuse.head[ni];
  if (G->fuse.expr[head]) { /* an element-wise expression: the head's output */
    int out = n->out[0], src = G->g->nodes[head].out[0];
    G->D->bufs[out].st = CG_ALIAS;
    G->D->bufs[out].alias_of = src;
    G->D->bufs[out].dtype = G->g->values[out].dtype;
    return AP_OK;
  }
  const cg_epi *e = G->fuse.chain[head];
  int slot = 0;
  for (int j = 0; j < e->n_ops; j++)
    if (e->ops[j].node == ni && e->ops[j].kind == CG_EPI_ADD)
      slot = 1 - e->ops[j].slot;
  int out = n->out[0], src = read_buf(G, ni, slot, CG_PH_FORWARD);
  if (src < 0)
    return oom(G);
  G->D->bufs[out].st = CG_ALIAS;
  G->D->bufs[out].alias_of = src;
  G->D->bufs[out].dtype = G->g->values[out].dtype;
  return AP_OK;
}

/* The epilogue's inputs of a fused convolution's step: BatchNormalization's
 * scale and shift where folding left them, the residual; their operands in
 * G->kernel, their parameters and arguments first. */
static ap_status fused_inputs(lgen *G, const cg_epi *e, step_args *sa, cg_param *params,
                              int *np) {
  cg_kernel *k = G->kernel;
  for (int j = 0; j < e->n_ops; j++) {
    const cg_epi_op *op = &e->ops[j];
    int reads[2][2] = {{-1, -1}, {-1, -1}}; /* {slot of the kernel, input of op's node} */
    if (op->kind == CG_EPI_AFFINE) {
      if (op->scale)
        reads[0][0] = CG_EPI_SLOT_SCALE, reads[0][1] = 1;
      if (op->shift)
        reads[1][0] = CG_EPI_SLOT_SHIFT, reads[1][1] = 2;
    } else if (op->kind == CG_EPI_ADD) {
      reads[0][0] = CG_EPI_SLOT_RESIDUAL, reads[0][1] = op->slot;
    }
    for (int r = 0; r < 2; r++) {
      if (reads[r][0] < 0)
        continue;
      int slot = reads[r][0], i = reads[r][1];
      ap_dbox b = read_box(G, op->node, i);
      cg_operand_of(&G->g->values[G->g->nodes[op->node].in[i]], &b, &k->in[slot]);
      int rb = read_buf(G, op->node, i, CG_PH_FORWARD);
      if (rb < 0)
        return oom(G);
      params[(*np)++] = ptr_param(CG_R_X, slot, k->in[slot].dtype, true, true);
      add_arg(sa, rb, false);
    }
  }
  return AP_OK;
}

/* The operands an element-wise expression reads besides its head's
 * inputs: their operands in G->kernel, and unless sa is NULL their
 * parameters and arguments first. */
static ap_status expr_inputs(lgen *G, const cg_ew *e, step_args *sa, cg_param *params, int *np) {
  cg_kernel *k = G->kernel;
  for (int q = e->layer ? 0 : 1; q < e->n_ops; q++)
    for (int i = 0; i < e->ops[q].n_args; i++) {
      const cg_ew_arg *a = &e->ops[q].a[i];
      if (a->kind != CG_EWA_SLOT)
        continue;
      int node = e->ops[q].node;
      ap_dbox b = read_box(G, node, a->in);
      cg_operand_of(&G->g->values[G->g->nodes[node].in[a->in]], &b, &k->in[a->slot]);
      if (!sa)
        continue;
      int rb = read_buf(G, node, a->in, CG_PH_FORWARD);
      if (rb < 0)
        return oom(G);
      params[(*np)++] = ptr_param(CG_R_X, a->slot, k->in[a->slot].dtype, true, true);
      add_arg(sa, rb, false);
    }
  return AP_OK;
}

static ap_status lower_forward(lgen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  if (node_folded(g, n))
    return AP_OK; /* its outputs are constants in the blob */
  if (G->fuse.head && G->fuse.head[ni] >= 0)
    return lower_absorbed(G, ni);
  if (G->fuse.in_place && G->fuse.in_place[ni])
    return AP_OK; /* a Transpose its readers read in place */
  ap_status s = setup_kernel(G, ni);
  if (s != AP_OK)
    return s;
  cg_kernel *k = G->kernel;
  const ap_dnode *dn = G->multi ? &G->dist->node[ni] : NULL;
  /* Transfers first: every device takes part in every one, in node order. */
  for (int i = 0; dn && dn->xfer_in && i < n->n_in; i++)
    if (dn->xfer_in[i] && read_buf(G, ni, i, CG_PH_FORWARD) < 0)
      return oom(G);
  bool partial = dn && dn->reduce;
  if (partial && dn->bias_slot >= 0) /* added once the partial sums are resolved */
    memset(&k->in[dn->bias_slot], 0, sizeof k->in[dn->bias_slot]);
  bool no_out = empty_outputs(G, ni);
  if (no_out || (partial && empty_contraction(G, ni))) {
    for (int o = 0; o < n->n_out; o++) {
      if (n->out[o] < 0)
        continue;
      arena_buf(G, n->out[o], n->out[o]);
      if (no_out)
        continue;
      step_args sa = new_step(CG_S_ZERO, CG_PH_FORWARD, ni, n->out[o],
                              "no share of the contraction");
      add_arg(&sa, n->out[o], true);
      if ((s = push_step(G, &sa)) != AP_OK)
        return s;
    }
    return partial ? lower_reduce(G, ni) : AP_OK;
  }
  if (!begin_node_kernel(G, false))
    return oom(G);
  const cg_ew *ew = G->fuse.expr ? G->fuse.expr[ni] : NULL;
  if (ew && !ew->layer) { /* the element-wise chain from this node on, one loop */
    if ((s = expr_inputs(G, ew, NULL, NULL, NULL)) != AP_OK)
      return s;
    cg_fuse_expr(k, ew);
  } else if ((s = forward_emitters[n->op](k)) != AP_OK)
    return s;
  if (k->alias_in >= 0) {
    int out = n->out[0], src = read_buf(G, ni, k->alias_in, CG_PH_FORWARD);
    if (src < 0)
      return oom(G);
    G->D->bufs[out].st = CG_ALIAS;
    G->D->bufs[out].alias_of = src;
    G->D->bufs[out].dtype = g->values[out].dtype;
    return AP_OK;
  }
  step_args sa = new_step(CG_S_KERNEL, CG_PH_FORWARD, ni, -1, "forward");
  cg_param params[3 * CG_MAX_OPERANDS + 4];
  int np = 0;
  const cg_epi *epi = G->fuse.chain ? G->fuse.chain[ni] : NULL;
  const char *key_dir = "forward";
  if (epi) {
    if ((s = fused_inputs(G, epi, &sa, params, &np)) != AP_OK)
      return s;
    cg_fuse_epilogue(k, epi);
    sa.s.what = key_dir = cg_fuse_describe(g, epi);
  }
  if (ew) {
    if ((s = expr_inputs(G, ew, &sa, params, &np)) != AP_OK)
      return s;
    if (ew->layer)
      cg_fuse_expr(k, ew);
    sa.s.what = key_dir = cg_fuse_expr_describe(g, ew);
  }
  if (k->trans_in) { /* " b(1,0)": B read in place through that Transpose */
    char what[1024];
    int len = snprintf(what, sizeof what, "%s", ew ? key_dir : "fused");
    for (int i = 0; i < 2 && len < (int)sizeof what - 64; i++)
      for (int j = 0; k->trans_in >> i & 1 && j < k->in[i].rank; j++)
        len += snprintf(what + len, sizeof what - (size_t)len, "%s%d%s",
                        j ? "," : i ? " b(" : " a(", k->perm_in[i][j],
                        j == k->in[i].rank - 1 ? ")" : "");
    sa.s.what = key_dir = ap_arena_strdup(g->arena, what);
  }
  sa.s.work = cg_kir_needs_work(k->ir);
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0 || !k->in[i].v || (k->skip_in >> i & 1))
      continue;
    params[np++] = ptr_param(CG_R_X, i, k->in[i].dtype, true, true);
    int rb = trans_in(G, ni, i) ? view_buf(G, ni, i, NULL) : read_buf(G, ni, i, CG_PH_FORWARD);
    if (rb >= 0 && k->packed && i == k->pack_slot)
      rb = packed_buf(G, rb);
    if (rb < 0)
      return oom(G);
    add_arg(&sa, rb, false);
  }
  for (int i = 0; i < n->n_out; i++) {
    if (n->out[i] < 0)
      continue;
    params[np++] = ptr_param(CG_R_Y, i, k->out[i].dtype, false, true);
    arena_buf(G, n->out[i], n->out[i]);
    add_arg(&sa, n->out[i], true);
  }
  if (sa.s.work)
    params[np++] = work_param();
  if ((s = finish_kernel(G, params, np, node_key(G, k, key_dir), &sa.s.kernel)) != AP_OK ||
      (s = push_step(G, &sa)) != AP_OK)
    return s;
  return partial ? lower_reduce(G, ni) : AP_OK;
}

/* The error of a partial layer's left-out bias: the output's error summed
 * over the dims the bias is broadcast along (times Gemm's beta), added into
 * the bias's error. */
static ap_status lower_bias_grad(lgen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  const ap_dnode *dn = &G->dist->node[ni];
  int y = n->out[0], bslot = dn->bias_slot, bvid = n->in[bslot];
  const ap_value *yv = &g->values[y], *bv = &g->values[bvid];
  ap_dbox yb = vbox(G, y), bb = read_box(G, ni, bslot);
  cg_operand yo, bo;
  cg_operand_of(yv, &yb, &yo);
  cg_operand_of(bv, &bb, &bo);
  int64_t ys[AP_MAX_RANK], bs[AP_MAX_RANK];
  cg_strides(yo.rank, yo.dims, ys);
  double scale = 1;
  if (n->op == AP_OP_GEMM) {
    cg_broadcast_strides(&bo, yo.rank, bs);
    scale = ap_attr_float(n, "beta", 1.0f);
  } else {
    for (int i = 0; i < yo.rank; i++)
      bs[i] = i == 1;
  }
  if (!begin_kernel(G, n, true))
    return oom(G);
  cg_kernel *k = G->kernel;
  k->out[0] = yo;
  k->in[0] = bo;
  k->n_in = k->n_out = 1;
  bool acc = G->inited[bvid];
  G->inited[bvid] = true;
  if (!acc) {
    int i = cg_for_n(k, "i", bo.numel);
    cg_st(k, cg_dx(k, 0), cg_v(k, i), cg_int(k, 0));
    cg_end(k);
  }
  int iv[AP_MAX_RANK];
  cg_loops(k, yo.rank, yo.dims, "i", iv);
  cg_st_op(k, cg_dx(k, 0), cg_idx(k, yo.rank, bs, iv), CG_X_ADD,
           cg_mul(k, cg_lit(k, yv->dtype, scale), cg_ld(k, cg_dy(k, 0), cg_idx(k, yo.rank, ys, iv))));
  cg_loops_end(k, yo.rank);
  cg_param params[] = {ptr_param(CG_R_DY, 0, yv->dtype, true, true),
                       ptr_param(CG_R_DX, 0, bv->dtype, false, true)};
  step_args sa = new_step(CG_S_KERNEL, CG_PH_BACKWARD, ni, -1, "bias backward");
  ap_status s = finish_kernel(G, params, 2, node_key(G, k, acc ? "bias-backward-add" : "bias-backward"),
                              &sa.s.kernel);
  if (s != AP_OK)
    return s;
  add_arg(&sa, grad_buf(G, y), false);
  arena_buf(G, grad_buf(G, bvid), bvid);
  add_arg(&sa, grad_buf(G, bvid), true);
  return push_step(G, &sa);
}

static ap_status lower_backward(lgen *G, const cg_grad_step *st) {
  ap_graph *g = G->g;
  int ni = st->node;
  const ap_node *n = &g->nodes[ni];
  const cg_grad_op *op = cg_grad_op_of(n->op);
  const ap_dnode *dn = G->multi ? &G->dist->node[ni] : NULL;
  bool partial = dn && dn->reduce;
  uint64_t want = st->want;
  ap_status s;
  /* A device whose box of an output no error reached holds a zero error. */
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && (st->has_dy >> i & 1) &&
        (s = ensure_grad(G, n->out[i], CG_PH_BACKWARD)) != AP_OK)
      return s;
  if (partial) {
    uint64_t bias = dn->bias_slot >= 0 ? (uint64_t)1 << dn->bias_slot : 0;
    if (want & bias) {
      if (!G->sch.trainable[n->in[dn->bias_slot]])
        return ap_error(G->d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                        "training on several devices: the bias has an error but is not a "
                        "trainable weight");
      if ((s = lower_bias_grad(G, ni)) != AP_OK)
        return s;
    }
    want &= ~bias;
    if (!want)
      return AP_OK;
    /* The adjoint of the partial sums' reduction: each summand's error is
     * the sum of the errors of the copies it went into. */
    int y = n->out[0];
    if (dn->reduce->kind == AP_DX_ALLREDUCE) {
      step_args sa = new_step(CG_S_ALLREDUCE, CG_PH_BACKWARD, ni, y, "partial sums' error");
      sa.s.xfer = dn->reduce;
      add_arg(&sa, grad_buf(G, y), true);
      s = push_comm(G, &sa);
    } else if (dn->reduce->kind == AP_DX_REDUCE) {
      s = push_xchg_add(G, CG_PH_BACKWARD, ni, "partial sums' error", dn->reduce,
                        grad_buf(G, y), grad_buf(G, y), true, true);
    } else {
      s = owner_reduce_adjoint(G, ni);
    }
    if (s != AP_OK)
      return s;
  }
  if ((s = setup_kernel(G, ni)) != AP_OK)
    return s;
  cg_kernel *k = G->kernel;
  if (partial && dn->bias_slot >= 0)
    memset(&k->in[dn->bias_slot], 0, sizeof k->in[dn->bias_slot]);
  /* Where each wanted error goes: the value's own error buffer when the
   * node read the value's own buffer (added to when this step wrote it
   * already), else a buffer of the box it read, sent on after the kernel. */
  int target[CG_MAX_OPERANDS];
  uint64_t acc = 0;
  for (int i = 0; i < n->n_in; i++) {
    target[i] = -1;
    if (n->in[i] < 0 || !(want >> i & 1))
      continue;
    int v = n->in[i], rb = read_buf(G, ni, i, CG_PH_BACKWARD);
    if (rb < 0)
      return oom(G);
    if (rb == v) {
      target[i] = grad_buf(G, v);
      if (G->inited[v])
        acc |= (uint64_t)1 << i;
      G->inited[v] = true;
      arena_buf(G, target[i], v);
    } else {
      ap_dbox b = read_box(G, ni, i);
      if ((target[i] = extra_buf(G, v, &b, CG_ARENA)) < 0)
        return oom(G);
    }
  }
  bool skip = empty_outputs(G, ni) || (partial && empty_contraction(G, ni));
  if (!skip) {
    cg_grad_kernel gk = {.k = k, .want = want, .acc = acc, .has_dy = st->has_dy};
    if (!begin_node_kernel(G, true))
      return oom(G);
    if ((s = op->emit(&gk)) != AP_OK)
      return s;
    step_args sa = new_step(CG_S_KERNEL, CG_PH_BACKWARD, ni, -1, "backward");
    sa.s.work = cg_kir_needs_work(k->ir);
    cg_param params[4 * CG_MAX_OPERANDS + 1];
    int np = 0;
    uint64_t reads = cg_grad_reads_in(op, want);
    for (int i = 0; i < n->n_in; i++) {
      if (n->in[i] < 0 || !(reads >> i & 1))
        continue;
      params[np++] = ptr_param(CG_R_X, i, k->in[i].dtype, true, true);
      int rb = read_buf(G, ni, i, CG_PH_BACKWARD);
      if (rb < 0)
        return oom(G);
      add_arg(&sa, rb, false);
    }
    for (int i = 0; i < n->n_out; i++) {
      if (n->out[i] < 0 || !(op->reads_out >> i & 1))
        continue;
      params[np++] = ptr_param(CG_R_Y, i, k->out[i].dtype, true, true);
      add_arg(&sa, n->out[i], false);
    }
    for (int i = 0; i < n->n_out; i++) {
      if (n->out[i] < 0 || !(st->has_dy >> i & 1))
        continue;
      params[np++] = ptr_param(CG_R_DY, i, k->out[i].dtype, true, true);
      add_arg(&sa, grad_buf(G, n->out[i]), false);
    }
    for (int i = 0; i < n->n_in; i++) {
      if (target[i] < 0)
        continue;
      params[np++] = ptr_param(CG_R_DX, i, k->in[i].dtype, false, false);
      add_arg(&sa, target[i], true);
    }
    if (sa.s.work)
      params[np++] = work_param();
    char dir[96];
    snprintf(dir, sizeof dir, "backward(want=%llx,acc=%llx,dy=%llx)", (unsigned long long)want,
             (unsigned long long)acc, (unsigned long long)st->has_dy);
    if ((s = finish_kernel(G, params, np, node_key(G, k, dir), &sa.s.kernel)) != AP_OK ||
        (s = push_step(G, &sa)) != AP_OK)
      return s;
  } else {
    for (int i = 0; i < n->n_in; i++) /* nothing to compute: zero errors */
      if (target[i] >= 0 && !(acc >> i & 1)) {
        step_args sa = new_step(CG_S_ZERO, CG_PH_BACKWARD, ni, n->in[i], "no share");
        add_arg(&sa, target[i], true);
        if ((s = push_step(G, &sa)) != AP_OK)
          return s;
      }
  }
  for (int i = 0; i < n->n_in; i++)
    if (target[i] >= 0 && target[i] != grad_buf(G, n->in[i]) &&
        (s = route_error(G, ni, n->in[i], target[i],
                         dn && dn->xfer_in ? dn->xfer_in[i] : NULL)) != AP_OK)
      return s;
  return AP_OK;
}

/* The loss over the logits: its value into *loss, its gradient into the
 * logits' gradient buffer. */
static ap_status lower_loss(lgen *G) {
  int lg = G->sch.logits;
  const ap_value *lv = logits(G);
  /* A device reads rows [lo, hi) of the logits, whole (loss_box); the loss
   * is the mean over the whole batch, so each device divides its rows' sum
   * by the whole N and the runtime adds the devices' parts
   * (aprt_step_loss). */
  ap_dbox box = loss_box(G), held = vbox(G, lg);
  int64_t numel = ap_dbox_volume(lv->rank, &box);
  if (!begin_kernel(G, NULL, true))
    return oom(G);
  cg_kernel *k = G->kernel;
  cg_ty ct = cg_ty_of(lv->dtype);
  cg_x *x0 = cg_param_ptr(k, CG_R_X, ct, true), *dx0 = cg_param_ptr(k, CG_R_DX, ct, false);
  cg_x *loss = cg_param_ptr(k, CG_R_LOSS, CG_T_F64, false);
  char key[128];
  cg_param params[5];
  int np = 0;
  params[np++] = ptr_param(CG_R_X, 0, lv->dtype, true, true);
  if (G->o->loss == CG_LOSS_SOFTMAX_CE) {
    int64_t classes = lv->rank >= 2 ? lv->dims[lv->rank - 1] : 0;
    if (classes < 1)
      return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, NULL, NULL,
                      "output '%s': the cross-entropy loss needs [N, ..., classes] logits",
                      lv->name);
    int64_t rows = numel / classes;
    snprintf(key, sizeof key, "loss softmax-ce %s[%lld,%lld] of %lld labels", cg_ty_c(ct),
             (long long)rows, (long long)classes, (long long)fed_numel(G));
    cg_x *labels = cg_param_ptr(k, CG_R_LABELS, CG_T_I64, true);
    cg_x *all = cg_param_ptr(k, CG_R_ALL_LABELS, CG_T_I64, true);
    /* The mean is over every device's labels that count: each device
     * counts them in the whole labels tensor and scales its own rows' sum,
     * and the runtime adds the devices' parts (aprt_step_loss). With every
     * label ignored the loss is 0 and nothing moves. */
    int counted = cg_mut(k, "counted", CG_T_I64, cg_int(k, 0));
    int i = cg_for_n(k, "i", fed_numel(G));
    cg_set_op(k, counted, CG_X_ADD, cg_ne(k, cg_ld(k, all, cg_v(k, i)), cg_int(k, CG_IGNORE_INDEX)));
    cg_end(k);
    int scale = cg_let(k, "scale", cg_sel(k, cg_v(k, counted),
                                          cg_div(k, cg_f64(k, 1.0), cg_cast(k, CG_T_F64, cg_v(k, counted))),
                                          cg_int(k, 0)));
    int total = cg_mut(k, "total", CG_T_F64, cg_int(k, 0));
    int n = cg_for_n(k, "n", rows);
    int z = cg_let(k, "z", cg_at(k, x0, cg_mul(k, cg_v(k, n), cg_i64(k, classes))));
    int dz = cg_let(k, "dz", cg_at(k, dx0, cg_mul(k, cg_v(k, n), cg_i64(k, classes))));
    int label = cg_let(k, "label", cg_ld(k, labels, cg_v(k, n)));
    cg_if(k, cg_eq(k, cg_v(k, label), cg_int(k, CG_IGNORE_INDEX)));
    int c = cg_for_n(k, "c", classes);
    cg_st(k, cg_v(k, dz), cg_v(k, c), cg_int(k, 0));
    cg_end(k);
    cg_else(k);
    int top = cg_mut(k, "top", CG_T_F64, cg_ldi(k, cg_v(k, z), 0));
    int sum = cg_mut(k, "sum", CG_T_F64, cg_int(k, 0));
    c = cg_for(k, "c", cg_i64(k, 1), cg_i64(k, classes));
    cg_if(k, cg_gt(k, cg_ld(k, cg_v(k, z), cg_v(k, c)), cg_v(k, top)));
    cg_set(k, top, cg_ld(k, cg_v(k, z), cg_v(k, c)));
    cg_end(k);
    cg_end(k);
    /* exp(z - top), in double, once per logit: kept in the error's row
     * (in the logits' type) for the gradient's pass, where computing it
     * again took a third of GPT-2 tiny's loss. A loop of its own, which
     * vectorises (apk_math.h's exp); the sum, in double, adds the kept
     * values in the row's order. */
    int picked = cg_let(k, "picked", cg_ld(k, cg_v(k, z), cg_v(k, label)));
    c = cg_for_n(k, "c", classes);
    cg_st(k, cg_v(k, dz), cg_v(k, c),
          cg_cast(k, ct, cg_fnd(k, CG_FN_EXP, cg_sub(k, cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, z), cg_v(k, c))), cg_v(k, top)))));
    cg_end(k);
    c = cg_for_n(k, "c", classes);
    cg_set_op(k, sum, CG_X_ADD, cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, dz), cg_v(k, c))));
    cg_end(k);
    cg_set_op(k, total, CG_X_ADD,
              cg_sub(k, cg_add(k, cg_v(k, top), cg_fnd(k, CG_FN_LOG, cg_v(k, sum))),
                     cg_v(k, picked)));
    c = cg_for_n(k, "c", classes);
    cg_x *kept = cg_cast(k, CG_T_F64, cg_ld(k, cg_v(k, dz), cg_v(k, c)));
    cg_st(k, cg_v(k, dz), cg_v(k, c),
          cg_cast(k, ct, cg_mul(k, cg_sub(k, cg_div(k, kept, cg_v(k, sum)), cg_eq(k, cg_v(k, c), cg_v(k, label))),
                                cg_v(k, scale))));
    cg_end(k);
    cg_end(k);
    cg_end(k);
    cg_st(k, loss, cg_i64(k, 0), cg_mul(k, cg_v(k, total), cg_v(k, scale)));
    params[np++] = ptr_param(CG_R_LABELS, 0, AP_DT_INT64, true, true);
    params[np++] = ptr_param(CG_R_DX, 0, lv->dtype, false, true);
    params[np++] = (cg_param){CG_R_LOSS, 0, CG_T_F64, false, true, false};
    params[np++] = ptr_param(CG_R_ALL_LABELS, 0, AP_DT_INT64, true, true);
  } else {
    snprintf(key, sizeof key, "loss weighted-sum %s[%lld]", cg_ty_c(ct), (long long)numel);
    cg_x *w = cg_param_ptr(k, CG_R_LOSS_W, ct, true);
    int total = cg_mut(k, "total", CG_T_F64, cg_int(k, 0));
    int i = cg_for_n(k, "i", numel);
    cg_set_op(k, total, CG_X_ADD,
              cg_mul(k, cg_cast(k, CG_T_F64, cg_ld(k, w, cg_v(k, i))), cg_ld(k, x0, cg_v(k, i))));
    cg_st(k, dx0, cg_v(k, i), cg_ld(k, w, cg_v(k, i)));
    cg_end(k);
    cg_st(k, loss, cg_i64(k, 0), cg_v(k, total));
    params[np++] = ptr_param(CG_R_LOSS_W, 0, lv->dtype, true, true);
    params[np++] = ptr_param(CG_R_DX, 0, lv->dtype, false, true);
    params[np++] = (cg_param){CG_R_LOSS, 0, CG_T_F64, false, true, false};
  }
  step_args sa = new_step(CG_S_KERNEL, CG_PH_LOSS, -1, -1, "loss");
  sa.s.reports_loss = true;
  ap_status s = finish_kernel(G, params, np, ap_arena_strdup(G->g->arena, key), &sa.s.kernel);
  if (s != AP_OK)
    return s;
  /* The rows: the device's own box of the logits, a slice of it, or the
   * rows the loss's transfer brings; their error goes the same way back. */
  const ap_dxfer *t = G->multi ? G->dist->loss_xfer : NULL;
  int src = lg, err = grad_buf(G, lg);
  if (t || !ap_dbox_equal(lv->rank, &box, &held)) {
    if ((src = extra_buf(G, lg, &box, CG_ARENA)) < 0 ||
        (err = extra_buf(G, lg, &box, CG_ARENA)) < 0)
      return oom(G);
    step_args x = new_step(t ? CG_S_XCHG : CG_S_SLICE, CG_PH_LOSS, -1, lg,
                           t ? "the loss's rows" : "slice");
    x.s.xfer = t;
    add_arg(&x, lg, false);
    add_arg(&x, src, true);
    if ((s = t ? push_comm(G, &x) : push_step(G, &x)) != AP_OK)
      return s;
  } else {
    arena_buf(G, err, lg);
    G->inited[lg] = true;
  }
  add_arg(&sa, src, false);
  add_arg(&sa, fed_buf(G), false);
  add_arg(&sa, err, true);
  add_arg(&sa, CG_ARG_LOSS, false);
  if (G->o->loss == CG_LOSS_SOFTMAX_CE)
    add_arg(&sa, CG_ARG_LABELS, false);
  if ((s = push_step(G, &sa)) != AP_OK)
    return s;
  if (err == grad_buf(G, lg))
    return AP_OK;
  if ((s = ensure_grad(G, lg, CG_PH_BACKWARD)) != AP_OK)
    return s;
  if (t)
    return push_xchg_add(G, CG_PH_BACKWARD, -1, "the loss's error back", t, err,
                         grad_buf(G, lg), true, false);
  step_args a = new_step(CG_S_ADDBOX, CG_PH_BACKWARD, -1, lg, "error of a slice");
  add_arg(&a, err, false);
  add_arg(&a, grad_buf(G, lg), true);
  return push_step(G, &a);
}

/* SGD on one trainable weight: v = mu v + g; w -= lr v (w -= lr g without
 * momentum), in the weight's type with the rate rounded to it. */
static ap_status lower_update(lgen *G, int v) {
  const ap_value *val = &G->g->values[v];
  ap_dbox box = vbox(G, v);
  int64_t numel = ap_dbox_volume(val->rank, &box);
  bool mom = G->o->momentum != 0;
  if (!begin_kernel(G, NULL, true))
    return oom(G);
  cg_kernel *k = G->kernel;
  cg_ty ct = cg_ty_of(val->dtype);
  cg_x *w = cg_param_ptr(k, CG_R_W, ct, false), *g = cg_param_ptr(k, CG_R_G, ct, true);
  cg_x *rate = cg_cast(k, ct, cg_lr(k));
  int i = cg_for_n(k, "i", numel);
  if (mom) {
    cg_x *vp = cg_param_ptr(k, CG_R_V, ct, false);
    cg_st(k, vp, cg_v(k, i),
          cg_add(k, cg_mul(k, cg_lit(k, val->dtype, G->o->momentum), cg_ld(k, vp, cg_v(k, i))),
                 cg_ld(k, g, cg_v(k, i))));
    cg_st_op(k, w, cg_v(k, i), CG_X_SUB, cg_mul(k, rate, cg_ld(k, vp, cg_v(k, i))));
  } else {
    cg_st_op(k, w, cg_v(k, i), CG_X_SUB, cg_mul(k, rate, cg_ld(k, g, cg_v(k, i))));
  }
  cg_end(k);
  cg_param params[4];
  int np = 0;
  params[np++] = ptr_param(CG_R_W, 0, val->dtype, false, true);
  params[np++] = ptr_param(CG_R_G, 0, val->dtype, true, true);
  if (mom)
    params[np++] = ptr_param(CG_R_V, 0, val->dtype, false, true);
  params[np++] = (cg_param){CG_R_LR, 0, CG_T_F32, false, false, true};
  char key[96];
  snprintf(key, sizeof key, "sgd%s %s[%lld]", mom ? " momentum" : "", cg_ty_c(ct), (long long)numel);
  step_args sa = new_step(CG_S_KERNEL, CG_PH_UPDATE, -1, v, "sgd");
  ap_status s = finish_kernel(G, params, np, ap_arena_strdup(G->g->arena, key), &sa.s.kernel);
  if (s != AP_OK)
    return s;
  add_arg(&sa, v, true);
  add_arg(&sa, grad_buf(G, v), false);
  if (mom)
    add_arg(&sa, mom_buf(G, v), true);
  add_arg(&sa, CG_ARG_LR, false);
  return push_step(G, &sa);
}

/* The gradient of a trainable weight summed over the devices holding
 * copies of its elements (passes/distribute.h), before the update: every
 * copy then gets the same update. A device that read none of it holds a
 * zero gradient. */
static ap_status lower_weight_sum(lgen *G, int v) {
  ap_status s = ensure_grad(G, v, CG_PH_GRADIENT);
  const ap_dxfer *t = G->multi ? G->dist->wgrad[v] : NULL;
  if (s != AP_OK || !t)
    return s;
  if (t->kind == AP_DX_REDUCE)
    return push_xchg_add(G, CG_PH_GRADIENT, -1, "gradient sum", t, grad_buf(G, v),
                         grad_buf(G, v), false, true);
  if (t->kind == AP_DX_OWNER_SUM) {
    /* Every copy added into its owner's, then the owner's sum over the
     * copies. What a device sends and what it receives never meet: it sends
     * the parts others own and sums the parts it owns, then sends those and
     * receives the others, so both steps work in place. */
    s = push_xchg_add(G, CG_PH_GRADIENT, -1, "gradient sum at its owners", t, grad_buf(G, v),
                      grad_buf(G, v), true, true);
    if (s != AP_OK)
      return s;
    step_args sa = new_step(CG_S_XCHG, CG_PH_GRADIENT, -1, v, "gradient sum from its owners");
    sa.s.xfer = t;
    add_arg(&sa, grad_buf(G, v), false);
    add_arg(&sa, grad_buf(G, v), true);
    return push_comm(G, &sa);
  }
  step_args sa = new_step(CG_S_ALLREDUCE, CG_PH_GRADIENT, -1, v, "all-reduce");
  sa.s.xfer = t;
  add_arg(&sa, grad_buf(G, v), true);
  return push_comm(G, &sa);
}

/* ---- the arena -------------------------------------------------------------------- */

static ap_status plan_arena(lgen *G) {
  cg_device *D = G->D;
  for (int b = 0; b < D->n_bufs; b++)
    D->bufs[b].last_use = -1;
  for (int pos = 0; pos < D->n_steps; pos++)
    for (int a = 0; a < D->steps[pos].n_args; a++)
      if (D->steps[pos].args[a] >= 0) {
        int r = root_of(G, D->steps[pos].args[a]);
        if (D->bufs[r].last_use < pos)
          D->bufs[r].last_use = pos;
      }
  /* Read after the steps: the outputs. */
  for (int i = 0; i < D->n_outs; i++)
    if (D->outs[i].buf >= 0)
      D->bufs[root_of(G, D->outs[i].buf)].last_use = INT32_MAX;
  cg_block *live = ap_arena_array(G->g->arena, (size_t)D->n_bufs + 1, sizeof *live);
  if (!live)
    return oom(G);
  int n_live = 0;
  for (int pos = 0; pos < D->n_steps; pos++) {
    const cg_step *st = &D->steps[pos];
    /* Written buffers first, so none shares memory with what the step reads. */
    for (int a = 0; a < st->n_args; a++) {
      int b = st->args[a];
      if (b < 0 || !(st->writes >> a & 1))
        continue;
      cg_buf *bi = &D->bufs[b];
      if (bi->st == CG_ARENA && !bi->placed && bi->bytes > 0) {
        bi->offset = cg_arena_alloc(live, &n_live, bi->bytes, b);
        bi->placed = true;
        D->unshared_bytes += cg_align_up(bi->bytes);
        if (bi->offset + cg_align_up(bi->bytes) > D->arena_bytes)
          D->arena_bytes = bi->offset + cg_align_up(bi->bytes);
      }
    }
    for (int i = 0; i < n_live; i++)
      if (D->bufs[live[i].id].last_use <= pos)
        cg_arena_free(live, &n_live, live[i--].id);
  }
  for (int b = 0; b < D->n_bufs; b++)
    if (D->bufs[b].st == CG_ARENA && !D->bufs[b].placed)
      D->bufs[b].offset = 0; /* empty: never read or written */
  return AP_OK;
}

/* ---- the order of the nodes --------------------------------------------------------- */

/* A node that reads no run-time value (the ConstantOfShape weights of the
 * light models, above the folder's size limit) runs just before its first
 * reader, rather than where the file lists it, so its output is not live
 * from the start of the program. Everything else keeps the topological order
 * of the graph. */
static void place(lgen *G, const bool *source, bool *placed, int ni) {
  const ap_node *n = &G->g->nodes[ni];
  placed[ni] = true;
  for (int i = 0; i < n->n_in; i++) {
    int p = n->in[i] >= 0 ? G->g->values[n->in[i]].producer : -1;
    if (p >= 0 && source[p] && !placed[p])
      place(G, source, placed, p);
  }
  G->order[G->n_order++] = ni;
}

static ap_status schedule(lgen *G) {
  ap_graph *g = G->g;
  bool *source = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *source);
  bool *placed = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *placed);
  G->order = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *G->order);
  if (!source || !placed || !G->order)
    return oom(G);
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

/* ---- one device ------------------------------------------------------------------- */

/* What several devices need of a training graph: float32 errors (they are
 * added across devices in float32). */
static ap_status check_float32_errors(lgen *G) {
  ap_graph *g = G->g;
  for (int v = 0; v < G->nv; v++) {
    const ap_value *val = &g->values[v];
    if (G->sch.needs_grad[v] && val->dtype != AP_DT_FLOAT)
      return ap_error(G->d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                      "training on several devices: '%s' is %s, and errors and gradients "
                      "are summed across devices in float32 only", val->name,
                      ap_dtype_name(val->dtype));
  }
  return AP_OK;
}

/* The outputs device D writes: its box of each (a device holding none of
 * an output another device holds writes nothing). */
static ap_status plan_outputs(lgen *G) {
  ap_graph *g = G->g;
  cg_program *p = G->p;
  cg_device *D = G->D;
  D->outs = ap_arena_array(g->arena, (size_t)p->n_outputs + 1, sizeof *D->outs);
  if (!D->outs)
    return oom(G);
  int index = 0;
  for (int i = 0; i < g->n_outputs; i++, index++) {
    int v = g->outputs[i];
    ap_dbox b = vbox(G, v);
    if (G->multi && ap_dbox_volume(g->values[v].rank, &b) == 0 &&
        ap_numel(g->values[v].rank, g->values[v].dims) > 0)
      continue;
    D->outs[D->n_outs++] = (cg_output){index, v, b, v};
  }
  if (G->o->export_grads) {
    D->outs[D->n_outs++] = (cg_output){.index = index++, .value = -1, .buf = CG_ARG_LOSS};
    for (int i = 0; i < G->n_exports; i++, index++)
      D->outs[D->n_outs++] =
          (cg_output){index, G->exports[i], vbox(G, G->exports[i]), grad_buf(G, G->exports[i])};
  }
  /* The updated weights: each device writes its box (copies are equal). */
  for (int v = 0; G->o->export_weights && v < G->nv; v++)
    if (G->sch.trainable && G->sch.trainable[v])
      D->outs[D->n_outs++] = (cg_output){index++, v, vbox(G, v), v};
  return AP_OK;
}

static ap_status lower_device(lgen *G) {
  ap_graph *g = G->g;
  cg_device *D = G->D;
  int reads = 0;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    G->in_off[ni] = reads;
    reads += g->nodes[ni].n_in;
  }
  G->rmap = ap_arena_array(g->arena, (size_t)reads + 1, sizeof *G->rmap);
  G->inited = ap_arena_array(g->arena, (size_t)G->nv + 1, sizeof *G->inited);
  if (!G->rmap || !G->inited ||
      !ap_arena_grow(g->arena, (void **)&D->bufs, &D->cap_bufs, 3 * G->nv + 1,
                     sizeof *D->bufs))
    return oom(G);
  D->n_bufs = 3 * G->nv + 1;
  memset(D->bufs, 0, (size_t)D->n_bufs * sizeof *D->bufs);
  for (int b = 0; b < D->n_bufs; b++) {
    D->bufs[b].input_index = -1;
    D->bufs[b].alias_of = -1;
    D->bufs[b].value = b < 3 * G->nv ? b % G->nv : -1;
  }
  for (int i = 0; i < reads; i++)
    G->rmap[i] = -1;
  G->n_tags = 0;
  ap_status s = G->multi && G->o->train ? check_float32_errors(G) : AP_OK;
  if (s == AP_OK)
    s = plan_storage(G);
  for (int pos = 0; s == AP_OK && pos < G->n_order; pos++)
    s = lower_forward(G, G->order[pos]);
  for (int i = 0; s == AP_OK && i < g->n_outputs; i++) {
    int v = g->outputs[i];
    if (D->bufs[v].st == CG_NONE && g->values[v].data)
      s = place_constant(G, v);
    if (s == AP_OK && D->bufs[root_of(G, v)].st == CG_NONE)
      s = ap_error(G->d, AP_ERR_INVALID, g->path, NULL, NULL,
                   "graph output '%s' is computed by no node", g->values[v].name);
  }
  if (G->o->train) {
    if (s == AP_OK)
      s = lower_loss(G);
    for (int i = 0; s == AP_OK && i < G->sch.n_steps; i++)
      s = lower_backward(G, &G->sch.steps[i]);
    for (int v = 0; s == AP_OK && v < G->nv; v++)
      if (G->sch.trainable[v])
        s = lower_weight_sum(G, v);
    for (int v = 0; s == AP_OK && v < G->nv; v++)
      if (G->sch.trainable[v])
        s = lower_update(G, v);
  }
  /* Every buffer records its box, for the backends. */
  for (int b = 0; s == AP_OK && b < 3 * G->nv; b++)
    D->bufs[b].box = vbox(G, b % G->nv);
  if (s == AP_OK && G->o->train)
    D->bufs[fed_buf(G)].box = loss_box(G);
  if (s == AP_OK)
    s = plan_outputs(G);
  if (s == AP_OK && G->multi && !cg_overlap(D, g->arena, G->overlap))
    s = oom(G);
  if (s == AP_OK)
    s = plan_arena(G);
  return s;
}

/* Gives every step of every device the row of the pricing plan whose time
 * it is (ap_plan_rows): its node's, else its value's (a weight's gradient
 * sum and update, an error zeroed or added), else the loss's vertex for
 * the loss; and the program the plan's rows, to report beside their
 * measured times. */
static ap_status time_by_rows(lgen *G, const ap_plan *plan) {
  const ap_graph *g = G->g;
  cg_program *p = G->p;
  int *of_node = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *of_node);
  int *of_value = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *of_value);
  p->row_names = ap_arena_array(g->arena, (size_t)plan->n_vertices + 1, sizeof *p->row_names);
  p->row_time_s = G->o->train ? ap_arena_array(g->arena, (size_t)plan->n_vertices + 1,
                                                sizeof *p->row_time_s)
                               : NULL;
  if (!of_node || !of_value || !p->row_names || (G->o->train && !p->row_time_s))
    return oom(G);
  ap_plan_rows(plan, g, of_node, of_value);
  p->n_rows = plan->n_vertices;
  for (int v = 0; v < plan->n_vertices; v++) {
    int n = plan->v[v].node;
    p->row_names[v] = n < g->n_nodes ? g->nodes[n].name : "";
    if (p->row_time_s)
      p->row_time_s[v] = plan->row_time_s[v];
  }
  for (int dev = 0; dev < p->n_dev; dev++) {
    cg_device *D = &p->devs[dev];
    for (int si = 0; si < D->n_steps; si++) {
      cg_step *st = &D->steps[si];
      st->row = st->node >= 0 ? of_node[st->node]
                : st->value >= 0 && st->value < g->n_values ? of_value[st->value]
                : st->phase == CG_PH_LOSS ? plan->loss_vertex
                                          : -1;
    }
  }
  return AP_OK;
}

ap_status cg_lower(ap_graph *g, const cg_lower_opts *o, cg_program **out, ap_diag *d) {
  lgen G = {.g = g, .d = d, .o = o, .nv = g->n_values};
  ap_graph_link(g);
  cg_program *p = ap_arena_alloc(g->arena, sizeof *p);
  G.kernel = ap_arena_alloc(g->arena, sizeof *G.kernel);
  G.pack_kernel = ap_arena_alloc(g->arena, sizeof *G.pack_kernel);
  /* ACCPAR_NO_PREPACK=1: every call packs its weights, for measuring what
   * packing once saves (as ACCPAR_NO_FUSION does for fusion). */
  const char *no_prepack = getenv("ACCPAR_NO_PREPACK");
  G.prepack = !o->train && !(no_prepack && *no_prepack && strcmp(no_prepack, "0") != 0);
  /* ACCPAR_NO_OVERLAP=1: every exchange stays where its reader is, for
   * measuring what moving the halves apart gains. */
  const char *no_overlap = getenv("ACCPAR_NO_OVERLAP");
  G.overlap = !(no_overlap && *no_overlap && strcmp(no_overlap, "0") != 0);
  G.in_off = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *G.in_off);
  if (!p || !G.kernel || !G.pack_kernel || !G.in_off)
    return oom(&G);
  G.p = p;
  p->g = g;
  p->o = *o;
  ap_status s = AP_OK;
  ap_dist *dist = NULL;
  if (o->train) {
    if ((s = cg_train_schedule_build(g, o->grad_inputs, &G.sch, d)) != AP_OK)
      return s;
    uint64_t *want = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *want);
    if (!want)
      return oom(&G);
    for (int i = 0; i < G.sch.n_steps; i++)
      want[G.sch.steps[i].node] = G.sch.steps[i].want;
    if (g->plan && o->export_grads)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                      "exported gradients are generated for one device only");
    s = g->plan ? ap_distribute_train(g, want, G.sch.trainable, &dist, d)
                : ap_distribute(g, &dist, d);
  } else {
    s = ap_distribute(g, &dist, d);
  }
  if (s == AP_OK)
    s = schedule(&G);
  if (s == AP_OK)
    s = cg_fuse_plan(g, dist, G.order, G.n_order, o->train, &G.fuse, d);
  if (s == AP_OK)
    s = plan_specs(&G);
  if (s != AP_OK)
    return s;
  G.dist = p->dist = dist;
  G.n_dev = p->n_dev = dist->n_dev;
  G.multi = dist->n_dev > 1;
  p->devs = ap_arena_array(g->arena, (size_t)G.n_dev, sizeof *p->devs);
  p->predicted_bytes = ap_arena_array(g->arena, (size_t)G.n_dev, sizeof *p->predicted_bytes);
  if (!p->devs || !p->predicted_bytes)
    return oom(&G);
  for (int dev = 0; s == AP_OK && dev < G.n_dev; dev++) {
    G.dev = dev;
    G.D = &p->devs[dev];
    G.D->dev = dev;
    s = lower_device(&G);
    /* Inference: the distribution's forward bytes, which the transfers move
     * exactly; training: the bytes of the step's own communication, which
     * the distribution's step bytes predict (printed beside them). */
    p->predicted_bytes[dev] = o->train ? (double)G.D->step_bytes : dist->fwd_bytes[dev];
  }
  if (s == AP_OK && o->train && G.multi)
    p->plan_step_bytes = dist->step_bytes;
  const ap_plan *plan = o->priced ? o->priced->plan : g->plan;
  if (s == AP_OK && plan) {
    if (o->train)
      p->predicted_step_time_s = plan->step_time_s;
    s = time_by_rows(&G, plan);
  }
  *out = p;
  return s;
}
