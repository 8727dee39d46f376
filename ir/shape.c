/* Shape inference: the dtype, rank and dims of every node output, with the
 * ONNX semantics of opsets 7 to 25. One function per operator family, reached
 * through a table built from ir/ops.def. A dim that cannot be known yet is -1;
 * a symbolic dim (dim_param) keeps its name wherever it is copied through.
 * Every check on user input is a one-line diagnostic, never an abort: this
 * code runs on fuzzed models. */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ir/ir.h"

/* Attribute values that feed size arithmetic (kernel, stride, dilation, pad)
 * are bounded so that products of them cannot overflow int64. */
enum { WINDOW_ATTR_MAX = 1 << 30 };

typedef struct shp {
  int rank; /* -1 when unknown */
  int64_t dims[AP_MAX_RANK];
  const char *sym[AP_MAX_RANK];
} shp;

typedef struct ctx {
  ap_graph *g;
  ap_node *n;
  ap_diag *d;
} ctx;

__attribute__((format(printf, 2, 3))) static ap_status bad(const ctx *c, const char *fmt,
                                                             ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ap_error(c->d, AP_ERR_INVALID, c->g->path, c->n->name, c->n->op_type, "%s", msg);
}

static ap_value *in(const ctx *c, int i) { return ap_node_in(c->g, c->n, i); }

/* A required input; verify checks arities, but a required slot can still be
 * the empty name "" in a malformed model. */
static ap_status need(const ctx *c, int i, ap_value **v) {
  *v = in(c, i);
  if (!*v)
    return bad(c, "input %d is required", i);
  return AP_OK;
}

static void shp_unknown(shp *s) {
  s->rank = -1;
  for (int i = 0; i < AP_MAX_RANK; i++) {
    s->dims[i] = -1;
    s->sym[i] = NULL;
  }
}

static void shp_of(const ap_value *v, shp *s) {
  shp_unknown(s);
  s->rank = v->rank;
  for (int i = 0; i < v->rank && i < AP_MAX_RANK; i++) {
    s->dims[i] = v->dims[i];
    s->sym[i] = v->dims[i] < 0 ? v->sym[i] : NULL;
  }
}

static void shp_dim(shp *s, int i, int64_t dim, const char *sym) {
  s->dims[i] = dim;
  s->sym[i] = dim < 0 ? sym : NULL;
}

/* Writes output k. What inference cannot know (an unknown rank or dim) is
 * taken from the shape the model declared for the value, if any. */
static ap_status set_out(const ctx *c, int k, ap_dtype dt, const shp *s) {
  ap_value *v = ap_node_out(c->g, c->n, k);
  if (!v)
    return AP_OK;
  if (s->rank > AP_MAX_RANK)
    return bad(c, "output %d would have rank %d; at most %d is supported", k, s->rank,
               AP_MAX_RANK);
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    int64_t dim = s->dims[i];
    if (dim < 0)
      continue;
    if (dim && n > INT64_MAX / dim)
      return bad(c, "output %d has too many elements (dims overflow int64)", k);
    n *= dim;
  }
  if (dt != AP_DT_UNDEFINED)
    v->dtype = dt;
  if (s->rank < 0)
    return AP_OK;
  bool declared = v->rank == s->rank;
  for (int i = 0; i < AP_MAX_RANK; i++) {
    int64_t dim = i < s->rank ? s->dims[i] : -1;
    const char *sym = i < s->rank ? s->sym[i] : NULL;
    if (dim < 0 && !sym && declared) {
      dim = v->dims[i];
      sym = v->sym[i];
    }
    v->dims[i] = dim;
    v->sym[i] = dim < 0 ? sym : NULL;
  }
  v->rank = s->rank;
  return AP_OK;
}

/* Output k with the shape and dtype of value v. */
static ap_status copy_out(const ctx *c, int k, const ap_value *v, ap_dtype dt) {
  shp s;
  shp_of(v, &s);
  return set_out(c, k, dt == AP_DT_UNDEFINED ? v->dtype : dt, &s);
}

/* Normalizes an axis in [-rank, rank) to [0, rank). */
static ap_status norm_axis(const ctx *c, const char *what, int64_t axis, int rank,
                           int *out) {
  *out = 0;
  if (axis < -rank || axis >= rank)
    return bad(c, "%s %lld is out of range for rank %d", what, (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return AP_OK;
}

static ap_status same_dtype(const ctx *c, const ap_value *a, const ap_value *b) {
  if (a->dtype != AP_DT_UNDEFINED && b->dtype != AP_DT_UNDEFINED && a->dtype != b->dtype)
    return bad(c, "inputs '%s' (%s) and '%s' (%s) must have the same element type",
               a->name, ap_dtype_name(a->dtype), b->name, ap_dtype_name(b->dtype));
  return AP_OK;
}

/* The contents of a constant integer vector (or scalar) input; false when
 * the value is not a constant. More than max elements is an error. */
static ap_status const_ints(const ctx *c, const ap_value *v, int64_t *out, int max,
                            int *count, bool *known) {
  *known = false;
  *count = 0;
  if (!v->data)
    return AP_OK;
  if (v->dtype != AP_DT_INT64 && v->dtype != AP_DT_INT32)
    return bad(c, "input '%s' must be int64, not %s", v->name, ap_dtype_name(v->dtype));
  if (v->rank > 1)
    return bad(c, "input '%s' must be a 1-D tensor, not rank %d", v->name, v->rank);
  ap_tensor t = ap_value_tensor(v);
  if (t.numel < 0 || t.numel > max)
    return bad(c, "input '%s' has %lld elements; at most %d are allowed here", v->name,
               (long long)t.numel, max);
  for (int64_t i = 0; i < t.numel; i++)
    out[i] = ap_tensor_get_i64(&t, i);
  *count = (int)t.numel;
  *known = true;
  return AP_OK;
}

/* ---- broadcasting ------------------------------------------------------- */

/* Multidirectional (numpy) broadcasting of a into acc. An unknown dim against
 * a known dim > 1 takes the known one: a model that runs must have them
 * equal or the unknown one 1. */
static ap_status broadcast_into(const ctx *c, shp *acc, const ap_value *v) {
  if (acc->rank < 0 || v->rank < 0) {
    acc->rank = -1;
    return AP_OK;
  }
  int r = acc->rank > v->rank ? acc->rank : v->rank;
  if (r > AP_MAX_RANK)
    return bad(c, "broadcast rank %d exceeds %d", r, AP_MAX_RANK);
  shp out;
  shp_unknown(&out);
  out.rank = r;
  for (int i = 0; i < r; i++) {
    int ia = i - (r - acc->rank), ib = i - (r - v->rank);
    int64_t a = ia >= 0 ? acc->dims[ia] : 1, b = ib >= 0 ? v->dims[ib] : 1;
    const char *sa = ia >= 0 ? acc->sym[ia] : NULL, *sb = ib >= 0 ? v->sym[ib] : NULL;
    if (a >= 0 && b >= 0) {
      if (a != b && a != 1 && b != 1)
        return bad(c, "cannot broadcast dim %d: %lld against %lld (input '%s')", i,
                   (long long)a, (long long)b, v->name);
      shp_dim(&out, i, a == 1 ? b : a, NULL);
    } else if (a < 0 && b < 0) {
      shp_dim(&out, i, -1, sa && sb && strcmp(sa, sb) == 0 ? sa : NULL);
    } else if (a < 0) {
      shp_dim(&out, i, b == 1 ? -1 : b, b == 1 ? sa : NULL);
    } else {
      shp_dim(&out, i, a == 1 ? -1 : a, a == 1 ? sb : NULL);
    }
  }
  *acc = out;
  return AP_OK;
}

/* ---- element-wise ------------------------------------------------------- */

static ap_status infer_unary(const ctx *c) {
  ap_value *x;
  ap_status s = need(c, 0, &x);
  return s ? s : copy_out(c, 0, x, AP_DT_UNDEFINED);
}
#define infer_RELU infer_unary
#define infer_SIGMOID infer_unary
#define infer_TANH infer_unary
#define infer_GELU infer_unary
#define infer_EXP infer_unary
#define infer_LOG infer_unary
#define infer_SQRT infer_unary
#define infer_NEG infer_unary
#define infer_ABS infer_unary
#define infer_RECIPROCAL infer_unary
#define infer_ERF infer_unary
#define infer_IDENTITY infer_unary
#define infer_CLIP infer_unary

static bool dtype_supported(int64_t to) {
  return to > AP_DT_UNDEFINED && to <= AP_DT_BFLOAT16;
}

static ap_status infer_CAST(const ctx *c) {
  ap_value *x;
  ap_status s = need(c, 0, &x);
  if (s)
    return s;
  const ap_attr *to = ap_attr_find(c->n, "to");
  if (!to || to->type != AP_ATTR_INT)
    return bad(c, "attribute 'to' (an int) is required");
  if (to->i > AP_DT_BFLOAT16 && to->i <= AP_DT_LAST_KNOWN)
    return ap_error(c->d, AP_ERR_UNSUPPORTED, c->g->path, c->n->name, c->n->op_type,
                    "casting to %s is not supported", ap_dtype_name((ap_dtype)to->i));
  if (!dtype_supported(to->i))
    return bad(c, "attribute 'to' = %lld is not an element type", (long long)to->i);
  return copy_out(c, 0, x, (ap_dtype)to->i);
}

static ap_status infer_CAST_LIKE(const ctx *c) {
  ap_value *x, *like;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &like)))
    return s;
  return copy_out(c, 0, x, like->dtype);
}

static ap_status infer_DROPOUT(const ctx *c) {
  ap_value *x;
  ap_status s = need(c, 0, &x);
  if (s || (s = copy_out(c, 0, x, AP_DT_UNDEFINED)))
    return s;
  return copy_out(c, 1, x, AP_DT_BOOL);
}

/* Binary and variadic operators with multidirectional broadcasting. */
static ap_status infer_broadcast(const ctx *c, int first, ap_dtype out_dt, bool same_types) {
  ap_value *v0;
  ap_status s = need(c, first, &v0);
  if (s)
    return s;
  shp acc;
  shp_of(v0, &acc);
  for (int i = 0; i < c->n->n_in; i++) {
    ap_value *v;
    if (i == first)
      continue;
    if ((s = need(c, i, &v)) || (s = broadcast_into(c, &acc, v)))
      return s;
    if (same_types && i > first && (s = same_dtype(c, v0, v)))
      return s;
  }
  return set_out(c, 0, out_dt == AP_DT_UNDEFINED ? v0->dtype : out_dt, &acc);
}

static ap_status infer_arith(const ctx *c) {
  return infer_broadcast(c, 0, AP_DT_UNDEFINED, true);
}
#define infer_ADD infer_arith
#define infer_SUB infer_arith
#define infer_MUL infer_arith
#define infer_DIV infer_arith
#define infer_SUM infer_arith
#define infer_MAX infer_arith
#define infer_MIN infer_arith

/* Pow's exponent may have another type (opset 12+); the result is the base's. */
static ap_status infer_POW(const ctx *c) {
  return infer_broadcast(c, 0, AP_DT_UNDEFINED, false);
}

static ap_status infer_compare(const ctx *c) {
  return infer_broadcast(c, 0, AP_DT_BOOL, true);
}
#define infer_LESS infer_compare
#define infer_GREATER infer_compare
#define infer_EQUAL infer_compare
#define infer_GREATER_OR_EQUAL infer_compare
#define infer_LESS_OR_EQUAL infer_compare

/* The activations and math functions of one float operand (their kernels
 * say which element types they take), and Sign, which takes any number. */
#define infer_LEAKY_RELU infer_unary
#define infer_ELU infer_unary
#define infer_SELU infer_unary
#define infer_CELU infer_unary
#define infer_HARD_SIGMOID infer_unary
#define infer_HARD_SWISH infer_unary
#define infer_SOFTPLUS infer_unary
#define infer_SOFTSIGN infer_unary
#define infer_THRESHOLDED_RELU infer_unary
#define infer_MISH infer_unary
#define infer_SIN infer_unary
#define infer_COS infer_unary
#define infer_FLOOR infer_unary
#define infer_CEIL infer_unary
#define infer_ROUND infer_unary
#define infer_SIGN infer_unary

static ap_status need_bool(const ctx *c, const ap_value *v) {
  if (v->dtype != AP_DT_UNDEFINED && v->dtype != AP_DT_BOOL)
    return bad(c, "input '%s' must be bool, not %s", v->name, ap_dtype_name(v->dtype));
  return AP_OK;
}

static ap_status need_float_in(const ctx *c, const ap_value *v) {
  if (v->dtype != AP_DT_UNDEFINED && !ap_dtype_is_float(v->dtype))
    return bad(c, "input '%s' must be a floating-point tensor, not %s", v->name,
               ap_dtype_name(v->dtype));
  return AP_OK;
}

/* IsNaN, IsInf: a bool of the input's shape. */
static ap_status infer_float_test(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need_float_in(c, x)))
    return s;
  return copy_out(c, 0, x, AP_DT_BOOL);
}
#define infer_IS_NAN infer_float_test
#define infer_IS_INF infer_float_test

static ap_status infer_NOT(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need_bool(c, x)))
    return s;
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}

/* And, Or, Xor: bool operands, broadcast. */
static ap_status infer_logical(const ctx *c) {
  ap_value *a, *b;
  ap_status s;
  if ((s = need(c, 0, &a)) || (s = need(c, 1, &b)) || (s = need_bool(c, a)) ||
      (s = need_bool(c, b)))
    return s;
  return infer_compare(c);
}
#define infer_AND infer_logical
#define infer_OR infer_logical
#define infer_XOR infer_logical

/* Mod: floats only as C's fmod (the attribute fmod = 1), which ONNX
 * requires; integers either way. */
static ap_status infer_MOD(const ctx *c) {
  ap_value *a;
  ap_status s = need(c, 0, &a);
  if (s)
    return s;
  const ap_attr *f = ap_attr_find(c->n, "fmod");
  if (f && (f->type != AP_ATTR_INT || (f->i != 0 && f->i != 1)))
    return bad(c, "attribute 'fmod' must be the int 0 or 1");
  if (ap_dtype_is_float(a->dtype) && !(f && f->i == 1))
    return bad(c, "a floating-point Mod needs fmod = 1 (input '%s' is %s)", a->name,
               ap_dtype_name(a->dtype));
  return infer_arith(c);
}

/* PRelu: the slope broadcasts to X (unidirectionally, from opset 7); the
 * output is X's. Before opset 7 a slope of several elements was per channel
 * without a defined layout: refused as unsupported (issue 13). */
static ap_status infer_PRELU(const ctx *c) {
  ap_value *x, *slope;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &slope)) || (s = same_dtype(c, x, slope)))
    return s;
  if (c->g->opset < 7 && ap_numel(slope->rank, slope->dims) != 1)
    return ap_error(c->d, AP_ERR_UNSUPPORTED, c->g->path, c->n->name, c->n->op_type,
                    "a slope of several elements before opset 7 (per channel, not broadcast) "
                    "is not supported");
  shp acc;
  shp_of(x, &acc);
  if ((s = broadcast_into(c, &acc, slope)))
    return s;
  if (acc.rank >= 0 && x->rank >= 0) {
    bool same = acc.rank == x->rank;
    for (int i = 0; same && i < x->rank; i++)
      same = x->dims[i] < 0 || acc.dims[i] == x->dims[i];
    if (!same)
      return bad(c, "slope '%s' does not broadcast to the shape of '%s'", slope->name, x->name);
  }
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}

/* Where(cond, X, Y): the result has X's type; the condition is bool. */
static ap_status infer_WHERE(const ctx *c) {
  ap_value *cond, *x, *y;
  ap_status s;
  if ((s = need(c, 0, &cond)) || (s = need(c, 1, &x)) || (s = need(c, 2, &y)) ||
      (s = same_dtype(c, x, y)))
    return s;
  if (cond->dtype != AP_DT_UNDEFINED && cond->dtype != AP_DT_BOOL)
    return bad(c, "the condition '%s' must be bool, not %s", cond->name,
               ap_dtype_name(cond->dtype));
  return infer_broadcast(c, 1, AP_DT_UNDEFINED, false);
}

/* ---- windows: convolution and pooling ----------------------------------- */

typedef struct window {
  int nsp;                       /* spatial dims */
  int64_t kernel[AP_MAX_RANK];
  int64_t stride[AP_MAX_RANK];
  int64_t dilation[AP_MAX_RANK];
  int64_t pads[2 * AP_MAX_RANK]; /* begins, then ends */
  const char *auto_pad;
  bool ceil_mode;
} window;

/* An INTS attribute of exactly n values each in [lo, WINDOW_ATTR_MAX], or
 * dflt everywhere when absent. */
static ap_status window_ints(const ctx *c, const char *name, int n, int64_t lo, int64_t dflt,
                             int64_t *out) {
  int count;
  const int64_t *v = ap_attr_ints(c->n, name, &count);
  if (!v) {
    if (ap_attr_find(c->n, name))
      return bad(c, "attribute '%s' must be a list of ints", name);
    for (int i = 0; i < n; i++)
      out[i] = dflt;
    return AP_OK;
  }
  if (count != n)
    return bad(c, "attribute '%s' has %d values; %d expected", name, count, n);
  for (int i = 0; i < n; i++) {
    if (v[i] < lo || v[i] > WINDOW_ATTR_MAX)
      return bad(c, "attribute '%s' value %lld is out of range [%lld, %d]", name,
                 (long long)v[i], (long long)lo, WINDOW_ATTR_MAX);
    out[i] = v[i];
  }
  return AP_OK;
}

/* Reads kernel_shape (or takes kernel from the weight's dims when absent and
 * kernel_from is not NULL), strides, dilations, pads, auto_pad, ceil_mode. */
static ap_status window_attrs(const ctx *c, int nsp, const ap_value *kernel_from,
                              bool has_dilations, window *w) {
  ap_status s;
  memset(w, 0, sizeof *w);
  w->nsp = nsp;
  if (ap_attr_find(c->n, "kernel_shape") || !kernel_from) {
    if (!ap_attr_find(c->n, "kernel_shape"))
      return bad(c, "attribute 'kernel_shape' is required");
    if ((s = window_ints(c, "kernel_shape", nsp, 1, 1, w->kernel)))
      return s;
    for (int i = 0; kernel_from && kernel_from->rank == nsp + 2 && i < nsp; i++) {
      int64_t k = kernel_from->dims[i + 2];
      if (k >= 0 && k != w->kernel[i])
        return bad(c, "kernel_shape[%d] = %lld but the weight '%s' has %lld", i,
                   (long long)w->kernel[i], kernel_from->name, (long long)k);
    }
  } else {
    for (int i = 0; i < nsp; i++) {
      int64_t k = kernel_from->dims[i + 2];
      if (k == 0 || k > WINDOW_ATTR_MAX)
        return bad(c, "kernel dim %lld of weight '%s' is out of range [1, %d]", (long long)k,
                   kernel_from->name, WINDOW_ATTR_MAX);
      w->kernel[i] = k; /* -1 when the weight's dim is unknown */
    }
  }
  if ((s = window_ints(c, "strides", nsp, 1, 1, w->stride)) ||
      (s = window_ints(c, "pads", 2 * nsp, 0, 0, w->pads)))
    return s;
  if (has_dilations) {
    if ((s = window_ints(c, "dilations", nsp, 1, 1, w->dilation)))
      return s;
  } else {
    for (int i = 0; i < nsp; i++)
      w->dilation[i] = 1;
  }
  w->auto_pad = ap_attr_string(c->n, "auto_pad", "NOTSET");
  if (strcmp(w->auto_pad, "NOTSET") != 0 && strcmp(w->auto_pad, "VALID") != 0 &&
      strcmp(w->auto_pad, "SAME_UPPER") != 0 && strcmp(w->auto_pad, "SAME_LOWER") != 0)
    return bad(c, "auto_pad '%s' is not NOTSET, VALID, SAME_UPPER or SAME_LOWER",
               w->auto_pad);
  int64_t ceil_mode = ap_attr_int(c->n, "ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1)
    return bad(c, "ceil_mode must be 0 or 1, not %lld", (long long)ceil_mode);
  w->ceil_mode = ceil_mode == 1;
  return AP_OK;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

/* Output size of spatial dim i for input size in (-1 when unknown). */
static ap_status window_out(const ctx *c, const window *w, int i, int64_t in, int64_t *out) {
  *out = -1;
  if (in < 0 || w->kernel[i] < 0)
    return AP_OK;
  if (in > INT64_MAX / 4)
    return bad(c, "spatial dim %d of size %lld is too large", i, (long long)in);
  int64_t effk = (w->kernel[i] - 1) * w->dilation[i] + 1, s = w->stride[i];
  if (strncmp(w->auto_pad, "SAME", 4) == 0) {
    *out = ceil_div(in, s);
    return AP_OK;
  }
  int64_t pb = 0, span = in;
  if (strcmp(w->auto_pad, "NOTSET") == 0) {
    pb = w->pads[i];
    span = in + w->pads[i] + w->pads[i + w->nsp];
  }
  if (span < effk)
    return bad(c, "spatial dim %d: the window (%lld with dilation) is larger than the "
                  "padded input (%lld)",
               i, (long long)effk, (long long)span);
  int64_t o = (w->ceil_mode ? ceil_div(span - effk, s) : (span - effk) / s) + 1;
  /* ceil_mode must not start a window entirely in the end padding. */
  if (w->ceil_mode && (o - 1) * s >= in + pb)
    o--;
  *out = o;
  return AP_OK;
}

/* X of rank >= 3 (N, C, spatial...), or an unknown rank. */
static ap_status spatial_input(const ctx *c, const ap_value *x) {
  if (x->rank >= 0 && x->rank < 3)
    return bad(c, "input '%s' must have rank >= 3 (N, C, spatial...), not %d", x->name,
               x->rank);
  return AP_OK;
}

static ap_status infer_CONV(const ctx *c) {
  ap_value *x, *w, *b = in(c, 2);
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &w)) || (s = spatial_input(c, x)) ||
      (s = spatial_input(c, w)) || (s = same_dtype(c, x, w)))
    return s;
  if (x->rank < 0 && w->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  int rank = x->rank >= 0 ? x->rank : w->rank;
  if (x->rank >= 0 && w->rank >= 0 && x->rank != w->rank)
    return bad(c, "input '%s' has rank %d but weight '%s' has rank %d", x->name, x->rank,
               w->name, w->rank);
  int64_t group = ap_attr_int(c->n, "group", 1);
  if (group < 1 || group > WINDOW_ATTR_MAX)
    return bad(c, "group must be positive, not %lld", (long long)group);
  int64_t m = w->rank >= 0 ? w->dims[0] : -1;
  if (x->rank >= 0 && w->rank >= 0 && x->dims[1] >= 0 && w->dims[1] >= 0 &&
      x->dims[1] != w->dims[1] * group)
    return bad(c, "input '%s' has %lld channels but weight '%s' expects %lld (x group %lld)",
               x->name, (long long)x->dims[1], w->name, (long long)w->dims[1],
               (long long)group);
  if (m >= 0 && m % group)
    return bad(c, "%lld output channels do not divide into %lld groups", (long long)m,
               (long long)group);
  if (b && b->rank >= 0 && (b->rank != 1 || (m >= 0 && b->dims[0] >= 0 && b->dims[0] != m)))
    return bad(c, "bias '%s' must be 1-D with %lld elements", b->name, (long long)m);
  shp o;
  shp_unknown(&o);
  o.rank = rank;
  if (w->rank < 0 && !ap_attr_find(c->n, "kernel_shape")) {
    /* Neither the weight's shape nor kernel_shape: spatial dims unknown. */
    if (x->rank >= 0)
      shp_dim(&o, 0, x->dims[0], x->sym[0]);
    return set_out(c, 0, x->dtype, &o);
  }
  window win;
  if ((s = window_attrs(c, rank - 2, w->rank >= 0 ? w : NULL, true, &win)))
    return s;
  if (x->rank >= 0)
    shp_dim(&o, 0, x->dims[0], x->sym[0]);
  shp_dim(&o, 1, m, w->rank >= 0 ? w->sym[0] : NULL);
  for (int i = 0; i < rank - 2; i++)
    if ((s = window_out(c, &win, i, x->rank >= 0 ? x->dims[i + 2] : -1, &o.dims[i + 2])))
      return s;
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_CONV_TRANSPOSE(const ctx *c) {
  ap_value *x, *w, *b = in(c, 2);
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &w)) || (s = spatial_input(c, x)) ||
      (s = spatial_input(c, w)) || (s = same_dtype(c, x, w)))
    return s;
  if (x->rank < 0 || w->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  if (x->rank != w->rank)
    return bad(c, "input '%s' has rank %d but weight '%s' has rank %d", x->name, x->rank,
               w->name, w->rank);
  int rank = x->rank, nsp = rank - 2;
  int64_t group = ap_attr_int(c->n, "group", 1);
  if (group < 1 || group > WINDOW_ATTR_MAX)
    return bad(c, "group must be positive, not %lld", (long long)group);
  if (x->dims[1] >= 0 && w->dims[0] >= 0 && x->dims[1] != w->dims[0])
    return bad(c, "input '%s' has %lld channels but weight '%s' has %lld", x->name,
               (long long)x->dims[1], w->name, (long long)w->dims[0]);
  int64_t m = w->dims[1] >= 0 ? w->dims[1] * group : -1;
  if (b && b->rank >= 0 && (b->rank != 1 || (m >= 0 && b->dims[0] >= 0 && b->dims[0] != m)))
    return bad(c, "bias '%s' must be 1-D with %lld elements", b->name, (long long)m);
  window win;
  int64_t outpad[AP_MAX_RANK], outshape[AP_MAX_RANK];
  if ((s = window_attrs(c, nsp, w, true, &win)) ||
      (s = window_ints(c, "output_padding", nsp, 0, 0, outpad)))
    return s;
  int count;
  const int64_t *os = ap_attr_ints(c->n, "output_shape", &count);
  if (os) {
    /* Exporters write either the spatial dims or the whole shape. */
    if (count != nsp && count != rank)
      return bad(c, "attribute 'output_shape' has %d values; %d expected", count, nsp);
    for (int i = 0; i < nsp; i++) {
      outshape[i] = os[count - nsp + i];
      if (outshape[i] < 0)
        return bad(c, "output_shape[%d] = %lld is negative", i, (long long)outshape[i]);
    }
  }
  shp o;
  shp_unknown(&o);
  o.rank = rank;
  shp_dim(&o, 0, x->dims[0], x->sym[0]);
  shp_dim(&o, 1, m, NULL);
  for (int i = 0; i < nsp; i++) {
    int64_t in_dim = x->dims[i + 2], k = win.kernel[i], out;
    if (os) {
      out = outshape[i];
    } else if (in_dim < 0 || k < 0) {
      out = -1;
    } else if (in_dim > INT64_MAX / 4 / win.stride[i]) {
      return bad(c, "spatial dim %d of size %lld is too large", i, (long long)in_dim);
    } else if (strncmp(win.auto_pad, "SAME", 4) == 0) {
      out = in_dim * win.stride[i];
    } else {
      int64_t pads = strcmp(win.auto_pad, "VALID") == 0 ? 0 : win.pads[i] + win.pads[i + nsp];
      out = win.stride[i] * (in_dim - 1) + outpad[i] + (k - 1) * win.dilation[i] + 1 - pads;
      if (in_dim > 0 && out < 1)
        return bad(c, "spatial dim %d: the output size %lld is not positive", i,
                   (long long)out);
    }
    shp_dim(&o, i + 2, out, NULL);
  }
  return set_out(c, 0, x->dtype, &o);
}

static ap_status pool(const ctx *c, bool has_dilations) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = spatial_input(c, x)))
    return s;
  shp o;
  shp_unknown(&o);
  if (x->rank >= 0) {
    window win;
    if ((s = window_attrs(c, x->rank - 2, NULL, has_dilations, &win)))
      return s;
    shp_of(x, &o);
    for (int i = 0; i < x->rank - 2; i++) {
      if ((s = window_out(c, &win, i, x->dims[i + 2], &o.dims[i + 2])))
        return s;
      o.sym[i + 2] = NULL;
    }
  }
  if ((s = set_out(c, 0, x->dtype, &o)))
    return s;
  return set_out(c, 1, AP_DT_INT64, &o);
}

static ap_status infer_MAX_POOL(const ctx *c) { return pool(c, true); }

/* AveragePool has dilations from opset 19. */
static ap_status infer_AVERAGE_POOL(const ctx *c) { return pool(c, c->g->opset >= 19); }

static ap_status global_pool(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = spatial_input(c, x)))
    return s;
  shp o;
  shp_of(x, &o);
  for (int i = 2; i < o.rank; i++)
    shp_dim(&o, i, 1, NULL);
  return set_out(c, 0, x->dtype, &o);
}
#define infer_GLOBAL_AVERAGE_POOL global_pool
#define infer_GLOBAL_MAX_POOL global_pool

static ap_status infer_LRN(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = spatial_input(c, x)))
    return s;
  const ap_attr *size = ap_attr_find(c->n, "size");
  if (!size || size->type != AP_ATTR_INT || size->i < 1)
    return bad(c, "attribute 'size' must be a positive int");
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}

/* ---- matrix products ---------------------------------------------------- */

static ap_status matrix_dims(const ctx *c, const ap_value *v, bool trans, int64_t *rows,
                             int64_t *cols) {
  *rows = *cols = -1;
  if (v->rank < 0)
    return AP_OK;
  if (v->rank != 2)
    return bad(c, "input '%s' must be a matrix (rank 2), not rank %d", v->name, v->rank);
  *rows = v->dims[trans ? 1 : 0];
  *cols = v->dims[trans ? 0 : 1];
  return AP_OK;
}

static ap_status infer_GEMM(const ctx *c) {
  ap_value *a, *b, *bias = in(c, 2);
  ap_status s;
  int64_t m, ka, kb, n;
  if ((s = need(c, 0, &a)) || (s = need(c, 1, &b)) || (s = same_dtype(c, a, b)) ||
      (s = matrix_dims(c, a, ap_attr_int(c->n, "transA", 0) != 0, &m, &ka)) ||
      (s = matrix_dims(c, b, ap_attr_int(c->n, "transB", 0) != 0, &kb, &n)))
    return s;
  if (ka >= 0 && kb >= 0 && ka != kb)
    return bad(c, "inner dims differ: A gives %lld, B gives %lld", (long long)ka,
               (long long)kb);
  shp o;
  shp_unknown(&o);
  o.rank = 2;
  shp_dim(&o, 0, m, a->rank == 2 ? a->sym[ap_attr_int(c->n, "transA", 0) ? 1 : 0] : NULL);
  shp_dim(&o, 1, n, NULL);
  if (bias) {
    /* C broadcasts one way, to (M, N). */
    shp acc = o;
    if ((s = broadcast_into(c, &acc, bias)))
      return s;
    if (acc.rank >= 0 && (acc.rank != 2 || (m >= 0 && acc.dims[0] != m) ||
                          (n >= 0 && acc.dims[1] != n)))
      return bad(c, "bias '%s' does not broadcast to (%lld, %lld)", bias->name, (long long)m,
                 (long long)n);
  }
  return set_out(c, 0, a->dtype, &o);
}

static ap_status infer_MATMUL(const ctx *c) {
  ap_value *a, *b;
  ap_status s;
  if ((s = need(c, 0, &a)) || (s = need(c, 1, &b)) || (s = same_dtype(c, a, b)))
    return s;
  if (a->rank == 0 || b->rank == 0)
    return bad(c, "MatMul operands must have rank >= 1");
  if (a->rank < 0 || b->rank < 0)
    return set_out(c, 0, a->dtype, &(shp){.rank = -1});
  /* 1-D operands are promoted to matrices, and the added dim removed after. */
  shp pa, pb;
  shp_of(a, &pa);
  shp_of(b, &pb);
  if (a->rank == 1) {
    pa.rank = 2;
    shp_dim(&pa, 1, a->dims[0], a->sym[0]);
    shp_dim(&pa, 0, 1, NULL);
  }
  if (b->rank == 1)
    shp_dim(&pb, (pb.rank = 2) - 1, 1, NULL);
  int64_t ka = pa.dims[pa.rank - 1], kb = pb.dims[pb.rank - 2];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return bad(c, "inner dims differ: '%s' gives %lld, '%s' gives %lld", a->name,
               (long long)ka, b->name, (long long)kb);
  shp batch_a = pa, batch_b = pb;
  batch_a.rank -= 2;
  batch_b.rank -= 2;
  ap_value vb = {.name = b->name, .rank = batch_b.rank};
  memcpy(vb.dims, batch_b.dims, sizeof vb.dims);
  memcpy(vb.sym, batch_b.sym, sizeof vb.sym);
  if ((s = broadcast_into(c, &batch_a, &vb)))
    return s;
  shp o = batch_a;
  if (a->rank != 1)
    shp_dim(&o, o.rank++, pa.dims[pa.rank - 2], pa.sym[pa.rank - 2]);
  if (b->rank != 1)
    shp_dim(&o, o.rank++, pb.dims[pb.rank - 1], pb.sym[pb.rank - 1]);
  return set_out(c, 0, a->dtype, &o);
}

/* ---- normalizations ----------------------------------------------------- */

static ap_status infer_BATCH_NORM(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank >= 0 && x->rank < 2)
    return bad(c, "input '%s' must have rank >= 2 (N, C...), not %d", x->name, x->rank);
  int64_t ch = x->rank >= 2 ? x->dims[1] : -1;
  for (int i = 1; i < 5; i++) {
    ap_value *p;
    if ((s = need(c, i, &p)))
      return s;
    if (p->rank >= 0 && (p->rank != 1 || (ch >= 0 && p->dims[0] >= 0 && p->dims[0] != ch)))
      return bad(c, "input '%s' must be 1-D with %lld elements (the channels)", p->name,
                 (long long)ch);
  }
  if ((s = copy_out(c, 0, x, AP_DT_UNDEFINED)))
    return s;
  /* Running (or, before opset 14, saved) mean and variance: one per channel. */
  shp o;
  shp_unknown(&o);
  o.rank = 1;
  shp_dim(&o, 0, ch, x->rank >= 2 ? x->sym[1] : NULL);
  for (int k = 1; k < c->n->n_out; k++)
    if ((s = set_out(c, k, in(c, 3)->dtype, &o)))
      return s;
  return AP_OK;
}

static ap_status infer_LAYER_NORM(const ctx *c) {
  ap_value *x, *scale;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &scale)) || (s = copy_out(c, 0, x, 0)))
    return s;
  if (x->rank < 0)
    return AP_OK;
  int axis;
  if ((s = norm_axis(c, "axis", ap_attr_int(c->n, "axis", -1), x->rank, &axis)))
    return s;
  int64_t stash = ap_attr_int(c->n, "stash_type", AP_DT_FLOAT);
  if (!dtype_supported(stash) || !ap_dtype_is_float((ap_dtype)stash))
    return bad(c, "stash_type %lld is not a floating-point type", (long long)stash);
  /* Mean and InvStdDev keep the leading dims and reduce the rest to 1. */
  shp o;
  shp_of(x, &o);
  for (int i = axis; i < x->rank; i++)
    shp_dim(&o, i, 1, NULL);
  if ((s = set_out(c, 1, (ap_dtype)stash, &o)))
    return s;
  return set_out(c, 2, (ap_dtype)stash, &o);
}

static ap_status softmax(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank >= 0) {
    int axis;
    /* The default axis moved from 1 to -1 in opset 13. */
    int64_t dflt = c->g->opset >= 13 ? -1 : 1;
    int rank = x->rank ? x->rank : 1;
    if ((s = norm_axis(c, "axis", ap_attr_int(c->n, "axis", dflt), rank, &axis)))
      return s;
  }
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}
#define infer_SOFTMAX softmax
#define infer_LOG_SOFTMAX softmax

/* InstanceNormalization, GroupNormalization, LpNormalization and
 * MeanVarianceNormalization: the axes each statistic runs over. */
ap_status ap_norm_axes(ap_graph *g, ap_node *n, int rank, bool *over, ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  ap_status s;
  for (int i = 0; i < rank; i++)
    over[i] = false;
  switch (n->op) {
  case AP_OP_INSTANCE_NORM:
  case AP_OP_GROUP_NORM:
    if (rank < 3)
      return bad(c, "input must have rank 3 or more (N, C, D...), not %d", rank);
    for (int i = n->op == AP_OP_INSTANCE_NORM ? 2 : 1; i < rank; i++)
      over[i] = true;
    return AP_OK;
  case AP_OP_LP_NORM: {
    int64_t p = ap_attr_int(n, "p", 2);
    if (p != 1 && p != 2)
      return bad(c, "p = %lld; LpNormalization's p is 1 or 2", (long long)p);
    int a;
    if ((s = norm_axis(c, "axis", ap_attr_int(n, "axis", -1), rank, &a)))
      return s;
    over[a] = true;
    return AP_OK;
  }
  default: { /* MeanVarianceNormalization */
    static const int64_t dflt[] = {0, 2, 3};
    int count = 3;
    const int64_t *axes = ap_attr_ints(n, "axes", &count);
    if (!axes)
      axes = dflt, count = 3;
    for (int i = 0; i < count; i++) {
      int a;
      if ((s = norm_axis(c, "axes entry", axes[i], rank, &a)))
        return s;
      if (over[a])
        return bad(c, "axis %d is listed twice in axes", a);
      over[a] = true;
    }
    return AP_OK;
  }
  }
}

/* A per-channel (or, GroupNormalization before opset 21, per-group)
 * scale or bias: 1-D with `count` elements. */
static ap_status norm_param(const ctx *c, int slot, int64_t count, const char *what) {
  ap_value *p;
  ap_status s = need(c, slot, &p);
  if (s)
    return s;
  if (p->rank >= 0 && (p->rank != 1 || (count >= 0 && p->dims[0] >= 0 && p->dims[0] != count)))
    return bad(c, "input '%s' must be 1-D with %lld elements (%s)", p->name, (long long)count,
               what);
  return same_dtype(c, in(c, 0), p);
}

static ap_status infer_normalized(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->dtype != AP_DT_UNDEFINED && !ap_dtype_is_float(x->dtype))
    return bad(c, "input '%s' is %s; a normalization takes floating-point values", x->name,
               ap_dtype_name(x->dtype));
  bool over[AP_MAX_RANK];
  if (x->rank >= 0 && (s = ap_norm_axes(c->g, c->n, x->rank, over, c->d)))
    return s;
  int64_t ch = x->rank >= 2 ? x->dims[1] : -1;
  if (c->n->op == AP_OP_INSTANCE_NORM &&
      ((s = norm_param(c, 1, ch, "the channels")) || (s = norm_param(c, 2, ch, "the channels"))))
    return s;
  if (c->n->op == AP_OP_GROUP_NORM) {
    const ap_attr *ng = ap_attr_find(c->n, "num_groups");
    if (c->g->opset < 18)
      return bad(c, "GroupNormalization is defined from opset 18; the model's is %lld",
                 (long long)c->g->opset);
    if (!ng || ng->type != AP_ATTR_INT || ng->i < 1)
      return bad(c, "attribute 'num_groups' (a positive int) is required");
    if (ch >= 0 && ch % ng->i)
      return bad(c, "%lld channels do not divide into %lld groups", (long long)ch,
                 (long long)ng->i);
    int64_t stash = ap_attr_int(c->n, "stash_type", AP_DT_FLOAT);
    if (stash != AP_DT_FLOAT)
      return bad(c, "stash_type %lld is not float32 (1)", (long long)stash);
    /* Opset 18 scales and shifts each group, 21 each channel. */
    bool per_channel = c->g->opset >= 21;
    const char *what = per_channel ? "the channels (opset 21 and later)"
                                   : "the groups (opsets 18 to 20)";
    int64_t count = per_channel ? ch : ng->i;
    if ((s = norm_param(c, 1, count, what)) || (s = norm_param(c, 2, count, what)))
      return s;
  }
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}
#define infer_INSTANCE_NORM infer_normalized
#define infer_GROUP_NORM infer_normalized
#define infer_LP_NORM infer_normalized
#define infer_MVN infer_normalized

/* ---- reductions --------------------------------------------------------- */

/* Axes of Reduce*, Squeeze and Unsqueeze: from input 1 when present (opset
 * 13 or 18 onwards), else from the 'axes' attribute. *known is false when the
 * axes are an input that is not a constant; *n_axes is then its length, or
 * -1 when even that is unknown. */
static ap_status read_axes(const ctx *c, int64_t *axes, int *n_axes, bool *known) {
  ap_value *v = in(c, 1);
  if (v) {
    ap_status s = const_ints(c, v, axes, AP_MAX_RANK * 2, n_axes, known);
    if (s || *known)
      return s;
    *n_axes = v->rank == 1 && v->dims[0] >= 0 && v->dims[0] <= AP_MAX_RANK * 2
                  ? (int)v->dims[0]
                  : v->rank == 0 ? 1 : -1;
    return AP_OK;
  }
  int count;
  const int64_t *a = ap_attr_ints(c->n, "axes", &count);
  if (count > AP_MAX_RANK * 2)
    return bad(c, "attribute 'axes' has %d values", count);
  for (int i = 0; i < count; i++)
    axes[i] = a[i];
  *n_axes = count;
  *known = true;
  return AP_OK;
}

/* Normalizes axes against rank and rejects repeats; marks[] gets one flag per axis. */
static ap_status mark_axes(const ctx *c, const int64_t *axes, int n_axes, int rank,
                           bool *marks) {
  for (int i = 0; i < rank; i++)
    marks[i] = false;
  for (int i = 0; i < n_axes; i++) {
    int a;
    ap_status s = norm_axis(c, "axis", axes[i], rank, &a);
    if (s)
      return s;
    if (marks[a])
      return bad(c, "axis %lld is repeated", (long long)axes[i]);
    marks[a] = true;
  }
  return AP_OK;
}

static ap_status reduce(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  int64_t axes[AP_MAX_RANK * 2];
  int n_axes;
  bool known, marks[AP_MAX_RANK];
  bool keep = ap_attr_int(c->n, "keepdims", 1) != 0;
  if ((s = read_axes(c, axes, &n_axes, &known)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  shp o;
  shp_of(x, &o);
  if (!known) {
    if (!keep && n_axes < 0)
      return bad(c, "axes input '%s' must be a constant (or keepdims=1)", in(c, 1)->name);
    /* Which dims go is unknown, only how many. */
    o.rank = keep ? x->rank : x->rank - n_axes;
    if (o.rank < 0)
      return bad(c, "%d axes for an input of rank %d", n_axes, x->rank);
    for (int i = 0; i < o.rank; i++)
      shp_dim(&o, i, -1, NULL);
    return set_out(c, 0, x->dtype, &o);
  }
  if (n_axes == 0 && ap_attr_int(c->n, "noop_with_empty_axes", 0))
    return copy_out(c, 0, x, AP_DT_UNDEFINED);
  if ((s = mark_axes(c, axes, n_axes, x->rank, marks)))
    return s;
  o.rank = 0;
  for (int i = 0; i < x->rank; i++) {
    bool reduced = n_axes == 0 || marks[i];
    if (!reduced)
      shp_dim(&o, o.rank++, x->dims[i], x->sym[i]);
    else if (keep)
      shp_dim(&o, o.rank++, 1, NULL);
  }
  return set_out(c, 0, x->dtype, &o);
}
ap_status ap_reduce_axes(ap_graph *g, ap_node *n, bool *reduced, ap_diag *d) {
  ctx c0 = {.g = g, .n = n, .d = d}, *c = &c0;
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (n->op == AP_OP_ARG_MAX || n->op == AP_OP_ARG_MIN) {
    int axis;
    if (x->rank < 0)
      return bad(c, "the reduced axes are not known");
    if ((s = norm_axis(c, "axis", ap_attr_int(n, "axis", 0), x->rank ? x->rank : 1, &axis)))
      return s;
    for (int i = 0; i < x->rank; i++)
      reduced[i] = i == axis;
    return AP_OK;
  }
  int64_t axes[AP_MAX_RANK * 2];
  int n_axes;
  bool known, marks[AP_MAX_RANK];
  if ((s = read_axes(c, axes, &n_axes, &known)))
    return s;
  if (!known || x->rank < 0)
    return bad(c, "the reduced axes are not known");
  bool noop = n_axes == 0 && ap_attr_int(n, "noop_with_empty_axes", 0);
  if (!noop && (s = mark_axes(c, axes, n_axes, x->rank, marks)))
    return s;
  for (int i = 0; i < x->rank; i++)
    reduced[i] = !noop && (n_axes == 0 || marks[i]);
  return AP_OK;
}

#define infer_REDUCE_MEAN reduce
#define infer_REDUCE_SUM reduce
#define infer_REDUCE_MAX reduce
#define infer_REDUCE_MIN reduce
#define infer_REDUCE_PROD reduce
#define infer_REDUCE_L1 reduce
#define infer_REDUCE_L2 reduce
#define infer_REDUCE_LOG_SUM_EXP reduce
#define infer_REDUCE_SUM_SQUARE reduce

/* ArgMax, ArgMin: int64 indices along one axis, kept as 1 unless keepdims=0. */
static ap_status arg_reduce(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->dtype == AP_DT_STRING || x->dtype == AP_DT_BOOL)
    return bad(c, "input '%s' must be numeric, not %s", x->name, ap_dtype_name(x->dtype));
  if (x->rank < 0)
    return set_out(c, 0, AP_DT_INT64, &(shp){.rank = -1});
  if (x->rank == 0)
    return bad(c, "input '%s' must have rank 1 or more", x->name);
  int axis;
  if ((s = norm_axis(c, "axis", ap_attr_int(c->n, "axis", 0), x->rank, &axis)))
    return s;
  bool keep = ap_attr_int(c->n, "keepdims", 1) != 0;
  shp o;
  shp_of(x, &o);
  o.rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (i != axis)
      shp_dim(&o, o.rank++, x->dims[i], x->sym[i]);
    else if (keep)
      shp_dim(&o, o.rank++, 1, NULL);
  return set_out(c, 0, AP_DT_INT64, &o);
}
#define infer_ARG_MAX arg_reduce
#define infer_ARG_MIN arg_reduce

ap_status ap_cumsum_axis(ap_graph *g, ap_node *n, int rank, int *axis, bool *known, ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  ap_value *av;
  int64_t a[1];
  int count;
  ap_status s;
  *axis = 0;
  if ((s = need(c, 1, &av)))
    return s;
  if (av->rank > 1 || (av->rank == 1 && av->dims[0] != 1))
    return bad(c, "axis input '%s' must be a scalar", av->name);
  if ((s = const_ints(c, av, a, 1, &count, known)) || !*known)
    return s;
  if (count != 1)
    return bad(c, "axis input '%s' must be a scalar", av->name);
  return norm_axis(c, "axis", a[0], rank, axis);
}

ap_status ap_top_k_params(ap_graph *g, ap_node *n, int rank, int *axis, int64_t *k, bool *known,
                          ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  ap_status s;
  *k = -1;
  *known = false;
  if ((s = norm_axis(c, "axis", ap_attr_int(n, "axis", -1), rank, axis)))
    return s;
  /* K is an attribute before opset 10, a one-element input from then on. */
  ap_value *kv = in(c, 1);
  if (!kv) {
    const ap_attr *a = ap_attr_find(n, "k");
    if (!a || a->type != AP_ATTR_INT)
      return bad(c, "K is required (input 1, or attribute 'k' (an int) before opset 10)");
    *k = a->i;
    *known = true;
  } else {
    int count;
    if (kv->rank != 1 || (kv->dims[0] >= 0 && kv->dims[0] != 1))
      return bad(c, "K input '%s' must be a 1-D tensor of one element", kv->name);
    if ((s = const_ints(c, kv, k, 1, &count, known)) || !*known)
      return s;
  }
  if (*k < 0)
    return bad(c, "K = %lld must not be negative", (long long)*k);
  return AP_OK;
}

/* TopK: the input's shape with K along axis; Values in its type, Indices int64. */
static ap_status infer_TOP_K(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->dtype == AP_DT_STRING || x->dtype == AP_DT_BOOL)
    return bad(c, "input '%s' must be numeric, not %s", x->name, ap_dtype_name(x->dtype));
  if (ap_attr_int(c->n, "largest", 1) != 0 && ap_attr_int(c->n, "largest", 1) != 1)
    return bad(c, "attribute 'largest' must be 0 or 1");
  if (ap_attr_int(c->n, "sorted", 1) != 0 && ap_attr_int(c->n, "sorted", 1) != 1)
    return bad(c, "attribute 'sorted' must be 0 or 1");
  shp o;
  shp_of(x, &o);
  if (x->rank == 0)
    return bad(c, "input '%s' must have rank 1 or more", x->name);
  if (x->rank > 0) {
    int axis;
    int64_t k;
    bool known;
    if ((s = ap_top_k_params(c->g, c->n, x->rank, &axis, &k, &known, c->d)))
      return s;
    if (known && x->dims[axis] >= 0 && k > x->dims[axis])
      return bad(c, "K = %lld exceeds the axis's %lld elements", (long long)k,
                 (long long)x->dims[axis]);
    shp_dim(&o, axis, known ? k : -1, NULL);
  }
  if ((s = set_out(c, 0, x->dtype, &o)))
    return s;
  return set_out(c, 1, AP_DT_INT64, &o);
}

/* CumSum: the input's shape; the axis is checked when it is a constant. */
static ap_status infer_CUM_SUM(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->dtype == AP_DT_STRING || x->dtype == AP_DT_BOOL)
    return bad(c, "input '%s' must be numeric, not %s", x->name, ap_dtype_name(x->dtype));
  if (x->rank == 0)
    return bad(c, "input '%s' must have rank 1 or more", x->name);
  if (x->rank > 0) {
    int axis;
    bool known;
    if ((s = ap_cumsum_axis(c->g, c->n, x->rank, &axis, &known, c->d)))
      return s;
  }
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}

/* ---- data movement ------------------------------------------------------ */

/* Product of dims [from, to); -1 if any is unknown. Overflow is reported by
 * set_out on the result, so it saturates here. */
static int64_t dim_product(const shp *s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++) {
    if (s->dims[i] < 0)
      return -1;
    if (s->dims[i] && p > INT64_MAX / s->dims[i])
      return INT64_MAX;
    p *= s->dims[i];
  }
  return p;
}

static ap_status infer_FLATTEN(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  int64_t axis = ap_attr_int(c->n, "axis", 1);
  if (axis < -x->rank || axis > x->rank)
    return bad(c, "axis %lld is out of range for rank %d", (long long)axis, x->rank);
  int a = (int)(axis < 0 ? axis + x->rank : axis);
  shp in_s, o;
  shp_of(x, &in_s);
  shp_unknown(&o);
  o.rank = 2;
  /* A single copied dim keeps its symbol (the batch, usually). */
  shp_dim(&o, 0, dim_product(&in_s, 0, a), a == 1 ? x->sym[0] : NULL);
  shp_dim(&o, 1, dim_product(&in_s, a, x->rank), a == x->rank - 1 ? x->sym[a] : NULL);
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_RESHAPE(const ctx *c) {
  ap_value *x, *sv;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &sv)))
    return s;
  int64_t target[AP_MAX_RANK + 1];
  int n;
  bool known;
  if ((s = const_ints(c, sv, target, AP_MAX_RANK, &n, &known)))
    return s;
  shp o;
  shp_unknown(&o);
  if (!known) {
    if (sv->rank != 1 || sv->dims[0] < 0)
      return bad(c, "shape input '%s' must be a constant", sv->name);
    o.rank = (int)(sv->dims[0] <= AP_MAX_RANK ? sv->dims[0] : AP_MAX_RANK + 1);
    return set_out(c, 0, x->dtype, &o);
  }
  bool allowzero = ap_attr_int(c->n, "allowzero", 0) != 0;
  o.rank = n;
  int infer_at = -1;
  int64_t known_prod = 1;
  bool prod_known = true;
  for (int i = 0; i < n; i++) {
    int64_t t = target[i];
    if (t == -1) {
      if (infer_at >= 0)
        return bad(c, "the shape has more than one -1");
      infer_at = i;
      continue;
    }
    if (t < -1)
      return bad(c, "shape[%d] = %lld is negative", i, (long long)t);
    if (t == 0 && !allowzero) {
      if (x->rank >= 0 && i >= x->rank)
        return bad(c, "shape[%d] = 0 copies a dim the input (rank %d) does not have", i,
                   x->rank);
      shp_dim(&o, i, x->rank >= 0 ? x->dims[i] : -1, x->rank >= 0 ? x->sym[i] : NULL);
    } else {
      shp_dim(&o, i, t, NULL);
    }
    if (o.dims[i] < 0)
      prod_known = false;
    else if (o.dims[i] && known_prod > INT64_MAX / o.dims[i])
      return bad(c, "the shape's element count overflows int64");
    else
      known_prod *= o.dims[i];
  }
  if (allowzero && infer_at >= 0)
    for (int i = 0; i < n; i++)
      if (target[i] == 0)
        return bad(c, "allowzero=1 forbids 0 and -1 in the same shape");
  shp in_s;
  shp_of(x, &in_s);
  int64_t total = x->rank >= 0 ? dim_product(&in_s, 0, x->rank) : -1;
  if (infer_at >= 0) {
    int64_t d = -1;
    if (total >= 0 && prod_known) {
      if (known_prod == 0 ? total != 0 : total % known_prod)
        return bad(c, "cannot reshape %lld elements with a -1 over %lld", (long long)total,
                   (long long)known_prod);
      d = known_prod ? total / known_prod : 0;
    }
    shp_dim(&o, infer_at, d, NULL);
  } else if (total >= 0 && prod_known && total != known_prod) {
    return bad(c, "cannot reshape %lld elements to %lld", (long long)total,
               (long long)known_prod);
  }
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_TRANSPOSE(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  int count;
  const int64_t *perm = ap_attr_ints(c->n, "perm", &count);
  if (perm && count != x->rank)
    return bad(c, "perm has %d values for an input of rank %d", count, x->rank);
  bool seen[AP_MAX_RANK] = {false};
  shp o;
  shp_unknown(&o);
  o.rank = x->rank;
  for (int i = 0; i < x->rank; i++) {
    int64_t p = perm ? perm[i] : x->rank - 1 - i;
    if (p < 0 || p >= x->rank || seen[p])
      return bad(c, "perm is not a permutation of 0..%d", x->rank - 1);
    seen[p] = true;
    shp_dim(&o, i, x->dims[p], x->sym[p]);
  }
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_CONCAT(const ctx *c) {
  ap_value *x0;
  ap_status s;
  if ((s = need(c, 0, &x0)))
    return s;
  const ap_attr *axis_attr = ap_attr_find(c->n, "axis");
  if (!axis_attr || axis_attr->type != AP_ATTR_INT)
    return bad(c, "attribute 'axis' (an int) is required");
  shp o;
  shp_unknown(&o);
  for (int i = 0; i < c->n->n_in; i++) {
    ap_value *v;
    if ((s = need(c, i, &v)) || (s = same_dtype(c, x0, v)))
      return s;
    if (v->rank >= 0 && o.rank < 0)
      shp_of(v, &o);
  }
  if (o.rank < 0)
    return set_out(c, 0, x0->dtype, &o);
  if (o.rank == 0)
    return bad(c, "cannot concatenate scalars");
  int axis;
  if ((s = norm_axis(c, "axis", axis_attr->i, o.rank, &axis)))
    return s;
  int64_t sum = 0;
  for (int i = 0; i < c->n->n_in; i++) {
    ap_value *v = in(c, i);
    if (v->rank < 0) {
      sum = -1;
      continue;
    }
    if (v->rank != o.rank)
      return bad(c, "input '%s' has rank %d; the others have %d", v->name, v->rank, o.rank);
    for (int k = 0; k < o.rank; k++) {
      if (k == axis)
        continue;
      if (o.dims[k] >= 0 && v->dims[k] >= 0 && o.dims[k] != v->dims[k])
        return bad(c, "input '%s' has dim %d = %lld; expected %lld", v->name, k,
                   (long long)v->dims[k], (long long)o.dims[k]);
      if (o.dims[k] < 0 && v->dims[k] >= 0)
        shp_dim(&o, k, v->dims[k], NULL);
    }
    if (v->dims[axis] < 0 || sum < 0)
      sum = -1;
    else if (sum > INT64_MAX - v->dims[axis])
      return bad(c, "the concatenated dim overflows int64");
    else
      sum += v->dims[axis];
  }
  shp_dim(&o, axis, sum, NULL);
  return set_out(c, 0, x0->dtype, &o);
}

/* Sizes of Split's outputs along the axis; -1 where unknown. */
static ap_status split_sizes(const ctx *c, int64_t dim, int n_out, int64_t *sizes) {
  ap_status s;
  int64_t split[64];
  int count = 0;
  bool known = false;
  ap_value *sv = in(c, 1);
  if (n_out > 64)
    return bad(c, "%d outputs; at most 64 are supported", n_out);
  if (sv) {
    if ((s = const_ints(c, sv, split, 64, &count, &known)))
      return s;
    if (!known) {
      for (int i = 0; i < n_out; i++)
        sizes[i] = -1;
      return AP_OK;
    }
  } else {
    const int64_t *a = ap_attr_ints(c->n, "split", &count);
    if (count > 64)
      return bad(c, "attribute 'split' has %d values", count);
    for (int i = 0; i < count; i++)
      split[i] = a[i];
    known = count > 0;
  }
  if (known) {
    if (count != n_out)
      return bad(c, "split has %d sizes for %d outputs", count, n_out);
    int64_t sum = 0;
    for (int i = 0; i < count; i++) {
      if (split[i] < 0 || split[i] > INT64_MAX - sum)
        return bad(c, "split size %lld is invalid", (long long)split[i]);
      sum += split[i];
      sizes[i] = split[i];
    }
    if (dim >= 0 && sum != dim)
      return bad(c, "split sizes add up to %lld but the dim is %lld", (long long)sum,
                 (long long)dim);
    return AP_OK;
  }
  const ap_attr *num = ap_attr_find(c->n, "num_outputs");
  if (num && (num->type != AP_ATTR_INT || num->i != n_out))
    return bad(c, "num_outputs must equal the %d outputs", n_out);
  for (int i = 0; i < n_out; i++)
    sizes[i] = -1;
  if (dim < 0)
    return AP_OK;
  if (num) {
    /* Opset 18: equal chunks of ceil(dim / n), the last one smaller. */
    int64_t chunk = ceil_div(dim, n_out);
    for (int i = 0; i < n_out; i++) {
      int64_t left = dim - chunk * i;
      sizes[i] = left < 0 ? 0 : left < chunk ? left : chunk;
    }
    return AP_OK;
  }
  if (dim % n_out)
    return bad(c, "dim %lld does not split evenly into %d outputs", (long long)dim, n_out);
  for (int i = 0; i < n_out; i++)
    sizes[i] = dim / n_out;
  return AP_OK;
}

static ap_status infer_SPLIT(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank < 0) {
    for (int k = 0; k < c->n->n_out; k++)
      if ((s = set_out(c, k, x->dtype, &(shp){.rank = -1})))
        return s;
    return AP_OK;
  }
  int axis;
  int64_t sizes[64];
  if ((s = norm_axis(c, "axis", ap_attr_int(c->n, "axis", 0), x->rank, &axis)) ||
      (s = split_sizes(c, x->dims[axis], c->n->n_out, sizes)))
    return s;
  for (int k = 0; k < c->n->n_out; k++) {
    shp o;
    shp_of(x, &o);
    shp_dim(&o, axis, sizes[k], NULL);
    if ((s = set_out(c, k, x->dtype, &o)))
      return s;
  }
  return AP_OK;
}

/* One sliced axis, with ONNX's clamping of starts and ends; steps may be
 * negative. Returns the element count along the axis and the first index. */
void ap_slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *first,
                   int64_t *count) {
  if (start < 0)
    start += dim;
  if (end < 0)
    end += dim;
  int64_t n;
  if (step > 0) {
    start = start < 0 ? 0 : start > dim ? dim : start;
    end = end < 0 ? 0 : end > dim ? dim : end;
    n = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = start < 0 ? 0 : start > dim - 1 ? dim - 1 : start;
    end = end < -1 ? -1 : end > dim - 1 ? dim - 1 : end;
    /* step is at least -INT64_MAX (checked by the caller). */
    n = start > end ? (start - end - 1) / -step + 1 : 0;
  }
  *first = start;
  *count = n;
}

/* Slice's starts, ends, axes and steps per input axis: inputs from opset 10,
 * attributes before. *known is false when any needed input is not constant. */
ap_status ap_slice_params(ap_graph *g, ap_node *n, const ap_value *x, int64_t *starts,
                          int64_t *ends, int64_t *steps, bool *sliced, bool *known,
                          ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  int64_t st[AP_MAX_RANK * 2], en[AP_MAX_RANK * 2], ax[AP_MAX_RANK * 2], sp[AP_MAX_RANK * 2];
  int n_st, n_en, n_ax = -1, n_sp = -1;
  bool k1 = true, k2 = true, k3 = true, k4 = true;
  ap_status s;
  *known = false;
  if (n->n_in >= 3 || ap_node_in(g, n, 1)) {
    ap_value *vs, *ve, *va = in(c, 3), *vp = in(c, 4);
    if ((s = need(c, 1, &vs)) || (s = need(c, 2, &ve)) ||
        (s = const_ints(c, vs, st, AP_MAX_RANK * 2, &n_st, &k1)) ||
        (s = const_ints(c, ve, en, AP_MAX_RANK * 2, &n_en, &k2)) ||
        (va && (s = const_ints(c, va, ax, AP_MAX_RANK * 2, &n_ax, &k3))) ||
        (vp && (s = const_ints(c, vp, sp, AP_MAX_RANK * 2, &n_sp, &k4))))
      return s;
    if (!va)
      n_ax = -1;
    if (!vp)
      n_sp = -1;
  } else {
    const int64_t *a;
    int cnt;
    if (!(a = ap_attr_ints(n, "starts", &cnt)) || cnt > AP_MAX_RANK * 2)
      return bad(c, "attribute 'starts' is required (at most %d values)", AP_MAX_RANK * 2);
    memcpy(st, a, (size_t)cnt * sizeof *a);
    n_st = cnt;
    if (!(a = ap_attr_ints(n, "ends", &cnt)) || cnt > AP_MAX_RANK * 2)
      return bad(c, "attribute 'ends' is required (at most %d values)", AP_MAX_RANK * 2);
    memcpy(en, a, (size_t)cnt * sizeof *a);
    n_en = cnt;
    if ((a = ap_attr_ints(n, "axes", &cnt))) {
      if (cnt > AP_MAX_RANK * 2)
        return bad(c, "attribute 'axes' has %d values", cnt);
      memcpy(ax, a, (size_t)cnt * sizeof *a);
      n_ax = cnt;
    }
  }
  if (!k1 || !k2 || !k3 || !k4)
    return AP_OK;
  if (n_st != n_en || (n_ax >= 0 && n_ax != n_st) || (n_sp >= 0 && n_sp != n_st))
    return bad(c, "starts, ends, axes and steps must have the same length");
  for (int i = 0; i < x->rank; i++) {
    starts[i] = 0;
    ends[i] = INT64_MAX;
    steps[i] = 1;
    sliced[i] = false;
  }
  for (int i = 0; i < n_st; i++) {
    int a;
    if ((s = norm_axis(c, "axis", n_ax >= 0 ? ax[i] : i, x->rank, &a)))
      return s;
    if (sliced[a])
      return bad(c, "axis %d is sliced twice", a);
    int64_t step = n_sp >= 0 ? sp[i] : 1;
    if (step == 0 || step == INT64_MIN)
      return bad(c, "step %lld is invalid", (long long)step);
    sliced[a] = true;
    starts[a] = st[i];
    ends[a] = en[i];
    steps[a] = step;
  }
  *known = true;
  return AP_OK;
}

static ap_status infer_SLICE(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  int64_t starts[AP_MAX_RANK], ends[AP_MAX_RANK], steps[AP_MAX_RANK];
  bool sliced[AP_MAX_RANK], known;
  if ((s = ap_slice_params(c->g, c->n, x, starts, ends, steps, sliced, &known, c->d)))
    return s;
  shp o;
  shp_of(x, &o);
  for (int i = 0; i < x->rank; i++) {
    if (!known) {
      shp_dim(&o, i, -1, NULL);
    } else if (sliced[i] && x->dims[i] >= 0) {
      int64_t first, count;
      ap_slice_axis(x->dims[i], starts[i], ends[i], steps[i], &first, &count);
      shp_dim(&o, i, count, NULL);
    } else if (sliced[i] && !(starts[i] == 0 && steps[i] == 1 && ends[i] >= INT32_MAX)) {
      shp_dim(&o, i, -1, NULL);
    }
  }
  return set_out(c, 0, x->dtype, &o);
}

ap_status ap_pad_params(ap_graph *g, ap_node *n, int rank, int64_t *begin, int64_t *end,
                        ap_pad_mode *mode, bool *known, ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
  const char *m = ap_attr_string(n, "mode", "constant");
  *known = false;
  *mode = AP_PAD_CONSTANT;
  bool found = false;
  for (int i = 0; i < 4 && !found; i++)
    if (strcmp(m, modes[i]) == 0 && (i < 3 || g->opset >= 19)) {
      *mode = (ap_pad_mode)i;
      found = true;
    }
  if (!found)
    return bad(c, "mode '%s' is not one of constant, reflect, edge%s", m,
               g->opset >= 19 ? ", wrap" : "");
  int64_t pads[AP_MAX_RANK * 2], axes[AP_MAX_RANK];
  int n_pads, n_axes = rank;
  ap_status s;
  if (g->opset < 11) {
    const int64_t *a = ap_attr_ints(n, "pads", &n_pads);
    if (!a)
      return bad(c, "attribute 'pads' (a list of ints) is required");
    if (n_pads > AP_MAX_RANK * 2)
      return bad(c, "attribute 'pads' has %d values", n_pads);
    memcpy(pads, a, (size_t)n_pads * sizeof *a);
  } else {
    ap_value *vp, *va = in(c, 3);
    bool kp, ka = true;
    if ((s = need(c, 1, &vp)) ||
        (s = const_ints(c, vp, pads, AP_MAX_RANK * 2, &n_pads, &kp)))
      return s;
    if (va && (s = const_ints(c, va, axes, AP_MAX_RANK, &n_axes, &ka)))
      return s;
    if (!kp || !ka)
      return AP_OK;
  }
  bool given = g->opset >= 11 && in(c, 3);
  if (n_pads != 2 * n_axes)
    return bad(c, "pads has %d values; %d are needed (2 per %s)", n_pads, 2 * n_axes,
               given ? "axis of 'axes'" : "axis");
  for (int i = 0; i < rank; i++)
    begin[i] = end[i] = 0;
  bool seen[AP_MAX_RANK] = {false};
  for (int i = 0; i < n_axes; i++) {
    int a = i;
    if (given && (s = norm_axis(c, "axis", axes[i], rank, &a)))
      return s;
    if (seen[a])
      return bad(c, "axis %d is padded twice", a);
    seen[a] = true;
    if (pads[i] < -WINDOW_ATTR_MAX || pads[i] > WINDOW_ATTR_MAX ||
        pads[i + n_axes] < -WINDOW_ATTR_MAX || pads[i + n_axes] > WINDOW_ATTR_MAX)
      return bad(c, "pad %lld or %lld is too large", (long long)pads[i],
                 (long long)pads[i + n_axes]);
    begin[a] = pads[i];
    end[a] = pads[i + n_axes];
  }
  *known = true;
  return AP_OK;
}

int64_t ap_pad_source(ap_pad_mode mode, int64_t i, int64_t begin, int64_t dim) {
  int64_t j = i - begin;
  if (j >= 0 && j < dim)
    return j;
  switch (mode) {
  case AP_PAD_CONSTANT: return -1;
  case AP_PAD_EDGE: return j < 0 ? 0 : dim - 1;
  case AP_PAD_WRAP: return (j % dim + dim) % dim;
  case AP_PAD_REFLECT: {
    /* numpy's reflect: mirror about the end elements, repeated, period 2 (dim - 1) */
    int64_t period = 2 * (dim - 1);
    if (period == 0)
      return 0;
    int64_t m = (j < 0 ? -j : j) % period;
    return m < dim ? m : period - m;
  }
  }
  return -1;
}

static ap_status infer_PAD(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  int64_t begin[AP_MAX_RANK], end[AP_MAX_RANK];
  ap_pad_mode mode;
  bool known;
  if ((s = ap_pad_params(c->g, c->n, x->rank, begin, end, &mode, &known, c->d)))
    return s;
  ap_value *cv = c->g->opset >= 11 ? in(c, 2) : NULL;
  if (cv && cv->dtype != AP_DT_UNDEFINED && cv->dtype != x->dtype)
    return bad(c, "constant_value '%s' (%s) must have the type of '%s' (%s)", cv->name,
               ap_dtype_name(cv->dtype), x->name, ap_dtype_name(x->dtype));
  shp o;
  shp_of(x, &o);
  for (int i = 0; i < x->rank; i++) {
    if (!known) {
      shp_dim(&o, i, -1, NULL);
    } else if (x->dims[i] >= 0) {
      int64_t dim = x->dims[i] + begin[i] + end[i];
      if (dim < 0)
        return bad(c, "axis %d: pads %lld and %lld leave fewer than no elements of %lld", i,
                   (long long)begin[i], (long long)end[i], (long long)x->dims[i]);
      if (mode != AP_PAD_CONSTANT && x->dims[i] == 0 && (begin[i] > 0 || end[i] > 0))
        return bad(c, "axis %d is empty: there is nothing to pad it with", i);
      shp_dim(&o, i, dim, NULL);
    } else if (begin[i] || end[i]) {
      shp_dim(&o, i, -1, NULL);
    }
  }
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_SQUEEZE(const ctx *c) {
  ap_value *x;
  ap_status s;
  int64_t axes[AP_MAX_RANK * 2];
  int n_axes;
  bool known, marks[AP_MAX_RANK];
  if ((s = need(c, 0, &x)) || (s = read_axes(c, axes, &n_axes, &known)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  shp o;
  shp_unknown(&o);
  if (!known) {
    if (n_axes < 0)
      return bad(c, "axes input '%s' must be a constant", in(c, 1)->name);
    o.rank = x->rank - n_axes;
    if (o.rank < 0)
      return bad(c, "%d axes for an input of rank %d", n_axes, x->rank);
    return set_out(c, 0, x->dtype, &o);
  }
  if ((s = mark_axes(c, axes, n_axes, x->rank, marks)))
    return s;
  o.rank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (n_axes == 0 && x->dims[i] < 0)
      return bad(c, "cannot squeeze: dim %d of '%s' is unknown", i, x->name);
    bool drop = n_axes ? marks[i] : x->dims[i] == 1;
    if (drop && x->dims[i] >= 0 && x->dims[i] != 1)
      return bad(c, "cannot squeeze dim %d of size %lld", i, (long long)x->dims[i]);
    if (!drop)
      shp_dim(&o, o.rank++, x->dims[i], x->sym[i]);
  }
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_UNSQUEEZE(const ctx *c) {
  ap_value *x;
  ap_status s;
  int64_t axes[AP_MAX_RANK * 2];
  int n_axes;
  bool known, marks[AP_MAX_RANK];
  if ((s = need(c, 0, &x)) || (s = read_axes(c, axes, &n_axes, &known)))
    return s;
  if (!known && n_axes < 0)
    return bad(c, "axes input '%s' must be a constant", in(c, 1)->name);
  if (known && n_axes == 0)
    return bad(c, "axes must not be empty");
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  shp o;
  shp_unknown(&o);
  o.rank = x->rank + n_axes;
  if (o.rank > AP_MAX_RANK)
    return bad(c, "the output would have rank %d; at most %d is supported", o.rank,
               AP_MAX_RANK);
  if (!known)
    return set_out(c, 0, x->dtype, &o);
  if ((s = mark_axes(c, axes, n_axes, o.rank, marks)))
    return s;
  for (int i = 0, k = 0; i < o.rank; i++) {
    if (marks[i])
      shp_dim(&o, i, 1, NULL);
    else {
      shp_dim(&o, i, x->dims[k], x->sym[k]);
      k++;
    }
  }
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_GATHER(const ctx *c) {
  ap_value *x, *idx;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &idx)))
    return s;
  if (idx->dtype != AP_DT_UNDEFINED && idx->dtype != AP_DT_INT64 && idx->dtype != AP_DT_INT32)
    return bad(c, "indices '%s' must be int32 or int64, not %s", idx->name,
               ap_dtype_name(idx->dtype));
  if (x->rank < 0 || idx->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  if (x->rank == 0)
    return bad(c, "cannot gather from a scalar");
  int axis;
  if ((s = norm_axis(c, "axis", ap_attr_int(c->n, "axis", 0), x->rank, &axis)))
    return s;
  /* Constant indices are checked here, once: ONNX Runtime refuses an index
   * outside the axis, and a program must not read past its table. */
  if (idx->data && x->dims[axis] >= 0) {
    ap_tensor t = ap_value_tensor(idx);
    for (int64_t j = 0; j < t.numel; j++) {
      int64_t k = ap_tensor_get_i64(&t, j);
      if (k < -x->dims[axis] || k >= x->dims[axis])
        return bad(c, "index %lld at position %lld of indices '%s' is outside axis %d of '%s' "
                      "(%lld entries)",
                   (long long)k, (long long)j, idx->name, axis, x->name,
                   (long long)x->dims[axis]);
    }
  }
  shp o;
  shp_unknown(&o);
  o.rank = x->rank - 1 + idx->rank;
  if (o.rank > AP_MAX_RANK)
    return bad(c, "the output would have rank %d; at most %d is supported", o.rank,
               AP_MAX_RANK);
  int k = 0;
  for (int i = 0; i < axis; i++, k++)
    shp_dim(&o, k, x->dims[i], x->sym[i]);
  for (int i = 0; i < idx->rank; i++, k++)
    shp_dim(&o, k, idx->dims[i], idx->sym[i]);
  for (int i = axis + 1; i < x->rank; i++, k++)
    shp_dim(&o, k, x->dims[i], x->sym[i]);
  return set_out(c, 0, x->dtype, &o);
}

static ap_status infer_EXPAND(const ctx *c) {
  ap_value *x, *sv;
  ap_status s;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &sv)))
    return s;
  int64_t target[AP_MAX_RANK];
  int n;
  bool known;
  if ((s = const_ints(c, sv, target, AP_MAX_RANK, &n, &known)))
    return s;
  shp o;
  shp_unknown(&o);
  if (!known) {
    if (sv->rank != 1 || sv->dims[0] < 0)
      return bad(c, "shape input '%s' must be a constant", sv->name);
    o.rank = x->rank < 0 ? -1
             : sv->dims[0] > x->rank ? (int)(sv->dims[0] <= AP_MAX_RANK ? sv->dims[0]
                                                                       : AP_MAX_RANK + 1)
                                     : x->rank;
    return set_out(c, 0, x->dtype, &o);
  }
  o.rank = n;
  for (int i = 0; i < n; i++) {
    if (target[i] < 0)
      return bad(c, "shape[%d] = %lld is negative", i, (long long)target[i]);
    shp_dim(&o, i, target[i], NULL);
  }
  if ((s = broadcast_into(c, &o, x)))
    return s;
  return set_out(c, 0, x->dtype, &o);
}

ap_status ap_tile_repeats(ap_graph *g, ap_node *n, int rank, int64_t *repeats, bool *known,
                          ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  ap_value *rv;
  int count;
  ap_status s;
  if ((s = need(c, 1, &rv)) || (s = const_ints(c, rv, repeats, AP_MAX_RANK, &count, known)))
    return s;
  if (!*known)
    return AP_OK;
  if (count != rank)
    return bad(c, "repeats has %d values for an input of rank %d", count, rank);
  for (int i = 0; i < rank; i++)
    if (repeats[i] < 0 || repeats[i] > WINDOW_ATTR_MAX)
      return bad(c, "repeats[%d] = %lld is out of range", i, (long long)repeats[i]);
  return AP_OK;
}

static ap_status infer_TILE(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &(shp){.rank = -1});
  int64_t repeats[AP_MAX_RANK];
  bool known;
  if ((s = ap_tile_repeats(c->g, c->n, x->rank, repeats, &known, c->d)))
    return s;
  shp o;
  shp_of(x, &o);
  for (int i = 0; i < x->rank; i++)
    if (!known || (repeats[i] != 1 && x->dims[i] < 0))
      shp_dim(&o, i, -1, NULL);
    else if (repeats[i] != 1)
      shp_dim(&o, i, x->dims[i] * repeats[i], NULL);
  return set_out(c, 0, x->dtype, &o);
}

ap_status ap_depth_space_params(ap_graph *g, ap_node *n, int64_t *block, bool *crd,
                                ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  const ap_attr *b = ap_attr_find(n, "blocksize");
  if (!b || b->type != AP_ATTR_INT || b->i < 1 || b->i > WINDOW_ATTR_MAX)
    return bad(c, "attribute 'blocksize' (a positive int) is required");
  *block = b->i;
  const char *mode = ap_attr_string(n, "mode", "DCR");
  *crd = n->op == AP_OP_DEPTH_TO_SPACE && strcmp(mode, "CRD") == 0;
  if (n->op == AP_OP_DEPTH_TO_SPACE && !*crd && strcmp(mode, "DCR") != 0)
    return bad(c, "mode '%s' is not DCR or CRD", mode);
  return AP_OK;
}

/* [N, C, H, W] <-> [N, C / b^2, H b, W b]. */
static ap_status infer_depth_space(const ctx *c) {
  ap_value *x;
  ap_status s;
  int64_t b;
  bool crd;
  if ((s = need(c, 0, &x)) || (s = ap_depth_space_params(c->g, c->n, &b, &crd, c->d)))
    return s;
  if (x->rank >= 0 && x->rank != 4)
    return bad(c, "input '%s' must have rank 4 (N, C, H, W), not %d", x->name, x->rank);
  shp o;
  shp_of(x, &o);
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &o);
  bool to_space = c->n->op == AP_OP_DEPTH_TO_SPACE;
  int64_t ch = x->dims[1], h = x->dims[2], w = x->dims[3];
  if (to_space && ch >= 0 && ch % (b * b))
    return bad(c, "channels %lld are not a multiple of blocksize^2 = %lld", (long long)ch,
               (long long)(b * b));
  if (!to_space && ((h >= 0 && h % b) || (w >= 0 && w % b)))
    return bad(c, "height %lld and width %lld must be multiples of blocksize %lld",
               (long long)h, (long long)w, (long long)b);
  shp_dim(&o, 1, ch < 0 ? -1 : to_space ? ch / (b * b) : ch * b * b, NULL);
  shp_dim(&o, 2, h < 0 ? -1 : to_space ? h * b : h / b, NULL);
  shp_dim(&o, 3, w < 0 ? -1 : to_space ? w * b : w / b, NULL);
  return set_out(c, 0, x->dtype, &o);
}
#define infer_DEPTH_TO_SPACE infer_depth_space
#define infer_SPACE_TO_DEPTH infer_depth_space

/* A constant float vector input (scales); *known false when not constant. */
static ap_status const_floats(const ctx *c, const ap_value *v, double *out, int max, int *count,
                              bool *known) {
  *known = false;
  *count = 0;
  if (!v->data)
    return AP_OK;
  if (!ap_dtype_is_float(v->dtype))
    return bad(c, "input '%s' must be a float tensor, not %s", v->name, ap_dtype_name(v->dtype));
  ap_tensor t = ap_value_tensor(v);
  if (t.numel > max)
    return bad(c, "input '%s' has %lld elements; at most %d are allowed here", v->name,
               (long long)t.numel, max);
  for (int64_t i = 0; i < t.numel; i++)
    out[i] = ap_tensor_get_f64(&t, i);
  *count = (int)t.numel;
  *known = true;
  return AP_OK;
}

ap_status ap_resize_params(ap_graph *g, ap_node *n, const ap_value *x, ap_resize *r,
                           bool *known, ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  *known = false;
  memset(r, 0, sizeof *r);
  r->rank = x->rank;
  bool upsample = n->op == AP_OP_UPSAMPLE, v11 = !upsample && g->opset >= 11;
  const char *mode = ap_attr_string(n, "mode", "nearest");
  r->taps = 1;
  if (strcmp(mode, "linear") == 0 || (upsample && strcmp(mode, "bilinear") == 0))
    r->taps = 2;
  else if (v11 && strcmp(mode, "cubic") == 0)
    r->taps = 4;
  else if (strcmp(mode, "nearest") != 0)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                    "mode '%s' is not supported (nearest, linear%s)", mode,
                    v11 ? ", cubic" : "");
  r->cubic_a = ap_attr_float(n, "cubic_coeff_a", -0.75f);
  r->exclude_outside = v11 && ap_attr_int(n, "exclude_outside", 0) != 0;
  r->coord = AP_RESIZE_ASYMMETRIC;
  r->nearest = AP_RESIZE_FLOOR;
  if (v11) {
    static const char *const coords[] = {"half_pixel",         "asymmetric",
                                         "align_corners",      "pytorch_half_pixel",
                                         "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    static const char *const nearests[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"};
    const char *cm = ap_attr_string(n, "coordinate_transformation_mode", "half_pixel");
    const char *nm = ap_attr_string(n, "nearest_mode", "round_prefer_floor");
    int ci = -1, ni = -1;
    for (int i = 0; i < 6; i++)
      ci = strcmp(cm, coords[i]) == 0 ? i : ci;
    for (int i = 0; i < 4; i++)
      ni = strcmp(nm, nearests[i]) == 0 ? i : ni;
    if (ci < 0)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "coordinate_transformation_mode '%s' is not supported", cm);
    if (ni < 0)
      return bad(c, "nearest_mode '%s' is not one of round_prefer_floor, round_prefer_ceil, "
                    "floor, ceil", nm);
    r->coord = (ap_resize_coord)ci;
    r->nearest = (ap_resize_nearest)ni;
    r->extrapolation = ap_attr_float(n, "extrapolation_value", 0.0f);
    if (ap_attr_int(n, "antialias", 0))
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "antialias is not supported");
    if (strcmp(ap_attr_string(n, "keep_aspect_ratio_policy", "stretch"), "stretch") != 0)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "keep_aspect_ratio_policy other than stretch is not supported");
  }
  /* Which axes the scales or sizes list (opset 18's axes), in order. */
  int axes[AP_MAX_RANK], n_axes = x->rank;
  for (int i = 0; i < x->rank; i++)
    axes[i] = i;
  int count;
  const int64_t *ax = v11 ? ap_attr_ints(n, "axes", &count) : NULL;
  if (ax) {
    if (count > x->rank)
      return bad(c, "attribute 'axes' has %d values for rank %d", count, x->rank);
    n_axes = count;
    for (int i = 0; i < count; i++) {
      ap_status s = norm_axis(c, "axis", ax[i], x->rank, &axes[i]);
      if (s)
        return s;
    }
  }
  double scales[AP_MAX_RANK];
  int64_t sizes[AP_MAX_RANK];
  int n_scales = 0, n_sizes = 0;
  bool ks = true, kz = true;
  ap_status s;
  if (upsample && g->opset < 9) {
    const ap_attr *a = ap_attr_find(n, "scales");
    if (!a || a->type != AP_ATTR_FLOATS || a->n > AP_MAX_RANK)
      return bad(c, "attribute 'scales' (a list of floats) is required");
    n_scales = a->n;
    for (int i = 0; i < a->n; i++)
      scales[i] = a->floats[i];
  } else {
    ap_value *sv = in(c, v11 ? 2 : 1), *zv = v11 ? in(c, 3) : NULL;
    if (sv && (s = const_floats(c, sv, scales, AP_MAX_RANK, &n_scales, &ks)))
      return s;
    if (zv && (s = const_ints(c, zv, sizes, AP_MAX_RANK, &n_sizes, &kz)))
      return s;
    if (!ks || !kz)
      return AP_OK;
  }
  /* The region of interest: starts then ends, over the axes listed. */
  double roi[2 * AP_MAX_RANK];
  int n_roi = 0;
  if (r->coord == AP_RESIZE_TF_CROP_AND_RESIZE) {
    ap_value *rv = in(c, 1);
    bool kr = true;
    if (!rv)
      return bad(c, "tf_crop_and_resize needs the region of interest (input 'roi')");
    if ((s = const_floats(c, rv, roi, 2 * AP_MAX_RANK, &n_roi, &kr)))
      return s;
    if (!kr)
      return AP_OK;
    if (n_roi != 2 * n_axes)
      return bad(c, "roi has %d values; %d are needed", n_roi, 2 * n_axes);
  }
  if (n_sizes ? n_sizes != n_axes : n_scales != n_axes)
    return bad(c, "%s has %d values; %d are needed", n_sizes ? "sizes" : "scales",
               n_sizes ? n_sizes : n_scales, n_axes);
  for (int i = 0; i < x->rank; i++) {
    if (x->dims[i] < 0)
      return AP_OK;
    r->in[i] = r->out[i] = x->dims[i];
    r->scale[i] = 1;
    r->roi_start[i] = 0;
    r->roi_end[i] = 1;
  }
  for (int i = 0; i < n_roi / 2; i++) {
    r->roi_start[axes[i]] = roi[i];
    r->roi_end[axes[i]] = roi[n_axes + i];
  }
  for (int i = 0; i < n_axes; i++) {
    int a = axes[i];
    if (n_sizes) {
      if (sizes[i] < 0 || sizes[i] > WINDOW_ATTR_MAX)
        return bad(c, "sizes[%d] = %lld is out of range", i, (long long)sizes[i]);
      r->out[a] = sizes[i];
      r->scale[a] = r->in[a] ? (double)sizes[i] / (double)r->in[a] : 1;
    } else {
      if (!(scales[i] > 0) || scales[i] * (double)r->in[a] > WINDOW_ATTR_MAX)
        return bad(c, "scales[%d] = %g is out of range", i, scales[i]);
      r->scale[a] = scales[i];
      r->out[a] = (int64_t)floor(scales[i] * (double)r->in[a]);
    }
  }
  *known = true;
  return AP_OK;
}

/* Keys' cubic convolution weights of the four taps around a point at
 * distance ratio (0, 1] past the second tap, with coefficient A (ONNX's
 * Resize, after ONNX's reference implementation). */
static void cubic_weights(double ratio, double A, double *w) {
  double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
  w[0] = ((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A;
  w[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
  w[2] = ((A + 2) * q - (A + 3)) * q * q + 1;
  w[3] = ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A;
}

bool ap_resize_source(const ap_resize *r, int a, int64_t i, int64_t *idx, double *w) {
  /* The resized length is in * scale before rounding, as ONNX's reference
   * has it (the output length when sizes are given). */
  double s = r->scale[a], x = (double)i, o;
  int64_t in = r->in[a];
  double len = (double)in * s;
  switch (r->coord) {
  case AP_RESIZE_HALF_PIXEL: o = (x + 0.5) / s - 0.5; break;
  case AP_RESIZE_PYTORCH_HALF_PIXEL: o = len > 1 ? (x + 0.5) / s - 0.5 : r->taps == 4 ? -0.5 : 0; break;
  case AP_RESIZE_ALIGN_CORNERS: o = len == 1 ? 0 : x * (double)(in - 1) / (len - 1); break;
  case AP_RESIZE_TF_HALF_PIXEL_FOR_NN: o = (x + 0.5) / s; break;
  case AP_RESIZE_TF_CROP_AND_RESIZE: {
    double lo = r->roi_start[a], hi = r->roi_end[a], span = (double)(in - 1);
    o = (len > 1 ? x * (hi - lo) * span / (len - 1) : (hi - lo) * span / 2) + lo * span;
    if (o < 0 || o > span) {
      for (int t = 0; t < r->taps; t++)
        idx[t] = 0, w[t] = 0;
      return false;
    }
    break;
  }
  default: o = x / s; break;
  }
  if (r->taps == 1) {
    double f = floor(o), n;
    switch (r->nearest) {
    case AP_RESIZE_ROUND_PREFER_FLOOR: n = o == f + 0.5 ? f : round(o); break;
    case AP_RESIZE_ROUND_PREFER_CEIL: n = o == f + 0.5 ? f + 1 : round(o); break;
    case AP_RESIZE_FLOOR: n = f; break;
    default: n = ceil(o); break;
    }
    idx[0] = n < 0 ? 0 : n > (double)(in - 1) ? in - 1 : (int64_t)n;
    w[0] = 1;
    return true;
  }
  if (r->taps == 2) {
    /* Beyond the ends the input repeats its edge elements. */
    o = o < 0 ? 0 : o > (double)(in - 1) ? (double)(in - 1) : o;
    idx[0] = (int64_t)floor(o);
    idx[1] = idx[0] + 1 < in ? idx[0] + 1 : idx[0];
    w[1] = o - (double)idx[0];
    w[0] = 1 - w[1];
    return true;
  }
  /* Cubic: the taps f - 1 .. f + 2 around the largest integer f below o,
   * at ratio o - f in (0, 1] (an integral o is the third tap, weight 1). */
  double f = ceil(o) - 1;
  cubic_weights(o - f, r->cubic_a, w);
  double sum = 0;
  for (int t = 0; t < 4; t++) {
    double p = f - 1 + t;
    if (r->exclude_outside && (p < 0 || p > (double)(in - 1)))
      w[t] = 0;
    sum += w[t];
    idx[t] = p < 0 ? 0 : p > (double)(in - 1) ? in - 1 : (int64_t)p;
  }
  if (r->exclude_outside && sum != 0)
    for (int t = 0; t < 4; t++)
      w[t] /= sum;
  return true;
}

bool ap_resize_identity(const ap_resize *r, int a) {
  if (r->in[a] != r->out[a])
    return false;
  for (int64_t i = 0; i < r->out[a]; i++) {
    int64_t idx[AP_RESIZE_MAX_TAPS];
    double w[AP_RESIZE_MAX_TAPS];
    if (!ap_resize_source(r, a, i, idx, w))
      return false;
    double own = 0;
    for (int t = 0; t < r->taps; t++) {
      if (w[t] != 0 && idx[t] != i)
        return false;
      own += w[t];
    }
    if (fabs(own - 1) > 1e-12)
      return false;
  }
  return true;
}

static ap_status infer_resize(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  shp o;
  shp_of(x, &o);
  if (x->rank < 0)
    return set_out(c, 0, x->dtype, &o);
  ap_resize r;
  bool known;
  if ((s = ap_resize_params(c->g, c->n, x, &r, &known, c->d)))
    return s;
  for (int i = 0; i < x->rank; i++)
    shp_dim(&o, i, known ? r.out[i] : -1, NULL);
  return set_out(c, 0, x->dtype, &o);
}
#define infer_RESIZE infer_resize
#define infer_UPSAMPLE infer_resize

ap_status ap_trilu_params(ap_graph *g, ap_node *n, bool *upper, int64_t *k, bool *known,
                          ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  int64_t upper_attr = ap_attr_int(n, "upper", 1);
  if (upper_attr != 0 && upper_attr != 1)
    return bad(c, "attribute 'upper' must be 0 or 1, not %lld", (long long)upper_attr);
  *upper = upper_attr != 0;
  *k = 0;
  *known = true;
  ap_value *kv = in(c, 1);
  if (!kv)
    return AP_OK;
  if (kv->rank > 1 || (kv->rank == 1 && kv->dims[0] != 1))
    return bad(c, "k input '%s' must be a scalar", kv->name);
  int count;
  ap_status s = const_ints(c, kv, k, 1, &count, known);
  if (!s && *known && count != 1)
    return bad(c, "k input '%s' must be a scalar", kv->name);
  return s;
}

/* Trilu: the input's shape, of rank 2 or more. */
static ap_status infer_TRILU(const ctx *c) {
  ap_value *x;
  ap_status s;
  bool upper, known;
  int64_t k;
  if ((s = need(c, 0, &x)) || (s = ap_trilu_params(c->g, c->n, &upper, &k, &known, c->d)))
    return s;
  if (x->rank >= 0 && x->rank < 2)
    return bad(c, "input '%s' must have rank 2 or more, not %d", x->name, x->rank);
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}

ap_status ap_one_hot_params(ap_graph *g, ap_node *n, int rank, int *axis, int64_t *depth,
                            bool *known, ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  ap_value *dv;
  ap_status s;
  *depth = -1;
  *known = false;
  if ((s = need(c, 1, &dv)) || (s = norm_axis(c, "axis", ap_attr_int(n, "axis", -1), rank + 1, axis)))
    return s;
  if (dv->rank > 1 || (dv->rank == 1 && dv->dims[0] != 1))
    return bad(c, "depth input '%s' must be a scalar or one element", dv->name);
  if (dv->dtype == AP_DT_STRING || dv->dtype == AP_DT_BOOL)
    return bad(c, "depth input '%s' must be numeric, not %s", dv->name, ap_dtype_name(dv->dtype));
  if (!dv->data)
    return AP_OK;
  ap_tensor t = ap_value_tensor(dv);
  double v = ap_tensor_get_f64(&t, 0);
  /* A float depth is truncated, as an integer index would be. */
  if (!(v >= 1 && v <= (double)(1 << 24)))
    return bad(c, "depth %g must be a positive count", v);
  *depth = (int64_t)v;
  *known = true;
  return AP_OK;
}

/* OneHot: the indices' shape with depth inserted at axis, in values' type. */
static ap_status infer_ONE_HOT(const ctx *c) {
  ap_value *ix, *vals;
  ap_status s;
  if ((s = need(c, 0, &ix)) || (s = need(c, 2, &vals)))
    return s;
  if (ix->dtype == AP_DT_STRING || ix->dtype == AP_DT_BOOL)
    return bad(c, "indices '%s' must be numeric, not %s", ix->name, ap_dtype_name(ix->dtype));
  if (vals->rank > 1 || (vals->rank == 1 && vals->dims[0] >= 0 && vals->dims[0] != 2))
    return bad(c, "values input '%s' must hold two elements (off, on)", vals->name);
  if (ix->rank < 0)
    return set_out(c, 0, vals->dtype, &(shp){.rank = -1});
  if (ix->rank + 1 > AP_MAX_RANK)
    return bad(c, "rank %d exceeds %d", ix->rank + 1, AP_MAX_RANK);
  int axis;
  int64_t depth;
  bool known;
  if ((s = ap_one_hot_params(c->g, c->n, ix->rank, &axis, &depth, &known, c->d)))
    return s;
  shp o;
  shp_of(ix, &o);
  o.rank = 0;
  for (int i = 0; i <= ix->rank; i++)
    if (i == axis)
      shp_dim(&o, o.rank++, known ? depth : -1, NULL);
    else
      shp_dim(&o, o.rank++, ix->dims[i - (i > axis)], ix->sym[i - (i > axis)]);
  return set_out(c, 0, vals->dtype, &o);
}

/* GatherElements, GatherND, ScatterElements, ScatterND. Constant indices
 * are checked here, once, as Gather's are: a program must not read or
 * write past its data. */

static ap_status index_dtype(const ctx *c, const ap_value *idx) {
  if (idx->dtype != AP_DT_UNDEFINED && idx->dtype != AP_DT_INT64 && idx->dtype != AP_DT_INT32)
    return bad(c, "indices '%s' must be int32 or int64, not %s", idx->name,
               ap_dtype_name(idx->dtype));
  return AP_OK;
}

/* Component t of every tuple of `width` constant indices must lie in
 * [-dim, dim) (negative ones count from the end). */
static ap_status check_indices(const ctx *c, const ap_value *idx, int width, int t, int64_t dim,
                               int axis, const ap_value *x) {
  if (!idx->data || dim < 0)
    return AP_OK;
  ap_tensor v = ap_value_tensor(idx);
  for (int64_t j = t; j < v.numel; j += width) {
    int64_t k = ap_tensor_get_i64(&v, j);
    if (k < -dim || k >= dim)
      return bad(c, "index %lld at position %lld of indices '%s' is outside axis %d of '%s' "
                    "(%lld entries)",
                 (long long)k, (long long)j, idx->name, axis, x->name, (long long)dim);
  }
  return AP_OK;
}

ap_status ap_scatter_reduction_of(ap_graph *g, ap_node *n, ap_scatter_reduction *r,
                                  ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  static const struct {
    const char *name;
    ap_scatter_reduction r;
    int opset;
  } kinds[] = {{"none", AP_SCATTER_NONE, 0}, {"add", AP_SCATTER_ADD, 16},
               {"mul", AP_SCATTER_MUL, 16}, {"max", AP_SCATTER_MAX, 18},
               {"min", AP_SCATTER_MIN, 18}};
  const char *s = ap_attr_string(n, "reduction", "none");
  for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
    if (strcmp(s, kinds[i].name) != 0)
      continue;
    if (g->opset < kinds[i].opset)
      return bad(c, "reduction '%s' is defined from opset %d; the model's is %lld", s,
                 kinds[i].opset, (long long)g->opset);
    *r = kinds[i].r;
    return AP_OK;
  }
  return bad(c, "reduction '%s' is not none, add, mul, max or min", s);
}

/* GatherElements, ScatterElements: data, indices of data's rank spanning
 * at most data's dims off the axis, and ScatterElements' updates shaped as
 * the indices. *axis is -1 when a rank is not known. */
static ap_status elements_shapes(const ctx *c, int *axis) {
  ap_value *x, *idx, *upd = NULL;
  ap_status s;
  *axis = -1;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &idx)) || (s = index_dtype(c, idx)))
    return s;
  if (c->n->op == AP_OP_SCATTER_ELEMENTS) {
    ap_scatter_reduction r;
    if ((s = need(c, 2, &upd)) || (s = same_dtype(c, x, upd)) ||
        (s = ap_scatter_reduction_of(c->g, c->n, &r, c->d)))
      return s;
  }
  if (x->rank < 0 || idx->rank < 0)
    return AP_OK;
  if (x->rank == 0)
    return bad(c, "data '%s' must have rank 1 or more", x->name);
  if (idx->rank != x->rank)
    return bad(c, "indices '%s' have rank %d and data '%s' rank %d; they must be equal",
               idx->name, idx->rank, x->name, x->rank);
  int a;
  if ((s = norm_axis(c, "axis", ap_attr_int(c->n, "axis", 0), x->rank, &a)))
    return s;
  for (int i = 0; i < x->rank; i++)
    if (i != a && idx->dims[i] >= 0 && x->dims[i] >= 0 && idx->dims[i] > x->dims[i])
      return bad(c, "indices '%s' have %lld entries along axis %d, data '%s' only %lld",
                 idx->name, (long long)idx->dims[i], i, x->name, (long long)x->dims[i]);
  if (upd && upd->rank >= 0) {
    if (upd->rank != idx->rank)
      return bad(c, "updates '%s' must have the rank of indices '%s' (%d), not %d", upd->name,
                 idx->name, idx->rank, upd->rank);
    for (int i = 0; i < upd->rank; i++)
      if (upd->dims[i] >= 0 && idx->dims[i] >= 0 && upd->dims[i] != idx->dims[i])
        return bad(c, "updates '%s' and indices '%s' differ along axis %d (%lld, %lld)",
                   upd->name, idx->name, i, (long long)upd->dims[i], (long long)idx->dims[i]);
  }
  if ((s = check_indices(c, idx, 1, 0, x->dims[a], a, x)))
    return s;
  *axis = a;
  return AP_OK;
}

static ap_status infer_GATHER_ELEMENTS(const ctx *c) {
  int axis;
  ap_status s = elements_shapes(c, &axis);
  if (s)
    return s;
  shp o;
  shp_of(in(c, 1), &o);
  return set_out(c, 0, in(c, 0)->dtype, &o);
}

static ap_status infer_SCATTER_ELEMENTS(const ctx *c) {
  int axis;
  ap_status s = elements_shapes(c, &axis);
  if (s)
    return s;
  return copy_out(c, 0, in(c, 0), AP_DT_UNDEFINED);
}

ap_status ap_gather_nd_batch(ap_graph *g, ap_node *n, int *batch_dims, ap_diag *d) {
  ctx cc = {g, n, d}, *c = &cc;
  const ap_value *x = in(c, 0), *idx = in(c, 1);
  const ap_attr *b = ap_attr_find(n, "batch_dims");
  *batch_dims = 0;
  if (!b)
    return AP_OK;
  if (n->op != AP_OP_GATHER_ND || g->opset < 12)
    return bad(c, "attribute 'batch_dims' is GatherND's from opset 12");
  if (x && idx && x->rank >= 0 && idx->rank >= 0 &&
      (b->i < 0 || b->i >= x->rank || b->i >= idx->rank))
    return bad(c, "batch_dims %lld must be less than the ranks of data (%d) and indices (%d)",
               (long long)b->i, x->rank, idx->rank);
  if (b->i < 0 || b->i >= AP_MAX_RANK)
    return bad(c, "batch_dims %lld is out of range", (long long)b->i);
  *batch_dims = (int)b->i;
  return AP_OK;
}

/* GatherND, ScatterND: data [B..., D...], indices [B..., M..., k] whose
 * tuples index k axes of D; *width is k, -1 when not known. The gathered
 * (or scattered) shape is indices' dims but the last, then data's from
 * axis B + k on, into o when not NULL. */
static ap_status nd_shapes(const ctx *c, int *width, shp *o) {
  ap_value *x, *idx;
  ap_status s;
  int b;
  *width = -1;
  if ((s = need(c, 0, &x)) || (s = need(c, 1, &idx)) || (s = index_dtype(c, idx)) ||
      (s = ap_gather_nd_batch(c->g, c->n, &b, c->d)))
    return s;
  if (o)
    shp_unknown(o);
  if (x->rank < 0 || idx->rank < 0)
    return AP_OK;
  if (x->rank == 0 || idx->rank == 0)
    return bad(c, "data '%s' and indices '%s' must have rank 1 or more", x->name, idx->name);
  int64_t k = idx->dims[idx->rank - 1];
  if (k < 0)
    return bad(c, "the last dim of indices '%s' (the tuples' length) must be known",
               idx->name);
  if (k < 1 || k > x->rank - b)
    return bad(c, "indices '%s' index %lld axes of data '%s' of rank %d (batch_dims %d)",
               idx->name, (long long)k, x->name, x->rank, b);
  for (int i = 0; i < b; i++)
    if (x->dims[i] >= 0 && idx->dims[i] >= 0 && x->dims[i] != idx->dims[i])
      return bad(c, "batch axis %d of data '%s' (%lld) and indices '%s' (%lld) differ", i,
                 x->name, (long long)x->dims[i], idx->name, (long long)idx->dims[i]);
  for (int t = 0; t < k; t++)
    if ((s = check_indices(c, idx, (int)k, t, x->dims[b + t], b + t, x)))
      return s;
  if (o) {
    o->rank = idx->rank - 1 + x->rank - b - (int)k;
    if (o->rank > AP_MAX_RANK)
      return bad(c, "the output would have rank %d; at most %d is supported", o->rank,
                 AP_MAX_RANK);
    int j = 0;
    for (int i = 0; i < idx->rank - 1; i++, j++)
      shp_dim(o, j, idx->dims[i], idx->sym[i]);
    for (int i = b + (int)k; i < x->rank; i++, j++)
      shp_dim(o, j, x->dims[i], x->sym[i]);
  }
  *width = (int)k;
  return AP_OK;
}

static ap_status infer_GATHER_ND(const ctx *c) {
  int width;
  shp o;
  ap_status s = nd_shapes(c, &width, &o);
  if (s)
    return s;
  return set_out(c, 0, in(c, 0)->dtype, &o);
}

static ap_status infer_SCATTER_ND(const ctx *c) {
  int width;
  shp o;
  ap_value *x = in(c, 0), *upd;
  ap_scatter_reduction r;
  ap_status s = nd_shapes(c, &width, &o);
  if (s || (s = need(c, 2, &upd)) || (s = same_dtype(c, x, upd)) ||
      (s = ap_scatter_reduction_of(c->g, c->n, &r, c->d)))
    return s;
  if (width >= 0 && upd->rank >= 0) {
    bool fits = upd->rank == o.rank;
    for (int i = 0; fits && i < o.rank; i++)
      fits = upd->dims[i] < 0 || o.dims[i] < 0 || upd->dims[i] == o.dims[i];
    if (!fits)
      return bad(c, "updates '%s' must be shaped as indices '%s' without their last dim, "
                    "then data '%s' from axis %d on",
                 upd->name, in(c, 1)->name, x->name, width);
  }
  return copy_out(c, 0, x, AP_DT_UNDEFINED);
}

/* ---- constants and metadata --------------------------------------------- */

static ap_status infer_CONSTANT(const ctx *c) {
  if (c->n->n_attr != 1)
    return bad(c, "exactly one value attribute is required, found %d", c->n->n_attr);
  const ap_attr *a = &c->n->attr[0];
  shp o;
  shp_unknown(&o);
  o.rank = 0;
  ap_dtype dt;
  if (strcmp(a->name, "value") == 0 && a->type == AP_ATTR_TENSOR && a->t) {
    dt = a->t->dtype;
    o.rank = a->t->rank;
    for (int i = 0; i < o.rank && i < AP_MAX_RANK; i++)
      shp_dim(&o, i, a->t->dims[i], NULL);
  } else if (strcmp(a->name, "value_float") == 0 && a->type == AP_ATTR_FLOAT) {
    dt = AP_DT_FLOAT;
  } else if (strcmp(a->name, "value_int") == 0 && a->type == AP_ATTR_INT) {
    dt = AP_DT_INT64;
  } else if (strcmp(a->name, "value_string") == 0 && a->type == AP_ATTR_STRING) {
    dt = AP_DT_STRING;
  } else if (strcmp(a->name, "value_floats") == 0 && a->type == AP_ATTR_FLOATS) {
    dt = AP_DT_FLOAT;
    shp_dim(&o, (o.rank = 1) - 1, a->n, NULL);
  } else if (strcmp(a->name, "value_ints") == 0 && a->type == AP_ATTR_INTS) {
    dt = AP_DT_INT64;
    shp_dim(&o, (o.rank = 1) - 1, a->n, NULL);
  } else if (strcmp(a->name, "value_strings") == 0 && a->type == AP_ATTR_STRINGS) {
    dt = AP_DT_STRING;
    shp_dim(&o, (o.rank = 1) - 1, a->n, NULL);
  } else if (strcmp(a->name, "sparse_value") == 0) {
    return ap_error(c->d, AP_ERR_UNSUPPORTED, c->g->path, c->n->name, c->n->op_type,
                    "sparse constants are not supported");
  } else {
    return bad(c, "attribute '%s' is not a constant value of the right type", a->name);
  }
  return set_out(c, 0, dt, &o);
}

/* The dtype and value of ConstantOfShape's 'value' attribute (float 0 when
 * absent); a malformed attribute is reported. */
ap_status ap_constant_of_shape_value(ap_graph *g, ap_node *n, ap_tensor *value, ap_diag *d) {
  static const float zero = 0;
  ctx cc = {g, n, d};
  const ap_attr *a = ap_attr_find(n, "value");
  if (!a) {
    *value = (ap_tensor){.dtype = AP_DT_FLOAT, .rank = 1, .dims = {1}, .numel = 1,
                         .data = (void *)&zero};
    return AP_OK;
  }
  if (a->type != AP_ATTR_TENSOR || !a->t || a->t->numel != 1 || !a->t->data ||
      !ap_dtype_size(a->t->dtype))
    return bad(&cc, "attribute 'value' must be a one-element numeric tensor");
  *value = *a->t;
  return AP_OK;
}

static ap_status infer_CONSTANT_OF_SHAPE(const ctx *c) {
  ap_value *sv;
  ap_status s;
  ap_tensor value;
  if ((s = need(c, 0, &sv)) ||
      (s = ap_constant_of_shape_value(c->g, c->n, &value, c->d)))
    return s;
  int64_t target[AP_MAX_RANK];
  int n;
  bool known;
  if ((s = const_ints(c, sv, target, AP_MAX_RANK, &n, &known)))
    return s;
  shp o;
  shp_unknown(&o);
  if (!known) {
    if (sv->rank != 1 || sv->dims[0] < 0)
      return bad(c, "shape input '%s' must be a constant", sv->name);
    o.rank = (int)(sv->dims[0] <= AP_MAX_RANK ? sv->dims[0] : AP_MAX_RANK + 1);
    return set_out(c, 0, value.dtype, &o);
  }
  o.rank = n;
  for (int i = 0; i < n; i++) {
    if (target[i] < 0)
      return bad(c, "shape[%d] = %lld is negative", i, (long long)target[i]);
    shp_dim(&o, i, target[i], NULL);
  }
  return set_out(c, 0, value.dtype, &o);
}

/* Shape's [start, end) range of dims (opset 15), clamped to [0, rank]. */
void ap_shape_range(const ap_node *n, int rank, int *start, int *end) {
  int64_t s = ap_attr_int(n, "start", 0), e = ap_attr_int(n, "end", rank);
  if (s < 0)
    s += rank;
  if (e < 0)
    e += rank;
  s = s < 0 ? 0 : s > rank ? rank : s;
  e = e < 0 ? 0 : e > rank ? rank : e;
  *start = (int)s;
  *end = (int)(e < s ? s : e);
}

static ap_status infer_SHAPE(const ctx *c) {
  ap_value *x;
  ap_status s;
  if ((s = need(c, 0, &x)))
    return s;
  shp o;
  shp_unknown(&o);
  o.rank = 1;
  if (x->rank >= 0) {
    int start, end;
    ap_shape_range(c->n, x->rank, &start, &end);
    shp_dim(&o, 0, end - start, NULL);
  }
  return set_out(c, 0, AP_DT_INT64, &o);
}

static ap_status infer_SIZE(const ctx *c) {
  ap_value *x;
  ap_status s = need(c, 0, &x);
  return s ? s : set_out(c, 0, AP_DT_INT64, &(shp){.rank = 0});
}

/* Range's element count, max(ceil((limit - start) / delta), 0). */
ap_status ap_range_count(ap_graph *g, ap_node *n, double start, double limit, double delta,
                         int64_t *count, ap_diag *d) {
  ctx cc = {g, n, d};
  if (delta == 0 || delta != delta)
    return bad(&cc, "delta must be non-zero");
  double q = (limit - start) / delta;
  if (q != q || q > (double)(1LL << 40))
    return bad(&cc, "the range has too many elements");
  if (q <= 0) {
    *count = 0;
    return AP_OK;
  }
  int64_t k = (int64_t)q;
  if ((double)k < q)
    k++;
  *count = k;
  return AP_OK;
}

static ap_status infer_RANGE(const ctx *c) {
  ap_value *v[3];
  ap_status s;
  double p[3];
  bool all = true;
  for (int i = 0; i < 3; i++) {
    if ((s = need(c, i, &v[i])))
      return s;
    if (v[i]->rank > 1 || (v[i]->rank == 1 && v[i]->dims[0] != 1 && v[i]->dims[0] >= 0))
      return bad(c, "input '%s' must be a scalar", v[i]->name);
    if (i && (s = same_dtype(c, v[0], v[i])))
      return s;
    if (v[i]->data) {
      ap_tensor t = ap_value_tensor(v[i]);
      p[i] = ap_tensor_get_f64(&t, 0);
    } else {
      all = false;
    }
  }
  shp o;
  shp_unknown(&o);
  o.rank = 1;
  if (all && (s = ap_range_count(c->g, c->n, p[0], p[1], p[2], &o.dims[0], c->d)))
    return s;
  return set_out(c, 0, v[0]->dtype, &o);
}

/* ---- the table and the pass --------------------------------------------- */

typedef ap_status (*infer_fn)(const ctx *);

static const infer_fn infer_table[] = {
#define OP(id, ...) [AP_OP_##id] = infer_##id,
#include "ir/ops.def"
#undef OP
};
static_assert(sizeof infer_table / sizeof *infer_table == AP_OP_COUNT,
              "one shape function per operator in ops.def");

ap_status ap_infer_node(ap_graph *g, int node, ap_diag *d) {
  ap_node *n = &g->nodes[node];
  if (n->dead)
    return AP_OK;
  if (n->op >= AP_OP_COUNT)
    return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                    "operator not supported");
  ctx c = {g, n, d};
  for (int i = 0; i < n->n_in; i++) {
    ap_value *v = in(&c, i);
    if (v && v->non_tensor)
      return ap_error(d, AP_ERR_UNSUPPORTED, g->path, n->name, n->op_type,
                      "input '%s' is a %s; only tensors are supported", v->name,
                      v->non_tensor);
  }
  return infer_table[n->op](&c);
}

ap_status ap_infer_shapes(ap_graph *g, ap_diag *d) {
  for (int i = 0; i < g->n_nodes; i++) {
    ap_status s = ap_infer_node(g, i, d);
    if (s)
      return s;
  }
  return AP_OK;
}
