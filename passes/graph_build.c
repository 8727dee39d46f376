/* From the IR to the partition problem: which nodes are layers, which
 * weightless nodes join several activations, and how a layout travels
 * through the weightless nodes in between. Every question about an
 * operator's axes goes to its axis rule (ir/axes.c), the rule the
 * distribution of boxes (distribute.c) follows too. */
#include <string.h>

#include "kernels.h"
#include "passes/distribute.h"
#include "passes/passes.h"

/* Layer roles: where the activation and the weight enter, and which
 * dimensions are B, I and O. An embedding (Gather of rows of a float table
 * by run-time indices) is the product of the indices' one-hot rows with the
 * table: B the indices' dims, I the table's rows, O its columns. */
typedef enum layer_role {
  ROLE_NONE,
  ROLE_CONV,
  ROLE_CONV_T,
  ROLE_GEMM,
  ROLE_MATMUL,
  ROLE_EMBED
} layer_role;

static int64_t dim_of(const ap_graph *g, int v, int d) { return g->values[v].dims[d]; }
static int rank_of(const ap_graph *g, int v) { return g->values[v].rank; }

/* A layer's activation and weight slots. */
static int act_slot(layer_role r) { return r == ROLE_EMBED ? 1 : 0; }
static int weight_slot(layer_role r) { return r == ROLE_EMBED ? 0 : 1; }

/* A node is a layer when an activation meets a weight (an initializer, a
 * constant or a value computed from them alone, such as a tied embedding
 * table's transpose) at the operator's weight slot. */
static layer_role role_of(const ap_graph *g, const ap_node *n, const bool *act) {
  layer_role r;
  switch (n->op) {
  case AP_OP_CONV:
    r = ROLE_CONV;
    break;
  case AP_OP_CONV_TRANSPOSE:
    r = ROLE_CONV_T;
    break;
  case AP_OP_GEMM:
    r = ROLE_GEMM;
    break;
  case AP_OP_MATMUL:
    r = ROLE_MATMUL;
    break;
  case AP_OP_GATHER:
    r = ROLE_EMBED;
    break;
  default:
    return ROLE_NONE;
  }
  int a = act_slot(r), w = weight_slot(r);
  if (n->n_in <= 1 || n->in[a] < 0 || n->in[w] < 0 || !act[n->in[a]] || act[n->in[w]])
    return ROLE_NONE;
  if (r == ROLE_EMBED) {
    const ap_value *t = &g->values[n->in[w]];
    int64_t axis = ap_attr_int(n, "axis", 0);
    if (!ap_dtype_is_float(t->dtype) || t->rank != 2 || (axis != 0 && axis != -2))
      return ROLE_NONE;
  }
  return r;
}

static bool shape_known(const ap_graph *g, int v) { return ap_value_shape_known(&g->values[v]); }

static int64_t lcm64(int64_t a, int64_t b) {
  if (a <= 1)
    return b > 1 ? b : 1;
  if (b <= 1)
    return a;
  return a / ap_gcd(a, b) * b;
}

/* Where a vertex's output dims are in a value it reaches through chain ops:
 * index t of the vertex's dim c is index t * num[c] / den[c] of the
 * value's dim map[c] (reshapes merging or splitting it scale the index). */
typedef struct src {
  int vertex;     /* -1: not reached from any vertex (graph inputs) */
  int map[2];
  int64_t num[2], den[2];
} src;

static ap_status need_shape(ap_graph *g, const ap_node *n, int v, ap_diag *d) {
  if (!shape_known(g, v))
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "the shape of '%s' is not known; planning needs every shape (bind the batch with --batch N)",
                    g->values[v].name);
  return AP_OK;
}

/* The output axis a chain op carries input axis a to, or -1 (the op needs
 * it whole); a reshape scales the index and asks for a unit of the
 * vertex's dim (its shares' granularity) so that slabs stay slabs. */
static int chain_axis(ap_graph *g, const ap_node *n, int slot, int a, src *s, int c,
                      int64_t *unit) {
  *unit = 1;
  if (a < 0 || !ap_axes_boxwise(g, n))
    return -1;
  const ap_value *x = &g->values[n->in[slot]], *y = &g->values[n->out[0]];
  if (ap_op_table[n->op].axes != AP_AXES_RESHAPE) {
    int j = ap_axes_in_to_out(g, n, slot, a);
    return j >= 0 && ap_axes_out_split(g, n, j) ? j : -1;
  }
  int64_t in_step, out_step;
  int q = ap_axes_reshape(x, y, a, &in_step, &out_step);
  if (q < 0)
    return -1;
  /* Vertex index t is value index t * num / den, which starts at flat
   * offset t * num * in_step / den of the block: a slab bound carries over
   * when that is a multiple of out_step. */
  int64_t num = s->num[c] * in_step, den = s->den[c] * out_step, g0 = ap_gcd(num, den);
  *unit = den / ap_gcd(num, den);
  s->num[c] = num / g0;
  s->den[c] = den / g0;
  return q;
}

/* The kernel library's description of a 2-D float convolution, from the
 * shapes and attributes (the pads' split from the attribute, else the
 * shapes' total halved as SAME_UPPER does), or NULL. */
static const apk_conv2d *conv_of(ap_graph *g, const ap_node *n) {
  const ap_value *x = &g->values[n->in[0]], *w = &g->values[n->in[1]],
                 *y = &g->values[n->out[0]];
  if (x->rank != 4 || w->rank != 4 || y->rank != 4 || x->dtype != AP_DT_FLOAT)
    return NULL;
  int ns, nd, np;
  const int64_t *st = ap_attr_ints(n, "strides", &ns), *dl = ap_attr_ints(n, "dilations", &nd),
                *pads = ap_attr_ints(n, "pads", &np);
  apk_conv2d *c = ap_arena_array(g->arena, 1, sizeof *c);
  if (!c)
    return NULL;
  int64_t pad[4], s[2], d[2];
  for (int a = 0; a < 2; a++) {
    s[a] = st && ns == 2 ? st[a] : 1;
    d[a] = dl && nd == 2 ? dl[a] : 1;
    int64_t total = (y->dims[2 + a] - 1) * s[a] + d[a] * (w->dims[2 + a] - 1) + 1 - x->dims[2 + a];
    if (total < 0)
      total = 0;
    pad[a] = pads && np == 4 ? pads[a] : total / 2;
    pad[2 + a] = pads && np == 4 ? pads[2 + a] : total - pad[a];
  }
  c->stride_h = (int)s[0];
  c->stride_w = (int)s[1];
  c->dilation_h = (int)d[0];
  c->dilation_w = (int)d[1];
  c->batch = (int)x->dims[0];
  c->in_channels = (int)x->dims[1];
  c->in_h = (int)x->dims[2];
  c->in_w = (int)x->dims[3];
  c->out_channels = (int)w->dims[0];
  c->kernel_h = (int)w->dims[2];
  c->kernel_w = (int)w->dims[3];
  c->pad_top = (int)pad[0];
  c->pad_left = (int)pad[1];
  c->pad_bottom = (int)pad[2];
  c->pad_right = (int)pad[3];
  c->groups = (int)ap_attr_int(n, "group", 1);
  return c;
}

/* Fills a layer vertex from its role. */
static void layer_ports(ap_graph *g, const ap_node *n, layer_role role, ap_vertex *vx,
                        const src *from) {
  int x = n->in[act_slot(role)], w = n->in[weight_slot(role)], out = n->out[0];
  int r = rank_of(g, x), rw = rank_of(g, w), R = rank_of(g, out);
  vx->weight = w;
  vx->port[1].value = x;
  double macs = 0;
  int64_t out_numel = ap_numel(R, g->values[out].dims);
  switch (role) {
  case ROLE_CONV:
  case ROLE_CONV_T: {
    vx->port[1].dim[0] = 0, vx->port[1].dim[1] = 1;
    vx->port[0].dim[0] = 0, vx->port[0].dim[1] = 1;
    vx->w_dim[0] = role == ROLE_CONV ? 1 : 0;
    vx->w_dim[1] = role == ROLE_CONV ? 0 : 1;
    double kernel = 1;
    for (int k = 2; k < rw; k++)
      kernel *= (double)dim_of(g, w, k);
    if (role == ROLE_CONV)
      macs = (double)out_numel * (double)dim_of(g, w, 1) * kernel;
    else
      macs = (double)ap_numel(r, g->values[x].dims) * (double)dim_of(g, w, 1) * kernel;
    vx->conv = role == ROLE_CONV ? conv_of(g, n) : NULL;
    break;
  }
  case ROLE_GEMM: {
    bool ta = ap_attr_int(n, "transA", 0) != 0, tb = ap_attr_int(n, "transB", 0) != 0;
    vx->port[1].dim[0] = ta ? 1 : 0, vx->port[1].dim[1] = ta ? 0 : 1;
    vx->port[0].dim[0] = 0, vx->port[0].dim[1] = 1;
    vx->w_dim[0] = tb ? 1 : 0, vx->w_dim[1] = tb ? 0 : 1;
    macs = (double)out_numel * (double)dim_of(g, x, ta ? 0 : 1);
    break;
  }
  case ROLE_MATMUL: /* a weight on the right; a 1-D weight has no O, a 1-D input no B */
    vx->port[1].dim[0] = r >= 2 ? 0 : -1, vx->port[1].dim[1] = r - 1;
    vx->port[0].dim[0] = r >= 2 ? 0 : -1;
    vx->port[0].dim[1] = rw >= 2 ? R - 1 : -1;
    vx->w_dim[0] = rw >= 2 ? rw - 2 : 0, vx->w_dim[1] = rw >= 2 ? rw - 1 : -1;
    macs = (double)out_numel * (double)dim_of(g, x, r - 1);
    break;
  case ROLE_EMBED: /* out[ids..., :] = table[ids, :] */
    vx->port[1].dim[0] = r >= 1 ? 0 : -1, vx->port[1].dim[1] = -1;
    vx->port[0].dim[0] = r >= 1 ? 0 : -1, vx->port[0].dim[1] = R - 1;
    vx->w_dim[0] = 0, vx->w_dim[1] = 1;
    /* Forward reads a row and writes it, backward reads the error and adds
     * it into the gradient's row: memory, not arithmetic. */
    vx->traffic = 4.0 * (double)out_numel * (double)ap_dtype_size(g->values[out].dtype);
    break;
  case ROLE_NONE:
    break;
  }
  for (int p = 0; p < 2; p++)
    for (int c = 0; c < 2; c++)
      vx->port[p].unit[c] = 1;
  /* An embedding's indices carry no error; nor does a graph input. */
  vx->first = role == ROLE_EMBED || from[x].vertex < 0;
  vx->flops = 2 * macs * (vx->first ? 2 : 3);
  vx->allowed = 0;
  if (vx->port[1].dim[0] >= 0 && vx->port[0].dim[0] >= 0)
    vx->allowed |= 1;
  if (ap_attr_int(n, "group", 1) == 1) {
    if (vx->port[1].dim[1] >= 0 || role == ROLE_EMBED)
      vx->allowed |= 2;
    if (vx->port[0].dim[1] >= 0)
      vx->allowed |= 4;
  }
}

/* The input axis of slot that runs along output axis j of a join, or -1. */
static int join_in_axis(ap_graph *g, const ap_node *n, int slot, int j) {
  const ap_value *x = &g->values[n->in[slot]];
  if (j < 0)
    return -1;
  if (ap_op_table[n->op].axes == AP_AXES_CONCAT) {
    int axis = (int)ap_attr_int(n, "axis", 0);
    if (axis < 0)
      axis += x->rank;
    if (j == axis)
      return j; /* a concatenated axis is split input by input */
  }
  for (int a = 0; a < x->rank; a++)
    if (ap_axes_in_to_out(g, n, slot, a) == j)
      return a;
  return -1;
}

/* A join's output dims: dim[0] the batch, dim[1] where the first input
 * reached from a vertex carries that vertex's feature split (so a layout
 * travels through the join for free; attention's heads), else the
 * operator's feature axis (MatMul's columns, the channels). */
static void join_ports(ap_graph *g, const ap_node *n, ap_vertex *vx, const bool *act,
                       const src *from) {
  int R = rank_of(g, n->out[0]);
  bool box = ap_axes_boxwise(g, n);
  int d0 = box && R >= 1 && ap_axes_out_split(g, n, 0) ? 0 : -1, d1 = -1;
  for (int k = 0; k < n->n_in && box && d1 < 0; k++) {
    int x = n->in[k];
    if (x < 0 || !ap_axes_data_slot(n, k) || !act[x] || from[x].vertex < 0)
      continue;
    int j = from[x].map[1] >= 0 ? ap_axes_in_to_out(g, n, k, from[x].map[1]) : -1;
    if (ap_op_table[n->op].axes == AP_AXES_CONCAT && from[x].map[1] >= 0 && j < 0)
      j = from[x].map[1]; /* along the axis: split input by input */
    if (j >= 0 && j != d0 && ap_axes_out_split(g, n, j))
      d1 = j;
  }
  if (d1 < 0 && box) {
    int j = n->op == AP_OP_MATMUL ? R - 1 : 1;
    if (R >= 2 && j != d0 && ap_axes_out_split(g, n, j))
      d1 = j;
  }
  vx->port[0].dim[0] = d0;
  vx->port[0].dim[1] = d1;
  int pi = 1;
  for (int k = 0; k < n->n_in; k++) {
    int x = n->in[k];
    if (x < 0 || !ap_axes_data_slot(n, k) || !act[x])
      continue;
    ap_port *pt = &vx->port[pi++];
    pt->value = x;
    for (int c = 0; c < 2; c++)
      pt->dim[c] = join_in_axis(g, n, k, vx->port[0].dim[c]);
    if (n->op == AP_OP_MATMUL && k == 0)
      vx->flops = 6.0 * (double)ap_numel(R, g->values[n->out[0]].dims) *
                  (double)dim_of(g, x, rank_of(g, x) - 1);
  }
  for (int p = 0; p < vx->n_ports; p++)
    for (int c = 0; c < 2; c++)
      vx->port[p].unit[c] = 1;
  vx->allowed = 4 | (d0 >= 0 ? 1 : 0) | (d1 >= 0 ? 2 : 0);
}

/* Makes the units of the dims whose boxes must agree equal: a layer's B in
 * its input and output, every port of a join. Units do not travel along
 * edges: a consumer splits at its own shares and the conversion between
 * them is priced. */
static void settle_units(ap_plan *p) {
  for (int v = 0; v < p->n_vertices; v++) {
    ap_vertex *vx = &p->v[v];
    for (int c = 0; c < 2; c++) {
      if (!vx->join && c == 1)
        continue;
      int64_t u = 1;
      for (int q = 0; q < vx->n_ports; q++)
        if (vx->port[q].dim[c] >= 0)
          u = lcm64(u, vx->port[q].unit[c]);
      for (int q = 0; q < vx->n_ports; q++)
        vx->port[q].unit[c] = u;
    }
  }
}

/* The dim of weight w that follows the feature dimension of size n (a
 * bias or a normalization's scale broadcast along it), or -1. */
static int feature_dim(const ap_value *w, int64_t n) {
  for (int i = w->rank - 1; i >= 0; i--)
    if (w->dims[i] == n && n > 1)
      return i;
  return -1;
}

/* Whether value u is weight w or computed from it (a slice of a fused
 * weight, a tied table's transpose); axis[b]: u's axis that w's axis b
 * follows, or -1 where u is computed from the whole axis. The boxes follow
 * the distribution's (distribute.c, narrow_weight_chains): a node computing
 * a weight's value narrows along the axes its operator carries through. */
static bool weight_axes(const ap_graph *g, const bool *vnode, int w, int u, int8_t *axis,
                        int depth) {
  if (u == w) {
    for (int b = 0; b < g->values[w].rank; b++)
      axis[b] = (int8_t)b;
    return true;
  }
  int ni = g->values[u].producer;
  if (ni < 0 || vnode[ni] || depth > 16)
    return false;
  const ap_node *n = &g->nodes[ni];
  int8_t in_axis[AP_MAX_RANK];
  for (int i = 0; i < n->n_in; i++) {
    if (n->in[i] < 0 || !weight_axes(g, vnode, w, n->in[i], in_axis, depth + 1))
      continue;
    bool narrowed = !n->dead && n->n_out == 1 && !g->values[u].data &&
                    !g->values[u].is_graph_output && ap_axes_boxwise(g, n) &&
                    ap_op_table[n->op].axes != AP_AXES_RESHAPE;
    for (int b = 0; b < g->values[w].rank; b++) {
      int j = narrowed && in_axis[b] >= 0 ? ap_axes_in_to_out(g, n, i, in_axis[b]) : -1;
      axis[b] = (int8_t)(j >= 0 && ap_axes_out_split(g, n, j) ? j : -1);
    }
    return true;
  }
  return false;
}

/* What a training step adds to the forward pass (ap_train_roles): each
 * vertex's other trainable weights, a layer's bias and its chain ops'
 * weights (a normalization's scale and shift), whose gradients the step
 * sums over the devices holding copies; and where the loss reads. */
static ap_status gradient_sums(ap_plan *p, ap_graph *g, const bool *act, ap_diag *d) {
  uint64_t *want;
  bool *trainable;
  ap_status st = ap_train_roles(g, &want, &trainable, d);
  if (st != AP_OK)
    return st;
  /* A value computed from one trainable weight by nodes reading no
   * activation (a slice of a fused bias, a position table's rows) is summed
   * as a piece of that weight: the slice a Slice reads, else the whole
   * weight, which the program holds whole for such a reader (a Gather's
   * table); priced[v] is the value whose box is summed for v. */
  bool *summed = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *summed);
  int *priced = ap_arena_array(g->arena, (size_t)g->n_values + 1, sizeof *priced);
  if (!summed || !priced)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < g->n_values; v++) {
    summed[v] = trainable[v];
    priced[v] = v;
  }
  for (int ni = 0; ni < g->n_nodes; ni++) {
    const ap_node *n = &g->nodes[ni];
    if (n->dead || n->n_in < 1 || n->in[0] < 0 || !summed[n->in[0]])
      continue;
    bool reads_act = false;
    for (int i = 0; i < n->n_in; i++)
      reads_act |= n->in[i] >= 0 && act[n->in[i]];
    for (int o = 0; o < n->n_out && !reads_act; o++)
      if (n->out[o] >= 0 && ap_dtype_is_float(g->values[n->out[o]].dtype)) {
        summed[n->out[o]] = true;
        priced[n->out[o]] = n->op == AP_OP_SLICE ? n->out[o] : priced[n->in[0]];
      }
  }
  for (int v = 0; v < p->n_vertices; v++) {
    ap_vertex *vx = &p->v[v];
    vx->n_wsum = 0;
    int cap = 0;
    bool gathered = false; /* a chain op before gathered the features */
    for (int k = -1; k < vx->n_chain; k++) {
      const ap_node *n = &g->nodes[k < 0 ? vx->node : vx->chain[k].node];
      if (k >= 0)
        gathered |= vx->chain[k].gathers[1];
      int fdim = k < 0 ? vx->port[0].dim[1] : vx->chain[k].in_map[1];
      const ap_value *fv = &g->values[k < 0 ? vx->port[0].value : vx->chain[k].in_value];
      for (int i = 0; i < n->n_in; i++) {
        int w = n->in[i];
        if (w < 0 || w == vx->weight || !summed[w])
          continue;
        const ap_value *wv = &g->values[priced[w]];
        ap_wsum ws = {.value = priced[w], .dim = -1};
        if (!gathered && fdim >= 0) {
          ws.dim = feature_dim(wv, fv->dims[fdim]);
          if (ws.dim >= 0)
            ws.scale = (double)wv->dims[ws.dim] / (double)g->values[vx->port[0].value]
                                                       .dims[vx->port[0].dim[1]];
        }
        if (!ap_arena_grow(g->arena, (void **)&vx->wsum, &cap, vx->n_wsum + 1, sizeof ws))
          return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
        vx->wsum[vx->n_wsum++] = ws;
      }
    }
  }
  /* Weights summed once for several readers (ap_wjoint). */
  bool *vnode = ap_arena_array(g->arena, (size_t)g->n_nodes + 1, sizeof *vnode);
  if (!vnode)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < p->n_vertices; v++)
    vnode[p->v[v].node] = true;
  p->n_wjoint = 0;
  int jcap = 0;
  for (int w = 0; w < g->n_values; w++) {
    if (!trainable[w])
      continue;
    ap_wjoint j = {.value = w};
    int rcap = 0;
    bool derived = false;
    for (int v = 0; v < p->n_vertices; v++) {
      ap_vertex *vx = &p->v[v];
      for (int k = -1; k < vx->n_wsum; k++) {
        int u = k < 0 ? vx->weight : vx->wsum[k].value;
        ap_wreader r = {.vertex = v, .wsum = k};
        if (u < 0 || !weight_axes(g, vnode, w, u, r.axis, 0))
          continue;
        if (!ap_arena_grow(g->arena, (void **)&j.r, &rcap, j.n_readers + 1, sizeof r))
          return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
        j.r[j.n_readers++] = r;
        derived |= u != w;
      }
    }
    if (j.n_readers < 2 && !derived)
      continue;
    for (int i = 0; i < j.n_readers; i++) {
      ap_vertex *vx = &p->v[j.r[i].vertex];
      if (j.r[i].wsum < 0)
        vx->weight_joint = true;
      else
        vx->wsum[j.r[i].wsum].joint = true;
    }
    if (!ap_arena_grow(g->arena, (void **)&p->wjoint, &jcap, p->n_wjoint + 1, sizeof j))
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    p->wjoint[p->n_wjoint++] = j;
  }
  p->train_want = want;
  p->trainable = trainable;
  p->layers_train = true;
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_vertex *vx = &p->v[v];
    p->layers_train &=
        vx->join || vx->weight_joint || (vx->weight >= 0 && trainable[vx->weight]);
  }
  /* The vertex computing graph output 0, which the loss reads by rows. */
  p->loss_vertex = -1;
  int y = g->n_outputs > 0 ? g->outputs[0] : -1;
  for (int v = 0; v < p->n_vertices && y >= 0; v++) {
    const ap_vertex *vx = &p->v[v];
    for (int k = -1; k < vx->n_chain; k++)
      if ((k < 0 ? vx->port[0].value : vx->chain[k].out_value) == y) {
        p->loss_vertex = v;
        for (int c = 0; c < 2; c++)
          p->loss_map[c] = k < 0 ? vx->port[0].dim[c] : vx->chain[k].out_map[c];
      }
  }
  return AP_OK;
}

ap_status ap_plan_build(ap_plan *p, ap_graph *g, ap_diag *d) {
  ap_arena *a = g->arena;
  int nv = g->n_values;
  bool *act = ap_arena_array(a, (size_t)nv + 1, sizeof *act);
  src *from = ap_arena_array(a, (size_t)nv + 1, sizeof *from);
  p->v = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof *p->v);
  if (!act || !from || !p->v)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int v = 0; v < nv; v++)
    from[v].vertex = -1;
  /* Graph inputs fed at run time are activations when some node reads them
   * as data, whatever their type (token ids, masks); weights that are fed
   * (ONNX node tests, accpar-zoo --no-weights) are weights. */
  for (int i = 0; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    for (int k = 0; k < n->n_in; k++) {
      int x = n->in[k];
      if (x >= 0 && ap_axes_data_slot(n, k) && g->values[x].kind == AP_VAL_INPUT &&
          !g->values[x].data && !ap_value_is_fed_weight(g, x))
        act[x] = true;
    }
  }
  p->n_vertices = 0;
  p->n_edges = 0;
  int *chain_cap = ap_arena_array(a, (size_t)g->n_nodes + 1, sizeof(int)), edge_cap = 0;
  int first_weighted = -1;
  if (!chain_cap)
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  for (int i = 0; i < g->n_nodes; i++) {
    ap_node *n = &g->nodes[i];
    if (n->dead)
      continue;
    if (n->op == AP_OP_UNKNOWN)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "operator not supported");
    n->types = NULL;
    n->n_types = 0;
    if (first_weighted < 0 && ap_op_table[n->op].kind == AP_OPK_LAYER)
      first_weighted = i;
    int n_act = 0, first_act = -1;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && ap_axes_data_slot(n, k) && act[n->in[k]]) {
        n_act++;
        if (first_act < 0)
          first_act = k;
      }
    if (!n_act || ap_op_table[n->op].kind == AP_OPK_CONST)
      continue;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0)
        act[n->out[k]] = true;
    int out = n->out[0];
    ap_status st = need_shape(g, n, out, d);
    if (st != AP_OK)
      return st;
    layer_role role = role_of(g, n, act);
    if (role == ROLE_NONE && n_act == 1) { /* a chain op: carries its producer's layout */
      int x = n->in[first_act];
      if ((st = need_shape(g, n, x, d)) != AP_OK)
        return st;
      src s = from[x];
      if (s.vertex < 0)
        continue; /* preprocessing of a graph input: every device computes it whole */
      ap_chain_op op = {.node = i, .in_value = x, .out_value = out};
      ap_vertex *pv = &p->v[s.vertex];
      for (int c = 0; c < 2; c++) {
        int64_t unit;
        op.in_map[c] = s.map[c];
        op.out_map[c] = chain_axis(g, n, first_act, s.map[c], &s, c, &unit);
        op.gathers[c] = s.map[c] >= 0 && op.out_map[c] < 0;
        if (op.out_map[c] >= 0)
          pv->port[0].unit[c] = lcm64(pv->port[0].unit[c], unit);
        s.map[c] = op.out_map[c];
      }
      if (!ap_arena_grow(a, (void **)&pv->chain, &chain_cap[s.vertex], pv->n_chain + 1,
                         sizeof op))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      pv->chain[pv->n_chain++] = op;
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0)
          from[n->out[k]] = s;
      continue;
    }
    /* A vertex. */
    int id = p->n_vertices++;
    ap_vertex *vx = &p->v[id];
    memset(vx, 0, sizeof *vx);
    vx->node = i;
    vx->join = role == ROLE_NONE;
    vx->weight = -1;
    vx->n_ports = vx->join ? 1 + n_act : 2;
    vx->port = ap_arena_array(a, (size_t)vx->n_ports, sizeof *vx->port);
    if (!vx->port)
      return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
    vx->port[0].value = out;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && (ap_axes_data_slot(n, k) || !vx->join) &&
          (st = need_shape(g, n, n->in[k], d)) != AP_OK)
        return st;
    if (vx->join)
      join_ports(g, n, vx, act, from);
    else
      layer_ports(g, n, role, vx, from);
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) {
        src *s = &from[n->out[k]];
        s->vertex = id;
        for (int c = 0; c < 2; c++) {
          s->map[c] = vx->port[0].dim[c];
          s->num[c] = s->den[c] = 1;
        }
      }
    /* Edges from the producers of its activation ports. */
    for (int pi = 1; pi < vx->n_ports; pi++) {
      src s = from[vx->port[pi].value];
      if (s.vertex < 0)
        continue;
      ap_edge e = {.from = s.vertex, .to = id, .port = pi};
      for (int c = 0; c < 2; c++) {
        e.map[c] = s.map[c];
        e.num[c] = s.num[c];
        e.den[c] = s.den[c];
      }
      if (!ap_arena_grow(a, (void **)&p->e, &edge_cap, p->n_edges + 1, sizeof e))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      p->e[p->n_edges++] = e;
    }
  }
  if (p->n_vertices == 0 && first_weighted >= 0) {
    const ap_node *n = &g->nodes[first_weighted];
    return ap_error(d, AP_ERR_INVALID, g->path, n->name, n->op_type,
                    "no run-time input reaches this layer or any other, so there is nothing "
                    "to partition (are the inputs bound as constants?)");
  }
  settle_units(p);
  ap_status st = gradient_sums(p, g, act, d);
  if (st != AP_OK)
    return st;
  p->n_ports = 0;
  for (int v = 0; v < p->n_vertices; v++) {
    p->v[v].ext_base = p->n_ports;
    p->n_ports += p->v[v].n_ports;
  }
  return AP_OK;
}

void ap_plan_rows(const ap_plan *p, const ap_graph *g, int *row_of_node, int *row_of_value) {
  for (int n = 0; n < g->n_nodes; n++)
    row_of_node[n] = -1;
  for (int x = 0; x < g->n_values; x++)
    row_of_value[x] = -1;
  /* p may be a copy's plan (a one-device program's): g's indices only. */
#define SET(a, n, i, v)                                                                    \
  do {                                                                                    \
    if ((i) >= 0 && (i) < (n))                                                            \
      (a)[i] = (v);                                                                       \
  } while (0)
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_vertex *vx = &p->v[v];
    SET(row_of_node, g->n_nodes, vx->node, v);
    for (int k = 0; k < vx->n_chain; k++)
      SET(row_of_node, g->n_nodes, vx->chain[k].node, v);
    SET(row_of_value, g->n_values, vx->weight, v);
    for (int k = 0; k < vx->n_wsum; k++)
      SET(row_of_value, g->n_values, vx->wsum[k].value, v);
  }
  for (int j = 0; j < p->n_wjoint; j++)
    if (p->wjoint[j].n_readers > 0)
      SET(row_of_value, g->n_values, p->wjoint[j].value, p->wjoint[j].r[0].vertex);
#undef SET
  for (int x = 0; x < g->n_values; x++)
    if (row_of_value[x] < 0 && g->values[x].producer >= 0)
      row_of_value[x] = row_of_node[g->values[x].producer];
}
