/* Training programs: the training schedule (which values are
 * trainable, which carry a gradient, the backward steps in order and where
 * gradients accumulate), and the program that runs forward, the loss,
 * backward and the SGD update for --steps steps.
 *
 * The program's structure follows emit_c.c (one kernel per distinct body,
 * an activation arena planned from last use, constants in weights.bin), with
 * three more kinds of storage: the trainable weights, copied out of the blob
 * into a writable region at start; their momentum, zeroed; and gradients,
 * which live in the arena like activations. The arena is planned over the
 * whole step (forward, loss, backward, update), so a forward value a backward
 * kernel reads stays live until that kernel has run. */
#define _XOPEN_SOURCE 700
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/train.h"
#include "passes/distribute.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"

static const cg_emit_fn forward_emitters[AP_OP_COUNT] = {
#define OP(id, ...) [AP_OP_##id] = cg_emit_##id,
#include "ir/ops.def"
#undef OP
};


/* ---- helpers shared by the backward emitters ----------------------------- */

const cg_grad_op *cg_grad_op_of(ap_op op) {
  static const cg_grad_op *const families[] = {cg_grad_ops_layer, cg_grad_ops_ewise,
                                               cg_grad_ops_pool, cg_grad_ops_norm,
                                               cg_grad_ops_reduce, cg_grad_ops_move};
  if (op >= AP_OP_COUNT)
    return NULL;
  for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
    if (families[f][op].emit)
      return &families[f][op];
  return NULL;
}

uint64_t cg_grad_reads_in(const cg_grad_op *op, uint64_t want) {
  if (!op->bilinear)
    return op->reads_in;
  return (op->reads_in & ~(uint64_t)3) | (want & 1 ? 2 : 0) | (want & 2 ? 1 : 0);
}

const char *cg_grad_assign(const cg_grad_kernel *gk, int slot) {
  return gk->acc >> slot & 1 ? "+=" : "=";
}

void cg_grad_zero(cg_grad_kernel *gk, int slot) {
  if (gk->acc >> slot & 1)
    return;
  cg_printf(gk->k, "for (int64_t i = 0; i < %lld; i++)\n  dx%d[i] = 0;\n",
            (long long)gk->k->in[slot].numel, slot);
}

void cg_grad_unbroadcast(cg_grad_kernel *gk, int slot, const char *expr) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[slot], *y = &k->out[0];
  /* Broadcast along some dim: several output elements add into one. */
  bool reduces = x->numel != y->numel;
  if (reduces)
    cg_grad_zero(gk, slot);
  int64_t st[AP_MAX_RANK];
  char idx[512];
  cg_broadcast_strides(x, y->rank, st);
  cg_printf(k, "{\nint64_t o = 0;\n");
  cg_loops_open(k, y->rank, y->dims, "j");
  cg_printf(k, "const int64_t i = %s;\ndx%d[i] %s %s;\no++;\n",
            cg_index(idx, sizeof idx, y->rank, st, "j"), slot,
            reduces ? "+=" : cg_grad_assign(gk, slot), expr);
  cg_loops_close(k, y->rank);
  cg_printf(k, "}\n");
}

const char *cg_grad_bcast_elem(cg_grad_kernel *gk, int slot, char *buf, size_t cap) {
  const cg_operand *x = &gk->k->in[slot], *y = &gk->k->out[0];
  int64_t st[AP_MAX_RANK];
  char idx[512];
  if (x->numel == y->numel)
    snprintf(buf, cap, "x%d[o]", slot);
  else if (x->numel == 1)
    snprintf(buf, cap, "x%d[0]", slot);
  else {
    cg_broadcast_strides(x, y->rank, st);
    if (snprintf(buf, cap, "x%d[%s]", slot, cg_index(idx, sizeof idx, y->rank, st, "j")) >=
        (int)cap)
      ap_die("index expression longer than %zu bytes", cap);
  }
  return buf;
}

void cg_grad_gemm(cg_kernel *k, ap_dtype t, int ta, int tb, int64_t m, int64_t n, int64_t kk,
                  double alpha, const char *a, const char *b, int beta, const char *c) {
  int64_t lda = ta ? m : kk, ldb = tb ? kk : n;
  char al[64];
  if (t == AP_DT_FLOAT) {
    cg_printf(k, "apk_sgemm(%d, %d, %lld, %lld, %lld, %s, %s, %lld, %s, %lld, %s, %s, %lld, work);\n",
              ta, tb, (long long)m, (long long)n, (long long)kk, cg_literal(al, t, alpha), a,
              (long long)lda, b, (long long)ldb, beta ? "1.0f" : "0.0f", c, (long long)n);
    k->needs_kernels_lib = true;
    return;
  }
  char ai[96], bi[96];
  snprintf(ai, sizeof ai, ta ? "l * %lld + i" : "i * %lld + l", (long long)lda);
  snprintf(bi, sizeof bi, tb ? "j * %lld + l" : "l * %lld + j", (long long)ldb);
  cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\nfor (int64_t j = 0; j < %lld; j++) {\n"
               "double s = 0;\nfor (int64_t l = 0; l < %lld; l++)\n"
               "  s += (double)(%s)[%s] * (%s)[%s];\n"
               "(%s)[i * %lld + j] %s %s * s;\n}\n",
            (long long)m, (long long)n, (long long)kk, a, ai, b, bi, c, (long long)n,
            beta ? "+=" : "=", cg_literal(al, AP_DT_DOUBLE, alpha));
}

/* ---- the schedule --------------------------------------------------------- */

/* Input slots of n through which a gradient can flow: the operator's table,
 * or every slot for an operator without a backward (so that the schedule
 * notices it on the gradient path and says so). */
static uint64_t diff_slots(const ap_node *n) {
  const cg_grad_op *op = cg_grad_op_of(n->op);
  if (op)
    return op->diff_in;
  return n->n_in >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << n->n_in) - 1;
}

static bool node_folded(const ap_graph *g, const ap_node *n) {
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && !g->values[n->out[i]].data)
      return false;
  return true;
}

ap_status cg_train_schedule_build(ap_graph *g, bool grad_inputs, cg_train_schedule *s,
                                  ap_diag *d) {
  memset(s, 0, sizeof *s);
  int nv = g->n_values;
  if (g->n_outputs < 1)
    return ap_error(d, AP_ERR_INVALID, g->path, NULL, NULL, "the graph has no output to train");
  s->logits = g->outputs[0];
  const ap_value *lv = &g->values[s->logits];
  if (lv->dtype != AP_DT_FLOAT && lv->dtype != AP_DT_DOUBLE)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                    "output '%s' is %s: the loss needs float32 or float64", lv->name,
                    ap_dtype_name(lv->dtype));
  bool *diff = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *diff);
  bool *reach = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *reach);
  bool *written = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *written);
  s->trainable = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *s->trainable);
  s->needs_grad = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *s->needs_grad);
  s->kept = ap_arena_array(g->arena, (size_t)nv + 1, sizeof *s->kept);
  s->steps = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *s->steps);
  if (!diff || !reach || !written || !s->trainable || !s->needs_grad || !s->kept || !s->steps)
    return cg_oom(g, d);
  for (int v = 0; v < nv; v++) {
    const ap_value *val = &g->values[v];
    bool fl = val->dtype == AP_DT_FLOAT || val->dtype == AP_DT_DOUBLE;
    diff[v] = fl && (ap_value_is_parameter(val) ||
                     (grad_inputs && val->kind == AP_VAL_INPUT && !val->data));
  }
  /* Forward: a node's float outputs are differentiable when a
   * differentiable value enters one of its differentiable slots. */
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || node_folded(g, n))
      continue;
    uint64_t slots = diff_slots(n);
    bool any = false;
    for (int i = 0; i < n->n_in && i < 64; i++)
      any |= (slots >> i & 1) && n->in[i] >= 0 && diff[n->in[i]];
    for (int i = 0; i < n->n_out && any; i++) {
      const ap_value *o = n->out[i] >= 0 ? &g->values[n->out[i]] : NULL;
      if (o && (o->dtype == AP_DT_FLOAT || o->dtype == AP_DT_DOUBLE))
        diff[n->out[i]] = true;
    }
  }
  /* Backward: which values the loss depends on through differentiable
   * slots. */
  reach[s->logits] = true;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || node_folded(g, n))
      continue;
    bool any = false;
    for (int i = 0; i < n->n_out; i++)
      any |= n->out[i] >= 0 && reach[n->out[i]] && diff[n->out[i]];
    uint64_t slots = diff_slots(n);
    for (int i = 0; i < n->n_in && i < 64 && any; i++)
      if ((slots >> i & 1) && n->in[i] >= 0)
        reach[n->in[i]] = true;
  }
  for (int v = 0; v < nv; v++) {
    s->needs_grad[v] = diff[v] && reach[v];
    s->trainable[v] = s->needs_grad[v] && g->values[v].kind == AP_VAL_WEIGHT;
  }
  /* The loss writes the gradient of the logits first. */
  written[s->logits] = true;
  for (int ni = g->n_nodes - 1; ni >= 0; ni--) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || node_folded(g, n))
      continue;
    cg_grad_step st = {.node = ni};
    for (int i = 0; i < n->n_out && i < 64; i++)
      if (n->out[i] >= 0 && s->needs_grad[n->out[i]])
        st.has_dy |= (uint64_t)1 << i;
    if (!st.has_dy)
      continue;
    uint64_t slots = diff_slots(n);
    for (int i = 0; i < n->n_in && i < 64; i++)
      if ((slots >> i & 1) && n->in[i] >= 0 && s->needs_grad[n->in[i]]) {
        st.want |= (uint64_t)1 << i;
        if (written[n->in[i]])
          st.acc |= (uint64_t)1 << i;
        written[n->in[i]] = true;
      }
    if (!st.want)
      continue;
    const cg_grad_op *op = cg_grad_op_of(n->op);
    if (!op)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "training: the operator has no backward kernel, and the gradient of "
                      "a trainable weight flows through it");
    uint64_t reads = cg_grad_reads_in(op, st.want);
    for (int i = 0; i < n->n_in && i < 64; i++)
      if ((reads >> i & 1) && n->in[i] >= 0)
        s->kept[n->in[i]] = true;
    for (int i = 0; i < n->n_out && i < 64; i++)
      if ((op->reads_out >> i & 1) && n->out[i] >= 0)
        s->kept[n->out[i]] = true;
    s->steps[s->n_steps++] = st;
  }
  return AP_OK;
}

/* ---- the program: buffers and storage ------------------------------------- */

/* Buffer ids: the forward value v is v, its gradient NV + v, its momentum
 * 2 NV + v; 3 NV is the loss's fed operand (labels or weights). */
typedef enum storage {
  ST_NONE,
  ST_INPUT,  /* a run-time input */
  ST_CONST,  /* the constant blob */
  ST_PARAM,  /* the writable copy of the trainable weights */
  ST_MOM,    /* the momentum of a trainable weight */
  ST_ARENA,  /* the arena */
  ST_ALIAS,  /* another buffer's storage */
  ST_INBOX   /* this device's box of a run-time input, packed once before the steps */
} storage;

typedef struct buf_info {
  storage st;
  ap_dtype dtype;
  int64_t bytes;
  int64_t offset;   /* into the blob, the weights, the momentum, the inbox or the arena */
  int64_t src;      /* ST_PARAM: where the blob holds its initial value */
  int input_index;  /* ST_INPUT, ST_INBOX */
  int alias_of;     /* ST_ALIAS */
  int last_use;     /* position of the last call reading or writing it (via aliases) */
  bool placed;      /* ST_ARENA: offset assigned */
  /* Buffers past the fixed ones (extra_buf): a box of a value (a slice, a
   * transferred box, a constant's box, an error to send back) or staging. */
  int value;        /* -1: staging */
  ap_dbox box;
  bool slice;       /* a local slice of what the device holds (shared by readers) */
} buf_info;

enum { MAX_ARGS = 2 * CG_MAX_OPERANDS + 4, ARG_LOSS = -1, ARG_LR = -2, ARG_LABELS = -3 };
/* Calls that are not kernels (args are buffers; boxes from buf_box):
 * K_SLICE   args[0]'s box into args[1], locally;
 * K_XCHG    the pieces of a transfer from args[0] into args[1] (copied), or
 *           through the staging args[2] added into args[1];
 * K_GSUM    args[0] summed over the groups of an all-reduce, in place;
 * K_ZERO    args[0] = 0;
 * K_ADDBOX  args[0] added into its box of args[1]. */
enum { K_SLICE = -2, K_XCHG = -3, K_GSUM = -4, K_ZERO = -5, K_ADDBOX = -6 };

/* A box of a constant or of a weight's initial value in the blob. */
typedef struct blob_entry {
  int value;
  ap_dbox box;
  const ap_value *view; /* the box's data (cg_const_view) */
  int64_t offset;
} blob_entry;

typedef enum call_phase { PH_FORWARD, PH_LOSS, PH_BACKWARD, PH_GRADIENT, PH_UPDATE } call_phase;

typedef struct call {
  int node;                 /* for the comment; -1 for the loss */
  int value;                /* for the comment of an update or a gradient's sum; -1 */
  const char *what;         /* "forward", "backward", "loss", "all-reduce", "sgd"... */
  call_phase phase;
  int kernel;               /* or one of K_* */
  int n_args;
  int args[MAX_ARGS];       /* buffer ids, ARG_LOSS, ARG_LR, ARG_LABELS */
  uint64_t writes;          /* bit a: args[a] is written */
  bool work;
  const ap_dxfer *xfer;     /* K_XCHG, K_GSUM */
  bool reverse;             /* K_XCHG: every piece sent from its receiver to its sender */
  bool skip_local;          /* K_XCHG: pieces a device sends itself are left out */
  int tag;                  /* K_XCHG, K_GSUM: the message tag, equal on every device */
} call;

typedef struct tgen {
  ap_graph *g;
  ap_diag *d;
  const cg_train_opts *o;
  cg_train_schedule sch;
  int nv;
  buf_info *bufs;
  call *calls;
  int n_calls, cap_calls;
  cg_kernel_set kernels;
  bool needs_kernels_lib;
  cg_kernel *kernel;
  int *prog_inputs;         /* value ids, then -1 for the loss's fed operand */
  int n_buf, cap_bufs;      /* buffers: the fixed 3 NV + 1, then extra_buf's */
  int n_prog_inputs;
  int64_t blob_bytes, params_bytes, arena_bytes;
  int *exports;             /* values whose gradient is an output */
  int n_exports;
  /* Several devices (passes/distribute.h): device dev computes its box of
   * every value (dist->held) and of every trainable weight (the box its
   * readers read), reads what a node needs through the plan's transfers or
   * a local slice, and runs every transfer's adjoint backward (the
   * distribution's comment says which); the weights' gradients are summed
   * over the devices holding copies. */
  const ap_dist *dist;      /* NULL: one device, every box whole */
  int n_dev, dev;
  blob_entry *blob;         /* the boxes of constants and weights in weights.bin, shared */
  int n_blob, cap_blob;
  int *in_off;              /* [n_nodes]: where node n's inputs start in rmap */
  int *rmap;                /* per node input: the buffer this device reads it from; -1 */
  bool *inited;             /* per value: its gradient buffer is written in this step */
  uint64_t *want;           /* [n_nodes]: the schedule's want, for the distribution */
  int n_tags;               /* communication calls so far: the next one's tag */
  int64_t inbox_bytes;      /* the packed boxes of run-time inputs (ST_INBOX) */
  uint64_t *dev_bytes;      /* per device: step_bytes */
  char **dev_src;           /* per device: dev<d>.c, written once every device is generated */
  size_t *dev_len;
  uint64_t step_bytes;      /* bytes this device sends in one step */
} tgen;

static ap_status oom(tgen *G) { return cg_oom(G->g, G->d); }

static int grad_buf(const tgen *G, int v) { return G->nv + v; }
static int mom_buf(const tgen *G, int v) { return 2 * G->nv + v; }
static int fed_buf(const tgen *G) { return 3 * G->nv; }
static int n_bufs(const tgen *G) { return G->n_buf; }

static int root_of(const tgen *G, int b) {
  while (G->bufs[b].st == ST_ALIAS)
    b = G->bufs[b].alias_of;
  return b;
}

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

/* The box of value v this device computes, or holds of a trainable
 * weight; constants and run-time inputs are whole on every device (a
 * reader of a part of one reads a slice, read_buf). */
static ap_dbox vbox(const tgen *G, int v) {
  const ap_value *val = &G->g->values[v];
  if (G->dist && G->sch.trainable[v])
    return ap_dist_weight_box(G->g, G->dist, v, G->dev);
  if (!G->dist || val->data || is_run_input(val))
    return whole_box(val);
  return G->dist->held[(size_t)v * (size_t)G->n_dev + (size_t)G->dev];
}

/* The box buffer b holds. */
static ap_dbox buf_box(const tgen *G, int b) {
  return b < 3 * G->nv ? vbox(G, b % G->nv) : G->bufs[b].box;
}

/* A new buffer holding box b of value v (-1: staging; then b is NULL and
 * the caller sets bytes). -1: out of memory. */
static int extra_buf(tgen *G, int v, const ap_dbox *b, storage st) {
  if (!ap_arena_grow(G->g->arena, (void **)&G->bufs, &G->cap_bufs, G->n_buf + 1,
                     sizeof *G->bufs))
    return -1;
  buf_info *bi = &G->bufs[G->n_buf];
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
  return G->n_buf++;
}

static int64_t vbox_bytes(const tgen *G, int v) {
  const ap_value *val = &G->g->values[v];
  ap_dbox b = vbox(G, v);
  return ap_dbox_volume(val->rank, &b) * (int64_t)ap_dtype_size(val->dtype);
}

static ap_status check_value(tgen *G, const ap_node *n, const ap_value *v) {
  const char *what = NULL;
  if (v->non_tensor)
    what = "non-tensor values are not supported by the C backend";
  else if (!ap_value_shape_known(v))
    what = "shape not known at compile time (bind it with --batch or --inputs)";
  else if (!cg_ctype(v->dtype))
    what = "element type not supported by the C backend";
  if (what)
    return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, n ? n->name : NULL,
                    n ? n->op_type : NULL, "value '%s': %s", v->name, what);
  return AP_OK;
}

/* The blob is shared by the devices: box b of value v keeps the offset the
 * first device gave it. -1: out of memory. */
static int64_t blob_place(tgen *G, int v, const ap_dbox *b) {
  const ap_value *val = &G->g->values[v];
  for (int i = 0; i < G->n_blob; i++)
    if (G->blob[i].value == v && ap_dbox_equal(val->rank, &G->blob[i].box, b))
      return G->blob[i].offset;
  const ap_value *view = cg_const_view(G->g, v, b);
  if (!view || !ap_arena_grow(G->g->arena, (void **)&G->blob, &G->cap_blob, G->n_blob + 1,
                              sizeof *G->blob))
    return -1;
  G->blob[G->n_blob++] = (blob_entry){v, *b, view, G->blob_bytes};
  G->blob_bytes = cg_align_up(G->blob_bytes + value_bytes(view));
  return G->blob[G->n_blob - 1].offset;
}

static ap_status place_constant(tgen *G, int v) {
  buf_info *b = &G->bufs[v];
  if (b->st != ST_NONE)
    return AP_OK;
  ap_dbox w = whole_box(&G->g->values[v]);
  b->st = ST_CONST;
  b->dtype = G->g->values[v].dtype;
  b->bytes = value_bytes(&G->g->values[v]);
  b->offset = blob_place(G, v, &w);
  return b->offset < 0 ? oom(G) : AP_OK;
}

/* Buffer b (value v's activation or gradient) in the arena, at the size of
 * this device's box of v. */
static void arena_buf(tgen *G, int b, int v) {
  if (G->bufs[b].st != ST_NONE)
    return;
  G->bufs[b].st = ST_ARENA;
  G->bufs[b].dtype = G->g->values[v].dtype;
  G->bufs[b].bytes = vbox_bytes(G, v);
}

/* The loss's fed operand (labels [N] or weights of the logits' shape) and
 * this device's box of it: the rows of its box of the logits. */
/* The fed loss input: labels shaped like the logits without their last
 * (class) axis, or loss weights shaped like the logits. */
static int fed_rank(const tgen *G) {
  int r = G->g->values[G->sch.logits].rank;
  return G->o->loss == CG_LOSS_SOFTMAX_CE ? r - 1 : r;
}

static int64_t fed_numel(const tgen *G) {
  const ap_value *lv = &G->g->values[G->sch.logits];
  return ap_numel(fed_rank(G), lv->dims);
}

/* The box of the logits this device's loss reads (passes/distribute.h). */
static ap_dbox loss_box(const tgen *G) {
  if (!G->dist)
    return whole_box(&G->g->values[G->sch.logits]);
  return G->dist->loss_box[G->dev];
}

static ap_dbox fed_box(const tgen *G) { return loss_box(G); }

/* Storage of the program's inputs and the trainable weights, which come
 * first in the blob so one copy fills the writable region. */
static ap_status plan_storage(tgen *G) {
  ap_graph *g = G->g;
  G->prog_inputs = ap_arena_array(g->arena, (size_t)g->n_inputs + 2, sizeof *G->prog_inputs);
  G->exports = ap_arena_array(g->arena, (size_t)g->n_inputs + (size_t)G->nv + 1,
                              sizeof *G->exports);
  if (!G->prog_inputs || !G->exports)
    return oom(G);
  /* This device's boxes of the trainable weights, copied out of the blob
   * into the writable region at start. */
  G->params_bytes = 0;
  for (int v = 0; v < G->nv; v++)
    if (G->sch.trainable[v]) {
      ap_dbox box = vbox(G, v);
      buf_info *b = &G->bufs[v];
      b->st = ST_PARAM;
      b->dtype = g->values[v].dtype;
      b->bytes = ap_dbox_volume(g->values[v].rank, &box) * (int64_t)ap_dtype_size(b->dtype);
      b->offset = G->params_bytes;
      G->params_bytes = cg_align_up(G->params_bytes + b->bytes);
      if ((b->src = blob_place(G, v, &box)) < 0)
        return oom(G);
      G->bufs[mom_buf(G, v)] = (buf_info){.st = ST_MOM, .dtype = b->dtype, .bytes = b->bytes,
                                          .offset = b->offset, .input_index = -1,
                                          .alias_of = -1, .value = v};
    }
  /* Exported gradients: the differentiable graph inputs in graph order,
   * then the trainable weights in value order. */
  for (int i = 0; G->o->export_grads && i < g->n_inputs; i++)
    if (G->sch.needs_grad[g->inputs[i]] && g->values[g->inputs[i]].kind != AP_VAL_WEIGHT)
      G->exports[G->n_exports++] = g->inputs[i];
  for (int v = 0; G->o->export_grads && v < G->nv; v++)
    if (G->sch.trainable[v])
      G->exports[G->n_exports++] = v;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    ap_value *val = &g->values[v];
    if (val->kind == AP_VAL_WEIGHT)
      continue;
    ap_status s = check_value(G, NULL, val);
    if (s != AP_OK)
      return s;
    G->bufs[v].input_index = G->n_prog_inputs;
    G->prog_inputs[G->n_prog_inputs++] = v;
    if (!val->data) {
      G->bufs[v].st = ST_INPUT;
      G->bufs[v].dtype = val->dtype;
    }
  }
  buf_info *fb = &G->bufs[fed_buf(G)];
  fb->st = ST_INPUT;
  fb->input_index = G->n_prog_inputs;
  fb->dtype = G->o->loss == CG_LOSS_SOFTMAX_CE ? AP_DT_INT64 : g->values[G->sch.logits].dtype;
  ap_dbox lb = fed_box(G);
  int64_t lvol = ap_dbox_volume(fed_rank(G), &lb);
  if (G->dist && lvol != fed_numel(G)) {
    fb->st = ST_INBOX;
    fb->bytes = lvol * (int64_t)ap_dtype_size(fb->dtype);
    fb->offset = G->inbox_bytes;
    G->inbox_bytes = cg_align_up(G->inbox_bytes + fb->bytes);
  }
  G->prog_inputs[G->n_prog_inputs++] = -1;
  return AP_OK;
}

/* ---- the program: kernels and calls --------------------------------------- */

/* Takes ownership of sig and body (malloc'd). */
static ap_status add_kernel(tgen *G, char *sig, char *body, const char *work, int *out) {
  int ki = cg_add_kernel(G->g, &G->kernels, sig, body, work);
  if (ki < 0)
    return oom(G);
  *out = ki;
  return AP_OK;
}

static ap_status push_call(tgen *G, const call *c) {
  if (!ap_arena_grow(G->g->arena, (void **)&G->calls, &G->cap_calls, G->n_calls + 1,
                     sizeof *G->calls))
    return oom(G);
  G->calls[G->n_calls++] = *c;
  return AP_OK;
}

static void add_arg(call *c, int buf, bool written) {
  if (c->n_args >= MAX_ARGS)
    ap_die("more than %d kernel arguments", MAX_ARGS);
  if (written)
    c->writes |= (uint64_t)1 << c->n_args;
  c->args[c->n_args++] = buf;
}

/* The box of input i of node ni this device reads. */
static ap_dbox read_box(const tgen *G, int ni, int i) {
  int v = G->g->nodes[ni].in[i];
  if (!G->dist || !G->dist->node[ni].in)
    return whole_box(&G->g->values[v]);
  return G->dist->node[ni].in[(size_t)i * (size_t)G->n_dev + (size_t)G->dev];
}

/* ---- transfers -------------------------------------------------------------- */

/* The bytes this device sends in call c (the runtime's formulas). */
static uint64_t call_bytes(const tgen *G, const call *c) {
  const ap_dxfer *t = c->xfer;
  const ap_value *v = &G->g->values[t->value];
  int dev = G->dev;
  if (c->kernel == K_GSUM) {
    ap_dbox b = buf_box(G, c->args[0]);
    int n = t->n_group ? t->n_group[dev] : t->n_summands;
    return aprt_allreduce_bytes(n, ap_dbox_volume(v->rank, &b), NULL, t->summand[dev]);
  }
  uint64_t total = 0;
  for (int k = 0; k < t->n_pieces; k++) {
    const ap_dpiece *pc = &t->pieces[k];
    int sender = c->reverse ? pc->to : pc->from, receiver = c->reverse ? pc->from : pc->to;
    if (sender == dev && receiver != dev)
      total += (uint64_t)ap_dbox_volume(v->rank, &pc->box) * ap_dtype_size(v->dtype);
  }
  return total;
}

/* Pushes a communication call: its tag (the same sequence on every
 * device) and its bytes. */
static ap_status push_comm(tgen *G, call *c) {
  c->tag = G->n_tags++ % (APRT_TAG_MAX + 1);
  G->step_bytes += call_bytes(G, c);
  return push_call(G, c);
}

/* The elements this device receives in an exchange-and-add (K_XCHG with
 * staging): the staging's size. */
static int64_t staged_volume(const tgen *G, const ap_dxfer *t, bool reverse, bool skip_local) {
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
static ap_status push_xchg_add(tgen *G, call_phase ph, int node, const char *what,
                               const ap_dxfer *t, int src, int dst, bool reverse,
                               bool skip_local) {
  int stg = extra_buf(G, -1, NULL, ST_ARENA);
  if (stg < 0)
    return oom(G);
  G->bufs[stg].bytes = staged_volume(G, t, reverse, skip_local) * 4;
  call c = {.node = node, .value = t->value, .what = what, .phase = ph, .kernel = K_XCHG,
            .xfer = t, .reverse = reverse, .skip_local = skip_local};
  add_arg(&c, src, false);
  add_arg(&c, dst, true);
  add_arg(&c, stg, true);
  return push_comm(G, &c);
}

/* Zeroes value v's gradient buffer unless this step wrote it already. */
static ap_status ensure_grad(tgen *G, int v, call_phase ph) {
  if (G->inited[v])
    return AP_OK;
  G->inited[v] = true;
  arena_buf(G, grad_buf(G, v), v);
  call c = {.node = -1, .value = v, .what = "zero error", .phase = ph, .kernel = K_ZERO};
  add_arg(&c, grad_buf(G, v), true);
  return push_call(G, &c);
}

/* A box of a constant: the value itself when whole, else a buffer on the
 * blob's copy of the box (shared by this device's readers). */
static int const_buf(tgen *G, int v, const ap_dbox *b) {
  const ap_value *val = &G->g->values[v];
  if (ap_dbox_whole(val, b))
    return place_constant(G, v) == AP_OK ? v : -1;
  for (int k = 3 * G->nv + 1; k < G->n_buf; k++)
    if (G->bufs[k].st == ST_CONST && G->bufs[k].value == v &&
        ap_dbox_equal(val->rank, &G->bufs[k].box, b))
      return k;
  int64_t off = blob_place(G, v, b);
  int k = off >= 0 ? extra_buf(G, v, b, ST_CONST) : -1;
  if (k >= 0)
    G->bufs[k].offset = off;
  return k;
}

/* The buffer node ni reads input i from, made on the first call (the
 * forward) and the same for the backward: a constant's box; the value's
 * own buffer; the box the plan's transfer brings; or a slice of what the
 * device holds (a type-I layer after an operator every device computed
 * whole). A slice of a run-time input is packed once before the steps, a
 * slice of an activation where it is first read. -1: out of memory. */
static int read_buf(tgen *G, int ni, int i, call_phase ph) {
  int *m = &G->rmap[G->in_off[ni] + i];
  if (*m >= 0)
    return *m;
  int v = G->g->nodes[ni].in[i];
  const ap_value *val = &G->g->values[v];
  ap_dbox b = read_box(G, ni, i), h = vbox(G, v);
  const ap_dxfer *t = G->dist && G->dist->node[ni].xfer_in ? G->dist->node[ni].xfer_in[i] : NULL;
  if (G->sch.trainable[v] && ap_dbox_equal(val->rank, &b, &h)) {
    *m = v;
  } else if (val->data && !G->sch.trainable[v]) {
    *m = const_buf(G, v, &b);
  } else if (t) {
    *m = extra_buf(G, v, &b, ST_ARENA);
    call c = {.node = ni, .value = v, .what = "transfer", .phase = ph, .kernel = K_XCHG,
              .xfer = t};
    add_arg(&c, v, false);
    add_arg(&c, *m, true);
    if (*m >= 0 && push_comm(G, &c) != AP_OK)
      *m = -1;
  } else if (!G->dist || ap_dbox_equal(val->rank, &b, &h)) {
    *m = v;
  } else {
    for (int k = 3 * G->nv + 1; k < G->n_buf && *m < 0; k++)
      if (G->bufs[k].slice && G->bufs[k].value == v && ap_dbox_equal(val->rank, &G->bufs[k].box, &b))
        *m = k;
    if (*m >= 0)
      return *m;
    int sb = extra_buf(G, v, &b, is_run_input(val) ? ST_INBOX : ST_ARENA);
    if (sb < 0)
      return -1;
    buf_info *bi = &G->bufs[sb];
    bi->slice = true;
    if (is_run_input(val)) {
      bi->input_index = G->bufs[v].input_index;
      bi->offset = G->inbox_bytes;
      G->inbox_bytes = cg_align_up(G->inbox_bytes + bi->bytes);
    } else {
      call c = {.node = ni, .value = v, .what = "slice", .phase = ph, .kernel = K_SLICE};
      add_arg(&c, v, false);
      add_arg(&c, sb, true);
      if (push_call(G, &c) != AP_OK)
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
static ap_status route_error(tgen *G, int ni, int v, int err, const ap_dxfer *t) {
  ap_status s = ensure_grad(G, v, PH_BACKWARD);
  if (s != AP_OK)
    return s;
  if (t)
    return push_xchg_add(G, PH_BACKWARD, ni, "error back", t, err, grad_buf(G, v), true, false);
  call c = {.node = ni, .value = v, .what = "error of a slice", .phase = PH_BACKWARD,
            .kernel = K_ADDBOX};
  add_arg(&c, err, false);
  add_arg(&c, grad_buf(G, v), true);
  return push_call(G, &c);
}

/* Fills G->kernel with node ni's operands. */
static ap_status setup_kernel(tgen *G, int ni) {
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
  for (int i = 0; i < n->n_in; i++) {
    const ap_value *v = ap_node_in(g, n, i);
    ap_status s;
    if (v && (s = check_value(G, n, v)) != AP_OK)
      return s;
    ap_dbox b = v ? read_box(G, ni, i) : (ap_dbox){{0}, {0}};
    if (v && v->data && !(v = cg_const_view(g, n->in[i], &b)))
      return oom(G); /* a box of a constant reads its own data */
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
static bool empty_contraction(const tgen *G, int ni) {
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
static bool empty_outputs(const tgen *G, int ni) {
  const ap_node *n = &G->g->nodes[ni];
  if (!G->dist)
    return false;
  for (int o = 0; o < n->n_out; o++) {
    const ap_value *v = ap_node_out(G->g, n, o);
    ap_dbox b = v ? vbox(G, n->out[o]) : (ap_dbox){{0}, {0}};
    if (v && ap_dbox_volume(v->rank, &b) > 0)
      return false;
  }
  return true;
}

/* Partial sums of node ni's output resolved over the devices (forward) and
 * then its left-out bias added. */
static ap_status emit_reduce(tgen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  const ap_dnode *dn = &G->dist->node[ni];
  int y = n->out[0];
  ap_status s;
  if (dn->reduce->kind == AP_DX_ALLREDUCE) {
    call c = {.node = ni, .value = y, .what = "partial sums", .phase = PH_FORWARD,
              .kernel = K_GSUM, .xfer = dn->reduce};
    add_arg(&c, y, true);
    s = push_comm(G, &c);
  } else {
    s = push_xchg_add(G, PH_FORWARD, ni, "partial sums", dn->reduce, y, y, false, true);
  }
  if (s != AP_OK || dn->bias_slot < 0)
    return s;
  const ap_value *bv = &g->values[n->in[dn->bias_slot]];
  ap_dbox bb = read_box(G, ni, dn->bias_slot), yb = vbox(G, y);
  if (bv->data && !(bv = cg_const_view(g, n->in[dn->bias_slot], &bb)))
    return oom(G);
  call c = {.node = ni, .value = -1, .what = "bias", .phase = PH_FORWARD};
  c.kernel = cg_bias_kernel(g, G->d, &G->kernels, G->kernel, n, &g->values[y], &yb, bv, &bb);
  if (c.kernel < 0)
    return oom(G);
  int rb = read_buf(G, ni, dn->bias_slot, PH_FORWARD);
  if (rb < 0)
    return oom(G);
  add_arg(&c, rb, false);
  add_arg(&c, y, true);
  return push_call(G, &c);
}

static ap_status emit_forward(tgen *G, int ni) {
  ap_graph *g = G->g;
  const ap_node *n = &g->nodes[ni];
  if (node_folded(g, n))
    return AP_OK;
  ap_status s = setup_kernel(G, ni);
  if (s != AP_OK)
    return s;
  cg_kernel *k = G->kernel;
  const ap_dnode *dn = G->dist ? &G->dist->node[ni] : NULL;
  bool partial = dn && dn->reduce;
  if (partial && dn->bias_slot >= 0) /* added once the partial sums are resolved */
    memset(&k->in[dn->bias_slot], 0, sizeof k->in[dn->bias_slot]);
  bool no_out = empty_outputs(G, ni);
  if (no_out || (partial && empty_contraction(G, ni))) {
    for (int i = 0; i < n->n_in; i++) /* the transfers still run on every device */
      if (n->in[i] >= 0 && (!dn || i != dn->bias_slot) && read_buf(G, ni, i, PH_FORWARD) < 0)
        return oom(G);
    for (int o = 0; o < n->n_out; o++) {
      if (n->out[o] < 0)
        continue;
      arena_buf(G, n->out[o], n->out[o]);
      call c = {.node = ni, .value = n->out[o], .what = no_out ? "no share of the output"
                                                               : "no share of the contraction",
                .phase = PH_FORWARD, .kernel = K_ZERO};
      add_arg(&c, n->out[o], true);
      if ((s = push_call(G, &c)) != AP_OK)
        return s;
    }
    return partial ? emit_reduce(G, ni) : AP_OK;
  }
  cg_text body;
  if (!cg_text_open(&body))
    return oom(G);
  k->body = body.f;
  s = forward_emitters[n->op](k);
  bool ok = cg_text_close(&body);
  if (s != AP_OK || !ok) {
    free(body.s);
    return s != AP_OK ? s : oom(G);
  }
  if (k->alias_in >= 0) {
    free(body.s);
    int out = n->out[0], src = read_buf(G, ni, k->alias_in, PH_FORWARD);
    if (src < 0)
      return oom(G);
    G->bufs[out].st = ST_ALIAS;
    G->bufs[out].alias_of = src;
    G->bufs[out].dtype = g->values[out].dtype;
    return AP_OK;
  }
  cg_text sig;
  if (!cg_text_open(&sig)) {
    free(body.s);
    return oom(G);
  }
  call c = {.node = ni, .value = -1, .what = "forward", .phase = PH_FORWARD,
            .work = k->work_expr[0] != 0};
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0 || !k->in[i].v || (k->skip_in >> i & 1))
      continue;
    fprintf(sig.f, "%sconst %s *restrict x%d", c.n_args ? ", " : "", cg_ctype(k->in[i].dtype), i);
    int rb = read_buf(G, ni, i, PH_FORWARD);
    if (rb < 0) {
      free(body.s);
      cg_text_close(&sig);
      free(sig.s);
      return oom(G);
    }
    add_arg(&c, rb, false);
  }
  for (int i = 0; i < n->n_out; i++) {
    if (n->out[i] < 0)
      continue;
    fprintf(sig.f, "%s%s *restrict y%d", c.n_args ? ", " : "", cg_ctype(k->out[i].dtype), i);
    arena_buf(G, n->out[i], n->out[i]);
    add_arg(&c, n->out[i], true);
  }
  if (c.work)
    fprintf(sig.f, "%sfloat *restrict work", c.n_args ? ", " : "");
  else if (!c.n_args)
    fprintf(sig.f, "void");
  if (!cg_text_close(&sig)) {
    free(body.s);
    free(sig.s);
    return oom(G);
  }
  G->needs_kernels_lib |= k->needs_kernels_lib;
  if ((s = add_kernel(G, sig.s, body.s, k->work_expr, &c.kernel)) != AP_OK)
    return s;
  if ((s = push_call(G, &c)) != AP_OK)
    return s;
  return partial ? emit_reduce(G, ni) : AP_OK;
}

/* The error of a partial layer's left-out bias: the output's error summed
 * over the dims the bias is broadcast along (times Gemm's beta), added into
 * the bias's error. */
static ap_status emit_bias_grad(tgen *G, int ni) {
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
  cg_kernel *k = G->kernel;
  memset(k, 0, sizeof *k);
  k->g = g;
  k->n = n;
  k->d = G->d;
  cg_text body, sig;
  if (!cg_text_open(&body))
    return oom(G);
  k->body = body.f;
  bool acc = G->inited[bvid];
  G->inited[bvid] = true;
  if (!acc)
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  dx0[i] = 0;\n", (long long)bo.numel);
  char lit[64], yi[512], bi[512];
  cg_literal(lit, yv->dtype, scale);
  cg_loops_open(k, yo.rank, yo.dims, "i");
  cg_printf(k, "dx0[%s] += %s * dy0[%s];\n", cg_index(bi, sizeof bi, yo.rank, bs, "i"), lit,
            cg_index(yi, sizeof yi, yo.rank, ys, "i"));
  cg_loops_close(k, yo.rank);
  if (!cg_text_close(&body) || !cg_text_open(&sig)) {
    free(body.s);
    return oom(G);
  }
  fprintf(sig.f, "const %s *restrict dy0, %s *restrict dx0", cg_ctype(yv->dtype),
          cg_ctype(bv->dtype));
  if (!cg_text_close(&sig)) {
    free(body.s);
    free(sig.s);
    return oom(G);
  }
  call c = {.node = ni, .value = -1, .what = "bias backward", .phase = PH_BACKWARD};
  ap_status s = add_kernel(G, sig.s, body.s, "", &c.kernel);
  if (s != AP_OK)
    return s;
  add_arg(&c, grad_buf(G, y), false);
  arena_buf(G, grad_buf(G, bvid), bvid);
  add_arg(&c, grad_buf(G, bvid), true);
  return push_call(G, &c);
}

static ap_status emit_backward(tgen *G, const cg_grad_step *st) {
  ap_graph *g = G->g;
  int ni = st->node;
  const ap_node *n = &g->nodes[ni];
  const cg_grad_op *op = cg_grad_op_of(n->op);
  const ap_dnode *dn = G->dist ? &G->dist->node[ni] : NULL;
  bool partial = dn && dn->reduce;
  uint64_t want = st->want;
  ap_status s;
  /* A device whose box of an output no error reached holds a zero error. */
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && (st->has_dy >> i & 1) && (s = ensure_grad(G, n->out[i], PH_BACKWARD)) != AP_OK)
      return s;
  if (partial) {
    uint64_t bias = dn->bias_slot >= 0 ? (uint64_t)1 << dn->bias_slot : 0;
    if (want & bias) {
      if (!G->sch.trainable[n->in[dn->bias_slot]])
        return ap_error(G->d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                        "training on several devices: the bias has an error but is not a "
                        "trainable weight");
      if ((s = emit_bias_grad(G, ni)) != AP_OK)
        return s;
    }
    want &= ~bias;
    if (!want)
      return AP_OK;
    /* The adjoint of the partial sums' reduction: each summand's error is
     * the sum of the errors of the copies it went into. */
    int y = n->out[0];
    if (dn->reduce->kind == AP_DX_ALLREDUCE) {
      call c = {.node = ni, .value = y, .what = "partial sums' error", .phase = PH_BACKWARD,
                .kernel = K_GSUM, .xfer = dn->reduce};
      add_arg(&c, grad_buf(G, y), true);
      s = push_comm(G, &c);
    } else {
      s = push_xchg_add(G, PH_BACKWARD, ni, "partial sums' error", dn->reduce, grad_buf(G, y),
                        grad_buf(G, y), true, true);
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
    int v = n->in[i], rb = read_buf(G, ni, i, PH_BACKWARD);
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
      if ((target[i] = extra_buf(G, v, &b, ST_ARENA)) < 0)
        return oom(G);
    }
  }
  bool skip = empty_outputs(G, ni) || (partial && empty_contraction(G, ni));
  if (!skip) {
    cg_grad_kernel gk = {.k = k, .want = want, .acc = acc, .has_dy = st->has_dy};
    cg_text body;
    if (!cg_text_open(&body))
      return oom(G);
    k->body = body.f;
    s = op->emit(&gk);
    bool ok = cg_text_close(&body);
    if (s != AP_OK || !ok) {
      free(body.s);
      return s != AP_OK ? s : oom(G);
    }
    cg_text sig;
    if (!cg_text_open(&sig)) {
      free(body.s);
      return oom(G);
    }
    call c = {.node = ni, .value = -1, .what = "backward", .phase = PH_BACKWARD,
              .work = k->work_expr[0] != 0};
    uint64_t reads = cg_grad_reads_in(op, want);
    for (int i = 0; i < n->n_in; i++) {
      if (n->in[i] < 0 || !(reads >> i & 1))
        continue;
      fprintf(sig.f, "%sconst %s *restrict x%d", c.n_args ? ", " : "", cg_ctype(k->in[i].dtype), i);
      int rb = read_buf(G, ni, i, PH_BACKWARD);
      if (rb < 0) {
        free(body.s);
        cg_text_close(&sig);
        free(sig.s);
        return oom(G);
      }
      add_arg(&c, rb, false);
    }
    for (int i = 0; i < n->n_out; i++) {
      if (n->out[i] < 0 || !(op->reads_out >> i & 1))
        continue;
      fprintf(sig.f, "%sconst %s *restrict y%d", c.n_args ? ", " : "", cg_ctype(k->out[i].dtype), i);
      add_arg(&c, n->out[i], false);
    }
    for (int i = 0; i < n->n_out; i++) {
      if (n->out[i] < 0 || !(st->has_dy >> i & 1))
        continue;
      fprintf(sig.f, "%sconst %s *restrict dy%d", c.n_args ? ", " : "", cg_ctype(k->out[i].dtype), i);
      add_arg(&c, grad_buf(G, n->out[i]), false);
    }
    for (int i = 0; i < n->n_in; i++) {
      if (target[i] < 0)
        continue;
      fprintf(sig.f, "%s%s *dx%d", c.n_args ? ", " : "", cg_ctype(k->in[i].dtype), i);
      add_arg(&c, target[i], true);
    }
    if (c.work)
      fprintf(sig.f, "%sfloat *restrict work", c.n_args ? ", " : "");
    if (!cg_text_close(&sig)) {
      free(body.s);
      free(sig.s);
      return oom(G);
    }
    G->needs_kernels_lib |= k->needs_kernels_lib;
    if ((s = add_kernel(G, sig.s, body.s, k->work_expr, &c.kernel)) != AP_OK)
      return s;
    if ((s = push_call(G, &c)) != AP_OK)
      return s;
  } else {
    for (int i = 0; i < n->n_in; i++) /* nothing to compute: zero errors */
      if (target[i] >= 0 && !(acc >> i & 1)) {
        call c = {.node = ni, .value = n->in[i], .what = "no share",
                  .phase = PH_BACKWARD, .kernel = K_ZERO};
        add_arg(&c, target[i], true);
        if ((s = push_call(G, &c)) != AP_OK)
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
static ap_status emit_loss(tgen *G) {
  int lg = G->sch.logits;
  const ap_value *lv = &G->g->values[lg];
  const char *ct = cg_ctype(lv->dtype);
  /* A device reads rows [lo, hi) of the logits, whole (loss_box); the loss
   * is the mean over the whole batch, so each device divides its rows' sum
   * by the whole N and the runtime adds the devices' parts
   * (aprt_step_loss). */
  ap_dbox box = loss_box(G), held = vbox(G, lg);
  int64_t numel = ap_dbox_volume(lv->rank, &box);
  cg_text body, sig;
  if (!cg_text_open(&body))
    return oom(G);
  if (G->o->loss == CG_LOSS_SOFTMAX_CE) {
    int64_t classes = lv->rank >= 2 ? lv->dims[lv->rank - 1] : 0;
    if (classes < 1) {
      cg_text_close(&body);
      free(body.s);
      return ap_error(G->d, AP_ERR_UNSUPPORTED, G->g->path, NULL, NULL,
                      "output '%s': the cross-entropy loss needs [N, ..., classes] logits",
                      lv->name);
    }
    /* The mean is over every device's labels that count: each device
     * counts them in the whole labels tensor and scales its own rows' sum,
     * and the runtime adds the devices' parts (aprt_step_loss). With every
     * label ignored the loss is 0 and nothing moves. */
    fprintf(body.f,
            "int64_t counted = 0;\n"
            "for (int64_t i = 0; i < %lld; i++)\n  counted += all_labels[i] != %d;\n"
            "const double scale = counted ? 1.0 / (double)counted : 0;\n"
            "double total = 0;\n"
            "for (int64_t n = 0; n < %lld; n++) {\n"
            "const %s *z = x0 + n * %lld;\n%s *dz = dx0 + n * %lld;\n"
            "const int64_t label = labels[n];\n"
            "if (label == %d) {\n"
            "  for (int64_t c = 0; c < %lld; c++)\n    dz[c] = 0;\n  continue;\n}\n"
            "double top = z[0], sum = 0;\n"
            "for (int64_t c = 1; c < %lld; c++)\n  if (z[c] > top)\n    top = z[c];\n"
            "for (int64_t c = 0; c < %lld; c++)\n  sum += exp((double)z[c] - top);\n"
            "total += top + log(sum) - z[label];\n"
            "for (int64_t c = 0; c < %lld; c++)\n"
            "  dz[c] = (%s)((exp((double)z[c] - top) / sum - (c == label)) * scale);\n"
            "}\n*loss = total * scale;\n",
            (long long)fed_numel(G), CG_IGNORE_INDEX, (long long)(numel / classes), ct,
            (long long)classes, ct, (long long)classes, CG_IGNORE_INDEX, (long long)classes,
            (long long)classes, (long long)classes, (long long)classes, ct);
  } else {
    fprintf(body.f,
            "double total = 0;\nfor (int64_t i = 0; i < %lld; i++) {\n"
            "  total += (double)w[i] * x0[i];\n  dx0[i] = w[i];\n}\n*loss = total;\n",
            (long long)numel);
  }
  if (!cg_text_close(&body) || !cg_text_open(&sig)) {
    free(body.s);
    return oom(G);
  }
  fprintf(sig.f, "const %s *restrict x0, const %s *restrict %s, %s *restrict dx0, "
                 "double *restrict loss%s",
          ct, G->o->loss == CG_LOSS_SOFTMAX_CE ? "int64_t" : ct,
          G->o->loss == CG_LOSS_SOFTMAX_CE ? "labels" : "w", ct,
          G->o->loss == CG_LOSS_SOFTMAX_CE ? ", const int64_t *restrict all_labels" : "");
  if (!cg_text_close(&sig)) {
    free(body.s);
    free(sig.s);
    return oom(G);
  }
  call c = {.node = -1, .value = -1, .what = "loss", .phase = PH_LOSS};
  ap_status s = add_kernel(G, sig.s, body.s, "", &c.kernel);
  if (s != AP_OK)
    return s;
  /* The rows: the device's own box of the logits, a slice of it, or the
   * rows the loss's transfer brings; their error goes the same way back. */
  const ap_dxfer *t = G->dist ? G->dist->loss_xfer : NULL;
  int src = lg, err = grad_buf(G, lg);
  if (t || !ap_dbox_equal(lv->rank, &box, &held)) {
    if ((src = extra_buf(G, lg, &box, ST_ARENA)) < 0 ||
        (err = extra_buf(G, lg, &box, ST_ARENA)) < 0)
      return oom(G);
    call x = {.node = -1, .value = lg, .what = t ? "the loss's rows" : "slice",
              .phase = PH_LOSS, .kernel = t ? K_XCHG : K_SLICE, .xfer = t};
    add_arg(&x, lg, false);
    add_arg(&x, src, true);
    if ((s = t ? push_comm(G, &x) : push_call(G, &x)) != AP_OK)
      return s;
  } else {
    arena_buf(G, err, lg);
    G->inited[lg] = true;
  }
  add_arg(&c, src, false);
  add_arg(&c, fed_buf(G), false);
  add_arg(&c, err, true);
  add_arg(&c, ARG_LOSS, false);
  if (G->o->loss == CG_LOSS_SOFTMAX_CE)
    add_arg(&c, ARG_LABELS, false);
  if ((s = push_call(G, &c)) != AP_OK)
    return s;
  if (err == grad_buf(G, lg))
    return AP_OK;
  if ((s = ensure_grad(G, lg, PH_BACKWARD)) != AP_OK)
    return s;
  if (t)
    return push_xchg_add(G, PH_BACKWARD, -1, "the loss's error back", t, err, grad_buf(G, lg),
                         true, false);
  call a = {.node = -1, .value = lg, .what = "error of a slice", .phase = PH_BACKWARD,
            .kernel = K_ADDBOX};
  add_arg(&a, err, false);
  add_arg(&a, grad_buf(G, lg), true);
  return push_call(G, &a);
}

/* SGD on one trainable weight: v = mu v + g; w -= lr v (w -= lr g without
 * momentum), in the weight's type with the rate rounded to it. */
static ap_status emit_update(tgen *G, int v) {
  const ap_value *val = &G->g->values[v];
  const char *ct = cg_ctype(val->dtype);
  ap_dbox box = vbox(G, v);
  int64_t numel = ap_dbox_volume(val->rank, &box);
  bool mom = G->o->momentum != 0;
  char mu[64];
  cg_text body, sig;
  if (!cg_text_open(&body))
    return oom(G);
  if (mom)
    fprintf(body.f, "for (int64_t i = 0; i < %lld; i++) {\n  v[i] = %s * v[i] + g[i];\n"
                    "  w[i] -= (%s)lr * v[i];\n}\n",
            (long long)numel, cg_literal(mu, val->dtype, G->o->momentum), ct);
  else
    fprintf(body.f, "for (int64_t i = 0; i < %lld; i++)\n  w[i] -= (%s)lr * g[i];\n",
            (long long)numel, ct);
  if (!cg_text_close(&body) || !cg_text_open(&sig)) {
    free(body.s);
    return oom(G);
  }
  fprintf(sig.f, "%s *restrict w, const %s *restrict g, %s%s%sfloat lr", ct, ct,
          mom ? ct : "", mom ? " *restrict v" : "", mom ? ", " : "");
  if (!cg_text_close(&sig)) {
    free(body.s);
    free(sig.s);
    return oom(G);
  }
  call c = {.node = -1, .value = v, .what = "sgd", .phase = PH_UPDATE};
  ap_status s = add_kernel(G, sig.s, body.s, "", &c.kernel);
  if (s != AP_OK)
    return s;
  add_arg(&c, v, true);
  add_arg(&c, grad_buf(G, v), false);
  if (mom)
    add_arg(&c, mom_buf(G, v), true);
  add_arg(&c, ARG_LR, false);
  return push_call(G, &c);
}

/* The gradient of a trainable weight summed over the devices holding
 * copies of its elements (passes/distribute.h), before the update: every
 * copy then gets the same update. A device that read none of it holds a
 * zero gradient. */
static ap_status emit_weight_sum(tgen *G, int v) {
  ap_status s = ensure_grad(G, v, PH_GRADIENT);
  const ap_dxfer *t = G->dist ? G->dist->wgrad[v] : NULL;
  if (s != AP_OK || !t)
    return s;
  if (t->kind == AP_DX_REDUCE)
    return push_xchg_add(G, PH_GRADIENT, -1, "gradient sum", t, grad_buf(G, v), grad_buf(G, v),
                         false, true);
  call c = {.node = -1, .value = v, .what = "all-reduce", .phase = PH_GRADIENT, .kernel = K_GSUM,
            .xfer = t};
  add_arg(&c, grad_buf(G, v), true);
  return push_comm(G, &c);
}

/* ---- the arena ------------------------------------------------------------ */

static ap_status plan_arena(tgen *G) {
  int nb = n_bufs(G);
  for (int b = 0; b < nb; b++)
    G->bufs[b].last_use = -1;
  for (int pos = 0; pos < G->n_calls; pos++)
    for (int a = 0; a < G->calls[pos].n_args; a++)
      if (G->calls[pos].args[a] >= 0) {
        int r = root_of(G, G->calls[pos].args[a]);
        if (G->bufs[r].last_use < pos)
          G->bufs[r].last_use = pos;
      }
  /* Read after the steps: the outputs and the exported gradients. */
  for (int i = 0; i < G->g->n_outputs; i++)
    G->bufs[root_of(G, G->g->outputs[i])].last_use = INT32_MAX;
  for (int i = 0; i < G->n_exports; i++)
    G->bufs[grad_buf(G, G->exports[i])].last_use = INT32_MAX;
  cg_block *live = ap_arena_array(G->g->arena, (size_t)nb + 1, sizeof *live);
  if (!live)
    return oom(G);
  int n_live = 0;
  for (int pos = 0; pos < G->n_calls; pos++) {
    const call *c = &G->calls[pos];
    for (int a = 0; a < c->n_args; a++) {
      int b = c->args[a];
      if (b < 0 || !(c->writes >> a & 1))
        continue;
      buf_info *bi = &G->bufs[b];
      if (bi->st == ST_ARENA && !bi->placed && bi->bytes > 0) {
        bi->offset = cg_arena_alloc(live, &n_live, bi->bytes, b);
        bi->placed = true;
        if (bi->offset + cg_align_up(bi->bytes) > G->arena_bytes)
          G->arena_bytes = bi->offset + cg_align_up(bi->bytes);
      }
    }
    for (int i = 0; i < n_live; i++)
      if (G->bufs[live[i].id].last_use <= pos)
        cg_arena_free(live, &n_live, live[i--].id);
  }
  return AP_OK;
}

/* ---- writing the files ---------------------------------------------------- */

static void put_buf_ptr(tgen *G, FILE *f, int b) {
  if (b == ARG_LOSS) {
    fputs("&loss", f);
    return;
  }
  if (b == ARG_LR) {
    fputs("lr", f);
    return;
  }
  if (b == ARG_LABELS) { /* the whole labels tensor, as the runtime read it */
    fprintf(f, "((const int64_t *)in%d)", G->bufs[fed_buf(G)].input_index);
    return;
  }
  int r = root_of(G, b);
  const buf_info *bi = &G->bufs[r];
  const char *ct = cg_ctype(G->bufs[b].dtype ? G->bufs[b].dtype : bi->dtype);
  switch (bi->st) {
  case ST_INPUT: fprintf(f, "((%s *)in%d)", ct, bi->input_index); break;
  case ST_CONST: fprintf(f, "((%s *)(ap_blob + %lld))", ct, (long long)bi->offset); break;
  case ST_PARAM: fprintf(f, "((%s *)(params + %lld))", ct, (long long)bi->offset); break;
  case ST_MOM: fprintf(f, "((%s *)(mom + %lld))", ct, (long long)bi->offset); break;
  case ST_INBOX: fprintf(f, "((%s *)(inbox + %lld))", ct, (long long)bi->offset); break;
  case ST_ARENA: fprintf(f, "((%s *)(arena + %lld))", ct, (long long)bi->offset); break;
  default: ap_die("buffer %d has no storage", b);
  }
}

/* Output index: this device's box b of v, held in buffer buf. */
static void put_output(tgen *G, FILE *f, int index, const ap_value *v, const ap_dbox *b,
                       int buf) {
  fprintf(f, "  {\n    static const int64_t shape[] = {");
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)v->dims[k]);
  fprintf(f, "%s}, start[] = {", v->rank ? "" : "0");
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)b->lo[k]);
  fprintf(f, "%s}, size[] = {", v->rank ? "" : "0");
  for (int k = 0; k < v->rank; k++)
    fprintf(f, "%s%lld", k ? ", " : "", (long long)(b->hi[k] - b->lo[k]));
  fprintf(f, "%s};\n", v->rank ? "" : "0");
  fprintf(f, "    aprt_box box = aprt_box_dense(%d, shape, start, size);\n", v->rank);
  fprintf(f, "    if (!s)\n      s = aprt_output_box(c, %d, &box, ", index);
  put_buf_ptr(G, f, buf);
  fprintf(f, ");\n  }\n");
}

static const char *const phase_names[] = {"APRT_PHASE_FORWARD", "APRT_PHASE_LOSS",
                                          "APRT_PHASE_BACKWARD", "APRT_PHASE_GRADIENT",
                                          "APRT_PHASE_UPDATE"};

/* Packs this device's box of run-time input buffer b (ST_INBOX) out of the
 * whole tensor the runtime read. */
static void put_inbox_pack(tgen *G, FILE *f, int b, int input_index) {
  const ap_value *lv = &G->g->values[G->sch.logits];
  int rank;
  ap_dbox box, within;
  if (b == fed_buf(G)) {
    rank = fed_rank(G);
    within = whole_box(lv);
    box = fed_box(G);
  } else {
    const ap_value *v = &G->g->values[G->bufs[b].value];
    rank = v->rank;
    within = whole_box(v);
    box = G->bufs[b].box;
  }
  fprintf(f, "  {\n    static const aprt_box b = ");
  cg_put_box(f, rank, &box, &within, 0);
  fprintf(f, ";\n    aprt_box_pack(inbox + %lld, in%d, &b, %zu);\n  }\n",
          (long long)G->bufs[b].offset, input_index, ap_dtype_size(G->bufs[b].dtype));
}

/* A communication call of this device: K_XCHG (an exchange, then the
 * staged pieces added where they belong) or K_GSUM (an all-reduce over
 * this device's group). */
static void put_comm(tgen *G, FILE *f, const call *cl) {
  const ap_dxfer *t = cl->xfer;
  const ap_value *v = &G->g->values[t->value];
  int dev = G->dev;
  if (cl->kernel == K_GSUM) {
    ap_dbox b = buf_box(G, cl->args[0]);
    int64_t count = ap_dbox_volume(v->rank, &b);
    int n = t->n_group ? t->n_group[dev] : t->n_summands;
    if (count == 0 || n < 2) { /* so is every member's: they hold equal boxes */
      fprintf(f, "    (void)0;\n");
      return;
    }
    fprintf(f, "    {\n      static const int group[] = {");
    for (int k = 0; k < n; k++)
      fprintf(f, "%s%d", k ? ", " : "", t->group[dev * t->n_summands + k]);
    fprintf(f, "};\n      if (!s)\n        s = aprt_allreduce_sum(c, group, %d, ", n);
    put_buf_ptr(G, f, cl->args[0]);
    fprintf(f, ", %lld, NULL, %d);\n    }\n", (long long)count, cl->tag);
    return;
  }
  bool add = cl->n_args > 2;
  int src = cl->args[0], dst = cl->args[1];
  ap_dbox sbox = buf_box(G, src), dbox = buf_box(G, dst);
  int ns = 0, nr = 0;
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0)
      fprintf(f, "    {\n      static const aprt_xfer sends[] = {\n");
    else
      fprintf(f, "      };\n      static const aprt_xfer recvs[] = {\n");
    int64_t at = 0;
    for (int k = 0; k < t->n_pieces; k++) {
      const ap_dpiece *pc = &t->pieces[k];
      int sender = cl->reverse ? pc->to : pc->from, receiver = cl->reverse ? pc->from : pc->to;
      if ((cl->skip_local && pc->from == pc->to) || (pass ? receiver : sender) != dev)
        continue;
      fprintf(f, "        {%d, ", pass ? sender : receiver);
      if (pass == 0) {
        cg_put_box(f, v->rank, &pc->box, &sbox, 0);
        ns++;
      } else if (add) {
        cg_put_box(f, v->rank, &pc->box, &pc->box, at);
        at += ap_dbox_volume(v->rank, &pc->box);
        nr++;
      } else {
        cg_put_box(f, v->rank, &pc->box, &dbox, 0);
        nr++;
      }
      fprintf(f, "},\n");
    }
    if ((pass ? nr : ns) == 0)
      fprintf(f, "        {0, {0, 0, {0}, {0}}},\n"); /* never read: the count is 0 */
  }
  fprintf(f, "      };\n      if (!s)\n        s = aprt_exchange(c, ");
  put_buf_ptr(G, f, src);
  fprintf(f, ", %d, sends, ", ns);
  put_buf_ptr(G, f, add ? cl->args[2] : dst);
  fprintf(f, ", %d, recvs, %zu, %d);\n", nr, ap_dtype_size(v->dtype), cl->tag);
  if (add && nr) {
    fprintf(f, "      static const aprt_box adds[] = {\n");
    for (int k = 0; k < t->n_pieces; k++) {
      const ap_dpiece *pc = &t->pieces[k];
      int receiver = cl->reverse ? pc->from : pc->to;
      if ((cl->skip_local && pc->from == pc->to) || receiver != dev)
        continue;
      fprintf(f, "        ");
      cg_put_box(f, v->rank, &pc->box, &dbox, 0);
      fprintf(f, ",\n");
    }
    fprintf(f, "      };\n      const float *part = (const float *)");
    put_buf_ptr(G, f, cl->args[2]);
    fprintf(f, ";\n      for (int k = 0; k < %d && !s; k++) {\n"
               "        aprt_box_add_f32(", nr);
    put_buf_ptr(G, f, dst);
    fprintf(f, ", &adds[k], part);\n        part += aprt_box_volume(&adds[k]);\n      }\n");
  }
  fprintf(f, "    }\n");
}

static ap_status write_device(tgen *G) {
  ap_graph *g = G->g;
  cg_text t;
  if (!cg_text_open(&t))
    return oom(G);
  FILE *f = t.f;
  int dev = G->dev;
  fprintf(f, "/* Generated by accparc: the training program of device %d (%s).\n"
             " * Activations and gradients live in one arena of %lld bytes planned from\n"
             " * last use over a whole step; the %lld bytes of trainable weights are a\n"
             " * writable copy of the start of the blob. */\n"
             "#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n\n"
             "#include \"accpar_rt.h\"\n#include \"kernels.h\"\n\n"
             "extern const unsigned char ap_blob[];\n"
             "int ap_device_%d(aprt_comm *c);\n\n",
          dev, G->n_dev > 1 ? "its share of the batch, the weights replicated" : "the whole graph",
          (long long)G->arena_bytes, (long long)G->params_bytes, dev);
  fprintf(f, "int ap_device_%d(aprt_comm *c) {\n", dev);
  fprintf(f, "  unsigned char *arena = aligned_alloc(%d, %lld);\n", CG_ALIGN,
          (long long)(G->arena_bytes ? G->arena_bytes : CG_ALIGN));
  fprintf(f, "  unsigned char *params = aligned_alloc(%d, %lld);\n", CG_ALIGN,
          (long long)(G->params_bytes ? G->params_bytes : CG_ALIGN));
  fprintf(f, "  unsigned char *mom = calloc(1, %lld);\n",
          (long long)(G->params_bytes ? G->params_bytes : CG_ALIGN));
  fprintf(f, "  float *work = aligned_alloc(%d, (cgk_work_floats() * 4 + %d) / %d * %d);\n", CG_ALIGN,
          2 * CG_ALIGN - 1, CG_ALIGN, CG_ALIGN);
  fprintf(f, "  unsigned char *inbox = aligned_alloc(%d, %lld);\n", CG_ALIGN,
          (long long)(G->inbox_bytes ? G->inbox_bytes : CG_ALIGN));
  fprintf(f, "  if (!arena || !params || !mom || !work || !inbox) {\n"
             "    free(arena);\n    free(params);\n    free(mom);\n    free(work);\n    free(inbox);\n"
             "    return aprt_fail(c, APRT_ERR_NOMEM, \"device %d: out of memory\");\n  }\n",
          dev);
  fprintf(f, "  (void)work;\n  (void)mom;\n  (void)inbox;\n");
  for (int v = 0; v < G->nv; v++)
    if (G->sch.trainable[v] && G->bufs[v].bytes)
      fprintf(f, "  memcpy(params + %lld, ap_blob + %lld, %lld);\n", (long long)G->bufs[v].offset,
              (long long)G->bufs[v].src, (long long)G->bufs[v].bytes);
  fprintf(f, "  const aprt_args *args = aprt_get_args(c);\n  const float lr = args->lr;\n"
             "  (void)lr;\n  double loss = 0;\n  aprt_status s = APRT_OK;\n");
  for (int i = 0; i < G->n_prog_inputs; i++) {
    fprintf(f, "  const void *in%d = aprt_input(c, %d)->data;\n  (void)in%d;\n", i, i, i);
    if (G->prog_inputs[i] < 0 && G->bufs[fed_buf(G)].st == ST_INBOX)
      put_inbox_pack(G, f, fed_buf(G), i);
    for (int k = 3 * G->nv + 1; k < G->n_buf; k++)
      if (G->bufs[k].st == ST_INBOX && G->bufs[k].input_index == i)
        put_inbox_pack(G, f, k, i);
  }
  fprintf(f, "  for (int step = 0; step < args->steps && !s; step++) {\n");
  for (int ci = 0; ci < G->n_calls; ci++) {
    const call *cl = &G->calls[ci];
    if (ci == 0 || G->calls[ci - 1].phase != cl->phase) {
      if (ci)
        fprintf(f, "    aprt_phase_end(c);\n");
      if (ci && G->calls[ci - 1].phase == PH_LOSS) /* the loss could not be reported */
        fprintf(f, "    if (s)\n      break;\n");
      fprintf(f, "    aprt_phase_begin(c, %s);\n", phase_names[cl->phase]);
    }
    fprintf(f, "    /* %s", cl->what);
    if (cl->node >= 0) {
      fprintf(f, " %s '", g->nodes[cl->node].op_type);
      cg_put_comment_name(f, g->nodes[cl->node].name);
      fprintf(f, "'");
    }
    if (cl->value >= 0) {
      fprintf(f, "%s'", cl->node >= 0 ? ", of " : " ");
      cg_put_comment_name(f, g->values[cl->value].name);
      fprintf(f, "'");
    }
    fprintf(f, " */\n");
    if (cl->kernel == K_SLICE || cl->kernel == K_ADDBOX) {
      /* K_SLICE: the box of args[1] out of args[0]; K_ADDBOX: args[0] into
       * its box of args[1]. */
      int whole = cl->kernel == K_SLICE ? cl->args[0] : cl->args[1];
      int part = cl->kernel == K_SLICE ? cl->args[1] : cl->args[0];
      ap_dbox wb = buf_box(G, whole), pb = buf_box(G, part);
      const ap_value *v = &g->values[cl->value];
      if (ap_dbox_volume(v->rank, &pb) == 0)
        continue;
      fprintf(f, "    {\n      static const aprt_box b = ");
      cg_put_box(f, v->rank, &pb, &wb, 0);
      fprintf(f, ";\n      %s(", cl->kernel == K_SLICE ? "aprt_box_pack" : "aprt_box_add_f32");
      put_buf_ptr(G, f, cl->kernel == K_SLICE ? part : whole);
      fprintf(f, ", ");
      if (cl->kernel == K_SLICE) {
        put_buf_ptr(G, f, whole);
        fprintf(f, ", &b, %zu);\n    }\n", ap_dtype_size(v->dtype));
      } else {
        fprintf(f, "&b, ");
        put_buf_ptr(G, f, part);
        fprintf(f, ");\n    }\n");
      }
      continue;
    }
    if (cl->kernel == K_ZERO) {
      int r = root_of(G, cl->args[0]);
      if (G->bufs[r].bytes > 0) {
        fprintf(f, "    memset(");
        put_buf_ptr(G, f, cl->args[0]);
        fprintf(f, ", 0, %lld);\n", (long long)G->bufs[r].bytes);
      }
      continue;
    }
    if (cl->kernel == K_XCHG || cl->kernel == K_GSUM) {
      /* The k-th communication of a step has tag k on every device; a tag
       * reused by the next step is safe, messages between two ranks with
       * one tag arrive in order. */
      put_comm(G, f, cl);
      continue;
    }
    fprintf(f, "    cgk_%d(", cl->kernel);
    for (int a = 0; a < cl->n_args; a++) {
      if (a)
        fprintf(f, ", ");
      put_buf_ptr(G, f, cl->args[a]);
    }
    if (cl->work)
      fprintf(f, "%swork", cl->n_args ? ", " : "");
    fprintf(f, ");\n");
    if (cl->phase == PH_LOSS)
      fprintf(f, "    s = aprt_step_loss(c, step, loss);\n");
  }
  if (G->n_calls)
    fprintf(f, "    aprt_phase_end(c);\n");
  fprintf(f, "  }\n");
  int index = 0;
  for (int i = 0; i < g->n_outputs; i++, index++) {
    ap_dbox b = vbox(G, g->outputs[i]);
    put_output(G, f, index, &g->values[g->outputs[i]], &b, g->outputs[i]);
  }
  if (G->o->export_grads) {
    fprintf(f, "  {\n    static const int64_t one[] = {1}, zero[] = {0};\n"
               "    aprt_box box = aprt_box_dense(0, one, zero, one);\n"
               "    if (!s)\n      s = aprt_output_box(c, %d, &box, &loss);\n  }\n",
            index++);
    for (int i = 0; i < G->n_exports; i++, index++) {
      ap_dbox b = vbox(G, G->exports[i]);
      put_output(G, f, index, &g->values[G->exports[i]], &b, grad_buf(G, G->exports[i]));
    }
  }
  /* The updated weights: each device writes its box (copies are equal). */
  for (int v = 0; G->o->export_weights && v < G->nv; v++)
    if (G->sch.trainable[v]) {
      ap_dbox b = vbox(G, v);
      put_output(G, f, index++, &g->values[v], &b, v);
    }
  fprintf(f, "  free(arena);\n  free(params);\n  free(mom);\n  free(work);\n  free(inbox);\n"
             "  return s;\n}\n");
  if (!cg_text_close(&t)) {
    free(t.s);
    return oom(G);
  }
  G->dev_src[dev] = t.s;
  G->dev_len[dev] = t.len;
  return AP_OK;
}

static ap_status write_main(tgen *G, const char *blob_path) {
  ap_graph *g = G->g;
  const cg_train_opts *o = G->o;
  cg_text t;
  if (!cg_text_open(&t))
    return oom(G);
  FILE *f = t.f;
  fprintf(f, "/* Generated by accparc: the training program's description and main. */\n"
             "#include <stdint.h>\n\n#include \"accpar_rt.h\"\n\n");
  for (int dev = 0; dev < G->n_dev; dev++)
    fprintf(f, "int ap_device_%d(aprt_comm *c);\n", dev);
  fprintf(f, "\n");
  cg_put_blob_asm(f, blob_path);
  cg_put_device_names(f, G->dist ? g->plan : NULL, G->n_dev, o->device_kind);
  /* Bytes each device sends per step: the gradients' all-reduces
   * (aprt_allreduce_bytes of every trainable weight). */
  fprintf(f, "static const uint64_t predicted_step_bytes[] = {");
  for (int dev = 0; dev < G->n_dev; dev++)
    fprintf(f, "%s%llu", dev ? ", " : "", (unsigned long long)G->dev_bytes[dev]);
  fprintf(f, "};\n");
  if (G->dist) {
    /* The distribution's (ap_distribute_train): the transfers above are
     * its, so the two agree. */
    fprintf(f, "/* The plan's step bytes, per device:");
    for (int dev = 0; dev < G->n_dev; dev++)
      fprintf(f, " %.0f", G->dist->step_bytes[dev]);
    fprintf(f, " */\n");
  }
  fprintf(f, "\n");
  const ap_value *lv = &g->values[G->sch.logits];
  fprintf(f, "static const aprt_tensor_spec inputs[] = {\n");
  for (int i = 0; i < G->n_prog_inputs; i++) {
    int v = G->prog_inputs[i];
    if (v >= 0) {
      const ap_value *val = &g->values[v];
      cg_put_spec(f, val->name, val->dtype, val->rank, val->dims, ap_value_index_rows(g, v),
                  0);
    } else if (o->loss == CG_LOSS_SOFTMAX_CE) {
      cg_put_spec(f, "labels", AP_DT_INT64, lv->rank - 1, lv->dims, lv->dims[lv->rank - 1],
                  CG_IGNORE_INDEX);
    } else {
      cg_put_spec(f, "loss_weights", lv->dtype, lv->rank, lv->dims, 0, 0);
    }
  }
  fprintf(f, "};\n\nstatic const aprt_tensor_spec outputs[] = {\n");
  int n_out = 0;
  for (int i = 0; i < g->n_outputs; i++, n_out++) {
    const ap_value *val = &g->values[g->outputs[i]];
    cg_put_spec(f, val->name, val->dtype, val->rank, val->dims, 0, 0);
  }
  if (o->export_grads) {
    cg_put_spec(f, "loss", AP_DT_DOUBLE, 0, NULL, 0, 0);
    n_out++;
    for (int i = 0; i < G->n_exports; i++, n_out++) {
      const ap_value *val = &g->values[G->exports[i]];
      char *name = ap_arena_printf(g->arena, "grad:%s", val->name);
      if (!name) {
        cg_text_close(&t);
        free(t.s);
        return oom(G);
      }
      cg_put_spec(f, name, val->dtype, val->rank, val->dims, 0, 0);
    }
  }
  for (int v = 0; o->export_weights && v < G->nv; v++)
    if (G->sch.trainable[v]) {
      const ap_value *val = &g->values[v];
      cg_put_spec(f, val->name, val->dtype, val->rank, val->dims, 0, 0);
      n_out++;
    }
  fprintf(f, "};\n\n");
  cg_put_run(f, G->n_dev);
  fprintf(f, "static const aprt_program program = {\n  .name = ");
  cg_put_cstring(f, o->model_name ? o->model_name : "model");
  fprintf(f, ",\n  .ndev = %d,\n  .device_names = device_names,\n  .train = 1,\n"
             "  .n_inputs = %d,\n  .inputs = inputs,\n  .n_outputs = %d,\n  .outputs = outputs,\n"
             "  .predicted_step_bytes = predicted_step_bytes,\n  .run = run,\n"
             "  .constants = ap_blob,\n  .constants_bytes = %lld,\n};\n\n",
          G->n_dev, G->n_prog_inputs, n_out, (long long)G->blob_bytes);
  fprintf(f, "int main(int argc, char **argv) { return aprt_main(argc, argv, &program); }\n");
  return cg_write_text(G->g, G->d, G->o->outdir, "main.c", &t);
}

static ap_status write_blob(tgen *G) {
  ap_graph *g = G->g;
  unsigned char *blob = ap_arena_alloc(g->arena, (size_t)G->blob_bytes + 1);
  if (!blob)
    return oom(G);
  memset(blob, 0, (size_t)G->blob_bytes + 1);
  for (int i = 0; i < G->n_blob; i++) {
    int64_t bytes = value_bytes(G->blob[i].view);
    if (bytes)
      memcpy(blob + G->blob[i].offset, G->blob[i].view->data, (size_t)bytes);
  }
  return cg_write_file(G->g, G->d, G->o->outdir, "weights.bin", blob, (size_t)G->blob_bytes);
}

/* What several devices need of the graph: float32 errors (they are added
 * across devices in float32). */
static ap_status device_boxes(tgen *G) {
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

/* One device's program: storage, the calls of a step, its arena, its
 * source text. */
static ap_status emit_device(tgen *G) {
  ap_graph *g = G->g;
  int reads = 0;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    G->in_off[ni] = reads;
    reads += g->nodes[ni].n_in;
  }
  G->bufs = NULL;
  G->n_buf = G->cap_bufs = 0;
  G->rmap = ap_arena_array(g->arena, (size_t)reads + 1, sizeof *G->rmap);
  G->inited = ap_arena_array(g->arena, (size_t)G->nv + 1, sizeof *G->inited);
  if (!G->rmap || !G->inited ||
      !ap_arena_grow(g->arena, (void **)&G->bufs, &G->cap_bufs, 3 * G->nv + 1, sizeof *G->bufs))
    return oom(G);
  G->n_buf = 3 * G->nv + 1;
  memset(G->bufs, 0, (size_t)G->n_buf * sizeof *G->bufs);
  for (int b = 0; b < G->n_buf; b++) {
    G->bufs[b].input_index = -1;
    G->bufs[b].alias_of = -1;
    G->bufs[b].value = b < 3 * G->nv ? b % G->nv : -1;
  }
  for (int i = 0; i < reads; i++)
    G->rmap[i] = -1;
  G->calls = NULL;
  G->n_calls = G->cap_calls = 0;
  G->n_prog_inputs = G->n_exports = 0;
  G->arena_bytes = G->inbox_bytes = 0;
  G->step_bytes = 0;
  G->n_tags = 0;
  ap_status s = G->dist ? device_boxes(G) : AP_OK;
  if (s == AP_OK)
    s = plan_storage(G);
  for (int ni = 0; s == AP_OK && ni < g->n_nodes; ni++)
    if (!g->nodes[ni].dead)
      s = emit_forward(G, ni);
  for (int i = 0; s == AP_OK && i < g->n_outputs; i++) {
    int v = g->outputs[i];
    if ((s = check_value(G, NULL, &g->values[v])) == AP_OK && G->bufs[v].st == ST_NONE &&
        g->values[v].data)
      s = place_constant(G, v);
    if (s == AP_OK && G->bufs[root_of(G, v)].st == ST_NONE)
      s = ap_error(G->d, AP_ERR_INVALID, g->path, NULL, NULL,
                   "graph output '%s' is computed by no node", g->values[v].name);
  }
  if (s == AP_OK)
    s = emit_loss(G);
  for (int i = 0; s == AP_OK && i < G->sch.n_steps; i++)
    s = emit_backward(G, &G->sch.steps[i]);
  for (int v = 0; s == AP_OK && v < G->nv; v++)
    if (G->sch.trainable[v])
      s = emit_weight_sum(G, v);
  for (int v = 0; s == AP_OK && v < G->nv; v++)
    if (G->sch.trainable[v])
      s = emit_update(G, v);
  if (s == AP_OK)
    s = plan_arena(G);
  if (s == AP_OK)
    s = write_device(G);
  G->dev_bytes[G->dev] = G->step_bytes;
  return s;
}

ap_status cg_emit_train_program(ap_graph *g, const cg_train_opts *o, ap_diag *d) {
  tgen G = {.g = g, .d = d, .o = o, .nv = g->n_values, .n_dev = 1};
  ap_graph_link(g);
  ap_status s = cg_train_schedule_build(g, o->grad_inputs, &G.sch, d);
  if (s != AP_OK)
    return s;
  G.want = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *G.want);
  G.in_off = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *G.in_off);
  if (!G.want || !G.in_off)
    return oom(&G);
  for (int i = 0; i < G.sch.n_steps; i++)
    G.want[G.sch.steps[i].node] = G.sch.steps[i].want;
  if (g->plan) {
    ap_dist *dist;
    if (o->export_grads)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                      "exported gradients are generated for one device only");
    if ((s = ap_distribute_train(g, G.want, G.sch.trainable, &dist, d)) != AP_OK)
      return s;
    G.dist = dist;
    G.n_dev = dist->n_dev;
  }
  G.kernel = ap_arena_alloc(g->arena, sizeof *G.kernel);
  G.dev_bytes = ap_arena_array(g->arena, (size_t)G.n_dev, sizeof *G.dev_bytes);
  G.dev_src = calloc((size_t)G.n_dev, sizeof *G.dev_src);
  G.dev_len = calloc((size_t)G.n_dev, sizeof *G.dev_len);
  if (!G.kernel || !G.dev_bytes || !G.dev_src || !G.dev_len) {
    free(G.dev_src);
    free(G.dev_len);
    return oom(&G);
  }
  for (int dev = 0; s == AP_OK && dev < G.n_dev; dev++) {
    G.dev = dev;
    s = emit_device(&G);
  }
  char *blob_path = NULL;
  if (s == AP_OK)
    s = cg_prepare_outdir(g, d, o->outdir, &blob_path);
  if (s == AP_OK)
    s = write_blob(&G);
  if (s == AP_OK)
    s = cg_write_kernels(g, d, o->outdir, &G.kernels, G.needs_kernels_lib, true);
  for (int dev = 0; s == AP_OK && dev < G.n_dev; dev++) {
    char name[32];
    snprintf(name, sizeof name, "dev%d.c", dev);
    s = cg_write_file(g, d, o->outdir, name, G.dev_src[dev], G.dev_len[dev]);
  }
  if (s == AP_OK)
    s = write_main(&G, blob_path);
  for (int dev = 0; dev < G.n_dev; dev++)
    free(G.dev_src[dev]);
  free(G.dev_src);
  free(G.dev_len);
  cg_kernel_set_free(&G.kernels);
  return s;
}
