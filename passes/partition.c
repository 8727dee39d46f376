/* The partition pass: the cost model and the level-by-level search.
 *
 * For each level of the device tree, top-down, every vertex (layer or join)
 * picks a state; the groups of the level split each tensor among their
 * children by the chosen layouts, in shares given by a ratio. Communication
 * is bytes from ap_layout_convert over link bandwidth, plus latency per
 * message; an edge costs the conversion of the activation forward and of its
 * error backward. dp and owt price a level by itself (the slowest child's
 * compute plus its communication at this level); accpar plans as a rollout
 * from the fastest of four base plans, and from each other that can win,
 * pricing each level's states with the whole tree below them (see
 * ap_partition and docs/partition.md). Groups that look alike share a class,
 * so the work per level does not grow with the number of devices.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "passes/distribute.h"
#include "passes/passes.h"
#include "runtime/accpar_rt.h"

enum { MAX_CLASSES = 64 }; /* beyond this, a level merges classes (see merge_class) */

/* A vertex's state (passes.h) is its type and a ratio rule: rule 0 is the
 * strategy's own (balanced for accpar), rule 1 shares by device count, as
 * dp, owt and hypar do. A balanced ratio is best for the vertex alone but
 * not always for the plan: two neighbours balanced differently convert
 * their activation at every level, which by-count shares avoid. */
static int state_type(int s) { return s % 3; }
static int state_rule(int s) { return s / 3; }

static const char *const strategy_names[AP_STRATEGY_COUNT] = {
    [AP_STRATEGY_DP] = "dp",         [AP_STRATEGY_OWT] = "owt",
    [AP_STRATEGY_HYPAR] = "hypar",   [AP_STRATEGY_ACCPAR] = "accpar",
    [AP_STRATEGY_EXHAUSTIVE] = "exhaustive",
};

const char *ap_strategy_name(ap_strategy s) {
  return s < AP_STRATEGY_COUNT ? strategy_names[s] : "?";
}

bool ap_strategy_parse(const char *name, ap_strategy *out) {
  for (int s = 0; s < AP_STRATEGY_COUNT; s++)
    if (strcmp(strategy_names[s], name) == 0) {
      *out = (ap_strategy)s;
      return true;
    }
  return false;
}

/* ---- sizes ---- */

static double elem_bytes(const ap_graph *g, int v) {
  size_t s = ap_dtype_size(g->values[v].dtype);
  return s ? (double)s : 4;
}

static double full(const ap_graph *g, int v, int d) {
  return d >= 0 ? (double)g->values[v].dims[d] : 1;
}

static const int64_t *port_ext(const ap_plan *p, const int64_t *ext, int v, int port) {
  return ext + 2 * (p->v[v].ext_base + port);
}

/* The box of a port in a group; vext holds the extents of v's ports. */
static int port_box_v(const ap_plan *p, const ap_graph *g, const int64_t *vext, int v, int port,
                      int64_t *box) {
  const ap_port *pt = &p->v[v].port[port];
  const ap_value *val = &g->values[pt->value];
  for (int i = 0; i < val->rank; i++)
    box[i] = val->dims[i];
  for (int c = 0; c < 2; c++)
    if (pt->dim[c] >= 0)
      box[pt->dim[c]] = vext[2 * port + c];
  return val->rank;
}

/* The same with a class's extents of all ports. */
static int port_box(const ap_plan *p, const ap_graph *g, const int64_t *ext, int v, int port,
                    int64_t *box) {
  return port_box_v(p, g, port_ext(p, ext, v, 0), v, port, box);
}

static double port_fraction_v(const ap_plan *p, const ap_graph *g, const int64_t *vext, int v,
                              int port, int c) {
  const ap_port *pt = &p->v[v].port[port];
  if (pt->dim[c] < 0)
    return 1;
  double n = full(g, pt->value, pt->dim[c]);
  return n > 0 ? (double)vext[2 * port + c] / n : 0;
}

static double port_fraction(const ap_plan *p, const ap_graph *g, const int64_t *ext, int v,
                            int port, int c) {
  return port_fraction_v(p, g, port_ext(p, ext, v, 0), v, port, c);
}

static double box_bytes(const ap_graph *g, int value, int rank, const int64_t *box) {
  double b = elem_bytes(g, value);
  for (int i = 0; i < rank; i++)
    b *= (double)box[i];
  return b;
}

/* ---- layouts of a vertex's ports ---- */

/* The slot (0 or 1) of the port's dims that state s splits, or -1. */
static int port_slot(const ap_plan *p, int v, int port, int s) {
  const ap_vertex *vx = &p->v[v];
  s = state_type(s);
  int c;
  if (vx->join)
    c = s < 2 ? s : -1;
  else if (port == 0) /* the output: I splits B, II is partial, III splits O */
    c = s == 0 ? 0 : s == 2 ? 1 : -1;
  else /* the input: I splits B, II splits I, III needs it whole */
    c = s == 0 ? 0 : s == 1 ? 1 : -1;
  return c >= 0 && vx->port[port].dim[c] >= 0 ? c : -1;
}

ap_layout ap_plan_port_layout(const ap_plan *p, int v, int port, int s, const double *ratio) {
  const ap_vertex *vx = &p->v[v];
  ap_layout l = {.kind = AP_LAYOUT_REPLICATED};
  if (!vx->join && port == 0 && state_type(s) == 1)
    l.kind = AP_LAYOUT_PARTIAL;
  int c = port_slot(p, v, port, s);
  if (c >= 0) {
    l.kind = AP_LAYOUT_SPLIT;
    l.dim = vx->port[port].dim[c];
    l.unit = vx->port[port].unit[c];
    memcpy(l.ratio, ratio, sizeof l.ratio);
  }
  return l;
}

/* The ratio by which a port of vertex v in state s shares its dimension
 * among k children when v's own ratio is r; vext holds v's extents in the
 * group. It is r, except for the inputs of a Concat split along its own
 * axis: there child i holds, of each input, the part of child i's slab of
 * the output that input fills (possibly none), as the program reads it
 * (passes/distribute.c). Inside a group the inputs' parts lie one after
 * another in input order, so their extents alone place them. A Concat with
 * a constant input (not a port) keeps r. */
void ap_plan_port_ratio(const ap_plan *p, const ap_graph *g, const int64_t *vext, int v,
                        int port, int s, int k, const double *r, double *out) {
  const ap_vertex *vx = &p->v[v];
  memcpy(out, r, sizeof(double) * AP_MAX_CHILDREN);
  int c = state_type(s);
  if (!vx->join || port == 0 || c > 1 || k <= 1 || vx->port[0].dim[c] < 0)
    return;
  const ap_node *n = &g->nodes[vx->node];
  if (n->op != AP_OP_CONCAT)
    return;
  int rank = g->values[vx->port[0].value].rank;
  int64_t axis = ap_attr_int(n, "axis", 0);
  if (axis < 0)
    axis += rank;
  if (vx->port[0].dim[c] != axis || vx->port[port].dim[c] != axis)
    return;
  int64_t total = vext[c], at = 0, sum = 0;
  for (int q = 1; q < vx->n_ports; q++) {
    if (q < port)
      at += vext[2 * q + c];
    sum += vext[2 * q + c];
  }
  int64_t len = vext[2 * port + c];
  if (sum != total || len <= 0)
    return;
  int64_t share[AP_MAX_CHILDREN], lo = 0;
  ap_layout_unit_shares(total, k, r, vx->port[0].unit[c], share);
  for (int i = 0; i < k; i++) {
    int64_t a = lo > at ? lo : at, b = lo + share[i] < at + len ? lo + share[i] : at + len;
    out[i] = b > a ? (double)(b - a) / (double)len : 0;
    lo += share[i];
  }
}

/* Which of the port's two dims a layout splits; -1 if none. */
static int split_slot(const ap_plan *p, int v, int port, const ap_layout *l) {
  if (l->kind != AP_LAYOUT_SPLIT)
    return -1;
  for (int c = 0; c < 2; c++)
    if (p->v[v].port[port].dim[c] == l->dim)
      return c;
  return -1;
}

/* ---- the level context ---- */


typedef enum ratio_policy { RATIO_EQUAL, RATIO_COUNT, RATIO_BALANCED } ratio_policy;

typedef struct level_ctx {
  const ap_plan *p;
  const ap_graph *g;
  const ap_class *c;
  int k;
  ap_group ch[AP_MAX_CHILDREN];
  bool paper;          /* objective: communicated elements */
  ratio_policy policy;
} level_ctx;

static void ctx_init(level_ctx *x, const ap_plan *p, const ap_graph *g, const ap_class *c) {
  x->p = p;
  x->g = g;
  x->c = c;
  x->k = ap_group_children(&p->dev, &c->g, x->ch);
  x->paper = p->opts.cost == AP_COST_PAPER || p->opts.strategy == AP_STRATEGY_HYPAR;
  x->policy = p->opts.cost == AP_COST_PAPER ? RATIO_EQUAL
              : p->opts.strategy == AP_STRATEGY_ACCPAR ||
                      p->opts.strategy == AP_STRATEGY_EXHAUSTIVE
                  ? RATIO_BALANCED
                  : RATIO_COUNT;
}

static const ap_device_kind *kind_of(const level_ctx *x, int i) {
  return &x->p->dev.kinds[x->ch[i].kind];
}

static double comm_time(const level_ctx *x, int i, double bytes, int messages) {
  const ap_device_kind *dk = kind_of(x, i);
  return bytes / x->ch[i].count / dk->link_bw_bytes_s + messages * dk->link_latency_s;
}

/* Per-child results of one vertex state or one edge at one level. */
typedef struct child_cost {
  double comm_s[AP_MAX_CHILDREN];  /* communication time */
  double bytes;                    /* sent, all children */
  double elems;                    /* the most elements a child sends */
  double sent[AP_MAX_CHILDREN];    /* bytes child i sends, a training step */
  double fwd[AP_MAX_CHILDREN];     /* of which in the forward pass */
} child_cost;

/* forward: the exchange happens in the forward pass (inference too). */
static void add_exchange(const level_ctx *x, const ap_exchange *ex, double elem,
                         child_cost *cc, double *elems, bool forward) {
  for (int i = 0; i < x->k; i++) {
    double b = ex->allreduce_bytes[i] + ex->send_bytes[i];
    double t = comm_time(x, i, b, ex->messages[i]);
    cc->comm_s[i] += t;
    cc->bytes += b;
    cc->sent[i] += b;
    if (forward)
      cc->fwd[i] += b;
    elems[i] += b / elem;
  }
}

/* Port `port` of vertex v in state s with ratio r among x's children: the
 * slot (0: dim[0], 1: dim[1]) its extents split along, with each child's
 * share in share[0..k), or -1 where every child holds the group's. */
static int port_split(const level_ctx *x, const int64_t *ext, int v, int port, int s,
                      const double *r, int64_t *share) {
  const ap_vertex *vx = &x->p->v[v];
  /* split_slot of the port's layout, without building the layout */
  int c = port_slot(x->p, v, port, s);
  if (c == 1 && vx->port[port].dim[0] == vx->port[port].dim[1])
    c = 0;
  if (c < 0 || x->k <= 1)
    return -1;
  double pr[AP_MAX_CHILDREN];
  const double *rp = r;
  if (vx->join && port > 0) { /* a Concat's inputs may share otherwise */
    ap_plan_port_ratio(x->p, x->g, port_ext(x->p, ext, v, 0), v, port, s, x->k, r, pr);
    rp = pr;
  }
  ap_layout_unit_shares(port_ext(x->p, ext, v, port)[c], x->k, rp, vx->port[port].unit[c],
                        share);
  return c;
}

/* Child i's extents of vertex v (into out) from its ports' splits: slot[port]
 * and share[port] as port_split gives them. */
static void child_of_split(const level_ctx *x, const int64_t *ext, int v, const int8_t *slot,
                           int64_t (*share)[AP_MAX_CHILDREN], int i, int64_t *out) {
  const ap_vertex *vx = &x->p->v[v];
  for (int port = 0; port < vx->n_ports; port++) {
    const int64_t *e = port_ext(x->p, ext, v, port);
    int64_t *o = out + 2 * port;
    o[0] = e[0];
    o[1] = e[1];
    if (slot[port] >= 0)
      o[slot[port]] = share[port][i];
  }
}

/* Every port's split of vertex v in state s with ratio r (port_split), for
 * child_of_split to give each child's extents without splitting again. */
static void split_ports(const level_ctx *x, const int64_t *ext, int v, int s, const double *r,
                        int8_t *slot, int64_t (*share)[AP_MAX_CHILDREN]) {
  for (int port = 0; port < x->p->v[v].n_ports; port++)
    slot[port] = (int8_t)port_split(x, ext, v, port, s, r, share[port]);
}

/* Child extents of vertex v in state s with ratio r: child i's slab of every
 * port the state splits. */
static void child_ext(const level_ctx *x, const int64_t *ext, int v, int s, const double *r,
                      int i, int64_t *out) {
  const ap_vertex *vx = &x->p->v[v];
  for (int port = 0; port < vx->n_ports; port++) {
    const int64_t *e = port_ext(x->p, ext, v, port);
    int64_t *o = out + 2 * port, share[AP_MAX_CHILDREN];
    o[0] = e[0];
    o[1] = e[1];
    int c = port_split(x, ext, v, port, s, r, share);
    if (c >= 0)
      o[c] = share[i];
  }
}

/* Seconds a device's GEMMs of a layer spend packing their B operands, which
 * the products' rate (peak_flops, measured on large products where packing
 * is amortised) leaves out and which at training batches costs a good part
 * of the products. A layer of `rows` rows of k inputs and n outputs runs, as
 * codegen/c_layer.c and c_grad_layer.c emit them:
 * - forward, the weight as op(B): k x n floats, transposed where Gemm's
 *   transB is set;
 * - backward data (unless the input is a graph input), the weight the other
 *   way round;
 * - the weight's gradient, the input (Gemm with transB: dW = dY^T X) or the
 *   output's error (otherwise: dW = X^T dY), rows x k or rows x n floats.
 * A MatMul of a batch of matrices (rank 3 or more) by one matrix (a layer's
 * weight) runs one GEMM over all their rows, the batch folded into A's rows
 * (codegen/c_layer.c, c_grad_layer.c: where A is dense, as an activation
 * is unless a Transpose before it is read in place); by a batch of
 * matrices, one GEMM per matrix, each packing its own. A GEMM of at most APK_NARROW_M rows packs
 * nothing (apk_sgemm reads B in place); float64 runs loops without packing.
 * Each float costs pack_float_s copied from contiguous rows of op(B), or
 * pack_transposed_s gathered from a transposed one (apk_pack_b's two paths,
 * measured by calibrate on an operand in the caches, where a layer's weight
 * and activations are: the memcpy rate of mem_bw is three to six times
 * slower). A device file without them prices a float as loaded, stored and
 * loaded again at mem_bw. Splitting the batch leaves every device packing
 * the whole weight. */
static double gemm_packing_s(const ap_graph *g, const ap_vertex *vx, double rows, double k,
                             double n, const ap_device_kind *dk) {
  const ap_node *node = &g->nodes[vx->node];
  const ap_value *x = &g->values[vx->port[1].value];
  if (x->dtype != AP_DT_FLOAT || rows <= 0 || k <= 0 || n <= 0)
    return 0;
  double streamed_s = 3 * 4 / dk->mem_bw_bytes_s;
  double contiguous_s = dk->pack_float_s > 0 ? dk->pack_float_s : streamed_s;
  double transposed_s = dk->pack_transposed_s > 0 ? dk->pack_transposed_s : streamed_s;
  bool gemm = node->op == AP_OP_GEMM;
  bool ta = gemm && ap_attr_int(node, "transA", 0) != 0;
  bool tb = gemm && ap_attr_int(node, "transB", 0) != 0;
  double m = rows, calls = 1; /* rows of one GEMM, GEMMs per kernel */
  if (!gemm && x->rank >= 3 && g->values[node->in[1]].rank >= 3) {
    m = (double)x->dims[x->rank - 2];
    calls = rows / m;
  }
  double t = 0;
  if (m > APK_NARROW_M) {
    t += calls * k * n * (tb ? transposed_s : contiguous_s);
    if (!vx->first)
      t += calls * n * k * (gemm && tb ? contiguous_s : transposed_s);
  }
  if (gemm && tb)
    t += n > APK_NARROW_M ? rows * k * (ta ? transposed_s : contiguous_s) : 0;
  else
    t += k > APK_NARROW_M ? rows * n * contiguous_s : 0;
  return t;
}

/* Seconds of kernel k of a convolution (passes.h, ap_conv_kernel_s) for the
 * device's box (batch n, input channels c, output channels m) of
 * convolution `whole`, with the algorithm the kernel library picks for that
 * box (apk_conv2d_choose), priced as what it runs:
 * - the GEMM's products at peak_flops; Winograd's are its own, 16 products
 *   of m x c per 2x2 tile, plus wino_tile_s per 4x4 tile of each of its c
 *   input and m output channels transformed, and per block of tiles
 *   (apk_conv2d_wino_blocks: its 16 GEMMs read the whole transformed weight)
 *   wino_block_s and wino_pair_s per pair of channels (calibrate fits the
 *   three to three shapes); a device file without them prices the
 *   transformed tiles as stored and loaded on both sides at mem_bw;
 * - the lowering of the column matrix (implicit forward and backward
 *   weights, block by block; backward data's col2im pass after the GEMM
 *   wrote the matrix whole): lower_row_s per row of the matrix (one output
 *   row of one tap) and per float lower_float_s, or lower_gather_s where the
 *   stride is not 1. The lowering's copy runs on short rows that stay in
 *   the caches, far from the memcpy rate of mem_bw (docs/partition.md).
 *   Backward weights then transposes each float into the GEMM's panel (one
 *   access at mem_bw); backward data first zeroes the input's error;
 * - a pointwise convolution's column matrix is its input, which the GEMM
 *   packs: 3 accesses per element at the memory bandwidth;
 * - one input channel (apk_conv2d_is_direct): forward and backward weights
 *   are direct loops at direct_flops, lowering nothing.
 * A device file without the lowering's figures prices a float as a load and
 * a store at mem_bw, no cost per row, and the direct loops at peak_flops.
 * The column matrix covers the device's whole input: splitting the output
 * channels leaves every device lowering all of it. */
double ap_conv_kernel_s(const apk_conv2d *whole, int k, int64_t n, int64_t c, int64_t m,
                        const ap_device_kind *dk) {
  if (n <= 0 || c <= 0 || m <= 0)
    return 0;
  apk_conv2d p = *whole;
  p.batch = (int)n;
  p.in_channels = (int)c;
  p.out_channels = (int)m;
  double float_s = dk->lower_float_s > 0 ? dk->lower_float_s : 8 / dk->mem_bw_bytes_s;
  double gather_s = dk->lower_gather_s > 0 ? dk->lower_gather_s : float_s;
  double direct_flops = dk->direct_flops > 0 ? dk->direct_flops : dk->peak_flops;
  double access_s = 4 / dk->mem_bw_bytes_s; /* one float loaded or stored */
  bool pointwise = p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
                   p.pad_top == 0 && p.pad_left == 0 && p.pad_bottom == 0 && p.pad_right == 0;
  double oh = apk_conv2d_out_h(&p), ow = apk_conv2d_out_w(&p);
  double taps = (double)p.kernel_h * p.kernel_w;
  double rows = (double)n * (double)c * taps * oh, col = rows * ow;
  double lowering = rows * dk->lower_row_s + col * (p.stride_w == 1 ? float_s : gather_s);
  double x = (double)n * (double)c * p.in_h * p.in_w, dy = (double)n * (double)m * oh * ow;
  double products = 2 * dy * (double)(c / p.groups) * taps; /* FLOPs of one kernel */
  apk_conv_algo a = apk_conv2d_choose(&p, (apk_conv_kernel)k);
  if (a == APK_CONV_WINOGRAD) {
    bool fwd = k == APK_CONV_FORWARD;
    double tiles = (double)n * ceil((fwd ? oh : p.in_h) / 2) * ceil((fwd ? ow : p.in_w) / 2);
    double wino_s = 2 * 16 * tiles * (double)c * (double)m / dk->peak_flops;
    if (dk->wino_tile_s > 0) {
      double blocks = (double)n * apk_conv2d_wino_blocks(&p, (apk_conv_kernel)k);
      return wino_s + tiles * (double)(c + m) * dk->wino_tile_s +
             blocks * (dk->wino_block_s + (double)c * (double)m * dk->wino_pair_s);
    }
    return wino_s + 2 * 16 * tiles * (double)(c + m) * access_s;
  }
  if (a == APK_CONV_IMPLICIT && k != APK_CONV_BACKWARD_DATA && apk_conv2d_is_direct(&p))
    return products / direct_flops;
  if (pointwise)
    return products / dk->peak_flops + 3 * (k == APK_CONV_BACKWARD_DATA ? dy : col) * access_s;
  if (k == APK_CONV_BACKWARD_DATA)
    return products / dk->peak_flops + lowering + x * access_s;
  return products / dk->peak_flops + lowering +
         (k == APK_CONV_BACKWARD_WEIGHTS || a == APK_CONV_IM2COL ? col * access_s : 0);
}

/* A training step's kernels of a convolution: forward, backward data unless
 * its input is a graph input (first), backward weights. */
static double conv_kernels_s(const apk_conv2d *whole, bool first, int64_t n, int64_t c,
                             int64_t m, const ap_device_kind *dk) {
  double t = 0;
  for (int k = APK_CONV_FORWARD; k <= APK_CONV_BACKWARD_WEIGHTS; k++)
    if (k != APK_CONV_BACKWARD_DATA || !first)
      t += ap_conv_kernel_s(whole, k, n, c, m, dk);
  return t;
}

/* Seconds per output element of node n's transcendental functions in a
 * training step, which neither peak_flops nor the memory traffic price,
 * once forward (the backward of all but GELU reuses the output):
 * - Softmax and LogSoftmax: exp_s, a row's maximum, exp and sum as the
 *   loss's softmax computes them (calibrate's exp_n);
 * - Sigmoid and Exp: apk_expf in an element-wise loop, vectorised as the
 *   tanh is, priced as one (apk_tanhf evaluates an exp and a division:
 *   0.62 ns an element against apk_expf's 0.31 on this host);
 * - Tanh, Erf: the vectorised tanh; GELU twice (its gradient recomputes
 *   the tanh). */
static double transcendental_s(const ap_node *n, const ap_device_kind *dk) {
  switch (n->op) {
  case AP_OP_SOFTMAX:
  case AP_OP_LOG_SOFTMAX:
    return dk->exp_s;
  case AP_OP_SIGMOID:
  case AP_OP_EXP:
  case AP_OP_TANH:
  case AP_OP_ERF:
    return dk->tanh_s;
  case AP_OP_GELU:
    return 2 * dk->tanh_s;
  default:
    return 0;
  }
}

/* Compute and memory-traffic time of vertex v (with its chain ops) on a
 * group of `count` devices of kind dk holding extents ext (its own ports at
 * ext + 0). Used at every level and for the devices themselves. The
 * vertex computing graph output 0 also runs the loss on its share of the
 * rows: one exp in double per logit (its softmax, which the gradient's
 * pass reads back from the error's row), the logits read twice and their
 * error written and read again. */
static double group_compute(const ap_plan *p, const ap_graph *g, int v, const int64_t *ext,
                            const ap_device_kind *dk, int count) {
  const ap_vertex *vx = &p->v[v];
  double t = 0;
  double f0[2], fr = 1;
  for (int c = 0; c < 2; c++) {
    const ap_port *pt = &vx->port[0];
    f0[c] = pt->dim[c] >= 0 && full(g, pt->value, pt->dim[c]) > 0
                ? (double)ext[c] / full(g, pt->value, pt->dim[c])
                : 1;
  }
  if (!vx->join) {
    const ap_port *in = &vx->port[1];
    double fb = (double)ext[2] / full(g, in->value, in->dim[0]);
    double fi = (double)ext[3] / full(g, in->value, in->dim[1]);
    fr = fb * fi * f0[1];
    if (vx->conv) {
      t += vx->traffic * fr / (count * dk->mem_bw_bytes_s) +
           conv_kernels_s(vx->conv, vx->first, ext[2], ext[3], ext[1], dk) / count;
    } else {
      t += vx->flops * fr / (count * dk->peak_flops) +
           vx->traffic * fr / (count * dk->mem_bw_bytes_s);
      const ap_value *xv = &g->values[in->value];
      const ap_port *out = &vx->port[0];
      double rows = (double)ap_numel(xv->rank, xv->dims) / full(g, in->value, in->dim[1]) * fb;
      if (vx->flops > 0)
        t += gemm_packing_s(g, vx, rows, (double)ext[3], out->dim[1] >= 0 ? (double)ext[1] : 1,
                            dk) /
             count;
    }
  } else {
    double traffic = 0;
    for (int port = 0; port < vx->n_ports; port++) {
      const ap_port *pt = &vx->port[port];
      double b = elem_bytes(g, pt->value) * (double)ap_numel(g->values[pt->value].rank,
                                                               g->values[pt->value].dims);
      for (int c = 0; c < 2; c++)
        if (pt->dim[c] >= 0 && full(g, pt->value, pt->dim[c]) > 0)
          b *= (double)ext[2 * port + c] / full(g, pt->value, pt->dim[c]);
      traffic += b;
    }
    /* Forward reads the inputs and writes the output; backward reads the
     * output's error and writes the inputs' errors: twice the traffic. */
    t += 2 * traffic / (count * dk->mem_bw_bytes_s);
    t += vx->flops * f0[0] * f0[1] / (count * dk->peak_flops);
  }
  for (int k = 0; k < vx->n_chain; k++) {
    const ap_chain_op *op = &vx->chain[k];
    double fi = 1, fo = 1;
    for (int c = 0; c < 2; c++) {
      if (op->in_map[c] >= 0)
        fi *= f0[c];
      if (op->out_map[c] >= 0)
        fo *= f0[c];
    }
    const ap_value *iv = &g->values[op->in_value], *ov = &g->values[op->out_value];
    double b = elem_bytes(g, op->in_value) * (double)ap_numel(iv->rank, iv->dims) * fi +
               elem_bytes(g, op->out_value) * (double)ap_numel(ov->rank, ov->dims) * fo;
    t += 2 * b / (count * dk->mem_bw_bytes_s);
    t += (double)ap_numel(ov->rank, ov->dims) * fo * transcendental_s(&g->nodes[op->node], dk) /
         count;
  }
  if (v == p->loss_vertex && g->n_outputs > 0) {
    const ap_value *yv = &g->values[g->outputs[0]];
    double share = (double)ap_numel(yv->rank, yv->dims);
    for (int c = 0; c < 2; c++)
      if (p->loss_map[c] >= 0)
        share *= f0[c];
    t += share * (dk->exp_s + 2 * elem_bytes(g, g->outputs[0]) / dk->mem_bw_bytes_s) / count;
  }
  return t;
}

/* Whether the level prices AccPar's published formulas (paper mode) rather
 * than what the partitioned program does (docs/partition.md, "What a
 * training step moves"). HyPar under --cost time keeps its objective
 * (communicated elements) but counts them as the program sends them, so
 * that its plan's bytes, and the rollout's base plan made with it, are the
 * program's. */
static bool published_model(const ap_plan *p) { return p->opts.cost == AP_COST_PAPER; }

/* Communication inside vertex v in state s at this level, independent of
 * the ratio: the all-reduce resolving its partial sums (type I: the weight
 * gradient's; II: the output's; III: the input error's, in the published
 * formulas only: the program lets the error's summands flow back to where
 * the input came from, whose transfers' adjoints add them). */
static void intra_allreduce(const level_ctx *x, int v, int s, ap_exchange *ex, double *elem) {
  const ap_plan *p = x->p;
  s = state_type(s);
  const ap_graph *g = x->g;
  const ap_vertex *vx = &p->v[v];
  int64_t box[AP_MAX_RANK];
  int rank = 0;
  ap_layout partial = {.kind = AP_LAYOUT_PARTIAL}, repl = {.kind = AP_LAYOUT_REPLICATED};
  ex->k = 0;
  *elem = 4;
  if (vx->join)
    return;
  const int64_t *e0 = port_ext(p, x->c->ext, v, 0), *e1 = port_ext(p, x->c->ext, v, 1);
  int value = -1;
  if (s == 0) { /* type I: the weight gradient */
    value = vx->weight;
    rank = g->values[value].rank;
    for (int i = 0; i < rank; i++)
      box[i] = g->values[value].dims[i];
    if (vx->port[1].dim[1] >= 0) /* an embedding's rows are not its input's: held whole */
      box[vx->w_dim[0]] = e1[1];
    if (vx->w_dim[1] >= 0)
      box[vx->w_dim[1]] = e0[1];
  } else if (s == 1) { /* type II: the output */
    value = vx->port[0].value;
    rank = port_box(p, g, x->c->ext, v, 0, box);
  } else if (!vx->first && published_model(p)) { /* type III: the input's error */
    value = vx->port[1].value;
    rank = port_box(p, g, x->c->ext, v, 1, box);
  }
  if (value < 0)
    return;
  *elem = elem_bytes(g, value);
  ap_layout_convert(rank, box, *elem, x->k, &partial, &repl, ex);
}

/* How many of a child's finish times a + j w (j = 1, 2, ..., as
 * ap_plan_ratio's greedy computes them) lie below t, or -1 when rounding
 * leaves it unsure. They never decrease with j, so they are a prefix. */
static int64_t times_below(double a, double w, double t) {
  if (!(t > a) || !(w > 0) || !((t - a) / w < 1e15))
    return 0;
  int64_t j = (int64_t)floor((t - a) / w);
  for (int step = 0; step < 4 && j > 0 && !(a + j * w < t); step++)
    j--;
  for (int step = 0; step < 4 && a + (j + 1) * w < t; step++)
    j++;
  return (j > 0 && !(a + j * w < t)) || a + (j + 1) * w < t ? -1 : j;
}

/* The balancing greedy below takes finish times in increasing order (ties
 * to the lower child) until its children hold n indices, so every time
 * below a threshold t is taken before any other as long as those hold
 * fewer than n: the loads start there, t a little under the continuous
 * balance, and the greedy goes on index by index (it took about 1,900
 * instructions a call on ResNet-152 over 1024 devices). */
static void skip_ahead(int k, const double *a, const double *w, const ap_group *ch, int64_t n,
                       int64_t *load, int64_t *held) {
  double rate = 0, offset = 0, widest = 0;
  for (int i = 0; i < k; i++) {
    if (!(w[i] > 0))
      return;
    rate += ch[i].count / w[i];
    offset += ch[i].count * a[i] / w[i];
    widest = fmax(widest, w[i]);
  }
  double t = ((double)n + offset) / rate - 2 * widest;
  int64_t m[AP_MAX_CHILDREN], sum = 0;
  for (int i = 0; i < k; i++) {
    if ((m[i] = times_below(a[i], w[i], t)) < 0 || m[i] >= n)
      return;
    sum += m[i] * ch[i].count;
  }
  if (sum >= n)
    return;
  for (int i = 0; i < k; i++)
    load[i] = m[i];
  *held = sum;
}

void ap_plan_ratio(const ap_plan *p, const ap_graph *g, const ap_class *c, int v, int s,
                   double *ratio) {
  level_ctx x;
  ctx_init(&x, p, g, c);
  int k = x.k;
  for (int i = 0; i < AP_MAX_CHILDREN; i++)
    ratio[i] = 0;
  if (state_rule(s) && x.policy == RATIO_BALANCED)
    x.policy = RATIO_COUNT;
  s = state_type(s);
  if (x.policy == RATIO_EQUAL) {
    for (int i = 0; i < k; i++)
      ratio[i] = 1.0 / k;
    return;
  }
  if (x.policy == RATIO_COUNT || k == 1) {
    for (int i = 0; i < k; i++)
      ratio[i] = (double)x.ch[i].count / c->g.count;
    return;
  }
  /* Balanced. Child i's devices finish a layer at a_i + L_i w_i, where a_i
   * is its (ratio-independent) all-reduce time, L_i the most indices one of
   * its devices holds and w_i the time of one index on one device. Raising
   * the smallest finish time first gives the whole-index split with the
   * earliest slowest child; ratios are then exact shares of n. */
  ap_exchange ex;
  double elem;
  intra_allreduce(&x, v, s, &ex, &elem);
  ap_layout lay = ap_plan_port_layout(p, v, p->v[v].join || s == 2 ? 0 : 1, s,
                                      (double[AP_MAX_CHILDREN]){0});
  int slot = split_slot(p, v, p->v[v].join || s == 2 ? 0 : 1, &lay);
  /* Balanced in the split dimension's units (heads): n counts units. */
  int64_t unit = lay.unit > 1 ? lay.unit : 1;
  int64_t n = slot >= 0 ? port_ext(p, c->ext, v, p->v[v].join || s == 2 ? 0 : 1)[slot] : 0;
  n = (n + unit - 1) / unit;
  double w[AP_MAX_CHILDREN], a[AP_MAX_CHILDREN];
  int64_t load[AP_MAX_CHILDREN], take[AP_MAX_CHILDREN], held = 0;
  for (int i = 0; i < k; i++) {
    const ap_device_kind *dk = &p->dev.kinds[x.ch[i].kind];
    double u = group_compute(p, g, v, port_ext(p, c->ext, v, 0), dk, x.ch[i].count);
    w[i] = n > 0 ? u * x.ch[i].count / (double)n : 0;
    a[i] = ex.k ? comm_time(&x, i, ex.allreduce_bytes[i], ex.messages[i]) : 0;
    load[i] = 0;
  }
  if (n <= 0) { /* nothing to split: by device count */
    for (int i = 0; i < k; i++)
      ratio[i] = (double)x.ch[i].count / c->g.count;
    return;
  }
  skip_ahead(k, a, w, x.ch, n, load, &held);
  while (held < n) {
    int best = 0;
    for (int i = 1; i < k; i++)
      if (a[i] + (load[i] + 1) * w[i] < a[best] + (load[best] + 1) * w[best])
        best = i;
    load[best]++;
    held += x.ch[best].count;
  }
  for (int i = 0; i < k; i++)
    take[i] = load[i] * x.ch[i].count;
  /* Whole devices' worth may overshoot n: the slowest children give back. */
  for (int64_t excess = held - n; excess > 0;) {
    int slow = -1;
    for (int i = 0; i < k; i++)
      if (take[i] > (load[i] - 1) * x.ch[i].count && take[i] > 0 &&
          (slow < 0 || a[i] + load[i] * w[i] > a[slow] + load[slow] * w[slow]))
        slow = i;
    if (slow < 0)
      break;
    int64_t give = take[slow] - (load[slow] - 1) * x.ch[slow].count;
    if (give > excess)
      give = excess;
    take[slow] -= give;
    excess -= give;
    load[slow]--; /* its slowest device now holds one index less */
  }
  for (int i = 0; i < k; i++)
    ratio[i] = (double)take[i] / (double)n;
}

void ap_plan_level_ratio(const ap_plan *p, const ap_graph *g, int l, int cls, int v,
                         double *ratio) {
  if (p->level_ratio)
    memcpy(ratio, p->level_ratio[l][(size_t)cls * p->n_vertices + v],
           sizeof(double) * AP_MAX_CHILDREN);
  else
    ap_plan_ratio(p, g, &p->cls[l][cls], v, p->state[(size_t)l * p->n_vertices + v], ratio);
}

void ap_plan_intra_exchange(const ap_plan *p, const ap_graph *g, const ap_class *c, int v,
                            int s, ap_exchange *ex) {
  level_ctx x;
  double elem;
  ctx_init(&x, p, g, c);
  intra_allreduce(&x, v, s, ex, &elem);
}

/* The communication of vertex v in state s at the context's level (its
 * compute is charged on the devices themselves, see below_vertex). */
/* The loss reads whole rows of graph output 0 (dim 0): a level that
 * splits another of its dims sends each child an even share of the rows,
 * and their errors back (ap_distribute_train's loss transfer). Vertex v's
 * output has layout out, splitting slot c; false: no transfer here. */
static bool loss_exchange(const level_ctx *x, int v, const ap_layout *out, int c,
                          ap_exchange *ex) {
  const ap_plan *p = x->p;
  const ap_graph *g = x->g;
  if (v != p->loss_vertex || c < 0 || p->loss_map[c] <= 0 || published_model(p))
    return false;
  const ap_value *yv = &g->values[g->outputs[0]];
  int64_t box[AP_MAX_RANK];
  for (int i = 0; i < yv->rank; i++)
    box[i] = yv->dims[i];
  for (int c2 = 0; c2 < 2; c2++)
    if (p->loss_map[c2] >= 0)
      box[p->loss_map[c2]] = (int64_t)llround((double)yv->dims[p->loss_map[c2]] *
                                              port_fraction(p, g, x->c->ext, v, 0, c2));
  ap_layout from = *out, to = {.kind = AP_LAYOUT_SPLIT, .dim = 0, .unit = 1};
  from.dim = p->loss_map[c];
  for (int i = 0; i < x->k; i++)
    to.ratio[i] = 1.0 / x->k;
  ap_layout_convert(yv->rank, box, elem_bytes(g, g->outputs[0]), x->k, &from, &to, ex);
  return true;
}

static void vertex_cost(const level_ctx *x, int v, int s, const double *r, bool joint,
                        child_cost *cc) {
  const ap_plan *p = x->p;
  const ap_graph *g = x->g;
  const ap_vertex *vx = &p->v[v];
  double elems[AP_MAX_CHILDREN] = {0};
  memset(cc, 0, sizeof *cc);
  ap_exchange ex;
  double elem;
  intra_allreduce(x, v, s, &ex, &elem);
  if (joint && vx->weight_joint && state_type(s) == 0 && !published_model(p))
    ex.k = 0; /* the weight's gradient is summed with its other readers (joint_sum) */
  if (ex.k) /* type II's output is reduced forward; I's and III's sums are backward */
    add_exchange(x, &ex, elem, cc, elems, state_type(s) == 1);
  /* The program runs the adjoint of II's all-reduce backward: the same
   * all-reduce of the output's error. */
  if (ex.k && state_type(s) == 1 && !published_model(x->p))
    add_exchange(x, &ex, elem, cc, elems, false);
  /* A chain op that needs whole the dimension this state splits gathers it. */
  ap_layout out = ap_plan_port_layout(p, v, 0, s, r);
  int c = split_slot(p, v, 0, &out);
  if (loss_exchange(x, v, &out, c, &ex)) {
    add_exchange(x, &ex, elem_bytes(g, g->outputs[0]), cc, elems, false);
    ap_exchange back;
    ap_exchange_reverse(&ex, &back);
    add_exchange(x, &back, elem_bytes(g, g->outputs[0]), cc, elems, false);
  }
  /* The other trainable weights' gradients (a bias, a normalization's scale
   * and shift), each summed by the program's all-reduce over the children
   * where this level does not split them with the output features. */
  for (int k = 0; k < vx->n_wsum && !published_model(p); k++) {
    const ap_wsum *ws = &vx->wsum[k];
    if ((ws->dim >= 0 && c == 1) || (joint && ws->joint))
      continue;
    const ap_value *wv = &g->values[ws->value];
    int64_t box[AP_MAX_RANK];
    for (int i = 0; i < wv->rank; i++)
      box[i] = wv->dims[i];
    if (ws->dim >= 0)
      box[ws->dim] = (int64_t)llround((double)port_ext(p, x->c->ext, v, 0)[1] * ws->scale);
    ap_layout partial = {.kind = AP_LAYOUT_PARTIAL}, repl = {.kind = AP_LAYOUT_REPLICATED};
    ap_layout_convert(wv->rank, box, elem_bytes(g, ws->value), x->k, &partial, &repl, &ex);
    add_exchange(x, &ex, elem_bytes(g, ws->value), cc, elems, false);
  }
  if (c >= 0)
    for (int k = 0; k < vx->n_chain; k++) {
      const ap_chain_op *op = &vx->chain[k];
      if (!op->gathers[c])
        continue;
      const ap_value *iv = &g->values[op->in_value];
      int64_t box[AP_MAX_RANK];
      for (int i = 0; i < iv->rank; i++)
        box[i] = iv->dims[i];
      for (int cc2 = 0; cc2 < 2; cc2++)
        if (op->in_map[cc2] >= 0)
          box[op->in_map[cc2]] = (int64_t)llround(
              (double)iv->dims[op->in_map[cc2]] * port_fraction(p, g, x->c->ext, v, 0, cc2));
      ap_layout from = out, to = {.kind = AP_LAYOUT_REPLICATED};
      from.dim = op->in_map[c];
      ap_layout_convert(iv->rank, box, elem_bytes(g, op->in_value), x->k, &from, &to, &ex);
      add_exchange(x, &ex, elem_bytes(g, op->in_value), cc, elems, true);
      if (!published_model(x->p)) { /* the gather's adjoint sends the pieces' errors back */
        ap_exchange back;
        ap_exchange_reverse(&ex, &back);
        add_exchange(x, &back, elem_bytes(g, op->in_value), cc, elems, false);
      }
      break;
    }
  for (int i = 0; i < x->k; i++) {
    if (elems[i] > cc->elems)
      cc->elems = elems[i];
  }
}

/* Reader r of a joint weight: child i's box of the value it reads, in the
 * weight's index space, as the program reads it (ap_dist_weight_box). */
static bool reader_box(const level_ctx *x, const ap_wjoint *j, const ap_wreader *r, int s,
                       const double *ratio, int i, int64_t *wlo, int64_t *whi) {
  const ap_plan *p = x->p;
  const ap_graph *g = x->g;
  const ap_vertex *vx = &p->v[r->vertex];
  const int64_t *e0 = port_ext(p, x->c->ext, r->vertex, 0), *e1 = e0 + 2;
  int u = r->wsum < 0 ? vx->weight : vx->wsum[r->wsum].value;
  const ap_value *uv = &g->values[u], *wv = &g->values[j->value];
  int64_t lo[AP_MAX_RANK] = {0}, hi[AP_MAX_RANK], clo[AP_MAX_RANK], chi[AP_MAX_RANK];
  for (int a = 0; a < uv->rank; a++)
    hi[a] = uv->dims[a];
  ap_layout lay = {.kind = AP_LAYOUT_REPLICATED};
  int type = state_type(s);
  if (r->wsum < 0) { /* as weight_layout_at (plan_print.c) splits it */
    if (vx->port[1].dim[1] >= 0)
      hi[vx->w_dim[0]] = e1[1];
    if (vx->w_dim[1] >= 0)
      hi[vx->w_dim[1]] = e0[1];
    if (type > 0 && vx->w_dim[type - 1] >= 0) {
      lay.kind = AP_LAYOUT_SPLIT;
      lay.dim = vx->w_dim[type - 1];
      lay.unit = type == 1 ? vx->port[1].unit[1] : vx->port[0].unit[1];
    }
  } else { /* follows the output features where the level splits them */
    const ap_wsum *ws = &vx->wsum[r->wsum];
    ap_layout out = ap_plan_port_layout(p, r->vertex, 0, s, ratio);
    if (ws->dim >= 0) {
      hi[ws->dim] = (int64_t)llround((double)e0[1] * ws->scale);
      if (split_slot(p, r->vertex, 0, &out) == 1) {
        lay.kind = AP_LAYOUT_SPLIT;
        lay.dim = ws->dim;
        lay.unit = vx->port[0].unit[1];
      }
    }
  }
  memcpy(lay.ratio, ratio, sizeof lay.ratio);
  ap_layout_child_box(uv->rank, lo, hi, x->k, &lay, i, clo, chi);
  for (int a = 0; a < uv->rank; a++)
    if (chi[a] <= clo[a])
      return false;
  for (int b = 0; b < wv->rank; b++) {
    int a = r->axis[b];
    wlo[b] = a >= 0 ? clo[a] : 0;
    whi[b] = a >= 0 ? chi[a] : wv->dims[b];
  }
  return true;
}

static double meet(int rank, const int64_t *alo, const int64_t *ahi, const int64_t *blo,
                   const int64_t *bhi) {
  double v = 1;
  for (int a = 0; a < rank; a++) {
    int64_t lo = alo[a] > blo[a] ? alo[a] : blo[a], hi = ahi[a] < bhi[a] ? ahi[a] : bhi[a];
    if (hi <= lo)
      return 0;
    v *= (double)(hi - lo);
  }
  return v;
}

/* Child i's box of joint weight j: the smallest holding its readers'
 * boxes, [lo, hi) with vol elements (all 0 when no reader reads any). */
static void joint_boxes(const level_ctx *x, const ap_wjoint *j, const uint8_t *st,
                        double (*ratio)[AP_MAX_CHILDREN], int64_t (*lo)[AP_MAX_RANK],
                        int64_t (*hi)[AP_MAX_RANK], double *vol) {
  int rank = x->g->values[j->value].rank;
  for (int i = 0; i < x->k; i++) {
    bool any = false;
    for (int q = 0; q < j->n_readers; q++) {
      const ap_wreader *r = &j->r[q];
      int64_t blo[AP_MAX_RANK], bhi[AP_MAX_RANK];
      if (!reader_box(x, j, r, st[r->vertex], ratio[r->vertex], i, blo, bhi))
        continue;
      for (int a = 0; a < rank; a++) {
        lo[i][a] = any && lo[i][a] < blo[a] ? lo[i][a] : blo[a];
        hi[i][a] = any && hi[i][a] > bhi[a] ? hi[i][a] : bhi[a];
      }
      any = true;
    }
    vol[i] = 1;
    for (int a = 0; a < rank; a++) {
      if (!any)
        lo[i][a] = hi[i][a] = 0;
      vol[i] *= (double)(hi[i][a] - lo[i][a]);
    }
  }
}

/* The sum of joint weight j's gradient among the children, each holding
 * joint_boxes: an all-reduce in each group of children with equal boxes
 * when the groups' boxes are disjoint, else every child sends every other
 * its contribution where their boxes meet (ap_distribute_train's
 * weight_sum). */
static void joint_sum(const level_ctx *x, const ap_wjoint *j, const uint8_t *st,
                      double (*ratio)[AP_MAX_CHILDREN], ap_exchange *ex) {
  const ap_value *wv = &x->g->values[j->value];
  int rank = wv->rank, k = x->k;
  int64_t lo[AP_MAX_CHILDREN][AP_MAX_RANK], hi[AP_MAX_CHILDREN][AP_MAX_RANK];
  double vol[AP_MAX_CHILDREN];
  memset(ex, 0, sizeof *ex);
  ex->k = k;
  joint_boxes(x, j, st, ratio, lo, hi, vol);
  int cls[AP_MAX_CHILDREN];
  bool disjoint = true, shared = false;
  for (int i = 0; i < k; i++) {
    cls[i] = i;
    for (int e = 0; e < i; e++) {
      bool equal = memcmp(lo[i], lo[e], sizeof(int64_t) * (size_t)rank) == 0 &&
                   memcmp(hi[i], hi[e], sizeof(int64_t) * (size_t)rank) == 0;
      if (equal) {
        if (cls[i] == i)
          cls[i] = cls[e];
      } else if (meet(rank, lo[i], hi[i], lo[e], hi[e]) > 0) {
        disjoint = false;
      }
    }
    shared |= cls[i] != i && vol[i] > 0;
  }
  if (disjoint && !shared)
    return;
  double elem = elem_bytes(x->g, j->value);
  if (!disjoint || wv->dtype != AP_DT_FLOAT) {
    for (int e = 0; e < k; e++)
      for (int i = 0; i < k && vol[e] > 0; i++) {
        double b = i != e ? meet(rank, lo[e], hi[e], lo[i], hi[i]) * elem : 0;
        if (b > 0) {
          ex->send_bytes[i] += b;
          ex->messages[i]++;
        }
      }
    return;
  }
  for (int i = 0; i < k; i++) {
    int n = 0, at = 0;
    for (int e = 0; e < k; e++)
      if (cls[e] == cls[i]) {
        if (e == i)
          at = n;
        n++;
      }
    ex->allreduce_bytes[i] = (double)aprt_allreduce_bytes(n, (int64_t)vol[i], NULL, at);
    ex->messages[i] = vol[i] > 0 && n > 1 ? 2 * (n - 1) : 0;
  }
}

/* The layouts edge e converts between inside group c's box of the
 * consumer's port (into box, its rank returned): from, the producer's,
 * and to, the consumer's. */
static int edge_layouts(const ap_plan *p, const ap_graph *g, const ap_class *c, int e, int su,
                        int sv, const double *ru, const double *rv, ap_layout *from,
                        ap_layout *to, int64_t *box) {
  const ap_edge *ed = &p->e[e];
  ap_group ch[AP_MAX_CHILDREN];
  int k = ap_group_children(&p->dev, &c->g, ch);
  *from = ap_plan_port_layout(p, ed->from, 0, su, ru);
  int slot = split_slot(p, ed->from, 0, from);
  if (from->kind == AP_LAYOUT_PARTIAL) /* resolved inside the producer */
    from->kind = AP_LAYOUT_REPLICATED;
  if (slot >= 0) {
    if (ed->map[slot] < 0) {
      from->kind = AP_LAYOUT_REPLICATED; /* gathered by a chain op */
    } else {
      from->dim = ed->map[slot];
      /* The producer's shares are whole units of its dim (heads), which
       * reshapes between scale into the port's (features). */
      int64_t u = from->unit * ed->num[slot];
      if (ed->den[slot] > 0 && u % ed->den[slot] == 0)
        from->unit = u / ed->den[slot];
    }
  }
  /* The consumer's input layout; type III's partial input error is
   * resolved inside the consumer, so backward it sends a replicated one. */
  double rp[AP_MAX_CHILDREN];
  ap_plan_port_ratio(p, g, port_ext(p, c->ext, ed->to, 0), ed->to, ed->port, sv, k, rv, rp);
  *to = ap_plan_port_layout(p, ed->to, ed->port, sv, rp);
  return port_box(p, g, c->ext, ed->to, ed->port, box);
}

void ap_plan_edge_exchange(const ap_plan *p, const ap_graph *g, const ap_class *c, int e,
                           int su, int sv, const double *ru, const double *rv,
                           ap_exchange *fwd, ap_exchange *bwd) {
  const ap_edge *ed = &p->e[e];
  ap_group ch[AP_MAX_CHILDREN];
  int k = ap_group_children(&p->dev, &c->g, ch);
  ap_layout from, to;
  int64_t box[AP_MAX_RANK];
  int rank = edge_layouts(p, g, c, e, su, sv, ru, rv, &from, &to, box);
  double elem = elem_bytes(g, p->v[ed->to].port[ed->port].value);
  ap_layout_convert(rank, box, elem, k, &from, &to, fwd);
  /* Backward, AccPar converts the consumer's error to the producer's
   * layout; the program runs the forward transfer's adjoint, every piece's
   * error sent back to where the piece came from and added there. */
  if (published_model(p))
    ap_layout_convert(rank, box, elem, k, &to, &from, bwd);
  else
    ap_exchange_reverse(fwd, bwd);
}

/* The edge e with its ends in states su, sv. */
static void edge_cost(const level_ctx *x, int e, int su, int sv, const double *ru,
                      const double *rv, child_cost *cc) {
  double elems[AP_MAX_CHILDREN] = {0};
  memset(cc, 0, sizeof *cc);
  ap_exchange fwd, bwd;
  ap_plan_edge_exchange(x->p, x->g, x->c, e, su, sv, ru, rv, &fwd, &bwd);
  const ap_edge *ed = &x->p->e[e];
  double elem = elem_bytes(x->g, x->p->v[ed->to].port[ed->port].value);
  add_exchange(x, &fwd, elem, cc, elems, true);
  add_exchange(x, &bwd, elem, cc, elems, false);
  for (int i = 0; i < x->k; i++)
    if (elems[i] > cc->elems)
      cc->elems = elems[i];
}


/* Bytes vertex v keeps on a group holding extents ext: weights and their
 * gradients, the input a layer keeps for its gradient, a join's output and
 * the outputs of its chain ops (kept for backward). */
static double vertex_memory(const ap_plan *p, const ap_graph *g, const int64_t *vext, int v) {
  const ap_vertex *vx = &p->v[v];
  int64_t box[AP_MAX_RANK];
  double m = 0;
  if (!vx->join) {
    const int64_t *e0 = vext, *e1 = vext + 2;
    const ap_value *w = &g->values[vx->weight];
    for (int i = 0; i < w->rank; i++)
      box[i] = w->dims[i];
    if (vx->port[1].dim[1] >= 0) /* an embedding's rows are not its input's: held whole */
      box[vx->w_dim[0]] = e1[1];
    if (vx->w_dim[1] >= 0)
      box[vx->w_dim[1]] = e0[1];
    m += 2 * box_bytes(g, vx->weight, w->rank, box);
    int r = port_box_v(p, g, vext, v, 1, box);
    m += box_bytes(g, vx->port[1].value, r, box);
  } else {
    int r = port_box_v(p, g, vext, v, 0, box);
    m += box_bytes(g, vx->port[0].value, r, box);
  }
  for (int k = 0; k < vx->n_chain; k++) {
    const ap_chain_op *op = &vx->chain[k];
    double f = 1;
    for (int cc = 0; cc < 2; cc++)
      if (op->out_map[cc] >= 0)
        f *= port_fraction_v(p, g, vext, v, 0, cc);
    const ap_value *ov = &g->values[op->out_value];
    m += elem_bytes(g, op->out_value) * (double)ap_numel(ov->rank, ov->dims) * f;
  }
  return m;
}

/* ---- what a state costs below its level ---- */

/* The step time is a sum, over vertices and edges, of the slowest device's
 * compute plus the communication on its path through every level. accpar's
 * search of a level charges each state of a vertex (each pair of states of
 * an edge) exactly that, for the plan that takes the tentative plan's states
 * at every lower level (see ap_partition): the path's time from the levels
 * above (the class's acc_v, acc_e), this level's communication, the lower
 * levels' communication with the ratios recomputed in each subgroup and, for
 * a vertex, the compute on each device. Without a tentative plan (memory
 * fitting) the state itself is kept below. What a subtree costs depends only
 * on its group's kind and count, the level and the vertices' extents in it,
 * so it is remembered: most subtrees repeat across classes, children and
 * levels. */

typedef struct memo_entry {
  int n;          /* key length */
  int64_t key[];  /* vertex or edge, states, kind, count, extents; after the key its
                     values as doubles (a subtree's time, or a ratio per child): a
                     fixed array of AP_MAX_CHILDREN made most entries half waste */
} memo_entry;

/* A memo slot: the hash beside its entry, so that a probe reads the entry
 * only when the hashes agree (chains of entries missed the cache on every
 * link: 8% of ResNet-152's plan over 1024 devices). */
typedef struct memo_slot {
  uint64_t hash;
  memo_entry *m; /* NULL: empty */
} memo_slot;

typedef struct below {
  ap_plan *p;
  const ap_graph *g;
  ap_arena *ar;          /* the memo; freed after the levels are planned */
  memo_slot *slot;        /* open addressing, probed linearly, at most half full */
  size_t n_slot, n_entry;
  int64_t **ext;         /* [level]: extents of the vertices at hand, in a class's layout */
  int64_t **seen;        /* [level]: the previous child's extents (child_repeats) */
  int8_t **split_slot;   /* [2 * level + end]: an edge's ends' splits (split_ports) */
  int64_t (**split_share)[AP_MAX_CHILDREN];
  const uint8_t *tail;   /* [n_levels][n_vertices]: the tentative plan's states, or NULL */
  bool tail_by_count;    /* the tentative plan's strategy shares by device count */
  int64_t *key;          /* room for the longest key */
  bool keep_top;         /* remember the level searched's own subtrees: only another
                            class of that level can ask for them again */
  ap_status status;      /* AP_ERR_NOMEM once an allocation failed */
} below;

/* The memo lives in the graph's scratch arena, reset once the levels are
 * planned: the chosen plan's distribution (program_bytes) is built there
 * next, on the pages the memo had, where a new arena per search faulted
 * in fresh ones for both. */
static ap_status below_init(below *b, ap_plan *p, ap_graph *g) {
  memset(b, 0, sizeof *b);
  b->p = p;
  b->g = g;
  if (!g->scratch)
    g->scratch = ap_arena_new();
  b->ar = g->scratch;
  int depth = p->n_levels + 2, max_ports = 1;
  for (int v = 0; v < p->n_vertices; v++)
    if (p->v[v].n_ports > max_ports)
      max_ports = p->v[v].n_ports;
  b->n_slot = 1024;
  b->slot = b->ar ? ap_arena_array(b->ar, b->n_slot, sizeof *b->slot) : NULL;
  b->ext = b->ar ? ap_arena_array(b->ar, (size_t)depth, sizeof *b->ext) : NULL;
  b->seen = b->ar ? ap_arena_array(b->ar, (size_t)depth, sizeof *b->seen) : NULL;
  b->split_slot = b->ar ? ap_arena_array(b->ar, 2 * (size_t)depth, sizeof *b->split_slot) : NULL;
  b->split_share =
      b->ar ? ap_arena_array(b->ar, 2 * (size_t)depth, sizeof *b->split_share) : NULL;
  b->key = b->ar ? ap_arena_array(b->ar, 8 + 4 * (size_t)max_ports, sizeof *b->key) : NULL;
  if (!b->slot || !b->ext || !b->seen || !b->split_slot || !b->split_share || !b->key)
    return b->status = AP_ERR_NOMEM;
  for (int i = 0; i < 2 * depth; i++)
    if (!(b->split_slot[i] = ap_arena_array(b->ar, (size_t)max_ports, 1)) ||
        !(b->split_share[i] = ap_arena_array(b->ar, (size_t)max_ports, sizeof **b->split_share)))
      return b->status = AP_ERR_NOMEM;
  for (int i = 0; i < depth; i++)
    if (!(b->ext[i] = ap_arena_array(b->ar, 2 * (size_t)p->n_ports + 1, sizeof(int64_t))) ||
        !(b->seen[i] = ap_arena_array(b->ar, 2 * (size_t)p->n_ports + 1, sizeof(int64_t))))
      return b->status = AP_ERR_NOMEM;
  return AP_OK;
}

static uint64_t key_hash(const int64_t *key, int n) {
  uint64_t h = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < n; i++) { /* splitmix64's finaliser over each word */
    h ^= (uint64_t)key[i];
    h = (h ^ h >> 30) * 0xbf58476d1ce4e5b9u;
    h = (h ^ h >> 27) * 0x94d049bb133111ebu;
    h ^= h >> 31;
  }
  return h;
}

/* The values remembered under b->key[0..n), or NULL. */
static const double *memo_find(const below *b, int n, uint64_t h) {
  size_t mask = b->n_slot - 1;
  for (size_t i = h & mask; b->slot[i].m; i = (i + 1) & mask) {
    const memo_entry *m = b->slot[i].m;
    if (b->slot[i].hash == h && m->n == n &&
        memcmp(m->key, b->key, sizeof(int64_t) * (size_t)n) == 0)
      return (const double *)(const void *)(m->key + n);
  }
  return NULL;
}

static void slot_put(memo_slot *slot, size_t mask, uint64_t h, memo_entry *m) {
  size_t i = h & mask;
  while (slot[i].m)
    i = (i + 1) & mask;
  slot[i] = (memo_slot){h, m};
}

static void memo_put(below *b, int n, uint64_t h, const double *value, int n_value) {
  if (2 * (b->n_entry + 1) > b->n_slot) { /* past half full: probes stay short */
    size_t ns = 2 * b->n_slot;
    memo_slot *slot = ap_arena_array(b->ar, ns, sizeof *slot);
    if (!slot) {
      b->status = AP_ERR_NOMEM;
      return;
    }
    for (size_t i = 0; i < b->n_slot; i++)
      if (b->slot[i].m)
        slot_put(slot, ns - 1, b->slot[i].hash, b->slot[i].m);
    b->slot = slot;
    b->n_slot = ns;
  }
  memo_entry *m = ap_arena_alloc(b->ar, sizeof *m + sizeof(int64_t) * (size_t)n +
                                            sizeof(double) * (size_t)n_value);
  if (!m) {
    b->status = AP_ERR_NOMEM;
    return;
  }
  memcpy(m->key + n, value, sizeof(double) * (size_t)n_value);
  m->n = n;
  memcpy(m->key, b->key, sizeof(int64_t) * (size_t)n);
  slot_put(b->slot, b->n_slot - 1, h, m);
  b->n_entry++;
}

/* Appends vertex v's extents (from a class layout ext) to the key at n. */
static int key_ext(const below *b, int n, const int64_t *ext, int v) {
  const ap_vertex *vx = &b->p->v[v];
  memcpy(b->key + n, port_ext(b->p, ext, v, 0), sizeof(int64_t) * 2 * (size_t)vx->n_ports);
  return n + 2 * vx->n_ports;
}

static bool is_device(const ap_group *grp) { return grp->kind >= 0 && grp->count == 1; }

/* ap_plan_ratio, remembered: balancing walks the split dimension index by
 * index, and every state pair of an edge needs both ends' ratios. */
static void cached_ratio(below *b, const ap_class *c, int v, int s, double *r) {
  int n = 0;
  b->key[n++] = INT64_MIN + v;
  b->key[n++] = s;
  b->key[n++] = c->g.kind;
  b->key[n++] = c->g.count;
  n = key_ext(b, n, c->ext, v);
  uint64_t h = key_hash(b->key, n);
  const double *m = memo_find(b, n, h);
  if (m) {
    memcpy(r, m, sizeof(double) * AP_MAX_CHILDREN);
    return;
  }
  ap_plan_ratio(b->p, b->g, c, v, s, r);
  memo_put(b, n, h, r, AP_MAX_CHILDREN);
}

/* Whether child i of a subtree at level l repeats child i - 1: a group of
 * the same kind and count holding the same extents of the vertices vs, set
 * in b->ext[l + 1]. Its cost below is then the one just computed, found
 * without hashing a key (the two halves of an even split: 45,000 of the
 * search's 349,000 probes of the memo on ResNet-152 over 1024 devices).
 * Keeps child i's extents in b->seen[l + 1] for the next. */
static bool child_repeats(const below *b, const level_ctx *x, int l, int i, const int *vs,
                          int nv) {
  const int64_t *next = b->ext[l + 1];
  int64_t *seen = b->seen[l + 1];
  bool same = i > 0 && x->ch[i].kind == x->ch[i - 1].kind && x->ch[i].count == x->ch[i - 1].count;
  for (int j = 0; j < nv; j++) {
    const ap_vertex *vx = &b->p->v[vs[j]];
    size_t at = 2 * (size_t)vx->ext_base, n = 2 * (size_t)vx->n_ports * sizeof *next;
    if (same && memcmp(seen + at, next + at, n) == 0)
      continue;
    same = false;
    memcpy(seen + at, next + at, n);
  }
  return same;
}

/* The state vertex v takes at level l below the level being searched:
 * the tentative plan's (rule 1 when its strategy shares by device count),
 * or s itself when there is none. */
static int state_below(const below *b, int l, int v, int s) {
  /* Below the last level there are only devices, whose cost does not
   * depend on a state: the tentative plan has no row for them. */
  if (!b->tail || l >= b->p->n_levels)
    return s;
  int t = b->tail[(size_t)l * b->p->n_vertices + v];
  return b->tail_by_count ? state_type(t) + 3 : t;
}

/* Whether the memo may hold the subtree of the level searched with the
 * vertices vs in states ss: another class of the level may have put it
 * (keep_top), or the search of a level above, whose subtrees take the
 * tentative plan's states here (state_below): with one class, only those
 * states can be found, and the other pairs of an edge's 36 skip the key. */
static bool remembered_top(const below *b, int l, const int *vs, const int *ss, int n) {
  if (b->keep_top)
    return true;
  for (int i = 0; i < n; i++)
    if (ss[i] != state_below(b, l, vs[i], ss[i]))
      return false;
  return true;
}

/* The memo key of a subtree: what (a vertex, or -1 - an edge), its states,
 * the level (only with a tentative plan, whose states differ by level),
 * the group's kind and count. Returns the length so far. */
static int key_head(below *b, int64_t what, int states, int l, const ap_group *grp) {
  b->key[0] = what;
  b->key[1] = states;
  b->key[2] = b->tail ? l : -1;
  b->key[3] = grp->kind;
  b->key[4] = grp->count;
  return 5;
}

/* Vertex v in state s on a group grp of level l holding extents ext (class
 * layout), with the states below: the slowest device's communication from
 * this level down plus its compute (plus the memory price while fitting
 * memory). r_top: at the level searched, v's ratio there (search_level has
 * them all); NULL below it. */
static double below_vertex(below *b, int l, const ap_group *grp, const int64_t *ext, int v,
                           int s, const double *r_top) {
  ap_plan *p = b->p;
  const ap_graph *g = b->g;
  const ap_vertex *vx = &p->v[v];
  if (is_device(grp)) {
    const int64_t *ve = port_ext(p, ext, v, 0);
    double t = group_compute(p, g, v, ve, &p->dev.kinds[grp->kind], 1);
    return p->mem_penalty > 0 ? t + p->mem_penalty * vertex_memory(p, g, ve, v) : t;
  }
  int n = 0;
  uint64_t h = 0;
  if (!r_top || remembered_top(b, l, &v, &s, 1)) {
    n = key_ext(b, key_head(b, v, s, l, grp), ext, v);
    h = key_hash(b->key, n);
    const double *m = memo_find(b, n, h);
    if (m)
      return m[0];
  }
  ap_class c = {.g = *grp, .mult = 1, .ext = (int64_t *)ext};
  level_ctx x;
  ctx_init(&x, p, g, &c);
  double r[AP_MAX_CHILDREN];
  if (r_top)
    memcpy(r, r_top, sizeof r);
  else
    cached_ratio(b, &c, v, s, r);
  child_cost cc;
  vertex_cost(&x, v, s, r, false, &cc);
  double worst = 0, under = 0;
  int64_t *next = b->ext[l + 1];
  int s1 = state_below(b, l + 1, v, s);
  int8_t *slot = b->split_slot[2 * l];
  int64_t(*share)[AP_MAX_CHILDREN] = b->split_share[2 * l];
  split_ports(&x, ext, v, s, r, slot, share);
  for (int i = 0; i < x.k; i++) {
    child_of_split(&x, ext, v, slot, share, i, next + 2 * vx->ext_base);
    if (!child_repeats(b, &x, l, i, &v, 1))
      under = below_vertex(b, l + 1, &x.ch[i], next, v, s1, NULL);
    worst = fmax(worst, cc.comm_s[i] + under);
  }
  if (r_top && !b->keep_top)
    return worst;
  n = key_ext(b, key_head(b, v, s, l, grp), ext, v); /* the recursion overwrote it */
  memo_put(b, n, h, &worst, 1);
  return worst;
}

/* Edge e with its ends in states su, sw on a group of level l, with the
 * states below: the slowest device's conversions from this level down.
 * Below the level searched (top false), where both ends share by device
 * count (a baseline's tentative plan), what moves depends on the
 * consumer's box alone, not on the producer's extents: the key leaves them
 * out, and the states of the level searched share the subtrees. ru_top,
 * rw_top: at the level searched, the ends' ratios there; NULL below it. */
static double below_edge(below *b, int l, const ap_group *grp, const int64_t *ext, int e,
                         int su, int sw, const double *ru_top, const double *rw_top) {
  bool top = ru_top != NULL;
  if (is_device(grp))
    return 0;
  ap_plan *p = b->p;
  const ap_graph *g = b->g;
  const ap_edge *ed = &p->e[e];
  int u = ed->from, w = ed->to;
  /* A Concat's input shares depend on its other inputs' extents too. */
  bool by_box = !top && b->tail && state_rule(su) == 1 && state_rule(sw) == 1 &&
                g->nodes[p->v[w].node].op != AP_OP_CONCAT;
  int n = 0, ends[2] = {u, w}, states[2] = {su, sw};
  uint64_t h = 0;
  if (!top || remembered_top(b, l, ends, states, 2)) {
    n = key_head(b, -1 - e, su * AP_SEARCH_STATES + sw, l, grp);
    if (by_box) {
      memcpy(b->key + n, port_ext(p, ext, w, ed->port), 2 * sizeof(int64_t));
      n += 2;
    } else {
      n = key_ext(b, key_ext(b, n, ext, u), ext, w);
    }
    h = key_hash(b->key, n);
    const double *m = memo_find(b, n, h);
    if (m)
      return m[0];
  }
  ap_class c = {.g = *grp, .mult = 1, .ext = (int64_t *)ext};
  level_ctx x;
  ctx_init(&x, p, g, &c);
  double ru[AP_MAX_CHILDREN], rw[AP_MAX_CHILDREN];
  if (top) { /* the level searched: search_level has them */
    memcpy(ru, ru_top, sizeof ru);
    memcpy(rw, rw_top, sizeof rw);
  } else if (by_box) { /* by device count: the extents are not read */
    ap_plan_ratio(p, g, &c, u, su, ru);
    ap_plan_ratio(p, g, &c, w, sw, rw);
  } else {
    cached_ratio(b, &c, u, su, ru);
    cached_ratio(b, &c, w, sw, rw);
  }
  child_cost cc;
  edge_cost(&x, e, su, sw, ru, rw, &cc);
  double worst = 0, under = 0;
  int64_t *next = b->ext[l + 1];
  int su1 = state_below(b, l + 1, u, su), sw1 = state_below(b, l + 1, w, sw);
  int8_t *uslot = b->split_slot[2 * l], *wslot = b->split_slot[2 * l + 1];
  int64_t(*ushare)[AP_MAX_CHILDREN] = b->split_share[2 * l];
  int64_t(*wshare)[AP_MAX_CHILDREN] = b->split_share[2 * l + 1];
  split_ports(&x, ext, u, su, ru, uslot, ushare);
  split_ports(&x, ext, w, sw, rw, wslot, wshare);
  for (int i = 0; i < x.k; i++) {
    child_of_split(&x, ext, u, uslot, ushare, i, next + 2 * p->v[u].ext_base);
    child_of_split(&x, ext, w, wslot, wshare, i, next + 2 * p->v[w].ext_base);
    if (!child_repeats(b, &x, l, i, ends, 2))
      under = below_edge(b, l + 1, &x.ch[i], next, e, su1, sw1, NULL, NULL);
    worst = fmax(worst, cc.comm_s[i] + under);
  }
  if (top && !b->keep_top)
    return worst;
  n = key_head(b, -1 - e, su * AP_SEARCH_STATES + sw, l, grp); /* the recursion overwrote it */
  if (by_box) {
    memcpy(b->key + n, port_ext(p, ext, w, ed->port), 2 * sizeof(int64_t));
    n += 2;
  } else {
    n = key_ext(b, key_ext(b, n, ext, u), ext, w);
  }
  memo_put(b, n, h, &worst, 1);
  return worst;
}

/* ---- the search at one level ---- */

typedef struct level_problem {
  uint8_t *allowed;
  double (*unary)[AP_SEARCH_STATES];
  int (*ends)[2];
  double (*pair)[AP_SEARCH_STATES][AP_SEARCH_STATES];
  double (*ratio)[AP_SEARCH_STATES][AP_MAX_CHILDREN]; /* [n_vertices]: the class at hand's */
} level_problem;

/* The types (bits 0-2) a strategy lets vertex v take. */
static uint8_t strategy_mask(const ap_plan *p, const ap_graph *g, int v) {
  const ap_vertex *vx = &p->v[v];
  if (vx->join)
    return vx->allowed;
  uint8_t m;
  switch (p->opts.strategy) {
  case AP_STRATEGY_DP:
    m = 1;
    break;
  case AP_STRATEGY_OWT: {
    ap_op op = g->nodes[vx->node].op;
    m = op == AP_OP_GEMM || op == AP_OP_MATMUL ? 2 : 1;
    break;
  }
  case AP_STRATEGY_HYPAR:
    m = 3;
    break;
  default:
    m = 7;
  }
  /* A layer whose preferred type is impossible (a grouped convolution has
   * no type II) falls back to what it allows, type I at least. */
  uint8_t ok = vx->allowed & m;
  if (!ok)
    ok = vx->allowed & 1 ? 1 : vx->allowed;
  return ok;
}

/* Searches one level: the states of every vertex, into state; *value is
 * the objective of the choice (for accpar: the step time of the plan with
 * these states here and the tentative plan's below). */
static ap_status search_level(ap_plan *p, ap_graph *g, int level, below *b, uint8_t *state,
                              double *value, ap_diag *d) {
  int V = p->n_vertices, E = p->n_edges, nc = p->n_cls[level];
  bool paper = p->opts.cost == AP_COST_PAPER || p->opts.strategy == AP_STRATEGY_HYPAR;
  /* dp and owt price a level by itself, each child's devices computing
   * their share with no lower level (their layers have one type, only their
   * joins choose); accpar prices the whole path below (below_vertex). */
  bool level_only = !paper && (p->level_only || (p->opts.strategy != AP_STRATEGY_ACCPAR &&
                                                  p->opts.strategy != AP_STRATEGY_EXHAUSTIVE));
  ap_arena *a = b->ar; /* the problem dies with the memo */
  level_problem lp;
  lp.allowed = ap_arena_array(a, (size_t)V + 1, 1);
  lp.unary = ap_arena_array(a, (size_t)V + 1, sizeof *lp.unary);
  lp.ends = ap_arena_array(a, (size_t)E + 1, sizeof *lp.ends);
  lp.pair = ap_arena_array(a, (size_t)E + 1, sizeof *lp.pair);
  /* One class's ratios at a time, for the edges' state pairs. */
  lp.ratio = ap_arena_array(a, (size_t)V + 1, sizeof *lp.ratio);
  if (!lp.allowed || !lp.unary || !lp.ends || !lp.pair || !lp.ratio)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  /* A balanced strategy may also share by device count (rule 1), where
   * that gives other shares than balancing somewhere in the level. */
  bool two_rules = !paper && !p->fixed && (p->opts.strategy == AP_STRATEGY_ACCPAR ||
                                            p->opts.strategy == AP_STRATEGY_EXHAUSTIVE);
  for (int v = 0; v < V; v++) {
    lp.allowed[v] = p->fixed ? (uint8_t)(1u << p->fixed[(size_t)level * V + v] % 3)
                             : strategy_mask(p, g, v);
    for (int s = 0; s < AP_SEARCH_STATES; s++)
      lp.unary[v][s] = 0;
  }
  for (int e = 0; e < E; e++) {
    lp.ends[e][0] = p->e[e].from;
    lp.ends[e][1] = p->e[e].to;
    memset(lp.pair[e], 0, sizeof lp.pair[e]);
  }
  for (int ci = 0; ci < nc; ci++) {
    const ap_class *c = &p->cls[level][ci];
    for (int v = 0; v < V; v++)
      for (int s = 0; s < 3; s++) {
        if (!(lp.allowed[v] >> s & 1))
          continue;
        /* A plan read back that shares by device count here. */
        if (p->fixed && p->fixed[(size_t)level * V + v] == s + 3)
          lp.allowed[v] = (uint8_t)(1u << (s + 3));
        if (!two_rules)
          continue;
        double r[AP_MAX_CHILDREN], by_count[AP_MAX_CHILDREN];
        cached_ratio(b, c, v, s, r);
        cached_ratio(b, c, v, s + 3, by_count);
        if (memcmp(r, by_count, sizeof by_count) != 0)
          lp.allowed[v] |= (uint8_t)(1u << (s + 3));
      }
  }
  /* With every state fixed (a plan read back, refine_exact's plans) there is
   * nothing to price: the states are the plan's, and finish prices it. */
  b->keep_top = nc > 1;
  for (int ci = 0; ci < nc && !p->fixed; ci++) {
    const ap_class *c = &p->cls[level][ci];
    level_ctx x;
    ctx_init(&x, p, g, c);
    for (int v = 0; v < V; v++)
      for (int s = 0; s < AP_SEARCH_STATES; s++)
        if (lp.allowed[v] >> s & 1)
          cached_ratio(b, c, v, s, lp.ratio[v][s]);
    for (int v = 0; v < V; v++)
      for (int s = 0; s < AP_SEARCH_STATES; s++) {
        if (!(lp.allowed[v] >> s & 1))
          continue;
        double cost;
        if (paper || level_only) {
          const double *r = lp.ratio[v][s];
          child_cost cc;
          vertex_cost(&x, v, s, r, false, &cc);
          cost = paper ? cc.elems : 0;
          for (int i = 0; level_only && i < x.k; i++) {
            child_ext(&x, c->ext, v, s, r, i, b->ext[level + 1]);
            double mem = p->mem_penalty * vertex_memory(p, g, b->ext[level + 1], v) /
                         x.ch[i].count;
            cost = fmax(cost, cc.comm_s[i] + mem +
                                  group_compute(p, g, v, b->ext[level + 1], kind_of(&x, i),
                                                x.ch[i].count));
          }
        } else {
          cost = c->acc_v[v] + below_vertex(b, level, &c->g, c->ext, v, s,
                                            lp.ratio[v][s]);
        }
        lp.unary[v][s] = fmax(lp.unary[v][s], cost);
      }
    for (int e = 0; e < E; e++) {
      int u = p->e[e].from, w = p->e[e].to;
      for (int su = 0; su < AP_SEARCH_STATES; su++)
        for (int sw = 0; sw < AP_SEARCH_STATES; sw++) {
          if (!(lp.allowed[u] >> su & 1) || !(lp.allowed[w] >> sw & 1))
            continue;
          double cost;
          if (paper || level_only) {
            child_cost cc;
            edge_cost(&x, e, su, sw, lp.ratio[u][su], lp.ratio[w][sw], &cc);
            cost = paper ? cc.elems : 0;
            for (int i = 0; level_only && i < x.k; i++)
              cost = fmax(cost, cc.comm_s[i]);
          } else {
            cost = c->acc_e[e] + below_edge(b, level, &c->g, c->ext, e, su, sw,
                                            lp.ratio[u][su], lp.ratio[w][sw]);
          }
          lp.pair[e][su][sw] = fmax(lp.pair[e][su][sw], cost);
        }
    }
  }
  if (b->status != AP_OK)
    return ap_error(d, b->status, g->path, NULL, NULL, "out of memory");
  ap_search_problem pr = {.n = V, .m = E, .allowed = lp.allowed,
                          .unary = (const double(*)[AP_SEARCH_STATES])lp.unary,
                          .ends = (const int(*)[2])lp.ends,
                          .pair = (const double(*)[AP_SEARCH_STATES][AP_SEARCH_STATES])lp.pair};
  if (p->opts.strategy == AP_STRATEGY_EXHAUSTIVE) {
    long visited, max = p->opts.exhaustive_max > 0 ? p->opts.exhaustive_max : 10000000;
    ap_status st = V > AP_SEARCH_EXHAUSTIVE_MAX_VARS
                       ? AP_ERR_UNSUPPORTED
                       : ap_search_exhaustive(&pr, max, state, value, &visited);
    if (st != AP_OK)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, NULL, NULL,
                      "the exhaustive strategy visits at most %ld assignments; this graph "
                      "has %d decision points (use --strategy accpar)",
                      max, V);
    return AP_OK;
  }
  const char *opt;
  ap_status st = ap_search_solve(&pr, g->arena, state, value, &opt);
  if (st != AP_OK)
    return ap_error(d, st, g->path, NULL, NULL, "out of memory");
  if (strcmp(opt, "exact") != 0)
    p->optimality = opt;
  return AP_OK;
}

/* ---- classes of the next level ---- */

static size_t class_bytes(const ap_plan *p) { return 2 * sizeof(int64_t) * (size_t)p->n_ports; }

static bool class_alloc(const ap_plan *p, ap_arena *a, ap_class *c) {
  c->ext = ap_arena_array(a, 2 * (size_t)p->n_ports + 1, sizeof(int64_t));
  c->acc_v = ap_arena_array(a, (size_t)p->n_vertices + 1, sizeof(double));
  c->acc_e = ap_arena_array(a, (size_t)p->n_edges + 1, sizeof(double));
  return c->ext && c->acc_v && c->acc_e;
}

/* Adds child class nc to list (n of them), merging with an equal one: same
 * kind, count and extents; the path times merge by maximum, which the step
 * time (a sum over layers of maxima over devices) does not change. Past
 * MAX_CLASSES, extents merge by maximum too: an upper bound on every device
 * of the merged groups. Returns the index, or -1 out of memory. A new
 * class's arrays come from a only when it is added: a level has room for
 * up to 1024 classes, most levels make a few, and GPT-2 small over 4096
 * devices spent 368 MB on arrays no class used. */
static int merge_class(const ap_plan *p, ap_arena *a, ap_class *list, int *n,
                       const ap_class *nc) {
  int loose = -1;
  for (int i = 0; i < *n; i++) {
    if (list[i].g.kind != nc->g.kind || list[i].g.count != nc->g.count)
      continue;
    if (loose < 0)
      loose = i;
    if (memcmp(list[i].ext, nc->ext, class_bytes(p)) != 0)
      continue;
    loose = i;
    goto merge;
  }
  if (*n < MAX_CLASSES || loose < 0) {
    ap_class *t = &list[*n], keep;
    if (!class_alloc(p, a, &keep))
      return -1;
    (*n)++;
    *t = *nc;
    t->ext = keep.ext, t->acc_v = keep.acc_v, t->acc_e = keep.acc_e;
    memcpy(t->ext, nc->ext, class_bytes(p));
    memcpy(t->acc_v, nc->acc_v, sizeof(double) * (size_t)p->n_vertices);
    memcpy(t->acc_e, nc->acc_e, sizeof(double) * (size_t)p->n_edges);
    return *n - 1;
  }
  for (int j = 0; j < 2 * p->n_ports; j++)
    if (nc->ext[j] > list[loose].ext[j])
      list[loose].ext[j] = nc->ext[j];
merge:
  list[loose].mult += nc->mult;
  for (int j = 0; j < p->n_vertices; j++)
    list[loose].acc_v[j] = fmax(list[loose].acc_v[j], nc->acc_v[j]);
  for (int j = 0; j < p->n_edges; j++)
    list[loose].acc_e[j] = fmax(list[loose].acc_e[j], nc->acc_e[j]);
  return loose;
}

/* The classes of level + 1 and what the children of level's classes send,
 * kept in the graph's arena; the costs they come from are worked out in
 * scratch and released there. */
static ap_status next_level(ap_plan *p, ap_graph *g, int level, int **child_map,
                            ap_arena *scratch, ap_diag *d) {
  int V = p->n_vertices, E = p->n_edges, nc = p->n_cls[level];
  const uint8_t *st = p->state + (size_t)level * V;
  ap_arena *a = g->arena;
  size_t cap = (size_t)nc * AP_MAX_CHILDREN;
  if (cap > MAX_CLASSES * AP_MAX_CHILDREN)
    cap = MAX_CLASSES * AP_MAX_CHILDREN;
  ap_class *list = ap_arena_array(a, cap + 1, sizeof *list);
  int *map = ap_arena_array(a, (size_t)nc * AP_MAX_CHILDREN + 1, sizeof *map);
  double *cfwd = ap_arena_array(a, (size_t)nc * AP_MAX_CHILDREN + 1, sizeof *cfwd);
  double *csent = ap_arena_array(a, (size_t)nc * AP_MAX_CHILDREN + 1, sizeof *csent);
  ap_arena_mark mark = ap_arena_mark_now(scratch);
  double (*ratio)[AP_MAX_CHILDREN] = ap_arena_array(scratch, (size_t)V + 1, sizeof *ratio);
  ap_class tmp;
  /* Every class's costs in turn: vertex_cost and edge_cost clear them. */
  child_cost *vc = ap_arena_array(scratch, (size_t)V + 1, sizeof *vc);
  child_cost *ec = ap_arena_array(scratch, (size_t)E + 1, sizeof *ec);
  ap_status st_out = AP_OK;
  if (!list || !map || !ratio || !cfwd || !csent || !vc || !ec || !class_alloc(p, scratch, &tmp)) {
    ap_arena_release(scratch, mark);
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  }
  int n = 0;
  double paper = 0;
  for (int ci = 0; ci < nc; ci++) {
    const ap_class *c = &p->cls[level][ci];
    level_ctx x;
    ctx_init(&x, p, g, c);
    double level_paper = 0;
    for (int v = 0; v < V; v++) {
      ap_plan_ratio(p, g, c, v, st[v], ratio[v]);
      vertex_cost(&x, v, st[v], ratio[v], true, &vc[v]);
    }
    /* The search prices each reader's sum by its own type; the chosen
     * states price the joint weights' sums as the program runs them, on the
     * first reader's row. */
    for (int jw = 0; jw < p->n_wjoint && !published_model(p); jw++) {
      const ap_wjoint *j = &p->wjoint[jw];
      ap_exchange ex;
      double elems[AP_MAX_CHILDREN] = {0};
      joint_sum(&x, j, st, ratio, &ex);
      add_exchange(&x, &ex, elem_bytes(g, j->value), &vc[j->r[0].vertex], elems, false);
    }
    for (int v = 0; v < V; v++) {
      p->comm_bytes += c->mult * vc[v].bytes;
      level_paper += vc[v].elems;
    }
    for (int e = 0; e < E; e++) {
      int u = p->e[e].from, w = p->e[e].to;
      edge_cost(&x, e, st[u], st[w], ratio[u], ratio[w], &ec[e]);
      p->comm_bytes += c->mult * ec[e].bytes;
      level_paper += ec[e].elems;
    }
    paper = fmax(paper, level_paper);
    for (int i = 0; i < x.k; i++) {
      double *f = &cfwd[ci * AP_MAX_CHILDREN + i], *t = &csent[ci * AP_MAX_CHILDREN + i];
      *f = *t = 0;
      for (int v = 0; v < V; v++)
        *f += vc[v].fwd[i], *t += vc[v].sent[i];
      for (int e = 0; e < E; e++)
        *f += ec[e].fwd[i], *t += ec[e].sent[i];
      tmp.g = x.ch[i];
      tmp.mult = c->mult;
      for (int v = 0; v < V; v++) {
        child_ext(&x, c->ext, v, st[v], ratio[v], i, tmp.ext + 2 * p->v[v].ext_base);
        tmp.acc_v[v] = c->acc_v[v] + vc[v].comm_s[i];
      }
      for (int e = 0; e < E; e++)
        tmp.acc_e[e] = c->acc_e[e] + ec[e].comm_s[i];
      if ((map[ci * AP_MAX_CHILDREN + i] = merge_class(p, a, list, &n, &tmp)) < 0) {
        st_out = AP_ERR_NOMEM;
        goto release;
      }
    }
  }
release:
  ap_arena_release(scratch, mark);
  if (st_out != AP_OK)
    return ap_error(d, st_out, g->path, NULL, NULL, "out of memory");
  p->paper_cost += paper;
  p->cls[level + 1] = list;
  p->n_cls[level + 1] = n;
  child_map[level] = map;
  p->child_fwd[level] = cfwd;
  p->child_sent[level] = csent;
  return AP_OK;
}

/* ---- the pass ---- */

static double class_memory(const ap_plan *p, const ap_graph *g, const ap_class *c) {
  double m = 0;
  for (int v = 0; v < p->n_vertices; v++)
    m += vertex_memory(p, g, port_ext(p, c->ext, v, 0), v);
  return m;
}

/* Where each device sits in the tree: at level l, its group, of class c,
 * splits into k children, it is in child i, which holds m devices. */
typedef struct dev_paths {
  int *k, *i, *m, *c; /* [n_levels * n_devices], at path_at */
} dev_paths;

/* Where device dv's entry of level l is: level by level, as finish writes
 * them and program_bytes reads them (on 262,144 devices, a device's levels
 * side by side made every write of finish's walk a cache line of its own). */
static size_t path_at(const ap_plan *p, int dv, int l) {
  return (size_t)l * (size_t)p->dev.n_devices + (size_t)dv;
}

/* A partial sum every level resolves: the program sums it in one
 * all-reduce over all the devices, device d holding summand d
 * (ap_distribute's reduction, ap_distribute_train's weight_sum: every
 * device's box is the same, and every device's path is a summand of its
 * own), where each level charges an all-reduce among its groups' children,
 * spread evenly over a child's devices. */
typedef struct whole_sum {
  int64_t count;     /* elements summed, the same box on every device */
  double elem;       /* bytes per element */
  int fwd, step;     /* all-reduces in the forward pass, in a training step */
} whole_sum;

/* The sums of vertex v that every level resolves, into out (at most 1 +
 * n_wsum): a layer's weight gradient when every level is type I, its
 * output (and, backward, the output's error) when every level is type II,
 * a bias's or a normalization's gradient (a layer's or a join's chain op)
 * when no level splits it with the output features. A weight summed with
 * other readers (ap_wjoint) is priced by joint_whole. */
static int whole_sums(const ap_plan *p, const ap_graph *g, int v, whole_sum *out) {
  const ap_vertex *vx = &p->v[v];
  int L = p->n_levels, V = p->n_vertices, n = 0;
  if (published_model(p))
    return 0;
  bool all_i = !vx->join, all_ii = !vx->join, out_split = false;
  double zero[AP_MAX_CHILDREN] = {0};
  for (int l = 0; l < L; l++) {
    int s = p->state[(size_t)l * V + v];
    all_i &= state_type(s) == 0;
    all_ii &= state_type(s) == 1;
    ap_layout o = ap_plan_port_layout(p, v, 0, s, zero);
    out_split |= split_slot(p, v, 0, &o) == 1;
  }
  const int64_t *e0 = port_ext(p, p->cls[0][0].ext, v, 0), *e1 = e0 + 2;
  int64_t box[AP_MAX_RANK];
  if (all_i && !vx->weight_joint) { /* the box intra_allreduce sums */
    const ap_value *w = &g->values[vx->weight];
    int64_t c = 1;
    for (int a = 0; a < w->rank; a++)
      box[a] = w->dims[a];
    if (vx->port[1].dim[1] >= 0)
      box[vx->w_dim[0]] = e1[1];
    if (vx->w_dim[1] >= 0)
      box[vx->w_dim[1]] = e0[1];
    for (int a = 0; a < w->rank; a++)
      c *= box[a];
    out[n++] = (whole_sum){c, elem_bytes(g, vx->weight), 0, 1};
  }
  if (all_ii) {
    int rank = port_box(p, g, p->cls[0][0].ext, v, 0, box);
    int64_t c = 1;
    for (int a = 0; a < rank; a++)
      c *= box[a];
    out[n++] = (whole_sum){c, elem_bytes(g, vx->port[0].value), 1, 2};
  }
  for (int k = 0; k < vx->n_wsum; k++) {
    const ap_wsum *ws = &vx->wsum[k];
    if (ws->joint || (ws->dim >= 0 && out_split))
      continue;
    const ap_value *wv = &g->values[ws->value];
    int64_t c = 1;
    for (int a = 0; a < wv->rank; a++)
      c *= a == ws->dim ? (int64_t)llround((double)e0[1] * ws->scale) : wv->dims[a];
    out[n++] = (whole_sum){c, elem_bytes(g, ws->value), 0, 1};
  }
  return n;
}

/* Whether no level splits joint weight j (every child's box, at every
 * level, is its group's, of float elements): then the program sums its
 * gradient in one all-reduce over all the devices, every box equal; *count
 * is that box's elements. ratio is scratch of n_vertices entries. */
static bool joint_whole(const ap_plan *p, const ap_graph *g, const ap_wjoint *j,
                        double (*ratio)[AP_MAX_CHILDREN], int64_t *count) {
  int V = p->n_vertices, rank = g->values[j->value].rank;
  if (g->values[j->value].dtype != AP_DT_FLOAT || published_model(p))
    return false;
  *count = -1;
  for (int l = 0; l < p->n_levels; l++)
    for (int ci = 0; ci < p->n_cls[l]; ci++) {
      const ap_class *c = &p->cls[l][ci];
      const uint8_t *st = p->state + (size_t)l * V;
      level_ctx x;
      ctx_init(&x, p, g, c);
      for (int q = 0; q < j->n_readers; q++) {
        int v = j->r[q].vertex;
        ap_plan_ratio(p, g, c, v, st[v], ratio[v]);
      }
      int64_t lo[AP_MAX_CHILDREN][AP_MAX_RANK], hi[AP_MAX_CHILDREN][AP_MAX_RANK];
      double vol[AP_MAX_CHILDREN];
      joint_boxes(&x, j, st, ratio, lo, hi, vol);
      for (int i = 0; i < x.k; i++) {
        if (vol[i] <= 0 || (*count >= 0 && vol[i] != (double)*count) ||
            memcmp(lo[i], lo[0], sizeof(int64_t) * (size_t)rank) != 0 ||
            memcmp(hi[i], hi[0], sizeof(int64_t) * (size_t)rank) != 0)
          return false;
        *count = (int64_t)vol[i];
      }
    }
  return *count > 0;
}

/* Sum s priced for each device as the program runs it, into
 * exact[n_devices], and what that changes from the levels' charges, into
 * delta[n_devices]. The messages stay the levels' (the time model's latency
 * terms are its own). */
static void whole_sum_bytes(const ap_plan *p, const dev_paths *dp, const whole_sum *s,
                            double *exact, double *delta) {
  int L = p->n_levels, N = p->dev.n_devices;
  double scale = s->elem / 4;
  for (int d = 0; d < N; d++)
    exact[d] = delta[d] = scale * (double)aprt_allreduce_bytes(N, s->count, NULL, d);
  for (int l = 0; l < L; l++) /* level by level, as the paths lie (path_at) */
    for (int d = 0; d < N; d++) {
      size_t at = path_at(p, d, l);
      int k = dp->k[at], i = dp->i[at], m = dp->m[at];
      if (k > 1)
        delta[d] -= scale * (double)aprt_allreduce_bytes(k, s->count, NULL, i) / m;
    }
}

/* A sum's bytes, computed once per size: layers of one shape repeat. */
typedef struct sum_memo {
  int n, key_cap, bytes_cap;
  whole_sum *key; /* [n]: count and elem; fwd and step unused */
  double **bytes; /* [n][2 * n_devices]: exact, then delta (whole_sum_bytes) */
} sum_memo;

static const double *memo_bytes(ap_arena *a, const ap_plan *p, const dev_paths *dp,
                                sum_memo *m, const whole_sum *s) {
  for (int i = 0; i < m->n; i++)
    if (m->key[i].count == s->count && m->key[i].elem == s->elem)
      return m->bytes[i];
  int N = p->dev.n_devices;
  if (!ap_arena_grow(a, (void **)&m->key, &m->key_cap, m->n + 1, sizeof *m->key) ||
      !ap_arena_grow(a, (void **)&m->bytes, &m->bytes_cap, m->n + 1, sizeof *m->bytes))
    return NULL;
  double *bytes = ap_arena_array(a, 2 * (size_t)N + 1, sizeof *bytes);
  if (!bytes)
    return NULL;
  whole_sum_bytes(p, dp, s, bytes, bytes + N);
  m->key[m->n] = *s;
  m->bytes[m->n++] = bytes;
  return bytes;
}

/* Whether every level charges the loss's transfer (a level splitting graph
 * output 0 by a dim other than its rows: each device then holds whole rows
 * of its own box, the boxes partitioning the output), with level[l][class *
 * AP_MAX_CHILDREN + child] the bytes each child of each class sends for it
 * at level l, forward and back (n_cls[l] * AP_MAX_CHILDREN each). ratio is
 * scratch. */
static bool loss_levels_charged(const ap_plan *p, const ap_graph *g, double *ratio,
                                double **level) {
  int v = p->loss_vertex, V = p->n_vertices;
  if (v < 0 || published_model(p))
    return false;
  for (int l = 0; l < p->n_levels; l++) {
    int s = p->state[(size_t)l * V + v];
    for (int ci = 0; ci < p->n_cls[l]; ci++) {
      level_ctx x;
      ctx_init(&x, p, g, &p->cls[l][ci]);
      ap_plan_ratio(p, g, x.c, v, s, ratio);
      ap_layout out = ap_plan_port_layout(p, v, 0, s, ratio);
      ap_exchange ex, back;
      if (!loss_exchange(&x, v, &out, split_slot(p, v, 0, &out), &ex))
        return false;
      ap_exchange_reverse(&ex, &back);
      for (int i = 0; i < x.k; i++)
        level[l][ci * AP_MAX_CHILDREN + i] = ex.send_bytes[i] + back.send_bytes[i];
    }
  }
  return true;
}

/* What device d sends for the loss when every level charges it
 * (loss_levels_charged): it holds h of each of the R rows, all of them, and
 * the loss reads an even share r of the rows whole (ap_distribute_train's
 * loss_boxes), so it sends the other devices its box but for its own rows,
 * (R - r) h, and back the errors of what it read but for its own box,
 * r (T/R - h), T the output's elements. */
static double loss_bytes(const ap_plan *p, const ap_graph *g, int d) {
  const ap_value *y = &g->values[g->outputs[0]];
  const int64_t *ext = p->cls[p->n_levels][p->dev_class[d]].ext;
  double row = 1, h = 1;
  for (int i = 1; i < y->rank; i++) {
    double held = (double)y->dims[i];
    for (int c = 0; c < 2; c++)
      if (p->loss_map[c] == i)
        held = (double)llround((double)y->dims[i] *
                               port_fraction(p, g, ext, p->loss_vertex, 0, c));
    row *= (double)y->dims[i];
    h *= held;
  }
  double r = (double)aprt_even_share(y->dims[0], p->dev.n_devices, d);
  return elem_bytes(g, g->outputs[0]) * ((double)(y->dims[0] - (int64_t)r) * h + r * (row - h));
}

/* Whether the program sends edge e's value straight from the devices
 * holding it, known by extents alone: the producer splits it at every level,
 * so the devices' boxes partition it, and the consumer reads it whole at
 * every level, or splits it at every level along other dims than the
 * producer's, so its boxes partition it too and meet the producer's in
 * extents. Each level charged a conversion inside its group's box,
 * level[l][class * AP_MAX_CHILDREN + child] forward (fwd) and back (bwd),
 * spread over the child's devices; *whole: the consumer reads it whole.
 * ratio is scratch of two rows. */
static bool edge_direct(const ap_plan *p, const ap_graph *g, int e,
                        double (*ratio)[AP_MAX_CHILDREN], double **fwd, double **bwd,
                        bool *whole) {
  const ap_edge *ed = &p->e[e];
  int V = p->n_vertices;
  if (published_model(p))
    return false;
  /* The layouts' kinds and dims depend on the states only: a first pass
   * without ratios turns most edges away. */
  double zero[AP_MAX_CHILDREN] = {0};
  unsigned from_dims = 0, to_dims = 0;
  int to_split = 0;
  for (int l = 0; l < p->n_levels; l++) {
    int su = p->state[(size_t)l * V + ed->from], sv = p->state[(size_t)l * V + ed->to];
    ap_layout from, to;
    int64_t box[AP_MAX_RANK];
    edge_layouts(p, g, &p->cls[l][0], e, su, sv, zero, zero, &from, &to, box);
    if (from.kind != AP_LAYOUT_SPLIT || to.kind == AP_LAYOUT_PARTIAL)
      return false;
    from_dims |= 1u << from.dim;
    if (to.kind == AP_LAYOUT_SPLIT) {
      to_dims |= 1u << to.dim;
      to_split++;
    }
  }
  if ((to_split != 0 && to_split != p->n_levels) || (from_dims & to_dims))
    return false;
  *whole = to_split == 0;
  for (int l = 0; l < p->n_levels; l++) {
    int su = p->state[(size_t)l * V + ed->from], sv = p->state[(size_t)l * V + ed->to];
    for (int ci = 0; ci < p->n_cls[l]; ci++) {
      const ap_class *c = &p->cls[l][ci];
      ap_plan_ratio(p, g, c, ed->from, su, ratio[0]);
      ap_plan_ratio(p, g, c, ed->to, sv, ratio[1]);
      ap_exchange f, b;
      ap_plan_edge_exchange(p, g, c, e, su, sv, ratio[0], ratio[1], &f, &b);
      for (int i = 0; i < f.k; i++) {
        fwd[l][ci * AP_MAX_CHILDREN + i] = f.send_bytes[i];
        bwd[l][ci * AP_MAX_CHILDREN + i] = b.send_bytes[i];
      }
    }
  }
  return true;
}

/* What device d sends for an edge edge_direct prices, forward (*fwd) and
 * back (*bwd): its box h but for what it needs itself to the devices
 * needing it, h - |h n|, and the errors of its box n but for what it holds
 * back to the devices holding them, n - |h n| (a consumer reading the value
 * whole: (N-1) h and T - h). The producer's and the consumer's boxes have
 * their extents on the device; they split different dims, so they meet in
 * the smaller extent of each. */
static void direct_bytes(const ap_plan *p, const ap_graph *g, int e, bool gathers, int d,
                         double *fwd, double *bwd) {
  const ap_edge *ed = &p->e[e];
  const ap_port *pt = &p->v[ed->to].port[ed->port];
  int64_t box[AP_MAX_RANK];
  int rank = port_box(p, g, p->cls[0][0].ext, ed->to, ed->port, box);
  const int64_t *ext = p->cls[p->n_levels][p->dev_class[d]].ext;
  const int64_t *need_ext = port_ext(p, ext, ed->to, ed->port);
  double held = 1, need = 1, meet = 1, whole = 1;
  for (int i = 0; i < rank; i++) {
    double h = (double)box[i], n = (double)box[i];
    for (int c = 0; c < 2; c++) {
      if (ed->map[c] == i)
        h = (double)llround(h * port_fraction(p, g, ext, ed->from, 0, c));
      if (pt->dim[c] == i)
        n = (double)need_ext[c];
    }
    held *= h;
    need *= n;
    meet *= h < n ? h : n;
    whole *= (double)box[i];
  }
  double elem = elem_bytes(g, pt->value);
  *fwd = elem * (gathers ? (double)(p->dev.n_devices - 1) * held : held - meet);
  *bwd = elem * (gathers ? whole - held : need - meet);
}

/* Where its distribution is cheap enough to build, a plan's bytes are the
 * program's, device by device: the distribution (passes/distribute.c) is
 * built for the plan and its transfers are priced, each on the vertex or
 * edge whose cost it is. Building it takes every device's boxes of every
 * node, so it is bounded by node-devices: EXACT_MAX_WORK. Within it every
 * plan the search compares whole is priced so (accpar's rollout: its base
 * plans and its own; refine_exact's probes) but one that cannot win: a base
 * plan whose compute alone is slower than the step of the tentative plan
 * priced before it (outpaced), as dp's, owt's and hypar's are where
 * accpar's own base plan runs on many devices (ResNet-152, batch 512, on
 * 1024 devices: 2.03, 2.04 and 1.54 s of compute against a 1.14 s step).
 * The search of each level prices its states by the levels' closed forms
 * (below_vertex, below_edge), refined against the program where affordable
 * (refine_exact). Past the bound, every plan is priced by the closed forms
 * of finish (the sums every level makes, the loss's rows, edge_direct's
 * edges; the rest stays the levels', docs/partition.md, "Approximations")
 * and says "bytes priced: closed forms"; those priced GPT-2 small's step on
 * 65,536 devices 38% under the program's 0.831 s, ResNet-152's 4.4% under.
 * On 65,536 devices (62,717,952 node-devices) one exact pricing of GPT-2
 * small took 54 s and 1.8 GB, of ResNet-152 8.2 s and 1.6 GB
 * (docs/plan-time.md, "Sums at the owners, cut depth first"). The transfers
 * whose pieces grow with the square of the device count (a gather to every
 * device, partial sums resolved by sending summands) are summed by classes
 * of equal boxes (ap_distribute_priced), so the device count alone bounds
 * nothing; what grows faster than it is a sum at the owners over boxes
 * meeting in a grid (share_out): GPT-2 small's tied table is cut into 4,096
 * pieces on 32,768 devices, 3.3 million over the plans priced on 65,536. */
enum { EXACT_MAX_WORK = 1 << 26 };

static int64_t live_nodes(const ap_graph *g) {
  int64_t live = 0;
  for (int ni = 0; ni < g->n_nodes; ni++)
    live += !g->nodes[ni].dead;
  return live;
}

static bool exact_affordable(const ap_graph *g, int n_devices) {
  int64_t live = live_nodes(g);
  return ap_dist_oversized(g) < 0 && live * n_devices <= EXACT_MAX_WORK;
}

/* The vertex or edge item (vertices 0..V-1, edges V..V+E-1, V+E: none)
 * whose cost prices input slot i of node ni, read by vertex v: the edge
 * bringing a vertex's activation port, else the vertex (a chain op's
 * gather, a weight's slice). */
static int slot_item(const ap_plan *p, const ap_graph *g, int v, int ni, int i) {
  int V = p->n_vertices, E = p->n_edges;
  if (v < 0)
    return V + E;
  if (p->v[v].node == ni)
    for (int e = 0; e < E; e++)
      if (p->e[e].to == v && p->v[v].port[p->e[e].port].value == g->nodes[ni].in[i])
        return V + e;
  return v;
}

/* One charge of an item's row, in the order ap_distribute_train makes
 * them: a node's input transfer (a is the node, b the slot), its partial
 * sums' reduction, the loss's transfer, a weight's gradient sum (a is the
 * weight). */
typedef struct item_charge {
  int item;
  enum { CH_INPUT, CH_REDUCE, CH_LOSS, CH_WGRAD } kind;
  int a, b;
} item_charge;

static void apply_charge(const ap_plan *p, const ap_graph *g, const ap_dist *dist,
                         const item_charge *c, ap_dbox *box, double *row) {
  int N = p->dev.n_devices;
  const uint64_t *want = p->train_want;
  const ap_dnode *dn = c->kind <= CH_REDUCE ? &dist->node[c->a] : NULL;
  switch (c->kind) {
  case CH_INPUT:
    ap_dxfer_charge(g, dn->xfer_in[c->b], NULL, N, row);
    if (c->b < 64 && (want[c->a] >> c->b & 1))
      ap_dxfer_charge_adjoint(g, dn->xfer_in[c->b], NULL, N, row);
    break;
  case CH_REDUCE: {
    ap_dxfer_charge(g, dn->reduce, dn->out[0], N, row);
    uint64_t bias = dn->bias_slot >= 0 ? (uint64_t)1 << dn->bias_slot : 0;
    if (want[c->a] & ~bias)
      ap_dxfer_charge_adjoint(g, dn->reduce, dn->out[0], N, row);
    break;
  }
  case CH_LOSS:
    ap_dxfer_charge(g, dist->loss_xfer, NULL, N, row);
    ap_dxfer_charge_adjoint(g, dist->loss_xfer, NULL, N, row);
    break;
  case CH_WGRAD:
    ap_dxfer_charge_sum(g, dist->wgrad[c->a], ap_dist_weight_boxes(g, dist, c->a, box), N, row);
    break;
  }
}

/* A group of devices one level below another: it is child i of k of a
 * group of class c, whose level's charges start at lsent[at] (child j of
 * item it at at + it * k + j - i). */
typedef struct child_group {
  int first, count, k;
  size_t at;
} child_group;

/* Item by item (the V vertices, then the E edges, then V + E: none), what
 * device d sends for it in a training step as the program sends it, minus
 * what the levels charge it (spread evenly over a child's devices, as
 * comm_time assumes), in one row of N devices: its sum over the devices
 * joins p->comm_bytes, edges first and vertices after (the order finish
 * summed them in when it kept every row), and its largest value over the
 * devices of each leaf class goes to item_max[item * n_leaf + class]. A
 * row per item at once was (V + E) * N doubles: half a gigabyte for GPT-2
 * small over 32,768 devices. The program's bytes per device go into fwd[d]
 * and step[d]. The distribution is built in the graph's scratch arena,
 * above finish's own scratch, and released before returning. */
static ap_status program_bytes(ap_plan *p, ap_graph *g, const dev_paths *dp, double *item_max,
                               double *fwd, double *step, ap_diag *d) {
  int L = p->n_levels, V = p->n_vertices, E = p->n_edges, N = p->dev.n_devices;
  int nl = p->n_cls[L], n_items = V + E + 1;
  /* The graph's scratch arena, released after each plan: the rollout
   * prices five, and a new arena faulted in fresh pages for each. */
  if (!g->scratch && !(g->scratch = ap_arena_new()))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  ap_arena *keep = g->arena, *a = g->scratch;
  ap_arena_mark mark = ap_arena_mark_now(a); /* finish's own scratch lies below */
  ap_plan *planned = g->plan;
  const uint64_t *want = p->train_want;
  /* Every group's ratios, once: the distribution walks the levels for
   * every device and port, and the levels' charges below need them too. */
  bool ok = (p->level_ratio = ap_arena_array(a, (size_t)L, sizeof *p->level_ratio)) != NULL;
  for (int l = 0; l < L && ok; l++) {
    ok = (p->level_ratio[l] = ap_arena_array(a, (size_t)p->n_cls[l] * V + 1,
                                              sizeof **p->level_ratio)) != NULL;
    for (int ci = 0; ci < p->n_cls[l] && ok; ci++)
      for (int v = 0; v < V; v++)
        ap_plan_ratio(p, g, &p->cls[l][ci], v, p->state[(size_t)l * V + v],
                      p->level_ratio[l][(size_t)ci * V + v]);
  }
  ap_dist *dist = NULL;
  ap_status st = AP_OK;
  if (ok) {
    g->arena = a;
    g->plan = p;
    st = ap_distribute_priced(g, want, p->trainable, &dist, d);
    g->arena = keep;
    g->plan = planned;
  }
  /* Where each level's charges start, class by class: k per item. */
  size_t n_sent = 0;
  size_t **base = ap_arena_array(a, (size_t)L + 1, sizeof *base);
  int n_groups = 0;
  for (int l = 0; l < L && base; l++) {
    if (!(base[l] = ap_arena_array(a, (size_t)p->n_cls[l] + 1, sizeof **base))) {
      base = NULL;
      break;
    }
    for (int ci = 0; ci < p->n_cls[l]; ci++) {
      level_ctx x;
      ctx_init(&x, p, g, &p->cls[l][ci]);
      base[l][ci] = n_sent;
      n_sent += (size_t)(V + E) * (size_t)x.k;
    }
    for (int dv = 0; dv < N; dv += dp->m[path_at(p, dv, l)])
      n_groups++;
  }
  int *item_of = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof *item_of);
  int *wvertex = ap_arena_array(a, (size_t)g->n_values + 1, sizeof *wvertex);
  ap_dbox *box = ap_arena_array(a, (size_t)N, sizeof *box);
  child_cost *vc = ap_arena_array(a, (size_t)V + 1, sizeof *vc);
  child_cost *ec = ap_arena_array(a, (size_t)E + 1, sizeof *ec);
  double *lsent = ap_arena_array(a, n_sent + 1, sizeof *lsent);
  child_group *grp = ap_arena_array(a, (size_t)n_groups + 1, sizeof *grp);
  int *level_end = ap_arena_array(a, (size_t)L + 1, sizeof *level_end);
  double *row = ap_arena_array(a, (size_t)N, sizeof *row);
  int *first = ap_arena_array(a, (size_t)n_items + 1, sizeof *first);
  if (st == AP_OK && (!ok || !base || !item_of || !wvertex || !box || !vc || !ec || !lsent ||
                      !grp || !level_end || !row || !first))
    st = ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  if (st != AP_OK) {
    p->level_ratio = NULL;
    ap_arena_release(a, mark);
    return st;
  }
  for (int dv = 0; dv < N; dv++) {
    fwd[dv] = dist->fwd_bytes[dv];
    step[dv] = dist->step_bytes[dv];
  }
  /* Each node's vertex: its own, or the one whose chain op it is. */
  for (int ni = 0; ni < g->n_nodes; ni++)
    item_of[ni] = -1;
  for (int v = 0; v < V; v++) {
    item_of[p->v[v].node] = v;
    for (int k = 0; k < p->v[v].n_chain; k++)
      item_of[p->v[v].chain[k].node] = v;
  }
  /* A weight's gradient sum is priced on its layer's row, a joint weight's
   * on its first reader's (next_level). */
  for (int w = 0; w < g->n_values; w++)
    wvertex[w] = V + E;
  for (int jw = 0; jw < p->n_wjoint; jw++)
    wvertex[p->wjoint[jw].value] = p->wjoint[jw].r[0].vertex;
  for (int v = 0; v < V; v++) {
    if (p->v[v].weight >= 0 && wvertex[p->v[v].weight] == V + E)
      wvertex[p->v[v].weight] = v;
    for (int k = 0; k < p->v[v].n_wsum; k++)
      if (wvertex[p->v[v].wsum[k].value] == V + E)
        wvertex[p->v[v].wsum[k].value] = v;
  }
  /* The program's transfers, as ap_distribute_train charges them, in its
   * order (at most one per input, one reduction per node, the loss, one
   * sum per weight), then sorted by item, stably: first[it] is where item
   * it's charges start in list. */
  size_t bound = (size_t)g->n_values + 1;
  for (int ni = 0; ni < g->n_nodes; ni++)
    bound += (size_t)g->nodes[ni].n_in + 1;
  item_charge *made = ap_arena_array(a, bound, sizeof *made);
  item_charge *list = ap_arena_array(a, bound, sizeof *list);
  if (!made || !list) {
    p->level_ratio = NULL;
    ap_arena_release(a, mark);
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  }
  int n_made = 0;
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    const ap_dnode *dn = &dist->node[ni];
    if (n->dead || !dn->xfer_in)
      continue;
    for (int i = 0; i < n->n_in; i++)
      if (dn->xfer_in[i])
        made[n_made++] = (item_charge){slot_item(p, g, item_of[ni], ni, i), CH_INPUT, ni, i};
    if (dn->reduce)
      made[n_made++] = (item_charge){item_of[ni] < 0 ? V + E : item_of[ni], CH_REDUCE, ni, 0};
  }
  if (dist->loss_xfer)
    made[n_made++] = (item_charge){p->loss_vertex >= 0 ? p->loss_vertex : V + E, CH_LOSS, 0, 0};
  for (int w = 0; w < g->n_values; w++)
    if (dist->wgrad && dist->wgrad[w])
      made[n_made++] = (item_charge){wvertex[w], CH_WGRAD, w, 0};
  for (int it = 0; it <= n_items; it++)
    first[it] = 0;
  for (int k = 0; k < n_made; k++)
    first[made[k].item + 1]++;
  for (int it = 0; it < n_items; it++)
    first[it + 1] += first[it];
  for (int k = 0; k < n_made; k++) /* first[it] runs to item it + 1's start */
    list[first[made[k].item]++] = made[k];
  for (int it = n_items; it > 0; it--)
    first[it] = first[it - 1];
  first[0] = 0;
  /* What the levels charge each item, as next_level does, kept per class
   * and child; and the groups each level's children make. */
  for (int l = 0, ng = 0; l < L; l++) {
    const uint8_t *stl = p->state + (size_t)l * V;
    for (int ci = 0; ci < p->n_cls[l]; ci++) {
      const ap_class *c = &p->cls[l][ci];
      double(*ratio)[AP_MAX_CHILDREN] = p->level_ratio[l] + (size_t)ci * V;
      level_ctx x;
      ctx_init(&x, p, g, c);
      for (int v = 0; v < V; v++)
        vertex_cost(&x, v, stl[v], ratio[v], true, &vc[v]);
      for (int jw = 0; jw < p->n_wjoint; jw++) {
        ap_exchange ex;
        double elems[AP_MAX_CHILDREN] = {0};
        joint_sum(&x, &p->wjoint[jw], stl, ratio, &ex);
        add_exchange(&x, &ex, elem_bytes(g, p->wjoint[jw].value),
                     &vc[p->wjoint[jw].r[0].vertex], elems, false);
      }
      for (int e = 0; e < E; e++) {
        int u = p->e[e].from, w = p->e[e].to;
        edge_cost(&x, e, stl[u], stl[w], ratio[u], ratio[w], &ec[e]);
      }
      double *out = lsent + base[l][ci];
      for (int it = 0; it < V + E; it++)
        for (int j = 0; j < x.k; j++)
          out[(size_t)it * x.k + j] = it < V ? vc[it].sent[j] : ec[it - V].sent[j];
    }
    for (int dv = 0; dv < N; dv += dp->m[path_at(p, dv, l)]) {
      size_t at = path_at(p, dv, l);
      grp[ng++] = (child_group){dv, dp->m[at], dp->k[at], base[l][dp->c[at]] + dp->i[at]};
    }
    level_end[l] = ng;
  }
  /* Row by row, in the order comm_bytes summed them: edges, none, vertices. */
  for (int q = 0; q < n_items; q++) {
    int it = q <= E ? V + q : q - E - 1;
    for (int dv = 0; dv < N; dv++)
      row[dv] = 0;
    for (int k = first[it]; k < first[it + 1]; k++)
      apply_charge(p, g, dist, &list[k], box, row);
    for (int l = 0, gi = 0; l < L && it < V + E; l++)
      for (; gi < level_end[l]; gi++) { /* every device once a level, level by level */
        const child_group *cg = &grp[gi];
        double charge = lsent[cg->at + (size_t)it * cg->k] / cg->count;
        for (int dv = cg->first; dv < cg->first + cg->count && charge != 0; dv++)
          row[dv] -= charge;
      }
    double *mx = it < V + E ? item_max + (size_t)it * nl : NULL;
    for (int ci = 0; ci < nl && mx; ci++)
      mx[ci] = -INFINITY;
    for (int dv = 0; dv < N; dv++) {
      p->comm_bytes += row[dv];
      if (mx && row[dv] > mx[p->dev_class[dv]])
        mx[p->dev_class[dv]] = row[dv];
    }
  }
  p->level_ratio = NULL;
  ap_arena_release(a, mark);
  return AP_OK;
}

/* Vertex v's compute on a device of each leaf class (compute[ci]); the
 * slowest is returned. */
static double leaf_compute(const ap_plan *p, const ap_graph *g, int v, double *compute) {
  int L = p->n_levels;
  double worst = 0;
  for (int ci = 0; ci < p->n_cls[L]; ci++) {
    const ap_class *c = &p->cls[L][ci];
    compute[ci] = group_compute(p, g, v, port_ext(p, c->ext, v, 0), &p->dev.kinds[c->g.kind],
                                c->g.count);
    worst = fmax(worst, compute[ci]);
  }
  return worst;
}

/* Whether plan p cannot be faster than its rival (a plan priced already):
 * its compute alone takes longer than the rival's step, and a step is its
 * compute plus communication that is never negative, however priced. */
static bool slower_than_rival(const ap_plan *p, const ap_graph *g, double *compute) {
  if (!p->rival)
    return false;
  double t = 0;
  for (int v = 0; v < p->n_vertices; v++)
    t += leaf_compute(p, g, v, compute);
  return t > p->rival->step_time_s;
}

/* The IR annotation of p's states: per layer, one type per level. */
static ap_status annotate_types(const ap_plan *p, ap_graph *g, ap_diag *d) {
  int L = p->n_levels, V = p->n_vertices;
  for (int v = 0; v < V; v++) {
    if (p->v[v].join)
      continue;
    ap_node *nd = &g->nodes[p->v[v].node];
    nd->types = ap_arena_array(g->arena, (size_t)L + 1, 1);
    if (!nd->types)
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    for (int l = 0; l < L; l++)
      nd->types[l] = (uint8_t)(state_type(p->state[(size_t)l * V + v]) + 1);
    nd->n_types = L;
  }
  return AP_OK;
}

/* The plan's figures (finish), its per-device arrays in the graph's arena
 * and what only pricing it needs in scratch a. */
static ap_status price_plan(ap_plan *p, ap_graph *g, int **child_map, ap_arena *a,
                            ap_diag *d) {
  int L = p->n_levels, V = p->n_vertices, E = p->n_edges, nl = p->n_cls[L];
  int N = p->dev.n_devices;
  ap_arena *keep = g->arena;
  p->comm_bytes = p->levels_comm_bytes;
  p->row_time_s = ap_arena_array(keep, (size_t)V + 1, sizeof(double));
  p->edge_time_s = ap_arena_array(keep, (size_t)E + 1, sizeof(double));
  p->class_mem = ap_arena_array(keep, (size_t)nl + 1, sizeof(double));
  p->dev_class = ap_arena_array(keep, (size_t)N + 1, sizeof(int));
  /* Each device's class and path: follow the tree down, group by group. */
  ap_group *cur = ap_arena_array(a, (size_t)N + 1, sizeof *cur);
  ap_group *nxt = ap_arena_array(a, (size_t)N + 1, sizeof *nxt);
  int *ccur = ap_arena_array(a, (size_t)N + 1, sizeof(int));
  int *cnxt = ap_arena_array(a, (size_t)N + 1, sizeof(int));
  double *compute = ap_arena_array(a, (size_t)nl + 1, sizeof(double));
  int max_sums = p->n_wjoint;
  for (int v = 0; v < V; v++)
    max_sums += p->v[v].n_wsum + 1;
  whole_sum *sums = ap_arena_array(a, (size_t)max_sums + 1, sizeof *sums);
  const double **bytes = ap_arena_array(a, (size_t)max_sums + 1, sizeof *bytes);
  int *first_sum = ap_arena_array(a, (size_t)V + 1, sizeof *first_sum);
  /* The levels' charges of the sums, by a group's child count and the child. */
  double(*level_fwd)[AP_MAX_CHILDREN] =
      ap_arena_array(a, AP_MAX_CHILDREN + 1, sizeof *level_fwd);
  double(*level_step)[AP_MAX_CHILDREN] =
      ap_arena_array(a, AP_MAX_CHILDREN + 1, sizeof *level_step);
  int64_t *joint_count = ap_arena_array(a, (size_t)p->n_wjoint + 1, sizeof *joint_count);
  double(*ratio)[AP_MAX_CHILDREN] = ap_arena_array(a, (size_t)V + 1, sizeof *ratio);
  double **loss_level = ap_arena_array(a, (size_t)L + 1, sizeof *loss_level);
  double *loss_exact = ap_arena_array(a, (size_t)N + 1, sizeof *loss_exact);
  double *loss_levels = ap_arena_array(a, (size_t)N + 1, sizeof *loss_levels);
  dev_paths dp = {ap_arena_array(a, (size_t)N * L + 1, sizeof(int)),
                  ap_arena_array(a, (size_t)N * L + 1, sizeof(int)),
                  ap_arena_array(a, (size_t)N * L + 1, sizeof(int)),
                  ap_arena_array(a, (size_t)N * L + 1, sizeof(int))};
  bool *direct = ap_arena_array(a, (size_t)E + 1, sizeof *direct);
  bool *whole_read = ap_arena_array(a, (size_t)E + 1, sizeof *whole_read);
  double *edge_worst = ap_arena_array(a, (size_t)E + 1, sizeof *edge_worst);
  double *edge_levels = ap_arena_array(a, (size_t)N + 1, sizeof *edge_levels);
  double **gather[4]; /* per level: an edge_direct's charges forward, back; their sums */
  for (int q = 0; q < 4; q++)
    gather[q] = ap_arena_array(a, (size_t)L + 1, sizeof **gather);
  p->dev_fwd_bytes = ap_arena_array(keep, (size_t)N + 1, sizeof(double));
  p->dev_step_bytes = ap_arena_array(keep, (size_t)N + 1, sizeof(double));
  p->level_fwd_bytes = ap_arena_array(keep, (size_t)N + 1, sizeof(double));
  p->level_step_bytes = ap_arena_array(keep, (size_t)N + 1, sizeof(double));
  /* Every level count, one included: on one level the levels' charges equal
   * the program's on every plan test_plan_bytes checks, and pricing from the
   * program's transfers makes that so for every model. Where the program
   * does not train some layer's weight (layers_train), it runs no backward
   * there while the levels charge one. */
  p->outpaced = compute && slower_than_rival(p, g, compute);
  bool exact =
      L > 0 && N > 1 && exact_affordable(g, N) && !published_model(p) &&
      p->layers_train && !p->outpaced;
  p->bytes_priced = published_model(p) ? "paper"
                    : !p->layers_train  ? "levels"
                    : exact || N == 1   ? "program"
                                        : "closed forms";
  /* Per item, the largest difference on any device of each leaf class
   * between the program's bytes and the levels' charges (program_bytes). */
  double *item_max = exact ? ap_arena_array(a, (size_t)(V + E) * nl + 1, sizeof *item_max) : NULL;
  if ((exact && !item_max) || !p->row_time_s || !p->edge_time_s || !p->class_mem ||
      !p->dev_class || !cur || !nxt || !ccur || !cnxt || !compute || !sums || !bytes || !first_sum || !level_fwd || !level_step ||
      !joint_count || !ratio || !loss_level || !loss_exact || !loss_levels || !dp.k ||
      !dp.i || !dp.m || !dp.c || !direct || !whole_read || !edge_worst || !edge_levels ||
      !gather[0] ||
      !gather[1] || !gather[2] || !gather[3] || !p->dev_fwd_bytes || !p->dev_step_bytes ||
      !p->level_fwd_bytes || !p->level_step_bytes)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int jw = 0; jw < p->n_wjoint; jw++)
    if (L < 2 || exact || !joint_whole(p, g, &p->wjoint[jw], ratio, &joint_count[jw]))
      joint_count[jw] = -1;
  int ns = 0;
  for (int v = 0; v < V; v++) {
    first_sum[v] = ns;
    ns += L > 1 && !exact ? whole_sums(p, g, v, sums + ns) : 0;
    /* A joint weight's sum is charged on its first reader's row (next_level). */
    for (int jw = 0; jw < p->n_wjoint; jw++)
      if (joint_count[jw] > 0 && p->wjoint[jw].r[0].vertex == v)
        sums[ns++] = (whole_sum){joint_count[jw], elem_bytes(g, p->wjoint[jw].value), 0, 1};
  }
  first_sum[V] = ns;
  for (int k = 0; k <= AP_MAX_CHILDREN; k++)
    for (int j = 0; j < AP_MAX_CHILDREN; j++) {
      level_fwd[k][j] = level_step[k][j] = 0;
      for (int q = 0; q < ns && k > 1 && j < k; q++) {
        double b = sums[q].elem / 4 * (double)aprt_allreduce_bytes(k, sums[q].count, NULL, j);
        level_fwd[k][j] += sums[q].fwd * b;
        level_step[k][j] += sums[q].step * b;
      }
    }
  for (int l = 0; l < L; l++)
    if (!(loss_level[l] = ap_arena_array(a, (size_t)p->n_cls[l] * AP_MAX_CHILDREN + 1,
                                         sizeof **loss_level)))
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  bool loss_whole = L > 1 && !exact && loss_levels_charged(p, g, ratio[0], loss_level);
  for (int l = 0; l < L; l++)
    for (int q = 0; q < 4; q++) {
      size_t n_at = (size_t)p->n_cls[l] * AP_MAX_CHILDREN;
      if (!(gather[q][l] = ap_arena_array(a, n_at + 1, sizeof ***gather)))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      for (size_t at = 0; at < n_at; at++)
        gather[q][l][at] = 0;
    }
  for (int e = 0; e < E; e++) {
    direct[e] = L > 1 && !exact && edge_direct(p, g, e, ratio, gather[0], gather[1],
                                               &whole_read[e]);
    for (int l = 0; l < L && direct[e]; l++)
      for (int at = 0; at < p->n_cls[l] * AP_MAX_CHILDREN; at++) {
        gather[2][l][at] += gather[0][l][at];
        gather[3][l][at] += gather[0][l][at] + gather[1][l][at];
      }
  }
  for (int dv = 0; dv < N; dv++)
    p->dev_fwd_bytes[dv] = p->dev_step_bytes[dv] = loss_levels[dv] = 0;
  int n = 1;
  cur[0] = ap_group_root(&p->dev);
  ccur[0] = 0;
  for (int l = 0; l < L; l++) {
    int m = 0;
    for (int i = 0; i < n; i++) {
      ap_group ch[AP_MAX_CHILDREN];
      int k = ap_group_children(&p->dev, &cur[i], ch);
      for (int j = 0; j < k; j++) {
        /* A child group's bytes are spread evenly over its devices, as
         * comm_time assumes, but for what is priced below as the program
         * sends it: the sums every level makes, the loss's rows, the
         * edges edge_direct prices. */
        int at = ccur[i] * AP_MAX_CHILDREN + j;
        double f = p->child_fwd[l][at] - level_fwd[k][j] - gather[2][l][at];
        double t = p->child_sent[l][at] - level_step[k][j] - gather[3][l][at];
        double lb = loss_whole ? loss_level[l][at] : 0;
        for (int dv = ch[j].first_dev; dv < ch[j].first_dev + ch[j].count; dv++) {
          p->dev_fwd_bytes[dv] += f / ch[j].count;
          p->dev_step_bytes[dv] += (t - lb) / ch[j].count;
          loss_levels[dv] += lb / ch[j].count;
          size_t pa = path_at(p, dv, l);
          dp.k[pa] = k;
          dp.i[pa] = j;
          dp.m[pa] = ch[j].count;
          dp.c[pa] = ccur[i];
        }
        nxt[m] = ch[j];
        cnxt[m++] = child_map[l][at];
      }
    }
    ap_group *t = cur;
    cur = nxt, nxt = t;
    int *tc = ccur;
    ccur = cnxt, cnxt = tc;
    n = m;
  }
  for (int i = 0; i < n; i++)
    for (int dv = 0; dv < cur[i].count; dv++)
      p->dev_class[cur[i].first_dev + dv] = ccur[i];
  for (int dv = 0; dv < N; dv++) {
    loss_exact[dv] = loss_whole ? loss_bytes(p, g, dv) : 0;
    p->dev_step_bytes[dv] += loss_exact[dv];
  }
  if (exact) {
    /* No closed form has touched them: what the levels charged. */
    memcpy(p->level_fwd_bytes, p->dev_fwd_bytes, (size_t)N * sizeof(double));
    memcpy(p->level_step_bytes, p->dev_step_bytes, (size_t)N * sizeof(double));
    ap_status st =
        program_bytes(p, g, &dp, item_max, p->dev_fwd_bytes, p->dev_step_bytes, d);
    if (st != AP_OK)
      return st;
  }
  for (int e = 0; e < E; e++) {
    if (!direct[e])
      continue;
    edge_direct(p, g, e, ratio, gather[0], gather[1], &whole_read[e]);
    edge_worst[e] = 0;
    for (int dv = 0; dv < N; dv++)
      edge_levels[dv] = 0;
    for (int l = 0; l < L; l++) /* level by level, as the paths lie (path_at) */
      for (int dv = 0; dv < N; dv++) {
        size_t pa = path_at(p, dv, l);
        int at = dp.c[pa] * AP_MAX_CHILDREN + dp.i[pa];
        edge_levels[dv] += (gather[0][l][at] + gather[1][l][at]) / dp.m[pa];
      }
    for (int dv = 0; dv < N; dv++) {
      double levels = edge_levels[dv], f, b;
      direct_bytes(p, g, e, whole_read[e], dv, &f, &b);
      const ap_class *c = &p->cls[L][p->dev_class[dv]];
      p->dev_fwd_bytes[dv] += f;
      p->dev_step_bytes[dv] += f + b;
      p->comm_bytes += f + b - levels;
      edge_worst[e] = fmax(edge_worst[e], c->acc_e[e] + (f + b - levels) /
                                                           p->dev.kinds[c->g.kind].link_bw_bytes_s);
    }
  }
  p->step_time_s = p->compute_time_s = 0;
  sum_memo memo = {0};
  for (int v = 0; v < V; v++) {
    double worst = 0, worst_compute = leaf_compute(p, g, v, compute);
    for (int ci = 0; ci < nl; ci++)
      worst = fmax(worst, compute[ci] + p->cls[L][ci].acc_v[v]);
    int q0 = first_sum[v], q1 = first_sum[v + 1];
    bool loss = loss_whole && v == p->loss_vertex, per_device = q1 > q0 || loss;
    if (per_device || exact) /* the levels' charges give way to the program's bytes */
      worst = 0;
    for (int ci = 0; ci < nl && exact; ci++) /* its bytes summed already */
      worst = fmax(worst, compute[ci] + p->cls[L][ci].acc_v[v] +
                              item_max[(size_t)v * nl + ci] /
                                  p->dev.kinds[p->cls[L][ci].g.kind].link_bw_bytes_s);
    for (int q = q0; q < q1; q++)
      if (!(bytes[q] = memo_bytes(a, p, &dp, &memo, &sums[q])))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    for (int dv = 0; dv < N && per_device; dv++) {
      int ci = p->dev_class[dv];
      double delta = loss ? loss_exact[dv] - loss_levels[dv] : 0;
      for (int q = q0; q < q1; q++) {
        p->dev_fwd_bytes[dv] += sums[q].fwd * bytes[q][dv];
        p->dev_step_bytes[dv] += sums[q].step * bytes[q][dv];
        delta += sums[q].step * bytes[q][N + dv];
      }
      p->comm_bytes += delta;
      worst = fmax(worst, compute[ci] + p->cls[L][ci].acc_v[v] +
                              delta / p->dev.kinds[p->cls[L][ci].g.kind].link_bw_bytes_s);
    }
    p->row_time_s[v] = worst;
    p->compute_time_s += worst_compute;
  }
  if (!exact) { /* the levels' and the closed forms' */
    memcpy(p->level_fwd_bytes, p->dev_fwd_bytes, (size_t)N * sizeof(double));
    memcpy(p->level_step_bytes, p->dev_step_bytes, (size_t)N * sizeof(double));
  }
  for (int e = 0; e < E; e++) {
    double worst = direct[e] ? edge_worst[e] : 0;
    for (int ci = 0; ci < nl && !direct[e] && !exact; ci++)
      worst = fmax(worst, p->cls[L][ci].acc_e[e]);
    for (int ci = 0; ci < nl && exact; ci++) {
      const ap_class *c = &p->cls[L][ci];
      worst = fmax(worst, c->acc_e[e] + item_max[(size_t)(V + e) * nl + ci] /
                                            p->dev.kinds[c->g.kind].link_bw_bytes_s);
    }
    p->edge_time_s[e] = worst;
    p->row_time_s[p->e[e].to] += worst; /* a conversion shows on its consumer's row */
  }
  for (int v = 0; v < V; v++)
    p->step_time_s += p->row_time_s[v];
  p->comm_time_s = p->step_time_s - p->compute_time_s;
  p->max_mem_bytes = 0;
  for (int ci = 0; ci < nl; ci++) {
    p->class_mem[ci] = class_memory(p, g, &p->cls[L][ci]);
    p->max_mem_bytes = fmax(p->max_mem_bytes, p->class_mem[ci]);
  }
  /* Not for a plan refine_exact or a further rollout only prices: the graph
   * keeps the chosen plan's types. */
  return p->probe ? AP_OK : annotate_types(p, g, d);
}

/* Prices plan p once its levels are planned: its step time, its rows and
 * edges, each device's bytes. The arrays of N devices that only pricing
 * needs (every device's path, the loss's and the sums' bytes: 75 MB for
 * the MLP on 262,144 devices) live in the graph's scratch arena, released
 * here: the rollout prices a plan after another, and kept in the graph's
 * arena they added up over them all. */
static ap_status finish(ap_plan *p, ap_graph *g, int **child_map, ap_diag *d) {
  if (!g->scratch && !(g->scratch = ap_arena_new()))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  ap_arena_mark mark = ap_arena_mark_now(g->scratch);
  ap_status st = price_plan(p, g, child_map, g->scratch, d);
  ap_arena_release(g->scratch, mark);
  return st;
}

/* One search of every level with the plan's memory penalty. With a
 * tentative plan (a baseline's complete plan, see ap_partition), a level
 * takes the tentative plan's states while the best it finds is no faster
 * than the tentative plan: a fortified rollout, never slower than it. */
static ap_status plan_levels(ap_plan *p, ap_graph *g, const ap_plan *tentative,
                             ap_diag *d) {
  ap_arena *a = g->arena;
  int L = p->n_levels, V = p->n_vertices;
  p->comm_bytes = p->paper_cost = 0;
  p->search_priced = published_model(p) ? "paper" : "levels";
  p->state = ap_arena_array(a, (size_t)L * V + 1, 1);
  p->cls = ap_arena_array(a, (size_t)L + 1, sizeof *p->cls);
  p->n_cls = ap_arena_array(a, (size_t)L + 1, sizeof *p->n_cls);
  p->child_map = ap_arena_array(a, (size_t)L + 1, sizeof *p->child_map);
  p->child_fwd = ap_arena_array(a, (size_t)L + 1, sizeof *p->child_fwd);
  p->child_sent = ap_arena_array(a, (size_t)L + 1, sizeof *p->child_sent);
  p->cls[0] = ap_arena_alloc(a, sizeof(ap_class));
  if (!p->state || !p->cls || !p->n_cls || !p->child_map || !p->child_fwd ||
      !p->child_sent || !p->cls[0] ||
      !class_alloc(p, a, p->cls[0]))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  ap_class *root = p->cls[0];
  root->g = ap_group_root(&p->dev);
  root->mult = 1;
  p->n_cls[0] = 1;
  for (int v = 0; v < V; v++)
    for (int port = 0; port < p->v[v].n_ports; port++)
      for (int c = 0; c < 2; c++)
        root->ext[2 * (p->v[v].ext_base + port) + c] =
            (int64_t)full(g, p->v[v].port[port].value, p->v[v].port[port].dim[c]);
  below b;
  ap_status st = below_init(&b, p, g);
  if (st != AP_OK) {
    if (b.ar)
      ap_arena_reset(b.ar);
    return ap_error(d, st, g->path, NULL, NULL, "out of memory");
  }
  b.tail = tentative ? tentative->state : NULL;
  b.tail_by_count = tentative && tentative->opts.strategy != AP_STRATEGY_ACCPAR;
  double bound = tentative ? tentative->step_time_s : INFINITY;
  for (int l = 0; l < L && st == AP_OK; l++) {
    uint8_t *state = p->state + (size_t)l * V;
    double value;
    if ((st = search_level(p, g, l, &b, state, &value, d)) != AP_OK)
      break;
    if (tentative && !(value < bound)) {
      /* The tentative plan's states, by device count as its strategy
       * shares (rule 1), give its own classes and times exactly. */
      for (int v = 0; v < V; v++)
        state[v] = (uint8_t)state_below(&b, l, v, 0);
    } else {
      bound = value;
    }
    /* Rule 1 where it gives the balanced shares anyway is rule 0: the
     * table marks by-count shares only where they differ. */
    for (int v = 0; v < V && p->opts.strategy >= AP_STRATEGY_ACCPAR; v++) {
      bool same = state[v] >= 3;
      for (int ci = 0; same && ci < p->n_cls[l]; ci++) {
        double r0[AP_MAX_CHILDREN], r1[AP_MAX_CHILDREN];
        cached_ratio(&b, &p->cls[l][ci], v, state[v] - 3, r0);
        cached_ratio(&b, &p->cls[l][ci], v, state[v], r1);
        same = memcmp(r0, r1, sizeof r0) == 0;
      }
      if (same)
        state[v] -= 3;
    }
    st = next_level(p, g, l, p->child_map, b.ar, d);
  }
  ap_arena_reset(b.ar);
  p->levels_comm_bytes = p->comm_bytes;
  return st != AP_OK ? st : finish(p, g, p->child_map, d);
}

/* Plans p again with the states of plan t (by device count where t's
 * strategy shares so), priced as p's pricing prices it. */
static ap_status take_states(ap_plan *p, ap_graph *g, const ap_plan *t, ap_diag *d) {
  int L = p->n_levels, V = p->n_vertices;
  uint8_t *fixed = ap_arena_array(g->arena, (size_t)L * V + 1, 1);
  if (!fixed)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  bool by_count = t->opts.strategy != AP_STRATEGY_ACCPAR;
  for (size_t i = 0; i < (size_t)L * V; i++)
    fixed[i] = (uint8_t)(by_count ? state_type(t->state[i]) + 3 : t->state[i]);
  p->fixed = fixed;
  ap_status st = plan_levels(p, g, NULL, d);
  p->fixed = NULL;
  return st;
}

/* The first class of the last level that does not fit, or -1. */
static int overflowing(const ap_plan *p, double *cap) {
  int L = p->n_levels;
  for (int ci = 0; ci < p->n_cls[L]; ci++) {
    const ap_class *c = &p->cls[L][ci];
    *cap = p->opts.mem_limit_bytes > 0 ? p->opts.mem_limit_bytes
                                       : p->dev.kinds[c->g.kind].mem_bytes;
    if (p->class_mem[ci] > *cap)
      return ci;
  }
  return -1;
}

/* The states node_state gives each vertex at each level, checked. */
static ap_status fix_states(ap_plan *p, ap_graph *g, const uint8_t *node_state, int n_levels,
                            const char *file, ap_diag *d) {
  static const char *const names[2][3] = {{"I", "II", "III"}, {"b", "f", "r"}};
  int L = p->n_levels, V = p->n_vertices;
  if (n_levels != L)
    return ap_error(d, AP_ERR_INVALID, file, NULL, NULL,
                    "the plan has %d levels; this device array has %d", n_levels, L);
  uint8_t *fixed = ap_arena_array(g->arena, (size_t)L * V + 1, 1);
  if (!fixed)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < V; v++) {
    const ap_vertex *vx = &p->v[v];
    const ap_node *n = &g->nodes[vx->node];
    for (int l = 0; l < L; l++) {
      int s = node_state[(size_t)l * g->n_nodes + vx->node] & 3,
          by_count = node_state[(size_t)l * g->n_nodes + vx->node] >> 2 & 1;
      if (s == 0)
        return ap_error(d, AP_ERR_INVALID, file, n->name, n->op_type,
                        "level %d has no %s", l, vx->join ? "layout (b, f or r)"
                                                          : "type (I, II or III)");
      if (!(vx->allowed >> (s - 1) & 1))
        return ap_error(d, AP_ERR_INVALID, file, n->name, n->op_type,
                        "level %d: %s %s is not possible here", l,
                        vx->join ? "layout" : "type", names[vx->join][s - 1]);
      fixed[(size_t)l * V + v] = (uint8_t)(s - 1 + 3 * by_count);
    }
  }
  p->fixed = fixed;
  return AP_OK;
}

/* ---- the levels refined against the program ---- */

/* The levels price a state by the conversions and sums among their groups;
 * the program sends each piece from a device holding it (the holders of
 * the lowest-ranked box holding it, in turn), wherever that is, and sums
 * partial sums over every device holding one.
 * Where a vertex takes different types at different levels the two differ
 * (a level's charge for a channel split below a batch split is not what
 * the devices exchange). Where the program's distribution is cheap to
 * build many times (REFINE_MAX_WORK node-devices over all the plans it
 * prices), accpar refines its plan one level at a time against the
 * program: with every other level's states fixed, it prices fixed plans,
 * each as the program sends it (finish), that together give every vertex
 * each of its candidate states and every edge each pair of its ends'
 * candidate states, and reads off each vertex's and each edge's time; the
 * dynamic program then chooses the level's states from those times. The
 * fixed plans come from an orthogonal array over a colouring of the
 * vertices (an edge's ends have different colours), q^2 runs (a, b) for q
 * candidates at most: with three colours or fewer, colours 0, 1 and 2 take
 * candidates a, b and (a + b) mod q; with more, q prime and at most q + 1
 * colours, colour c < q takes (a + c b) mod q and colour q takes b. Any two
 * colours then see every pair of candidates. A level keeps its new states only where the
 * whole plan, priced again, is faster and fits. */
enum { REFINE_MAX_WORK = 1 << 20, REFINE_SWEEPS = 2, REFINE_MAX_CAND = 4 };

typedef struct refine {
  ap_plan *p;
  ap_graph *g;
  ap_arena *ev;      /* the fixed plans' arena, reset after each */
  uint8_t *fixed;    /* [n_levels][n_vertices]: the plan to price */
  double *vtime;     /* [n_vertices]: each vertex's time, its conversions' apart */
  double *etime;     /* [n_edges] */
  double step;       /* the plan's step time */
  bool fits;
} refine;

static ap_status price_fixed(refine *r, ap_diag *d) {
  ap_plan q = *r->p;
  q.opts.devices = &q.dev;
  q.fixed = r->fixed;
  q.mem_penalty = 0;
  q.probe = true;
  ap_arena *keep = r->g->arena;
  r->g->arena = r->ev;
  ap_status st = plan_levels(&q, r->g, NULL, d);
  r->g->arena = keep;
  if (st == AP_OK) {
    double cap;
    r->step = q.step_time_s;
    r->fits = overflowing(&q, &cap) < 0;
    for (int v = 0; v < q.n_vertices; v++)
      r->vtime[v] = q.row_time_s[v];
    for (int e = 0; e < q.n_edges; e++) {
      r->etime[e] = q.edge_time_s[e];
      r->vtime[q.e[e].to] -= q.edge_time_s[e];
    }
  }
  ap_arena_reset(r->ev);
  return st;
}

static bool is_prime(int n) {
  for (int k = 2; k * k <= n; k++)
    if (n % k == 0)
      return false;
  return n >= 2;
}

static ap_status refine_exact(ap_plan *p, ap_graph *g, int64_t work, ap_diag *d) {
  int L = p->n_levels, V = p->n_vertices, E = p->n_edges;
  ap_arena *a = g->arena;
  int *colour = ap_arena_array(a, (size_t)V + 1, sizeof *colour);
  uint8_t(*cand)[REFINE_MAX_CAND] = ap_arena_array(a, (size_t)L * V + 1, sizeof *cand);
  int *n_cand = ap_arena_array(a, (size_t)L * V + 1, sizeof *n_cand);
  uint8_t *best = ap_arena_array(a, (size_t)L * V + 1, 1);
  uint8_t *row = ap_arena_array(a, (size_t)V + 1, 1);
  uint8_t *allowed = ap_arena_array(a, (size_t)V + 1, 1);
  double(*unary)[AP_SEARCH_STATES] = ap_arena_array(a, (size_t)V + 1, sizeof *unary);
  double(*pair)[AP_SEARCH_STATES][AP_SEARCH_STATES] =
      ap_arena_array(a, (size_t)E + 1, sizeof *pair);
  int(*ends)[2] = ap_arena_array(a, (size_t)E + 1, sizeof *ends);
  refine r = {p, g, ap_arena_new(), ap_arena_array(a, (size_t)L * V + 1, 1),
              ap_arena_array(a, (size_t)V + 1, sizeof(double)),
              ap_arena_array(a, (size_t)E + 1, sizeof(double)), 0, false};
  if (!colour || !cand || !n_cand || !best || !row || !allowed || !unary || !pair || !ends ||
      !r.ev || !r.fixed || !r.vtime || !r.etime) {
    ap_arena_free(r.ev);
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  }
  /* Colours, greedily: the smallest no neighbour has. */
  int n_colours = 0;
  for (int v = 0; v < V; v++) {
    uint64_t used = 0;
    for (int e = 0; e < E; e++) {
      int u = p->e[e].from, w = p->e[e].to;
      if (u == v && w < v && colour[w] < 64)
        used |= (uint64_t)1 << colour[w];
      if (w == v && u < v && colour[u] < 64)
        used |= (uint64_t)1 << colour[u];
    }
    colour[v] = 0;
    while (colour[v] < 64 && used >> colour[v] & 1)
      colour[v]++;
    if (colour[v] >= 63) { /* not a graph a few colours separate */
      ap_arena_free(r.ev);
      return AP_OK;
    }
    n_colours = colour[v] + 1 > n_colours ? colour[v] + 1 : n_colours;
  }
  /* Candidates: every type the strategy allows, balanced, and the state
   * chosen (which may share by device count). */
  int max_cand = 1;
  for (int l = 0; l < L; l++)
    for (int v = 0; v < V; v++) {
      size_t at = (size_t)l * V + v;
      uint8_t m = strategy_mask(p, g, v), cur = p->state[at];
      n_cand[at] = 0;
      for (int s = 0; s < 3; s++)
        if (m >> s & 1)
          cand[at][n_cand[at]++] = (uint8_t)s;
      if (cur >= 3 || !(m >> cur & 1))
        cand[at][n_cand[at]++] = cur;
      max_cand = n_cand[at] > max_cand ? n_cand[at] : max_cand;
    }
  /* With at most three colours the columns a, b and a + b (mod q) serve
   * any q; beyond, q is a prime no smaller than the colours less one. */
  bool three = n_colours <= 3;
  int q = three || max_cand > n_colours - 1 ? max_cand : n_colours - 1;
  while (!three && !is_prime(q))
    q++;
  int64_t plans = (int64_t)REFINE_SWEEPS * L * ((int64_t)q * q + 1);
  for (int jw = 0; jw < p->n_wjoint; jw++)
    plans += (int64_t)p->wjoint[jw].n_readers * L * (REFINE_MAX_CAND - 1);
  if (plans * work > REFINE_MAX_WORK) {
    ap_arena_free(r.ev);
    return AP_OK;
  }
  memcpy(best, p->state, (size_t)L * V);
  double best_step = p->step_time_s;
  ap_status st = AP_OK;
  for (int sweep = 0; sweep < REFINE_SWEEPS && st == AP_OK; sweep++) {
    bool changed = false;
    for (int l = 0; l < L && st == AP_OK; l++) {
      uint8_t(*c)[REFINE_MAX_CAND] = cand + (size_t)l * V;
      const int *nc = n_cand + (size_t)l * V;
      for (int v = 0; v < V; v++) {
        allowed[v] = 0;
        for (int i = 0; i < nc[v]; i++)
          allowed[v] |= (uint8_t)(1u << c[v][i]);
        for (int s = 0; s < AP_SEARCH_STATES; s++)
          unary[v][s] = INFINITY;
      }
      for (int e = 0; e < E; e++) {
        ends[e][0] = p->e[e].from;
        ends[e][1] = p->e[e].to;
        for (int su = 0; su < AP_SEARCH_STATES; su++)
          for (int sw = 0; sw < AP_SEARCH_STATES; sw++)
            pair[e][su][sw] = INFINITY;
      }
      for (int ra = 0; ra < q && st == AP_OK; ra++)
        for (int rb = 0; rb < q && st == AP_OK; rb++) {
          memcpy(r.fixed, best, (size_t)L * V);
          for (int v = 0; v < V; v++) {
            int k = three ? (colour[v] == 0 ? ra : colour[v] == 1 ? rb : (ra + rb) % q)
                    : colour[v] < q ? (ra + colour[v] * rb) % q
                                    : rb;
            r.fixed[(size_t)l * V + v] = c[v][k % nc[v]];
          }
          if ((st = price_fixed(&r, d)) != AP_OK)
            break;
          const uint8_t *f = r.fixed + (size_t)l * V;
          for (int v = 0; v < V; v++)
            unary[v][f[v]] = r.vtime[v];
          for (int e = 0; e < E; e++)
            pair[e][f[ends[e][0]]][f[ends[e][1]]] = r.etime[e];
        }
      if (st != AP_OK)
        break;
      ap_search_problem pr = {.n = V, .m = E, .allowed = allowed,
                              .unary = (const double(*)[AP_SEARCH_STATES])unary,
                              .ends = (const int(*)[2])ends,
                              .pair = (const double(*)[AP_SEARCH_STATES][AP_SEARCH_STATES])pair};
      double value;
      const char *opt;
      if ((st = ap_search_solve(&pr, a, row, &value, &opt)) != AP_OK)
        break;
      if (memcmp(row, best + (size_t)l * V, (size_t)V) == 0)
        continue;
      memcpy(r.fixed, best, (size_t)L * V);
      memcpy(r.fixed + (size_t)l * V, row, (size_t)V);
      if ((st = price_fixed(&r, d)) != AP_OK)
        break;
      if (r.fits && r.step < best_step) {
        memcpy(best, r.fixed, (size_t)L * V);
        best_step = r.step;
        changed = true;
      }
    }
    if (!changed)
      break;
  }
  /* A weight several vertices read (ap_wjoint: a table tied to an LM head)
   * is summed once over the boxes they all read, a cost of no one vertex
   * or edge: the times read off above cannot tell what one reader's type
   * does to it (GPT-2 tiny on tpuv3:2,tpuv2:4 kept its LM head type I at
   * three levels where type III was faster). Its readers are refined one
   * change at a time, each plan priced whole. */
  for (int jw = 0; jw < p->n_wjoint && st == AP_OK; jw++)
    for (int k = 0; k < p->wjoint[jw].n_readers && st == AP_OK; k++)
      for (int l = 0; l < L && st == AP_OK; l++) {
        size_t at = (size_t)l * V + (size_t)p->wjoint[jw].r[k].vertex;
        for (int i = 0; i < n_cand[at] && st == AP_OK; i++) {
          if (cand[at][i] == best[at])
            continue;
          memcpy(r.fixed, best, (size_t)L * V);
          r.fixed[at] = cand[at][i];
          if ((st = price_fixed(&r, d)) == AP_OK && r.fits && r.step < best_step) {
            memcpy(best, r.fixed, (size_t)L * V);
            best_step = r.step;
          }
        }
      }
  ap_arena_free(r.ev);
  if (st != AP_OK)
    return st == AP_ERR_NOMEM ? ap_error(d, st, g->path, NULL, NULL, "out of memory") : st;
  if (memcmp(best, p->state, (size_t)L * V) != 0) {
    p->fixed = best;
    st = plan_levels(p, g, NULL, d);
    p->fixed = NULL;
    if (st != AP_OK)
      return st;
  }
  p->search_priced = "program";
  return AP_OK;
}

/* A level's search keeps the tentative plan's states unless the levels'
 * pricing finds a faster plan, and on trees of more than one level that
 * pricing is not the program's: which base plan starts the rollout decides
 * where it ends (GPT-2 tiny on cpu:4096 ends at 3.82 ms from accpar's base
 * plan, at 2.87 ms from dp's). The rollout is therefore run again from
 * every other base plan that fits and was priced from the program (not
 * outpaced), and p, rolled out from the tentative plan (base[t]) already,
 * takes the states of the fastest complete plan that fits (p->start). Each
 * further rollout's rival is the fastest plan so far: one whose compute
 * alone is slower is not priced from the program. Its plans are probes (the
 * graph keeps p's types); the one taken becomes p. */
static ap_status roll_out_from_the_rest(ap_plan *p, ap_graph *g, const ap_plan *unplanned,
                                        const ap_plan *const *base, int n_bases, int t,
                                        ap_diag *d) {
  ap_plan *first = ap_arena_alloc(g->arena, sizeof *first);
  if (!first)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  *first = *p;
  p->rollout[t] = first;
  p->start = t;
  double cap;
  const ap_plan *best = first;
  bool best_fits = overflowing(first, &cap) < 0;
  for (int i = 0; i < n_bases; i++) {
    if (i == t || !base[i] || base[i]->outpaced)
      continue;
    ap_plan *q = ap_arena_alloc(g->arena, sizeof *q);
    if (!q)
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    *q = *unplanned;
    q->opts.devices = &q->dev;
    q->probe = true;
    q->rival = best;
    ap_status st = plan_levels(q, g, base[i], d);
    if (st != AP_OK)
      return st;
    p->rollout[i] = q;
    if (!q->outpaced && overflowing(q, &cap) < 0 &&
        (!best_fits || q->step_time_s < best->step_time_s)) {
      best = q;
      best_fits = true;
      p->start = i;
    }
  }
  if (best == first)
    return AP_OK;
  /* The rollout taken is priced already: it becomes the plan, which only
   * a probe's fields tell apart. Planning its states again as p gave the
   * same plan to the last bit, and took 6.8% of the instructions of
   * GPT-2 tiny's planning on cpu:4096, 16% of the small ResNet's. */
  ap_plan rolled = *p;
  *p = *best;
  p->opts.devices = &p->dev;
  p->probe = false;
  p->rival = rolled.rival;
  memcpy(p->rollout, rolled.rollout, sizeof p->rollout);
  p->start = rolled.start;
  return annotate_types(p, g, d);
}

ap_status ap_partition(ap_graph *g, const ap_plan_opts *o, ap_diag *d) {
  return ap_partition_fixed(g, o, NULL, 0, NULL, d);
}

ap_status ap_partition_fixed(ap_graph *g, const ap_plan_opts *o, const uint8_t *node_state,
                             int n_levels, const char *file, ap_diag *d) {
  if (!o || !o->devices || o->devices->n_devices < 1 || o->strategy >= AP_STRATEGY_COUNT)
    return ap_error(d, AP_ERR_USAGE, g->path, NULL, NULL, "no device array to plan for");
  ap_arena *a = g->arena;
  ap_plan *p = ap_arena_alloc(a, sizeof *p);
  if (!p)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  p->dev = *o->devices;
  p->opts = *o;
  p->opts.devices = &p->dev;
  p->optimality = "exact";
  g->plan = NULL;
  ap_status st = ap_plan_build(p, g, d);
  if (st != AP_OK)
    return st;
  p->n_levels = ap_devices_levels(&p->dev);
  if (node_state && (st = fix_states(p, g, node_state, n_levels, file, d)) != AP_OK)
    return st;
  /* Levels are searched one after another (AccPar's hierarchy), so a
   * level's search cannot see what the lower levels will choose. accpar
   * therefore plans as a rollout (docs/partition.md): it first makes
   * complete base plans, dp's, owt's, hypar's and its own with each level
   * priced by itself, takes the fastest as the tentative plan, and then
   * searches each level again, pricing every state with the tentative
   * plan's states below it, exactly as the step time is evaluated. A level
   * keeps the tentative plan's states unless it finds a faster plan, so the
   * result is never slower than any base plan; it is then rolled out from
   * the other base plans too (roll_out_from_the_rest). */
  const ap_plan *tentative = NULL; /* none for a plan read back: nothing is searched */
  static const ap_strategy bases[] = {AP_STRATEGY_DP, AP_STRATEGY_OWT, AP_STRATEGY_HYPAR,
                                      AP_STRATEGY_ACCPAR};
  enum { N_BASES = sizeof bases / sizeof bases[0] };
  _Static_assert(N_BASES == sizeof p->base / sizeof *p->base, "ap_plan.base: one per base plan");
  const ap_plan *base[N_BASES] = {NULL}; /* the base plans that fit */
  int t_i = N_BASES;                     /* the tentative plan's index in base[] */
  p->start = -1;
  if (!node_state && o->cost == AP_COST_TIME &&
      (o->strategy == AP_STRATEGY_ACCPAR || o->strategy == AP_STRATEGY_EXHAUSTIVE)) {
    /* accpar's own first: past a few devices it is by far the fastest, and
     * a base plan whose compute alone is slower than the tentative plan's
     * step is not priced from the program (outpaced). On a tie the earlier
     * of bases[] is taken. */
    static const int order[N_BASES] = {3, 0, 1, 2};
    for (size_t k = 0; k < N_BASES; k++) {
      int i = order[k];
      ap_plan *q = ap_arena_alloc(a, sizeof *q);
      if (!q)
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      *q = *p;
      q->opts.devices = &q->dev;
      q->opts.strategy = bases[i];
      q->level_only = true;
      q->rival = tentative;
      if ((st = plan_levels(q, g, NULL, d)) != AP_OK)
        return st;
      double cap;
      if (overflowing(q, &cap) < 0)
        base[i] = q;
      if (base[i] && !q->outpaced &&
          (!tentative || q->step_time_s < tentative->step_time_s ||
           (q->step_time_s == tentative->step_time_s && i < t_i))) {
        tentative = q;
        t_i = i;
      }
    }
  }
  ap_plan unplanned = *p; /* what each further rollout starts from */
  if ((st = plan_levels(p, g, tentative, d)) != AP_OK)
    return st;
  /* The levels' search prices a jointly summed weight (ap_wjoint) by each
   * reader's type, the chosen plan by the program's one sum: where that
   * makes the plan slower than the tentative one, the tentative plan's
   * states are taken (by device count, as its strategy shares), so the
   * result stays never slower than a base plan. */
  if (tentative && p->step_time_s > tentative->step_time_s &&
      (st = take_states(p, g, tentative, d)) != AP_OK)
    return st;
  if (tentative &&
      (st = roll_out_from_the_rest(p, g, &unplanned, base, N_BASES, t_i, d)) != AP_OK)
    return st;
  /* Refined against the program where that is affordable (refine_exact). */
  double cap0;
  if (tentative && p->n_levels > 1 && o->strategy == AP_STRATEGY_ACCPAR &&
      strcmp(p->bytes_priced, "program") == 0 && overflowing(p, &cap0) < 0 &&
      (st = refine_exact(p, g, live_nodes(g) * p->dev.n_devices, d)) != AP_OK)
    return st;
  /* A plan that does not fit is searched again with a price on the bytes a
   * device keeps (a Lagrangian relaxation of the memory limit), raised
   * until it fits. The dynamic program stays exact for the priced
   * objective, not for the constrained one: the plan says so. Strategies
   * with one type per layer (dp) have nothing to trade. */
  double cap;
  int bad = overflowing(p, &cap);
  for (int round = 0; bad >= 0 && round < 12; round++) {
    p->mem_penalty = round ? p->mem_penalty * 8 : 1e-13;
    if ((st = plan_levels(p, g, NULL, d)) != AP_OK)
      return st;
    bad = overflowing(p, &cap);
    if (bad < 0)
      p->optimality = ap_arena_printf(a, "bounded: memory priced at %.3g s/byte to fit",
                                      p->mem_penalty);
  }
  /* Priced memory trades time for bytes over the whole plan, and can end
   * slower than a base plan that fits as it is (small_cnn on
   * tpuv3:4,tpuv2:4 with 6000 bytes a device: 36.1 us against hypar's
   * 32.1 us), or not fit at all where one does: the fastest such plan is
   * then taken, so that the result stays never slower than a base plan
   * that fits, and fits wherever one does. */
  if (p->mem_penalty > 0) { /* the search was repeated with memory priced */
    ap_plan searched = *p; /* plan_levels allocates its arrays afresh */
    bool fits = bad < 0, searched_fits = fits;
    double penalty = p->mem_penalty;
    const ap_plan *taken = NULL;
    for (int i = 0; i < N_BASES; i++) {
      /* An outpaced base plan was priced by closed forms: its compute is
       * what bounds its step from below. */
      double floor = base[i] && base[i]->outpaced ? base[i]->compute_time_s
                     : base[i]                    ? base[i]->step_time_s
                                                  : 0;
      if (!base[i] || (fits && !(floor < searched.step_time_s)))
        continue;
      p->mem_penalty = 0;
      if ((st = take_states(p, g, base[i], d)) != AP_OK)
        return st;
      if (overflowing(p, &cap) < 0 && (!fits || p->step_time_s < searched.step_time_s)) {
        taken = base[i];
        searched = *p;
        fits = true;
      }
    }
    *p = searched;
    bad = overflowing(p, &cap);
    if (taken)
      p->optimality = ap_arena_printf(a, "bounded: %s's plan, %s the search with memory "
                                         "priced at %.3g s/byte to fit",
                                      ap_strategy_name(taken->opts.strategy),
                                      searched_fits ? "faster than" : "where nothing fitted in",
                                      penalty);
  }
  if (bad >= 0) {
    const ap_class *c = &p->cls[p->n_levels][bad];
    return ap_error(d, AP_ERR_NO_FIT, g->path, NULL, NULL,
                    "no %s plan fits: a %s device needs %.0f bytes, more than its %.0f "
                    "(--mem-limit or the device's capacity)",
                    ap_strategy_name(o->strategy), p->dev.kinds[c->g.kind].name,
                    p->class_mem[bad], cap);
  }
  if (!p->optimality)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  /* Where the rollout compared its complete plans (the base plans and its
   * own) by closed forms, past EXACT_MAX_WORK, the plan says so. */
  if (tentative && strcmp(p->bytes_priced, "closed forms") == 0)
    p->search_priced = "closed forms";
  for (int i = 0; i < N_BASES; i++)
    p->base[i] = base[i];
  if (node_state) /* nothing was searched */
    p->search_priced = "read back";
  g->plan = p;
  return AP_OK;
}

bool ap_plan_get(const ap_graph *g, ap_plan_summary *out) {
  const ap_plan *p = g->plan;
  if (!p)
    return false;
  int layers = 0;
  for (int v = 0; v < p->n_vertices; v++)
    layers += !p->v[v].join;
  *out = (ap_plan_summary){.strategy = p->opts.strategy,
                           .n_levels = p->n_levels,
                           .n_layers = layers,
                           .step_time_s = p->step_time_s,
                           .compute_time_s = p->compute_time_s,
                           .comm_time_s = p->comm_time_s,
                           .comm_bytes = p->comm_bytes,
                           .paper_cost = p->paper_cost,
                           .max_mem_bytes = p->max_mem_bytes,
                           .optimality = p->optimality};
  return true;
}

double ap_plan_device_mem(const ap_graph *g, int dev) {
  const ap_plan *p = g->plan;
  if (!p || dev < 0 || dev >= p->dev.n_devices)
    return 0;
  return p->class_mem[p->dev_class[dev]];
}

double ap_plan_model_device_bytes(const ap_plan *p, int dev, bool train) {
  if (!p || dev < 0 || dev >= p->dev.n_devices)
    return -1;
  return train ? p->dev_step_bytes[dev] : p->dev_fwd_bytes[dev];
}

double ap_plan_level_device_bytes(const ap_plan *p, int dev, bool train) {
  if (!p || dev < 0 || dev >= p->dev.n_devices)
    return -1;
  return train ? p->level_step_bytes[dev] : p->level_fwd_bytes[dev];
}
