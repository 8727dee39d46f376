/* Backward of the element-wise operators. Unary ones read whichever of x
 * and y gives the derivative most cheaply (Relu, Sigmoid and Tanh their
 * output; Gelu its input, in double as its forward); binary ones reduce the
 * output gradient over the dims an operand was broadcast along (numpy
 * rules). Dropout is the identity in training as in inference (see
 * docs/training.md). A Cast between float types passes the error back in
 * the input's type; a Cast to an integer type ends the gradient (its output
 * is not differentiable). */
#include <string.h>

#include "codegen/train.h"

static ap_status need_float(cg_kernel *k, ap_dtype t) {
  if (t != AP_DT_FLOAT && t != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(t));
  return AP_OK;
}

/* dx0[i] (=|+=) (T)f(...), over the elements; f reads dy0[i], x0[i],
 * y0[i] (the element loads given). */
typedef cg_x *(*grad_fn)(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y);

static ap_status unary(cg_grad_kernel *gk, grad_fn f) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->in[0].dtype);
  if (s != AP_OK)
    return s;
  int i = cg_for_n(k, "i", k->in[0].numel);
  cg_x *dy = cg_ld(k, cg_dy(k, 0), cg_v(k, i));
  cg_x *x = gk->k->in[0].v && (cg_grad_op_of(k->n->op)->reads_in & 1) ? cg_ld(k, cg_in(k, 0), cg_v(k, i)) : NULL;
  cg_x *y = cg_grad_op_of(k->n->op)->reads_out & 1 ? cg_ld(k, cg_out(k, 0), cg_v(k, i)) : NULL;
  cg_grad_put(gk, 0, cg_v(k, i), cg_cast(k, cg_ty_of(k->in[0].dtype), f(k, dy, x, y)));
  cg_end(k);
  return AP_OK;
}

static cg_x *d_relu(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x;
  return cg_sel(k, cg_gt(k, y, cg_int(k, 0)), dy, cg_int(k, 0));
}
static cg_x *d_sigmoid(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x;
  return cg_mul(k, cg_mul(k, dy, y), cg_sub(k, cg_int(k, 1), y));
}
static cg_x *d_tanh(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x;
  return cg_mul(k, dy, cg_sub(k, cg_int(k, 1), cg_mul(k, y, y)));
}
static cg_x *d_identity(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)k, (void)x, (void)y;
  return dy;
}
static cg_x *d_neg(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x, (void)y;
  return cg_neg(k, dy);
}
static cg_x *d_exp(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x;
  return cg_mul(k, dy, y);
}
static cg_x *d_log(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_div(k, dy, x);
}
static cg_x *d_sqrt(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x;
  return cg_div(k, cg_mul(k, dy, cg_f64(k, 0.5)), y);
}

static ap_status grad_relu(cg_grad_kernel *gk) { return unary(gk, d_relu); }
static ap_status grad_sigmoid(cg_grad_kernel *gk) { return unary(gk, d_sigmoid); }
static ap_status grad_tanh(cg_grad_kernel *gk) { return unary(gk, d_tanh); }
static ap_status grad_identity(cg_grad_kernel *gk) { return unary(gk, d_identity); }
static ap_status grad_neg(cg_grad_kernel *gk) { return unary(gk, d_neg); }
static ap_status grad_exp(cg_grad_kernel *gk) { return unary(gk, d_exp); }
static ap_status grad_log(cg_grad_kernel *gk) { return unary(gk, d_log); }
static ap_status grad_sqrt(cg_grad_kernel *gk) { return unary(gk, d_sqrt); }

/* d/dx of 0.5 x (1 + erf(x / sqrt 2)) and of its tanh approximation
 * 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3), in double. */
static ap_status grad_gelu(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const char *approx = ap_attr_string(k->n, "approximate", "none");
  bool tanh_form = strcmp(approx, "tanh") == 0;
  if (!tanh_form && strcmp(approx, "none") != 0)
    return cg_error(k, AP_ERR_INVALID, "approximate must be 'none' or 'tanh', not '%s'", approx);
  ap_status s = need_float(k, k->in[0].dtype);
  if (s != AP_OK)
    return s;
  int i = cg_for_n(k, "i", k->in[0].numel);
  int v = cg_let(k, "v", cg_cast(k, CG_T_F64, cg_ld(k, cg_in(k, 0), cg_v(k, i))));
  cg_x *d;
  if (tanh_form) {
    cg_x *c = cg_f64(k, 0x1.9884533d43651p-1);
    cg_x *cube = cg_mul(k, cg_mul(k, cg_mul(k, cg_f64(k, 0.044715), cg_v(k, v)), cg_v(k, v)), cg_v(k, v));
    int t = cg_let(k, "t", cg_fnd(k, CG_FN_TANH, cg_mul(k, c, cg_add(k, cg_v(k, v), cube))));
    cg_x *a = cg_mul(k, cg_f64(k, 0.5), cg_add(k, cg_int(k, 1), cg_v(k, t)));
    cg_x *b = cg_mul(k, cg_mul(k, cg_mul(k, cg_mul(k, cg_f64(k, 0.5), cg_v(k, v)),
                                          cg_sub(k, cg_int(k, 1), cg_mul(k, cg_v(k, t), cg_v(k, t)))),
                                c),
                     cg_add(k, cg_int(k, 1),
                            cg_mul(k, cg_mul(k, cg_mul(k, cg_int(k, 3), cg_f64(k, 0.044715)), cg_v(k, v)),
                                   cg_v(k, v))));
    d = cg_add(k, a, b);
  } else {
    cg_x *a = cg_mul(k, cg_f64(k, 0.5),
                     cg_add(k, cg_int(k, 1),
                            cg_fnd(k, CG_FN_ERF, cg_mul(k, cg_v(k, v), cg_f64(k, 0x1.6a09e667f3bcdp-1)))));
    cg_x *b = cg_mul(k, cg_mul(k, cg_v(k, v),
                               cg_fnd(k, CG_FN_EXP, cg_mul(k, cg_mul(k, cg_f64(k, -0.5), cg_v(k, v)), cg_v(k, v)))),
                     cg_f64(k, 0x1.9884533d43651p-2));
    d = cg_add(k, a, b);
  }
  cg_x *val = cg_mul(k, cg_ld(k, cg_dy(k, 0), cg_v(k, i)), d);
  cg_grad_put(gk, 0, cg_v(k, i), cg_cast(k, cg_ty_of(k->in[0].dtype), val));
  cg_end(k);
  return AP_OK;
}

static cg_x *d_erf(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_mul(k, cg_mul(k, dy, cg_f64(k, 0x1.20dd750429b6dp+0)),
                cg_fnd(k, CG_FN_EXP, cg_mul(k, cg_neg(k, cg_cast(k, CG_T_F64, x)), x)));
}
static cg_x *d_abs(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_sel(k, cg_gt(k, x, cg_int(k, 0)), dy,
                cg_sel(k, cg_lt(k, x, cg_int(k, 0)), cg_neg(k, dy), cg_int(k, 0)));
}
static cg_x *d_reciprocal(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)x;
  return cg_mul(k, cg_mul(k, cg_neg(k, dy), y), y);
}
/* Where the bounds did not clip, y is x: the gradient passes there only,
 * whatever form (attributes, constant or fed inputs) the bounds took. */
static cg_x *d_clip(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  return cg_sel(k, cg_eq(k, y, x), dy, cg_int(k, 0));
}

static ap_status grad_erf(cg_grad_kernel *gk) { return unary(gk, d_erf); }
static ap_status grad_abs(cg_grad_kernel *gk) { return unary(gk, d_abs); }
static ap_status grad_reciprocal(cg_grad_kernel *gk) { return unary(gk, d_reciprocal); }
static ap_status grad_clip(cg_grad_kernel *gk) { return unary(gk, d_clip); }

/* ---- the activations and math functions ------------------------------------ */

static double attr_f(cg_kernel *k, const char *name, double dflt) {
  return ap_attr_float(k->n, name, (float)dflt);
}
static cg_x *dbl(cg_kernel *k, cg_x *a) { return cg_cast(k, CG_T_F64, a); }

static cg_x *d_leaky_relu(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_sel(k, cg_lt(k, x, cg_int(k, 0)), cg_mul(k, dy, cg_f64(k, attr_f(k, "alpha", 0.01))), dy);
}
static cg_x *d_thresholded_relu(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_sel(k, cg_gt(k, x, cg_const(k, (cg_ty)x->ty, attr_f(k, "alpha", 1.0))), dy,
                cg_int(k, 0));
}
/* The slope alpha inside the linear part 0 < alpha x + beta < 1, else 0. */
static cg_x *hard_sigmoid_slope(cg_kernel *k, cg_x *x, double alpha, double beta) {
  int v = cg_let(k, "v", cg_add(k, cg_mul(k, x, cg_const(k, (cg_ty)x->ty, alpha)),
                                cg_const(k, (cg_ty)x->ty, beta)));
  return cg_sel(k, cg_and(k, cg_gt(k, cg_v(k, v), cg_int(k, 0)), cg_lt(k, cg_v(k, v), cg_int(k, 1))),
                cg_f64(k, alpha), cg_f64(k, 0));
}
static cg_x *d_hard_sigmoid(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_mul(k, dy, hard_sigmoid_slope(k, x, attr_f(k, "alpha", 0.2), attr_f(k, "beta", 0.5)));
}
/* y = x h(x), h the hard sigmoid (1/6, 1/2): dy (h(x) + x h'(x)). */
static cg_x *d_hard_swish(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  int v = cg_let(k, "h", cg_add(k, cg_mul(k, dbl(k, x), cg_f64(k, 1.0 / 6)), cg_f64(k, 0.5)));
  cg_x *h = cg_sel(k, cg_lt(k, cg_v(k, v), cg_int(k, 0)), cg_f64(k, 0),
                   cg_sel(k, cg_gt(k, cg_v(k, v), cg_int(k, 1)), cg_f64(k, 1), cg_v(k, v)));
  cg_x *dh = cg_sel(k, cg_and(k, cg_gt(k, cg_v(k, v), cg_int(k, 0)), cg_lt(k, cg_v(k, v), cg_int(k, 1))),
                    cg_f64(k, 1.0 / 6), cg_f64(k, 0));
  return cg_mul(k, dy, cg_add(k, h, cg_mul(k, dbl(k, x), dh)));
}
static cg_x *d_softsign(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  int d = cg_let(k, "d", cg_add(k, cg_f64(k, 1), cg_fnd(k, CG_FN_FABS, x)));
  return cg_div(k, dy, cg_mul(k, cg_v(k, d), cg_v(k, d)));
}
static cg_x *d_elu(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_sel(k, cg_lt(k, x, cg_int(k, 0)),
                cg_mul(k, dy, cg_mul(k, cg_f64(k, attr_f(k, "alpha", 1.0)), cg_fnd(k, CG_FN_EXP, x))),
                dy);
}
static cg_x *d_selu(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  double alpha = attr_f(k, "alpha", 1.67326319217681884765625),
         gamma = attr_f(k, "gamma", 1.05070102214813232421875);
  return cg_mul(k, cg_mul(k, dy, cg_f64(k, gamma)),
                cg_sel(k, cg_gt(k, x, cg_int(k, 0)), cg_f64(k, 1),
                       cg_mul(k, cg_f64(k, alpha), cg_fnd(k, CG_FN_EXP, x))));
}
static cg_x *d_celu(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  cg_x *e = cg_fnd(k, CG_FN_EXP, cg_div(k, dbl(k, x), cg_f64(k, attr_f(k, "alpha", 1.0))));
  return cg_sel(k, cg_gt(k, x, cg_int(k, 0)), dy, cg_mul(k, dy, e));
}
/* sigmoid(x) = 1 / (1 + e^-x), the derivative of softplus. */
static cg_x *sigmoid_d(cg_kernel *k, cg_x *x) {
  return cg_div(k, cg_f64(k, 1), cg_add(k, cg_f64(k, 1), cg_fnd(k, CG_FN_EXP, cg_neg(k, dbl(k, x)))));
}
static cg_x *d_softplus(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_mul(k, dy, sigmoid_d(k, x));
}
/* y = x tanh(sp(x)): dy (t + x (1 - t^2) sigmoid(x)), t = tanh(sp(x)). */
static cg_x *d_mish(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  int v = cg_let(k, "v", dbl(k, x));
  cg_x *sp = cg_sel(k, cg_gt(k, cg_v(k, v), cg_f64(k, 0)),
                    cg_add(k, cg_v(k, v), cg_fnd(k, CG_FN_LOG, cg_add(k, cg_f64(k, 1),
                                                                     cg_fnd(k, CG_FN_EXP, cg_neg(k, cg_v(k, v)))))),
                    cg_fnd(k, CG_FN_LOG, cg_add(k, cg_f64(k, 1), cg_fnd(k, CG_FN_EXP, cg_v(k, v)))));
  int t = cg_let(k, "t", cg_fnd(k, CG_FN_TANH, sp));
  cg_x *d = cg_add(k, cg_v(k, t),
                   cg_mul(k, cg_mul(k, cg_v(k, v), cg_sub(k, cg_f64(k, 1), cg_mul(k, cg_v(k, t), cg_v(k, t)))),
                          sigmoid_d(k, cg_v(k, v))));
  return cg_mul(k, dy, d);
}
static cg_x *d_sin(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_mul(k, dy, cg_fnd(k, CG_FN_COS, x));
}
static cg_x *d_cos(cg_kernel *k, cg_x *dy, cg_x *x, cg_x *y) {
  (void)y;
  return cg_mul(k, cg_neg(k, dy), cg_fnd(k, CG_FN_SIN, x));
}

static ap_status grad_leaky_relu(cg_grad_kernel *gk) { return unary(gk, d_leaky_relu); }
static ap_status grad_thresholded_relu(cg_grad_kernel *gk) { return unary(gk, d_thresholded_relu); }
static ap_status grad_hard_sigmoid(cg_grad_kernel *gk) { return unary(gk, d_hard_sigmoid); }
static ap_status grad_hard_swish(cg_grad_kernel *gk) { return unary(gk, d_hard_swish); }
static ap_status grad_softsign(cg_grad_kernel *gk) { return unary(gk, d_softsign); }
static ap_status grad_elu(cg_grad_kernel *gk) { return unary(gk, d_elu); }
static ap_status grad_selu(cg_grad_kernel *gk) { return unary(gk, d_selu); }
static ap_status grad_celu(cg_grad_kernel *gk) { return unary(gk, d_celu); }
static ap_status grad_softplus(cg_grad_kernel *gk) { return unary(gk, d_softplus); }
static ap_status grad_mish(cg_grad_kernel *gk) { return unary(gk, d_mish); }
static ap_status grad_sin(cg_grad_kernel *gk) { return unary(gk, d_sin); }
static ap_status grad_cos(cg_grad_kernel *gk) { return unary(gk, d_cos); }

/* ---- n-ary operators with broadcasting ------------------------------------ */

static bool wants(const cg_grad_kernel *gk, int slot) { return gk->want >> slot & 1; }

static cg_x *dy_o(cg_grad_kernel *gk) { return cg_ld(gk->k, cg_dy(gk->k, 0), cg_grad_o(gk)); }
static cg_x *y_o(cg_grad_kernel *gk) { return cg_ld(gk->k, cg_out(gk->k, 0), cg_grad_o(gk)); }

static ap_status grad_sum(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  for (int i = 0; s == AP_OK && i < gk->k->n_in; i++)
    if (wants(gk, i))
      cg_grad_unbroadcast(gk, i, NULL, false);
  return s;
}

static ap_status grad_sub(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  if (s == AP_OK && wants(gk, 0))
    cg_grad_unbroadcast(gk, 0, NULL, false);
  if (s == AP_OK && wants(gk, 1))
    cg_grad_unbroadcast(gk, 1, NULL, true);
  return s;
}

static ap_status grad_mul(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  for (int i = 0; s == AP_OK && i < 2; i++)
    if (wants(gk, i)) {
      cg_grad_unbroadcast_begin(gk, i);
      cg_grad_unbroadcast_end(gk, i, cg_mul(k, dy_o(gk), cg_grad_bcast(gk, 1 - i)));
    }
  return s;
}

/* y = a / b: da = dy / b, db = -dy y / b. */
static ap_status grad_div(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  if (s == AP_OK && wants(gk, 0)) {
    cg_grad_unbroadcast_begin(gk, 0);
    cg_grad_unbroadcast_end(gk, 0, cg_div(k, dy_o(gk), cg_grad_bcast(gk, 1)));
  }
  if (s == AP_OK && wants(gk, 1)) {
    cg_grad_unbroadcast_begin(gk, 1);
    cg_grad_unbroadcast_end(gk, 1, cg_div(k, cg_mul(k, cg_neg(k, dy_o(gk)), y_o(gk)),
                                          cg_grad_bcast(gk, 1)));
  }
  return s;
}

/* y = a^b: da = dy b a^(b-1), db = dy y log(a). */
static ap_status grad_pow(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  if (s == AP_OK && (k->in[1].dtype != AP_DT_FLOAT && k->in[1].dtype != AP_DT_DOUBLE))
    s = cg_error(k, AP_ERR_UNSUPPORTED, "training: an integer exponent has no gradient");
  int n_power;
  bool small = cg_small_power(k, 1, &n_power);
  if (s == AP_OK && wants(gk, 0)) {
    cg_grad_unbroadcast_begin(gk, 0);
    cg_x *b = cg_grad_bcast(gk, 1);
    cg_x *p = small ? cg_power(k, cg_cast(k, CG_T_F64, cg_grad_bcast(gk, 0)), n_power - 1)
                    : cg_fn2(k, CG_FN_POW, cg_cast(k, CG_T_F64, cg_grad_bcast(gk, 0)),
                             cg_sub(k, cg_cast(k, CG_T_F64, cg_grad_bcast(gk, 1)), cg_int(k, 1)));
    cg_grad_unbroadcast_end(gk, 0, cg_mul(k, cg_mul(k, dy_o(gk), b), p));
  }
  if (s == AP_OK && wants(gk, 1)) {
    cg_grad_unbroadcast_begin(gk, 1);
    cg_grad_unbroadcast_end(gk, 1, cg_mul(k, cg_mul(k, dy_o(gk), y_o(gk)),
                                          cg_fnd(k, CG_FN_LOG, cg_cast(k, CG_T_F64, cg_grad_bcast(gk, 0)))));
  }
  return s;
}

/* The gradient goes to the operand the forward's left-to-right fold picks:
 * the running extreme is replaced unless it is NaN or strictly beyond the
 * next operand, so a later operand wins a tie and a NaN operand wins. */
static ap_status grad_extreme(cg_grad_kernel *gk, bool max) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  if (s != AP_OK)
    return s;
  for (int slot = 0; slot < k->n_in; slot++) {
    if (!wants(gk, slot))
      continue;
    cg_grad_unbroadcast_begin(gk, slot);
    int best = cg_mut(k, "best", CG_T_F64, cg_grad_bcast(gk, 0));
    int w = cg_mut(k, "w", CG_T_I32, cg_int(k, 0));
    for (int i = 1; i < k->n_in; i++) {
      cg_x *el = cg_grad_bcast(gk, i);
      cg_x *beyond = max ? cg_gt(k, cg_v(k, best), el) : cg_lt(k, cg_v(k, best), el);
      cg_if(k, cg_not(k, cg_or(k, cg_ne(k, cg_v(k, best), cg_v(k, best)), beyond)));
      cg_set(k, best, cg_grad_bcast(gk, i));
      cg_set(k, w, cg_int(k, i));
      cg_end(k);
    }
    cg_grad_unbroadcast_end(gk, slot, cg_sel(k, cg_eq(k, cg_v(k, w), cg_int(k, slot)), dy_o(gk),
                                             cg_int(k, 0)));
  }
  return AP_OK;
}

static ap_status grad_max(cg_grad_kernel *gk) { return grad_extreme(gk, true); }
static ap_status grad_min(cg_grad_kernel *gk) { return grad_extreme(gk, false); }

static ap_status grad_where(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  if (s == AP_OK && wants(gk, 1)) {
    cg_grad_unbroadcast_begin(gk, 1);
    cg_grad_unbroadcast_end(gk, 1, cg_sel(k, cg_grad_bcast(gk, 0), dy_o(gk), cg_int(k, 0)));
  }
  if (s == AP_OK && wants(gk, 2)) {
    cg_grad_unbroadcast_begin(gk, 2);
    cg_grad_unbroadcast_end(gk, 2, cg_sel(k, cg_grad_bcast(gk, 0), cg_int(k, 0), dy_o(gk)));
  }
  return s;
}

/* y = x where x >= 0, slope x elsewhere: dx = dy (1 or slope), dslope =
 * dy x where x < 0, reduced over the dims the slope was broadcast along. */
static ap_status grad_prelu(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  if (s == AP_OK && wants(gk, 0)) {
    cg_grad_unbroadcast_begin(gk, 0);
    cg_x *x = cg_grad_bcast(gk, 0);
    cg_grad_unbroadcast_end(gk, 0, cg_sel(k, cg_lt(k, x, cg_int(k, 0)),
                                          cg_mul(k, dy_o(gk), cg_grad_bcast(gk, 1)), dy_o(gk)));
  }
  if (s == AP_OK && wants(gk, 1)) {
    cg_grad_unbroadcast_begin(gk, 1);
    cg_x *x = cg_grad_bcast(gk, 0);
    cg_grad_unbroadcast_end(gk, 1, cg_sel(k, cg_lt(k, x, cg_int(k, 0)),
                                          cg_mul(k, dy_o(gk), cg_grad_bcast(gk, 0)), cg_int(k, 0)));
  }
  return s;
}

const cg_grad_op cg_grad_ops_ewise[AP_OP_COUNT] = {
    [AP_OP_RELU] = {grad_relu, 0x1, 0, 0x1},
    [AP_OP_SIGMOID] = {grad_sigmoid, 0x1, 0, 0x1},
    [AP_OP_TANH] = {grad_tanh, 0x1, 0, 0x1},
    [AP_OP_GELU] = {grad_gelu, 0x1, 0x1, 0},
    [AP_OP_EXP] = {grad_exp, 0x1, 0, 0x1},
    [AP_OP_LOG] = {grad_log, 0x1, 0x1, 0},
    [AP_OP_SQRT] = {grad_sqrt, 0x1, 0, 0x1},
    [AP_OP_NEG] = {grad_neg, 0x1, 0, 0},
    [AP_OP_ERF] = {grad_erf, 0x1, 0x1, 0},
    [AP_OP_ABS] = {grad_abs, 0x1, 0x1, 0},
    [AP_OP_RECIPROCAL] = {grad_reciprocal, 0x1, 0, 0x1},
    [AP_OP_CLIP] = {grad_clip, 0x1, 0x1, 0x1},
    [AP_OP_ADD] = {grad_sum, 0x3, 0, 0},
    [AP_OP_SUB] = {grad_sub, 0x3, 0, 0},
    [AP_OP_MUL] = {grad_mul, 0x3, 0x3, 0, true},
    [AP_OP_DIV] = {grad_div, 0x3, 0x2, 0x1},
    [AP_OP_POW] = {grad_pow, 0x3, 0x3, 0x1},
    [AP_OP_SUM] = {grad_sum, ~(uint64_t)0, 0, 0},
    [AP_OP_MAX] = {grad_max, ~(uint64_t)0, ~(uint64_t)0, 0},
    [AP_OP_MIN] = {grad_min, ~(uint64_t)0, ~(uint64_t)0, 0},
    [AP_OP_WHERE] = {grad_where, 0x6, 0x1, 0},
    [AP_OP_IDENTITY] = {grad_identity, 0x1, 0, 0},
    [AP_OP_CAST] = {grad_identity, 0x1, 0, 0},      /* between float types: the error */
    [AP_OP_CAST_LIKE] = {grad_identity, 0x1, 0, 0}, /* converted back */
    [AP_OP_DROPOUT] = {grad_identity, 0x1, 0, 0},
    [AP_OP_LEAKY_RELU] = {grad_leaky_relu, 0x1, 0x1, 0},
    [AP_OP_PRELU] = {grad_prelu, 0x3, 0x3, 0},
    [AP_OP_ELU] = {grad_elu, 0x1, 0x1, 0},
    [AP_OP_SELU] = {grad_selu, 0x1, 0x1, 0},
    [AP_OP_CELU] = {grad_celu, 0x1, 0x1, 0},
    [AP_OP_HARD_SIGMOID] = {grad_hard_sigmoid, 0x1, 0x1, 0},
    [AP_OP_HARD_SWISH] = {grad_hard_swish, 0x1, 0x1, 0},
    [AP_OP_SOFTPLUS] = {grad_softplus, 0x1, 0x1, 0},
    [AP_OP_SOFTSIGN] = {grad_softsign, 0x1, 0x1, 0},
    [AP_OP_THRESHOLDED_RELU] = {grad_thresholded_relu, 0x1, 0x1, 0},
    [AP_OP_MISH] = {grad_mish, 0x1, 0x1, 0},
    [AP_OP_SIN] = {grad_sin, 0x1, 0x1, 0},
    [AP_OP_COS] = {grad_cos, 0x1, 0x1, 0},
};
