/* The builders of accpar-zoo: one IR node (plus its weights) per call, and
 * the seeded PRNG the weights come from. */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "samples/zoo.h"

/* ---- PCG32 ---- */

void zoo_rng_seed(zoo_rng *r, uint64_t seed, uint64_t stream) {
  r->state = 0;
  r->inc = (stream << 1) | 1;
  zoo_rng_next(r);
  r->state += seed;
  zoo_rng_next(r);
}

uint32_t zoo_rng_next(zoo_rng *r) {
  uint64_t old = r->state;
  r->state = old * 6364136223846793005ull + r->inc;
  uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
  uint32_t rot = (uint32_t)(old >> 59);
  return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
}

float zoo_rng_uniform(zoo_rng *r, float lo, float hi) {
  /* 24 bits: every value is exact in a float and strictly below 1. */
  float u = (float)(zoo_rng_next(r) >> 8) * (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

float zoo_rng_normal(zoo_rng *r, float mean, float std) {
  /* Box-Muller on two draws, the first kept away from 0 (log 0). */
  double u1 = ((double)(zoo_rng_next(r) >> 8) + 1.0) / 16777217.0;
  double u2 = (double)(zoo_rng_next(r) >> 8) / 16777216.0;
  return mean + std * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* ---- the graph ---- */

bool zoo_begin(zoo *z, const char *name, const char *path, const zoo_opts *o) {
  memset(z, 0, sizeof *z);
  z->opts = *o;
  /* Every model restarts the stream, so a model's weights depend on the seed
   * only, not on which other models the same run writes. */
  zoo_rng_seed(&z->rng, o->seed, 0x7a6f6fu);
  if (!(z->g = ap_graph_new(path)))
    return false;
  ap_graph *g = z->g;
  /* ir_version 7 and opset 13: the newest pair onnx 1.12 (Debian's python3)
   * checks and infers, and what PyTorch 1.x exports by default. */
  g->ir_version = 7;
  g->opset = 13;
  g->opsets = ap_arena_alloc(g->arena, sizeof *g->opsets);
  g->name = ap_arena_strdup(g->arena, name);
  g->producer_name = "accpar-zoo";
  g->producer_version = ap_version();
  if (!g->opsets || !g->name) {
    ap_graph_free(g);
    z->g = NULL;
    return false;
  }
  g->opsets[0] = (ap_opset){.domain = "", .version = 13};
  g->n_opsets = 1;
  return true;
}

const char *zoo_name(zoo *z, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof buf)
    ap_die("zoo name too long: %s", fmt);
  const char *s = ap_arena_strdup(z->g->arena, buf);
  if (!s) {
    z->failed = true;
    return "";
  }
  return s;
}

const zt zoo_failed = {.v = -1};
#define failed_zt zoo_failed

/* A new value named name; a duplicate name is a bug in a model builder. */
static int new_value(zoo *z, const char *name, ap_value_kind kind) {
  if (z->failed)
    return -1;
  if (ap_graph_find(z->g, name) >= 0)
    ap_die("zoo: value '%s' defined twice", name);
  int v = ap_graph_add_value(z->g, name, kind);
  if (v < 0)
    z->failed = true;
  return v;
}

static void set_shape(ap_value *val, int rank, const int64_t *dims, const char *batch_sym) {
  if (val->dtype == AP_DT_UNDEFINED)
    val->dtype = AP_DT_FLOAT;
  val->rank = rank;
  for (int i = 0; i < rank; i++)
    val->dims[i] = dims[i];
  val->sym[0] = batch_sym;
}

zt zoo_input(zoo *z, int rank, const int64_t *dims) {
  zt x = {.rank = rank + 1};
  x.d[0] = z->opts.batch > 0 ? z->opts.batch : -1;
  for (int i = 0; i < rank; i++)
    x.d[i + 1] = dims[i];
  if ((x.v = new_value(z, "input", AP_VAL_INPUT)) < 0)
    return failed_zt;
  set_shape(&z->g->values[x.v], x.rank, x.d, z->opts.batch > 0 ? NULL : "N");
  if (!ap_graph_add_input(z->g, x.v)) {
    z->failed = true;
    return failed_zt;
  }
  return x;
}

zt zoo_input_named(zoo *z, const char *name, ap_dtype dt, int rank, const int64_t *dims) {
  zt x = {.rank = rank + 1};
  x.d[0] = z->opts.batch > 0 ? z->opts.batch : -1;
  for (int i = 0; i < rank; i++)
    x.d[i + 1] = dims[i];
  if ((x.v = new_value(z, name, AP_VAL_INPUT)) < 0)
    return failed_zt;
  z->g->values[x.v].dtype = dt;
  set_shape(&z->g->values[x.v], x.rank, x.d, z->opts.batch > 0 ? NULL : "N");
  if (!ap_graph_add_input(z->g, x.v)) {
    z->failed = true;
    return failed_zt;
  }
  return x;
}

void zoo_output_named(zoo *z, zt x, ap_dtype dt) {
  if (x.v < 0)
    return;
  ap_value *val = &z->g->values[x.v];
  val->dtype = dt;
  set_shape(val, x.rank, x.d, z->opts.batch > 0 ? NULL : "N");
  if (!ap_graph_add_output(z->g, x.v))
    z->failed = true;
}

void zoo_output(zoo *z, zt x) {
  if (x.v < 0)
    return;
  ap_value *val = &z->g->values[x.v];
  if (strcmp(val->name, "output") != 0)
    ap_die("zoo: the graph output is named '%s', not 'output'", val->name);
  set_shape(val, x.rank, x.d, z->opts.batch > 0 ? NULL : "N");
  if (!ap_graph_add_output(z->g, x.v))
    z->failed = true;
}

/* The weight NODE.SUFFIX filled from U[lo, hi), or, without weights, a graph
 * input of that shape. trainable says which count it goes to. */
static int weight(zoo *z, const char *node, const char *suffix, int rank, const int64_t *dims,
                  float lo, float hi, bool trainable) {
  if (z->failed)
    return -1;
  int64_t numel = ap_numel(rank, dims);
  if (numel < 0)
    ap_die("zoo: bad weight shape for %s.%s", node, suffix);
  *(trainable ? &z->params : &z->bn_stats) += numel;
  int v = new_value(z, zoo_name(z, "%s.%s", node, suffix),
                    z->opts.weights ? AP_VAL_WEIGHT : AP_VAL_INPUT);
  if (v < 0)
    return -1;
  if (!z->opts.weights) {
    set_shape(&z->g->values[v], rank, dims, NULL);
    if (!ap_graph_add_input(z->g, v))
      z->failed = true;
    return v;
  }
  /* Generated straight into the arena: VGG-19's 575 MB are not copied. */
  float *data = ap_arena_array(z->g->arena, (size_t)numel, sizeof *data);
  if (!data) {
    z->failed = true;
    return -1;
  }
  for (int64_t i = 0; i < numel; i++)
    data[i] = zoo_rng_uniform(&z->rng, lo, hi);
  ap_value *val = &z->g->values[v];
  set_shape(val, rank, dims, NULL);
  val->data = data;
  return v;
}

/* He/Kaiming-uniform: U(±gain·√(3/fan_in)) has variance gain²/fan_in, so an
 * output's variance is gain² times the input's mean square. A ReLU halves
 * the mean square and the gain √2 restores it: activations keep their scale
 * however deep the network. */
static float he_bound(float gain, int64_t fan_in) { return gain * sqrtf(3.0f / (float)fan_in); }

/* A node with one output named out_name (when set) or name. Returns the
 * node id, or -1 when an input is missing or memory ran out. */
static int add_node(zoo *z, const char *name, const char *op, int n_in, const int *in,
                    int n_attr, zt *out) {
  out->v = -1;
  if (z->failed)
    return -1;
  for (int i = 0; i < n_in; i++)
    if (in[i] < 0)
      return -1;
  const char *out_name = z->out_name ? z->out_name : name;
  z->out_name = NULL;
  int v = new_value(z, out_name, AP_VAL_NODE);
  int n = v < 0 ? -1 : ap_graph_add_node(z->g, name, "", op, n_in, 1, n_attr);
  if (n < 0) {
    z->failed = true;
    return -1;
  }
  ap_node *node = &z->g->nodes[n];
  for (int i = 0; i < n_in; i++)
    node->in[i] = in[i];
  node->out[0] = v;
  z->g->values[v].producer = n;
  out->v = v;
  return n;
}

static void attr_int(zoo *z, int n, int slot, const char *name, int64_t i) {
  ap_attr *a = &z->g->nodes[n].attr[slot];
  a->name = name;
  a->type = AP_ATTR_INT;
  a->i = i;
}

static void attr_float(zoo *z, int n, int slot, const char *name, float f) {
  ap_attr *a = &z->g->nodes[n].attr[slot];
  a->name = name;
  a->type = AP_ATTR_FLOAT;
  a->f = f;
}

int zoo_node(zoo *z, const char *name, const char *op, int n_in, const int *in, int n_attr,
             zt *y) {
  return add_node(z, name, op, n_in, in, n_attr, y);
}

void zoo_attr_int(zoo *z, int node, int slot, const char *name, int64_t i) {
  if (node >= 0)
    attr_int(z, node, slot, name, i);
}

void zoo_attr_float(zoo *z, int node, int slot, const char *name, float f) {
  if (node >= 0)
    attr_float(z, node, slot, name, f);
}

void zoo_attr_ints(zoo *z, int node, int slot, const char *name, int count,
                   const int64_t *ints) {
  if (node < 0)
    return;
  int64_t *copy = ap_arena_array(z->g->arena, (size_t)count + 1, sizeof *copy);
  if (!copy) {
    z->failed = true;
    return;
  }
  memcpy(copy, ints, (size_t)count * sizeof *copy);
  ap_attr *a = &z->g->nodes[node].attr[slot];
  a->name = name;
  a->type = AP_ATTR_INTS;
  a->n = count;
  a->ints = copy;
}

int zoo_param(zoo *z, const char *name, int rank, const int64_t *dims, float std, float lo,
              float hi) {
  if (z->failed)
    return -1;
  int64_t numel = ap_numel(rank, dims);
  if (numel < 0)
    ap_die("zoo: bad parameter shape for %s", name);
  z->params += numel;
  int v = new_value(z, name, z->opts.weights ? AP_VAL_WEIGHT : AP_VAL_INPUT);
  if (v < 0)
    return -1;
  set_shape(&z->g->values[v], rank, dims, NULL);
  if (!z->opts.weights) {
    if (!ap_graph_add_input(z->g, v))
      z->failed = true;
    return v;
  }
  float *data = ap_arena_array(z->g->arena, (size_t)numel + 1, sizeof *data);
  if (!data) {
    z->failed = true;
    return -1;
  }
  for (int64_t i = 0; i < numel; i++)
    data[i] = std > 0 ? zoo_rng_normal(&z->rng, 0, std) : zoo_rng_uniform(&z->rng, lo, hi);
  z->g->values[v].data = data;
  return v;
}

int zoo_const(zoo *z, const char *name, ap_dtype dt, int rank, const int64_t *dims,
              const void *data) {
  int v = new_value(z, name, AP_VAL_WEIGHT);
  if (v < 0)
    return -1;
  ap_tensor t = {.dtype = dt, .rank = rank, .numel = ap_numel(rank, dims), .data = (void *)data};
  for (int i = 0; i < rank; i++)
    t.dims[i] = dims[i];
  if (!ap_value_set_constant(z->g, v, &t)) {
    z->failed = true;
    return -1;
  }
  z->g->values[v].kind = AP_VAL_WEIGHT; /* an initializer */
  return v;
}

/* An INTS attribute holding count copies of value: kernel_shape, strides
 * and pads of square windows. */
static void attr_ints_same(zoo *z, int n, int slot, const char *name, int count, int64_t value) {
  int64_t *ints = ap_arena_array(z->g->arena, (size_t)count, sizeof *ints);
  if (!ints) {
    z->failed = true;
    return;
  }
  for (int i = 0; i < count; i++)
    ints[i] = value;
  ap_attr *a = &z->g->nodes[n].attr[slot];
  a->name = name;
  a->type = AP_ATTR_INTS;
  a->n = count;
  a->ints = ints;
}

/* Output size of a window of k, stride s and padding p on both sides
 * (ceil_mode 0). */
static int64_t window_out(int64_t in, int k, int s, int p) {
  int64_t out = (in + 2 * p - k) / s + 1;
  if (out < 1)
    ap_die("zoo: window %d/%d/%d does not fit an input of %lld", k, s, p, (long long)in);
  return out;
}

static void need_rank(zt x, int rank, const char *name) {
  if (x.v >= 0 && x.rank != rank)
    ap_die("zoo: %s expects a rank-%d input, got rank %d", name, rank, x.rank);
}

static void window_attrs(zoo *z, int n, int k, int s, int p) {
  attr_ints_same(z, n, 0, "kernel_shape", 2, k);
  attr_ints_same(z, n, 1, "strides", 2, s);
  if (p)
    attr_ints_same(z, n, 2, "pads", 4, p);
}

zt zoo_conv(zoo *z, const char *name, zt x, int64_t out_c, int k, int s, int p, bool bias) {
  need_rank(x, 4, name);
  int64_t in_c = x.d[1], fan_in = in_c * k * k;
  int64_t wdims[4] = {out_c, in_c, k, k};
  float wb = he_bound(ZOO_RELU_GAIN, fan_in), bb = 1.0f / sqrtf((float)fan_in);
  /* One statement per weight: initializer lists are not sequenced, and the
   * draw order fixes what a seed means. */
  int in[3] = {x.v, -1, -1};
  in[1] = weight(z, name, "weight", 4, wdims, -wb, wb, true);
  if (bias)
    in[2] = weight(z, name, "bias", 1, &out_c, -bb, bb, true);
  zt y = x;
  int n = add_node(z, name, "Conv", bias ? 3 : 2, in, 3, &y);
  if (n < 0)
    return failed_zt;
  /* Written even when zero: exporters do, and readers must not rely on the
   * defaults being spelt out either way. */
  attr_ints_same(z, n, 0, "kernel_shape", 2, k);
  attr_ints_same(z, n, 1, "strides", 2, s);
  attr_ints_same(z, n, 2, "pads", 4, p);
  y.d[1] = out_c;
  y.d[2] = window_out(x.d[2], k, s, p);
  y.d[3] = window_out(x.d[3], k, s, p);
  return y;
}

zt zoo_bn(zoo *z, const char *name, zt x, float scale_lo, float scale_hi) {
  need_rank(x, 4, name);
  int64_t c = x.d[1];
  /* Statistics near (0, 1) but not equal to them, so a kernel that ignores
   * one of the four operands gives a different answer. */
  int in[5] = {x.v, -1, -1, -1, -1};
  in[1] = weight(z, name, "weight", 1, &c, scale_lo, scale_hi, true);
  in[2] = weight(z, name, "bias", 1, &c, -0.1f, 0.1f, true);
  in[3] = weight(z, name, "running_mean", 1, &c, -0.1f, 0.1f, false);
  in[4] = weight(z, name, "running_var", 1, &c, 0.8f, 1.2f, false);
  zt y = x;
  int n = add_node(z, name, "BatchNormalization", 5, in, 2, &y);
  if (n < 0)
    return failed_zt;
  /* PyTorch's defaults as exported: eps 1e-5, momentum 1 - 0.1. */
  attr_float(z, n, 0, "epsilon", 1e-5f);
  attr_float(z, n, 1, "momentum", 0.9f);
  return y;
}

static zt unary(zoo *z, const char *name, const char *op, zt x) {
  zt y = x;
  return add_node(z, name, op, 1, &x.v, 0, &y) < 0 ? failed_zt : y;
}

zt zoo_relu(zoo *z, const char *name, zt x) { return unary(z, name, "Relu", x); }

/* Opset 13's Dropout with one input: ratio 0.5 and training_mode false by
 * default, so the ONNX semantics are the identity, as accpar treats it. */
zt zoo_dropout(zoo *z, const char *name, zt x) { return unary(z, name, "Dropout", x); }

zt zoo_maxpool(zoo *z, const char *name, zt x, int k, int s, int p) {
  need_rank(x, 4, name);
  zt y = x;
  int n = add_node(z, name, "MaxPool", 1, &x.v, p ? 3 : 2, &y);
  if (n < 0)
    return failed_zt;
  window_attrs(z, n, k, s, p);
  y.d[2] = window_out(x.d[2], k, s, p);
  y.d[3] = window_out(x.d[3], k, s, p);
  return y;
}

zt zoo_avgpool(zoo *z, const char *name, zt x, int k, int s) {
  need_rank(x, 4, name);
  zt y = x;
  int n = add_node(z, name, "AveragePool", 1, &x.v, 2, &y);
  if (n < 0)
    return failed_zt;
  window_attrs(z, n, k, s, 0);
  y.d[2] = window_out(x.d[2], k, s, 0);
  y.d[3] = window_out(x.d[3], k, s, 0);
  return y;
}

zt zoo_global_avgpool(zoo *z, const char *name, zt x) {
  need_rank(x, 4, name);
  zt y = unary(z, name, "GlobalAveragePool", x);
  y.d[2] = y.d[3] = 1;
  return y;
}

zt zoo_flatten(zoo *z, const char *name, zt x) {
  zt y = x;
  int n = add_node(z, name, "Flatten", 1, &x.v, 1, &y);
  if (n < 0)
    return failed_zt;
  attr_int(z, n, 0, "axis", 1);
  y.rank = 2;
  for (int i = 2; i < x.rank; i++)
    y.d[1] *= x.d[i];
  return y;
}

zt zoo_gemm(zoo *z, const char *name, zt x, int64_t out, float gain) {
  need_rank(x, 2, name);
  int64_t fan_in = x.d[1];
  int64_t wdims[2] = {out, fan_in};
  float wb = he_bound(gain, fan_in), bb = 1.0f / sqrtf((float)fan_in);
  int in[3] = {x.v, -1, -1};
  in[1] = weight(z, name, "weight", 2, wdims, -wb, wb, true);
  in[2] = weight(z, name, "bias", 1, &out, -bb, bb, true);
  zt y = x;
  int n = add_node(z, name, "Gemm", 3, in, 3, &y);
  if (n < 0)
    return failed_zt;
  attr_float(z, n, 0, "alpha", 1.0f);
  attr_float(z, n, 1, "beta", 1.0f);
  attr_int(z, n, 2, "transB", 1);
  y.d[1] = out;
  return y;
}

zt zoo_add(zoo *z, const char *name, zt a, zt b) {
  if (a.v >= 0 && b.v >= 0 &&
      (a.rank != b.rank || memcmp(a.d, b.d, sizeof a.d[0] * (size_t)a.rank) != 0))
    ap_die("zoo: %s adds tensors of different shapes", name);
  int in[2] = {a.v, b.v};
  zt y = a;
  return add_node(z, name, "Add", 2, in, 0, &y) < 0 ? failed_zt : y;
}

zt zoo_concat_channels(zoo *z, const char *name, const zt *xs, int n_xs) {
  int in[8];
  if (n_xs > (int)(sizeof in / sizeof in[0]))
    ap_die("zoo: %s concatenates too many tensors", name);
  zt y = xs[0];
  y.d[1] = 0;
  for (int i = 0; i < n_xs; i++) {
    need_rank(xs[i], 4, name);
    if (xs[i].v >= 0 && (xs[i].d[2] != xs[0].d[2] || xs[i].d[3] != xs[0].d[3]))
      ap_die("zoo: %s concatenates maps of different sizes", name);
    in[i] = xs[i].v;
    y.d[1] += xs[i].d[1];
  }
  int n = add_node(z, name, "Concat", n_xs, in, 1, &y);
  if (n < 0)
    return failed_zt;
  attr_int(z, n, 0, "axis", 1);
  return y;
}
