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
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_ld(k, cg_in(k, 0), cg_idx(k, y->rank, st, iv)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* Copies, for o in [0, outer), run elements from src + o * src_row +
 * src_at to dst + o * dst_row + dst_at. */
static void copy_rows(cg_kernel *k, cg_x *dst, int64_t dst_row, int64_t dst_at, cg_x *src,
                      int64_t src_row, int64_t src_at, int64_t outer, int64_t run, size_t es) {
  int o = cg_for_n(k, "o", outer);
  cg_memcpy(k, cg_at(k, dst, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, dst_row)), cg_i64(k, dst_at))),
            cg_at(k, src, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, src_row)), cg_i64(k, src_at))),
            cg_i64(k, run * (int64_t)es));
  cg_end(k);
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
      copy_rows(k, cg_out(k, 0), row, at, cg_in(k, i), run, 0, outer, run, es);
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
      copy_rows(k, cg_out(k, i), run, 0, cg_in(k, 0), row, at, outer, run, es);
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
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  cg_st(k, cg_out(k, 0), cg_v(k, o),
        cg_ld(k, cg_in(k, 0), cg_add(k, cg_i64(k, base), cg_idx(k, y->rank, st, iv))));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* Indices are read at run time; negative ones count from the end, and an
 * index outside the axis gives zeros (ONNX leaves it undefined). */
int cg_gather_index(cg_kernel *k, const cg_operand *x, int axis, int j) {
  int64_t whole = x->v->dims[axis], start = x->box.start[axis];
  int at = cg_mut(k, "at", CG_T_I64, cg_ld(k, cg_in(k, 1), cg_v(k, j)));
  cg_if(k, cg_lt(k, cg_v(k, at), cg_int(k, 0)));
  cg_set_op(k, at, CG_X_ADD, cg_i64(k, whole));
  cg_end(k);
  if (start)
    cg_set_op(k, at, CG_X_SUB, cg_i64(k, start));
  return at;
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
  int o = cg_for_n(k, "o", outer);
  int j = cg_for_n(k, "j", ix->numel);
  int at = cg_gather_index(k, x, axis, j);
  cg_x *dst = cg_at(k, cg_out(k, 0),
                    cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, ix->numel)), cg_v(k, j)),
                           cg_i64(k, inner)));
  cg_if(k, cg_or(k, cg_lt(k, cg_v(k, at), cg_int(k, 0)), cg_ge(k, cg_v(k, at), cg_i64(k, dim))));
  cg_memset(k, dst, 0, cg_i64(k, inner * es));
  cg_else(k);
  cg_memcpy(k, dst,
            cg_at(k, cg_in(k, 0),
                  cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, dim)), cg_v(k, at)),
                         cg_i64(k, inner))),
            cg_i64(k, inner * es));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

ap_status cg_emit_EXPAND(cg_kernel *k) {
  k->skip_in |= (uint64_t)1 << 1;
  int slot = 0;
  cg_map_begin(k, 0, 1, &slot);
  cg_map_end(k, cg_map_arg(k, 0));
  return AP_OK;
}

/* ---- constants the folding pass left ------------------------------------- */

/* y0 = the elements of t, from a constant table. */
static ap_status fill_from(cg_kernel *k, const ap_tensor *t) {
  const cg_operand *y = &k->out[0];
  if (t->numel != y->numel || t->dtype != y->dtype)
    return cg_error(k, AP_ERR_INVALID, "the constant does not match the output's type and shape");
  if (!y->numel)
    return AP_OK;
  int id = cg_table_add(k, y->dtype, y->numel, t->data);
  cg_memcpy(k, cg_out(k, 0), cg_table(k, id),
            cg_i64(k, y->numel * (int64_t)ap_dtype_size(y->dtype)));
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
  const cg_operand *y = &k->out[0];
  cg_x *lit = y->dtype == AP_DT_FLOAT || y->dtype == AP_DT_DOUBLE
                  ? cg_lit(k, y->dtype, ap_tensor_get_f64(&value, 0))
                  : cg_lit(k, y->dtype, (double)ap_tensor_get_i64(&value, 0));
  int i = cg_for_n(k, "i", y->numel);
  cg_st(k, cg_out(k, 0), cg_v(k, i), lit);
  cg_end(k);
  return AP_OK;
}

ap_status cg_emit_SHAPE(cg_kernel *k) {
  int start, end;
  ap_shape_range(k->n, k->in[0].rank, &start, &end);
  k->skip_in |= 1;
  for (int i = start; i < end; i++)
    cg_st(k, cg_out(k, 0), cg_i64(k, i - start), cg_i64(k, k->in[0].dims[i]));
  return AP_OK;
}

ap_status cg_emit_SIZE(cg_kernel *k) {
  k->skip_in |= 1;
  cg_st(k, cg_out(k, 0), cg_i64(k, 0), cg_i64(k, k->in[0].numel));
  return AP_OK;
}

ap_status cg_emit_RANGE(cg_kernel *k) {
  double start, delta;
  if (!cg_const_f64(&k->in[0], 0, &start) || !cg_const_f64(&k->in[2], 0, &delta))
    return cg_error(k, AP_ERR_UNSUPPORTED, "start and delta must be constants");
  k->skip_in |= 7;
  ap_dtype t = k->out[0].dtype;
  cg_ty ct = cg_ty_of(t);
  int i = cg_for_n(k, "i", k->out[0].numel);
  if (t == AP_DT_FLOAT || t == AP_DT_DOUBLE)
    cg_st(k, cg_out(k, 0), cg_v(k, i),
          cg_add(k, cg_lit(k, t, start), cg_mul(k, cg_cast(k, ct, cg_v(k, i)), cg_lit(k, t, delta))));
  else
    cg_st(k, cg_out(k, 0), cg_v(k, i),
          cg_cast(k, ct, cg_add(k, cg_lit(k, AP_DT_INT64, start),
                                cg_mul(k, cg_v(k, i), cg_lit(k, AP_DT_INT64, delta)))));
  cg_end(k);
  return AP_OK;
}

cg_x *cg_pad_source(cg_kernel *k, ap_pad_mode mode, cg_x *i, int64_t begin, int64_t end,
                    int64_t dim, cg_x **inside) {
  *inside = NULL;
  if (!begin && !end)
    return i;
  int j = cg_let(k, "j", cg_sub(k, i, cg_i64(k, begin)));
  cg_x *jv = cg_v(k, j);
  switch (mode) {
  case AP_PAD_CONSTANT:
    *inside = cg_and(k, cg_ge(k, jv, cg_i64(k, 0)), cg_lt(k, cg_v(k, j), cg_i64(k, dim)));
    return jv;
  case AP_PAD_EDGE:
    return cg_sel(k, cg_lt(k, jv, cg_i64(k, 0)), cg_i64(k, 0),
                  cg_sel(k, cg_ge(k, cg_v(k, j), cg_i64(k, dim)), cg_i64(k, dim - 1), cg_v(k, j)));
  case AP_PAD_WRAP:
    return cg_bin(k, CG_X_REM, cg_add(k, cg_bin(k, CG_X_REM, jv, cg_i64(k, dim)), cg_i64(k, dim)),
                  cg_i64(k, dim));
  case AP_PAD_REFLECT:
    break;
  }
  int64_t period = 2 * (dim - 1);
  if (period == 0)
    return cg_i64(k, 0);
  cg_x *abs_j = cg_sel(k, cg_lt(k, jv, cg_i64(k, 0)), cg_neg(k, cg_v(k, j)), cg_v(k, j));
  int m = cg_let(k, "m", cg_bin(k, CG_X_REM, abs_j, cg_i64(k, period)));
  return cg_sel(k, cg_lt(k, cg_v(k, m), cg_i64(k, dim)), cg_v(k, m),
                cg_sub(k, cg_i64(k, period), cg_v(k, m)));
}

/* Pads (opset < 11: attributes; later: constant inputs, the constant value
 * a constant or fed at run time). A padded axis is whole on every device
 * (ir/axes.c), an axis without pads the same box of input and output. */
ap_status cg_emit_PAD(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t begin[AP_MAX_RANK], end[AP_MAX_RANK];
  ap_pad_mode mode;
  bool known;
  ap_status s = ap_pad_params(k->g, (ap_node *)k->n, x->rank, begin, end, &mode, &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED,
                    "pads and axes must be constants (bind them with --inputs)");
  k->skip_in |= ~(uint64_t)1;
  for (int i = 0; i < x->rank; i++)
    if (x->dims[i] + begin[i] + end[i] != y->box.size[i])
      return cg_error(k, AP_ERR_INVALID, "output dim %d is %lld, the pads give %lld", i,
                      (long long)y->box.size[i], (long long)(x->dims[i] + begin[i] + end[i]));
  if (!y->numel)
    return AP_OK;
  ap_dtype t = x->dtype;
  cg_x *value = NULL;
  int fed = -1;
  double v = 0;
  if (cg_opset(k) < 11) {
    value = cg_lit(k, t, ap_attr_float(k->n, "value", 0));
  } else if (!k->in[2].v) {
    value = cg_lit(k, t, 0);
  } else if (cg_dtype_is_unsigned(t) || t == AP_DT_INT64 || t == AP_DT_UINT64) {
    int64_t iv;
    if (cg_const_i64(&k->in[2], 0, &iv))
      value = cg_const(k, cg_ty_of(t), (double)iv);
  } else if (cg_const_f64(&k->in[2], 0, &v)) {
    value = cg_lit(k, t, v);
  }
  if (!value && mode == AP_PAD_CONSTANT) { /* read once, before the loops */
    k->skip_in &= ~((uint64_t)1 << 2);
    fed = cg_let(k, "value", cg_ldi(k, cg_in(k, 2), 0));
  }
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  cg_x *off = cg_i64(k, 0), *inside = NULL;
  for (int a = 0; a < x->rank; a++) {
    cg_x *in_a;
    cg_x *j = cg_pad_source(k, mode, cg_v(k, iv[a]), begin[a], end[a], x->dims[a], &in_a);
    off = cg_add(k, off, xs[a] == 1 ? j : cg_mul(k, j, cg_i64(k, xs[a])));
    if (in_a)
      inside = inside ? cg_and(k, inside, in_a) : in_a;
  }
  cg_x *el = cg_ld(k, cg_in(k, 0), off);
  if (inside)
    el = cg_sel(k, inside, el, fed >= 0 ? cg_v(k, fed) : value);
  cg_st(k, cg_out(k, 0), cg_v(k, o), el);
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* The input offset an output element of Tile reads: each axis's index
 * modulo the input's dim (an axis that is not repeated, which may be
 * split, reads its own index). */
cg_x *cg_tile_source(cg_kernel *k, const int64_t *repeats, const int *iv) {
  const cg_operand *x = &k->in[0];
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_x *off = cg_i64(k, 0);
  for (int a = 0; a < x->rank; a++) {
    cg_x *j = cg_v(k, iv[a]);
    if (repeats[a] != 1)
      j = cg_bin(k, CG_X_REM, j, cg_i64(k, x->dims[a]));
    off = cg_add(k, off, xs[a] == 1 ? j : cg_mul(k, j, cg_i64(k, xs[a])));
  }
  return off;
}

ap_status cg_emit_TILE(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t repeats[AP_MAX_RANK];
  bool known;
  ap_status s = ap_tile_repeats(k->g, (ap_node *)k->n, x->rank, repeats, &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED, "repeats must be a constant (bind it with --inputs)");
  k->skip_in |= ~(uint64_t)1;
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_ld(k, cg_in(k, 0), cg_tile_source(k, repeats, iv)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

cg_x *cg_depth_space_source(cg_kernel *k, const int *iv) {
  const int64_t *x = k->in[0].dims;
  int64_t b;
  bool crd;
  ap_diag d = {0};
  if (ap_depth_space_params(k->g, (ap_node *)k->n, &b, &crd, &d) != AP_OK)
    ap_die("DepthToSpace/SpaceToDepth parameters were checked by shape inference");
  cg_x *bb = cg_i64(k, b), *xc, *xh, *xw;
  if (k->n->op == AP_OP_DEPTH_TO_SPACE) {
    cg_x *i = cg_bin(k, CG_X_REM, cg_v(k, iv[2]), bb), *j = cg_bin(k, CG_X_REM, cg_v(k, iv[3]), bb);
    xc = crd ? cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, iv[1]), bb), i), bb), j)
             : cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, i, bb), j), cg_i64(k, x[1] / (b * b))),
                      cg_v(k, iv[1]));
    xh = cg_div(k, cg_v(k, iv[2]), bb);
    xw = cg_div(k, cg_v(k, iv[3]), bb);
  } else {
    int blk = cg_let(k, "blk", cg_div(k, cg_v(k, iv[1]), cg_i64(k, x[1])));
    xc = cg_bin(k, CG_X_REM, cg_v(k, iv[1]), cg_i64(k, x[1]));
    xh = cg_add(k, cg_mul(k, cg_v(k, iv[2]), bb), cg_div(k, cg_v(k, blk), bb));
    xw = cg_add(k, cg_mul(k, cg_v(k, iv[3]), bb), cg_bin(k, CG_X_REM, cg_v(k, blk), bb));
  }
  cg_x *row = cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, iv[0]), cg_i64(k, x[1])), xc),
                               cg_i64(k, x[2])),
                     xh);
  return cg_add(k, cg_mul(k, row, cg_i64(k, x[3])), xw);
}

/* Channels and space trade places within each batch element, which a
 * device holds whole (ir/axes.c, rule BATCH). */
static ap_status depth_space(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_ld(k, cg_in(k, 0), cg_depth_space_source(k, iv)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

ap_status cg_emit_DEPTH_TO_SPACE(cg_kernel *k) { return depth_space(k); }
ap_status cg_emit_SPACE_TO_DEPTH(cg_kernel *k) { return depth_space(k); }

/* The tables of a Resize kernel: per resized axis and tap, the input index
 * each output index reads and (linear, cubic, a crop) its weight, and with
 * a crop whether the index lies inside the input, as constant tables of the
 * kernel; axes Resize maps to themselves (which may be split) read their
 * own index. */
typedef struct resize_tables {
  ap_resize r;
  bool crop;                      /* tf_crop_and_resize */
  bool weighted;                  /* weight tables (linear, cubic, a crop) */
  int n;                          /* resized axes */
  int axis[AP_MAX_RANK];
  int idx[AP_MAX_RANK][AP_RESIZE_MAX_TAPS], w[AP_MAX_RANK][AP_RESIZE_MAX_TAPS]; /* table ids */
  int inside[AP_MAX_RANK];        /* crop: table ids, 1 inside and 0 outside */
} resize_tables;

static ap_status resize_tables_of(cg_kernel *k, resize_tables *t) {
  const cg_operand *x = &k->in[0];
  bool known;
  ap_status s = ap_resize_params(k->g, (ap_node *)k->n, x->v, &t->r, &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED,
                    "scales and sizes must be constants (bind them with --inputs)");
  int taps = t->r.taps;
  t->crop = t->r.coord == AP_RESIZE_TF_CROP_AND_RESIZE;
  t->weighted = taps > 1 || t->crop;
  t->n = 0;
  for (int a = 0; a < x->rank; a++) {
    if (ap_resize_identity(&t->r, a))
      continue;
    int64_t out = t->r.out[a];
    int64_t *idx[AP_RESIZE_MAX_TAPS];
    double *w[AP_RESIZE_MAX_TAPS];
    double *inside = ap_arena_array(k->g->arena, (size_t)out + 1, sizeof *inside);
    if (!inside)
      return cg_error(k, AP_ERR_NOMEM, "out of memory");
    for (int j = 0; j < taps; j++) {
      idx[j] = ap_arena_array(k->g->arena, (size_t)out + 1, sizeof *idx[j]);
      w[j] = ap_arena_array(k->g->arena, (size_t)out + 1, sizeof *w[j]);
      if (!idx[j] || !w[j])
        return cg_error(k, AP_ERR_NOMEM, "out of memory");
    }
    for (int64_t i = 0; i < out; i++) {
      int64_t ix[AP_RESIZE_MAX_TAPS];
      double wi[AP_RESIZE_MAX_TAPS];
      inside[i] = ap_resize_source(&t->r, a, i, ix, wi);
      for (int j = 0; j < taps; j++)
        idx[j][i] = ix[j], w[j][i] = wi[j];
    }
    t->axis[t->n] = a;
    for (int j = 0; j < taps; j++) {
      t->idx[t->n][j] = cg_table_add(k, AP_DT_INT64, out, idx[j]);
      t->w[t->n][j] = t->weighted ? cg_table_add(k, AP_DT_DOUBLE, out, w[j]) : -1;
    }
    t->inside[t->n] = t->crop ? cg_table_add(k, AP_DT_DOUBLE, out, inside) : -1;
    t->n++;
  }
  /* taps^n input elements per output element. */
  int corners = 1;
  for (int j = 0; j < t->n; j++)
    if ((corners *= taps) > 64)
      return cg_error(k, AP_ERR_UNSUPPORTED, "%s resizing of %d axes (at most %d)",
                      taps == 2 ? "linear" : "cubic", t->n, taps == 2 ? 6 : 3);
  return AP_OK;
}

/* Corner c (digit j in base taps: the tap along resized axis j) of output
 * element iv: its input offset, and its weight (NULL for nearest). */
cg_x *cg_resize_corner(cg_kernel *k, const void *tables, const int *iv, int c, cg_x **weight) {
  const resize_tables *t = tables;
  const cg_operand *x = &k->in[0];
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  cg_x *off = cg_i64(k, 0);
  *weight = NULL;
  int taps = t->r.taps;
  for (int a = 0, j = 0; a < x->rank; a++) {
    cg_x *idx = cg_v(k, iv[a]);
    if (j < t->n && t->axis[j] == a) {
      int tap = c % taps;
      c /= taps;
      idx = cg_ld(k, cg_table(k, t->idx[j][tap]), cg_v(k, iv[a]));
      if (t->weighted) {
        cg_x *f = cg_ld(k, cg_table(k, t->w[j][tap]), cg_v(k, iv[a]));
        *weight = *weight ? cg_mul(k, *weight, f) : f;
      }
      j++;
    }
    off = cg_add(k, off, xs[a] == 1 ? idx : cg_mul(k, idx, cg_i64(k, xs[a])));
  }
  return off;
}

/* tf_crop_and_resize: the extrapolation value times whether output element
 * iv lies outside the input along some axis; NULL for other modes. */
static cg_x *resize_outside(cg_kernel *k, const resize_tables *t, const int *iv) {
  if (!t->crop || t->n == 0)
    return NULL;
  cg_x *in = NULL;
  for (int j = 0; j < t->n; j++) {
    cg_x *f = cg_ld(k, cg_table(k, t->inside[j]), cg_v(k, iv[t->axis[j]]));
    in = in ? cg_mul(k, in, f) : f;
  }
  return cg_mul(k, cg_f64(k, t->r.extrapolation), cg_sub(k, cg_f64(k, 1), in));
}

int cg_resize_begin(cg_kernel *k, void **tables, ap_status *s) {
  resize_tables *t = ap_arena_array(k->g->arena, 1, sizeof *t);
  if (!t) {
    *s = cg_error(k, AP_ERR_NOMEM, "out of memory");
    return 0;
  }
  *s = resize_tables_of(k, t);
  *tables = t;
  int corners = 1;
  for (int j = 0; *s == AP_OK && j < t->n; j++)
    corners *= t->r.taps;
  return corners;
}

/* Nearest: one input element per output element; linear and cubic: the
 * weighted sum of the 2^n or 4^n input elements around it (n resized axes),
 * in double. */
static ap_status resize(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  void *t;
  ap_status s;
  int corners = cg_resize_begin(k, &t, &s);
  if (s != AP_OK)
    return s;
  k->skip_in |= ~(uint64_t)1;
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  cg_x *val = NULL;
  for (int c = 0; c < corners; c++) {
    cg_x *w, *off = cg_resize_corner(k, t, iv, c, &w);
    cg_x *el = cg_ld(k, cg_in(k, 0), off);
    cg_x *term = w ? cg_mul(k, w, el) : el;
    val = val ? cg_add(k, val, term) : term;
  }
  cg_x *outside = resize_outside(k, t, iv);
  if (outside)
    val = cg_add(k, val, outside);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_cast(k, cg_ty_of(y->dtype), val));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

ap_status cg_emit_RESIZE(cg_kernel *k) { return resize(k); }
ap_status cg_emit_UPSAMPLE(cg_kernel *k) { return resize(k); }

cg_x *cg_trilu_keep(cg_kernel *k, const int *iv) {
  const cg_operand *x = &k->in[0];
  bool upper, known;
  int64_t kk;
  ap_diag d = {0};
  if (ap_trilu_params(k->g, (ap_node *)k->n, &upper, &kk, &known, &d) != AP_OK || !known)
    ap_die("Trilu's parameters were checked by its emitter");
  /* col - row >= k keeps the upper part, <= k the lower. */
  cg_x *diff = cg_sub(k, cg_v(k, iv[x->rank - 1]), cg_v(k, iv[x->rank - 2]));
  return upper ? cg_ge(k, diff, cg_i64(k, kk)) : cg_le(k, diff, cg_i64(k, kk));
}

ap_status cg_trilu_check(cg_kernel *k) {
  bool upper, known;
  int64_t kk;
  ap_status s = ap_trilu_params(k->g, (ap_node *)k->n, &upper, &kk, &known, k->d);
  if (s == AP_OK && !known)
    return cg_error(k, AP_ERR_UNSUPPORTED, "k must be a constant (bind it with --inputs)");
  return s;
}

/* Trilu: the matrices (the last two axes, whole: ir/axes.c, rule TRILU)
 * keep the elements on and above (upper) or below the k-th diagonal. */
ap_status cg_emit_TRILU(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  ap_status s = cg_trilu_check(k);
  if (s != AP_OK)
    return s;
  k->skip_in |= (uint64_t)1 << 1;
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_st(k, cg_out(k, 0), cg_v(k, o),
        cg_sel(k, cg_trilu_keep(k, iv), cg_ld(k, cg_in(k, 0), cg_v(k, o)), cg_int(k, 0)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* ---- GatherElements, GatherND, ScatterElements, ScatterND ---------------- */

/* The output offset an element of ScatterElements' indices (loop variables
 * iv over the indices' box, at: the normalised index) lands on: its own
 * position off the axis, shifted from the indices' box into the output's
 * (ir/axes.c keeps both boxes equal where an axis is split). */
cg_x *cg_elements_offset(cg_kernel *k, const cg_operand *t, const cg_operand *from,
                             int axis, const int *iv, int at) {
  int64_t ts[AP_MAX_RANK];
  cg_strides(t->rank, t->dims, ts);
  cg_x *off = cg_mul(k, cg_v(k, at), cg_i64(k, ts[axis]));
  for (int a = 0; a < t->rank; a++) {
    if (a == axis)
      continue;
    cg_x *i = cg_v(k, iv[a]);
    int64_t shift = from->box.start[a] - t->box.start[a];
    if (shift)
      i = cg_add(k, i, cg_i64(k, shift));
    off = cg_add(k, off, cg_mul(k, i, cg_i64(k, ts[a])));
  }
  return off;
}

/* Negative indices count from the end; an index outside the axis reads a
 * zero and writes nothing (ONNX leaves both undefined; constant indices
 * were checked by shape inference). */
cg_x *cg_in_axis(cg_kernel *k, int at, int64_t dim) {
  return cg_and(k, cg_ge(k, cg_v(k, at), cg_int(k, 0)), cg_lt(k, cg_v(k, at), cg_i64(k, dim)));
}

ap_status cg_emit_GATHER_ELEMENTS(cg_kernel *k) {
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->box.size, "i", iv);
  int at = cg_gather_index(k, x, axis, o);
  cg_if(k, cg_in_axis(k, at, x->dims[axis]));
  cg_st(k, cg_out(k, 0), cg_v(k, o),
        cg_ld(k, cg_in(k, 0), cg_elements_offset(k, x, y, axis, iv, at)));
  cg_else(k);
  cg_st(k, cg_out(k, 0), cg_v(k, o), cg_int(k, 0));
  cg_end(k);
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

int cg_one_hot_begin(cg_kernel *k, int *axis, int *iv, int *o, ap_status *s) {
  const cg_operand *ix = &k->in[0], *y = &k->out[0];
  int64_t depth;
  bool known;
  *s = ap_one_hot_params(k->g, (ap_node *)k->n, ix->rank, axis, &depth, &known, k->d);
  if (*s == AP_OK && !known)
    *s = cg_error(k, AP_ERR_UNSUPPORTED, "depth must be a constant (bind it with --inputs)");
  if (*s != AP_OK || !y->numel)
    return -1;
  /* The indices' strides seen from the output's indices: 0 along the depth. */
  int64_t is[AP_MAX_RANK], st[AP_MAX_RANK];
  cg_strides(ix->rank, ix->dims, is);
  for (int a = 0; a < y->rank; a++)
    st[a] = a == *axis ? 0 : is[a - (a > *axis)];
  *o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0));
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_x *raw = cg_ld(k, cg_in(k, 0), cg_idx(k, y->rank, st, iv));
  if (cg_ty_float(cg_ty_of(ix->dtype))) {
    /* Truncated to an integer as a cast would, after clamping (out of
     * range and NaN select nothing). */
    int r = cg_let(k, "raw", cg_cast(k, CG_T_F64, raw));
    cg_x *lim = cg_minmax(k, false, CG_T_F64,
                          cg_minmax(k, true, CG_T_F64, cg_v(k, r), cg_f64(k, (double)(-depth - 1))),
                          cg_f64(k, (double)depth));
    raw = cg_cast(k, CG_T_I64, cg_sel(k, cg_eq(k, cg_v(k, r), cg_v(k, r)), lim,
                                      cg_f64(k, (double)depth)));
  } else {
    raw = cg_cast(k, CG_T_I64, raw);
  }
  int ri = cg_let(k, "index", raw);
  int at = cg_let(k, "at", cg_sel(k, cg_lt(k, cg_v(k, ri), cg_i64(k, 0)),
                                  cg_add(k, cg_v(k, ri), cg_i64(k, depth)), cg_v(k, ri)));
  return cg_let(k, "on", cg_eq(k, cg_v(k, at), cg_v(k, iv[*axis])));
}

/* OneHot: values[1] where the depth index equals the (negative: counted
 * from depth) index, values[0] elsewhere; the depth axis is whole
 * (ir/axes.c, rule ONE_HOT). */
ap_status cg_emit_ONE_HOT(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  int axis, iv[AP_MAX_RANK], o;
  ap_status s;
  k->skip_in |= (uint64_t)1 << 1;
  int on = cg_one_hot_begin(k, &axis, iv, &o, &s);
  if (on < 0)
    return s;
  cg_st(k, cg_out(k, 0), cg_v(k, o),
        cg_sel(k, cg_v(k, on), cg_ldi(k, cg_in(k, 2), 1), cg_ldi(k, cg_in(k, 2), 0)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* y[i] = y[i] (reduction) u. */
static void scatter_store(cg_kernel *k, ap_scatter_reduction r, cg_x *i, cg_x *u) {
  const cg_operand *y = &k->out[0];
  cg_x *old = cg_ld(k, cg_out(k, 0), i);
  switch (r) {
  case AP_SCATTER_NONE: cg_st(k, cg_out(k, 0), i, u); break;
  case AP_SCATTER_ADD: cg_st(k, cg_out(k, 0), i, cg_add(k, old, u)); break;
  case AP_SCATTER_MUL: cg_st(k, cg_out(k, 0), i, cg_mul(k, old, u)); break;
  case AP_SCATTER_MAX:
  case AP_SCATTER_MIN:
    cg_st(k, cg_out(k, 0), i, cg_minmax(k, r == AP_SCATTER_MAX, cg_ty_of(y->dtype), old, u));
    break;
  }
}

/* The output starts as the data, then every update lands. */
static void copy_data(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  if (y->numel)
    cg_memcpy(k, cg_out(k, 0), cg_in(k, 0),
              cg_i64(k, y->numel * (int64_t)ap_dtype_size(y->dtype)));
}

ap_status cg_emit_SCATTER_ELEMENTS(cg_kernel *k) {
  const cg_operand *ix = &k->in[1], *y = &k->out[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), y->rank);
  ap_scatter_reduction r;
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  ap_status s = ap_scatter_reduction_of(k->g, (ap_node *)k->n, &r, k->d);
  if (s != AP_OK)
    return s;
  copy_data(k);
  if (!ix->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, ix->rank, ix->dims, "i", iv);
  int at = cg_gather_index(k, y, axis, o);
  cg_if(k, cg_in_axis(k, at, y->dims[axis]));
  scatter_store(k, r, cg_elements_offset(k, y, ix, axis, iv, at), cg_ld(k, cg_in(k, 2), cg_v(k, o)));
  cg_end(k);
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, ix->rank);
  return AP_OK;
}


ap_status cg_nd_geometry(cg_kernel *k, cg_nd_geom *g) {
  const cg_operand *x = &k->in[0], *ix = &k->in[1];
  ap_status s = ap_gather_nd_batch(k->g, (ap_node *)k->n, &g->b, k->d);
  if (s != AP_OK)
    return s;
  g->width = (int)ix->dims[ix->rank - 1];
  cg_strides(x->rank, x->dims, g->xs);
  g->batches = prod(x->dims, 0, g->b);
  g->tuples = prod(ix->dims, g->b, ix->rank - 1);
  g->block = prod(x->dims, g->b + g->width, x->rank);
  g->per_batch = prod(x->dims, g->b, x->rank);
  return AP_OK;
}

/* Opens the loops over batches and tuples (t: the tuple's number) and
 * returns the variable holding the data offset of the tuple's block, and
 * one that is 0 when a component lies outside its axis. */
int cg_nd_open(cg_kernel *k, const cg_nd_geom *g, int *t, int *ok) {
  int bi = cg_for_n(k, "b", g->batches), m = cg_for_n(k, "m", g->tuples);
  *t = cg_let(k, "t", cg_add(k, cg_mul(k, cg_v(k, bi), cg_i64(k, g->tuples)), cg_v(k, m)));
  int off = cg_mut(k, "off", CG_T_I64, cg_mul(k, cg_v(k, bi), cg_i64(k, g->per_batch)));
  *ok = cg_mut(k, "ok", CG_T_I64, cg_i64(k, 1));
  for (int q = 0; q < g->width; q++) {
    int64_t dim = k->in[0].dims[g->b + q];
    int at = cg_mut(k, "at", CG_T_I64,
                    cg_ld(k, cg_in(k, 1),
                          cg_add(k, cg_mul(k, cg_v(k, *t), cg_i64(k, g->width)), cg_i64(k, q))));
    cg_if(k, cg_lt(k, cg_v(k, at), cg_int(k, 0)));
    cg_set_op(k, at, CG_X_ADD, cg_i64(k, dim));
    cg_end(k);
    cg_if(k, cg_not(k, cg_in_axis(k, at, dim)));
    cg_set(k, *ok, cg_i64(k, 0));
    cg_end(k);
    cg_set_op(k, off, CG_X_ADD, cg_mul(k, cg_v(k, at), cg_i64(k, g->xs[g->b + q])));
  }
  return off;
}

ap_status cg_emit_GATHER_ND(cg_kernel *k) {
  const cg_operand *y = &k->out[0];
  cg_nd_geom g;
  ap_status s = cg_nd_geometry(k, &g);
  if (s != AP_OK)
    return s;
  if (!y->numel)
    return AP_OK;
  int64_t es = (int64_t)ap_dtype_size(y->dtype);
  int t, ok, off = cg_nd_open(k, &g, &t, &ok);
  cg_x *dst = cg_at(k, cg_out(k, 0), cg_mul(k, cg_v(k, t), cg_i64(k, g.block)));
  cg_if(k, cg_ne(k, cg_v(k, ok), cg_i64(k, 0)));
  cg_memcpy(k, dst, cg_at(k, cg_in(k, 0), cg_v(k, off)), cg_i64(k, g.block * es));
  cg_else(k);
  cg_memset(k, dst, 0, cg_i64(k, g.block * es));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

ap_status cg_emit_SCATTER_ND(cg_kernel *k) {
  cg_nd_geom g;
  ap_scatter_reduction r;
  ap_status s = cg_nd_geometry(k, &g);
  if (s != AP_OK || (s = ap_scatter_reduction_of(k->g, (ap_node *)k->n, &r, k->d)) != AP_OK)
    return s;
  copy_data(k);
  if (!k->in[2].numel)
    return AP_OK;
  int t, ok, off = cg_nd_open(k, &g, &t, &ok);
  cg_if(k, cg_ne(k, cg_v(k, ok), cg_i64(k, 0)));
  int e = cg_for_n(k, "e", g.block);
  scatter_store(k, r, cg_add(k, cg_v(k, off), cg_v(k, e)),
                cg_ld(k, cg_in(k, 2),
                      cg_add(k, cg_mul(k, cg_v(k, t), cg_i64(k, g.block)), cg_v(k, e))));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}
