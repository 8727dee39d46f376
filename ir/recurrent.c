/* Recurrent layers, unrolled: ONNX's LSTM, GRU and RNN become, for a
 * sequence length known once the inputs are bound, the MatMul, Add,
 * Sigmoid, Tanh, Mul, Sub, Slice, Reshape, Transpose and Concat nodes of every time
 * step, so shape inference, the partition pass, the kernels and their
 * backward (training through time) are those of the existing operators.
 *
 * Per direction, the input projection of all time steps is one MatMul
 * (X [T, B, I] times W_d transposed [I, G*H], G gates); each step then
 * multiplies the previous hidden state by R_d transposed [H, G*H] and
 * slices the gates out of the sum. W, R, B and P stay one parameter each,
 * read through Slice, Reshape and Transpose (as ir/unfuse.c reads a fused
 * projection), so training updates and exports them whole. Every step's
 * MatMul reads the same transposed R: a weight read by several layers,
 * whose gradient the distribution sums over its readers as it does for a
 * table tied to an embedding and an output layer (passes/distribute.h,
 * ap_dist_weight_box). An absent initial state is zero: the first step
 * then skips the products it would multiply by zero, so no zero constant
 * carrying the batch size is made.
 *
 * sequence_lens must be a constant (bind it with --inputs); where an entry is
 * shorter than the sequence, a [B, 1] mask of the steps past it keeps that
 * entry's state and zeroes its output, as ONNX specifies (a reverse
 * direction then starts at the entry's last step). Activations other than
 * the defaults, clip, and LSTM's input_forget are refused in one line
 * naming the node. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

enum { KIND_LSTM, KIND_GRU, KIND_RNN };

typedef struct cell {
  ap_graph *g;
  const char *base;    /* the node's name: every new name starts with it */
  int serial;          /* makes every new name unique */
  bool failed;         /* out of memory */
  bool layout1;        /* X is [B, T, I] (layout 1), else [T, B, I] */
} cell;

/* A new value named BASE/NNN_what, unique in the graph. */
static int fresh(cell *c, const char *what) {
  char name[512];
  do
    snprintf(name, sizeof name, "%s/%d_%s", c->base, c->serial++, what);
  while (ap_graph_find(c->g, name) >= 0);
  int v = ap_graph_add_value(c->g, name, AP_VAL_NODE);
  c->failed |= v < 0;
  return v;
}

static int const_ints(cell *c, const char *what, const int64_t *vals, int n) {
  int v = fresh(c, what);
  if (v < 0)
    return -1;
  ap_tensor t = {.dtype = AP_DT_INT64, .rank = 1, .dims = {n}, .numel = n, .data = (void *)vals};
  c->g->values[v].kind = AP_VAL_CONST;
  if (!ap_value_set_constant(c->g, v, &t)) {
    c->failed = true;
    return -1;
  }
  return v;
}

/* op(ins...) -> a new value (or into out when out >= 0); -1 on failure. Any
 * -1 operand propagates (the failure is already recorded). */
static int node(cell *c, const char *op, const int *ins, int n_in, int n_attr, int out) {
  for (int i = 0; i < n_in; i++)
    if (ins[i] < 0) {
      c->failed = true;
      return -1;
    }
  if (out < 0 && (out = fresh(c, op)) < 0)
    return -1;
  char name[512];
  snprintf(name, sizeof name, "%s", c->g->values[out].name);
  int ni = ap_graph_add_node(c->g, name, "", op, n_in, 1, n_attr);
  if (ni < 0) {
    c->failed = true;
    return -1;
  }
  ap_node *n = &c->g->nodes[ni];
  for (int i = 0; i < n_in; i++)
    n->in[i] = ins[i];
  n->out[0] = out;
  c->g->values[out].producer = ni;
  return out;
}

static int unary(cell *c, const char *op, int x) { return node(c, op, (int[]){x}, 1, 0, -1); }
static int binary(cell *c, const char *op, int a, int b) {
  return node(c, op, (int[]){a, b}, 2, 0, -1);
}

static bool set_ints(cell *c, ap_attr *a, const char *name, const int64_t *vals, int n) {
  a->name = name;
  a->type = AP_ATTR_INTS;
  a->n = n;
  if (!(a->ints = ap_arena_array(c->g->arena, (size_t)n + 1, sizeof *a->ints))) {
    c->failed = true;
    return false;
  }
  memcpy(a->ints, vals, (size_t)n * sizeof *vals);
  return true;
}

/* x[lo:hi] along the given axes, with the Slice of the graph's opset
 * (attributes before opset 10, inputs since). */
static int slice(cell *c, int x, int n_axes, const int64_t *axes, const int64_t *lo,
                 const int64_t *hi) {
  if (c->g->opset >= 10) {
    int s = const_ints(c, "starts", lo, n_axes), e = const_ints(c, "ends", hi, n_axes);
    int a = const_ints(c, "axes", axes, n_axes);
    return node(c, "Slice", (int[]){x, s, e, a}, 4, 0, -1);
  }
  int out = node(c, "Slice", (int[]){x}, 1, 3, -1);
  if (out < 0)
    return -1;
  ap_node *n = &c->g->nodes[c->g->values[out].producer];
  if (!set_ints(c, &n->attr[0], "starts", lo, n_axes) ||
      !set_ints(c, &n->attr[1], "ends", hi, n_axes) ||
      !set_ints(c, &n->attr[2], "axes", axes, n_axes))
    return -1;
  return out;
}

static int slice1(cell *c, int x, int64_t axis, int64_t lo, int64_t hi) {
  return slice(c, x, 1, &axis, &lo, &hi);
}

static int reshape(cell *c, int x, const int64_t *dims, int rank, int out) {
  int shape = const_ints(c, "shape", dims, rank);
  return node(c, "Reshape", (int[]){x, shape}, 2, 0, out);
}

/* Rows [lo, hi) of direction d of a [D, rows, cols] weight, as [rows', cols]
 * (cols 0: as a vector of rows' elements, for the biases [D, rows]). */
static int weight_rows(cell *c, int w, int64_t d, int64_t lo, int64_t hi, int64_t cols) {
  int s = slice(c, w, 2, (int64_t[]){0, 1}, (int64_t[]){d, lo}, (int64_t[]){d + 1, hi});
  if (cols == 0)
    return reshape(c, s, (int64_t[]){hi - lo}, 1, -1);
  return reshape(c, s, (int64_t[]){hi - lo, cols}, 2, -1);
}

/* The transposed rows [lo, hi) of direction d of W or R: [cols, hi - lo]. */
static int weight_t(cell *c, int w, int64_t d, int64_t lo, int64_t hi, int64_t cols) {
  return unary(c, "Transpose", weight_rows(c, w, d, lo, hi, cols));
}

/* Columns [lo, lo + h) of the last axis of activation x. */
static int gate(cell *c, int x, int64_t k, int64_t h) { return slice1(c, x, -1, k * h, (k + 1) * h); }

/* Direction d of an initial state [D, B, H] ([B, D, H] in layout 1), as [B, H]. */
static int initial_state(cell *c, int s, int64_t d, int64_t h) {
  if (s < 0)
    return -1;
  return reshape(c, slice1(c, s, c->layout1 ? 1 : 0, d, d + 1), (int64_t[]){-1, h}, 2, -1);
}

/* 1 for the batch entries whose sequence covers step ti, else 0, as a
 * [B, 1] constant; -1 when every entry's does (no mask needed). */
static int step_mask(cell *c, const int64_t *lens, int64_t n_batch, int64_t ti, ap_dtype dtype) {
  bool all = true;
  for (int64_t b = 0; b < n_batch; b++)
    all &= ti < lens[b];
  if (all)
    return -1;
  int v = fresh(c, "mask");
  ap_tensor t = {.dtype = dtype, .rank = 2, .dims = {n_batch, 1}, .numel = n_batch};
  if (v < 0 || !(t.data = ap_arena_array(c->g->arena, (size_t)n_batch, ap_dtype_size(dtype)))) {
    c->failed = true;
    return -1;
  }
  for (int64_t b = 0; b < n_batch; b++)
    ap_tensor_set_f64(&t, b, ti < lens[b] ? 1.0 : 0.0);
  c->g->values[v].kind = AP_VAL_CONST;
  if (!ap_value_set_constant(c->g, v, &t))
    c->failed = true;
  return v;
}

static bool ieq(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (tolower((unsigned char)*a) != tolower((unsigned char)*b))
      return false;
  return *a == *b;
}

/* Refuses any attribute, or attribute value, this rewrite does not
 * implement. */
static ap_status check_attrs(ap_graph *g, int ni, int kind, int n_dir, ap_diag *d) {
  const ap_node *n = &g->nodes[ni];
  static const char *const dflt[3][3] = {
      {"Sigmoid", "Tanh", "Tanh"}, {"Sigmoid", "Tanh", NULL}, {"Tanh", NULL, NULL}};
  int per_dir = kind == KIND_LSTM ? 3 : kind == KIND_GRU ? 2 : 1;
  for (int k = 0; k < n->n_attr; k++) {
    const ap_attr *a = &n->attr[k];
    if (strcmp(a->name, "activations") == 0) {
      if (a->type != AP_ATTR_STRINGS || a->n != per_dir * n_dir)
        return ap_refuse(g, d, ni, "attribute 'activations' must list %s per direction",
                      kind == KIND_LSTM ? "3" : kind == KIND_GRU ? "2" : "1");
      for (int i = 0; i < a->n; i++)
        if (!ieq(a->strings[i], dflt[kind][i % per_dir]))
          return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                          "activation '%s' is not supported (only the default activations)",
                          a->strings[i]);
    } else if (strcmp(a->name, "activation_alpha") == 0 ||
               strcmp(a->name, "activation_beta") == 0 || strcmp(a->name, "clip") == 0) {
      return ap_refuse(g, d, ni, "attribute '%s' is not supported (only the default activations, "
                    "no clip)", a->name);
    } else if (strcmp(a->name, "input_forget") == 0 && a->i != 0) {
      return ap_refuse(g, d, ni, "attribute '%s' other than 0 is not supported", a->name);
    } else if (strcmp(a->name, "hidden_size") != 0 && strcmp(a->name, "direction") != 0 &&
               strcmp(a->name, "layout") != 0 && strcmp(a->name, "input_forget") != 0 &&
               !(kind == KIND_GRU && strcmp(a->name, "linear_before_reset") == 0)) {
      return ap_refuse(g, d, ni, "attribute '%s' is not supported", a->name);
    }
  }
  return AP_OK;
}

/* Unrolls node ni, X being x_dims ([T, B, I], or [B, T, I] in layout 1). */
/* The dims of v when it has rank 3: its own, or what the graph computes
 * for it (a weight exporters write as Unsqueeze(Concat(...)) of constants,
 * folded only later). */
static bool dims3(const ap_graph *g, int v, int64_t *dims) {
  const ap_value *val = &g->values[v];
  ap_prefix p;
  if (val->rank == 3 && ap_value_shape_known(val)) {
    memcpy(dims, val->dims, 3 * sizeof *dims);
    return true;
  }
  if (!ap_infer_prefix(g, v, &p) || p.rank != 3)
    return false;
  memcpy(dims, p.dims, 3 * sizeof *dims);
  return true;
}

static ap_status unroll(ap_graph *g, int ni, const int64_t *x_dims, ap_diag *d) {
  ap_node nd = g->nodes[ni];
  int kind = strcmp(nd.op_type, "LSTM") == 0 ? KIND_LSTM
             : strcmp(nd.op_type, "GRU") == 0 ? KIND_GRU
                                               : KIND_RNN;
  int n_gates = kind == KIND_LSTM ? 4 : kind == KIND_GRU ? 3 : 1;
  const char *direction = ap_attr_string(&nd, "direction", "forward");
  int n_dir = strcmp(direction, "bidirectional") == 0 ? 2 : 1;
  bool reverse = strcmp(direction, "reverse") == 0;
  if (!reverse && n_dir == 1 && strcmp(direction, "forward") != 0)
    return ap_refuse(g, d, ni, "direction '%s' is not one of forward, reverse, bidirectional",
                  direction);
  ap_status s = check_attrs(g, ni, kind, n_dir, d);
  if (s != AP_OK)
    return s;
  int64_t h = ap_attr_int(&nd, "hidden_size", 0), layout = ap_attr_int(&nd, "layout", 0);
  bool lbr = kind == KIND_GRU && ap_attr_int(&nd, "linear_before_reset", 0) != 0;
  if (h <= 0)
    return ap_refuse(g, d, ni, "attribute '%s' must be given and positive", "hidden_size");
  if (layout != 0 && layout != 1)
    return ap_refuse(g, d, ni, "attribute '%s' must be 0 or 1", "layout");
  if (nd.n_in < 3 || nd.in[0] < 0 || nd.in[1] < 0 || nd.in[2] < 0 || nd.n_out < 1 ||
      (kind != KIND_LSTM && (nd.n_in > 6 || nd.n_out > 2)) || nd.n_in > 8 || nd.n_out > 3)
    return ap_refuse(g, d, ni, "%s: X, W and R are required; at most 8 inputs (LSTM), 6 (GRU, "
                  "RNN) and 3 outputs (LSTM), 2 (GRU, RNN)", "arity");
  int64_t t = x_dims[layout ? 1 : 0], in_size = x_dims[2];
  const ap_value *w = &g->values[nd.in[1]];
  int64_t gh = n_gates * h, wd[3], rd[3];
  if (!dims3(g, nd.in[1], wd) || wd[0] != n_dir || wd[1] != gh || wd[2] != in_size ||
      !dims3(g, nd.in[2], rd) || rd[0] != n_dir || rd[1] != gh || rd[2] != h) {
    return ap_refuse(g, d, ni, "W must be [%d, %lld, %lld] and R [%d, %lld, %lld]", n_dir,
                  (long long)gh, (long long)in_size, n_dir, (long long)gh, (long long)h);
  }
  if (t <= 0)
    return ap_refuse(g, d, ni, "%s", "the sequence length must be positive");
  ap_dtype dtype = w->dtype; /* w and r point into values, which grow below */
  int seq = nd.n_in > 4 ? nd.in[4] : -1;
  int64_t n_batch = x_dims[layout ? 0 : 1], *lens = NULL;
  if (seq >= 0) {
    const ap_value *sv = &g->values[seq];
    if (!sv->data)
      return ap_refuse(g, d, ni, "%s", "sequence_lens must be a constant (bind it with --inputs)");
    ap_tensor st = ap_value_tensor(sv);
    if (st.numel != n_batch)
      return ap_refuse(g, d, ni, "sequence_lens has %lld entries for a batch of %lld",
                    (long long)st.numel, (long long)n_batch);
    bool varying = false;
    for (int64_t i = 0; i < st.numel; i++) {
      int64_t len = ap_tensor_get_i64(&st, i);
      if (len < 1 || len > t)
        return ap_refuse(g, d, ni, "sequence_lens[%lld] is %lld, not in [1, %lld]", (long long)i,
                      (long long)len, (long long)t);
      varying |= len != t;
    }
    if (varying) {
      if (!(lens = ap_arena_array(g->arena, (size_t)n_batch, sizeof *lens)))
        return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
      for (int64_t i = 0; i < n_batch; i++)
        lens[i] = ap_tensor_get_i64(&st, i);
    }
  }
  int x = nd.in[0], wv = nd.in[1], rv = nd.in[2];
  int bias = nd.n_in > 3 ? nd.in[3] : -1, h0 = nd.n_in > 5 ? nd.in[5] : -1;
  int c0 = kind == KIND_LSTM && nd.n_in > 6 ? nd.in[6] : -1;
  int peep = kind == KIND_LSTM && nd.n_in > 7 ? nd.in[7] : -1;
  int y_out = nd.out[0], yh_out = nd.n_out > 1 ? nd.out[1] : -1;
  int yc_out = nd.n_out > 2 ? nd.out[2] : -1;
  g->nodes[ni].dead = true;

  cell c = {.g = g, .base = nd.name, .layout1 = layout == 1};
  int64_t time_axis = layout ? 1 : 0;
  int *ys = ap_arena_array(g->arena, (size_t)(t * n_dir), sizeof *ys);
  int last_h[2] = {-1, -1}, last_c[2] = {-1, -1};
  if (!ys)
    c.failed = true;
  for (int64_t dir = 0; dir < n_dir && !c.failed; dir++) {
    bool back = reverse || dir == 1;
    int wt = weight_t(&c, wv, dir, 0, gh, in_size);
    int xp = binary(&c, "MatMul", x, wt);
    int rb = -1;
    if (bias >= 0) {
      xp = binary(&c, "Add", xp, weight_rows(&c, bias, dir, 0, gh, 0));
      rb = weight_rows(&c, bias, dir, gh, 2 * gh, 0);
      if (!lbr)
        xp = binary(&c, "Add", xp, rb);
    }
    int rt = -1, rt_zr = -1, rt_h = -1;
    if (kind == KIND_GRU && !lbr) {
      rt_zr = weight_t(&c, rv, dir, 0, 2 * h, h);
      rt_h = weight_t(&c, rv, dir, 2 * h, 3 * h, h);
    } else {
      rt = weight_t(&c, rv, dir, 0, gh, h);
    }
    int p[3] = {-1, -1, -1}; /* peepholes i, o, f */
    for (int k = 0; peep >= 0 && k < 3; k++)
      p[k] = weight_rows(&c, peep, dir, k * h, (k + 1) * h, 0);
    int hs = initial_state(&c, h0, dir, h), cs = initial_state(&c, c0, dir, h);
    for (int64_t step = 0; step < t && !c.failed; step++) {
      int64_t ti = back ? t - 1 - step : step;
      int xt = reshape(&c, slice1(&c, xp, time_axis, ti, ti + 1), (int64_t[]){-1, gh}, 2, -1);
      int hn, cn = -1;
      if (kind == KIND_LSTM) {
        int a = hs >= 0 ? binary(&c, "Add", xt, binary(&c, "MatMul", hs, rt)) : xt;
        int ai = gate(&c, a, 0, h), ao = gate(&c, a, 1, h), af = gate(&c, a, 2, h);
        int ac = gate(&c, a, 3, h);
        if (peep >= 0 && cs >= 0) {
          ai = binary(&c, "Add", ai, binary(&c, "Mul", cs, p[0]));
          af = binary(&c, "Add", af, binary(&c, "Mul", cs, p[2]));
        }
        int ig = binary(&c, "Mul", unary(&c, "Sigmoid", ai), unary(&c, "Tanh", ac));
        cn = cs >= 0 ? binary(&c, "Add", binary(&c, "Mul", unary(&c, "Sigmoid", af), cs), ig)
                         : ig;
        if (peep >= 0)
          ao = binary(&c, "Add", ao, binary(&c, "Mul", cn, p[1]));
        hn = binary(&c, "Mul", unary(&c, "Sigmoid", ao), unary(&c, "Tanh", cn));
      } else if (kind == KIND_GRU) {
        int xz = gate(&c, xt, 0, h), xr = gate(&c, xt, 1, h), xh = gate(&c, xt, 2, h);
        int rec_zr = -1, rec_h = -1; /* H_{t-1} R^T (+ Rb), when not zero */
        if (lbr) {
          int rec = hs >= 0 ? binary(&c, "MatMul", hs, rt) : -1;
          if (rb >= 0)
            rec = rec >= 0 ? binary(&c, "Add", rec, rb) : rb;
          if (rec >= 0) {
            rec_zr = slice1(&c, rec, -1, 0, 2 * h);
            rec_h = slice1(&c, rec, -1, 2 * h, 3 * h);
          }
        } else if (hs >= 0) {
          rec_zr = binary(&c, "MatMul", hs, rt_zr);
        }
        int az = rec_zr >= 0 ? binary(&c, "Add", xz, gate(&c, rec_zr, 0, h)) : xz;
        int ar = rec_zr >= 0 ? binary(&c, "Add", xr, gate(&c, rec_zr, 1, h)) : xr;
        int z = unary(&c, "Sigmoid", az), rg = unary(&c, "Sigmoid", ar);
        int ah = xh;
        if (lbr && rec_h >= 0)
          ah = binary(&c, "Add", xh, binary(&c, "Mul", rg, rec_h));
        else if (!lbr && hs >= 0)
          ah = binary(&c, "Add", xh, binary(&c, "MatMul", binary(&c, "Mul", rg, hs), rt_h));
        int hh = unary(&c, "Tanh", ah);
        /* (1 - z) hh + z H_{t-1} = hh + z (H_{t-1} - hh) */
        hn = hs >= 0 ? binary(&c, "Add", hh, binary(&c, "Mul", z, binary(&c, "Sub", hs, hh)))
                     : binary(&c, "Sub", hh, binary(&c, "Mul", z, hh));
      } else {
        hn = unary(&c, "Tanh", hs >= 0 ? binary(&c, "Add", xt, binary(&c, "MatMul", hs, rt)) : xt);
      }
      /* Batch entries whose sequence has ended keep their state and output 0. */
      int m = lens ? step_mask(&c, lens, n_batch, ti, dtype) : -1, yv = hn;
      if (m >= 0) {
        yv = binary(&c, "Mul", hn, m);
        hn = hs >= 0 ? binary(&c, "Add", hs, binary(&c, "Mul", m, binary(&c, "Sub", hn, hs))) : yv;
        if (kind == KIND_LSTM)
          cn = cs >= 0 ? binary(&c, "Add", cs, binary(&c, "Mul", m, binary(&c, "Sub", cn, cs)))
                       : binary(&c, "Mul", cn, m);
      }
      hs = hn;
      if (kind == KIND_LSTM)
        cs = cn;
      if (y_out >= 0 && ys)
        ys[ti * n_dir + dir] = reshape(&c, yv, c.layout1 ? (int64_t[]){-1, 1, 1, h}
                                                        : (int64_t[]){1, 1, -1, h}, 4, -1);
    }
    last_h[dir] = hs;
    last_c[dir] = cs;
  }
  /* Y: the steps' states [T, D, B, H] ([B, T, D, H]); Y_h, Y_c: [D, B, H] ([B, D, H]). */
  int64_t dir_axis = layout ? 2 : 1;
  if (y_out >= 0 && !c.failed) {
    int *per_t = ap_arena_array(g->arena, (size_t)t, sizeof *per_t);
    if (!per_t)
      c.failed = true;
    for (int64_t ti = 0; ti < t && !c.failed; ti++) {
      per_t[ti] = ys[ti * n_dir];
      if (n_dir == 2)
        per_t[ti] = node(&c, "Concat", &ys[ti * n_dir], 2, 1, -1);
      if (n_dir == 2 && per_t[ti] >= 0) {
        ap_node *cn = &g->nodes[g->values[per_t[ti]].producer];
        cn->attr[0] = (ap_attr){.name = "axis", .type = AP_ATTR_INT, .i = dir_axis};
      }
    }
    if (!c.failed && node(&c, "Concat", per_t, (int)t, 1, y_out) >= 0)
      g->nodes[g->values[y_out].producer].attr[0] =
          (ap_attr){.name = "axis", .type = AP_ATTR_INT, .i = time_axis};
  }
  int finals[2] = {yh_out, yc_out};
  for (int k = 0; k < 2 && !c.failed; k++) {
    if (finals[k] < 0)
      continue;
    int *last = k == 0 ? last_h : last_c;
    int parts[2];
    for (int dir = 0; dir < n_dir; dir++)
      parts[dir] = reshape(&c, last[dir], c.layout1 ? (int64_t[]){-1, 1, h}
                                                    : (int64_t[]){1, -1, h}, 3, -1);
    if (node(&c, "Concat", parts, n_dir, 1, finals[k]) >= 0)
      g->nodes[g->values[finals[k]].producer].attr[0] =
          (ap_attr){.name = "axis", .type = AP_ATTR_INT, .i = layout ? 1 : 0};
  }
  if (c.failed)
    return d->status ? d->status : ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  return AP_OK;
}

static bool is_recurrent(const ap_node *n) {
  return !n->dead && n->op == AP_OP_UNKNOWN && (!*n->domain || strcmp(n->domain, "ai.onnx") == 0) &&
         (strcmp(n->op_type, "LSTM") == 0 || strcmp(n->op_type, "GRU") == 0 ||
          strcmp(n->op_type, "RNN") == 0);
}

/* Unrolls every recurrent node; one whose input shape is not known is
 * refused, or with skip_unknown left as it is. *unrolled counts. */
static ap_status unroll_all(ap_graph *g, bool skip_unknown, int *unrolled, ap_diag *d) {
  int n = g->n_nodes, rewrites = 0;
  for (int i = 0; i < n; i++) {
    if (!is_recurrent(&g->nodes[i]))
      continue;
    const ap_node *nd = &g->nodes[i];
    if (nd->n_in < 1 || nd->in[0] < 0)
      return ap_refuse(g, d, i, "%s", "input X is required");
    const ap_value *xv = &g->values[nd->in[0]];
    int64_t x_dims[3];
    ap_prefix px;
    if (xv->rank == 3 && ap_value_shape_known(xv))
      memcpy(x_dims, xv->dims, sizeof x_dims);
    else if (ap_infer_prefix(g, nd->in[0], &px) && px.rank == 3)
      memcpy(x_dims, px.dims, sizeof x_dims);
    else if (skip_unknown)
      continue;
    else
      return ap_refuse(g, d, i, "%s",
                    "the shape of input X is not known (bind the inputs' dims: the sequence "
                    "is unrolled)");
    ap_status s = unroll(g, i, x_dims, d);
    if (s != AP_OK)
      return s;
    rewrites++;
  }
  if (rewrites && !ap_graph_compact(g))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  *unrolled = rewrites;
  return AP_OK;
}

ap_status ap_unroll_recurrent(ap_graph *g, ap_diag *d) {
  int unrolled;
  return unroll_all(g, false, &unrolled, d);
}

ap_status ap_unroll_recurrent_known(ap_graph *g, int *unrolled, ap_diag *d) {
  return unroll_all(g, true, unrolled, d);
}

bool ap_recurrent_input_constant(const ap_node *n, int slot) {
  return slot == 4 && is_recurrent(n);
}
