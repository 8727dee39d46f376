/* Data movement and shape manipulation, and the constant-producing
 * operators the folding pass left (ConstantOfShape and Range beyond its
 * size limit, Shape or Size of a value it did not reach). Operators that only
 * reinterpret the shape of a dense row-major buffer (Reshape, Flatten,
 * Squeeze, Unsqueeze) are aliases: their output is their input's storage. */
#include <string.h>

#include "codegen/codegen.h"

static int64_t prod(const int64_t *dims, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; i++)
    p *= dims[i];
  return p;
}

static ap_status alias(cg_kernel *k) {
  if (k->in[0].numel != k->out[0].numel || k->in[0].dtype != k->out[0].dtype)
    return cg_error(k, AP_ERR_INVALID, "output does not hold the input's elements");
  k->alias_in = 0;
  return AP_OK;
}

ap_status cg_emit_FLATTEN(cg_kernel *k) { return alias(k); }
ap_status cg_emit_RESHAPE(cg_kernel *k) { return alias(k); }
ap_status cg_emit_SQUEEZE(cg_kernel *k) { return alias(k); }
ap_status cg_emit_UNSQUEEZE(cg_kernel *k) { return alias(k); }

ap_status cg_transpose_strides(cg_kernel *k, const cg_operand *x, int64_t *st) {
  int n, perm[AP_MAX_RANK];
  const int64_t *p = ap_attr_ints(k->n, "perm", &n);
  if (!p) {
    n = x->rank;
    for (int i = 0; i < n; i++)
      perm[i] = n - 1 - i;
  } else {
    for (int i = 0; i < n && i < AP_MAX_RANK; i++)
      perm[i] = cg_norm_axis(p[i], x->rank);
  }
  if (n != x->rank)
    return cg_error(k, AP_ERR_INVALID, "perm has %d entries for rank %d", n, x->rank);
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  for (int i = 0; i < n; i++) {
    if (perm[i] < 0)
      return cg_error(k, AP_ERR_INVALID, "perm[%d] is out of range", i);
    st[i] = xs[perm[i]];
  }
  return AP_OK;
}

ap_status cg_emit_TRANSPOSE(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t st[AP_MAX_RANK];
  ap_status s = cg_transpose_strides(k, x, st);
  if (s != AP_OK)
    return s;
  char idx[512];
  cg_printf(k, "int64_t o = 0;\n");
  cg_loops_open(k, y->rank, y->box.size, "i");
  cg_printf(k, "y0[o++] = x0[%s];\n", cg_index(idx, sizeof idx, y->rank, st, "i"));
  cg_loops_close(k, y->rank);
  return AP_OK;
}

/* Concat and Split copy rows: for every index of the dims before axis, each
 * piece contributes one contiguous run of (its dims from axis on). */
ap_status cg_emit_CONCAT(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), y->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  int64_t outer = prod(y->dims, 0, axis), row = prod(y->dims, axis, y->rank);
  size_t es = ap_dtype_size(y->dtype);
  int64_t at = 0;
  for (int i = 0; i < k->n_in; i++) {
    const cg_operand *x = &k->in[i];
    if (!x->v)
      continue;
    int64_t run = prod(x->dims, axis, x->rank);
    if (run && outer)
      cg_printf(k, "for (int64_t o = 0; o < %lld; o++)\n  memcpy(y0 + o * %lld + %lld, x%d + o * %lld, %lld);\n",
                (long long)outer, (long long)row, (long long)at, i, (long long)run,
                (long long)(run * (int64_t)es));
    at += run;
  }
  return AP_OK;
}

ap_status cg_emit_SPLIT(cg_kernel *k) {
  const cg_operand *x = &k->in[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  k->skip_in |= (uint64_t)1 << 1;
  int64_t outer = prod(x->dims, 0, axis), row = prod(x->dims, axis, x->rank);
  size_t es = ap_dtype_size(x->dtype);
  int64_t at = 0;
  for (int i = 0; i < k->n_out; i++) {
    const cg_operand *y = &k->out[i];
    if (!y->v)
      continue;
    int64_t run = prod(y->dims, axis, y->rank);
    if (run && outer)
      cg_printf(k, "for (int64_t o = 0; o < %lld; o++)\n  memcpy(y%d + o * %lld, x0 + o * %lld + %lld, %lld);\n",
                (long long)outer, i, (long long)run, (long long)row, (long long)at,
                (long long)(run * (int64_t)es));
    at += run;
  }
  return AP_OK;
}

ap_status cg_emit_SLICE(cg_kernel *k) {
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
  k->skip_in |= ~(uint64_t)1;
  int64_t xs[AP_MAX_RANK], st[AP_MAX_RANK], base = 0;
  cg_strides(x->rank, x->dims, xs);
  for (int i = 0; i < x->rank; i++) {
    int64_t first = 0, count = x->dims[i], step = 1;
    if (sliced[i]) {
      ap_slice_axis(x->dims[i], starts[i], ends[i], steps[i], &first, &count);
      step = steps[i];
    }
    if (count != y->dims[i])
      return cg_error(k, AP_ERR_INVALID, "output dim %d is %lld, the slice gives %lld", i,
                      (long long)y->dims[i], (long long)count);
    base += first * xs[i];
    st[i] = step * xs[i];
  }
  if (!y->numel)
    return AP_OK;
  char idx[512];
  cg_printf(k, "int64_t o = 0;\n");
  cg_loops_open(k, y->rank, y->box.size, "i");
  cg_printf(k, "y0[o++] = x0[%lld + %s];\n", (long long)base,
            cg_index(idx, sizeof idx, y->rank, st, "i"));
  cg_loops_close(k, y->rank);
  return AP_OK;
}

/* Indices are read at run time; negative ones count from the end, and an
 * index outside the axis gives zeros (ONNX leaves it undefined). */
void cg_gather_index(cg_kernel *k, const cg_operand *x, int axis) {
  int64_t whole = x->v->dims[axis], start = x->box.start[axis];
  cg_printf(k, "    int64_t at = (int64_t)x1[j];\n    if (at < 0)\n      at += %lld;\n",
            (long long)whole);
  if (start)
    cg_printf(k, "    at -= %lld;\n", (long long)start);
}

ap_status cg_emit_GATHER(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *ix = &k->in[1];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  int64_t outer = prod(x->dims, 0, axis), dim = x->dims[axis];
  int64_t inner = prod(x->dims, axis + 1, x->rank);
  int64_t es = (int64_t)ap_dtype_size(x->dtype);
  if (!k->out[0].numel)
    return AP_OK;
  /* A device holding some rows of the table (an embedding split by rows)
   * gives zeros for the others: its output is a summand. */
  cg_printf(k, "for (int64_t o = 0; o < %lld; o++)\n  for (int64_t j = 0; j < %lld; j++) {\n",
            (long long)outer, (long long)ix->numel);
  cg_gather_index(k, x, axis);
  cg_printf(k,
            "    if (at < 0 || at >= %lld)\n"
            "      memset(y0 + (o * %lld + j) * %lld, 0, %lld);\n"
            "    else\n"
            "      memcpy(y0 + (o * %lld + j) * %lld, x0 + (o * %lld + at) * %lld, %lld);\n"
            "  }\n",
            (long long)dim, (long long)ix->numel, (long long)inner, (long long)(inner * es),
            (long long)ix->numel, (long long)inner, (long long)dim, (long long)inner,
            (long long)(inner * es));
  return AP_OK;
}

ap_status cg_emit_EXPAND(cg_kernel *k) {
  k->skip_in |= (uint64_t)1 << 1;
  int slot = 0;
  cg_map(k, 0, 1, &slot, "a0");
  return AP_OK;
}

/* ---- constants the folding pass left ------------------------------------- */

/* y0 = the elements of t, from a literal table. */
static ap_status fill_from(cg_kernel *k, const ap_tensor *t) {
  const cg_operand *y = &k->out[0];
  if (t->numel != y->numel || t->dtype != y->dtype)
    return cg_error(k, AP_ERR_INVALID, "the constant does not match the output's type and shape");
  if (!y->numel)
    return AP_OK;
  char lit[64];
  cg_printf(k, "static const %s data[%lld] = {", cg_ctype(y->dtype), (long long)y->numel);
  for (int64_t i = 0; i < t->numel; i++) {
    if (y->dtype == AP_DT_FLOAT || y->dtype == AP_DT_DOUBLE)
      cg_literal(lit, y->dtype, ap_tensor_get_f64(t, i));
    else if (y->dtype == AP_DT_UINT64)
      snprintf(lit, sizeof lit, "UINT64_C(%llu)", (unsigned long long)ap_tensor_get_i64(t, i));
    else
      cg_literal(lit, y->dtype, (double)ap_tensor_get_i64(t, i));
    cg_printf(k, "%s%s", i ? ", " : "", lit);
  }
  cg_printf(k, "};\nmemcpy(y0, data, sizeof data);\n");
  return AP_OK;
}

ap_status cg_emit_CONSTANT(cg_kernel *k) {
  const ap_attr *a = ap_attr_find(k->n, "value");
  if (!a || a->type != AP_ATTR_TENSOR)
    return cg_error(k, AP_ERR_UNSUPPORTED, "only the 'value' form of Constant is supported here");
  return fill_from(k, a->t);
}

ap_status cg_emit_CONSTANT_OF_SHAPE(cg_kernel *k) {
  ap_tensor value;
  ap_status s = ap_constant_of_shape_value(k->g, (ap_node *)k->n, &value, k->d);
  if (s != AP_OK)
    return s;
  k->skip_in |= 1;
  char lit[64];
  const cg_operand *y = &k->out[0];
  if (y->dtype == AP_DT_FLOAT || y->dtype == AP_DT_DOUBLE)
    cg_literal(lit, y->dtype, ap_tensor_get_f64(&value, 0));
  else
    cg_literal(lit, y->dtype, (double)ap_tensor_get_i64(&value, 0));
  cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  y0[i] = %s;\n", (long long)y->numel, lit);
  return AP_OK;
}

ap_status cg_emit_SHAPE(cg_kernel *k) {
  int start, end;
  ap_shape_range(k->n, k->in[0].rank, &start, &end);
  k->skip_in |= 1;
  for (int i = start; i < end; i++)
    cg_printf(k, "y0[%d] = %lld;\n", i - start, (long long)k->in[0].dims[i]);
  return AP_OK;
}

ap_status cg_emit_SIZE(cg_kernel *k) {
  k->skip_in |= 1;
  cg_printf(k, "y0[0] = %lld;\n", (long long)k->in[0].numel);
  return AP_OK;
}

ap_status cg_emit_RANGE(cg_kernel *k) {
  double start, delta;
  if (!cg_const_f64(&k->in[0], 0, &start) || !cg_const_f64(&k->in[2], 0, &delta))
    return cg_error(k, AP_ERR_UNSUPPORTED, "start and delta must be constants");
  k->skip_in |= 7;
  ap_dtype t = k->out[0].dtype;
  char a[64], b[64];
  if (t == AP_DT_FLOAT || t == AP_DT_DOUBLE)
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  y0[i] = %s + (%s)i * %s;\n",
              (long long)k->out[0].numel, cg_literal(a, t, start), cg_ctype(t),
              cg_literal(b, t, delta));
  else
    cg_printf(k, "for (int64_t i = 0; i < %lld; i++)\n  y0[i] = (%s)(%s + i * %s);\n",
              (long long)k->out[0].numel, cg_ctype(t), cg_literal(a, AP_DT_INT64, start),
              cg_literal(b, AP_DT_INT64, delta));
  return AP_OK;
}
