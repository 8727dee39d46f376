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
  int i = cg_for_n(k, "i", k->in[0].numel);
  cg_grad_put(gk, 0, cg_v(k, i), cg_ld(k, cg_dy(k, 0), cg_v(k, i)));
  cg_end(k);
  return AP_OK;
}

static ap_status grad_transpose(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t st[AP_MAX_RANK];
  ap_status s = cg_transpose_strides(k, x, st);
  if (s != AP_OK)
    return s;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_grad_put(gk, 0, cg_idx(k, y->rank, st, iv), cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
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
    if ((gk->want >> i & 1) && run && outer) {
      int o = cg_for_n(k, "o", outer), j = cg_for_n(k, "i", run);
      cg_grad_put(gk, i, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, run)), cg_v(k, j)),
                  cg_ld(k, cg_dy(k, 0),
                        cg_add(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, row)), cg_i64(k, at)),
                               cg_v(k, j))));
      cg_end(k);
      cg_end(k);
    }
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
  bool accumulates = gk->acc & 1;
  for (int i = 0; i < k->n_out; i++) {
    const cg_operand *y = &k->out[i];
    if (!y->v)
      continue;
    int64_t run = prod(y->dims, axis, y->rank);
    bool has = gk->has_dy >> i & 1;
    if (run && outer && (has || !accumulates)) {
      int o = cg_for_n(k, "o", outer), j = cg_for_n(k, "i", run);
      cg_x *di = cg_add(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, row)), cg_i64(k, at)), cg_v(k, j));
      cg_grad_put(gk, 0, di,
                  has ? cg_ld(k, cg_dy(k, i), cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, run)), cg_v(k, j)))
                      : cg_int(k, 0));
      cg_end(k);
      cg_end(k);
    }
    at += run;
  }
  return AP_OK;
}

/* dx gets every output element's gradient at the input element it was read
 * from: once each in the constant mode, several times where edge, reflect
 * or wrap repeat an element. */
static ap_status grad_pad(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
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
  cg_grad_zero(gk, 0);
  if (!y->numel)
    return AP_OK;
  int64_t xs[AP_MAX_RANK];
  cg_strides(x->rank, x->dims, xs);
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_x *off = cg_i64(k, 0), *inside = NULL;
  for (int a = 0; a < x->rank; a++) {
    cg_x *in_a;
    cg_x *j = cg_pad_source(k, mode, cg_v(k, iv[a]), begin[a], end[a], x->dims[a], &in_a);
    off = cg_add(k, off, xs[a] == 1 ? j : cg_mul(k, j, cg_i64(k, xs[a])));
    if (in_a)
      inside = inside ? cg_and(k, inside, in_a) : in_a;
  }
  if (inside)
    cg_if(k, inside);
  cg_st_op(k, cg_dx(k, 0), off, CG_X_ADD, cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  if (inside)
    cg_end(k);
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* Every output element's gradient back to the element it copies; Tile's
 * copies of one element sum. */
static ap_status grad_tile(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int64_t repeats[AP_MAX_RANK];
  bool known;
  ap_status s = ap_tile_repeats(k->g, (ap_node *)k->n, x->rank, repeats, &known, k->d);
  if (s != AP_OK)
    return s;
  if (!known)
    return cg_error(k, AP_ERR_UNSUPPORTED, "repeats must be a constant (bind it with --inputs)");
  cg_grad_zero(gk, 0);
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_st_op(k, cg_dx(k, 0), cg_tile_source(k, repeats, iv), CG_X_ADD,
           cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* A permutation of the elements: each input element gets one output's. */
static ap_status grad_depth_space(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *y = &k->out[0];
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_grad_put(gk, 0, cg_depth_space_source(k, iv), cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* Every output element's gradient to the input elements it read, weighted
 * as they were (linear), added where several outputs read one element. */
static ap_status grad_resize(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *y = &k->out[0];
  void *t;
  ap_status s;
  int corners = cg_resize_begin(k, &t, &s);
  if (s != AP_OK)
    return s;
  cg_grad_zero(gk, 0);
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  for (int c = 0; c < corners; c++) {
    cg_x *w, *off = cg_resize_corner(k, t, iv, c, &w);
    cg_x *dy = cg_ld(k, cg_dy(k, 0), cg_v(k, o));
    cg_st_op(k, cg_dx(k, 0), off, CG_X_ADD, w ? cg_mul(k, w, dy) : dy);
  }
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

/* Trilu: the kept elements pass their gradient, the zeroed ones none. */
static ap_status grad_trilu(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0];
  ap_status s = cg_trilu_check(k);
  if (s != AP_OK || !x->numel)
    return s;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, x->rank, x->dims, "i", iv);
  cg_grad_put(gk, 0, cg_v(k, o),
              cg_sel(k, cg_trilu_keep(k, iv), cg_ld(k, cg_dy(k, 0), cg_v(k, o)), cg_int(k, 0)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, x->rank);
  return AP_OK;
}

/* OneHot: values' two elements collect the gradients of the outputs that
 * took them (the indices have none). */
static ap_status grad_one_hot(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *y = &k->out[0];
  if (y->dtype != AP_DT_FLOAT && y->dtype != AP_DT_DOUBLE)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training: element type %s has no gradient",
                    ap_dtype_name(y->dtype));
  cg_grad_zero(gk, 2);
  int axis, iv[AP_MAX_RANK], o;
  ap_status s;
  int on = cg_one_hot_begin(k, &axis, iv, &o, &s);
  if (on < 0)
    return s;
  cg_st_op(k, cg_dx(k, 2), cg_sel(k, cg_v(k, on), cg_i64(k, 1), cg_i64(k, 0)), CG_X_ADD,
           cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
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
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  cg_st_op(k, cg_dx(k, 0), cg_add(k, cg_i64(k, base), cg_idx(k, y->rank, st, iv)), CG_X_ADD,
           cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
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
  int o = cg_for_n(k, "o", outer), j = cg_for_n(k, "j", ix->numel);
  int at = cg_gather_index(k, x, axis, j);
  cg_if(k, cg_and(k, cg_ge(k, cg_v(k, at), cg_int(k, 0)), cg_lt(k, cg_v(k, at), cg_i64(k, dim))));
  int t = cg_for_n(k, "t", inner);
  cg_x *di = cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, dim)), cg_v(k, at)),
                              cg_i64(k, inner)),
                    cg_v(k, t));
  cg_x *yi = cg_add(k, cg_mul(k, cg_add(k, cg_mul(k, cg_v(k, o), cg_i64(k, ix->numel)), cg_v(k, j)),
                              cg_i64(k, inner)),
                    cg_v(k, t));
  cg_st_op(k, cg_dx(k, 0), di, CG_X_ADD, cg_ld(k, cg_dy(k, 0), yi));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

/* GatherElements, GatherND: every output's gradient back to the element it
 * read, summed where indices repeat; none for out-of-range indices, which
 * read zeros. */
static ap_status grad_gather_elements(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *x = &k->in[0], *y = &k->out[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), x->rank);
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  cg_grad_zero(gk, 0);
  if (!y->numel)
    return AP_OK;
  int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
  cg_loops(k, y->rank, y->dims, "i", iv);
  int at = cg_gather_index(k, x, axis, o);
  cg_if(k, cg_in_axis(k, at, x->dims[axis]));
  cg_st_op(k, cg_dx(k, 0), cg_elements_offset(k, x, y, axis, iv, at), CG_X_ADD,
           cg_ld(k, cg_dy(k, 0), cg_v(k, o)));
  cg_end(k);
  cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
  cg_loops_end(k, y->rank);
  return AP_OK;
}

static ap_status grad_gather_nd(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  cg_nd_geom g;
  ap_status s = cg_nd_geometry(k, &g);
  if (s != AP_OK)
    return s;
  cg_grad_zero(gk, 0);
  if (!k->out[0].numel)
    return AP_OK;
  int t, ok, off = cg_nd_open(k, &g, &t, &ok);
  cg_if(k, cg_ne(k, cg_v(k, ok), cg_i64(k, 0)));
  int e = cg_for_n(k, "e", g.block);
  cg_st_op(k, cg_dx(k, 0), cg_add(k, cg_v(k, off), cg_v(k, e)), CG_X_ADD,
           cg_ld(k, cg_dy(k, 0), cg_add(k, cg_mul(k, cg_v(k, t), cg_i64(k, g.block)),
                                      cg_v(k, e))));
  cg_end(k);
  cg_end(k);
  cg_end(k);
  cg_end(k);
  return AP_OK;
}

/* ScatterElements, ScatterND with reduction none or add: an update's
 * gradient is the output's where it lands; the data's is the output's,
 * except (reduction none) where an update replaced it, which the scratch
 * marks. ONNX leaves repeated indices under none undefined; here every one
 * of them gets the gradient. mul, max and min have no backward. */
static ap_status scatter_grad_begin(cg_grad_kernel *gk, ap_scatter_reduction *r, int *mask) {
  cg_kernel *k = gk->k;
  const cg_operand *y = &k->out[0];
  ap_status s = ap_scatter_reduction_of(k->g, (ap_node *)k->n, r, k->d);
  if (s != AP_OK)
    return s;
  if (*r != AP_SCATTER_NONE && *r != AP_SCATTER_ADD)
    return cg_error(k, AP_ERR_UNSUPPORTED, "training through reduction '%s' is not supported",
                    ap_attr_string(k->n, "reduction", "none"));
  *mask = -1;
  if (!(gk->want & 1) || *r != AP_SCATTER_NONE) {
    if (gk->want & 1) {
      int i = cg_for_n(k, "i", y->numel);
      cg_grad_put(gk, 0, cg_v(k, i), cg_ld(k, cg_dy(k, 0), cg_v(k, i)));
      cg_end(k);
    }
    return AP_OK;
  }
  /* Scratch in floats, the output's elements in its type. */
  cg_work_const(k, (y->numel * (int64_t)ap_dtype_size(y->dtype) + 3) / 4);
  *mask = cg_let(k, "dm", cg_view(k, cg_work(k), cg_ty_of(y->dtype)));
  int i = cg_for_n(k, "i", y->numel);
  cg_st(k, cg_v(k, *mask), cg_v(k, i), cg_ld(k, cg_dy(k, 0), cg_v(k, i)));
  cg_end(k);
  return AP_OK;
}

/* What one update at output offset off (update offset u) sends back. */
static void scatter_grad_at(cg_grad_kernel *gk, int mask, cg_x *off, cg_x *u) {
  cg_kernel *k = gk->k;
  if (gk->want >> 2 & 1)
    cg_grad_put(gk, 2, u, cg_ld(k, cg_dy(k, 0), off));
  if (mask >= 0)
    cg_st(k, cg_v(k, mask), off, cg_int(k, 0));
}

/* Updates outside the output (out-of-range indices) get no gradient. */
static void scatter_grad_zero_updates(cg_grad_kernel *gk) {
  if (gk->want >> 2 & 1)
    cg_grad_zero(gk, 2);
}

static void scatter_grad_end(cg_grad_kernel *gk, int mask) {
  cg_kernel *k = gk->k;
  if (mask < 0)
    return;
  int i = cg_for_n(k, "i", k->out[0].numel);
  cg_grad_put(gk, 0, cg_v(k, i), cg_ld(k, cg_v(k, mask), cg_v(k, i)));
  cg_end(k);
}

static ap_status grad_scatter_elements(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  const cg_operand *ix = &k->in[1], *y = &k->out[0];
  int axis = cg_norm_axis(ap_attr_int(k->n, "axis", 0), y->rank), mask;
  ap_scatter_reduction r;
  if (axis < 0)
    return cg_error(k, AP_ERR_INVALID, "axis is out of range");
  ap_status s = scatter_grad_begin(gk, &r, &mask);
  if (s != AP_OK)
    return s;
  scatter_grad_zero_updates(gk);
  if (ix->numel) {
    int o = cg_mut(k, "o", CG_T_I64, cg_i64(k, 0)), iv[AP_MAX_RANK];
    cg_loops(k, ix->rank, ix->dims, "j", iv);
    int at = cg_gather_index(k, y, axis, o);
    cg_if(k, cg_in_axis(k, at, y->dims[axis]));
    scatter_grad_at(gk, mask, cg_elements_offset(k, y, ix, axis, iv, at), cg_v(k, o));
    cg_end(k);
    cg_set_op(k, o, CG_X_ADD, cg_i64(k, 1));
    cg_loops_end(k, ix->rank);
  }
  scatter_grad_end(gk, mask);
  return AP_OK;
}

static ap_status grad_scatter_nd(cg_grad_kernel *gk) {
  cg_kernel *k = gk->k;
  cg_nd_geom g;
  ap_scatter_reduction r;
  int mask;
  ap_status s = cg_nd_geometry(k, &g);
  if (s != AP_OK || (s = scatter_grad_begin(gk, &r, &mask)) != AP_OK)
    return s;
  scatter_grad_zero_updates(gk);
  if (k->in[2].numel) {
    int t, ok, off = cg_nd_open(k, &g, &t, &ok);
    cg_if(k, cg_ne(k, cg_v(k, ok), cg_i64(k, 0)));
    int e = cg_for_n(k, "e", g.block);
    scatter_grad_at(gk, mask, cg_add(k, cg_v(k, off), cg_v(k, e)),
                    cg_add(k, cg_mul(k, cg_v(k, t), cg_i64(k, g.block)), cg_v(k, e)));
    cg_end(k);
    cg_end(k);
    cg_end(k);
    cg_end(k);
  }
  scatter_grad_end(gk, mask);
  return AP_OK;
}

static ap_status grad_expand(cg_grad_kernel *gk) {
  cg_grad_unbroadcast(gk, 0, NULL, false);
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
    [AP_OP_PAD] = {grad_pad, 0x1, 0, 0},
    [AP_OP_TILE] = {grad_tile, 0x1, 0, 0},
    [AP_OP_TRILU] = {grad_trilu, 0x1, 0, 0},
    [AP_OP_ONE_HOT] = {grad_one_hot, 0x4, 0x1, 0},
    [AP_OP_DEPTH_TO_SPACE] = {grad_depth_space, 0x1, 0, 0},
    [AP_OP_SPACE_TO_DEPTH] = {grad_depth_space, 0x1, 0, 0},
    [AP_OP_RESIZE] = {grad_resize, 0x1, 0, 0},
    [AP_OP_UPSAMPLE] = {grad_resize, 0x1, 0, 0},
    [AP_OP_EXPAND] = {grad_expand, 0x1, 0, 0},
    [AP_OP_GATHER] = {grad_gather, 0x1, 0x2, 0},
    [AP_OP_GATHER_ELEMENTS] = {grad_gather_elements, 0x1, 0x2, 0},
    [AP_OP_GATHER_ND] = {grad_gather_nd, 0x1, 0x2, 0},
    [AP_OP_SCATTER_ELEMENTS] = {grad_scatter_elements, 0x5, 0x2, 0},
    [AP_OP_SCATTER_ND] = {grad_scatter_nd, 0x5, 0x2, 0},
};
