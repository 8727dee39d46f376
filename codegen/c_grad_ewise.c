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

/* dx0[i] (=|+=) expr, over the elements; expr reads dy0[i], x0[i], y0[i]. */
static ap_status unary(cg_grad_kernel *gk, const char *expr) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->in[0].dtype);
  if (s != AP_OK)
    return s;
  cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  dx0[i] %s (%s)(%s);\n",
            (long long)k->in[0].numel, cg_grad_assign(gk, 0), cg_ctype(k->in[0].dtype), expr);
  return AP_OK;
}

static ap_status grad_relu(cg_grad_kernel *gk) { return unary(gk, "y0[i] > 0 ? dy0[i] : 0"); }
static ap_status grad_sigmoid(cg_grad_kernel *gk) {
  return unary(gk, "dy0[i] * y0[i] * (1 - y0[i])");
}
static ap_status grad_tanh(cg_grad_kernel *gk) { return unary(gk, "dy0[i] * (1 - y0[i] * y0[i])"); }
static ap_status grad_identity(cg_grad_kernel *gk) { return unary(gk, "dy0[i]"); }
static ap_status grad_neg(cg_grad_kernel *gk) { return unary(gk, "-dy0[i]"); }
static ap_status grad_exp(cg_grad_kernel *gk) { return unary(gk, "dy0[i] * y0[i]"); }
static ap_status grad_log(cg_grad_kernel *gk) { return unary(gk, "dy0[i] / x0[i]"); }
static ap_status grad_sqrt(cg_grad_kernel *gk) { return unary(gk, "dy0[i] * 0.5 / y0[i]"); }

/* d/dx of 0.5 x (1 + erf(x / sqrt 2)) and of its tanh approximation
 * 0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3). */
static ap_status grad_gelu(cg_grad_kernel *gk) {
  const char *approx = ap_attr_string(gk->k->n, "approximate", "none");
  if (strcmp(approx, "tanh") == 0)
    return unary(gk, "dy0[i] * ({ const double v = x0[i], c = 0x1.9884533d43651p-1;"
                     " const double t = tanh(c * (v + 0.044715 * v * v * v));"
                     " 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v); })");
  if (strcmp(approx, "none") == 0)
    return unary(gk, "dy0[i] * ({ const double v = x0[i];"
                     " 0.5 * (1 + erf(v * 0x1.6a09e667f3bcdp-1)) +"
                     " v * exp(-0.5 * v * v) * 0x1.9884533d43651p-2; })");
  return cg_error(gk->k, AP_ERR_INVALID, "approximate must be 'none' or 'tanh', not '%s'", approx);
}

static ap_status grad_erf(cg_grad_kernel *gk) {
  return unary(gk, "dy0[i] * 0x1.20dd750429b6dp+0 * exp(-(double)x0[i] * x0[i])");
}
static ap_status grad_abs(cg_grad_kernel *gk) {
  return unary(gk, "x0[i] > 0 ? dy0[i] : x0[i] < 0 ? -dy0[i] : 0");
}
static ap_status grad_reciprocal(cg_grad_kernel *gk) { return unary(gk, "-dy0[i] * y0[i] * y0[i]"); }
/* Where the bounds did not clip, y is x: the gradient passes there only,
 * whatever form (attributes, constant or fed inputs) the bounds took. */
static ap_status grad_clip(cg_grad_kernel *gk) { return unary(gk, "y0[i] == x0[i] ? dy0[i] : 0"); }

/* ---- n-ary operators with broadcasting ------------------------------------ */

/* Buffers for the broadcast elements and the expression of one term. */
typedef struct term {
  char a[600], b[600], expr[2048];
} term;

static const char *elem(cg_grad_kernel *gk, int slot, char *buf) {
  return cg_grad_bcast_elem(gk, slot, buf, 600);
}

static void emit_term(cg_grad_kernel *gk, int slot, term *t, int w) {
  if (w < 0 || (size_t)w >= sizeof t->expr)
    ap_die("expression too long");
  cg_grad_unbroadcast(gk, slot, t->expr);
}

static bool wants(const cg_grad_kernel *gk, int slot) { return gk->want >> slot & 1; }

static ap_status grad_sum(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  for (int i = 0; s == AP_OK && i < gk->k->n_in; i++)
    if (wants(gk, i))
      cg_grad_unbroadcast(gk, i, "dy0[o]");
  return s;
}

static ap_status grad_sub(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  if (s == AP_OK && wants(gk, 0))
    cg_grad_unbroadcast(gk, 0, "dy0[o]");
  if (s == AP_OK && wants(gk, 1))
    cg_grad_unbroadcast(gk, 1, "-dy0[o]");
  return s;
}

static ap_status grad_mul(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  for (int i = 0; s == AP_OK && i < 2; i++)
    if (wants(gk, i)) {
      term t;
      emit_term(gk, i, &t, snprintf(t.expr, sizeof t.expr, "dy0[o] * %s", elem(gk, 1 - i, t.a)));
    }
  return s;
}

/* y = a / b: da = dy / b, db = -dy y / b. */
static ap_status grad_div(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  term t;
  if (s == AP_OK && wants(gk, 0))
    emit_term(gk, 0, &t, snprintf(t.expr, sizeof t.expr, "dy0[o] / %s", elem(gk, 1, t.a)));
  if (s == AP_OK && wants(gk, 1))
    emit_term(gk, 1, &t,
              snprintf(t.expr, sizeof t.expr, "-dy0[o] * y0[o] / %s", elem(gk, 1, t.a)));
  return s;
}

/* y = a^b: da = dy b a^(b-1), db = dy y log(a). */
static ap_status grad_pow(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  ap_status s = need_float(k, k->out[0].dtype);
  if (s == AP_OK && (k->in[1].dtype != AP_DT_FLOAT && k->in[1].dtype != AP_DT_DOUBLE))
    s = cg_error(k, AP_ERR_UNSUPPORTED, "training: an integer exponent has no gradient");
  term t;
  if (s == AP_OK && wants(gk, 0))
    emit_term(gk, 0, &t,
              snprintf(t.expr, sizeof t.expr, "dy0[o] * %s * pow((double)%s, (double)%s - 1)",
                       elem(gk, 1, t.b), elem(gk, 0, t.a), t.b));
  if (s == AP_OK && wants(gk, 1))
    emit_term(gk, 1, &t,
              snprintf(t.expr, sizeof t.expr, "dy0[o] * y0[o] * log((double)%s)",
                       elem(gk, 0, t.a)));
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
    char expr[8192], el[600];
    size_t len = (size_t)snprintf(expr, sizeof expr, "({ double best = %s; int w = 0;",
                                  cg_grad_bcast_elem(gk, 0, el, sizeof el));
    for (int i = 1; i < k->n_in; i++) {
      cg_grad_bcast_elem(gk, i, el, sizeof el);
      len += (size_t)snprintf(expr + len, sizeof expr - len,
                              " if (!(best != best || best %s %s)) { best = %s; w = %d; }",
                              max ? ">" : "<", el, el, i);
      if (len >= sizeof expr)
        ap_die("expression too long");
    }
    len += (size_t)snprintf(expr + len, sizeof expr - len, " w == %d ? dy0[o] : 0; })", slot);
    if (len >= sizeof expr)
      ap_die("expression too long");
    cg_grad_unbroadcast(gk, slot, expr);
  }
  return AP_OK;
}

static ap_status grad_max(cg_grad_kernel *gk) { return grad_extreme(gk, true); }
static ap_status grad_min(cg_grad_kernel *gk) { return grad_extreme(gk, false); }

static ap_status grad_where(cg_grad_kernel *gk) {
  ap_status s = need_float(gk->k, gk->k->out[0].dtype);
  term t;
  if (s == AP_OK && wants(gk, 1))
    emit_term(gk, 1, &t, snprintf(t.expr, sizeof t.expr, "%s ? dy0[o] : 0", elem(gk, 0, t.a)));
  if (s == AP_OK && wants(gk, 2))
    emit_term(gk, 2, &t, snprintf(t.expr, sizeof t.expr, "%s ? 0 : dy0[o]", elem(gk, 0, t.a)));
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
};
