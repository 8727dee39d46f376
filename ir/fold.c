/* Constant folding, interleaved with shape inference: one pass over the
 * nodes in topological order infers each node's outputs, then evaluates the
 * node if all of its inputs are constants and the operator is cheap and
 * shape-like. Exporters compute Reshape targets with Shape -> Gather ->
 * Unsqueeze -> Concat chains; folding them node by node, with shapes known as
 * we go, turns those targets into constants before the Reshape is reached.
 *
 * Numerics follow ONNX: integer arithmetic wraps in the element type and
 * divides truncating toward zero, Cast truncates floats toward zero and
 * saturates out-of-range values, float16/bfloat16 round to nearest even
 * through dtype.c. Floating-point results are computed in double and rounded
 * once to the element type, which is exact for + - * / and sqrt. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* Folding stops at outputs of more than 2^20 elements (4 MiB of float32):
 * larger constants are weights or data, not shape arithmetic, and copying
 * them into the arena would only grow the compiler's memory. Constant nodes
 * are exempt: their data is already in memory. */
enum { FOLD_MAX_ELEMS = 1 << 20, FOLD_MAX_IN = 8 };

typedef struct fctx {
  ap_graph *g;
  ap_node *n;
  ap_diag *d;
  int n_in;                  /* inputs, omitted ones included */
  ap_tensor in[FOLD_MAX_IN]; /* numel < 0 / data NULL for an omitted input */
  int n_out;
  ap_tensor out[FOLD_MAX_IN]; /* shaped from inference; data malloc'ed here */
  bool skip;                  /* the kernel declines (e.g. integer division by zero) */
} fctx;

static size_t elem_size(ap_dtype t) {
  return t == AP_DT_STRING ? sizeof(char *) : ap_dtype_size(t);
}

static bool is_unsigned(ap_dtype t) {
  return t == AP_DT_UINT8 || t == AP_DT_UINT16 || t == AP_DT_UINT32 || t == AP_DT_UINT64 ||
         t == AP_DT_BOOL;
}

/* Stores an integer truncated to the element type's width (numpy astype). */
static void store_int(ap_tensor *t, int64_t i, int64_t v) {
  void *p = t->data;
  switch (t->dtype) {
  case AP_DT_INT8: ((int8_t *)p)[i] = (int8_t)(uint8_t)v; break;
  case AP_DT_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case AP_DT_INT16: ((int16_t *)p)[i] = (int16_t)(uint16_t)v; break;
  case AP_DT_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case AP_DT_INT32: ((int32_t *)p)[i] = (int32_t)(uint32_t)v; break;
  case AP_DT_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case AP_DT_INT64: ((int64_t *)p)[i] = v; break;
  case AP_DT_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  case AP_DT_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  default: ap_tensor_set_f64(t, i, (double)v); break;
  }
}

static bool int_like(ap_dtype t) { return ap_dtype_is_int(t) || t == AP_DT_BOOL; }

/* ---- strided views ------------------------------------------------------ */

/* Row-major strides of a shape, in elements. */
static void strides_of(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

/* off[i] = base + sum(index_k * strides[k]) for every element i of dims in
 * row-major order: transposes, slices and broadcasts are all such views. */
static void view_offsets(int64_t *off, int rank, const int64_t *dims, const int64_t *strides,
                         int64_t base) {
  int64_t n = ap_numel(rank, dims), idx[AP_MAX_RANK] = {0}, cur = base;
  for (int64_t i = 0; i < n; i++) {
    off[i] = cur;
    for (int k = rank - 1; k >= 0; k--) {
      if (++idx[k] < dims[k]) {
        cur += strides[k];
        break;
      }
      cur -= strides[k] * (idx[k] - 1);
      idx[k] = 0;
    }
  }
}

/* Offsets into t for each element of the broadcast shape out. */
static int64_t *bcast_offsets(const ap_tensor *out, const ap_tensor *t) {
  int64_t *off = ap_xrealloc(NULL, (size_t)(out->numel ? out->numel : 1) * sizeof *off);
  if (!off)
    return NULL;
  int64_t ts[AP_MAX_RANK], st[AP_MAX_RANK];
  strides_of(t->rank, t->dims, ts);
  for (int i = 0; i < out->rank; i++) {
    int k = i - (out->rank - t->rank);
    st[i] = k < 0 || t->dims[k] == 1 ? 0 : ts[k];
  }
  view_offsets(off, out->rank, out->dims, st, 0);
  return off;
}

static void copy_elem(ap_tensor *dst, int64_t i, const ap_tensor *src, int64_t j) {
  size_t es = elem_size(dst->dtype);
  memcpy((char *)dst->data + (size_t)i * es, (const char *)src->data + (size_t)j * es, es);
}

/* dst[i] = src[off[i]] over the view. */
static ap_status gather_view(fctx *c, ap_tensor *dst, const ap_tensor *src, int rank,
                             const int64_t *dims, const int64_t *strides, int64_t base) {
  int64_t *off = ap_xrealloc(NULL, (size_t)(dst->numel ? dst->numel : 1) * sizeof *off);
  if (!off)
    return ap_error(c->d, AP_ERR_NOMEM, c->g->path, c->n->name, c->n->op_type,
                    "out of memory");
  view_offsets(off, rank, dims, strides, base);
  for (int64_t i = 0; i < dst->numel; i++)
    copy_elem(dst, i, src, off[i]);
  ap_xfree(off);
  return AP_OK;
}

static ap_status nomem(fctx *c) {
  return ap_error(c->d, AP_ERR_NOMEM, c->g->path, c->n->name, c->n->op_type, "out of memory");
}

/* ---- element-wise arithmetic -------------------------------------------- */

static double f_unary(ap_op op, double x) {
  switch (op) {
  case AP_OP_NEG: return -x;
  case AP_OP_ABS: return fabs(x);
  case AP_OP_SQRT: return sqrt(x);
  case AP_OP_RECIPROCAL: return 1 / x;
  case AP_OP_EXP: return exp(x);
  case AP_OP_LOG: return log(x);
  case AP_OP_ERF: return erf(x);
  case AP_OP_RELU: return x > 0 ? x : x == x ? 0 : x;
  case AP_OP_SIGMOID: return 1 / (1 + exp(-x));
  case AP_OP_TANH: return tanh(x);
  case AP_OP_SIN: return sin(x);
  case AP_OP_COS: return cos(x);
  case AP_OP_FLOOR: return floor(x);
  case AP_OP_CEIL: return ceil(x);
  case AP_OP_ROUND: return nearbyint(x); /* halves to even, as numpy's round */
  case AP_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : x; /* NaN and zeros stay */
  case AP_OP_IS_NAN: return x != x;
  default: ap_die("no unary kernel for op %d", (int)op);
  }
}

static int64_t i_unary(ap_op op, int64_t x) {
  switch (op) {
  case AP_OP_NEG: return (int64_t)(0 - (uint64_t)x);
  case AP_OP_ABS: return x < 0 ? (int64_t)(0 - (uint64_t)x) : x;
  case AP_OP_RELU: return x > 0 ? x : 0;
  case AP_OP_SIGN: return x > 0 ? 1 : x < 0 ? -1 : 0;
  case AP_OP_NOT: return !x;
  default: ap_die("no integer unary kernel for op %d", (int)op);
  }
}

static ap_status fold_unary(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  ap_op op = c->n->op;
  bool int_kernel = int_like(x->dtype) && (op == AP_OP_NEG || op == AP_OP_ABS ||
                                           op == AP_OP_RELU || op == AP_OP_SIGN ||
                                           op == AP_OP_NOT);
  if (x->dtype == AP_DT_STRING) {
    c->skip = true;
    return AP_OK;
  }
  for (int64_t i = 0; i < y->numel; i++) {
    if (int_kernel)
      store_int(y, i, i_unary(op, ap_tensor_get_i64(x, i)));
    else
      ap_tensor_set_f64(y, i, f_unary(op, ap_tensor_get_f64(x, i)));
  }
  return AP_OK;
}
#define fold_RELU fold_unary
#define fold_SIGMOID fold_unary
#define fold_TANH fold_unary
#define fold_EXP fold_unary
#define fold_LOG fold_unary
#define fold_SQRT fold_unary
#define fold_NEG fold_unary
#define fold_ABS fold_unary
#define fold_RECIPROCAL fold_unary
#define fold_ERF fold_unary
#define fold_SIN fold_unary
#define fold_COS fold_unary
#define fold_FLOOR fold_unary
#define fold_CEIL fold_unary
#define fold_ROUND fold_unary
#define fold_SIGN fold_unary
#define fold_IS_NAN fold_unary
#define fold_NOT fold_unary

static ap_status fold_IS_INF(fctx *c) {
  bool neg = ap_attr_int(c->n, "detect_negative", 1) != 0,
       pos = ap_attr_int(c->n, "detect_positive", 1) != 0;
  for (int64_t i = 0; i < c->out[0].numel; i++) {
    double x = ap_tensor_get_f64(&c->in[0], i);
    ((uint8_t *)c->out[0].data)[i] = (x == INFINITY && pos) || (x == -INFINITY && neg);
  }
  return AP_OK;
}

static double f_binary(ap_op op, double a, double b) {
  switch (op) {
  case AP_OP_ADD: case AP_OP_SUM: return a + b;
  case AP_OP_SUB: return a - b;
  case AP_OP_MUL: return a * b;
  case AP_OP_DIV: return a / b;
  case AP_OP_POW: return pow(a, b);
  /* np.maximum/np.minimum propagate NaN. */
  case AP_OP_MAX: return a != a || b != b ? NAN : a > b ? a : b;
  case AP_OP_MIN: return a != a || b != b ? NAN : a < b ? a : b;
  case AP_OP_EQUAL: return a == b;
  case AP_OP_LESS: return a < b;
  case AP_OP_GREATER: return a > b;
  case AP_OP_GREATER_OR_EQUAL: return a >= b;
  case AP_OP_LESS_OR_EQUAL: return a <= b;
  case AP_OP_MOD: return fmod(a, b); /* floats: fmod = 1 (shape inference) */
  default: ap_die("no binary kernel for op %d", (int)op);
  }
}

static int64_t i_pow(int64_t a, int64_t b) {
  if (b < 0)
    return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
  uint64_t r = 1, base = (uint64_t)a;
  for (; b; b >>= 1, base *= base)
    if (b & 1)
      r *= base;
  return (int64_t)r;
}

/* Integer kernels wrap (unsigned arithmetic) as numpy does; false for a
 * division by zero, which ONNX leaves undefined and folding declines. Mod
 * takes the sign of the dividend with fmod, else of the divisor (Python's
 * %). */
static bool i_binary(ap_op op, bool uns, bool fmod_, int64_t a, int64_t b, int64_t *r) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  switch (op) {
  case AP_OP_ADD: case AP_OP_SUM: *r = (int64_t)(ua + ub); return true;
  case AP_OP_SUB: *r = (int64_t)(ua - ub); return true;
  case AP_OP_MUL: *r = (int64_t)(ua * ub); return true;
  case AP_OP_DIV:
    if (b == 0)
      return false;
    if (uns)
      *r = (int64_t)(ua / ub);
    else
      *r = a == INT64_MIN && b == -1 ? INT64_MIN : a / b;
    return true;
  case AP_OP_POW: *r = i_pow(a, b); return true;
  case AP_OP_MAX: *r = (uns ? ua > ub : a > b) ? a : b; return true;
  case AP_OP_MIN: *r = (uns ? ua < ub : a < b) ? a : b; return true;
  case AP_OP_EQUAL: *r = a == b; return true;
  case AP_OP_LESS: *r = uns ? ua < ub : a < b; return true;
  case AP_OP_GREATER: *r = uns ? ua > ub : a > b; return true;
  case AP_OP_GREATER_OR_EQUAL: *r = uns ? ua >= ub : a >= b; return true;
  case AP_OP_LESS_OR_EQUAL: *r = uns ? ua <= ub : a <= b; return true;
  case AP_OP_AND: *r = a && b; return true;
  case AP_OP_OR: *r = a || b; return true;
  case AP_OP_XOR: *r = !a != !b; return true;
  case AP_OP_MOD:
    if (b == 0)
      return false;
    if (uns) {
      *r = (int64_t)(ua % ub);
      return true;
    }
    *r = b == -1 ? 0 : a % b;
    if (!fmod_ && *r != 0 && (*r < 0) != (b < 0))
      *r += b;
    return true;
  default: ap_die("no integer binary kernel for op %d", (int)op);
  }
}

/* acc = acc OP b elementwise, acc already broadcast to y's shape (a double
 * or int64 accumulator). Variadic Sum/Max/Min fold left to right. */
static ap_status fold_binary(fctx *c) {
  ap_tensor *y = &c->out[0];
  ap_op op = c->n->op;
  ap_dtype dt = c->in[0].dtype;
  for (int k = 0; k < c->n_in; k++)
    if (c->in[k].dtype == AP_DT_STRING || !c->in[k].data) {
      c->skip = true;
      return AP_OK;
    }
  bool ints = int_like(dt) && int_like(c->in[c->n_in - 1].dtype), uns = is_unsigned(dt);
  bool fmod_ = ap_attr_int(c->n, "fmod", 0) != 0;
  int64_t n = y->numel ? y->numel : 1;
  double *fa = NULL;
  int64_t *ia = NULL, *off = NULL;
  ap_status s = AP_OK;
  if (!(ints ? (void *)(ia = ap_xrealloc(NULL, (size_t)n * sizeof *ia))
             : (void *)(fa = ap_xrealloc(NULL, (size_t)n * sizeof *fa))))
    return nomem(c);
  for (int k = 0; k < c->n_in && !c->skip; k++) {
    ap_tensor *x = &c->in[k];
    if (!(off = bcast_offsets(y, x))) {
      s = nomem(c);
      break;
    }
    for (int64_t i = 0; i < y->numel; i++) {
      if (ints) {
        int64_t v = ap_tensor_get_i64(x, off[i]);
        if (k == 0)
          ia[i] = v;
        else if (!i_binary(op, uns, fmod_, ia[i], v, &ia[i])) {
          c->skip = true;
          break;
        }
      } else {
        double v = ap_tensor_get_f64(x, off[i]);
        fa[i] = k == 0 ? v : f_binary(op, fa[i], v);
      }
    }
    ap_xfree(off);
  }
  for (int64_t i = 0; !s && !c->skip && i < y->numel; i++) {
    if (ints)
      store_int(y, i, ia[i]);
    else
      ap_tensor_set_f64(y, i, fa[i]);
  }
  ap_xfree(fa);
  ap_xfree(ia);
  return s;
}
#define fold_ADD fold_binary
#define fold_SUB fold_binary
#define fold_MUL fold_binary
#define fold_DIV fold_binary
#define fold_POW fold_binary
#define fold_SUM fold_binary
#define fold_MAX fold_binary
#define fold_MIN fold_binary
#define fold_LESS fold_binary
#define fold_GREATER fold_binary
#define fold_EQUAL fold_binary
#define fold_GREATER_OR_EQUAL fold_binary
#define fold_LESS_OR_EQUAL fold_binary
#define fold_AND fold_binary
#define fold_OR fold_binary
#define fold_XOR fold_binary
#define fold_MOD fold_binary

static ap_status fold_WHERE(fctx *c) {
  ap_tensor *y = &c->out[0];
  int64_t *oc = bcast_offsets(y, &c->in[0]), *ox = bcast_offsets(y, &c->in[1]),
          *oy = bcast_offsets(y, &c->in[2]);
  ap_status s = oc && ox && oy ? AP_OK : nomem(c);
  for (int64_t i = 0; !s && i < y->numel; i++) {
    bool cond = ((const uint8_t *)c->in[0].data)[oc[i]] != 0;
    copy_elem(y, i, &c->in[cond ? 1 : 2], cond ? ox[i] : oy[i]);
  }
  ap_xfree(oc);
  ap_xfree(ox);
  ap_xfree(oy);
  return s;
}

/* Cast: integer to integer wraps; anything involving a float goes through
 * double, which ap_tensor_set_f64 truncates toward zero and saturates for
 * integer targets. Strings are not folded. */
static ap_status cast_into(fctx *c, ap_tensor *y, const ap_tensor *x) {
  if (x->dtype == AP_DT_STRING || y->dtype == AP_DT_STRING) {
    c->skip = true;
    return AP_OK;
  }
  bool ints = int_like(x->dtype) && int_like(y->dtype);
  for (int64_t i = 0; i < y->numel; i++) {
    if (ints)
      store_int(y, i, ap_tensor_get_i64(x, i));
    else
      ap_tensor_set_f64(y, i, ap_tensor_get_f64(x, i));
  }
  return AP_OK;
}

static ap_status fold_CAST(fctx *c) { return cast_into(c, &c->out[0], &c->in[0]); }
static ap_status fold_CAST_LIKE(fctx *c) { return cast_into(c, &c->out[0], &c->in[0]); }

/* ---- data movement ------------------------------------------------------ */

/* Same elements, new shape. */
static ap_status fold_copy(fctx *c) {
  memcpy(c->out[0].data, c->in[0].data, (size_t)c->out[0].numel * elem_size(c->out[0].dtype));
  return AP_OK;
}
#define fold_IDENTITY fold_copy
#define fold_RESHAPE fold_copy
#define fold_FLATTEN fold_copy
#define fold_SQUEEZE fold_copy
#define fold_UNSQUEEZE fold_copy

static ap_status fold_TRANSPOSE(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  int64_t xs[AP_MAX_RANK], st[AP_MAX_RANK];
  int count;
  const int64_t *perm = ap_attr_ints(c->n, "perm", &count);
  strides_of(x->rank, x->dims, xs);
  for (int i = 0; i < x->rank; i++)
    st[i] = xs[perm ? perm[i] : x->rank - 1 - i];
  return gather_view(c, y, x, y->rank, y->dims, st, 0);
}

static ap_status fold_EXPAND(fctx *c) {
  ap_tensor *y = &c->out[0];
  int64_t *off = bcast_offsets(y, &c->in[0]);
  if (!off)
    return nomem(c);
  for (int64_t i = 0; i < y->numel; i++)
    copy_elem(y, i, &c->in[0], off[i]);
  ap_xfree(off);
  return AP_OK;
}

static ap_status fold_SLICE(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  int64_t starts[AP_MAX_RANK], ends[AP_MAX_RANK], steps[AP_MAX_RANK], xs[AP_MAX_RANK],
      st[AP_MAX_RANK], base = 0;
  bool sliced[AP_MAX_RANK], known;
  ap_value xv = {.rank = x->rank};
  ap_status s = ap_slice_params(c->g, c->n, &xv, starts, ends, steps, sliced, &known, c->d);
  if (s || !known)
    return s;
  strides_of(x->rank, x->dims, xs);
  for (int i = 0; i < x->rank; i++) {
    int64_t first = 0, count;
    if (sliced[i])
      ap_slice_axis(x->dims[i], starts[i], ends[i], steps[i], &first, &count);
    base += first * xs[i];
    st[i] = xs[i] * steps[i];
  }
  return gather_view(c, y, x, y->rank, y->dims, st, base);
}

/* Every output element from its source (ap_pad_source) or the constant. */
static ap_status fold_PAD(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  int64_t begin[AP_MAX_RANK], end[AP_MAX_RANK], xs[AP_MAX_RANK], idx[AP_MAX_RANK] = {0};
  ap_pad_mode mode;
  bool known;
  ap_status s = ap_pad_params(c->g, c->n, x->rank, begin, end, &mode, &known, c->d);
  if (s || !known || x->dtype == AP_DT_STRING) {
    c->skip = true;
    return s;
  }
  /* The constant: input 2 from opset 11 (zero when omitted), else 'value'. */
  ap_tensor value = {.dtype = y->dtype, .numel = 1};
  uint8_t zero[16] = {0};
  value.data = zero;
  if (c->g->opset < 11)
    ap_tensor_set_f64(&value, 0, ap_attr_float(c->n, "value", 0));
  else if (c->n_in > 2 && c->in[2].data && c->in[2].numel >= 1)
    value = c->in[2];
  strides_of(x->rank, x->dims, xs);
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t off = 0;
    for (int a = 0; a < x->rank && off >= 0; a++) {
      int64_t j = ap_pad_source(mode, idx[a], begin[a], x->dims[a]);
      off = j < 0 ? -1 : off + j * xs[a];
    }
    if (off < 0)
      copy_elem(y, i, &value, 0);
    else
      copy_elem(y, i, x, off);
    for (int a = y->rank - 1; a >= 0; a--) {
      if (++idx[a] < y->dims[a])
        break;
      idx[a] = 0;
    }
  }
  return AP_OK;
}

static ap_status fold_TILE(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  int64_t xs[AP_MAX_RANK], idx[AP_MAX_RANK] = {0};
  strides_of(x->rank, x->dims, xs);
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t off = 0;
    for (int a = 0; a < x->rank; a++)
      off += idx[a] % x->dims[a] * xs[a];
    copy_elem(y, i, x, off);
    for (int a = y->rank - 1; a >= 0; a--) {
      if (++idx[a] < y->dims[a])
        break;
      idx[a] = 0;
    }
  }
  return AP_OK;
}

/* Prefix sums along the axis: integers wrap in their type, floats add in
 * double and round once per element. */
static ap_status fold_CUM_SUM(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  int axis;
  bool known;
  ap_status s = ap_cumsum_axis(c->g, c->n, x->rank, &axis, &known, c->d);
  c->skip = !known;
  if (s || !known)
    return s;
  bool exclusive = ap_attr_int(c->n, "exclusive", 0) != 0;
  bool reverse = ap_attr_int(c->n, "reverse", 0) != 0;
  int64_t outer = 1, len = x->dims[axis], inner = 1;
  for (int a = 0; a < axis; a++)
    outer *= x->dims[a];
  for (int a = axis + 1; a < x->rank; a++)
    inner *= x->dims[a];
  bool ints = int_like(x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      uint64_t iacc = 0;
      double facc = 0;
      for (int64_t t = 0; t < len; t++) {
        int64_t at = (o * len + (reverse ? len - 1 - t : t)) * inner + j;
        if (exclusive) {
          if (ints)
            store_int(y, at, (int64_t)iacc);
          else
            ap_tensor_set_f64(y, at, facc);
        }
        if (ints)
          iacc += (uint64_t)ap_tensor_get_i64(x, at);
        else
          facc += ap_tensor_get_f64(x, at);
        if (!exclusive) {
          if (ints)
            store_int(y, at, (int64_t)iacc);
          else
            ap_tensor_set_f64(y, at, facc);
        }
      }
    }
  return AP_OK;
}

/* The matrices' elements on and above (upper) or below the k-th diagonal. */
static ap_status fold_TRILU(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  bool upper, known;
  int64_t k;
  ap_status s = ap_trilu_params(c->g, c->n, &upper, &k, &known, c->d);
  c->skip = !known;
  if (s || !known)
    return s;
  int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
  size_t es = elem_size(y->dtype);
  for (int64_t i = 0; i < y->numel; i++) {
    int64_t col = i % cols, row = i / cols % rows;
    if (upper ? col - row >= k : col - row <= k)
      copy_elem(y, i, x, i);
    else
      memset((char *)y->data + (size_t)i * es, 0, es);
  }
  return AP_OK;
}

/* The input offset of output element (n, c, h, w) of DepthToSpace or
 * SpaceToDepth with block b (x: the input's dims). */
static int64_t depth_space_source(bool to_space, bool crd, int64_t b, const int64_t *x,
                                  int64_t n, int64_t c, int64_t h, int64_t w) {
  int64_t xc, xh, xw;
  if (to_space) {
    int64_t i = h % b, j = w % b, cout = x[1] / (b * b);
    xc = crd ? (c * b + i) * b + j : (i * b + j) * cout + c;
    xh = h / b;
    xw = w / b;
  } else {
    int64_t blk = c / x[1];
    xc = c % x[1];
    xh = h * b + blk / b;
    xw = w * b + blk % b;
  }
  return ((n * x[1] + xc) * x[2] + xh) * x[3] + xw;
}

static ap_status fold_depth_space(fctx *c) {
  ap_tensor *x = &c->in[0], *y = &c->out[0];
  int64_t b;
  bool crd;
  ap_status s = ap_depth_space_params(c->g, c->n, &b, &crd, c->d);
  if (s)
    return s;
  bool to_space = c->n->op == AP_OP_DEPTH_TO_SPACE;
  int64_t i = 0;
  for (int64_t n = 0; n < y->dims[0]; n++)
    for (int64_t ch = 0; ch < y->dims[1]; ch++)
      for (int64_t h = 0; h < y->dims[2]; h++)
        for (int64_t w = 0; w < y->dims[3]; w++)
          copy_elem(y, i++, x, depth_space_source(to_space, crd, b, x->dims, n, ch, h, w));
  return AP_OK;
}
#define fold_DEPTH_TO_SPACE fold_depth_space
#define fold_SPACE_TO_DEPTH fold_depth_space

/* Copies, along axis, blocks of src into dst at position at (in units of
 * the axis): the core of Concat and Split. */
static void copy_along(ap_tensor *dst, int64_t dst_at, const ap_tensor *src, int64_t src_at,
                       int axis, int64_t len) {
  size_t es = elem_size(dst->dtype);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++)
    outer *= dst->dims[i];
  for (int i = axis + 1; i < dst->rank; i++)
    inner *= dst->dims[i];
  for (int64_t o = 0; o < outer; o++)
    memcpy((char *)dst->data + (size_t)((o * dst->dims[axis] + dst_at) * inner) * es,
           (const char *)src->data + (size_t)((o * src->dims[axis] + src_at) * inner) * es,
           (size_t)(len * inner) * es);
}

static ap_status fold_CONCAT(fctx *c) {
  ap_tensor *y = &c->out[0];
  int64_t axis = ap_attr_int(c->n, "axis", 0);
  int a = (int)(axis < 0 ? axis + y->rank : axis);
  int64_t at = 0;
  for (int k = 0; k < c->n_in; k++) {
    copy_along(y, at, &c->in[k], 0, a, c->in[k].dims[a]);
    at += c->in[k].dims[a];
  }
  return AP_OK;
}

static ap_status fold_SPLIT(fctx *c) {
  ap_tensor *x = &c->in[0];
  int64_t axis = ap_attr_int(c->n, "axis", 0);
  int a = (int)(axis < 0 ? axis + x->rank : axis);
  int64_t at = 0;
  /* An omitted output's size is not at hand, and the later ones start after it. */
  for (int k = 0; k < c->n_out; k++)
    c->skip |= !c->out[k].data;
  for (int k = 0; !c->skip && k < c->n_out; k++) {
    copy_along(&c->out[k], 0, x, at, a, c->out[k].dims[a]);
    at += c->out[k].dims[a];
  }
  return AP_OK;
}

static ap_status fold_GATHER(fctx *c) {
  ap_tensor *x = &c->in[0], *idx = &c->in[1], *y = &c->out[0];
  int64_t axis = ap_attr_int(c->n, "axis", 0);
  int a = (int)(axis < 0 ? axis + x->rank : axis);
  int64_t outer = 1, inner = 1, dim = x->dims[a];
  for (int i = 0; i < a; i++)
    outer *= x->dims[i];
  for (int i = a + 1; i < x->rank; i++)
    inner *= x->dims[i];
  size_t es = elem_size(x->dtype);
  for (int64_t j = 0; j < idx->numel; j++) {
    int64_t k = ap_tensor_get_i64(idx, j);
    if (k < -dim || k >= dim)
      return ap_error(c->d, AP_ERR_INVALID, c->g->path, c->n->name, c->n->op_type,
                      "index %lld is out of range for a dim of %lld", (long long)k,
                      (long long)dim);
    if (k < 0)
      k += dim;
    for (int64_t o = 0; o < outer; o++)
      memcpy((char *)y->data + (size_t)((o * idx->numel + j) * inner) * es,
             (const char *)x->data + (size_t)((o * dim + k) * inner) * es, (size_t)inner * es);
  }
  return AP_OK;
}

/* An index read from a constant, counted from the end when negative; the
 * shapes pass checked it lies in [-dim, dim). */
static int64_t index_at(const ap_tensor *idx, int64_t j, int64_t dim) {
  int64_t k = ap_tensor_get_i64(idx, j);
  return k < 0 ? k + dim : k;
}

/* y[i] = y[i] (reduction) u[j], exact for integers, in double for floats. */
static void scatter_elem(ap_tensor *y, int64_t i, const ap_tensor *u, int64_t j,
                         ap_scatter_reduction r) {
  if (r == AP_SCATTER_NONE) {
    copy_elem(y, i, u, j);
  } else if (int_like(y->dtype)) {
    int64_t a = ap_tensor_get_i64(y, i), b = ap_tensor_get_i64(u, j);
    store_int(y, i, r == AP_SCATTER_ADD   ? (int64_t)((uint64_t)a + (uint64_t)b)
                    : r == AP_SCATTER_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                    : r == AP_SCATTER_MAX ? (a > b ? a : b)
                                          : (a < b ? a : b));
  } else {
    double a = ap_tensor_get_f64(y, i), b = ap_tensor_get_f64(u, j);
    ap_tensor_set_f64(y, i, r == AP_SCATTER_ADD   ? a + b
                            : r == AP_SCATTER_MUL ? a * b
                            : r == AP_SCATTER_MAX ? (isnan(a) || a > b ? a : b)
                                                  : (isnan(a) || a < b ? a : b));
  }
}

/* GatherElements reads, ScatterElements writes, for element i of the
 * indices, the data element at its position with the axis's index
 * replaced. */
static void elements_walk(fctx *c, bool scatter, ap_scatter_reduction r) {
  ap_tensor *x = &c->in[0], *idx = &c->in[1], *y = &c->out[0];
  int a = (int)ap_attr_int(c->n, "axis", 0);
  a = a < 0 ? a + x->rank : a;
  int64_t xs[AP_MAX_RANK], at[AP_MAX_RANK] = {0};
  strides_of(x->rank, x->dims, xs);
  for (int64_t i = 0; i < idx->numel; i++) {
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++)
      off += (d == a ? index_at(idx, i, x->dims[a]) : at[d]) * xs[d];
    if (scatter)
      scatter_elem(y, off, &c->in[2], i, r);
    else
      copy_elem(y, i, x, off);
    for (int d = idx->rank - 1; d >= 0; d--) {
      if (++at[d] < idx->dims[d])
        break;
      at[d] = 0;
    }
  }
}

static ap_status fold_GATHER_ELEMENTS(fctx *c) {
  elements_walk(c, false, AP_SCATTER_NONE);
  return AP_OK;
}

static ap_status fold_SCATTER_ELEMENTS(fctx *c) {
  ap_scatter_reduction r;
  ap_status s = ap_scatter_reduction_of(c->g, c->n, &r, c->d);
  if (s)
    return s;
  memcpy(c->out[0].data, c->in[0].data, (size_t)c->in[0].numel * elem_size(c->in[0].dtype));
  elements_walk(c, true, r);
  return AP_OK;
}

/* GatherND reads, ScatterND writes, for every tuple of indices, the block
 * of data it addresses (within its batch element). */
static ap_status nd_walk(fctx *c, bool scatter) {
  ap_tensor *x = &c->in[0], *idx = &c->in[1], *y = &c->out[0];
  ap_scatter_reduction r = AP_SCATTER_NONE;
  int b;
  ap_status s = ap_gather_nd_batch(c->g, c->n, &b, c->d);
  if (!s && scatter)
    s = ap_scatter_reduction_of(c->g, c->n, &r, c->d);
  if (s)
    return s;
  if (scatter)
    memcpy(y->data, x->data, (size_t)x->numel * elem_size(x->dtype));
  int k = (int)idx->dims[idx->rank - 1];
  int64_t xs[AP_MAX_RANK], batches = 1, tuples = 1, block = 1;
  strides_of(x->rank, x->dims, xs);
  for (int i = 0; i < b; i++)
    batches *= x->dims[i];
  for (int i = b; i < idx->rank - 1; i++)
    tuples *= idx->dims[i];
  for (int i = b + k; i < x->rank; i++)
    block *= x->dims[i];
  int64_t per_batch = b ? xs[b - 1] : x->numel, j = 0;
  for (int64_t bi = 0; bi < batches; bi++)
    for (int64_t t = 0; t < tuples; t++, j++) {
      int64_t off = bi * per_batch;
      for (int q = 0; q < k; q++)
        off += index_at(idx, j * k + q, x->dims[b + q]) * xs[b + q];
      for (int64_t e = 0; e < block; e++)
        if (scatter)
          scatter_elem(y, off + e, &c->in[2], j * block + e, r);
        else
          copy_elem(y, j * block + e, x, off + e);
    }
  return AP_OK;
}

static ap_status fold_GATHER_ND(fctx *c) { return nd_walk(c, false); }
static ap_status fold_SCATTER_ND(fctx *c) { return nd_walk(c, true); }

/* ---- constants and metadata --------------------------------------------- */

static ap_status fold_CONSTANT(fctx *c) {
  const ap_attr *a = &c->n->attr[0];
  ap_tensor *y = &c->out[0];
  if (a->type == AP_ATTR_TENSOR) {
    if ((!a->t->data && a->t->numel) || a->t->numel != y->numel) {
      c->skip = true;
      return AP_OK;
    }
    memcpy(y->data, a->t->data, (size_t)y->numel * elem_size(y->dtype));
  } else if (a->type == AP_ATTR_FLOAT) {
    ((float *)y->data)[0] = a->f;
  } else if (a->type == AP_ATTR_INT) {
    ((int64_t *)y->data)[0] = a->i;
  } else if (a->type == AP_ATTR_STRING) {
    ((const char **)y->data)[0] = a->s;
  } else if (a->type == AP_ATTR_FLOATS) {
    memcpy(y->data, a->floats, (size_t)a->n * sizeof(float));
  } else if (a->type == AP_ATTR_INTS) {
    memcpy(y->data, a->ints, (size_t)a->n * sizeof(int64_t));
  } else if (a->type == AP_ATTR_STRINGS) {
    memcpy(y->data, a->strings, (size_t)a->n * sizeof(char *));
  }
  return AP_OK;
}

static ap_status fold_CONSTANT_OF_SHAPE(fctx *c) {
  ap_tensor value, *y = &c->out[0];
  ap_status s = ap_constant_of_shape_value(c->g, c->n, &value, c->d);
  for (int64_t i = 0; !s && i < y->numel; i++)
    copy_elem(y, i, &value, 0);
  return s;
}

static ap_status fold_SHAPE(fctx *c) {
  const ap_value *x = ap_node_in(c->g, c->n, 0);
  int start, end;
  ap_shape_range(c->n, x->rank, &start, &end);
  for (int i = start; i < end; i++)
    ((int64_t *)c->out[0].data)[i - start] = x->dims[i];
  return AP_OK;
}

static ap_status fold_SIZE(fctx *c) {
  const ap_value *x = ap_node_in(c->g, c->n, 0);
  ap_tensor t = ap_value_tensor(x);
  ((int64_t *)c->out[0].data)[0] = t.numel;
  return AP_OK;
}

static ap_status fold_RANGE(fctx *c) {
  ap_tensor *y = &c->out[0];
  if (int_like(y->dtype)) {
    int64_t start = ap_tensor_get_i64(&c->in[0], 0), delta = ap_tensor_get_i64(&c->in[2], 0);
    for (int64_t i = 0; i < y->numel; i++)
      store_int(y, i, (int64_t)((uint64_t)start + (uint64_t)i * (uint64_t)delta));
  } else {
    double start = ap_tensor_get_f64(&c->in[0], 0), delta = ap_tensor_get_f64(&c->in[2], 0);
    for (int64_t i = 0; i < y->numel; i++)
      ap_tensor_set_f64(y, i, start + (double)i * delta);
  }
  return AP_OK;
}

/* Dropout in inference is the identity, and its mask all true. */
static ap_status fold_DROPOUT(fctx *c) {
  ap_status s = fold_copy(c);
  if (!s && c->n_out > 1 && c->out[1].data)
    memset(c->out[1].data, 1, (size_t)c->out[1].numel);
  return s;
}

/* Operators that are not folded: layers, windows, normalizations,
 * reductions, and Clip, Gelu and the other activations, whose outputs are
 * data rather than shapes. */
#define fold_CONV NULL
#define fold_CONV_TRANSPOSE NULL
#define fold_GEMM NULL
#define fold_MATMUL NULL
#define fold_GELU NULL
#define fold_CLIP NULL
#define fold_LEAKY_RELU NULL
#define fold_PRELU NULL
#define fold_ELU NULL
#define fold_SELU NULL
#define fold_CELU NULL
#define fold_HARD_SIGMOID NULL
#define fold_HARD_SWISH NULL
#define fold_SOFTPLUS NULL
#define fold_SOFTSIGN NULL
#define fold_THRESHOLDED_RELU NULL
#define fold_MISH NULL
#define fold_MAX_POOL NULL
#define fold_AVERAGE_POOL NULL
#define fold_GLOBAL_AVERAGE_POOL NULL
#define fold_GLOBAL_MAX_POOL NULL
#define fold_LRN NULL
#define fold_BATCH_NORM NULL
#define fold_LAYER_NORM NULL
#define fold_SOFTMAX NULL
#define fold_LOG_SOFTMAX NULL
#define fold_INSTANCE_NORM NULL
#define fold_GROUP_NORM NULL
#define fold_LP_NORM NULL
#define fold_MVN NULL
#define fold_REDUCE_MEAN NULL
#define fold_REDUCE_SUM NULL
#define fold_REDUCE_MAX NULL
#define fold_REDUCE_MIN NULL
#define fold_REDUCE_PROD NULL
#define fold_REDUCE_L1 NULL
#define fold_REDUCE_L2 NULL
#define fold_REDUCE_LOG_SUM_EXP NULL
#define fold_REDUCE_SUM_SQUARE NULL
#define fold_ARG_MAX NULL
#define fold_ARG_MIN NULL
#define fold_TOP_K NULL
#define fold_ONE_HOT NULL
#define fold_RESIZE NULL
#define fold_UPSAMPLE NULL

typedef ap_status (*fold_fn)(fctx *);

static const fold_fn fold_table[] = {
#define OP(id, ...) [AP_OP_##id] = fold_##id,
#include "ir/ops.def"
#undef OP
};
static_assert(sizeof fold_table / sizeof *fold_table == AP_OP_COUNT,
              "one fold entry per operator in ops.def");

/* ---- the pass ----------------------------------------------------------- */

/* Dropout runs in inference unless training_mode (opset 12+) is a constant
 * true; a non-constant training_mode leaves it undecided (-1). */
static int dropout_inference(ap_graph *g, const ap_node *n) {
  const ap_value *mode = ap_node_in(g, n, 2);
  if (!mode)
    return 1;
  if (!mode->data)
    return -1;
  ap_tensor t = ap_value_tensor(mode);
  return t.numel == 1 && ap_tensor_get_f64(&t, 0) == 0;
}

/* Inputs whose values the operator reads. Shape and Size read only the
 * shape; Dropout's ratio does not matter in inference. */
static bool reads_data(const ap_node *n, int i) {
  if (n->op == AP_OP_SHAPE || n->op == AP_OP_SIZE)
    return false;
  if (n->op == AP_OP_DROPOUT)
    return i == 0;
  return true;
}

/* Shape needs only the dims it returns (opset 15 start/end), Size all. */
static bool shape_known_for(const ap_node *n, const ap_value *v) {
  if (n->op != AP_OP_SHAPE || v->rank < 0)
    return ap_value_shape_known(v);
  int start, end;
  ap_shape_range(n, v->rank, &start, &end);
  for (int i = start; i < end; i++)
    if (v->dims[i] < 0)
      return false;
  return true;
}

static bool value_used(const ap_graph *g, int v, int from_node) {
  if (g->values[v].is_graph_output)
    return true;
  for (int i = from_node; i < g->n_nodes; i++) {
    const ap_node *n = &g->nodes[i];
    for (int k = 0; !n->dead && k < n->n_in; k++)
      if (n->in[k] == v)
        return true;
  }
  return false;
}

/* Evaluates node i into fresh output tensors and makes them constants. *done
 * says whether it did. */
static ap_status fold_node(ap_graph *g, int i, bool *done, ap_diag *d) {
  ap_node *n = &g->nodes[i];
  *done = false;
  if (n->op >= AP_OP_COUNT || !fold_table[n->op] || n->n_in > FOLD_MAX_IN ||
      n->n_out > FOLD_MAX_IN)
    return AP_OK;
  if (n->op == AP_OP_DROPOUT && dropout_inference(g, n) != 1)
    return AP_OK;
  fctx c = {.g = g, .n = n, .d = d, .n_in = n->n_in, .n_out = n->n_out};
  for (int k = 0; k < n->n_in; k++) {
    ap_value *v = ap_node_in(g, n, k);
    if (!v) {
      c.in[k].numel = -1;
      continue;
    }
    if (reads_data(n, k) ? !v->data : !shape_known_for(n, v))
      return AP_OK;
    /* A floating-point initializer is a trainable weight: a Reshape or
     * Transpose of it stays a node, so training updates the initializer
     * itself rather than a folded copy. Integer initializers are shapes. */
    if (reads_data(n, k) && v->kind == AP_VAL_WEIGHT && ap_dtype_is_float(v->dtype))
      return AP_OK;
    c.in[k] = ap_value_tensor(v);
    if (!reads_data(n, k))
      c.in[k].data = NULL;
  }
  for (int k = 0; k < n->n_out; k++) {
    ap_value *v = ap_node_out(g, n, k);
    if (!v)
      continue;
    if (!ap_value_shape_known(v) || !elem_size(v->dtype) || v->rank > AP_MAX_RANK)
      return AP_OK;
    c.out[k] = ap_value_tensor(v);
    if (c.out[k].numel < 0 || (n->op != AP_OP_CONSTANT && c.out[k].numel > FOLD_MAX_ELEMS))
      return AP_OK;
  }
  ap_status s = AP_OK;
  for (int k = 0; !s && k < n->n_out; k++)
    if (ap_node_out(g, n, k) &&
        !(c.out[k].data = ap_xrealloc(NULL, (size_t)(c.out[k].numel ? c.out[k].numel : 1) *
                                                 elem_size(c.out[k].dtype))))
      s = nomem(&c);
  if (!s)
    s = fold_table[n->op](&c);
  for (int k = 0; !s && !c.skip && k < n->n_out; k++)
    if (c.out[k].data && !ap_value_set_constant(g, n->out[k], &c.out[k]))
      s = nomem(&c);
  for (int k = 0; k < n->n_out; k++)
    ap_xfree(c.out[k].data);
  if (!s && !c.skip) {
    n->dead = true;
    *done = true;
  }
  return s;
}

/* An inference Dropout whose input is not constant: consumers read its
 * input directly. Its mask, if anyone reads it, becomes a constant of ones
 * when small enough; a Dropout whose output is a graph output stays, as an
 * Identity, so the output keeps its name. */
static ap_status bypass_dropout(ap_graph *g, int i, ap_diag *d) {
  ap_node *n = &g->nodes[i];
  if (n->op != AP_OP_DROPOUT || n->dead || dropout_inference(g, n) != 1 || n->in[0] < 0)
    return AP_OK;
  int x = n->in[0], y = n->out[0], mask = n->n_out > 1 ? n->out[1] : -1;
  if (mask >= 0 && value_used(g, mask, i + 1)) {
    ap_value *m = &g->values[mask];
    ap_tensor t = ap_value_tensor(m);
    if (!ap_value_shape_known(m) || t.numel > FOLD_MAX_ELEMS)
      return AP_OK;
    t.dtype = AP_DT_BOOL;
    if (!(t.data = ap_xrealloc(NULL, (size_t)(t.numel ? t.numel : 1))))
      return ap_error(d, AP_ERR_NOMEM, g->path, n->name, n->op_type, "out of memory");
    memset(t.data, 1, (size_t)t.numel);
    bool ok = ap_value_set_constant(g, mask, &t);
    ap_xfree(t.data);
    if (!ok)
      return ap_error(d, AP_ERR_NOMEM, g->path, n->name, n->op_type, "out of memory");
  }
  if (y >= 0 && g->values[y].is_graph_output) {
    n->op = AP_OP_IDENTITY;
    n->op_type = "Identity";
    n->n_in = 1;
    n->n_out = 1;
    n->n_attr = 0;
    return AP_OK;
  }
  for (int j = i + 1; j < g->n_nodes; j++)
    for (int k = 0; k < g->nodes[j].n_in; k++)
      if (y >= 0 && g->nodes[j].in[k] == y)
        g->nodes[j].in[k] = x;
  n->dead = true;
  return AP_OK;
}

ap_status ap_fold_constants(ap_graph *g, ap_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    bool done;
    ap_status s = ap_infer_node(g, i, d);
    if (!s)
      s = fold_node(g, i, &done, d);
    if (!s && !done)
      s = bypass_dropout(g, i, d);
    if (s)
      return s;
  }
  if (!ap_graph_compact(g))
    return ap_error(d, AP_ERR_NOMEM, g->path, NULL, NULL, "out of memory");
  return AP_OK;
}
