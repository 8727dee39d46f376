/* Element-wise operators: unary maps, casts, and n-ary operators with
 * numpy-style (multidirectional) broadcasting. Integer arithmetic wraps in
 * the element type, as numpy and the folding pass do; integer division
 * truncates toward zero; float-to-integer casts truncate and saturate. */
#include <string.h>

#include "codegen/codegen.h"

/* The C math function for a float or double operand: "exp" -> "expf". */
static const char *fn(const cg_operand *o, const char *name, char *buf) {
  snprintf(buf, 32, "%s%s", name, o->dtype == AP_DT_FLOAT ? "f" : "");
  return buf;
}

static ap_status need_float(cg_kernel *k, const cg_operand *o) {
  if (o->dtype != AP_DT_FLOAT && o->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(o->dtype));
  return AP_OK;
}

static bool same_dims(const cg_operand *a, const cg_operand *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return true;
}

void cg_map(cg_kernel *k, int out, int n_args, const int *slots, const char *expr) {
  const cg_operand *y = &k->out[out];
  bool flat = true;
  for (int j = 0; j < n_args; j++) {
    const cg_operand *x = &k->in[slots[j]];
    flat &= x->numel == 1 || same_dims(x, y);
  }
  if (flat || y->rank == 0) {
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++) {\n", (long long)y->numel);
    for (int j = 0; j < n_args; j++) {
      const cg_operand *x = &k->in[slots[j]];
      cg_printf(k, "const %s a%d = x%d[%s];\n", cg_ctype(x->dtype), j, slots[j],
                x->numel == 1 ? "0" : "i");
    }
    cg_printf(k, "y%d[i] = %s;\n}\n", out, expr);
    return;
  }
  cg_printf(k, "int64_t o = 0;\n");
  cg_loops_open(k, y->rank, y->box.size, "i");
  for (int j = 0; j < n_args; j++) {
    const cg_operand *x = &k->in[slots[j]];
    int64_t st[AP_MAX_RANK];
    char idx[512];
    cg_broadcast_strides(x, y->rank, st);
    cg_printf(k, "const %s a%d = x%d[%s];\n", cg_ctype(x->dtype), j, slots[j],
              cg_index(idx, sizeof idx, y->rank, st, "i"));
  }
  cg_printf(k, "y%d[o++] = %s;\n", out, expr);
  cg_loops_close(k, y->rank);
}

static ap_status emit_unary(cg_kernel *k, const char *expr) {
  int slot = 0;
  cg_map(k, 0, 1, &slot, expr);
  return AP_OK;
}

/* A unary operator on float32/float64 only: expr is "<pre><fn>(a0)<post>"
 * with fn the C math function for the element type. */
static ap_status float_unary(cg_kernel *k, const char *pre, const char *name, const char *post) {
  ap_status s = need_float(k, &k->in[0]);
  if (s != AP_OK)
    return s;
  char f[32], expr[256];
  if (snprintf(expr, sizeof expr, "%s%s(%sa0)%s", pre, fn(&k->in[0], name, f),
               strcmp(name, "exp") == 0 && *pre ? "-" : "", post) >=
      (int)sizeof expr)
    ap_die("expression too long");
  return emit_unary(k, expr);
}

ap_status cg_emit_RELU(cg_kernel *k) { return emit_unary(k, "a0 > 0 ? a0 : 0"); }

ap_status cg_emit_SIGMOID(cg_kernel *k) {
  bool f = k->in[0].dtype == AP_DT_FLOAT;
  return float_unary(k, f ? "1.0f / (1.0f + " : "1.0 / (1.0 + ", "exp", ")");
}

ap_status cg_emit_TANH(cg_kernel *k) { return float_unary(k, "", "tanh", ""); }
ap_status cg_emit_EXP(cg_kernel *k) { return float_unary(k, "", "exp", ""); }
ap_status cg_emit_LOG(cg_kernel *k) { return float_unary(k, "", "log", ""); }
ap_status cg_emit_SQRT(cg_kernel *k) { return float_unary(k, "", "sqrt", ""); }
ap_status cg_emit_ERF(cg_kernel *k) { return float_unary(k, "", "erf", ""); }

ap_status cg_emit_RECIPROCAL(cg_kernel *k) {
  ap_status s = need_float(k, &k->in[0]);
  return s != AP_OK ? s : emit_unary(k, k->in[0].dtype == AP_DT_FLOAT ? "1.0f / a0" : "1.0 / a0");
}

ap_status cg_emit_GELU(cg_kernel *k) {
  ap_status s = need_float(k, &k->in[0]);
  if (s != AP_OK)
    return s;
  const char *approx = ap_attr_string(k->n, "approximate", "none");
  const char *ct = cg_ctype(k->out[0].dtype);
  char expr[256];
  /* Computed in double and rounded once: the reference is float64 numpy. */
  if (strcmp(approx, "tanh") == 0)
    snprintf(expr, sizeof expr,
             "(%s)(0.5 * a0 * (1.0 + tanh(0x1.9884533d43651p-1 * ((double)a0 + 0.044715 * "
             "(double)a0 * a0 * a0))))",
             ct);
  else if (strcmp(approx, "none") == 0)
    snprintf(expr, sizeof expr, "(%s)(0.5 * a0 * (1.0 + erf((double)a0 * 0x1.6a09e667f3bcdp-1)))",
             ct);
  else
    return cg_error(k, AP_ERR_INVALID, "approximate must be 'none' or 'tanh', not '%s'", approx);
  return emit_unary(k, expr);
}

ap_status cg_emit_NEG(cg_kernel *k) {
  if (k->in[0].dtype == AP_DT_FLOAT || k->in[0].dtype == AP_DT_DOUBLE)
    return emit_unary(k, "-a0");
  char expr[128];
  snprintf(expr, sizeof expr, "(%s)(0u - (uint64_t)a0)", cg_ctype(k->in[0].dtype));
  return emit_unary(k, expr);
}

ap_status cg_emit_ABS(cg_kernel *k) {
  if (k->in[0].dtype == AP_DT_FLOAT || k->in[0].dtype == AP_DT_DOUBLE) {
    char f[32], expr[64];
    snprintf(expr, sizeof expr, "%s(a0)", fn(&k->in[0], "fabs", f));
    return emit_unary(k, expr);
  }
  if (cg_dtype_is_unsigned(k->in[0].dtype))
    return emit_unary(k, "a0");
  char expr[128];
  snprintf(expr, sizeof expr, "a0 < 0 ? (%s)(0u - (uint64_t)a0) : a0", cg_ctype(k->in[0].dtype));
  return emit_unary(k, expr);
}

/* The conversion of a0 from type from to type to, as an expression. */
static void cast_expr(ap_dtype from, ap_dtype to, char *buf, size_t cap) {
  const char *ct = cg_ctype(to);
  bool from_float = from == AP_DT_FLOAT || from == AP_DT_DOUBLE;
  if (to == AP_DT_BOOL) {
    snprintf(buf, cap, "(uint8_t)(a0 != 0)");
  } else if (from_float && to != AP_DT_FLOAT && to != AP_DT_DOUBLE) {
    /* Saturating: an out-of-range conversion is undefined in C. */
    static const struct {
      ap_dtype t;
      const char *lo, *hi;
    } lim[] = {
        {AP_DT_INT8, "-128.0", "127.0"},
        {AP_DT_UINT8, "0.0", "255.0"},
        {AP_DT_INT16, "-32768.0", "32767.0"},
        {AP_DT_UINT16, "0.0", "65535.0"},
        {AP_DT_INT32, "-2147483648.0", "2147483647.0"},
        {AP_DT_UINT32, "0.0", "4294967295.0"},
        {AP_DT_INT64, "-9223372036854775808.0", "9223372036854775807.0"},
        {AP_DT_UINT64, "0.0", "18446744073709551615.0"},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
      if (lim[i].t == to) {
        const char *max = to == AP_DT_INT64 ? "INT64_MAX" : to == AP_DT_UINT64 ? "UINT64_MAX"
                                                                               : NULL;
        if (max)
          snprintf(buf, cap, "a0 != a0 ? 0 : (double)a0 <= %s ? (%s)%s : (double)a0 >= %s ? %s : (%s)a0",
                   lim[i].lo, ct, lim[i].lo, lim[i].hi, max, ct);
        else
          snprintf(buf, cap, "a0 != a0 ? 0 : (double)a0 <= %s ? (%s)%s : (double)a0 >= %s ? (%s)%s : (%s)a0",
                   lim[i].lo, ct, lim[i].lo, lim[i].hi, ct, lim[i].hi, ct);
        return;
      }
  }
  snprintf(buf, cap, "(%s)a0", ct);
}

ap_status cg_emit_CAST(cg_kernel *k) {
  char expr[512];
  cast_expr(k->in[0].dtype, k->out[0].dtype, expr, sizeof expr);
  return emit_unary(k, expr);
}

ap_status cg_emit_CAST_LIKE(cg_kernel *k) {
  k->skip_in |= 1u << 1; /* only its element type matters */
  return cg_emit_CAST(k);
}

ap_status cg_emit_IDENTITY(cg_kernel *k) {
  k->alias_in = 0;
  return AP_OK;
}

/* Inference: the identity, and a mask of all true when one is asked for
 * (the ratio and training_mode inputs are ignored: DESIGN.md, Execution
 * model). */
ap_status cg_emit_DROPOUT(cg_kernel *k) {
  k->skip_in |= ~(uint64_t)1;
  if (!k->out[1].v) {
    k->alias_in = 0;
    return AP_OK;
  }
  cg_printf(k, "memcpy(y0, x0, %lld);\nmemset(y1, 1, %lld);\n",
            (long long)(k->out[0].numel * (int64_t)ap_dtype_size(k->out[0].dtype)),
            (long long)k->out[1].numel);
  return AP_OK;
}

/* Clip's bound into buf: a literal when constant, "x<slot>[0]" when fed at
 * run time, "" when absent. */
static ap_status clip_bound(cg_kernel *k, int slot, const char *attr, char *buf) {
  ap_dtype t = k->in[0].dtype;
  buf[0] = 0;
  if (cg_opset(k) < 11) {
    if (ap_attr_find(k->n, attr))
      cg_literal(buf, t, ap_attr_float(k->n, attr, 0));
    return AP_OK;
  }
  const cg_operand *b = &k->in[slot];
  if (!b->v)
    return AP_OK;
  if (b->numel != 1)
    return cg_error(k, AP_ERR_INVALID, "bound '%s' must hold one element", b->v->name);
  double v;
  if (cg_const_f64(b, 0, &v)) {
    cg_literal(buf, t, v);
    k->skip_in |= (uint64_t)1 << slot;
  } else {
    snprintf(buf, 64, "x%d[0]", slot);
  }
  return AP_OK;
}

/* numpy's clip: minimum(maximum(x, lo), hi), so hi wins when lo > hi. */
ap_status cg_emit_CLIP(cg_kernel *k) {
  char lo[64], hi[64], low[256], expr[1024];
  ap_status s;
  if ((s = clip_bound(k, 1, "min", lo)) || (s = clip_bound(k, 2, "max", hi)))
    return s;
  if (*lo)
    snprintf(low, sizeof low, "(a0 < %s ? %s : a0)", lo, lo);
  else
    snprintf(low, sizeof low, "a0");
  if (*hi)
    snprintf(expr, sizeof expr, "%s > %s ? %s : %s", low, hi, hi, low);
  else
    snprintf(expr, sizeof expr, "%s", low);
  return emit_unary(k, expr);
}

/* ---- binary and n-ary operators ------------------------------------------ */

static bool is_float(ap_dtype t) { return t == AP_DT_FLOAT || t == AP_DT_DOUBLE; }

/* a0 OP a1 in the output type, wrapping for integers. */
static ap_status arith(cg_kernel *k, char op) {
  ap_dtype t = k->out[0].dtype;
  const char *ct = cg_ctype(t);
  char expr[256];
  if (is_float(t))
    snprintf(expr, sizeof expr, "a0 %c a1", op);
  else if (op == '/')
    snprintf(expr, sizeof expr, "a1 ? (%s)(a0 / a1) : 0", ct); /* x/0: 0, never a trap */
  else
    snprintf(expr, sizeof expr, "(%s)((uint64_t)a0 %c (uint64_t)a1)", ct, op);
  int slots[2] = {0, 1};
  cg_map(k, 0, 2, slots, expr);
  return AP_OK;
}

ap_status cg_emit_ADD(cg_kernel *k) { return arith(k, '+'); }
ap_status cg_emit_SUB(cg_kernel *k) { return arith(k, '-'); }
ap_status cg_emit_MUL(cg_kernel *k) { return arith(k, '*'); }
ap_status cg_emit_DIV(cg_kernel *k) { return arith(k, '/'); }

ap_status cg_emit_POW(cg_kernel *k) {
  char expr[256];
  ap_dtype t = k->out[0].dtype;
  if (t == AP_DT_FLOAT && k->in[1].dtype == AP_DT_FLOAT)
    snprintf(expr, sizeof expr, "powf(a0, a1)");
  else
    snprintf(expr, sizeof expr, "(%s)pow((double)a0, (double)a1)", cg_ctype(t));
  int slots[2] = {0, 1};
  cg_map(k, 0, 2, slots, expr);
  return AP_OK;
}

static ap_status compare(cg_kernel *k, const char *op) {
  char expr[64];
  snprintf(expr, sizeof expr, "(uint8_t)(a0 %s a1)", op);
  int slots[2] = {0, 1};
  cg_map(k, 0, 2, slots, expr);
  return AP_OK;
}

ap_status cg_emit_LESS(cg_kernel *k) { return compare(k, "<"); }
ap_status cg_emit_GREATER(cg_kernel *k) { return compare(k, ">"); }
ap_status cg_emit_EQUAL(cg_kernel *k) { return compare(k, "=="); }

ap_status cg_emit_WHERE(cg_kernel *k) {
  int slots[3] = {0, 1, 2};
  cg_map(k, 0, 3, slots, "a0 ? a1 : a2");
  return AP_OK;
}

/* Sum, Max, Min over any number of broadcast inputs, folded left to right;
 * ap_max_<type>/ap_min_<type> are defined once in kernels.c. */
static ap_status variadic(cg_kernel *k, char which) {
  ap_dtype t = k->out[0].dtype;
  const char *ct = cg_ctype(t);
  int slots[CG_MAX_OPERANDS], n = 0;
  for (int i = 0; i < k->n_in; i++)
    if (k->in[i].v)
      slots[n++] = i;
  char acc[8192] = "a0", next[8192];
  int w;
  for (int j = 1; j < n; j++) {
    if (which == '+' && is_float(t))
      w = snprintf(next, sizeof next, "%s + a%d", acc, j);
    else if (which == '+')
      w = snprintf(next, sizeof next, "(%s)((uint64_t)(%s) + (uint64_t)a%d)", ct, acc, j);
    else
      w = snprintf(next, sizeof next, "ap_%s_%s(%s, a%d)", which == '>' ? "max" : "min", ct,
                   acc, j);
    if (w < 0 || w >= (int)sizeof next)
      return cg_error(k, AP_ERR_UNSUPPORTED, "too many inputs (%d)", n);
    memcpy(acc, next, sizeof acc);
  }
  cg_map(k, 0, n, slots, acc);
  return AP_OK;
}

ap_status cg_emit_SUM(cg_kernel *k) { return variadic(k, '+'); }
ap_status cg_emit_MAX(cg_kernel *k) { return variadic(k, '>'); }
ap_status cg_emit_MIN(cg_kernel *k) { return variadic(k, '<'); }
