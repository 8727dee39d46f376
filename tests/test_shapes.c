/* Shape inference and constant folding on small graphs built with the IR
 * builders: one or more tests per operator family, the errors a malformed
 * model must produce (one line, naming the node), and the folding kernels'
 * numerics. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ir/ir.h"

enum { MAX_ATTRS = 8 };

static ap_graph *graph(int64_t opset) {
  ap_graph *g = ap_graph_new("t.onnx");
  cr_assert_not_null(g);
  g->opset = opset;
  return g;
}

/* A graph input of the given dtype and dims (-1 for unknown). */
static int input(ap_graph *g, const char *name, ap_dtype dt, int rank, ...) {
  int v = ap_graph_add_value(g, name, AP_VAL_INPUT);
  cr_assert_geq(v, 0);
  va_list ap;
  va_start(ap, rank);
  g->values[v].dtype = dt;
  g->values[v].rank = rank;
  for (int i = 0; i < rank; i++)
    g->values[v].dims[i] = va_arg(ap, int64_t);
  va_end(ap);
  cr_assert(ap_graph_add_input(g, v));
  return v;
}

/* A constant 1-D tensor (or a scalar when rank is 0) of n values. */
static int constant(ap_graph *g, const char *name, ap_dtype dt, int rank, int n,
                    const double *vals) {
  int v = ap_graph_add_value(g, name, AP_VAL_CONST);
  cr_assert_geq(v, 0);
  char buf[256 * 8];
  ap_tensor t = {.dtype = dt, .rank = rank, .dims = {n}, .numel = n, .data = buf};
  for (int i = 0; i < n; i++)
    ap_tensor_set_f64(&t, i, vals[i]);
  cr_assert(ap_value_set_constant(g, v, &t));
  return v;
}

static int ints(ap_graph *g, const char *name, int n, ...) {
  double vals[16];
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++)
    vals[i] = (double)va_arg(ap, int64_t);
  va_end(ap);
  return constant(g, name, AP_DT_INT64, 1, n, vals);
}

/* A node of type op on inputs in[] (-1 for omitted) with n_out fresh
 * outputs named NAME_K; attributes are added with the attr_* helpers. */
static int node(ap_graph *g, const char *name, const char *op, int n_in, const int *in,
                int n_out) {
  int n = ap_graph_add_node(g, name, "", op, n_in, n_out, MAX_ATTRS);
  cr_assert_geq(n, 0);
  g->nodes[n].n_attr = 0;
  for (int i = 0; i < n_in; i++)
    g->nodes[n].in[i] = in[i];
  for (int k = 0; k < n_out; k++) {
    char out[128];
    snprintf(out, sizeof out, "%s_%d", name, k);
    int v = ap_graph_add_value(g, out, AP_VAL_NODE);
    cr_assert_geq(v, 0);
    g->nodes[n].out[k] = v;
  }
  ap_graph_link(g);
  return n;
}

static ap_attr *attr(ap_graph *g, int n, const char *name, ap_attr_type type) {
  ap_node *nd = &g->nodes[n];
  cr_assert_lt(nd->n_attr, MAX_ATTRS);
  ap_attr *a = &nd->attr[nd->n_attr++];
  memset(a, 0, sizeof *a);
  a->name = name;
  a->type = type;
  return a;
}

static void attr_int(ap_graph *g, int n, const char *name, int64_t v) {
  attr(g, n, name, AP_ATTR_INT)->i = v;
}

static void attr_str(ap_graph *g, int n, const char *name, const char *s) {
  ap_attr *a = attr(g, n, name, AP_ATTR_STRING);
  a->s = s;
  a->s_len = strlen(s);
}

static void attr_ints(ap_graph *g, int n, const char *name, int count, ...) {
  ap_attr *a = attr(g, n, name, AP_ATTR_INTS);
  a->ints = ap_arena_array(g->arena, (size_t)count + 1, sizeof *a->ints);
  a->n = count;
  va_list ap;
  va_start(ap, count);
  for (int i = 0; i < count; i++)
    a->ints[i] = va_arg(ap, int64_t);
  va_end(ap);
}

static int out(const ap_graph *g, int n, int k) { return g->nodes[n].out[k]; }

/* Makes output k of node n a graph output, so compaction keeps it. */
static int keep(ap_graph *g, int n, int k) {
  cr_assert(ap_graph_add_output(g, out(g, n, k)));
  return out(g, n, k);
}

/* Expects value v to have dtype dt and the given dims. */
static void expect_shape(const ap_graph *g, int v, ap_dtype dt, int rank, ...) {
  const ap_value *val = &g->values[v];
  cr_expect_eq(val->dtype, dt, "%s: dtype %s, expected %s", val->name,
               ap_dtype_name(val->dtype), ap_dtype_name(dt));
  cr_assert_eq(val->rank, rank, "%s: rank %d, expected %d", val->name, val->rank, rank);
  va_list ap;
  va_start(ap, rank);
  for (int i = 0; i < rank; i++) {
    int64_t want = va_arg(ap, int64_t);
    cr_expect_eq(val->dims[i], want, "%s: dim %d is %lld, expected %lld", val->name, i,
                 (long long)val->dims[i], (long long)want);
  }
  va_end(ap);
}

static void infer_ok(ap_graph *g) {
  ap_diag d = {0};
  cr_assert_eq(ap_infer_shapes(g, &d), AP_OK, "%s", d.message);
}

/* Inference fails with AP_ERR_INVALID, naming the node and containing what. */
static void infer_fails(ap_graph *g, const char *node_name, const char *what) {
  ap_diag d = {0};
  cr_assert_eq(ap_infer_shapes(g, &d), AP_ERR_INVALID, "inference passed; expected '%s'",
               what);
  char name[128];
  snprintf(name, sizeof name, "node '%s'", node_name);
  cr_expect(strstr(d.message, name), "message does not name the node: %s", d.message);
  cr_expect(strstr(d.message, what), "message lacks '%s': %s", what, d.message);
  cr_expect(!strchr(d.message, '\n'));
}

static void fold_ok(ap_graph *g) {
  ap_diag d = {0};
  cr_assert_eq(ap_fold_constants(g, &d), AP_OK, "%s", d.message);
}

static double elem(const ap_graph *g, int v, int64_t i) {
  ap_tensor t = ap_value_tensor(&g->values[v]);
  cr_assert_not_null(t.data, "%s is not a constant", g->values[v].name);
  return ap_tensor_get_f64(&t, i);
}

#define I(x) ((int64_t)(x))

/* ---- convolution and pooling ---- */

Test(conv, pads_strides_dilations) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(1), I(3), I(32), I(32));
  int w = input(g, "w", AP_DT_FLOAT, 4, I(8), I(3), I(3), I(3));
  int n = node(g, "c", "Conv", 2, (int[]){x, w}, 1);
  attr_ints(g, n, "pads", 4, I(1), I(1), I(1), I(1));
  attr_ints(g, n, "strides", 2, I(2), I(1));
  attr_ints(g, n, "dilations", 2, I(1), I(2));
  infer_ok(g);
  /* H: (32+2-3)/2+1 = 16; W: (32+2-5)/1+1 = 30 */
  expect_shape(g, out(g, n, 0), AP_DT_FLOAT, 4, I(1), I(8), I(16), I(30));
  ap_graph_free(g);
}

Test(conv, auto_pad_same_and_groups_keep_batch_symbol) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(-1), I(4), I(7), I(7));
  g->values[x].sym[0] = "N";
  int w = input(g, "w", AP_DT_FLOAT, 4, I(6), I(2), I(3), I(3));
  int n = node(g, "c", "Conv", 2, (int[]){x, w}, 1);
  attr_str(g, n, "auto_pad", "SAME_UPPER");
  attr_ints(g, n, "strides", 2, I(2), I(2));
  attr_int(g, n, "group", 2);
  infer_ok(g);
  expect_shape(g, out(g, n, 0), AP_DT_FLOAT, 4, I(-1), I(6), I(4), I(4));
  cr_expect_str_eq(g->values[out(g, n, 0)].sym[0], "N");
  ap_graph_free(g);
}

Test(conv, channel_mismatch_is_an_error) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(1), I(3), I(8), I(8));
  int w = input(g, "w", AP_DT_FLOAT, 4, I(8), I(4), I(3), I(3));
  node(g, "conv1", "Conv", 2, (int[]){x, w}, 1);
  infer_fails(g, "conv1", "channels");
  ap_graph_free(g);
}

Test(conv, malformed_attributes_are_errors) {
  static const char *const cases[] = {"pads", "strides", "kernel_shape", "dilations"};
  for (int k = 0; k < 4; k++) {
    ap_graph *g = graph(13);
    int x = input(g, "x", AP_DT_FLOAT, 4, I(1), I(3), I(8), I(8));
    int w = input(g, "w", AP_DT_FLOAT, 4, I(8), I(3), I(3), I(3));
    int n = node(g, "bad", "Conv", 2, (int[]){x, w}, 1);
    if (k == 0)
      attr_ints(g, n, "pads", 3, I(1), I(1), I(1)); /* wrong count */
    else if (k == 1)
      attr_ints(g, n, "strides", 2, I(0), I(1)); /* non-positive */
    else if (k == 2)
      attr_ints(g, n, "kernel_shape", 2, I(-3), I(3));
    else
      attr_ints(g, n, "dilations", 2, I(1), INT64_MAX);
    infer_fails(g, "bad", cases[k]);
    ap_graph_free(g);
  }
}

Test(conv, kernel_larger_than_input) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(1), I(1), I(2));
  int w = input(g, "w", AP_DT_FLOAT, 3, I(1), I(1), I(5));
  node(g, "c", "Conv", 2, (int[]){x, w}, 1);
  infer_fails(g, "c", "larger than the padded input");
  ap_graph_free(g);
}

Test(conv_transpose, pads_output_padding_and_output_shape) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(1), I(1), I(3), I(3));
  int w = input(g, "w", AP_DT_FLOAT, 4, I(1), I(2), I(3), I(3));
  int a = node(g, "a", "ConvTranspose", 2, (int[]){x, w}, 1);
  attr_ints(g, a, "strides", 2, I(3), I(2));
  attr_ints(g, a, "output_padding", 2, I(1), I(1));
  attr_ints(g, a, "pads", 4, I(1), I(0), I(1), I(0));
  int b = node(g, "b", "ConvTranspose", 2, (int[]){x, w}, 1);
  attr_ints(g, b, "strides", 2, I(3), I(2));
  attr_ints(g, b, "output_shape", 2, I(10), I(8));
  int s = node(g, "s", "ConvTranspose", 2, (int[]){x, w}, 1);
  attr_str(g, s, "auto_pad", "SAME_UPPER");
  attr_ints(g, s, "strides", 2, I(2), I(2));
  attr_int(g, s, "group", 1);
  infer_ok(g);
  /* 3*(3-1)+1+3-2 = 8, 2*(3-1)+1+3-0 = 8 */
  expect_shape(g, out(g, a, 0), AP_DT_FLOAT, 4, I(1), I(2), I(8), I(8));
  expect_shape(g, out(g, b, 0), AP_DT_FLOAT, 4, I(1), I(2), I(10), I(8));
  expect_shape(g, out(g, s, 0), AP_DT_FLOAT, 4, I(1), I(2), I(6), I(6));
  ap_graph_free(g);
}

Test(pool, ceil_mode_and_indices) {
  ap_graph *g = graph(12);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(1), I(2), I(5), I(2));
  int n = node(g, "p", "MaxPool", 1, &x, 2);
  attr_ints(g, n, "kernel_shape", 2, I(2), I(1));
  attr_ints(g, n, "strides", 2, I(2), I(2));
  attr_int(g, n, "ceil_mode", 1);
  int a = node(g, "a", "AveragePool", 1, &x, 1);
  attr_ints(g, a, "kernel_shape", 2, I(2), I(1));
  attr_ints(g, a, "strides", 2, I(2), I(2));
  int gp = node(g, "gp", "GlobalAveragePool", 1, &x, 1);
  infer_ok(g);
  /* H: ceil(3/2)+1 = 3. W: ceil(1/2)+1 = 2, but the last window would start
   * at 2 >= 2 (in the padding), so 1. */
  expect_shape(g, out(g, n, 0), AP_DT_FLOAT, 4, I(1), I(2), I(3), I(1));
  expect_shape(g, out(g, n, 1), AP_DT_INT64, 4, I(1), I(2), I(3), I(1));
  expect_shape(g, out(g, a, 0), AP_DT_FLOAT, 4, I(1), I(2), I(2), I(1));
  expect_shape(g, out(g, gp, 0), AP_DT_FLOAT, 4, I(1), I(2), I(1), I(1));
  ap_graph_free(g);
}

Test(pool, kernel_shape_is_required) {
  ap_graph *g = graph(12);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(1), I(2), I(5), I(5));
  node(g, "p", "MaxPool", 1, &x, 1);
  infer_fails(g, "p", "kernel_shape");
  ap_graph_free(g);
}

/* ---- matrix products ---- */

Test(gemm, transposes) {
  ap_graph *g = graph(13);
  int a = input(g, "a", AP_DT_FLOAT, 2, I(4), I(3));
  int b = input(g, "b", AP_DT_FLOAT, 2, I(5), I(4));
  int c = input(g, "c", AP_DT_FLOAT, 1, I(5));
  int n = node(g, "g", "Gemm", 3, (int[]){a, b, c}, 1);
  attr_int(g, n, "transA", 1);
  attr_int(g, n, "transB", 1);
  infer_ok(g);
  expect_shape(g, out(g, n, 0), AP_DT_FLOAT, 2, I(3), I(5));
  ap_graph_free(g);
}

Test(gemm, inner_mismatch) {
  ap_graph *g = graph(13);
  int a = input(g, "a", AP_DT_FLOAT, 2, I(4), I(3));
  int b = input(g, "b", AP_DT_FLOAT, 2, I(4), I(5));
  node(g, "g", "Gemm", 2, (int[]){a, b}, 1);
  infer_fails(g, "g", "inner dims differ");
  ap_graph_free(g);
}

Test(matmul, promotion_and_batch_broadcast) {
  ap_graph *g = graph(13);
  int v3 = input(g, "v3", AP_DT_FLOAT, 1, I(3));
  int m34 = input(g, "m34", AP_DT_FLOAT, 2, I(3), I(4));
  int t = input(g, "t", AP_DT_FLOAT, 4, I(2), I(1), I(3), I(4));
  int u = input(g, "u", AP_DT_FLOAT, 3, I(5), I(4), I(6));
  int v4 = input(g, "v4", AP_DT_FLOAT, 1, I(4));
  int a = node(g, "a", "MatMul", 2, (int[]){v3, m34}, 1);
  int b = node(g, "b", "MatMul", 2, (int[]){t, u}, 1);
  int c = node(g, "c", "MatMul", 2, (int[]){t, v4}, 1);
  int d = node(g, "d", "MatMul", 2, (int[]){v4, v4}, 1);
  infer_ok(g);
  expect_shape(g, out(g, a, 0), AP_DT_FLOAT, 1, I(4));
  expect_shape(g, out(g, b, 0), AP_DT_FLOAT, 4, I(2), I(5), I(3), I(6));
  expect_shape(g, out(g, c, 0), AP_DT_FLOAT, 3, I(2), I(1), I(3));
  expect_shape(g, out(g, d, 0), AP_DT_FLOAT, 0);
  ap_graph_free(g);
}

Test(matmul, inner_mismatch) {
  ap_graph *g = graph(13);
  int a = input(g, "a", AP_DT_FLOAT, 2, I(2), I(3));
  int b = input(g, "b", AP_DT_FLOAT, 2, I(4), I(3));
  node(g, "mm", "MatMul", 2, (int[]){a, b}, 1);
  infer_fails(g, "mm", "inner dims differ");
  ap_graph_free(g);
}

/* ---- element-wise ---- */

Test(ewise, broadcast_types_and_symbols) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(-1), I(3), I(1));
  g->values[x].sym[0] = "batch";
  int y = input(g, "y", AP_DT_FLOAT, 1, I(4));
  int a = node(g, "add", "Add", 2, (int[]){x, y}, 1);
  int s = node(g, "sum", "Sum", 3, (int[]){x, y, y}, 1);
  int l = node(g, "less", "Less", 2, (int[]){x, y}, 1);
  int r = node(g, "relu", "Relu", 1, &x, 1);
  int c = node(g, "cast", "Cast", 1, &x, 1);
  attr_int(g, c, "to", AP_DT_INT32);
  int cl = node(g, "castlike", "CastLike", 2, (int[]){y, out(g, c, 0)}, 1);
  int cond = out(g, l, 0);
  int w = node(g, "where", "Where", 3, (int[]){cond, x, y}, 1);
  int dr = node(g, "drop", "Dropout", 1, &x, 2);
  infer_ok(g);
  expect_shape(g, out(g, a, 0), AP_DT_FLOAT, 3, I(-1), I(3), I(4));
  cr_expect_str_eq(g->values[out(g, a, 0)].sym[0], "batch");
  expect_shape(g, out(g, s, 0), AP_DT_FLOAT, 3, I(-1), I(3), I(4));
  expect_shape(g, out(g, l, 0), AP_DT_BOOL, 3, I(-1), I(3), I(4));
  expect_shape(g, out(g, r, 0), AP_DT_FLOAT, 3, I(-1), I(3), I(1));
  cr_expect_str_eq(g->values[out(g, r, 0)].sym[0], "batch");
  expect_shape(g, out(g, c, 0), AP_DT_INT32, 3, I(-1), I(3), I(1));
  expect_shape(g, out(g, cl, 0), AP_DT_INT32, 1, I(4));
  expect_shape(g, out(g, w, 0), AP_DT_FLOAT, 3, I(-1), I(3), I(4));
  expect_shape(g, out(g, dr, 1), AP_DT_BOOL, 3, I(-1), I(3), I(1));
  ap_graph_free(g);
}

Test(ewise, incompatible_broadcast) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(3));
  int y = input(g, "y", AP_DT_FLOAT, 1, I(4));
  node(g, "add", "Add", 2, (int[]){x, y}, 1);
  infer_fails(g, "add", "cannot broadcast");
  ap_graph_free(g);
}

Test(ewise, mixed_types_and_float8_cast) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 1, I(2));
  int y = input(g, "y", AP_DT_INT64, 1, I(2));
  node(g, "mul", "Mul", 2, (int[]){x, y}, 1);
  infer_fails(g, "mul", "same element type");
  ap_graph_free(g);

  g = graph(19);
  x = input(g, "x", AP_DT_FLOAT, 1, I(2));
  int c = node(g, "c8", "Cast", 1, &x, 1);
  attr_int(g, c, "to", 17);
  ap_diag d = {0};
  cr_expect_eq(ap_infer_shapes(g, &d), AP_ERR_UNSUPPORTED);
  cr_expect(strstr(d.message, "float8e4m3fn"), "%s", d.message);
  ap_graph_free(g);
}

/* ---- normalizations and reductions ---- */

Test(norm, batchnorm_training_and_layernorm_stats) {
  ap_graph *g = graph(17);
  int x = input(g, "x", AP_DT_FLOAT16, 4, I(2), I(3), I(4), I(5));
  int p = input(g, "p", AP_DT_FLOAT16, 1, I(3));
  int bn = node(g, "bn", "BatchNormalization", 5, (int[]){x, p, p, p, p}, 3);
  attr_int(g, bn, "training_mode", 1);
  int s = input(g, "s", AP_DT_FLOAT16, 2, I(4), I(5));
  int ln = node(g, "ln", "LayerNormalization", 2, (int[]){x, s}, 3);
  attr_int(g, ln, "axis", -2);
  int sm = node(g, "sm", "Softmax", 1, &x, 1);
  infer_ok(g);
  expect_shape(g, out(g, bn, 0), AP_DT_FLOAT16, 4, I(2), I(3), I(4), I(5));
  expect_shape(g, out(g, bn, 2), AP_DT_FLOAT16, 1, I(3));
  expect_shape(g, out(g, ln, 0), AP_DT_FLOAT16, 4, I(2), I(3), I(4), I(5));
  expect_shape(g, out(g, ln, 1), AP_DT_FLOAT, 4, I(2), I(3), I(1), I(1));
  expect_shape(g, out(g, ln, 2), AP_DT_FLOAT, 4, I(2), I(3), I(1), I(1));
  expect_shape(g, out(g, sm, 0), AP_DT_FLOAT16, 4, I(2), I(3), I(4), I(5));
  ap_graph_free(g);
}

Test(norm, batchnorm_channel_mismatch) {
  ap_graph *g = graph(15);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(2), I(3), I(4), I(5));
  int p = input(g, "p", AP_DT_FLOAT, 1, I(4));
  node(g, "bn", "BatchNormalization", 5, (int[]){x, p, p, p, p}, 1);
  infer_fails(g, "bn", "channels");
  ap_graph_free(g);
}

Test(reduce, attribute_and_input_axes) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(2), I(3), I(4));
  int m = node(g, "mean", "ReduceMean", 1, &x, 1); /* axes attribute before 18 */
  attr_ints(g, m, "axes", 2, I(0), I(-1));
  attr_int(g, m, "keepdims", 0);
  int axes = ints(g, "axes", 1, I(1));
  int s = node(g, "sum", "ReduceSum", 2, (int[]){x, axes}, 1); /* input from 13 */
  int all = node(g, "all", "ReduceMax", 1, &x, 1);
  int empty = ints(g, "empty", 0);
  int noop = node(g, "noop", "ReduceSum", 2, (int[]){x, empty}, 1);
  attr_int(g, noop, "noop_with_empty_axes", 1);
  int dyn = input(g, "dyn", AP_DT_INT64, 1, I(2));
  int k = node(g, "keep", "ReduceSum", 2, (int[]){x, dyn}, 1);
  int nk = node(g, "nokeep", "ReduceSum", 2, (int[]){x, dyn}, 1);
  attr_int(g, nk, "keepdims", 0);
  infer_ok(g);
  expect_shape(g, out(g, m, 0), AP_DT_FLOAT, 1, I(3));
  expect_shape(g, out(g, s, 0), AP_DT_FLOAT, 3, I(2), I(1), I(4));
  expect_shape(g, out(g, all, 0), AP_DT_FLOAT, 3, I(1), I(1), I(1));
  expect_shape(g, out(g, noop, 0), AP_DT_FLOAT, 3, I(2), I(3), I(4));
  expect_shape(g, out(g, k, 0), AP_DT_FLOAT, 3, I(-1), I(-1), I(-1));
  expect_shape(g, out(g, nk, 0), AP_DT_FLOAT, 1, I(-1));
  ap_graph_free(g);
}

Test(reduce, repeated_axis) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(3));
  int axes = ints(g, "axes", 2, I(1), I(-1));
  node(g, "r", "ReduceSum", 2, (int[]){x, axes}, 1);
  infer_fails(g, "r", "repeated");
  ap_graph_free(g);
}

/* ---- data movement ---- */

Test(move, flatten_reshape_transpose) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(-1), I(3), I(4), I(5));
  g->values[x].sym[0] = "N";
  int f = node(g, "f", "Flatten", 1, &x, 1);
  int shape = ints(g, "shape", 3, I(0), I(-1), I(5));
  int r = node(g, "r", "Reshape", 2, (int[]){x, shape}, 1);
  int t = node(g, "t", "Transpose", 1, &x, 1);
  attr_ints(g, t, "perm", 4, I(0), I(2), I(3), I(1));
  int y = input(g, "y", AP_DT_FLOAT, 2, I(0), I(4));
  int zshape = ints(g, "zshape", 3, I(4), I(0), I(2));
  int z = node(g, "z", "Reshape", 2, (int[]){y, zshape}, 1);
  attr_int(g, z, "allowzero", 1);
  infer_ok(g);
  expect_shape(g, out(g, f, 0), AP_DT_FLOAT, 2, I(-1), I(60));
  cr_expect_str_eq(g->values[out(g, f, 0)].sym[0], "N");
  /* -1 cannot be resolved while the batch is unknown */
  expect_shape(g, out(g, r, 0), AP_DT_FLOAT, 3, I(-1), I(-1), I(5));
  cr_expect_str_eq(g->values[out(g, r, 0)].sym[0], "N");
  expect_shape(g, out(g, t, 0), AP_DT_FLOAT, 4, I(-1), I(4), I(5), I(3));
  expect_shape(g, out(g, z, 0), AP_DT_FLOAT, 3, I(4), I(0), I(2));
  ap_graph_free(g);
}

Test(move, reshape_needs_a_constant_shape) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(6));
  int known_len = input(g, "len3", AP_DT_INT64, 1, I(3));
  int a = node(g, "a", "Reshape", 2, (int[]){x, known_len}, 1);
  infer_ok(g);
  cr_expect_eq(g->values[out(g, a, 0)].rank, 3);
  ap_graph_free(g);

  g = graph(14);
  x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(6));
  int unknown = input(g, "dyn_shape", AP_DT_INT64, 1, I(-1));
  node(g, "b", "Reshape", 2, (int[]){x, unknown}, 1);
  infer_fails(g, "b", "shape input 'dyn_shape' must be a constant");
  ap_graph_free(g);
}

Test(move, reshape_errors) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(6));
  int shape = ints(g, "shape", 2, I(-1), I(-1));
  node(g, "r", "Reshape", 2, (int[]){x, shape}, 1);
  infer_fails(g, "r", "more than one -1");
  ap_graph_free(g);

  g = graph(14);
  x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(6));
  shape = ints(g, "shape", 2, I(5), I(-1));
  node(g, "r", "Reshape", 2, (int[]){x, shape}, 1);
  infer_fails(g, "r", "cannot reshape 12");
  ap_graph_free(g);
}

Test(move, transpose_bad_perm) {
  ap_graph *g = graph(14);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(1), I(2), I(3));
  int t = node(g, "t", "Transpose", 1, &x, 1);
  attr_ints(g, t, "perm", 3, I(0), I(0), I(1));
  infer_fails(g, "t", "not a permutation");
  ap_graph_free(g);
}

Test(move, concat_and_split) {
  ap_graph *g = graph(18);
  int a = input(g, "a", AP_DT_FLOAT, 2, I(2), I(3));
  int b = input(g, "b", AP_DT_FLOAT, 2, I(2), I(4));
  int c = node(g, "c", "Concat", 2, (int[]){a, b}, 1);
  attr_int(g, c, "axis", -1);
  int x = input(g, "x", AP_DT_FLOAT, 2, I(7), I(2));
  int s = node(g, "s", "Split", 1, &x, 3);
  attr_int(g, s, "num_outputs", 3);
  int sizes = ints(g, "sizes", 2, I(5), I(2));
  int v = node(g, "v", "Split", 2, (int[]){x, sizes}, 2);
  infer_ok(g);
  expect_shape(g, out(g, c, 0), AP_DT_FLOAT, 2, I(2), I(7));
  expect_shape(g, out(g, s, 0), AP_DT_FLOAT, 2, I(3), I(2));
  expect_shape(g, out(g, s, 1), AP_DT_FLOAT, 2, I(3), I(2));
  expect_shape(g, out(g, s, 2), AP_DT_FLOAT, 2, I(1), I(2));
  expect_shape(g, out(g, v, 0), AP_DT_FLOAT, 2, I(5), I(2));
  expect_shape(g, out(g, v, 1), AP_DT_FLOAT, 2, I(2), I(2));
  ap_graph_free(g);
}

Test(move, split_attribute_before_13_and_errors) {
  ap_graph *g = graph(11);
  int x = input(g, "x", AP_DT_FLOAT, 1, I(6));
  int s = node(g, "s", "Split", 1, &x, 2);
  attr_ints(g, s, "split", 2, I(4), I(2));
  int e = node(g, "e", "Split", 1, &x, 3);
  infer_ok(g);
  expect_shape(g, out(g, s, 0), AP_DT_FLOAT, 1, I(4));
  expect_shape(g, out(g, e, 2), AP_DT_FLOAT, 1, I(2));
  ap_graph_free(g);

  g = graph(11);
  x = input(g, "x", AP_DT_FLOAT, 1, I(6));
  s = node(g, "s", "Split", 1, &x, 2);
  attr_ints(g, s, "split", 2, I(4), I(3));
  infer_fails(g, "s", "add up to 7");
  ap_graph_free(g);

  g = graph(13);
  x = input(g, "x", AP_DT_FLOAT, 1, I(7));
  node(g, "s", "Split", 1, &x, 2);
  infer_fails(g, "s", "evenly");
  ap_graph_free(g);
}

Test(move, slice_clamping_and_negative_steps) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(10), I(8), I(6));
  int starts = ints(g, "starts", 3, I(-100), I(-1), I(1));
  int ends = ints(g, "ends", 3, I(1000), INT64_MIN, I(5));
  int axes = ints(g, "axes", 3, I(0), I(1), I(-1));
  int steps = ints(g, "steps", 3, I(3), I(-2), I(1));
  int n = node(g, "s", "Slice", 5, (int[]){x, starts, ends, axes, steps}, 1);
  int dyn = input(g, "dyn", AP_DT_INT64, 1, I(1));
  int m = node(g, "m", "Slice", 3, (int[]){x, dyn, dyn}, 1);
  infer_ok(g);
  /* 0..9 step 3: 4; 7 down to 0 step -2: 4; 1..4: 4 */
  expect_shape(g, out(g, n, 0), AP_DT_FLOAT, 3, I(4), I(4), I(4));
  expect_shape(g, out(g, m, 0), AP_DT_FLOAT, 3, I(-1), I(-1), I(-1));
  ap_graph_free(g);

  g = graph(9);
  x = input(g, "x", AP_DT_FLOAT, 2, I(10), I(8));
  n = node(g, "s", "Slice", 1, &x, 1);
  attr_ints(g, n, "starts", 1, I(2));
  attr_ints(g, n, "ends", 1, I(-2));
  attr_ints(g, n, "axes", 1, I(1));
  infer_ok(g);
  expect_shape(g, out(g, n, 0), AP_DT_FLOAT, 2, I(10), I(4));
  ap_graph_free(g);

  g = graph(13);
  x = input(g, "x", AP_DT_FLOAT, 1, I(10));
  int zero = ints(g, "zero", 1, I(0));
  node(g, "s", "Slice", 5, (int[]){x, zero, zero, zero, zero}, 1);
  infer_fails(g, "s", "step 0");
  ap_graph_free(g);
}

Test(move, squeeze_unsqueeze_gather_expand) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(1), I(3), I(1));
  int sq = node(g, "sq", "Squeeze", 1, &x, 1);
  int ax = ints(g, "ax", 2, I(0), I(-1));
  int uq = node(g, "uq", "Unsqueeze", 2, (int[]){x, ax}, 1);
  int data = input(g, "data", AP_DT_FLOAT, 3, I(5), I(6), I(7));
  int idx = input(g, "idx", AP_DT_INT64, 2, I(2), I(3));
  int ga = node(g, "ga", "Gather", 2, (int[]){data, idx}, 1);
  attr_int(g, ga, "axis", 1);
  int shape = ints(g, "shape", 4, I(2), I(1), I(1), I(4));
  int ex = node(g, "ex", "Expand", 2, (int[]){x, shape}, 1);
  infer_ok(g);
  expect_shape(g, out(g, sq, 0), AP_DT_FLOAT, 1, I(3));
  expect_shape(g, out(g, uq, 0), AP_DT_FLOAT, 5, I(1), I(1), I(3), I(1), I(1));
  expect_shape(g, out(g, ga, 0), AP_DT_FLOAT, 4, I(5), I(2), I(3), I(7));
  expect_shape(g, out(g, ex, 0), AP_DT_FLOAT, 4, I(2), I(1), I(3), I(4));
  ap_graph_free(g);

  g = graph(11);
  x = input(g, "x", AP_DT_FLOAT, 2, I(3), I(4));
  int u = node(g, "u", "Unsqueeze", 1, &x, 1);
  attr_ints(g, u, "axes", 1, I(1));
  int s = node(g, "s", "Squeeze", 1, &x, 1);
  attr_ints(g, s, "axes", 1, I(0));
  infer_fails(g, "s", "cannot squeeze dim 0 of size 3");
  ap_graph_free(g);

  g = graph(13);
  x = input(g, "x", AP_DT_FLOAT, 2, I(3), I(4));
  int bad_axis = node(g, "ga", "Gather", 2, (int[]){x, ints(g, "i", 1, I(0))}, 1);
  attr_int(g, bad_axis, "axis", 2);
  infer_fails(g, "ga", "axis 2 is out of range");
  ap_graph_free(g);
}

/* ---- constants and metadata ---- */

Test(meta, constants_shape_size_range) {
  ap_graph *g = graph(15);
  int c = node(g, "c", "Constant", 0, NULL, 1);
  ap_attr *a = attr(g, c, "value_ints", AP_ATTR_INTS);
  int64_t vals[3] = {4, 5, 6};
  a->ints = vals;
  a->n = 3;
  int cs = node(g, "cs", "ConstantOfShape", 1, (int[]){out(g, c, 0)}, 1);
  int x = input(g, "x", AP_DT_FLOAT, 4, I(-1), I(3), I(4), I(5));
  int sh = node(g, "sh", "Shape", 1, &x, 1);
  attr_int(g, sh, "start", 1);
  attr_int(g, sh, "end", -1);
  int sz = node(g, "sz", "Size", 1, &x, 1);
  double r[3] = {10, 1, -3};
  int rs = node(g, "range", "Range", 3,
                (int[]){constant(g, "r0", AP_DT_INT32, 0, 1, &r[0]),
                        constant(g, "r1", AP_DT_INT32, 0, 1, &r[1]),
                        constant(g, "r2", AP_DT_INT32, 0, 1, &r[2])},
                1);
  keep(g, cs, 0);
  keep(g, sh, 0);
  keep(g, sz, 0);
  keep(g, rs, 0);
  infer_ok(g);
  expect_shape(g, out(g, c, 0), AP_DT_INT64, 1, I(3));
  cr_expect_null(g->values[out(g, cs, 0)].data, "inference alone does not evaluate");
  expect_shape(g, out(g, sh, 0), AP_DT_INT64, 1, I(2));
  expect_shape(g, out(g, sz, 0), AP_DT_INT64, 0);
  expect_shape(g, out(g, rs, 0), AP_DT_INT32, 1, I(3));
  fold_ok(g);
  /* After folding the graph has no nodes left but the Shape/Size of x,
   * whose batch is unknown. */
  int v = ap_graph_find(g, "cs_0");
  expect_shape(g, v, AP_DT_FLOAT, 3, I(4), I(5), I(6));
  cr_expect_eq(elem(g, v, 119), 0);
  v = ap_graph_find(g, "sh_0");
  cr_expect_eq(elem(g, v, 0), 3);
  cr_expect_eq(elem(g, v, 1), 4);
  v = ap_graph_find(g, "range_0");
  cr_expect_eq(elem(g, v, 2), 4);
  cr_expect_eq(g->n_nodes, 1, "only Size of a partly unknown shape remains");
  ap_graph_free(g);
}

/* ---- folding ---- */

/* The exporter idiom: Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])). */
Test(fold, shape_chain_feeds_reshape) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 3, I(2), I(3), I(4));
  int sh = node(g, "shape", "Shape", 1, &x, 1);
  int zero = constant(g, "zero", AP_DT_INT64, 0, 1, (double[]){0});
  int ga = node(g, "gather", "Gather", 2, (int[]){out(g, sh, 0), zero}, 1);
  int ax = ints(g, "ax", 1, I(0));
  int un = node(g, "unsq", "Unsqueeze", 2, (int[]){out(g, ga, 0), ax}, 1);
  int m1 = ints(g, "m1", 1, I(-1));
  int cc = node(g, "concat", "Concat", 2, (int[]){out(g, un, 0), m1}, 1);
  attr_int(g, cc, "axis", 0);
  int rs = node(g, "reshape", "Reshape", 2, (int[]){x, out(g, cc, 0)}, 1);
  cr_assert(ap_graph_add_output(g, out(g, rs, 0)));
  fold_ok(g);
  cr_expect_eq(g->n_nodes, 1);
  cr_expect_str_eq(g->nodes[0].op_type, "Reshape");
  int y = g->outputs[0];
  expect_shape(g, y, AP_DT_FLOAT, 2, I(2), I(12));
  int target = g->nodes[0].in[1];
  cr_expect_eq(elem(g, target, 0), 2);
  cr_expect_eq(elem(g, target, 1), -1);
  ap_graph_free(g);
}

Test(fold, integer_arithmetic_wraps_and_truncates) {
  ap_graph *g = graph(14);
  int a = constant(g, "a", AP_DT_INT32, 1, 3, (double[]){-7, 7, INT32_MIN});
  int b = constant(g, "b", AP_DT_INT32, 1, 3, (double[]){2, -2, -1});
  int dv = node(g, "div", "Div", 2, (int[]){a, b}, 1);
  int u = constant(g, "u", AP_DT_UINT8, 1, 2, (double[]){200, 3});
  int v = constant(g, "v", AP_DT_UINT8, 1, 2, (double[]){100, 5});
  int ad = node(g, "add", "Add", 2, (int[]){u, v}, 1);
  int sb = node(g, "sub", "Sub", 2, (int[]){u, v}, 1);
  int mx = node(g, "max", "Max", 2, (int[]){u, v}, 1);
  int pw = node(g, "pow", "Pow", 2, (int[]){b, constant(g, "three", AP_DT_INT64, 0, 1,
                                                        (double[]){3})},
                1);
  keep(g, dv, 0);
  keep(g, ad, 0);
  keep(g, sb, 0);
  keep(g, mx, 0);
  keep(g, pw, 0);
  fold_ok(g);
  cr_expect_eq(elem(g, ap_graph_find(g, "div_0"), 0), -3);
  cr_expect_eq(elem(g, ap_graph_find(g, "div_0"), 1), -3);
  cr_expect_eq(elem(g, ap_graph_find(g, "div_0"), 2), INT32_MIN); /* wraps like C */
  cr_expect_eq(elem(g, ap_graph_find(g, "add_0"), 0), 44);
  cr_expect_eq(elem(g, ap_graph_find(g, "sub_0"), 1), 254);
  cr_expect_eq(elem(g, ap_graph_find(g, "max_0"), 0), 200);
  cr_expect_eq(elem(g, ap_graph_find(g, "pow_0"), 1), -8);
  ap_graph_free(g);
}

Test(fold, integer_division_by_zero_is_not_folded) {
  ap_graph *g = graph(14);
  int a = constant(g, "a", AP_DT_INT64, 1, 1, (double[]){1});
  int z = constant(g, "z", AP_DT_INT64, 1, 1, (double[]){0});
  node(g, "div", "Div", 2, (int[]){a, z}, 1);
  fold_ok(g);
  cr_expect_eq(g->n_nodes, 1);
  ap_graph_free(g);
}

Test(fold, cast_rounding_and_float16) {
  ap_graph *g = graph(13);
  int f = constant(g, "f", AP_DT_FLOAT, 1, 4, (double[]){-1.7, 2.9, 1.0 / 3, 70000});
  int c8 = node(g, "i8", "Cast", 1, &f, 1);
  attr_int(g, c8, "to", AP_DT_INT8);
  int h = node(g, "h", "Cast", 1, &f, 1);
  attr_int(g, h, "to", AP_DT_FLOAT16);
  int big = constant(g, "big", AP_DT_INT64, 1, 1, (double[]){300});
  int w = node(g, "wrap", "Cast", 1, &big, 1);
  attr_int(g, w, "to", AP_DT_UINT8);
  keep(g, c8, 0);
  keep(g, h, 0);
  keep(g, w, 0);
  fold_ok(g);
  int v = ap_graph_find(g, "i8_0");
  cr_expect_eq(elem(g, v, 0), -1);
  cr_expect_eq(elem(g, v, 1), 2);
  v = ap_graph_find(g, "h_0");
  cr_expect_eq(((uint16_t *)g->values[v].data)[2], 0x3555); /* 1/3 to nearest even */
  cr_expect(isinf(elem(g, v, 3)));
  cr_expect_eq(elem(g, ap_graph_find(g, "wrap_0"), 0), 44);
  ap_graph_free(g);
}

Test(fold, movement_kernels) {
  ap_graph *g = graph(13);
  double v6[6] = {0, 1, 2, 3, 4, 5};
  int x = constant(g, "x", AP_DT_FLOAT, 1, 6, v6);
  int shape = ints(g, "shape", 2, I(2), I(3));
  int r = node(g, "r", "Reshape", 2, (int[]){x, shape}, 1);
  int t = node(g, "t", "Transpose", 1, (int[]){out(g, r, 0)}, 1);
  int starts = ints(g, "st", 1, I(-1));
  int ends = ints(g, "en", 1, INT64_MIN);
  int axes = ints(g, "ax", 1, I(1));
  int steps = ints(g, "sp", 1, I(-2));
  int s = node(g, "s", "Slice", 5, (int[]){out(g, r, 0), starts, ends, axes, steps}, 1);
  int e = node(g, "e", "Expand", 2, (int[]){out(g, s, 0), ints(g, "es", 3, I(2), I(1), I(1))},
               1);
  int sp = node(g, "sp", "Split", 2, (int[]){x, ints(g, "sizes", 2, I(4), I(2))}, 2);
  int cc = node(g, "cc", "Concat", 2, (int[]){out(g, sp, 1), out(g, sp, 0)}, 1);
  attr_int(g, cc, "axis", 0);
  int w = node(g, "w", "Where", 3,
               (int[]){constant(g, "cond", AP_DT_BOOL, 1, 6, (double[]){1, 0, 0, 1, 1, 0}),
                       out(g, cc, 0),
                       constant(g, "m", AP_DT_FLOAT, 0, 1, (double[]){-1})},
               1);
  keep(g, t, 0);
  keep(g, s, 0);
  keep(g, e, 0);
  keep(g, cc, 0);
  keep(g, w, 0);
  fold_ok(g);
  cr_expect_eq(g->n_nodes, 0);
  int tv = ap_graph_find(g, "t_0"); /* [[0,3],[1,4],[2,5]] */
  expect_shape(g, tv, AP_DT_FLOAT, 2, I(3), I(2));
  cr_expect_eq(elem(g, tv, 1), 3);
  cr_expect_eq(elem(g, tv, 4), 2);
  int sv = ap_graph_find(g, "s_0"); /* columns 2, 0 of [[0,1,2],[3,4,5]] */
  expect_shape(g, sv, AP_DT_FLOAT, 2, I(2), I(2));
  cr_expect_eq(elem(g, sv, 0), 2);
  cr_expect_eq(elem(g, sv, 1), 0);
  cr_expect_eq(elem(g, sv, 3), 3);
  int ev = ap_graph_find(g, "e_0");
  expect_shape(g, ev, AP_DT_FLOAT, 3, I(2), I(2), I(2));
  cr_expect_eq(elem(g, ev, 7), 3);
  int cv = ap_graph_find(g, "cc_0"); /* [4,5,0,1,2,3] */
  cr_expect_eq(elem(g, cv, 0), 4);
  cr_expect_eq(elem(g, cv, 5), 3);
  int wv = ap_graph_find(g, "w_0"); /* [4,-1,-1,1,2,-1] */
  expect_shape(g, wv, AP_DT_FLOAT, 1, I(6));
  cr_expect_eq(elem(g, wv, 0), 4);
  cr_expect_eq(elem(g, wv, 1), -1);
  cr_expect_eq(elem(g, wv, 4), 2);
  ap_graph_free(g);
}

Test(fold, inference_dropout_is_bypassed) {
  ap_graph *g = graph(13);
  int x = input(g, "x", AP_DT_FLOAT, 2, I(2), I(3));
  int dr = node(g, "drop", "Dropout", 1, &x, 2);
  int re = node(g, "relu", "Relu", 1, (int[]){out(g, dr, 0)}, 1);
  int nm = node(g, "not_mask", "Cast", 1, (int[]){out(g, dr, 1)}, 1);
  attr_int(g, nm, "to", AP_DT_FLOAT);
  cr_assert(ap_graph_add_output(g, out(g, re, 0)));
  cr_assert(ap_graph_add_output(g, out(g, nm, 0)));
  int d2 = node(g, "drop_out", "Dropout", 1, &x, 1);
  cr_assert(ap_graph_add_output(g, out(g, d2, 0)));
  fold_ok(g);
  /* Relu reads x; the mask folded to ones and its Cast with it; the
   * Dropout producing a graph output became an Identity. */
  cr_expect_eq(g->n_nodes, 2);
  cr_expect_str_eq(g->nodes[0].op_type, "Relu");
  cr_expect_eq(g->nodes[0].in[0], ap_graph_find(g, "x"));
  cr_expect_str_eq(g->nodes[1].op_type, "Identity");
  cr_expect_eq(elem(g, g->outputs[1], 5), 1);
  ap_graph_free(g);
}

Test(fold, training_dropout_stays) {
  ap_graph *g = graph(13);
  int x = constant(g, "x", AP_DT_FLOAT, 1, 2, (double[]){1, 2});
  int ratio = constant(g, "ratio", AP_DT_FLOAT, 0, 1, (double[]){0.5});
  int mode = constant(g, "mode", AP_DT_BOOL, 0, 1, (double[]){1});
  node(g, "drop", "Dropout", 3, (int[]){x, ratio, mode}, 2);
  fold_ok(g);
  cr_expect_eq(g->n_nodes, 1);
  ap_graph_free(g);
}

Test(fold, size_bound_and_weights) {
  ap_graph *g = graph(13);
  int big = node(g, "big", "ConstantOfShape", 1, (int[]){ints(g, "s1", 2, I(2048), I(1024))},
                 1);
  int small = node(g, "small", "ConstantOfShape", 1, (int[]){ints(g, "s2", 2, I(4), I(4))}, 1);
  int w = ap_graph_add_value(g, "w", AP_VAL_WEIGHT);
  ap_tensor t = {.dtype = AP_DT_FLOAT, .rank = 2, .dims = {2, 2}, .numel = 4,
                 .data = (float[]){1, 2, 3, 4}};
  cr_assert(ap_value_set_constant(g, w, &t));
  g->values[w].kind = AP_VAL_WEIGHT;
  cr_assert(ap_graph_add_input(g, w));
  int tr = node(g, "tw", "Transpose", 1, &w, 1);
  cr_assert(ap_graph_add_output(g, out(g, big, 0)));
  cr_assert(ap_graph_add_output(g, out(g, small, 0)));
  cr_assert(ap_graph_add_output(g, out(g, tr, 0)));
  fold_ok(g);
  cr_expect_eq(g->n_nodes, 2, "the 2^21-element fill and the weight's Transpose stay");
  cr_expect_null(g->values[g->outputs[0]].data);
  expect_shape(g, g->outputs[0], AP_DT_FLOAT, 2, I(2048), I(1024));
  cr_expect_not_null(g->values[g->outputs[1]].data);
  cr_expect_null(g->values[g->outputs[2]].data);
  ap_graph_free(g);
}

Test(fold, gather_index_out_of_range) {
  ap_graph *g = graph(13);
  int x = ints(g, "x", 3, I(1), I(2), I(3));
  node(g, "ga", "Gather", 2, (int[]){x, ints(g, "i", 1, I(3))}, 1);
  ap_diag d = {0};
  cr_expect_eq(ap_fold_constants(g, &d), AP_ERR_INVALID);
  cr_expect(strstr(d.message, "node 'ga' (Gather): index 3 at position 0 of indices 'i' is "
                             "outside axis 0 of 'x' (3 entries)"),
            "%s", d.message);
  ap_graph_free(g);
}
