/* Fused projections, unfused: exporters write a transformer's Q, K and V
 * projections as one MatMul with a [K, 3D] weight (plus one bias Add)
 * followed by a Split of its last axis. As one layer, a split of its
 * output features hands a device all of Q and part of K, never the same
 * heads of the three; as three layers on column slices of the weight each
 * splits by heads (Megatron-LM's partition). The rewrite is exact: each
 * output element is the same dot product. The weight stays one parameter,
 * read through Slice nodes, so training updates and exports it whole. */
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

static int const_i64(ap_graph *g, const char *name, int64_t value) {
  int v = ap_graph_add_value(g, name, AP_VAL_CONST);
  ap_tensor t = {.dtype = AP_DT_INT64, .rank = 1, .dims = {1}, .numel = 1, .data = &value};
  return v >= 0 && ap_value_set_constant(g, v, &t) ? v : -1;
}

/* A node op(ins...) -> out, appended and shape-inferred. */
static int add_node(ap_graph *g, const char *name, const char *op, const int *ins, int n_in,
                    int out, ap_diag *d) {
  int ni = ap_graph_add_node(g, name, "", op, n_in, 1, 0);
  if (ni < 0)
    return -1;
  ap_node *n = &g->nodes[ni];
  for (int i = 0; i < n_in; i++)
    n->in[i] = ins[i];
  n->out[0] = out;
  g->values[out].producer = ni;
  return ap_infer_node(g, ni, d) == AP_OK ? ni : -1;
}

/* Columns [lo, hi) of the last axis of weight w, as a Slice node's output. */
static int column_slice(ap_graph *g, const char *base, int w, int64_t lo, int64_t hi,
                        ap_diag *d) {
  char name[512];
  snprintf(name, sizeof name, "%s[%lld:%lld]", g->values[w].name, (long long)lo,
           (long long)hi);
  int out = ap_graph_add_value(g, name, AP_VAL_NODE);
  snprintf(name, sizeof name, "%s/%s.starts", base, g->values[w].name);
  int starts = const_i64(g, name, lo);
  snprintf(name, sizeof name, "%s/%s.ends", base, g->values[w].name);
  int ends = const_i64(g, name, hi);
  snprintf(name, sizeof name, "%s/%s.axes", base, g->values[w].name);
  int axes = const_i64(g, name, -1);
  if (out < 0 || starts < 0 || ends < 0 || axes < 0)
    return -1;
  snprintf(name, sizeof name, "%s/slice_%s", base, g->values[w].name);
  return add_node(g, name, "Slice", (int[]){w, starts, ends, axes}, 4, out, d) >= 0 ? out : -1;
}

/* Split node si's sizes along its axis, or false when they are not known. */
static bool split_sizes(ap_graph *g, const ap_node *n, int64_t dim, int64_t *size) {
  int k = n->n_out, count = 0;
  const int64_t *attr = ap_attr_ints(n, "split", &count);
  const ap_value *sv = n->n_in > 1 && n->in[1] >= 0 ? &g->values[n->in[1]] : NULL;
  if (sv && sv->data) {
    ap_tensor t = ap_value_tensor(sv);
    if (t.numel != k)
      return false;
    for (int i = 0; i < k; i++)
      size[i] = ap_tensor_get_i64(&t, i);
  } else if (attr) {
    if (count != k)
      return false;
    memcpy(size, attr, (size_t)k * sizeof *size);
  } else if (!sv) {
    int64_t each = (dim + k - 1) / k; /* equal parts, the last the rest (opset 18) */
    for (int i = 0; i < k; i++)
      size[i] = i < k - 1 ? each : dim - each * (k - 1);
  } else {
    return false;
  }
  return true;
}

/* The error of a failed add_node: shape inference's, else out of memory. */
static ap_status failed(ap_graph *g, ap_diag *d) {
  return d->status ? d->status : ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
}

static ap_status unfuse_one(ap_graph *g, int si, ap_diag *d, bool *done) {
  *done = false;
  const ap_node *sp = &g->nodes[si];
  int q = sp->in[0];
  if (q < 0 || sp->n_out > AP_MAX_RANK * 8)
    return AP_OK;
  const ap_value *qv = &g->values[q];
  int64_t axis = ap_attr_int(sp, "axis", 0);
  if (qv->rank < 2 || (axis != -1 && axis != qv->rank - 1))
    return AP_OK;
  /* Split <- [Add(., bias) <-] MatMul(x, W) with W a [K, N] weight. */
  int add = qv->producer, mm = add, bias = -1;
  if (add < 0)
    return AP_OK;
  if (g->nodes[add].op == AP_OP_ADD) {
    const ap_node *an = &g->nodes[add];
    for (int k = 0; k < 2 && mm == add; k++) {
      int other = an->in[1 - k];
      if (an->in[k] >= 0 && g->values[an->in[k]].producer >= 0 &&
          g->nodes[g->values[an->in[k]].producer].op == AP_OP_MATMUL && other >= 0 &&
          (g->values[other].data || ap_value_is_fed_weight(g, other)) &&
          g->values[other].rank == 1) {
        mm = g->values[an->in[k]].producer;
        bias = other;
      }
    }
    if (mm == add || ap_sole_reader(g, false, g->nodes[mm].out[0]) != add)
      return AP_OK;
  }
  const ap_node *mn = &g->nodes[mm];
  if (mn->op != AP_OP_MATMUL || mn->in[0] < 0 || mn->in[1] < 0 || ap_sole_reader(g, false, q) != si)
    return AP_OK;
  int x = mn->in[0], w = mn->in[1];
  const ap_value *wv = &g->values[w];
  if ((!wv->data && !ap_value_is_fed_weight(g, w)) || wv->rank != 2)
    return AP_OK;
  int64_t size[AP_MAX_RANK * 8], n_cols = wv->dims[1];
  int k = sp->n_out;
  if (!split_sizes(g, sp, n_cols, size))
    return AP_OK;
  int64_t total = 0;
  for (int i = 0; i < k; i++)
    total += size[i];
  if (total != n_cols || (bias >= 0 && g->values[bias].dims[0] != n_cols))
    return AP_OK;
  /* The rewrite: every output of the Split computed by its own layer. */
  int outs[AP_MAX_RANK * 8];
  memcpy(outs, sp->out, (size_t)k * sizeof *outs);
  char base[400];
  snprintf(base, sizeof base, "%s", sp->name);
  g->nodes[si].dead = g->nodes[mm].dead = true;
  g->nodes[add].dead = true;
  int64_t at = 0;
  for (int i = 0; i < k; i++, at += size[i - 1]) {
    if (outs[i] < 0)
      continue;
    char name[512];
    snprintf(name, sizeof name, "%s/part%d", base, i);
    int wi = column_slice(g, name, w, at, at + size[i], d);
    if (wi < 0)
      return failed(g, d);
    int prod = outs[i];
    if (bias >= 0) {
      snprintf(name, sizeof name, "%s/part%d/matmul_out", base, i);
      if ((prod = ap_graph_add_value(g, name, AP_VAL_NODE)) < 0)
        return failed(g, d);
    }
    snprintf(name, sizeof name, "%s/part%d/matmul", base, i);
    if (add_node(g, name, "MatMul", (int[]){x, wi}, 2, prod, d) < 0)
      return failed(g, d);
    if (bias >= 0) {
      snprintf(name, sizeof name, "%s/part%d", base, i);
      int bi = column_slice(g, name, bias, at, at + size[i], d);
      snprintf(name, sizeof name, "%s/part%d/bias", base, i);
      if (bi < 0 || add_node(g, name, "Add", (int[]){prod, bi}, 2, outs[i], d) < 0)
        return failed(g, d);
    }
  }
  *done = true;
  return AP_OK;
}

ap_status ap_unfuse_projections(ap_graph *g, ap_diag *d) {
  int n = g->n_nodes, rewrites = 0;
  for (int i = 0; i < n; i++) {
    if (g->nodes[i].dead || g->nodes[i].op != AP_OP_SPLIT)
      continue;
    bool done;
    ap_status s = unfuse_one(g, i, d, &done);
    if (s != AP_OK)
      return s;
    rewrites += done;
  }
  if (rewrites && !ap_graph_compact(g))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  return rewrites ? ap_verify(g, d) : AP_OK;
}

/* ---- Einsum ------------------------------------------------------------- */

/* Einsum, for the equations exporters write, becomes the layer it is: a
 * MatMul between Transposes and Unsqueezes (and Squeezes where an operand
 * has no row or column index), so the partition pass and training see a
 * MatMul. Letters are classified by where they appear: in both operands
 * and the output (batch), in the first and the output (rows, M), in the
 * second and the output (columns, N), in both operands only (the
 * contraction, K: at most one). The operands become
 *   A' = [batch, M..., 1 per extra N, M_last, K]
 *   B' = [batch, 1 per extra M, N..., K, N_last]
 * whose leading dims broadcast as MatMul's batch dims; the product is
 * [batch, M..., N..., M_last, N_last], transposed to the output's order.
 * One operand whose output is a permutation of it is a Transpose. Anything
 * else (an ellipsis, a repeated letter, a letter summed away, more than one
 * contraction index, three operands) is refused in one line. */

enum { EINSUM_MAX = AP_MAX_RANK + 2 };

typedef struct einsum_term {
  char l[EINSUM_MAX]; /* letters; '1' for a unit axis */
  int n;
} einsum_term;

typedef struct einsum_ctx {
  ap_graph *g;
  int ni;          /* the Einsum node */
  const char *eq;
  ap_diag *d;
  int made;        /* nodes added, for their names */
} einsum_ctx;

static ap_status refuse(einsum_ctx *e, const char *why) {
  const ap_node *n = &e->g->nodes[e->ni];
  return ap_error(e->d, AP_ERR_UNSUPPORTED, e->g->path, n->name, n->op_type,
                  "equation '%s' is not matmul-shaped: %s", e->eq, why);
}

static int find(const einsum_term *t, char c) {
  for (int i = 0; i < t->n; i++)
    if (t->l[i] == c)
      return i;
  return -1;
}

/* Parses "ab,bc->ac" (spaces ignored, no "->": the letters seen once, in
 * order) into terms; false with *why set when it cannot. */
static bool parse_equation(const char *eq, einsum_term *in, int *n_in, einsum_term *out,
                           const char **why) {
  *n_in = 0;
  memset(in, 0, 3 * sizeof *in);
  memset(out, 0, sizeof *out);
  einsum_term *t = &in[0];
  bool arrow = false;
  for (const char *p = eq; *p; p++) {
    if (*p == ' ')
      continue;
    if (*p == '.') {
      *why = "an ellipsis is not supported";
      return false;
    }
    if (*p == ',' && !arrow) {
      if (++*n_in >= 3) {
        *why = "it has more than two operands";
        return false;
      }
      t = &in[*n_in];
    } else if (*p == '-' && p[1] == '>' && !arrow) {
      arrow = true;
      t = out;
      p++;
    } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
      if (t->n >= AP_MAX_RANK) {
        *why = "an operand has more axes than supported";
        return false;
      }
      if (find(t, *p) >= 0) {
        *why = "a letter repeats within a term (a diagonal or a trace)";
        return false;
      }
      t->l[t->n++] = *p;
    } else {
      *why = "it has a character that is not a letter, ',', '->' or ' '";
      return false;
    }
  }
  (*n_in)++;
  if (!arrow) { /* implicit output: the letters seen once, alphabetically */
    for (char c = 'A'; c <= 'z'; c++) {
      int seen = 0;
      for (int k = 0; k < *n_in; k++)
        seen += find(&in[k], c) >= 0;
      if (seen == 1 && out->n < AP_MAX_RANK)
        out->l[out->n++] = c;
    }
  }
  return true;
}

static int add_value(einsum_ctx *e, const char *what) {
  char name[512];
  snprintf(name, sizeof name, "%s/%s%d", e->g->nodes[e->ni].name, what, e->made);
  return ap_graph_add_value(e->g, name, AP_VAL_NODE);
}

/* A node op(ins...) -> out (a new value when out < 0) with an INTS
 * attribute when attr is not NULL; the output's id, or -1. */
static int add_plain(einsum_ctx *e, const char *op, const int *ins, int n_in, int out,
                     const char *attr, const int64_t *ints, int n_ints) {
  char name[512];
  snprintf(name, sizeof name, "%s/%s%d", e->g->nodes[e->ni].name, op, e->made++);
  if (out < 0 && (out = add_value(e, "t")) < 0)
    return -1;
  int ni = ap_graph_add_node(e->g, name, "", op, n_in, 1, attr ? 1 : 0);
  if (ni < 0)
    return -1;
  ap_node *n = &e->g->nodes[ni];
  for (int i = 0; i < n_in; i++)
    n->in[i] = ins[i];
  n->out[0] = out;
  e->g->values[out].producer = ni;
  if (attr) {
    int64_t *v = ap_arena_array(e->g->arena, (size_t)n_ints + 1, sizeof *v);
    if (!v)
      return -1;
    memcpy(v, ints, (size_t)n_ints * sizeof *v);
    n->attr[0] = (ap_attr){.name = attr, .type = AP_ATTR_INTS, .n = n_ints, .ints = v};
  }
  return out;
}

/* x with its letters `from` put in the order of `to`'s letters (a
 * Transpose into out, or a new value when out < 0; none when they are in
 * order, unless x's rank is not known yet: shape inference then checks it
 * through the Transpose's perm). */
static int permute(einsum_ctx *e, int x, const einsum_term *from, const einsum_term *to,
                   int out, bool check_rank) {
  int64_t perm[EINSUM_MAX];
  int k = 0;
  bool moved = false;
  for (int i = 0; i < to->n; i++)
    if (to->l[i] != '1') {
      perm[k] = find(from, to->l[i]);
      moved |= perm[k] != k;
      k++;
    }
  if (check_rank && e->g->values[x].rank < 0)
    moved = true;
  return moved ? add_plain(e, "Transpose", &x, 1, out, "perm", perm, k) : x;
}

/* Unsqueeze (unit) or Squeeze (!unit) of the '1' axes of t: axes as an
 * input from opset 13, as an attribute before. */
static int units(einsum_ctx *e, int x, const einsum_term *t, bool unit, int out) {
  int64_t axes[EINSUM_MAX];
  int k = 0;
  for (int i = 0; i < t->n; i++)
    if (t->l[i] == '1')
      axes[k++] = i;
  if (!k)
    return x;
  const char *op = unit ? "Unsqueeze" : "Squeeze";
  if (e->g->opset < 13)
    return add_plain(e, op, &x, 1, out, "axes", axes, k);
  char name[512];
  snprintf(name, sizeof name, "%s/axes%d", e->g->nodes[e->ni].name, e->made);
  int av = ap_graph_add_value(e->g, name, AP_VAL_CONST);
  ap_tensor at = {.dtype = AP_DT_INT64, .rank = 1, .dims = {k}, .numel = k, .data = axes};
  if (av < 0 || !ap_value_set_constant(e->g, av, &at))
    return -1;
  return add_plain(e, op, (int[]){x, av}, 2, out, NULL, NULL, 0);
}

/* Drops the leading unit axes of an operand's batch part (MatMul
 * broadcasts a shorter operand). */
static void strip_leading_units(einsum_term *t) {
  int drop = 0;
  while (drop < t->n - 2 && t->l[drop] == '1')
    drop++;
  memmove(t->l, t->l + drop, (size_t)(t->n - drop));
  t->n -= drop;
}

static ap_status einsum_one(einsum_ctx *e) {
  ap_graph *g = e->g;
  const ap_node *n = &g->nodes[e->ni];
  einsum_term in[3], out, a, b, prod;
  int n_in;
  const char *why;
  if (!parse_equation(e->eq, in, &n_in, &out, &why))
    return refuse(e, why);
  if (n_in > 2)
    return refuse(e, "it has more than two operands");
  if (n_in != n->n_in)
    return refuse(e, "its operand count differs from the node's inputs");
  for (int i = 0; i < out.n; i++) {
    bool somewhere = false;
    for (int k = 0; k < n_in; k++)
      somewhere |= find(&in[k], out.l[i]) >= 0;
    if (!somewhere)
      return refuse(e, "an output letter is in no operand");
  }
  if (n->n_out != 1)
    return refuse(e, "Einsum has one output");
  /* Adding nodes may move g->nodes: n is not read after the first. */
  int x = n->in[0], x2 = n_in == 2 ? n->in[1] : -1, y = n->out[0];
  if (x < 0 || y < 0 || (n_in == 2 && x2 < 0))
    return refuse(e, "an operand is missing");
  for (int k = 0; k < n_in; k++) {
    int r = g->values[k ? x2 : x].rank;
    if (r >= 0 && r != in[k].n)
      return refuse(e, k ? "the second operand's rank is not its term's letter count"
                         : "the first operand's rank is not its term's letter count");
  }
  if (n_in == 1) {
    if (in[0].n != out.n)
      return refuse(e, "one operand whose output is not a permutation of it");
    g->nodes[e->ni].dead = true;
    int t = permute(e, x, &in[0], &out, y, true);
    if (t == x) /* the identity */
      t = add_plain(e, "Identity", &x, 1, y, NULL, NULL, 0);
    return t < 0 ? ap_error(e->d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory") : AP_OK;
  }
  einsum_term bat = {0}, ms = {0}, ns = {0}, ks = {0};
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < in[k].n; i++) {
      char c = in[k].l[i];
      bool other = find(&in[1 - k], c) >= 0, kept = find(&out, c) >= 0;
      if (!other && !kept)
        return refuse(e, "a letter of one operand is summed away");
      if (k == 0 && other && !kept)
        ks.l[ks.n++] = c;
    }
  for (int i = 0; i < out.n; i++) {
    char c = out.l[i];
    bool ia = find(&in[0], c) >= 0, ib = find(&in[1], c) >= 0;
    einsum_term *t = ia && ib ? &bat : ia ? &ms : &ns;
    t->l[t->n++] = c;
  }
  if (ks.n > 1)
    return refuse(e, "it contracts more than one index");
  char m_last = ms.n ? ms.l[ms.n - 1] : '1', n_last = ns.n ? ns.l[ns.n - 1] : '1';
  char k = ks.n ? ks.l[0] : '1';
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  memset(&prod, 0, sizeof prod);
#define PUT(t, c) ((t).n < EINSUM_MAX ? (void)((t).l[(t).n++] = (c)) : (void)0)
  for (int i = 0; i < bat.n; i++)
    PUT(a, bat.l[i]), PUT(b, bat.l[i]), PUT(prod, bat.l[i]);
  for (int i = 0; i + 1 < ms.n; i++)
    PUT(a, ms.l[i]), PUT(b, '1'), PUT(prod, ms.l[i]);
  for (int i = 0; i + 1 < ns.n; i++)
    PUT(a, '1'), PUT(b, ns.l[i]), PUT(prod, ns.l[i]);
  PUT(a, m_last), PUT(a, k);
  PUT(b, k), PUT(b, n_last);
  PUT(prod, m_last), PUT(prod, n_last);
#undef PUT
  if (prod.n > AP_MAX_RANK)
    return refuse(e, "the product would have more axes than supported");
  strip_leading_units(&a);
  strip_leading_units(&b);
  g->nodes[e->ni].dead = true;
  /* The product without its unit axes, then in the output's order. */
  einsum_term kept = {0};
  for (int i = 0; i < prod.n; i++)
    if (prod.l[i] != '1')
      kept.l[kept.n++] = prod.l[i];
  bool squeeze = kept.n != prod.n, reorder = memcmp(kept.l, out.l, (size_t)out.n) != 0;
  int av = units(e, permute(e, x, &in[0], &a, -1, true), &a, true, -1);
  int bv = av < 0 ? -1 : units(e, permute(e, x2, &in[1], &b, -1, true), &b, true, -1);
  int pv = bv < 0 ? -1 : add_plain(e, "MatMul", (int[]){av, bv}, 2, squeeze || reorder ? -1 : y,
                                   NULL, NULL, 0);
  if (pv >= 0 && squeeze)
    pv = units(e, pv, &prod, false, reorder ? -1 : y);
  if (pv >= 0 && reorder)
    pv = permute(e, pv, &kept, &out, y, false);
  return pv < 0 ? ap_error(e->d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory") : AP_OK;
}

ap_status ap_rewrite_einsum(ap_graph *g, ap_diag *d) {
  int n = g->n_nodes, rewrites = 0;
  for (int i = 0; i < n; i++) {
    const ap_node *node = &g->nodes[i];
    if (node->dead || strcmp(node->op_type, "Einsum") != 0 || node->domain[0] || g->opset < 12)
      continue;
    const ap_attr *eq = ap_attr_find(node, "equation");
    if (!eq || eq->type != AP_ATTR_STRING)
      return ap_error(d, AP_ERR_INVALID, g->path, node->name, node->op_type,
                      "attribute 'equation' (a string) is required");
    einsum_ctx e = {g, i, eq->s, d, 0};
    ap_status s = einsum_one(&e);
    if (s != AP_OK)
      return s;
    rewrites++;
  }
  if (rewrites && !ap_graph_compact(g))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  return AP_OK;
}
