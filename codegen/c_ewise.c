/* Element-wise operators: unary maps, casts, and n-ary operators with
 * numpy-style (multidirectional) broadcasting. Integer arithmetic wraps in
 * the element type, as numpy and the folding pass do; integer division
 * truncates toward zero; float-to-integer casts truncate and saturate. */
#include <string.h>

#include "codegen/codegen.h"

static ap_status need_float(cg_kernel *k, const cg_operand *o) {
  if (o->dtype != AP_DT_FLOAT && o->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "element type %s is not supported (float32, float64)",
                    ap_dtype_name(o->dtype));
  return AP_OK;
}

static bool same_dims(const cg_operand *a, const cg_operand *b) {
  return ap_dims_equal(a->rank, a->dims, b->rank, b->dims);
}

void cg_map_begin(cg_kernel *k, int out, int n_args, const int *slots) {
  const cg_operand *y = &k->out[out];
  bool flat = true;
  for (int j = 0; j < n_args; j++) {
    const cg_operand *x = &k->in[slots[j]];
    flat &= x->numel == 1 || same_dims(x, y);
  }
  k->map_out = out;
  k->map_n = n_args;
  if (flat || y->rank == 0) {
    int i = cg_for_n(k, "i", y->numel);
    for (int j = 0; j < n_args; j++) {
      const cg_operand *x = &k->in[slots[j]];
      k->map_arg[j] = cg_let(k, "a", cg_ld(k, cg_in(k, slots[j]),
                                           x->numel == 1 ? cg_i64(k, 0) : cg_v(k, i)));
    }
    k->map_o = i;
    k->map_loops = 0;
    return;
  }
  k->map_o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
  int iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  for (int j = 0; j < n_args; j++) {
    const cg_operand *x = &k->in[slots[j]];
    int64_t st[AP_MAX_RANK];
    cg_broadcast_strides(x, y->rank, st);
    k->map_arg[j] = cg_let(k, "a", cg_ld(k, cg_in(k, slots[j]), cg_idx(k, y->rank, st, iv)));
  }
  k->map_loops = y->rank;
}

cg_x *cg_map_arg(cg_kernel *k, int j) { return cg_v(k, k->map_arg[j]); }

void cg_map_end(cg_kernel *k, cg_x *x) {
  cg_st(k, cg_out(k, k->map_out), cg_v(k, k->map_o), x);
  if (k->map_loops) {
    cg_set_op(k, k->map_o, CG_X_ADD, cg_i64(k, 1));
    cg_loops_end(k, k->map_loops);
  } else {
    cg_end(k);
  }
}

/* y0 = f(a0) element by element. */
typedef cg_x *(*unary_fn)(cg_kernel *k, cg_x *a);

static ap_status emit_unary(cg_kernel *k, unary_fn f) {
  int slot = 0;
  cg_map_begin(k, 0, 1, &slot);
  cg_map_end(k, f(k, cg_map_arg(k, 0)));
  return AP_OK;
}

static cg_x *zero_of(cg_kernel *k, cg_x *a) { (void)a; return cg_int(k, 0); }

static cg_x *relu(cg_kernel *k, cg_x *a) {
  return cg_sel(k, cg_gt(k, a, zero_of(k, a)), a, zero_of(k, a));
}
static cg_x *sigmoid(cg_kernel *k, cg_x *a) {
  cg_x *one = a->ty == CG_T_F32 ? cg_f32(k, 1) : cg_f64(k, 1);
  return cg_div(k, one, cg_add(k, one, cg_fn1(k, CG_FN_EXP, cg_neg(k, a))));
}
static cg_x *tanh_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_TANH, a); }
static cg_x *exp_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_EXP, a); }
static cg_x *log_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_LOG, a); }
static cg_x *sqrt_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_SQRT, a); }
static cg_x *erf_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_ERF, a); }
static cg_x *reciprocal(cg_kernel *k, cg_x *a) {
  return cg_div(k, a->ty == CG_T_F32 ? cg_f32(k, 1) : cg_f64(k, 1), a);
}

/* A unary operator on float32/float64 only. */
static ap_status float_unary(cg_kernel *k, unary_fn f) {
  ap_status s = need_float(k, &k->in[0]);
  return s != AP_OK ? s : emit_unary(k, f);
}

ap_status cg_emit_RELU(cg_kernel *k) { return emit_unary(k, relu); }
ap_status cg_emit_SIGMOID(cg_kernel *k) { return float_unary(k, sigmoid); }
ap_status cg_emit_TANH(cg_kernel *k) { return float_unary(k, tanh_); }
ap_status cg_emit_EXP(cg_kernel *k) { return float_unary(k, exp_); }
ap_status cg_emit_LOG(cg_kernel *k) { return float_unary(k, log_); }
ap_status cg_emit_SQRT(cg_kernel *k) { return float_unary(k, sqrt_); }
ap_status cg_emit_ERF(cg_kernel *k) { return float_unary(k, erf_); }
ap_status cg_emit_RECIPROCAL(cg_kernel *k) { return float_unary(k, reciprocal); }

/* Computed in double and rounded once: the reference is float64 numpy. */
static cg_x *gelu_tanh(cg_kernel *k, cg_x *a) {
  cg_x *ad = cg_cast(k, CG_T_F64, a);
  cg_x *cube = cg_mul(k, cg_mul(k, cg_mul(k, cg_f64(k, 0.044715), ad), a), a);
  cg_x *u = cg_mul(k, cg_f64(k, 0x1.9884533d43651p-1), cg_add(k, ad, cube));
  return cg_cast(k, (cg_ty)a->ty,
                 cg_mul(k, cg_mul(k, cg_f64(k, 0.5), a),
                        cg_add(k, cg_f64(k, 1.0), cg_fnd(k, CG_FN_TANH, u))));
}
static cg_x *gelu_erf(cg_kernel *k, cg_x *a) {
  cg_x *u = cg_mul(k, cg_cast(k, CG_T_F64, a), cg_f64(k, 0x1.6a09e667f3bcdp-1));
  return cg_cast(k, (cg_ty)a->ty,
                 cg_mul(k, cg_mul(k, cg_f64(k, 0.5), a),
                        cg_add(k, cg_f64(k, 1.0), cg_fnd(k, CG_FN_ERF, u))));
}

ap_status cg_emit_GELU(cg_kernel *k) {
  ap_status s = need_float(k, &k->in[0]);
  if (s != AP_OK)
    return s;
  const char *approx = ap_attr_string(k->n, "approximate", "none");
  if (strcmp(approx, "tanh") == 0)
    return emit_unary(k, gelu_tanh);
  if (strcmp(approx, "none") == 0)
    return emit_unary(k, gelu_erf);
  return cg_error(k, AP_ERR_INVALID, "approximate must be 'none' or 'tanh', not '%s'", approx);
}

/* Integers negate in uint64 and wrap back to their type. */
static cg_x *neg_int(cg_kernel *k, cg_x *a) {
  return cg_cast(k, (cg_ty)a->ty, cg_sub(k, cg_const(k, CG_T_U32, 0), cg_cast(k, CG_T_U64, a)));
}

static cg_x *neg(cg_kernel *k, cg_x *a) { return cg_ty_float((cg_ty)a->ty) ? cg_neg(k, a) : neg_int(k, a); }

ap_status cg_emit_NEG(cg_kernel *k) { return emit_unary(k, neg); }

static cg_x *abs_(cg_kernel *k, cg_x *a) {
  if (cg_ty_float((cg_ty)a->ty))
    return cg_fn1(k, CG_FN_FABS, a);
  if (!cg_ty_signed((cg_ty)a->ty))
    return a;
  return cg_sel(k, cg_lt(k, a, cg_int(k, 0)), neg_int(k, a), a);
}

ap_status cg_emit_ABS(cg_kernel *k) { return emit_unary(k, abs_); }

/* The conversion of a from its type to to: to bool by comparing with
 * zero; float to integer saturating, since an out-of-range conversion is
 * undefined in C (NaN gives 0). */
static cg_x *cast_to(cg_kernel *k, cg_x *a, ap_dtype to) {
  cg_ty t = cg_ty_of(to);
  bool from_float = cg_ty_float((cg_ty)a->ty);
  if (to == AP_DT_BOOL)
    return cg_cast(k, CG_T_U8, cg_ne(k, a, cg_int(k, 0)));
  if (!from_float || cg_ty_float(t))
    return cg_cast(k, t, a);
  static const struct {
    ap_dtype t;
    double lo, hi;
  } lim[] = {
      {AP_DT_INT8, -128.0, 127.0},
      {AP_DT_UINT8, 0.0, 255.0},
      {AP_DT_INT16, -32768.0, 32767.0},
      {AP_DT_UINT16, 0.0, 65535.0},
      {AP_DT_INT32, -2147483648.0, 2147483647.0},
      {AP_DT_UINT32, 0.0, 4294967295.0},
      {AP_DT_INT64, -9223372036854775808.0, 9223372036854775807.0},
      {AP_DT_UINT64, 0.0, 18446744073709551615.0},
  };
  for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
    if (lim[i].t == to) {
      cg_x *d = cg_cast(k, CG_T_F64, a);
      cg_x *max = to == AP_DT_INT64   ? cg_i64(k, INT64_MAX)
                  : to == AP_DT_UINT64 ? cg_u64(k, UINT64_MAX)
                                       : cg_cast(k, t, cg_f64(k, lim[i].hi));
      cg_x *low = cg_cast(k, t, cg_f64(k, lim[i].lo));
      return cg_sel(k, cg_ne(k, a, a), cg_int(k, 0),
                    cg_sel(k, cg_le(k, d, cg_f64(k, lim[i].lo)), low,
                           cg_sel(k, cg_ge(k, cg_cast(k, CG_T_F64, a), cg_f64(k, lim[i].hi)), max,
                                  cg_cast(k, t, a))));
    }
  return cg_cast(k, t, a);
}

ap_status cg_emit_CAST(cg_kernel *k) {
  int slot = 0;
  cg_map_begin(k, 0, 1, &slot);
  cg_map_end(k, cast_to(k, cg_map_arg(k, 0), k->out[0].dtype));
  return AP_OK;
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
  cg_memcpy(k, cg_out(k, 0), cg_in(k, 0),
            cg_i64(k, k->out[0].numel * (int64_t)ap_dtype_size(k->out[0].dtype)));
  cg_memset(k, cg_out(k, 1), 1, cg_i64(k, k->out[1].numel));
  return AP_OK;
}

/* Clip's bound: a constant when it is one (or an attribute before opset
 * 11), the element of x<slot> when fed at run time, NULL when absent. */
static ap_status clip_bound(cg_kernel *k, int slot, const char *attr, cg_x **out) {
  ap_dtype t = k->in[0].dtype;
  *out = NULL;
  if (cg_opset(k) < 11) {
    if (ap_attr_find(k->n, attr))
      *out = cg_lit(k, t, ap_attr_float(k->n, attr, 0));
    return AP_OK;
  }
  const cg_operand *b = &k->in[slot];
  if (!b->v)
    return AP_OK;
  if (b->numel != 1)
    return cg_error(k, AP_ERR_INVALID, "bound '%s' must hold one element", b->v->name);
  double v;
  if (cg_const_f64(b, 0, &v)) {
    *out = cg_lit(k, t, v);
    k->skip_in |= (uint64_t)1 << slot;
  } else {
    *out = NULL;
    k->skip_in &= ~((uint64_t)1 << slot);
  }
  return AP_OK;
}

/* numpy's clip: minimum(maximum(x, lo), hi), so hi wins when lo > hi. */
ap_status cg_emit_CLIP(cg_kernel *k) {
  cg_x *lo, *hi;
  ap_status s;
  if ((s = clip_bound(k, 1, "min", &lo)) || (s = clip_bound(k, 2, "max", &hi)))
    return s;
  /* Fed bounds are read once, before the loop. */
  int lo_var = -1, hi_var = -1;
  if (!lo && cg_opset(k) >= 11 && k->in[1].v)
    lo_var = cg_let(k, "lo", cg_ldi(k, cg_in(k, 1), 0));
  if (!hi && cg_opset(k) >= 11 && k->in[2].v)
    hi_var = cg_let(k, "hi", cg_ldi(k, cg_in(k, 2), 0));
  int slot = 0;
  cg_map_begin(k, 0, 1, &slot);
  cg_x *x = cg_map_arg(k, 0);
  if (lo_var >= 0)
    lo = cg_v(k, lo_var);
  if (hi_var >= 0)
    hi = cg_v(k, hi_var);
  if (lo) {
    int low = cg_let(k, "low", cg_sel(k, cg_lt(k, x, lo), lo, x));
    x = cg_v(k, low);
    lo = NULL;
  }
  if (hi)
    x = cg_sel(k, cg_gt(k, x, hi), hi, x);
  cg_map_end(k, x);
  return AP_OK;
}

/* ---- binary and n-ary operators ------------------------------------------ */

static bool is_float(ap_dtype t) { return t == AP_DT_FLOAT || t == AP_DT_DOUBLE; }

/* a0 OP a1 in the output type, wrapping for integers (in uint64); integer
 * x/0 gives 0 rather than a trap. */
static ap_status arith(cg_kernel *k, cg_xop op) {
  ap_dtype t = k->out[0].dtype;
  cg_ty ct = cg_ty_of(t);
  int slots[2] = {0, 1};
  cg_map_begin(k, 0, 2, slots);
  cg_x *a = cg_map_arg(k, 0), *b = cg_map_arg(k, 1), *x;
  if (is_float(t))
    x = cg_bin(k, op, a, b);
  else if (op == CG_X_DIV)
    x = cg_sel(k, b, cg_cast(k, ct, cg_div(k, a, cg_map_arg(k, 1))), cg_int(k, 0));
  else
    x = cg_cast(k, ct, cg_bin(k, op, cg_cast(k, CG_T_U64, a), cg_cast(k, CG_T_U64, b)));
  cg_map_end(k, x);
  return AP_OK;
}

ap_status cg_emit_ADD(cg_kernel *k) { return arith(k, CG_X_ADD); }
ap_status cg_emit_SUB(cg_kernel *k) { return arith(k, CG_X_SUB); }
ap_status cg_emit_MUL(cg_kernel *k) { return arith(k, CG_X_MUL); }
ap_status cg_emit_DIV(cg_kernel *k) { return arith(k, CG_X_DIV); }

ap_status cg_emit_POW(cg_kernel *k) {
  ap_dtype t = k->out[0].dtype;
  int n_power;
  if (is_float(t) && cg_small_power(k, 1, &n_power)) {
    /* GELU's x^3, a variance's x^2: products, not pow. */
    int slot = 0;
    k->skip_in |= (uint64_t)1 << 1;
    cg_map_begin(k, 0, 1, &slot);
    cg_map_end(k, cg_power(k, cg_map_arg(k, 0), n_power));
    return AP_OK;
  }
  int slots[2] = {0, 1};
  cg_map_begin(k, 0, 2, slots);
  cg_x *a = cg_map_arg(k, 0), *b = cg_map_arg(k, 1);
  if (t == AP_DT_FLOAT && k->in[1].dtype == AP_DT_FLOAT)
    cg_map_end(k, cg_fn2(k, CG_FN_POW, a, b));
  else
    cg_map_end(k, cg_cast(k, cg_ty_of(t), cg_fn2(k, CG_FN_POW, cg_cast(k, CG_T_F64, a),
                                                 cg_cast(k, CG_T_F64, b))));
  return AP_OK;
}

static ap_status compare(cg_kernel *k, cg_xop op) {
  int slots[2] = {0, 1};
  cg_map_begin(k, 0, 2, slots);
  cg_map_end(k, cg_cast(k, CG_T_U8, cg_bin(k, op, cg_map_arg(k, 0), cg_map_arg(k, 1))));
  return AP_OK;
}

ap_status cg_emit_LESS(cg_kernel *k) { return compare(k, CG_X_LT); }
ap_status cg_emit_GREATER(cg_kernel *k) { return compare(k, CG_X_GT); }
ap_status cg_emit_EQUAL(cg_kernel *k) { return compare(k, CG_X_EQ); }

ap_status cg_emit_WHERE(cg_kernel *k) {
  int slots[3] = {0, 1, 2};
  cg_map_begin(k, 0, 3, slots);
  cg_map_end(k, cg_sel(k, cg_map_arg(k, 0), cg_map_arg(k, 1), cg_map_arg(k, 2)));
  return AP_OK;
}

/* Sum, Max, Min over any number of broadcast inputs, folded left to right. */
static ap_status variadic(cg_kernel *k, char which) {
  ap_dtype t = k->out[0].dtype;
  cg_ty ct = cg_ty_of(t);
  int slots[CG_MAX_OPERANDS] = {0}, n = 0;
  for (int i = 0; i < k->n_in; i++)
    if (k->in[i].v)
      slots[n++] = i;
  cg_map_begin(k, 0, n, slots);
  cg_x *acc = cg_map_arg(k, 0);
  for (int j = 1; j < n; j++) {
    cg_x *a = cg_map_arg(k, j);
    if (which == '+' && is_float(t))
      acc = cg_add(k, acc, a);
    else if (which == '+')
      acc = cg_cast(k, ct, cg_add(k, cg_cast(k, CG_T_U64, acc), cg_cast(k, CG_T_U64, a)));
    else
      acc = cg_minmax(k, which == '>', ct, acc, a);
  }
  cg_map_end(k, acc);
  return AP_OK;
}

ap_status cg_emit_SUM(cg_kernel *k) { return variadic(k, '+'); }
ap_status cg_emit_MAX(cg_kernel *k) { return variadic(k, '>'); }
ap_status cg_emit_MIN(cg_kernel *k) { return variadic(k, '<'); }

/* ---- activations, math functions, logic ------------------------------------ */

/* v as a constant of a's type. */
static cg_x *lit_of(cg_kernel *k, cg_x *a, double v) { return cg_const(k, (cg_ty)a->ty, v); }

static double attr_f(cg_kernel *k, const char *name, double dflt) {
  return ap_attr_float(k->n, name, (float)dflt);
}

/* The piecewise-linear activations compute in the element type, as their
 * references do; those with exp, log or tanh compute in double and round
 * once, as Gelu. */
static cg_x *leaky_relu(cg_kernel *k, cg_x *a) {
  return cg_sel(k, cg_lt(k, a, zero_of(k, a)), cg_mul(k, a, lit_of(k, a, attr_f(k, "alpha", 0.01))),
                a);
}
static cg_x *thresholded_relu(cg_kernel *k, cg_x *a) {
  return cg_sel(k, cg_gt(k, a, lit_of(k, a, attr_f(k, "alpha", 1.0))), a, zero_of(k, a));
}
/* max(0, min(1, alpha x + beta)), NaN passing through. */
static cg_x *hard_sigmoid_of(cg_kernel *k, cg_x *a, double alpha, double beta) {
  int v = cg_let(k, "v", cg_add(k, cg_mul(k, a, lit_of(k, a, alpha)), lit_of(k, a, beta)));
  return cg_sel(k, cg_lt(k, cg_v(k, v), zero_of(k, a)), lit_of(k, a, 0),
                cg_sel(k, cg_gt(k, cg_v(k, v), lit_of(k, a, 1)), lit_of(k, a, 1), cg_v(k, v)));
}
static cg_x *hard_sigmoid(cg_kernel *k, cg_x *a) {
  return hard_sigmoid_of(k, a, attr_f(k, "alpha", 0.2), attr_f(k, "beta", 0.5));
}
static cg_x *hard_swish(cg_kernel *k, cg_x *a) {
  return cg_mul(k, a, hard_sigmoid_of(k, a, 1.0 / 6, 0.5));
}
static cg_x *softsign(cg_kernel *k, cg_x *a) {
  return cg_div(k, a, cg_add(k, lit_of(k, a, 1), cg_fn1(k, CG_FN_FABS, a)));
}

static cg_x *in_double(cg_kernel *k, cg_x *a) { return cg_cast(k, CG_T_F64, a); }

static cg_x *elu(cg_kernel *k, cg_x *a) {
  cg_x *x = in_double(k, a);
  cg_x *neg = cg_mul(k, cg_f64(k, attr_f(k, "alpha", 1.0)),
                     cg_sub(k, cg_fnd(k, CG_FN_EXP, x), cg_f64(k, 1)));
  return cg_cast(k, (cg_ty)a->ty, cg_sel(k, cg_lt(k, x, cg_f64(k, 0)), neg, x));
}
/* The defaults are float32's roundings of SELU's constants, as ONNX's. */
static cg_x *selu(cg_kernel *k, cg_x *a) {
  double alpha = attr_f(k, "alpha", 1.67326319217681884765625),
         gamma = attr_f(k, "gamma", 1.05070102214813232421875);
  cg_x *x = in_double(k, a);
  cg_x *neg = cg_sub(k, cg_mul(k, cg_f64(k, alpha), cg_fnd(k, CG_FN_EXP, x)), cg_f64(k, alpha));
  return cg_cast(k, (cg_ty)a->ty,
                 cg_mul(k, cg_f64(k, gamma), cg_sel(k, cg_gt(k, x, cg_f64(k, 0)), x, neg)));
}
static cg_x *celu(cg_kernel *k, cg_x *a) {
  double alpha = attr_f(k, "alpha", 1.0);
  cg_x *x = in_double(k, a);
  cg_x *neg = cg_mul(k, cg_f64(k, alpha),
                     cg_sub(k, cg_fnd(k, CG_FN_EXP, cg_div(k, x, cg_f64(k, alpha))), cg_f64(k, 1)));
  return cg_cast(k, (cg_ty)a->ty, cg_sel(k, cg_gt(k, x, cg_f64(k, 0)), x, neg));
}
/* log(1 + e^x) without overflow: x + log(1 + e^-x) for positive x. */
static cg_x *softplus_d(cg_kernel *k, cg_x *x) {
  int v = cg_let(k, "v", x);
  cg_x *pos = cg_add(k, cg_v(k, v),
                     cg_fnd(k, CG_FN_LOG, cg_add(k, cg_f64(k, 1),
                                                 cg_fnd(k, CG_FN_EXP, cg_neg(k, cg_v(k, v))))));
  cg_x *neg = cg_fnd(k, CG_FN_LOG, cg_add(k, cg_f64(k, 1), cg_fnd(k, CG_FN_EXP, cg_v(k, v))));
  return cg_sel(k, cg_gt(k, cg_v(k, v), cg_f64(k, 0)), pos, neg);
}
static cg_x *softplus(cg_kernel *k, cg_x *a) {
  return cg_cast(k, (cg_ty)a->ty, softplus_d(k, in_double(k, a)));
}
static cg_x *mish(cg_kernel *k, cg_x *a) {
  cg_x *x = in_double(k, a);
  return cg_cast(k, (cg_ty)a->ty,
                 cg_mul(k, x, cg_fnd(k, CG_FN_TANH, softplus_d(k, x))));
}
static cg_x *sin_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_SIN, a); }
static cg_x *cos_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_COS, a); }
static cg_x *floor_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_FLOOR, a); }
static cg_x *ceil_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_CEIL, a); }
/* Halves to even, as numpy's round: rint in the default rounding mode. */
static cg_x *round_(cg_kernel *k, cg_x *a) { return cg_fn1(k, CG_FN_RINT, a); }

ap_status cg_emit_LEAKY_RELU(cg_kernel *k) { return float_unary(k, leaky_relu); }
ap_status cg_emit_THRESHOLDED_RELU(cg_kernel *k) { return float_unary(k, thresholded_relu); }
ap_status cg_emit_HARD_SIGMOID(cg_kernel *k) { return float_unary(k, hard_sigmoid); }
ap_status cg_emit_HARD_SWISH(cg_kernel *k) { return float_unary(k, hard_swish); }
ap_status cg_emit_SOFTSIGN(cg_kernel *k) { return float_unary(k, softsign); }
ap_status cg_emit_ELU(cg_kernel *k) { return float_unary(k, elu); }
ap_status cg_emit_SELU(cg_kernel *k) { return float_unary(k, selu); }
ap_status cg_emit_CELU(cg_kernel *k) { return float_unary(k, celu); }
ap_status cg_emit_SOFTPLUS(cg_kernel *k) { return float_unary(k, softplus); }
ap_status cg_emit_MISH(cg_kernel *k) { return float_unary(k, mish); }
ap_status cg_emit_SIN(cg_kernel *k) { return float_unary(k, sin_); }
ap_status cg_emit_COS(cg_kernel *k) { return float_unary(k, cos_); }
ap_status cg_emit_FLOOR(cg_kernel *k) { return float_unary(k, floor_); }
ap_status cg_emit_CEIL(cg_kernel *k) { return float_unary(k, ceil_); }
ap_status cg_emit_ROUND(cg_kernel *k) { return float_unary(k, round_); }

/* -1, 0 or 1; NaN and signed zeros pass through for floats. */
static cg_x *sign(cg_kernel *k, cg_x *a) {
  return cg_sel(k, cg_gt(k, a, zero_of(k, a)), lit_of(k, a, 1),
                cg_sel(k, cg_lt(k, a, zero_of(k, a)), lit_of(k, a, -1),
                       cg_ty_float((cg_ty)a->ty) ? a : zero_of(k, a)));
}
ap_status cg_emit_SIGN(cg_kernel *k) { return emit_unary(k, sign); }

static cg_x *is_nan(cg_kernel *k, cg_x *a) { return cg_cast(k, CG_T_U8, cg_ne(k, a, a)); }
ap_status cg_emit_IS_NAN(cg_kernel *k) { return float_unary(k, is_nan); }

/* Beyond the largest finite value of the type: an infinity (never NaN). */
static cg_x *is_inf(cg_kernel *k, cg_x *a) {
  double max = a->ty == CG_T_F32 ? 0x1.fffffep+127 : 0x1.fffffffffffffp+1023;
  bool pos = ap_attr_int(k->n, "detect_positive", 1) != 0,
       neg = ap_attr_int(k->n, "detect_negative", 1) != 0;
  cg_x *c = pos && neg ? cg_gt(k, cg_fn1(k, CG_FN_FABS, a), lit_of(k, a, max))
            : pos      ? cg_gt(k, a, lit_of(k, a, max))
            : neg      ? cg_lt(k, a, lit_of(k, a, -max))
                       : cg_ne(k, cg_int(k, 0), cg_int(k, 0));
  return cg_cast(k, CG_T_U8, c);
}
ap_status cg_emit_IS_INF(cg_kernel *k) { return float_unary(k, is_inf); }

static cg_x *not_(cg_kernel *k, cg_x *a) { return cg_cast(k, CG_T_U8, cg_not(k, a)); }
ap_status cg_emit_NOT(cg_kernel *k) { return emit_unary(k, not_); }

ap_status cg_emit_GREATER_OR_EQUAL(cg_kernel *k) { return compare(k, CG_X_GE); }
ap_status cg_emit_LESS_OR_EQUAL(cg_kernel *k) { return compare(k, CG_X_LE); }
ap_status cg_emit_AND(cg_kernel *k) { return compare(k, CG_X_AND); }
ap_status cg_emit_OR(cg_kernel *k) { return compare(k, CG_X_OR); }

ap_status cg_emit_XOR(cg_kernel *k) {
  int slots[2] = {0, 1};
  cg_map_begin(k, 0, 2, slots);
  cg_map_end(k, cg_cast(k, CG_T_U8, cg_ne(k, cg_not(k, cg_map_arg(k, 0)),
                                          cg_not(k, cg_map_arg(k, 1)))));
  return AP_OK;
}

/* Floats: C's fmod (ONNX requires fmod = 1 for them). Integers: the
 * truncated remainder, moved to the divisor's sign unless fmod; x mod 0
 * gives 0 rather than a trap, and x mod -1 is 0 (C leaves INT_MIN % -1
 * undefined). */
ap_status cg_emit_MOD(cg_kernel *k) {
  ap_dtype t = k->out[0].dtype;
  cg_ty ct = cg_ty_of(t);
  bool fmod_ = ap_attr_int(k->n, "fmod", 0) != 0;
  int slots[2] = {0, 1};
  cg_map_begin(k, 0, 2, slots);
  cg_x *a = cg_map_arg(k, 0), *b = cg_map_arg(k, 1);
  if (is_float(t)) {
    cg_map_end(k, cg_fn2(k, CG_FN_FMOD, a, b));
    return AP_OK;
  }
  if (cg_dtype_is_unsigned(t)) {
    cg_map_end(k, cg_cast(k, ct, cg_sel(k, b, cg_bin(k, CG_X_REM, a, cg_map_arg(k, 1)),
                                        cg_int(k, 0))));
    return AP_OK;
  }
  cg_x *trap = cg_or(k, cg_eq(k, b, cg_int(k, 0)), cg_eq(k, cg_map_arg(k, 1), cg_int(k, -1)));
  int r = cg_let(k, "r", cg_sel(k, trap, cg_int(k, 0),
                                cg_bin(k, CG_X_REM, cg_map_arg(k, 0), cg_map_arg(k, 1))));
  cg_x *x = cg_v(k, r);
  if (!fmod_) {
    cg_x *moved = cg_and(k, cg_ne(k, cg_v(k, r), cg_int(k, 0)),
                         cg_ne(k, cg_lt(k, cg_v(k, r), cg_int(k, 0)),
                               cg_lt(k, cg_map_arg(k, 1), cg_int(k, 0))));
    x = cg_sel(k, moved, cg_add(k, cg_v(k, r), cg_map_arg(k, 1)), cg_v(k, r));
  }
  cg_map_end(k, cg_cast(k, ct, x));
  return AP_OK;
}

/* x where x >= 0, slope x elsewhere, the slope broadcast to x. */
ap_status cg_emit_PRELU(cg_kernel *k) {
  ap_status s = need_float(k, &k->in[0]);
  if (s != AP_OK)
    return s;
  int slots[2] = {0, 1};
  cg_map_begin(k, 0, 2, slots);
  cg_x *x = cg_map_arg(k, 0);
  cg_map_end(k, cg_sel(k, cg_lt(k, x, zero_of(k, x)), cg_mul(k, cg_map_arg(k, 1), cg_map_arg(k, 0)),
                       cg_map_arg(k, 0)));
  return AP_OK;
}
