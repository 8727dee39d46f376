/* Backward of data movement: the reshaping operators copy the gradient
 * (their forward aliases the buffer, but a gradient may accumulate from
 * several consumers, so it gets storage of its own); Transpose, Concat,
 * Split, Slice and Gather move it back to where each element came from
 * (Gather adding where an index repeats); Expand sums it over the expanded
 * dims. Only the data input has a gradient; shape,
 * split and slice-parameter inputs do not. */
#include <string.h>

#include "codegen/train.h"

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= dims[i];
  return p;
}

static ap_status grad_copy(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  dx0[i] %s dy0[i];\n",
            (long long)k->in[0].numel, cg_grad_assign(gk, 0));
  return AP_OK;
}

static ap_status grad_transpose(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t st[AP_MAX_RANK];
  ap_status s = cg_transpose_strides(k, x, st);
  if (s != AP_OK)
    return s;
  char idx[512];
  cg_printf(k, "int64_t o = 0;\n");
  cg_loops_open(k, y->rank, y->dims, "i");
  cg_printf(k, "dx0[%s] %s dy0[o++];\n", cg_index(idx, sizeof idx, y->rank, st, "i"),
            cg_grad_assign(gk, 0));
  cg_loops_close(k, y->rank);
  return AP_OK;
}

static ap_status grad_concat(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *y = &k->out[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), y->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  int64_t outer = prod(y->dims, 0, axis), row = prod(y->dims, axis, y->rank), at = 0;
  for (int i = 0; i < k->n_in; i++) {
    const cg_operand *x = &k->in[i];
    if (!x->v)
      continue;
    int64_t run = prod(x->dims, axis, x->rank);
    if ((gk->want >> i & 1) && run && outer)
      cg_printf(k, "for (int64_t o = 0; o < %lld; o++)\nfor (int64_t i = 0; i < %lld; i++)\n"
                   "  dx%d[o * %lld + i] %s dy0[o * %lld + %lld + i];\n",
                (long long)outer, (long long)run, i, (long long)run, cg_grad_assign(gk, i),
                (long long)row, (long long)at);
    at += run;
  }
  return AP_OK;
}

/* Outputs without a gradient contribute zeros. */
static ap_status grad_split(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  int64_t outer = prod(x->dims, 0, axis), row = prod(x->dims, axis, x->rank), at = 0;
  const char *op = cg_grad_assign(gk, 0);
  for (int i = 0; i < k->n_out; i++) {
    const cg_operand *y = &k->out[i];
    if (!y->v)
      continue;
    int64_t run = prod(y->dims, axis, y->rank);
    bool has = gk->has_dy >> i & 1;
    if (run && outer && (has || strcmp(op, "=") == 0)) {
      cg_printf(k, "for (int64_t o = 0; o < %lld; o++)\nfor (int64_t i = 0; i < %lld; i++)\n"
                   "  dx0[o * %lld + %lld + i] %s ",
                (long long)outer, (long long)run, (long long)row, (long long)at, op);
      if (has)
        cg_printf(k, "dy%d[o * %lld + i];\n", i, (long long)run);
      else
        cg_printf(k, "0;\n");
    }
    at += run;
  }
  return AP_OK;
}

static ap_status grad_slice(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t starts[AP_MAX_RANK], ends[AP_MAX_RANK], steps[AP_MAX_RANK];
  bool sliced[AP_MAX_RANK], known;
  ap_status s = ap_slice_params(k->g, (ap_node *)k->n, x->v, starts, ends, steps, sliced,
                                &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED,
                    "starts, ends, axes and steps must be constants (bind them with --inputs)");
  int64_t xs[AP_MAX_RANK], st[AP_MAX_RANK], base = 0;
  cg_strides(x->rank, x->dims, xs);
  for (int i = 0; i < x->rank; i++) {
    int64_t first = 0, count = x->dims[i], step = 1;
    if (sliced[i]) {
      ap_slice_axis(x->dims[i], starts[i], ends[i], steps[i], &first, &count);
      step = steps[i];
    }
    base += first * xs[i];
    st[i] = step * xs[i];
  }
  /* Elements the slice skips get zero; each kept one is hit exactly once. */
  cg_grad_zero(gk, 0);
  if (!y->numel)
    return AP_OK;
  char idx[512];
  cg_printf(k, "int64_t o = 0;\n");
  cg_loops_open(k, y->rank, y->dims, "i");
  cg_printf(k, "dx0[%lld + %s] += dy0[o++];\n", (long long)base,
            cg_index(idx, sizeof idx, y->rank, st, "i"));
  cg_loops_close(k, y->rank);
  return AP_OK;
}

/* The rows Gather read (indices at run time, negative ones from the end)
 * receive the gradient, summed where an index repeats; the rows of
 * out-of-range indices, which the forward filled with zeros, none. */
static ap_status grad_gather(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *ix = &k->in[1];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  int64_t outer = prod(x->dims, 0, axis), dim = x->dims[axis];
  int64_t inner = prod(x->dims, axis + 1, x->rank);
  cg_grad_zero(gk, 0);
  if (!k->out[0].numel)
    return AP_OK;
  cg_printf(k, "for (int64_t o = 0; o < %lld; o++)\n  for (int64_t j = 0; j < %lld; j++) {\n",
            (long long)outer, (long long)ix->numel);
  cg_gather_index(k, x, axis);
  cg_printf(k,
            "    if (at >= 0 && at < %lld)\n"
            "      for (int64_t t = 0; t < %lld; t++)\n"
            "        dx0[(o * %lld + at) * %lld + t] += dy0[(o * %lld + j) * %lld + t];\n"
            "  }\n",
            (long long)dim, (long long)inner, (long long)dim, (long long)inner,
            (long long)ix->numel, (long long)inner);
  return AP_OK;
}

static ap_status grad_expand(cg_grad_kernel *gk) {
  cg_grad_unbroadcast(gk, 0, "dy0[o]");
  return AP_OK;
}

const cg_grad_op cg_grad_ops_move[AP_OP_COUNT] = {
    [AP_OP_FLATTEN] = {grad_copy, 0x1, 0, 0},
    [AP_OP_RESHAPE] = {grad_copy, 0x1, 0, 0},
    [AP_OP_SQUEEZE] = {grad_copy, 0x1, 0, 0},
    [AP_OP_UNSQUEEZE] = {grad_copy, 0x1, 0, 0},
    [AP_OP_TRANSPOSE] = {grad_transpose, 0x1, 0, 0},
    [AP_OP_CONCAT] = {grad_concat, ~(uint64_t)0, 0, 0},
    [AP_OP_SPLIT] = {grad_split, 0x1, 0, 0},
    [AP_OP_SLICE] = {grad_slice, 0x1, 0, 0},
    [AP_OP_EXPAND] = {grad_expand, 0x1, 0, 0},
    [AP_OP_GATHER] = {grad_gather, 0x1, 0x2, 0},
};
