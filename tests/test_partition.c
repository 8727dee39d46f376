#define _POSIX_C_SOURCE 200809L
/* The partition pass: layouts and their conversion against the published
 * tables, the device model, hand-computed costs, and the dynamic program
 * against exhaustive enumeration on small graphs built in memory. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "passes/distribute.h"
#include "passes/passes.h"

/* ---- building graphs by hand (shapes set as inference would) ---- */

static ap_graph *G;
static int counter;

static int mkvalue(const char *name, ap_value_kind kind, int rank, const int64_t *dims) {
  int v = ap_graph_add_value(G, name, kind);
  cr_assert(v >= 0);
  G->values[v].dtype = AP_DT_FLOAT;
  G->values[v].rank = rank;
  for (int i = 0; i < rank; i++)
    G->values[v].dims[i] = dims[i];
  return v;
}

static int input(int rank, const int64_t *dims) {
  int v = mkvalue("x", AP_VAL_INPUT, rank, dims);
  cr_assert(ap_graph_add_input(G, v));
  return v;
}

static int weight(int rank, const int64_t *dims) {
  char name[32];
  snprintf(name, sizeof name, "w%d", counter++);
  return mkvalue(name, AP_VAL_WEIGHT, rank, dims);
}

/* A node with the given inputs and one output of the given shape. */
static int mknode(const char *op, int n_in, const int *in, int rank, const int64_t *dims,
                  int n_attr) {
  char name[32], out[32];
  snprintf(name, sizeof name, "%s_%d", op, counter);
  snprintf(out, sizeof out, "t%d", counter++);
  int n = ap_graph_add_node(G, name, "", op, n_in, 1, n_attr);
  cr_assert(n >= 0);
  G->nodes[n].n_attr = 0; /* room for n_attr; set_int fills them */
  for (int i = 0; i < n_in; i++)
    G->nodes[n].in[i] = in[i];
  int v = mkvalue(out, AP_VAL_NODE, rank, dims);
  G->nodes[n].out[0] = v;
  G->values[v].producer = n;
  return v;
}

static void set_int(int value, const char *name, int64_t x) {
  ap_node *n = &G->nodes[G->values[value].producer];
  n->attr[n->n_attr].name = name;
  n->attr[n->n_attr].type = AP_ATTR_INT;
  n->attr[n->n_attr++].i = x;
}

static const int64_t *dims_of(int v) { return G->values[v].dims; }

static int conv(int x, int64_t cout, int64_t k, int64_t stride, int64_t pad) {
  const int64_t *d = dims_of(x);
  int64_t wd[4] = {cout, d[1], k, k};
  int w = weight(4, wd);
  int64_t h = (d[2] + 2 * pad - k) / stride + 1, wi = (d[3] + 2 * pad - k) / stride + 1;
  int64_t od[4] = {d[0], cout, h, wi};
  int in[2] = {x, w};
  return mknode("Conv", 2, in, 4, od, 1);
}

static int gemm(int x, int64_t n_out) {
  int64_t wd[2] = {dims_of(x)[1], n_out}, od[2] = {dims_of(x)[0], n_out};
  int in[2] = {x, weight(2, wd)};
  return mknode("Gemm", 2, in, 2, od, 0);
}

static int unary(const char *op, int x) {
  return mknode(op, 1, &x, G->values[x].rank, dims_of(x), 0);
}

static int batchnorm(int x) {
  int64_t c = dims_of(x)[1];
  int in[5] = {x, weight(1, &c), weight(1, &c), weight(1, &c), weight(1, &c)};
  return mknode("BatchNormalization", 5, in, 4, dims_of(x), 0);
}

static int maxpool(int x, int64_t k, int64_t stride, int64_t pad) {
  const int64_t *d = dims_of(x);
  int64_t od[4] = {d[0], d[1], (d[2] + 2 * pad - k) / stride + 1,
                   (d[3] + 2 * pad - k) / stride + 1};
  return mknode("MaxPool", 1, &x, 4, od, 0);
}

static int gap(int x) {
  int64_t od[4] = {dims_of(x)[0], dims_of(x)[1], 1, 1};
  return mknode("GlobalAveragePool", 1, &x, 4, od, 0);
}

static int flatten(int x) {
  const int64_t *d = dims_of(x);
  int64_t od[2] = {d[0], d[1] * d[2] * d[3]};
  return mknode("Flatten", 1, &x, 2, od, 0);
}

static int add(int a, int b) {
  int in[2] = {a, b};
  return mknode("Add", 2, in, 4, dims_of(a), 0);
}

static int concat(int n, const int *in) {
  int64_t od[4];
  memcpy(od, dims_of(in[0]), sizeof od);
  od[1] = 0;
  for (int i = 0; i < n; i++)
    od[1] += dims_of(in[i])[1];
  int v = mknode("Concat", n, in, 4, od, 1);
  set_int(v, "axis", 1);
  return v;
}

static void finish_graph(int out) {
  cr_assert(ap_graph_add_output(G, out));
  G->opset = 13;
}

static void build_mlp(int64_t batch) {
  int64_t d[2] = {batch, 784};
  int x = input(2, d);
  x = unary("Relu", gemm(x, 256));
  x = unary("Relu", gemm(x, 128));
  finish_graph(gemm(x, 10));
}

static void build_lenet(int64_t batch) {
  int64_t d[4] = {batch, 1, 28, 28};
  int x = input(4, d);
  x = maxpool(unary("Relu", conv(x, 6, 5, 1, 2)), 2, 2, 0);
  x = maxpool(unary("Relu", conv(x, 16, 5, 1, 0)), 2, 2, 0);
  x = flatten(x);
  x = unary("Relu", gemm(x, 120));
  x = unary("Relu", gemm(x, 84));
  finish_graph(gemm(x, 10));
}

/* A ResNet basic block after a stem convolution; with projection, the block
 * halves the resolution and its shortcut is a 1x1 strided convolution. */
static void build_resblock(int64_t batch, bool projection) {
  int64_t d[4] = {batch, 3, 32, 32};
  int x = input(4, d);
  x = unary("Relu", batchnorm(conv(x, 64, 3, 1, 1)));
  int64_t stride = projection ? 2 : 1, width = projection ? 128 : 64;
  int y = unary("Relu", batchnorm(conv(x, width, 3, stride, 1)));
  y = batchnorm(conv(y, width, 3, 1, 1));
  int shortcut = projection ? batchnorm(conv(x, width, 1, 2, 0)) : x;
  y = unary("Relu", add(y, shortcut));
  finish_graph(gemm(flatten(gap(y)), 10));
}

static void build_inception(int64_t batch) {
  int64_t d[4] = {batch, 3, 28, 28};
  int x = unary("Relu", conv(input(4, d), 192, 3, 1, 1));
  int b[4];
  b[0] = unary("Relu", conv(x, 64, 1, 1, 0));
  b[1] = unary("Relu", conv(unary("Relu", conv(x, 96, 1, 1, 0)), 128, 3, 1, 1));
  b[2] = unary("Relu", conv(unary("Relu", conv(x, 16, 1, 1, 0)), 32, 5, 1, 2));
  b[3] = unary("Relu", conv(maxpool(x, 3, 1, 1), 32, 1, 1, 0));
  finish_graph(gemm(flatten(gap(concat(4, b))), 10));
}

static void new_graph(void) {
  G = ap_graph_new("mem.onnx");
  cr_assert(G);
  counter = 0;
}

static void drop_graph(void) {
  ap_graph_free(G);
  G = NULL;
}

/* A device file with round figures, so hand-computed costs stay readable. */
static ap_device_kind round_kind(const char *name, double peak) {
  ap_device_kind k = {.peak_flops = peak, .mem_bw_bytes_s = 1e9, .mem_bytes = 1e12,
                      .link_bw_bytes_s = 1e9, .link_latency_s = 1e-6, .count = 1};
  snprintf(k.name, sizeof k.name, "%s", name);
  return k;
}

static ap_devices array_of(int n, const ap_device_kind *kinds) {
  ap_devices dv = {.n_kinds = n};
  for (int i = 0; i < n; i++) {
    dv.kinds[i] = kinds[i];
    dv.n_devices += kinds[i].count;
  }
  return dv;
}

static ap_plan_summary plan(const ap_devices *dv, ap_strategy s, ap_cost_mode cost) {
  ap_plan_opts o = {.devices = dv, .strategy = s, .cost = cost};
  ap_diag d = {0};
  ap_status st = ap_partition(G, &o, &d);
  cr_assert_eq(st, AP_OK, "%s", d.message);
  ap_plan_summary sum;
  cr_assert(ap_plan_get(G, &sum));
  return sum;
}

/* The compute time of one device of kind k running the graph G. */
static double one_device_compute_s(ap_device_kind k) {
  ap_devices dv = array_of(1, &k);
  return plan(&dv, AP_STRATEGY_DP, AP_COST_TIME).compute_time_s;
}

/* A convolution's kernels are priced as they run (docs/partition.md, "Cost
 * model"): a one-input-channel layer's forward and backward weights as the
 * direct loops, at direct_flops, lowering nothing; another's lowering per
 * row of its column matrix. Both layers read the graph input: no backward
 * data. */
Test(cost, convolution_lowering_and_direct_loops_are_priced_apart) {
  new_graph();
  int64_t d1[4] = {8, 1, 28, 28};
  finish_graph(conv(input(4, d1), 8, 5, 1, 0)); /* 24x24 out, 25 taps */
  ap_device_kind k = round_kind("k", 1e9);
  double products = 2.0 * 8 * 8 * 24 * 24 * 25; /* FLOPs of one kernel */
  k.direct_flops = 2e9;
  double slow = one_device_compute_s(k);
  k.direct_flops = 4e9;
  double fast = one_device_compute_s(k);
  cr_expect_float_eq(slow - fast, 2 * products * (1 / 2e9 - 1 / 4e9), 1e-12 * slow);
  k.lower_row_s = 1e-6;
  cr_expect_float_eq(one_device_compute_s(k), fast, 1e-12 * fast, "the direct loops lower nothing");
  drop_graph();

  new_graph();
  int64_t d4[4] = {8, 4, 28, 28};
  finish_graph(conv(input(4, d4), 8, 5, 1, 0));
  k = round_kind("k", 1e9);
  k.lower_row_s = 1e-9;
  double cheap = one_device_compute_s(k);
  k.lower_row_s = 3e-9;
  double rows = 8.0 * 4 * 25 * 24; /* batch x channels x taps x output rows */
  cr_expect_float_eq(one_device_compute_s(k) - cheap, 2 * rows * 2e-9, 1e-12 * cheap,
                     "forward and backward weights each lower every row once");
  drop_graph();
}

/* A Winograd kernel (the F(2x2, 3x3) forward and backward data the kernel
 * library picks for these 3x3 layers) is priced, with a device file's
 * Winograd figures, beyond its 16 products of m x c per 2x2 output tile at
 * peak_flops: per block of tiles (apk_conv2d_wino_blocks), per block and
 * pair of channels, per 4x4 tile and channel transformed (docs/partition.md,
 * "Cost model"). The first layer reads the graph input: no backward data. */
Test(cost, winograd_kernels_are_priced_per_block_pair_and_tile) {
  new_graph();
  int64_t d[4] = {8, 16, 16, 16};
  finish_graph(conv(conv(input(4, d), 16, 3, 1, 1), 16, 3, 1, 1));
  apk_conv2d p = {8, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  cr_assert(apk_conv2d_choose(&p, APK_CONV_FORWARD) == APK_CONV_WINOGRAD &&
                apk_conv2d_choose(&p, APK_CONV_BACKWARD_DATA) == APK_CONV_WINOGRAD,
            "the kernel library no longer picks Winograd here");
  /* Two forwards and one backward data, all of 16 channels on 16 x 16. */
  double blocks = 8.0 * (2 * apk_conv2d_wino_blocks(&p, APK_CONV_FORWARD) +
                         apk_conv2d_wino_blocks(&p, APK_CONV_BACKWARD_DATA));
  double tiles = 3.0 * 8 * 8 * 8;
  ap_device_kind k = round_kind("k", 1e9);
  k.wino_block_s = 1e-6;
  k.wino_pair_s = 1e-9;
  k.wino_tile_s = 1e-9;
  double base = one_device_compute_s(k);
  k.wino_block_s = 2e-6;
  cr_expect_float_eq(one_device_compute_s(k) - base, blocks * 1e-6, 1e-9 * base);
  k.wino_block_s = 1e-6;
  k.wino_pair_s = 3e-9;
  cr_expect_float_eq(one_device_compute_s(k) - base, blocks * 256 * 2e-9, 1e-9 * base);
  k.wino_pair_s = 1e-9;
  k.wino_tile_s = 3e-9;
  cr_expect_float_eq(one_device_compute_s(k) - base, tiles * 32 * 2e-9, 1e-9 * base);
  drop_graph();
}

/* A GEMM's packing of its B operand is priced per float it packs
 * (docs/partition.md, "Cost model"), contiguous or transposed: a Gemm
 * (transB = 0) packs its weight forward and, unless it reads the graph
 * input, transposed for backward data; its weight's gradient packs its
 * output's error. A GEMM of at most APK_NARROW_M rows packs nothing; a
 * MatMul of a batch of matrices by a weight folds the batch into its rows
 * (codegen/c_layer.c) and packs the weight once. */
static double packing_s(double contiguous_s, double transposed_s) {
  ap_device_kind k = round_kind("k", 1e9);
  k.pack_float_s = contiguous_s;
  k.pack_transposed_s = transposed_s;
  return one_device_compute_s(k);
}

Test(cost, a_gemms_packing_is_priced_per_float_packed) {
  new_graph();
  int64_t d[2] = {32, 64};
  finish_graph(gemm(gemm(input(2, d), 48), 16));
  double base = packing_s(1e-9, 1e-9);
  double contiguous = 64 * 48 + 32 * 48 + 48 * 16 + 32 * 16, transposed = 16 * 48;
  cr_expect_float_eq(packing_s(2e-9, 1e-9) - base, contiguous * 1e-9, 1e-9 * base);
  cr_expect_float_eq(packing_s(1e-9, 3e-9) - base, transposed * 2e-9, 1e-9 * base);
  drop_graph();

  new_graph();
  int64_t d8[2] = {APK_NARROW_M, 64};
  finish_graph(gemm(gemm(input(2, d8), 48), 16));
  base = packing_s(1e-9, 1e-9);
  cr_expect_float_eq(packing_s(2e-9, 1e-9) - base, APK_NARROW_M * (48 + 16) * 1e-9, 1e-9 * base,
                     "only the weights' gradients pack");
  cr_expect_float_eq(packing_s(1e-9, 3e-9), base, 1e-12 * base);
  drop_graph();

  new_graph();
  int64_t d3[3] = {4, 16, 32}, wd[2] = {32, 24}, od[3] = {4, 16, 24};
  int in[2] = {input(3, d3), weight(2, wd)};
  finish_graph(mknode("MatMul", 2, in, 3, od, 0));
  base = packing_s(1e-9, 1e-9);
  cr_expect_float_eq(packing_s(2e-9, 1e-9) - base, (32 * 24 + 64 * 24) * 1e-9, 1e-9 * base,
                     "the weight packed once for the 4 matrices' 64 rows");
  drop_graph();
}

/* ---- layouts: the published tables ---- */

/* Layouts of one level of two groups at ratio 1/2, tensors of rows B and
 * columns C (an activation F or its error E, 16 x 8 elements of 1 byte). */
static ap_layout split(int dim) {
  ap_layout l = {.kind = AP_LAYOUT_SPLIT, .dim = dim, .ratio = {0.5, 0.5}};
  return l;
}
static const ap_layout repl = {.kind = AP_LAYOUT_REPLICATED};
static const ap_layout partial = {.kind = AP_LAYOUT_PARTIAL};

static double per_device(const ap_layout *from, const ap_layout *to) {
  int64_t box[2] = {16, 8};
  ap_exchange x;
  ap_layout_convert(2, box, 1, 2, from, to, &x);
  cr_assert_eq(x.send_bytes[0] + x.allreduce_bytes[0], x.send_bytes[1] + x.allreduce_bytes[1],
               "two groups at ratio 1/2 are symmetric");
  return x.send_bytes[0] + x.allreduce_bytes[0];
}

Test(layout, published_inter_layer_table) {
  /* A layer of type I splits its input F and its input error E by rows
   * (batch), type II by columns (its input features), type III needs F
   * whole and produces E whole (after its all-reduce). The previous
   * layer's output (after its own all-reduce) is: I by rows, II whole,
   * III by columns. DESIGN.md's table, A(F) = A(E) = 128 bytes:
   *   prev\this  I            II           III
   *   I          0            (A(F)+A(E))/4  A(F)/2
   *   II         A(E)/2       A(E)/2       0
   *   III        (A(F)+A(E))/4  0          A(F)/2                      */
  ap_layout out[3] = {split(0), repl, split(1)}; /* previous layer's output, by type */
  ap_layout in[3] = {split(0), split(1), repl};  /* this layer's input, by type */
  double A = 128;
  double expect[3][3] = {{0, (A + A) / 4, A / 2}, {A / 2, A / 2, 0}, {(A + A) / 4, 0, A / 2}};
  for (int prev = 0; prev < 3; prev++)
    for (int cur = 0; cur < 3; cur++) {
      double f = per_device(&out[prev], &in[cur]); /* F forward */
      double e = per_device(&in[cur], &out[prev]); /* E backward */
      cr_expect_eq(f + e, expect[prev][cur], "prev %d this %d: %g, expected %g", prev + 1,
                   cur + 1, f + e, expect[prev][cur]);
    }
}

Test(layout, published_intra_layer_table) {
  /* Partial sums resolved among two groups: each sends the whole tensor
   * once (A(dW) for I, A(F[l+1]) for II, A(E[l]) for III). */
  cr_expect_eq(per_device(&partial, &repl), 128);
  cr_expect_eq(per_device(&partial, &(ap_layout){split(0).kind, 0, {0.5, 0.5}, 1}), 128);
}

/* A Concat split along its own axis: each child holds, of every input, the
 * part of its slab of the output that input fills, as the partitioned
 * program reads it. Inputs of 2 and 6 channels, output split 4 + 4: the
 * first input is all child 0's, the second gives child 0 its first 2
 * channels and child 1 the other 4. A producer of the second input split
 * 3 + 3 along its channels (type III) then sends child 1 one channel. */
Test(layout, a_concat_split_along_its_axis_reads_each_inputs_part) {
  new_graph();
  int64_t d[4] = {2, 3, 4, 4};
  int x = input(4, d);
  int b[2] = {conv(x, 2, 1, 1, 0), conv(x, 6, 1, 1, 0)};
  finish_graph(concat(2, b));
  ap_devices dv;
  ap_diag dg = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &dg), AP_OK);
  plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_TIME);
  const ap_plan *p = G->plan;
  int cv = -1, e6 = -1;
  for (int v = 0; v < p->n_vertices; v++)
    if (p->v[v].join)
      cv = v;
  cr_assert_geq(cv, 0);
  for (int e = 0; e < p->n_edges; e++)
    if (p->e[e].to == cv && p->e[e].port == 2)
      e6 = e;
  cr_assert_geq(e6, 0);
  const ap_class *root = &p->cls[0][0];
  const int64_t *vext = root->ext + 2 * p->v[cv].ext_base;
  double half[AP_MAX_CHILDREN] = {0.5, 0.5}, r[AP_MAX_CHILDREN];
  ap_plan_port_ratio(p, G, vext, cv, 1, 1, 2, half, r);
  cr_expect(r[0] == 1 && r[1] == 0, "first input: %g %g", r[0], r[1]);
  ap_plan_port_ratio(p, G, vext, cv, 2, 1, 2, half, r);
  cr_expect(fabs(r[0] - 2.0 / 6) < 1e-15 && fabs(r[1] - 4.0 / 6) < 1e-15, "second input: %g %g",
            r[0], r[1]);
  ap_plan_port_ratio(p, G, vext, cv, 2, 0, 2, half, r); /* split along the batch: as given */
  cr_expect(r[0] == 0.5 && r[1] == 0.5);
  ap_exchange fwd, bwd;
  ap_plan_edge_exchange(p, G, root, e6, 2, 1, half, half, &fwd, &bwd);
  double channel = 2 * 4 * 4 * 4; /* batch x H x W floats */
  cr_expect_eq(fwd.send_bytes[0], channel, "%g", fwd.send_bytes[0]);
  cr_expect_eq(fwd.send_bytes[1], 0, "%g", fwd.send_bytes[1]);
  drop_graph();
}

Test(layout, the_plans_own_layouts_give_the_published_tables) {
  /* The same tables through the cost model's own code: two Gemm layers
   * (input 16x8, weights 8x8) planned on two devices at ratio 1/2; the edge
   * between them converts F (16x8 floats: A(F) = A(E) = 512 bytes)
   * forward and E backward, and each layer's all-reduce is A(dW) = 256
   * bytes for I, A(F[l+1]) = 512 for II, A(E[l]) = 512 for III. */
  new_graph();
  int64_t d[2] = {16, 8};
  finish_graph(gemm(gemm(input(2, d), 8), 8));
  ap_devices dv;
  ap_diag dg = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &dg), AP_OK);
  plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_PAPER);
  const ap_plan *p = G->plan;
  cr_assert_eq(p->n_vertices, 2);
  cr_assert_eq(p->n_edges, 1);
  const ap_class *root = &p->cls[0][0];
  double half[AP_MAX_CHILDREN] = {0.5, 0.5}, A = 512;
  double expect[3][3] = {{0, (A + A) / 4, A / 2}, {A / 2, A / 2, 0}, {(A + A) / 4, 0, A / 2}};
  for (int prev = 0; prev < 3; prev++)
    for (int cur = 0; cur < 3; cur++) {
      ap_exchange fwd, bwd;
      ap_plan_edge_exchange(p, G, root, 0, prev, cur, half, half, &fwd, &bwd);
      cr_expect_eq(fwd.allreduce_bytes[0] + bwd.allreduce_bytes[0], 0);
      cr_expect_eq(fwd.send_bytes[0] + bwd.send_bytes[0], expect[prev][cur],
                   "prev %d this %d: %g, expected %g", prev + 1, cur + 1,
                   fwd.send_bytes[0] + bwd.send_bytes[0], expect[prev][cur]);
      cr_expect_eq(fwd.send_bytes[0] + bwd.send_bytes[0], fwd.send_bytes[1] + bwd.send_bytes[1]);
    }
  double intra[3] = {256, 512, 512};
  for (int s = 0; s < 3; s++) {
    ap_exchange x;
    ap_plan_intra_exchange(p, G, root, 1, s, &x);
    cr_expect_eq(x.allreduce_bytes[0], intra[s], "type %d: %g", s + 1, x.allreduce_bytes[0]);
  }
  drop_graph();
}

Test(layout, shares_are_whole_and_sum) {
  int64_t s[AP_MAX_CHILDREN];
  ap_layout_shares(10, 3, (double[]){1 / 3.0, 1 / 3.0, 1 / 3.0}, s);
  cr_expect(s[0] == 4 && s[1] == 3 && s[2] == 3, "%lld %lld %lld", (long long)s[0],
            (long long)s[1], (long long)s[2]);
  ap_layout_shares(7, 2, (double[]){0.73, 0.27}, s); /* 5.11, 1.89: the remainder to 1.89 */
  cr_expect(s[0] == 5 && s[1] == 2);
  ap_layout_shares(1, 2, (double[]){0.5, 0.5}, s); /* fewer indices than children */
  cr_expect(s[0] + s[1] == 1 && s[0] >= 0 && s[1] >= 0);
  for (int64_t n = 0; n < 50; n++) {
    ap_layout_shares(n, 5, (double[]){0.1, 0.2, 0.3, 0.15, 0.25}, s);
    cr_expect_eq(s[0] + s[1] + s[2] + s[3] + s[4], n);
  }
}

Test(layout, uneven_ratios_move_the_difference) {
  /* Rows split 12/4 converted to 8/8: child 0 sends rows 8..11 (4 rows of
   * 8 bytes) to child 1, child 1 sends nothing. */
  ap_layout a = {.kind = AP_LAYOUT_SPLIT, .dim = 0, .ratio = {0.75, 0.25}}, b = split(0);
  int64_t box[2] = {16, 8};
  ap_exchange x;
  ap_layout_convert(2, box, 1, 2, &a, &b, &x);
  cr_expect_eq(x.pair_bytes[0][1], 32);
  cr_expect_eq(x.pair_bytes[1][0], 0);
  cr_expect_eq(x.messages[0], 1);
  cr_expect_eq(x.messages[1], 0);
}

/* ---- devices and levels ---- */

Test(devices, presets_and_specs) {
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("tpuv3:64,tpuv2:64", &dv, &d), AP_OK, "%s", d.message);
  cr_expect_eq(dv.n_kinds, 2);
  cr_expect_eq(dv.n_devices, 128);
  cr_expect_eq(dv.kinds[0].peak_flops, 123e12);
  cr_expect_eq(ap_devices_levels(&dv), 7); /* kinds, then 64 = 2^6 */
  cr_assert_eq(ap_devices_parse("cpu:6", &dv, &d), AP_OK);
  cr_expect_eq(ap_devices_levels(&dv), 2); /* 6 = 2 x 3 */
  cr_assert_eq(ap_devices_parse("eyeriss:1", &dv, &d), AP_OK);
  cr_expect_eq(ap_devices_levels(&dv), 0);
  cr_assert_eq(ap_devices_parse("cpu:1024", &dv, &d), AP_OK);
  cr_expect_eq(ap_devices_levels(&dv), 10);
  cr_assert_eq(ap_devices_parse("cpu:37", &dv, &d), AP_OK); /* prime: uneven halves */
  ap_group root = ap_group_root(&dv), ch[AP_MAX_CHILDREN];
  cr_expect_eq(ap_group_children(&dv, &root, ch), 2);
  cr_expect(ch[0].count == 19 && ch[1].count == 18);
  ap_diag e = {0};
  cr_expect_eq(ap_devices_parse("tpuv9:2", &dv, &e), AP_ERR_USAGE);
  cr_expect(strstr(e.message, "tpuv9"));
  ap_diag f = {0};
  cr_expect_eq(ap_devices_parse("cpu:0", &dv, &f), AP_ERR_USAGE);
}

Test(devices, device_file) {
  char path[] = "/tmp/accpar_devXXXXXX";
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "# a made-up accelerator\nname = toy\npeak_flops = 2e12\nmem_bw_bytes_s = 1e11\n"
             "mem_bytes = 1e9\nlink_bw_bytes_s = 1e10\nlink_latency_s = 2e-6\n");
  fclose(f);
  char spec[64];
  snprintf(spec, sizeof spec, "%s:4,cpu:2", path);
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse(spec, &dv, &d), AP_OK, "%s", d.message);
  cr_expect_str_eq(dv.kinds[0].name, "toy");
  cr_expect_eq(dv.kinds[0].peak_flops, 2e12);
  cr_expect_eq(dv.kinds[0].count, 4);
  /* A file without the transcendentals (written before they were priced)
   * leaves them free; one with them sets them. */
  cr_expect_eq(dv.kinds[0].exp_s, 0);
  cr_expect_eq(dv.kinds[0].lower_row_s, 0);
  cr_expect_eq(dv.kinds[0].direct_flops, 0);
  cr_expect_eq(dv.kinds[0].pack_float_s, 0);
  cr_expect_eq(dv.kinds[0].wino_tile_s, 0);
  f = fopen(path, "a");
  fprintf(f, "exp_s = 5e-9\ntanh_s = 6e-10\nlower_row_s = 6e-9\nlower_float_s = 4e-11\n"
             "lower_gather_s = 3.5e-10\ndirect_flops = 4.6e10\npack_float_s = 9e-11\n"
             "pack_transposed_s = 2e-10\nwino_block_s = 6e-6\nwino_pair_s = 2e-11\n"
             "wino_tile_s = 3e-10\n");
  fclose(f);
  cr_assert_eq(ap_devices_parse(spec, &dv, &d), AP_OK, "%s", d.message);
  cr_expect_eq(dv.kinds[0].exp_s, 5e-9);
  cr_expect_eq(dv.kinds[0].tanh_s, 6e-10);
  cr_expect_eq(dv.kinds[0].lower_row_s, 6e-9);
  cr_expect_eq(dv.kinds[0].lower_float_s, 4e-11);
  cr_expect_eq(dv.kinds[0].lower_gather_s, 3.5e-10);
  cr_expect_eq(dv.kinds[0].direct_flops, 4.6e10);
  cr_expect_eq(dv.kinds[0].pack_float_s, 9e-11);
  cr_expect_eq(dv.kinds[0].pack_transposed_s, 2e-10);
  cr_expect_eq(dv.kinds[0].wino_block_s, 6e-6);
  cr_expect_eq(dv.kinds[0].wino_pair_s, 2e-11);
  cr_expect_eq(dv.kinds[0].wino_tile_s, 3e-10);
  f = fopen(path, "w");
  fprintf(f, "name = toy\npeak_flops = fast\n");
  fclose(f);
  ap_diag e = {0};
  cr_expect_eq(ap_devices_parse(spec, &dv, &e), AP_ERR_PARSE);
  cr_expect(strstr(e.message, "peak_flops"), "%s", e.message);
  remove(path);
}

/* ---- hand-computed costs ---- */

Test(cost, one_layer_data_parallel_homogeneous) {
  /* Gemm 8x16 . 16x4 on two devices of 1 GFLOP/s, links of 1 GB/s and
   * 1 us. The first layer has no input error: forward and gradient only,
   * 2 x 2 x 8 x 16 x 4 = 2048 FLOP, half each: 1.024e-6 s. Each device's
   * forward GEMM has 4 rows, too few to pack the weight (APK_NARROW_M); its
   * gradient's GEMM (dW = X^T dY, 16 rows) packs the 4 x 4 floats of the
   * output's error, at 3 accesses per float without packing figures: 192
   * bytes at 1 GB/s, 1.92e-7 s. Type I all-reduces dW
   * (16 x 4 floats = 256 bytes): each device sends 2(k-1)/k x 256 = 256
   * bytes in 2 messages: 2.56e-7 + 2e-6 s. The loss reads each device's 4
   * rows of 4 logits and writes their error (128 bytes, 1.28e-7 s; the
   * round kind's exp is free). Step: 3.6e-6 s. */
  new_graph();
  int64_t d[2] = {8, 16};
  finish_graph(gemm(input(2, d), 4));
  ap_device_kind k = round_kind("toy", 1e9);
  k.count = 2;
  ap_devices dv = array_of(1, &k);
  ap_plan_summary s = plan(&dv, AP_STRATEGY_DP, AP_COST_TIME);
  cr_expect_float_eq(s.step_time_s, 1.024e-6 + 1.92e-7 + 2.56e-7 + 2e-6 + 1.28e-7, 1e-15,
                     "%.9g", s.step_time_s);
  cr_expect_float_eq(s.comm_bytes, 512, 1e-9, "%.9g", s.comm_bytes);
  /* Memory: the 256-byte weight and its gradient, and the 4 x 16 floats of
   * input kept for the gradient: 768 bytes per device. */
  cr_expect_float_eq(s.max_mem_bytes, 768, 1e-9);
  cr_expect_eq(G->nodes[0].n_types, 1);
  cr_expect_eq(G->nodes[0].types[0], 1);
  drop_graph();
}

Test(cost, two_levels_add_their_all_reduces) {
  /* The same Gemm on four 1 GFLOP/s devices: two levels of two. Data
   * parallelism computes 2048/4 FLOP per device (5.12e-7 s) and packs its
   * 2 x 4 floats of the output's error (3 x 8 floats, 9.6e-8 s). Level 0: the
   * two groups all-reduce the 256-byte gradient, each group sending 256
   * bytes spread over its 2 devices (128 bytes, 1.28e-7 s) in 2 messages
   * (2e-6 s); level 1: inside each group, each device sends 256 bytes
   * (2.56e-7 s) in 2 messages (2e-6 s). The loss on 2 rows: 64 bytes,
   * 6.4e-8 s. Step: 5.056e-6 s. Bytes sent:
   * 2 x 256 at level 0 and 4 x 256 at level 1. */
  new_graph();
  int64_t d[2] = {8, 16};
  finish_graph(gemm(input(2, d), 4));
  ap_device_kind k = round_kind("toy", 1e9);
  k.count = 4;
  ap_devices dv = array_of(1, &k);
  ap_plan_summary s = plan(&dv, AP_STRATEGY_DP, AP_COST_TIME);
  cr_expect_eq(s.n_levels, 2);
  cr_expect_float_eq(s.step_time_s,
                     5.12e-7 + 9.6e-8 + 6.4e-8 + 1.28e-7 + 2e-6 + 2.56e-7 + 2e-6, 1e-15,
                     "%.9g", s.step_time_s);
  cr_expect_float_eq(s.comm_bytes, 1536, 1e-9, "%.9g", s.comm_bytes);
  cr_expect_float_eq(s.compute_time_s, 5.12e-7 + 9.6e-8 + 6.4e-8, 1e-15);
  drop_graph();
}

Test(cost, one_layer_heterogeneous_ratios) {
  /* The same Gemm on a 3 GFLOP/s and a 1 GFLOP/s device, memory at 1 GB/s.
   * Data parallelism splits by device count, 4 rows each: the slow device
   * computes 1024 FLOP in 1.024e-6 s and packs its rows' output error
   * (1.92e-7 s, as above) and runs the loss on its rows (1.28e-7 s); plus
   * the 256-byte all-reduce (2.56e-7 + 2e-6 s). AccPar balances. No GEMM
   * here has more than 8 rows but the gradients' (16): only they pack. Type
   * I: a device of b rows computes 256 FLOP per row, packs 4 floats per row
   * (4.8e-8 s) and its loss moves 32 bytes per row (3.2e-8 s): the fast
   * device 1.653e-7 s per row, the slow one 3.36e-7; at best 6 and 2 rows,
   * 9.92e-7 s, plus the all-reduce: 3.248e-6 s. Type II (split the 16 input
   * columns) all-reduces the 8x4 output forward and its error backward, 2 x
   * (1.28e-7 + 2e-6) s. Type III (split the 4 output columns) at 3:1: the
   * fast device computes 1536 FLOP (5.12e-7 s), packs 8 x 3 floats of
   * error (2.88e-7 s) and runs the loss on its 3 columns (1.92e-7 s), the
   * slow one 512 FLOP (5.12e-7 s) and 8 floats (9.6e-8 s); bringing the
   * loss its rows costs 2.064e-6 s: 3.056e-6 s in all, the cheapest.
   * AccPar must find type III at 3:1. */
  new_graph();
  int64_t d[2] = {8, 16};
  finish_graph(gemm(input(2, d), 4));
  ap_device_kind k[2] = {round_kind("fast", 3e9), round_kind("slow", 1e9)};
  ap_devices dv = array_of(2, k);
  ap_plan_summary dp = plan(&dv, AP_STRATEGY_DP, AP_COST_TIME);
  cr_expect_float_eq(dp.step_time_s, 1.024e-6 + 1.92e-7 + 1.28e-7 + 2.56e-7 + 2e-6, 1e-15,
                     "%.9g", dp.step_time_s);
  ap_plan_summary ap = plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_TIME);
  cr_expect_float_eq(ap.step_time_s, 5.12e-7 + 2.88e-7 + 1.92e-7 + 2.064e-6, 1e-15, "%.9g",
                     ap.step_time_s);
  cr_expect_eq(G->nodes[0].types[0], 3);
  drop_graph();
}

Test(cost, paper_mode_counts_elements) {
  /* MLP 784-256-128-10 at batch 64 on two devices, HyPar's metric: with
   * {I, II} and ratio 1/2 the cheapest plan of the 3-layer MLP is known
   * from the tables: all type I costs A(dW) per layer = 784*256 + 256*128
   * + 128*10 elements; any type II layer costs its A(F[l+1]) plus
   * conversions. The DP's choice must not cost more than all-I. */
  new_graph();
  build_mlp(64);
  ap_device_kind k = round_kind("toy", 1e9);
  k.count = 2;
  ap_devices dv = array_of(1, &k);
  ap_plan_summary dp = plan(&dv, AP_STRATEGY_DP, AP_COST_PAPER);
  cr_expect_float_eq(dp.paper_cost, 784.0 * 256 + 256 * 128 + 128 * 10, 1e-6, "%.9g",
                     dp.paper_cost);
  ap_plan_summary hy = plan(&dv, AP_STRATEGY_HYPAR, AP_COST_PAPER);
  cr_expect(hy.paper_cost <= dp.paper_cost);
  /* Hand check of HyPar's optimum, per device, from the tables (A(F) and
   * A(E) of a layer's input are equal here). Layer 1 (input 64x784 from
   * the graph, output 64x256): I costs A(dW) = 200704, II A(F2) = 16384.
   * Layer 2 (input 64x256, output 64x128): I costs 32768, II 8192; after
   * a II layer, II->II converts A(E)/2 = 8192 and II->I also 8192. Layer 3
   * (input 64x128, output 64x10): I costs 1280, II 640; after II either
   * conversion is 64*128/2 = 4096. Best: II, II, II = 16384 + (8192 +
   * 8192) + (640 + 4096) = 37504; II, II, I would be 38144. */
  cr_expect_float_eq(hy.paper_cost, 16384.0 + 8192 + 8192 + 640 + 4096, 1e-6, "%.9g",
                     hy.paper_cost);
  for (int i = 0; i < G->n_nodes; i++)
    if (G->nodes[i].n_types)
      cr_expect_eq(G->nodes[i].types[0], 2, "%s", G->nodes[i].name);
  drop_graph();
}

/* ---- the dynamic program against every assignment ---- */

typedef void (*builder)(int64_t);
static void build_res_id(int64_t b) { build_resblock(b, false); }
static void build_res_proj(int64_t b) { build_resblock(b, true); }

static void dp_equals_exhaustive(builder build, const char *spec) {
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse(spec, &dv, &d), AP_OK);
  new_graph();
  build(32);
  ap_plan_summary ex = plan(&dv, AP_STRATEGY_EXHAUSTIVE, AP_COST_TIME);
  uint8_t ex_types[256];
  int n = 0;
  for (int i = 0; i < G->n_nodes; i++)
    if (G->nodes[i].n_types)
      ex_types[n++] = G->nodes[i].types[0];
  ap_plan_summary ap = plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_TIME);
  cr_expect_float_eq(ap.step_time_s, ex.step_time_s, 1e-12 * ex.step_time_s,
                     "%s on %s: DP %.12g, exhaustive %.12g", G->path, spec, ap.step_time_s,
                     ex.step_time_s);
  cr_expect_str_eq(ap.optimality, "exact");
  ap_plan_summary dp = plan(&dv, AP_STRATEGY_DP, AP_COST_TIME);
  cr_expect(ap.step_time_s <= dp.step_time_s * (1 + 1e-12));
  (void)ex_types;
  drop_graph();
}

Test(search, dp_equals_exhaustive_mlp) {
  dp_equals_exhaustive(build_mlp, "tpuv3:1,tpuv2:1");
  dp_equals_exhaustive(build_mlp, "cpu:3");
}
Test(search, dp_equals_exhaustive_lenet) { dp_equals_exhaustive(build_lenet, "tpuv3:1,tpuv2:1"); }
Test(search, dp_equals_exhaustive_resnet_block) {
  dp_equals_exhaustive(build_res_id, "tpuv3:1,tpuv2:1");
  dp_equals_exhaustive(build_res_proj, "tpuv3:1,tpuv2:1");
}
Test(search, dp_equals_exhaustive_inception) {
  dp_equals_exhaustive(build_inception, "tpuv3:1,tpuv2:1");
}

Test(search, exhaustive_refuses_politely) {
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &d), AP_OK);
  new_graph();
  build_inception(8);
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_EXHAUSTIVE, .exhaustive_max = 100};
  cr_expect_eq(ap_partition(G, &o, &d), AP_ERR_UNSUPPORTED);
  cr_expect(strstr(d.message, "--strategy accpar"), "%s", d.message);
  drop_graph();
}

/* Random cost graphs, series-parallel and not, solved by elimination and
 * conditioning against enumeration. */
Test(search, solver_matches_enumeration_on_random_graphs) {
  srand(7);
  ap_arena *a = ap_arena_new();
  int exact = 0;
  for (int trial = 0; trial < 200; trial++) {
    int n = 2 + rand() % 9, m = 0;
    enum { S = AP_SEARCH_STATES };
    uint8_t allowed[16];
    double unary[16][S];
    int ends[64][2];
    double pair[64][S][S];
    /* Any of the states on small graphs, the first three on larger ones
     * (the enumeration stays within its limit). */
    for (int v = 0; v < n; v++) {
      allowed[v] = (uint8_t)(1 + rand() % (n <= 7 ? (1 << S) - 1 : 7));
      for (int s = 0; s < S; s++)
        unary[v][s] = rand() % 100;
    }
    for (int u = 0; u < n; u++)
      for (int v = u + 1; v < n; v++)
        if (rand() % 100 < (trial % 2 ? 60 : 25) && m < 64) {
          ends[m][0] = u;
          ends[m][1] = v;
          for (int x = 0; x < S; x++)
            for (int y = 0; y < S; y++)
              pair[m][x][y] = rand() % 100;
          m++;
        }
    ap_search_problem pr = {n, m, allowed, (const double(*)[S])unary, (const int(*)[2])ends,
                            (const double(*)[S][S])pair};
    uint8_t s1[16], s2[16];
    double c1, c2;
    long visited;
    const char *opt;
    cr_assert_eq(ap_search_solve(&pr, a, s1, &c1, &opt), AP_OK);
    cr_assert_eq(ap_search_exhaustive(&pr, 1000000, s2, &c2, &visited), AP_OK);
    /* Sparse graphs must solve exactly; dense ones exactly when the
     * solver says so, and never below the true minimum. */
    if (trial % 2 == 0)
      cr_expect_str_eq(opt, "exact", "trial %d", trial);
    if (strcmp(opt, "exact") == 0)
      cr_expect_eq(c1, c2, "trial %d (n %d, m %d): %g vs %g", trial, n, m, c1, c2);
    else
      cr_expect(c1 >= c2);
    cr_expect_eq(ap_search_cost(&pr, s1), c1, "trial %d: the assignment matches its cost", trial);
    exact += strcmp(opt, "exact") == 0;
    for (int v = 0; v < n; v++)
      cr_expect(allowed[v] >> s1[v] & 1);
  }
  cr_expect_gt(exact, 150, "conditioning keeps most dense graphs exact: %d of 200", exact);
  ap_arena_free(a);
}

/* ---- whole plans ---- */

Test(plan, every_device_count_plans) {
  for (int n = 1; n <= 12; n++) {
    char spec[32];
    snprintf(spec, sizeof spec, "cpu:%d", n);
    ap_devices dv;
    ap_diag d = {0};
    cr_assert_eq(ap_devices_parse(spec, &dv, &d), AP_OK);
    new_graph();
    build_lenet(10);
    ap_plan_summary s = plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_TIME);
    cr_expect(s.step_time_s > 0 && isfinite(s.step_time_s), "%d devices", n);
    cr_expect_eq(s.n_levels, ap_devices_levels(&dv));
    /* Every device's box of the first layer's output covers the batch
     * exactly once under data parallelism. */
    plan(&dv, AP_STRATEGY_DP, AP_COST_TIME);
    const ap_plan *p = G->plan;
    int64_t rows = 0;
    for (int dev = 0; dev < n; dev++) {
      int64_t lo[AP_MAX_RANK], hi[AP_MAX_RANK];
      ap_plan_device_box(p, G, 0, 0, dev, lo, hi);
      rows += hi[0] - lo[0];
    }
    cr_expect_eq(rows, 10, "%d devices: %lld rows", n, (long long)rows);
    drop_graph();
  }
}

/* The boxes of every device at once (a walk of the group tree, which gives
 * a group the boxes of an earlier group of its class moved by the offset)
 * equal each device's own walk down the levels: on arrays of odd counts
 * (uneven halves, 3-way splits), mixed kinds and odd batches, where a
 * class's groups sit at offsets that do not divide evenly. */
Test(plan, every_devices_boxes_equal_its_own_walk) {
  static const char *const arrays[] = {"cpu:8", "cpu:7", "cpu:12", "cpu:45",
                                       "tpuv3:4,tpuv2:6", "tpuv3:3,tpuv2:5,cpu:7"};
  static const ap_strategy strategies[] = {AP_STRATEGY_ACCPAR, AP_STRATEGY_HYPAR,
                                           AP_STRATEGY_OWT};
  static void (*const builders[])(int64_t) = {build_lenet, build_res_proj, build_inception};
  int compared = 0;
  for (size_t a = 0; a < sizeof arrays / sizeof *arrays; a++)
    for (size_t b = 0; b < sizeof builders / sizeof *builders; b++)
      for (size_t st = 0; st < sizeof strategies / sizeof *strategies; st++) {
        ap_devices dv;
        ap_diag d = {0};
        cr_assert_eq(ap_devices_parse(arrays[a], &dv, &d), AP_OK);
        new_graph();
        builders[b](13);
        plan(&dv, strategies[st], AP_COST_TIME);
        const ap_plan *p = G->plan;
        int n = dv.n_devices;
        ap_dbox *all = calloc((size_t)n, sizeof *all);
        cr_assert(all);
        for (int v = 0; v < p->n_vertices; v++)
          for (int port = -1; port < p->v[v].n_ports; port++) {
            if (port < 0 && (p->v[v].join || p->v[v].weight < 0))
              continue;
            const ap_value *val =
                &G->values[port < 0 ? p->v[v].weight : p->v[v].port[port].value];
            if (port < 0)
              ap_plan_weight_boxes(p, G, v, all);
            else
              ap_plan_device_boxes(p, G, v, port, all);
            for (int dev = 0; dev < n; dev++) {
              int64_t lo[AP_MAX_RANK], hi[AP_MAX_RANK];
              if (port < 0)
                ap_plan_weight_box(p, G, v, dev, lo, hi);
              else
                ap_plan_device_box(p, G, v, port, dev, lo, hi);
              for (int i = 0; i < val->rank; i++)
                cr_assert(all[dev].lo[i] == lo[i] && all[dev].hi[i] == hi[i],
                          "%s, %s, builder %zu: vertex %d port %d device %d dim %d: "
                          "[%d, %d) against [%lld, %lld)",
                          arrays[a], ap_strategy_name(strategies[st]), b, v, port, dev, i,
                          all[dev].lo[i], all[dev].hi[i], (long long)lo[i], (long long)hi[i]);
              compared++;
            }
          }
        free(all);
        drop_graph();
      }
  cr_expect_gt(compared, 10000, "%d boxes compared", compared);
}

Test(plan, memory_limit_rejects) {
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &d), AP_OK);
  new_graph();
  build_mlp(64);
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_DP, .mem_limit_bytes = 1000};
  cr_expect_eq(ap_partition(G, &o, &d), AP_ERR_NO_FIT);
  cr_expect(strstr(d.message, "mem.onnx") && strstr(d.message, "bytes"), "%s", d.message);
  drop_graph();
}

Test(plan, memory_limit_steers_the_search) {
  /* The unconstrained plan of the MLP keeps M bytes on a device; under a
   * limit slightly below M the search prices memory and finds a plan that
   * fits (the 784x256 weights split instead of replicated), or takes a
   * base plan that fits and is faster than that, and says that it is no
   * longer exact. */
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &d), AP_OK);
  new_graph();
  build_mlp(64);
  ap_plan_summary free_plan = plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_TIME);
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR,
                    .mem_limit_bytes = free_plan.max_mem_bytes * 0.98};
  cr_assert_eq(ap_partition(G, &o, &d), AP_OK, "%s", d.message);
  ap_plan_summary fit;
  cr_assert(ap_plan_get(G, &fit));
  cr_expect_leq(fit.max_mem_bytes, o.mem_limit_bytes);
  cr_expect(fit.step_time_s >= free_plan.step_time_s);
  cr_expect(strncmp(fit.optimality, "bounded: ", 9) == 0 && strstr(fit.optimality, "memory priced"),
            "%s", fit.optimality);
  drop_graph();
}

/* Under every memory limit between the smallest plan's bytes and the
 * largest's, accpar's plan fits wherever a base plan fits, and is never
 * slower than a base plan that fits: the search with memory priced can end
 * slower than one (a small CNN on tpuv3:4,tpuv2:4 at 6000 bytes a device
 * took 36.1 us against hypar's 32.1 us), and the base plan is then taken. */
Test(plan, memory_limit_never_slower_than_a_base_plan_that_fits, .timeout = 120) {
  static void (*const build[])(int64_t) = {build_mlp, build_lenet, build_res_proj,
                                           build_inception};
  static const char *const arrays[] = {"cpu:2", "tpuv3:4,tpuv2:4", "tpuv3:2,tpuv2:6"};
  static const ap_strategy bases[] = {AP_STRATEGY_DP, AP_STRATEGY_OWT, AP_STRATEGY_HYPAR};
  int limited = 0, taken = 0;
  for (size_t m = 0; m < sizeof build / sizeof build[0]; m++)
    for (size_t a = 0; a < sizeof arrays / sizeof arrays[0]; a++) {
      ap_devices dv;
      ap_diag d = {0};
      cr_assert_eq(ap_devices_parse(arrays[a], &dv, &d), AP_OK);
      new_graph();
      build[m](16);
      double lo = INFINITY, hi = 0;
      for (int s = 0; s <= 3; s++) {
        ap_plan_summary free_plan = plan(&dv, s < 3 ? bases[s] : AP_STRATEGY_ACCPAR,
                                         AP_COST_TIME);
        lo = fmin(lo, free_plan.max_mem_bytes);
        hi = fmax(hi, free_plan.max_mem_bytes);
      }
      for (int k = 0; k <= 8; k++) {
        double limit = lo + (hi - lo) * k / 8.0;
        double best_base = INFINITY;
        for (int s = 0; s < 3; s++) {
          ap_plan_opts o = {.devices = &dv, .strategy = bases[s], .mem_limit_bytes = limit};
          d = (ap_diag){0};
          ap_status st = ap_partition(G, &o, &d);
          cr_assert(st == AP_OK || st == AP_ERR_NO_FIT, "%s", d.message);
          ap_plan_summary sum;
          if (st == AP_OK && ap_plan_get(G, &sum))
            best_base = fmin(best_base, sum.step_time_s);
        }
        ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR,
                          .mem_limit_bytes = limit};
        d = (ap_diag){0};
        ap_status st = ap_partition(G, &o, &d);
        if (isinf(best_base)) {
          cr_assert(st == AP_OK || st == AP_ERR_NO_FIT, "%s", d.message);
          continue;
        }
        cr_assert_eq(st, AP_OK, "model %zu on %s, %.0f bytes: a base plan fits, accpar: %s", m,
                     arrays[a], limit, d.message);
        ap_plan_summary acc;
        cr_assert(ap_plan_get(G, &acc));
        cr_expect_leq(acc.max_mem_bytes, limit);
        cr_expect_leq(acc.step_time_s, best_base * (1 + 1e-12),
                      "model %zu on %s, %.0f bytes: accpar %.9g s, a base plan %.9g s", m,
                      arrays[a], limit, acc.step_time_s, best_base);
        limited += strncmp(acc.optimality, "bounded", 7) == 0;
        taken += strstr(acc.optimality, "'s plan") != NULL;
      }
      drop_graph();
    }
  cr_expect_gt(limited, 0, "no limit made accpar price memory");
  cr_expect_gt(taken, 0, "no limit made accpar take a base plan");
}

/* ---- real models through the frontend and the pipeline ---- */

/* The nine light architectures plan with every strategy, and accpar's plan
 * is never slower than the fastest of dp's, owt's and hypar's (it was
 * checked against dp's alone). */
Test(plan, light_models_plan_with_every_strategy, .timeout = 300) {
  static const char *const models[] = {"bvlc_alexnet", "densenet121", "inception_v1",
                                       "inception_v2", "resnet50",    "shufflenet",
                                       "squeezenet",   "vgg19",       "zfnet512"};
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("tpuv3:4,tpuv2:4", &dv, &d), AP_OK);
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/onnx-tests/light/light_%s.onnx", ACCPAR_SHARED_DIR,
             models[m]);
    ap_graph *g = NULL;
    cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
    cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
    double base_time = INFINITY; /* the fastest of dp, owt and hypar */
    ap_strategy base_s = AP_STRATEGY_DP;
    for (int s = AP_STRATEGY_DP; s <= AP_STRATEGY_ACCPAR; s++) {
      ap_plan_opts o = {.devices = &dv, .strategy = (ap_strategy)s};
      cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s with %s: %s", models[m],
                   ap_strategy_name((ap_strategy)s), d.message);
      ap_plan_summary sum;
      cr_assert(ap_plan_get(g, &sum));
      cr_expect(sum.step_time_s > 0 && isfinite(sum.step_time_s));
      cr_expect_str_eq(sum.optimality, "exact", "%s: series-parallel", models[m]);
      if (s != AP_STRATEGY_ACCPAR && sum.step_time_s < base_time) {
        base_time = sum.step_time_s;
        base_s = (ap_strategy)s;
      }
      /* Every layer node carries one type per level. */
      for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].n_types)
          cr_expect_eq(g->nodes[i].n_types, sum.n_levels);
    }
    ap_plan_summary acc;
    ap_plan_get(g, &acc);
    cr_expect_leq(acc.step_time_s, base_time * 1.000001, "%s: accpar %g, %s %g", models[m],
                  acc.step_time_s, ap_strategy_name(base_s), base_time);
    ap_graph_free(g);
  }
}

/* The zoo's small models, written by accpar-zoo and read back through the
 * frontend: the dynamic program equals every assignment. */
Test(search, dp_equals_exhaustive_on_zoo_files, .timeout = 300) {
  const char *zoo = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  FILE *probe = fopen(zoo, "rb");
  if (!probe)
    cr_skip_test("%s is not built", zoo);
  fclose(probe);
  char dir[] = "/tmp/accpar_zooXXXXXX";
  cr_assert(mkdtemp(dir));
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s --no-weights --batch 16 -o %s mlp lenet5 resnet_block "
                            "inception_block >/dev/null", zoo, dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  static const char *const models[] = {"mlp", "lenet5", "resnet_block", "inception_block"};
  static const char *const specs[] = {"tpuv3:1,tpuv2:1", "cpu:3", "tpuv3:1,tpuv2:1,eyeriss:1"};
  for (size_t m = 0; m < 4; m++)
    for (size_t k = 0; k < 3; k++) {
      char path[600];
      snprintf(path, sizeof path, "%s/%s.onnx", dir, models[m]);
      ap_diag d = {0};
      ap_devices dv;
      cr_assert_eq(ap_devices_parse(specs[k], &dv, &d), AP_OK);
      ap_graph *g = NULL;
      cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
      cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
      ap_plan_summary ex, ap;
      ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_EXHAUSTIVE};
      cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
      ap_plan_get(g, &ex);
      o.strategy = AP_STRATEGY_ACCPAR;
      cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
      ap_plan_get(g, &ap);
      cr_expect_eq(ex.n_levels, 1);
      cr_expect_float_eq(ap.step_time_s, ex.step_time_s, 1e-12 * ex.step_time_s,
                         "%s on %s: DP %.12g, exhaustive %.12g", models[m], specs[k],
                         ap.step_time_s, ex.step_time_s);
      ap_graph_free(g);
    }
  for (size_t m = 0; m < 4; m++) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, models[m]);
    remove(path);
  }
  remove(dir);
}

/* ---- accpar against the baselines ---- */

/* accpar's search space holds every baseline's assignment and ratio, and
 * its plan is timed with the same model, so its predicted step is never
 * longer than dp's, owt's or hypar's (up to float noise). One model
 * (already loaded, batch bound) on one array. */
static void accpar_not_slower(ap_graph *g, const char *model, const char *spec) {
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse(spec, &dv, &d), AP_OK, "%s", d.message);
  double t[AP_STRATEGY_COUNT];
  static const ap_strategy order[] = {AP_STRATEGY_DP, AP_STRATEGY_OWT, AP_STRATEGY_HYPAR,
                                      AP_STRATEGY_ACCPAR};
  for (int i = 0; i < 4; i++) {
    ap_plan_opts o = {.devices = &dv, .strategy = order[i]};
    cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s on %s, %s: %s", model, spec,
                 ap_strategy_name(order[i]), d.message);
    ap_plan_summary s;
    cr_assert(ap_plan_get(g, &s));
    t[order[i]] = s.step_time_s;
  }
  for (int i = 0; i < 3; i++)
    cr_expect_leq(t[AP_STRATEGY_ACCPAR], t[order[i]] * (1 + 1e-9),
                  "%s on %s: accpar %.9g s, %s %.9g s (%.4fx)", model, spec,
                  t[AP_STRATEGY_ACCPAR], ap_strategy_name(order[i]), t[order[i]],
                  t[order[i]] / t[AP_STRATEGY_ACCPAR]);
}

static const char *const baseline_arrays[] = {"tpuv3:1,tpuv2:2", "tpuv3:2,tpuv2:2",
                                              "tpuv3:4,tpuv2:4", "cpu:3", "eyeriss:16"};
enum { N_BASELINE_ARRAYS = sizeof baseline_arrays / sizeof baseline_arrays[0] };

static ap_graph *load_planable(const char *path, int64_t batch) {
  ap_graph *g = NULL;
  ap_diag d = {0};
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  if (batch)
    cr_assert_eq(ap_bind_batch(g, batch, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
  return g;
}

/* ap_fed_weights (one index of the readers, for the distribution and the
 * training roles) says of every value what ap_value_is_fed_weight (a look
 * at every node) says, on models that feed their weights: tied tables,
 * transposes, biases and convolutions. */
Test(plan, fed_weights_from_the_reader_index_equal_each_values_own_look) {
  const char *zoo = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  const char *dir = ACCPAR_BINARY_DIR "/partition-fed-weights"; /* this test's own */
  static const char *const models[] = {"gpt2_tiny", "bert_tiny", "vit_tiny", "resnet_small"};
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' --no-weights --batch 2 "
                            "-o '%s' gpt2_tiny bert_tiny vit_tiny resnet_small >/dev/null",
           dir, dir, zoo, dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, models[m]);
    ap_graph *g = load_planable(path, 0);
    bool *fed = calloc((size_t)g->n_values + 1, sizeof *fed);
    cr_assert(fed);
    ap_fed_weights(g, fed);
    int n_fed = 0;
    for (int v = 0; v < g->n_values; v++) {
      cr_expect_eq(fed[v], ap_value_is_fed_weight(g, v), "%s: value %s", models[m],
                   g->values[v].name);
      n_fed += fed[v];
    }
    cr_expect_gt(n_fed, 3, "%s feeds %d weights", models[m], n_fed);
    free(fed);
    ap_graph_free(g);
    unlink(path);
  }
  rmdir(dir);
}

Test(baselines, accpar_not_slower_on_zoo_models, .timeout = 600) {
  const char *zoo = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  FILE *probe = fopen(zoo, "rb");
  if (!probe)
    cr_skip_test("%s is not built", zoo);
  fclose(probe);
  char dir[] = "/tmp/accpar_baseXXXXXX";
  cr_assert(mkdtemp(dir));
  static const char *const models[] = {"mlp", "lenet5", "resnet_small", "resnet_block",
                                       "inception_block"};
  enum { N = sizeof models / sizeof models[0] };
  char cmd[512];
  snprintf(cmd, sizeof cmd, "%s --no-weights --batch 64 -o %s mlp lenet5 resnet_small "
                            "resnet_block inception_block >/dev/null", zoo, dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  for (size_t m = 0; m < N; m++) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, models[m]);
    ap_graph *g = load_planable(path, 0);
    for (size_t k = 0; k < N_BASELINE_ARRAYS; k++)
      accpar_not_slower(g, models[m], baseline_arrays[k]);
    ap_graph_free(g);
    /* The published array and batch on two of them. */
    if (strcmp(models[m], "lenet5") == 0 || strcmp(models[m], "resnet_small") == 0) {
      g = load_planable(path, 512);
      accpar_not_slower(g, models[m], "tpuv3:64,tpuv2:64");
      ap_graph_free(g);
    }
    remove(path);
  }
  remove(dir);
}

static void light_not_slower(const char *const *models, int n) {
  for (int m = 0; m < n; m++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/onnx-tests/light/light_%s.onnx", ACCPAR_SHARED_DIR,
             models[m]);
    ap_graph *g = load_planable(path, 0);
    for (size_t k = 0; k < N_BASELINE_ARRAYS; k++)
      accpar_not_slower(g, models[m], baseline_arrays[k]);
    ap_graph_free(g);
  }
}

Test(baselines, accpar_not_slower_on_light_models_1, .timeout = 600) {
  static const char *const models[] = {"bvlc_alexnet", "densenet121", "inception_v1",
                                       "inception_v2", "resnet50"};
  light_not_slower(models, 5);
}

Test(baselines, accpar_not_slower_on_light_models_2, .timeout = 600) {
  static const char *const models[] = {"shufflenet", "squeezenet", "vgg19", "zfnet512"};
  light_not_slower(models, 4);
}

/* ---- language models: token ids are activations, embeddings are layers ---- */

/* Gather(table, ids) -> MatMul -> Relu -> MatMul with int64 ids fed at run
 * time: three layers (the planner once saw none: ids were not activations). */
static void build_embedding_mlp(void) {
  int64_t ids_dims[2] = {4, 8}, table[2] = {50, 16}, w1[2] = {16, 32}, w2[2] = {32, 16};
  int ids = input(2, ids_dims);
  G->values[ids].dtype = AP_DT_INT64;
  int64_t e_dims[3] = {4, 8, 16}, h_dims[3] = {4, 8, 32};
  int e = mknode("Gather", 2, (int[]){weight(2, table), ids}, 3, e_dims, 0);
  int h = unary("Relu", mknode("MatMul", 2, (int[]){e, weight(2, w1)}, 3, h_dims, 0));
  finish_graph(mknode("MatMul", 2, (int[]){h, weight(2, w2)}, 3, e_dims, 0));
}

Test(plan, embeddings_and_layers_fed_by_token_ids_are_planned) {
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("tpuv3:1,tpuv2:2", &dv, &d), AP_OK);
  for (int s = AP_STRATEGY_DP; s <= AP_STRATEGY_ACCPAR; s++) {
    new_graph();
    build_embedding_mlp();
    ap_plan_summary sum = plan(&dv, (ap_strategy)s, AP_COST_TIME);
    cr_expect_eq(sum.n_layers, 3, "%s: %d layers", ap_strategy_name((ap_strategy)s),
                 sum.n_layers);
    cr_expect_gt(sum.step_time_s, 0);
    const ap_node *gather = &G->nodes[0];
    cr_assert_eq(gather->op, AP_OP_GATHER);
    cr_expect_eq(gather->n_types, 2, "the embedding is typed at both levels");
    drop_graph();
  }
}

/* A model whose weighted operators no run-time input reaches (every input
 * bound as a constant) has nothing to partition: an error, never an empty
 * plan reported as exact. */
Test(plan, weighted_operators_without_activations_are_an_error) {
  new_graph();
  int64_t d2[2] = {4, 8};
  int x = input(2, d2);
  G->values[x].kind = AP_VAL_CONST;
  finish_graph(gemm(x, 3));
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &d), AP_OK);
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR};
  cr_assert_eq(ap_partition(G, &o, &d), AP_ERR_INVALID);
  cr_expect(strstr(d.message, "node 'Gemm_1' (Gemm): no run-time input reaches this layer"),
            "%s", d.message);
  drop_graph();
}

/* ---- Megatron-LM, rediscovered (docs/transformers.md) ---- */

/* The types of the node named name at every level, as "III,II"; "" when it
 * has none. */
static const char *types_of(const ap_graph *g, const char *name, char *buf, size_t cap) {
  static const char *const t[4] = {"?", "I", "II", "III"};
  buf[0] = 0;
  for (int i = 0; i < g->n_nodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0)
      for (int l = 0; l < g->nodes[i].n_types; l++) {
        size_t len = strlen(buf);
        snprintf(buf + len, cap - len, "%s%s", l ? "," : "", t[g->nodes[i].types[l] & 3]);
      }
  return buf;
}

/* GPT-2 small at batch 1 over two TPU v3, where model parallelism wins by
 * 1.39x: every block splits Q, K, V and the first MLP layer by output
 * features, the second MLP layer by input features, attention by heads; the
 * embedding by vocabulary (II) or by hidden size (III, which splits the
 * position table's rows added to it as well, so that their gradient is not
 * all-reduced). The attention's output projection is Megatron's II
 * or, moving the same bytes in the same messages, III followed by the
 * residual's all-gather: either is accepted here (docs/transformers.md). */
Test(plan, gpt2_small_plans_as_megatron_lm, .timeout = 300) {
  const char *zoo = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  char dir[] = "/tmp/accpar_gptXXXXXX", cmd[600], path[600], name[256], buf[64];
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "%s --no-weights --batch 1 -o %s gpt2 >/dev/null", zoo, dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  snprintf(path, sizeof path, "%s/gpt2.onnx", dir);
  ap_diag d = {0};
  ap_devices dv;
  ap_graph *g = NULL;
  cr_assert_eq(ap_devices_parse("tpuv3:2", &dv, &d), AP_OK);
  cr_assert_eq(ap_load_onnx(path, &g, &d), AP_OK, "%s", d.message);
  cr_assert_eq(ap_run_pipeline(g, &(ap_pipeline_opts){0}, &d), AP_OK, "%s", d.message);
  ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR};
  cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
  types_of(g, "transformer/wte/Gather", buf, sizeof buf);
  cr_expect(strcmp(buf, "II") == 0 || strcmp(buf, "III") == 0, "wte: %s", buf);
  cr_expect_str_eq(types_of(g, "lm_head/MatMul", buf, sizeof buf), "III");
  for (int l = 0; l < 12; l++) {
    for (int part = 0; part < 3; part++) {
      snprintf(name, sizeof name, "transformer.h.%d/attn/c_attn/Split/part%d/matmul", l, part);
      cr_expect_str_eq(types_of(g, name, buf, sizeof buf), "III", "%s", name);
    }
    snprintf(name, sizeof name, "transformer.h.%d.mlp.c_fc/MatMul", l);
    cr_expect_str_eq(types_of(g, name, buf, sizeof buf), "III", "%s", name);
    snprintf(name, sizeof name, "transformer.h.%d.mlp.c_proj/MatMul", l);
    cr_expect_str_eq(types_of(g, name, buf, sizeof buf), "II", "%s", name);
    snprintf(name, sizeof name, "transformer.h.%d.attn.c_proj/MatMul", l);
    types_of(g, name, buf, sizeof buf);
    cr_expect(strcmp(buf, "II") == 0 || strcmp(buf, "III") == 0, "%s: %s", name, buf);
  }
  /* Attention by heads: Q.K^T and P.V split along their heads axis. */
  const ap_plan *p = g->plan;
  int joins = 0;
  for (int v = 0; v < p->n_vertices; v++) {
    const ap_node *n = &g->nodes[p->v[v].node];
    if (n->op != AP_OP_MATMUL || !p->v[v].join)
      continue;
    joins++;
    cr_expect_eq(p->state[v] % 3, 1, "%s: not split along its second dimension", n->name);
    cr_expect_eq(p->v[v].port[0].dim[1], 1, "%s: the second dimension is not the heads",
                 n->name);
  }
  cr_expect_eq(joins, 24, "%d attention MatMuls", joins);
  ap_graph_free(g);
  remove(path);
  remove(dir);
}

/* ---- the published AccPar program's tables ---- */

/* What the published program (github.com/linghaosong/AccPar at 51515db,
 * built outside this repository: `make && ./accpar networks/Alexnet.txt -1`,
 * and Vgg11.txt; batch 512 and 7 binary levels are fixed in its main.cpp)
 * prints for dp ("DATA PAR"), owt ("THE TRICK"), hypar and accpar: each
 * layer's type per level, 1 = I, 2 = II, 3 = III, transcribed from its
 * output. `elements` is the sum over levels of its dynamic program's
 * minimum (com_cost, which the program computes but does not print; read
 * with a print statement added to a copy); 0 where it runs no search. The
 * models are accpar-zoo's alexnet_paper and vgg11_paper, declared as it
 * declares them (docs/partition.md, "The published program's tables"). */
typedef struct published_table {
  const char *model;
  ap_strategy strategy;
  double elements;
  const char *types[11]; /* "node:types at L0..L6" */
} published_table;

static const published_table published_tables[] = {
    {"alexnet_paper", AP_STRATEGY_DP, 0,
     {"conv1:1111111", "conv2:1111111", "conv3:1111111", "conv4:1111111", "conv5:1111111",
      "fc1:1111111", "fc2:1111111", "fc3:1111111"}},
    {"alexnet_paper", AP_STRATEGY_OWT, 0,
     {"conv1:1111111", "conv2:1111111", "conv3:1111111", "conv4:1111111", "conv5:1111111",
      "fc1:2222222", "fc2:2222222", "fc3:2222222"}},
    {"alexnet_paper", AP_STRATEGY_HYPAR, 60035296,
     {"conv1:1111111", "conv2:1111111", "conv3:1111111", "conv4:1111112", "conv5:1111122",
      "fc1:2222212", "fc2:2221212", "fc3:2221212"}},
    {"alexnet_paper", AP_STRATEGY_ACCPAR, 47431392,
     {"conv1:1111111", "conv2:1111111", "conv3:1111111", "conv4:1111131", "conv5:1111122",
      "fc1:2323232", "fc2:3232323", "fc3:2223232"}},
    {"vgg11_paper", AP_STRATEGY_DP, 0,
     {"conv1:1111111", "conv2:1111111", "conv31:1111111", "conv32:1111111", "conv41:1111111",
      "conv42:1111111", "conv51:1111111", "conv52:1111111", "fc1:1111111", "fc2:1111111",
      "fc3:1111111"}},
    {"vgg11_paper", AP_STRATEGY_OWT, 0,
     {"conv1:1111111", "conv2:1111111", "conv31:1111111", "conv32:1111111", "conv41:1111111",
      "conv42:1111111", "conv51:1111111", "conv52:1111111", "fc1:2222222", "fc2:2222222",
      "fc3:2222222"}},
    {"vgg11_paper", AP_STRATEGY_HYPAR, 105286464,
     {"conv1:1111111", "conv2:1111111", "conv31:1111111", "conv32:1111111", "conv41:1111111",
      "conv42:1111111", "conv51:1111112", "conv52:1111122", "fc1:2222221", "fc2:2221212",
      "fc3:2221212"}},
    {"vgg11_paper", AP_STRATEGY_ACCPAR, 93749056,
     {"conv1:1111111", "conv2:1111111", "conv31:1111111", "conv32:1111111", "conv41:1111113",
      "conv42:1111112", "conv51:1111132", "conv52:1111223", "fc1:2223322", "fc2:3322233",
      "fc3:2232322"}},
};

/* `--cost paper` on the two models at 128 devices, batch 512, gives every
 * table and every searched minimum; the golden files plan_*_paper_* show
 * the same tables through accparc, from the model files in
 * tests/golden/models, which must be what accpar-zoo writes now. */
Test(paper, published_program_tables_on_alexnet_and_vgg11, .timeout = 300) {
  const char *zoo = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  char dir[] = "/tmp/accpar_paperXXXXXX", cmd[1200], path[600];
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "%s --no-weights --batch 0 -o %s alexnet_paper vgg11_paper >/dev/null",
           zoo, dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("tpuv3:64,tpuv2:64", &dv, &d), AP_OK, "%s", d.message);
  for (size_t t = 0; t < sizeof published_tables / sizeof published_tables[0]; t++) {
    const published_table *pt = &published_tables[t];
    snprintf(path, sizeof path, "%s/%s.onnx", dir, pt->model);
    snprintf(cmd, sizeof cmd, "cmp -s %s %s/tests/golden/models/%s.onnx", path,
             ACCPAR_SOURCE_DIR, pt->model);
    cr_expect_eq(system(cmd), 0, "tests/golden/models/%s.onnx is not what accpar-zoo writes",
                 pt->model);
    ap_graph *g = load_planable(path, 512);
    ap_plan_opts o = {.devices = &dv, .strategy = pt->strategy, .cost = AP_COST_PAPER};
    cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
    const char *name = ap_strategy_name(pt->strategy);
    int layers = 0;
    for (int i = 0; i < 11 && pt->types[i]; i++) {
      const char *colon = strchr(pt->types[i], ':');
      char want[16], got[16] = "";
      snprintf(want, sizeof want, "%s", colon + 1);
      for (int n = 0; n < g->n_nodes; n++) {
        const ap_node *nd = &g->nodes[n];
        if (strncmp(nd->name, pt->types[i], (size_t)(colon - pt->types[i])) != 0 ||
            nd->name[colon - pt->types[i]])
          continue;
        for (int l = 0; l < nd->n_types && l < 15; l++)
          got[l] = (char)('0' + nd->types[l]), got[l + 1] = 0;
      }
      cr_expect_str_eq(got, want, "%s, %s, %.*s: types %s, published %s", pt->model, name,
                       (int)(colon - pt->types[i]), pt->types[i], got, want);
      layers++;
    }
    int planned = 0;
    for (int n = 0; n < g->n_nodes; n++)
      planned += g->nodes[n].n_types > 0;
    cr_expect_eq(planned, layers, "%s: %d layers planned, the published program has %d",
                 pt->model, planned, layers);
    ap_plan_summary s;
    cr_assert(ap_plan_get(g, &s));
    if (pt->elements > 0)
      cr_expect_float_eq(s.paper_cost, pt->elements, 0.5, "%s, %s: %.9g elements, published %.9g",
                         pt->model, name, s.paper_cost, pt->elements);
    ap_graph_free(g);
  }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

/* Where pooling is its own node, a type II layer's all-reduce is priced
 * before it: the sum of max-pooled summands is not the max-pool of the sum,
 * so the partial output is reduced at the layer's own resolution. The
 * published program declares the pooling inside the layer and prices
 * A(F[l+1]) after it, 4x less for a 2x2 pool (docs/partition.md). Conv
 * 8x4x8x8 -> 2x2 max pool, two devices: each sends the whole 8x4x8x8
 * output (8192 bytes), not the pooled 8x4x4x4 (2048). */
Test(paper, a_type_II_all_reduce_is_priced_before_its_pooling) {
  new_graph();
  int64_t d[4] = {8, 4, 8, 8};
  int c = conv(input(4, d), 4, 3, 1, 1);
  finish_graph(gemm(flatten(maxpool(unary("Relu", c), 2, 2, 0)), 10));
  ap_devices dv;
  ap_diag dg = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &dg), AP_OK);
  plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_PAPER);
  const ap_plan *p = G->plan;
  int cv = -1;
  for (int v = 0; v < p->n_vertices; v++)
    if (G->nodes[p->v[v].node].op == AP_OP_CONV)
      cv = v;
  cr_assert_geq(cv, 0);
  ap_exchange x;
  ap_plan_intra_exchange(p, G, &p->cls[0][0], cv, 1, &x);
  double before = 8 * 4 * 8 * 8 * 4, after = 8 * 4 * 4 * 4 * 4;
  cr_expect_eq(x.allreduce_bytes[0], before, "%g bytes, expected %g (after the pool: %g)",
               x.allreduce_bytes[0], before, after);
  cr_expect_eq(x.allreduce_bytes[1], before);
  drop_graph();
}

/* A residual join is a vertex of its own. The published program instead
 * charges the layer after the join two conversions: from the layer before
 * the join (its inter-layer table) and from the block's input (its
 * Com_Cost_Inter_Layer_Block), the second dropped when the predecessor's
 * best type is I. Here the block's input s is a layer's output, a and b the
 * block's layers, l the layer after the join, every activation 8x4x4x4
 * floats (A = 2048 bytes), two devices at ratio 1/2: for every type of s, b
 * and l, the join in its cheapest state costs at most the two conversions
 * into l's input, each by the published inter-layer table (the join can
 * take l's input layout); it costs A/2 where both summands are split by
 * channels (type III) and l is type I (the sum is converted once, the two
 * conversions cost A), and A/2 where s is type III and b type I, which the
 * published program's dynamic program drops (docs/partition.md). */
Test(paper, a_residual_join_costs_at_most_the_two_conversions) {
  new_graph();
  int64_t d[4] = {8, 4, 4, 4};
  int s = unary("Relu", conv(input(4, d), 4, 3, 1, 1));
  int b = conv(unary("Relu", conv(s, 4, 3, 1, 1)), 4, 3, 1, 1);
  finish_graph(conv(unary("Relu", add(b, s)), 4, 3, 1, 1));
  ap_devices dv;
  ap_diag dg = {0};
  cr_assert_eq(ap_devices_parse("cpu:2", &dv, &dg), AP_OK);
  plan(&dv, AP_STRATEGY_ACCPAR, AP_COST_PAPER);
  const ap_plan *p = G->plan;
  cr_assert_eq(p->n_vertices, 5);
  /* Vertices in graph order: s, a, b, the join, l. */
  int vs = 0, vb = 2, vj = 3, vl = 4, e_b = -1, e_s = -1, e_l = -1;
  cr_assert(p->v[vj].join && !p->v[vl].join);
  for (int e = 0; e < p->n_edges; e++) {
    if (p->e[e].to == vj)
      *(p->e[e].from == vb ? &e_b : &e_s) = e;
    if (p->e[e].from == vj && p->e[e].to == vl)
      e_l = e;
  }
  cr_assert(e_b >= 0 && e_s >= 0 && e_l >= 0 && p->e[e_s].from == vs);
  const ap_class *root = &p->cls[0][0];
  double half[AP_MAX_CHILDREN] = {0.5, 0.5}, A = 8 * 4 * 4 * 4 * 4;
  double inter[3][3] = {{0, A / 2, A / 2}, {A / 2, A / 2, 0}, {A / 2, 0, A / 2}};
  double join[3][3][3]; /* [s][b][l]: the join's three edges, its cheapest state */
  for (int ts = 0; ts < 3; ts++)
    for (int tb = 0; tb < 3; tb++)
      for (int tl = 0; tl < 3; tl++) {
        double best = INFINITY;
        for (int tj = 0; tj < 3; tj++) {
          double sum = 0;
          const int ends[3][3] = {{e_b, tb, tj}, {e_s, ts, tj}, {e_l, tj, tl}};
          for (int k = 0; k < 3; k++) {
            ap_exchange fwd, bwd;
            ap_plan_edge_exchange(p, G, root, ends[k][0], ends[k][1], ends[k][2], half, half,
                                  &fwd, &bwd);
            sum += fwd.send_bytes[0] + fwd.allreduce_bytes[0] + bwd.send_bytes[0] +
                   bwd.allreduce_bytes[0];
          }
          best = fmin(best, sum);
        }
        join[ts][tb][tl] = best;
        double two = inter[tb][tl] + inter[ts][tl];
        cr_expect_leq(best, two, "s %d, b %d, l %d: the join %g bytes, two conversions %g",
                      ts + 1, tb + 1, tl + 1, best, two);
      }
  cr_expect_eq(join[2][2][0], A / 2, "%g", join[2][2][0]);
  cr_expect_eq(join[2][0][0], A / 2, "%g", join[2][0][0]);
  drop_graph();
}

/* ---- Altsplit ---- */

/* Altsplit (Zhuang's thesis, github.com/zhuangsc/altsplit) splits an MLP's
 * consecutive layers alternately by output and by input features over all
 * processes: types III, II, III, II..., so no activation is converted
 * between layers and only every second layer all-reduces (its output
 * forward, its output's error backward). On its MLPs (784 inputs, 3 or 5
 * hidden layers of 16384, 10 outputs) at batch 512 and 1024 over 640
 * processes, `--cost paper` plans level 0 exactly so, and at every level
 * each pair of consecutive 16384x16384 layers takes II and III, one each,
 * alternating the other way round from level to level (docs/partition.md,
 * "Altsplit"). */
Test(paper, altsplit_mlps_alternate_ii_and_iii, .timeout = 300) {
  const char *zoo = ACCPAR_BINARY_DIR "/samples/accpar-zoo";
  char dir[] = "/tmp/accpar_altXXXXXX", cmd[600], path[600];
  cr_assert(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "%s --no-weights --batch 0 -o %s mlp16k_3 mlp16k_5 >/dev/null", zoo,
           dir);
  cr_assert_eq(system(cmd), 0, "%s", cmd);
  ap_devices dv;
  ap_diag d = {0};
  cr_assert_eq(ap_devices_parse("cpu:640", &dv, &d), AP_OK, "%s", d.message);
  static const int hidden[2] = {3, 5};
  static const int64_t batch[2] = {512, 1024};
  for (int m = 0; m < 2; m++)
    for (int b = 0; b < 2; b++) {
      snprintf(path, sizeof path, "%s/mlp16k_%d.onnx", dir, hidden[m]);
      ap_graph *g = load_planable(path, batch[b]);
      ap_plan_opts o = {.devices = &dv, .strategy = AP_STRATEGY_ACCPAR, .cost = AP_COST_PAPER};
      cr_assert_eq(ap_partition(g, &o, &d), AP_OK, "%s", d.message);
      const ap_node *fc[8] = {0};
      int n_fc = 0;
      for (int n = 0; n < g->n_nodes; n++)
        if (g->nodes[n].n_types > 0 && n_fc < 8)
          fc[n_fc++] = &g->nodes[n];
      cr_assert_eq(n_fc, hidden[m] + 1);
      cr_assert_eq(fc[0]->n_types, 8, "640 = 2^7 x 5: 8 levels, got %d", fc[0]->n_types);
      for (int i = 0; i < n_fc; i++) /* level 0: III, II, III, II... as Altsplit */
        cr_expect_eq(fc[i]->types[0], i % 2 ? 2 : 3, "mlp16k_%d, batch %lld: %s at level 0: %d",
                     hidden[m], (long long)batch[b], fc[i]->name, fc[i]->types[0]);
      for (int l = 0; l < fc[0]->n_types; l++)
        for (int i = 1; i + 1 < hidden[m]; i++) {
          int t = fc[i]->types[l], u = fc[i + 1]->types[l];
          cr_expect((t == 2 && u == 3) || (t == 3 && u == 2),
                    "mlp16k_%d, batch %lld, level %d: %s %d, %s %d", hidden[m],
                    (long long)batch[b], l, fc[i]->name, t, fc[i + 1]->name, u);
          if (l > 0)
            cr_expect_neq(t, fc[i]->types[l - 1], "mlp16k_%d, batch %lld: %s keeps %d at level %d",
                          hidden[m], (long long)batch[b], fc[i]->name, t, l);
        }
      ap_graph_free(g);
    }
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}
